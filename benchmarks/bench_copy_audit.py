"""Time per image of the copy audit (docs/benchmark.md section 5, Copy audit; issue 42).

Audits N synthetic "generated" images (smooth random colour fields with texture, each distinct, like a
model's outputs that copy nothing) plus edited copies of the demo's photos (one in ten: crops, rotations,
borders, collages) against the demo benchmark's pool, three ways:

* ``hashes only``: the audit before issue 42 (hashes and bytes; no geometric check);
* ``cold``: hashes and the geometric check in a fresh pool, no verdict cache (keypoints of the audited
  images and of their candidate photos computed, the keypoint index built);
* ``warm``: the same images again with the verdict cache of the cold run (what a second ``evaluate`` of the
  same panels does: neither decodes nor matches).

``--pool-size N`` adds synthetic distractor photos (shapes over noise textures, from
``bench_keypoint_index.synthetic_photo``) to the demo's pool until it holds N photos (paper scale: 7,168
references and the world pool, about 9,000): the keypoint index is then searched by LSH, and the
first (cold) run also builds it (timed apart) and keeps it beside the verdicts. Embeddings are not used
here (no encoder), so the candidates are the hash neighbours and the index's.

    python benchmarks/bench_copy_audit.py --images 448
    python benchmarks/bench_copy_audit.py --images 448 --pool-size 9000
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import tempfile
import time

import numpy as np
from PIL import Image, ImageFilter, ImageOps


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.convert("RGB").save(buf, "PNG")
    return buf.getvalue()


def synthetic(k: int, size=(512, 512)) -> bytes:
    rng = np.random.default_rng(1000 + k)
    low = rng.normal(128, 60, (size[1] // 16, size[0] // 16, 3))
    im = Image.fromarray(np.clip(low, 0, 255).astype(np.uint8)).resize(size, Image.Resampling.BICUBIC)
    a = np.asarray(im, np.float32) + rng.normal(0, 18, (size[1], size[0], 3))
    return _png(Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(0.8)))


def edited(photo: Image.Image, other: Image.Image, k: int) -> bytes:
    w, h = photo.size
    kind = k % 4
    if kind == 0:
        im = photo.crop((w // 4, h // 4, w * 3 // 4, h * 3 // 4))
    elif kind == 1:
        im = photo.rotate(12, expand=True)
    elif kind == 2:
        im = ImageOps.expand(photo, border=50, fill=(255, 255, 255))
    else:
        im = Image.new("RGB", (2 * w, h))
        im.paste(other.resize((w, h)), (0, 0))
        im.paste(photo, (w, 0))
    return _png(im)


def with_distractors(pool, size: int):
    """``pool`` grown to ``size`` photos with synthetic distractors of the world pool (zero hash banks: they
    are never hash neighbours; their keypoints are in the index)."""
    import hashlib
    from types import SimpleNamespace

    from bench_keypoint_index import synthetic_photo

    from geofidelity_bench import near_copies as nc

    extra = max(0, size - len(pool))
    if not extra:
        return pool
    items = [SimpleNamespace(image_bytes=_png(Image.fromarray(synthetic_photo(50_000 + k)))) for k in range(extra)]
    return nc.ReferencePool(
        ids=[*pool.ids, *(f"distractor_{k}" for k in range(extra))], blocks=[*pool.blocks, *[nc.WORLD] * extra],
        heldout=[*pool.heldout, *[False] * extra],
        shas=[*pool.shas, *(hashlib.sha256(x.image_bytes).hexdigest() for x in items)], embeddings=None,
        banks=np.concatenate([pool.banks, np.zeros((extra, *pool.banks.shape[1:]), pool.banks.dtype)]),
        items=[*pool.items, *items])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=448)
    p.add_argument("--pool-size", type=int, default=0, help="photos in the pool, synthetic distractors added (0: the demo's)")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from geofidelity_bench import copy_geometry as cg
    from geofidelity_bench import load_benchmark
    from geofidelity_bench import near_copies as nc
    from geofidelity_bench.images import load_image

    bench = load_benchmark("demo")
    photos = [load_image(x.image_bytes) for x in nc.pool_items(bench)]
    n_copies = args.images // 10
    items = [synthetic(k) for k in range(args.images - n_copies)]
    items += [edited(photos[(7 * k) % len(photos)], photos[(7 * k + 3) % len(photos)], k) for k in range(n_copies)]
    key = ("bench", "L0", "b")

    def audit(pool, cache):
        t0, c0 = time.perf_counter(), time.process_time()
        recs = nc.audit_panels(pool, {key: items}, {key: np.zeros((len(items), 0))}, hash_cache=cache)
        return time.perf_counter() - t0, time.process_time() - c0, recs

    with tempfile.TemporaryDirectory() as tmp:
        cache = nc.HashCache(tmp)
        pool = with_distractors(nc.reference_pool(bench, hash_cache=cache), args.pool_size)
        if args.pool_size:
            t0 = time.perf_counter()
            stage = cg.GeometryStage(pool, index_dir=nc.GeometryCache.beside(cache).dir)
            pool._geometry_stage = stage
            index = stage.index()
            print(f"keypoint index of {len(pool)} photos ({len(index):,} descriptors, {index.backend}): built and "
                  f"saved in {time.perf_counter() - t0:.0f} s (once per pool: the next run reads it)")
        pool_hashes_only = dataclasses.replace(pool, items=None)
        nc.hash_items(items, cache=cache)  # the hashes are cached for every variant alike
        wall, cpu, recs = audit(pool_hashes_only, cache)
        print(f"hashes only: {wall / len(items) * 1000:.1f} ms per image (cpu {cpu / len(items) * 1000:.1f} ms); "
              f"{sum(r['flagged'] for r in recs)} of {len(items)} flagged ({n_copies} edited copies)")
        wall, cpu, recs = audit(pool, cache)
        print(f"cold (geometric check, {len(pool)} photos): "
              f"{wall / len(items) * 1000:.1f} ms per image (cpu {cpu / len(items) * 1000:.1f} ms); "
              f"{sum(r['flagged'] for r in recs)} flagged, {sum(r.get('matched_by') == 'geometry' for r in recs)} "
              "by the geometric check")
        nc._geometry_memo.clear()  # a new process: only the on-disk verdict cache
        pool2 = with_distractors(nc.reference_pool(bench, hash_cache=nc.HashCache(tmp)), args.pool_size)
        wall, cpu, recs = audit(pool2, nc.HashCache(tmp))
        print(f"warm (verdict cache): {wall / len(items) * 1000:.1f} ms per image (cpu {cpu / len(items) * 1000:.1f} ms); "
              f"{sum(r['flagged'] for r in recs)} flagged")
    print(f"{len(items)} images against {len(pool)} photos on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
