"""The copy audit (docs/benchmark.md section 5, Copy audit): a copy of the benchmark's own photos never
tops the board unnoticed, and distinct photos of one place are never called copies."""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import re
import shutil
from pathlib import Path

import imagehash
import numpy as np
import pandas as pd
import pytest
from PIL import Image, ImageEnhance, ImageOps

from conftest import jpeg_bytes
from geofidelity_bench import near_copies as nc
from geofidelity_bench.benchmark import Benchmark, load_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.evaluation import METRIC_COLUMNS, evaluate_panels, sanity_panels

ROOT = Path(__file__).resolve().parents[1]


def _real_data() -> Path | None:
    """The project's shared real photos (``../shared/real-data`` beside the clone, or $GEOFIDELITY_REAL_DATA)."""
    for candidate in (os.environ.get("GEOFIDELITY_REAL_DATA"), ROOT.parent / "shared" / "real-data"):
        if candidate and (Path(candidate) / "berlin" / "01.jpg").is_file():
            return Path(candidate)
    return None


@pytest.fixture(scope="module")
def demo():
    return load_benchmark("demo")


@pytest.fixture(scope="module")
def encoder():
    from geofidelity_bench.encoders import get_encoder

    return get_encoder("efficientnet-lite0", device="cpu")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory, demo_lite0_cache_dir):
    """This module's cache: a copy of the session's demo cache (the demo's embeddings and perceptual hashes)."""
    import shutil

    return shutil.copytree(demo_lite0_cache_dir, tmp_path_factory.mktemp("copy-audit") / "cache")


@pytest.fixture(scope="module")
def pool_embeddings(demo, encoder, cache_dir):
    from geofidelity_bench.encoders import EmbeddingCache
    from geofidelity_bench.evaluation import embed_items

    emb, _ = embed_items({"pool": nc.pool_items(demo)}, encoder, cache=EmbeddingCache(cache_dir), progress=False)
    return emb["pool"]


@pytest.fixture(scope="module")
def hashed_pool(demo, cache_dir):
    return nc.reference_pool(demo, hash_cache=nc.HashCache(cache_dir))


# -- thresholds -----------------------------------------------------------------------------------


def test_thresholds_are_pinned_in_code_and_docs():
    assert nc.HASH_SIZE == 16
    assert nc.HASH_DISTANCE_MAX == 60
    assert nc.COPY_COSINE == 0.99
    assert nc.CROP_SCALES == (1.0, 0.95, 0.90) and nc.CROP_POSITIONS == (0.0, 0.5, 1.0)
    assert nc.CROP_BOXES == 49 and nc.HASH_THUMBNAIL == 128 and nc.CANDIDATES == 5
    doc = (ROOT / "docs" / "benchmark.md").read_text()
    section = doc[doc.index("### Copy audit"):]
    section = section[: section.index("\n## ")]
    for text in ("256", "<= 60", ">= 0.99", "pHash", "dHash", "mirror", "world pool", "held-out"):
        assert text in section, text


def test_aligned_distance_is_the_smallest_hamming_distance_over_crops_and_mirror(demo):
    """Brute force with imagehash's own Hamming distance, one crop pair at a time."""
    a = demo.gallery("lund_seg1")[0].image()
    b = ImageOps.mirror(a.crop((5, 3, a.width - 20, a.height - 9)))  # a mirrored crop of it
    c = demo.gallery("arezzo_park_path")[0].image()

    def views(img):
        g = img.convert("L")
        g.thumbnail((128, 128), Image.Resampling.LANCZOS)
        w, h = g.size
        out = []
        for sx in (1.0, 0.95, 0.90):
            for sy in (1.0, 0.95, 0.90):
                for px in ((0.0, 0.5, 1.0) if sx < 1 else (0.0,)):
                    for py in ((0.0, 0.5, 1.0) if sy < 1 else (0.0,)):
                        x0, y0 = (w - w * sx) * px, (h - h * sy) * py
                        out.append(g.resize((64, 64), Image.Resampling.LANCZOS, box=(x0, y0, x0 + w * sx, y0 + h * sy)))
        return out, ImageOps.mirror(out[0])

    def brute(x, y):
        (xc, xm), (yc, ym) = views(x), views(y)
        worst = 0
        for f in (imagehash.phash, imagehash.dhash):
            hx = [f(v, hash_size=16) for v in xc]
            hy = [f(v, hash_size=16) for v in yc]
            wholes_x, wholes_y = [hx[0], f(xm, hash_size=16)], [hy[0], f(ym, hash_size=16)]
            best = min(min(w - h for w in wholes_x for h in hy), min(w - h for w in wholes_y for h in hx))
            worst = max(worst, best)
        return worst

    for x, y in ((a, b), (a, c), (b, c)):
        got = int(nc.aligned_distance(nc.image_hashes(x)[None], nc.image_hashes(y)[None])[0])
        assert got == brute(x, y)
    assert brute(a, b) <= nc.HASH_DISTANCE_MAX < brute(a, c)



def _bits(n: int) -> np.ndarray:
    """A 256-bit hash (4 uint64 words) with its first ``n`` bits set."""
    return np.array([(1 << min(64, max(0, n - 64 * w))) - 1 for w in range(4)], dtype=np.uint64)


def test_a_hash_distance_of_exactly_the_threshold_is_flagged_and_one_more_is_not():
    """docs/benchmark.md section 5: flagged at hash distance AT MOST 60. Hand-made hash banks against an
    all-zero query: the pHash is ``d`` bits away on one crop only (100 on every other view, the whole
    image and its mirror included), the dHash 10 bits on every view; the distance, worked out by hand
    and by a brute-force popcount below, is ``d``. A ``< 60`` rule misses the photo at 60."""
    n_views = nc.CROP_BOXES + 1

    def bank(d: int) -> np.ndarray:
        b = np.zeros((2, n_views, 4), dtype=np.uint64)
        b[0] = _bits(100)
        b[0, 7] = _bits(d)  # one crop (never the whole image, 0, or the mirror, the last view)
        b[1] = _bits(10)
        return b

    def brute(q, p) -> int:
        """The larger over the two hashes of the smallest Hamming distance between one image (whole or
        mirrored) and the crops of the other, either way round."""
        ham = lambda x, y: sum(bin(int(u) ^ int(v)).count("1") for u, v in zip(x, y))  # noqa: E731
        whole, crops = (0, n_views - 1), range(n_views - 1)
        return max(min(min(ham(x[h, w], y[h, c]) for w in whole for c in crops) for x, y in ((q, p), (p, q)))
                   for h in (0, 1))

    t = nc.HASH_DISTANCE_MAX
    query = np.zeros((2, n_views, 4), dtype=np.uint64)
    banks = [bank(t), bank(t + 1)]
    assert [brute(query, b) for b in banks] == [t, t + 1]
    pool = nc.ReferencePool(ids=["at", "above"], blocks=["b1", "b2"], heldout=[False, False], shas=["s1", "s2"],
                            embeddings=None, banks=np.stack(banks))
    found = {f["pos"]: f for f in nc.candidates(pool, [query], None, [None])[0]}
    assert (found[0]["hash_distance"], found[1]["hash_distance"]) == (t, t + 1)
    assert found[0]["flagged"] is True and found[1]["flagged"] is False
    assert not found[0]["exact"]
    match = nc.nearest(pool, [query], None, [None])[0]
    assert (match["reference_id"], match["hash_distance"], match["flagged"]) == ("at", t, True)


# -- calibration on the benchmark ------------------------------------------------------------------


def test_no_held_out_photo_is_flagged_against_its_own_gallery_on_the_demo(demo, hashed_pool, pool_embeddings):
    pos = {rid: j for j, rid in enumerate(hashed_pool.ids)}
    unit = pool_embeddings / np.linalg.norm(pool_embeddings, axis=1, keepdims=True)
    n_pairs = 0
    for bid in demo.block_ids:
        for h in demo.heldout(bid):
            for g in demo.gallery(bid):
                i, j = pos[h.reference_id], pos[g.reference_id]
                d = int(nc.aligned_distance(hashed_pool.banks[i][None], hashed_pool.banks[j][None])[0])
                assert d > nc.HASH_DISTANCE_MAX, (h.reference_id, g.reference_id, d)
                assert float(unit[i] @ unit[j]) < nc.COPY_COSINE
                n_pairs += 1
    assert n_pairs == 76
    audit = nc.audit_benchmark(demo, pool_embeddings)
    assert audit["pairs"] == []
    assert all(not b["flagged"] for b in audit["blocks"])
    lund = next(b for b in audit["blocks"] if b["block_id"] == "lund_seg1")
    assert lund["min_hash_distance_heldout_vs_gallery"] == min(
        int(nc.aligned_distance(hashed_pool.banks[pos[h.reference_id]][None], hashed_pool.banks[pos[g.reference_id]][None])[0])
        for h in demo.heldout("lund_seg1") for g in demo.gallery("lund_seg1"))


def _encode(img, fmt, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def _crop(img, left, top, right, bottom):
    w, h = img.size
    return img.crop((round(w * left), round(h * top), w - round(w * right), h - round(h * bottom)))


#: Written for this test, independently of the demo's ``augmented`` and of scripts/calibrate_copy_audit.py.
INDEPENDENT_AUGMENTATIONS = {
    "resize_0.6_jpeg": lambda im: _encode(im.resize((im.width * 3 // 5, im.height * 3 // 5)), "JPEG", quality=80),
    "resize_1.5_png": lambda im: _encode(im.resize((im.width * 3 // 2, im.height * 3 // 2)), "PNG"),
    "jpeg_q35": lambda im: _encode(im, "JPEG", quality=35),
    "webp_q45": lambda im: _encode(im, "WEBP", quality=45),
    "crop_3pc_left_top": lambda im: _encode(_crop(im, 0.03, 0.03, 0, 0), "PNG"),
    "crop_5pc_right": lambda im: _encode(_crop(im, 0, 0, 0.05, 0), "JPEG", quality=92),
    "crop_2pc_all_sides": lambda im: _encode(_crop(im, 0.02, 0.02, 0.02, 0.02), "WEBP", quality=80),
    "border_4pc_grey": lambda im: _encode(ImageOps.expand(im, border=round(im.width * 0.04), fill=(128, 128, 128)), "PNG"),
    "brightness_0.92": lambda im: _encode(ImageEnhance.Brightness(im).enhance(0.92), "JPEG", quality=90),
    "brightness_1.07_colour_1.1": lambda im: _encode(
        ImageEnhance.Color(ImageEnhance.Brightness(im).enhance(1.07)).enhance(1.1), "PNG"),
    "flip": lambda im: _encode(ImageOps.mirror(im), "JPEG", quality=90),
    "flip_crop_webp": lambda im: _encode(_crop(ImageOps.mirror(im), 0.01, 0.04, 0.03, 0), "WEBP", quality=70),
}


def test_independent_augmentations_of_demo_photos_are_flagged(demo, hashed_pool):
    sources = [demo.gallery("berlin_am_lustgarten")[0], demo.heldout("lund_seg2")[0],
               demo.gallery("arezzo_piazza_streets")[1], sorted(demo.world, key=lambda w: w.image_id)[3]]
    items, expected = [], []
    for src in sources:
        base = src.image()
        for name, aug in INDEPENDENT_AUGMENTATIONS.items():
            items.append(aug(base))
            expected.append((getattr(src, "reference_id", None) or src.image_id, name))
    banks, shas = nc.hash_items(items)
    found = nc.nearest(hashed_pool, banks, None, shas)
    misses = [(exp, f) for exp, f in zip(expected, found) if not (f["flagged"] and f["reference_id"] == exp[0])]
    assert misses == []
    assert not any(f["exact"] for f in found)  # found by their hashes, not their bytes


def test_sanity_augmented_heldout_is_flagged_and_the_demo_says_so(demo, encoder, cache_dir):
    from geofidelity_bench.cli.evaluate import _demo_copy_audit_text
    from geofidelity_bench.encoders import EmbeddingCache

    panels = sanity_panels(demo)
    df = evaluate_panels(demo, panels, encoder, cache=EmbeddingCache(cache_dir), progress=False)
    aug = df[df["method"] == "sanity_augmented_heldout"]
    assert len(aug) == 7 and (aug["n_copied"] == aug["n_generated"]).all() and (aug["n_copied"] == 4).all()
    held = {r.reference_id: b for b in demo.block_ids for r in demo.heldout(b)}
    recs = [r for r in df.attrs["copy_audit"]["images"] if r["method"] == "sanity_augmented_heldout"]
    assert len(recs) == 28 and all(r["flagged"] and not r["exact"] for r in recs)
    assert all(held.get(r["reference_id"]) == r["block_id"] for r in recs)  # matched to its own held-out photo
    text = _demo_copy_audit_text(df)
    assert "Flagged as expected: sanity_augmented_heldout (28 image(s))" in text


# -- outputs ----------------------------------------------------------------------------------------


def _write_panel(root, method, condition, block_id, images):
    folder = root / method / condition / block_id
    folder.mkdir(parents=True, exist_ok=True)
    for k, data in enumerate(images):
        (folder / f"{k:02d}.jpg").write_bytes(data)
    return folder


def test_full_resolution_berlin_originals_are_flagged_by_evaluate(tmp_path, cache_dir, capsys):
    real = _real_data()
    if real is None:
        pytest.skip("the shared real photos (../shared/real-data) are not beside this checkout")
    gen = tmp_path / "gen"
    folder = gen / "copycat" / "L0" / "berlin_am_lustgarten"
    folder.mkdir(parents=True)
    for n in ("01", "02", "03"):
        shutil.copy(real / "berlin" / f"{n}.jpg", folder / f"{n}.jpg")
    out = tmp_path / "out"
    assert main(["evaluate", "--benchmark", "demo", "--generated", str(gen), "--encoder", "efficientnet-lite0",
                 "--out", str(out), "--cache-dir", str(cache_dir), "--no-progress"]) == 0
    err = capsys.readouterr().err
    df = pd.read_csv(out / "results.csv")
    row = df[df["method"] == "copycat"].iloc[0]
    assert row["n_copied"] == 3 and row["n_generated"] == 3
    assert df.loc[df["condition"] == "anchor", "n_copied"].isna().all()
    run = json.loads((out / "run.json").read_text())
    audit = run["copy_audit"]
    assert audit["n_audited"] == 3 and audit["n_flagged"] == 3 and audit["excluded"] is False
    assert audit["thresholds"]["hash_distance_max"] == 60 and audit["thresholds"]["copy_cosine"] == 0.99
    for rec in audit["images"]:
        n = Path(rec["file"]).stem
        assert rec["reference_id"] == f"berlin_am_lustgarten__{n}"
        assert rec["reference_block_id"] == "berlin_am_lustgarten"
        assert rec["flagged"] and not rec["exact"] and rec["hash_distance"] <= 60
        assert 0.98 < rec["cosine"] < 0.999  # the old cosine-only rule (>= 0.999) missed them
    assert run["near_copies"] == audit["images"]
    warning = next(line for line in err.splitlines() if line.startswith("warning: 3 submitted image(s)"))
    for n in ("01", "02", "03"):
        assert f"photo berlin_am_lustgarten__{n} of block berlin_am_lustgarten" in warning


def test_exclude_copies_scores_the_panels_without_the_flagged_images(demo, encoder, tmp_path, cache_dir, capsys):
    own = demo.gallery("lund_seg1")
    fresh = [jpeg_bytes(100 + i, size=(96, 64)) for i in range(3)]  # noise: no photo of the benchmark
    gen = tmp_path / "gen"
    _write_panel(gen, "m", "L0", "lund_seg1", [own[0].image_bytes, fresh[0], own[1].image_bytes, fresh[1], fresh[2]])
    _write_panel(gen, "m", "L0", "lund_seg2", [demo.gallery("lund_seg2")[0].image_bytes, fresh[0]])
    out = tmp_path / "out"
    assert main(["evaluate", "--benchmark", "demo", "--generated", str(gen), "--encoder", "efficientnet-lite0",
                 "--out", str(out), "--cache-dir", str(cache_dir), "--no-progress", "--no-anchors",
                 "--exclude-copies"]) == 0
    assert "--exclude-copies: the panels were scored without the flagged images" in capsys.readouterr().err
    df = pd.read_csv(out / "results.csv").set_index("block_id")
    assert df.loc["lund_seg1", "n_generated"] == 3 and df.loc["lund_seg1", "n_copied"] == 2
    # independently: the panel of the three fresh images, scored as it is
    from geofidelity_bench.encoders import EmbeddingCache

    alone = evaluate_panels(demo, {("m", "L0", "lund_seg1"): fresh}, encoder, cache=EmbeddingCache(cache_dir),
                            progress=False).iloc[0]
    for col in METRIC_COLUMNS:
        a, b = df.loc["lund_seg1", col], alone[col]
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=1e-12), col
    # a panel left with one image: a NaN row with the reason
    assert df.loc["lund_seg2", "n_copied"] == 1 and df.loc["lund_seg2", "n_generated"] == 1
    assert df.loc["lund_seg2", METRIC_COLUMNS].isna().all()
    run = json.loads((out / "run.json").read_text())
    assert run["copy_audit"]["excluded"] is True and run["parameters"]["exclude_copies"] is True
    assert run["copy_audit"]["n_flagged"] == 3
    assert "--exclude-copies left 1 image(s)" in json.dumps(run["nan_reasons"])


def test_audit_records_carry_the_sha256_of_each_scored_file(demo, tmp_path, cache_dir):
    import copy
    import hashlib

    gen = tmp_path / "gen"
    _write_panel(gen, "m", "L0", "lund_seg1", [jpeg_bytes(200, size=(96, 64)), jpeg_bytes(201, size=(96, 64))])
    own = _write_panel(gen, "m", "GPS_ONLY", "lund_seg1", [demo.gallery("lund_seg1")[0].image_bytes])  # a copy
    (own / "01.png").write_bytes(_encode(Image.open(io.BytesIO(jpeg_bytes(202, size=(96, 64)))), "PNG"))
    _write_panel(gen, "other", "L0", "lund_seg2", [jpeg_bytes(203, size=(96, 64))] * 2)  # one image twice
    files = sorted(p for p in gen.rglob("*") if p.is_file())
    out = tmp_path / "out"
    assert main(["evaluate", "--benchmark", "demo", "--generated", str(gen), "--encoder", "efficientnet-lite0",
                 "--out", str(out), "--cache-dir", str(cache_dir), "--no-progress", "--no-anchors"]) == 0
    run = json.loads((out / "run.json").read_text())
    records = run["copy_audit"]["images"]
    assert sorted(Path(r["file"]).resolve() for r in records) == [f.resolve() for f in files]
    for r in records:
        assert r["sha256"] == hashlib.sha256(Path(r["file"]).read_bytes()).hexdigest(), r["file"]

    by_panel = nc.panel_image_hashes(run)
    expected: dict[tuple, list[str]] = {}
    for f in files:
        method, condition, block_id = f.relative_to(gen).parts[:3]
        expected.setdefault((method, condition, block_id), []).append(hashlib.sha256(f.read_bytes()).hexdigest())
    assert by_panel == {key: sorted(shas) for key, shas in expected.items()}
    assert len(by_panel[("other", "L0", "lund_seg2")]) == 2  # one entry per image, repeats kept

    # The evaluation's own panels are left out; a record without a sha256 is refused by name.
    with_sanity = copy.deepcopy(run)
    with_sanity["copy_audit"]["images"].append({**records[0], "method": "sanity_world", "condition": "sanity",
                                                "sha256": None})
    assert nc.panel_image_hashes(with_sanity) == by_panel
    old = copy.deepcopy(run)
    del old["copy_audit"]["images"][1]["sha256"]
    r = records[1]
    named = f"copy_audit.images[1]: panel {r['method']}/{r['condition']}/{r['block_id']}, file {r['file']!r} has no sha256"
    with pytest.raises(nc.AuditRecordError, match=re.escape(named)):
        nc.panel_image_hashes(old)
    assert isinstance(nc.AuditRecordError("x"), ValueError)
    with pytest.raises(nc.AuditRecordError, match="no copy_audit"):
        nc.panel_image_hashes({"results": []})


def test_audit_records_give_a_sha256_only_for_items_with_bytes(demo, hashed_pool):
    import hashlib

    data = jpeg_bytes(7, size=(64, 48))
    ref = demo.gallery("lund_seg2")[0]
    items = {("m", "L0", "lund_seg1"): [data, ref, Image.open(io.BytesIO(data))]}
    records = nc.audit_panels(hashed_pool, items, {("m", "L0", "lund_seg1"): np.ones((3, 4))})
    assert [r["sha256"] for r in records] == [hashlib.sha256(data).hexdigest(),
                                              hashlib.sha256(ref.image_bytes).hexdigest(), None]


def test_without_exclude_copies_the_same_panel_is_scored_whole(demo, encoder, cache_dir):
    from geofidelity_bench.encoders import EmbeddingCache

    own = demo.gallery("lund_seg1")
    fresh = [jpeg_bytes(100 + i, size=(96, 64)) for i in range(3)]
    df = evaluate_panels(demo, {("m", "L0", "lund_seg1"): [own[0].image_bytes, fresh[0], own[1].image_bytes]},
                         encoder, cache=EmbeddingCache(cache_dir), progress=False)
    assert df.iloc[0]["n_generated"] == 3 and df.iloc[0]["n_copied"] == 2
    assert df.attrs["copy_audit"]["excluded"] is False
    assert [r["exact"] for r in df.attrs["near_copies"]] == [True, True]


# -- inside a benchmark -------------------------------------------------------------------------------


def test_audit_command_on_the_demo_finds_no_pair(tmp_path, cache_dir, capsys):
    out = tmp_path / "audit"
    assert main(["audit", "--benchmark", "demo", "--encoder", "efficientnet-lite0", "--cache-dir", str(cache_dir),
                 "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "0 near-duplicate pair(s)" in printed
    md = (out / "copy_audit.md").read_text()
    demo = load_benchmark("demo")
    for bid in demo.block_ids:
        assert f"## `{bid}`" in md
    blocks = pd.read_csv(out / "copy_audit_blocks.csv")
    assert list(blocks["block_id"]) == demo.block_ids and not blocks["flagged"].any()
    assert (blocks["min_hash_distance_heldout_vs_gallery"] > 60).all()
    assert json.loads((out / "copy_audit.json").read_text())["pairs"] == []


def _planted(demo):
    """The demo plus two planted near-duplicates: a brightened crop of a lund_seg1 photo added to
    lund_seg1 itself, and a flipped, recompressed copy of an arezzo photo added to berlin_am_lustgarten."""
    src_same = demo.gallery("lund_seg1")[0]
    src_other = demo.gallery("arezzo_park_path")[0]
    same = dataclasses.replace(src_same, reference_id="lund_seg1__planted", image_id="planted_same",
                               image_bytes=INDEPENDENT_AUGMENTATIONS["brightness_1.07_colour_1.1"](
                                   _crop(src_same.image(), 0.03, 0.0, 0.0, 0.02).convert("RGB")))
    other = dataclasses.replace(src_other, reference_id="berlin_am_lustgarten__planted", image_id="planted_other",
                                block_id="berlin_am_lustgarten",
                                image_bytes=INDEPENDENT_AUGMENTATIONS["flip"](src_other.image()))
    bench = Benchmark(demo.blocks, [*demo.references, same, other], cities=demo.cities.values(), world=demo.world,
                      name="planted")
    return bench, src_same, src_other


def test_audit_finds_planted_duplicates_by_kind(demo, tmp_path):
    bench, src_same, src_other = _planted(demo)
    audit = nc.audit_benchmark(bench)  # hashes and bytes only
    pairs = {frozenset((p["reference_id"], p["duplicate_id"])): p for p in audit["pairs"]}
    assert set(pairs) == {frozenset(("lund_seg1__planted", src_same.reference_id)),
                          frozenset(("berlin_am_lustgarten__planted", src_other.reference_id))}
    cross = pairs[frozenset(("berlin_am_lustgarten__planted", src_other.reference_id))]
    assert cross["kind"] == "cross_block"
    held = {r.reference_id for r in bench.heldout("lund_seg1")}
    same = pairs[frozenset(("lund_seg1__planted", src_same.reference_id))]
    one_held = ("lund_seg1__planted" in held) != (src_same.reference_id in held)
    assert same["kind"] == ("heldout_vs_own_gallery" if one_held else "within_block")
    if one_held:
        assert same["role"] == "held-out" and same["duplicate_role"] == "gallery"
    by_block = {b["block_id"]: b for b in audit["blocks"]}
    assert by_block["berlin_am_lustgarten"]["n_cross_block"] == 1 and by_block["arezzo_park_path"]["n_cross_block"] == 1
    assert by_block["lund_seg2"]["flagged"] is False
    md = nc.benchmark_audit_markdown(audit, "planted", None)
    line = next(x for x in md.splitlines() if x.startswith("- cross block:"))
    assert "`berlin_am_lustgarten__planted`" in line and f"`{src_other.reference_id}`" in line


def test_audit_command_reports_a_planted_duplicate(demo, tmp_path, capsys):
    from geofidelity_bench.benchmark import save_benchmark

    bench, _, src_other = _planted(demo)
    folder = tmp_path / "planted"
    save_benchmark(bench, folder)
    out = tmp_path / "audit"
    assert main(["audit", "--benchmark", str(folder), "--hash-only", "--no-cache", "--out", str(out),
                 "--no-progress", "--fail-on-copies"]) == 1
    printed = capsys.readouterr().out
    assert "2 near-duplicate pair(s)" in printed and "1 cross_block" in printed
    pairs = pd.read_csv(out / "copy_audit_pairs.csv")
    assert src_other.reference_id in set(pairs["reference_id"]) | set(pairs["duplicate_id"])


# -- the app ----------------------------------------------------------------------------------------


def test_app_scoring_audits_uploads_against_every_photo(demo, cache_dir):
    from geofidelity_bench.demo_app.state import load_app_data

    data = load_app_data("demo", "efficientnet-lite0", cache_dir=str(cache_dir))
    src = demo.heldout("lund_seg3")[0]
    copy = Image.open(io.BytesIO(INDEPENDENT_AUGMENTATIONS["flip_crop_webp"](src.image()))).convert("RGB")
    fresh = Image.open(io.BytesIO(jpeg_bytes(5, size=(96, 64)))).convert("RGB")
    result = data.score("berlin_am_lustgarten", [copy, fresh], ["copy.webp", "fresh.jpg"])
    assert [(r["file"], r["reference_id"], r["reference_block_id"]) for r in result.near_copies] == [
        ("copy.webp", src.reference_id, "lund_seg3")]  # a held-out photo of another block counts
    assert [r["flagged"] for r in result.copy_audit] == [True, False]
    assert result.row["n_copied"] == 1
    assert result.as_json()["copy_audit"] == result.copy_audit
    assert data.photo(src.reference_id) is not None


def test_a_damaged_hash_shard_is_set_aside_and_the_hashes_recomputed(tmp_path):
    from geofidelity_bench.benchmark import load_benchmark
    from geofidelity_bench.near_copies import HashCache, hash_items

    photos = [r.image_bytes for r in load_benchmark("demo").gallery("berlin_am_lustgarten")]
    clean, shas = hash_items(photos, cache=HashCache(tmp_path))
    shard = next(HashCache(tmp_path).dir.glob("hashes-*.npz"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside the stored banks
    shard.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="ignoring damaged perceptual-hash cache shard"):
        again, _ = hash_items(photos, cache=HashCache(tmp_path))
    assert all((a == b).all() for a, b in zip(again, clean))
    assert shard.with_name(shard.name + ".corrupt").exists()
    # the recomputed hashes went to a new, checksummed shard that a later run reads without a warning
    assert len(HashCache(tmp_path).get(shas)) == len(set(shas))


def test_a_hash_shard_without_a_checksum_is_set_aside_as_unverified(tmp_path):
    from geofidelity_bench.near_copies import CROP_BOXES, HashCache

    cache = HashCache(tmp_path)
    cache.dir.mkdir(parents=True)
    old = cache.dir / "hashes-old.npz"
    np.savez(old, keys=np.array(["a" * 64]), banks=np.zeros((1, 2, CROP_BOXES + 1, 4), dtype=np.uint64))
    with pytest.warns(UserWarning, match="ignoring unverified perceptual-hash cache shard"):
        assert HashCache(tmp_path).get(["a" * 64]) == {}  # never trusted: the image is hashed again
    assert old.with_name(old.name + ".unverified").exists() and not old.exists()


# -- audit on bad inputs (issue 43) ------------------------------------------------------------------


def _benchmark_with_undecodable(folder: Path, bad: dict[int, bytes]) -> Path:
    """A small saved benchmark whose references at the positions of ``bad`` hold those bytes (and their hash)."""
    import hashlib

    from conftest import make_block, make_refs
    from geofidelity_bench.benchmark import save_benchmark

    blocks = [make_block("a1", neg_random_city="b1"), make_block("b1", city="berlin", country="DE", neg_random_city="a1")]
    save_benchmark(Benchmark(blocks, make_refs("a1", 3, 1) + make_refs("b1", 3, 2), name="t"), folder)
    (table,) = (folder / "references").glob("*.parquet")
    df = pd.read_parquet(table)
    for i, data in bad.items():
        df.at[i, "image"] = {**df["image"].iloc[i], "bytes": data}
        df.at[i, "image_sha256"] = hashlib.sha256(data).hexdigest()
    df.to_parquet(table)
    return folder


_BAD_PHOTOS = {
    "two undecodable": {1: b"not an image", 4: b"not one either"},
    "undecodable and truncated": {0: b"garbage bytes", 5: jpeg_bytes(7)[:60]},
    "three undecodable": {0: b"x", 2: b"yy", 4: b"zzz"},
}


@pytest.mark.parametrize("bad", list(_BAD_PHOTOS.values()), ids=list(_BAD_PHOTOS))
def test_audit_names_every_undecodable_photo_in_one_run(tmp_path, capsys, bad):
    folder = _benchmark_with_undecodable(tmp_path / "bench", bad)
    ids = list(pd.read_parquet(next((folder / "references").glob("*.parquet")))["reference_id"].iloc[list(bad)])
    out = tmp_path / "audit"
    assert main(["audit", "--benchmark", str(folder), "--hash-only", "--no-cache", "--no-progress",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{len(bad)} photo(s)" in err and "cannot be decoded" in err and "Traceback" not in err
    for ref_id in ids:
        assert f"reference {ref_id}" in err
    assert not out.exists()  # nothing was audited, nothing written


_OUT_PATHS = {
    "an existing file": ("report.txt", "it exists and is not a folder"),
    "a folder under a file": ("report.txt/sub", "cannot create this folder"),
}


@pytest.mark.parametrize("out,says", list(_OUT_PATHS.values()), ids=list(_OUT_PATHS))
def test_audit_out_on_a_file_is_a_one_line_usage_error(tmp_path, capsys, out, says):
    (tmp_path / "report.txt").write_text("keep me")
    assert main(["audit", "--benchmark", "demo", "--hash-only", "--no-cache", "--no-progress",
                 "--out", str(tmp_path / out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and says in err and str(tmp_path / out) in err
    assert len(err.strip().splitlines()) == 1
    assert (tmp_path / "report.txt").read_text() == "keep me"
