"""One consistent reason when a model cannot load offline (issue 40): never "couldn't connect to
huggingface.co" next to "HF_HUB_OFFLINE is set, so the Hub was not contacted"."""

from __future__ import annotations

import pytest

from geofidelity_bench.errors import load_failure_reason
from geofidelity_bench.segmentation import get_segmenter


def test_an_offline_segmenter_load_says_one_thing(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))  # nothing cached
    from geofidelity_bench.errors import ModelUnavailableError

    with pytest.raises(ModelUnavailableError) as info:
        get_segmenter("mask2former-vistas", device="cpu").shares_of([])
    text = str(info.value)
    assert "couldn't connect" not in text.lower() and "connection" not in text.lower()
    assert "HF_HUB_OFFLINE is set and the local Hugging Face cache holds no copy" in text
    assert text.count("HF_HUB_OFFLINE") == 1 or "HF_HUB_OFFLINE=1" in text


def test_other_errors_keep_their_own_text(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    err = OSError("model.safetensors is truncated (12 of 4096 bytes)")
    assert load_failure_reason(err) == "model.safetensors is truncated (12 of 4096 bytes)"
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # online: the loader's own words are the truth
    connect = OSError("We couldn't connect to 'https://huggingface.co' to load the files")
    assert "couldn't connect" in load_failure_reason(connect)
