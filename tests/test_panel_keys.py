"""What may be scored: panel keys are safe ids (never joined into one string), and panels that no
prompt of the benchmark could have produced are refused unless explicitly allowed (issue 28,
parts 4 and 7)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from geofidelity_bench.benchmark import load_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.evaluation import EvaluationError, evaluate_panels, unpromptable_panels


@pytest.fixture(scope="module")
def demo():
    return load_benchmark("demo")


@pytest.fixture(scope="module")
def encoder():
    from geofidelity_bench.encoders import get_encoder

    return get_encoder("efficientnet-lite0", device="cpu")


def _unnamed(demo) -> list[str]:
    """The demo blocks without a street or a neighborhood name, read off the blocks (not the prompt code)."""
    return sorted(b.block_id for b in demo.blocks if not (b.street_name and b.neighborhood))


def _write_panel(root, method, condition, block_id, images):
    folder = root / method / condition / block_id
    folder.mkdir(parents=True, exist_ok=True)
    for k, data in enumerate(images):
        (folder / f"{k:02d}.jpg").write_bytes(data)
    return folder


# -- part 4: panels that no benchmark prompt could have produced ----------------------------------------


def test_l1_panels_of_unnamed_blocks_are_refused_naming_each(demo):
    unnamed = _unnamed(demo)
    assert len(unnamed) == 6 and "berlin_am_lustgarten" not in unnamed  # the demo as the README describes it
    panels = {("world_photos", "L1", b): np.ones((4, 8)) for b in demo.block_ids}
    panels[("other", "L1", unnamed[0])] = np.ones((4, 8))
    panels[("world_photos", "L0", unnamed[0])] = np.ones((4, 8))  # L0 has a prompt for every block
    with pytest.raises(EvaluationError) as info:
        evaluate_panels(demo, panels, encoder=None)  # refused before any encoder is used
    msg = str(info.value)
    assert msg.startswith("6 (condition, block) panel(s) that no prompt of the benchmark could have produced")
    for bid in unnamed:
        assert f"L1/{bid} (method " in msg and f"block {bid!r} has no street_name and no neighborhood" in msg
    assert f"L1/{unnamed[0]} (method other, world_photos)" in msg
    assert "berlin_am_lustgarten" not in msg and "L0/" not in msg
    assert "allow_unpromptable=True" in msg and "--allow-unpromptable" in msg


def test_every_condition_is_checked_and_only_prompt_conditions(demo):
    keys = [(m, c, b) for m in ("a",) for c in ("L0", "L1", "L2", "GPS_ONLY", "C_WRONG_STREET", "anchor", "sanity",
                                                "MY_STYLE") for b in demo.block_ids]
    refused = unpromptable_panels(demo, keys)
    unnamed = _unnamed(demo)
    # L1 and L2 need the block's names; the control also needs a donor block with another known street, and
    # Berlin's is the only street name of the demo, so no block has one. L0, GPS_ONLY (finite centroids) and
    # conditions that are not prompt conditions are never refused.
    named = [b.block_id for b in demo.blocks if b.street_name]
    assert named == ["berlin_am_lustgarten"]
    expected = sorted([(c, b) for c in ("L1", "L2") for b in unnamed]
                      + [("C_WRONG_STREET", b) for b in demo.block_ids])
    assert [(r["condition"], r["block_id"]) for r in refused] == expected
    assert all(r["methods"] == ["a"] and r["reason"] for r in refused)


@pytest.mark.slow
def test_allow_unpromptable_scores_them_and_records_it(demo, encoder, tmp_path, warm_demo_cache):
    from geofidelity_bench.encoders import EmbeddingCache

    rng = np.random.default_rng(0)
    panels = {("m", "L1", b): rng.normal(size=(3, encoder.dim)).astype(np.float32) for b in demo.block_ids}
    df = evaluate_panels(demo, panels, encoder, allow_unpromptable=True, cache=EmbeddingCache(warm_demo_cache),
                         progress=False)
    assert sorted(df["block_id"]) == sorted(demo.block_ids) and df["cos_sim"].notna().all()
    record = df.attrs["unpromptable_panels"]
    assert record["allowed"] is True
    assert [r["block_id"] for r in record["panels"]] == _unnamed(demo)

    from geofidelity_bench.results import run_record, write_results

    write_results(tmp_path / "r", df, run_record(demo, encoder, df))
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["unpromptable_panels"] == json.loads(json.dumps(record))


@pytest.mark.slow
def test_evaluate_command_refuses_and_allows_unpromptable_panels(demo, tmp_path, capsys, warm_demo_cache):
    gen = tmp_path / "gen"
    for i, bid in enumerate(demo.block_ids):  # the README's former example: L1 panels for every demo block
        _write_panel(gen, "world_photos", "L1", bid, [w.image_bytes for w in demo.world[4 * i:4 * i + 4]])
    common = ["evaluate", "--benchmark", "demo", "--generated", str(gen), "--encoder", "efficientnet-lite0",
              "--no-anchors", "--no-progress", "--cache-dir", str(warm_demo_cache)]
    assert main([*common, "--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err
    for bid in _unnamed(demo):
        assert f"L1/{bid} (method world_photos)" in err
    assert "--allow-unpromptable" in err and not (tmp_path / "refused").exists()

    assert main([*common, "--allow-unpromptable", "--out", str(tmp_path / "allowed")]) == 0
    assert "warning: --allow-unpromptable" in capsys.readouterr().err
    run = json.loads((tmp_path / "allowed" / "run.json").read_text())
    assert run["unpromptable_panels"]["allowed"] is True
    assert [(r["condition"], r["block_id"], r["methods"]) for r in run["unpromptable_panels"]["panels"]] == [
        ("L1", b, ["world_photos"]) for b in _unnamed(demo)]
    assert run["parameters"]["allow_unpromptable"] is True


# -- part 7: panel names are safe ids, keys are tuples ----------------------------------------------------


def test_names_that_join_into_the_same_string_are_refused(demo):
    bid = demo.block_ids[0]
    panels = {("m/x", "L0", bid): np.ones((2, 8)), ("m", "x/L0", bid): np.zeros((2, 8))}
    with pytest.raises(EvaluationError) as info:
        evaluate_panels(demo, panels, encoder=None)
    msg = str(info.value)
    assert "method 'm/x' is not a safe id" in msg and "condition 'x/L0' is not a safe id" in msg
    assert "letters, digits, '.', '_' and '-'" in msg


@pytest.mark.parametrize("key, bad", [
    (("", "L0", "lund_seg1"), "method ''"),
    (("m", "L0 ", "lund_seg1"), "condition 'L0 '"),
    (("m\n", "L0", "lund_seg1"), "method 'm\\n'"),
    ((3, "L0", "lund_seg1"), "method 3"),
    (("m", "L0", "../lund_seg1"), "block_id '../lund_seg1'"),
    (("m", "L0", "atlantis"), "unknown block id 'atlantis'"),
])
def test_each_bad_name_is_named(demo, key, bad):
    with pytest.raises(EvaluationError, match="bad panel key") as info:
        evaluate_panels(demo, {key: np.ones((2, 8))}, encoder=None)
    assert bad in str(info.value)


def test_a_key_that_is_not_a_triple_is_refused(demo):
    with pytest.raises(EvaluationError, match=r"must be a \(method, condition, block_id\) tuple"):
        evaluate_panels(demo, {"m/L0/lund_seg1": np.ones((2, 8))}, encoder=None)


@pytest.mark.slow
def test_panels_with_similar_names_keep_their_own_images(demo, encoder, warm_demo_cache):
    """Images, not embeddings: each panel is embedded under its own tuple label (the embeddings of
    the images come from the cache, which is keyed by the images' bytes, not by panel)."""
    from geofidelity_bench.encoders import EmbeddingCache

    cache = EmbeddingCache(warm_demo_cache)
    bid = "lund_seg1"
    a = [w.image_bytes for w in demo.world[:3]]
    b = [r.image_bytes for r in demo.gallery(bid)[:3]]
    df = evaluate_panels(demo, {("m.x", "L0", bid): a, ("m", "L0", bid): b}, encoder, cache=cache, progress=False)
    alone_a = evaluate_panels(demo, {("m", "L0", bid): a}, encoder, cache=cache, progress=False)
    alone_b = evaluate_panels(demo, {("m", "L0", bid): b}, encoder, cache=cache, progress=False)
    got = df.set_index("method")["cos_sim"]
    assert got["m.x"] == pytest.approx(float(alone_a["cos_sim"].iloc[0]))
    assert got["m"] == pytest.approx(float(alone_b["cos_sim"].iloc[0]))
    assert got["m.x"] != pytest.approx(got["m"])
