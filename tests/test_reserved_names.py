"""The anchor and sanity method names are reserved (issue 29, section 1): a generated method named
``heldout_real`` (or ``random_global``, ...) was averaged with the real anchor; in a pushed results
folder it gave two rows with the same label. evaluate, generate, import-release and push-results
refuse them, naming the reserved set."""

from __future__ import annotations

import csv
import shutil

import pandas as pd
import pytest

from geofidelity_bench import load_benchmark, record_checks, stats
from geofidelity_bench.cli import main
from geofidelity_bench.evaluation import (ANCHOR_CONDITION, ANCHOR_METHODS, EvaluationError, anchor_panels,
                                          evaluate_panels, read_generated_folder, sanity_panels)
from geofidelity_bench.hub.results_repo import SubmissionError, validate_results_folder
from geofidelity_bench.release_import import import_release

try:
    from test_leaderboard_hub import make_results
    from test_release_import import fx
except ImportError:  # tests/ imported as a package
    from tests.test_leaderboard_hub import make_results
    from tests.test_release_import import fx

RESERVED_SET = "heldout_real, random_same_country, random_global, sanity_augmented_heldout, sanity_world"


@pytest.fixture(scope="module")
def demo():
    return load_benchmark("demo")


def test_the_reserved_set_is_the_evaluations_own_method_names(demo):
    """RESERVED_METHODS is listed once; it must agree with the names the evaluation gives its rows."""
    anchors = {(m, c) for m, c, _ in anchor_panels(demo)}
    sanity = {(m, c) for m, c, _ in sanity_panels(demo)}
    assert anchors == {(m, "anchor") for m in record_checks.ANCHOR_METHODS}
    assert sanity == {(m, "sanity") for m in record_checks.SANITY_METHODS}
    assert ANCHOR_METHODS == stats.ANCHOR_METHODS == record_checks.ANCHOR_METHODS
    assert stats.SANITY_METHODS == record_checks.SANITY_METHODS
    assert (ANCHOR_CONDITION, stats.SANITY_CONDITION) == (record_checks.ANCHOR_CONDITION,
                                                          record_checks.SANITY_CONDITION)
    assert set(record_checks.RESERVED_METHODS) == {m for m, _ in anchors | sanity}
    for method, condition in anchors | sanity:  # the evaluation's own rows pass
        assert record_checks.reserved_method_problem(method, condition) is None
        assert RESERVED_SET in record_checks.reserved_method_problem(method)
        assert record_checks.reserved_method_problem(method, "L1") is not None
    assert record_checks.reserved_method_problem("Heldout_Real", "anchor") is not None  # same label, other case
    assert record_checks.reserved_method_problem("sdxl", "anchor") is not None  # a generator posing as an anchor
    assert record_checks.reserved_method_problem("sdxl") is None and record_checks.reserved_method_problem("sdxl", "L1") is None


@pytest.mark.parametrize("method", ["heldout_real", "random_global", "sanity_world", "HELDOUT_REAL"])
def test_evaluate_refuses_a_method_folder_with_a_reserved_name(demo, tmp_path, capsys, method):
    panel = tmp_path / "gen" / method / "L1" / "lund_seg1"
    panel.mkdir(parents=True)
    for k in range(2):
        (panel / f"{k:02d}.jpg").write_bytes(demo.world[k].image_bytes)
    with pytest.raises(EvaluationError) as err:
        read_generated_folder(tmp_path / "gen", demo)
    assert f"method name {method!r} is reserved" in str(err.value) and RESERVED_SET in str(err.value)
    out = tmp_path / "out"
    assert main(["evaluate", "--benchmark", "demo", "--generated", str(tmp_path / "gen"), "--out", str(out),
                 "--encoder", "efficientnet-lite0", "--no-progress"]) == 2
    err_text = capsys.readouterr().err
    assert "is reserved" in err_text and RESERVED_SET in err_text and "Traceback" not in err_text
    assert not out.exists()


def test_evaluate_panels_refuses_a_reserved_method_under_another_condition(demo):
    panels = {("heldout_real", "L1", "lund_seg1"): [demo.world[0].image_bytes, demo.world[1].image_bytes],
              ("sdxl", "anchor", "lund_seg1"): [demo.world[0].image_bytes, demo.world[1].image_bytes]}
    with pytest.raises(EvaluationError) as err:
        evaluate_panels(demo, panels, encoder=None, progress=False)
    assert "'heldout_real' is reserved" in str(err.value) and "condition 'anchor' is reserved" in str(err.value)


@pytest.mark.parametrize("model", ["random_global=tiny", "sanity_augmented_heldout=tiny"])
def test_generate_refuses_a_model_with_a_reserved_name(tmp_path, capsys, model):
    out = tmp_path / "gen"
    assert main(["generate", "--model", model, "--benchmark", "demo", "--conditions", "L0", "--out", str(out),
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"--model {model.split('=')[0]}" in err and RESERVED_SET in err
    assert not out.exists()


def test_run_generation_refuses_a_model_with_a_reserved_name(demo, tmp_path):
    from geofidelity_bench.generation.registry import GeneratorError
    from geofidelity_bench.generation.runner import run_generation

    out = tmp_path / "gen"
    with pytest.raises(GeneratorError, match="'heldout_real'") as err:
        run_generation(demo, ["heldout_real=tiny"], ["L0"], out, images_per_block=1, progress=False)
    assert RESERVED_SET in str(err.value)
    assert not out.exists()


def test_import_release_skips_a_model_with_a_reserved_name_and_says_so(tmp_path):
    release = tmp_path / "release"
    fx.write_release_fixture(release)
    path = release / "metadata" / "generated_images.csv"
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    renamed = 0
    for row in rows:
        if row["model"] == "flux_schnell":
            row["model"], renamed = "heldout_real", renamed + 1
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    report = import_release(release, tmp_path / "out", log=lambda m: None)
    reserved = [i for i in report.issues if i.kind == "reserved_model"]
    assert len(reserved) == renamed > 0 and all(i.action == "skipped" for i in reserved)
    assert RESERVED_SET in reserved[0].reason
    generations = [p.name for p in (tmp_path / "out").rglob("*") if p.is_dir()]
    assert "heldout_real" not in generations and "sdxl" in generations


def test_push_results_refuses_generator_rows_named_like_an_anchor(tmp_path):
    folder = make_results(tmp_path / "ok", seed=1, sanity=True)
    assert validate_results_folder(folder).run_id  # evaluate's own anchor and sanity rows are fine

    def rename(df, info):
        df.loc[df["method"] == "gen_a", "method"] = "heldout_real"
        return df, info

    folder = make_results(tmp_path / "bad", seed=1, extra=rename)
    rows = pd.read_csv(folder / "results.csv")
    assert {"heldout_real/L1", "heldout_real/anchor"} <= set(rows["method"] + "/" + rows["condition"])
    with pytest.raises(SubmissionError) as err:
        validate_results_folder(folder)
    text = str(err.value)
    assert "heldout_real/L1" in text and "heldout_real/C_WRONG_STREET" in text and RESERVED_SET in text
    assert "heldout_real/anchor" not in text


def test_the_cli_push_results_refuses_before_any_upload(tmp_path, capsys):
    def rename(df, info):
        df.loc[df["method"] == "gen_a", "method"] = "random_same_country"
        return df, info

    folder = make_results(tmp_path / "bad", seed=1, extra=rename)
    # no Hub is reachable: the refusal comes from the validation that runs first
    assert main(["push-results", str(folder), "--repo-id", "tester/results", "--endpoint", "http://127.0.0.1:9"]) == 2
    err = capsys.readouterr().err
    assert "'random_same_country' is reserved" in err and "Traceback" not in err
    shutil.rmtree(folder)
