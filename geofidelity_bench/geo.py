"""Small geodesy helpers shared by the domain model, curation and the app."""

from __future__ import annotations

import math
import numbers
from typing import Iterable, Sequence

EARTH_RADIUS_M = 6_371_000.0


def haversine_m(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance in metres on a sphere of radius 6,371,000 m (docs/benchmark.md section 8, Curation)."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp = p2 - p1
    dl = math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_M * math.asin(min(1.0, math.sqrt(a)))


def polyline_length_m(points: Sequence[Sequence[float]]) -> float:
    """Sum of haversine lengths of consecutive [lat, lon] points."""
    return sum(haversine_m(a[0], a[1], b[0], b[1]) for a, b in zip(points, points[1:]))


def arc_midpoint(points: Sequence[Sequence[float]]) -> tuple[float, float]:
    """The point halfway along the polyline by arc length (linear within a segment)."""
    if not points:
        raise ValueError("empty polyline has no midpoint")
    if len(points) == 1:
        return float(points[0][0]), float(points[0][1])
    seg = [haversine_m(a[0], a[1], b[0], b[1]) for a, b in zip(points, points[1:])]
    half = sum(seg) / 2.0
    walked = 0.0
    for (a, b), length in zip(zip(points, points[1:]), seg):
        if walked + length >= half and length > 0:
            t = (half - walked) / length
            return float(a[0] + t * (b[0] - a[0])), float(a[1] + t * (b[1] - a[1]))
        walked += length
    return float(points[-1][0]), float(points[-1][1])


def bbox(points: Iterable[Sequence[float]]) -> tuple[float, float, float, float]:
    """(min_lat, min_lon, max_lat, max_lon) of [lat, lon] points."""
    pts = list(points)
    if not pts:
        raise ValueError("empty polyline has no bounding box")
    lats = [p[0] for p in pts]
    lons = [p[1] for p in pts]
    return min(lats), min(lons), max(lats), max(lons)


def coordinate_problem(lat: object, lon: object) -> str | None:
    """Why (lat, lon) is not a point on Earth, or None when it is one.

    Both must be finite numbers, lat in [-90, 90] and lon in [-180, 180] (degrees, WGS84).

    >>> coordinate_problem(48.85, 2.35) is None
    True
    >>> coordinate_problem(999.0, float("inf"))
    'lat 999.0 is outside [-90, 90]'
    """
    for name, value, limit in (("lat", lat, 90.0), ("lon", lon, 180.0)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return f"{name} {value!r} is not a number"
        value = float(value)
        if not math.isfinite(value):
            return f"{name} {value!r} is not finite"
        if not -limit <= value <= limit:
            return f"{name} {value!r} is outside [-{limit:g}, {limit:g}]"
    return None
