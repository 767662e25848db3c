import json
import os
import subprocess
import sys

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
    assert "lund_seg2" in captured.err
