"""Precision you can trust (issue 30, section 1), on the CPU:

* a caller's float32-precision settings, new API (``torch.backends.fp32_precision = "tf32"`` and
  friends) or legacy (``allow_tf32``, ``set_float32_matmul_precision``), never break a float32
  forward, are IEEE inside it and are exactly what the caller had after it, also when it raises;
* a caller's ``torch.autocast`` does not reach a float32 forward, so no bfloat16 row is computed
  or cached under a float32 config;
* what is recorded is what ran: the settings read from torch inside the forward, the dtype the MFP
  backbone ran in, the float32 precision of each generated image.

Everything here reads torch's settings through torch's own public attributes (not the library's
helpers), so the checks are independent of the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
if not hasattr(torch.backends.cuda.matmul, "fp32_precision") and not hasattr(torch._C, "_get_fp32_precision_getter"):
    pytest.skip("this torch has no fp32_precision settings (torch < 2.9)", allow_module_level=True)

from geofidelity_bench.encoders import EmbeddingCache, embed_images, get_encoder  # noqa: E402
from geofidelity_bench.encoders.base import EncoderOptionError  # noqa: E402
from geofidelity_bench.encoders.devices import exact_float32  # noqa: E402

from conftest import jpeg_bytes  # noqa: E402

B = torch.backends


# -- torch's settings, read through its public attributes --------------------------------------------


def _read(get):
    try:
        return get()
    except RuntimeError as err:  # torch refuses to answer for a mixed state: that is part of the state
        return "raises" if "mix" in str(err) or "legacy" in str(err) else f"error: {err}"


def settings() -> dict[str, object]:
    """Every float32-precision setting torch reports, new and legacy API."""
    return {
        "fp32_precision": B.fp32_precision,
        "cuda.matmul": B.cuda.matmul.fp32_precision,
        "cudnn": B.cudnn.fp32_precision,
        "cudnn.conv": B.cudnn.conv.fp32_precision,
        "cudnn.rnn": B.cudnn.rnn.fp32_precision,
        "mkldnn.matmul": B.mkldnn.matmul.fp32_precision,
        "mkldnn.conv": B.mkldnn.conv.fp32_precision,
        "mkldnn.rnn": B.mkldnn.rnn.fp32_precision,
        "legacy cuda.matmul.allow_tf32": _read(lambda: B.cuda.matmul.allow_tf32),
        "legacy cudnn.allow_tf32": _read(lambda: B.cudnn.allow_tf32),
        "legacy float32_matmul_precision": _read(torch.get_float32_matmul_precision),
    }


def cpu_settings() -> dict[str, str]:
    """What governs a float32 forward on the CPU (oneDNN)."""
    return {f"mkldnn.{op}": getattr(B.mkldnn, op).fp32_precision for op in ("matmul", "conv", "rnn")}


DEFAULTS = settings()


def _set_new(**values):
    for path, value in values.items():
        obj = B
        for part in path.split("."):
            obj = getattr(obj, part)
        obj.fp32_precision = value


#: What a caller (a training script, a notebook) may have set before calling the library.
CALLER_SETTINGS = {
    "new: torch.backends.fp32_precision = tf32": lambda: setattr(B, "fp32_precision", "tf32"),
    "new: cuda.matmul tf32, cudnn.conv tf32, mkldnn.matmul bf16": lambda: _set_new(
        **{"cuda.matmul": "tf32", "cudnn.conv": "tf32", "mkldnn.matmul": "bf16"}),
    "new: mkldnn tf32 (all ops)": lambda: _set_new(
        **{"mkldnn.matmul": "tf32", "mkldnn.conv": "tf32", "mkldnn.rnn": "tf32"}),
    "legacy: set_float32_matmul_precision(medium)": lambda: torch.set_float32_matmul_precision("medium"),
    "legacy: allow_tf32 = True (cuBLAS and cuDNN)": lambda: (setattr(B.cuda.matmul, "allow_tf32", True),
                                                            setattr(B.cudnn, "allow_tf32", True)),
}


@pytest.fixture(autouse=True)
def _torch_settings_back():
    """Test hygiene: torch's settings as they were before each test (a best effort, through setters)."""
    before = settings()
    yield
    torch.set_float32_matmul_precision("highest")
    B.cudnn.allow_tf32 = True
    B.fp32_precision = "none"
    for attr in ("cuda.matmul", "cudnn.conv", "cudnn.rnn", "mkldnn.matmul", "mkldnn.conv", "mkldnn.rnn"):
        _set_new(**{attr: before[attr]})
    if before["legacy float32_matmul_precision"] in ("high", "medium", "highest"):
        torch.set_float32_matmul_precision(before["legacy float32_matmul_precision"])
        for attr in ("cuda.matmul", "mkldnn.matmul"):
            _set_new(**{attr: before[attr]})


# -- the components -----------------------------------------------------------------------------------


TINY_VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
                patch_size=8)


@pytest.fixture(scope="module")
def effnet():
    return get_encoder("efficientnet-lite0", device="cpu")


@pytest.fixture(scope="module")
def tiny_dinov2(tmp_path_factory):
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("prec-dinov2")
    Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                             image_size=224, patch_size=14)).eval().save_pretrained(path)
    return get_encoder("dinov2-base", weights=path, device="cpu")


@pytest.fixture(scope="module")
def tiny_clip(tiny_clip_dir):
    return get_encoder("clip-vit-b32", weights=tiny_clip_dir, device="cpu")


@pytest.fixture(scope="module")
def m2f(tiny_m2f_dir):
    from geofidelity_bench.segmentation import get_segmenter

    return get_segmenter("mask2former-vistas", weights=tiny_m2f_dir, device="cpu", input_size=64, max_input_size=128)


@pytest.fixture(scope="module")
def tiny_vit_dir(tmp_path_factory):
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("prec-vit")
    ViTModel(ViTConfig(**TINY_VIT), add_pooling_layer=False).save_pretrained(path)
    return path


def _extractor(tiny_vit_dir):
    from geofidelity_bench.encoders.dino_vit_keys import DinoViTFeatureExtractor

    return DinoViTFeatureExtractor(tiny_vit_dir, image_size=32, device="cpu")


@pytest.fixture(scope="module")
def mfp_loss(tiny_vit_dir):
    from geofidelity_bench.metrics.mfp import MapFeaturePerceptionLoss

    return MapFeaturePerceptionLoss(_extractor(tiny_vit_dir))


def _photo(seed: int, size=(64, 48)) -> Image.Image:
    import io

    return Image.open(io.BytesIO(jpeg_bytes(seed, size))).convert("RGB")


def _images(seed: int, n: int = 2, size: int = 32) -> torch.Tensor:
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


#: name -> (fixture, the torch module whose forward is watched, a forward through the library's API)
COMPONENTS = {
    "efficientnet-lite0": ("effnet", lambda c: c.model, lambda c: c.embed([_photo(0)], progress=False)),
    "dinov2 (tiny)": ("tiny_dinov2", lambda c: c.model, lambda c: c.embed([_photo(1)], progress=False)),
    "clip images (tiny)": ("tiny_clip", lambda c: c.model.vision_model, lambda c: c.embed([_photo(2)], progress=False)),
    "clip texts (tiny)": ("tiny_clip", lambda c: c.model.text_model, lambda c: c.embed_text(["a street"])),
    "mask2former (tiny)": ("m2f", lambda c: c.model, lambda c: c.segment([_photo(3)], progress=False)),
    "mfp loss (tiny ViT)": ("mfp_loss", lambda c: c.extractor.model,
                            lambda c: c(_images(4).requires_grad_(), _images(5)).backward()),
}


class Watch:
    """A forward pre-hook on a torch module: what torch had in force when the model ran."""

    def __init__(self, module, fail: bool = False) -> None:
        self.seen: list[dict[str, object]] = []
        self.fail = fail
        self._handle = module.register_forward_pre_hook(self._hook)

    def _hook(self, module, args):
        self.seen.append({**cpu_settings(), "autocast": torch.is_autocast_enabled("cpu")})
        if self.fail:
            raise KeyError("a forward that fails")

    def close(self) -> None:
        self._handle.remove()


#: every caller setting for the offline encoder and the MFP loss; the two that broke most for the others
_KEY_CALLERS = ("new: torch.backends.fp32_precision = tf32", "legacy: set_float32_matmul_precision(medium)")
CASES = [(component, caller) for component in COMPONENTS for caller in CALLER_SETTINGS
         if component in ("efficientnet-lite0", "mfp loss (tiny ViT)") or caller in _KEY_CALLERS]


@pytest.mark.parametrize("component, caller", CASES)
def test_a_float32_forward_works_under_any_caller_setting_and_restores_it_exactly(request, component, caller):
    fixture, module_of, forward = COMPONENTS[component]
    target = request.getfixturevalue(fixture)
    CALLER_SETTINGS[caller]()
    before = settings()
    assert before != DEFAULTS  # the caller's setting took

    watch = Watch(module_of(target))
    try:
        forward(target)  # before: "mix of the legacy and new APIs" for every new-API setting
    finally:
        watch.close()
    assert watch.seen, "the model did not run"
    for inside in watch.seen:  # IEEE float32 on the CPU: nothing reduced (oneDNN tf32/bf16 off)
        assert all(v in ("ieee", "none") for k, v in inside.items() if k.startswith("mkldnn")), inside
    assert settings() == before

    failing = Watch(module_of(target), fail=True)
    try:
        with pytest.raises(KeyError, match="a forward that fails"):
            forward(target)
    finally:
        failing.close()
    assert settings() == before


@pytest.mark.parametrize("caller", list(CALLER_SETTINGS))
def test_the_cuda_path_turns_cublas_and_cudnn_tf32_off_without_a_mixed_state(caller):
    """What a float32 forward on a GPU does to torch's settings, checked on the CPU (setting them
    needs no GPU): cuBLAS/cuDNN exact inside; cuBLAS's legacy getter, which picks the cuBLAS math
    mode, answers (no "mix of the legacy and new APIs") and says no TF32; the caller's settings back after."""
    CALLER_SETTINGS[caller]()
    before = settings()
    with exact_float32(device_type="cuda") as seen:
        inside = settings()
    # "none" (a setting already exact, left alone) or "ieee": nothing reduced
    assert seen == {"cuda.matmul": inside["cuda.matmul"], "cuda.conv": inside["cudnn.conv"],
                    "cuda.rnn": inside["cudnn.rnn"]}
    assert set(seen.values()) <= {"ieee", "none"}
    assert inside["legacy cuda.matmul.allow_tf32"] is False
    assert settings() == before
    with pytest.raises(KeyError), exact_float32(device_type="cuda"):
        raise KeyError("x")
    assert settings() == before


def test_legacy_medium_matmul_precision_is_restored_as_medium(effnet):
    """Before: the legacy flag was turned off and "restored" as allow_tf32 = True, which is "high"."""
    torch.set_float32_matmul_precision("medium")
    with exact_float32(device_type="cuda"):
        assert torch.get_float32_matmul_precision() == "highest"
    assert torch.get_float32_matmul_precision() == "medium"
    effnet.embed([_photo(0)], progress=False)
    assert torch.get_float32_matmul_precision() == "medium" and B.mkldnn.matmul.fp32_precision == "bf16"


# -- autocast ---------------------------------------------------------------------------------------------


def _photo_files(folder: Path, seeds) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for seed in seeds:
        path = folder / f"p{seed}.jpg"
        path.write_bytes(jpeg_bytes(seed, (64, 48)))
        paths.append(path)
    return paths


def test_a_float32_embedding_inside_autocast_is_the_plain_one_and_so_is_the_cached_row(effnet, tmp_path):
    from geofidelity_bench.images import content_sha256

    photos = _photo_files(tmp_path / "photos", (10, 11))
    plain = effnet.embed(photos, progress=False)  # no autocast, no cache
    cache = EmbeddingCache(tmp_path / "cache")
    watch = Watch(effnet.model)
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            inside = embed_images(effnet, photos, cache=cache, progress=False)
    finally:
        watch.close()
    assert watch.seen and not any(w["autocast"] for w in watch.seen)
    np.testing.assert_allclose(inside, plain, rtol=0, atol=1e-6)  # before: off by ~2e-2 relative
    cached = EmbeddingCache(tmp_path / "cache").get(effnet, [content_sha256(p) for p in photos])
    np.testing.assert_allclose(np.stack([cached[content_sha256(p)] for p in photos]), plain, rtol=0, atol=1e-6)
    # a later plain run is served the plain rows
    again = embed_images(effnet, photos, cache=EmbeddingCache(tmp_path / "cache"), progress=False)
    np.testing.assert_allclose(again, plain, rtol=0, atol=1e-6)


def test_segmenter_shares_inside_autocast_are_the_plain_ones_and_so_is_the_cache(m2f, tmp_path):
    from geofidelity_bench.images import content_sha256
    from geofidelity_bench.segmentation import segment_images

    photos = _photo_files(tmp_path / "photos", (20, 21))
    outputs: list[torch.Tensor] = []
    hook = m2f.model.register_forward_hook(lambda module, args, out: outputs.append(out.class_queries_logits))
    try:
        plain = m2f.segment([Image.open(p).convert("RGB") for p in photos], progress=False)
        cache = EmbeddingCache(tmp_path / "cache")
        watch = Watch(m2f.model)
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                inside = segment_images(m2f, photos, cache=cache, progress=False)
        finally:
            watch.close()
    finally:
        hook.remove()
    assert watch.seen and not any(w["autocast"] for w in watch.seen)
    assert all(o.dtype == torch.float32 for o in outputs)  # before: bfloat16 logits under the caller's autocast
    np.testing.assert_allclose(outputs[-1], outputs[0], rtol=0, atol=1e-6)  # the same logits as the plain run
    np.testing.assert_array_equal(inside, plain)
    cached = EmbeddingCache(tmp_path / "cache").get(m2f, [content_sha256(p) for p in photos])
    np.testing.assert_array_equal(np.stack([cached[content_sha256(p)] for p in photos]), plain)


def test_mfp_features_and_loss_inside_autocast_are_the_plain_ones(mfp_loss):
    ext = mfp_loss.extractor
    x, y = _images(30), _images(31)
    plain = ext.extract(x)
    plain_loss = mfp_loss(x, y)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = ext.extract(x)
        inside_loss = mfp_loss(x, y)
    for a, b in zip(inside, plain):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)  # before: the ViT ran in bfloat16
    torch.testing.assert_close(inside_loss, plain_loss, rtol=0, atol=1e-6)


def test_a_bfloat16_model_is_not_changed_by_a_caller_autocast_of_another_dtype(tiny_vit_dir):
    ext = _extractor(tiny_vit_dir).to(torch.bfloat16)
    x = _images(40)
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            probe = torch.ones(2, 2) @ torch.ones(2, 2)
    except RuntimeError as err:  # a torch without float16 autocast on the CPU
        pytest.skip(f"no CPU float16 autocast here: {err}")
    assert probe.dtype == torch.float16  # the caller's autocast is real
    plain = ext(ext.prepare(x))
    with torch.autocast("cpu", dtype=torch.float16):
        inside = ext(ext.prepare(x))
    for a, b in zip(inside, plain):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


# -- what is recorded is what ran ---------------------------------------------------------------


def test_the_recorded_float32_precision_is_what_torch_had_inside_the_forward(tiny_dinov2):
    enc = get_encoder("efficientnet-lite0", device="cpu")
    assert enc.config["float32_precision"] is None  # no forward yet: nothing is claimed
    _set_new(**{"mkldnn.matmul": "bf16", "mkldnn.conv": "tf32"})
    watch = Watch(enc.model)
    try:
        enc.embed([_photo(50)], progress=False)
    finally:
        watch.close()
    seen = {k: v for k, v in watch.seen[-1].items() if k != "autocast"}
    assert enc.config["float32_precision"] == seen == {"mkldnn.matmul": "ieee", "mkldnn.conv": "ieee",
                                                       "mkldnn.rnn": "none"}
    assert enc.config_hash == get_encoder("efficientnet-lite0", device="cpu").config_hash  # not in the key


def test_the_mfp_extractor_records_the_dtype_it_ran_in(tiny_vit_dir, tmp_path):
    from geofidelity_bench.metrics.mfp import MapFeaturePerceptionLoss
    from geofidelity_bench.mfp import mfp_scores

    loss = MapFeaturePerceptionLoss(_extractor(tiny_vit_dir))
    f32_hash = loss.extractor.config_hash
    loss(_images(60), _images(61))
    assert loss.extractor.config["dtype"] == "float32"
    assert loss.extractor.config["float32_precision"]["mkldnn.matmul"] in ("ieee", "none")

    loss.to(torch.bfloat16)
    loss(_images(60), _images(61))
    cfg = loss.extractor.config
    assert cfg["dtype"] == "bfloat16"  # before: "float32" whatever ran
    assert loss.extractor.config_hash != f32_hash

    names = []
    for i in range(2):
        for side in ("gen", "tgt"):
            (tmp_path / side).mkdir(exist_ok=True)
            Image.fromarray((np.random.default_rng(i).random((32, 32, 3)) * 255).astype(np.uint8)).save(
                tmp_path / side / f"{i}.png")
        names.append(f"{i}.png")
    df = mfp_scores([tmp_path / "gen" / n for n in names], [tmp_path / "tgt" / n for n in names],
                    extractor=loss.extractor, progress=False)
    assert df.attrs["config"]["dtype"] == "bfloat16"


def test_an_encoder_whose_model_was_converted_is_refused(tmp_path):
    enc = get_encoder("efficientnet-lite0", device="cpu")
    enc.model.to(torch.bfloat16)
    with pytest.raises(EncoderOptionError, match="parameters are bfloat16 but its config"):
        enc.embed([_photo(70)], progress=False)


def test_a_segmenter_whose_model_was_converted_is_refused(tiny_m2f_dir):
    from geofidelity_bench.segmentation import get_segmenter

    seg = get_segmenter("mask2former-vistas", weights=tiny_m2f_dir, device="cpu", input_size=64, max_input_size=128)
    seg.model.to(torch.bfloat16)
    with pytest.raises(EncoderOptionError, match="parameters are bfloat16"):
        seg.segment([_photo(71)], progress=False)


def test_generation_records_the_float32_precision_it_ran_with_and_leaves_it_alone(tmp_path):
    from geofidelity_bench import load_benchmark
    from geofidelity_bench.generation.manifest import load_manifest
    from geofidelity_bench.generation.runner import run_generation

    _set_new(**{"mkldnn.matmul": "bf16"})  # the caller's choice; generation keeps it (docs/benchmark.md)
    before = settings()
    seen: list[dict[str, str]] = []
    bench = load_benchmark("demo")
    from geofidelity_bench.generation import backends

    original = backends.load_generator

    def load_and_watch(*args, **kwargs):
        gen = original(*args, **kwargs)
        gen.pipe.unet.register_forward_pre_hook(lambda module, a: seen.append(cpu_settings()))
        return gen

    backends_load = pytest.MonkeyPatch()
    import geofidelity_bench.generation.runner as runner

    backends_load.setattr(runner, "load_generator", load_and_watch)
    try:
        run_generation(bench, ["tiny"], ["L0"], tmp_path, block_ids=bench.block_ids[:1], images_per_block=1,
                       progress=False, log=lambda msg: None)
    finally:
        backends_load.undo()
    assert settings() == before and seen
    rows = load_manifest(tmp_path).to_dict("records")
    assert rows and all(json.loads(r["float32_precision"]) == seen[0] for r in rows)
    assert seen[0]["mkldnn.matmul"] == "bf16"
