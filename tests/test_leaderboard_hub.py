"""The living leaderboard: push-results, load_leaderboard, comparable groups, model cards, report
from a repo id, against the loopback fake Hub.

Every results repo is pinned by its maintainer before any push (leaderboard.json and the group's
anchors): the synthetic folders of :func:`make_results` by :func:`leaderboard_helpers.pin_from_results`,
the demo's by the real `geofidelity-bench leaderboard init`. A push never writes anchors."""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pytest
import yaml

try:  # the fake Hub fixtures: `online` (requests allowed, HF_TOKEN set) and `hub` (the server)
    from leaderboard_helpers import init_demo, pin_from_results, segmenter_of
    from test_generation_hub import TOKEN, hub, online  # noqa: F401
except ImportError:  # tests/ imported as a package
    from tests.leaderboard_helpers import init_demo, pin_from_results, segmenter_of
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
                 blocks=BLOCKS, created="2026-01-01T00:00:00+00:00", anchor_seed=0, anchor_blocks=BLOCKS,
                 segmenter=None, gaas=False, sanity=False, extra=None):
    """A results folder as `evaluate` writes it, with random in-range scores.

    The real-image anchors are deterministic (seeded by ``anchor_seed``, as a real run's are by the
    benchmark and the encoder), the generator's scores by ``seed``; ``segmenter`` records a GAAS
    segmenter in run.json (and gives every row a GAAS with ``gaas``)."""
    rng, arng = np.random.default_rng(seed), np.random.default_rng(anchor_seed)
    rows = []
    units = [(method, c, blocks, rng) for c in ("L0", "L1", "C_WRONG_STREET")]
    units += [(m, "anchor", anchor_blocks, arng) for m in stats.ANCHOR_METHODS]
    if sanity:
        units += [(m, "sanity", anchor_blocks, arng) for m in stats.SANITY_METHODS]
    for m, cond, bl, r in units:
        for block, city in bl:
            row = {"method": m, "condition": cond, "block_id": block, "city": city, "country": "NA",
                   "stratum": "", "n_generated": 4, "n_reference": 3, "encoder": encoder}
            for col in RESULT_METRIC_COLUMNS:
                row[col] = float(r.uniform(0.05, 0.9))
            if not gaas:
                row["gaas"] = np.nan
            row.update(n_distinct=4, n_copied=np.nan if cond == "anchor" else 0.0, n_candidates=5,
                       chance_retrieval_acc=0.2, chance_mrr=(1 + 1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 5)
            rows.append(row)
    df = pd.DataFrame(rows).reindex(columns=RESULT_COLUMNS)  # columns a row does not set (n_copied) stay NaN
    info = {
        "created_at": created,
        "benchmark": {"name": "demo", "source": "tester/geofidelity", "fingerprint": fingerprint},
        "encoder": {"name": encoder, "dim": 8, "config": {"encoder": encoder}, "config_hash": enc_hash},
        "gaas": ({"segmenter": segmenter, "config": {"name": segmenter}, "config_hash": segmenter + "-hash",
                  "segment_stats": {"cache_hits": 0}} if segmenter else {"segmenter": None, "reason": "none"}),
        "protocol": protocol_record(),
        "versions": {"geofidelity-bench": "0.1.0"},
    }
    if extra:
        df, info = extra(df, info)
    write_results(out, df, info)
    return out


def push(folder, hub, **kw):
    return push_results(folder, REPO, endpoint=hub.url, log=lambda m: None, retry_base_delay=0.01, **kw)


def pin(folder, hub, **kw):
    """Pins the group of ``folder`` in REPO from its own anchors (the maintainer's step before any push)."""
    return pin_from_results(hub, REPO, folder, **kw)


def anchor_files(hub, repo=REPO) -> dict[str, bytes]:
    """{path: bytes} of every file under anchors/ of the repo."""
    return {p: b for p, b in hub.files("dataset", repo).items() if p.startswith("anchors/")}


def test_push_repush_and_second_run(hub, online, tmp_path):
    run1 = make_results(tmp_path / "r1", seed=1)
    pinned = pin(run1, hub)
    assert pinned.commit and pinned.added
    anchors_before = anchor_files(hub)
    group = pinned.group
    assert set(anchors_before) == {pinned.anchors_path, f"anchors/{group.group_id}/run/{group.anchors_run_id}.json"}
    report = push(run1, hub)
    assert report.new == ["gen_a"] and report.commit  # a submission is a generator's rows
    assert report.anchor_check.status == "match" and not hasattr(report, "anchors_added")
    files = hub.files("dataset", REPO)
    rid = report.run_id
    assert not any(p.startswith(f"submissions/{m}/") for p in files for m in stats.ANCHOR_METHODS)
    assert anchor_files(hub) == anchors_before  # a push never writes anchors: the pinned ones stay, byte for byte
    anchors = pd.read_csv(io.BytesIO(files[report.anchors_path]))
    assert report.anchors_path == pinned.anchors_path and len(anchors) == 3 * len(BLOCKS)
    assert set(anchors["condition"]) == {"anchor"} and set(anchors["run_id"]) == {pinned.group.anchors_run_id}
    assert f"submissions/gen_a/{rid}/results.csv" in files
    assert files[f"submissions/gen_a/{rid}/run/results.csv"] == (run1 / "results.csv").read_bytes()
    assert f"submissions/gen_a/{rid}/run/run.json" in files
    record = json.loads(files[f"submissions/gen_a/{rid}/submission.json"])
    assert record["method"] == "gen_a" and record["generations"] is None  # self-reported: no --generations
    card = files["README.md"].decode()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["configs"][0]["data_files"][0]["path"] == "submissions/*/*/results.csv"
    assert meta["configs"][1]["data_files"][0]["path"] == "anchors/*/results.csv"
    commits = hub.commit_count("dataset", REPO)

    again = push(run1, hub)
    assert again.run_id == rid and again.new == [] and again.commit is None
    assert hub.commit_count("dataset", REPO) == commits

    run2 = make_results(tmp_path / "r2", seed=2, created="2026-02-01T00:00:00+00:00")
    second = push(run2, hub)
    assert second.run_id != rid and "gen_a" in second.new
    assert second.anchor_check.status == "match"
    files2 = hub.files("dataset", REPO)
    assert files2[f"submissions/gen_a/{rid}/results.csv"] == files[f"submissions/gen_a/{rid}/results.csv"]
    assert anchor_files(hub) == anchors_before  # one set of anchors per group, the maintainer's
    assert f"submissions/gen_a/{second.run_id}/results.csv" in files2
    assert files2["leaderboard.json"] == files["leaderboard.json"]


def test_push_to_an_unpinned_repo_is_refused_and_commits_nothing(hub, online, tmp_path, capsys):
    folder = make_results(tmp_path / "r1", seed=1)
    with pytest.raises(SubmissionError, match=rf"{REPO} does not exist.*leaderboard init.*nothing was uploaded"):
        push(folder, hub)
    assert ("dataset", REPO) not in hub.repos  # a push never creates the results repo (`leaderboard init` does)
    hub.add_files("dataset", REPO, {"README.md": b"# results\n"})  # a repo its maintainer has not pinned
    commits, before = hub.commit_count("dataset", REPO), hub.files("dataset", REPO)
    with pytest.raises(SubmissionError, match=r"has no leaderboard\.json.*leaderboard init.*nothing was uploaded"):
        push(folder, hub)
    assert main(["push-results", str(folder), "--repo-id", REPO, "--endpoint", hub.url]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "leaderboard init" in err and REPO in err, err
    assert hub.commit_count("dataset", REPO) == commits and hub.files("dataset", REPO) == before

    # pinned, but for another encoder: the run is in no pinned group
    pin(make_results(tmp_path / "other", seed=1, encoder="clip", enc_hash="c" * 64), hub)
    commits = hub.commit_count("dataset", REPO)
    with pytest.raises(SubmissionError, match=r"in no group pinned.*another encoder config.*nothing was uploaded"):
        push(folder, hub)
    assert hub.commit_count("dataset", REPO) == commits


def test_rows_of_blocks_or_conditions_the_group_does_not_pin_are_refused(hub, online, tmp_path):
    pin(make_results(tmp_path / "r0", seed=0), hub)  # the group's blocks: b0..b5 in L0, L1, C_WRONG_STREET
    commits = hub.commit_count("dataset", REPO)
    invented = make_results(tmp_path / "r1", seed=1, blocks=[*BLOCKS, ("b9", "rome")])
    with pytest.raises(SubmissionError, match=r"3 row\(s\) name a block the pinned benchmark does not have.*L1/b9"):
        push(invented, hub)

    def l2(df, info):
        extra = df[(df["condition"] == "L1")].assign(condition="L2")
        return pd.concat([df, extra], ignore_index=True), info

    with pytest.raises(SubmissionError, match=r"condition\(s\) \['L2'\] are not among the pinned group's"):
        push(make_results(tmp_path / "r2", seed=2, extra=l2), hub)
    assert hub.commit_count("dataset", REPO) == commits
    assert not any(p.startswith("submissions/") for p in hub.files("dataset", REPO))


def test_load_leaderboard_rows_and_datasets_reads_the_card(hub, online, tmp_path):
    run1 = make_results(tmp_path / "r1", seed=1)
    pinned = pin(run1, hub)
    rid = push(run1, hub).run_id
    df = load_leaderboard(REPO, endpoint=hub.url)
    original = pd.read_csv(run1 / "results.csv", keep_default_na=False, na_values={"gaas": [""]})
    assert len(df) == len(original)  # the generator's rows and the group's (pinned) anchors
    assert set(df.loc[df["condition"] == "anchor", "stored_as"]) == {"group_anchors"}
    assert set(df["run_id"]) == {rid} and set(df["benchmark_fingerprint"]) == {FP_V1}
    # what the repo, not the submitter, says of the rows: the pin, the commit dates, no verification yet
    config = df.attrs["leaderboard_config"]
    assert config.default_group == pinned.group.group_id and list(config.groups) == [pinned.group.group_id]
    gen = df[df["stored_as"] == "submission"]
    assert set(gen["verification"]) == {"pending"} and not gen["copies_excluded"].any()
    assert gen["committed_at"].str.len().gt(0).all() and set(gen["committed_at"]) != {"2026-01-01T00:00:00+00:00"}
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
    assert table.num_rows == (original["condition"] != "anchor").sum() and "run_id" in table.column_names
    anchors = datasets.load_dataset(str(local), "anchors", split="train")
    assert anchors.num_rows == (original["condition"] == "anchor").sum()


def test_groups_rank_only_comparable_submissions(hub, online, tmp_path):
    r1 = make_results(tmp_path / "r1", seed=1, method="gen_a")
    r3 = make_results(tmp_path / "r3", seed=3, method="gen_c", encoder="clip-vit-b32", enc_hash="c" * 64,
                      created="2026-03-01T00:00:00+00:00")
    pin(r1, hub)  # the default group: the first pinned
    pin(r3, hub)  # another encoder: a group of its own
    push(r1, hub)
    push(make_results(tmp_path / "r2", seed=2, method="gen_b", blocks=BLOCKS[:5]), hub)
    third = push(r3, hub)
    df, infos = load_submissions(REPO, endpoint=hub.url)
    view = leaderboard_view(df)
    assert view.group.encoder == "dinov2-base"
    assert "gen_c" not in view.methods and view.methods == ["gen_a"]
    assert len(view.blocks) == 6  # the group's full block set
    assert [(a.method, a.partial, a.n_blocks) for a in view.apart] == [("gen_b", True, 5)]  # listed apart
    text = view.other_text()
    assert "1 submission(s) in 1 other group(s)" in text and "encoder config" in text
    other = leaderboard_view(df, group="c" * 12)
    assert other.methods == ["gen_c"] and set(other.anchor_methods) == set(stats.ANCHOR_METHODS)
    assert set(other.rows["run_id"]) == {third.run_id}
    tables = leaderboard_tables(view, list(infos.values()), n_resamples=200)
    t10 = tables["leaderboard"].data
    assert set(t10.loc[t10["group"] == "generator", "method"]) == {"gen_a"}
    assert set(t10.loc[t10["group"] == "anchor", "method"]) == set(stats.ANCHOR_METHODS)
    # independent check: gen_a's CosSim is the plain mean of its L1 rows over all 6 blocks
    raw_a = pd.read_csv(tmp_path / "r1" / "results.csv")
    a_l1 = raw_a[(raw_a["method"] == "gen_a") & (raw_a["condition"] == "L1")]
    got_a = t10.loc[(t10["method"] == "gen_a") & (t10["group"] == "generator"), "cos_sim"].iloc[0]
    assert got_a == pytest.approx(a_l1["cos_sim"].mean())
    # the partial gen_b is listed apart with plain means over its own 5 blocks
    raw = pd.read_csv(tmp_path / "r2" / "results.csv")
    expect = raw[(raw["method"] == "gen_b") & (raw["condition"] == "L1")]["cos_sim"].mean()
    assert f"{expect:.3f}" in view.apart_markdown() and "covers 5 of the group's 6 block(s)" in view.apart_markdown()
    assert tables["controls"].ok and tables["cos_sim_by_condition"].ok


def test_report_from_a_repo_id(hub, online, tmp_path, capsys):
    r1, r3 = (make_results(tmp_path / "r1", seed=1),
              make_results(tmp_path / "r3", seed=3, method="gen_c", encoder="clip", enc_hash="c" * 64))
    pin(r1, hub)
    pin(r3, hub)
    push(r1, hub)
    push(r3, hub)
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
    pin(folder, hub)
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
    r1, r3 = (make_results(tmp_path / "r1", seed=1, method="gen_a"),
              make_results(tmp_path / "r3", seed=3, method="gen_c", encoder="clip", enc_hash="c" * 64))
    pin(r1, hub)
    pin(r3, hub)
    push(r1, hub)
    push(make_results(tmp_path / "r2", seed=2, method="gen_b"), hub)
    push(r3, hub)
    board.refresh()
    assert board.loaded_at and "3 generator submission(s)" in board.status
    assert "gen_a" in board.markdown and "gen_b" in board.markdown and "gen_c" not in board.markdown
    assert "1 submission(s) in 1 other group(s)" in board.markdown
    assert "Ranked: 2 generator submission(s), each covering all 6 block(s) of the group (3 cities)" in board.markdown
    shown = board.markdown
    hub.fail_next("GET", rf"^/api/datasets/{REPO}(/revision/[^/]+)?$", status=403)  # the repo cannot be read
    board.refresh()
    assert "Could not load" in board.status and board.loaded_at in board.status and board.markdown == shown
    text = submit_markdown(REPO)
    assert f"push-results results --repo-id {REPO}" in text and "token" in text


def test_app_serves_the_hub_board_and_the_submit_tab(hub, online, tmp_path, tmp_path_factory):
    import socket

    from gradio_client import Client

    from geofidelity_bench.demo_app import HubBoard, build_app, launch

    try:  # the app's data, built once per session
        from test_app import shared_app_data
    except ImportError:  # tests/ imported as a package
        from tests.test_app import shared_app_data

    r1 = make_results(tmp_path / "r1", seed=1, method="gen_a")
    pin(r1, hub)
    push(r1, hub)
    board = HubBoard(REPO, endpoint=hub.url, n_resamples=100).refresh()
    data = shared_app_data(tmp_path_factory)
    demo = build_app(data, board)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    launch(demo, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False, download_files=False, analytics_enabled=False)
        push(make_results(tmp_path / "r2", seed=2, method="gen_b"), hub)
        status, body = client.predict(api_name="/hub_refresh")
        assert "2 generator submission(s)" in status and "gen_b" in body
    finally:
        demo.close()


# -- issue 28: the leaderboard ranks only equals ---------------------------------------------------


#: demo_runs, made once per session (tests/test_leaderboard_browser.py imports the fixture too)
_DEMO_RUNS: dict = {}


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory):
    """The demo's results folder (anchors + sanity) and a 1-block tiny run, both with the offline encoder.
    Read only: tests push these folders, never change them."""
    if "root" in _DEMO_RUNS:
        return _DEMO_RUNS["root"]
    root = tmp_path_factory.mktemp("demo_runs")
    # the embedding cache of the app tests (tests/test_app.py): the same photos and encoder
    cache = str(tmp_path_factory.getbasetemp() / "app-embedding-cache")
    assert main(["demo", "--out", str(root / "demo"), "--no-progress", "--cache-dir", cache, "--no-gaas"]) == 0
    assert main(["generate", "--model", "tiny", "--blocks", "berlin_am_lustgarten", "--conditions", "L0", "L1",
                 "--images-per-block", "2", "--out", str(root / "gen"), "--no-progress"]) == 0
    assert main(["evaluate", "--generated", str(root / "gen"), "--encoder", "efficientnet-lite0", "--no-gaas",
                 "--out", str(root / "tiny"), "--no-progress", "--cache-dir", cache]) == 0
    _DEMO_RUNS["root"] = root
    return root


def test_demo_pushed_three_times_and_a_one_block_run(hub, online, demo_runs, warm_demo_cache, capsys):
    """Done when: one set of anchors (the maintainer's), no sanity rows among generators, the 1-block run
    partial, right counts."""
    from geofidelity_bench.benchmark import load_benchmark
    from geofidelity_bench.demo_app import HubBoard

    demo, tiny = demo_runs / "demo", demo_runs / "tiny"
    init_demo(hub, REPO, warm_demo_cache)  # the maintainer pins the demo's group and computes its anchors
    out = capsys.readouterr().out
    assert f"{REPO}: pinned group" in out and "anchors computed here: 21 row(s)" in out
    pinned, commits = anchor_files(hub), hub.commit_count("dataset", REPO)
    for _ in range(3):
        assert main(["push-results", str(demo), "--repo-id", REPO, "--endpoint", hub.url]) == 0
        out = capsys.readouterr().out
        assert "not submitted: sanity method(s) sanity_augmented_heldout, sanity_world" in out
        assert "holds no generator rows" in out
        assert ": match: all " in out and "agree with the pinned anchors" in out  # the demo's = the maintainer's
        assert anchor_files(hub) == pinned and hub.commit_count("dataset", REPO) == commits  # nothing written
    assert main(["push-results", str(tiny), "--repo-id", REPO, "--endpoint", hub.url]) == 0
    out = capsys.readouterr().out
    assert "submitted tiny as run" in out and "anchors" in out and ": match: all" in out
    files = hub.files("dataset", REPO)
    assert sorted({p.split("/")[1] for p in files if p.startswith("submissions/")}) == ["tiny"]
    assert anchor_files(hub) == pinned
    stored_files = [p for p in pinned if p.endswith("results.csv")]
    assert len(stored_files) == 1
    stored = pd.read_csv(io.BytesIO(files[stored_files[0]]))
    assert len(stored) == 21 and not stored.duplicated(["method", "block_id"]).any()  # one set of anchors

    df, infos = load_submissions(REPO, endpoint=hub.url)
    view = leaderboard_view(df)
    bench = load_benchmark("demo")
    assert view.blocks == sorted(b.block_id for b in bench.blocks) and view.n_cities == len(bench.cities)
    # the group's blocks per condition are the benchmark's: L0 has all 7, L1 only the one block whose L1 prompt the
    # demo can build; the 1-block run is partial in L0 (listed apart there) and complete in L1 (ranked there)
    pin_blocks = df.attrs["leaderboard_config"].default.blocks
    assert len(pin_blocks["L0"]) == 7 and pin_blocks["L1"] == ["berlin_am_lustgarten"]
    assert [(a.method, a.partial, a.n_blocks) for a in view.apart] == [("tiny", True, 1)]
    tiny_rows = view.rows[view.rows["method"] == "tiny"]
    assert view.methods == ["tiny"] and list(tiny_rows["condition"]) == ["L1"]  # never ranked in L0
    assert not (view.rows["condition"] == "sanity").any()
    assert sorted(view.anchor_methods) == sorted(stats.ANCHOR_METHODS)
    assert (view.rows["condition"] == "anchor").sum() == 21
    tables = leaderboard_tables(view, list(infos.values()))
    t10 = tables["leaderboard"].data
    assert set(t10.loc[t10["group"] == "generator", "method"]) == {"tiny"}
    # the anchors' CosSim is the plain mean of the demo's rows (independent of the Hub round trip)
    raw = pd.read_csv(demo / "results.csv")
    held = raw[raw["method"] == "heldout_real"]["cos_sim"].mean()
    assert t10.loc[t10["method"] == "heldout_real", "cos_sim"].iloc[0] == pytest.approx(held)

    board = HubBoard(REPO, endpoint=hub.url).refresh()
    md = board.markdown
    assert board.n_resamples == 5000 and "1 generator submission(s)" in board.status
    assert "Listed apart, never ranked or bolded: 1 partial, 0 not comparable, 0 copied" in md
    assert "3 method(s) on 7 block(s)" in md and "5,000 bootstrap resamples, seed 42" in md
    assert "intervals rest on only" in md and "3 cities (< 5)" in md
    assert "covers 1 of the group's 7 block(s)" in md
    ranking, apart = md.split("#### Listed apart")
    assert "Sanity" not in ranking and "sanity_" not in ranking
    raw_tiny = pd.read_csv(tiny / "results.csv")
    l0 = raw_tiny.loc[(raw_tiny["method"] == "tiny") & (raw_tiny["condition"] == "L0"), "cos_sim"].iloc[0]
    l1 = raw_tiny.loc[(raw_tiny["method"] == "tiny") & (raw_tiny["condition"] == "L1"), "cos_sim"].iloc[0]
    assert f"{l0:.3f}" != f"{l1:.3f}"
    ranked_lines = [line for line in ranking.splitlines() if line.startswith("| tiny")]
    apart_lines = [line for line in apart.splitlines() if line.startswith("| tiny")]
    assert ranked_lines and all(f"{l1:.3f}" in line and f"{l0:.3f}" not in line for line in ranked_lines)
    assert len(apart_lines) == 1 and "L0" in apart_lines[0] and f"{l0:.3f}" in apart_lines[0]  # L0: apart only


def test_anchor_mismatch_shows_the_submission_apart(hub, online, tmp_path, capsys):
    r1 = make_results(tmp_path / "r1", seed=1, method="gen_a")
    pin(r1, hub)
    pinned = anchor_files(hub)
    push(r1, hub)
    # the same config hash, but anchors that differ: another encoder or pipeline
    other = make_results(tmp_path / "r2", seed=2, method="gen_b", anchor_seed=7)
    capsys.readouterr()
    assert main(["push-results", str(other), "--repo-id", REPO, "--endpoint", hub.url]) == 0
    out = capsys.readouterr().out
    assert "submitted gen_b" in out  # submitted, and shown apart
    assert "anchors NOT comparable with the pinned ones" in out and "another encoder or pipeline" in out
    assert anchor_files(hub) == pinned  # never merged into the group's, never replacing them
    df = load_leaderboard(REPO, endpoint=hub.url)
    gen = df[df["stored_as"] == "submission"]
    assert set(gen.loc[gen["method"] == "gen_b", "anchor_check"]) == {"mismatch"}
    assert set(gen.loc[gen["method"] == "gen_a", "anchor_check"]) == {"match"}
    view = leaderboard_view(df)
    assert view.methods == ["gen_a"]
    (apart,) = view.apart
    assert apart.method == "gen_b" and apart.not_comparable and not apart.partial
    assert "not comparable" in view.apart_markdown()
    # a tiny difference (float rounding on another device) is not a mismatch
    from geofidelity_bench.comparability import ANCHOR_ATOL, check_anchors

    a = pd.read_csv(tmp_path / "r1" / "results.csv")
    a = a[a["condition"] == "anchor"]
    b = a.assign(cos_sim=a["cos_sim"] + ANCHOR_ATOL / 10)
    assert check_anchors(a, b, RESULT_METRIC_COLUMNS).status == "match"
    c = a.assign(cos_sim=a["cos_sim"] + 1e-3)
    assert check_anchors(a, c, RESULT_METRIC_COLUMNS).status == "mismatch"


@pytest.mark.parametrize("seg", [None, "mask2former-vistas"], ids=["same-keys", "rows-the-pin-lacks"])
def test_a_mismatching_run_never_adds_its_anchors_to_the_group(hub, online, tmp_path, seg):
    """The bug this catches: push-results adding a run's anchor rows to the group's anchors although its
    anchor check is a mismatch. With a segmenter the pin lacks, every anchor row of the run is one the
    pinned anchors do not have ((method, block, segmenter)), so even a merge of "missing" rows would show."""
    pinned_report = pin(make_results(tmp_path / "r0", seed=0), hub)  # no GAAS segmenter
    a_path = pinned_report.anchors_path
    pinned = anchor_files(hub)
    group = pinned_report.group
    assert set(pinned) == {a_path, f"anchors/{group.group_id}/run/{group.anchors_run_id}.json"}
    bad = make_results(tmp_path / "bad", seed=3, method="gen_x", anchor_seed=11, segmenter=seg, gaas=seg is not None)
    report = push(bad, hub)
    assert report.new == ["gen_x"] and report.commit and report.anchor_check.status == "mismatch"
    files = hub.files("dataset", REPO)
    assert f"submissions/gen_x/{report.run_id}/results.csv" in files
    assert files[a_path] == pinned[a_path]  # byte-identical to what the pin wrote
    assert anchor_files(hub) == pinned  # and no file under anchors/ was added (no anchors/*/run/{run_id}.json)
    assert not any(report.run_id in p for p in files if not p.startswith(f"submissions/gen_x/{report.run_id}/"))
    stored = pd.read_csv(io.BytesIO(files[a_path]))
    assert set(stored["run_id"]) == {pinned_report.group.anchors_run_id} and len(stored) == 3 * len(BLOCKS)
    # read back: the group's anchors are still only the maintainer's rows, and the run is marked
    df = load_leaderboard(REPO, endpoint=hub.url)
    anchors = df[df["stored_as"] == "group_anchors"]
    assert set(anchors["run_id"]) == {pinned_report.group.anchors_run_id} and len(anchors) == 3 * len(BLOCKS)
    assert set(df.loc[df["method"] == "gen_x", "anchor_check"]) == {"mismatch"}


def test_older_repos_with_anchors_and_sanity_inside_submissions(hub, online, tmp_path):
    """A repo written before anchors were stored per group: every run's anchor and sanity rows are
    folders of their own under submissions/; they are read as the group's anchors and sanity."""
    from geofidelity_bench.hub.results_repo import validate_results_folder

    files = {}
    for i, (method, blocks) in enumerate([("gen_a", BLOCKS), ("gen_b", BLOCKS), ("gen_c", BLOCKS[:2])]):
        folder = make_results(tmp_path / f"r{i}", seed=i, method=method, blocks=blocks, sanity=True,
                              created=f"2026-0{i + 1}-01T00:00:00+00:00")
        sub = validate_results_folder(folder)
        for m in sorted(sub.rows["method"].unique()):
            rows = sub.rows[sub.rows["method"] == m].copy()
            for j, (col, val) in enumerate([("run_id", sub.run_id), ("benchmark_name", "demo"),
                                            ("benchmark_fingerprint", FP_V1), ("encoder_config_hash", "e" * 64),
                                            ("protocol_version", "1"), ("library_version", "0.1.0"),
                                            ("created_at", sub.run_info["created_at"])]):
                rows.insert(j, col, val)
            files[f"submissions/{m}/{sub.run_id}/results.csv"] = rows.to_csv(index=False).encode()
    hub.add_files("dataset", REPO, files)
    df = load_leaderboard(REPO, endpoint=hub.url)
    assert df.attrs["leaderboard_config"] is None  # no leaderboard.json: read as a legacy repo, self-reported
    view = leaderboard_view(df)
    assert view.methods == ["gen_a", "gen_b"] and [a.method for a in view.apart] == ["gen_c"]
    assert sorted(view.anchor_methods) == sorted(stats.ANCHOR_METHODS)
    assert len(view.rows[view.rows["condition"] == "anchor"]) == 3 * len(BLOCKS)  # one set, not three
    assert not (view.rows["condition"] == "sanity").any() and view.n_sanity_rows == 3 * 2 * len(BLOCKS)
    assert any("sanity" in line for line in view.header_lines())


def _with_copies(df, info):
    df = df.copy()
    df["n_copied"] = np.where((df["method"] == "gen_x") & (df["condition"] == "L1") & (df["block_id"] == "b0"), 2, 0)
    df.loc[df["condition"] == "anchor", "n_copied"] = np.nan
    return df, info


def _with_near_copies(df, info):
    rec = {"method": "gen_y", "condition": "L0", "block_id": "b1", "file": "00.jpg", "reference_id": "b1__000",
           "reference_block_id": "b1", "hash_distance": 2, "cosine": 0.996, "exact": False, "flagged": True}
    sanity = dict(rec, method="sanity_augmented_heldout", condition="sanity")  # not the submission's
    return df, dict(info, near_copies=[rec, sanity])


def test_push_refuses_copies_unless_allowed_and_marks_them(hub, online, tmp_path, capsys):
    from geofidelity_bench import caveats

    r0 = make_results(tmp_path / "r0", seed=0, method="gen_a")
    pin(r0, hub)
    push(r0, hub)
    for i, (method, extra, what) in enumerate([("gen_x", _with_copies, "gen_x/L1/b0"),
                                               ("gen_y", _with_near_copies, "gen_y/L0/b1/00.jpg")]):
        # the best scores of all on every block: a copy must still never top the board
        folder = make_results(tmp_path / f"c{i}", seed=9, method=method, extra=extra)
        raw = pd.read_csv(folder / "results.csv")
        raw.loc[raw["method"] == method, "cos_sim"] = 0.99
        raw.to_csv(folder / "results.csv", index=False)
        with pytest.raises(SubmissionError, match=rf"flagged by the copy audit.*{what}.*--allow-copies"):
            push(folder, hub)
        assert main(["push-results", str(folder), "--repo-id", REPO, "--endpoint", hub.url]) == 2
        assert "--allow-copies" in capsys.readouterr().err
        assert not any(p.startswith(f"submissions/{method}/") for p in hub.files("dataset", REPO))
        assert main(["push-results", str(folder), "--repo-id", REPO, "--endpoint", hub.url, "--allow-copies"]) == 0
        assert "marks this submission as copied" in capsys.readouterr().out
    df, infos = load_submissions(REPO, endpoint=hub.url)
    assert df.loc[(df["method"] == "gen_y") & (df["block_id"] == "b1") & (df["condition"] == "L0"), "n_copied"].iloc[0] == 1
    view = leaderboard_view(df)
    assert view.methods == ["gen_a"]
    assert {a.method for a in view.apart if a.copied} == {"gen_x", "gen_y"}
    t10 = leaderboard_tables(view, list(infos.values()), n_resamples=100)["leaderboard"]
    assert "gen_x" not in t10.markdown and "gen_y" not in t10.markdown
    assert view.apart_markdown().count(caveats.COPIED_MARK) >= 2
    assert "0 partial, 0 not comparable, 2 copied" in view.header_lines()[1]


def test_gaas_is_compared_only_within_one_segmenter(hub, online, tmp_path):
    r1 = make_results(tmp_path / "r1", seed=1, method="gen_a", segmenter="mask2former-vistas", gaas=True)
    pin(r1, hub, segmenter=segmenter_of("mask2former-vistas"))  # the group's GAAS segmenter, pinned
    push(r1, hub)
    push(make_results(tmp_path / "r2", seed=2, method="gen_b", segmenter="mask2former-vistas", gaas=True), hub)
    push(make_results(tmp_path / "r3", seed=3, method="gen_c", segmenter="segformer-cityscapes", gaas=True), hub)
    df, infos = load_submissions(REPO, endpoint=hub.url)
    assert set(df.loc[df["condition"] != "anchor", "segmenter"]) == {"mask2former-vistas-hash",
                                                                      "segformer-cityscapes-hash"}
    view = leaderboard_view(df)
    assert view.methods == ["gen_a", "gen_b", "gen_c"] and view.gaas_segmenter == "mask2former-vistas-hash"
    t10 = leaderboard_tables(view, list(infos.values()), n_resamples=100)["leaderboard"].data
    gaas = dict(zip(t10["method"], t10["gaas"]))
    assert np.isnan(gaas["gen_c"]) and np.isfinite(gaas["gen_a"]) and np.isfinite(gaas["gen_b"])
    raw = pd.read_csv(tmp_path / "r1" / "results.csv")
    assert gaas["gen_a"] == pytest.approx(raw[(raw["method"] == "gen_a") & (raw["condition"] == "L1")]["gaas"].mean())
    assert any("GAAS of gen_c: n/a (segmenter segformer-ci" in n for n in view.notes)


def test_run_id_leaves_out_volatile_statistics(tmp_path):
    from types import SimpleNamespace

    from geofidelity_bench.hub.results_repo import run_id_of
    from geofidelity_bench.results import run_record

    folder = make_results(tmp_path / "r", seed=1)
    df = pd.read_csv(folder / "results.csv")
    bench = SimpleNamespace(name="demo", source="demo", fingerprint=FP_V1, blocks=[1], references=[1])
    enc = SimpleNamespace(name="e", dim=8, config={"e": 1}, config_hash="e" * 64)
    seg = SimpleNamespace(name="mask2former-vistas", config={"s": 1}, config_hash="s" * 64)
    data = (folder / "results.csv").read_bytes()
    ids = []
    for hits in (0, 24):  # the same evaluate twice: the second finds the segmentations in the cache
        df.attrs["segment_stats"] = {"cache_hits": hits, "computed": 24 - hits}
        info = {"created_at": f"t{hits}", "elapsed_s": hits, "parameters": {"out": f"o{hits}", "num_workers": hits},
                **run_record(bench, enc, df, segmenter=seg)}
        ids.append(run_id_of(info, data))
    assert ids[0] == ids[1]
    assert run_id_of(info, data + b"x") != ids[0]  # other numbers: another run
    info["gaas"]["config_hash"] = "t" * 64
    assert run_id_of(info, data) != ids[0]  # another segmenter: another run


def test_blocks_count_only_finite_scores(hub, online, tmp_path):
    def all_nan_on_b2(df, info):
        df = df.copy()
        mask = (df["method"] == "gen_b") & (df["block_id"] == "b2")
        for col in RESULT_METRIC_COLUMNS:
            df.loc[mask, col] = np.nan
        # as evaluate records them (run.json nan_reasons): a NaN score without a reason is refused by push-results
        df.attrs["nan_reasons"] = [{"method": m, "condition": c, "block_id": b, "column": col,
                                    "reason": "panel left with 1 image"}
                                   for m, c, b in df.loc[mask, ["method", "condition", "block_id"]].itertuples(index=False)
                                   for col in RESULT_METRIC_COLUMNS]
        return df, info

    r1 = make_results(tmp_path / "r1", seed=1, method="gen_a")
    pin(r1, hub)
    push(r1, hub)
    push(make_results(tmp_path / "r2", seed=2, method="gen_b", extra=all_nan_on_b2), hub)
    view = leaderboard_view(load_leaderboard(REPO, endpoint=hub.url))
    assert len(view.blocks) == 6 and view.methods == ["gen_a"]
    assert [(a.method, a.n_blocks) for a in view.apart] == [("gen_b", 5)]  # 5 finite of 6 rows


def test_thin_anchor_blocks_are_counted_and_marked(hub, online, tmp_path):
    from geofidelity_bench import caveats
    from geofidelity_bench.demo_app import HubBoard

    def repeats(df, info):
        df = df.copy()
        df["n_distinct"] = 4.0
        thin = (df["method"] == "heldout_real") & df["block_id"].isin(["b0", "b3"])
        df.loc[thin, "n_distinct"] = 1.0
        return df, info

    r1 = make_results(tmp_path / "r1", seed=1, method="gen_a", extra=repeats)
    pin(r1, hub)  # the pinned anchors hold the thin held-out blocks
    push(r1, hub)
    push(make_results(tmp_path / "r2", seed=2, method="gen_b"), hub)  # an older folder without n_distinct
    board = HubBoard(REPO, endpoint=hub.url, n_resamples=100).refresh()
    assert f"{caveats.REPEATS_MARK}: 2 of 6 block(s) have fewer held-out photos" in board.markdown
    assert f"Held-out Real ({caveats.REPEATS_MARK} in 2 of 6 blocks)" in board.markdown  # the report marks the row


def test_model_card_is_keyed_by_comparability_and_names_the_encoder(hub, online, tmp_path, capsys):
    from huggingface_hub import ModelCard

    def card():
        return ModelCard(hub.files("model", "tester/m")["README.md"].decode()).data.eval_results

    hub.add_files("model", "tester/m", {"README.md": b"---\nlicense: mit\n---\n# m\n"})
    base = ["--repo-id", REPO, "--endpoint", hub.url, "--model-card", "tester/m"]
    r1 = make_results(tmp_path / "r1", seed=1, segmenter="mask2former-vistas", gaas=True)
    r3 = make_results(tmp_path / "r3", seed=3, encoder="efficientnet-lite0", enc_hash="f" * 64)
    pin(r1, hub, segmenter=segmenter_of("mask2former-vistas"))
    pin(r3, hub)
    assert main(["push-results", str(r1), *base]) == 0
    first = card()
    assert len(first) == 8 and {r.metric_args["encoder"] for r in first} == {"dinov2-base"}
    assert all("encoder dinov2-base" in r.metric_config for r in first)
    # a newer run of the same key without GAAS: its GAAS entry goes (a NaN removes the stale value)
    r2 = make_results(tmp_path / "r2", seed=2, created="2026-02-01T00:00:00+00:00")
    assert main(["push-results", str(r2), *base]) == 0
    second = {r.metric_type: r for r in card()}
    assert len(card()) == 7 and "gaas" not in second
    raw = pd.read_csv(r2 / "results.csv")
    l1 = raw[(raw["method"] == "gen_a") & (raw["condition"] == "L1")]
    assert second["cos_sim"].metric_value == pytest.approx(l1["cos_sim"].mean(), abs=1e-6)
    # another encoder: its own entries, the DINOv2 ones stay
    capsys.readouterr()
    assert main(["push-results", str(r3), *base]) == 0
    assert "with encoder efficientnet-lite0" in capsys.readouterr().out
    third = card()
    assert len(third) == 14
    assert sorted({r.metric_args["encoder"] for r in third}) == ["dinov2-base", "efficientnet-lite0"]
    kept = [r for r in third if r.metric_args["encoder"] == "dinov2-base" and r.metric_type == "cos_sim"]
    assert kept[0].metric_value == pytest.approx(l1["cos_sim"].mean(), abs=1e-6)


def test_push_results_model_card_of_a_repo_that_does_not_exist_names_it_and_pushes_nothing(hub, online, tmp_path,
                                                                                           capsys):
    folder = make_results(tmp_path / "r1", seed=1)
    pin(folder, hub)  # a push would be accepted
    commits, before, n = hub.commit_count("dataset", REPO), hub.files("dataset", REPO), len(hub.requests)
    args = ["push-results", str(folder), "--repo-id", REPO, "--endpoint", hub.url, "--model-card", "tester/no-such-model"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "tester/no-such-model" in err and "not found" in err and "create" in err, err
    assert "404 Client Error" not in err
    assert hub.commit_count("dataset", REPO) == commits and hub.files("dataset", REPO) == before, "nothing is pushed"
    assert not [r for r in hub.requests[n:] if REPO in r[1]], "the results repo is not even read"
