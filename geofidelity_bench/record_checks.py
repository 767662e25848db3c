"""Field checks of benchmark rows (docs/benchmark.md section 1, Domain and split: Validation on load).

Every block and every reference is checked on load, so that no score, prompt or map is ever
computed from an impossible value:

* coordinates finite and on Earth (lat in [-90, 90], lon in [-180, 180]): a block's
  ``centroid``, every ``polyline`` point and both ``bbox`` corners; a reference's ``lat`` and
  ``lon`` when present (each is nullable);
* ``length_m`` finite and positive;
* ids and keys (``reference_id``, ``image_id``, ``city``, ``country``, the negatives) non-empty
  and free of control characters (line breaks, tabs, NUL, ...).

Each function returns the problems as ``"field: why"`` strings (empty when the row is fine);
:class:`geofidelity_bench.benchmark.Benchmark` turns the first one into a ``BenchmarkError``
naming the block or reference. Rows are taken as plain objects with the dataclass fields, so
this module imports nothing from the package but :mod:`geofidelity_bench.geo`.
"""

from __future__ import annotations

import math
import numbers
import unicodedata
from typing import Any, Sequence

from .geo import coordinate_problem

#: Unicode categories never allowed in an id: control characters and line/paragraph separators.
_BAD_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})


def id_problem(value: Any) -> str | None:
    """Why ``value`` is not a usable id (empty, not a string, a control character), or None."""
    if not isinstance(value, str):
        return f"{value!r} is not a string"
    if not value.strip():
        return "is empty"
    bad = sorted({c for c in value if unicodedata.category(c) in _BAD_CATEGORIES})
    if bad:
        return f"{value!r} contains control character(s) {', '.join(repr(c) for c in bad)}"
    return None


def _point_problem(field: str, point: Any) -> str | None:
    try:
        lat, lon = point
    except (TypeError, ValueError):
        return f"{field}: {point!r} is not a [lat, lon] pair"
    why = coordinate_problem(lat, lon)
    return f"{field}: {why}" if why else None


def _id_fields(row: Any, required: Sequence[str], optional: Sequence[str] = ()) -> list[str]:
    """``"field: why"`` for every id field that is not a usable id (``optional`` ones may be None)."""
    values = [(name, getattr(row, name)) for name in required]
    values += [(name, getattr(row, name)) for name in optional if getattr(row, name) is not None]
    return [f"{name}: {why}" for name, value in values if (why := id_problem(value))]


def block_problems(block: Any) -> list[str]:
    """Problems of one block's fields (``"field: why"``), empty when it is valid."""
    problems = _id_fields(block, ("city", "country"),
                          ("neg_same_neighborhood", "neg_same_city", "neg_same_driving_side", "neg_random_city"))
    why = _point_problem("centroid", block.centroid)
    if why:
        problems.append(why)
    if len(block.polyline) == 0:
        problems.append("polyline: has no points")
    for i, point in enumerate(block.polyline):
        why = _point_problem(f"polyline[{i}]", point)
        if why:
            problems.append(why)
            break
    bbox = tuple(block.bbox)
    if len(bbox) != 4:
        problems.append(f"bbox: {bbox!r} does not have 4 values [min_lat, min_lon, max_lat, max_lon]")
    else:
        for corner, point in (("min", bbox[0:2]), ("max", bbox[2:4])):
            why = _point_problem(f"bbox ({corner} corner)", point)
            if why:
                problems.append(why)
    length = block.length_m
    if isinstance(length, bool) or not isinstance(length, numbers.Real) or not math.isfinite(length) or length <= 0:
        problems.append(f"length_m: {length!r} is not a finite positive length in metres")
    return problems


def reference_problems(ref: Any) -> list[str]:
    """Problems of one reference's fields (``"field: why"``), empty when it is valid."""
    problems = _id_fields(ref, ("reference_id", "image_id"))
    if ref.lat is not None or ref.lon is not None:  # each is nullable on its own; a present one must be valid
        why = coordinate_problem(0.0 if ref.lat is None else ref.lat, 0.0 if ref.lon is None else ref.lon)
        if why:
            problems.append(f"lat/lon: {why}")
    return problems


__all__ = ["block_problems", "id_problem", "reference_problems"]
