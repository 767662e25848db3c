"""Tests of the pairing layer of geofidelity_bench.stats (docs/benchmark.md section 7, Statistics and
analyses): pair_conditions / Pairing, paired_deltas / PairedDelta, city_balanced / CityBalanced,
leave_one_city_out, control_benefits, their validation messages and recorded fields.

Expected numbers come from hand-worked cases or from an independent pandas pivot of the rows,
never from the code under test."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sstats

from geofidelity_bench import stats

METHODS = ("m1", "m2", "m3")


def _frame(seed=0, methods=METHODS, n_cities=3, blocks=2, conditions=("L1", "L0", "C_WRONG_STREET")):
    """Seeded results-like rows: every method x condition x block, with method-specific effects,
    so that dropping a method changes every statistic."""
    rng = np.random.default_rng(seed)
    rows = []
    for ci in range(n_cities):
        for b in range(blocks):
            base = rng.normal(0.5, 0.05)
            for mi, m in enumerate(methods):
                for k, cond in enumerate(conditions):
                    v = base + 0.02 * (mi + 1) * (len(conditions) - k) + rng.normal(0, 0.02)
                    rows.append({"method": m, "condition": cond, "block_id": f"c{ci}_b{b}", "city": f"c{ci}",
                                 "country": "X", "cos_sim": v, "mmd": 1.0 - v})
    return pd.DataFrame(rows)


def _wide(df, metric, index=("method", "block_id", "city")):
    """The paired table by an independent route: a pandas pivot (one column per condition)."""
    return df.pivot_table(index=list(index), columns="condition", values=metric, aggfunc="first").dropna()


def _percentile_interval(resampled, confidence):
    alpha = (1 - confidence) / 2
    return tuple(np.percentile(np.asarray(resampled), [100 * alpha, 100 * (1 - alpha)]))


# -- pair_conditions and Pairing --------------------------------------------------------------


def _small():
    # unit (m, b1): L1 .6 / L0 .5; (m, b2): .7 / .4; (n, b1): .3 / .35;
    # (n, b3) only in L1; (n, b4) only in L0; (n, b5) NaN under L1.
    rows = [("m", "L1", "b1", "A", 0.6), ("m", "L0", "b1", "A", 0.5),
            ("m", "L1", "b2", "B", 0.7), ("m", "L0", "b2", "B", 0.4),
            ("n", "L0", "b1", "A", 0.35), ("n", "L1", "b1", "A", 0.3),
            ("n", "L1", "b3", "B", 0.9), ("n", "L0", "b4", "B", 0.9),
            ("n", "L0", "b5", "A", 0.2), ("n", "L1", "b5", "A", np.nan)]
    return pd.DataFrame(rows, columns=["method", "condition", "block_id", "city", "cos_sim"])


def test_pairing_records_inputs_columns_and_counts():
    p = stats.pair_conditions(_small(), "cos_sim", "L1", "L0")
    assert (p.metric, p.cond_a, p.cond_b, p.keys) == ("cos_sim", "L1", "L0", ("method", "block_id"))
    # one row per matched unit: the keys, city, a, b, diff; a clean 0..n-1 index, sorted by the keys
    assert list(p.pairs.columns) == ["method", "block_id", "city", "a", "b", "diff"]
    assert list(p.pairs.index) == [0, 1, 2]
    assert list(zip(p.pairs["method"], p.pairs["block_id"])) == [("m", "b1"), ("m", "b2"), ("n", "b1")]
    assert list(p.pairs["city"]) == ["A", "B", "A"]
    assert p.pairs["a"].tolist() == pytest.approx([0.6, 0.7, 0.3])
    assert p.pairs["b"].tolist() == pytest.approx([0.5, 0.4, 0.35])
    assert p.pairs["diff"].tolist() == pytest.approx([0.1, 0.3, -0.05])
    assert p.n_pairs == 3
    assert p.counts() == {"n_pairs": 3, "n_only_a": 1, "n_only_b": 1, "n_nan_dropped": 1}


def test_two_pairs_are_enough_and_one_is_an_error():
    # docs/benchmark.md section 7: "fewer than 2 pairs is an error" -> exactly 2 pairs is fine.
    two = _small().query("method == 'm'")
    p = stats.pair_conditions(two, "cos_sim", "L1", "L0")
    assert p.n_pairs == 2 and p.pairs["diff"].tolist() == pytest.approx([0.1, 0.3])
    r = stats.paired_deltas(two, "cos_sim", "L1", "L0", n_resamples=50)
    assert r.n_pairs == 2 and r.mean == pytest.approx(0.2)
    one = two[two["block_id"] == "b1"]
    with pytest.raises(ValueError, match=r"has 1 usable paired unit\(s\).*need at least 2"):
        stats.pair_conditions(one, "cos_sim", "L1", "L0")


def test_results_without_a_city_column_pair_and_city_analyses_say_what_is_missing():
    df = _small().drop(columns="city")
    p = stats.pair_conditions(df, "cos_sim", "L1", "L0")
    assert list(p.pairs.columns) == ["method", "block_id", "a", "b", "diff"]
    assert p.pairs["diff"].tolist() == pytest.approx([0.1, 0.3, -0.05])
    with pytest.raises(ValueError, match=r"^city-level analyses need a 'city' column in the results$"):
        stats.city_balanced(df, "cos_sim", "L1", "L0", n_resamples=10)
    with pytest.raises(ValueError, match=r"^leave-one-city-out needs a 'city' column in the results$"):
        stats.leave_one_city_out(df, "cos_sim", "L1", "L0")


def test_city_as_a_pair_key_is_not_duplicated():
    df = _small().query("method == 'm'").drop(columns="method")
    p = stats.pair_conditions(df, "cos_sim", "L1", "L0", by=("city", "block_id"))
    assert p.keys == ("city", "block_id")
    assert list(p.pairs.columns) == ["city", "block_id", "a", "b", "diff"]
    assert list(zip(p.pairs["city"], p.pairs["block_id"])) == [("A", "b1"), ("B", "b2")]
    assert p.pairs["diff"].tolist() == pytest.approx([0.1, 0.3])


def test_single_numeric_pair_key_sorts_numerically():
    df = pd.DataFrame({"condition": ["L1", "L0"] * 3, "block_id": [30, 30, 4, 4, 100, 100],
                       "cos_sim": [0.5, 0.4, 0.9, 0.6, 0.2, 0.3]})
    p = stats.pair_conditions(df, "cos_sim", "L1", "L0", by=("block_id",))
    assert p.pairs["block_id"].tolist() == [4, 30, 100]
    assert p.pairs["diff"].tolist() == pytest.approx([0.3, 0.1, -0.1])


def test_object_dtype_metric_column_with_nulls_counts_them_as_nan():
    # e.g. rows read from JSON records, where a missing score is null -> an object column
    df = _small()
    df["cos_sim"] = pd.Series([None if math.isnan(v) else v for v in df["cos_sim"]], dtype=object)
    assert df["cos_sim"].dtype == object
    p = stats.pair_conditions(df, "cos_sim", "L1", "L0")
    assert p.counts() == {"n_pairs": 3, "n_only_a": 1, "n_only_b": 1, "n_nan_dropped": 1}
    assert p.pairs["a"].dtype == np.float64 and p.pairs["b"].dtype == np.float64
    assert p.pairs["diff"].tolist() == pytest.approx([0.1, 0.3, -0.05])


def test_duplicate_units_are_rejected_with_count_and_first_example():
    df = _small().query("method == 'm'")
    # each L1 unit appears twice with DIFFERENT scores (two runs), in the order b1, b2, b1, b2
    again = df[df["condition"] == "L1"].assign(cos_sim=lambda t: t["cos_sim"] + 0.01)
    dup = pd.concat([df, again], ignore_index=True)
    with pytest.raises(ValueError, match=(r"condition 'L1' has 4 rows sharing a unit \('method', 'block_id'\), "
                                          r"e\.g\. \('m', 'b1'\); each unit must appear once per condition "
                                          r"\(pair within a run by adding 'run' to by=\)")):
        stats.pair_conditions(dup, "cos_sim", "L1", "L0")


# -- validation messages ----------------------------------------------------------------------


def test_validation_messages_name_the_missing_piece():
    df = _small().assign(note="")
    with pytest.raises(ValueError, match=r"^unknown metric 'gaas': the results have no such column "
                                         r"\(metric columns: \['cos_sim'\]\)$"):
        stats.pair_conditions(df, "gaas", "L1", "L0")
    no_metric = pd.DataFrame({"method": ["m"], "condition": ["L1"], "block_id": ["b"], "score": [1.0]})
    with pytest.raises(ValueError, match=r"\(metric columns: \['method', 'condition', 'block_id', 'score'\]\)$"):
        stats.pair_conditions(no_metric, "cos_sim", "L1", "L0")
    with pytest.raises(ValueError, match=r"^pairing needs column\(s\) \['block_id'\], which the results do not have$"):
        stats.pair_conditions(df.drop(columns="block_id"), "cos_sim", "L1", "L0")
    with pytest.raises(ValueError, match=r"^pairing by condition needs column\(s\) \['condition'\], "
                                         r"which the results do not have$"):
        stats.pair_conditions(df.drop(columns="condition"), "cos_sim", "L1", "L0")
    with pytest.raises(ValueError, match=r"^unknown method\(s\) \['zz'\] \(methods present: \['m', 'n'\]\)$"):
        stats.pair_conditions(df, "cos_sim", "L1", "L0", methods=["m", "zz"])


def test_metric_without_direction_says_how_to_give_one():
    assert "diversity_gap" not in stats.HIGHER_IS_BETTER  # docs/benchmark.md section 7: no direction
    with pytest.raises(ValueError, match=r"'diversity_gap' has no known direction .*\); "
                                         r"pass higher_is_better=True or False$"):
        stats.metric_higher_is_better("diversity_gap")
    assert stats.metric_higher_is_better("diversity_gap", False) is False
    assert stats.metric_higher_is_better("mmd") is False and stats.metric_higher_is_better("cos_sim") is True


# -- methods= and by= reach every analysis ------------------------------------------------------


def test_methods_restricts_every_analysis_to_those_methods():
    df = _frame(seed=1)
    keep = ["m1", "m3"]
    sub = df[df["method"].isin(keep)]
    wide = _wide(sub, "cos_sim")
    d = (wide["L1"] - wide["L0"])
    p = stats.pair_conditions(df, "cos_sim", "L1", "L0", methods=keep)
    assert sorted(set(p.pairs["method"])) == keep and p.n_pairs == len(d)
    assert p.pairs["diff"].tolist() == pytest.approx(d.sort_index().tolist())

    r = stats.paired_deltas(df, "cos_sim", "L1", "L0", methods=keep, n_resamples=50)
    assert r.n_pairs == len(d) and r.mean == pytest.approx(d.mean())

    per_city = wide.groupby(level="city")[["L1", "L0"]].mean()
    cb = stats.city_balanced(df, "cos_sim", "L1", "L0", n_resamples=50, methods=keep)
    assert cb.n_pairs == len(d) and cb.mean == pytest.approx((per_city["L1"] - per_city["L0"]).mean())

    loco = stats.leave_one_city_out(df, "cos_sim", "L1", "L0", methods=keep).set_index("city_removed")
    for city in per_city.index:
        rest = d[d.index.get_level_values("city") != city]
        assert loco.loc[city, "delta"] == pytest.approx(rest.mean())
        assert loco.loc[city, "n_pairs"] == len(rest)

    benefit = wide["L1"] - wide["C_WRONG_STREET"]
    row = stats.control_benefits(df, "cos_sim", methods=keep, n_resamples=50).iloc[0]
    assert row["n_pairs"] == len(benefit) and row["benefit"] == pytest.approx(benefit.mean())


def _two_runs():
    """The same (method, block_id) units in two results folders (column run), as in a combined report."""
    a = _frame(seed=2, methods=("m1", "m2"))
    b = _frame(seed=3, methods=("m1", "m2"))
    return pd.concat([a.assign(run="r1"), b.assign(run="r2")], ignore_index=True)


def test_by_with_run_reaches_every_analysis():
    df = _two_runs()
    by = ("method", "block_id", "run")
    with pytest.raises(ValueError, match="once per condition"):
        stats.paired_deltas(df, "cos_sim", "L1", "L0", n_resamples=10)  # the default keys are not unique here
    wide = _wide(df, "cos_sim", index=(*by, "city"))
    d = wide["L1"] - wide["L0"]

    r = stats.paired_deltas(df, "cos_sim", "L1", "L0", by=by, n_resamples=50)
    assert r.keys == by and r.to_dict()["pair_keys"] == list(by)
    assert r.n_pairs == len(d) and r.mean == pytest.approx(d.mean())

    per_city = wide.groupby(level="city")[["L1", "L0"]].mean()
    cb = stats.city_balanced(df, "cos_sim", "L1", "L0", n_resamples=50, by=by)
    assert cb.n_pairs == len(d) and cb.mean == pytest.approx((per_city["L1"] - per_city["L0"]).mean())

    loco = stats.leave_one_city_out(df, "cos_sim", "L1", "L0", by=by)
    assert loco.attrs["n_pairs_all"] == len(d) and loco.attrs["delta_all"] == pytest.approx(d.mean())

    row = stats.control_benefits(df, "cos_sim", by=by, n_resamples=50).iloc[0]
    assert row["n_pairs"] == len(d)
    assert row["benefit"] == pytest.approx((wide["L1"] - wide["C_WRONG_STREET"]).mean())


# -- paired_deltas / PairedDelta ---------------------------------------------------------------


def test_paired_deltas_documented_defaults_and_recorded_fields():
    df = _small()
    r = stats.paired_deltas(df, "cos_sim", "L1", "L0")
    explicit = stats.paired_deltas(df, "cos_sim", "L1", "L0", n_resamples=5000, seed=42, confidence=0.95)
    assert (r.ci_low, r.ci_high) == (explicit.ci_low, explicit.ci_high)
    assert (r.metric, r.cond_a, r.cond_b) == ("cos_sim", "L1", "L0")
    d = r.to_dict()
    head = {"metric": "cos_sim", "comparison": "L1 - L0", "cond_a": "L1", "cond_b": "L0",
            "pair_keys": ["method", "block_id"], "n_pairs": 3, "n_only_a": 1, "n_only_b": 1, "n_nan_dropped": 1}
    assert {k: d[k] for k in head} == head
    assert (d["n_resamples"], d["seed"], d["confidence"]) == (5000, 42, 0.95)
    assert d["mean"] == pytest.approx(np.mean([0.1, 0.3, -0.05]))
    assert (r.mean, r.ci_low, r.ci_high, r.positive_share, r.wilcoxon_p) == (
        d["mean"], d["ci_low"], d["ci_high"], d["positive_share"], d["wilcoxon_p"])


# -- city_balanced / CityBalanced --------------------------------------------------------------


def _cities():
    # Block ids put city 'z' first in key order; sorted cities are a, q, z.
    # z: L1 .6/.8 vs L0 .5/.5 -> +0.2; a: .4 vs .5 -> -0.1; q: .5 vs .5 -> exactly 0.
    rows = [("b0", "z", 0.6, 0.5), ("b1", "a", 0.4, 0.5), ("b2", "z", 0.8, 0.5), ("b3", "q", 0.5, 0.5)]
    spec = []
    for b, city, l1, l0 in rows:
        spec += [("m", "L1", b, city, l1), ("m", "L0", b, city, l0)]
    return pd.DataFrame(spec, columns=["method", "condition", "block_id", "city", "cos_sim"])


def test_city_balanced_fields_order_and_zero_delta_city():
    df = _cities()
    cb = stats.city_balanced(df, "cos_sim", "L1", "L0", n_resamples=400, seed=3, confidence=0.8)
    # per-city table sorted by city; a city whose delta is exactly 0 is not "positive"
    assert cb.per_city["city"].tolist() == ["a", "q", "z"]
    deltas = np.array([0.4 - 0.5, 0.5 - 0.5, 0.7 - 0.5])
    assert cb.per_city["delta"].tolist() == pytest.approx(deltas.tolist())
    assert cb.per_city["n_pairs"].tolist() == [1, 1, 2]
    assert (cb.n_cities, cb.n_cities_positive, cb.n_pairs) == (3, 1, 4)
    # the interval: percentile interval (80 %) of city-resampled means, cities in sorted order
    draws = np.random.default_rng(3).integers(0, 3, size=(400, 3))
    assert (cb.ci_low, cb.ci_high) == pytest.approx(_percentile_interval([deltas[k].mean() for k in draws], 0.8),
                                                    abs=1e-12)
    p_cities = sstats.wilcoxon(deltas).pvalue  # scipy default: the zero city is dropped
    assert cb.result.wilcoxon_p == pytest.approx(p_cities)
    assert cb.to_dict() == {
        "metric": "cos_sim", "comparison": "L1 - L0", "mean": pytest.approx(deltas.mean()),
        "ci_low": cb.ci_low, "ci_high": cb.ci_high, "n_cities": 3, "n_cities_positive": 1, "n_pairs": 4,
        "wilcoxon_p_cities": pytest.approx(p_cities), "seed": 3, "n_resamples": 400, "confidence": 0.8,
    }
    assert (cb.metric, cb.cond_a, cb.cond_b, cb.confidence) == ("cos_sim", "L1", "L0", 0.8)


def test_city_balanced_documented_defaults():
    df = _frame(seed=4)
    cb = stats.city_balanced(df, "cos_sim", "L1", "L0")
    explicit = stats.city_balanced(df, "cos_sim", "L1", "L0", 5000, 42, confidence=0.95)
    assert (cb.ci_low, cb.ci_high) == (explicit.ci_low, explicit.ci_high)
    assert (cb.seed, cb.n_resamples, cb.confidence) == (42, 5000, 0.95)


# -- leave_one_city_out ---------------------------------------------------------------------------


def test_leave_one_city_out_columns_attrs_and_positive_share():
    df = _cities()
    out = stats.leave_one_city_out(df, "cos_sim", "L1", "L0")
    assert list(out.columns) == ["city_removed", "n_pairs", "delta", "change", "positive_share"]
    diffs = {"z": [0.1, 0.3], "a": [-0.1], "q": [0.0]}
    all_diffs = [v for vs in diffs.values() for v in vs]
    assert out.attrs == {"metric": "cos_sim", "comparison": "L1 - L0",
                         "delta_all": pytest.approx(np.mean(all_diffs)), "n_pairs_all": 4}
    out = out.set_index("city_removed")
    assert list(out.index) == ["a", "q", "z"]
    for city in diffs:
        rest = [v for c, vs in diffs.items() if c != city for v in vs]
        # positive share: strictly positive differences (a zero difference is not positive)
        share = sum(1 for v in rest if v > 1e-12) / len(rest)
        assert out.loc[city, "positive_share"] == pytest.approx(share), city
        assert out.loc[city, "delta"] == pytest.approx(np.mean(rest))
        assert out.loc[city, "n_pairs"] == len(rest)


def test_leave_one_city_out_needs_two_cities():
    df = _cities().query("city == 'z'")
    with pytest.raises(ValueError, match=r"^leave-one-city-out needs at least 2 cities, got 1$"):
        stats.leave_one_city_out(df, "cos_sim", "L1", "L0")


# -- control_benefits --------------------------------------------------------------------------


CONTROL_COLUMNS = ["control", "metric", "higher_is_better", "sign", "n_pairs", "mean_reference", "mean_control",
                   "benefit", "ci_low", "ci_high", "positive_share", "n_positive", "wilcoxon_p", "wilcoxon_reason",
                   "n_only_reference", "n_only_control", "n_nan_dropped", "seed", "n_resamples", "confidence"]


def test_control_benefits_columns_defaults_and_counts():
    df = _small().replace({"condition": {"L0": "C_WRONG_STREET"}})
    out = stats.control_benefits(df, "cos_sim")
    assert list(out.columns) == CONTROL_COLUMNS  # the documented columns, in order
    explicit = stats.control_benefits(df, "cos_sim", n_resamples=5000, seed=42, confidence=0.95)
    pd.testing.assert_frame_equal(out, explicit)
    row = out.iloc[0]
    assert (row["control"], row["metric"], row["higher_is_better"], row["sign"]) == ("C_WRONG_STREET", "cos_sim",
                                                                                     True, 1)
    assert (row["n_pairs"], row["n_positive"], row["n_only_reference"], row["n_only_control"],
            row["n_nan_dropped"]) == (3, 2, 1, 1, 1)
    assert (row["seed"], row["n_resamples"], row["confidence"]) == (42, 5000, 0.95)
    assert row["wilcoxon_reason"] is None
    assert row["wilcoxon_p"] == pytest.approx(sstats.wilcoxon([0.1, 0.3, -0.05]).pvalue)


def test_control_benefits_explicit_direction_wins():
    df = _small().replace({"condition": {"L0": "C_WRONG_STREET"}})
    df["diversity_gap"] = df["cos_sim"]
    # diversity_gap has no direction: an explicit one is used (lower is better: benefit = control - L1)
    row = stats.control_benefits(df, "diversity_gap", higher_is_better=False, n_resamples=50).iloc[0]
    assert (row["higher_is_better"], row["sign"]) == (False, -1)
    assert row["benefit"] == pytest.approx(-np.mean([0.1, 0.3, -0.05]))
    # and it overrides the catalog's direction for cos_sim
    row = stats.control_benefits(df, "cos_sim", higher_is_better=False, n_resamples=50).iloc[0]
    assert (row["higher_is_better"], row["sign"]) == (False, -1)
    assert row["benefit"] == pytest.approx(-np.mean([0.1, 0.3, -0.05]))


# -- the paired-array checks of spearman (_paired_finite) ----------------------------------------


def test_paired_arrays_two_points_are_enough():
    assert stats.spearman([1, 2], [3, 5]) == pytest.approx(sstats.spearmanr([1, 2], [3, 5]).statistic)
    assert stats.spearman([1, 2], [5, 3]) == pytest.approx(-1.0)


@pytest.mark.parametrize(
    "x, y, match",
    [
        ([[1, 2], [3, 4]], [1, 2], r"^x must be one-dimensional"),
        ([1, 2], [[1, 2]], r"^y must be one-dimensional"),
        ([1, 2, 3], [1, 2], r"^x and y must have the same length, got 3 and 2$"),
        ([1], [2], r"^need at least 2 pairs, got 1$"),
    ],
)
def test_paired_array_errors_name_the_argument(x, y, match):
    with pytest.raises(ValueError, match=match):
        stats.spearman(x, y)
