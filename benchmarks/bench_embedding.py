"""Times embedding with the parallel image input pipeline against the serial path, in the same run.

Two setups, each run with ``num_workers=0`` (the serial path: decode and preprocess in the main
thread, then the model) and with the default number of worker threads (the cores this process
may use), no cache:

(a) decode-bound: 48 JPEG files of 2048x1536 (noise + gradients, written with PIL to a temporary
    folder) through a tiny random DINOv2 built from a config (as on a GPU, decoding dominates);
(b) the real offline encoder ``efficientnet-lite0`` on the demo benchmark's images.

It checks that both paths give identical embeddings (max abs difference 0) and prints img/s,
the speedup and the number of cores.

(c) measures the model side on (b)'s images, both with the worker threads: each batch read before
the next one is submitted (``compute`` a plain function, as before issue 41) against one batch in
flight (the encoder's ``embed_arrays``, whose twin ``submit_arrays`` queues batch k + 1 before batch
k is read, its inputs pinned by the workers on CUDA). On the CPU the forward is synchronous, so
expect no gain there; on a GPU the difference is the time the GPU waited for the host.

    python benchmarks/bench_embedding.py [--repeats 2] [--num-workers N] [--device cpu|cuda|cuda:N]

``--device`` is where the models run (default ``cpu``; ``cuda`` picks this process's GPU); a device
that is not there is one line on stderr and exit status 2, before any file is written.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from geofidelity_bench.encoders import embed_images, get_encoder
from geofidelity_bench.prefetch import default_num_workers


def write_jpegs(folder: Path, n: int = 48, size=(2048, 1536), seed: int = 0) -> list[Path]:
    rng = np.random.default_rng(seed)
    w, h = size
    ramp = np.linspace(0, 255, w, dtype=np.float32)[None, :, None] * np.ones((h, 1, 1), dtype=np.float32)
    paths = []
    for i in range(n):
        noise = rng.normal(0, 40, (h, w, 3)).astype(np.float32)
        tint = rng.uniform(0.3, 1.0, 3).astype(np.float32)
        arr = np.clip(ramp * tint + noise + np.linspace(0, 60, h)[:, None, None], 0, 255).astype(np.uint8)
        paths.append(folder / f"photo_{i:02d}.jpg")
        Image.fromarray(arr).save(paths[-1], quality=90)
    return paths


def tiny_dinov2(folder: Path, device: str = "cpu"):
    import torch
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(0)
    Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                             image_size=224, patch_size=14)).eval().save_pretrained(folder)
    return get_encoder("dinov2-base", weights=folder, device=device)


def timed(encoder, images, num_workers: int, repeats: int) -> tuple[float, np.ndarray]:
    best, emb = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        emb = embed_images(encoder, images, batch_size=32, progress=False, num_workers=num_workers)
        best = min(best, time.perf_counter() - t0)
    return best, emb


def compare(name: str, encoder, images, workers: int, repeats: int) -> None:
    serial_s, serial = timed(encoder, images, 0, repeats)
    parallel_s, parallel = timed(encoder, images, workers, repeats)
    diff = float(np.abs(serial - parallel).max())
    n = len(images)
    print(f"{name:<44} {n / serial_s:>9.1f} {n / parallel_s:>11.1f} {serial_s / parallel_s:>8.2f}x {diff:>9.1g}")
    if diff != 0:
        sys.exit(f"{name}: the parallel path changed the embeddings (max abs difference {diff})")


def timed_in_flight(encoder, images, num_workers: int, repeats: int, in_flight: bool) -> tuple[float, np.ndarray]:
    """Best time of ``run_cached`` (no cache) with one batch in flight, or waiting for every batch."""
    from geofidelity_bench.cached_batches import run_cached
    from geofidelity_bench.encoders.base import default_names

    compute = encoder.embed_arrays if in_flight else (lambda arrays: encoder.embed_arrays(arrays))
    best, rows = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        rows = run_cached(encoder, images, default_names(images), width=encoder.dim, prepare=encoder.preprocess,
                          compute=compute, batch_size=32, progress=False, desc="", num_workers=num_workers).rows
        best = min(best, time.perf_counter() - t0)
    return best, rows


def compare_in_flight(name: str, encoder, images, workers: int, repeats: int) -> None:
    waiting_s, waiting = timed_in_flight(encoder, images, workers, repeats, in_flight=False)
    flight_s, flight = timed_in_flight(encoder, images, workers, repeats, in_flight=True)
    diff = float(np.abs(waiting - flight).max())
    n = len(images)
    print(f"{name:<44} {n / waiting_s:>9.1f} {n / flight_s:>11.1f} {waiting_s / flight_s:>8.2f}x {diff:>9.1g}")
    if diff != 0:
        sys.exit(f"{name}: keeping a batch in flight changed the embeddings (max abs difference {diff})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="best of N runs per path (default: 2)")
    parser.add_argument("--num-workers", type=int, default=None, help="worker threads (default: the cores)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N")
    args = parser.parse_args(argv)
    from geofidelity_bench.encoders.devices import this_process_device
    from geofidelity_bench.errors import GeoFidelityError

    try:
        device = this_process_device(args.device)
    except GeoFidelityError as err:  # e.g. cuda where no GPU is visible
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    workers = default_num_workers() if args.num_workers is None else args.num_workers
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    import torch

    where = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "CPU"
    print(f"{platform.processor() or platform.machine()}, {cores} cores available, torch threads "
          f"{torch.get_num_threads()}, {workers} worker threads; models on {device} ({where}); best of {args.repeats}")
    print(f"{'setup':<44} {'serial':>9} {'parallel':>11} {'speedup':>9} {'max|diff|':>9}  (img/s)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        paths = write_jpegs(tmp)
        compare("(a) 48 JPEG 2048x1536, tiny random DINOv2", tiny_dinov2(tmp / "dinov2", device), paths, workers,
                args.repeats)
    from geofidelity_bench.benchmark import load_benchmark

    bench = load_benchmark("demo")
    images = [r.image_bytes for r in bench.references] + [w.image_bytes for w in bench.world]
    lite0 = get_encoder("efficientnet-lite0", device=device)
    compare(f"(b) demo, {len(images)} images, efficientnet-lite0", lite0, images, workers, args.repeats)
    print(f"{'model side, with the worker threads':<44} {'waiting':>9} {'in flight':>11} {'speedup':>9} "
          f"{'max|diff|':>9}  (img/s)")
    compare_in_flight("(c) as (b), one batch in flight", lite0, images, workers, args.repeats)


if __name__ == "__main__":
    main()
