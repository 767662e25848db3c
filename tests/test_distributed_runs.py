"""Runs that span processes and machines (issue 30, section 2), all real, on the CPU with gloo:

* a failure in one process of ``generate`` ends every process at once, with that process's error;
* ``embed --dist-timeout`` bounds how long a process waits for the others (here: for one that
  never comes, so the process group cannot form);
* ``accelerate launch --cpu`` is honoured, and ``generate --device`` exists;
* ``generate`` and ``embed`` as two machines on loopback (two ``accelerate launch
  --num_machines 2`` side by side, one shared output folder and one shared cache folder) equal a
  one-process run, and a run killed on one machine resumes to the same files.

The processes of the failure and timeout tests are started the way ``srun`` starts one task per
process (``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` in the environment, no launcher agent), so each
process's exit status and message can be read on its own: under ``torchrun`` the agent kills the
others as soon as one exits, which would hide what they would have done on their own.
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from geofidelity_bench import load_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.encoders.base import EncoderOptionError
from geofidelity_bench.encoders.devices import launcher_wants_cpu, pick_device, process_group_on_cpu
from geofidelity_bench.generation.manifest import journal_files, load_manifest
from geofidelity_bench.generation.runner import UNIT_DELAY_ENV, run_generation
from multiprocess_helpers import ROOT, all_files, free_port, jpg_hashes, kill_tree, process_env, stable_manifest

pytest.importorskip("accelerate")

SCRIPTS = Path(__file__).parent / "scripts"
PY = sys.executable


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return process_env(tmp_path / "hf-home", **extra)


def rank_env(tmp_path: Path, rank: int, world: int, port: int, **extra: str) -> dict[str, str]:
    """What ``srun`` + a job script give each task: its rank and where the main process listens."""
    return env(tmp_path, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **extra)


def wait_all(procs: list[subprocess.Popen], timeout: float) -> list[str]:
    """Each process's combined output once all have ended (all are killed when one overruns)."""
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                kill_machine(p)
                p.wait()
    return outputs


kill_machine = kill_tree


def start(cmd: list[str], environ: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group: a "machine" can be killed whole


# --- a failure in one process ------------------------------------------------------------------


@pytest.mark.slow
def test_a_failing_process_ends_every_process_with_its_error(tmp_path):
    """Process 1's generator raises on its first image; process 0 has 14 images to make at 0.5 s
    each. Before, process 0 made all of them and then failed at the barrier with "Connection closed
    by peer" (gloo) or waited for the timeout (NCCL); now it stops after its current image and both
    end with process 1's error, long before the 300 s process-group timeout."""
    out, port = tmp_path / "gen", free_port()
    args = ["-m", "geofidelity_bench.cli", "generate", "--plugin", str(SCRIPTS / "gen_failing_plugin.py"),
            "--model", "failing_on_rank1", "--conditions", "L0", "--images-per-block", "4", "--out", str(out),
            "--no-progress", "--dist-timeout", "300"]
    procs = [start([PY, *args], rank_env(tmp_path, r, 2, port, **{UNIT_DELAY_ENV: "0.5"})) for r in range(2)]
    outputs = wait_all(procs, timeout=120)  # far below --dist-timeout: a wait at a barrier would overrun it
    failure = "RuntimeError: the failing plugin's process 1 cannot paint this image"
    assert procs[1].returncode == 1 and failure in outputs[1], outputs[1][-3000:]  # its own error, with traceback
    assert procs[0].returncode == 2, outputs[0][-3000:]  # one line (a GeoFidelityError), naming process 1's error
    assert f"error: process 1 of 2 failed with {failure}" in outputs[0], outputs[0][-3000:]
    assert "Connection closed by peer" not in outputs[0]
    made = load_manifest_rows(out)
    assert 1 <= len(made) < 14, "process 0 stops early (and keeps what it made)"
    assert {r["process_index"] for r in made} == {0}
    for row in made:  # what was kept is whole: a resume will skip exactly these
        assert hashlib.sha256((out / row["path"]).read_bytes()).hexdigest() == row["sha256"]


def load_manifest_rows(out: Path) -> list[dict]:
    """The rows recorded so far (merged manifest and every process's journal)."""
    from geofidelity_bench.generation.manifest import read_all_rows

    return list(read_all_rows(out)) if out.exists() else []


def made_by_process(out: Path, index: int) -> bool:
    return any(r.get("process_index") == index for r in load_manifest_rows(out))


# --- embed --dist-timeout ----------------------------------------------------------------------


def test_embed_dist_timeout_bounds_the_wait_for_a_process_that_never_comes(tmp_path):
    """Process 0 of 2 alone: with the 4 h default it would wait 4 h for process 1 to join; with
    ``--dist-timeout 3`` the process group gives up after about 3 s and the command ends with a
    one-line error that says so (the same timeout bounds every later barrier of the run)."""
    cmd = [PY, "-m", "geofidelity_bench.cli", "embed", "--encoder", "efficientnet-lite0", "--no-cache",
           "--dist-timeout", "3"]
    proc = subprocess.run(cmd, cwd=ROOT, env=rank_env(tmp_path, 0, 2, free_port()), capture_output=True, text=True,
                          timeout=150)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    error = [line for line in proc.stderr.splitlines() if line.startswith("geofidelity-bench embed: error:")]
    assert len(error) == 1, proc.stderr[-2000:]
    assert "could not form their process group" in error[0] and "within 3 s (--dist-timeout)" in error[0]
    assert "1/2 clients joined" in error[0]  # torch's own words: the store waited for the missing process


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_dist_timeout_must_be_a_positive_number_of_seconds(value, tmp_path, capsys):
    assert main(["embed", "--encoder", "efficientnet-lite0", "--no-cache", "--dist-timeout", value]) == 2
    assert "--dist-timeout must be a finite number of seconds > 0" in capsys.readouterr().err
    assert main(["generate", "--model", "tiny", "--out", str(tmp_path / "g"), "--dist-timeout", value]) == 2
    assert "--dist-timeout must be a finite number of seconds > 0" in capsys.readouterr().err
    assert not (tmp_path / "g").exists()


# --- accelerate launch --cpu, generate --device ------------------------------------------------


def test_accelerate_cpu_flag_is_read_as_accelerate_writes_it():
    assert launcher_wants_cpu({"ACCELERATE_USE_CPU": "True"})  # accelerate launch --cpu writes str(True)
    assert launcher_wants_cpu({"ACCELERATE_USE_CPU": "1"}) and launcher_wants_cpu({"ACCELERATE_USE_CPU": "yes"})
    assert not launcher_wants_cpu({"ACCELERATE_USE_CPU": "False"})  # every other accelerate launch
    assert not launcher_wants_cpu({})


def test_launcher_cpu_flag_puts_the_process_group_and_the_models_on_the_cpu():
    """On a machine with GPUs: the process group was NCCL on the GPUs whatever --cpu said."""
    assert process_group_on_cpu(True, cuda_available=True)
    assert not process_group_on_cpu(False, cuda_available=True)
    assert process_group_on_cpu(False, cuda_available=False)
    assert pick_device(None, cuda_count=2, local_rank=1, world_size=2, cpu_only=True) == "cpu"
    assert pick_device(None, cuda_count=2, local_rank=1, world_size=2) == "cuda:1"
    assert pick_device("cpu", cuda_count=2, cpu_only=True) == "cpu"
    with pytest.raises(EncoderOptionError, match="accelerate launch --cpu"):
        pick_device("cuda:0", cuda_count=2, cpu_only=True)


@pytest.mark.slow
def test_accelerate_launch_cpu_reaches_generate(tmp_path):
    """The real launcher's flag reaches the command: ``--device cuda`` under ``accelerate launch
    --cpu`` is refused in one line before anything is generated (on any machine)."""
    out = tmp_path / "gen"
    cmd = [PY, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "1", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "geofidelity_bench.cli", "generate",
           "--model", "tiny", "--conditions", "L0", "--images-per-block", "1", "--device", "cuda", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env(tmp_path), capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0
    assert "geofidelity-bench generate: error: device 'cuda' asked for, but this process was started by " \
           "`accelerate launch --cpu`" in proc.stderr, proc.stderr[-2000:]
    assert not list(out.rglob("*.jpg"))


def test_generate_device_option(tmp_path, capsys):
    out = tmp_path / "gen"
    assert main(["generate", "--model", "tiny", "--conditions", "L0", "--images-per-block", "1", "--blocks",
                 "lund_seg1", "--device", "cpu", "--out", str(out), "--no-progress"]) == 0
    assert set(load_manifest(out)["device"]) == {"cpu"}
    assert main(["generate", "--model", "tiny", "--conditions", "L0", "--device", "warp-drive",
                 "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("geofidelity-bench generate: error: unknown device 'warp-drive'")
    assert not (tmp_path / "bad").exists()


# --- two machines on loopback -------------------------------------------------------------------

BLOCKS = ["arezzo_park_path", "berlin_am_lustgarten", "lund_seg1"]
GEN_ARGS = ["generate", "--model", "tiny", "--conditions", "L0", "--images-per-block", "2",
            "--blocks", *BLOCKS, "--no-progress", "--dist-timeout", "60"]


def two_machines(tmp_path: Path, command: list[str], **extra: str) -> list[subprocess.Popen]:
    """Two ``accelerate launch --num_machines 2`` started side by side, one process each: what two
    nodes of a cluster run (``--machine_rank`` 0 and 1, the main process's address and port)."""
    port = free_port()
    procs = []
    for machine in range(2):
        cmd = [PY, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "2", "--machine_rank",
               str(machine), "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
               "--num_processes", "2", "--mixed_precision", "no", "--dynamo_backend", "no",
               "-m", "geofidelity_bench.cli", *command]
        procs.append(start(cmd, env(tmp_path, **extra)))
    return procs


@pytest.fixture(scope="module")
def tiny_dinov2_dir(tmp_path_factory) -> Path:
    import torch
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(0)
    model = Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                     image_size=224, patch_size=14)).eval()
    path = tmp_path_factory.mktemp("tiny-dinov2")
    model.save_pretrained(path)
    return path


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_machines_equal_one_process_and_a_killed_machine_resumes(tmp_path, tiny_dinov2_dir):
    shared = tmp_path / "shared"  # what a shared filesystem gives both machines
    out, cache = shared / "gen", shared / "cache"

    # generate: machine 1 is killed midway (SIGKILL to its whole launch), machine 0 then fails
    procs = two_machines(tmp_path, [*GEN_ARGS, "--out", str(out)], **{UNIT_DELAY_ENV: "0.5"})
    try:
        deadline = time.monotonic() + 180
        while not made_by_process(out, 1):
            assert procs[1].poll() is None, "machine 1 ended before it could be killed"
            assert time.monotonic() < deadline, "machine 1 made no image in time"
            time.sleep(0.1)
        kill_machine(procs[1])
    finally:
        outputs = wait_all(procs, timeout=180)
    assert procs[1].returncode == -signal.SIGKILL
    assert procs[0].returncode != 0, outputs[0][-3000:]  # its process lost the other machine's
    assert not (out / "manifest.parquet").exists() and journal_files(out)
    kept = load_manifest_rows(out)  # the images whose row reached a journal before the kill
    assert 0 < len(kept) < 2 * len(BLOCKS), "the kill lands midway"

    # both machines again: the remaining images are made, nothing is made twice
    procs = two_machines(tmp_path, [*GEN_ARGS, "--out", str(out)])
    outputs = wait_all(procs, timeout=240)
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    assert "generation summary:" in outputs[0] and "generation summary:" not in outputs[1]
    assert f"{len(kept)} already done" in outputs[0]  # kept, not made again

    baseline = tmp_path / "one-process"
    run_generation(load_benchmark("demo"), ["tiny"], ["L0"], baseline, images_per_block=2,
                   block_ids=BLOCKS, progress=False, log=lambda m: None)
    assert jpg_hashes(out) == jpg_hashes(baseline)
    assert stable_manifest(out) == stable_manifest(baseline)
    assert all_files(out) == all_files(baseline)  # no journal, no temporary file left
    made_by = load_manifest(out)
    assert set(made_by["process_index"]) == {0, 1} and set(made_by["num_processes"]) == {2}

    # embed: both machines write to one cache; the main one writes the Parquet file
    emb_args = ["embed", "--encoder", "dinov2-base", "--encoder-weights", str(tiny_dinov2_dir), "--batch-size", "4",
                "--no-progress", "--num-workers", "0"]
    procs = two_machines(tmp_path, [*emb_args, "--cache-dir", str(cache), "--out", str(shared / "emb.parquet")])
    outputs = wait_all(procs, timeout=240)
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one process alone, in this one, with the launched processes' OMP_NUM_THREADS=1
    try:
        assert main([*emb_args, "--no-cache", "--out", str(tmp_path / "emb1.parquet")]) == 0
    finally:
        torch.set_num_threads(threads)
    two, one = pq.read_table(shared / "emb.parquet").to_pydict(), pq.read_table(tmp_path / "emb1.parquet").to_pydict()
    assert two["id"] == one["id"] and len(one["id"]) == len(load_benchmark("demo").references)
    np.testing.assert_array_equal(np.asarray(two["embedding"], dtype=np.float32),
                                  np.asarray(one["embedding"], dtype=np.float32))
    writers = {p.name.split("-")[2] for p in cache.rglob("shard-*.safetensors")}
    assert len(writers) == 2, "each machine computed and cached its share"
