"""import-release: the release's published scores (outputs/eval_v3/raw_results.csv) -> OUT/published/, a results
folder that report, the app and compare read (issue 32). The release is the synthetic fixture of
tests/data/release_fixture/make_fixture.py, with its published outputs."""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from geofidelity_bench import load_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.release_import import ReleaseImportError, canonical_block_id, import_release
from geofidelity_bench.results import load_results, read_results_csv

ROOT = Path(__file__).resolve().parents[1]
ROLES = ("same_neighborhood", "same_city", "same_driving_side", "random_city")


try:  # the release fixture's writer, as the import tests load it
    from test_release_import import fx
except ImportError:  # tests/ imported as a package
    from tests.test_release_import import fx

TOKYO = canonical_block_id(fx.B_TOKYO)
IMPORTED = {fx.B_RIVOLI: fx.B_RIVOLI, fx.B_OBERKAMPF: fx.B_OBERKAMPF, fx.B_TOKYO: TOKYO}
ANCHORS = {"oracle_nn": "heldout_real", "random_same_country": "random_same_country", "random_global": "random_global"}
MODELS = {"sdxl_base": "sdxl", "flux_schnell": "flux_schnell"}


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    root = tmp_path_factory.mktemp("release_published")
    fx.write_release_fixture(root, published=True)
    return root


@pytest.fixture(scope="module")
def imported(release, tmp_path_factory):
    out = tmp_path_factory.mktemp("imported_published")
    report = import_release(release, out, generations=False, log=lambda m: None)
    return out, report


def _issues(report, kind):
    return [i for i in report.issues if i.kind == kind]


def _expected_rows():
    """(release method, level, release block) of every raw row that must be converted, with our key."""
    plan = [(m, "L0", "anchor", ANCHORS[m]) for m in ANCHORS]
    plan += [(m, lv, lv, MODELS[m]) for m in MODELS for lv in ("L0", "L1")]
    return {(ours, cond, IMPORTED[rid]): (method, level, rid)
            for method, level, cond, ours in plan for rid in IMPORTED}


def _release_chance(rid: str) -> tuple[int, float, float]:
    """(candidates, chance accuracy, chance MRR) of the release's retrieval of block ``rid``, by brute force: the
    target and the negatives benchmark_v3.json gives it (those naming a block of that file, as the evaluator
    scored them); an uninformative image orders the distinct galleries uniformly at random, and a block in two
    roles is two candidates above or below the target together."""
    negatives = [nid for nid in fx.NEGATIVES_JSON[rid] if nid and nid in set(fx.BLOCKS) | {fx.B_ROME}]
    galleries = [rid, *dict.fromkeys(negatives)]
    ranks = []
    for order in itertools.permutations(galleries):
        above = order[:order.index(rid)]
        ranks.append(1 + sum(negatives.count(b) for b in above))
    return 1 + len(negatives), sum(r == 1 for r in ranks) / len(ranks), sum(1 / r for r in ranks) / len(ranks)


def test_the_chance_of_the_release_s_candidates_is_the_textbook_one_where_every_negative_is_distinct():
    # Tokyo's two negatives are distinct blocks: 3 candidates, chance 1/3 and (1 + 1/2 + 1/3) / 3
    assert _release_chance(fx.B_TOKYO) == (3, pytest.approx(1 / 3), pytest.approx((1 + 1 / 2 + 1 / 3) / 3))
    # Rivoli's same-neighborhood and same-city negatives are one block (Oberkampf): 4 candidates, 3 galleries
    k, acc, mrr = _release_chance(fx.B_RIVOLI)
    # the six orders of (Rivoli, Oberkampf, Tokyo): Rivoli first twice (rank 1), after Tokyo only (rank 2), after
    # Oberkampf only (rank 3, its two roles), last twice (rank 4): 0.556 (docs/benchmark.md section 5's example)
    assert k == 4 and acc == pytest.approx(1 / 3) and mrr == pytest.approx((2 + 1 / 2 + 1 / 3 + 2 / 4) / 6)
    assert round(mrr, 3) == 0.556


def test_every_published_value_is_mapped_and_the_similarities_go_to_their_negatives(imported, release):
    out, report = imported
    df = read_results_csv(out / "published" / "results.csv")
    expected = _expected_rows()
    assert sorted(zip(df.method, df.condition, df.block_id)) == sorted(expected)
    # the release writes Rivoli's random-city similarity in the driving-side column (it has no driving-side
    # negative) and Tokyo's driving-side and random-city ones in the first two columns: check the input is so
    with open(release / "outputs/eval_v3/raw_results.csv", newline="", encoding="utf-8") as fh:
        raw = {(r["method"], r["level"], r["block_id"]): r for r in csv.DictReader(fh)}
    riv = raw[("oracle_nn", "L0", fx.B_RIVOLI)]
    assert float(riv["sim_neg_same_driving_side_diff_city"]) == fx.published_value(
        "oracle_nn", "L0", fx.B_RIVOLI, "sim_random_city") and riv["sim_neg_random_city"] == ""
    tok = raw[("oracle_nn", "L0", fx.B_TOKYO)]
    assert float(tok["sim_neg_same_neighborhood_diff_block"]) == fx.published_value(
        "oracle_nn", "L0", fx.B_TOKYO, "sim_same_driving_side")

    negatives = {fx.B_RIVOLI: {"same_neighborhood", "same_city", "random_city"}, fx.B_OBERKAMPF: set(ROLES),
                 fx.B_TOKYO: {"same_driving_side", "random_city"}}
    bench = load_benchmark(out / "benchmark")
    for row in df.itertuples(index=False):
        method, level, rid = expected[(row.method, row.condition, row.block_id)]
        value = lambda col: fx.published_value(method, level, rid, col)  # noqa: E731
        block = bench.block(row.block_id)
        assert (row.city, row.country, row.stratum, row.encoder) == (block.city, block.country, block.stratum,
                                                                      "dinov2-base")
        assert row.n_generated == (4 if method in ANCHORS else 2) and row.n_reference == fx.N_REFS[rid] - 1
        for col in ("cos_sim", "mmd", "dcsf", "diversity_gap", "gaas", "retrieval_acc", "mrr"):
            assert getattr(row, col) == value(col), (row.method, row.block_id, col)
        assert row.sim_target == value("sim_same_block")
        sims = {}
        for role in ROLES:
            got = getattr(row, f"sim_{role}")
            if role in negatives[rid]:
                assert got == value(f"sim_{role}"), (row.method, row.block_id, role)
                sims[role] = got
            else:
                assert math.isnan(got), (row.method, row.block_id, role)
        local = [sims[r] for r in ("same_neighborhood", "same_city") if r in sims]
        assert row.local_margin == pytest.approx(row.sim_target - max(local)) if local else math.isnan(row.local_margin)
        assert row.strongest_margin == pytest.approx(row.sim_target - max(sims.values()))
        for col in ("n_distinct", "n_copied"):
            assert math.isnan(getattr(row, col))
        # chance depends on no score: the candidates the release ranked the block's panel against
        k, acc, mrr = _release_chance(rid)
        assert (row.n_candidates, row.chance_retrieval_acc, row.chance_mrr) == (k, pytest.approx(acc),
                                                                                 pytest.approx(mrr)), row.block_id
    assert report.counts["published"]["similarities_reassigned"] == 7 * (1 + 2)  # 7 rows per block: Rivoli 1, Tokyo 2


def test_rows_not_converted_are_issues_and_the_summary_is_checked(imported):
    out, report = imported
    raw = "outputs/eval_v3/raw_results.csv"
    unknown = [i for i in _issues(report, "unknown_block") if i.file == raw]
    assert sorted(i.values["block_id"] for i in unknown) == sorted([fx.B_LONDON] * 7 + [fx.B_ROME])
    assert all(i.line and i.action == "skipped" for i in unknown)
    assert any("was dropped" in i.reason for i in unknown if i.values["block_id"] == fx.B_LONDON)
    unmapped = [i for i in _issues(report, "unmapped_level") if i.file == raw]
    assert [i.values["level"] for i in unmapped] == ["L9_STYLE"]
    mismatch = _issues(report, "published_summary_mismatch")
    method, level, column = fx.SUMMARY_WRONG
    assert len(mismatch) == 1 and mismatch[0].file == "outputs/eval_v3/summary_by_method_level.csv"
    assert (mismatch[0].values["method"], mismatch[0].values["level"], mismatch[0].values["column"]) == fx.SUMMARY_WRONG
    assert report.counts["published"]["summary_disagreements"] == {
        "outputs/eval_v3/summary_by_method_level.csv": 1, "results/main_scores_by_model_prompt.csv": 0}
    # Tokyo's driving-side negative (London) was dropped on import: its published similarity is kept, and said
    kept = _issues(report, "published_negative_not_imported")
    assert len(kept) == 7 and all(i.values["block_id"] == fx.B_TOKYO and i.values["role"] == "same_driving_side"
                                  for i in kept)
    saved = json.loads((out / "import_report.json").read_text(encoding="utf-8"))
    assert saved["counts"]["published_dir"] == str(out / "published")


def test_run_json_says_the_scores_are_the_release_s(imported, release):
    out, _ = imported
    run = json.loads((out / "published" / "run.json").read_text(encoding="utf-8"))
    pub = run["published"]
    assert pub["recomputed"] is False and pub["release"]["version"] == "3.1.0"
    assert pub["scores_file"] == "outputs/eval_v3/raw_results.csv"
    files = {f["path"]: f for f in pub["files"]}
    assert set(files) == {"outputs/eval_v3/raw_results.csv", "outputs/eval_v3/summary_by_method_level.csv",
                          "results/main_scores_by_model_prompt.csv", "outputs/stability/rank_stability_L1.csv"}
    for rel, rec in files.items():
        assert rec["sha256"] == hashlib.sha256((release / rel).read_bytes()).hexdigest()
    assert "DINOv2 ViT-B/14" in pub["encoder"]["paper"]
    assert run["encoder"] == {"name": "dinov2-base", "dim": 768, "config": None, "config_hash": None,
                              "as_published": run["encoder"]["as_published"]}
    items = {d["item"] for d in pub["documented_differences"]}
    assert {"12.1", "12.2", "12.3", "12.4", "12.5"} <= items
    assert "max(0" in pub["conversions"]["diversity_gap"]
    assert run["benchmark"]["fingerprint"] == load_benchmark(out / "benchmark").fingerprint
    reasons = {(r["column"], r["reason"]): r["rows"] for r in run["nan_reasons"]}
    no_side = reasons[("sim_same_driving_side", "the block has no same_driving_side negative in the release")]
    assert f"heldout_real/anchor/{fx.B_RIVOLI}" in no_side
    # the app and the report read it like any other results folder
    from geofidelity_bench.demo_app.results import check_results, leaderboard_table, provenance_text

    df, infos = load_results(out / "published")
    assert len(check_results(df)) == 21 and len(leaderboard_table(check_results(df))) == 7
    assert "Produced on benchmark" in provenance_text(infos[0], {})


def test_published_rows_the_benchmark_cannot_prompt_carry_the_mark_and_are_never_ranked(tmp_path):
    """Tokyo without a neighborhood name: the imported benchmark has no L1 prompt for it, so the release's L1 rows
    of Tokyo are marked unpromptable (with an issue each), kept, and listed apart by the report, never ranked."""
    from geofidelity_bench import caveats
    from geofidelity_bench.evaluation import unpromptable_panels

    release = tmp_path / "release"
    fx.write_release_fixture(release, published=True)
    blocks_csv = release / "metadata" / "blocks.csv"
    with open(blocks_csv, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        if row["block_id"] == fx.B_TOKYO:
            row["neighborhood"] = ""
    with open(blocks_csv, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    bench_json = release / "data" / "processed" / "v3" / "benchmark_v3.json"
    payload = json.loads(bench_json.read_text(encoding="utf-8"))
    for block in payload["blocks"]:
        if block["block_id"] == fx.B_TOKYO:
            block["neighborhood"] = None
    bench_json.write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "out"
    report = import_release(release, out, generations=False, log=lambda m: None)
    df = read_results_csv(out / "published" / "results.csv")
    bench = load_benchmark(out / "benchmark")
    refused = {(r["condition"], r["block_id"]) for r in unpromptable_panels(bench, zip(df.method, df.condition,
                                                                                        df.block_id))}
    assert refused == {("L1", TOKYO)}  # L0 needs no names; the anchors have no prompt
    marked = df[df["unpromptable"] == 1.0]
    assert sorted(zip(marked.method, marked.condition, marked.block_id)) == [("flux_schnell", "L1", TOKYO),
                                                                             ("sdxl", "L1", TOKYO)]
    assert (df.loc[df["unpromptable"] != 1.0, "unpromptable"] == 0.0).all()
    issues = _issues(report, "published_unpromptable")
    assert sorted(i.values["method"] for i in issues) == ["flux_schnell", "sdxl"]
    assert all(i.line and i.file == "outputs/eval_v3/raw_results.csv" for i in issues)
    assert report.counts["published"]["unpromptable_rows"] == 2
    # the report lists them apart: Table 10 ranks each generator over Rivoli and Oberkampf only
    from geofidelity_bench.report import report_from_dirs

    rep = report_from_dirs(out / "published", tmp_path / "report", plots=False, n_resamples=200, rank_resamples=50)
    board = pd.DataFrame(rep["tables"]["leaderboard"]["rows"])
    gen = board[board["group"] == "generator"]
    apart = gen[gen["unpromptable"].astype(bool)].set_index("method")
    promptable = gen[~gen["unpromptable"].astype(bool)].set_index("method")
    for method in ("sdxl", "flux_schnell"):
        rows = df[(df.method == method) & (df.condition == "L1")]
        assert promptable.loc[method, "cos_sim"] == pytest.approx(rows.loc[rows.block_id != TOKYO, "cos_sim"].mean())
        assert promptable.loc[method, "n_blocks"] == 2
        assert apart.loc[method, "cos_sim"] == pytest.approx(rows.loc[rows.block_id == TOKYO, "cos_sim"].iloc[0])
        assert apart.loc[method, "n_blocks"] == 1 and not apart.loc[method, "ranked"]
        assert caveats.UNPROMPTABLE_MARK in apart.loc[method, "label"]
    assert caveats.UNPROMPTABLE_MARK in (tmp_path / "report" / "report.md").read_text(encoding="utf-8")


def test_without_raw_results_there_is_no_published_folder(tmp_path, capsys):
    release = tmp_path / "release"
    fx.write_release_fixture(release)
    assert main(["import-release", str(release), "--out", str(tmp_path / "out"), "--no-generations"]) == 0
    assert "published    none" in capsys.readouterr().out
    assert not (tmp_path / "out" / "published").exists()
    saved = json.loads((tmp_path / "out" / "import_report.json").read_text(encoding="utf-8"))
    assert any(i["kind"] == "missing_optional_file" and i["file"] == "outputs/eval_v3/raw_results.csv"
               for i in saved["issues"])
    fx.write_release_fixture(tmp_path / "release2", published=True)
    assert main(["import-release", str(tmp_path / "release2"), "--out", str(tmp_path / "out2"), "--no-generations",
                 "--no-published"]) == 0
    assert not (tmp_path / "out2" / "published").exists()


def _edit_raw(path: Path, edit) -> None:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(edit(lines)), encoding="utf-8")


def test_a_malformed_published_file_is_named_with_its_line_and_column(release, tmp_path, capsys):
    copy = tmp_path / "release"
    shutil.copytree(release, copy)
    raw = copy / "outputs/eval_v3/raw_results.csv"
    header = raw.read_text(encoding="utf-8").splitlines()[0].split(",")
    cos = header.index("cos_sim")

    def edit(lines):
        cells = lines[1].rstrip("\n").split(",")  # oracle_nn / Rivoli
        cells[cos] = "n.a."
        lines[1] = ",".join(cells) + "\n"
        lines[2] = lines[2].rstrip("\n") + ",0.5\n"  # one field too many: positions cannot be trusted
        return lines

    _edit_raw(raw, edit)
    report = import_release(copy, tmp_path / "out", generations=False, log=lambda m: None)
    bad = [i for i in _issues(report, "bad_value") if i.file == "outputs/eval_v3/raw_results.csv"]
    assert [(i.line, i.values["column"], i.values["value"]) for i in bad] == [(2, "cos_sim", "n.a.")]
    assert [i.line for i in _issues(report, "bad_row")] == [3]
    df = read_results_csv(tmp_path / "out" / "published" / "results.csv")
    row = df[(df.method == "heldout_real") & (df.block_id == fx.B_RIVOLI)].iloc[0]
    assert math.isnan(row.cos_sim) and row.mmd == fx.published_value("oracle_nn", "L0", fx.B_RIVOLI, "mmd")
    assert len(df) == 20  # the ragged row (oracle_nn / Oberkampf) is not converted
    run = json.loads((tmp_path / "out" / "published" / "run.json").read_text(encoding="utf-8"))
    assert any(r["column"] == "cos_sim" and "n.a." in r["reason"] for r in run["nan_reasons"])

    # a missing required column: one line naming the file and the column; nothing written
    _edit_raw(raw, lambda lines: [lines[0].replace("level", "lvl", 1)] + lines[1:])
    with pytest.raises(ReleaseImportError, match=r"outputs/eval_v3/raw_results\.csv: missing required column 'level'"):
        import_release(copy, tmp_path / "out2", log=lambda m: None)
    assert main(["import-release", str(copy), "--out", str(tmp_path / "out3")]) == 2
    err = capsys.readouterr().err
    assert "raw_results.csv" in err and "'level'" in err and "Traceback" not in err
    assert not (tmp_path / "out3" / "benchmark").exists()


# -- the paper's reference values (docs/benchmark.md) through `report` ------------------------------------------


def _reference_values() -> dict:
    text = " ".join((ROOT / "docs" / "benchmark.md").read_text(encoding="utf-8").split())
    num = r"([0-9.]+)"
    five = " / ".join([num] * 5)
    t10 = re.search(rf"Reference values \(paper Table 10, DINOv2; CosSim / DCSF / MMD / GAAS / retrieval\): held-out "
                    rf"real {five}; random-same-country {five}; random-global {five}\.", text)
    gen = re.search(rf"six-generator mean under L1 {five}\.", text)
    t4 = re.search(rf"Table 4 hierarchy \(held-out real queries\): same block {num}, same-city negatives {num} and "
                   rf"{num}, same driving side {num}, random city {num}\.", text)
    t6 = re.search(r"Reference: L1 - L0 CosSim \+([0-9.]+) ", text)
    assert t10 and gen and t4 and t6, "docs/benchmark.md no longer states the reference values in the expected form"
    cols = ("cos_sim", "dcsf", "mmd", "gaas", "retrieval_acc")
    vals = [float(v) for v in t10.groups()]
    return {
        "oracle_nn": dict(zip(cols, vals[:5])), "random_same_country": dict(zip(cols, vals[5:10])),
        "random_global": dict(zip(cols, vals[10:])), "generators": dict(zip(cols, map(float, gen.groups()))),
        "hierarchy": dict(zip(("sim_same_block", *(f"sim_{r}" for r in ROLES)), map(float, t4.groups()))),
        "l1_minus_l0": float(t6.group(1)),
    }


def test_report_on_published_rows_gives_the_paper_s_reference_values(tmp_path):
    ref = _reference_values()
    dev = {fx.B_RIVOLI: -0.01, fx.B_OBERKAMPF: 0.0, fx.B_TOKYO: 0.01}  # per-block spread; means stay exact
    spread = {"sdxl_base": 0.02, "flux_schnell": -0.02}

    def value(method, level, bid, col):
        d = dev.get(bid, 0.0)
        if col.startswith("sim_"):  # exactly the Table 4 value on every block: a misplaced column moves the mean
            return ref["hierarchy"][col] if method == "oracle_nn" else 0.3
        table = ref.get(method) or ref["generators"]
        if col not in table:
            return 0.5
        v = table[col] + d
        if method in spread:
            v += spread[method]
            if level == "L0" and col == "cos_sim":  # L1 - L0 = the reference delta, +-2d per pair (mean 0)
                v -= ref["l1_minus_l0"] - 2 * d * (1 if method == "sdxl_base" else -1)
        return v

    release = tmp_path / "release"
    fx.write_release_fixture(release, published=value)
    out = tmp_path / "out"
    import_release(release, out, generations=False, log=lambda m: None)
    assert main(["report", "--results", str(out / "published"), "--out", str(tmp_path / "report"), "--no-plots"]) == 0
    tables = tmp_path / "report" / "tables"
    board = pd.read_csv(tables / "leaderboard.csv").set_index("method")
    for method, ours in (("oracle_nn", "heldout_real"), ("random_same_country", "random_same_country"),
                         ("random_global", "random_global"), ("generators", "generator_mean")):
        for col, expected in ref[method].items():
            assert board.loc[ours, col] == pytest.approx(expected, abs=1e-9), (ours, col)
    # chance is computed from the release's candidates on import: Table 10 gives it, never "not recorded"
    chance = [_release_chance(rid) for rid in (fx.B_RIVOLI, fx.B_OBERKAMPF, fx.B_TOKYO)]
    for ours in ("heldout_real", "random_global", "generator_mean"):
        assert board.loc[ours, "chance_retrieval_acc"] == pytest.approx(sum(c[1] for c in chance) / 3), ours
        assert board.loc[ours, "chance_mrr"] == pytest.approx(sum(c[2] for c in chance) / 3), ours
    assert "chance levels are not recorded" not in (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    hier = pd.read_csv(tables / "hierarchy.csv").set_index("method").loc["heldout_real"]
    assert hier["sim_target"] == pytest.approx(ref["hierarchy"]["sim_same_block"], abs=1e-9)
    for role in ROLES:
        assert hier[f"sim_{role}"] == pytest.approx(ref["hierarchy"][f"sim_{role}"], abs=1e-9), role
    deltas = pd.read_csv(tables / "prompt_deltas.csv")
    l1_l0 = deltas[(deltas.comparison == "L1 - L0") & (deltas.metric == "cos_sim")].iloc[0]
    assert l1_l0["delta"] == pytest.approx(ref["l1_minus_l0"], abs=1e-9) and l1_l0["n_pairs"] == 6
    # the report's head says whose numbers these are
    head = (tmp_path / "report" / "report.md").read_text(encoding="utf-8").split("## ", 1)[0]
    sha = hashlib.sha256((release / "outputs" / "eval_v3" / "raw_results.csv").read_bytes()).hexdigest()
    assert (f"- published scores (run published): the numbers of release 3.1.0 as published in "
            f"`outputs/eval_v3/raw_results.csv` (sha256 {sha[:12]}...), not recomputed here") in head


# -- the README's "Reproducing the paper" path, end to end --------------------------------------------------------


def test_reproducing_the_paper_end_to_end_on_the_fixture(release, tmp_path, capsys):
    """import-release, evaluate the imported generations (the offline encoder standing in for dinov2-base), compare."""
    out, rerun = tmp_path / "OUT", tmp_path / "rerun"
    assert main(["import-release", str(release), "--out", str(out)]) == 0
    assert main(["evaluate", "--benchmark", str(out / "benchmark"), "--generated", str(out / "generations"),
                 "--encoder", "efficientnet-lite0", "--device", "cpu", "--no-gaas", "--no-progress",
                 "--cache-dir", str(tmp_path / "cache"), "--out", str(rerun)]) == 0
    published = json.loads((out / "published" / "run.json").read_text(encoding="utf-8"))
    recomputed = json.loads((rerun / "run.json").read_text(encoding="utf-8"))
    assert published["benchmark"]["fingerprint"] == recomputed["benchmark"]["fingerprint"]
    both = pd.concat([read_results_csv(out / "published" / "results.csv"), read_results_csv(rerun / "results.csv")])
    keys = both.groupby(["method", "condition", "block_id"]).size()
    assert (keys == 2).sum() == 21  # every published row has its re-run row
    capsys.readouterr()
    assert main(["compare", str(out / "published"), str(rerun), "--format", "json",
                 "--out", str(tmp_path / "compare.json")]) == 0
    report = json.loads((tmp_path / "compare.json").read_text(encoding="utf-8"))
    assert report["parameters"]["a"]["published"]["recomputed"] is False
    assert report["parameters"]["a"]["benchmark_fingerprint"] == report["parameters"]["b"]["benchmark_fingerprint"]
    cos = next(m for m in report["metrics"] if m["metric"] == "cos_sim")
    assert cos["n_matched"] == 21 and cos["n_nan_a_only"] == cos["n_nan_b_only"] == 0
    assert main(["compare", str(out / "published"), str(rerun)]) == 0
    text = capsys.readouterr()
    # the offline encoder stands in for dinov2-base here: compare says the numbers cannot agree
    assert "DIFFERENT ENCODERS" in text.out + text.err
