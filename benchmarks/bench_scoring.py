"""Times scoring from cached embeddings at paper scale (``score_embeddings``, docs/benchmark.md sections 5-7).

A seeded synthetic setup the size of the published benchmark (v3.1.0): 112 blocks in 25
cities, galleries of 25-100 raw 768-d float32 embeddings, the four retrieval negatives
assigned by their roles (docs/benchmark.md section 1) (some missing where a city has too few blocks or neighborhoods),
and 6 methods x 6 conditions x 4 images plus the 3 real-image anchors per block (4,368 panels).
No encoder, no images: this measures the metric layer only.

    python benchmarks/bench_scoring.py [--repeats 3] [--seed 0]

Prints the panel count, the best-of-N wall time (``time.perf_counter``), panels per second
and a line to paste in the README.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import time

import numpy as np

from geofidelity_bench.benchmark import Block
from geofidelity_bench.evaluation import ANCHOR_CONDITION, ANCHOR_METHODS, score_embeddings

N_CITIES = 25
N_BLOCKS = 112
DIM = 768
GALLERY_SIZES = (25, 100)
METHODS = ("sdxl", "sd35_large", "flux_dev", "flux_schnell", "pixart_sigma", "hunyuan_dit")
CONDITIONS = ("L0", "L1", "L2", "GPS_ONLY", "C_WRONG_STREET", "C_SHUFFLED_NEIGHBORHOOD")
PANEL_SIZE = 4


def _block(block_id: str, city: str, country: str, side: str, neighborhood: str, **negs) -> Block:
    return Block(
        block_id=block_id, city=city, country=country, driving_side=side, stratum="residential",
        way_id=None, street_name=f"Street {block_id}", neighborhood=neighborhood,
        highway_tag="residential", length_m=100.0, polyline=((0.0, 0.0), (0.001, 0.0)),
        centroid=(0.0005, 0.0), bbox=(0.0, 0.0, 0.001, 0.0), **negs,
    )


def build_setup(seed: int = 0):
    """(blocks, galleries, panels) of the paper's size, deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    pick = random.Random(seed)
    # 112 blocks over 25 cities: two cities with a single block (no same-city negatives),
    # the rest 4-5 blocks each; 2 neighborhoods per city.
    counts = [1, 1] + [4] * 23
    for i in range(N_BLOCKS - sum(counts)):
        counts[2 + i] += 1
    cities = []
    for c, count in enumerate(counts):
        side = "L" if c % 5 == 0 else "R"
        cities.append((f"city{c:02d}", f"C{c % 12:01d}", side, count))
    plan = []  # (block_id, city, country, side, neighborhood)
    for city, country, side, count in cities:
        for k in range(count):
            plan.append((f"{city}_b{k}", city, country, side, f"{city}_n{k % 2}"))

    blocks = []
    for bid, city, country, side, hood in plan:
        same_hood = [p[0] for p in plan if p[4] == hood and p[0] != bid]
        same_city = [p[0] for p in plan if p[1] == city and p[4] != hood]
        same_side = [p[0] for p in plan if p[3] == side and p[1] != city]
        other = [p[0] for p in plan if p[1] != city]
        negs = {
            "neg_same_neighborhood": pick.choice(same_hood) if same_hood else None,
            "neg_same_city": pick.choice(same_city) if same_city else None,
            "neg_same_driving_side": pick.choice(same_side) if same_side else None,
            "neg_random_city": pick.choice(other),
        }
        blocks.append(_block(bid, city, country, side, hood, **negs))

    # DINOv2-like raw embeddings: a shared offset, a city direction, a block direction, noise.
    base = rng.normal(0.0, 1.0, DIM)
    city_dir = {city: rng.normal(0.0, 0.6, DIM) for city, *_ in cities}
    galleries, heldout, centers = {}, {}, {}
    for bid, city, *_ in plan:
        center = base + city_dir[city] + rng.normal(0.0, 0.4, DIM)
        centers[bid] = center
        m = int(rng.integers(GALLERY_SIZES[0], GALLERY_SIZES[1] + 1))
        galleries[bid] = (center + rng.normal(0.0, 1.0, (m, DIM))).astype(np.float32)
        heldout[bid] = (center + rng.normal(0.0, 1.0, (PANEL_SIZE, DIM))).astype(np.float32)

    panels = {}
    ids = [p[0] for p in plan]
    for mi, method in enumerate(METHODS):
        for ci, condition in enumerate(CONDITIONS):
            fidelity = 0.15 * (mi + 1) / len(METHODS) + 0.05 * ci / len(CONDITIONS)
            for bid in ids:
                center = base + fidelity * (centers[bid] - base)
                panels[(method, condition, bid)] = (
                    center + rng.normal(0.0, 0.8, (PANEL_SIZE, DIM))
                ).astype(np.float32)
    by_country: dict[str, list[str]] = {}
    for b in blocks:
        by_country.setdefault(b.country, []).append(b.block_id)
    for b in blocks:
        bid = b.block_id
        panels[(ANCHOR_METHODS[0], ANCHOR_CONDITION, bid)] = heldout[bid]
        for method, pool_ids in (
            (ANCHOR_METHODS[1], [o for o in by_country[b.country] if o != bid] or [o for o in ids if o != bid]),
            (ANCHOR_METHODS[2], [o for o in ids if o != bid]),
        ):
            pool = np.concatenate([galleries[o] for o in pool_ids])
            panels[(method, ANCHOR_CONDITION, bid)] = pool[rng.choice(len(pool), PANEL_SIZE, replace=False)]
    return blocks, galleries, panels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs; the best is reported")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    blocks, galleries, panels = build_setup(args.seed)
    sizes = [g.shape[0] for g in galleries.values()]
    print(
        f"setup: {len(blocks)} blocks, {len({b.city for b in blocks})} cities, galleries "
        f"{min(sizes)}-{max(sizes)} x {DIM} (mean {np.mean(sizes):.1f}), {len(panels)} panels"
    )
    times = []
    for _ in range(max(1, args.repeats)):
        start = time.perf_counter()
        df = score_embeddings(blocks, galleries, panels, encoder_name="synthetic")
        times.append(time.perf_counter() - start)
    best = min(times)
    assert len(df) == len(panels)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"panels: {len(panels)}")
    print(f"seconds (best of {len(times)}): {best:.3f}  [all: {', '.join(f'{t:.3f}' for t in times)}]")
    print(f"panels/s: {len(panels) / best:,.0f}")
    print(
        f"README: scoring {len(panels):,} panels from cached embeddings (112 blocks, 768-d) takes "
        f"{best:.2f} s on {cpus} CPU core(s) ({len(panels) / best:,.0f} panels/s; numpy "
        f"{np.__version__}, Python {platform.python_version()}; `python benchmarks/bench_scoring.py`)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
