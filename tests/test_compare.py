"""`geofidelity-bench compare` and `compare_results`: two results folders written by the real writer,
differing in known ways, compared; the expected numbers are computed here independently (a
brute-force pair count for Kendall's tau, hand-made differences)."""

from __future__ import annotations

import io
import itertools
import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest

from geofidelity_bench import compare_results, load_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.compare import COMPARED_METRICS, DEFAULT_TOLERANCE, RANKED_METRICS, CompareError
from geofidelity_bench.evaluation import RESULT_COLUMNS
from geofidelity_bench.metrics.catalog import HIGHER_IS_BETTER, RESULT_METRIC_COLUMNS, SIMILARITY_COLUMNS
from geofidelity_bench.results import protocol_record, read_results_csv, write_results

METHODS = ("gen_a", "gen_b", "gen_c")
CONDITIONS = ("L0", "L1")


@pytest.fixture(scope="module")
def demo():
    bench = load_benchmark("demo")
    return bench.fingerprint, [(b.block_id, b.city) for b in bench.blocks][:6]


def _write(out, demo, *, fingerprint=None, encoder="dinov2-base", edit=None):
    """A results folder as `evaluate` writes it on the demo benchmark: well-separated method means, so
    the ranking is known (gen_a > gen_b > gen_c on every higher-is-better metric, the reverse on the others)."""
    fp, blocks = demo
    rng = np.random.default_rng(0)
    rows = []
    for m_i, method in enumerate(METHODS):
        for cond in CONDITIONS:
            for block, city in blocks:
                row = {"method": method, "condition": cond, "block_id": block, "city": city, "country": "SE",
                       "stratum": "", "n_generated": 4, "n_reference": 3, "n_distinct": 4, "n_copied": 0,
                       "encoder": encoder, "n_candidates": 5, "chance_retrieval_acc": 0.2, "chance_mrr": 0.46}
                for col in RESULT_METRIC_COLUMNS:
                    good = 0.8 - 0.3 * m_i + float(rng.uniform(-0.05, 0.05))
                    hib = HIGHER_IS_BETTER.get(col)
                    row[col] = good if hib in (True, None) else 1.0 - good
                rows.append(row)
    df = pd.DataFrame(rows).reindex(columns=RESULT_COLUMNS)
    if edit is not None:
        df = edit(df)
    info = {"benchmark": {"name": "demo", "source": "demo", "fingerprint": fingerprint or fp},
            "encoder": {"name": encoder, "dim": 8, "config": {"encoder": encoder}, "config_hash": f"{encoder}-h"},
            "protocol": protocol_record(), "versions": {"geofidelity-bench": "0.1.0"}}
    write_results(out, df, info)
    return out


def _set(df, method, condition, block, column, value):
    mask = (df["method"] == method) & (df["condition"] == condition) & (df["block_id"] == block)
    assert mask.sum() == 1
    df.loc[mask, column] = value
    return df


def _brute_tau(x, y):
    """Kendall's tau by counting pairs (no ties in these cases)."""
    conc = disc = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        s = np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])
        conc += s > 0
        disc += s < 0
    n = len(x)
    return (conc - disc) / (n * (n - 1) / 2)


@pytest.fixture(scope="module")
def folders(demo, tmp_path_factory):
    """A: the reference; B: a copy of A's results.csv with one value changed, one row removed and, under
    L1, gen_a and gen_b swapped on cos_sim (B's gen_b cos_sim rows raised above gen_a's)."""
    root = tmp_path_factory.mktemp("compare")
    a = _write(root / "a", demo)
    b = root / "b"
    shutil.copytree(a, b)
    df = read_results_csv(b / "results.csv")
    blocks = [bl for bl, _ in demo[1]]
    changed = ("gen_c", "L0", blocks[2], "mmd")
    old = float(df.loc[(df.method == "gen_c") & (df.condition == "L0") & (df.block_id == blocks[2]), "mmd"].iloc[0])
    _set(df, *changed, old + 0.125)
    dropped = ("gen_b", "L0", blocks[4])
    df = df[~((df.method == dropped[0]) & (df.condition == dropped[1]) & (df.block_id == dropped[2]))]
    swap = (df.method == "gen_b") & (df.condition == "L1")
    df.loc[swap, "cos_sim"] = df.loc[swap, "cos_sim"] + 0.6  # gen_b (~0.5) now above gen_a (~0.8)
    df.to_csv(b / "results.csv", index=False)
    return {"a": a, "b": b, "changed": changed, "delta": 0.125, "dropped": dropped, "blocks": blocks}


def test_known_differences_are_reported_exactly(folders):
    res = compare_results(folders["a"], folders["b"])
    ra, rb = read_results_csv(folders["a"] / "results.csv"), read_results_csv(folders["b"] / "results.csv")
    n_common = len(ra) - 1
    assert (res.n_rows_a, res.n_rows_b, res.n_common_rows) == (len(ra), len(ra) - 1, n_common)

    # the changed value: its metric's max diff is the change, one row beyond the tolerance, named
    mmd = res.metric("mmd")
    assert mmd.n_matched == n_common and mmd.n_beyond_tolerance == 1
    assert mmd.max_abs_diff == pytest.approx(folders["delta"], abs=1e-12)
    assert mmd.mean_abs_diff == pytest.approx(folders["delta"] / n_common, abs=1e-12)
    method, cond, block, _ = folders["changed"]
    assert [(w["method"], w["condition"], w["block_id"]) for w in mmd.worst] == [(method, cond, block)]
    # cos_sim: the swapped rows (gen_b under L1) differ by 0.6, all of them, and nothing else does
    cos = res.metric("cos_sim")
    assert cos.n_beyond_tolerance == len(folders["blocks"]) and cos.max_abs_diff == pytest.approx(0.6, abs=1e-12)
    assert {(w["method"], w["condition"]) for w in cos.worst} == {("gen_b", "L1")}
    for m in COMPARED_METRICS:
        if m not in ("mmd", "cos_sim"):
            assert res.metric(m).max_abs_diff == 0 and res.metric(m).n_beyond_tolerance == 0, m
    # gaas is NaN on both sides in neither; the demo rows have every value
    assert all(res.metric(m).n_nan_a_only == res.metric(m).n_nan_b_only == 0 for m in COMPARED_METRICS)

    # the missing row: only in A, listed with its keys; nothing only in B
    assert res.one_sided_rows["a"]["n_rows"] == 1
    assert res.one_sided_rows["a"]["rows"] == [dict(zip(("method", "condition", "block_id"), folders["dropped"]))]
    assert res.one_sided_rows["a"]["by_method_condition"] == [{"method": "gen_b", "condition": "L0", "n_rows": 1}]
    assert res.one_sided_rows["b"] == {"n_rows": 0, "by_method_condition": [], "rows": []}

    # the ranking under L1 by cos_sim: tau from a brute-force pair count over the means both sides share
    r = res.ranking("L1", "cos_sim")
    assert r.methods == list(METHODS)
    mean = lambda df, m: df[(df.method == m) & (df.condition == "L1")]["cos_sim"].mean()  # noqa: E731
    xa = [mean(ra, m) for m in METHODS]
    xb = [mean(rb, m) for m in METHODS]
    assert r.mean_a == pytest.approx(xa) and r.mean_b == pytest.approx(xb)
    assert r.kendall_tau == pytest.approx(_brute_tau(xa, xb)) and r.kendall_tau == pytest.approx(1 / 3)
    assert r.same_order is False and (r.rank1_a, r.rank1_b) == ("gen_a", "gen_b")
    assert r.order_a == ["gen_a", "gen_b", "gen_c"] and r.order_b == ["gen_b", "gen_a", "gen_c"]
    # the other rankings keep their order: lower-is-better metrics rank gen_a first too (direction from the catalog)
    for other in res.rankings:
        if (other.condition, other.metric) != ("L1", "cos_sim"):
            assert other.same_order is True and other.kendall_tau == pytest.approx(1.0), other
            assert other.rank1_a == other.rank1_b == "gen_a"
    assert {x.metric for x in res.rankings} == set(RANKED_METRICS)
    # under L0, gen_b's mean leaves out the dropped block on both sides: same blocks, same means
    l0 = res.ranking("L0", "retrieval_acc")
    assert l0.n_blocks == [6, 5, 6]
    keep = (ra.method == "gen_b") & (ra.condition == "L0") & (ra.block_id != folders["dropped"][2])
    assert l0.mean_a[1] == pytest.approx(ra.loc[keep, "retrieval_acc"].mean()) == pytest.approx(l0.mean_b[1])


def test_identical_folders_report_zero_and_pass(folders, capsys):
    res = compare_results(folders["a"], folders["a"])
    for m in COMPARED_METRICS:
        mc = res.metric(m)
        assert (mc.max_abs_diff, mc.mean_abs_diff, mc.n_beyond_tolerance) == (0.0, 0.0, 0), m
        assert mc.n_matched == res.n_rows_a
    assert all(r.kendall_tau == 1.0 and r.same_order for r in res.rankings)
    assert res.one_sided_rows["a"]["n_rows"] == res.one_sided_rows["b"]["n_rows"] == 0
    assert res.warnings == [] and res.failures(0.0) == []
    assert main(["compare", str(folders["a"]), str(folders["a"]), "--fail-above", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Comparison of two results folders") and "beyond the tolerance" not in out


def test_fail_above_exits_1_only_beyond_the_threshold(folders, capsys):
    a, b = str(folders["a"]), str(folders["b"])
    assert main(["compare", a, b, "--fail-above", "0.01"]) == 1
    err = capsys.readouterr().err
    assert "cos_sim: max |diff| 0.6 > 0.01" in err and "mmd: max |diff| 0.125 > 0.01" in err
    # above both changes: passes, though a row is missing; --fail-on-one-sided fails on it
    assert main(["compare", a, b, "--fail-above", "0.7"]) == 0
    capsys.readouterr()
    assert main(["compare", a, b, "--fail-above", "0.7", "--fail-on-one-sided"]) == 1
    assert "1 row(s) only in A" in capsys.readouterr().err
    # comparing only the unchanged metrics passes a zero threshold
    assert main(["compare", a, b, "--metrics", "mrr", "sim_target", "--fail-above", "0"]) == 0


def test_a_value_on_one_side_only_is_listed_and_fails(demo, tmp_path, capsys):
    blocks = [bl for bl, _ in demo[1]]
    a = _write(tmp_path / "a", demo)
    b = _write(tmp_path / "b", demo, edit=lambda df: _set(df, "gen_a", "L1", blocks[0], "gaas", np.nan))
    res = compare_results(a, b)
    g = res.metric("gaas")
    assert (g.n_nan_a_only, g.n_nan_b_only, g.n_matched) == (0, 1, res.n_common_rows - 1)
    assert g.one_sided_nan[0]["block_id"] == blocks[0] and g.one_sided_nan[0]["nan_side"] == "B"
    assert g.one_sided_nan[0]["b"] is None and math.isfinite(g.one_sided_nan[0]["a"])
    assert res.failures(1.0) == ["gaas: 1 row(s) with a value on one side only"]
    assert main(["compare", str(a), str(b), "--fail-above", "1"]) == 1
    assert "| gaas | gen_a | L1 |" in capsys.readouterr().out


def test_different_fingerprints_are_refused_unless_allowed(demo, tmp_path, capsys):
    a = _write(tmp_path / "a", demo)
    b = _write(tmp_path / "b", demo, fingerprint="f" * 64)
    with pytest.raises(CompareError, match="different benchmarks"):
        compare_results(a, b)
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "c.md")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert demo[0] in err and "f" * 64 in err and "--allow-different-benchmarks" in err
    assert not (tmp_path / "c.md").exists()
    res = compare_results(a, b, allow_different_benchmarks=True)
    assert res.warnings and "different benchmarks" in res.warnings[0]
    assert main(["compare", str(a), str(b), "--allow-different-benchmarks"]) == 0
    assert "**Warning:** different benchmarks" in capsys.readouterr().out


def test_a_folder_without_run_json_is_refused_with_a_hint(demo, tmp_path, capsys):
    a = _write(tmp_path / "a", demo)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    (b / "run.json").unlink()
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "no run.json" in err and "--allow-different-benchmarks" in err
    res = compare_results(a, b, allow_different_benchmarks=True)
    assert any("benchmark not recorded" in w for w in res.warnings)
    assert res.metric("cos_sim").max_abs_diff == 0


def test_different_encoders_are_compared_with_a_prominent_warning(demo, tmp_path, capsys):
    a = _write(tmp_path / "a", demo)
    b = _write(tmp_path / "b", demo, encoder="efficientnet-lite0")
    res = compare_results(a, b)
    assert res.warnings[0].startswith("DIFFERENT ENCODERS") and "dinov2-base" in res.warnings[0]
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    head = out.split("## Differences per metric")[0]
    assert "**Warning:** DIFFERENT ENCODERS" in head


def test_fewer_than_two_common_methods_give_tau_na_with_a_reason(demo, tmp_path):
    a = _write(tmp_path / "a", demo)
    b = _write(tmp_path / "b", demo, edit=lambda df: df[(df.condition != "L1") | (df.method == "gen_a")])
    res = compare_results(a, b)
    r = res.ranking("L1", "mrr")
    assert r.kendall_tau is None and r.same_order is None and "fewer than 2 methods" in r.reason
    assert r.rank1_a == r.rank1_b == "gen_a"
    assert res.ranking("L0", "mrr").kendall_tau == pytest.approx(1.0)


def test_output_formats_parse(folders, tmp_path, capsys):
    a, b = str(folders["a"]), str(folders["b"])
    assert main(["compare", a, b, "--format", "csv"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    metric_rows = table[table.section == "metric"].set_index("metric")
    assert list(metric_rows.index) == list(COMPARED_METRICS)
    assert metric_rows.loc["mmd", "max_abs_diff"] == pytest.approx(folders["delta"])
    params = table[table.section == "parameter"].set_index("parameter")["value"]
    assert params["a.folder"] == a and float(params["tolerance"]) == 1e-6
    ranking = table[(table.section == "ranking") & (table.condition == "L1") & (table.metric == "cos_sim")]
    assert ranking["kendall_tau"].iloc[0] == pytest.approx(1 / 3) and ranking["rank1_b"].iloc[0] == "gen_b"
    one = table[table.section == "one_sided_row"]
    assert one[["side", "method", "block_id"]].values.tolist() == [["A", "gen_b", folders["dropped"][2]]]

    out = tmp_path / "sub" / "c.json"
    assert main(["compare", a, b, "--format", "json", "--out", str(out), "--tolerance", "0.2"]) == 0
    assert capsys.readouterr().out == ""
    data = json.loads(out.read_text(encoding="utf-8"))
    p = data["parameters"]
    assert p["tolerance"] == 0.2 and p["a"]["benchmark_fingerprint"] == p["b"]["benchmark_fingerprint"]
    assert p["a"]["folder"] == a and p["a"]["encoder"] == "dinov2-base" and "geofidelity-bench" in p["versions"]
    assert {m["metric"]: m["n_beyond_tolerance"] for m in data["metrics"]}["cos_sim"] == len(folders["blocks"])
    assert {m["metric"]: m["n_beyond_tolerance"] for m in data["metrics"]}["mmd"] == 0  # 0.125 < 0.2
    assert [f.name for f in out.parent.iterdir()] == ["c.json"]  # no temporary file left

    assert main(["compare", a, b, "--out", str(tmp_path / "c.md")]) == 0
    md = (tmp_path / "c.md").read_text(encoding="utf-8")
    assert f"- A: `{a}`" in md and "tolerance: 1e-06" in md and demo_fp_short(folders) in md


def demo_fp_short(folders) -> str:
    return json.loads((folders["a"] / "run.json").read_text())["benchmark"]["fingerprint"][:12]


def test_bad_input_is_one_line_and_status_2(folders, tmp_path, capsys):
    a = str(folders["a"])
    dup = tmp_path / "dup"
    shutil.copytree(folders["a"], dup)
    text = (dup / "results.csv").read_text(encoding="utf-8").splitlines()
    (dup / "results.csv").write_text("\n".join(text + [text[1]]) + "\n", encoding="utf-8")
    for args, expected in (
        ([a, str(tmp_path / "nope")], "does not exist"),
        ([a, str(dup)], "rows sharing a (method, condition, block_id)"),
        ([a, a, "--metrics", "fid"], "unknown metric(s) ['fid']"),
        ([a, a, "--tolerance", "-1"], "--tolerance must be"),
        ([a, a, "--fail-on-one-sided"], "needs --fail-above"),
    ):
        assert main(["compare", *args]) == 2, args
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err, err


def test_catalog_metrics_are_all_compared():
    # the similarities are result columns; nothing of the catalog's result metrics is left out
    assert set(COMPARED_METRICS) == set(RESULT_METRIC_COLUMNS) | set(SIMILARITY_COLUMNS)
    assert set(RANKED_METRICS) == set(HIGHER_IS_BETTER)


def test_a_folder_mixing_encoders_is_compared_and_said(demo, tmp_path):
    def mix(df):
        df.loc[df.method == "gen_c", "encoder"] = "clip-vit-b32"
        return df

    # run.json names no encoder here, so the encoder column decides
    a = _write(tmp_path / "a", demo, edit=mix)
    b = _write(tmp_path / "b", demo, edit=mix)
    for folder in (a, b):
        info = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        del info["encoder"]
        (folder / "run.json").write_text(json.dumps(info), encoding="utf-8")
    res = compare_results(a, b)
    assert res.parameters["a"]["encoder"] == "clip-vit-b32, dinov2-base"
    assert sum("mixes encoders (clip-vit-b32, dinov2-base)" in w for w in res.warnings) == 2
    assert res.metric("cos_sim").max_abs_diff == 0


# -- issue 39: what compare must say (cases 5, 18 and 19) ----------------------------------------


def _edit_run_json(folder, **changes):
    info = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    info.update(changes)
    (folder / "run.json").write_text(json.dumps(info), encoding="utf-8")


def test_rows_mixing_encoders_are_said_even_when_run_json_names_one(demo, tmp_path, capsys):
    """docs/benchmark.md section 7: a folder whose results.csv mixes encoders is "also said", whatever
    its run.json names (here dinov2-base on both sides, as `evaluate` writes it)."""
    def mix(df):
        df.loc[df.method == "gen_c", "encoder"] = "clip-vit-b32"
        return df

    a = _write(tmp_path / "a", demo)
    b = _write(tmp_path / "b", demo, edit=mix)
    res = compare_results(a, b)
    said = [w for w in res.warnings if "mixes encoders" in w]
    assert len(said) == 1, res.warnings
    assert str(b) in said[0] and "clip-vit-b32, dinov2-base" in said[0] and "run.json names dinov2-base" in said[0]
    assert str(a) not in said[0]
    assert res.metric("cos_sim").max_abs_diff == 0  # still compared
    assert main(["compare", str(a), str(b)]) == 0
    out, err = capsys.readouterr()
    assert f"**Warning:** {said[0]}" in out and f"warning: {said[0]}" in err
    assert main(["compare", str(a), str(b), "--format", "json"]) == 0
    assert said[0] in json.loads(capsys.readouterr().out)["warnings"]
    assert main(["compare", str(a), str(b), "--format", "csv"]) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert said[0] in table.loc[table.section == "warning", "note"].tolist()


def test_gaas_of_different_segmenters_is_said_and_never_fails(demo, tmp_path, capsys):
    """GAAS of two segmenters measures the segmenters: compare says so (naming both) and --fail-above
    ignores GAAS then; every other metric is still compared and still fails."""
    blocks = [bl for bl, _ in demo[1]]

    def other_segmenter(df):
        df["gaas"] = df["gaas"] + 0.25  # every GAAS row differs
        return _set(df, "gen_a", "L1", blocks[1], "mmd", float(df["mmd"].iloc[0]) + 0.5)

    a = _write(tmp_path / "a", demo)
    b = _write(tmp_path / "b", demo, edit=other_segmenter)
    _edit_run_json(a, gaas={"segmenter": "mask2former-vistas", "config_hash": "m" * 64})
    _edit_run_json(b, gaas={"segmenter": "segformer-cityscapes", "config_hash": "s" * 64})
    res = compare_results(a, b)
    said = [w for w in res.warnings if "GAAS" in w]
    assert len(said) == 1 and "mask2former-vistas" in said[0] and "segformer-cityscapes" in said[0], res.warnings
    g = res.metric("gaas")
    assert "mask2former-vistas" in g.not_comparable and "segformer-cityscapes" in g.not_comparable
    assert g.n_matched == res.n_common_rows and g.max_abs_diff == pytest.approx(0.25)  # the numbers are kept
    assert res.metric("mmd").not_comparable is None
    failures = res.failures(0.01)
    assert failures and all(not f.startswith("gaas") for f in failures) and any(f.startswith("mmd") for f in failures)
    assert all(r.reason and "segmenter" in r.reason for r in res.rankings if r.metric == "gaas")
    assert all(r.reason is None for r in res.rankings if r.metric != "gaas")
    # a GAAS-only difference passes --fail-above; the Markdown says why GAAS is not compared
    assert main(["compare", str(a), str(b), "--metrics", "gaas", "cos_sim", "--fail-above", "0.01"]) == 0
    out = capsys.readouterr().out
    assert f"**Warning:** {said[0]}" in out and "| gaas (not comparable) |" in out
    assert "| gaas | gen_a |" not in out  # its rows are not listed as beyond the tolerance
    data = compare_results(a, b).to_dict()
    assert {m["metric"]: m["not_comparable"] for m in data["metrics"]}["gaas"] == g.not_comparable
    # the same segmenter name with another config is another segmenter too
    _edit_run_json(b, gaas={"segmenter": "mask2former-vistas", "config_hash": "x" * 64})
    res = compare_results(a, b)
    assert res.metric("gaas").not_comparable and "m" * 12 in res.metric("gaas").not_comparable
    assert not any(f.startswith("gaas") for f in res.failures(0.01))
    # the published scores record the name only (no config hash): same name, compared, and GAAS fails
    _edit_run_json(b, gaas={"segmenter": "mask2former-vistas", "config": None, "config_hash": None})
    res = compare_results(a, b)
    assert res.metric("gaas").not_comparable is None and not any("GAAS" in w for w in res.warnings)
    assert any(f.startswith("gaas") for f in res.failures(0.01))


def test_ranking_averages_each_side_over_the_blocks_both_sides_score(demo, tmp_path):
    """Issue 39 case 18: each side's method mean is over the blocks where BOTH sides have a finite value.
    NaNs are placed so that each side's own-finite-block means would order the methods differently;
    the expected means and orders are computed here with plain loops."""
    blocks = [bl for bl, _ in demo[1]]

    def a_edit(df):
        for bl in blocks[:3]:  # gen_a scores 0 on three blocks that B has no value for
            _set(df, "gen_a", "L1", bl, "retrieval_acc", 0.0)
        for bl in blocks[3:]:
            _set(df, "gen_c", "L1", bl, "retrieval_acc", np.nan)
        return df

    def b_edit(df):
        for bl in blocks[:3]:
            _set(df, "gen_a", "L1", bl, "retrieval_acc", np.nan)
        for bl in blocks[3:]:  # gen_c scores 1 on three blocks that A has no value for
            _set(df, "gen_c", "L1", bl, "retrieval_acc", 1.0)
        return df

    a = _write(tmp_path / "a", demo, edit=a_edit)
    b = _write(tmp_path / "b", demo, edit=b_edit)
    ra, rb = read_results_csv(a / "results.csv"), read_results_csv(b / "results.csv")

    def values(df):
        out = {}
        for row in df.itertuples():
            if row.condition == "L1":
                out[(row.method, row.block_id)] = float(row.retrieval_acc)
        return out

    va, vb = values(ra), values(rb)
    expected = {}
    for method in METHODS:
        sa = sb = n = 0
        for block in blocks:
            x, y = va.get((method, block), math.nan), vb.get((method, block), math.nan)
            if math.isfinite(x) and math.isfinite(y):
                sa, sb, n = sa + x, sb + y, n + 1
        expected[method] = (sa / n, sb / n, n)
    order = lambda side: sorted(METHODS, key=lambda m: -expected[m][side])  # noqa: E731 (no ties here)

    r = compare_results(a, b).ranking("L1", "retrieval_acc")
    assert r.methods == list(METHODS)
    assert r.mean_a == pytest.approx([expected[m][0] for m in METHODS], abs=1e-12)
    assert r.mean_b == pytest.approx([expected[m][1] for m in METHODS], abs=1e-12)
    assert r.n_blocks == [expected[m][2] for m in METHODS] == [3, 6, 3]
    assert r.order_a == order(0) == ["gen_a", "gen_b", "gen_c"] and r.order_b == order(1) == r.order_a
    assert r.same_order is True and r.rank1_a == r.rank1_b == "gen_a" and r.kendall_tau == pytest.approx(1.0)


def _release_sims(gen, panels):
    """The release's retrieval similarities (tests/test_parity.py `_release_row`): 1e-8 added to every L2
    norm, generated rows and panel means; returned as the panel-mean similarity per candidate."""
    p = panels / (np.linalg.norm(panels, axis=1, keepdims=True) + 1e-8)
    g = gen / (np.linalg.norm(gen, axis=1, keepdims=True) + 1e-8)
    return (g @ p.T).mean(axis=0)


def _norm_eps_shifts(norm, spread, draws=200, d=768, seed=0):
    """Per draw: the largest |release - this package| over sim_* and the two margins, and the stated bound
    1e-8 (mean 1/|g| + max 1/|p|), for 768-d embeddings (dinov2-base's dimension) scaled to ``norm``."""
    from geofidelity_bench.metrics.retrieval import CANDIDATE_NAMES, retrieval

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(draws):
        center = rng.normal(size=d)
        unit = lambda x: norm * x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
        ref = unit(center + spread * rng.normal(size=(6, d)))
        gen = unit(center + spread * rng.normal(size=(4, d)))
        negs = [unit(rng.normal(size=d) + spread * rng.normal(size=(6, d))) for _ in CANDIDATE_NAMES[1:]]
        ours = retrieval(gen, dict(zip(CANDIDATE_NAMES, [ref, *negs])))
        panels = np.stack([x.mean(axis=0) for x in (ref, *negs)])
        rel = _release_sims(gen, panels)
        theirs = dict(zip(CANDIDATE_NAMES, rel))
        local = rel[0] - max(theirs["same_neighborhood"], theirs["same_city"])
        shifts = [abs(ours.sims[c] - theirs[c]) for c in CANDIDATE_NAMES]
        shifts += [abs(ours.local_margin - local), abs(ours.strongest_margin - (rel[0] - rel[1:].max()))]
        bound = 1e-8 * (np.mean(1 / np.linalg.norm(gen, axis=1)) + 1 / np.linalg.norm(panels, axis=1).min())
        out.append((max(shifts[:5]), max(shifts[5:]), bound))
    return np.array(out)


def test_the_release_norm_epsilon_is_said_against_published_scores_with_its_measured_size(demo, tmp_path, capsys):
    """Issue 39 case 19: against a folder of published scores (run.json "published"), compare notes on the
    sim_* and margin columns that the release's 1e-8 norm epsilon moves them, by the sizes its text quotes;
    those sizes are measured here against this package's `retrieval` and a few-line release formula."""
    from geofidelity_bench.compare import NORM_EPS_EFFECT, NORM_EPS_METRICS

    assert set(NORM_EPS_METRICS) == set(SIMILARITY_COLUMNS) | {"local_margin", "strongest_margin"}
    # the sizes the note quotes, measured: about 2e-8 at norm 1, less at norm 30 (the first-order bound holds) ...
    assert "about 2e-8 for unit-norm embeddings (less for larger norms)" in NORM_EPS_EFFECT
    for spread in (1.0, 0.3):
        at_one = _norm_eps_shifts(1.0, spread)
        assert 1e-8 < at_one[:, :2].max() < 3e-8 and _norm_eps_shifts(30.0, spread, draws=50)[:, :2].max() < 1e-9
        assert (at_one[:, 0] <= at_one[:, 2] * (1 + 1e-6)).all()
    # ... 1.6e-5 to 2.0e-5 near 1e-3 (beyond the default tolerance) ...
    assert "1.6e-5 to 2.0e-5 at norms near 1e-3" in NORM_EPS_EFFECT
    near = [_norm_eps_shifts(1e-3, spread)[:, :2].max() for spread in (1.0, 0.3)]
    assert 1.55e-5 < min(near) and max(near) < 2.05e-5 and min(near) > DEFAULT_TOLERANCE
    # ... and beyond 1e-6 once a norm is below about 0.02
    assert "beyond a tolerance of 1e-6 once a norm is below about 0.02" in NORM_EPS_EFFECT
    below, above = (_norm_eps_shifts(norm, 1.0, draws=50)[:, :2] for norm in (0.04, 0.01))
    assert below.max() < 1e-6 < above.min()

    # compare says it, for those columns only, when a side holds published scores
    published = _write(tmp_path / "published", demo)
    rerun = _write(tmp_path / "rerun", demo)
    _edit_run_json(published, published={"source": "the release", "documented_differences": []})
    res = compare_results(published, rerun)
    said = [w for w in res.warnings if "1e-8" in w]
    assert len(said) == 1 and str(published) in said[0] and NORM_EPS_EFFECT in said[0]
    assert all(c in said[0] for c in NORM_EPS_METRICS)
    noted = {m.metric for m in res.metrics if m.note}
    assert noted == set(NORM_EPS_METRICS) and all("1e-8 norm epsilon" in res.metric(c).note for c in noted)
    assert res.failures(0.0) == []  # a note, not a tolerance: identical values still pass
    assert main(["compare", str(published), str(rerun)]) == 0
    out = capsys.readouterr().out
    assert f"**Warning:** {said[0]}" in out and "| sim_target | " in out and "norm epsilon" in out
    assert "for " + ", ".join(NORM_EPS_METRICS) + " see the note" in out  # on the tolerance line
    # only the columns compared; nothing at all between two re-runs
    res = compare_results(published, rerun, metrics=["cos_sim", "mrr"])
    assert not any("1e-8" in w for w in res.warnings) and not any(m.note for m in res.metrics)
    res = compare_results(rerun, rerun)
    assert res.warnings == [] and not any(m.note for m in res.metrics)


def test_unpromptable_panels_are_never_ranked(demo, tmp_path):
    """Issue 39 case 8: a panel scored with --allow-unpromptable (on either side) is left out of compare's
    rankings, and the ranking says so; the means are over the other blocks (a plain loop)."""
    blocks = [bl for bl, _ in demo[1]]

    def mark(df):
        df["unpromptable"] = 0.0
        for bl in blocks[:2]:  # gen_c's best blocks are unpromptable on side A
            _set(df, "gen_c", "L1", bl, "unpromptable", 1.0)
            _set(df, "gen_c", "L1", bl, "cos_sim", 0.99)
        return df

    a = _write(tmp_path / "a", demo, edit=mark)
    b = _write(tmp_path / "b", demo)
    ra, rb = read_results_csv(a / "results.csv"), read_results_csv(b / "results.csv")
    expected = []
    for method in METHODS:
        xs = [float(r.cos_sim) for r in ra.itertuples() if r.method == method and r.condition == "L1"
              and not r.unpromptable]
        expected.append(sum(xs) / len(xs))
    r = compare_results(a, b).ranking("L1", "cos_sim")
    assert r.mean_a == pytest.approx(expected, abs=1e-12)
    assert r.n_blocks == [6, 6, 4]
    assert "2 unpromptable panel(s) of gen_c left out of the ranking" in r.reason


# -- issue 43: the output never replaces an input; empty keys; a check that checked nothing ----------------


def _copy_with(a, dest, edit):
    """A copy of results folder ``a`` whose results.csv is ``edit(df)`` (written as CSV, as a user's edit would)."""
    shutil.copytree(a, dest)
    df = read_results_csv(dest / "results.csv")
    edit(df).to_csv(dest / "results.csv", index=False)
    return dest


@pytest.mark.parametrize("target", ["B/results.csv", "A/results.csv", "B/run.json", "A/run.json", "B", "A",
                                    "B/../B/results.csv", "link-to-B-results", "hardlink-to-A-run"])
@pytest.mark.parametrize("fmt", ["md", "csv"])
def test_out_never_replaces_a_file_compare_reads(demo, tmp_path, capsys, target, fmt):
    a = _write(tmp_path / "A", demo)
    b = tmp_path / "B"
    shutil.copytree(a, b)
    (tmp_path / "link-to-B-results").symlink_to(b / "results.csv")
    (tmp_path / "hardlink-to-A-run").hardlink_to(a / "run.json")
    before = {p: p.read_bytes() for p in (a / "results.csv", a / "run.json", b / "results.csv", b / "run.json")}
    out = tmp_path / target
    assert main(["compare", str(a), str(b), "--format", fmt, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "refusing to overwrite an input" in err and f"--out {out}" in err, err
    assert {p: p.read_bytes() for p in before} == before
    assert (a.is_dir() and b.is_dir() and (tmp_path / "link-to-B-results").is_symlink())


@pytest.mark.parametrize("column", ["condition", "method", "block_id"])
@pytest.mark.parametrize("side", ["A", "B"])
def test_an_empty_key_is_one_line_naming_folder_file_line_and_column(folders, tmp_path, capsys, column, side):
    bad = _copy_with(folders["a"], tmp_path / "bad", lambda df: _blank(df, 5, column))
    args = [str(folders["a"]), str(bad)] if side == "B" else [str(bad), str(folders["a"])]
    assert main(["compare", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert str(bad / "results.csv") in err and "line 7" in err and f"empty {column}" in err, err


def _blank(df, row, column):
    df.loc[df.index[row], column] = ""
    return df


def _rename(df, old, new):
    return df.rename(columns={old: new})


@pytest.mark.parametrize("case, edit_b, edit_a, extra, expected", [
    ("renamed column, asked for", lambda df: _rename(df, "mrr", "mrr_v2"), None, ["--metrics", "mrr"],
     "mrr could not be checked (no mrr column in B)"),
    ("renamed column, default metrics", lambda df: _rename(df, "mrr", "mrr_v2"), None, [],
     "mrr could not be checked (no mrr column in B)"),
    ("no metric column at all", lambda df: df.drop(columns=list(COMPARED_METRICS)), None, [],
     "could not be checked (no cos_sim column in B)"),
    ("no row joins", lambda df: df.assign(block_id="x_" + df["block_id"]), None, [],
     "no row joins on (method, condition, block_id) (0 of 36 rows of A and 36 of B matched)"),
    ("every value NaN on both sides", lambda df: df.assign(mrr=np.nan), lambda df: df.assign(mrr=np.nan),
     ["--metrics", "mrr"], "no metric has a value on both sides in any of the 36 joined rows"),
])
def test_fail_above_fails_when_nothing_could_be_checked(folders, tmp_path, capsys, case, edit_b, edit_a, extra,
                                                        expected):
    a = _copy_with(folders["a"], tmp_path / "a", edit_a) if edit_a else folders["a"]
    b = _copy_with(folders["a"], tmp_path / "b", edit_b)
    assert main(["compare", str(a), str(b), *extra, "--fail-above", "1"]) == 1, case
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err, (case, err)


def test_a_metric_neither_side_scores_is_not_a_failure(folders, tmp_path):
    drop = lambda df: df.drop(columns=["gaas"])  # noqa: E731
    a = _copy_with(folders["a"], tmp_path / "a", drop)
    b = _copy_with(folders["a"], tmp_path / "b", drop)
    assert main(["compare", str(a), str(b), "--fail-above", "0"]) == 0
    assert main(["compare", str(a), str(b), "--metrics", "gaas", "mrr", "--fail-above", "0"]) == 1
