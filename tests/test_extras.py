"""A missing optional dependency is a one-line error naming the extra to install (simulated by
``sys.modules[name] = None`` in a fresh interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from geofidelity_bench.errors import GeoFidelityError
from geofidelity_bench.extras import MissingExtraError, require

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT, HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("module, call, extra", [
    ("diffusers", "from geofidelity_bench.generation.tiny import build_tiny_pipeline; build_tiny_pipeline()", "gen"),
    ("evaluate", "from geofidelity_bench.metric_module import load_metric; load_metric()", "metric"),
    ("pyproj", "from geofidelity_bench.curation.filters import local_projection; local_projection(52.5, 13.4)",
     "curate"),
])
def test_missing_module_names_its_extra(module, call, extra):
    r = _run(f"import sys; sys.modules[{module!r}] = None\nfrom geofidelity_bench.extras import MissingExtraError\n"
             f"try:\n    {call}\nexcept MissingExtraError as e:\n    print('ERR', e)\n")
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert line.startswith("ERR ") and "\n" not in line
    assert f'pip install "geofidelity-bench[{extra}]"' in line and repr(module) in line


def test_cli_prints_one_line_and_exits_2(tmp_path):
    r = _run("import sys; sys.modules['diffusers'] = None\nfrom geofidelity_bench.cli import main\n"
             f"sys.exit(main(['generate', '--model', 'tiny', '--conditions', 'L0', '--out', {str(tmp_path / 'g')!r}]))")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert 'pip install "geofidelity-bench[gen]"' in r.stderr + r.stdout


def test_require_keeps_other_import_errors_and_is_a_geofidelity_error():
    assert issubclass(MissingExtraError, GeoFidelityError) and issubclass(MissingExtraError, ImportError)
    with pytest.raises(MissingExtraError, match=r"geofidelity-bench\[app\]"):
        require("no_such_module_for_the_test", "app")
    assert require("json").__name__ == "json"
