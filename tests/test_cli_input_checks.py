"""User mistakes on the command line end in one line naming the problem, exit status 2, and nothing
half-written (issue 29, section 4): bad option values, an output path that is a file, a full disk
under --out, invalid repo ids, broken inputs of push-results, results.csv not in UTF-8."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from geofidelity_bench.cli import main

BATCH_SIZE_COMMANDS = ["evaluate", "demo", "audit", "embed", "segment", "generate", "mfp", "geodiv", "clip-alignment", "app"]


def _cli(*args, fsize: int | None = None, cwd=None) -> subprocess.CompletedProcess:
    """The command in a subprocess (this worktree's code: PYTHONPATH is inherited). With ``fsize``,
    files may not grow beyond that many bytes (RLIMIT_FSIZE, SIGXFSZ ignored): a write past it fails with
    EFBIG, as one on a full disk fails with ENOSPC."""

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = dict(os.environ, HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False", PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-m", "geofidelity_bench.cli", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=cwd, preexec_fn=limit if fsize else None, timeout=600)


def _error_line(stderr: str) -> str:
    """The one error line of a run that printed progress before it (the last line of stderr)."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and stderr.rstrip("\n").splitlines()[-1] == errors[0], stderr
    return errors[0]


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_batch_size_zero_is_one_line_for_every_command(tmp_path):
    value = "0"
    for command in BATCH_SIZE_COMMANDS:
        res = _cli(command, "--batch-size", value, cwd=tmp_path)
        assert res.returncode == 2, (command, res.stderr)
        line = _one_line(res.stderr)
        assert f"{command}: error: argument --batch-size: must be >= 1, got {value}" in line, line
    assert list(tmp_path.iterdir()) == []  # nothing was written


def test_every_command_with_a_batch_size_refuses_zero():
    """No command keeps a plain ``type=int`` --batch-size (a new command must use add_batch_size_arg)."""
    from geofidelity_bench.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    having = sorted(name for name, p in sub.choices.items()
                    if any("--batch-size" in a.option_strings for a in p._actions))
    assert having == sorted(BATCH_SIZE_COMMANDS)
    for name in having:
        for value in ("0", "-3", "two"):
            with pytest.raises(SystemExit) as exit_:
                sub.choices[name].parse_args(["--batch-size", value])
            assert exit_.value.code == 2


def test_evaluate_out_an_existing_file_is_refused_before_any_work(tmp_path, capsys):
    out = tmp_path / "results"
    out.write_text("my notes\n")
    # the generated folder does not even exist: the --out check comes first, before anything is read
    assert main(["evaluate", "--generated", str(tmp_path / "nope"), "--out", str(out), "--encoder",
                 "efficientnet-lite0", "--no-gaas", "--no-cache", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert _one_line(err) == (f"geofidelity-bench evaluate: error: --out {out} is a file, not a folder: give a "
                              "folder path (nothing was done)")
    assert out.read_text() == "my notes\n"
    under = out / "sub"
    assert main(["demo", "--out", str(under), "--no-gaas", "--no-cache", "--no-progress"]) == 2
    assert f"--out {under}: {out} is a file, not a folder" in _one_line(capsys.readouterr().err)


# -- a full disk under --out ---------------------------------------------------------------------------


def _panel(gen: Path, demo, method="world_photos", block="lund_seg1") -> None:
    folder = gen / method / "L0" / block
    folder.mkdir(parents=True)
    for k, img in enumerate(demo.world[:3]):
        (folder / f"{k:02d}.jpg").write_bytes(img.image_bytes)


@pytest.mark.slow
def test_evaluate_on_a_full_disk_is_one_line_and_writes_nothing(tmp_path, warm_demo_cache):
    from geofidelity_bench.benchmark import load_benchmark

    demo = load_benchmark("demo")
    gen = tmp_path / "gen"
    _panel(gen, demo)
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text("an earlier run\n")
    # the cache holds every embedding and hash this run needs (the demo's, the panel's world photos): it writes none
    args = ["evaluate", "--generated", gen, "--out", out, "--encoder", "efficientnet-lite0", "--no-anchors",
            "--no-gaas", "--cache-dir", warm_demo_cache, "--no-progress"]
    # results.csv and the summaries fit under 4 KB, run.json does not: the old writer left a new
    # results.csv without its run.json
    res = _cli(*args, fsize=4096)
    assert res.returncode == 2, res.stderr
    line = _error_line(res.stderr)
    assert line.startswith(f"geofidelity-bench evaluate: error: cannot write the results to {out}: no space left")
    assert "nothing was written there" in line
    assert sorted(p.name for p in out.iterdir()) == ["results.csv"]  # no temporary file, no partial output
    assert (out / "results.csv").read_text() == "an earlier run\n"
    fresh = tmp_path / "fresh"
    code = ("import sys, pandas as pd; from geofidelity_bench.results import write_results, ResultsFolderError\n"
            "from geofidelity_bench.evaluation import RESULT_COLUMNS\n"
            "rows = pd.DataFrame([{'method': 'm', 'condition': 'L0', 'block_id': 'b', 'n_generated': 4, "
            "'cos_sim': 0.5}]).reindex(columns=RESULT_COLUMNS)\n"
            "try:\n    write_results(sys.argv[1], rows, {'note': 'x' * 10000})\n"
            "except ResultsFolderError as err:\n    print(err)\n")
    res = subprocess.run([sys.executable, "-c", code, str(fresh)], capture_output=True, text=True,
                         preexec_fn=lambda: (signal.signal(signal.SIGXFSZ, signal.SIG_IGN),
                                             resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))))
    assert res.stdout.startswith(f"cannot write the results to {fresh}: no space left"), res.stdout + res.stderr
    assert not fresh.exists()  # the folder it would have created is not left behind, empty


@pytest.mark.slow
def test_generate_on_a_full_disk_is_one_line_and_leaves_no_partial_image(tmp_path):
    out = tmp_path / "gen"
    args = ["generate", "--model", "tiny", "--conditions", "L0", "--blocks", "lund_seg1", "--images-per-block", "2",
            "--out", out, "--no-progress"]
    res = _cli(*args, fsize=1024)  # a 512x512 JPEG does not fit
    assert res.returncode == 2, res.stderr
    line = _error_line(res.stderr)
    assert f"generate: error: cannot write to {out}: no space left" in line
    assert "run the same command again to resume" in line
    left = [p for p in out.rglob("*") if p.is_file() and p.suffix in (".jpg", ".tmp")]
    assert left == []  # no partial image, no temporary file
    assert main(list(map(str, args))) == 0  # the same command, with space (in this process), resumes and finishes
    assert sorted(p.name for p in (out / "tiny" / "L0" / "lund_seg1").iterdir()) == ["00.jpg", "01.jpg"]


# -- invalid Hub repo ids ---------------------------------------------------------------------------

try:  # the fake Hub fixtures: `online` (requests allowed, HF_TOKEN set) and `hub` (the loopback server)
    from test_generation_hub import hub, online  # noqa: F401
except ImportError:  # tests/ imported as a package
    from tests.test_generation_hub import hub, online  # noqa: F401

BAD_REPO_IDS = ["../../etc", "tester/" + "x" * 100, "tester/my repo"]


@pytest.mark.parametrize("bad", BAD_REPO_IDS)
def test_an_invalid_repo_id_is_refused_before_any_work(hub, online, tmp_path, capsys, bad):
    folder = tmp_path / "folder"
    folder.mkdir()
    out = tmp_path / "gen"
    commands = [
        ["push-dataset", folder, "--repo-id", bad],
        ["push-generations", folder, "--repo-id", bad],
        ["push-results", folder, "--repo-id", bad],
        ["push-results", folder, "--repo-id", "tester/results", "--model-card", bad],
        ["generate", "--model", "tiny", "--conditions", "L0", "--blocks", "lund_seg1", "--out", out,
         "--push-to-hub", bad],
        ["app", "--results-repo", bad],
    ]
    for args in commands:
        with pytest.raises(SystemExit) as exit_:
            main([*map(str, args), "--endpoint", hub.url])
        assert exit_.value.code == 2, args
        line = _one_line(capsys.readouterr().err)
        assert f"{args[0]}: error: argument" in line and "is not a valid Hub repo id" in line, line
        assert repr(bad[:60]) in line
    assert hub.requests == [] and not out.exists()  # nothing generated, no request made


def test_the_library_refuses_an_invalid_repo_id_before_any_request(hub, online, tmp_path):
    from geofidelity_bench.hub import push_dataset, push_generations
    from geofidelity_bench.hub.requests import RepoIdError
    from geofidelity_bench.hub.results_repo import load_submissions, push_results

    for call in (lambda: push_dataset(tmp_path, "../../etc", endpoint=hub.url),
                 lambda: push_generations(tmp_path, "../../etc", endpoint=hub.url),
                 lambda: push_results(tmp_path, "../../etc", endpoint=hub.url),
                 lambda: load_submissions("a/b/c", endpoint=hub.url)):
        with pytest.raises(RepoIdError, match=r"'(\.\./\.\./etc|a/b/c)' is not a valid Hub repo id"):
            call()
    assert hub.requests == []


# -- results.csv not in UTF-8 ---------------------------------------------------------------------


def _results_folder(path):
    try:
        from test_leaderboard_hub import make_results
    except ImportError:
        from tests.test_leaderboard_hub import make_results
    return make_results(path, seed=1)


def pin_from_results(hub, repo_id, folder):
    """The maintainer's pin of the folder's group (a results repo takes no push before it)."""
    try:
        from leaderboard_helpers import pin_from_results as pin
    except ImportError:
        from tests.leaderboard_helpers import pin_from_results as pin
    return pin(hub, repo_id, folder)


def _latin1(folder) -> Path:
    csv = folder / "results.csv"
    text = csv.read_text(encoding="utf-8").replace("rome", "Zürich", 1)
    csv.write_bytes(text.encode("latin-1"))
    return csv


def test_results_csv_not_in_utf8_is_one_line_everywhere(hub, online, tmp_path, capsys):
    folder = _results_folder(tmp_path / "r")
    csv = _latin1(folder)
    expected = f"{csv} is not UTF-8 text (byte 0xfc at line 2"
    for args in (["report", "--results", folder, "--out", tmp_path / "rep", "--no-plots"],
                 ["push-results", folder, "--repo-id", "tester/results", "--endpoint", hub.url],
                 ["app", "--results", csv, "--no-cache", "--no-progress"]):
        assert main(list(map(str, args))) == 2, args
        line = _one_line(capsys.readouterr().err)
        assert expected in line and "save the results table as UTF-8" in line, line
    assert hub.requests == [] and not (tmp_path / "rep").exists()

    from geofidelity_bench.demo_app.uploads import UploadError, read_uploaded_results

    with pytest.raises(UploadError, match="not UTF-8 text"):
        read_uploaded_results(str(csv), upload_root=tmp_path)


def test_results_csv_with_a_byte_order_mark_reads_as_without(tmp_path):
    from geofidelity_bench.results import read_results_csv

    folder = _results_folder(tmp_path / "r")
    plain = read_results_csv(folder / "results.csv")
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + (folder / "results.csv").read_bytes())
    with_bom = read_results_csv(bom)
    assert list(with_bom.columns) == list(plain.columns) and with_bom.equals(plain)


# -- push-results: NaN scores without a reason, repeated rows ------------------------------------------


def test_push_results_refuses_unexplained_nan_and_repeated_rows(hub, online, tmp_path, capsys):
    import json

    import pandas as pd

    from geofidelity_bench.hub.results_repo import validate_results_folder

    folder = _results_folder(tmp_path / "r")
    csv = folder / "results.csv"
    clean = pd.read_csv(csv, keep_default_na=False, na_values={"gaas": [""], "n_copied": [""]})
    push = ["push-results", str(folder), "--repo-id", "tester/results", "--endpoint", hub.url]

    nan = clean.copy()
    row = nan.index[(nan["method"] == "gen_a") & (nan["condition"] == "L1") & (nan["block_id"] == "b2")][0]
    nan.loc[row, "mrr"] = float("nan")
    nan.to_csv(csv, index=False)
    assert main(push) == 2
    line = _one_line(capsys.readouterr().err)
    assert (f"{csv}: 1 NaN score(s) have no reason in run.json nan_reasons, e.g. column 'mrr' in row {row + 2} "
            "(gen_a/L1/b2)") in line and "nothing was uploaded" in line
    # a column-wide reason (a record that lists no rows) explains nothing: it could blank any block
    info = json.loads((folder / "run.json").read_text())
    info["nan_reasons"] = [{"column": "mrr", "reason": "a test"}]
    (folder / "run.json").write_text(json.dumps(info))
    assert main(push) == 2
    line = _one_line(capsys.readouterr().err)
    assert "nan_reasons has a record for column 'mrr' that lists no rows" in line and "never column-wide" in line, line
    # with its reason recorded as evaluate records it, the same table is valid
    info["nan_reasons"] = [{"column": "mrr", "reason": "a test", "n_rows": 1, "rows": ["gen_a/L1/b2"]}]
    (folder / "run.json").write_text(json.dumps(info))
    assert validate_results_folder(folder).run_id

    twice = pd.concat([clean, clean.iloc[[7]]], ignore_index=True)
    twice.to_csv(csv, index=False)
    m, c, b = clean.loc[7, ["method", "condition", "block_id"]]
    assert main(push) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{csv}: 1 (method, condition, block_id) key(s) have more than one row, e.g. {m}/{c}/{b} in rows 9, " \
           f"{len(twice) + 1}" in line
    assert hub.requests == []  # nothing was uploaded, not even a repo created


# -- push-results --model-card onto a broken card ------------------------------------------------------


@pytest.mark.parametrize("card", [
    "---\nmodel-index: [\n  - name: x\n---\n# my model\n",  # YAML that does not parse
    "---\nmodel-index:\n- name: x\n  results: 5\n---\n# my model\n",  # a model-index that is not one
])
def test_push_results_with_a_broken_model_card_stops_before_the_push(hub, online, tmp_path, capsys, card):
    hub.add_files("model", "tester/my-model", {"README.md": card.encode()})
    folder = _results_folder(tmp_path / "r")
    pin_from_results(hub, "tester/results", folder)  # pinned: the push itself would be accepted
    commits = hub.commit_count("dataset", "tester/results")
    before = len(hub.requests)
    assert main(["push-results", str(folder), "--repo-id", "tester/results", "--endpoint", hub.url,
                 "--model-card", "tester/my-model"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "the model card tester/my-model/README.md cannot be updated" in line and "fix the card" in line, line
    pushed = [r for r in hub.requests[before:] if r[0] == "POST" or "datasets" in r[1]]
    assert pushed == []  # the results repo was not even looked up
    assert hub.commit_count("dataset", "tester/results") == commits
    assert hub.files("model", "tester/my-model")["README.md"] == card.encode()


# -- app --host 0.0.0.0 ---------------------------------------------------------------------------


def test_app_on_a_network_address_warns_first(tmp_path, capsys):
    from geofidelity_bench.demo_app import network_exposure_warning

    for local in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]", None):
        assert network_exposure_warning(local) is None, local
    for exposed in ("0.0.0.0", "::", "192.168.1.20", "my-host.example.org"):
        assert "reachable from the network" in network_exposure_warning(exposed, 8080), exposed
    # the command prints it before loading anything (here loading then stops at a missing --results file)
    missing = tmp_path / "nope.csv"
    assert main(["app", "--host", "0.0.0.0", "--port", "8080", "--results", str(missing), "--no-cache"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0] == ("warning: --host 0.0.0.0: the app is reachable from the network, not only from this "
                        "machine: anyone who can reach it on port 8080 can use it and upload files to it (it has "
                        "no login); use --host 127.0.0.1 to keep it local")
    assert len(lines) == 2 and str(missing) in lines[1]
    assert main(["app", "--results", str(missing), "--no-cache"]) == 2  # the default host: no warning
    assert "warning" not in capsys.readouterr().err
