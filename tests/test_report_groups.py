"""What the local report ranks together (docs/benchmark.md section 7, Comparability): GAAS from one
segmenter per comparable group, folders without run.json never ranked with another, and the copy
audit grouped by panel. Expected numbers are recomputed here with plain pandas from the folders'
own rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from geofidelity_bench import report as rp
from geofidelity_bench.comparability import DEFAULT_SEGMENTER_NAME

try:
    from test_report import FAST, synthetic_results, write_folder
except ImportError:  # tests/ imported as a package
    from tests.test_report import FAST, synthetic_results, write_folder

M2F, SEGF = DEFAULT_SEGMENTER_NAME, "segformer-cityscapes"
#: a complete comparability key (benchmark, encoder config, protocol): the folders below are one group
KEY = {"encoder": {"name": "dinov2-base", "config_hash": "e" * 64}, "benchmark": {"fingerprint": "ab" * 32},
       "protocol": {"version": "1"}}


def with_gaas(df, seed):
    """``df`` with a GAAS per row (a segmenter's: any numbers in [0, 1])."""
    df = df.copy()
    df["gaas"] = np.random.default_rng(seed).uniform(0.05, 0.6, len(df))
    return df


def gaas_folder(path, df, segmenter, config_hash):
    return write_folder(path, df, {**KEY, "gaas": {"segmenter": segmenter, "config_hash": config_hash}})


def t10(rep) -> pd.DataFrame:
    return pd.DataFrame(rep["tables"]["leaderboard"]["rows"]).set_index("method")


def l1_gaas(df, method) -> float:
    return float(df.loc[(df["method"] == method) & (df["condition"] == "L1"), "gaas"].mean())


# -- case 1 and 9: GAAS of one segmenter per group -------------------------------------------------------


def test_gaas_of_two_segmenters_is_never_averaged_and_a_tie_goes_to_the_default_segmenter(tmp_path):
    """The same generations segmented twice: the report shows one segmenter's GAAS (the benchmark's default on a
    1-to-1 tie, although its config hash sorts last), never the mean of both, and says which and why."""
    df = synthetic_results(conditions=("L1",))
    m2f, segf = with_gaas(df, 1), with_gaas(df, 2)
    a = gaas_folder(tmp_path / "m2f", m2f, M2F, "f" * 64)  # the larger hash: hash order would pick segformer
    b = gaas_folder(tmp_path / "segf", segf, SEGF, "0" * 64)
    rep = rp.report_from_dirs([b, a], tmp_path / "out", plots=False, **FAST)
    board = t10(rep)
    for method in ("sdxl", "flux_dev", "pixart_sigma"):
        assert board.loc[method, "gaas"] == pytest.approx(l1_gaas(m2f, method))
    held = m2f[m2f["method"] == "heldout_real"]["gaas"].mean()
    assert board.loc["heldout_real", "gaas"] == pytest.approx(held)
    # every other score still averages both folders
    assert board.loc["sdxl", "cos_sim"] == pytest.approx(df.loc[(df["method"] == "sdxl"), "cos_sim"].mean())
    notes = rep["tables"]["leaderboard"]["notes"]
    (said,) = [n for n in notes if n.startswith("GAAS is shown for segmenter")]
    assert f"{M2F} (ffffffffffff)" in said and "a tie, broken in favour of the benchmark's default segmenter" in said
    assert f"{SEGF} (000000000000): {len(segf)})" in said and str(b) in said
    assert said in rep["notes"]
    md = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert f"- note: {said}" in md
    # the anchors agree on every other score: another segmenter's GAAS is no sign of another pipeline
    assert not any("anchors differ" in n for n in rep["notes"])


def test_the_segmenter_with_more_rows_wins_and_a_run_without_a_recorded_segmenter_is_na(tmp_path):
    df = synthetic_results(conditions=("L1",))
    segf_all = with_gaas(df, 3)
    m2f_some = with_gaas(df[df["method"].isin(["sdxl", "heldout_real"])], 4)  # fewer rows
    a = gaas_folder(tmp_path / "segf", segf_all, SEGF, "1" * 64)
    b = gaas_folder(tmp_path / "m2f", m2f_some, M2F, "2" * 64)
    c = write_folder(tmp_path / "old", with_gaas(df[df["method"] == "flux_dev"], 5), dict(KEY))  # no gaas record
    rep = rp.report_from_dirs([a, b, c], tmp_path / "out", plots=False, **FAST)
    board = t10(rep)
    for method in ("sdxl", "flux_dev", "pixart_sigma"):
        assert board.loc[method, "gaas"] == pytest.approx(l1_gaas(segf_all, method))
    notes = rep["notes"]
    (chosen,) = [n for n in notes if n.startswith("GAAS is shown for segmenter")]
    assert f"{SEGF} (111111111111) ({len(segf_all)} row(s); the one most rows used)" in chosen
    (unrecorded,) = [n for n in notes if "records no segmenter" in n]
    assert str(c) in unrecorded


def test_one_segmenter_changes_nothing(tmp_path):
    df = with_gaas(synthetic_results(conditions=("L1",)), 6)
    rep = rp.report_from_dirs([gaas_folder(tmp_path / "a", df, SEGF, "3" * 64)], tmp_path / "out", plots=False, **FAST)
    assert t10(rep).loc["sdxl", "gaas"] == pytest.approx(l1_gaas(df, "sdxl"))
    assert not any("GAAS" in n for n in rep["notes"])


# -- case 7: folders without run.json ---------------------------------------------------------------------


def test_folders_without_run_json_are_never_ranked_together(tmp_path, capsys):
    df = synthetic_results(conditions=("L1",))
    a = write_folder(tmp_path / "a", df[df["method"] != "sdxl"])
    b = write_folder(tmp_path / "b", df[df["method"] != "flux_dev"])
    for folder in (a, b):
        (folder / "run.json").unlink()
    with pytest.raises(rp.ReportError) as err:
        rp.report_from_dirs([a, b], tmp_path / "out", plots=False, **FAST)
    msg = str(err.value)
    assert f"[{a}: no run.json" in msg and f"[{b}: no run.json" in msg and "comparable with nothing" in msg
    assert "re-run `geofidelity-bench evaluate`" in msg
    from geofidelity_bench.cli import main

    assert main(["report", "--results", str(a), str(b), "--out", str(tmp_path / "cli"), "--no-plots"]) == 2
    assert "no run.json" in capsys.readouterr().err
    # with --allow-mixed-encoders: one sub-report per folder, each holding its own rows only
    rep = rp.report_from_dirs([a, b], tmp_path / "mixed", plots=False, allow_mixed_encoders=True, **FAST)
    subs = list(rep["sub_reports"].values())
    assert [s["runs"] for s in subs] == [["a"], ["b"]]
    for sub, folder in zip(subs, (a, b)):
        sub_rep = json.loads((tmp_path / "mixed" / sub["folder"] / "report.json").read_text(encoding="utf-8"))
        own = pd.read_csv(folder / "results.csv")
        assert sorted(sub_rep["inputs"]["methods"]) == sorted(own["method"].unique())
        assert sub_rep["inputs"]["n_rows"] == len(own)
        assert any(n.startswith(f"comparability is not recorded: {folder} has no run.json") for n in sub_rep["notes"])
    index = (tmp_path / "mixed" / "report.md").read_text(encoding="utf-8")
    assert "no run.json: not recorded" in index and f"No run.json in {a}, {b}" in index


def test_a_single_folder_without_run_json_still_gets_a_report_that_says_so(tmp_path):
    df = synthetic_results(conditions=("L1",))
    a = write_folder(tmp_path / "a", df)
    (a / "run.json").unlink()
    rep = rp.report_from_dirs([a], tmp_path / "out", plots=False, **FAST)
    assert rep["tables"]["leaderboard"]["status"] == "ok"
    md = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert f"- note: comparability is not recorded: {a} has no run.json" in md


def test_a_folder_without_run_json_beside_a_recorded_one_is_named(tmp_path):
    df = synthetic_results(conditions=("L1",))
    a = write_folder(tmp_path / "a", df, dict(KEY))
    b = write_folder(tmp_path / "b", df)
    (b / "run.json").unlink()
    with pytest.raises(rp.ReportError) as err:
        rp.report_from_dirs([a, b], tmp_path / "out", plots=False, **FAST)
    assert f"[{b}: no run.json" in str(err.value) and f"[{a}: benchmark abababababab" in str(err.value)


# -- case 15: the copy audit, one line per panel -------------------------------------------------------------


def test_the_copy_audit_is_one_line_per_panel_naming_its_files(tmp_path):
    df = synthetic_results(conditions=("L1",))
    gen = tmp_path / "gen"

    def rec(block, k, ref, ref_block, distance, cosine, exact):
        path = gen / "pixart_sigma" / "L1" / block / f"{k:02d}.jpg"
        return {"method": "pixart_sigma", "condition": "L1", "block_id": block, "file": str(path),
                "sha256": f"{k}{block}".encode().hex().ljust(64, "0")[:64], "reference_id": ref,
                "reference_block_id": ref_block, "hash_distance": distance, "cosine": cosine, "exact": exact,
                "flagged": True}

    records = [rec("city0_b0", 0, "city0_b0__r1", "city0_b0", 3, 0.9931, False),
               rec("city0_b0", 2, "city0_b0__r4", "city0_b0", 0, 1.0, True),
               rec("city0_b0", 3, "world_17", "world", 12, None, False),
               rec("city1_b1", 1, "city1_b1__r2", "city1_b1", 7, 0.995, False)]
    sel = (df["method"] == "pixart_sigma") & (df["condition"] == "L1")
    df.loc[sel & (df["block_id"] == "city0_b0"), "n_copied"] = 3
    df.loc[sel & (df["block_id"] == "city1_b1"), "n_copied"] = 1
    info = {**KEY, "copy_audit": {"method": "phash + embedding NN", "n_audited": 48, "n_flagged": 4,
                                  "excluded": False, "images": records}, "near_copies": records}
    folder = write_folder(tmp_path / "run", df, info)
    rp.report_from_dirs([folder], tmp_path / "out", plots=False, **FAST)
    md = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    section = md.split("## Copied reference photos")[1].split("\n## ")[0]
    lines = [x for x in section.splitlines() if x.startswith("| pixart_sigma")]
    assert len(lines) == 2  # two panels, four images
    first = lines[0].split(" | ")
    assert first[0] == "| pixart_sigma / L1 / city0_b0" and first[1] == "3 of 4"
    assert first[2] == f"{gen / 'pixart_sigma' / 'L1' / 'city0_b0'}/: 00.jpg, 02.jpg, 03.jpg"
    assert first[3] == "city0_b0__r1, city0_b0__r4 (city0_b0); world_17 (world)"
    assert first[4:] == ["0-12", "0.9931-1.0000", "1 of 3", "not recorded |"]  # written before issue 42
    assert lines[1].startswith(f"| pixart_sigma / L1 / city1_b1 | 1 of 4 | {records[3]['file']} | ")  # one file: its path
    assert "One line per panel (2 panel(s), 4 flagged image(s))" in section
    assert "panel image" not in section
    # every flagged image, by file and sha256, in the CSV
    csv = pd.read_csv(tmp_path / "out" / "tables" / "copy_audit_images.csv")
    assert list(csv["file"]) == [r["file"] for r in records] and list(csv["sha256"]) == [r["sha256"] for r in records]


def test_images_given_in_memory_are_named_by_position_and_sha256(tmp_path):
    df = synthetic_results(conditions=("L1",), sanity=True)
    shas = [f"{k:x}" * 64 for k in range(10, 14)]
    records = [{"method": "sanity_world", "condition": "sanity", "block_id": "city0_b0", "file": f"panel image {k}",
                "sha256": shas[k], "reference_id": f"world_{k}", "reference_block_id": "world", "hash_distance": 0,
                "cosine": 1.0, "exact": True, "flagged": True} for k in range(4)]
    df.loc[(df["method"] == "sanity_world") & (df["block_id"] == "city0_b0"), "n_copied"] = 4
    folder = write_folder(tmp_path / "run", df, {**KEY, "near_copies": records})
    rp.report_from_dirs([folder], tmp_path / "out", plots=False, **FAST)
    md = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    (line,) = [x for x in md.splitlines() if x.startswith("| sanity_world / sanity / city0_b0")]
    assert (f"| 4 of 4 | panel images 0, 1, 2, 3 (sha256 {', '.join(s[:12] for s in shas)}) | "
            "world_0, world_1, world_2, world_3 (world) | 0 | 1.0000 | 4 of 4 |") in line
