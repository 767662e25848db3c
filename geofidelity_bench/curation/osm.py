"""OpenStreetMap input for block carving: named highway ways, named place nodes and named
neighborhood areas.

Three sources give the same records (:class:`WayRecord`, :class:`PlaceNode`, :class:`PlaceArea`):

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
* areas (only when asked for: ``areas=True``, the default) are named closed ways and multipolygon
  (or boundary) relations tagged ``place`` in :data:`AREA_PLACE_KINDS` or
  ``boundary=administrative`` with ``admin_level`` 9 or 10, assembled by pyosmium's area
  handler for files and with shapely from Overpass ``out geom`` member geometries; rings are
  rounded to 7 decimals and normalized (:func:`shapely.normalize`) so every source gives the
  same polygons;
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

from ..extras import require
from ..geo import haversine_m, polyline_length_m
from .errors import CurationError
from ..atomic import atomic_write_bytes
from .http import HTTPClient, HTTPFailure, RetryPolicy, redact

#: ``place`` values used for neighborhood labels (docs/benchmark.md section 8, Curation).
PLACE_KINDS = ("suburb", "neighbourhood", "quarter", "district", "town")
#: ``place`` values of the areas used for neighborhood labels (docs/benchmark.md section 8, Curation).
AREA_PLACE_KINDS = ("suburb", "neighbourhood", "quarter")
#: ``admin_level`` values of the ``boundary=administrative`` areas used for neighborhood labels.
AREA_ADMIN_LEVELS = ("9", "10")

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


Ring = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class PlaceArea:
    """A named neighborhood area: a closed way or a multipolygon relation.

    ``kind`` is the ``place`` value, or ``admin_level=9`` / ``admin_level=10`` for administrative
    boundaries; ``polygons`` are the area's polygons, each its outer ring then its holes, rings
    as closed ``(lat, lon)`` sequences.
    """

    osm_type: str  # "way" or "relation"
    osm_id: int
    name: str
    kind: str
    polygons: tuple[tuple[Ring, ...], ...]

    def shape(self):
        """The area as a shapely (Multi)Polygon in (lon, lat)."""
        from shapely.geometry import MultiPolygon, Polygon

        polys = [Polygon([(lo, la) for la, lo in rings[0]], [[(lo, la) for la, lo in r] for r in rings[1:]])
                 for rings in self.polygons]
        return polys[0] if len(polys) == 1 else MultiPolygon(polys)

    @property
    def area_m2(self) -> float:
        """Geodesic area on the WGS84 ellipsoid (pyproj)."""
        require("pyproj", "curate", "curation")
        from pyproj import Geod

        area, _ = Geod(ellps="WGS84").geometry_area_perimeter(self.shape())
        return abs(float(area))


@dataclass(frozen=True)
class OsmData:
    ways: tuple[WayRecord, ...]
    places: tuple[PlaceNode, ...]
    areas: tuple[PlaceArea, ...] = ()


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


def area_kind(tags: Mapping[str, str]) -> str | None:
    """The neighborhood-area kind of an object's tags, or None (unnamed or another kind of area)."""
    if not tags.get("name"):
        return None
    if tags.get("place") in AREA_PLACE_KINDS:
        return str(tags["place"])
    if tags.get("boundary") == "administrative" and tags.get("admin_level") in AREA_ADMIN_LEVELS:
        return f"admin_level={tags['admin_level']}"
    return None


def make_area(osm_type: str, osm_id: int, tags: Mapping[str, str], geometry) -> PlaceArea | None:
    """A :class:`PlaceArea` from a shapely (Multi)Polygon in (lon, lat) (rounded, made valid and
    normalized), or None when the tags are not a neighborhood area or nothing polygonal is left."""
    require("shapely", "curate", "curation")
    import shapely
    from shapely.geometry import MultiPolygon, Polygon

    kind = area_kind(tags)
    if kind is None or geometry is None or geometry.is_empty:
        return None
    geometry = shapely.set_precision(geometry, 10.0 ** -_PRECISION)
    if not geometry.is_valid:
        geometry = shapely.make_valid(geometry)
    parts = [g for g in getattr(geometry, "geoms", [geometry]) if isinstance(g, (Polygon, MultiPolygon))]
    polys = [p for g in parts for p in getattr(g, "geoms", [g]) if not p.is_empty]
    if not polys:
        return None
    norm = shapely.normalize(MultiPolygon(polys))

    def ring(r) -> Ring:
        return tuple(_pt(lat, lon) for lon, lat in r.coords)

    polygons = tuple((ring(p.exterior), *(ring(h) for h in p.interiors)) for p in norm.geoms)
    return PlaceArea(osm_type, int(osm_id), str(tags["name"]), kind, polygons)


def polygons_from_lines(outer: Sequence[Sequence[tuple[float, float]]], inner: Sequence[Sequence[tuple[float, float]]]):
    """A (Multi)Polygon in (lon, lat) from the member ways of a multipolygon relation, as
    ``(lat, lon)`` point lists: the outer rings' polygons less the inner rings' (None if no ring
    closes)."""
    from shapely.geometry import LineString
    from shapely.ops import polygonize, unary_union

    def polys(lines):
        ls = [LineString([(lo, la) for la, lo in line]) for line in lines if len(line) >= 2]
        return unary_union(list(polygonize(ls))) if ls else None

    shell, holes = polys(outer), polys(inner)
    if shell is None or shell.is_empty:
        return None
    return shell if holes is None or holes.is_empty else shell.difference(holes)


def _finish(ways: Iterable[WayRecord], places: Iterable[PlaceNode], areas: Iterable[PlaceArea] = ()) -> OsmData:
    return OsmData(tuple(sorted(ways, key=lambda w: w.way_id)), tuple(sorted(places, key=lambda p: p.node_id)),
                   tuple(sorted(areas, key=lambda a: (a.osm_type, a.osm_id))))


# -- offline readers ------------------------------------------------------------------------------


def _open_xml(path: Path):
    name = path.name.lower()
    if name.endswith(".bz2"):
        return bz2.open(path, "rb")
    if name.endswith(".gz"):
        return gzip.open(path, "rb")
    return open(path, "rb")


def read_osm_xml(path: str | os.PathLike, *, areas: bool = True) -> OsmData:
    """Reads OSM XML (``.osm``, ``.osm.bz2``, ``.osm.gz``) with the standard library; the
    neighborhood areas (``areas=True``) with pyosmium's area handler (:func:`read_osm_areas`).

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
    return _finish(ways, places, read_osm_areas(path) if areas else ())


def _osmium():
    try:
        require("osmium", "curate", "reading an OSM extract")
        import osmium
    except ImportError as err:  # pragma: no cover - osmium is in the curate extra
        raise CurationError(
            "reading .osm.pbf files and the neighborhood areas of OSM files needs pyosmium: "
            "pip install 'geofidelity-bench[curate]' (or osmium); carving with --release-rules needs no areas"
        ) from err
    return osmium


def _area_from_osmium(obj) -> PlaceArea | None:
    """A :class:`PlaceArea` from a pyosmium area object (None when not a neighborhood area)."""
    tags = dict(obj.tags)
    if area_kind(tags) is None:
        return None
    from shapely.geometry import MultiPolygon, Polygon

    def coords(ring):
        return [(n.location.lon, n.location.lat) for n in ring]

    polys = [Polygon(coords(outer), [coords(inner) for inner in obj.inner_rings(outer)]) for outer in obj.outer_rings()]
    if not polys:
        return None
    return make_area("way" if obj.from_way() else "relation", obj.orig_id(), tags, MultiPolygon(polys))


def _area_filter(osmium):
    return osmium.filter.KeyFilter("place", "boundary")


def read_osm_areas(path: str | os.PathLike) -> list[PlaceArea]:
    """The neighborhood areas of an OSM file (any format libosmium reads), assembled by pyosmium's
    area handler from closed ways and multipolygon / boundary relations; an area whose rings do
    not close (a relation cut by the extract) is left out."""
    osmium = _osmium()
    out = []
    try:
        processor = (osmium.FileProcessor(str(path)).with_locations().with_areas(_area_filter(osmium))
                     .with_filter(osmium.filter.EntityFilter(osmium.osm.AREA)))
        for obj in processor:
            area = _area_from_osmium(obj)
            if area:
                out.append(area)
    except (RuntimeError, OSError) as err:
        hint = " (the area handler needs a file sorted by type and id: osmium sort IN -o OUT)" if "order" in str(err) else ""
        raise CurationError(f"cannot read the areas of OSM file {str(path)!r} with pyosmium: {err}{hint}") from err
    return out


def read_osm_pbf(path: str | os.PathLike, *, areas: bool = True) -> OsmData:
    """Reads an OSM PBF (or any format libosmium knows) with pyosmium, node locations attached
    (and the neighborhood areas from its area handler when ``areas``)."""
    osmium = _osmium()
    path = Path(path)
    ways: list[WayRecord] = []
    places: list[PlaceNode] = []
    found: list[PlaceArea] = []
    try:
        processor = osmium.FileProcessor(str(path)).with_locations()
        if areas:
            processor = processor.with_areas(_area_filter(osmium))
        for obj in processor:
            if obj.is_area():
                area = _area_from_osmium(obj)
                if area:
                    found.append(area)
            elif obj.is_node():
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
    return _finish(ways, places, found)


def read_osm_file(path: str | os.PathLike, *, areas: bool = True) -> OsmData:
    """Named highway ways, place nodes and (when ``areas``) neighborhood areas of an OSM extract
    (format chosen by the file name)."""
    path = Path(path)
    if not path.is_file():
        raise CurationError(f"OSM file not found: {str(path)!r}")
    name = path.name.lower()
    if name.endswith(".pbf"):
        return read_osm_pbf(path, areas=areas)
    if name.endswith((".osm", ".osm.bz2", ".osm.gz", ".xml", ".xml.bz2", ".xml.gz")):
        return read_osm_xml(path, areas=areas)
    raise CurationError(
        f"unknown OSM file type {path.name!r}: expected .osm, .osm.bz2, .osm.gz (OSM XML) or .osm.pbf"
    )


# -- Overpass -------------------------------------------------------------------------------------


def overpass_query(lat: float, lon: float, radius_m: float, *, place_radius_m: float | None = None,
                   timeout_s: int = 180, areas: bool = True) -> str:
    """The Overpass QL that carving needs around a city center.

    Ways with ``highway`` and ``name`` within ``radius_m`` (with geometry), named place nodes
    within ``place_radius_m`` (default ``radius_m + 2000``: a block near the edge may take its
    neighborhood label from a node up to 2,000 m further out) and, when ``areas``, the named
    neighborhood areas (closed ways and relations, with member geometry) reaching within
    ``place_radius_m``. Without ``areas`` the query is the release's.
    """
    place_r = radius_m + 2000.0 if place_radius_m is None else place_radius_m
    kinds = "|".join(PLACE_KINDS)
    around = f"(around:{place_r:.0f},{lat:.7f},{lon:.7f})"
    query = (
        f"[out:json][timeout:{int(timeout_s)}];\n"
        f'way["highway"]["name"](around:{radius_m:.0f},{lat:.7f},{lon:.7f});\n'
        "out tags geom;\n"
        f'node["place"~"^({kinds})$"]["name"]{around};\n'
        "out body;\n"
    )
    if areas:
        place = f'["place"~"^({"|".join(AREA_PLACE_KINDS)})$"]["name"]'
        admin = f'["boundary"="administrative"]["admin_level"~"^({"|".join(AREA_ADMIN_LEVELS)})$"]["name"]'
        query += (
            f"(way{place}{around};relation{place}{around};way{admin}{around};relation{admin}{around};);\n"
            "out tags geom;\n"
        )
    return query


def _geometry_points(geometry) -> list[tuple[float, float] | None]:
    return [_pt(g["lat"], g["lon"]) if isinstance(g, Mapping) and g.get("lat") is not None else None
            for g in geometry or []]


def _overpass_area(el: Mapping[str, Any], tags: Mapping[str, str]) -> PlaceArea | None:
    """A neighborhood area from an ``out geom`` way (a closed ring) or relation (member ways with
    roles ``outer``/``""`` and ``inner``); incomplete rings are left out as in the file readers."""
    if area_kind(tags) is None:
        return None
    if el.get("type") == "way":
        ring = _geometry_points(el.get("geometry"))
        if len(ring) < 4 or None in ring or ring[0] != ring[-1]:
            return None
        return make_area("way", el["id"], tags, polygons_from_lines([ring], []))
    if tags.get("type") not in ("multipolygon", "boundary"):
        return None
    outer, inner = [], []
    for m in el.get("members") or []:
        if m.get("type") != "way":
            continue
        line = _geometry_points(m.get("geometry"))
        if None in line:
            continue
        (inner if m.get("role") == "inner" else outer).append(line)
    return make_area("relation", el["id"], tags, polygons_from_lines(outer, inner))


def parse_overpass_json(payload: Mapping[str, Any]) -> OsmData:
    """Records from an Overpass ``[out:json]`` answer (ways with ``geometry``, place nodes, areas)."""
    ways: dict[int, WayRecord] = {}
    places: list[PlaceNode] = []
    areas: dict[tuple[str, int], PlaceArea] = {}
    for el in payload.get("elements", []) or []:
        tags = el.get("tags") or {}
        if el.get("type") in ("way", "relation"):
            area = _overpass_area(el, tags)
            if area:
                areas[(area.osm_type, area.osm_id)] = area
        if el.get("type") == "way":
            way = _make_way(el["id"], tags, _geometry_points(el.get("geometry")))
            if way:
                ways[way.way_id] = way
        elif el.get("type") == "node" and el.get("lat") is not None:
            place = _make_place(el["id"], tags, el["lat"], el["lon"])
            if place:
                places.append(place)
    return _finish(ways.values(), places, areas.values())


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
                errors.append(f"{redact(endpoint)}: {err}")
                continue
            payload = json.loads(body)
            if cached is not None:
                cached.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(cached, body)
            return payload
        raise CurationError("every Overpass endpoint failed:\n  " + "\n  ".join(errors))

    def fetch(self, lat: float, lon: float, radius_m: float, *, areas: bool = True) -> OsmData:
        """Ways, place nodes and (when ``areas``) neighborhood areas for carving around (lat, lon)."""
        return parse_overpass_json(self.run(overpass_query(lat, lon, radius_m, areas=areas)))


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
    return OsmData(tuple(ways), data.places, data.areas)


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
