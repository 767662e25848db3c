"""The README's offline recipes (section "Offline recipes") run as written.

Each code block after a ``<!-- recipe: NAME -->`` line is run, the blocks of one NAME in order,
in an empty folder with ``HF_HUB_OFFLINE=1``: ``python`` blocks with this interpreter, ``bash``
blocks with ``bash -e``, where ``geofidelity-bench`` and ``python`` are this environment's. The only
change made to a block is the port of the Hub in the ``hub-endpoint`` recipe (the README's
127.0.0.1:8765 becomes the free port of a loopback fake Hub started here). The embedding cache
(``GEOFIDELITY_CACHE``, outside the folder) is empty, except for the ``clip`` recipe: there it starts
with the demo's efficientnet-lite0 embeddings (conftest ``warm_demo_cache``), as after a first run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
README_PORT = "127.0.0.1:8765"
_BLOCK = re.compile(r"^<!-- recipe: ([\w-]+) -->\n```(bash|python)\n(.*?)^```$", re.M | re.S)


def recipes() -> dict[str, list[tuple[str, str]]]:
    """NAME -> [(language, code), ...] in README order."""
    out: dict[str, list[tuple[str, str]]] = {}
    for name, language, code in _BLOCK.findall((REPO / "README.md").read_text(encoding="utf-8")):
        out.setdefault(name, []).append((language, code))
    return out


def test_every_model_family_has_a_recipe():
    found = recipes()
    assert {"vqa-plugin", "mfp", "clip", "segmenter", "hub-endpoint"} <= set(found), sorted(found)
    marks = (REPO / "README.md").read_text(encoding="utf-8").count("<!-- recipe:")
    assert marks == sum(len(v) for v in found.values()), "a recipe mark not followed by a bash/python block"


def _bin_dir(tmp: Path) -> Path:
    """A folder for PATH: this interpreter as ``python`` and the ``geofidelity-bench`` command."""
    bin_dir = tmp / "_bin"
    bin_dir.mkdir()
    python = bin_dir / "python"  # a wrapper, not a link: a venv's interpreter finds its packages by its own path
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    installed = Path(sys.executable).with_name("geofidelity-bench")
    cli = bin_dir / "geofidelity-bench"
    if installed.is_file():  # the console script pip installed (it runs with this interpreter)
        cli.symlink_to(installed)
    else:  # the same entry point
        cli.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m geofidelity_bench.cli "$@"\n')
        cli.chmod(0o755)
    return bin_dir


def _run_recipe(name: str, tmp: Path, substitute: dict[str, str] | None = None, cache: Path | None = None) -> str:
    work = tmp / "work"
    work.mkdir()
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp / "hf"),
               GEOFIDELITY_CACHE=str(cache or tmp / "cache"), MPLBACKEND="Agg", GRADIO_ANALYTICS_ENABLED="False",
               PATH=f"{_bin_dir(tmp)}{os.pathsep}{env.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p))
    env.pop("HF_ENDPOINT", None)
    output = []
    for language, code in recipes()[name]:
        for old, new in (substitute or {}).items():
            code = code.replace(old, new)
        cmd = [sys.executable, "-c", code] if language == "python" else ["bash", "-e", "-o", "pipefail", "-c", code]
        run = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, f"recipe {name} ({language}) failed:\n{code}\n--- stdout\n{run.stdout[-3000:]}" \
                                    f"\n--- stderr\n{run.stderr[-5000:]}"
        output.append(run.stdout)
    return "\n".join(output)


def test_vqa_plugin_recipe(tmp_path):
    _run_recipe("vqa-plugin", tmp_path)
    out = tmp_path / "work" / "geodiv_run"
    written = {p.name for p in out.iterdir()}
    assert any(n.endswith(".csv") for n in written) and any(n.endswith(".json") for n in written), written
    text = " ".join(p.read_text(errors="replace") for p in out.iterdir() if p.suffix in (".json", ".csv"))
    assert "my-vqa" in text  # the plugin's own config is what the answers are recorded under


def test_mfp_recipe(tmp_path):
    _run_recipe("mfp", tmp_path)
    rows = pd.read_csv(tmp_path / "work" / "mfp_run" / "mfp.csv")
    assert len(rows) == 3 and rows["global_score"].notna().all()
    assert "tiny-dino" in (tmp_path / "work" / "mfp_run" / "summary.json").read_text()


def test_clip_recipe(tmp_path, warm_demo_cache):
    _run_recipe("clip", tmp_path, cache=warm_demo_cache)
    found = sorted((tmp_path / "work" / "results").rglob("clip_alignment*.csv"))
    assert found, sorted(p.name for p in (tmp_path / "work" / "results").iterdir())
    rows = pd.read_csv(found[0])
    assert len(rows) >= 1 and set(rows["block_id"]) == {"berlin_am_lustgarten"}  # the demo's one L1 block


def test_segmenter_recipe(tmp_path):
    _run_recipe("segmenter", tmp_path)
    shares = pd.read_parquet(tmp_path / "work" / "shares.parquet")
    assert len(shares) == 41 and "tier4_pass" in shares.columns  # every reference photo of the demo


def test_hub_endpoint_recipe(tmp_path):
    sys.path.insert(0, str(REPO / "tests"))
    try:
        from fake_hub import FakeHub
    finally:
        sys.path.remove(str(REPO / "tests"))
    with FakeHub() as hub:
        host = hub.url.split("://", 1)[1].rstrip("/")
        out = _run_recipe("hub-endpoint", tmp_path, substitute={README_PORT: host})
        assert ("dataset", "tester/geofidelity-bench") in hub.repos or any(
            "geofidelity-bench" in repo for _, repo in hub.repos)
        downloads = [path for method, path, status in hub.requests if "/resolve/" in path and status == 200]
    assert "blocks      7" in out and out.rstrip().splitlines()[-1] == "7"
    assert any(p.endswith(".parquet") for p in downloads), downloads  # the benchmark came from that Hub
    json.dumps(downloads)
