"""The copy audit survives the edits a memorizer makes (issue 42; docs/benchmark.md section 5, Copy audit).

Edited copies of the demo's own photos (crops to 40 %, rotations with black corners, flips, borders of
any colour, collages of two to four photos, resize, JPEG quality 20, colour and contrast changes, blur,
noise and combinations) are flagged, with the region they copy and the kind of edit; two different
photographs of one place (held-out vs gallery of a block, consecutive frames of a street) are not.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image, ImageEnhance, ImageFilter, ImageOps

pytest.importorskip("cv2")

from geofidelity_bench import copy_geometry as cg  # noqa: E402
from geofidelity_bench import load_benchmark  # noqa: E402
from geofidelity_bench import near_copies as nc  # noqa: E402
from geofidelity_bench.images import load_image  # noqa: E402


@pytest.fixture(scope="module")
def demo():
    bench = load_benchmark("demo")
    pool = nc.reference_pool(bench)
    images = {pool.ids[j]: load_image(item.image_bytes) for j, item in enumerate(nc.pool_items(bench))}
    return bench, pool, images


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.convert("RGB").save(buf, "PNG")
    return buf.getvalue()


def _jpeg(im: Image.Image, q: int) -> Image.Image:
    buf = io.BytesIO()
    im.convert("RGB").save(buf, "JPEG", quality=q)
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


def _crop(im, f, cx=0.5, cy=0.5):
    w, h = im.size
    cw, ch = round(w * f), round(h * f)
    x0, y0 = round((w - cw) * cx), round((h - ch) * cy)
    return im.crop((x0, y0, x0 + cw, y0 + ch))


def _rot(im, deg, expand=False):
    return im.rotate(deg, resample=Image.Resampling.BICUBIC, expand=expand, fillcolor=(0, 0, 0))


def _noise(im, sd):
    a = np.asarray(im.convert("RGB"), np.float32) + np.random.default_rng(0).normal(0, sd, (im.height, im.width, 3))
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def _side_by_side(a, b, h=384):
    parts = [x.resize((round(x.width * h / x.height), h)) for x in (a, b)]
    out = Image.new("RGB", (sum(p.width for p in parts), h))
    out.paste(parts[0], (0, 0))
    out.paste(parts[1], (parts[0].width, 0))
    return out, (parts[0].width, 0, parts[0].width + parts[1].width, h)


#: One edit per class and combinations; each takes the photo and returns the submitted image.
EDITS = {
    "crop 70%": lambda im: _crop(im, 0.7),
    "crop 40%": lambda im: _crop(im, 0.4),
    "rotation 5": lambda im: _rot(im, 5),
    "rotation 20, black corners": lambda im: _rot(im, -20, expand=True),
    "mirror + off-centre crop": lambda im: _crop(ImageOps.mirror(im), 0.6, 0.2, 0.7),
    "white border 10%": lambda im: ImageOps.expand(im, border=round(0.1 * max(im.size)), fill="white"),
    "red padding to a square": lambda im: ImageOps.pad(im, (max(im.size),) * 2, color=(200, 30, 30)),
    "resize x3": lambda im: im.resize((im.width * 3, im.height * 3)),
    "jpeg q20": lambda im: _jpeg(im, 20),
    "grayscale + contrast": lambda im: ImageEnhance.Contrast(ImageOps.grayscale(im).convert("RGB")).enhance(1.6),
    "blur + noise": lambda im: _noise(im.filter(ImageFilter.GaussianBlur(1.2)), 8),
    "mirror + rotation 10 + crop 60% + jpeg q30": lambda im: _jpeg(_crop(_rot(ImageOps.mirror(im), 10), 0.6), 30),
    "crop 50% + colour + blue border": lambda im: ImageOps.expand(
        ImageEnhance.Color(_crop(im, 0.5, 0.3, 0.6)).enhance(0.3), border=40, fill=(0, 120, 255)),
}
#: The edits the hashes alone (the audit before issue 42) miss.
HASH_BLIND = {"crop 70%", "crop 40%", "rotation 5", "rotation 20, black corners", "mirror + off-centre crop",
              "white border 10%", "red padding to a square", "mirror + rotation 10 + crop 60% + jpeg q30",
              "crop 50% + colour + blue border"}
PHOTOS = ("lund_seg3__25", "lund_seg2__14", "arezzo_piazza_streets__DSCN0040")
#: The Berlin facade (repetitive windows, the photo the first version of the check missed at 40 %).
BERLIN_EDITS = ("crop 70%", "crop 40%", "rotation 20, black corners", "white border 10%", "mirror + off-centre crop")
#: 40 % crops (16 % of the photo's area) the first version of the check missed: low-texture or repetitive
#: photos (foliage, a facade, roads of the world pool), centred and off-centre (docs/benchmark.md section 5).
HARD_CROPS = {"centre": ("arezzo_park_path__DSCN0012", "berlin_am_lustgarten__01", "mapillary_521919388810193",
                         "mapillary_2796964527278796"),
              "off-centre": ("arezzo_church_streets__DSCN0027", "mapillary_213810670171188", "mapillary_291703782380901",
                             "mapillary_518332982744523")}


def _audit(pool, images: dict[str, list[bytes]]) -> dict[str, list[dict]]:
    panels = {("edited", name, "b"): items for name, items in images.items()}
    recs = nc.audit_panels(pool, panels, {k: np.zeros((len(v), 0)) for k, v in panels.items()})
    out: dict[str, list[dict]] = {}
    for r in recs:
        out.setdefault(r["condition"], []).append(r)
    return out


def test_every_class_of_edit_is_flagged_as_a_copy_of_its_photo(demo):
    _, pool, images = demo
    photos = [p for p in PHOTOS if p in images]
    assert len(photos) == 3
    submitted = {name: [_png(edit(images[p])) for p in photos] for name, edit in EDITS.items()}
    found = _audit(pool, submitted)
    for name in EDITS:
        for p, r in zip(photos, found[name]):
            assert r["flagged"] and r["reference_id"] == p, (name, p, r)
    berlin = images["berlin_am_lustgarten__03"]
    found_b = _audit(pool, {"berlin": [_png(EDITS[name](berlin)) for name in BERLIN_EDITS] + [_png(_crop(berlin, 0.5))]})
    assert all(r["flagged"] and r["reference_id"] == "berlin_am_lustgarten__03" for r in found_b["berlin"]), found_b
    # the edits the hashes cannot see are caught by the geometric check, which names the edit and the region
    for name in HASH_BLIND:
        for r in found[name]:
            assert r["matched_by"] == "geometry" and r["edit"] and r["local_ncc"] >= cg.LOCAL_NCC_MIN, (name, r)
    assert all("rotation" in r["edit"] for r in found["rotation 20, black corners"])
    assert all("mirror" in r["edit"] and "crop" in r["edit"] for r in found["mirror + off-centre crop"])
    assert all("border" in r["edit"] for r in found["white border 10%"])


def test_forty_percent_crops_of_low_texture_and_repetitive_photos_are_flagged_with_their_region(demo):
    _, pool, images = demo
    where = {"centre": (0.5, 0.5), "off-centre": (0.3, 0.6)}
    submitted = {kind: [_png(_crop(images[p], 0.4, *where[kind])) for p in photos] for kind, photos in HARD_CROPS.items()}
    found = _audit(pool, submitted)
    for kind, photos in HARD_CROPS.items():
        for p, r in zip(photos, found[kind]):
            assert r["flagged"] and r["reference_id"] == p and r["matched_by"] == "geometry", (kind, p, r)
            assert r["edit"] == "crop", (kind, p, r)
            # the whole submitted image is the copied region (it is all photo)
            w, h = _crop(images[p], 0.4, *where[kind]).size
            assert np.abs(np.subtract(r["region"], (0, 0, w, h))).max() <= 3, (kind, p, r["region"])


def test_collage_and_frame_flag_the_copied_region(demo):
    _, pool, images = demo
    a, b = images["berlin_am_lustgarten__03"], images["lund_seg1__05"]
    collage, box_b = _side_by_side(a, b)
    # a four-photo collage with a gap: the photo sits in the lower right quadrant
    grid = Image.new("RGB", (640, 480), (30, 30, 30))
    for k, rid in enumerate(["arezzo_park_path__DSCN0010", "lund_seg3__25", "lund_seg2__14", "berlin_am_lustgarten__02"]):
        grid.paste(images[rid].resize((310, 230)), (5 + (k % 2) * 320, 5 + (k // 2) * 240))
    framed = ImageOps.expand(b, border=60, fill=(255, 255, 255))
    found = _audit(pool, {"collage": [_png(collage)], "grid": [_png(grid)], "frame": [_png(framed)]})
    r = found["collage"][0]
    assert r["flagged"] and r["reference_id"] in ("berlin_am_lustgarten__03", "lund_seg1__05")
    assert r["edit"] and "collage/partial" in r["edit"]
    want = (0, 0, box_b[0], 384) if r["reference_id"] == "berlin_am_lustgarten__03" else box_b
    assert np.abs(np.subtract(r["region"], want)).max() <= 6, (r["region"], want)
    g = found["grid"][0]
    assert g["flagged"] and "collage/partial" in g["edit"]
    k = ["arezzo_park_path__DSCN0010", "lund_seg3__25", "lund_seg2__14", "berlin_am_lustgarten__02"].index(g["reference_id"])
    want = (5 + (k % 2) * 320, 5 + (k // 2) * 240, 315 + (k % 2) * 320, 235 + (k // 2) * 240)
    assert np.abs(np.subtract(g["region"], want)).max() <= 6, (g["region"], want)
    f = found["frame"][0]
    assert f["flagged"] and f["reference_id"] == "lund_seg1__05" and "border" in f["edit"]
    assert np.abs(np.subtract(f["region"], (60, 60, 60 + b.width, 60 + b.height))).max() <= 4
    # the warning names the region and the edit
    text = nc.near_copies_warning([f])
    assert "border" in text and "region" in text


def test_distinct_photos_of_one_place_are_never_geometric_copies(demo):
    bench, pool, images = demo
    pos = {rid: j for j, rid in enumerate(pool.ids)}
    stage = cg.GeometryStage(pool)
    pairs = [(h.reference_id, g.reference_id) for b in bench.block_ids for h in bench.heldout(b) for g in bench.gallery(b)]
    # consecutive frames of the Lund street and the three Berlin photos: the closest distinct pairs measured
    closest = [("lund_seg1__09", "lund_seg1__10"), ("lund_seg1__04", "lund_seg1__05"), ("lund_seg1__09", "lund_seg2__11"),
               ("berlin_am_lustgarten__01", "berlin_am_lustgarten__02"), ("lund_seg3__28", "lund_seg3__29")]
    pairs += closest + [(b, a) for a, b in closest]  # either photo may be the one submitted
    worst = 0.0
    submitted = {a: cg.features(images[a], mirror=True) for a in dict.fromkeys(a for a, _ in pairs)}
    for a, b in pairs:
        v = cg.verify(submitted[a], stage.photo(pos[b]))
        if v is not None:
            assert not v["verified"], (a, b, v)
            worst = max(worst, v["local_ncc"])
    assert worst < cg.LOCAL_NCC_MIN - 0.08  # docs/benchmark.md section 5: 0.648 on the demo, margin 0.102
    # and through the audit itself: held-out photos submitted as a panel are not flagged against the gallery
    held = [r for b in bench.block_ids for r in bench.heldout(b)][:8]
    recs = nc.nearest(pool, [pool.banks[pos[r.reference_id]] for r in held], None, [None] * len(held),
                      exclude=[[pos[r.reference_id]] for r in held], query_items=[r.image_bytes for r in held])
    assert not any(r["flagged"] for r in recs), recs


def test_a_plain_copy_is_named_a_copy_not_a_crop(demo):
    """The photo's outline and the image's coincide for a plain copy: the edit found is none (on the first
    version of the ECC refinement OpenCV's polygon intersection lost 12 % of lund_seg1__06's area, and a
    plain copy was named a crop in a border)."""
    _, pool, images = demo
    stage = cg.GeometryStage(pool)
    for rid in ("lund_seg1__06", "lund_seg1__07", "berlin_am_lustgarten__02"):
        v = cg.verify(cg.features(images[rid], mirror=True), stage.photo(pool.ids.index(rid)))
        assert v["verified"] and v["kinds"] == [] and v["cover_image"] == v["cover_photo"] == 1.0, (rid, v)


def test_thresholds_are_pinned():
    assert cg.LOCAL_NCC_MIN == 0.75 and cg.MIN_INLIERS == 12 and cg.WORK_SIDE == 512 and cg.ORB_FEATURES == 800
    assert cg.RATIO == 0.8 and cg.RANSAC_PX == 4.0 and cg.MIN_VOTES == 3
    assert nc.thresholds()["geometry"]["local_ncc_min"] == 0.75


def test_old_records_without_geometry_fields_still_read(demo):
    old = {"method": "m", "condition": "L0", "block_id": "b", "file": "x.png", "sha256": None, "reference_id": "r",
           "reference_block_id": "b", "hash_distance": 3, "cosine": 0.99, "exact": False, "flagged": True}
    assert "x.png" in nc.near_copies_warning([old])
    assert nc.copied_counts([old]) == {("m", "L0", "b"): 1}


def test_report_and_app_show_the_edit_and_region():
    from geofidelity_bench.demo_app.ui import _copy_edit_text, _outlined_thumbnail
    from geofidelity_bench.report.render import _edits_cell

    rec = {"file": "a.png", "matched_by": "geometry", "edit": "collage/partial", "region": [512, 0, 1024, 384]}
    plain = {"file": "b.png", "matched_by": "hashes", "edit": "copy", "region": [0, 0, 512, 384]}
    assert _edits_cell([rec, plain]) == "collage/partial (512 0 1024 384)"
    assert _edits_cell([plain]) == "none (plain copies)"
    assert _edits_cell([{"file": "c.png", "hash_distance": 2}]) == "not recorded"  # a run.json from before
    assert _copy_edit_text(rec) == "edited: collage/partial, copied region 512,0-1024,384 px"
    assert _copy_edit_text({"file": "old.png"}) == "" and _copy_edit_text(plain) == ""
    image = Image.new("RGB", (1024, 384), (255, 255, 255))
    thumb = _outlined_thumbnail(image, rec["region"], 320)
    px = np.asarray(thumb)
    assert thumb.size == (320, 120) and tuple(px[60, 160]) == (230, 20, 20) and tuple(px[60, 100]) == (255, 255, 255)


def test_a_submitted_edit_or_region_cannot_break_the_reports_copy_table():
    """run.json is a submitter's claim: an ``edit`` or ``region`` holding a line break or a '|' stays inside its
    cell of the report's copy-audit table (one table row per panel, eight cells)."""
    from geofidelity_bench.report.render import _copied_section

    rec = {"run": None, "method": "m", "condition": "L0", "block_id": "b", "file": "a.png", "flagged": True,
           "reference_id": "b__01", "reference_block_id": "b", "matched_by": "geometry",
           "edit": "crop\n| injected | row |\n", "region": ["0\n|", 1, 2, 3]}
    lines = _copied_section({"recorded": True, "images": [rec], "copied_rows": []})
    rows = [line for line in lines if line.startswith("| m / L0 / b")]
    assert len(rows) == 1, lines
    assert not any("injected" in line for line in lines if line not in rows)
    assert rows[0].count(" | ") == 7 and "\n" not in rows[0]


def test_a_paper_scale_pool_searched_by_lsh_finds_edited_copies_and_keeps_its_index(demo, tmp_path, monkeypatch):
    """Above ``keypoint_index.EXACT_MAX`` descriptors (paper scale: 7,168 references and the world pool) the
    keypoint index is searched by LSH: the edits the hashes cannot see are still found, and the index is
    written beside the verdicts, so the next run reads it instead of detecting every photo's keypoints."""
    from geofidelity_bench import keypoint_index

    monkeypatch.setattr(keypoint_index, "EXACT_MAX", 0)  # this pool is searched as a paper-scale one is
    bench, _, images = demo
    pool = nc.reference_pool(bench)
    cases = {"crop 50%": ("lund_seg3__25", _crop(images["lund_seg3__25"], 0.5, 0.4, 0.6)),
             "rotation 12": ("lund_seg2__14", _rot(images["lund_seg2__14"], 12)),
             "white border": ("arezzo_piazza_streets__DSCN0040",
                              ImageOps.expand(images["arezzo_piazza_streets__DSCN0040"], border=60, fill="white")),
             "collage": ("lund_seg1__05", _side_by_side(images["berlin_am_lustgarten__03"], images["lund_seg1__05"])[0])}
    panels = {("edited", name, "b"): [_png(im)] for name, (_, im) in cases.items()}
    cache = nc.HashCache(tmp_path)
    recs = nc.audit_panels(pool, panels, {k: np.zeros((1, 0)) for k in panels}, hash_cache=cache)
    stage = pool._geometry_stage
    assert stage.index().backend == "lsh"
    for r in recs:
        rid = cases[r["condition"]][0]
        ok = {rid, "berlin_am_lustgarten__03"} if r["condition"] == "collage" else {rid}
        assert r["flagged"] and r["matched_by"] == "geometry" and r["reference_id"] in ok, r
    saved = sorted(tmp_path.rglob("keypoint-index-*.npz"))
    assert len(saved) == 1
    # a new run (a fresh pool) reads the saved index: no photo's keypoints are detected for it
    detected = []
    real = cg.index_descriptors
    monkeypatch.setattr(cg, "index_descriptors", lambda gray: detected.append(1) or real(gray))
    again = cg.GeometryStage(nc.reference_pool(bench), index_dir=saved[0].parent)
    q = cg.features(cases["rotation 12"][1], mirror=True)
    assert np.array_equal(again.retrieve(q), stage.retrieve(q)) and not detected
    # a damaged file is a missing index: it is built again from the photos, with the same votes
    saved[0].write_bytes(b"not an index")
    rebuilt = cg.GeometryStage(nc.reference_pool(bench), index_dir=saved[0].parent)
    assert np.array_equal(rebuilt.retrieve(q), stage.retrieve(q)) and len(detected) == len(pool)
