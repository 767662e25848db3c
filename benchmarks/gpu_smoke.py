"""GPU smoke checks, offline: tiny random models built from configs plus the pip EfficientNet-Lite0.

One line per check, ``ok``/``FAIL``/``skipped (...)``, and a non-zero exit status if any check failed:

* encoders (tiny DINOv2, EfficientNet-Lite0) in float32/bfloat16/float16 against float32 on the CPU;
* TF32: a float32 EfficientNet forward with PyTorch's TF32 flags on equals the one with them off
  (the library turns TF32 off inside float32 forwards) and the flags are restored;
* segmenters (tiny SegFormer): group shares against the CPU;
* MFP (tiny ViT): loss forward and backward, with and without autocast; terms in float32;
* VQA batch 1 vs 8: skipped (the library has no tiny VQA builder; tests/test_geodiv_pipeline.py has one);
* tiny generation: batch 1 vs batch 3 on the device, and against the same images made on the CPU;
* CPU offload vs resident (tiny pipeline);
* the CLI: ``embed --device cuda --dtype float16`` and ``generate --model tiny``;
* with 2+ GPUs: ``torchrun --nproc_per_node 2`` runs of ``embed`` and ``generate``, each rank on
  its own GPU, files equal to the one-process run.

    python benchmarks/gpu_smoke.py          # on a CUDA machine (under 10 minutes on one GPU)
    python benchmarks/gpu_smoke.py cpu      # dry run of every check on the CPU

In the dry run every check that needs CUDA prints ``skipped (no CUDA)``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


class Skip(Exception):
    """A check that cannot run here; its message says why."""


def need_cuda(device: str, count: int = 1) -> None:
    if not device.startswith("cuda"):
        raise Skip("no CUDA")
    if torch.cuda.device_count() < count:
        raise Skip(f"needs {count} GPUs, {torch.cuda.device_count()} visible")


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))


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


# -- checks ---------------------------------------------------------------------------------------------


def check_encoders(device: str, tmp: Path) -> str:
    from geofidelity_bench.encoders import get_encoder

    images, out = photos(), []
    for name, weights in [("efficientnet-lite0", None), ("dinov2-base", tiny_dinov2(tmp))]:
        ref = get_encoder(name, weights=weights, device="cpu").embed(images, progress=False)
        for dtype, tol in [("float32", 1e-3), ("bfloat16", 5e-2), ("float16", 1e-2)]:
            if dtype != "float32" and not device.startswith("cuda"):
                out.append(f"{name} {dtype} skipped (no CUDA)")
                continue
            got = get_encoder(name, weights=weights, device=device, dtype=dtype).embed(images, progress=False)
            err = rel_err(got, ref)
            assert err <= tol, f"{name} {dtype}: relative error {err:.2e} > {tol}"
            out.append(f"{name} {dtype} rel.err {err:.1e}")
    return "; ".join(out)


def check_tf32(device: str, tmp: Path) -> str:
    from geofidelity_bench.encoders import get_encoder
    from geofidelity_bench.encoders.devices import tf32_flags

    need_cuda(device)
    images = photos()
    enc = get_encoder("efficientnet-lite0", device=device)
    ref = get_encoder("efficientnet-lite0", device="cpu").embed(images, progress=False)
    before = tf32_flags()
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        with_flags = enc.embed(images, progress=False)
        assert tf32_flags() == (True, True), "the TF32 flags were not restored"
        raw = enc.model(torch.from_numpy(np.stack([enc.preprocess(i) for i in images])).to(device)).float()
        tf32_err = rel_err(raw.detach().cpu().numpy(), ref)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    err = rel_err(with_flags, ref)
    assert err <= 1e-4, f"float32 forward with TF32 flags on: rel.err {err:.2e} vs CPU"
    return f"library forward rel.err {err:.1e} (TF32 off inside), raw TF32 forward rel.err {tf32_err:.1e}"


def check_segmenters(device: str, tmp: Path) -> str:
    from PIL import Image
    import io

    from geofidelity_bench.segmentation import get_segmenter

    weights = tiny_segformer(tmp)
    images = [Image.open(io.BytesIO(b)).convert("RGB") for b in photos()[:3]]
    ref = get_segmenter("segformer-cityscapes", weights=weights, device="cpu").shares_of(images)
    got = get_segmenter("segformer-cityscapes", weights=weights, device=device).shares_of(images)
    diff = float(np.abs(got - ref).max())
    assert diff <= 1e-2, f"group shares differ from the CPU by {diff}"
    return f"segformer shares max diff vs CPU {diff:.1e}"


def check_mfp(device: str, tmp: Path) -> str:
    from geofidelity_bench.encoders.dino_vit_keys import DinoViTFeatureExtractor
    from geofidelity_bench.metrics.mfp import MapFeaturePerceptionLoss

    loss_fn = MapFeaturePerceptionLoss(DinoViTFeatureExtractor(str(tiny_vit(tmp)), image_size=32, device=device))
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(2, 3, 32, 32, generator=g), torch.rand(2, 3, 32, 32, generator=g)
    results = {}
    for autocast in (False, True):
        gen = x.clone().to(device).requires_grad_(True)
        dtype = torch.bfloat16 if device.startswith("cuda") or autocast else None
        with torch.autocast(device_type=torch.device(device).type, dtype=dtype, enabled=autocast):
            terms = loss_fn.terms(gen, y.to(device))
            loss = terms["loss"].mean()
        loss.backward()
        assert all(t.dtype == torch.float32 for t in terms.values()), "MFP terms not float32"
        assert torch.isfinite(gen.grad).all(), "non-finite gradient"
        results[autocast] = float(loss.detach())
    diff = abs(results[True] - results[False]) / max(abs(results[False]), 1e-12)
    assert diff <= 5e-2, f"autocast loss differs by {diff:.2e}"
    return f"loss {results[False]:.5f}, under bf16 autocast {results[True]:.5f} (rel.diff {diff:.1e}); grads finite"


def check_vqa(device: str, tmp: Path) -> str:
    raise Skip("no tiny VQA builder in the library (tests/test_geodiv_pipeline.py builds one for the tests)")


def _generate(out: Path, device: str, batch_size: int, cpu_offload: bool | None = None) -> dict[str, str]:
    from geofidelity_bench import load_benchmark
    from geofidelity_bench.generation.runner import run_generation

    class _State:  # one process on the chosen device
        process_index, num_processes, is_main_process = 0, 1, True

        def __init__(self, device):
            self.device = torch.device(device)

    run_generation(load_benchmark("demo"), ["tiny"], ["L0"], out, images_per_block=2, batch_size=batch_size,
                   cpu_offload=cpu_offload, progress=False, log=lambda m: None, state=_State(device))
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*.jpg"))}


def _pixels_diff(a: Path, b: Path) -> int:
    from PIL import Image

    worst = 0
    for p in sorted(a.rglob("*.jpg")):
        x = np.asarray(Image.open(p), dtype=np.int16)
        y = np.asarray(Image.open(b / p.relative_to(a)), dtype=np.int16)
        worst = max(worst, int(np.abs(x - y).max()))
    return worst


def check_generation(device: str, tmp: Path) -> str:
    one, three = _generate(tmp / "b1", device, 1), _generate(tmp / "b3", device, 3)
    assert one == three, "batch 1 and batch 3 files differ"
    if not device.startswith("cuda"):
        return f"{len(one)} images, batch 1 == batch 3 (bit-identical); vs CPU skipped (no CUDA)"
    _generate(tmp / "cpu", "cpu", 1)
    worst = _pixels_diff(tmp / "b1", tmp / "cpu")
    return f"{len(one)} images, batch 1 == batch 3; max pixel difference vs CPU-seeded run {worst}"


def check_offload(device: str, tmp: Path) -> str:
    need_cuda(device)
    resident = _generate(tmp / "resident", device, 1, cpu_offload=False)
    _generate(tmp / "offload", device, 1, cpu_offload=True)
    worst = _pixels_diff(tmp / "resident", tmp / "offload")
    assert worst <= 2, f"offload vs resident differ by {worst}"
    return f"{len(resident)} images, max pixel difference offload vs resident {worst}"


def _cli(*args: str, launcher: list[str] | None = None, timeout: int = 300) -> str:
    cmd = [*(launcher or [sys.executable]), "-m", "geofidelity_bench.cli", *args]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-800:]}"
    return proc.stdout


def check_cli(device: str, tmp: Path) -> str:
    if device.startswith("cuda"):
        _cli("embed", "--encoder", "efficientnet-lite0", "--device", "cuda", "--dtype", "float16",
             "--cache-dir", str(tmp / "cache"), "--out", str(tmp / "emb.parquet"), "--no-progress")
        embed = "embed --device cuda --dtype float16 ok"
    else:
        _cli("embed", "--encoder", "efficientnet-lite0", "--device", "cpu", "--no-cache", "--out",
             str(tmp / "emb.parquet"), "--no-progress")
        embed = "embed --device cpu ok (--device cuda --dtype float16 skipped: no CUDA)"
    _cli("generate", "--model", "tiny", "--conditions", "L0", "--images-per-block", "1", "--out",
         str(tmp / "gen"), "--no-progress")
    return f"{embed}; generate --model tiny ok"


def check_torchrun(device: str, tmp: Path) -> str:
    need_cuda(device, count=2)
    import json
    import socket

    def port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    gen_args = ["generate", "--model", "tiny", "--conditions", "L0", "--images-per-block", "2", "--no-progress"]
    _cli(*gen_args, "--out", str(tmp / "g1"))
    run = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port"]
    _cli(*gen_args, "--out", str(tmp / "g2"), launcher=[*run, str(port())])
    summary = json.loads((tmp / "g2" / "generation_summary.json").read_text())
    devices = sorted(p["device"].split(" ")[0] for p in summary["per_process"])
    assert devices == ["cuda:0", "cuda:1"], f"ranks on {devices}"
    worst = _pixels_diff(tmp / "g1", tmp / "g2")
    emb_args = ["embed", "--encoder", "efficientnet-lite0", "--no-progress"]
    _cli(*emb_args, "--cache-dir", str(tmp / "c1"), "--out", str(tmp / "e1.parquet"))
    _cli(*emb_args, "--cache-dir", str(tmp / "c2"), "--out", str(tmp / "e2.parquet"), launcher=[*run, str(port())])
    import pandas as pd

    e1, e2 = (np.stack(pd.read_parquet(tmp / f)["embedding"].to_numpy()) for f in ("e1.parquet", "e2.parquet"))
    err = rel_err(e2.astype(np.float32), e1.astype(np.float32))
    assert worst == 0 and err <= 1e-4, f"2-GPU runs differ: pixels {worst}, embeddings {err:.1e}"
    return f"generate on {devices}, files equal the 1-process run; embed rel.err {err:.1e}"


CHECKS = [check_encoders, check_tf32, check_segmenters, check_mfp, check_vqa, check_generation, check_offload,
          check_cli, check_torchrun]


def main(argv: list[str]) -> int:
    mode = argv[0] if argv else "cuda"
    if mode not in ("cpu", "cuda"):
        print("usage: python benchmarks/gpu_smoke.py [cpu|cuda]", file=sys.stderr)
        return 2
    if mode == "cuda" and not torch.cuda.is_available():
        print("no CUDA GPU is visible; run `python benchmarks/gpu_smoke.py cpu` for the dry run", file=sys.stderr)
        return 2
    device = "cuda" if mode == "cuda" else "cpu"
    where = torch.cuda.get_device_name(0) if mode == "cuda" else "CPU dry run"
    print(f"gpu_smoke: {where}; torch {torch.__version__}, {torch.cuda.device_count()} GPU(s)")
    failed = 0
    for check in CHECKS:
        label = check.__name__.removeprefix("check_")
        with tempfile.TemporaryDirectory(prefix=f"gpu-smoke-{label}-") as tmp:
            try:
                print(f"{label:<11} ok: {check(device, Path(tmp))}", flush=True)
            except Skip as why:
                print(f"{label:<11} skipped ({why})", flush=True)
            except Exception as err:  # noqa: BLE001 - report every check, then fail
                failed += 1
                print(f"{label:<11} FAIL: {type(err).__name__}: {err}", flush=True)
                traceback.print_exc(file=sys.stderr)
    print(f"gpu_smoke: {len(CHECKS) - failed}/{len(CHECKS)} checks passed or skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
