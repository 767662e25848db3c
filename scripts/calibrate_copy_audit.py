"""Calibrates the copy audit's thresholds on a benchmark (docs/benchmark.md section 5, Copy audit).

Prints the hash distance and cosine of (a) every held-out photo against its own block's gallery and
(b) every other pair of distinct photos of the benchmark (references of all blocks and the world
pool), next to (c) true copies: the demo's ``sanity_augmented_heldout`` images, an independent list
of augmentations of the benchmark's photos (resize, JPEG/WebP/PNG, 2-5 % crops, borders,
brightness and colour 0.9-1.1, flip, and combinations) and, when given, full-resolution originals
of reference photos (``--originals REF_ID=PATH ...``). The pinned thresholds
(:data:`~geofidelity_bench.near_copies.HASH_DISTANCE_MAX`, ``COPY_COSINE``) must separate (a, b) from (c).

The geometric check (issue 42, :mod:`geofidelity_bench.copy_geometry`) is calibrated after it: (d) the
median tile correlation (``local_ncc``) of every pair of distinct photos of the benchmark that its
keypoints align, each pair both ways round and with the audit's keypoint counts (the submitted image's
:data:`~geofidelity_bench.copy_geometry.ORB_FEATURES`, the photo's ``PHOTO_FEATURES``), and, with
``--real-data DIR``, of every pair of distinct photos of one folder of the full-resolution originals
(Lund's street walked end to end, the three Berlin photos, Arezzo), against
(e) the edited copies of :data:`EDITS` (crops to 40 %, rotations to 20 degrees with black corners, flips,
borders and padding, collages of two to four photos, resize, JPEG quality 20, colour, contrast, blur,
noise and combinations) of every ``--every``-th photo, run through the whole audit
(:func:`~geofidelity_bench.near_copies.audit_panels`, without embeddings: hashes and local features
alone). ``LOCAL_NCC_MIN`` must separate (d) from (e); the misses of (e) are listed by edit.

    python scripts/calibrate_copy_audit.py --benchmark demo \
        --originals berlin_am_lustgarten__01=../shared/real-data/berlin/01.jpg ... \
        --real-data ../shared/real-data
"""

from __future__ import annotations

import argparse
import io
import itertools

import numpy as np
from PIL import Image, ImageEnhance, ImageFilter, ImageOps


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


def _jpeg_im(im, q):
    return Image.open(io.BytesIO(_encode(im.convert("RGB"), "JPEG", quality=q))).convert("RGB")


def _cropf(im, f, cx=0.5, cy=0.5):
    w, h = im.size
    cw, ch = round(w * f), round(h * f)
    x0, y0 = round((w - cw) * cx), round((h - ch) * cy)
    return im.crop((x0, y0, x0 + cw, y0 + ch))


def _rot(im, deg, expand=False):
    return im.rotate(deg, resample=Image.Resampling.BICUBIC, expand=expand, fillcolor=(0, 0, 0))


def _noise(im, sd):
    a = np.asarray(im.convert("RGB"), np.float32) + np.random.default_rng(0).normal(0, sd, (im.height, im.width, 3))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def _collage(ims, layout):
    if layout == "h2":  # side by side, each resized to one height
        parts = [i.resize((round(i.width * 384 / i.height), 384)) for i in ims[:2]]
        out = Image.new("RGB", (sum(p.width for p in parts), 384))
        out.paste(parts[0], (0, 0))
        out.paste(parts[1], (parts[0].width, 0))
        return out
    if layout == "v2":  # stacked
        parts = [i.resize((400, round(i.height * 400 / i.width))) for i in ims[:2]]
        out = Image.new("RGB", (400, sum(p.height for p in parts)))
        out.paste(parts[0], (0, 0))
        out.paste(parts[1], (0, parts[0].height))
        return out
    if layout == "g3":  # one large, two small on white
        out = Image.new("RGB", (768, 384), (255, 255, 255))
        out.paste(ims[0].resize((512, 384)), (0, 0))
        out.paste(ims[1].resize((256, 192)), (512, 0))
        out.paste(ims[2].resize((256, 192)), (512, 192))
        return out
    out = Image.new("RGB", (640, 480), (30, 30, 30))  # "g4": a 2 x 2 grid with gaps, aspect squeezed
    for k, i in enumerate(ims[:4]):
        out.paste(i.resize((310, 230)), (5 + (k % 2) * 320, 5 + (k // 2) * 240))
    return out


#: Edited copies for the geometric check: name -> (function(photo, three other photos) -> image, where the
#: photo sits in a collage (None: it is the whole image)). Written for issue 42, independently of the tests.
EDITS = {
    "crop70_centre": lambda im, o: _cropf(im, 0.7),
    "crop50_centre": lambda im, o: _cropf(im, 0.5),
    "crop40_centre": lambda im, o: _cropf(im, 0.4),
    "crop40_offcentre": lambda im, o: _cropf(im, 0.4, 0.3, 0.6),
    "rotate5": lambda im, o: _rot(im, 5),
    "rotate15": lambda im, o: _rot(im, 15),
    "rotate20_expand": lambda im, o: _rot(im, -20, True),
    "flip": lambda im, o: ImageOps.mirror(im),
    "flip_crop60_offcentre": lambda im, o: _cropf(ImageOps.mirror(im), 0.6, 0.2, 0.7),
    "border10_white": lambda im, o: _border(im, 0.10, (255, 255, 255)),
    "border25_red": lambda im, o: _border(im, 0.25, (200, 30, 30)),
    "pad_square_gray": lambda im, o: ImageOps.pad(im, (max(im.size),) * 2, color=(128, 128, 128)),
    "resize_quarter": lambda im, o: im.resize((im.width // 4, im.height // 4)),
    "resize_x3": lambda im, o: im.resize((im.width * 3, im.height * 3)),
    "jpeg_q20": lambda im, o: _jpeg_im(im, 20),
    "grayscale_contrast": lambda im, o: ImageEnhance.Contrast(ImageOps.grayscale(im).convert("RGB")).enhance(1.6),
    "colour_brightness": lambda im, o: ImageEnhance.Color(ImageEnhance.Brightness(im).enhance(0.7)).enhance(1.8),
    "blur1.5": lambda im, o: im.filter(ImageFilter.GaussianBlur(1.5)),
    "noise12": lambda im, o: _noise(im, 12),
    "collage2_side_by_side": lambda im, o: _collage([im, o[0]], "h2"),
    "collage2_stacked_second": lambda im, o: _collage([o[0], im], "v2"),
    "collage3_small_tile": lambda im, o: _collage([o[0], im, o[1]], "g3"),
    "collage4_grid": lambda im, o: _collage([o[0], o[1], im, o[2]], "g4"),
    "flip_rotate10_crop60_jpeg30": lambda im, o: _jpeg_im(_cropf(_rot(ImageOps.mirror(im), 10), 0.6), 30),
    "crop50_desaturate_border": lambda im, o: _border(ImageEnhance.Color(_cropf(im, 0.5, 0.3, 0.6)).enhance(0.3),
                                                      0.08, (0, 120, 255)),
    "collage2_rotate12_noise_jpeg20": lambda im, o: _jpeg_im(_noise(_collage([_rot(im, 12), o[0]], "h2"), 8), 20),
    "crop45_blur_noise_contrast": lambda im, o: _noise(ImageEnhance.Contrast(
        _cropf(im, 0.45, 0.6, 0.4).filter(ImageFilter.GaussianBlur(1.0))).enhance(0.7), 6),
}


def calibrate_geometry(bench, pool, every: int, real_data: str | None, pairs: bool = True) -> None:
    """(d) and (e) of the module docstring, printed."""
    import glob
    import os
    import time

    from geofidelity_bench import copy_geometry as cg
    from geofidelity_bench import near_copies as nc
    from geofidelity_bench.images import load_image

    stage = cg.GeometryStage(pool)
    n = len(pool)
    worst = (0.0, None, None)
    t0 = time.perf_counter()
    # as the audit compares: the submitted image's keypoints (and its mirror's) against the photo's, each
    # pair both ways round (either photo may be the one submitted)
    feats = [cg.features(load_image(x.image_bytes), mirror=True) for x in pool.items] if pairs else []
    aligned = 0
    for i, j in itertools.permutations(range(n), 2) if pairs else ():
        v = cg.verify(feats[i], stage.photo(j))
        if v is None:
            continue
        aligned += 1
        if v["local_ncc"] > worst[0]:
            worst = (v["local_ncc"], pool.ids[i], pool.ids[j])
    held = {(h.reference_id, g.reference_id) for b in bench.block_ids for h in bench.heldout(b) for g in bench.gallery(b)}
    print("(d) skipped (--skip-pairs)" if not pairs else f"(d) geometric check, all {n * (n - 1) // 2} distinct pairs of the benchmark ({len(held)} held-out/gallery), "
          f"each both ways: {aligned} of {n * (n - 1)} aligned by keypoints, highest local_ncc {worst[0]:.3f} "
          f"({worst[1]} submitted ~ photo {worst[2]}); {time.perf_counter() - t0:.0f} s")
    if real_data and pairs:
        for folder in sorted(glob.glob(os.path.join(real_data, "*"))):
            files = sorted(glob.glob(os.path.join(folder, "*.jpg")) + glob.glob(os.path.join(folder, "*.JPG")))
            if len(files) < 2 or len(files) > 40:
                continue
            ims = [load_image(open(f, "rb").read()) for f in files]
            qs = [cg.features(im, mirror=True) for im in ims]
            ps = [cg.features(im, n=cg.PHOTO_FEATURES) for im in ims]
            best, pair = 0.0, None
            for a, b in itertools.permutations(range(len(files)), 2):
                v = cg.verify(qs[a], ps[b])
                if v is not None and v["local_ncc"] > best:
                    best, pair = v["local_ncc"], (os.path.basename(files[a]), os.path.basename(files[b]))
            print(f"(d) originals {os.path.basename(folder)}/: {len(files)} photos, highest local_ncc of a distinct pair "
                  f"(both ways) {best:.3f} {pair or ''}")
            if pair is not None and best > worst[0]:
                worst = (best, *pair)
    images = [load_image(x.image_bytes) for x in pool.items]
    panels, truth = {}, {}
    for k in range(0, n, every):
        others = [images[(k + d) % n] for d in (7, 19, 31)]
        inside = {pool.ids[k], *(pool.ids[(k + d) % n] for d in (7, 19, 31))}
        for name, edit in EDITS.items():
            panels.setdefault(("calibration", name, "edited"), []).append(_encode(edit(images[k], others).convert("RGB"), "PNG"))
            truth.setdefault(name, []).append(inside if name.startswith("collage") else {pool.ids[k]})
    t0 = time.perf_counter()
    recs = nc.audit_panels(pool, panels, {k: np.zeros((len(v), 0)) for k, v in panels.items()})
    dt = time.perf_counter() - t0
    print(f"(e) {len(recs)} edited copies through the audit (hashes + local features, no embeddings): "
          f"{dt / max(1, len(recs)):.2f} s per image")
    lowest = []
    for name in EDITS:
        rs = [r for r in recs if r["condition"] == name]
        ok = [r["flagged"] and r["reference_id"] in t for r, t in zip(rs, truth[name])]
        nccs = [r["local_ncc"] for r in rs if r.get("matched_by") == "geometry"]
        lowest += nccs
        print(f"    {name:32s} flagged {sum(ok):3d} of {len(rs)}"
              + (f", lowest local_ncc {min(nccs):.3f}" if nccs else "")
              + (f"; missed: {', '.join(sorted({pool.ids[k * every] for k, o in enumerate(ok) if not o}))}"
                 if not all(ok) else ""))
    if lowest:
        print(f"pinned: LOCAL_NCC_MIN = {cg.LOCAL_NCC_MIN}: distinct photos <= {worst[0]:.3f} (margin "
              f"{cg.LOCAL_NCC_MIN - worst[0]:.3f}), geometric copies >= {min(lowest):.3f} (margin "
              f"{min(lowest) - cg.LOCAL_NCC_MIN:.3f})")


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
    p.add_argument("--geometry-every", type=int, default=4, help="edit every N-th photo for the geometric check (default 4)")
    p.add_argument("--real-data", default=None, help="folder of full-resolution originals (one subfolder per place)")
    p.add_argument("--no-geometry", action="store_true", help="calibrate the hashes only")
    p.add_argument("--skip-pairs", action="store_true", help="geometric check: the edited copies (e) only, not (d)")
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
    if not args.no_geometry:
        calibrate_geometry(bench, pool, args.geometry_every, args.real_data, pairs=not args.skip_pairs)


if __name__ == "__main__":
    main()
