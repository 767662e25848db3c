import json
import os
import subprocess
import sys

import pytest

from geofidelity_bench.cli import main


def _run(*args):
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "geofidelity_bench.cli", *args], capture_output=True, text=True,
                          env=env)


def test_info_prints_demo_summary_offline():
    res = _run("info")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for needle in ("blocks      7", "lund_seg1", "berlin_am_lustgarten", "Am Lustgarten", "negatives coverage",
                   "same_city 6/7", "world pool  71 images"):
        assert needle in out, needle


def test_info_json(capsys):
    assert main(["info", "--benchmark", "demo", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["n_blocks"] == 7 and summary["n_references"] == 41


def test_every_subcommand_has_help():
    from geofidelity_bench.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert "info" in sub.choices
    for name in sub.choices:
        res = _run(name, "--help")
        assert res.returncode == 0 and "usage:" in res.stdout, name


def test_bad_benchmark_is_a_clean_error():
    res = _run("info", "--benchmark", "/definitely/not/here")
    assert res.returncode == 2
    assert "error:" in res.stderr and "Traceback" not in res.stderr


def test_prompts_command_refuses_unknown_names(capsys):
    assert main(["prompts", "--conditions", "L1"]) == 0
    captured = capsys.readouterr()
    rows = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["block_id"] for r in rows] == ["berlin_am_lustgarten"]
    assert "refused: L1 for 6 of 7 block(s)" in captured.err
    assert main(["prompts", "--conditions", "L1", "--verbose"]) == 0
    assert "lund_seg2" in capsys.readouterr().err


# -- errors: one base class for user errors, bugs keep their traceback ---------------------------


def test_a_user_error_from_deep_in_the_library_is_one_line_and_exit_2(tmp_path):
    from geofidelity_bench.benchmark import load_benchmark
    from geofidelity_bench.errors import GeoFidelityError
    from geofidelity_bench.evaluation import EvaluationError, read_generated_folder

    missing = tmp_path / "no_such_folder"
    # What the library itself says about this input (raised three calls below the command).
    with pytest.raises(EvaluationError) as err:
        read_generated_folder(missing, load_benchmark("demo"))
    expected = str(err.value)
    assert str(missing) in expected and isinstance(err.value, GeoFidelityError) and isinstance(err.value, ValueError)

    res = _run("evaluate", "--generated", str(missing), "--out", str(tmp_path / "out"), "--encoder",
               "efficientnet-lite0", "--no-gaas", "--no-cache")
    assert res.returncode == 2
    assert res.stderr == f"geofidelity-bench evaluate: error: {expected}\n"
    assert "Traceback" not in res.stderr and res.stdout == ""


def test_an_unknown_encoder_is_a_library_error_printed_cleanly(capsys):
    from geofidelity_bench.encoders import EncoderOptionError, get_encoder

    with pytest.raises(EncoderOptionError) as err:
        get_encoder("no-such-encoder")
    expected = str(err.value)
    assert "no-such-encoder" in expected and isinstance(err.value, ValueError)
    assert main(["embed", "--encoder", "no-such-encoder", "--no-cache"]) == 2
    assert capsys.readouterr().err == f"geofidelity-bench embed: error: {expected}\n"


def test_a_plain_value_error_from_a_bug_is_not_dressed_up_as_a_user_error(monkeypatch, capsys):
    import geofidelity_bench.benchmark

    def buggy(*args, **kwargs):
        raise ValueError("bug")

    monkeypatch.setattr(geofidelity_bench.benchmark, "load_benchmark", buggy)
    with pytest.raises(ValueError, match="^bug$"):
        main(["info"])
    assert "error: bug" not in capsys.readouterr().err


def test_every_library_error_is_a_geofidelity_error_and_keeps_its_historical_base():
    from geofidelity_bench.benchmark import BenchmarkError
    from geofidelity_bench.cli._common import CLIError
    from geofidelity_bench.clip_alignment import ClipAlignmentError
    from geofidelity_bench.curation import CurationError
    from geofidelity_bench.demo_app.results import ResultsError
    from geofidelity_bench.demo_app.uploads import UploadError
    from geofidelity_bench.encoders import EncoderOptionError, EncoderUnavailableError
    from geofidelity_bench.errors import GeoFidelityError
    from geofidelity_bench.evaluation import EvaluationError
    from geofidelity_bench.generation.registry import GeneratorError
    from geofidelity_bench.geodiv.questions import QuestionBankError
    from geofidelity_bench.geodiv.vqa import VQAUnavailableError
    from geofidelity_bench.hub import DatasetBuildError, HubPushError
    from geofidelity_bench.images import ImageDecodeError
    from geofidelity_bench.prompts import PromptError
    from geofidelity_bench.release_import import ReleaseImportError
    from geofidelity_bench.report import ReportError
    from geofidelity_bench.segmentation import LabelMismatchError, SegmenterUnavailableError, UnknownSegmenterError

    value_errors = [BenchmarkError, ClipAlignmentError, ResultsError, UploadError, EncoderOptionError,
                    EvaluationError, GeneratorError, QuestionBankError, DatasetBuildError, ImageDecodeError,
                    PromptError, ReleaseImportError, ReportError, LabelMismatchError, UnknownSegmenterError]
    runtime_errors = [CurationError, EncoderUnavailableError, VQAUnavailableError, HubPushError,
                      SegmenterUnavailableError]
    for cls in value_errors + runtime_errors + [CLIError]:
        assert issubclass(cls, GeoFidelityError), cls
    for cls in value_errors:
        assert issubclass(cls, ValueError), cls
    for cls in runtime_errors:
        assert issubclass(cls, RuntimeError), cls


# -- what the commands print (issue 18, CLI tidying) -----------------------------------------------


def test_list_models_prints_every_source_whole(capsys):
    from geofidelity_bench.generation.registry import REGISTRY

    assert main(["generate", "--list-models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in lines[1:]}
    for key in REGISTRY.keys():
        spec = REGISTRY.get(key)
        assert spec.source in rows[key].split(), (key, rows[key])  # the tiny factory path was cut at 44 chars
        assert rows[key].rstrip().endswith(str(spec.vram))
    # The columns line up: the header's "steps" ends where every row's step count ends.
    end = lines[0].index("steps") + len("steps")
    assert all(rows[k][:end].rstrip().endswith(str(REGISTRY.get(k).steps)) for k in rows)


def test_demo_comes_first_and_demo_and_evaluate_say_what_they_write():
    from geofidelity_bench.cli import build_parser

    top = build_parser().format_help()
    commands = [line.split()[0] for line in top.split("COMMAND\n", 1)[1].splitlines()
                if line.startswith("    ") and not line.startswith("     ")]
    assert commands.index("demo") == 0 and commands.index("evaluate") == 1, commands
    for name, needles in (("demo", ("results.csv", "run.json", "report.md")),
                          ("evaluate", ("results.csv", "summary_*.csv", "run.json"))):
        res = _run(name, "--help")
        description = res.stdout.split("\n\n")[1]  # the paragraph between usage and the options
        assert not description.lstrip().startswith(("options:", "-h")), name
        assert all(n in description for n in needles), (name, description)


def test_build_dataset_prints_one_summary_line(tmp_path, capsys):
    assert main(["build-dataset", "demo", "--out", str(tmp_path / "ds")]) == 0
    out = capsys.readouterr().out
    summaries = [line for line in out.splitlines() if "blocks" in line and "references" in line and "world" in line]
    assert len(summaries) == 1, out
    assert "blocks 7" in summaries[0] and "references 41" in summaries[0] and "world 71" in summaries[0]


def test_prompts_summarizes_refusals_per_condition_and_lists_them_with_verbose(capsys):
    from geofidelity_bench.benchmark import load_benchmark
    from geofidelity_bench.prompts import CONDITIONS, PromptError, build_prompt

    bench = load_benchmark("demo")
    refused = {}
    for cond in CONDITIONS:
        for block_id in bench.block_ids:
            try:
                build_prompt(bench, block_id, cond)
            except PromptError:
                refused.setdefault(cond, []).append(block_id)
    assert sum(map(len, refused.values())) > 20  # the demo knows street names only for Berlin
    assert main(["prompts", "--benchmark", "demo"]) == 0
    err = capsys.readouterr().err.splitlines()
    lines = [x for x in err if x.startswith("refused: ")]
    assert [x.split()[1] for x in lines] == list(refused)  # one line per refusing condition, in order
    for line, (cond, blocks) in zip(lines, refused.items()):
        assert f"refused: {cond} for {len(blocks)} of {len(bench.block_ids)} block(s): " in line
        assert "none will be invented" in line or "need a donor" in line
    assert any("--verbose" in x for x in err)
    assert main(["prompts", "--benchmark", "demo", "--verbose"]) == 0
    verbose = [x for x in capsys.readouterr().err.splitlines() if x.startswith("refused: ")]
    assert len(verbose) == sum(map(len, refused.values()))
