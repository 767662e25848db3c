"""Generating the panels of a benchmark: model registry, seeds, distributed runner, manifest, Hub push.

Importing this package is cheap (torch, diffusers and accelerate load when a run starts).

Models (docs/benchmark.md section 3, Generation; details, GPU memory and gating in :mod:`.registry`): ``sdxl``,
``sd35_large``, ``flux_dev``, ``flux_schnell``, ``pixart_sigma``, ``hunyuan_dit``, plus ``tiny``,
a random-weight Stable Diffusion pipeline built offline for tests and CPU smoke runs.

CPU smoke run (offline, well under a minute on two cores)::

    geofidelity-bench generate --model tiny --conditions L0 L1 GPS_ONLY --images-per-block 2 --out gen_tiny

One GPU (the paper's grid for one model: 6 conditions x blocks x 4 images)::

    geofidelity-bench generate --model sdxl --benchmark user/geofidelity-bench --out gen

Several GPUs on one machine: the same command under ``accelerate launch`` (or ``torchrun``);
work units are split across processes and the files are identical to a one-GPU run::

    accelerate launch --multi_gpu --num_processes 8 --mixed_precision no \\
        -m geofidelity_bench.cli generate --model flux_dev --no-cpu-offload --out gen
    torchrun --nproc_per_node 8 -m geofidelity_bench.cli generate --model sdxl --out gen

Re-running a command resumes it (finished images are skipped, missing or corrupt ones redone).
Publish as the ``generations`` config of a dataset repo (token from ``HF_TOKEN`` / ``hf auth login``)::

    geofidelity-bench push-generations gen --repo-id user/geofidelity-bench
    geofidelity-bench generate --model sdxl --out gen --push-to-hub user/geofidelity-bench

Python::

    from geofidelity_bench import load_benchmark
    from geofidelity_bench.generation import run_generation, register_generator

    register_generator("mine", weights="org/my-diffusers-pipeline", steps=25, guidance=4.0, dtype="bf16")
    run_generation(load_benchmark("demo"), ["mine"], ["L0", "L1"], "gen")
"""

from __future__ import annotations

from .registry import (
    BUILTIN_GENERATORS,
    PAPER_GENERATORS,
    REGISTRY,
    GeneratorError,
    GeneratorRegistry,
    GeneratorSpec,
    get_generator,
    list_generators,
    register_generator,
    resolve_generator,
)
from .seeds import image_seed, torch_generator

_LAZY = {
    "run_generation": "runner",
    "plan_units": "runner",
    "WorkUnit": "runner",
    "Refusal": "runner",
    "GenerationSummary": "runner",
    "load_generator": "backends",
    "ImageRequest": "backends",
    "build_tiny_pipeline": "tiny",
    "merge_manifest": "manifest",
    "load_manifest": "manifest",
    "panel_relpath": "manifest",
    "encode_panel": "manifest",
    "push_generations": "geofidelity_bench.hub",
}

__all__ = [
    "BUILTIN_GENERATORS",
    "PAPER_GENERATORS",
    "REGISTRY",
    "GeneratorError",
    "GeneratorRegistry",
    "GeneratorSpec",
    "get_generator",
    "image_seed",
    "list_generators",
    "register_generator",
    "resolve_generator",
    "torch_generator",
    *sorted(_LAZY),
]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'geofidelity_bench.generation' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module if "." in module else f"{__name__}.{module}"), name)
