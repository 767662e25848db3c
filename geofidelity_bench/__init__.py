"""GeoFidelity-Bench: does a generator draw the named street block, or a generic city?

Importing the package is cheap: the names below load their module on first use, and heavy
modules (pandas, torch models, datasets, evaluate, gradio, diffusers, accelerate) load only
when the function that needs them is called. The README's "Python API" section shows them at work.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    # the benchmark
    "Benchmark": "geofidelity_bench.benchmark",
    "Block": "geofidelity_bench.benchmark",
    "City": "geofidelity_bench.benchmark",
    "ReferenceImage": "geofidelity_bench.benchmark",
    "BenchmarkError": "geofidelity_bench.benchmark",
    "load_benchmark": "geofidelity_bench.benchmark",
    "save_benchmark": "geofidelity_bench.benchmark",
    "demo_path": "geofidelity_bench.benchmark",
    "build_prompt": "geofidelity_bench.prompts",
    # scoring
    "get_encoder": "geofidelity_bench.encoders",
    "read_generated_folder": "geofidelity_bench.evaluation",
    "evaluate_panels": "geofidelity_bench.evaluation",
    # the results folder and the report
    "write_results": "geofidelity_bench.results",
    "run_record": "geofidelity_bench.results",
    "load_results": "geofidelity_bench.results",
    "read_results_csv": "geofidelity_bench.results",
    "build_report": "geofidelity_bench.report",
    "report_from_dirs": "geofidelity_bench.report",
    "compare_results": "geofidelity_bench.compare",
    # the Hub leaderboard (one comparable group of a results repo)
    "load_leaderboard": "geofidelity_bench.hub.results_repo",
    # the evaluate metric
    "load_metric": "geofidelity_bench.metric_module",
    "metric_path": "geofidelity_bench.metric_module",
    # the base of every error a user can cause
    "GeoFidelityError": "geofidelity_bench.errors",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'geofidelity_bench' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
