"""Time per image of the copy audit (docs/benchmark.md section 5, Copy audit; issue 42).

Audits N synthetic "generated" images (smooth random colour fields with texture, each distinct, like a
model's outputs that copy nothing) plus edited copies of the demo's photos (one in ten: crops, rotations,
borders, collages) against the demo benchmark's pool, three ways:

* ``hashes only``: the audit before issue 42 (hashes and bytes; no geometric check);
* ``cold``: hashes and the geometric check in a fresh pool, no verdict cache (keypoints of the audited
  images and of their candidate photos computed, the keypoint index built);
* ``warm``: the same images again with the verdict cache of the cold run (what a second ``evaluate`` of the
  same panels does: neither decodes nor matches).

``--no-index`` times the geometric check as it runs on a pool of more than
:data:`~geofidelity_bench.copy_geometry.INDEX_MAX_POOL` photos (paper scale: 7,168 references and the
world pool): only the hash and embedding candidates are verified, so the cost per image does not grow with
the pool. Embeddings are not used here (no encoder), so the candidates are the hash neighbours.

    python benchmarks/bench_copy_audit.py --images 448
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=448)
    p.add_argument("--no-index", action="store_true", help="verify only the hash candidates (paper-scale pools)")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from geofidelity_bench import copy_geometry as cg
    from geofidelity_bench import load_benchmark
    from geofidelity_bench import near_copies as nc
    from geofidelity_bench.images import load_image

    if args.no_index:
        cg.INDEX_MAX_POOL = 0
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
        pool = nc.reference_pool(bench, hash_cache=cache)
        pool_hashes_only = nc.ReferencePool(**{**pool.__dict__, "items": None})
        nc.hash_items(items, cache=cache)  # the hashes are cached for every variant alike
        wall, cpu, recs = audit(pool_hashes_only, cache)
        print(f"hashes only: {wall / len(items) * 1000:.1f} ms per image (cpu {cpu / len(items) * 1000:.1f} ms); "
              f"{sum(r['flagged'] for r in recs)} of {len(items)} flagged ({n_copies} edited copies)")
        wall, cpu, recs = audit(pool, cache)
        print(f"cold (geometric check{'' if not args.no_index else ', no keypoint index'}): "
              f"{wall / len(items) * 1000:.1f} ms per image (cpu {cpu / len(items) * 1000:.1f} ms); "
              f"{sum(r['flagged'] for r in recs)} flagged, {sum(r.get('matched_by') == 'geometry' for r in recs)} "
              "by the geometric check")
        nc._geometry_memo.clear()  # a new process: only the on-disk verdict cache
        pool2 = nc.reference_pool(bench, hash_cache=nc.HashCache(tmp))
        wall, cpu, recs = audit(pool2, nc.HashCache(tmp))
        print(f"warm (verdict cache): {wall / len(items) * 1000:.1f} ms per image (cpu {cpu / len(items) * 1000:.1f} ms); "
              f"{sum(r['flagged'] for r in recs)} flagged")
    print(f"{len(items)} images against {len(pool)} photos on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
