"""Calibrates the copy audit's thresholds on a benchmark (docs/benchmark.md section 5, Copy audit).

Prints the hash distance and cosine of (a) every held-out photo against its own block's gallery and
(b) every other pair of distinct photos of the benchmark (references of all blocks and the world
pool), next to (c) true copies: the demo's ``sanity_augmented_heldout`` images, an independent list
of augmentations of the benchmark's photos (resize, JPEG/WebP/PNG, 2-5 % crops, borders,
brightness and colour 0.9-1.1, flip, and combinations) and, when given, full-resolution originals
of reference photos (``--originals REF_ID=PATH ...``). The pinned thresholds
(:data:`~geofidelity_bench.near_copies.HASH_DISTANCE_MAX`, ``COPY_COSINE``) must separate (a, b) from (c).

    python scripts/calibrate_copy_audit.py --benchmark demo \
        --originals berlin_am_lustgarten__01=../shared/real-data/berlin/01.jpg ...
"""

from __future__ import annotations

import argparse
import io
import itertools

import numpy as np
from PIL import Image, ImageEnhance, ImageOps


def _encode(im, fmt, **kw):
    buf = io.BytesIO()
    im.save(buf, format=fmt, **kw)
    return buf.getvalue()


def _crop(im, f, where):
    w, h = im.size
    cw, ch = round(w * (1 - f)), round(h * (1 - f))
    x0 = {"tl": 0, "c": (w - cw) // 2, "br": w - cw}[where]
    y0 = {"tl": 0, "c": (h - ch) // 2, "br": h - ch}[where]
    return im.crop((x0, y0, x0 + cw, y0 + ch))


def _border(im, f, color):
    return ImageOps.expand(im, border=max(1, round(max(im.size) * f)), fill=color)


#: An augmentation list written independently of the demo's ``augmented`` (which crops 92-98 % and
#: jitters brightness/contrast by 6 %): each returns encoded bytes.
AUGMENTATIONS = {
    "resize_half": lambda im: _encode(im.resize((im.width // 2, im.height // 2)), "PNG"),
    "resize_quarter": lambda im: _encode(im.resize((im.width // 4, im.height // 4)), "PNG"),
    "resize_double_jpeg": lambda im: _encode(im.resize((im.width * 2, im.height * 2)), "JPEG", quality=85),
    "jpeg_q50": lambda im: _encode(im, "JPEG", quality=50),
    "webp_q60": lambda im: _encode(im, "WEBP", quality=60),
    "png": lambda im: _encode(im, "PNG"),
    "crop2_topleft": lambda im: _encode(_crop(im, 0.02, "tl"), "PNG"),
    "crop5_center": lambda im: _encode(_crop(im, 0.05, "c"), "PNG"),
    "crop5_bottomright": lambda im: _encode(_crop(im, 0.05, "br"), "JPEG", quality=90),
    "border3_black": lambda im: _encode(_border(im, 0.03, "black"), "PNG"),
    "border2_white": lambda im: _encode(_border(im, 0.02, "white"), "JPEG", quality=90),
    "brightness_0.9": lambda im: _encode(ImageEnhance.Brightness(im).enhance(0.9), "PNG"),
    "brightness_1.1": lambda im: _encode(ImageEnhance.Brightness(im).enhance(1.1), "PNG"),
    "saturation_0.9": lambda im: _encode(ImageEnhance.Color(im).enhance(0.9), "PNG"),
    "contrast_1.1": lambda im: _encode(ImageEnhance.Contrast(im).enhance(1.1), "PNG"),
    "flip": lambda im: _encode(ImageOps.mirror(im), "PNG"),
    "flip_crop3_bright_jpeg": lambda im: _encode(
        ImageEnhance.Brightness(_crop(ImageOps.mirror(im), 0.03, "br")).enhance(1.08), "JPEG", quality=70),
    "resize_crop4_border_webp": lambda im: _encode(
        _border(_crop(im.resize((im.width * 3 // 4, im.height * 3 // 4)), 0.04, "tl"), 0.02, "gray"), "WEBP", quality=70),
}


def augmented_copies(image_bytes: bytes) -> dict[str, bytes]:
    from geofidelity_bench.images import load_image

    im = load_image(image_bytes)
    return {name: f(im) for name, f in AUGMENTATIONS.items()}


def main() -> None:
    from geofidelity_bench import near_copies as nc
    from geofidelity_bench.benchmark import load_benchmark
    from geofidelity_bench.evaluation import sanity_panels

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--benchmark", default="demo")
    p.add_argument("--originals", nargs="*", default=[], metavar="REF_ID=PATH")
    p.add_argument("--every", type=int, default=3, help="augment every N-th photo (default 3)")
    args = p.parse_args()
    bench = load_benchmark(args.benchmark)
    pool = nc.reference_pool(bench)
    pos = {rid: j for j, rid in enumerate(pool.ids)}
    n = len(pool)
    dist = np.full((n, n), 10 ** 6)
    for i, j in itertools.combinations(range(n), 2):
        dist[i, j] = dist[j, i] = int(nc.aligned_distance(pool.banks[i][None], pool.banks[j][None])[0])
    own = []
    for b in bench.block_ids:
        for h in bench.heldout(b):
            for g in bench.gallery(b):
                own.append((int(dist[pos[h.reference_id], pos[g.reference_id]]), h.reference_id, g.reference_id))
    own.sort()
    print(f"(a) held-out vs own gallery: {len(own)} pairs, hash distance min {own[0][0]} "
          f"({own[0][1]} ~ {own[0][2]}), quartiles {np.percentile([o[0] for o in own], [25, 50, 75]).tolist()}")
    iu = np.triu_indices(n, 1)
    d_all = dist[iu]
    k = int(np.argmin(d_all))
    print(f"(b) all {len(d_all)} distinct pairs (references and world pool): hash distance min {d_all[k]} "
          f"({pool.ids[iu[0][k]]} ~ {pool.ids[iu[1][k]]}), 1st percentile {np.percentile(d_all, 1):.0f}, "
          f"median {np.median(d_all):.0f}")
    copies = []
    for key, items in sanity_panels(bench).items():
        if key[0] == "sanity_augmented_heldout":
            held = bench.heldout(key[2])
            for i, data in enumerate(items):
                copies.append((f"sanity {key[2]}/{i}", data, held[i % len(held)].reference_id))
    by_id = {x.reference_id if hasattr(x, "reference_id") else x.image_id: x for x in nc.pool_items(bench)}
    for rid in pool.ids[:: args.every]:
        for name, data in augmented_copies(by_id[rid].image_bytes).items():
            copies.append((f"{rid}:{name}", data, rid))
    for spec in args.originals:
        rid, path = spec.split("=", 1)
        copies.append((f"original {path}", open(path, "rb").read(), rid))
    banks, _ = nc.hash_items([c[1] for c in copies])
    d_copy = [int(nc.aligned_distance(b[None], pool.banks[pos[c[2]]][None])[0]) for b, c in zip(banks, copies)]
    order = np.argsort(d_copy)[::-1]
    print(f"(c) {len(copies)} copies: hash distance max {d_copy[order[0]]} ({copies[order[0]][0]}); "
          f"largest five {[(d_copy[i], copies[i][0]) for i in order[:5]]}")
    print(f"pinned: HASH_DISTANCE_MAX = {nc.HASH_DISTANCE_MAX}: "
          f"{'separates' if max(d_copy) <= nc.HASH_DISTANCE_MAX < min(own[0][0], d_all.min()) else 'DOES NOT separate'} "
          "distinct photos from copies")


if __name__ == "__main__":
    main()
