"""Copy audit keypoint index at paper scale (docs/benchmark.md section 5): build time, memory, query time
and recall of the exact and LSH backends of geofidelity_bench/keypoint_index.py.

The index holds the demo benchmark's 112 photos (real ORB descriptors, 200 per photo spread over a grid
and the pyramid levels, as ``GeometryStage.index()`` computes them: ``copy_geometry.index_descriptors``) and synthetic distractor photos up to ``--photos`` (random
rectangles, lines, circles over a smooth noise texture with sensor noise, 512x384, seeded: ORB finds
corners and edges there as in photos). Queries are edited copies of every 4th demo photo (centre crops
of 50 % and 40 %, a 10-degree rotation, a side-by-side collage with another photo, a 10 % white border),
800 descriptors of the image and 800 of its mirror image. Recall: the true photo is among the 4 with
most votes (and has at least the audit's ``MIN_VOTES``).

    python benchmarks/bench_keypoint_index.py [--photos 9000] [--exact-queries 15]

The exact reference is brute force in chunks (``cv2.BFMatcher`` takes at most 2^18 training rows per
call in OpenCV 5), on ``--exact-queries`` of the queries (each takes seconds at paper scale).
"""

from __future__ import annotations

import argparse
import io
import resource
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from geofidelity_bench import keypoint_index as ki  # noqa: E402
from geofidelity_bench import load_benchmark  # noqa: E402
from geofidelity_bench import near_copies as nc  # noqa: E402
from geofidelity_bench.copy_geometry import (  # noqa: E402
    MIN_VOTES,
    QUERY_INDEX_FEATURES,
    _gray_work,
    features,
    index_descriptors,
)


def synthetic_photo(seed: int, w: int = 512, h: int = 384) -> np.ndarray:
    """A grayscale distractor: shapes and lines over a smooth random texture, with noise."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (int(rng.integers(4, 24)), int(rng.integers(4, 24))), dtype=np.uint8)
    texture = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)
    img = cv2.addWeighted(np.full((h, w), int(rng.integers(40, 216)), np.uint8), 0.5, texture, 0.5, 0)
    for _ in range(int(rng.integers(10, 40))):
        kind, c = int(rng.integers(0, 3)), int(rng.integers(0, 256))
        p, q = tuple(map(int, rng.integers(0, [w, h]))), tuple(map(int, rng.integers(0, [w, h])))
        if kind == 0:
            cv2.rectangle(img, p, q, c, int(rng.choice([-1, 1, 2, 3])))
        elif kind == 1:
            cv2.line(img, p, q, c, int(rng.integers(1, 5)))
        else:
            cv2.circle(img, p, int(rng.integers(5, 80)), c, int(rng.choice([-1, 1, 2])))
    img = np.clip(img + rng.normal(0, rng.uniform(2, 12), (h, w)), 0, 255).astype(np.uint8)
    return cv2.GaussianBlur(img, (3, 3), 0)


def _distractor(seed: int) -> np.ndarray:
    return index_descriptors(synthetic_photo(seed))


def edits(items, j):
    im = Image.open(io.BytesIO(items[j].image_bytes)).convert("RGB")
    w, h = im.size
    other = Image.open(io.BytesIO(items[(j + 1) % len(items)].image_bytes)).convert("RGB").resize((w, h))
    collage = Image.new("RGB", (2 * w, h))
    collage.paste(im, (0, 0))
    collage.paste(other, (w, 0))
    border = Image.new("RGB", (round(w * 1.2), round(h * 1.2)), (255, 255, 255))
    border.paste(im, (round(w * 0.1), round(h * 0.1)))
    return {"crop 50%": im.crop((w // 4, h // 4, w // 4 + w // 2, h // 4 + h // 2)),
            "crop 40%": im.crop((round(w * 0.3), round(h * 0.3), round(w * 0.7), round(h * 0.7))),
            "rotate 10": im.rotate(10, resample=Image.Resampling.BILINEAR),
            "collage": collage, "border 10%": border}


def exact_votes(desc, owners, queries, n_owners, chunk=200_000, ratio=ki.RATIO):
    """Brute-force ratio-test votes over an index of any size (top 2 of every chunk, merged)."""
    votes = np.zeros(n_owners, np.int64)
    bf = cv2.BFMatcher(cv2.NORM_HAMMING)
    for q in queries:
        if q is None or len(q) < 2:
            continue
        dist, idx = [], []
        for s in range(0, len(desc), chunk):
            pairs = bf.knnMatch(q, desc[s:s + chunk], k=2)
            dist.append([[m.distance for m in p] + [np.inf] * (2 - len(p)) for p in pairs])
            idx.append([[m.trainIdx + s for m in p] + [-1] * (2 - len(p)) for p in pairs])
        dist, idx = np.concatenate(dist, 1), np.concatenate(idx, 1)
        order = np.argsort(dist, axis=1, kind="stable")[:, :2]
        d2 = np.take_along_axis(dist, order, 1)
        best = np.take_along_axis(idx, order[:, :1], 1)[:, 0]
        ok = d2[:, 0] < ratio * d2[:, 1]
        np.add.at(votes, owners[best[ok]], 1)
    return votes


def found(votes, j):
    return bool(j in np.argsort(-votes, kind="stable")[:4] and votes[j] >= MIN_VOTES)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=int, default=9000)
    ap.add_argument("--exact-queries", type=int, default=15, help="queries also searched by chunked brute force")
    args = ap.parse_args()

    items = nc.pool_items(load_benchmark("demo"))
    t0 = time.perf_counter()
    descs = [index_descriptors(_gray_work(it.image_bytes)[0]) for it in items]
    with ThreadPoolExecutor(2) as ex:
        descs += list(ex.map(_distractor, range(10_000, 10_000 + args.photos - len(items))))
    owners = np.concatenate([np.full(len(d), j) for j, d in enumerate(descs)])
    desc = np.concatenate(descs)
    n = len(descs)
    print(f"pool: {n} photos ({len(items)} demo), {len(desc):,} descriptors ({desc.nbytes / 2**20:.0f} MiB); "
          f"ORB of the pool {time.perf_counter() - t0:.0f} s")

    queries = []
    for j in range(0, len(items), 4):
        for name, im in edits(items, j).items():
            f = features(im, mirror=True)
            queries.append((j, name, [None if g.desc is None else g.desc[:QUERY_INDEX_FEATURES] for g in (f, f.mirror)]))

    q1600 = np.concatenate(queries[0][2])
    with_exact = ki.EXACT_MAX
    ki.EXACT_MAX = 10 ** 9
    sizes = []
    for size in (3_500, 7_000, 14_000, 28_000):
        small = ki.KeypointIndex(desc[:size], owners[:size])
        t0 = time.perf_counter()
        for _ in range(5):
            small.votes([q1600[:800], q1600[800:]], n)
        sizes.append(f"{size:,}: {200 * (time.perf_counter() - t0):.0f} ms")
    ki.EXACT_MAX = with_exact
    print(f"exact backend, 1,600 query descriptors, by index size: {'; '.join(sizes)} (EXACT_MAX {ki.EXACT_MAX:,})")

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    index = ki.KeypointIndex(desc, owners)
    t0 = time.perf_counter()
    index.votes([desc[:2]], n)  # builds the LSH tables
    build = time.perf_counter() - t0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"LSH ({ki.settings()}): build {build:.1f} s, ru_maxrss {rss0 / 1024:.0f} -> {rss1 / 1024:.0f} MiB")

    lsh, times = {}, []
    for k, (j, name, q) in enumerate(queries):
        t0 = time.perf_counter()
        lsh[k] = index.votes(q, n)
        times.append(time.perf_counter() - t0)
    step = max(1, len(queries) // max(1, args.exact_queries))
    exact, etimes = {}, []
    for k in range(0, len(queries), step)[:args.exact_queries]:
        t0 = time.perf_counter()
        exact[k] = exact_votes(desc, owners, queries[k][2], n)
        etimes.append(time.perf_counter() - t0)

    print(f"query (800 + 800 mirror descriptors): LSH median {1000 * np.median(times):.0f} ms "
          f"(p90 {1000 * np.percentile(times, 90):.0f}); exact brute force median {1000 * np.median(etimes):.0f} ms")
    print(f"\n{'edit':<12}{'queries':>8}{'LSH top-4':>11}{'exact top-4':>13}{'LSH on exact subset':>21}")
    for name in [*edits(items, 0)] + ["all"]:
        ks = [k for k, (_, nm, _) in enumerate(queries) if name in ("all", nm)]
        ek = [k for k in ks if k in exact]
        r_lsh = np.mean([found(lsh[k], queries[k][0]) for k in ks])
        r_ex = np.mean([found(exact[k], queries[k][0]) for k in ek]) if ek else float("nan")
        r_lsh_e = np.mean([found(lsh[k], queries[k][0]) for k in ek]) if ek else float("nan")
        print(f"{name:<12}{len(ks):>8}{r_lsh:>11.3f}{r_ex:>9.3f} ({len(ek):>2}){r_lsh_e:>15.3f}")
    rank_diff = [int(np.sum(lsh[k] > lsh[k][queries[k][0]])) - int(np.sum(exact[k] > exact[k][queries[k][0]]))
                 for k in exact]
    print(f"\ntrue photo's rank, LSH minus exact, on the exact subset: {rank_diff}")


if __name__ == "__main__":
    main()
