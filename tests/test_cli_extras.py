"""The README's first hour after a core-only install: every command's `--help` works, the core
commands run, and a command that needs an extra ends in one line naming it (exit status 2).

The extras are hidden in a fresh interpreter (``sys.modules[name] = None``: ``import name`` then
fails as if it were not installed, and ``importlib.util.find_spec(name)`` says it is absent).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The top-level modules of every extra (setup.cfg's gen, app, metric, curate).
HIDDEN = ("diffusers", "accelerate", "gradio", "gradio_client", "evaluate", "shapely", "pyproj", "osmium",
          "sentencepiece")
PRELUDE = ("import sys\n"
           f"for _name in {HIDDEN!r}:\n"
           "    sys.modules[_name] = None\n")


def _run(code: str, cwd: Path, **env) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                    HF_HUB_OFFLINE="1", GEOFIDELITY_CACHE=str(cwd / "cache"), **env)
    return subprocess.run([sys.executable, "-c", PRELUDE + code], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=300)


def test_every_commands_help_and_the_core_commands_work_without_the_extras(tmp_path):
    code = (
        "import contextlib, io, json\n"
        "from geofidelity_bench.cli import build_parser, main\n"
        "parser = build_parser()\n"
        "commands = sorted(parser._subparsers._group_actions[0].choices)\n"
        "codes = {}\n"
        "for cmd in commands:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        try:\n"
        "            codes[cmd] = main([cmd, '--help'])\n"
        "        except SystemExit as e:\n"
        "            codes[cmd] = e.code\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    codes['info --benchmark demo'] = main(['info', '--benchmark', 'demo'])\n"
        "    codes['prompts --benchmark demo'] = main(['prompts', '--benchmark', 'demo', '--conditions', 'L0'])\n"
        "print(json.dumps(codes))\n"
    )
    r = _run(code, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    codes = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(codes) > 15 and {"generate", "app", "curate", "carve", "demo", "evaluate"} <= set(codes)
    assert all(c == 0 for c in codes.values()), {k: v for k, v in codes.items() if v != 0}


def _osm_xml(path: Path) -> Path:
    path.write_text('<?xml version="1.0"?><osm version="0.6"></osm>', encoding="utf-8")
    return path


@pytest.mark.parametrize("argv, extra", [
    # the README's next step after the first command (once a traceback from accelerate)
    (["generate", "--model", "tiny", "--conditions", "L0", "--images-per-block", "1", "--out", "gen"], "gen"),
    (["app", "--port", "0"], "app"),
    (["carve", "--osm-file", "{osm}", "--city", "berlin", "--release-rules", "--out", "blocks.parquet"], "curate"),
    (["curate", "--cities", "berlin", "--osm-file", "berlin={osm}", "--skip-tier3", "--skip-tier4", "--out", "cur"],
     "curate"),
])
def test_a_command_without_its_extra_ends_in_one_line_naming_it(tmp_path, argv, extra):
    osm = _osm_xml(tmp_path / "empty.osm")
    argv = [a.replace("{osm}", str(osm)) for a in argv]
    r = _run(f"from geofidelity_bench.cli import main\nsys.exit(main({argv!r}))", tmp_path, MAPILLARY_TOKEN="test")
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-3000:])
    assert "Traceback" not in r.stderr
    ours = [line for line in r.stderr.splitlines() if line.startswith("geofidelity-bench ")]
    assert len(ours) == 1, r.stderr
    assert ours[0].startswith(f"geofidelity-bench {argv[0]}: error: ")
    assert f'geofidelity-bench[{extra}]' in ours[0], ours[0]
    assert not (tmp_path / "cur").exists() and not (tmp_path / "blocks.parquet").exists()


def test_missing_extra_turns_only_an_absent_optional_module_into_the_line():
    from geofidelity_bench.extras import MissingExtraError, missing_extra

    err = missing_extra(ModuleNotFoundError("No module named 'accelerate'", name="accelerate"), "generate")
    assert isinstance(err, MissingExtraError)
    assert str(err).startswith("generate needs the optional package 'accelerate'") and "[gen]" in str(err)
    assert missing_extra(ModuleNotFoundError("No module named 'numpy'", name="numpy")) is None  # a core package
    assert missing_extra(ImportError("cannot import name 'x' from 'accelerate'", name="accelerate")) is None
