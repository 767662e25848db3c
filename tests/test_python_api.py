"""The public Python API: what ``geofidelity_bench`` exports, that importing it stays cheap, and
that the README's "Python API" examples run as written (offline, in a fresh working folder)
and produce what the commands produce.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import geofidelity_bench
from geofidelity_bench.benchmark import load_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.results import RUN_FILE, read_results_csv

ROOT = Path(__file__).resolve().parents[1]
#: Modules that ``import geofidelity_bench`` must not load (they cost seconds).
HEAVY = ("torch", "pandas", "datasets", "evaluate", "transformers", "matplotlib", "scipy", "gradio")
#: The scoring entry points a Python user reaches from the package root (issue 15, section 7).
ENTRY_POINTS = (
    "load_benchmark", "get_encoder", "read_generated_folder", "evaluate_panels", "write_results", "run_record",
    "load_results", "read_results_csv", "build_report", "report_from_dirs", "load_metric", "GeoFidelityError",
    "load_leaderboard",
)
SCORES = ("cos_sim", "mmd", "dcsf", "diversity_gap", "retrieval_acc", "mrr", "sim_target", "strongest_margin")


def python_api_blocks() -> list[str]:
    """The ```python blocks of the README's "Python API" section, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("\n### Python API\n")
    end = text.index("\n### ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.S)


def run_example(code: str, cwd: Path) -> str:
    """Runs one README block as a script in ``cwd``, offline, with its caches in ``cwd``; returns stdout."""
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / "example.py").write_text(code, encoding="utf-8")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(cwd / ".hf"),
               HF_MODULES_CACHE=str(cwd / ".hf" / "modules"), GEOFIDELITY_CACHE=str(cwd / ".embeddings"),
               MPLBACKEND="Agg", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "example.py"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, f"README example failed:\n{code}\n--- stderr ---\n{proc.stderr[-4000:]}"
    return proc.stdout


# -- the package surface ----------------------------------------------------------------------------


def test_import_loads_no_heavy_module():
    code = (
        "import sys, geofidelity_bench as g; dir(g); g.GeoFidelityError; "
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout
    assert out.strip() == "[]", out


def test_entry_points_are_exported_from_their_modules():
    import importlib

    for name in ENTRY_POINTS:
        assert name in geofidelity_bench.__all__ and name in dir(geofidelity_bench), name
        obj = getattr(geofidelity_bench, name)
        assert obj is getattr(importlib.import_module(obj.__module__), name), name  # the library's own object
    for name in geofidelity_bench.__all__:  # every advertised name resolves
        getattr(geofidelity_bench, name)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        geofidelity_bench.nope  # noqa: B018


def test_every_user_error_base_is_the_exported_one():
    from geofidelity_bench.evaluation import EvaluationError
    from geofidelity_bench.results import ResultsFolderError

    assert issubclass(EvaluationError, geofidelity_bench.GeoFidelityError)
    assert issubclass(ResultsFolderError, geofidelity_bench.GeoFidelityError)


def test_write_results_rejects_something_that_is_not_result_rows(tmp_path):
    with pytest.raises(geofidelity_bench.GeoFidelityError, match=r"without column\(s\) \['method', 'condition'"):
        geofidelity_bench.write_results(tmp_path / "out", [1, 2, 3], {})
    assert not (tmp_path / "out").exists()


def test_the_readme_has_the_two_examples():
    blocks = python_api_blocks()
    assert len(blocks) == 2, blocks
    assert "evaluate_panels" in blocks[0] and "load_metric" in blocks[1]
    for block in blocks:  # short enough to copy, and each one stands alone
        assert len(block.splitlines()) <= 25
        assert "import geofidelity_bench as gfb" in block


# -- the scoring example ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scoring_example(tmp_path_factory):
    work = tmp_path_factory.mktemp("python_api") / "scoring"
    stdout = run_example(python_api_blocks()[0], work)
    return work, stdout


@pytest.mark.slow
def test_scoring_example_writes_a_scored_results_folder(scoring_example):
    work, stdout = scoring_example
    demo = load_benchmark("demo")
    df = read_results_csv(work / "results" / "results.csv")
    methods = ["world_photos", "heldout_real", "random_same_country", "random_global"]
    assert sorted(df["method"].unique()) == sorted(methods)
    # one row per (method, condition, block): L0 for every block, L1 only for the block with a street name
    named = [b.block_id for b in demo.blocks if b.street_name and b.neighborhood]
    assert named == ["berlin_am_lustgarten"]
    assert len(df) == len(methods) * len(demo.blocks) + len(named)
    world = df[df["method"] == "world_photos"]
    run = json.loads((work / "results" / RUN_FILE).read_text())
    assert sorted(world.loc[world["condition"] == "L0", "block_id"]) == sorted(demo.block_ids)
    assert list(world.loc[world["condition"] == "L1", "block_id"]) == named
    assert set(world["condition"]) == {"L0", "L1"}
    assert run["unpromptable_panels"] == {"allowed": False, "panels": []}  # every panel has a prompt
    assert set(world["n_generated"]) == {4.0}
    for col in SCORES:
        assert df[col].map(math.isfinite).all(), col
    assert df["gaas"].isna().all()  # no segmenter in the example; run.json says why
    assert run["benchmark"]["fingerprint"] == demo.fingerprint
    assert run["encoder"]["name"] == "efficientnet-lite0" and run["encoder"]["config_hash"]
    reasons = {r["column"]: r for r in run["nan_reasons"]}
    assert reasons["gaas"]["n_rows"] == len(df)
    for col in reasons:  # a recorded reason covers exactly the NaN rows of its column
        nan_rows = df[df[col].isna()]
        assert sorted(reasons[col]["rows"]) == sorted(nan_rows["method"] + "/" + nan_rows["condition"] + "/"
                                                      + nan_rows["block_id"]), col
    assert run["created_at"] and run["versions"]["python"]
    # The printed table is the mean per method of the rows written.
    for method, mean in df.groupby("method")["cos_sim"].mean().items():
        line = next(line for line in stdout.splitlines() if line.startswith(method + " "))
        assert float(line.split()[1]) == pytest.approx(mean, abs=5e-6), line


@pytest.mark.slow
def test_scoring_example_builds_the_report(scoring_example):
    import pandas as pd

    work, _ = scoring_example
    report = work / "results" / "report"
    for name in ("report.md", "report.json", "tables/leaderboard.csv", "plots/leaderboard.png"):
        assert (report / name).is_file(), name
    rows = read_results_csv(work / "results" / "results.csv")
    board = pd.read_csv(report / "tables" / "leaderboard.csv").set_index("method")
    assert board.loc["world_photos", "cos_sim"] == pytest.approx(  # the leaderboard ranks L1 panels
        rows.loc[(rows["method"] == "world_photos") & (rows["condition"] == "L1"), "cos_sim"].mean(), rel=1e-9)
    assert "world_photos" in (report / "report.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_python_results_folder_matches_the_command(scoring_example, tmp_path):
    """The example's folder is the one `geofidelity-bench evaluate` writes for the same panels."""
    work, _ = scoring_example
    cli_out = tmp_path / "cli"
    assert main(["evaluate", "--benchmark", "demo", "--generated", str(work / "generated"), "--encoder",
                 "efficientnet-lite0", "--no-gaas", "--no-cache", "--no-progress", "--out", str(cli_out)]) == 0
    py_out = work / "results"
    for name in ("results.csv", "summary_by_method.csv", "summary_by_method_condition.csv",
                 "summary_by_city_method.csv", "summary_by_condition.csv"):
        assert (py_out / name).read_bytes() == (cli_out / name).read_bytes(), name
    py_run, cli_run = (json.loads((d / RUN_FILE).read_text()) for d in (py_out, cli_out))
    for key in ("benchmark", "encoder", "embedding_cache", "skipped_images", "animated_images", "anchors", "protocol",
                "versions", "nan_reasons", "files"):
        assert py_run[key] == cli_run[key], key
    assert py_run["gaas"]["segmenter"] is None and cli_run["gaas"]["segmenter"] is None
    # Only the command's own record is extra: command line, parameters, timing, and what it checked
    # of the generated folder (the generation manifest, declared extra conditions).
    assert set(cli_run) - set(py_run) == {"command", "elapsed_s", "parameters", "generation_manifest",
                                          "extra_conditions"}
    assert cli_run["generation_manifest"]["file"] is None and cli_run["extra_conditions"] == []


# -- the evaluate metric example ------------------------------------------------------------------


@pytest.mark.slow  # imports evaluate (about 10 s)
def test_metric_example_gives_the_held_out_anchor_scores(scoring_example, tmp_path):
    """The metric scores the lund blocks' four held-out photos: exactly the heldout_real anchor panels."""
    stdout = run_example(python_api_blocks()[1], tmp_path / "metric")
    cos_sim, retrieval_acc = map(float, stdout.split()[-2:])
    rows = read_results_csv(scoring_example[0] / "results" / "results.csv")
    anchors = rows[(rows["method"] == "heldout_real") & rows["block_id"].isin(["lund_seg1", "lund_seg2"])]
    assert len(anchors) == 2
    assert cos_sim == pytest.approx(anchors["cos_sim"].mean(), abs=1e-5)
    assert retrieval_acc == pytest.approx(anchors["retrieval_acc"].mean(), abs=1e-9)
