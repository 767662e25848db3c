"""Every file published to the Hub has one source in the package, and one citation circulates.

The repository's copies (``metric_card/geofidelity/geofidelity.py``, ``dataset_builder/``) must
be what ``python scripts/sync_published_files.py`` writes from the package, and every card,
README, module and app text that cites the paper must carry exactly
:data:`geofidelity_bench.citation.CITATION_BIBTEX`.
"""

from __future__ import annotations

import configparser
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from geofidelity_bench.citation import CITATION_BIBTEX, CITATION_MARKDOWN

ROOT = Path(__file__).resolve().parents[1]
ENTRY = re.compile(r"@\w+\s*\{")


def _script():
    spec = importlib.util.spec_from_file_location("sync_published_files", ROOT / "scripts" / "sync_published_files.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_citation_matches_the_paper():
    # Hand-checked against the paper (arXiv:2606.23669, one author, no venue yet: a preprint).
    fields = dict(re.findall(r"^\s+(\w+)\s+=\s+\{(.*)\},?$", CITATION_BIBTEX, re.M))
    assert CITATION_BIBTEX.startswith("@article{tan2026geofidelitybench,\n") and CITATION_BIBTEX.endswith("}\n")
    assert fields == {
        "title": "GeoFidelity-Bench: Evaluating Block-Conditioned Geographic Fidelity in Text-to-Image Street-View Generation",
        "author": "Tan, Kaizhen",
        "journal": "arXiv preprint arXiv:2606.23669",
        "year": "2026",
        "url": "https://arxiv.org/abs/2606.23669",
    }


def test_repository_copies_are_current():
    script = _script()
    stale = script.stale_files(ROOT)
    assert not stale, f"out of date: {stale}; run: python scripts/sync_published_files.py"
    expected = script.expected_files(ROOT)
    for copy, source in script.COPIES.items():
        assert (ROOT / copy).read_bytes() == (ROOT / source).read_bytes() == expected[copy], copy


def test_sync_script_rewrites_a_stale_copy_and_a_stale_citation(tmp_path):
    script = _script()
    for rel in {*script.COPIES, *script.COPIES.values(), *script.CITED}:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes((ROOT / rel).read_bytes())
    (tmp_path / "dataset_builder" / "LICENSE.md").write_text("edited by hand\n")
    old = "```bibtex\n@misc{old,\n  title = {Old}\n}\n```"
    (tmp_path / "spaces_app" / "README.md").write_text("# Space\n\n## Citation\n\n" + old + "\n\nAfter.\n")
    (tmp_path / "README.md").write_text("# Repo\n")
    assert sorted(script.stale_files(tmp_path)) == ["README.md", "dataset_builder/LICENSE.md", "spaces_app/README.md"]
    expected = script.expected_files(tmp_path)
    assert expected["spaces_app/README.md"].decode() == "# Space\n\n## Citation\n\n" + CITATION_MARKDOWN + "\n\nAfter.\n"
    assert expected["README.md"].decode() == "# Repo\n\n## Citation\n\n" + CITATION_MARKDOWN + "\n"
    assert expected["dataset_builder/LICENSE.md"] == (ROOT / "geofidelity_bench/hub/dataset_card/LICENSE.md").read_bytes()


def test_published_sources_ship_as_package_data():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    patterns = cfg["options.package_data"]["geofidelity_bench"].split()
    for source in _script().COPIES.values():
        rel = Path(source).relative_to("geofidelity_bench").as_posix()
        assert any(Path(rel).match(p) or rel == p for p in patterns), rel


def _tracked_text_files() -> list[Path]:
    try:
        names = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / n for n in names if n.endswith((".md", ".py", ".txt", ".yaml", ".cfg")) and not n.startswith("tests/")]


def test_every_bibtex_entry_in_the_repository_is_the_citation():
    found = 0
    for path in _tracked_text_files():
        if not path.is_file() or path == ROOT / "geofidelity_bench" / "citation.py":
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        entries = len(ENTRY.findall(text))
        assert entries == text.count(CITATION_BIBTEX), f"{path.relative_to(ROOT)} cites something else"
        found += entries
    assert found >= 5  # dataset card + its copy, metric card, Space README, README


def test_every_published_text_carries_the_citation():
    from geofidelity_bench.demo_app.texts import about_markdown

    for rel in _script().CITED:
        assert (ROOT / rel).read_text(encoding="utf-8").count(CITATION_MARKDOWN) == 1, rel
    assert about_markdown().count(CITATION_MARKDOWN) == 1
    for module in ("geofidelity_bench/evaluate_module/geofidelity/geofidelity.py", "dataset_builder/builder.py"):
        text = (ROOT / module).read_text(encoding="utf-8")
        assert "\n_CITATION = CITATION_BIBTEX\n" in text and "from geofidelity_bench.citation import" in text, module


def test_built_dataset_card_carries_the_citation(tmp_path):
    from geofidelity_bench.hub import build_dataset

    report = build_dataset("demo", tmp_path / "built", log=lambda m: None)
    card = (report.out / "README.md").read_text(encoding="utf-8")
    assert card.count(CITATION_MARKDOWN) == 1 and len(ENTRY.findall(card)) == 1
    license_text = (report.out / "LICENSE.md").read_bytes()
    assert license_text == (ROOT / "geofidelity_bench" / "hub" / "dataset_card" / "LICENSE.md").read_bytes()


def test_sync_check_exits_zero_when_current():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "sync_published_files.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_citation_docstring_examples_run():
    import doctest

    from geofidelity_bench import citation

    result = doctest.testmod(citation)
    assert result.attempted > 0 and result.failed == 0
