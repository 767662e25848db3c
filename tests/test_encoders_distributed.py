"""embed_distributed: one process equals embed_images; a real two-process ``torchrun`` (CPU, gloo)
resuming a half-filled cache equals the one-process result and every rank gets the full array.
(Two processes under ``accelerate launch``: tests/test_embed_cli.py and tests/test_distributed_runs.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest

pytest.importorskip("accelerate")

from geofidelity_bench.encoders import EmbeddingCache, embed_distributed, embed_images, get_encoder  # noqa: E402
from geofidelity_bench.images import content_sha256  # noqa: E402
from multiprocess_helpers import free_port  # noqa: E402

HERE = Path(__file__).parent
REPO = HERE.parent
PHOTOS = sorted((HERE / "data" / "photos").glob("lund_*.jpg"))


@pytest.fixture(scope="module")
def tiny_dinov2_dir(tmp_path_factory) -> Path:
    import torch
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(0)
    model = Dinov2Model(
        Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=224, patch_size=14)
    ).eval()
    path = tmp_path_factory.mktemp("tiny-dinov2-dist")
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> list[Path]:
    """Six distinct images; with the first three cached, three are left (odd, so the split across two
    processes needs padding)."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("extra")
    extra = [folder / "flipped.png", folder / "flipped-2.png"]
    Image.open(PHOTOS[0]).convert("RGB").transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(extra[0])
    Image.open(PHOTOS[1]).convert("RGB").transpose(Image.Transpose.FLIP_TOP_BOTTOM).save(extra[1])
    assert len(PHOTOS) >= 4
    return [*PHOTOS[:4], *extra]


def _run_two_processes(launcher, weights, images, cache_dir, out, tmp_path) -> None:
    """tests/scripts/embed_2proc.py under ``python -m <launcher...>``: two CPU (gloo) processes."""
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf-home"),  # no user accelerate config leaks in
        OMP_NUM_THREADS="1",
        CUDA_VISIBLE_DEVICES="",  # two CPU (gloo) processes, even on a one-GPU machine
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    )
    cmd = [
        sys.executable, "-m", *launcher, str(HERE / "scripts" / "embed_2proc.py"),
        "--weights", str(weights), "--cache", str(cache_dir), "--out", str(out), "--batch-size", "2",
        *map(str, images),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture
def fresh_partial_state():
    """Leaves accelerate's process-wide state as this test found it."""
    from accelerate import PartialState

    was_initialized = bool(PartialState._shared_state)
    yield
    if not was_initialized:
        PartialState._reset_state()


def test_one_process_equals_embed_images(tiny_dinov2_dir, images, tmp_path, monkeypatch, fresh_partial_state):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    enc = get_encoder("dinov2-base", weights=tiny_dinov2_dir, device="cpu")
    expected = embed_images(enc, images, progress=False)
    got = embed_distributed(enc, images, cache=EmbeddingCache(tmp_path), batch_size=2)
    np.testing.assert_array_equal(got, expected)
    assert embed_distributed(enc, [], batch_size=2).shape == (0, enc.dim)


@pytest.mark.timeout(300)
def test_resumed_two_process_run_splits_what_is_not_cached(tiny_dinov2_dir, images, tmp_path, monkeypatch):
    """Three of six images cached: the old contiguous split gave process 0 only cached images (it
    computed nothing and waited); the three missing ones must be shared (padded to an even split),
    every rank gets the full array, and the shared cache then serves everything."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    enc = get_encoder("dinov2-base", weights=tiny_dinov2_dir, device="cpu")
    expected = embed_images(enc, images, progress=False)
    out, cache_dir = tmp_path / "out", tmp_path / "cache"
    out.mkdir()
    embed_images(enc, images[:3], cache=EmbeddingCache(cache_dir), progress=False)
    launcher = ["torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port())]
    _run_two_processes(launcher, tiny_dinov2_dir, images, cache_dir, out, tmp_path)
    markers = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [m["process_index"] for m in markers] == [0, 1]
    assert all(m["num_processes"] == 2 for m in markers)
    assert markers[0]["pid"] != markers[1]["pid"]
    assert all(m["config_hash"] == enc.config_hash for m in markers)
    for r in range(2):
        got = np.load(out / f"emb_rank{r}.npy")
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, atol=1e-5)
    shard_pids = [int(p.name.split("-")[2]) for p in (cache_dir / enc.config_hash).glob("shard-*.safetensors")]
    new = [pid for pid in shard_pids if pid != os.getpid()]
    assert sorted(new) == sorted(m["pid"] for m in markers), "each process computes some of the missing images"
    cached = EmbeddingCache(cache_dir).get(enc, [content_sha256(p) for p in images])
    assert len(cached) == len(images)
