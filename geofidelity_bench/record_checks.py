"""Field checks of benchmark rows (docs/benchmark.md section 1, Domain and split: Validation on load).

Every block and every reference is checked on load, so that no score, prompt or map is ever
computed from an impossible value:

* coordinates finite and on Earth (lat in [-90, 90], lon in [-180, 180]): a block's
  ``centroid``, every ``polyline`` point and both ``bbox`` corners; a reference's ``lat`` and
  ``lon`` when present (each is nullable);
* ``length_m`` finite and positive;
* ids and keys (``reference_id``, ``image_id``, ``city``, ``country``, the negatives) non-empty
  and free of control characters (line breaks, tabs, NUL, ...).

It also holds the method names that the evaluation gives to its own rows (docs/benchmark.md
section 6, Real-image anchors; the demo's sanity methods): :data:`RESERVED_METHODS`. A generator,
a generated folder, an imported release or a submitted row may not use them, or its scores
would be averaged with (or listed under the same label as) the anchors
(:func:`reserved_method_problem`).

Each function returns the problems as ``"field: why"`` strings (empty when the row is fine);
:class:`geofidelity_bench.benchmark.Benchmark` lists every one in a single ``BenchmarkError``
naming the block or reference. Rows are taken as plain objects with the dataclass fields, so
this module imports nothing from the package but :mod:`geofidelity_bench.geo`.
"""

from __future__ import annotations

import math
import numbers
import unicodedata
from typing import Any, Iterable, Sequence

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


# -- reserved method names ---------------------------------------------------------------------------

#: The condition of the real-image anchors' rows, and of the demo's sanity methods' rows.
ANCHOR_CONDITION = "anchor"
SANITY_CONDITION = "sanity"
#: The three real-image anchors (docs/benchmark.md section 6), scored under :data:`ANCHOR_CONDITION`.
ANCHOR_METHODS = ("heldout_real", "random_same_country", "random_global")
#: The demo's two sanity methods, scored under :data:`SANITY_CONDITION`.
SANITY_METHODS = ("sanity_augmented_heldout", "sanity_world")
#: Method names only the evaluation itself may give, each with its own condition.
RESERVED_METHODS = ANCHOR_METHODS + SANITY_METHODS
_OWN_CONDITION = {**{m: ANCHOR_CONDITION for m in ANCHOR_METHODS}, **{m: SANITY_CONDITION for m in SANITY_METHODS}}


def reserved_method_problem(name: Any, condition: str | None = None) -> str | None:
    """Why ``name`` cannot be the name of a generated method (a generator, a method folder, a
    submitted row), or None when it can.

    The names of :data:`RESERVED_METHODS` are refused in any letter case (``Heldout_Real`` would
    be listed beside ``heldout_real`` under the same label). With ``condition``, a row the
    evaluation itself wrote (an anchor method under ``anchor``, a sanity method under
    ``sanity``) is fine; a reserved method under any other condition, or any other method under
    ``anchor`` or ``sanity``, is not.

    >>> reserved_method_problem("sdxl") is None, reserved_method_problem("heldout_real", "anchor") is None
    (True, True)
    >>> reserved_method_problem("random_global", "L1").split(";")[0]
    "method name 'random_global' is reserved for the evaluation's own rows"
    """
    text = str(name)
    own = next((m for m in RESERVED_METHODS if m == text.casefold()), None)
    if own is None:
        if condition in (ANCHOR_CONDITION, SANITY_CONDITION):
            allowed = [m for m in RESERVED_METHODS if _OWN_CONDITION[m] == condition]
            return (f"condition {condition!r} is reserved for the evaluation's own rows ({', '.join(allowed)}); "
                    f"method {text!r} cannot use it")
        return None
    if condition is not None and text == own and condition == _OWN_CONDITION[own]:
        return None
    return (f"method name {text!r} is reserved for the evaluation's own rows; the real-image anchors and sanity "
            f"methods are named {', '.join(RESERVED_METHODS)}, so a generator with one of these names would be "
            "averaged with them. Rename the method (its folder, its generator key or its rows)")


def reserved_rows_problem(methods: Iterable[Any], conditions: Iterable[Any], where: str) -> str | None:
    """One message naming every (method, condition) pair of a table's rows that
    :func:`reserved_method_problem` refuses, or None when there is none."""
    bad = sorted({(str(m), str(c)) for m, c in zip(methods, conditions) if reserved_method_problem(m, str(c))})
    if not bad:
        return None
    first = reserved_method_problem(*bad[0])
    pairs = ", ".join(f"{m}/{c}" for m, c in bad[:20]) + (f" and {len(bad) - 20} more" if len(bad) > 20 else "")
    return f"{where}: {len(bad)} (method, condition) pair(s) use a reserved name ({pairs}): {first}"


__all__ = ["ANCHOR_CONDITION", "ANCHOR_METHODS", "RESERVED_METHODS", "SANITY_CONDITION", "SANITY_METHODS",
           "block_problems", "id_problem", "reference_problems", "reserved_method_problem", "reserved_rows_problem"]
