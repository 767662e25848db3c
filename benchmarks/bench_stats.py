"""Times the bootstrap statistics at paper scale (docs/benchmark.md section 7, Statistics and analyses).

The speed checks that used to be unit tests (wall-clock asserts fail by chance on shared
machines): a paired bootstrap of 672 pairs (112 blocks x 6 methods) with 5,000 resamples, and a
block-bootstrap Spearman interval over the same 672 rows in 112 blocks, plus the import time of
the package (without torch). Each is timed best-of-N with ``time.perf_counter`` and printed next
to the target it used to be asserted against; nothing fails, read the numbers.

    python benchmarks/bench_stats.py [--repeats 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time

import numpy as np

from geofidelity_bench import stats

#: (name, target seconds) of each timed call; the targets are those of the former unit tests.
TARGETS = {"paired_bootstrap": 0.9, "block_bootstrap_spearman": 3.0, "import": 2.0}


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def import_seconds() -> float:
    code = ("import sys, time; t = time.perf_counter(); import geofidelity_bench, geofidelity_bench.encoders; "
            "print(time.perf_counter() - t); assert 'torch' not in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    x, y = rng.normal(size=672), rng.normal(size=672)
    blocks = np.repeat(np.arange(112), 6)
    stats.paired_bootstrap(x, y, n_resamples=200)  # warm-up (scipy imports)
    timings = {
        "paired_bootstrap": best_of(lambda: stats.paired_bootstrap(x, y, n_resamples=5000), args.repeats),
        "block_bootstrap_spearman": best_of(
            lambda: stats.block_bootstrap_ci("spearman", x, y, blocks=blocks, n_resamples=5000), args.repeats),
        "import": min(import_seconds() for _ in range(args.repeats)),
    }
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} CPUs, "
          f"best of {args.repeats}")
    for name, seconds in timings.items():
        verdict = "ok" if seconds < TARGETS[name] else "SLOWER than target"
        print(f"{name:26s} {seconds:7.3f} s   (target < {TARGETS[name]:.1f} s: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
