"""The command line's output edges: a reader that closes the pipe early, and every command's --help text."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from geofidelity_bench.cli import BROKEN_PIPE_STATUS, build_parser


def _run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """Runs the command with its standard output a pipe whose reader is already gone (``| head -c 0``):
    every write to it fails with EPIPE, whatever the size of the output and the timing."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        return subprocess.run([sys.executable, "-m", "geofidelity_bench.cli", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    finally:
        os.close(write_end)


def _run_into_head(args: list[str], n_bytes: int) -> tuple[bytes, subprocess.CompletedProcess]:
    """``geofidelity-bench ARGS | head -c N``: read N bytes, close the pipe, let the command go on writing."""
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, "-m", "geofidelity_bench.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    head = proc.stdout.read(n_bytes)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=300)
    return head, subprocess.CompletedProcess(proc.args, proc.returncode, None, err)


@pytest.mark.parametrize("args", [["prompts"], ["info", "--json"]], ids=["prompts", "info-json"])
def test_a_closed_pipe_ends_quietly_with_the_sigpipe_status(args):
    res = _run_into_closed_pipe(*args)
    assert "Traceback" not in res.stderr and "BrokenPipeError" not in res.stderr, res.stderr
    assert "Exception ignored" not in res.stderr, res.stderr
    assert res.returncode == BROKEN_PIPE_STATUS == 141, (res.returncode, res.stderr)


def test_head_gets_the_first_bytes_and_no_traceback():
    head, res = _run_into_head(["info", "--json"], 100)
    assert head.startswith(b"{") and len(head) == 100  # what the reader wanted came through
    assert "Traceback" not in res.stderr and "BrokenPipeError" not in res.stderr, res.stderr
    # 0 when the whole output fitted into the pipe before head closed it, else the SIGPIPE status
    assert res.returncode in (0, BROKEN_PIPE_STATUS), (res.returncode, res.stderr)


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_subcommand_has_a_description_in_its_help():
    """``geofidelity-bench COMMAND --help`` says what the command does, not only its options."""
    commands = _subcommands()
    assert {"segment", "info", "prompts", "embed", "push-generations", "push-dataset"} <= set(commands)
    missing = [name for name, p in commands.items() if not (p.description or "").strip()]
    assert not missing, f"no description in --help: {missing}"
    for name, p in commands.items():
        text = p.format_help()
        paragraph = text.split("\n\n")[1]  # the paragraph between usage and the options
        assert not paragraph.lstrip().startswith(("options:", "positional arguments:")), name
        assert len(p.description.split()) >= 12, (name, p.description)  # a sentence, not a label


_EXIT_PROBE = """
import atexit, sys
atexit.register(lambda: print("finalized", flush=True))
sys.argv = ["geofidelity-bench", *sys.argv[1:]]
from geofidelity_bench.cli import run
run()
"""


@pytest.mark.parametrize("world_size, finalized", [(None, True), ("1", True), ("2", False)])
@pytest.mark.parametrize("args, status, shown", [(["prompts", "--blocks", "lund_seg1"], 0, "lund_seg1"),
                                                 (["no-such-command"], 2, "invalid choice")],
                         ids=["success", "usage-error"])
def test_a_launched_process_skips_finalization_and_keeps_its_status_and_output(world_size, finalized, args, status,
                                                                               shown):
    # one of several launched processes (WORLD_SIZE > 1) leaves with os._exit: atexit handlers (and
    # gloo's threads at interpreter finalization) never run, yet the status and every line are kept
    env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
    env.update(HF_HUB_OFFLINE="1", **({"WORLD_SIZE": world_size} if world_size else {}))
    done = subprocess.run([sys.executable, "-c", _EXIT_PROBE, *args], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == status, done.stderr
    assert shown in done.stdout + done.stderr
    assert ("finalized" in done.stdout) == finalized
