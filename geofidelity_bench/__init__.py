"""GeoFidelity-Bench: does a generator draw the named street block, or a generic city?

Importing the package is cheap: heavy modules (torch models, datasets, evaluate, gradio,
diffusers, accelerate) load only when the function that needs them is called.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Benchmark": "geofidelity_bench.benchmark",
    "Block": "geofidelity_bench.benchmark",
    "City": "geofidelity_bench.benchmark",
    "ReferenceImage": "geofidelity_bench.benchmark",
    "BenchmarkError": "geofidelity_bench.benchmark",
    "load_benchmark": "geofidelity_bench.benchmark",
    "save_benchmark": "geofidelity_bench.benchmark",
    "demo_path": "geofidelity_bench.benchmark",
    "build_prompt": "geofidelity_bench.prompts",
    "get_encoder": "geofidelity_bench.encoders",
    "metric_path": "geofidelity_bench.metric_module",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'geofidelity_bench' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
