"""Real multi-process and crash runs of ``geofidelity-bench generate`` (subprocesses, CPU, gloo).

* ``accelerate launch --multi_gpu --num_processes 2`` (on a CPU-only machine accelerate falls
  back to 2 CPU processes; note that ``--cpu --num_processes 2`` would start only one);
* ``torchrun --nproc_per_node 2``, resuming a folder a one-process run half filled;
* a run killed with SIGKILL midway, then resumed.

Each must end with exactly the files of an uninterrupted one-process run.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from geofidelity_bench import load_benchmark
from geofidelity_bench.generation.manifest import journal_files, load_manifest
from geofidelity_bench.generation.runner import UNIT_DELAY_ENV, run_generation
from multiprocess_helpers import ROOT, all_files, free_port, jpg_hashes, process_env, stable_manifest

CONDITIONS = ["L0", "GPS_ONLY", "L1"]
N = 2


def env(**extra: str) -> dict[str, str]:
    return process_env(**extra)


def generate_args(out: Path, conditions=CONDITIONS, n: int = N) -> list[str]:
    return ["generate", "--model", "tiny", "--conditions", *conditions, "--images-per-block", str(n),
            "--out", str(out), "--no-progress"]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """One uninterrupted single-process run on the CPU (in this process unless a GPU is visible)."""
    import torch

    out = tmp_path_factory.mktemp("baseline")
    if torch.cuda.is_available():
        cmd = [sys.executable, "-m", "geofidelity_bench.cli", *generate_args(out)]
        subprocess.run(cmd, cwd=ROOT, env=env(), check=True, capture_output=True, timeout=240)
    else:
        quiet = dict(progress=False, log=lambda m: None)
        run_generation(load_benchmark("demo"), ["tiny"], CONDITIONS, out, images_per_block=N, **quiet)
    return out


def _check_two_processes(out: Path, stdout: str) -> None:
    df = load_manifest(out)
    assert set(df["process_index"]) == {0, 1}, "both processes must have generated images"
    assert set(df["num_processes"]) == {2}
    assert "[rank 0/2]" in stdout and "[rank 1/2]" in stdout
    assert stdout.count("generation summary:") == 1  # only the main process merges and reports


def _only_l0(baseline):
    """The part of the baseline's files, hashes or manifest rows that a run of condition L0 alone makes
    (the other conditions' images; the top-level files and their names are the same)."""
    if isinstance(baseline, dict):
        return {p: h for p, h in baseline.items() if p.startswith("tiny/L0/")}
    if baseline and isinstance(baseline[0], dict):
        return [r for r in baseline if r["condition"] == "L0"]
    return [p for p in baseline if not p.startswith("tiny/") or p.startswith("tiny/L0/")]


@pytest.mark.slow
def test_accelerate_launch_two_processes_matches_one_process(baseline, tmp_path):
    out = tmp_path / "acc"
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()), "-m", "geofidelity_bench.cli", *generate_args(out),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _check_two_processes(out, proc.stdout)
    assert jpg_hashes(out) == jpg_hashes(baseline)
    assert stable_manifest(out) == stable_manifest(baseline)
    assert all_files(out) == all_files(baseline)


@pytest.mark.slow
def test_killed_run_resumes_to_the_uninterrupted_result(baseline, tmp_path):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "geofidelity_bench.cli", *generate_args(out, conditions=["L0"])]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env(**{UNIT_DELAY_ENV: "0.3"}), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    expected = _only_l0(jpg_hashes(baseline))
    try:
        deadline = time.monotonic() + 120
        while len(list(out.rglob("*.jpg"))) < 3:
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no image appeared in time"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    done = len(jpg_hashes(out))
    assert 3 <= done < len(expected), "the kill must land midway"
    assert not (out / "manifest.parquet").exists() and journal_files(out), "the killed run had not merged yet"

    resumed = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=240)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "already done" in resumed.stdout
    assert all_files(out) == _only_l0(all_files(baseline))  # no journal, no temp file left
    assert jpg_hashes(out) == expected
    assert stable_manifest(out) == _only_l0(stable_manifest(baseline))


@pytest.mark.slow
def test_resumed_two_process_run_splits_the_remaining_work(baseline, tmp_path):
    """First --images-per-block 1, then 2 on two processes: with all units split round-robin,
    process 0 would own only k = 0 images (all done) and sit idle at the barrier; the remaining
    work must be shared instead, within a process-group timeout shorter than the test's own (a hang
    fails rather than waits; 150 s leaves room for a loaded machine)."""
    import json

    out = tmp_path / "resumed"
    run_generation(load_benchmark("demo"), ["tiny"], ["L0"], out, images_per_block=1, progress=False,
                   log=lambda m: None)  # the first run, in this process
    done_before = set(jpg_hashes(out))
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
        "-m", "geofidelity_bench.cli", *generate_args(out, conditions=["L0"], n=2), "--dist-timeout", "150",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env(**{UNIT_DELAY_ENV: "0.5"}), capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[rank 0/2]" in proc.stdout and "[rank 1/2]" in proc.stdout
    assert proc.stdout.count("generation summary:") == 1  # only the main process merges and reports
    new = load_manifest(out)
    new = new[~new["path"].isin(done_before)]
    assert set(new["num_processes"]) == {2}
    counts = new["process_index"].value_counts().to_dict()
    assert len(new) == len(done_before) == 7
    assert set(counts) == {0, 1} and abs(counts[0] - counts[1]) <= 1, counts
    summary = json.loads((out / "generation_summary.json").read_text())
    assert summary["dist_timeout_s"] == 150.0
    assert summary["generated"] == 7 and summary["skipped"] == 7
    assert sorted(p["generated"] for p in summary["per_process"]) == [3, 4]
    assert jpg_hashes(out) == _only_l0(jpg_hashes(baseline))
    assert stable_manifest(out) == _only_l0(stable_manifest(baseline))
