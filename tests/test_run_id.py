"""One evaluation is one submission: the run id of a results folder does not change when the same
``evaluate`` runs again with a warm cache (issue 39, case 3)."""

from __future__ import annotations

import json

from conftest import jpeg_bytes

from geofidelity_bench.benchmark import load_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.hub.results_repo import validate_results_folder


def _evaluate(gen, out, cache) -> None:
    assert main(["evaluate", "--benchmark", "demo", "--generated", str(gen), "--encoder", "efficientnet-lite0",
                 "--out", str(out), "--cache-dir", str(cache), "--no-progress", "--no-gaas"]) == 0


def test_the_same_evaluate_twice_is_one_run(tmp_path, warm_demo_cache):
    demo = load_benchmark("demo")
    panel = tmp_path / "gen" / "tiny" / "L0" / demo.block_ids[0]
    panel.mkdir(parents=True)
    for k in range(2):  # not in the warm cache: the first run embeds them
        (panel / f"{k:02d}.jpg").write_bytes(jpeg_bytes(100 + k, size=(96, 64)))
    _evaluate(tmp_path / "gen", tmp_path / "a", warm_demo_cache)
    _evaluate(tmp_path / "gen", tmp_path / "b", warm_demo_cache)  # every embedding from the cache now
    first = json.loads((tmp_path / "a" / "run.json").read_text())
    second = json.loads((tmp_path / "b" / "run.json").read_text())
    assert first["embedding_stats"]["computed"] > 0 and second["embedding_stats"]["computed"] == 0
    # the precision torch had is recorded only when something was computed: the two run.json differ there
    assert first["encoder"]["config"]["float32_precision"] != second["encoder"]["config"]["float32_precision"]
    assert (tmp_path / "a" / "results.csv").read_bytes() == (tmp_path / "b" / "results.csv").read_bytes()
    assert validate_results_folder(tmp_path / "a").run_id == validate_results_folder(tmp_path / "b").run_id
    # and another result is another run
    rows = (tmp_path / "b" / "results.csv").read_text().splitlines()
    (tmp_path / "b" / "results.csv").write_text("\n".join(rows[:-1]) + "\n")
    assert validate_results_folder(tmp_path / "a").run_id != validate_results_folder(tmp_path / "b").run_id
