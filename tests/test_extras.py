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


def _setup_cfg():
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    return cfg


def test_the_extras_installed_here_accept_every_pillow_the_core_accepts():
    """`pip install -e .` then `pip install -e ".[all,test]"` must not change Pillow (13.0.0 -> 12.3.0
    once did: gradio caps it): the core's Pillow range lies inside every extra package's own range."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement

    cfg = _setup_cfg()
    core = [Requirement(line) for line in cfg["options"]["install_requires"].split("\n") if line.strip()
            and not line.strip().startswith("#")]
    core_pillow = next(r.specifier for r in core if r.name.lower() == "pillow")
    extra_pkgs = {Requirement(line).name for line in cfg["options.extras_require"]["all"].split("\n") if line.strip()}
    candidates = [f"{major}.{minor}.0" for major in range(10, 16) for minor in range(4)]
    checked = 0
    for pkg in sorted(extra_pkgs):
        try:
            deps = requires(pkg) or []
        except PackageNotFoundError:
            continue
        for dep in map(Requirement, deps):
            if dep.name.lower() != "pillow" or (dep.marker is not None and "extra" in str(dep.marker)):
                continue
            checked += 1
            refused = [v for v in candidates if v in core_pillow and v not in dep.specifier]
            assert not refused, (f"{pkg} needs pillow{dep.specifier}, but the core allows {refused}: "
                                 "cap pillow in setup.cfg's install_requires the same way")
    if not checked:
        pytest.skip("no installed extra package constrains Pillow")


def test_the_encoder_config_records_the_pillow_version_outside_the_hash():
    """Decoding can change with Pillow: its version is written next to every number, but (like the
    device) left out of the hash, so that submissions made with another Pillow stay comparable."""
    import PIL

    from geofidelity_bench.encoders import get_encoder
    from geofidelity_bench.encoders.base import hash_config

    enc = get_encoder("efficientnet-lite0", device="cpu")
    cfg = enc.config
    assert cfg["pillow"] == PIL.__version__
    assert hash_config(cfg) == enc.config_hash  # recorded config -> the same hash
    assert hash_config(dict(cfg, pillow="1.0.0")) == enc.config_hash
    assert hash_config(dict(cfg, dtype="bfloat16")) != enc.config_hash  # what it computes is hashed
