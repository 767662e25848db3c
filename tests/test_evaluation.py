import hashlib
import json
import random

import numpy as np
import pandas as pd
import pytest

from conftest import jpeg_bytes, make_block, make_refs
from geofidelity_bench.benchmark import Benchmark, load_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.evaluation import (
    RESULT_COLUMNS,
    EvaluationError,
    anchor_panels,
    evaluate_panels,
    read_generated_folder,
    sanity_panels,
    score_embeddings,
    summaries,
)


@pytest.fixture(scope="module")
def demo():
    return load_benchmark("demo")


# -- anchors -----------------------------------------------------------------------------------


def test_anchor_sampling_is_deterministic_and_never_uses_the_target(demo):
    a, b = anchor_panels(demo), anchor_panels(demo)
    assert a == b
    for bid in demo.block_ids:
        held = {r.reference_id for r in demo.heldout(bid)}
        gallery = {r.reference_id for r in demo.gallery(bid)}
        panel = a[("heldout_real", "anchor", bid)]
        assert len(panel) == 4 and {r.reference_id for r in panel} == held
        assert not gallery & {r.reference_id for r in panel}
        for method in ("random_same_country", "random_global"):
            panel = a[(method, "anchor", bid)]
            assert len(panel) == 4
            assert all(r.block_id != bid for r in panel)
            # Drawn from other blocks' galleries only, never their held-out queries.
            assert all(r in demo.gallery(r.block_id) for r in panel)
        country = demo.block(bid).country
        same = [r for r in a[("random_same_country", "anchor", bid)]]
        others_same_country = [b for b in demo.blocks if b.country == country and b.block_id != bid]
        if others_same_country:
            assert all(demo.block(r.block_id).country == country for r in same)


def test_anchor_draw_matches_documented_seed(demo):
    bid = "lund_seg2"
    pool = sorted((r for b in demo.blocks if b.block_id != bid for r in demo.gallery(b.block_id)),
                  key=lambda r: r.reference_id)
    expected = random.Random(f"0|{bid}|random_global").sample(pool, 4)
    assert anchor_panels(demo)[("random_global", "anchor", bid)] == expected


def test_a_pool_of_exactly_the_panel_size_is_drawn_without_replacement(demo):
    """The demo's Arezzo blocks: each one's same-country pool is the other two Arezzo galleries, exactly 4
    photos. ``rng.sample`` (section 6: "at least 4") gives those 4 photos once each, in the seeded order;
    drawing with replacement there would repeat photos and change the anchor's numbers."""
    panels = anchor_panels(demo)
    arezzo = [b.block_id for b in demo.blocks if b.city == "arezzo"]
    assert len(arezzo) == 3
    for bid in arezzo:
        pool = sorted((r for b in arezzo if b != bid for r in demo.gallery(b)), key=lambda r: r.reference_id)
        assert len(pool) == 4  # the boundary case: pool size == panel size
        panel = panels[("random_same_country", "anchor", bid)]
        assert panel == random.Random(f"0|{bid}|random_same_country").sample(pool, 4)
        assert sorted(r.reference_id for r in panel) == [r.reference_id for r in pool]  # each photo once
    # a panel one photo larger than the pool is drawn with replacement (rng.choice five times)
    small = anchor_panels(demo, n=5)[("random_same_country", "anchor", arezzo[0])]
    pool = sorted((r for b in arezzo[1:] for r in demo.gallery(b)), key=lambda r: r.reference_id)
    rng = random.Random(f"0|{arezzo[0]}|random_same_country")
    assert small == [rng.choice(pool) for _ in range(5)]


def _documented_heldout(block_id, references):
    """docs/benchmark.md section 1 (Held-out split), rebuilt here: sort by id, shuffle with the sha256 seed, first k."""
    ordered = sorted(references, key=lambda r: r.reference_id)
    seed = int.from_bytes(hashlib.sha256(f"0|{block_id}".encode()).digest()[:8], "big")
    random.Random(seed).shuffle(ordered)
    return ordered[: max(1, min(4, len(ordered) // 2))]


def test_heldout_anchor_cycles_the_heldout_images_in_the_documented_order():
    # 3, 5, 6 and 9 references hold out 1, 2, 3 and 4 images; section 6: image i is heldout[i % len(heldout)].
    sizes = {"k1": 3, "k2": 5, "k3": 6, "k4": 9}
    blocks = [make_block(bid, centroid=(48.0 + i, 2.0)) for i, bid in enumerate(sizes)]
    refs = {bid: make_refs(bid, n, seed=i) for i, (bid, n) in enumerate(sizes.items())}
    bench = Benchmark(blocks, [r for rs in refs.values() for r in rs], name="cycling")
    panels = anchor_panels(bench)
    for bid, n in sizes.items():
        held = [r.reference_id for r in _documented_heldout(bid, refs[bid])]
        assert len(held) == {"k1": 1, "k2": 2, "k3": 3, "k4": 4}[bid]
        panel = [r.reference_id for r in panels[("heldout_real", "anchor", bid)]]
        order = {1: [0, 0, 0, 0], 2: [0, 1, 0, 1], 3: [0, 1, 2, 0], 4: [0, 1, 2, 3]}[len(held)]
        assert panel == [held[i] for i in order], bid
    # The panel size is a parameter: a panel of 5 from 3 held-out images continues the cycle.
    held3 = [r.reference_id for r in _documented_heldout("k3", refs["k3"])]
    five = [r.reference_id for r in anchor_panels(bench, n=5)[("heldout_real", "anchor", "k3")]]
    assert five == [held3[0], held3[1], held3[2], held3[0], held3[1]]


def test_sanity_panels_are_labelled_and_deterministic(demo):
    a, b = sanity_panels(demo), sanity_panels(demo)
    assert a == b
    assert {k[0] for k in a} == {"sanity_augmented_heldout", "sanity_world"}
    assert all(k[1] == "sanity" for k in a)
    world_bytes = {w.image_bytes for w in demo.world}
    assert all(img in world_bytes for k, v in a.items() if k[0] == "sanity_world" for img in v)


# -- scoring from embeddings ---------------------------------------------------------------------


@pytest.fixture
def emb_setup():
    rng = np.random.default_rng(0)
    blocks = [
        make_block("t", neg_same_neighborhood="n1", neg_same_city="n1", neg_same_driving_side="n2"),
        make_block("n1"),
        make_block("n2", city="rome", country="IT"),
    ]
    galleries = {b.block_id: rng.normal(size=(6, 8)) + i for i, b in enumerate(blocks)}
    panel = rng.normal(size=(4, 8)) + 0.2
    return blocks, galleries, panel


def _unit(x):
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_score_rows_match_independent_computation(emb_setup):
    blocks, galleries, panel = emb_setup
    df = score_embeddings(blocks, galleries, {("m", "L1", "t"): panel}, encoder_name="enc")
    assert list(df.columns) == RESULT_COLUMNS
    row = df.iloc[0]
    ref = galleries["t"]
    mg, mr = panel.mean(0), ref.mean(0)
    assert row.cos_sim == pytest.approx(mg @ mr / (np.linalg.norm(mg) * np.linalg.norm(mr) + 1e-8))
    # Retrieval by brute force: candidates target, n1 (twice: same_neighborhood and same_city), n2.
    cands = [("target", "t"), ("same_neighborhood", "n1"), ("same_city", "n1"), ("same_driving_side", "n2")]
    sims = {name: [float(_unit(g) @ _unit(galleries[b].mean(0))) for g in panel] for name, b in cands}
    ranks = [sum(sims[n][i] >= sims["target"][i] for n, _ in cands[1:]) for i in range(4)]
    assert row.retrieval_acc == pytest.approx(np.mean([r == 0 for r in ranks]))
    assert row.mrr == pytest.approx(np.mean([1 / (r + 1) for r in ranks]))
    assert row.sim_target == pytest.approx(np.mean(sims["target"]))
    assert row.sim_same_city == pytest.approx(np.mean(sims["same_city"]))
    assert np.isnan(row.sim_random_city)  # missing negative: NaN in its own column, nothing shifted
    assert row.sim_same_driving_side == pytest.approx(np.mean(sims["same_driving_side"]))
    assert row.local_margin == pytest.approx(row.sim_target - max(row.sim_same_neighborhood, row.sim_same_city))
    assert row.n_generated == 4 and row.n_reference == 6 and row.encoder == "enc"
    assert np.isnan(row.gaas)
    reasons = df.attrs["nan_reasons"]
    assert {r["column"] for r in reasons} == {"gaas", "sim_random_city"}  # every NaN says why
    assert [r["reason"] for r in reasons if r["column"] == "sim_random_city"] == [
        "the block has no random_city negative"]


def test_identical_panel_gives_ideal_scores(emb_setup):
    blocks, galleries, _ = emb_setup
    df = score_embeddings(blocks, galleries, {("copy", "L0", "t"): galleries["t"]}, encoder_name="enc")
    assert df.cos_sim[0] == pytest.approx(1.0)
    assert df.mmd[0] == pytest.approx(0.0, abs=1e-9)
    assert df.diversity_gap[0] == pytest.approx(0.0, abs=1e-12)


def test_permuting_and_scaling_panel(emb_setup):
    blocks, galleries, panel = emb_setup
    base = score_embeddings(blocks, galleries, {("m", "L1", "t"): panel}, encoder_name="e")
    perm = score_embeddings(blocks, galleries, {("m", "L1", "t"): panel[::-1]}, encoder_name="e")
    pd.testing.assert_frame_equal(base, perm)
    scaled = score_embeddings(blocks, galleries, {("m", "L1", "t"): panel * 3.0}, encoder_name="e")
    for col in ("cos_sim", "retrieval_acc", "mrr", "sim_target", "local_margin"):
        assert scaled[col][0] == pytest.approx(base[col][0])


def test_block_without_negatives_has_nan_margins(emb_setup):
    blocks, galleries, panel = emb_setup
    df = score_embeddings(blocks, galleries, {("m", "L1", "n1"): panel}, encoder_name="e")
    row = df.iloc[0]
    assert row.retrieval_acc == 1.0 and row.mrr == 1.0  # the target is the only candidate
    assert np.isnan(row.local_margin) and np.isnan(row.strongest_margin)
    assert {"local_margin", "strongest_margin"} <= {r["column"] for r in df.attrs["nan_reasons"]}


def test_summaries_group_means(emb_setup):
    blocks, galleries, panel = emb_setup
    df = score_embeddings(blocks, galleries, {("m", "L1", "t"): panel, ("m", "L1", "n2"): panel,
                                              ("m", "L0", "t"): panel * 0.5}, encoder_name="e")
    out = summaries(df)
    by_mc = out["by_method_condition"].set_index(["method", "condition"])
    assert by_mc.loc[("m", "L1"), "n_blocks"] == 2
    assert by_mc.loc[("m", "L1"), "cos_sim"] == pytest.approx(df[df.condition == "L1"].cos_sim.mean())
    assert set(out) == {"by_method", "by_method_condition", "by_city_method", "by_condition"}


# -- evaluate_panels with a real encoder -------------------------------------------------------------


@pytest.fixture(scope="module")
def encoder():
    from geofidelity_bench.encoders import get_encoder

    return get_encoder("efficientnet-lite0", device="cpu")


def test_precomputed_embeddings_equal_images(demo, encoder, warm_demo_cache):
    from geofidelity_bench.encoders import EmbeddingCache, embed_images

    cache = EmbeddingCache(warm_demo_cache)
    imgs = [r.image_bytes for r in demo.heldout("lund_seg1")]
    by_image = evaluate_panels(demo, {("m", "L0", "lund_seg1"): imgs}, encoder, cache=cache, progress=False)
    emb = embed_images(encoder, imgs, cache=cache, progress=False)
    by_emb = evaluate_panels(demo, {("m", "L0", "lund_seg1"): emb}, encoder, cache=cache, progress=False)
    pd.testing.assert_frame_equal(by_image, by_emb)


def test_panel_errors_are_named(demo, encoder):
    with pytest.raises(EvaluationError, match="unknown block id 'atlantis'"):
        evaluate_panels(demo, {("m", "L0", "atlantis"): [b"x"]}, encoder, progress=False)
    with pytest.raises(EvaluationError, match="no images"):
        evaluate_panels(demo, {("m", "L0", "lund_seg1"): []}, encoder, progress=False)
    with pytest.raises(EvaluationError, match="dimension 7"):
        evaluate_panels(demo, {("m", "L0", "lund_seg1"): np.zeros((4, 7), np.float32)}, encoder, progress=False)
    with pytest.raises(EvaluationError, match="no panels"):
        evaluate_panels(demo, {}, encoder, progress=False)


# -- generated folders ---------------------------------------------------------------------------


def _write_panel(root, method, condition, block_id, images):
    folder = root / method / condition / block_id
    folder.mkdir(parents=True, exist_ok=True)
    for k, data in enumerate(images):
        (folder / f"{k:02d}.jpg").write_bytes(data)
    return folder


def test_read_generated_folder(demo, tmp_path):
    imgs = [w.image_bytes for w in demo.world[:4]]
    _write_panel(tmp_path, "model_a", "L0", "lund_seg1", imgs)
    _write_panel(tmp_path, "model_a", "GPS_ONLY", "arezzo_park_path", imgs[:2])
    panels = read_generated_folder(tmp_path, demo)
    assert sorted(panels) == [("model_a", "GPS_ONLY", "arezzo_park_path"), ("model_a", "L0", "lund_seg1")]
    assert [p.name for p in panels[("model_a", "L0", "lund_seg1")]] == ["00.jpg", "01.jpg", "02.jpg", "03.jpg"]
    assert list(read_generated_folder(tmp_path, demo, conditions=["L0"])) == [("model_a", "L0", "lund_seg1")]


def test_generated_folder_problems_are_all_reported(demo, tmp_path):
    img = demo.world[0].image_bytes
    _write_panel(tmp_path, "m", "L0", "atlantis", [img, img])
    (tmp_path / "m" / "L0" / "lund_seg1").mkdir(parents=True)
    _write_panel(tmp_path, "m", "L0", "lund_seg2", [img, img])
    (tmp_path / "m" / "L0" / "lund_seg2" / "notes.txt").write_text("hi")
    _write_panel(tmp_path, "m", "L0", "lund_seg3", [img])
    _write_panel(tmp_path, "bad name", "L0", "lund_seg1", [img, img])
    with pytest.raises(EvaluationError) as info:
        read_generated_folder(tmp_path, demo)
    msg = str(info.value)
    assert "unknown block id 'atlantis'" in msg
    assert "lund_seg1: empty panel" in msg
    assert "notes.txt: not a panel image" in msg
    assert "lund_seg3: 1 image(s)" in msg
    assert "bad name: unsafe method folder name" in msg
    with pytest.raises(EvaluationError, match="requested method 'ghost'"):
        read_generated_folder(tmp_path, demo, methods=["ghost"])


def test_non_image_with_image_name_fails_naming_the_file(demo, encoder, tmp_path):
    img = demo.world[0].image_bytes
    folder = _write_panel(tmp_path, "m", "L0", "lund_seg1", [img, b"this is text, not a jpeg"])
    panels = read_generated_folder(tmp_path, demo)
    from geofidelity_bench.images import ImageDecodeError

    with pytest.raises(ImageDecodeError, match=str(folder / "01.jpg")):
        evaluate_panels(demo, panels, encoder, progress=False)


# -- CLI ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_evaluate_cli_writes_results_and_run_json(demo, tmp_path, capsys, warm_demo_cache):
    gen = tmp_path / "gen"
    for i, bid in enumerate(["lund_seg1", "berlin_am_lustgarten"]):
        _write_panel(gen, "world_photos", "L0", bid, [w.image_bytes for w in demo.world[4 * i : 4 * i + 4]])
    out = tmp_path / "out"
    code = main(["evaluate", "--benchmark", "demo", "--generated", str(gen), "--encoder", "efficientnet-lite0",
                 "--out", str(out), "--cache-dir", str(warm_demo_cache), "--no-progress"])
    assert code == 0
    df = pd.read_csv(out / "results.csv")
    assert list(df.columns) == RESULT_COLUMNS
    assert set(df.method) == {"world_photos", "heldout_real", "random_same_country", "random_global"}
    assert (df.encoder == "efficientnet-lite0").all()
    for name in ("by_method", "by_method_condition", "by_city_method", "by_condition"):
        assert (out / f"summary_{name}.csv").stat().st_size > 0
    run = json.loads((out / "run.json").read_text())
    assert run["benchmark"]["fingerprint"] == demo.fingerprint
    assert run["encoder"]["name"] == "efficientnet-lite0" and run["encoder"]["config"]
    assert run["parameters"]["generated"] == str(gen)
    assert "numpy" in run["versions"]
    assert any(r["column"] == "gaas" for r in run["nan_reasons"])
    assert "world_photos" in capsys.readouterr().out


def test_evaluate_cli_bad_folder_is_clean_error(tmp_path, capsys):
    (tmp_path / "gen" / "m" / "L0" / "atlantis").mkdir(parents=True)
    code = main(["evaluate", "--generated", str(tmp_path / "gen"), "--encoder", "efficientnet-lite0",
                 "--out", str(tmp_path / "out")])
    assert code == 2
    assert "atlantis" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_demo_main_job(tmp_path, capsys, warm_demo_cache):
    """`demo` without segmenter weights: the leaderboard, the report, GAAS n/a with how to get it, the cache.
    (The cache starts with the demo's embeddings; the second run shows that a run reads everything back.)"""
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--cache-dir", str(warm_demo_cache), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "Leaderboard" in printed and "Similarity hierarchy" in printed and "GAAS: n/a" in printed
    assert "--segmenter-weights PATH" in printed  # says how to provide the segmenter weights
    gaas = json.loads((out / "run.json").read_text())["gaas"]
    assert gaas["segmenter"] is None and "--segmenter-weights" in gaas["reason"]
    df = pd.read_csv(out / "results.csv")
    mean = df.groupby("method")[["cos_sim", "retrieval_acc"]].mean()
    assert mean.loc["heldout_real", "cos_sim"] > mean.loc["random_global", "cos_sim"]
    assert mean.loc["heldout_real", "retrieval_acc"] > mean.loc["random_global", "retrieval_acc"]
    assert mean.loc["sanity_augmented_heldout", "cos_sim"] > mean.loc["sanity_world", "cos_sim"]
    assert json.loads((out / "run.json").read_text())["encoder"]["name"] == "efficientnet-lite0"
    report = (out / "report" / "report.md").read_text()
    assert "Table 10: leaderboard with real-image anchors" in report and "Held-out Real" in report
    assert "Table 5: CosSim by prompt condition\n\nskipped:" in report  # no generated rows in the demo
    for plot in ("leaderboard.png", "hierarchy.png", "city_heatmap.png"):
        assert (out / "report" / "plots" / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A second run is served from the embedding cache.
    assert main(["demo", "--out", str(out), "--cache-dir", str(warm_demo_cache), "--no-progress"]) == 0
    stats = json.loads((out / "run.json").read_text())["embedding_stats"]
    assert stats["forward_images"] == 0 and stats["from_cache"] == stats["total"]


# -- GAAS with a segmenter ---------------------------------------------------------------------------


@pytest.mark.slow
def test_gaas_with_a_segmenter_equals_independent_computation(demo, encoder, tiny_m2f_small_dir, warm_demo_cache):
    from scipy.spatial.distance import jensenshannon

    from geofidelity_bench.encoders import EmbeddingCache
    from geofidelity_bench.segmentation import gaas_shares, get_segmenter, segment_images

    seg = get_segmenter("mask2former-vistas", weights=tiny_m2f_small_dir, device="cpu")
    panel = [w.image_bytes for w in demo.world[:3]]
    emb_only = embed_images_for(encoder, [w.image_bytes for w in demo.world[3:6]])
    # the embeddings from the demo's cache; the shares (GAAS) computed here and independently below
    df = evaluate_panels(demo, {("m", "L0", "lund_seg1"): panel, ("e", "L0", "lund_seg1"): emb_only}, encoder,
                         segmenter=seg, cache=EmbeddingCache(warm_demo_cache), progress=False)
    gen = gaas_shares(segment_images(seg, panel, progress=False))
    ref = gaas_shares(segment_images(seg, [r.image_bytes for r in demo.gallery("lund_seg1")], progress=False))
    expected = np.mean([
        jensenshannon(*(np.histogram(x[:, g], bins=10, range=(0, 1))[0] + 1e-8 for x in (gen, ref)), base=2)
        for g in range(8)
    ])
    row = df.set_index("method").loc["m"]
    assert row.gaas == pytest.approx(expected, abs=1e-9)
    assert np.isnan(df.set_index("method").loc["e", "gaas"])  # embeddings only: no images to segment
    reasons = [r for r in df.attrs["nan_reasons"] if r["column"] == "gaas"]
    assert [r["method"] for r in reasons] == ["e"] and "precomputed embeddings" in reasons[0]["reason"]
    assert df.attrs["segment_stats"]["total"] > 0


def embed_images_for(encoder, images):
    from geofidelity_bench.encoders import embed_images

    return embed_images(encoder, images, progress=False)


@pytest.mark.slow
def test_demo_reports_gaas_with_local_segmenter_weights(tiny_m2f_small_dir, tmp_path, capsys, warm_demo_cache):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--cache-dir", str(warm_demo_cache), "--no-progress",
                 "--segmenter-weights", str(tiny_m2f_small_dir)]) == 0
    assert "GAAS computed with segmenter mask2former-vistas" in capsys.readouterr().out
    df = pd.read_csv(out / "results.csv")
    assert df.gaas.notna().all() and ((df.gaas >= 0) & (df.gaas <= 1)).all()
    gaas = json.loads((out / "run.json").read_text())["gaas"]
    assert gaas["segmenter"] == "mask2former-vistas" and gaas["config_hash"]


# -- near copies of reference photos --------------------------------------------------------------


def _reencoded(data: bytes) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.open(io.BytesIO(data)).convert("RGB").save(buf, format="JPEG", quality=90)
    return buf.getvalue()


@pytest.mark.slow
def test_evaluate_warns_about_panels_copied_from_reference_photos(demo, tmp_path, capsys, warm_demo_cache):
    gen = tmp_path / "gen"
    own = demo.gallery("lund_seg1")[:3]
    other = demo.gallery("lund_seg2")[0]
    # lund_seg1: two byte-identical gallery photos and one re-encoded one (a near copy, not the same bytes);
    # berlin: two world photos and a re-encoded photo of another block (a copy of any block or the pool counts).
    copies = _write_panel(gen, "copycat", "L0", "lund_seg1",
                          [own[0].image_bytes, own[1].image_bytes, _reencoded(own[2].image_bytes)])
    mixed = _write_panel(gen, "copycat", "L0", "berlin_am_lustgarten",
                         [demo.world[0].image_bytes, demo.world[1].image_bytes, _reencoded(other.image_bytes)])
    out = tmp_path / "out"
    assert main(["evaluate", "--benchmark", "demo", "--generated", str(gen), "--encoder", "efficientnet-lite0",
                 "--out", str(out), "--cache-dir", str(warm_demo_cache), "--no-progress"]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "copies of the benchmark's own photos" in line]
    assert len(warnings) == 1, err
    assert warnings[0].startswith("warning: 6 submitted image(s)")
    assert str(copies / "00.jpg") in warnings[0]
    near = json.loads((out / "run.json").read_text())["near_copies"]
    expected = {copies / "00.jpg": (own[0].reference_id, own[0].block_id, True),
                copies / "01.jpg": (own[1].reference_id, own[1].block_id, True),
                copies / "02.jpg": (own[2].reference_id, own[2].block_id, False),
                mixed / "00.jpg": (demo.world[0].image_id, "world", True),
                mixed / "01.jpg": (demo.world[1].image_id, "world", True),
                mixed / "02.jpg": (other.reference_id, other.block_id, False)}
    assert {r["file"] for r in near} == {str(p) for p in expected}
    for rec in near:
        assert (rec["method"], rec["condition"]) == ("copycat", "L0")
        assert (rec["reference_id"], rec["reference_block_id"], rec["exact"]) == expected[type(copies)(rec["file"])]
        assert rec["flagged"] and rec["hash_distance"] <= 60


def test_near_copies_exact_match_reaches_every_block_and_held_out_photos(demo):
    from geofidelity_bench.near_copies import find_near_copies

    held = demo.heldout("arezzo_park_path")[0]
    panel = [held.image_bytes, demo.world[0].image_bytes, jpeg_bytes(3, size=(96, 64))]
    emb = np.random.default_rng(0).normal(size=(3, 8))  # embeddings are not compared here (no pool embeddings)
    found = find_near_copies(demo, {("m", "L0", "lund_seg1"): panel}, {("m", "L0", "lund_seg1"): emb})
    assert [(r["file"], r["reference_id"], r["reference_block_id"], r["exact"], r["hash_distance"], r["cosine"])
            for r in found] == [("panel image 0", held.reference_id, "arezzo_park_path", True, 0, None),
                                ("panel image 1", demo.world[0].image_id, "world", True, 0, None)]


@pytest.mark.parametrize("rows", [1024, 3, 1])
def test_near_copies_of_embeddings_in_blocks_of_rows_equal_the_whole_comparison(demo, monkeypatch, rows):
    """Panels given as embeddings are compared by cosine only: flagged at cosine >= COPY_COSINE with the
    closest pool photo, whatever the number of rows compared at a time; the brute force is a loop."""
    from geofidelity_bench import near_copies

    monkeypatch.setattr(near_copies, "QUERY_ROWS", rows)
    rng = np.random.default_rng(5)
    pool_items = near_copies.pool_items(demo)
    pool_emb = rng.normal(size=(len(pool_items), 16))
    ids = [getattr(x, "reference_id", None) or x.image_id for x in pool_items]
    panels = {}
    for k, bid in enumerate(demo.block_ids):
        emb = rng.normal(size=(3, 16))
        emb[0] = pool_emb[k] * 2.5  # a copy (cosine 1)
        emb[1] = pool_emb[-k - 1] + 1e-3 * rng.normal(size=16)  # a near copy (of a world photo)
        panels[("m", "L1", bid)] = emb
    found = near_copies.find_near_copies(demo, {}, panels, pool_emb)
    unit = pool_emb / np.linalg.norm(pool_emb, axis=1, keepdims=True)
    expected = []
    for key, emb in panels.items():
        for i, e in enumerate(emb):
            sims = [float(e @ u) / float(np.linalg.norm(e)) for u in unit]
            j = int(np.argmax(sims))
            if sims[j] >= near_copies.COPY_COSINE:
                expected.append((key, f"embedding {i}", ids[j], round(sims[j], 6)))
    got = [((r["method"], r["condition"], r["block_id"]), r["file"], r["reference_id"], r["cosine"]) for r in found]
    assert [g[:3] for g in got] == [e[:3] for e in expected]
    assert [g[3] for g in got] == pytest.approx([e[3] for e in expected], abs=2e-6)
    assert len(got) == 2 * len(demo.block_ids)
    assert all(r["hash_distance"] is None for r in found)


def _anchor_panels_sorting_every_pool(benchmark, n=4):
    """docs/benchmark.md section 6 as written: each block's pools built and sorted by reference id."""
    panels = {}
    for block in benchmark.blocks:
        bid = block.block_id
        others = [b for b in benchmark.blocks if b.block_id != bid]
        same_country = [b for b in others if b.country == block.country] or others
        for method, pool_blocks in (("random_same_country", same_country), ("random_global", others)):
            pool = sorted((r for b in pool_blocks for r in benchmark.gallery(b.block_id)), key=lambda r: r.reference_id)
            if pool:
                rng = random.Random(f"0|{bid}|{method}")
                panels[(method, "anchor", bid)] = (rng.sample(pool, n) if len(pool) >= n
                                                   else [rng.choice(pool) for _ in range(n)])
    return panels


@pytest.mark.parametrize("seed", range(4))
def test_anchor_pools_sorted_once_draw_what_sorting_every_pool_draws(seed):
    """The pools are views of lists sorted once; the draws equal those from each pool built and sorted,
    with countries of one block (the global pool), small pools (drawn with replacement) and reference ids
    that interleave the blocks."""
    import dataclasses

    rng = np.random.default_rng(seed)
    countries = ["FR", "IT", "JP", "SE"][: 2 + seed % 3]
    blocks, refs = [], []
    for i in range(int(rng.integers(6, 14))):
        bid = f"blk{int(rng.integers(0, 10**6)):06d}_{i}"
        country = countries[0] if i == 0 and seed == 3 else str(rng.choice(countries))
        blocks.append(make_block(bid, country=country, centroid=(48.0 + i, 2.0)))
        # 3 references: a gallery of 2 (pools under 5 photos are drawn with replacement)
        refs += [dataclasses.replace(r, reference_id=f"r{int(rng.integers(0, 10**6)):06d}_{i}_{k}")
                 for k, r in enumerate(make_refs(bid, int(rng.choice([3, 4, 7, 12])), seed=seed * 100 + i))]
    bench = Benchmark(blocks, refs, name="pools", validate_images=False)
    got = {k: v for k, v in anchor_panels(bench, n=5).items() if k[0] != "heldout_real"}
    assert got == _anchor_panels_sorting_every_pool(bench, n=5)
    assert got


# -- n_distinct and the chance columns (issue 28 parts 2-3) -------------------------------------------


def test_rows_record_distinct_images_and_the_chance_of_their_candidates(demo, encoder, warm_demo_cache):
    import itertools

    from geofidelity_bench.encoders import EmbeddingCache

    img = [r.image_bytes for r in demo.gallery("lund_seg1")]
    panels = {("m", "L0", "lund_seg1"): [img[0], img[1], img[0], img[0]],  # 2 distinct files, cycled
              ("m", "L0", "lund_seg2"): [demo.gallery("lund_seg2")[0].image_bytes] + img[:3]}
    cache = EmbeddingCache(warm_demo_cache)
    df = evaluate_panels(demo, panels, encoder, include_anchors=True, cache=cache, progress=False)
    assert list(df.columns) == RESULT_COLUMNS
    row = df.set_index(["method", "condition", "block_id"])
    assert row.loc[("m", "L0", "lund_seg1"), "n_distinct"] == 2
    assert row.loc[("m", "L0", "lund_seg2"), "n_distinct"] == 4
    for block in demo.blocks:
        held = {r.reference_id for r in demo.heldout(block.block_id)}
        # the paper's rule cycles the held-out photos to 4: a block with one held-out photo has 1 distinct image
        assert row.loc[("heldout_real", "anchor", block.block_id), "n_distinct"] == min(len(held), 4)
        assert row.loc[("heldout_real", "anchor", block.block_id), "n_generated"] == 4
        assert np.isnan(row.loc[("heldout_real", "anchor", block.block_id), "n_copied"])
        # chance: every ordering of the distinct candidate blocks, ties (two roles, one block) against the target
        negs = [n for n in demo.negatives(block.block_id).values() if n]
        distinct = [block.block_id, *sorted(set(negs))]
        ranks = [sum(n in order[: order.index(block.block_id)] for n in negs)
                 for order in itertools.permutations(distinct)]
        r = row.loc[("heldout_real", "anchor", block.block_id)]
        assert r["n_candidates"] == 1 + len(negs)
        assert r["chance_retrieval_acc"] == pytest.approx(np.mean([k == 0 for k in ranks]))
        assert r["chance_mrr"] == pytest.approx(np.mean([1 / (k + 1) for k in ranks]))
    # embeddings without bytes: distinct rows
    emb = np.random.default_rng(0).standard_normal((3, encoder.dim)).astype(np.float32)
    by_emb = evaluate_panels(demo, {("e", "L0", "lund_seg1"): emb[[0, 1, 1, 2, 0]]}, encoder, cache=cache,
                             progress=False)
    assert by_emb["n_distinct"].tolist() == [3]
