"""Tests of geofidelity_bench.stats against independent implementations (scipy, brute force,
explicit loops) and hand-worked examples."""

from __future__ import annotations

import functools
import itertools
import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sstats

from geofidelity_bench import stats


# -- helpers --------------------------------------------------------------------------------


def _rows(spec):
    """spec: iterable of (method, condition, block_id, city, value) -> results-like frame."""
    return pd.DataFrame(
        [{"method": m, "condition": c, "block_id": b, "city": city, "cos_sim": v, "mmd": v}
         for m, c, b, city, v in spec]
    )


def _two_condition_frame(seed=0, methods=("m1", "m2", "m3"), n_cities=5, blocks=4, effect=0.03):
    rng = np.random.default_rng(seed)
    spec = []
    for ci in range(n_cities):
        for b in range(blocks):
            base = rng.normal(0.5, 0.05)
            for m in methods:
                spec.append((m, "L0", f"c{ci}_b{b}", f"c{ci}", base + rng.normal(0, 0.02)))
                spec.append((m, "L1", f"c{ci}_b{b}", f"c{ci}", base + effect + rng.normal(0, 0.02)))
    return _rows(spec)


# -- paired bootstrap -----------------------------------------------------------------------


def _percentile_interval(resampled, confidence):
    """The percentile interval of docs/benchmark.md section 7, computed here with numpy on the finite values."""
    finite = np.asarray(resampled)[np.isfinite(resampled)]
    alpha = (1 - confidence) / 2
    return tuple(np.percentile(finite, [100 * alpha, 100 * (1 - alpha)]))


def test_bootstrap_ci_covers_true_mean_about_95_percent():
    # 4,000 seeded samples of 40 values from N(0.3, 0.5). A 95 % interval must cover 0.3 more often
    # than any binomial(4000, 0.90) count plausibly does (one-sided tail 1e-6), and less often than
    # any binomial(4000, 0.99) count: a 90 % or a 99 % interval fails. (The percentile interval of a
    # mean of 40 values covers about 94 %: the bounds are 0.922 and 0.982.)
    reps, size, true = 4000, 40, 0.3
    samples = np.random.default_rng(123).normal(true, 0.5, size=(reps, size))
    hits = 0
    for rep, sample in enumerate(samples):
        r = stats.bootstrap_mean_ci(sample, n_resamples=500, seed=rep)
        hits += r.ci_low <= true <= r.ci_high
    low = sstats.binom.isf(1e-6, reps, 0.90)  # P(hits > low | 90 % interval) < 1e-6
    high = sstats.binom.ppf(1e-6, reps, 0.99)  # P(hits < high | 99 % interval) <= 1e-6
    assert low < hits < high, (hits / reps, low / reps, high / reps)


def test_paired_bootstrap_matches_explicit_resampling():
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=31), rng.normal(size=31)
    r = stats.paired_bootstrap(x, y, n_resamples=500, seed=11, confidence=0.9)
    # independent: the same generator draws, one explicit loop
    gen = np.random.default_rng(11)
    idx = gen.integers(0, 31, size=(500, 31))
    d = x - y
    means = np.array([d[row].mean() for row in idx])
    lo, hi = np.percentile(means, [5, 95])
    assert r.ci_low == pytest.approx(lo, abs=1e-12)
    assert r.ci_high == pytest.approx(hi, abs=1e-12)
    assert r.mean == pytest.approx(d.mean())
    assert r.n == 31 and r.seed == 11 and r.n_resamples == 500 and r.confidence == 0.9
    assert r.n_positive == int((d > 0).sum())
    assert r.positive_share == pytest.approx((d > 0).mean())


def test_paired_bootstrap_is_seeded_and_frozen():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=50), rng.normal(size=50)
    a = stats.paired_bootstrap(x, y, n_resamples=300, seed=5)
    b = stats.paired_bootstrap(x, y, n_resamples=300, seed=5)
    c = stats.paired_bootstrap(x, y, n_resamples=300, seed=6)
    assert a == b
    assert (a.ci_low, a.ci_high) != (c.ci_low, c.ci_high)
    with pytest.raises(Exception):
        a.mean = 0.0  # frozen


def test_wilcoxon_p_equals_scipy():
    rng = np.random.default_rng(3)
    x = rng.normal(size=80)
    y = x - 0.1 + rng.normal(0, 0.3, size=80)
    r = stats.paired_bootstrap(x, y, n_resamples=100)
    assert r.wilcoxon_p == pytest.approx(sstats.wilcoxon(x - y).pvalue, rel=1e-12)
    assert r.wilcoxon_reason is None
    # small sample with some zero differences
    x2 = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    y2 = np.array([1.0, 1.5, 3.5, 2.0, 5.0, 4.0, 6.0])
    r2 = stats.paired_bootstrap(x2, y2, n_resamples=100)
    assert r2.wilcoxon_p == pytest.approx(sstats.wilcoxon(x2 - y2).pvalue, rel=1e-12)


def test_all_zero_differences_give_nan_p_with_reason():
    x = np.array([0.5, 0.6, 0.7])
    r = stats.paired_bootstrap(x, x.copy(), n_resamples=50)
    assert math.isnan(r.wilcoxon_p)
    assert "zero" in r.wilcoxon_reason
    assert r.mean == 0 and r.ci_low == 0 and r.ci_high == 0 and r.positive_share == 0


@pytest.mark.parametrize(
    "x, y, match",
    [
        ([1.0, 2.0, 3.0], [1.0, 2.0], "same length"),
        ([1.0, np.nan, 3.0], [1.0, 2.0, 3.0], "NaN"),
        ([1.0], [2.0], "at least 2"),
    ],
)
def test_paired_bootstrap_rejects_bad_input(x, y, match):
    with pytest.raises(ValueError, match=match):
        stats.paired_bootstrap(x, y)


# -- pairing result rows --------------------------------------------------------------------


def test_paired_deltas_pairs_by_method_and_block_and_counts_drops():
    spec = [
        ("a", "L1", "b1", "x", 0.6), ("a", "L0", "b1", "x", 0.5),
        ("a", "L1", "b2", "x", 0.7), ("a", "L0", "b2", "x", 0.4),
        ("b", "L1", "b1", "y", 0.3), ("b", "L0", "b1", "y", 0.35),
        ("b", "L1", "b3", "y", 0.9),  # only in L1
        ("b", "L0", "b4", "y", 0.9),  # only in L0
        ("b", "L0", "b5", "y", 0.2), ("b", "L1", "b5", "y", np.nan),  # NaN pair
    ]
    df = _rows(spec)
    r = stats.paired_deltas(df, "cos_sim", "L1", "L0", n_resamples=200)
    assert (r.n_pairs, r.n_only_a, r.n_only_b, r.n_nan_dropped) == (3, 1, 1, 1)
    assert r.mean == pytest.approx(np.mean([0.1, 0.3, -0.05]))
    assert r.result.n_positive == 2
    assert set(zip(r.pairs["method"], r.pairs["block_id"])) == {("a", "b1"), ("a", "b2"), ("b", "b1")}
    d = r.to_dict()
    assert d["comparison"] == "L1 - L0" and d["n_pairs"] == 3 and d["seed"] == 42


def test_paired_deltas_errors_name_the_problem():
    df = _two_condition_frame()
    with pytest.raises(ValueError, match="'not_a_metric'"):
        stats.paired_deltas(df, "not_a_metric", "L1", "L0")
    with pytest.raises(ValueError, match="'L2'"):
        stats.paired_deltas(df, "cos_sim", "L2", "L0")
    dup = pd.concat([df, df.iloc[:1]], ignore_index=True)
    with pytest.raises(ValueError, match="once per condition"):
        stats.paired_deltas(dup, "cos_sim", "L1", "L0")
    tiny = _rows([("a", "L1", "b1", "x", 0.1), ("a", "L0", "b1", "x", 0.2), ("a", "L0", "b2", "x", 0.2)])
    with pytest.raises(ValueError, match="1 usable paired"):
        stats.paired_deltas(tiny, "cos_sim", "L1", "L0")


# -- city-level -----------------------------------------------------------------------------


def _hand_worked():
    # City A: three blocks, L1 = .6/.7/.8 vs L0 = .5 each -> city delta +0.2.
    # City B: one block, L1 = .4 vs L0 = .5 -> city delta -0.1.
    spec = [("m", "L1", f"a{i}", "A", v) for i, v in enumerate([0.6, 0.7, 0.8])]
    spec += [("m", "L0", f"a{i}", "A", 0.5) for i in range(3)]
    spec += [("m", "L1", "b0", "B", 0.4), ("m", "L0", "b0", "B", 0.5)]
    return _rows(spec)


def test_city_balanced_hand_worked_example():
    df = _hand_worked()
    matched = stats.paired_deltas(df, "cos_sim", "L1", "L0", n_resamples=100)
    assert matched.mean == pytest.approx((0.1 + 0.2 + 0.3 - 0.1) / 4)  # 0.125: cities weighted by blocks
    cb = stats.city_balanced(df, "cos_sim", "L1", "L0", n_resamples=500, seed=1)
    assert cb.mean == pytest.approx((0.2 + -0.1) / 2)  # 0.05: each city weighs the same
    assert cb.n_cities == 2 and cb.n_cities_positive == 1 and cb.n_pairs == 4
    per_city = cb.per_city.set_index("city")
    assert per_city.loc["A", "delta"] == pytest.approx(0.2)
    assert per_city.loc["B", "delta"] == pytest.approx(-0.1)
    assert per_city.loc["A", "n_pairs"] == 3
    # resampling two cities can only give means of -0.1, 0.05 or 0.2
    assert -0.1 - 1e-12 <= cb.ci_low <= cb.ci_high <= 0.2 + 1e-12
    assert cb.seed == 1 and cb.n_resamples == 500


def test_city_balanced_needs_two_cities():
    df = _hand_worked()
    with pytest.raises(ValueError, match="2 cities"):
        stats.city_balanced(df[df["city"] == "A"], "cos_sim", "L1", "L0")


def test_leave_one_city_out_hand_worked():
    out = stats.leave_one_city_out(_hand_worked(), "cos_sim", "L1", "L0").set_index("city_removed")
    assert out.loc["A", "delta"] == pytest.approx(-0.1)
    assert out.loc["A", "n_pairs"] == 1
    assert out.loc["B", "delta"] == pytest.approx(0.2)
    assert out.attrs["delta_all"] == pytest.approx(0.125)
    assert out.loc["B", "change"] == pytest.approx(0.2 - 0.125)


# -- rank stability -------------------------------------------------------------------------


def _ranking_frame(best_offset=0.5, metric_values=None, seed=0):
    rng = np.random.default_rng(seed)
    spec = []
    for ci in range(6):
        for b in range(3):
            for m, off in (("best", best_offset), ("mid", 0.0), ("low", -0.01)):
                spec.append((m, "L1", f"c{ci}_b{b}", f"c{ci}", 0.5 + off + rng.normal(0, 0.05)))
    return _rows(spec)


def test_rank_stability_dominant_method():
    df = _ranking_frame()
    r = stats.rank_stability(df, "cos_sim", "L1", n_resamples=500, seed=3)
    t = r.table.set_index("method")
    assert t.loc["best", "rank1_prob"] == pytest.approx(1.0)
    assert t.loc["best", "rank"] == 1
    assert (t.loc["best", "rank_ci_low"], t.loc["best", "rank_ci_high"]) == (1, 1)
    assert t.loc["mid", "rank1_prob"] == 0 and t.loc["low", "rank1_prob"] == 0
    assert t["rank1_prob"].sum() >= 1.0 - 1e-12
    assert set(t.loc[["mid", "low"], "rank_ci_high"]) <= {2, 3}
    # full-data score is the plain mean over the method's blocks
    assert t.loc["best", "score"] == pytest.approx(df[df["method"] == "best"]["cos_sim"].mean())
    assert r.n_cities == 6 and r.n_resamples == 500 and r.seed == 3 and r.higher_is_better


@pytest.mark.parametrize("metric", ["cos_sim", "mmd"])
def test_rank_stability_ties_share_the_best_rank(metric):
    """a and b score the same in every block, as do d and e: in the full data and in every resample the
    tied methods share the best of their ranks (competition ranking 1, 1, 3, 4, 4, scipy's ``"min"``), and
    both tied leaders have rank 1 in every resample. A tie given the worse rank (2, 2, 3, 5, 5) fails."""
    rng = np.random.default_rng(11)
    sign = 1.0 if metric == "cos_sim" else -1.0  # mmd is lower-is-better: the same order with flipped values
    spec = []
    for ci in range(5):
        for b in range(2):
            base = rng.normal(0.5, 0.05)
            for m, off in (("a", 0.3), ("b", 0.3), ("c", 0.2), ("d", 0.1), ("e", 0.1)):
                spec.append((m, "L1", f"c{ci}_b{b}", f"c{ci}", sign * (base + off)))
    df = _rows(spec)
    r = stats.rank_stability(df, metric, "L1", n_resamples=300, seed=2)
    t = r.table.set_index("method")
    expected = dict(zip("abcde", sstats.rankdata([-0.3, -0.3, -0.2, -0.1, -0.1], method="min")))
    assert expected == {"a": 1, "b": 1, "c": 3, "d": 4, "e": 4}
    for m, rank in expected.items():
        assert t.loc[m, "rank"] == rank, m
        assert (t.loc[m, "rank_ci_low"], t.loc[m, "rank_ci_high"], t.loc[m, "mean_rank"]) == (rank, rank, rank), m
    assert t.loc["a", "rank1_prob"] == t.loc["b", "rank1_prob"] == 1.0
    assert (t.loc[["c", "d", "e"], "rank1_prob"] == 0).all()
    assert list(r.table["method"]) == ["a", "b", "c", "d", "e"]  # ties listed by name


def test_rank_stability_is_direction_aware():
    df = _ranking_frame()
    # mmd is lower-is-better: the method with the largest values is now last
    r = stats.rank_stability(df, "mmd", "L1", n_resamples=300)
    t = r.table.set_index("method")
    assert not r.higher_is_better
    assert t.loc["best", "rank"] == 3 and t.loc["best", "rank1_prob"] == 0
    r2 = stats.rank_stability(df, "mmd", "L1", n_resamples=300, higher_is_better=True)
    assert r2.table.set_index("method").loc["best", "rank1_prob"] == pytest.approx(1.0)
    df2 = df.assign(diversity_gap=df["cos_sim"])
    with pytest.raises(ValueError, match="higher_is_better"):
        stats.rank_stability(df2, "diversity_gap", "L1")


def _unbalanced_frame():
    """City A has 3 blocks, cities B and C one each: x wins when blocks weigh, y when cities do."""
    spec = []
    for b in range(3):
        spec += [("x", "L1", f"A{b}", "A", 0.9), ("y", "L1", f"A{b}", "A", 0.6)]
    for city in ("B", "C"):
        spec += [("x", "L1", f"{city}0", city, 0.3), ("y", "L1", f"{city}0", city, 0.6)]
    return _rows(spec)


def _brute_force_ranks(df, metric, n_resamples, seed, weighting, confidence=0.95):
    """An independent loop: per resample, select the drawn cities' rows with pandas and average."""
    cities = sorted(df["city"].unique())
    methods = sorted(df["method"].unique())
    idx = np.random.default_rng(seed).integers(0, len(cities), size=(n_resamples, len(cities)))
    city_means = df.groupby(["city", "method"])[metric].mean()
    ranks = []
    for row in idx:
        drawn = [cities[i] for i in row]
        if weighting == "city":
            scores = pd.concat([city_means.loc[c] for c in drawn]).groupby(level=0).mean()
        else:
            scores = pd.concat([df[df["city"] == c] for c in drawn]).groupby("method")[metric].mean()
        scores = scores.reindex(methods).fillna(-np.inf)  # a method with no block in the drawn cities ranks last
        ranks.append([1 + sum(scores[o] > scores[m] for o in methods) for m in methods])
    ranks = np.array(ranks, dtype=float)
    a = (1 - confidence) / 2
    return pd.DataFrame({"method": methods, "rank1_prob": (ranks == 1).mean(axis=0),
                         "rank_ci_low": np.percentile(ranks, 100 * a, axis=0),
                         "rank_ci_high": np.percentile(ranks, 100 * (1 - a), axis=0),
                         "mean_rank": ranks.mean(axis=0)}).set_index("method")


@pytest.mark.parametrize("weighting", ["city", "block"])
def test_rank_stability_matches_brute_force(weighting):
    df = _unbalanced_frame()
    r = stats.rank_stability(df, "cos_sim", "L1", n_resamples=400, seed=7, weighting=weighting)
    assert r.weighting == weighting and r.to_dict()["weighting"] == weighting
    got = r.table.set_index("method")
    want = _brute_force_ranks(df, "cos_sim", 400, 7, weighting)
    for col in want.columns:
        assert got.loc[want.index, col].to_numpy(dtype=float) == pytest.approx(want[col].to_numpy(dtype=float))


def test_rank_stability_city_balanced_is_the_default():
    df = _unbalanced_frame()
    city = stats.rank_stability(df, "cos_sim", "L1", n_resamples=200).table.set_index("method")
    block = stats.rank_stability(df, "cos_sim", "L1", n_resamples=200, weighting="block").table.set_index("method")
    # hand-worked: city means x = (0.9 + 0.3 + 0.3) / 3 = 0.5, y = 0.6; block means x = 3.3 / 5 = 0.66, y = 0.6
    assert city.loc["x", "score"] == pytest.approx(0.5) and city.loc["y", "score"] == pytest.approx(0.6)
    assert block.loc["x", "score"] == pytest.approx(0.66) and block.loc["y", "score"] == pytest.approx(0.6)
    assert (city.loc["y", "rank"], city.loc["x", "rank"]) == (1, 2)
    assert (block.loc["x", "rank"], block.loc["y", "rank"]) == (1, 2)
    assert list(city["n_blocks"].loc[["x", "y"]]) == [5, 5] and list(city["n_cities"].loc[["x", "y"]]) == [3, 3]
    with pytest.raises(ValueError, match="weighting"):
        stats.rank_stability(df, "cos_sim", "L1", weighting="blocks")


# -- controls -------------------------------------------------------------------------------


def test_control_benefits_flip_sign_for_lower_is_better():
    rng = np.random.default_rng(4)
    spec = []
    for b in range(30):
        base = rng.normal(0.5, 0.1)
        spec.append(("m", "L1", f"b{b}", f"c{b % 3}", base))
        spec.append(("m", "C_WRONG_STREET", f"b{b}", f"c{b % 3}", base + 0.1 + rng.normal(0, 0.01)))
    df = _rows(spec)  # same numbers in cos_sim and mmd: the control is 0.1 HIGHER
    cos = stats.control_benefits(df, "cos_sim", n_resamples=300).iloc[0]
    mmd = stats.control_benefits(df, "mmd", n_resamples=300).iloc[0]
    raw = stats.paired_deltas(df, "cos_sim", "L1", "C_WRONG_STREET", n_resamples=300)
    # higher-is-better: benefit = L1 - control (negative here: the wrong names "help")
    assert cos["benefit"] == pytest.approx(raw.mean) and cos["benefit"] < 0 and cos["sign"] == 1
    # lower-is-better: benefit = control - L1 (positive: the correct names lower MMD)
    assert mmd["benefit"] == pytest.approx(-raw.mean) and mmd["benefit"] > 0 and mmd["sign"] == -1
    assert mmd["ci_low"] == pytest.approx(-raw.ci_high) and mmd["ci_high"] == pytest.approx(-raw.ci_low)
    assert mmd["positive_share"] == pytest.approx(1.0) and cos["positive_share"] == 0.0
    assert mmd["wilcoxon_p"] == pytest.approx(raw.wilcoxon_p)
    assert mmd["mean_control"] > mmd["mean_reference"]
    assert list(stats.control_benefits(df, "cos_sim", n_resamples=50)["control"]) == ["C_WRONG_STREET"]


def test_control_benefits_errors():
    df = _two_condition_frame()
    with pytest.raises(ValueError, match="no control rows"):
        stats.control_benefits(df, "cos_sim")
    with pytest.raises(ValueError, match="C_SHUFFLED_NEIGHBORHOOD"):
        stats.control_benefits(df, "cos_sim", controls=["C_SHUFFLED_NEIGHBORHOOD"])


# -- Spearman, AUROC, block bootstrap -------------------------------------------------------


def test_spearman_equals_scipy_with_ties():
    rng = np.random.default_rng(9)
    for _ in range(5):
        x = np.round(rng.normal(size=120), 1)
        y = np.round(x + rng.normal(size=120), 1)
        assert stats.spearman(x, y) == pytest.approx(sstats.spearmanr(x, y).statistic, abs=1e-12)
    assert math.isnan(stats.spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError, match="same length"):
        stats.spearman([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="NaN"):
        stats.spearman([1, np.nan, 3], [1, 2, 3])


def _auroc_brute(labels, scores):
    pos = [s for l, s in zip(labels, scores) if l]
    neg = [s for l, s in zip(labels, scores) if not l]
    total = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return total / (len(pos) * len(neg))


def test_auroc_equals_brute_force_with_ties():
    rng = np.random.default_rng(10)
    for _ in range(5):
        labels = rng.integers(0, 2, size=90)
        scores = np.round(rng.normal(size=90) + 0.4 * labels, 1)
        assert stats.auroc(labels, scores) == pytest.approx(_auroc_brute(labels, scores), abs=1e-12)
    assert stats.auroc([True, False], [0.3, 0.3]) == 0.5
    with pytest.raises(ValueError, match="single class"):
        stats.auroc([1, 1, 1], [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="0/1"):
        stats.auroc([0, 2, 1], [0.1, 0.2, 0.3])


def test_block_bootstrap_matches_explicit_cluster_resampling():
    rng = np.random.default_rng(12)
    n_blocks, per_block = 15, 3
    blocks = np.repeat([f"blk{i:02d}" for i in range(n_blocks)], per_block)
    x = np.round(rng.normal(size=blocks.size), 1)
    y = np.round(x + rng.normal(size=blocks.size), 1)
    labels = (y > 0).astype(int)
    res_s = stats.block_bootstrap_ci("spearman", x, y, blocks=blocks, n_resamples=150, seed=21)
    res_a = stats.block_bootstrap_ci("auroc", labels, x, blocks=blocks, n_resamples=150, seed=21)
    # independent: the same block draws, the expanded sample built row by row, scipy / brute force
    uniq = sorted(set(blocks))
    draws = np.random.default_rng(21).integers(0, n_blocks, size=(150, n_blocks))
    ref_s, ref_a = [], []
    for row in draws:
        rows = np.concatenate([np.flatnonzero(blocks == uniq[k]) for k in row])
        ref_s.append(sstats.spearmanr(x[rows], y[rows]).statistic)
        lab = labels[rows]
        ref_a.append(_auroc_brute(lab, x[rows]) if 0 < lab.sum() < lab.size else np.nan)
    ref_s, ref_a = np.array(ref_s), np.array(ref_a)
    assert res_s.ci_low == pytest.approx(np.percentile(ref_s, 2.5), abs=1e-9)
    assert res_s.ci_high == pytest.approx(np.percentile(ref_s, 97.5), abs=1e-9)
    ok = np.isfinite(ref_a)
    assert res_a.n_undefined == int((~ok).sum())
    assert res_a.ci_low == pytest.approx(np.percentile(ref_a[ok], 2.5), abs=1e-9)
    assert res_a.ci_high == pytest.approx(np.percentile(ref_a[ok], 97.5), abs=1e-9)
    assert res_s.estimate == pytest.approx(sstats.spearmanr(x, y).statistic)
    assert res_a.estimate == pytest.approx(_auroc_brute(labels, x))
    assert res_s.n_blocks == n_blocks and res_s.n == blocks.size and res_s.seed == 21


def test_block_bootstrap_mean_and_errors():
    rng = np.random.default_rng(2)
    x = rng.normal(0.2, 1, size=60)
    blocks = np.arange(60) // 6
    r = stats.block_bootstrap_ci("mean", x, blocks=blocks, n_resamples=400)
    assert r.estimate == pytest.approx(x.mean())
    assert r.ci_low < r.estimate < r.ci_high
    with pytest.raises(ValueError, match="unknown statistic"):
        stats.block_bootstrap_ci("median", x, blocks=blocks)
    with pytest.raises(ValueError, match="length"):
        stats.block_bootstrap_ci("mean", x[:10], blocks=blocks)
    with pytest.raises(ValueError, match="2 blocks"):
        stats.block_bootstrap_ci("mean", x, blocks=np.zeros(60))


def test_bootstrap_mean_ci():
    r = stats.bootstrap_mean_ci([0.1, 0.2, np.nan, 0.3], n_resamples=300)
    assert r.mean == pytest.approx(0.2) and r.n == 3
    assert 0.1 <= r.ci_low <= r.ci_high <= 0.3
    one = stats.bootstrap_mean_ci([0.5])
    assert one.mean == 0.5 and math.isnan(one.ci_low)


# -- every interval is the documented percentile interval (docs/benchmark.md section 7) ------


def test_bootstrap_mean_ci_is_the_percentile_interval_of_resampled_means():
    v = np.random.default_rng(31).normal(0.4, 0.2, size=25)
    r = stats.bootstrap_mean_ci(np.append(v, np.nan), n_resamples=700, seed=8, confidence=0.8)
    draws = np.random.default_rng(8).integers(0, 25, size=(700, 25))
    means = np.array([v[row].mean() for row in draws])
    assert (r.ci_low, r.ci_high) == pytest.approx(_percentile_interval(means, 0.8), abs=1e-12)
    assert r.mean == pytest.approx(v.mean()) and (r.n, r.seed, r.n_resamples, r.confidence) == (25, 8, 700, 0.8)
    default = stats.bootstrap_mean_ci(v, n_resamples=700, seed=8)
    assert (default.ci_low, default.ci_high) == pytest.approx(_percentile_interval(means, 0.95), abs=1e-12)


def test_paired_deltas_and_controls_are_percentile_intervals_of_the_paired_differences():
    df = _two_condition_frame(seed=5)
    df = pd.concat([df, df[df["condition"] == "L0"].assign(condition="C_WRONG_STREET",
                                                          cos_sim=lambda t: t["cos_sim"] + 0.01,
                                                          mmd=lambda t: t["mmd"] + 0.01)], ignore_index=True)
    wide = df.pivot_table(index=["method", "block_id"], columns="condition", values="cos_sim").sort_index()
    d = (wide["L1"] - wide["L0"]).to_numpy()
    draws = np.random.default_rng(3).integers(0, d.size, size=(400, d.size))
    r = stats.paired_deltas(df, "cos_sim", "L1", "L0", n_resamples=400, seed=3, confidence=0.9)
    assert (r.ci_low, r.ci_high) == pytest.approx(_percentile_interval([d[row].mean() for row in draws], 0.9),
                                                  abs=1e-12)
    # Controls: benefit = L1 - control for cos_sim, control - L1 for the lower-is-better mmd.
    b = (wide["L1"] - wide["C_WRONG_STREET"]).to_numpy()
    for metric, sign in (("cos_sim", 1), ("mmd", -1)):
        row = stats.control_benefits(df, metric, n_resamples=400, seed=3, confidence=0.9).iloc[0]
        expected = _percentile_interval([(sign * b)[k].mean() for k in draws], 0.9)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx(expected, abs=1e-12), metric


def test_city_balanced_is_the_percentile_interval_over_city_deltas():
    df = _two_condition_frame(seed=6, n_cities=7)
    paired = df.pivot_table(index=["method", "block_id", "city"], columns="condition", values="cos_sim").reset_index()
    per_city = paired.groupby("city", sort=True)[["L1", "L0"]].mean()
    deltas = (per_city["L1"] - per_city["L0"]).to_numpy()
    draws = np.random.default_rng(9).integers(0, deltas.size, size=(600, deltas.size))
    cb = stats.city_balanced(df, "cos_sim", "L1", "L0", n_resamples=600, seed=9)
    assert cb.mean == pytest.approx(deltas.mean())
    assert (cb.ci_low, cb.ci_high) == pytest.approx(_percentile_interval([deltas[r].mean() for r in draws], 0.95),
                                                    abs=1e-12)


def test_block_bootstrap_mean_and_positive_share_are_percentile_intervals():
    rng = np.random.default_rng(14)
    blocks = np.repeat(["q", "a", "m", "c", "x", "b", "k", "z"], [2, 3, 1, 4, 2, 3, 2, 3])  # unsorted labels
    x = np.round(rng.normal(0.1, 1, size=blocks.size), 2)
    uniq = sorted(set(blocks))
    draws = np.random.default_rng(17).integers(0, len(uniq), size=(300, len(uniq)))
    expanded = [np.concatenate([x[blocks == uniq[k]] for k in row]) for row in draws]
    for name, f in (("mean", np.mean), ("positive_share", lambda v: np.mean(v > 0))):
        r = stats.block_bootstrap_ci(name, x, blocks=blocks, n_resamples=300, seed=17, confidence=0.9)
        assert r.estimate == pytest.approx(f(x)), name
        assert (r.ci_low, r.ci_high) == pytest.approx(_percentile_interval([f(e) for e in expanded], 0.9),
                                                      abs=1e-12), name


@pytest.mark.parametrize("weighting", ["city", "block"])
def test_rank_stability_intervals_are_percentiles_of_bootstrap_ranks(weighting):
    # Three close methods in 5 cities: their bootstrap ranks vary, so the interval ends are informative.
    rng = np.random.default_rng(21)
    spec = [(m, "L1", f"c{c}_b{b}", f"c{c}", 0.5 + off + rng.normal(0, 0.05))
            for c in range(5) for b in range(1 + c % 3) for m, off in (("m1", 0.02), ("m2", 0.0), ("m3", -0.01))]
    df = _rows(spec)
    res = stats.rank_stability(df, "cos_sim", "L1", n_resamples=250, seed=4, confidence=0.8, weighting=weighting)
    cities = sorted(df["city"].unique())
    methods = ["m1", "m2", "m3"]
    draws = np.random.default_rng(4).integers(0, len(cities), size=(250, len(cities)))
    values = {(m, c): df.loc[(df["method"] == m) & (df["city"] == c), "cos_sim"].tolist()
              for m in methods for c in cities}
    ranks = []
    for row in draws:  # repeats of a drawn city count again
        if weighting == "city":  # the mean of the drawn cities' means: every city weighs the same
            score = [np.mean([np.mean(values[(m, cities[k])]) for k in row]) for m in methods]
        else:  # the mean over all blocks of the drawn cities
            score = [np.mean([v for k in row for v in values[(m, cities[k])]]) for m in methods]
        ranks.append([1 + sum(other > s for other in score) for s in score])  # competition ranks, 1 = best
    ranks = np.array(ranks, dtype=float)
    lo, hi = np.percentile(ranks, [10.0, 90.0], axis=0)  # the 80% percentile interval of each method
    table = res.table.set_index("method").loc[methods]
    assert list(table["rank_ci_low"]) == pytest.approx(list(lo)) and list(table["rank_ci_high"]) == pytest.approx(list(hi))
    assert list(table["rank1_prob"]) == pytest.approx(list((ranks == 1).mean(axis=0)))
    assert len({(lo, hi) for lo, hi in zip(table["rank_ci_low"], table["rank_ci_high"])}) > 1


# -- recorded fields, documented defaults and error messages ---------------------------------
# (these also kill the surviving mutants of issue 23's mutation run; see docs/mutation.md)


def test_paired_bootstrap_defaults_are_the_documented_ones():
    # docs/benchmark.md section 7: 5,000 resamples, default_rng(42), confidence 0.95, all recorded
    rng = np.random.default_rng(40)
    x, y = rng.normal(size=12), rng.normal(size=12)
    r = stats.paired_bootstrap(x, y)
    assert (r.n_resamples, r.seed, r.confidence) == (5000, 42, 0.95)
    assert r == stats.paired_bootstrap(x, y, n_resamples=5000, seed=42, confidence=0.95)


@pytest.mark.parametrize(
    "x, y, match",
    [
        (np.ones((2, 2)), np.ones(4), r"^x must be one-dimensional, got shape \(2, 2\)$"),
        (np.ones(4), np.ones((2, 2)), r"^y must be one-dimensional, got shape \(2, 2\)$"),
        ([1.0, np.inf, 3.0], [1.0, 2.0, 3.0],
         r"^1 of 3 pairs contain NaN or inf; drop them first \(paired_deltas does this and counts them\)$"),
    ],
)
def test_paired_bootstrap_errors_name_the_argument(x, y, match):
    with pytest.raises(ValueError, match=match):
        stats.paired_bootstrap(x, y)


def test_wilcoxon_p_reasons_and_errors():
    # the reason is recorded next to a NaN p-value (BootstrapResult.wilcoxon_reason): its exact wording
    p, reason = stats.wilcoxon_p([])
    assert math.isnan(p) and reason == "no differences"
    p, reason = stats.wilcoxon_p([0.0, 0.0])
    assert math.isnan(p) and reason == "all differences are zero"
    p, reason = stats.wilcoxon_p([np.nan, 1.0, 2.0])  # scipy propagates the NaN
    assert math.isnan(p) and reason == "scipy.stats.wilcoxon returned a non-finite p-value"
    d = [0.5, -0.2, 0.9]
    assert stats.wilcoxon_p(d) == (pytest.approx(sstats.wilcoxon(d).pvalue, rel=1e-12), None)
    with pytest.raises(ValueError, match=r"^differences must be one-dimensional, got shape \(2, 2\)$"):
        stats.wilcoxon_p(np.ones((2, 2)))


@pytest.mark.parametrize("category", [RuntimeWarning, UserWarning])
def test_wilcoxon_p_silences_scipys_degenerate_input_warnings(monkeypatch, category):
    # Older scipy versions warn on small or tied samples (e.g. "Sample size too small for normal
    # approximation"); wilcoxon_p silences those two categories and still returns scipy's p-value.
    real = sstats.wilcoxon

    def warning_wilcoxon(d):
        warnings.warn("a scipy warning about a small sample", category)
        return real(d)

    monkeypatch.setattr(sstats, "wilcoxon", warning_wilcoxon)
    d = [0.4, -0.1, 0.3, 0.7]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p, reason = stats.wilcoxon_p(d)
    assert p == pytest.approx(real(d).pvalue, rel=1e-12) and reason is None


def test_wilcoxon_p_lets_other_scipy_warnings_through(monkeypatch):
    # only the two degenerate-input categories are silenced: e.g. a FutureWarning of scipy still reaches the user
    real = sstats.wilcoxon

    def warning_wilcoxon(d):
        warnings.warn("a scipy API change", FutureWarning)
        return real(d)

    monkeypatch.setattr(sstats, "wilcoxon", warning_wilcoxon)
    with pytest.warns(FutureWarning, match="a scipy API change"):
        p, reason = stats.wilcoxon_p([0.4, -0.1, 0.3, 0.7])
    assert reason is None and p == pytest.approx(real([0.4, -0.1, 0.3, 0.7]).pvalue, rel=1e-12)


def test_result_to_dict_records_every_field():
    m = stats.bootstrap_mean_ci([0.1, 0.4, 0.3, 0.8], n_resamples=200, seed=3, confidence=0.9)
    assert m.to_dict() == {"mean": m.mean, "ci_low": m.ci_low, "ci_high": m.ci_high, "n": 4, "seed": 3,
                           "n_resamples": 200, "confidence": 0.9}
    b = stats.block_bootstrap_ci("mean", [0.1, 0.4, 0.3, 0.8], blocks=[0, 0, 1, 2], n_resamples=200, seed=3,
                                 confidence=0.9)
    assert b.to_dict() == {"statistic": "mean", "estimate": pytest.approx(0.4), "ci_low": b.ci_low,
                           "ci_high": b.ci_high, "n": 4, "n_blocks": 3, "n_undefined": 0, "seed": 3,
                           "n_resamples": 200, "confidence": 0.9}


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: stats.spearman([1, 2, 3], [1, 2]), r"^x and y must have the same length, got 3 and 2$"),
        (lambda: stats.auroc(np.zeros((2, 2)), [0.1, 0.2]), r"^labels must be one-dimensional, got shape \(2, 2\)$"),
        (lambda: stats.auroc([0, 1], np.zeros((2, 2))), r"^scores must be one-dimensional, got shape \(2, 2\)$"),
        (lambda: stats.auroc([0, 1, 1], [0.1, 0.2]), r"^labels and scores must have the same length, got 3 and 2$"),
        (lambda: stats.auroc([0, 1, 1], [0.1, np.nan, 0.3]), r"^scores contain NaN or inf$"),
        (lambda: stats.auroc([0, 2, 1], [0.1, 0.2, 0.3]), r"^labels must be boolean or 0/1$"),
    ],
)
def test_spearman_and_auroc_errors_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_spearman_of_two_points_and_of_constant_input():
    # hand-worked: two pairs are perfectly concordant (rho = 1) or discordant (rho = -1), as scipy says
    assert stats.spearman([1.0, 2.0], [3.0, 4.0]) == 1.0 == pytest.approx(sstats.spearmanr([1, 2], [3, 4]).statistic)
    assert stats.spearman([1.0, 2.0], [4.0, 3.0]) == -1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a constant input is NaN without a numpy warning
        assert math.isnan(stats.spearman([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]))


def test_block_statistic_auroc_is_nan_where_a_resample_loses_a_class():
    labels = np.array([0.0, 1.0, 0.0, 1.0])
    scores = np.array([0.2, 0.9, 0.4, 0.3])
    w = np.array([[1.0, 1.0, 1.0, 1.0], [2.0, 0.0, 1.0, 0.0], [0.0, 1.0, 0.0, 3.0], [1.0, 0.0, 0.0, 2.0]])
    out = stats.BLOCK_STATISTICS["auroc"](w, labels, scores)
    assert out.dtype == np.float64 and np.isnan(out[1]) and np.isnan(out[2])
    for r in (0, 3):  # the expanded sample, brute force
        rows = np.repeat(np.arange(4), w[r].astype(int))
        assert out[r] == pytest.approx(_auroc_brute(labels[rows], scores[rows]))


def test_block_bootstrap_custom_statistic_is_recorded_by_name():
    rng = np.random.default_rng(42)
    x = rng.normal(size=18)
    blocks = np.arange(18) // 3

    def weighted_mean(w, v):
        return (w @ v) / w.sum(axis=1)

    builtin = stats.block_bootstrap_ci("mean", x, blocks=blocks, n_resamples=300, seed=5)
    named = stats.block_bootstrap_ci(weighted_mean, x, blocks=blocks, n_resamples=300, seed=5)
    nameless = stats.block_bootstrap_ci(functools.partial(weighted_mean), x, blocks=blocks, n_resamples=300, seed=5)
    assert named.statistic == "weighted_mean" and nameless.statistic == "custom"
    for r in (named, nameless):
        assert (r.estimate, r.ci_low, r.ci_high) == pytest.approx((builtin.estimate, builtin.ci_low, builtin.ci_high))


@pytest.mark.parametrize(
    "args, blocks, match",
    [
        ((), [0, 1], r"^block_bootstrap_ci needs at least one data array$"),
        (([1.0, 2.0],), 3, r"^blocks must be one-dimensional, got shape \(\)$"),
        (([1.0, 2.0],), [[0, 1]], r"^blocks must be one-dimensional, got shape \(1, 2\)$"),
        ((np.ones((2, 1)),), [0, 1], r"^array 0 must be one-dimensional, got shape \(2, 1\)$"),
        (([1.0, np.nan],), [0, 1], r"^array 0 contains NaN or inf; drop those rows first$"),
        (([],), [], r"^a block bootstrap needs at least 2 blocks, got 0$"),
    ],
)
def test_block_bootstrap_errors_name_the_problem(args, blocks, match):
    with pytest.raises(ValueError, match=match):
        stats.block_bootstrap_ci("mean", *args, blocks=blocks)


def test_block_bootstrap_rejects_unknown_statistics_and_non_binary_labels():
    with pytest.raises(ValueError, match=r"^unknown statistic 'median'; one of "
                                         r"\['auroc', 'mean', 'positive_share', 'spearman'\] or a callable$"):
        stats.block_bootstrap_ci("median", [1.0, 2.0], blocks=[0, 1])
    with pytest.raises(ValueError, match=r"^labels must be boolean or 0/1$"):
        stats.block_bootstrap_ci("auroc", [0, 2, 1, 0], [0.1, 0.2, 0.3, 0.4], blocks=[0, 1, 2, 3])


def test_block_bootstrap_with_two_blocks_and_zero_values():
    # two blocks are enough; positive_share counts strictly positive values (hand-worked: 2 of 6)
    r = stats.block_bootstrap_ci("positive_share", [0.0, 0.0, 1.0, -1.0, 2.0, 0.0], blocks=[0, 0, 0, 1, 1, 1],
                                 n_resamples=200)
    assert r.n_blocks == 2 and r.estimate == pytest.approx(2 / 6)
    # each resample draws the blocks (0, 0), (0, 1), (1, 0) or (1, 1): shares 1/3, 1/3, 1/3, 1/3
    assert (r.ci_low, r.ci_high) == pytest.approx((1 / 3, 1 / 3))


def test_block_bootstrap_with_several_chunks_is_the_unchunked_interval():
    # 4,000 rows: bootstrap statistics are computed 250 resamples at a time; the interval must not depend on it
    rng = np.random.default_rng(43)
    blocks = np.repeat(np.arange(800), 5)
    x = rng.normal(size=blocks.size)
    r = stats.block_bootstrap_ci("mean", x, blocks=blocks, n_resamples=1001, seed=8, confidence=0.9)
    draws = np.random.default_rng(8).integers(0, 800, size=(1001, 800))
    block_sums = np.bincount(blocks, weights=x)
    means = np.array([block_sums[row].sum() / (5 * 800) for row in draws])
    assert r.n_undefined == 0
    assert (r.ci_low, r.ci_high) == pytest.approx(_percentile_interval(means, 0.9), abs=1e-12)


def test_block_bootstrap_of_two_rows_with_more_resamples_than_one_chunk():
    # 2 rows, 2,000,001 resamples: several chunks of resamples, the same interval as a direct computation
    x = np.array([0.0, 1.0])
    r = stats.block_bootstrap_ci("mean", x, blocks=[0, 1], n_resamples=2_000_001, seed=9, confidence=0.5)
    means = x[np.random.default_rng(9).integers(0, 2, size=(2_000_001, 2))].mean(axis=1)
    assert (r.ci_low, r.ci_high) == pytest.approx(_percentile_interval(means, 0.5), abs=1e-12)
    assert r.n_resamples == 2_000_001


def test_block_bootstrap_defaults_and_recorded_fields():
    rng = np.random.default_rng(41)
    x = rng.normal(size=20)
    blocks = np.arange(20) // 2
    r = stats.block_bootstrap_ci("mean", x, blocks=blocks)
    assert (r.statistic, r.n_resamples, r.seed, r.confidence) == ("mean", 5000, 42, 0.95)
    assert r == stats.block_bootstrap_ci("mean", x, blocks=blocks, n_resamples=5000, seed=42, confidence=0.95)


def test_block_bootstrap_auroc_counts_single_class_resamples_without_warnings():
    rng = np.random.default_rng(44)
    blocks = np.repeat(np.arange(6), 2)
    labels = (blocks == 0).astype(int)  # the only positives are in block 0: many resamples lose them
    scores = rng.normal(size=12) + labels
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = stats.block_bootstrap_ci("auroc", labels, scores, blocks=blocks, n_resamples=300, seed=2)
    draws = np.random.default_rng(2).integers(0, 6, size=(300, 6))
    assert r.n_undefined == int((~(draws == 0).any(axis=1)).sum()) > 0
    assert r.estimate == pytest.approx(_auroc_brute(labels, scores))


# -- rank stability: sparse data, filters, recorded fields ------------------------------------


def _sparse_ranking_frame():
    """Cities A-D. x: one block per city; y: two blocks in A, one elsewhere; z (the best) only in A and B.
    Also a NaN row of x, a row of y without a city, and a method w with only NaN values: all dropped."""
    rng = np.random.default_rng(45)
    spec = []
    for city in "ABCD":
        spec.append(("x", "L1", f"{city}0", city, 0.5 + rng.normal(0, 0.1)))
        spec.append(("y", "L1", f"{city}0", city, 0.45 + rng.normal(0, 0.1)))
        spec.append(("w", "L1", f"{city}0", city, np.nan))
        if city == "A":
            spec.append(("y", "L1", "A1", "A", 0.8))
        if city in "AB":
            spec.append(("z", "L1", f"{city}0", city, 0.9 + rng.normal(0, 0.01)))
    spec += [("x", "L1", "C1", "C", np.nan), ("y", "L1", "X0", None, 5.0), ("z", "L0", "A0", "A", 0.1)]
    return _rows(spec)


@pytest.mark.parametrize("weighting", ["city", "block"])
def test_rank_stability_with_methods_missing_from_cities_matches_brute_force(weighting):
    df = _sparse_ranking_frame()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a method absent from the drawn cities is ranked last, silently
        r = stats.rank_stability(df, "cos_sim", "L1", n_resamples=250, seed=6, weighting=weighting, confidence=0.9)
    clean = df[(df["condition"] == "L1") & df["cos_sim"].notna() & df["city"].notna()]
    got = r.table.set_index("method")
    assert list(got.index.sort_values()) == ["x", "y", "z"]
    want = _brute_force_ranks(clean, "cos_sim", 250, 6, weighting, confidence=0.9)
    for col in want.columns:
        assert got.loc[want.index, col].to_numpy(dtype=float) == pytest.approx(want[col].to_numpy(dtype=float)), col
    assert got.loc["z", "rank_ci_high"] == 3  # z is missing from some resamples
    counts = clean.groupby("method")["cos_sim"].count()
    n_cities = clean.groupby("method")["city"].nunique()
    if weighting == "city":
        score = clean.groupby(["method", "city"])["cos_sim"].mean().groupby(level=0).mean()
    else:
        score = clean.groupby("method")["cos_sim"].mean()
    for m in ("x", "y", "z"):
        assert (got.loc[m, "n_blocks"], got.loc[m, "n_cities"]) == (counts[m], n_cities[m])
        assert got.loc[m, "score"] == pytest.approx(score[m])
        assert got.loc[m, "rank"] == 1 + sum(score[o] > score[m] for o in ("x", "y", "z"))
    assert r.table["n_blocks"].dtype.kind == "i" and r.table["n_cities"].dtype.kind == "i"
    assert list(r.table.columns) == ["method", "n_blocks", "n_cities", "score", "rank", "rank1_prob",
                                     "rank_ci_low", "rank_ci_high", "mean_rank"]


def test_rank_stability_reads_an_object_metric_column_with_none():
    # e.g. rows read from JSON: the metric column holds Python floats and None
    df = _sparse_ranking_frame()
    obj = df.assign(cos_sim=[None if math.isnan(v) else v for v in df["cos_sim"]]).astype({"cos_sim": object})
    assert obj["cos_sim"].dtype == object
    a = stats.rank_stability(obj, "cos_sim", "L1", n_resamples=100, seed=1).table
    b = stats.rank_stability(df, "cos_sim", "L1", n_resamples=100, seed=1).table
    pd.testing.assert_frame_equal(a, b)


@pytest.mark.parametrize("weighting", ["city", "block"])
def test_rank_stability_of_categorical_columns_is_that_of_strings(weighting):
    # e.g. rows read from parquet: city and method as categoricals whose category order is not alphabetical
    # (pandas pivots them in category order) and with unused categories
    df = _sparse_ranking_frame()
    cat = df.assign(city=pd.Categorical(df["city"], categories=["D", "C", "B", "A", "Q"]),
                    method=pd.Categorical(df["method"], categories=["z", "y", "x", "w", "v"]))
    a = stats.rank_stability(cat, "cos_sim", "L1", n_resamples=100, seed=1, weighting=weighting)
    b = stats.rank_stability(df, "cos_sim", "L1", n_resamples=100, seed=1, weighting=weighting)
    assert a.n_cities == 4
    pd.testing.assert_frame_equal(a.table, b.table)


def test_rank_stability_methods_selects_the_ranked_methods():
    df = _sparse_ranking_frame()
    r = stats.rank_stability(df, "cos_sim", "L1", n_resamples=200, seed=2, methods=["x", "y"])
    by_hand = stats.rank_stability(df[df["method"].isin(["x", "y"])], "cos_sim", "L1", n_resamples=200, seed=2)
    assert sorted(r.table["method"]) == ["x", "y"]
    pd.testing.assert_frame_equal(r.table, by_hand.table)


def test_rank_stability_defaults_and_to_dict():
    df = _ranking_frame()
    r = stats.rank_stability(df, "cos_sim", "L1")
    # docs/benchmark.md section 7: 2,000 resamples, default_rng(42), a 95 % interval, city-balanced
    assert (r.n_resamples, r.seed, r.confidence, r.weighting) == (2000, 42, 0.95, "city")
    explicit = stats.rank_stability(df, "cos_sim", "L1", n_resamples=2000, seed=42, confidence=0.95, weighting="city")
    pd.testing.assert_frame_equal(r.table, explicit.table)
    s = stats.rank_stability(df, "mmd", "L1", n_resamples=100, seed=4, confidence=0.8, weighting="block")
    records = [dict(zip(s.table.columns, row)) for row in s.table.itertuples(index=False)]
    assert s.to_dict() == {"metric": "mmd", "condition": "L1", "higher_is_better": False, "weighting": "block",
                           "n_cities": 6, "n_resamples": 100, "seed": 4, "confidence": 0.8, "table": records}


def test_rank_stability_errors_and_two_cities():
    df = _sparse_ranking_frame()
    two = df[df["city"].isin(["A", "B"])]
    assert stats.rank_stability(two, "cos_sim", "L1", n_resamples=50).n_cities == 2
    with pytest.raises(ValueError, match=r"^rank stability needs at least 2 cities, got 1$"):
        stats.rank_stability(df[df["city"] == "A"], "cos_sim", "L1", n_resamples=50)
    with pytest.raises(ValueError, match=r"^rank stability needs at least 2 methods with finite cos_sim under L1, "
                                         r"got 1$"):
        stats.rank_stability(df[df["method"].isin(["x", "w"])], "cos_sim", "L1", n_resamples=50)
    with pytest.raises(ValueError, match=r"^rank stability needs column\(s\) \['city'\], which the results do not"):
        stats.rank_stability(df.drop(columns="city"), "cos_sim", "L1", n_resamples=50)


# -- validation and small samples of the shared bootstrap helpers --------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"confidence": 0.0}, r"^confidence must be in \(0, 1\), got 0.0$"),
        ({"confidence": 1.0}, r"^confidence must be in \(0, 1\), got 1.0$"),
        ({"confidence": 1.5}, r"^confidence must be in \(0, 1\), got 1.5$"),
        ({"n_resamples": 0}, r"^n_resamples must be a positive integer, got 0$"),
        ({"n_resamples": 2.5}, r"^n_resamples must be a positive integer, got 2.5$"),
    ],
)
def test_bootstrap_parameters_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        stats.bootstrap_mean_ci([0.1, 0.2, 0.3], **kwargs)
    with pytest.raises(ValueError, match=match):
        stats.paired_bootstrap([0.1, 0.2, 0.3], [0.0, 0.0, 0.0], **kwargs)


def test_bootstrap_mean_ci_defaults_and_small_samples():
    v = np.random.default_rng(46).normal(size=9)
    r = stats.bootstrap_mean_ci(v)
    # docs/benchmark.md section 7: 5,000 resamples, seed 42, 95 %
    assert (r.n_resamples, r.seed, r.confidence) == (5000, 42, 0.95)
    assert r == stats.bootstrap_mean_ci(v, n_resamples=5000, seed=42, confidence=0.95)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an empty sample: NaN mean and interval, no numpy warning
        empty = stats.bootstrap_mean_ci([np.nan, None], n_resamples=7, seed=3, confidence=0.8)
    assert all(math.isnan(getattr(empty, k)) for k in ("mean", "ci_low", "ci_high"))
    assert (empty.n, empty.seed, empty.n_resamples, empty.confidence) == (0, 3, 7, 0.8)
    one = stats.bootstrap_mean_ci([None, 0.5], n_resamples=7, seed=3, confidence=0.8)  # None is a missing value
    assert one.mean == 0.5 and math.isnan(one.ci_low) and math.isnan(one.ci_high)
    assert (one.n, one.seed, one.n_resamples, one.confidence) == (1, 3, 7, 0.8)
    two = stats.bootstrap_mean_ci([0.2, None, 0.6], n_resamples=50, seed=3)
    assert two.n == 2 and two.mean == pytest.approx(0.4) and 0.2 <= two.ci_low <= two.ci_high <= 0.6
    # a single resample: the interval is that resample's mean (hand-worked from the same draws)
    single = stats.bootstrap_mean_ci([1.0, 2.0, 4.0], n_resamples=1, seed=5)
    drawn = np.array([1.0, 2.0, 4.0])[np.random.default_rng(5).integers(0, 3, size=3)].mean()
    assert single.n_resamples == 1 and single.ci_low == single.ci_high == pytest.approx(drawn)


def test_bootstrap_means_over_several_chunks_are_resample_means():
    # 2,000 values: 5,000 resample means are drawn 2,000 at a time; every one is a mean of drawn values
    v = np.random.default_rng(47).uniform(10.0, 11.0, size=2000)
    out = stats.bootstrap_means(v, 5000, 3)
    assert out.shape == (5000,) and np.all((out >= v.min()) & (out <= v.max()))
    # the resample means scatter around the mean with the standard error of a mean of 2,000 draws
    se = v.std() / math.sqrt(v.size)
    assert abs(out.mean() - v.mean()) < 6 * se / math.sqrt(5000)
    assert 0.9 < out.std() / se < 1.1
    assert np.array_equal(out, stats.bootstrap_means(v, 5000, 3))
    with pytest.raises(ValueError, match=r"^values must be one-dimensional, got shape \(2, 2\)$"):
        stats.bootstrap_means(np.ones((2, 2)), 10, 0)
    with pytest.raises(ValueError, match=r"^values must be one-dimensional, got shape \(2, 2\)$"):
        stats.bootstrap_mean_ci(np.ones((2, 2)))


def test_block_bootstrap_where_every_resample_is_undefined():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = stats.block_bootstrap_ci("spearman", [1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0], blocks=[0, 0, 1, 1],
                                     n_resamples=20)
    assert math.isnan(r.estimate) and math.isnan(r.ci_low) and math.isnan(r.ci_high) and r.n_undefined == 20
