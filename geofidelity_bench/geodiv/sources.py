"""Which images GeoDiv looks at, and their grouping labels.

* Generated panels: a folder ``{method}/{condition}/{block_id}/NN.jpg`` (what ``generate``
  writes); labels ``model`` (= the method folder), ``method``, ``condition``, ``block_id`` and
  the block's ``city`` and ``country`` from the benchmark.
* The real-image baseline: the benchmark's reference photos (``model = "real_references"``,
  the block's ``block_id``, ``city``, ``country``; an image assigned to several blocks is taken
  once, with its lowest ``reference_id``) and its ``world`` pool (``model = "real_world"``, the
  photo's own ``city`` (a town name, not a benchmark city) and ``country``).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..benchmark import Benchmark
from ..evaluation import read_generated_folder
from .pipeline import GeoDivImage

REAL_REFERENCES = "real_references"
REAL_WORLD = "real_world"


def generated_images(
    folder: str | os.PathLike, benchmark: Benchmark, *, methods=None, conditions=None
) -> list[GeoDivImage]:
    """Every image of a generated folder, labelled from its path and its block.

    Raises:
        EvaluationError: unknown blocks, misplaced files, an empty folder (all listed).
    """
    root = Path(folder)
    panels = read_generated_folder(root, benchmark, methods=methods, conditions=conditions, min_images=1)
    out = []
    for (method, condition, block_id), files in sorted(panels.items()):
        block = benchmark.block(block_id)
        for f in files:
            out.append(GeoDivImage(
                name=Path(f).relative_to(root).as_posix(), source=str(f),
                labels={"model": method, "method": method, "condition": condition, "block_id": block_id,
                        "city": block.city, "country": block.country, "source": "generated"},
            ))
    return out


def reference_images(benchmark: Benchmark, *, world: bool = True) -> list[GeoDivImage]:
    """The benchmark's own photos as a real-image baseline (references, then the world pool)."""
    out, seen = [], set()
    for ref in benchmark.references:  # sorted by reference_id
        if ref.image_id in seen:
            continue
        seen.add(ref.image_id)
        block = benchmark.block(ref.block_id)
        out.append(GeoDivImage(
            name=f"reference:{ref.reference_id}", source=ref.image_bytes,
            labels={"model": REAL_REFERENCES, "method": REAL_REFERENCES, "condition": "real",
                    "block_id": block.block_id, "city": block.city, "country": block.country, "source": "references"},
        ))
    if world:
        for img in benchmark.world:
            out.append(GeoDivImage(
                name=f"world:{img.image_id}", source=img.image_bytes,
                labels={"model": REAL_WORLD, "method": REAL_WORLD, "condition": "real", "block_id": None,
                        "city": img.city, "country": img.country, "source": "world"},
            ))
    return out
