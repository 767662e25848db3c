#!/usr/bin/env python
"""Writes the repository's copies of the files published to the Hub from their one source.

Usage:
    python scripts/sync_published_files.py           # rewrite what is out of date
    python scripts/sync_published_files.py --check   # exit 1 and list what is out of date

Each file published to the Hub has one source, shipped inside the package:

- the ``evaluate`` module ``geofidelity_bench/evaluate_module/geofidelity/geofidelity.py``
  -> ``metric_card/geofidelity/geofidelity.py`` (the metric Space);
- the dataset card template and license ``geofidelity_bench/hub/dataset_card/{README,LICENSE}.md``
  -> ``dataset_builder/{README,LICENSE}.md`` (what ``dataset_builder/build.py`` uses);
- the citation ``geofidelity_bench.citation.CITATION_MARKDOWN`` -> the ``## Citation`` section of
  every card and README listed in :data:`CITED`.

Copies are written byte for byte; a citation section is replaced whole (the fenced BibTeX
block after the ``## Citation`` heading). ``tests/test_published_files.py`` runs
:func:`expected_files` and fails when a committed file differs from it.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from geofidelity_bench.citation import CITATION_MARKDOWN  # noqa: E402

PACKAGE = ROOT / "geofidelity_bench"

#: copy in the repository -> its source in the package
COPIES = {
    "metric_card/geofidelity/geofidelity.py": "geofidelity_bench/evaluate_module/geofidelity/geofidelity.py",
    "dataset_builder/README.md": "geofidelity_bench/hub/dataset_card/README.md",
    "dataset_builder/LICENSE.md": "geofidelity_bench/hub/dataset_card/LICENSE.md",
}

#: Markdown files whose ``## Citation`` section is CITATION_MARKDOWN (sources; copies follow them).
CITED = (
    "geofidelity_bench/hub/dataset_card/README.md",
    "metric_card/geofidelity/README.md",
    "spaces_app/README.md",
    "README.md",
)

_SECTION = re.compile(r"^## Citation[ \t]*\n\s*```bibtex\n.*?^```[ \t]*$", re.S | re.M)


def with_citation(text: str) -> str:
    """``text`` whose ``## Citation`` section holds exactly CITATION_MARKDOWN (appended if absent)."""
    section = f"## Citation\n\n{CITATION_MARKDOWN}"
    if _SECTION.search(text):
        return _SECTION.sub(lambda _: section, text, count=1)
    return f"{text.rstrip()}\n\n{section}\n"


def expected_files(root: Path = ROOT) -> dict[str, bytes]:
    """Every file this script manages (path relative to ``root``) with the bytes it should hold."""
    out: dict[str, bytes] = {}
    for rel in CITED:
        out[rel] = with_citation((root / rel).read_text(encoding="utf-8")).encode("utf-8")
    for copy, source in COPIES.items():
        out[copy] = out[source] if source in out else (root / source).read_bytes()
    return out


def stale_files(root: Path = ROOT) -> list[str]:
    """The managed files whose content differs from :func:`expected_files` (or that are missing)."""
    return [
        rel for rel, data in expected_files(root).items()
        if not (root / rel).is_file() or (root / rel).read_bytes() != data
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only list out-of-date files (exit 1 if any)")
    args = parser.parse_args(argv)
    stale = stale_files(ROOT)
    if args.check:
        for rel in stale:
            print(f"out of date: {rel}")
        return 1 if stale else 0
    expected = expected_files(ROOT)
    for rel in stale:
        target = ROOT / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(expected[rel])
        print(f"wrote {rel}")
    if not stale:
        print("every published file is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
