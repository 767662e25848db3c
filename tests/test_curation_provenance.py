"""What a curated benchmark records and says about itself (issue 33, section 4): the kind of each
same-neighborhood negative (a real one or a fallback), the card written from the curation record
(only the filters that ran, generator terms only for generated images), and the report's caveat
when a same-neighborhood number mixes real negatives and fallbacks."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from conftest import make_block, make_refs
from geofidelity_bench.benchmark import Benchmark, load_benchmark
from geofidelity_bench.curation.negatives import assign_negatives
from geofidelity_bench.geo import haversine_m


def _expected_kind(block, neg) -> str:
    """docs/benchmark.md section 8, Negatives, read independently: a same-label block within 1 km is a real
    same-neighborhood negative (empty labels and 'downtown' never match); anything else is a fallback."""
    near = haversine_m(*block.centroid, *neg.centroid) <= 1000.0
    label = (block.neighborhood or "").strip()
    if near and label and label.lower() != "downtown" and neg.neighborhood == label:
        return "same_neighborhood"
    return "fallback_nearby" if near else "fallback_far"


def test_every_same_neighborhood_negative_is_marked_real_or_fallback():
    step = 300 / 111_195  # ~300 m of latitude
    blocks = [
        make_block("q_a", neighborhood="Quarter", centroid=(48.0, 2.0)),
        make_block("q_b", neighborhood="Quarter", centroid=(48.0 + step, 2.0)),  # a's real neighbor
        make_block("q_c", neighborhood="Other", centroid=(48.0 + 2 * step, 2.0)),  # near, another label
        make_block("q_d", neighborhood=None, centroid=(48.0 - step, 2.0)),  # near, unknown label
        make_block("q_e", neighborhood="downtown", centroid=(48.0 - 2 * step, 2.0)),  # near, never matches
        make_block("q_f", neighborhood="downtown", centroid=(48.0 - 2.5 * step, 2.0)),
        make_block("q_g", neighborhood="Alone", centroid=(48.2, 2.0)),  # ~22 km away: nothing near
        make_block("solo", city="berlin", country="DE", neighborhood="Mitte", centroid=(52.5, 13.4)),
    ]
    seen = set()
    for seed in range(15):
        out = {b.block_id: b for b in assign_negatives(blocks, seed=seed)}
        for b in out.values():
            if b.neg_same_neighborhood is None:
                assert b.neg_same_neighborhood_kind is None and b.city == "berlin"
                continue
            kind = b.neg_same_neighborhood_kind
            assert kind == _expected_kind(b, out[b.neg_same_neighborhood]), (seed, b.block_id)
            seen.add((b.block_id, kind))
    assert {("q_a", "same_neighborhood"), ("q_b", "same_neighborhood"), ("q_g", "fallback_far"),
            ("q_d", "fallback_nearby"), ("q_e", "fallback_nearby"), ("q_c", "fallback_nearby")} <= seen
    assert not {k for b, k in seen if b in ("q_d", "q_e", "q_f", "q_c") and k == "same_neighborhood"}


def test_the_kind_leaves_the_draws_of_the_release_rule_unchanged():
    """Marking the kind draws nothing more: the negatives are those of one Random(42) as before."""
    import random

    blocks = assign_negatives(list(load_benchmark("demo").blocks))
    ordered = sorted(blocks, key=lambda b: b.block_id)
    rng = random.Random(42)
    for block in ordered:  # the rule of docs/benchmark.md section 8, replayed
        same_city = [b for b in ordered if b.city == block.city and b.block_id != block.block_id]
        near = [b for b in same_city if haversine_m(*block.centroid, *b.centroid) <= 1000.0]
        far = [b for b in same_city if b not in near]
        label = (block.neighborhood or "").strip()
        same_label = [b for b in near if label and label.lower() != "downtown" and b.neighborhood == label]
        pools = [same_label, near, far], [far, same_city], \
            [[b for b in ordered if b.city != block.city and b.driving_side == block.driving_side]], \
            [[b for b in ordered if b.city != block.city]]
        picks = []
        for role_pools in pools:
            pool = next((p for p in role_pools if p), None)
            picks.append(rng.choice(pool).block_id if pool else None)
        assert [block.neg_same_neighborhood, block.neg_same_city, block.neg_same_driving_side,
                block.neg_random_city] == picks


# -- the card ------------------------------------------------------------------------------------


def _record(skip3: bool, skip4: bool) -> dict:
    from geofidelity_bench.curation import CurationConfig
    from geofidelity_bench.curation.pipeline import _config_record

    config = CurationConfig(skip_tier3=skip3, skip_tier4=skip4, min_images=5, max_images_per_block=8,
                            siglip_weights="/models/siglip-local")
    return json.loads(json.dumps({"cities": ["lund"], "config": _config_record(config), "skipped": {},
                                  "missing_thumbnails": [], "summary": []}, default=str))


@pytest.mark.parametrize("skip3, skip4", [(False, False), (True, False), (False, True), (True, True)])
def test_the_card_describes_exactly_the_filters_that_ran(skip3, skip4):
    from geofidelity_bench.hub.card import benchmark_stats, default_card_template, render_card

    record = _record(skip3, skip4)
    demo = load_benchmark("demo")
    card = render_card(default_card_template().read_text(encoding="utf-8"), benchmark_stats(demo),
                       {"blocks": (7, 1), "references": (41, 1)}, curation=record)
    body = card.split("\n---\n", 1)[1]
    built = body.split("## How it was built", 1)[1].split("## Intended use", 1)[0]
    biases = body.split("## Biases and limitations", 1)[1].split("## Licenses", 1)[0]
    assert "not from the published release" not in body
    assert ("SigLIP `/models/siglip-local`" in built) != skip3
    assert ("**skipped** (`--skip-tier3`)" in built) == skip3
    assert ("segmenter `mask2former-vistas`" in built) != skip4
    assert ("**skipped** (`--skip-tier4`)" in built) == skip4
    assert ("SigLIP" in biases) != skip3
    assert ("segmentation composition gate" in biases) != skip4
    assert ("by urbanness" in built) != skip4
    assert ("probability at least 0.35" in built) != skip3


def test_generator_terms_are_listed_only_for_generated_images_the_build_holds():
    from geofidelity_bench.hub.card import benchmark_stats, default_card_template, render_card

    demo = load_benchmark("demo")
    template = default_card_template().read_text(encoding="utf-8")
    infos = {"blocks": (7, 1), "references": (41, 1)}
    licenses = render_card(template, benchmark_stats(demo), infos).split("## Licenses", 1)[1]
    for text in ("Generated images", "sdxl", "flux_dev", "CreativeML", "Tencent"):
        assert text not in licenses, text
    manifest = pd.DataFrame({"model": ["sdxl", "sdxl", "tiny"], "condition": ["L0", "L1", "L0"],
                             "block_id": demo.block_ids[:3], "weights": [None, None, "hf-internal/tiny-sd"]})
    licenses = render_card(template, benchmark_stats(demo, manifest), {**infos, "generations": (3, 1)}).split(
        "## Licenses", 1)[1]
    assert "| `sdxl` | stabilityai/stable-diffusion-xl-base-1.0 | CreativeML Open RAIL++-M |" in licenses
    assert "| `tiny` | hf-internal/tiny-sd | see the model's card |" in licenses
    for other in ("flux_dev", "flux_schnell", "sd35_large", "pixart_sigma", "hunyuan_dit"):
        assert other not in licenses, other


def test_a_damaged_curation_record_is_named(tmp_path):
    from geofidelity_bench.errors import GeoFidelityError
    from geofidelity_bench.hub import build_dataset
    from geofidelity_bench.benchmark import save_benchmark

    folder = save_benchmark(load_benchmark("demo"), tmp_path / "bench")
    (folder / "curation_summary.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(GeoFidelityError, match=r"curation_summary\.json: cannot read the curation record"):
        build_dataset(folder, tmp_path / "out", log=lambda m: None)
    assert not (tmp_path / "out").exists()


# -- the report's caveat --------------------------------------------------------------------------


def _bench(kinds: dict[str, str]) -> Benchmark:
    """Four Paris blocks whose same-neighborhood negatives have the given kinds, and one Berlin block."""
    ids = ["p1", "p2", "p3", "p4"]
    partner = {"p1": "p2", "p2": "p1", "p3": "p4", "p4": "p3"}
    blocks = [make_block(b, street=f"Rue {b}", neighborhood=f"N{b}", centroid=(48.86 + 0.002 * i, 2.35),
                         neg_same_neighborhood=partner[b], neg_same_neighborhood_kind=kinds[b],
                         neg_random_city="b1") for i, b in enumerate(ids)]
    blocks.append(make_block("b1", city="berlin", country="DE", street="Unter den Linden", neighborhood="Mitte",
                             centroid=(52.52, 13.40), neg_random_city="p1"))
    refs = [r for i, b in enumerate([*ids, "b1"]) for r in make_refs(b, 3, i + 1)]
    return Benchmark(blocks, refs, name="paris")


@pytest.fixture(scope="module")
def encoder():
    from geofidelity_bench.encoders import get_encoder

    return get_encoder("efficientnet-lite0", device="cpu")


def _report(bench, encoder, folder):
    from geofidelity_bench import report as rp
    from geofidelity_bench import results as rs
    from geofidelity_bench.encoders import EmbeddingCache
    from geofidelity_bench.evaluation import evaluate_panels

    rng = np.random.default_rng(0)
    panels = {("m", "L1", b): rng.normal(size=(3, encoder.dim)).astype(np.float32) for b in bench.block_ids}
    # the variants share their photos: embedded once, then read from the cache
    df = evaluate_panels(bench, panels, encoder, progress=False, cache=EmbeddingCache(folder.parent / "cache"))
    rs.write_results(folder / "results", df, rs.run_record(bench, encoder, df))
    loaded, infos = rs.load_results([folder / "results"])
    rp.build_report(loaded, folder / "report", run_info=infos, n_resamples=200, rank_resamples=100, plots=False)
    return (folder / "report" / "report.md").read_text(encoding="utf-8"), json.loads(
        (folder / "results" / "run.json").read_text())


def test_the_report_says_when_a_same_neighborhood_number_mixes_real_negatives_and_fallbacks(encoder, tmp_path):
    kinds = {"p1": "same_neighborhood", "p2": "same_neighborhood", "p3": "fallback_nearby", "p4": "fallback_far"}
    bench = _bench(kinds)
    text, run = _report(bench, encoder, tmp_path / "mixed")
    assert run["benchmark"]["same_neighborhood_negatives"] == {
        "same_neighborhood": ["p1", "p2"], "fallback_nearby": ["p3"], "fallback_far": ["p4"], "unknown": []}
    real = sum(k == "same_neighborhood" for k in kinds.values())
    line = f"only {real} of {len(kinds)} block(s) have a negative from their own neighborhood; 2 use a fallback"
    hierarchy = text.split("Table 4", 1)[1].split("Table 5", 1)[0]
    assert line in hierarchy
    assert line in text.split("Table 10", 1)[1]  # the leaderboard's local margin too

    text, _ = _report(_bench({b: "same_neighborhood" for b in kinds}), encoder, tmp_path / "clean")
    assert "have a negative from their own neighborhood" not in text
    text, _ = _report(_bench({b: None for b in kinds}), encoder, tmp_path / "unknown")  # cannot tell: no claim
    assert "have a negative from their own neighborhood" not in text
