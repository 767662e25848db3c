"""Neighborhood labels of blocks (docs/benchmark.md section 8, Curation).

* Default rule: the smallest neighborhood area (:class:`~.osm.PlaceArea`: ``place`` suburb,
  neighbourhood or quarter, or ``boundary=administrative`` with ``admin_level`` 9 or 10) that
  contains the block's midpoint (geodesic area on WGS84; boundary points count as inside; ties:
  way before relation, then smaller id), source ``area``; else the nearest named place node
  within ``max_node_m`` (2,000 m; ties: smaller node id), source ``node``; else unknown
  (``None``), source ``none``. No name is invented.
* Release rule: the nearest place node within ``max_node_m``, else ``downtown`` (source
  ``node`` or ``none``).
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ..extras import require
from ..geo import haversine_m
from .osm import PlaceArea, PlaceNode

DOWNTOWN = "downtown"
SOURCES = ("area", "node", "none")


def nearest_place(lat: float, lon: float, places: Iterable[PlaceNode], max_m: float) -> PlaceNode | None:
    """The place node nearest to (lat, lon) within ``max_m`` (ties: smaller node id), or None."""
    best: tuple[float, int, PlaceNode] | None = None
    for p in places:
        d = haversine_m(lat, lon, p.lat, p.lon)
        if d <= max_m and (best is None or (d, p.node_id) < best[:2]):
            best = (d, p.node_id, p)
    return best[2] if best else None


class NeighborhoodLabeler:
    """Labels points from one city's areas and place nodes (areas prepared once, smallest first)."""

    def __init__(self, areas: Sequence[PlaceArea], places: Sequence[PlaceNode], *, max_node_m: float,
                 release: bool = False) -> None:
        self.places = tuple(places)
        self.max_node_m = float(max_node_m)
        self.release = release
        self._areas = []
        if not release and areas:
            require("shapely", "curate", "curation")
            import shapely

            ranked = sorted(areas, key=lambda a: (a.area_m2, a.osm_type != "way", a.osm_id))
            for a in ranked:
                shape = a.shape()
                shapely.prepare(shape)
                self._areas.append((a, shape))

    def label(self, lat: float, lon: float) -> tuple[str | None, str]:
        """``(neighborhood, source)`` of the point (see the module docstring)."""
        if self._areas:
            from shapely.geometry import Point

            pt = Point(lon, lat)
            for area, shape in self._areas:
                if shape.covers(pt):
                    return area.name, "area"
        place = nearest_place(lat, lon, self.places, self.max_node_m)
        if place is not None:
            return place.name, "node"
        return (DOWNTOWN if self.release else None), "none"
