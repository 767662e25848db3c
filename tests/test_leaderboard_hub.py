"""The living leaderboard: push-results, load_leaderboard, comparable groups, model cards, report
from a repo id, against the loopback fake Hub."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
import yaml

try:  # the fake Hub fixtures: `online` (requests allowed, HF_TOKEN set) and `hub` (the server)
    from test_generation_hub import TOKEN, hub, online  # noqa: F401
except ImportError:  # tests/ imported as a package
    from tests.test_generation_hub import TOKEN, hub, online  # noqa: F401
from geofidelity_bench import stats
from geofidelity_bench.cli import main
from geofidelity_bench.evaluation import RESULT_COLUMNS
from geofidelity_bench.hub.results_repo import (
    SubmissionError,
    load_leaderboard,
    load_submissions,
    push_results,
    validate_results_folder,
)
from geofidelity_bench.metrics.catalog import RESULT_METRIC_COLUMNS
from geofidelity_bench.report.leaderboard import leaderboard_tables, leaderboard_view
from geofidelity_bench.results import protocol_record, write_results

REPO = "tester/geofidelity-results"
BLOCKS = [("b0", "rome"), ("b1", "rome"), ("b2", "oslo"), ("b3", "oslo"), ("b4", "lima"), ("b5", "lima")]
FP_V1 = "a" * 64


def make_results(out, *, method="gen_a", encoder="dinov2-base", enc_hash="e" * 64, fingerprint=FP_V1, seed=0,
                 blocks=BLOCKS, created="2026-01-01T00:00:00+00:00"):
    """A results folder as `evaluate` writes it, with random in-range scores."""
    rng = np.random.default_rng(seed)
    rows = []
    units = [(method, c) for c in ("L0", "L1", "C_WRONG_STREET")]
    units += [(m, "anchor") for m in stats.ANCHOR_METHODS]
    for m, cond in units:
        for block, city in blocks:
            row = {"method": m, "condition": cond, "block_id": block, "city": city, "country": "NA",
                   "stratum": "", "n_generated": 4, "n_reference": 3, "encoder": encoder}
            for col in RESULT_METRIC_COLUMNS:
                row[col] = float(rng.uniform(0.05, 0.9))
            row["gaas"] = np.nan
            rows.append(row)
    df = pd.DataFrame(rows).reindex(columns=RESULT_COLUMNS)  # columns a row does not set (n_copied) stay NaN
    info = {
        "created_at": created,
        "benchmark": {"name": "demo", "source": "tester/geofidelity", "fingerprint": fingerprint},
        "encoder": {"name": encoder, "dim": 8, "config": {"encoder": encoder}, "config_hash": enc_hash},
        "protocol": protocol_record(),
        "versions": {"geofidelity-bench": "0.1.0"},
    }
    write_results(out, df, info)
    return out


def push(folder, hub, **kw):
    return push_results(folder, REPO, endpoint=hub.url, log=lambda m: None, retry_base_delay=0.01, **kw)


def test_push_repush_and_second_run(hub, online, tmp_path):
    run1 = make_results(tmp_path / "r1", seed=1)
    report = push(run1, hub)
    assert sorted(report.new) == sorted(["gen_a", *stats.ANCHOR_METHODS]) and report.commit
    files = hub.files("dataset", REPO)
    rid = report.run_id
    assert f"submissions/gen_a/{rid}/results.csv" in files
    assert files[f"submissions/gen_a/{rid}/run/results.csv"] == (run1 / "results.csv").read_bytes()
    assert f"submissions/gen_a/{rid}/run/run.json" in files
    card = files["README.md"].decode()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["configs"][0]["data_files"][0]["path"] == "submissions/*/*/results.csv"
    commits = hub.commit_count("dataset", REPO)

    again = push(run1, hub)
    assert again.run_id == rid and again.new == [] and again.commit is None
    assert hub.commit_count("dataset", REPO) == commits

    run2 = make_results(tmp_path / "r2", seed=2, created="2026-02-01T00:00:00+00:00")
    second = push(run2, hub)
    assert second.run_id != rid and "gen_a" in second.new
    files2 = hub.files("dataset", REPO)
    assert files2[f"submissions/gen_a/{rid}/results.csv"] == files[f"submissions/gen_a/{rid}/results.csv"]
    assert f"submissions/gen_a/{second.run_id}/results.csv" in files2


def test_load_leaderboard_rows_and_datasets_reads_the_card(hub, online, tmp_path):
    run1 = make_results(tmp_path / "r1", seed=1)
    rid = push(run1, hub).run_id
    df = load_leaderboard(REPO, endpoint=hub.url)
    original = pd.read_csv(run1 / "results.csv", keep_default_na=False, na_values={"gaas": [""]})
    assert len(df) == len(original)
    assert set(df["run_id"]) == {rid} and set(df["benchmark_fingerprint"]) == {FP_V1}
    assert set(df["encoder_config_hash"]) == {"e" * 64} and set(df["country"]) == {"NA"}
    merged = df.merge(original, on=["method", "condition", "block_id"], suffixes=("", "_orig"))
    assert np.array_equal(merged["cos_sim"].to_numpy(), merged["cos_sim_orig"].to_numpy())
    # the card's configs entry: datasets reads every submission as one table
    import datasets

    local = tmp_path / "clone"
    for path, data in hub.files("dataset", REPO).items():
        (local / path).parent.mkdir(parents=True, exist_ok=True)
        (local / path).write_bytes(data)
    table = datasets.load_dataset(str(local), split="train")
    assert table.num_rows == len(original) and "run_id" in table.column_names


def test_groups_rank_only_comparable_submissions(hub, online, tmp_path):
    push(make_results(tmp_path / "r1", seed=1, method="gen_a"), hub)
    push(make_results(tmp_path / "r2", seed=2, method="gen_b", blocks=BLOCKS[:5]), hub)
    third = push(make_results(tmp_path / "r3", seed=3, method="gen_c", encoder="clip-vit-b32", enc_hash="c" * 64,
                              created="2026-03-01T00:00:00+00:00"), hub)
    df, infos = load_submissions(REPO, endpoint=hub.url)
    view = leaderboard_view(df)
    assert view.group.encoder == "dinov2-base"
    assert "gen_c" not in view.methods and {"gen_a", "gen_b"} <= set(view.methods)
    assert len(view.blocks) == 5 and "b5" not in view.blocks
    text = view.other_text()
    assert "1 submission(s) in 1 other group(s)" in text and "encoder config" in text
    other = leaderboard_view(df, group="c" * 12)
    assert set(other.methods) == {"gen_c", *stats.ANCHOR_METHODS} and set(other.rows["run_id"]) == {third.run_id}
    tables = leaderboard_tables(view, list(infos.values()), n_resamples=200)
    t10 = tables["leaderboard"].data
    assert set(t10.loc[t10["group"] == "generator", "method"]) == {"gen_a", "gen_b"}
    assert set(t10.loc[t10["group"] == "anchor", "method"]) == set(stats.ANCHOR_METHODS)
    # independent check: gen_b's CosSim is the plain mean of its L1 rows over the 5 common blocks
    raw = pd.read_csv(tmp_path / "r2" / "results.csv")
    expect = raw[(raw["method"] == "gen_b") & (raw["condition"] == "L1")]["cos_sim"].mean()
    got = t10.loc[(t10["method"] == "gen_b") & (t10["group"] == "generator"), "cos_sim"].iloc[0]
    assert got == pytest.approx(expect)
    raw_a = pd.read_csv(tmp_path / "r1" / "results.csv")
    a_l1 = raw_a[(raw_a["method"] == "gen_a") & (raw_a["condition"] == "L1") & (raw_a["block_id"] != "b5")]
    got_a = t10.loc[(t10["method"] == "gen_a") & (t10["group"] == "generator"), "cos_sim"].iloc[0]
    assert got_a == pytest.approx(a_l1["cos_sim"].mean())
    assert tables["controls"].ok and tables["cos_sim_by_condition"].ok


def test_report_from_a_repo_id(hub, online, tmp_path, capsys):
    push(make_results(tmp_path / "r1", seed=1), hub)
    push(make_results(tmp_path / "r3", seed=3, method="gen_c", encoder="clip", enc_hash="c" * 64), hub)
    out = tmp_path / "rep"
    rc = main(["report", "--results", REPO, "--endpoint", hub.url, "--out", str(out), "--no-plots",
               "--n-resamples", "100", "--rank-resamples", "20"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "1 submission(s) in 1 other group(s) are not shown" in printed
    lb = pd.read_csv(out / "tables" / "leaderboard.csv")
    assert "gen_a" in set(lb["method"]) and "gen_c" not in set(lb["method"])


def test_validation_errors_name_what_is_missing(tmp_path):
    folder = make_results(tmp_path / "r", seed=1)
    assert validate_results_folder(folder).run_id
    info = json.loads((folder / "run.json").read_text())
    del info["protocol"]["heldout_rule"]
    del info["encoder"]["config_hash"]
    (folder / "run.json").write_text(json.dumps(info))
    with pytest.raises(SubmissionError, match=r"protocol\.heldout_rule.*encoder\.config_hash|encoder\.config_hash.*protocol\.heldout_rule"):
        validate_results_folder(folder)

    folder = make_results(tmp_path / "bad", seed=1)
    df = pd.read_csv(folder / "results.csv", keep_default_na=False)
    df.loc[3, "mrr"] = 1.5
    df.to_csv(folder / "results.csv", index=False)
    with pytest.raises(SubmissionError, match=r"'mrr'.*outside \(0, 1\].*row 5"):
        validate_results_folder(folder)
    df.loc[3, "mrr"] = float("inf")
    df.to_csv(folder / "results.csv", index=False)
    with pytest.raises(SubmissionError, match="'mrr'.*infinite"):
        validate_results_folder(folder)

    (folder / "summary_by_method_condition.csv").unlink()
    with pytest.raises(SubmissionError, match="lacks summary_by_method_condition.csv"):
        validate_results_folder(folder)


def test_cli_push_results_with_model_card_merges(hub, online, tmp_path, capsys):
    existing = """---
model-index:
- name: my-model
  results:
  - task:
      type: text-to-image
    dataset:
      type: other/bench
      name: Other bench
    metrics:
    - type: fid
      value: 12.5
---
# my model
"""
    hub.add_files("model", "tester/my-model", {"README.md": existing.encode()})
    folder = make_results(tmp_path / "r1", seed=1)
    args = ["push-results", str(folder), "--repo-id", REPO, "--endpoint", hub.url, "--model-card", "tester/my-model"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "submitted gen_a" in out and "model card updated" in out
    assert main(args) == 0
    assert "already submitted" in capsys.readouterr().out

    from huggingface_hub import ModelCard

    card = ModelCard(hub.files("model", "tester/my-model")["README.md"].decode())
    results = card.data.eval_results
    assert any(r.metric_type == "fid" and r.metric_value == 12.5 for r in results)  # kept
    ours = {r.metric_type: r for r in results if r.dataset_type == "tester/geofidelity"}
    assert len(ours) == 7  # GAAS is NaN throughout: no result
    raw = pd.read_csv(folder / "results.csv")
    l1 = raw[(raw["method"] == "gen_a") & (raw["condition"] == "L1")]
    assert ours["cos_sim"].metric_value == pytest.approx(l1["cos_sim"].mean(), abs=1e-6)
    assert ours["cos_sim"].metric_args["ci_low"] <= ours["cos_sim"].metric_value <= ours["cos_sim"].metric_args["ci_high"]
    assert ours["cos_sim"].task_type == "text-to-image" and ours["cos_sim"].dataset_revision == FP_V1
    assert len(results) == 8  # pushing twice replaced our results instead of adding them again


def test_cli_push_results_error_is_one_line(tmp_path, capsys):
    assert main(["push-results", str(tmp_path / "nope"), "--repo-id", REPO]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_app_hub_board_loads_refreshes_and_keeps_the_last_state(hub, online, tmp_path):
    from geofidelity_bench.demo_app import HubBoard
    from geofidelity_bench.demo_app.hub_board import submit_markdown

    board = HubBoard(REPO, endpoint=hub.url, n_resamples=100).refresh()
    assert board.loaded_at is None and "Could not load" in board.status  # no repo yet
    push(make_results(tmp_path / "r1", seed=1, method="gen_a"), hub)
    push(make_results(tmp_path / "r2", seed=2, method="gen_b"), hub)
    push(make_results(tmp_path / "r3", seed=3, method="gen_c", encoder="clip", enc_hash="c" * 64), hub)
    board.refresh()
    assert board.loaded_at and "3 submission(s)" in board.status
    assert "gen_a" in board.markdown and "gen_b" in board.markdown and "gen_c" not in board.markdown
    assert "1 submission(s) in 1 other group(s)" in board.markdown and "6 block(s)" in board.markdown
    shown = board.markdown
    hub.fail_next("GET", r"/tree/", status=403)
    board.refresh()
    assert "Could not load" in board.status and board.loaded_at in board.status and board.markdown == shown
    text = submit_markdown(REPO)
    assert f"push-results results --repo-id {REPO}" in text and "token" in text


def test_app_serves_the_hub_board_and_the_submit_tab(hub, online, tmp_path):
    import socket

    from gradio_client import Client

    from geofidelity_bench.demo_app import HubBoard, build_app, launch, load_app_data

    push(make_results(tmp_path / "r1", seed=1, method="gen_a"), hub)
    board = HubBoard(REPO, endpoint=hub.url, n_resamples=100).refresh()
    data = load_app_data("demo", "efficientnet-lite0", cache_dir=str(tmp_path / "cache"))
    demo = build_app(data, board)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launch(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False, download_files=False, analytics_enabled=False)
        push(make_results(tmp_path / "r2", seed=2, method="gen_b"), hub)
        status, body = client.predict(api_name="/hub_refresh")
        assert "2 submission(s)" in status and "gen_b" in body
    finally:
        demo.close()
