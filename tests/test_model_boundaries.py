"""Where models end and math begins: metrics import no torch and no encoder; one "model unavailable" error."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import subprocess
import sys

import pytest

import geofidelity_bench.metrics as metrics_package
from geofidelity_bench.errors import ModelUnavailableError, offline_hint

METRICS_MODULES = sorted(
    f"{metrics_package.__name__}.{info.name}" for info in pkgutil.iter_modules(metrics_package.__path__)
)


def test_the_metrics_modules_are_found():
    assert {"geofidelity_bench.metrics.mfp", "geofidelity_bench.metrics.image_quality",
            "geofidelity_bench.metrics.hill", "geofidelity_bench.metrics.set_fidelity"} <= set(METRICS_MODULES)


@pytest.mark.parametrize("module", ["geofidelity_bench.metrics", *METRICS_MODULES])
def test_a_metrics_module_imports_neither_torch_nor_an_encoder(module):
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        "heavy = sorted(m for m in sys.modules if m == 'torch' or m.startswith('geofidelity_bench.encoders')); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_hill_module_is_reachable_by_its_path():
    # The old name, metrics/diversity.py, was shadowed by the function metrics.diversity.
    hill = importlib.import_module("geofidelity_bench.metrics.hill")
    assert hill.normalized_hill is metrics_package.normalized_hill
    assert callable(metrics_package.diversity) and not hasattr(metrics_package.diversity, "normalized_hill")


def test_image_quality_doctests_run():
    from geofidelity_bench.metrics import image_quality

    result = doctest.testmod(image_quality, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_mfp_terms_doctest_runs():
    pytest.importorskip("torch")
    from geofidelity_bench.metrics import mfp

    result = doctest.testmod(mfp, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


# -- one error, one hint ---------------------------------------------------------------------------


def test_every_model_family_raises_a_model_unavailable_error():
    from geofidelity_bench.encoders import EncoderUnavailableError
    from geofidelity_bench.geodiv.vqa import VQAUnavailableError
    from geofidelity_bench.segmentation import SegmenterUnavailableError

    for cls in (EncoderUnavailableError, SegmenterUnavailableError, VQAUnavailableError):
        assert issubclass(cls, ModelUnavailableError) and issubclass(cls, RuntimeError)
    pytest.importorskip("torch")
    from geofidelity_bench.encoders.dino_vit_keys import MFPModelUnavailableError

    # Still an EncoderUnavailableError, as before, so `except EncoderUnavailableError` keeps catching it.
    assert issubclass(MFPModelUnavailableError, EncoderUnavailableError)
    assert issubclass(MFPModelUnavailableError, ModelUnavailableError)


def test_each_family_words_its_hint_with_the_one_function():
    from geofidelity_bench.encoders.base import OFFLINE_HINT as ENCODER_HINT
    from geofidelity_bench.geodiv.vqa import OFFLINE_HINT as VQA_HINT

    assert ENCODER_HINT.startswith(offline_hint(flag="--encoder-weights", python_arg="weights="))
    assert "efficientnet-lite0" in ENCODER_HINT
    assert VQA_HINT.startswith("To run offline, pass a local folder saved with save_pretrained()")
    assert VQA_HINT.endswith("(--vqa-model PATH on the command line).")
