"""Which images GeoDiv looks at, and their grouping labels.

* Generated panels: a folder ``{method}/{condition}/{block_id}/NN.jpg`` (what ``generate``
  writes); labels ``model`` (= the method folder), ``method``, ``condition``, ``block_id`` and
  the block's ``city`` and ``country`` from the benchmark.
* The real-image baseline: the benchmark's reference photos (``model = "real_references"``,
  the block's ``block_id``, ``city``, ``country``; an image assigned to several blocks is taken
  once, with its lowest ``reference_id``) and its ``world`` pool (``model = "real_world"``, the
  photo's own ``city`` (a town name, not a benchmark city) and ``country``).
* A plain folder of photos grouped by label: ``DIR/{label}/*.jpg`` (``label``; ``origin``
  ``"folder"``).

Every image carries ``origin`` (``"generated"``, ``"real"`` or ``"folder"``);
:func:`keep_sources_apart` adds it to a grouping that would otherwise pool images of
different origins in one group.
"""

from __future__ import annotations

import os
from pathlib import Path

from typing import Sequence

from ..benchmark import Benchmark
from ..errors import GeoFidelityError
from ..evaluation import IMAGE_SUFFIXES, read_generated_folder
from .pipeline import GeoDivImage

REAL_REFERENCES = "real_references"
REAL_WORLD = "real_world"
#: The grouping column that keeps generated, real and folder images apart.
ORIGIN = "origin"


class GeoDivInputError(GeoFidelityError, ValueError):
    """A folder of images that GeoDiv cannot read as documented (the message names the paths)."""


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
                        "city": block.city, "country": block.country, "source": "generated", ORIGIN: "generated"},
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
                    "block_id": block.block_id, "city": block.city, "country": block.country, "source": "references",
                    ORIGIN: "real"},
        ))
    if world:
        for img in benchmark.world:
            out.append(GeoDivImage(
                name=f"world:{img.image_id}", source=img.image_bytes,
                labels={"model": REAL_WORLD, "method": REAL_WORLD, "condition": "real", "block_id": None,
                        "city": img.city, "country": img.country, "source": "world", ORIGIN: "real"},
            ))
    return out


def labelled_folder_images(folder: str | os.PathLike) -> list[GeoDivImage]:
    """Every photo of ``folder/{label}/NAME.jpg`` (``.jpeg``, ``.png``, ``.webp``), labelled ``label``.

    Hidden files are skipped. Anything else (files at the top level, folders inside a label
    folder, other file types, a label folder without photos) is an error that lists them all.

    Raises:
        GeoDivInputError: the folder is missing, empty, or holds something else than label folders of photos.
    """
    root = Path(folder)
    if not root.is_dir():
        raise GeoDivInputError(f"--labelled-images {root}: not a folder (expected {root}/{{label}}/*.jpg)")
    out, problems = [], []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith("."):
            continue
        if not entry.is_dir():
            problems.append(f"{entry}: a file outside any label folder")
            continue
        photos, n_problems = [], len(problems)
        for f in sorted(entry.iterdir()):
            if f.name.startswith("."):
                continue
            if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES:
                photos.append(f)
            else:
                problems.append(f"{f}: not a photo ({'/'.join(IMAGE_SUFFIXES)} files only, no subfolders)")
        if not photos and len(problems) == n_problems:
            problems.append(f"{entry}: a label folder without photos")
        for f in photos:
            out.append(GeoDivImage(name=f.relative_to(root).as_posix(), source=str(f),
                                   labels={"label": entry.name, "source": "folder", ORIGIN: "folder"}))
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        raise GeoDivInputError(f"--labelled-images {root} must hold only {{label}}/ folders of photos:\n  "
                               + "\n  ".join(shown))
    if not out:
        raise GeoDivInputError(f"--labelled-images {root} holds no label folder of photos ({root}/{{label}}/*.jpg)")
    return out


def keep_sources_apart(
    images: Sequence[GeoDivImage], group_by: Sequence[str], *, pool: bool = False
) -> tuple[list[str], dict]:
    """The grouping to use, so that no group mixes images of different ``origin``, and what was done.

    When a group under ``group_by`` would hold images of more than one origin (generated and real
    photos under ``--group-by country``), ``origin`` is put first in the grouping, unless ``pool``
    is true (then the groups mix them, and the record says so).

    Returns:
        (grouping columns, record): the record has ``origins`` (images per origin), ``mixed``
        (whether ``group_by`` alone mixes origins), ``kept_apart``, ``group_by_given`` and ``note``.
    """
    keys = list(group_by)
    origins: dict[str, int] = {}
    per_group: dict[tuple, set] = {}
    for img in images:
        origin = img.labels.get(ORIGIN)
        origins[str(origin)] = origins.get(str(origin), 0) + 1
        per_group.setdefault(tuple(img.labels.get(k) for k in keys), set()).add(origin)
    mixed = any(len(v) > 1 for v in per_group.values())
    record = {"origins": origins, "mixed": mixed, "group_by_given": keys, "pooled": bool(pool and mixed)}
    if mixed and not pool and ORIGIN not in keys:
        keys = [ORIGIN, *keys]
        record["note"] = (f"images of different origins ({', '.join(sorted(origins))}) are kept apart: grouped by "
                          f"{' / '.join(keys)} (--pool-sources pools them)")
    elif mixed and pool:
        record["note"] = (f"groups pool images of different origins ({', '.join(sorted(origins))}), as asked "
                          "(--pool-sources)")
    else:
        record["note"] = None
    record["kept_apart"] = not record["pooled"]
    record["group_by"] = keys
    return keys, record
