"""IEEE float32 through the backward, in the MFP terms, and for forwards that run at once (issue 41,
items 1-3), on the CPU: oneDNN's bf16 float32 mode (``torch.backends.mkldnn.*.fp32_precision =
"bf16"``, which this CPU's AMX/AVX512-BF16 really uses) stands for a GPU's TF32, and two threads
stand for the app scoring two requests at once.

* the gradient of the MFP extractor's features is computed in IEEE float32 even though the caller's
  bf16 is back in force when it calls ``backward()`` (before: only the forward was exact);
* ``self_similarity``/``pair_terms`` (the k·kᵀ products of the MFP terms, also on the scoring path)
  are IEEE float32, forward and backward, under a caller's bf16 (before: autocast off only);
* two forwards that overlap each run exact from start to end and record what ran, whichever leaves
  first (before: the first to leave put the caller's bf16 back under the other, which had recorded
  "ieee").

torch's settings are read through its public attributes here, not through the library's helpers.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
if not hasattr(torch.backends.mkldnn, "matmul") or not hasattr(torch.backends.mkldnn.matmul, "fp32_precision"):
    pytest.skip("this torch has no fp32_precision settings (torch < 2.9)", allow_module_level=True)

B = torch.backends
REDUCED = ("bf16", "tf32")
WAIT_S = 30


def cpu_settings() -> dict[str, str]:
    return {f"mkldnn.{op}": getattr(B.mkldnn, op).fp32_precision for op in ("matmul", "conv", "rnn")}


def exact(settings: dict[str, str]) -> bool:
    return not any(v in REDUCED for v in settings.values())


@pytest.fixture(autouse=True)
def _settings_back():
    before = {**cpu_settings(), "legacy": torch.get_float32_matmul_precision(),
              "cuda.matmul": B.cuda.matmul.fp32_precision, "cudnn.conv": B.cudnn.conv.fp32_precision}
    yield
    torch.set_float32_matmul_precision(before["legacy"])
    for op in ("matmul", "conv", "rnn"):
        getattr(B.mkldnn, op).fp32_precision = before[f"mkldnn.{op}"]
    B.cuda.matmul.fp32_precision = before["cuda.matmul"]
    B.cudnn.conv.fp32_precision = before["cudnn.conv"]


def caller_bf16() -> None:
    """What a caller may have turned on: oneDNN bf16 for float32 matmuls and convolutions."""
    B.mkldnn.matmul.fp32_precision = "bf16"
    B.mkldnn.conv.fp32_precision = "bf16"


def _bf16_engages() -> bool:
    a = torch.randn(128, 128, generator=torch.Generator().manual_seed(0))
    ref = a.double() @ a.double()
    saved = B.mkldnn.matmul.fp32_precision
    try:
        B.mkldnn.matmul.fp32_precision = "bf16"
        err = float(((a @ a).double() - ref).abs().max())
    finally:
        B.mkldnn.matmul.fp32_precision = saved
    return err > 1e-2


needs_bf16 = pytest.mark.skipif(not _bf16_engages(), reason="oneDNN has no bf16 float32 mode on this CPU")


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30))


# -- the components ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def extractor(tmp_path_factory):
    from transformers import ViTConfig, ViTModel

    from geofidelity_bench.encoders.dino_vit_keys import DinoViTFeatureExtractor

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("race-vit")
    ViTModel(ViTConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                       image_size=32, patch_size=8), add_pooling_layer=False).save_pretrained(path)
    return DinoViTFeatureExtractor(path, image_size=32, device="cpu")


def images(seed: int, n: int = 2) -> torch.Tensor:
    return torch.rand(n, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def feature_gradient(ext, x: torch.Tensor, seen: list[dict[str, str]] | None = None) -> torch.Tensor:
    """The gradient, with respect to the image, of a fixed linear function of the extractor's
    features (no MFP term: only the backbone's backward); ``seen`` gets the settings in force when
    the backward passes the last layer's key projection."""
    x = x.clone().requires_grad_(True)

    def watch(module, args, output):
        if seen is not None and output.requires_grad:
            output.register_hook(lambda grad: seen.append(cpu_settings()))

    handle = ext.key_projection.register_forward_hook(watch)
    try:
        feats = ext.extract(x)
    finally:
        handle.remove()
    g = torch.Generator().manual_seed(1)
    weights = (torch.randn(feats.cls.shape, generator=g), torch.randn(feats.keys.shape, generator=g))
    ((feats.cls * weights[0]).sum() + (feats.keys * weights[1]).sum()).backward()
    return x.grad


# -- 1. the backward of the extractor ------------------------------------------------------------------


@needs_bf16
def test_the_mfp_extractor_backward_runs_in_ieee_float32_under_a_callers_bf16(extractor):
    plain = feature_gradient(extractor, images(0))
    caller_bf16()
    seen: list[dict[str, str]] = []
    under = feature_gradient(extractor, images(0), seen)
    assert cpu_settings()["mkldnn.matmul"] == "bf16"  # the caller's setting, back after
    assert seen, "the backward did not pass the key projection"
    assert all(exact(s) for s in seen), seen  # before: the caller's bf16 in the backward
    assert rel_err(under, plain) < 1e-5  # before: ~1e-2 (bf16 matmuls in the backward)
    recorded = extractor.config["float32_precision"]
    assert exact(recorded) and recorded == seen[-1]


@needs_bf16
def test_the_mfp_loss_gradient_is_the_float32_one_under_a_callers_bf16(extractor):
    from geofidelity_bench.metrics.mfp import MapFeaturePerceptionLoss

    loss_fn = MapFeaturePerceptionLoss(extractor)

    def grad() -> torch.Tensor:
        x = images(2).requires_grad_(True)
        loss_fn(x, images(3)).backward()
        return x.grad

    plain = grad()
    caller_bf16()
    assert rel_err(grad(), plain) < 1e-5  # before: ~1e-2


def test_a_retained_graph_differentiates_twice_and_the_weights_get_gradients_when_unfrozen(extractor):
    x = images(4).requires_grad_(True)
    feats = extractor.extract(x)
    total = feats.keys.square().sum() + feats.cls.sum()
    total.backward(retain_graph=True)
    first = x.grad.clone()
    x.grad = None
    total.backward()  # the second backward recomputes the forward inside the exact context
    torch.testing.assert_close(x.grad, first, rtol=1e-5, atol=1e-6)

    key = extractor.key_projection.weight
    key.requires_grad_(True)
    try:
        extractor.extract(images(5)).keys.sum().backward()
        assert key.grad is not None and float(key.grad.abs().sum()) > 0
    finally:
        key.requires_grad_(False)
        key.grad = None


# -- 2. the MFP terms ----------------------------------------------------------------------------------------


def close_pair(n: int = 2, tokens: int = 50, dim: int = 64):
    from geofidelity_bench.metrics.mfp import MFPFeatures

    g = torch.Generator().manual_seed(7)
    keys = torch.randn(n, tokens, dim, generator=g)
    cls = torch.randn(n, dim, generator=g)
    near = keys + 1e-2 * torch.randn(keys.shape, generator=g)
    return MFPFeatures(cls, near), MFPFeatures(cls + 1e-2, keys)


@needs_bf16
def test_mfp_terms_are_ieee_float32_under_a_callers_bf16():
    from geofidelity_bench.metrics.mfp import pair_terms, self_similarity

    gen, tgt = close_pair()
    plain = pair_terms(gen, tgt)
    plain_sim = self_similarity(gen.keys)
    caller_bf16()
    under = pair_terms(gen, tgt)
    for name, value in under.items():  # before: spatial_mse moved by ~1e-1 relative
        assert rel_err(value, plain[name]) < 1e-5, name
    assert rel_err(self_similarity(gen.keys), plain_sim) < 1e-6
    assert cpu_settings()["mkldnn.matmul"] == "bf16"


@needs_bf16
def test_the_gradient_of_the_mfp_terms_is_ieee_float32_under_a_callers_bf16():
    from geofidelity_bench.metrics.mfp import MFPFeatures, pair_terms

    gen, tgt = close_pair()

    def grad() -> torch.Tensor:
        keys = gen.keys.clone().requires_grad_(True)
        pair_terms(MFPFeatures(gen.cls, keys), tgt)["spatial_mse"].sum().backward()
        return keys.grad

    plain = grad()
    keys64 = gen.keys.double().requires_grad_(True)
    k = torch.nn.functional.normalize(keys64, dim=-1)
    t = torch.nn.functional.normalize(tgt.keys.double(), dim=-1)
    ((k @ k.transpose(-1, -2) - t @ t.transpose(-1, -2)) ** 2).flatten(1).mean(1).sum().backward()
    assert rel_err(plain, keys64.grad) < 1e-4
    caller_bf16()
    assert rel_err(grad(), plain) < 1e-5  # before: ~1e-1 (bf16 matmuls in the backward)


@needs_bf16
def test_mfp_scores_are_the_same_under_a_callers_bf16(extractor, tmp_path):
    from PIL import Image

    from geofidelity_bench.mfp import mfp_scores

    rng = np.random.default_rng(0)
    for side in ("gen", "tgt"):
        (tmp_path / side).mkdir()
    base = rng.random((32, 32, 3))
    for i in range(2):
        Image.fromarray((base * 255).astype(np.uint8)).save(tmp_path / "tgt" / f"{i}.png")
        near = np.clip(base + 0.02 * rng.standard_normal(base.shape), 0, 1)
        Image.fromarray((near * 255).astype(np.uint8)).save(tmp_path / "gen" / f"{i}.png")
    gens = [tmp_path / "gen" / f"{i}.png" for i in range(2)]
    tgts = [tmp_path / "tgt" / f"{i}.png" for i in range(2)]
    plain = mfp_scores(gens, tgts, extractor=extractor, progress=False)
    caller_bf16()
    under = mfp_scores(gens, tgts, extractor=extractor, progress=False)
    for col in ("global_score", "spatial_distance", "spatial_mse"):
        np.testing.assert_allclose(under[col].to_numpy(), plain[col].to_numpy(), rtol=1e-5, atol=1e-9)


# -- 3. forwards that run at once ------------------------------------------------------------------------------


class Overlap:
    """Two forwards of one component on two threads, ``first`` and ``second``, that overlap so that
    ``first`` leaves while ``second`` is inside its model: the second pauses at the start of its
    model's forward until the first has returned, then runs. Each thread's settings are read at the
    start of the model and again when the last layer's key projection runs (mid-forward)."""

    def __init__(self, ext) -> None:
        self.ext = ext
        self.first_inside, self.second_inside, self.first_done = (threading.Event() for _ in range(3))
        self.seen: dict[str, list[dict[str, str]]] = {"first": [], "second": []}
        self.out: dict[str, object] = {}
        self.errors: list[BaseException] = []

    def _start(self, module, args):
        name = threading.current_thread().name
        self.seen[name].append(cpu_settings())
        if name == "first":
            self.first_inside.set()
            assert self.second_inside.wait(WAIT_S), "the second forward never started"
        else:
            self.second_inside.set()
            assert self.first_done.wait(WAIT_S), "the first forward never ended"

    def _middle(self, module, args, output):
        self.seen[threading.current_thread().name].append(cpu_settings())

    def _run(self, x: torch.Tensor) -> None:
        name = threading.current_thread().name
        try:
            with torch.no_grad():
                self.out[name] = self.ext.extract(x)
        except BaseException as err:  # noqa: BLE001 - reported by the test
            self.errors.append(err)
        finally:
            if name == "first":
                self.first_done.set()

    def run(self, x1: torch.Tensor, x2: torch.Tensor) -> None:
        handles = [self.ext.model.register_forward_pre_hook(self._start),
                   self.ext.key_projection.register_forward_hook(self._middle)]
        try:
            first = threading.Thread(target=self._run, args=(x1,), name="first")
            second = threading.Thread(target=self._run, args=(x2,), name="second")
            first.start()
            assert self.first_inside.wait(WAIT_S)
            second.start()
            first.join(WAIT_S)
            second.join(WAIT_S)
        finally:
            for h in handles:
                h.remove()
        assert not first.is_alive() and not second.is_alive(), "a forward hung"
        if self.errors:
            raise self.errors[0]


@needs_bf16
def test_two_overlapping_forwards_each_run_and_record_ieee_float32(extractor):
    x1, x2 = images(10), images(11)
    with torch.no_grad():
        plain = extractor.extract(x2)
    caller_bf16()
    overlap = Overlap(extractor)
    overlap.run(x1, x2)
    assert len(overlap.seen["second"]) == 2
    # what the second forward had in force at its start and in the middle, after the first had left
    for name in ("first", "second"):
        assert all(exact(s) for s in overlap.seen[name]), (name, overlap.seen[name])  # before: bf16 mid-second
    recorded = extractor.config["float32_precision"]
    assert exact(recorded) and recorded == overlap.seen["second"][-1]
    for a, b in zip(overlap.out["second"], plain):  # before: ~1e-2 off (the second ran in bf16)
        assert rel_err(a, b) < 1e-6
    assert cpu_settings()["mkldnn.matmul"] == "bf16" and cpu_settings()["mkldnn.conv"] == "bf16"  # the caller's, back


@needs_bf16
def test_a_cuda_forward_that_leaves_does_not_restore_bf16_under_a_cpu_forward(extractor):
    """The legacy matmul precision a CUDA forward puts back also writes oneDNN's matmul setting: a CPU
    forward still running must not see it (emulated: the CUDA forward's settings need no GPU)."""
    from geofidelity_bench.encoders.devices import exact_float32

    torch.set_float32_matmul_precision("medium")  # legacy: cuBLAS TF32 and oneDNN bf16 matmuls
    assert B.mkldnn.matmul.fp32_precision == "bf16"
    x = images(12)
    with torch.no_grad():
        saved = B.mkldnn.matmul.fp32_precision
        B.mkldnn.matmul.fp32_precision = "none"
        plain = extractor.extract(x)
        B.mkldnn.matmul.fp32_precision = saved

    cuda_inside, cuda_done = threading.Event(), threading.Event()
    seen: list[dict[str, str]] = []
    out: dict[str, object] = {}

    def cuda_forward():
        with exact_float32(device_type="cuda"):
            cuda_inside.set()
            assert cpu_inside.wait(WAIT_S)
        cuda_done.set()

    cpu_inside = threading.Event()

    def pause(module, args):
        cpu_inside.set()
        assert cuda_done.wait(WAIT_S)
        seen.append(cpu_settings())

    handle = extractor.model.register_forward_pre_hook(pause)
    thread = threading.Thread(target=cuda_forward, name="cuda")
    try:
        thread.start()
        assert cuda_inside.wait(WAIT_S)
        with torch.no_grad():
            out["cpu"] = extractor.extract(x)
    finally:
        handle.remove()
        thread.join(WAIT_S)
    assert seen and exact(seen[0]), seen  # before: the CUDA forward's exit gave back bf16 here
    for a, b in zip(out["cpu"], plain):
        assert rel_err(a, b) < 1e-6
    assert torch.get_float32_matmul_precision() == "medium" and B.mkldnn.matmul.fp32_precision == "bf16"


def test_nested_and_concurrent_blocks_restore_the_callers_settings_exactly():
    from geofidelity_bench.encoders.devices import exact_float32

    caller_bf16()
    B.cuda.matmul.fp32_precision = "tf32"
    before = {**cpu_settings(), "cuda.matmul": B.cuda.matmul.fp32_precision}
    barrier = threading.Barrier(4)
    inside: list[dict[str, str]] = []

    def work(device_type: str) -> None:
        for _ in range(20):
            with exact_float32(device_type=device_type):
                with exact_float32(device_type="cpu"):
                    inside.append({**cpu_settings(), "cuda.matmul": B.cuda.matmul.fp32_precision})
            barrier.wait(WAIT_S) if _ == 0 else None

    threads = [threading.Thread(target=work, args=(d,)) for d in ("cpu", "cuda", "cpu", "cuda")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert len(inside) == 80 and all(s[k] != "bf16" for s in inside for k in s if k.startswith("mkldnn"))
    assert {**cpu_settings(), "cuda.matmul": B.cuda.matmul.fp32_precision} == before
    with pytest.raises(KeyError), exact_float32(device_type="cpu"):
        raise KeyError("x")
    assert {**cpu_settings(), "cuda.matmul": B.cuda.matmul.fp32_precision} == before
