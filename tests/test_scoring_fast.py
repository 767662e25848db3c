"""score_embeddings (prepared galleries, one set_fidelity pass per panel) against a
straightforward per-panel computation with the plain array-based metric functions.

``reference_score_embeddings`` below is the obvious implementation: every metric called on
raw arrays for every panel, nothing cached. The fast path must give the same rows (to 1e-10),
the same row order, dtypes and NaN-reason records, and the same errors.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from geofidelity_bench import metrics
from geofidelity_bench.benchmark import NEGATIVE_FIELDS
from geofidelity_bench.evaluation import (
    GAAS_UNAVAILABLE,
    RESULT_COLUMNS,
    EvaluationError,
    score_embeddings,
)

from conftest import make_block

NUMERIC = [c for c in RESULT_COLUMNS if c not in ("method", "condition", "block_id", "city", "country", "stratum",
                                                  "n_generated", "n_reference", "encoder")]


def brute_force_chance(block):
    """Every ordering of the distinct candidate galleries, equally likely; ties against the target."""
    import itertools

    roles = [getattr(block, fld) for fld in NEGATIVE_FIELDS.values()]
    negs = [r for r in roles if r is not None]
    distinct = sorted(set(negs) | {block.block_id})
    accs, rrs = [], []
    for order in itertools.permutations(distinct):
        above = set(order[: order.index(block.block_id) + 1])  # the target and what ranks above it
        rank = sum(1 for n in negs if n in above)  # a role naming the target ties with it
        accs.append(rank == 0)
        rrs.append(1 / (rank + 1))
    return 1 + len(negs), float(np.mean(accs)), float(np.mean(rrs))


def reference_score_embeddings(blocks, galleries, panels, *, encoder_name, shares=None,
                               gaas_unavailable_reason=GAAS_UNAVAILABLE):
    by_id = {b.block_id: b for b in blocks}
    rows, reasons = [], []

    def reason(key, column, text):
        reasons.append({"method": key[0], "condition": key[1], "block_id": key[2], "column": column,
                        "reason": text})

    gal64 = {bid: np.asarray(g, dtype=np.float64) for bid, g in galleries.items()}
    for key in sorted(panels):
        method, condition, bid = key
        if bid not in by_id:
            raise EvaluationError(f"panel {key}: unknown block id {bid!r}")
        block = by_id[bid]
        if bid not in gal64:
            raise EvaluationError(f"panel {key}: no gallery embeddings for block {bid!r}")
        gen = np.asarray(panels[key], dtype=np.float64)
        ref = gal64[bid]
        try:
            mmd, mmd_reason = metrics.mmd2_with_reason(gen, ref)
            gap = metrics.diversity_gap(gen, ref)
            dcsf = metrics.dcsf(gen, ref) if mmd_reason is None else float("nan")
            candidates = {"target": ref}
            for role, fld in NEGATIVE_FIELDS.items():
                neg = getattr(block, fld)
                if neg is not None:
                    candidates[role] = gal64[neg]
            ret = metrics.retrieval(gen, candidates)
            cos = metrics.cos_sim(gen, ref)
        except ValueError as err:
            raise EvaluationError(f"panel {method}/{condition}/{bid}: {err}") from err
        if mmd_reason is not None:
            reason(key, "mmd", mmd_reason)
            reason(key, "dcsf", mmd_reason)
        gaas = float("nan")
        if shares is not None and key in shares[0] and bid in shares[1]:
            gaas = metrics.gaas(shares[0][key], shares[1][bid])
        else:
            reason(key, "gaas", gaas_unavailable_reason)
        if math.isnan(ret.local_margin):
            reason(key, "local_margin", "no same-city negative")
        if math.isnan(ret.strongest_margin):
            reason(key, "strongest_margin", "no negative")
        for role, fld in NEGATIVE_FIELDS.items():  # the block lacks this negative: its similarity is NaN
            if getattr(block, fld) is None:
                reason(key, f"sim_{role}", f"the block has no {role} negative")
        rows.append({
            "method": method, "condition": condition, "block_id": bid, "city": block.city,
            "country": block.country, "stratum": block.stratum or "", "n_generated": int(gen.shape[0]),
            "n_reference": int(ref.shape[0]), "cos_sim": cos, "mmd": mmd, "dcsf": dcsf,
            "diversity_gap": gap, "gaas": gaas, "retrieval_acc": ret.accuracy, "mrr": ret.mrr,
            **{f"sim_{name}": ret.sims[name] for name in metrics.CANDIDATE_NAMES},
            "local_margin": ret.local_margin, "strongest_margin": ret.strongest_margin,
            "n_distinct": len({row.tobytes() for row in gen}), "n_copied": float("nan"), "unpromptable": 0.0,
            **dict(zip(("n_candidates", "chance_retrieval_acc", "chance_mrr"), brute_force_chance(block))),
            "encoder": encoder_name,
        })
    df = pd.DataFrame(rows, columns=RESULT_COLUMNS)
    df.attrs["nan_reasons"] = reasons
    return df


def assert_same_scores(fast: pd.DataFrame, slow: pd.DataFrame) -> None:
    assert list(fast.columns) == RESULT_COLUMNS
    assert fast.dtypes.to_dict() == slow.dtypes.to_dict()
    non_numeric = [c for c in RESULT_COLUMNS if c not in NUMERIC]
    pd.testing.assert_frame_equal(fast[non_numeric], slow[non_numeric])
    a, b = fast[NUMERIC].to_numpy(float), slow[NUMERIC].to_numpy(float)
    assert np.array_equal(np.isnan(a), np.isnan(b))
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-10, equal_nan=True)
    assert fast.attrs["nan_reasons"] == slow.attrs["nan_reasons"]


def both(*args, **kwargs):
    return score_embeddings(*args, **kwargs), reference_score_embeddings(*args, **kwargs)


@pytest.fixture
def setup():
    """Blocks with every negative pattern, galleries of varied size and scale, and panels of
    varied size, including ones that repeat gallery rows (as the held-out anchor does)."""
    rng = np.random.default_rng(7)
    blocks = [
        # all four negatives, one of them the target's own same-city neighbor twice
        make_block("a1", neg_same_neighborhood="a2", neg_same_city="a2", neg_same_driving_side="b1",
                   neg_random_city="c1"),
        # missing negatives (no same-city ones): NaN local margin
        make_block("a2", neg_same_driving_side="b1", neg_random_city="b1"),
        # no negatives at all
        make_block("b1", city="rome", country="IT"),
        # all distinct
        make_block("b2", city="rome", country="IT", stratum=None, neg_same_neighborhood="b1",
                   neg_same_city="a1", neg_same_driving_side="a2", neg_random_city="c1"),
        # uses itself as a negative (tie with the target)
        make_block("c1", city="tokyo", country="JP", side="L", neg_same_city="c1", neg_random_city="a1"),
    ]
    d = 24
    base = rng.normal(size=d)
    sizes = {"a1": 9, "a2": 2, "b1": 30, "b2": 5, "c1": 12}
    galleries = {
        bid: (base + 0.5 * rng.normal(size=d) + rng.normal(size=(m, d))) * (1 + i)
        for i, (bid, m) in enumerate(sizes.items())
    }
    galleries["b2"] = galleries["b2"].astype(np.float32)
    panels = {}
    for bid in sizes:
        for method, n in (("m1", 4), ("m2", 2), ("m3", 7)):
            for condition in ("L0", "L1"):
                panels[(method, condition, bid)] = base + rng.normal(size=(n, d)) * rng.uniform(0.5, 2.0)
        g = galleries[bid]
        panels[("heldout_real", "anchor", bid)] = g[[0, 0, 1, 1]]  # repeated real images
        panels[("copy", "anchor", bid)] = g.copy()  # the gallery itself: MMD^2 = 0
    panels[("m1", "L0", "a1")] = panels[("m1", "L0", "a1")].astype(np.float32)
    return blocks, galleries, panels


def test_fast_scores_equal_per_panel_computation(setup):
    blocks, galleries, panels = setup
    fast, slow = both(blocks, galleries, panels, encoder_name="enc")
    assert_same_scores(fast, slow)
    assert len(fast) == len(panels)
    # The setup exercises what it claims to.
    assert fast.local_margin.isna().any() and fast.strongest_margin.isna().any()
    assert (fast.loc[fast.block_id == "b1", "retrieval_acc"] == 1.0).all()
    assert (fast.loc[fast.block_id == "c1", "retrieval_acc"] == 0.0).all()  # ties count against
    assert (fast.loc[fast.method == "copy", "mmd"] == 0.0).all()
    assert fast.sim_same_city[fast.block_id == "a1"].equals(fast.sim_same_neighborhood[fast.block_id == "a1"])


def test_fast_scores_equal_with_gaas_shares_and_random_order(setup):
    blocks, galleries, panels = setup
    rng = np.random.default_rng(1)
    keys = list(panels)
    shuffled = {keys[i]: panels[keys[i]] for i in rng.permutation(len(keys))}
    panel_shares = {k: rng.dirichlet(np.ones(8), size=len(v)) for k, v in shuffled.items()
                    if k[0] != "m2"}
    gallery_shares = {b: rng.dirichlet(np.ones(8), size=len(g)) for b, g in galleries.items() if b != "c1"}
    kwargs = dict(encoder_name="e", shares=(panel_shares, gallery_shares), gaas_unavailable_reason="no seg")
    fast, slow = both(blocks, galleries, shuffled, **kwargs)
    assert_same_scores(fast, slow)
    assert fast.gaas.notna().any() and fast.gaas.isna().any()


def test_fast_scores_random_setups():
    for seed in range(5):
        rng = np.random.default_rng(100 + seed)
        ids = [f"b{i}" for i in range(8)]
        blocks = []
        for bid in ids:
            others = [o for o in ids if o != bid]
            negs = {fld: (str(rng.choice(others)) if rng.random() < 0.7 else None)
                    for fld in NEGATIVE_FIELDS.values()}
            blocks.append(make_block(bid, **negs))
        d = int(rng.integers(3, 40))
        galleries = {bid: rng.normal(size=(int(rng.integers(2, 40)), d)) + rng.normal(size=d) for bid in ids}
        panels = {(f"m{k}", "L1", bid): rng.normal(size=(int(rng.integers(2, 6)), d)) + 0.3
                  for k in range(3) for bid in ids}
        fast, slow = both(blocks, galleries, panels, encoder_name="r")
        assert_same_scores(fast, slow)


def test_galleries_are_prepared_once(setup, monkeypatch):
    blocks, galleries, panels = setup
    calls = []
    real = metrics.prepare_reference
    monkeypatch.setattr(metrics, "prepare_reference", lambda ref, name="ref": calls.append(name) or real(ref, name))
    score_embeddings(blocks, galleries, panels, encoder_name="enc")
    assert len(calls) == len(galleries)


def test_prepared_galleries_are_dropped_after_their_last_use(monkeypatch):
    """Memory holds the galleries still needed, not all of them: with each block's negative the next
    block and galleries prepared 5 blocks at a time, at most 7 are alive at once (5, the next block's
    and the first block's, the last one's negative), each still prepared once."""
    import weakref

    from geofidelity_bench import scoring

    monkeypatch.setattr(scoring, "PREPARE_BLOCKS", 5)  # score_embeddings' home (evaluation re-exports it)

    rng = np.random.default_rng(3)
    ids = [f"b{i:02d}" for i in range(30)]
    blocks = [make_block(bid, neg_same_city=ids[(i + 1) % len(ids)]) for i, bid in enumerate(ids)]
    galleries = {bid: rng.normal(size=(6, 5)) for bid in ids}
    panels = {(m, c, bid): rng.normal(size=(3, 5)) for m in ("m1", "m2") for c in ("L0", "L1") for bid in ids}
    alive, most, calls = [], [], []
    real = metrics.prepare_reference

    def tracking(ref, name="ref"):
        out = real(ref, name)
        calls.append(name)
        alive.append(weakref.ref(out))
        most.append(sum(r() is not None for r in alive))
        return out

    monkeypatch.setattr(metrics, "prepare_reference", tracking)
    fast = score_embeddings(blocks, galleries, panels, encoder_name="e")
    monkeypatch.setattr(metrics, "prepare_reference", real)
    assert_same_scores(fast, reference_score_embeddings(blocks, galleries, panels, encoder_name="e"))
    assert len(calls) == len(ids) and max(most) <= 7


def test_two_bad_panels_name_the_first_in_row_order(setup):
    """Scoring goes block by block, but the error names the bad panel a row-by-row pass meets first."""
    blocks, galleries, panels = setup
    bad_first, bad_later = ("m1", "L0", "b1"), ("m2", "L0", "a1")  # a1's panels are scored before b1's
    panels = dict(panels)
    for key in (bad_first, bad_later):
        panels[key] = np.array(panels[key], dtype=np.float64)
        panels[key][0, 0] = np.nan
    message = assert_same_error(blocks, galleries, panels)
    assert message.startswith("panel m1/L0/b1: gen contains NaN"), message


def test_inputs_are_not_modified_or_frozen(setup):
    blocks, galleries, panels = setup
    before = {b: g.copy() for b, g in galleries.items()}
    score_embeddings(blocks, galleries, panels, encoder_name="enc")
    for b, g in galleries.items():
        assert g.flags.writeable and np.array_equal(g, before[b])


# -- errors: bad input raises EvaluationError naming the panel and the problem ---------------------


def assert_same_error(blocks, galleries, panels):
    """The fast path refuses what the per-panel computation refuses, with a clear message."""
    with pytest.raises(Exception) as slow:
        reference_score_embeddings(blocks, galleries, panels, encoder_name="e")
    with pytest.raises(EvaluationError) as fast:
        score_embeddings(blocks, galleries, panels, encoder_name="e")
    message = str(fast.value)
    assert message.startswith("panel "), message
    return message


def _with(mapping, key, value):
    out = dict(mapping)
    out[key] = value
    return out


@pytest.mark.parametrize(
    "case, fragment",
    [
        ("gen_nan", "panel copy/anchor/a1: gen contains NaN"),
        ("gen_one_row", "panel copy/anchor/a1: gen has 1 row; the diversity gap needs at least 2"),
        ("gen_1d", "gen must be a 2-D array"),
        ("gen_empty", "gen is empty"),
        ("gen_dim", "gen and ref have different embedding dimensions"),
        ("target_nan", "panel copy/anchor/a1: ref contains NaN"),
        ("target_one_row", "ref has 1 row; the diversity gap needs at least 2"),
        ("gen_and_target_bad", "gen contains NaN"),
        ("gen_and_target_nan", ("gen contains NaN", "ref contains NaN")),
        ("negative_nan", "candidates['same_driving_side'] contains NaN"),
        ("negative_dim", "gen and candidates['same_neighborhood'] have different embedding dimensions"),
        ("negative_dim_before_later_nan", ("candidates['same_neighborhood'] have different",
                                           "candidates['same_driving_side'] contains NaN")),
        ("negative_one_row_is_fine", None),
        ("unknown_block", "unknown block id 'zz'"),
        ("no_gallery", "no gallery embeddings for block 'b2'"),
        ("missing_negative_gallery", "no gallery embeddings for negative block 'c1'"),
        ("missing_negative_after_bad_negative", "no gallery embeddings for negative block 'c1'"),
    ],
)
def test_errors_match_per_panel_computation(setup, case, fragment):
    blocks, galleries, panels = setup
    key = min(panels)  # ("copy", "anchor", "a1"), scored first; a1's negatives: a2, a2, b1, c1
    assert key == ("copy", "anchor", "a1")
    gen = panels[key]
    bad = np.array(gen, dtype=np.float64)
    bad[0, 0] = np.nan
    if case == "gen_nan":
        panels = _with(panels, key, bad)
    elif case == "gen_one_row":
        panels = _with(panels, key, gen[:1])
    elif case == "gen_1d":
        panels = _with(panels, key, gen[0])
    elif case == "gen_empty":
        panels = _with(panels, key, gen[:0])
    elif case == "gen_dim":
        panels = _with(panels, key, gen[:, :-1])
    elif case == "target_nan":
        g = galleries["a1"].copy()
        g[3, 1] = np.nan
        galleries = _with(galleries, "a1", g)
    elif case == "target_one_row":
        galleries = _with(galleries, "a1", galleries["a1"][:1])
    elif case == "gen_and_target_bad":
        panels = _with(panels, key, bad)
        galleries = _with(galleries, "a1", galleries["a1"][:, :-1])
    elif case == "gen_and_target_nan":
        panels = _with(panels, key, bad)
        g = galleries["a1"].copy()
        g[3, 1] = np.nan
        galleries = _with(galleries, "a1", g)
    elif case == "negative_nan":
        g = galleries["b1"].copy()
        g[2, 2] = np.inf
        galleries = _with(galleries, "b1", g)
    elif case == "negative_dim":
        galleries = _with(galleries, "a2", galleries["a2"][:, :-1])
    elif case == "negative_dim_before_later_nan":
        galleries = _with(galleries, "a2", galleries["a2"][:, :-1])
        g = galleries["b1"].copy()
        g[0, 0] = np.nan
        galleries = _with(galleries, "b1", g)
    elif case == "negative_one_row_is_fine":
        galleries = _with(galleries, "b1", galleries["b1"][:1])
        blocks = [b for b in blocks if b.block_id != "b1"] + [make_block("b1", city="rome", country="IT")]
        panels = {k: v for k, v in panels.items() if k[2] != "b1"}
    elif case == "unknown_block":
        panels = _with(panels, ("aa", "L0", "zz"), gen)
    elif case == "no_gallery":
        galleries = {b: g for b, g in galleries.items() if b != "b2"}
    elif case == "missing_negative_gallery":
        galleries = {b: g for b, g in galleries.items() if b != "c1"}
        panels = {k: v for k, v in panels.items() if k[2] != "c1"}
    elif case == "missing_negative_after_bad_negative":
        galleries = {b: g for b, g in galleries.items() if b != "c1"}
        panels = {k: v for k, v in panels.items() if k[2] != "c1"}
        galleries = _with(galleries, "a2", galleries["a2"][:, :-1])
    if fragment is None:  # a 1-row gallery is a valid retrieval negative
        fast, slow = both(blocks, galleries, panels, encoder_name="e")
        assert_same_scores(fast, slow)
        return
    message = assert_same_error(blocks, galleries, panels)
    fragments = fragment if isinstance(fragment, tuple) else (fragment,)
    assert any(f in message for f in fragments), message
