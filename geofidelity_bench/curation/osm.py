"""OpenStreetMap input for block carving: named highway ways and named place nodes.

Three sources give the same records (:class:`WayRecord`, :class:`PlaceNode`):

* :class:`OverpassClient` queries an Overpass API (POST, endpoint fallback, retries, an on-disk
  response cache keyed by the query's sha256) and parses its ``out geom`` JSON;
* :func:`read_osm_file` reads an extract offline: ``.osm`` / ``.osm.bz2`` / ``.osm.gz`` (OSM XML,
  standard library) or ``.osm.pbf`` / ``.pbf`` (pyosmium, with node locations).

Record conventions (identical for every source, so that they can be compared):

* only ways with both a ``highway`` and a ``name`` tag; ``geometry`` is a tuple of
  ``(lat, lon)`` rounded to 7 decimals (OSM's own precision, 1e-7 degree);
* a way whose nodes are not all in the data (an extract cut at its border, or Overpass ``null``
  points) keeps its longest contiguous run of located nodes (by length); a way left with fewer
  than two points is dropped;
* place nodes are ``place`` in :data:`PLACE_KINDS` with a ``name``;
* records are sorted by id.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..geo import haversine_m, polyline_length_m
from .errors import CurationError
from ..atomic import atomic_write_bytes
from .http import HTTPClient, HTTPFailure, RetryPolicy

#: ``place`` values used for neighborhood labels (docs/benchmark.md section 8, Curation).
PLACE_KINDS = ("suburb", "neighbourhood", "quarter", "district", "town")

#: Public Overpass instances tried in order (the first that answers wins).
DEFAULT_OVERPASS_ENDPOINTS = (
    "https://overpass-api.de/api/interpreter",
    "https://overpass.kumi.systems/api/interpreter",
    "https://maps.mail.ru/osm/tools/overpass/api/interpreter",
)

_PRECISION = 7


@dataclass(frozen=True)
class WayRecord:
    """A named OSM highway way: id, ``name``, ``highway`` tag, geometry as ``(lat, lon)`` points."""

    way_id: int
    name: str
    highway: str
    geometry: tuple[tuple[float, float], ...]

    @property
    def length_m(self) -> float:
        return polyline_length_m(self.geometry)


@dataclass(frozen=True)
class PlaceNode:
    """A named ``place`` node (suburb, neighbourhood, quarter, district or town)."""

    node_id: int
    name: str
    place: str
    lat: float
    lon: float


@dataclass(frozen=True)
class OsmData:
    ways: tuple[WayRecord, ...]
    places: tuple[PlaceNode, ...]


def _pt(lat: float, lon: float) -> tuple[float, float]:
    return round(float(lat), _PRECISION), round(float(lon), _PRECISION)


def longest_located_run(points: Sequence[tuple[float, float] | None]) -> tuple[tuple[float, float], ...]:
    """The longest (by length) run of consecutive non-None points; ties go to the first run."""
    runs: list[list[tuple[float, float]]] = [[]]
    for p in points:
        if p is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append(p)
    best: tuple[tuple[float, float], ...] = ()
    best_len = -1.0
    for run in runs:
        if len(run) < 2:
            continue
        length = polyline_length_m(run)
        if length > best_len:
            best, best_len = tuple(run), length
    return best


def _make_way(way_id: int, tags: Mapping[str, str], points: Sequence[tuple[float, float] | None]) -> WayRecord | None:
    name, highway = tags.get("name"), tags.get("highway")
    if not name or not highway:
        return None
    geometry = longest_located_run(points)
    if len(geometry) < 2:
        return None
    return WayRecord(int(way_id), str(name), str(highway), geometry)


def _make_place(node_id: int, tags: Mapping[str, str], lat: float, lon: float) -> PlaceNode | None:
    place, name = tags.get("place"), tags.get("name")
    if place not in PLACE_KINDS or not name:
        return None
    la, lo = _pt(lat, lon)
    return PlaceNode(int(node_id), str(name), str(place), la, lo)


def _finish(ways: Iterable[WayRecord], places: Iterable[PlaceNode]) -> OsmData:
    return OsmData(tuple(sorted(ways, key=lambda w: w.way_id)), tuple(sorted(places, key=lambda p: p.node_id)))


# -- offline readers ------------------------------------------------------------------------------


def _open_xml(path: Path):
    name = path.name.lower()
    if name.endswith(".bz2"):
        return bz2.open(path, "rb")
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def read_osm_xml(path: str | os.PathLike) -> OsmData:
    """Reads OSM XML (``.osm``, ``.osm.bz2``, ``.osm.gz``) with the standard library.

    Node coordinates are kept for every node (ways refer to them by id), so memory grows with
    the extract; city-sized extracts are fine, country-sized ones belong in PBF + pyosmium.
    """
    path = Path(path)
    nodes: dict[int, tuple[float, float]] = {}
    ways: list[WayRecord] = []
    places: list[PlaceNode] = []
    try:
        with _open_xml(path) as fh:
            for _event, elem in ET.iterparse(fh, events=("end",)):
                tag = elem.tag
                if tag == "node":
                    nid = int(elem.get("id"))
                    lat, lon = elem.get("lat"), elem.get("lon")
                    if lat is not None and lon is not None:
                        nodes[nid] = _pt(float(lat), float(lon))
                        tags = {t.get("k"): t.get("v") for t in elem.iter("tag")}
                        if "place" in tags:
                            place = _make_place(nid, tags, float(lat), float(lon))
                            if place:
                                places.append(place)
                    elem.clear()
                elif tag == "way":
                    tags = {t.get("k"): t.get("v") for t in elem.iter("tag")}
                    if tags.get("highway") and tags.get("name"):
                        refs = [int(nd.get("ref")) for nd in elem.iter("nd")]
                        way = _make_way(int(elem.get("id")), tags, [nodes.get(r) for r in refs])
                        if way:
                            ways.append(way)
                    elem.clear()
                elif tag == "relation":
                    elem.clear()
    except (ET.ParseError, OSError, EOFError, ValueError) as err:
        raise CurationError(f"cannot read OSM XML file {str(path)!r}: {err}") from err
    return _finish(ways, places)


def read_osm_pbf(path: str | os.PathLike) -> OsmData:
    """Reads an OSM PBF (or any format libosmium knows) with pyosmium, node locations attached."""
    try:
        import osmium
    except ImportError as err:  # pragma: no cover - osmium is in the curate extra
        raise CurationError(
            "reading .osm.pbf files needs pyosmium: pip install 'geofidelity-bench[curate]' (or osmium)"
        ) from err
    path = Path(path)
    ways: list[WayRecord] = []
    places: list[PlaceNode] = []
    try:
        processor = osmium.FileProcessor(str(path)).with_locations()
        for obj in processor:
            if obj.is_node():
                if "place" in obj.tags and obj.location.valid():
                    place = _make_place(obj.id, dict(obj.tags), obj.location.lat, obj.location.lon)
                    if place:
                        places.append(place)
            elif obj.is_way():
                tags = obj.tags
                if "highway" in tags and "name" in tags:
                    points = [_pt(n.location.lat, n.location.lon) if n.location.valid() else None for n in obj.nodes]
                    way = _make_way(obj.id, dict(tags), points)
                    if way:
                        ways.append(way)
    except (RuntimeError, OSError) as err:
        raise CurationError(f"cannot read OSM file {str(path)!r} with pyosmium: {err}") from err
    return _finish(ways, places)


def read_osm_file(path: str | os.PathLike) -> OsmData:
    """Named highway ways and place nodes of an OSM extract (format chosen by the file name)."""
    path = Path(path)
    if not path.is_file():
        raise CurationError(f"OSM file not found: {str(path)!r}")
    name = path.name.lower()
    if name.endswith(".pbf"):
        return read_osm_pbf(path)
    if name.endswith((".osm", ".osm.bz2", ".osm.gz", ".xml", ".xml.bz2", ".xml.gz")):
        return read_osm_xml(path)
    raise CurationError(
        f"unknown OSM file type {path.name!r}: expected .osm, .osm.bz2, .osm.gz (OSM XML) or .osm.pbf"
    )


# -- Overpass -------------------------------------------------------------------------------------


def overpass_query(lat: float, lon: float, radius_m: float, *, place_radius_m: float | None = None,
                   timeout_s: int = 180) -> str:
    """The Overpass QL that carving needs around a city center.

    Ways with ``highway`` and ``name`` within ``radius_m`` (with geometry), and named place nodes
    within ``place_radius_m`` (default ``radius_m + 2000``: a block near the edge may take its
    neighborhood label from a node up to 2,000 m further out).
    """
    place_r = radius_m + 2000.0 if place_radius_m is None else place_radius_m
    kinds = "|".join(PLACE_KINDS)
    return (
        f"[out:json][timeout:{int(timeout_s)}];\n"
        f'way["highway"]["name"](around:{radius_m:.0f},{lat:.7f},{lon:.7f});\n'
        "out tags geom;\n"
        f'node["place"~"^({kinds})$"]["name"](around:{place_r:.0f},{lat:.7f},{lon:.7f});\n'
        "out body;\n"
    )


def parse_overpass_json(payload: Mapping[str, Any]) -> OsmData:
    """Records from an Overpass ``[out:json]`` answer (ways with ``geometry``, place nodes)."""
    ways: list[WayRecord] = []
    places: list[PlaceNode] = []
    for el in payload.get("elements", []) or []:
        tags = el.get("tags") or {}
        if el.get("type") == "way":
            points = [
                _pt(g["lat"], g["lon"]) if isinstance(g, Mapping) and g.get("lat") is not None else None
                for g in el.get("geometry") or []
            ]
            way = _make_way(el["id"], tags, points)
            if way:
                ways.append(way)
        elif el.get("type") == "node" and el.get("lat") is not None:
            place = _make_place(el["id"], tags, el["lat"], el["lon"])
            if place:
                places.append(place)
    return _finish(ways, places)


class OverpassClient:
    """Runs Overpass queries: POST ``data=<query>``, endpoints tried in order, cached on disk.

    Args:
        endpoints: interpreter URLs tried in order; an endpoint that keeps failing (after its
            retries) hands over to the next one.
        cache_dir: folder of cached answers (``{sha256(query)}.json``); None disables the cache.
        timeout_s: socket timeout of one request.
        retry: the retry policy (429 and 504 are retried with growing sleeps).
    """

    def __init__(
        self,
        endpoints: Sequence[str] = DEFAULT_OVERPASS_ENDPOINTS,
        *,
        cache_dir: str | os.PathLike | None = None,
        timeout_s: float = 200.0,
        retry: RetryPolicy | None = None,
        user_agent: str = "geofidelity-bench-curation",
    ) -> None:
        if not endpoints:
            raise ValueError("OverpassClient needs at least one endpoint")
        self.endpoints = list(endpoints)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.http = HTTPClient(timeout_s=timeout_s, retry=retry or RetryPolicy(), user_agent=user_agent)

    @staticmethod
    def query_key(query: str) -> str:
        return hashlib.sha256(query.encode("utf-8")).hexdigest()

    def cache_path(self, query: str) -> Path | None:
        return None if self.cache_dir is None else self.cache_dir / f"{self.query_key(query)}.json"

    def run(self, query: str) -> dict[str, Any]:
        """The decoded JSON answer of ``query`` (from the cache when there)."""
        cached = self.cache_path(query)
        if cached is not None and cached.is_file():
            try:
                return json.loads(cached.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                pass  # a damaged cache entry is fetched again
        errors = []
        for endpoint in self.endpoints:
            try:
                body = self.http.request("POST", endpoint, form={"data": query}, retry_on=(429, 502, 503, 504),
                                         validate=_overpass_validate)
            except HTTPFailure as err:
                errors.append(f"{endpoint}: {err}")
                continue
            payload = json.loads(body)
            if cached is not None:
                cached.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(cached, body)
            return payload
        raise CurationError("every Overpass endpoint failed:\n  " + "\n  ".join(errors))

    def fetch(self, lat: float, lon: float, radius_m: float) -> OsmData:
        """Ways and place nodes for carving around (lat, lon)."""
        return parse_overpass_json(self.run(overpass_query(lat, lon, radius_m)))


def _overpass_validate(body: bytes) -> str | None:
    """Why an HTTP 200 answer is not a usable Overpass result (then it is retried), or None."""
    try:
        payload = json.loads(body)
    except ValueError:
        return "answer is not JSON"
    if not isinstance(payload, Mapping) or "elements" not in payload:
        return "answer has no 'elements'"
    remark = str(payload.get("remark") or "")
    if "runtime error" in remark.lower() or "timed out" in remark.lower():
        return f"Overpass remark: {remark.strip()[:200]}"
    return None


def filter_within(data: OsmData, lat: float, lon: float, radius_m: float) -> OsmData:
    """Ways with a vertex or segment within ``radius_m`` of (lat, lon) (Overpass ``around``)."""
    ways = [w for w in data.ways if polyline_distance_m(w.geometry, lat, lon) <= radius_m]
    return OsmData(tuple(ways), data.places)


def polyline_distance_m(points: Sequence[Sequence[float]], lat: float, lon: float) -> float:
    """Distance from (lat, lon) to a polyline: exact haversine to vertices, planar (local
    equirectangular) to segment interiors; good to well under a metre at city scale."""
    import math

    best = min(haversine_m(lat, lon, p[0], p[1]) for p in points)
    k = math.cos(math.radians(lat))
    r = math.radians(1.0) * 6_371_000.0
    for a, b in zip(points, points[1:]):
        ax, ay = (a[1] - lon) * k * r, (a[0] - lat) * r
        bx, by = (b[1] - lon) * k * r, (b[0] - lat) * r
        dx, dy = bx - ax, by - ay
        seg2 = dx * dx + dy * dy
        if seg2 <= 0:
            continue
        t = -(ax * dx + ay * dy) / seg2
        if 0.0 < t < 1.0:
            best = min(best, math.hypot(ax + t * dx, ay + t * dy))
    return best


OsmSource = Callable[[float, float, float], OsmData]
