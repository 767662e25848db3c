"""GPU smoke run, offline: agreement with the CPU, speed and memory, in one run (sized for 8 minutes on one GPU).

    timeout 480 python benchmarks/gpu_smoke.py --out gpu-smoke   # on a CUDA machine
    python benchmarks/gpu_smoke.py cpu                           # dry run of every check on the CPU

One line per check while it runs (``ok``, ``FAIL``, ``unusable`` or ``skipped: <why>``), then a
compact summary, printed last and written as JSON (``--json PATH``, default ``OUT/gpu_smoke.json``;
rewritten after every check, so a run cut short still leaves what it measured). Exit status 1 if a
check failed or was unusable. On the CPU every part that needs CUDA says ``skipped: no CUDA device``.

Positive controls. A limit that nothing could exceed proves nothing (a TF32 forward that never
engaged, two runs equal by construction), so every tolerance a check compares against comes with a
positive control measured in the same check, a case that must be *over* the limit: a format with
TF32's 10 stored bits, the wrong images, the raw forward with TF32 on, a bfloat16 backbone, other
seeds. Yes/no checks (files bit-identical, hooks installed, settings restored, a refusal said) have a
control too: the same test applied to a case where it must say no. A control that does not fail, or a
tolerance compared without one, makes the check ``unusable`` (the run fails): its verdict could not
have been anything else. The summary shows, per limit, the worst value and the smallest control.

Checks, in order (``--only a,b`` runs some of them):

* ``encoders``: EfficientNet-Lite0 (the pip weights) and a tiny DINOv2 in float32 / bfloat16 /
  float16 on the device against float32 on the CPU; the same half-precision forwards emulated on
  the CPU (weights and activations cast, as the library runs them on CUDA) re-measure the evidence
  behind the limits on every run. Controls: the float16 emulation (TF32's 10 stored bits, so a
  TF32-sized error) must fail the float32 limit, the wrong images (each against the next one's
  embedding) the half-precision limits.
* ``tf32``: a float32 forward with PyTorch's TF32 flags on (the legacy ``allow_tf32`` flags, then
  the ``fp32_precision`` settings of torch >= 2.9) equals the CPU (the library turns TF32 off inside
  float32 forwards) and the caller's settings are restored. Control: the raw forward (the model
  called directly, TF32 on) must fail the float32 limit, else TF32 never engaged and the check is
  unusable. The dry run does the same with oneDNN's bf16 float32 mode standing in for TF32 (skipped
  on a CPU without bf16).
* ``segmenters``: tiny SegFormer group shares against the CPU (control: the wrong images).
* ``mfp``: the MFP loss (tiny ViT) and its gradient on the device against the CPU, in float32 and
  under a caller's bfloat16 autocast (which the library switches off in the forward and its
  backward, so both are held to the float32 limit); terms in float32, gradients finite. Control: the
  backbone really in bfloat16.
* ``vqa``: skipped (the library has no tiny VQA builder; tests/test_geodiv_pipeline.py has one).
* ``generation``: the tiny pipeline, batch 1 vs batch 3 on the device. The tiny model runs a batch
  one image at a time (``GeneratorSpec.sequential``), so these two are bit-identical when the runner
  gives each panel its own seed and file (control: a run with other seeds is told apart); the
  batched path (3 images per pipeline call) against one at a time within a pixel limit (control:
  other seeds); the device against the CPU with the same seeds (max and mean pixel difference of the
  saved panels; control: other seeds), images/s.
* ``offload``: a real model-CPU-offload run. The tiny pipeline is saved with ``save_pretrained`` and
  loaded from that folder, as a Hub model is; on CUDA through the library's own path
  (``load_generator(..., cpu_offload=True)``), and the accelerate ``CpuOffload`` hooks are checked
  on its text encoder, UNet and VAE before the offload run is compared with the resident one
  (pixels, images/s, peak GPU memory). The library offloads on CUDA only, so the dry run installs the
  hooks itself (``enable_model_cpu_offload(device="cpu")``), checks them and generates through them.
  Controls: a pipeline loaded without offload has no hooks; each panel against the next one (another
  seed) fails the pixel limits.
* ``throughput``: images/s and peak GPU memory (``torch.cuda.max_memory_allocated``, reset per
  case) of embedding with ``efficientnet-lite0`` (real weights) and with ``dinov2-base``,
  ``clip-vit-b32`` and ``siglip-so400m`` built from their real configs with random weights (speed
  and memory do not depend on the values), in float32 / bfloat16 / float16 at batch 32 and 128.
  *model/s* runs the library's forward (``embed_arrays``: host-to-device copy, forward, copy back)
  on pre-decoded arrays; *decode/s* runs only the input pipeline (decode + preprocess of 2048x1536
  JPEG files by the library's worker threads); *e2e/s* is ``embed`` from the JPEG files. ``bound``
  says which of the two limits the run: ``decode`` when the input pipeline is slower than the model
  (the GPU waits for images), ``model`` otherwise; *e2e/model* is the share of the model-only speed
  reached end to end. Half-precision embeddings of the random-weight models are compared with their
  float32 ones for the record only (random weights say little about real error). The dry run uses
  tiny configs of the same three families, float32 only, small batches. Nothing here has a limit
  (the check fails only on an error), so it has no control.
* ``cli``: ``embed --device cuda --dtype float16`` and ``generate --model tiny`` (control: an unknown
  encoder must be seen failing).
* ``torchrun``: with 2+ GPUs, ``torchrun --nproc_per_node 2`` runs of ``embed`` and ``generate``,
  each rank on its own GPU, files equal to the one-process run (controls: the next panel, the next
  image's embedding).
* ``sharedgpu``: with 1+ GPU, ``torchrun --nproc_per_node 2`` with one GPU visible: two processes on
  one GPU, which NCCL cannot run, are refused at the start, one line from each naming both and
  ``cuda:0`` (``geofidelity_bench.encoders.devices.refuse_shared_gpus``), nothing generated. Control:
  one process on the same GPU runs and is not refused.

The dry run generates on two blocks of the demo (``generation``, ``offload``) and one (``cli``):
every step runs, on fewer panels.

Limits (:data:`TOLERANCES`; each one's evidence is recorded beside it and in the JSON)
-----------------------------------------------------------------------------------------
Errors of embeddings are ``max |a - b| / max |b|`` against float32 on the CPU. A format with ``p``
significand bits rounds each value with a relative error up to ``u = 2**-p``: bfloat16 ``u = 2**-8
= 3.9e-3``, float16 ``2**-11 = 4.9e-4``, TF32 ``2**-11`` (10 stored bits, like float16), float32
``2**-24 = 6.0e-8``. A network rounds every activation, so its output error is some multiple of
``u`` that depends on depth and conditioning, not on the device: GPU and CPU kernels alike
accumulate half-precision products in float32, only their summation order differs. So the multiple
is measured where it can be, on the CPU with the same weights and activations in the same dtype
(EfficientNet-Lite0 on 6 demo photos, torch 2.13: bfloat16 4.4e-2 = 11 u, float16 3.8e-3 = 8 u;
tiny DINOv2 7.2e-3 and 8.4e-4; a random DINOv2-base in bfloat16 1.2e-2), and the limit is about 2.5x
the largest value measured (room for a different summation order and kernel choice, which move the
error by a factor of order one), never below 16 u, rounded up: bfloat16 ``0.11`` (28 u), float16
``1e-2`` (20 u). The ``encoders`` check re-measures the emulation on every run and holds it to the
same limits, so a limit can never drift below its evidence.
A limit below what the CPU emulation gives would fail on any GPU; the old bfloat16 limit 5e-2 sat
just above 4.4e-2. float32 on the device against the CPU: ``1e-4``. TF32 would give about 1/8 of
the bfloat16 error (its ``u`` is 8x smaller), 5.5e-3 for EfficientNet-Lite0, so 1e-4 catches a
TF32 leak by a factor of 50 while leaving float32 summation-order noise (measured on the CPU across
batch sizes: 1.7e-7) a factor of 500.

Saved panels are JPEG: a difference of one grey level in a raw pixel (what the CPU's thread count
changes) becomes up to 5 levels (mean 0.003) after the 512 px resize and JPEG coding; the tiny
pipeline with bfloat16 weights differs from float32 by 12 levels (mean 1.25); a different seed by
239 (mean 42). The device against the CPU (float32, but cuDNN convolutions may use TF32 in a
pipeline, about 1/8 of bfloat16's error): max 24, mean 3.0, twice the bfloat16 emulation and a
tenth of a wrong seed. The same device with and without offload (only where the weights wait
changes): max 10, mean 0.01, twice / three times the thread-order noise. Three images per pipeline
call against one at a time (CPU: max 4, mean 0.0005): on a GPU a batch may pick other cuDNN (TF32)
convolution algorithms, so it is held to the device-vs-CPU limits, max 24 and mean 3.0.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
NO_CUDA = "no CUDA device"
DEFAULT_OUT = Path(tempfile.gettempdir()) / "geofidelity-gpu-smoke"


# -- limits -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tolerance:
    """An upper limit on a measured difference, with the evidence it was set from."""

    limit: float
    measured: str
    basis: str


TOLERANCES: dict[str, Tolerance] = {
    "float32": Tolerance(
        1e-4, "CPU float32 batch 1 vs 6: 1.7e-7; TF32 would give ~5.5e-3 (EfficientNet-Lite0)",
        "between float32 summation-order noise (x500) and a TF32 leak (/50)"),
    "bfloat16": Tolerance(
        0.11, "CPU bf16 emulation: EfficientNet-Lite0 4.4e-2 (11 u), random DINOv2-base 1.2e-2, tiny 7.2e-3",
        "2.5x the largest emulated error, >= 16 u (u = 2**-8)"),
    "float16": Tolerance(
        1e-2, "CPU fp16 emulation: EfficientNet-Lite0 3.8e-3 (8 u), tiny DINOv2 8.4e-4 (2 u)",
        "2.5x the largest emulated error (9.5e-3), >= 16 u (u = 2**-11), rounded up"),
    "segmenter shares": Tolerance(
        1e-2, "CPU vs CPU 0; no GPU measurement yet",
        "a float32 forward flips only near-tied argmaxes: under 1% of the pixels of a group"),
    "mfp float32": Tolerance(
        1e-4, "same reasoning as float32 (the extractor runs with TF32 off)",
        "between float32 noise and a TF32 leak"),
    "mfp caller autocast": Tolerance(
        1e-4, "CPU bf16 autocast vs float32 (tiny ViT): loss 0, gradient 0 (3.4e-4 and 1.0e-2 before "
        "issue 30, when a caller's autocast reached the model)",
        "as float32: the library switches a caller's autocast off in the MFP forward, so the numbers "
        "under it are float32's"),
    "pixels max, device vs CPU": Tolerance(
        24, "CPU: bf16 weights 12, other thread count 5, a wrong seed 239 (JPEG panels, 0-255)",
        "2x the bf16 emulation, a tenth of a wrong seed"),
    "pixels mean, device vs CPU": Tolerance(
        3.0, "CPU: bf16 weights 1.25, other thread count 0.003, a wrong seed 42",
        "2.4x the bf16 emulation"),
    "pixels max, batched": Tolerance(
        24, "CPU: 3 images per pipeline call vs one at a time 4 (mean 0.0005); other seeds 250 (mean 42)",
        "a batch changes only the summation order, but on a GPU it may pick other cuDNN (TF32) convolution "
        "algorithms: held to the device-vs-CPU limit, a tenth of other seeds"),
    "pixels mean, batched": Tolerance(
        3.0, "CPU: 3 per call vs one at a time 0.0005; other seeds 42",
        "as the device-vs-CPU mean limit, a fourteenth of other seeds"),
    "pixels max, same device": Tolerance(
        10, "CPU: other thread count (last-bit noise) 5; offload vs resident on the CPU 0",
        "2x the thread-order noise"),
    "pixels mean, same device": Tolerance(
        0.01, "CPU: other thread count 0.003; offload vs resident on the CPU 0",
        "3x the thread-order noise"),
}


#: What a check can end as; the run passes with no FAIL and no unusable check.
STATUSES = ("ok", "FAIL", "unusable", "skipped")


class Skip(Exception):
    """A check that cannot run here; its message says why."""


@dataclass
class Comparison:
    """One measured difference against its limit. A positive control (``control``) is a case that
    must be *over* the limit (a wrong image, a coarser format, TF32 left on): its ``ok`` says that
    it was, i.e. that the limit can fail; one that is not makes the check unusable."""

    what: str
    value: float
    tolerance: str
    limit: float
    ok: bool
    control: bool = False

    def text(self) -> str:
        if self.control:
            return f"control {self.what}: {self.value:.2g} {'>' if self.ok else '<='} {self.limit:g}"
        return f"{self.what}: {self.value:.2g} {'<=' if self.ok else '>'} {self.limit:g}"


@dataclass
class Expectation:
    """A yes/no check (files bit-identical, hooks installed, a refusal said) with its positive
    control: the same test applied to a case where it must say no (``control_held`` must be False)."""

    what: str
    held: bool
    control: str
    control_held: bool

    @property
    def ok(self) -> bool:
        return self.held

    @property
    def usable(self) -> bool:
        return not self.control_held

    def text(self) -> str:
        if not self.usable:
            return f"control {self.control}: the test said yes where it must say no"
        return f"{self.what}: {'yes' if self.held else 'no'}"


@dataclass
class Context:
    """What a check gets: the device, a scratch folder, and where its measurements go."""

    device: str
    tmp: Path
    comparisons: list[Comparison] = field(default_factory=list)
    expectations: list[Expectation] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def compare(self, what: str, value: float, tolerance: str) -> Comparison:
        """Records ``value`` against the limit :data:`TOLERANCES[tolerance]`; a value above it (or a
        non-finite one) fails the check once the check has finished measuring. Every tolerance a
        check compares against needs a positive control in the same check (:meth:`control`)."""
        limit = TOLERANCES[tolerance].limit
        value = float(value)
        cmp = Comparison(what, value, tolerance, limit, bool(np.isfinite(value) and value <= limit))
        self.comparisons.append(cmp)
        return cmp

    def control(self, what: str, value: float, tolerance: str) -> Comparison:
        """A positive control of ``tolerance``: a case measured alongside that must be over the limit
        (an infinite value is; NaN is not). One that is not, or a tolerance compared without any,
        makes the check unusable: its limit could not have failed."""
        limit = TOLERANCES[tolerance].limit
        value = float(value)
        cmp = Comparison(what, value, tolerance, limit, bool(not np.isnan(value) and value > limit), control=True)
        self.comparisons.append(cmp)
        return cmp

    def expect(self, what: str, held: bool, control: str, control_held: bool) -> Expectation:
        """A yes/no check and its positive control (see :class:`Expectation`)."""
        exp = Expectation(what, bool(held), control, bool(control_held))
        self.expectations.append(exp)
        return exp


def unusable_reasons(comparisons: list[Comparison], expectations: list[Expectation]) -> list[str]:
    """Why a check's verdict cannot be trusted: a tolerance compared without a positive control, a
    control that was not over its limit, an expectation whose control said yes."""
    reasons = []
    used = list(dict.fromkeys(c.tolerance for c in comparisons if not c.control))
    for tol in used:
        controls = [c for c in comparisons if c.control and c.tolerance == tol]
        if not controls:
            reasons.append(f"no positive control for {tol!r}")
    reasons += [c.text() for c in comparisons if c.control and not c.ok]
    reasons += [e.text() for e in expectations if not e.usable]
    return reasons


@dataclass
class CheckResult:
    name: str
    status: str  # "ok", "FAIL", "unusable" (a positive control did not fail) or "skipped"
    seconds: float
    line: str
    comparisons: list[Comparison] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    expectations: list[Expectation] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "comparisons": [dataclasses.asdict(c) for c in self.comparisons],
                "expectations": [{**dataclasses.asdict(e), "ok": e.ok, "usable": e.usable} for e in self.expectations]}


def need_cuda(ctx: Context, count: int = 1) -> None:
    if not ctx.cuda:
        raise Skip(NO_CUDA)
    if torch.cuda.device_count() < count:
        raise Skip(f"needs {count} GPUs, {torch.cuda.device_count()} visible")


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


@contextlib.contextmanager
def peak_gpu_memory(device: str) -> Iterator[dict[str, float | None]]:
    """``{"peak_mib": ...}``: the most GPU memory allocated inside the block (weights already on the
    GPU included), from a reset of the peak at its start; ``None`` off CUDA."""
    out: dict[str, float | None] = {"peak_mib": None}
    if not device.startswith("cuda"):
        yield out
        return
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    yield out
    torch.cuda.synchronize(device)
    out["peak_mib"] = round(torch.cuda.max_memory_allocated(device) / 2**20, 1)


def free_gpu() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def photos() -> list:
    from geofidelity_bench import load_benchmark

    return [r.image_bytes for r in load_benchmark("demo").references[:6]]


def tiny_dinov2(folder: Path) -> Path:
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(0)
    Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                             image_size=224, patch_size=14)).eval().save_pretrained(folder / "dinov2")
    return folder / "dinov2"


def tiny_segformer(folder: Path) -> Path:
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    from geofidelity_bench.segmentation.labels import CITYSCAPES_CLASSES

    torch.manual_seed(1)
    cfg = SegformerConfig(
        num_encoder_blocks=4, depths=[1, 1, 1, 1], sr_ratios=[8, 4, 2, 1], hidden_sizes=[8, 16, 16, 16],
        num_attention_heads=[1, 1, 1, 1], decoder_hidden_size=16, mlp_ratios=[2, 2, 2, 2],
        id2label=dict(enumerate(CITYSCAPES_CLASSES)), label2id={c: i for i, c in enumerate(CITYSCAPES_CLASSES)},
    )
    SegformerForSemanticSegmentation(cfg).eval().save_pretrained(folder / "segformer")
    return folder / "segformer"


def tiny_vit(folder: Path) -> Path:
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                       image_size=32, patch_size=8), add_pooling_layer=False).save_pretrained(folder / "vit")
    return folder / "vit"


# -- agreement --------------------------------------------------------------------------------------


def emulated_half(encoder, arrays: list[np.ndarray], dtype: str) -> np.ndarray:
    """The embeddings ``encoder`` (float32, on the CPU) gives with its weights and activations in
    ``dtype``, as the library runs a half-precision encoder on CUDA (the library itself refuses half
    precision on a CPU, so the model is cast here; its float32 weights are put back after, since
    casting back would keep them rounded). The cast model's forward is called directly: the
    library's ``embed_arrays`` rightly refuses a model whose dtype is not its config's."""
    saved = {k: v.detach().clone() for k, v in encoder.model.state_dict().items()}
    half = getattr(torch, dtype)
    encoder.model.to(half)
    try:
        with torch.inference_mode():
            out = encoder._forward(torch.from_numpy(np.stack(arrays)).to(half))
        return out.float().numpy()
    finally:
        encoder.model.to(torch.float32)
        encoder.model.load_state_dict(saved)


def check_encoders(ctx: Context) -> str:
    from geofidelity_bench.encoders import get_encoder

    images, out = photos(), []
    for name, weights in [("efficientnet-lite0", None), ("dinov2-base", tiny_dinov2(ctx.tmp))]:
        cpu = get_encoder(name, weights=weights, device="cpu")
        arrays = [cpu.preprocess(i) for i in images]
        ref = cpu.embed_arrays(arrays)
        one_by_one = np.concatenate([cpu.embed_arrays([a]) for a in arrays])
        ctx.compare(f"{name} float32 CPU batch 1 vs 6", rel_err(one_by_one, ref), "float32")
        emulated = {dtype: emulated_half(cpu, arrays, dtype) for dtype in ("bfloat16", "float16")}
        for dtype in ("bfloat16", "float16"):
            c = ctx.compare(f"{name} {dtype} CPU emulation", rel_err(emulated[dtype], ref), dtype)
            out.append(f"{name} {dtype} CPU emulation {c.value:.1e}")
        # positive controls: float16 keeps TF32's 10 stored bits, so its error is the size of a TF32
        # leak, which the float32 limit must catch; each image against the next one's embedding (a
        # row-order bug) must fail the half-precision limits
        ctx.control(f"{name} float16 emulation (a TF32-sized error) vs float32", rel_err(emulated["float16"], ref),
                    "float32")
        wrong = rel_err(np.roll(ref, 1, axis=0), ref)
        for dtype in ("bfloat16", "float16"):
            ctx.control(f"{name} float32 of the wrong images", wrong, dtype)
        for dtype in ("float32", "bfloat16", "float16"):
            if dtype != "float32" and not ctx.cuda:
                continue
            got = get_encoder(name, weights=weights, device=ctx.device, dtype=dtype).embed(images, progress=False)
            c = ctx.compare(f"{name} {dtype} on {ctx.device} vs CPU float32", rel_err(got, ref), dtype)
            out.append(f"{name} {dtype} {ctx.device} {c.value:.1e}")
    if not ctx.cuda:
        out.append(f"bfloat16/float16 on the device skipped: {NO_CUDA}")
    return "; ".join(out)


def cpu_bf16_engages() -> bool:
    """Whether oneDNN's bf16 float32 mode changes a float32 matmul on this CPU (AMX/AVX512-BF16): the
    CPU's stand-in for TF32 in the dry run."""
    mkldnn = getattr(torch.backends, "mkldnn", None)
    if mkldnn is None or not hasattr(getattr(mkldnn, "matmul", None), "fp32_precision"):
        return False
    a = torch.randn(128, 128, generator=torch.Generator().manual_seed(0))
    ref = a.double() @ a.double()
    saved = mkldnn.matmul.fp32_precision
    try:
        mkldnn.matmul.fp32_precision = "bf16"
        return float(((a @ a).double() - ref).abs().max()) > 1e-2
    finally:
        mkldnn.matmul.fp32_precision = saved


@contextlib.contextmanager
def caller_precision(mode: str) -> Iterator[None]:
    """A caller's reduced float32 precision, the caller's settings restored after: ``legacy``
    (``allow_tf32`` on for cuBLAS and cuDNN), ``fp32_precision`` (``tf32`` for cuBLAS matmuls and
    cuDNN convolutions, torch >= 2.9), ``onednn-bf16`` (the CPU's stand-in: oneDNN bf16)."""
    from geofidelity_bench.encoders.devices import fp32_precision_settings, tf32_flags

    b = torch.backends
    if mode == "legacy":
        before = tf32_flags()
        b.cuda.matmul.allow_tf32 = b.cudnn.allow_tf32 = True
        try:
            yield
        finally:
            b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32 = before
        return
    saved = fp32_precision_settings()
    paths = {"fp32_precision": (("cuda.matmul", b.cuda.matmul, "tf32"), ("cuda.conv", b.cudnn.conv, "tf32")),
             "onednn-bf16": (("mkldnn.matmul", b.mkldnn.matmul, "bf16"), ("mkldnn.conv", b.mkldnn.conv, "bf16"))}[mode]
    for _, obj, value in paths:
        obj.fp32_precision = value
    try:
        yield
    finally:
        for key, obj, _ in paths:
            obj.fp32_precision = saved[key]


def check_tf32(ctx: Context) -> str:
    from geofidelity_bench.encoders import get_encoder
    from geofidelity_bench.encoders.devices import float32_settings_in_force

    if ctx.cuda:
        modes = ["legacy"] + (["fp32_precision"] if hasattr(torch.backends, "fp32_precision") else [])
    elif cpu_bf16_engages():
        modes = ["onednn-bf16"]  # the dry run: oneDNN's bf16 float32 mode stands in for TF32
    else:
        raise Skip(f"{NO_CUDA} (and this CPU has no oneDNN bf16 to stand in for TF32)")
    images = photos()
    enc = get_encoder("efficientnet-lite0", device=ctx.device)
    ref = get_encoder("efficientnet-lite0", device="cpu").embed(images, progress=False)
    batch = torch.from_numpy(np.stack([np.asarray(enc.preprocess(i)) for i in images])).to(ctx.device)
    out = []
    for mode in modes:
        with caller_precision(mode):
            callers = float32_settings_in_force(ctx.device)
            lib = enc.embed(images, progress=False)  # crashed before issue 30 under fp32_precision ("mix of ... APIs")
            after = float32_settings_in_force(ctx.device)
            inside = enc.config["float32_precision"]
            with torch.inference_mode():  # the model called directly: the caller's reduced precision in force
                raw = enc.model(batch).float().cpu().numpy()
        c = ctx.compare(f"library float32 forward under {mode} vs CPU", rel_err(lib, ref), "float32")
        # the positive control: the same forward without the library's context must be over the limit,
        # else the reduced mode never engaged here and the comparison above proves nothing
        r = ctx.control(f"raw forward under {mode} (no library context) vs CPU", rel_err(raw, ref), "float32")
        ctx.expect(f"{mode}: the caller's settings {callers} are back after the forward", after == callers,
                   control=f"{mode}: the settings recorded inside the forward equal the caller's reduced ones",
                   control_held=inside == callers)
        out.append(f"{mode}: library rel.err {c.value:.1e}, raw forward {r.value:.1e} (control), inside {inside}")
    if not ctx.cuda:
        out.append(f"TF32 on CUDA skipped: {NO_CUDA}")
    return "; ".join(out)


def check_segmenters(ctx: Context) -> str:
    from PIL import Image

    from geofidelity_bench.segmentation import get_segmenter

    weights = tiny_segformer(ctx.tmp)
    images = [Image.open(io.BytesIO(b)).convert("RGB") for b in photos()[:3]]
    ref = get_segmenter("segformer-cityscapes", weights=weights, device="cpu").shares_of(images)
    got = get_segmenter("segformer-cityscapes", weights=weights, device=ctx.device).shares_of(images)
    c = ctx.compare(f"segformer group shares {ctx.device} vs CPU", float(np.abs(got - ref).max()), "segmenter shares")
    wrong = ctx.control("segformer shares of the wrong images (each vs the next)",
                        float(np.abs(np.roll(ref, 1, axis=0) - ref).max()), "segmenter shares")
    return f"segformer shares max diff vs CPU {c.value:.1e} (wrong images {wrong.value:.1e})"


def mfp_loss_and_grad(folder: Path, device: str, autocast: bool, dtype: torch.dtype = torch.float32
                      ) -> tuple[float, np.ndarray]:
    """The mean MFP loss of a fixed pair of batches and its gradient with respect to the generated
    batch, on ``device``, under bfloat16 autocast when ``autocast``, with the extractor's backbone
    in ``dtype`` (bfloat16: the positive control, what a caller's autocast reaching the model gave)."""
    from geofidelity_bench.encoders.dino_vit_keys import DinoViTFeatureExtractor
    from geofidelity_bench.metrics.mfp import MapFeaturePerceptionLoss

    loss_fn = MapFeaturePerceptionLoss(DinoViTFeatureExtractor(str(folder), image_size=32, device=device)).to(dtype)
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(2, 3, 32, 32, generator=g), torch.rand(2, 3, 32, 32, generator=g)
    gen = x.to(device).requires_grad_(True)
    with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=autocast):
        terms = loss_fn.terms(gen, y.to(device))
        loss = terms["loss"].mean()
    loss.backward()
    assert all(t.dtype == torch.float32 for t in terms.values()), "MFP terms not float32"
    grad = gen.grad.detach().float().cpu().numpy()
    assert np.isfinite(grad).all(), f"non-finite MFP gradient on {device} (autocast={autocast})"
    return float(loss.detach()), grad


def check_mfp(ctx: Context) -> str:
    folder = tiny_vit(ctx.tmp)
    ref_loss, ref_grad = mfp_loss_and_grad(folder, "cpu", autocast=False)

    def rel_loss(loss: float) -> float:
        return abs(loss - ref_loss) / max(abs(ref_loss), 1e-12)

    runs = [("cpu", True)] + ([(ctx.device, False), (ctx.device, True)] if ctx.cuda else [])
    out = [f"loss {ref_loss:.5f} (CPU float32)"]
    for device, autocast in runs:
        loss, grad = mfp_loss_and_grad(folder, device, autocast)
        tol = "mfp caller autocast" if autocast else "mfp float32"
        how = f"{device}{' bf16 autocast' if autocast else ' float32'}"
        lc = ctx.compare(f"mfp loss {how} vs CPU float32", rel_loss(loss), tol)
        gc_ = ctx.compare(f"mfp gradient {how} vs CPU float32", rel_err(grad, ref_grad), tol)
        out.append(f"{how}: loss rel.diff {lc.value:.1e}, gradient rel.err {gc_.value:.1e}")
    # positive controls: the backbone really in bfloat16 (what a caller's autocast reaching the model
    # gave before issue 30: loss 3.5e-4, gradient 1.1e-2 on the CPU) must be over both limits
    for device in dict.fromkeys(["cpu", ctx.device]):
        loss, grad = mfp_loss_and_grad(folder, device, autocast=False, dtype=torch.bfloat16)
        for tol in ("mfp float32", "mfp caller autocast"):
            ctx.control(f"mfp loss, bfloat16 backbone on {device}", rel_loss(loss), tol)
            ctx.control(f"mfp gradient, bfloat16 backbone on {device}", rel_err(grad, ref_grad), tol)
        out.append(f"control {device} bfloat16 backbone: loss {rel_loss(loss):.1e}, gradient {rel_err(grad, ref_grad):.1e}")
    if not ctx.cuda:
        out.append(f"cuda skipped: {NO_CUDA}")
    return "; ".join(out)


def check_vqa(ctx: Context) -> str:
    raise Skip("no tiny VQA builder in the library (tests/test_geodiv_pipeline.py builds one for the tests)")


# -- generation -------------------------------------------------------------------------------------


class _OneProcess:
    """The state of one process on the chosen device (what ``run_generation`` reads)."""

    process_index, num_processes, is_main_process = 0, 1, True

    def __init__(self, device: str):
        self.device = torch.device(device)


#: The dry run's generation checks use these blocks of the demo (4 panels per run, so batch 3 still
#: has a full and a partial batch); on CUDA every block (14 panels).
DRY_RUN_BLOCKS = ("arezzo_park_path", "lund_seg1")


def generate(out: Path, device: str, model: Any = "tiny", batch_size: int = 1,
             cpu_offload: bool | None = None) -> dict[str, Any]:
    """Runs the tiny model's L0 panels (2 per block of the demo; :data:`DRY_RUN_BLOCKS` only when
    ``device`` is the CPU) into ``out``; returns the files' sha256, images/s and the peak GPU memory."""
    from geofidelity_bench import load_benchmark
    from geofidelity_bench.generation.runner import run_generation

    blocks = None if str(device).startswith("cuda") else list(DRY_RUN_BLOCKS)
    with peak_gpu_memory(device) as peak:
        summary = run_generation(load_benchmark("demo"), [model], ["L0"], out, images_per_block=2, block_ids=blocks,
                                 batch_size=batch_size, cpu_offload=cpu_offload, progress=False, log=lambda m: None,
                                 state=_OneProcess(device))
    files = {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.rglob("*.jpg"))}
    return {"files": files, "images_per_s": summary.images_per_s, "peak_mib": peak["peak_mib"]}


def panels(folder: Path) -> list[Path]:
    """The saved panels of an output folder, in the order of their path below the model's folder
    (so that two runs of differently named models pair up panel by panel)."""
    return sorted(folder.rglob("*.jpg"), key=lambda p: p.relative_to(folder).parts[1:])


def pixel_diff(a: Path, b: Path, shift: int = 0) -> tuple[int, float]:
    """(max, mean) absolute difference of the grey levels of the panels of two output folders, panel
    by panel; ``shift`` pairs each panel of ``a`` with the one ``shift`` places later in ``b``
    (cyclically): other seeds and prompts, the positive control of a pixel limit."""
    from PIL import Image

    pa, pb = panels(a), panels(b)
    assert pa and len(pa) == len(pb), f"{len(pa)} panels in {a}, {len(pb)} in {b}"
    worst, total, count = 0, 0.0, 0
    for i, p in enumerate(pa):
        x = np.asarray(Image.open(p), dtype=np.int16)
        y = np.asarray(Image.open(pb[(i + shift) % len(pb)]), dtype=np.int16)
        d = np.abs(x - y)
        worst, total, count = max(worst, int(d.max())), total + float(d.sum()), count + d.size
    return worst, total / count


def same_files(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two :func:`generate` runs wrote the same panels, bit for bit (and at least one)."""
    def hashes(run):
        return [h for _, h in sorted(run["files"].items(), key=lambda kv: Path(kv[0]).parts[1:])]

    return bool(a["files"]) and hashes(a) == hashes(b)


def check_generation(ctx: Context) -> str:
    from geofidelity_bench.generation.registry import get_generator

    tiny = get_generator("tiny")
    one, three = generate(ctx.tmp / "b1", ctx.device, batch_size=1), generate(ctx.tmp / "b3", ctx.device, batch_size=3)
    # the tiny model runs the images of a batch one at a time (GeneratorSpec.sequential), so its
    # batch 3 equals batch 1 bit for bit when the runner gives every panel its own seed and file
    # whatever the batch: that bookkeeping is what this compares; the control is a run whose seeds
    # differ (another model key), which the same test must tell apart
    reseeded = generate(ctx.tmp / "reseeded", ctx.device, tiny.replace(key="tiny-reseeded"), batch_size=1)
    ctx.expect("batch 3 panels == batch 1 panels, bit for bit (runner bookkeeping; the tiny model runs a batch "
               "one image at a time)", same_files(one, three),
               control="the panels of other seeds equal batch 1's", control_held=same_files(one, reseeded))
    # the real batched path: 3 images per pipeline call
    batched = generate(ctx.tmp / "batched", ctx.device, tiny.replace(sequential=False), batch_size=3)
    bw, bm = pixel_diff(ctx.tmp / "b1", ctx.tmp / "batched")
    ctx.compare("panels, 3 per pipeline call vs one at a time: max", bw, "pixels max, batched")
    ctx.compare("panels, 3 per pipeline call vs one at a time: mean", bm, "pixels mean, batched")
    cw, cm = pixel_diff(ctx.tmp / "b1", ctx.tmp / "reseeded")
    ctx.control("panels, other seeds vs one at a time: max", cw, "pixels max, batched")
    ctx.control("panels, other seeds vs one at a time: mean", cm, "pixels mean, batched")
    for mode, run in (("batch 1", one), ("batch 3 (one at a time)", three), ("batch 3 (batched)", batched)):
        ctx.rows.append({"device": ctx.device, "mode": mode, "images": len(run["files"]),
                         "images_per_s": run["images_per_s"], "peak_mib": run["peak_mib"]})
    line = (f"{len(one['files'])} images, batch 3 == batch 1 bit for bit (runner bookkeeping; control: other seeds "
            f"differ); batched path vs one at a time: max {bw}, mean {bm:.4f} (other seeds {cw}, {cm:.1f}); "
            f"{one['images_per_s']:.2f} images/s")
    if not ctx.cuda:
        return f"{line}; vs CPU skipped: {NO_CUDA}"
    cpu = generate(ctx.tmp / "cpu", "cpu", batch_size=1)
    ctx.rows.append({"device": "cpu", "mode": "batch 1", "images": len(cpu["files"]),
                     "images_per_s": cpu["images_per_s"], "peak_mib": None})
    worst, mean = pixel_diff(ctx.tmp / "b1", ctx.tmp / "cpu")
    ctx.compare("panels, device vs CPU same seeds: max", worst, "pixels max, device vs CPU")
    ctx.compare("panels, device vs CPU same seeds: mean", mean, "pixels mean, device vs CPU")
    cw, cm = pixel_diff(ctx.tmp / "reseeded", ctx.tmp / "cpu")
    ctx.control("panels, device with other seeds vs CPU: max", cw, "pixels max, device vs CPU")
    ctx.control("panels, device with other seeds vs CPU: mean", cm, "pixels mean, device vs CPU")
    return (f"{line} (CPU {cpu['images_per_s']:.2f}); vs CPU with the same seeds: max pixel difference {worst}, "
            f"mean {mean:.3f} (other seeds {cw}, {cm:.1f})")


def save_tiny_pipeline(folder: Path) -> Path:
    """The tiny pipeline written with ``save_pretrained``, so that it loads as a Hub model does."""
    from geofidelity_bench.generation.tiny import build_tiny_pipeline

    build_tiny_pipeline().save_pretrained(folder)
    return folder


def tiny_from_folder(folder: Path, **changes: Any):
    """The ``tiny`` generator's spec, loading its pipeline from ``folder`` (a diffusers spec)."""
    from geofidelity_bench.generation.registry import get_generator

    return get_generator("tiny").replace(weights=str(folder), pipeline_factory=None, **changes)


def offload_hooks(pipe) -> dict[str, str | None]:
    """For each model component of ``pipe`` (text encoder, UNet, VAE, ...), the accelerate hook that
    model CPU offload put on it (``"CpuOffload"``), or ``None`` when it has none."""
    from accelerate.hooks import CpuOffload, SequentialHook

    found: dict[str, str | None] = {}
    for name, module in pipe.components.items():
        if not isinstance(module, torch.nn.Module):
            continue
        hook = getattr(module, "_hf_hook", None)
        hooks = hook.hooks if isinstance(hook, SequentialHook) else [hook]
        found[name] = next((type(h).__name__ for h in hooks if isinstance(h, CpuOffload)), None)
    return found


def assert_offloaded(pipe) -> dict[str, str | None]:
    hooks = offload_hooks(pipe)
    missing = sorted(k for k, v in hooks.items() if v is None)
    assert hooks and not missing, f"no CPU-offload hook on {missing} of {sorted(hooks)}"
    return hooks


def check_offload(ctx: Context) -> str:
    from diffusers import StableDiffusionPipeline

    from geofidelity_bench.generation.backends import load_generator
    from geofidelity_bench.generation.registry import get_generator

    folder = save_tiny_pipeline(ctx.tmp / "tiny-pipeline")
    resident = generate(ctx.tmp / "resident", ctx.device, tiny_from_folder(folder), cpu_offload=False)
    if ctx.cuda:
        loaded = load_generator(tiny_from_folder(folder), device=ctx.device, cpu_offload=True)
        try:
            hooks = assert_offloaded(loaded.pipe)
            at_rest = sorted({str(p.device) for m in loaded.pipe.components.values()
                              if isinstance(m, torch.nn.Module) for p in m.parameters()})
            assert at_rest == ["cpu"], f"offloaded weights at rest on {at_rest}, not the CPU"
        finally:
            loaded.close()
        offload = generate(ctx.tmp / "offload", ctx.device, tiny_from_folder(folder), cpu_offload=True)
        where = "load_generator(cpu_offload=True) on CUDA; weights at rest on the CPU"
    else:
        pipe = StableDiffusionPipeline.from_pretrained(folder)
        pipe.enable_model_cpu_offload(device="cpu")
        hooks = assert_offloaded(pipe)
        hooked = get_generator("tiny").replace(pipeline_factory=lambda: pipe)  # the library moves it .to("cpu"): hooks stay
        offload = generate(ctx.tmp / "offload", ctx.device, hooked)
        assert_offloaded(pipe)  # still in place after the run
        where = f"enable_model_cpu_offload(device='cpu'), the library offloads on CUDA only; GPU run skipped: {NO_CUDA}"
    plain = offload_hooks(StableDiffusionPipeline.from_pretrained(folder))
    ctx.expect("a CPU-offload hook on every model component", bool(hooks) and all(hooks.values()),
               control="hooks found on a pipeline loaded without offload", control_held=any(plain.values()))
    worst, mean = pixel_diff(ctx.tmp / "resident", ctx.tmp / "offload")
    ctx.compare("panels, offload vs resident: max", worst, "pixels max, same device")
    ctx.compare("panels, offload vs resident: mean", mean, "pixels mean, same device")
    cw, cm = pixel_diff(ctx.tmp / "resident", ctx.tmp / "offload", shift=1)
    ctx.control("panels, offload vs the resident run's next panel (other seed): max", cw, "pixels max, same device")
    ctx.control("panels, offload vs the resident run's next panel (other seed): mean", cm, "pixels mean, same device")
    for mode, run in (("resident", resident), ("offload", offload)):
        ctx.rows.append({"mode": mode, "device": ctx.device, "images": len(run["files"]),
                         "images_per_s": run["images_per_s"], "peak_mib": run["peak_mib"]})
    ctx.rows[-1].update(hooks=hooks, hooks_from=where)
    mem = (f"; peak GPU MiB resident {resident['peak_mib']}, offload {offload['peak_mib']}" if ctx.cuda else "")
    return (f"hooks {', '.join(f'{k}: {v}' for k, v in hooks.items())} ({where}); offload vs resident max pixel "
            f"difference {worst}, mean {mean:.3f}; images/s resident {resident['images_per_s']:.2f}, offload "
            f"{offload['images_per_s']:.2f}{mem}")


# -- throughput -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ThroughputPlan:
    """What the throughput check runs: real sizes on CUDA, a quick version of every step on the CPU."""

    dtypes: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    images: int  # images per end-to-end and decode run (JPEG files, repeated)
    files: int  # distinct JPEG files written
    jpeg_size: tuple[int, int]
    min_seconds: float  # each model-only measurement runs at least this long (and 2 batches)
    real_sizes: bool


CUDA_PLAN = ThroughputPlan(("float32", "bfloat16", "float16"), (32, 128), 256, 32, (2048, 1536), 1.5, True)
CPU_PLAN = ThroughputPlan(("float32",), (2, 4), 8, 4, (640, 480), 0.0, False)
ALL_DTYPES = ("float32", "bfloat16", "float16")

#: SigLIP so400m-patch14-384's towers (google/siglip-so400m-patch14-384 config.json); SiglipConfig()'s
#: defaults are the base model.
SO400M_TOWER = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16)
_TINY_TOWER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)


def hf_encoder_config(name: str, real: bool):
    """The transformers model class and config of an encoder: the real size of the library's weights
    (``dinov2-base``: Dinov2Config() is ViT-B/14, image_size 518 as facebook/dinov2-base; ``clip-vit-b32``:
    CLIPConfig() is ViT-B/32 with its text tower; ``siglip-so400m``: :data:`SO400M_TOWER`), or a tiny one."""
    from transformers import CLIPConfig, CLIPModel, Dinov2Config, Dinov2Model, SiglipConfig, SiglipModel

    ids = dict(bos_token_id=0, eos_token_id=1, pad_token_id=1)
    if name == "dinov2-base":
        return Dinov2Model, (Dinov2Config(image_size=518) if real else Dinov2Config(**_TINY_TOWER, image_size=224))
    if name == "clip-vit-b32":
        if real:
            return CLIPModel, CLIPConfig()
        return CLIPModel, CLIPConfig(text_config=dict(_TINY_TOWER, vocab_size=600, max_position_embeddings=77, **ids),
                                     vision_config=dict(_TINY_TOWER, image_size=32, patch_size=8), projection_dim=16)
    if name == "siglip-so400m":
        tower = SO400M_TOWER if real else _TINY_TOWER
        return SiglipModel, SiglipConfig(
            text_config=dict(tower, vocab_size=32000 if real else 600, max_position_embeddings=64 if real else 16, **ids),
            vision_config=dict(tower, image_size=384 if real else 32, patch_size=14 if real else 8))
    raise ValueError(name)


def random_encoder_weights(name: str, folder: Path, *, real: bool, device: str) -> Path:
    """A save_pretrained folder of encoder ``name`` with random weights (and a small tokenizer for the
    text towers, which embedding images never calls). Built on ``device`` (initializing 0.9 B
    parameters takes a minute on a CPU, milliseconds on a GPU) and saved in bfloat16 to halve the
    bytes; every dtype then loads the same values."""
    from geofidelity_bench.generation.tiny import build_tiny_tokenizer

    cls, cfg = hf_encoder_config(name, real)
    torch.manual_seed(0)
    with torch.device(device):
        model = cls(cfg).eval()
    model.to(torch.bfloat16).save_pretrained(folder)
    del model
    if name != "dinov2-base":
        build_tiny_tokenizer().save_pretrained(folder)
    free_gpu()
    return folder


def write_photos(folder: Path, n: int, size: tuple[int, int]) -> list[Path]:
    """``n`` JPEG files of ``size`` (quality 90): demo photos upscaled, with noise so that their bit
    rate (and decode cost) is that of a camera photo rather than of a smooth upscale."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    sources = photos()

    def one(i: int) -> Path:
        img = Image.open(io.BytesIO(sources[i % len(sources)])).convert("RGB").resize(size, Image.Resampling.BICUBIC)
        noise = np.random.default_rng(i).normal(0, 6, (size[1], size[0], 3))
        arr = np.clip(np.asarray(img, dtype=np.float32) + noise, 0, 255).astype(np.uint8)
        path = folder / f"photo_{i:03d}.jpg"
        Image.fromarray(arr).save(path, quality=90)
        return path

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(one, range(n)))


def images_per_s(n: int, seconds: float) -> float:
    return round(n / seconds, 2) if seconds > 0 else float("inf")


def model_rate(encoder, arrays: list[np.ndarray], batch_size: int, min_seconds: float) -> tuple[float, np.ndarray]:
    """Images/s of the library's forward on one batch of pre-decoded arrays (after one warm-up
    batch): at least 2 batches and ``min_seconds``. ``embed_arrays`` ends with a copy to the host,
    so each call has finished on the GPU when it returns."""
    batch = [arrays[i % len(arrays)] for i in range(batch_size)]
    first = encoder.embed_arrays(batch)
    done, t0 = 0, time.perf_counter()
    while done < 2 or time.perf_counter() - t0 < min_seconds:
        encoder.embed_arrays(batch)
        done += 1
    return images_per_s(done * batch_size, time.perf_counter() - t0), first


def decode_rate(encoder, paths: list[Path], batch_size: int) -> float:
    """Images/s of the input pipeline alone: decode + preprocess by the library's worker threads."""
    from contextlib import closing

    from geofidelity_bench.prefetch import default_num_workers, ordered_map, prefetch_items

    workers = default_num_workers()
    t0 = time.perf_counter()
    with closing(ordered_map(encoder.preprocess, paths, num_workers=workers,
                             ahead=prefetch_items(workers, batch_size))) as prepared:
        for _ in prepared:
            pass
    return images_per_s(len(paths), time.perf_counter() - t0)


def bound_of(decode: float, model: float) -> str:
    """Which side limits an end-to-end run: ``decode`` when the input pipeline is slower than the model."""
    return "decode" if decode < model else "model"


def throughput_cases(ctx: Context, name: str, weights: Path | None, plan: ThroughputPlan, paths: list[Path]) -> None:
    """The rows of one encoder: per dtype and batch size the model-only rate and peak memory; at the
    largest batch also the end-to-end rate and the input pipeline's (measured once per encoder: it
    does not depend on the dtype). A case that raises (e.g. out of memory) is a row with its error,
    and the others still run."""
    from geofidelity_bench.encoders import get_encoder

    ref: np.ndarray | None = None
    arrays: list[np.ndarray] | None = None
    decode_s: float | None = None
    largest = max(plan.batch_sizes)
    kind = "pip (real)" if weights is None else ("random, real config" if plan.real_sizes else "random, tiny config (dry run)")
    for dtype in ALL_DTYPES:
        base = {"encoder": name, "weights": kind, "dtype": dtype}
        if dtype not in plan.dtypes:
            ctx.rows.extend({**base, "batch_size": b, "skipped": NO_CUDA if not ctx.cuda else "not planned"}
                            for b in plan.batch_sizes)
            continue
        encoder = None
        try:
            encoder = get_encoder(name, weights=weights, device=ctx.device, dtype=dtype)
            weights_mib = round(torch.cuda.memory_allocated(ctx.device) / 2**20, 1) if ctx.cuda else None
            if arrays is None:  # the distinct files, decoded once (preprocessing does not depend on the dtype)
                with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
                    arrays = list(pool.map(encoder.preprocess, list(dict.fromkeys(paths))))
            if decode_s is None:
                decode_s = decode_rate(encoder, paths, largest)
            for b in plan.batch_sizes:
                with peak_gpu_memory(ctx.device) as peak:
                    model_s, emb = model_rate(encoder, arrays, b, plan.min_seconds)
                row = {**base, "batch_size": b, "model_images_per_s": model_s, "peak_mib": peak["peak_mib"],
                       "weights_mib": weights_mib}
                if b == largest:
                    t0 = time.perf_counter()
                    encoder.embed(paths, batch_size=b, progress=False)
                    e2e_s = images_per_s(len(paths), time.perf_counter() - t0)
                    row.update(decode_images_per_s=decode_s, e2e_images_per_s=e2e_s,
                               e2e_over_model=float(f"{e2e_s / model_s:.3g}"), bound=bound_of(decode_s, model_s))
                if dtype == "float32":
                    ref = emb if ref is None else ref
                elif ref is not None:  # for the record: random weights say little about real error
                    n = min(len(ref), len(emb))
                    row["rel_err_vs_float32"] = rel_err(emb[:n], ref[:n])
                    row["finite"] = bool(np.isfinite(emb).all())
                ctx.rows.append(row)
        except Exception as err:  # noqa: BLE001 - record it, measure the rest, fail the check at the end
            traceback.print_exc(file=sys.stderr)
            ctx.rows.append({**base, "error": f"{type(err).__name__}: {err}"[:500]})
        finally:
            del encoder
            free_gpu()


def check_throughput(ctx: Context) -> str:
    plan = CUDA_PLAN if ctx.cuda else CPU_PLAN
    t0 = time.perf_counter()
    files = write_photos(ctx.tmp / "jpeg", plan.files, plan.jpeg_size)
    paths = [files[i % len(files)] for i in range(plan.images)]
    encoders: list[tuple[str, Path | None]] = [("efficientnet-lite0", None)]
    for name in ("dinov2-base", "clip-vit-b32", "siglip-so400m"):
        encoders.append((name, random_encoder_weights(name, ctx.tmp / name, real=plan.real_sizes, device=ctx.device)))
    ctx.notes.append(f"setup (JPEG files, random weights) {time.perf_counter() - t0:.1f} s; "
                     f"{plan.images} images from {plan.files} files of {plan.jpeg_size[0]}x{plan.jpeg_size[1]}, "
                     f"mean {np.mean([p.stat().st_size for p in files]) / 1024:.0f} KiB")
    for name, weights in encoders:
        throughput_cases(ctx, name, weights, plan, paths)
    errors = [f"{r['encoder']} {r['dtype']}: {r['error']}" for r in ctx.rows if "error" in r]
    assert not errors, "; ".join(errors)
    done = [r for r in ctx.rows if "model_images_per_s" in r]
    bounds = sorted({f"{r['encoder']} {r['dtype']}: {r['bound']}" for r in done if "bound" in r})
    skipped = "" if ctx.cuda else f"; bfloat16/float16 and peak memory skipped: {NO_CUDA}"
    return f"{len(done)} cases measured{skipped}; bound by: {', '.join(bounds)}"


# -- command line -----------------------------------------------------------------------------------


def _run_cli(*args: str, launcher: list[str] | None = None, timeout: int = 300,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Runs the command line (``python -m geofidelity_bench.cli ARGS``, under ``launcher`` if given)."""
    cmd = [*(launcher or [sys.executable]), "-m", "geofidelity_bench.cli", *args]
    full = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
                **(env or {}))
    return subprocess.run(cmd, cwd=ROOT, env=full, capture_output=True, text=True, timeout=timeout)


def _cli(*args: str, launcher: list[str] | None = None, timeout: int = 300, env: dict[str, str] | None = None) -> str:
    """:func:`_run_cli` that must exit 0 (an AssertionError with its error output otherwise); its stdout."""
    proc = _run_cli(*args, launcher=launcher, timeout=timeout, env=env)
    assert proc.returncode == 0, f"{' '.join(proc.args)} exited {proc.returncode}: {proc.stderr[-800:]}"
    return proc.stdout


def _fails(run: Callable[[], Any]) -> bool:
    try:
        run()
    except AssertionError:
        return True
    return False


def check_cli(ctx: Context) -> str:
    tmp = ctx.tmp
    if ctx.cuda:
        _cli("embed", "--encoder", "efficientnet-lite0", "--device", "cuda", "--dtype", "float16",
             "--cache-dir", str(tmp / "cache"), "--out", str(tmp / "emb.parquet"), "--no-progress")
        embed = "embed --device cuda --dtype float16 ok"
    else:
        _cli("embed", "--encoder", "efficientnet-lite0", "--device", "cpu", "--no-cache", "--out",
             str(tmp / "emb.parquet"), "--no-progress")
        embed = f"embed --device cpu ok (--device cuda --dtype float16 skipped: {NO_CUDA})"
    blocks = [] if ctx.cuda else ["--blocks", DRY_RUN_BLOCKS[0]]
    _cli("generate", "--model", "tiny", "--conditions", "L0", "--images-per-block", "1", *blocks, "--out",
         str(tmp / "gen"), "--no-progress")
    written = list((tmp / "gen").rglob("*.jpg"))
    # the control: a command that must fail (an unknown encoder) must be seen failing by the same helper
    control_passed = not _fails(lambda: _cli("embed", "--encoder", "no-such-encoder", "--no-cache", "--out",
                                             str(tmp / "never.parquet"), "--no-progress"))
    ctx.expect("embed and generate exited 0 and generate wrote its panels", bool(written),
               control="a command that must fail (embed --encoder no-such-encoder) exited 0",
               control_held=control_passed)
    return f"{embed}; generate --model tiny ok ({len(written)} panels); an unknown encoder exits non-zero"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(nproc: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_port", str(free_port())]


def check_torchrun(ctx: Context) -> str:
    need_cuda(ctx, count=2)
    tmp = ctx.tmp
    gen_args = ["generate", "--model", "tiny", "--conditions", "L0", "--images-per-block", "2", "--no-progress"]
    _cli(*gen_args, "--out", str(tmp / "g1"))
    _cli(*gen_args, "--out", str(tmp / "g2"), launcher=torchrun(2))
    summary = json.loads((tmp / "g2" / "generation_summary.json").read_text())
    devices = sorted(p["device"].split(" ")[0] for p in summary["per_process"])
    assert devices == ["cuda:0", "cuda:1"], f"ranks on {devices}"
    worst, _ = pixel_diff(tmp / "g1", tmp / "g2")
    shifted, _ = pixel_diff(tmp / "g1", tmp / "g2", shift=1)
    ctx.expect("2-GPU generation files equal the 1-process run (max pixel difference 0)", worst == 0,
               control="the 1-process run's next panel (other seed) equal too", control_held=shifted == 0)
    emb_args = ["embed", "--encoder", "efficientnet-lite0", "--no-progress"]
    _cli(*emb_args, "--cache-dir", str(tmp / "c1"), "--out", str(tmp / "e1.parquet"))
    _cli(*emb_args, "--cache-dir", str(tmp / "c2"), "--out", str(tmp / "e2.parquet"), launcher=torchrun(2))
    import pandas as pd

    e1, e2 = (np.stack(pd.read_parquet(tmp / f)["embedding"].to_numpy()) for f in ("e1.parquet", "e2.parquet"))
    err = ctx.compare("embed 2 GPUs vs 1", rel_err(e2, e1), "float32").value
    ctx.control("embed 2 GPUs, each row against the next image's", rel_err(np.roll(e2, 1, axis=0), e1), "float32")
    return f"generate on {devices}, files equal the 1-process run (max {worst}; next panel {shifted}); embed rel.err {err:.1e}"


#: The refusal of two processes on one GPU (geofidelity_bench.encoders.devices.refuse_shared_gpus).
SHARED_GPU_REFUSAL = "processes 0 and 1 of this launch of 2 run on one GPU (cuda:0"


def check_sharedgpu(ctx: Context) -> str:
    """Two processes on one GPU (``torchrun --nproc_per_node 2`` with one GPU visible): the library's
    documented refusal, one line from each process naming both and the GPU, nothing generated; the
    control is one process on the same GPU, which must run and not be refused."""
    need_cuda(ctx)
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    one_gpu = {"CUDA_VISIBLE_DEVICES": first}
    args = ["generate", "--model", "tiny", "--conditions", "L0", "--images-per-block", "1", "--blocks",
            DRY_RUN_BLOCKS[0], "--no-progress"]
    two = _run_cli(*args, "--out", str(ctx.tmp / "two"), launcher=torchrun(2), env=one_gpu)
    one = _run_cli(*args, "--out", str(ctx.tmp / "one"), launcher=torchrun(1), env=one_gpu)
    refused = [line for line in two.stderr.splitlines() if SHARED_GPU_REFUSAL in line]
    ctx.notes.append(f"2 processes: exit {two.returncode}; stderr tail: {two.stderr[-600:]}")
    ctx.expect("2 processes on 1 GPU refused: one line from each naming processes 0 and 1 and cuda:0, "
               "a non-zero exit, no panel", two.returncode != 0 and len(refused) >= 2 and not
               list((ctx.tmp / "two").rglob("*.jpg")),
               control="1 process on the same GPU refused the same way", control_held=SHARED_GPU_REFUSAL in one.stderr)
    assert one.returncode == 0, f"1 process on 1 GPU exited {one.returncode}: {one.stderr[-800:]}"
    return (f"2 processes on GPU {first}: exit {two.returncode}, {len(refused)} refusal line(s): "
            f"{refused[0][:160] if refused else two.stderr.strip()[-160:]}; 1 process: exit 0")


CHECKS: list[Callable[[Context], str]] = [
    check_encoders, check_tf32, check_segmenters, check_mfp, check_vqa, check_generation, check_offload,
    check_throughput, check_cli, check_torchrun, check_sharedgpu,
]


def label(check: Callable) -> str:
    return check.__name__.removeprefix("check_")


# -- running and reporting --------------------------------------------------------------------------


def run_check(check: Callable[[Context], str], device: str) -> CheckResult:
    """Runs one check in its own scratch folder; a comparison over its limit or an expectation that
    did not hold fails it (after every value of the check was measured), as does an exception; a
    positive control that did not fail (or a tolerance without one) makes it unusable."""
    name, t0 = label(check), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"gpu-smoke-{name}-") as tmp:
        ctx = Context(device, Path(tmp))
        try:
            line = check(ctx)
            failed = [c.text() for c in ctx.comparisons if not c.control and not c.ok]
            failed += [e.text() for e in ctx.expectations if not e.ok]
            unusable = unusable_reasons(ctx.comparisons, ctx.expectations)
            status = "FAIL" if failed else ("unusable" if unusable else "ok")
            if unusable:
                line = "unusable (a positive control did not fail): " + "; ".join(unusable) + f" | {line}"
            if failed:
                line = "over the limit: " + "; ".join(failed) + f" | {line}"
        except Skip as why:
            status, line = "skipped", str(why)
        except Exception as err:  # noqa: BLE001 - report every check, then fail
            status, line = "FAIL", f"{type(err).__name__}: {err}"
            traceback.print_exc(file=sys.stderr)
        finally:
            free_gpu()
    return CheckResult(name, status, round(time.perf_counter() - t0, 1), line, ctx.comparisons, ctx.rows, ctx.notes,
                       ctx.expectations)


def environment(device: str) -> dict[str, Any]:
    cuda = device.startswith("cuda")
    return {
        "device": torch.cuda.get_device_name(0) if cuda else "CPU dry run",
        "mode": "cuda" if cuda else "cpu",
        "gpus": torch.cuda.device_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "python": platform.python_version(),
        "cpu_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }


def summary_dict(results: list[CheckResult], env: dict[str, Any], seconds: float, complete: bool) -> dict[str, Any]:
    counts = {s: sum(r.status == s for r in results) for s in STATUSES}
    return {
        "environment": env,
        "complete": complete,
        "passed": counts["FAIL"] == 0 and counts["unusable"] == 0,
        "counts": counts,
        "seconds": round(seconds, 1),
        "checks": [r.to_dict() for r in results],
        "tolerances": {k: dataclasses.asdict(t) for k, t in TOLERANCES.items()},
    }


def _num(value: Any, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def format_summary(summary: dict[str, Any], json_path: Path | None) -> str:
    """The compact summary printed last: checks, the worst value of every limit, throughput."""
    env, lines = summary["environment"], []
    lines.append(f"== gpu_smoke summary: {env['device']}, torch {env['torch']}, CUDA {env['cuda']}, "
                 f"{env['gpus']} GPU(s), {summary['seconds']:.0f} s ==")
    for c in summary["checks"]:
        text = c["line"] if len(c["line"]) <= 150 else c["line"][:147] + "..."
        lines.append(f"{c['name']:<11} {c['status']:<8} {c['seconds']:>6.1f}s  {text}")
    worst: dict[str, dict[str, Any]] = {}
    closest: dict[str, dict[str, Any]] = {}  # the positive control nearest its limit, per tolerance
    for c in summary["checks"]:
        for cmp in c["comparisons"]:
            if cmp["value"] is None:  # a non-finite value, as the JSON keeps it
                cmp = {**cmp, "value": float("nan")}
            if cmp.get("control"):
                if cmp["tolerance"] not in closest or not (cmp["value"] >= closest[cmp["tolerance"]]["value"]):
                    closest[cmp["tolerance"]] = cmp
            elif cmp["tolerance"] not in worst or not (cmp["value"] <= worst[cmp["tolerance"]]["value"]):
                worst[cmp["tolerance"]] = cmp
    if worst:
        lines.append("limits (worst value measured / limit; smallest positive control, which must be over it):")
        for key, cmp in worst.items():
            ctl = closest.get(key)
            control = (f"; control {ctl['value']:.2g} {'>' if ctl['ok'] else '<= (UNUSABLE)'} ({ctl['what']})"
                       if ctl else "; no control (UNUSABLE)")
            lines.append(f"  {'ok  ' if cmp['ok'] else 'FAIL'} {key:<27} {cmp['value']:.2g} / {cmp['limit']:g}  "
                         f"({cmp['what']}){control}")
    rows = next((c["rows"] for c in summary["checks"] if c["name"] == "throughput"), [])
    if rows:
        lines.append("throughput (images/s; model = forward on pre-decoded arrays, decode = input pipeline, "
                     "e2e = from JPEG files; peak = max GPU MiB):")
        lines.append(f"  {'encoder':<19}{'dtype':<9}{'batch':>5}{'model':>9}{'decode':>9}{'e2e':>9}{'e2e/model':>10}"
                     f"{'peak MiB':>10}  bound")
        for r in rows:
            if "skipped" in r:
                if r["batch_size"] == rows[0]["batch_size"]:
                    lines.append(f"  {r['encoder']:<19}{r['dtype']:<9}  skipped: {r['skipped']}")
                continue
            if "error" in r:
                lines.append(f"  {r['encoder']:<19}{r['dtype']:<9}  error: {r['error'][:100]}")
                continue
            lines.append(f"  {r['encoder']:<19}{r['dtype']:<9}{r['batch_size']:>5}{r['model_images_per_s']:>9.1f}"
                         f"{_num(r.get('decode_images_per_s')):>9}{_num(r.get('e2e_images_per_s')):>9}"
                         f"{_num(r.get('e2e_over_model'), '{:.2f}'):>10}{_num(r.get('peak_mib')):>10}  "
                         f"{r.get('bound', '')}")
    counts = summary["counts"]
    lines.append(f"gpu_smoke: {'PASSED' if summary['passed'] else 'FAILED'}: {counts['ok']} ok, {counts['FAIL']} failed, "
                 f"{counts['unusable']} unusable, {counts['skipped']} skipped" + (f"; JSON: {json_path}" if json_path else ""))
    return "\n".join(lines)


def json_clean(obj: Any) -> Any:
    """``obj`` with every non-finite float (a NaN error, an infinite rate) as ``None``: strict JSON."""
    if isinstance(obj, dict):
        return {k: json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_clean(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def write_json(path: Path, summary: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(json_clean(summary), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def run(checks: list[Callable[[Context], str]], device: str, json_path: Path | None) -> dict[str, Any]:
    """Runs ``checks`` on ``device``, one line each as it ends; the summary (also rewritten to
    ``json_path`` after each check, ``complete`` once all ran)."""
    env, t0, results = environment(device), time.perf_counter(), []
    print(f"gpu_smoke: {env['device']}; torch {env['torch']}, {env['gpus']} GPU(s)", flush=True)
    for check in checks:
        result = run_check(check, device)
        results.append(result)
        text = f"{result.status}: {result.line}"
        print(f"{result.name:<11} {text}", flush=True)
        if json_path is not None:
            write_json(json_path, summary_dict(results, env, time.perf_counter() - t0, complete=False))
    summary = summary_dict(results, env, time.perf_counter() - t0, complete=True)
    if json_path is not None:
        write_json(json_path, summary)
    return summary


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", default="cuda", choices=("cuda", "cpu"),
                        help="cuda (default): the GPU run; cpu: the dry run")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT})")
    parser.add_argument("--json", type=Path, default=None, help="summary JSON (default: OUT/gpu_smoke.json)")
    parser.add_argument("--only", default=None, help=f"comma-separated checks: {', '.join(map(label, CHECKS))}")
    args = parser.parse_args(argv)
    if args.mode == "cuda" and not torch.cuda.is_available():
        print("no CUDA GPU is visible; run `python benchmarks/gpu_smoke.py cpu` for the dry run", file=sys.stderr)
        return 2
    checks = CHECKS
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = sorted(set(wanted) - {label(c) for c in CHECKS})
        if unknown:
            print(f"unknown check(s) {unknown}; choose from {[label(c) for c in CHECKS]}", file=sys.stderr)
            return 2
        checks = [c for c in CHECKS if label(c) in wanted]
    json_path = args.json if args.json is not None else args.out / "gpu_smoke.json"
    summary = run(checks, "cuda" if args.mode == "cuda" else "cpu", json_path)
    print(format_summary(summary, json_path), flush=True)
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
