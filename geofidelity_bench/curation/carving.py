"""Block carving (docs/benchmark.md section 8, Curation): from named OSM highway ways to up to 10 spaced street blocks.

Given a city's ways (:class:`~geofidelity_bench.curation.osm.WayRecord`), place nodes and
neighborhood areas, and the rule set ``CarveParams.rules`` (``default`` or ``release``):

1. keep ways with a vertex or segment within ``radius_m`` (6,000 m) of the city center;
2. streets (:mod:`.streets`): by default every connected chain of the ways sharing an exact
   ``name`` (merged with shapely's ``linemerge``); under the release rules every way alone;
3. keep the longest street per exact ``name`` (ties: smaller first way id) - over all highway
   values, as the benchmark definition orders it, so a name whose longest street is, say,
   ``service`` yields no block;
4. stratum by ``highway`` (of a chain: the value covering most of its length): major =
   primary(_link), secondary(_link); residential = residential, living_street, unclassified;
   pedestrian = pedestrian, footway, cycleway; tertiary = tertiary(_link); other values are
   dropped;
5. drop streets shorter than ``min_length_m`` (500 m; the full street's length);
6. each street becomes a candidate block: its polyline cut at ``max_length_m`` (2,000 m) of
   arc length (the last point interpolated), the centroid its arc-length midpoint, its ways
   those the cut polyline walks (``way_id`` = the first);
7. per stratum in the order major, residential, pedestrian, tertiary, candidates by full length
   descending (ties: way id ascending) are accepted while the stratum is under its quota (3, 3,
   2, 2) and the candidate's centroid is at least ``min_spacing_m`` (400 m, haversine) from every
   block accepted so far (any stratum);
8. the remaining candidates of all strata, pooled in the same order, top the city up to
   ``total_blocks`` (10) with the same spacing rule;
9. neighborhood (:mod:`.neighborhoods`): by default the smallest containing area, else the
   nearest place node within 2,000 m, else unknown (None); under the release rules the nearest
   place node within 2,000 m, else ``downtown``.

The spacing rule is applied to the centroids of the blocks as they are kept (after the cut),
so that every two blocks of a city are at least ``min_spacing_m`` apart. Distances are haversine
with R = 6,371,000 m. Nothing depends on input order: same records in, same blocks out.
:func:`carve` also counts, per stratum, what removed the candidates that were not kept
(:func:`format_carving_counts` prints them).

``block_id`` is ``{city}_{slug(name)}_{way_id}``, the slug being the name folded to ASCII, lower
case, runs of other characters as ``_`` (``way`` when nothing is left, e.g. for non-Latin
names), at most 60 characters: always a safe single path component.
"""

from __future__ import annotations

import json
import math
import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

from ..benchmark import STRATA, Block, block_from_record, is_safe_id
from ..geo import arc_midpoint, bbox, haversine_m, polyline_length_m
from .cities import CitySpec
from .errors import CurationError
from .neighborhoods import DOWNTOWN, NeighborhoodLabeler  # noqa: F401 - DOWNTOWN: the release's fallback label
from .osm import OsmData, filter_within
from .streets import Street, longest_per_name, merged_streets, single_way_streets, ways_of_segments

#: highway tag -> stratum (docs/benchmark.md section 8, Curation).
STRATUM_OF_HIGHWAY: Mapping[str, str] = MappingProxyType(
    {
        "primary": "major",
        "primary_link": "major",
        "secondary": "major",
        "secondary_link": "major",
        "residential": "residential",
        "living_street": "residential",
        "unclassified": "residential",
        "pedestrian": "pedestrian",
        "footway": "pedestrian",
        "cycleway": "pedestrian",
        "tertiary": "tertiary",
        "tertiary_link": "tertiary",
    }
)
#: Blocks per stratum and city (docs/benchmark.md section 8, Curation), in the order strata are filled.
STRATUM_QUOTAS: Mapping[str, int] = MappingProxyType({"major": 3, "residential": 3, "pedestrian": 2, "tertiary": 2})
#: The carving rule sets: ``default`` (merged streets, neighborhoods from areas, never invented)
#: and ``release`` (the v3.1.0 release: longest single way, nearest node else ``downtown``).
CARVING_RULES = ("default", "release")


@dataclass(frozen=True)
class CarveParams:
    """Carving settings; the defaults are docs/benchmark.md section 8, Curation."""

    radius_m: float = 6000.0
    min_length_m: float = 500.0
    min_spacing_m: float = 400.0
    max_length_m: float = 2000.0
    neighborhood_radius_m: float = 2000.0
    total_blocks: int = 10
    quotas: Mapping[str, int] = field(default_factory=lambda: dict(STRATUM_QUOTAS))
    rules: str = "default"

    def __post_init__(self) -> None:
        if self.rules not in CARVING_RULES:
            raise CurationError(f"carving rules must be one of {list(CARVING_RULES)}, got {self.rules!r}")
        for name in ("radius_m", "min_length_m", "min_spacing_m", "max_length_m", "neighborhood_radius_m"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise CurationError(f"carving parameter {name} must be a number >= 0, got {value!r}")
        if self.max_length_m <= 0:
            raise CurationError("carving parameter max_length_m must be > 0")
        unknown = set(self.quotas) - set(STRATUM_QUOTAS)
        if unknown:
            raise CurationError(f"unknown strata in quotas: {sorted(unknown)}; strata are {list(STRATUM_QUOTAS)}")

    def as_dict(self) -> dict[str, Any]:
        return {
            "radius_m": self.radius_m,
            "min_length_m": self.min_length_m,
            "min_spacing_m": self.min_spacing_m,
            "max_length_m": self.max_length_m,
            "neighborhood_radius_m": self.neighborhood_radius_m,
            "total_blocks": self.total_blocks,
            "quotas": {k: int(self.quotas.get(k, 0)) for k in STRATUM_QUOTAS},
            "rules": self.rules,
        }

    @property
    def needs_areas(self) -> bool:
        """Whether the rules read OSM neighborhood areas (the release rules do not)."""
        return self.rules == "default"


# -- geometry -------------------------------------------------------------------------------------


def truncate_polyline(points: Sequence[Sequence[float]], max_length_m: float) -> tuple[tuple[float, float], ...]:
    """The first ``max_length_m`` metres of a polyline (haversine arc length); the last point is
    interpolated linearly in (lat, lon) within its segment. Shorter polylines come back whole."""
    pts = [(float(p[0]), float(p[1])) for p in points]
    if len(pts) < 2:
        return tuple(pts)
    out = [pts[0]]
    walked = 0.0
    for a, b in zip(pts, pts[1:]):
        seg = haversine_m(a[0], a[1], b[0], b[1])
        if walked + seg >= max_length_m and seg > 0:
            t = (max_length_m - walked) / seg
            if t >= 1.0:
                out.append(b)
            elif t > 0.0:
                out.append((a[0] + t * (b[0] - a[0]), a[1] + t * (b[1] - a[1])))
            return tuple(out)
        walked += seg
        out.append(b)
    return tuple(out)


# -- ids ------------------------------------------------------------------------------------------


def slugify(text: str, max_len: int = 60) -> str:
    """ASCII, lower case, ``[a-z0-9]`` runs joined by ``_``; ``""`` when nothing is left."""
    folded = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "_", folded.lower()).strip("_")
    return slug[:max_len].rstrip("_")


def make_block_id(city: str, name: str | None, way_id: int) -> str:
    """``{city}_{slug(name)}_{way_id}`` (``way`` as the slug when the name has no Latin letters)."""
    city_slug = slugify(city, 40) or "city"
    block_id = f"{city_slug}_{slugify(name or '') or 'way'}_{int(way_id)}"
    if not is_safe_id(block_id):  # pragma: no cover - slugify guarantees it; keep the invariant loud
        raise CurationError(f"internal error: block id {block_id!r} is not path-safe")
    return block_id


# -- carving --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Candidate:
    street: Street
    stratum: str
    full_length_m: float
    polyline: tuple[tuple[float, float], ...]
    centroid: tuple[float, float]

    @property
    def order(self) -> tuple[float, int]:
        return (-self.full_length_m, self.street.way_id)


#: the columns of :attr:`Carving.counts`, per city and stratum: ``streets`` = candidate streets
#: whose highway falls in the stratum; then what removed those not kept: ``same_name`` (a longer
#: street has the name), ``too_short``, ``not_spaced`` (within ``min_spacing_m`` of a kept block),
#: ``city_full`` (spaced, but the quota and the city's ``total_blocks`` were already filled);
#: ``kept``, and of those ``no_neighborhood`` (kept with an unknown neighborhood).
COUNT_COLUMNS = ("city", "stratum", "streets", "same_name", "too_short", "not_spaced", "city_full", "kept",
                 "no_neighborhood")


@dataclass(frozen=True)
class Carving:
    """The result of :func:`carve`: the blocks (sorted by id) and the per-stratum counts."""

    blocks: list[Block]
    counts: list[dict[str, Any]]
    rules: str


def carve(data: OsmData, city: CitySpec, params: CarveParams | None = None) -> Carving:
    """The blocks of one city (see the module docstring) and what removed the other streets."""
    params = params or CarveParams()
    release = params.rules == "release"
    lat0, lon0 = city.center
    near = filter_within(data, lat0, lon0, params.radius_m)
    streets = single_way_streets(near.ways) if release else merged_streets(near.ways)
    kept, shorter = longest_per_name(streets)
    counts = {s: dict.fromkeys(COUNT_COLUMNS[2:], 0) for s in STRATUM_QUOTAS}

    def count(street: Street, outcome: str) -> None:  # every street of a stratum gets one outcome
        stratum = STRATUM_OF_HIGHWAY.get(street.highway)
        if stratum is not None:
            counts[stratum]["streets"] += 1
            counts[stratum][outcome] += 1

    for street in shorter:
        count(street, "same_name")
    candidates: list[_Candidate] = []
    for street in kept:
        stratum = STRATUM_OF_HIGHWAY.get(street.highway)
        if stratum is None:
            continue
        full = street.length_m
        if full < params.min_length_m or full <= 0:
            count(street, "too_short")
            continue
        poly = truncate_polyline(street.geometry, params.max_length_m)
        candidates.append(_Candidate(street, stratum, full, poly, arc_midpoint(poly)))
    candidates.sort(key=lambda c: c.order)
    accepted = _greedy(candidates, params)
    for c in candidates:
        if c not in accepted:
            spaced = all(haversine_m(*c.centroid, *a.centroid) >= params.min_spacing_m for a in accepted)
            count(c.street, "city_full" if spaced else "not_spaced")

    labeler = NeighborhoodLabeler(data.areas, data.places, max_node_m=params.neighborhood_radius_m, release=release)
    blocks = []
    for c in accepted:
        neighborhood, source = labeler.label(*c.centroid)
        count(c.street, "kept")
        if neighborhood is None:
            counts[c.stratum]["no_neighborhood"] += 1
        blocks.append(_block(c, city, params, neighborhood, source, release))
    rows = [{"city": city.key, "stratum": s, **counts[s]} for s in STRATUM_QUOTAS]
    return Carving(sorted(blocks, key=lambda b: b.block_id), rows, params.rules)


def _greedy(candidates: Sequence[_Candidate], params: CarveParams) -> list[_Candidate]:
    """Steps 7 and 8: quotas per stratum, then the pooled top-up, both under the spacing rule."""
    accepted: list[_Candidate] = []

    def spaced(c: _Candidate) -> bool:
        return all(haversine_m(*c.centroid, *a.centroid) >= params.min_spacing_m for a in accepted)

    for stratum in STRATUM_QUOTAS:
        quota = int(params.quotas.get(stratum, 0))
        taken = 0
        for c in candidates:
            if taken >= quota or len(accepted) >= params.total_blocks:
                break
            if c.stratum == stratum and spaced(c):
                accepted.append(c)
                taken += 1
    for c in candidates:
        if len(accepted) >= params.total_blocks:
            break
        if c not in accepted and spaced(c):
            accepted.append(c)
    return accepted


def _block(c: _Candidate, city: CitySpec, params: CarveParams, neighborhood: str | None, source: str,
           release: bool) -> Block:
    way_ids = ways_of_segments(c.street.segment_ways[: max(len(c.polyline) - 1, 1)])
    truncated = c.full_length_m > params.max_length_m
    if not truncated:
        notes = ""
    elif release:
        notes = (f"OSM way {c.street.way_id} is {c.full_length_m:.0f} m; its first "
                 f"{params.max_length_m:.0f} m are the block")
    else:
        notes = (f"the street ({len(c.street.way_ids)} OSM ways) is {c.full_length_m:.0f} m; its first "
                 f"{params.max_length_m:.0f} m are the block")
    return Block(
        block_id=make_block_id(city.key, c.street.name, way_ids[0]),
        city=city.key,
        country=city.country,
        driving_side=city.driving_side,
        stratum=c.stratum,
        way_id=way_ids[0],
        street_name=c.street.name,
        neighborhood=neighborhood,
        highway_tag=c.street.highway,
        length_m=polyline_length_m(c.polyline),
        polyline=c.polyline,
        centroid=c.centroid,
        bbox=bbox(c.polyline),
        notes=notes,
        way_ids=way_ids,
        neighborhood_source=source,
    )


def carve_blocks(data: OsmData, city: CitySpec, params: CarveParams | None = None) -> list[Block]:
    """The blocks of one city (see the module docstring), sorted by block id."""
    return carve(data, city, params).blocks


def format_carving_counts(counts: Sequence[Mapping[str, Any]]) -> str:
    """The per-stratum counts of :func:`carve` as an aligned text table (one row per stratum)."""
    import pandas as pd

    return pd.DataFrame(list(counts), columns=list(COUNT_COLUMNS)).to_string(index=False)


# -- the blocks table -----------------------------------------------------------------------------

BLOCK_TABLE_COLUMNS = (
    "block_id", "city", "country", "driving_side", "stratum", "way_id", "street_name", "neighborhood",
    "highway_tag", "length_m", "polyline", "centroid_lat", "centroid_lon", "bbox",
    "neg_same_neighborhood", "neg_same_city", "neg_same_driving_side", "neg_random_city", "notes",
    "way_ids", "neighborhood_source", "carving_rules",
)
BLOCK_JSON_COLUMNS = ("polyline", "bbox", "way_ids")


def blocks_to_frame(blocks: Sequence[Block], carving_rules: str | None = None):
    """One row per block: the block fields of docs/benchmark.md section 1, the centroid as
    ``centroid_lat``/``centroid_lon``, and ``carving_rules`` (the rule set that carved them, when given)."""
    import pandas as pd

    rows = []
    for b in blocks:
        rows.append(
            {
                "block_id": b.block_id, "city": b.city, "country": b.country, "driving_side": b.driving_side,
                "stratum": b.stratum, "way_id": b.way_id, "street_name": b.street_name,
                "neighborhood": b.neighborhood, "highway_tag": b.highway_tag, "length_m": float(b.length_m),
                "polyline": [[float(p[0]), float(p[1])] for p in b.polyline],
                "centroid_lat": float(b.centroid[0]), "centroid_lon": float(b.centroid[1]),
                "bbox": [float(v) for v in b.bbox],
                "neg_same_neighborhood": b.neg_same_neighborhood, "neg_same_city": b.neg_same_city,
                "neg_same_driving_side": b.neg_same_driving_side, "neg_random_city": b.neg_random_city,
                "notes": b.notes, "way_ids": [int(v) for v in b.way_ids],
                "neighborhood_source": b.neighborhood_source, "carving_rules": carving_rules,
            }
        )
    df = pd.DataFrame(rows, columns=list(BLOCK_TABLE_COLUMNS))
    df["way_id"] = df["way_id"].astype("Int64")
    return df


def blocks_from_frame(df) -> list[Block]:
    """Inverse of :func:`blocks_to_frame` (reads what ``write_blocks_table`` wrote, also CSV)."""
    blocks = []
    for rec in df.to_dict("records"):
        rec = dict(rec)
        for key in ("polyline", "bbox"):
            if isinstance(rec.get(key), str):
                rec[key] = json.loads(rec[key])
        rec["centroid"] = [rec.pop("centroid_lat"), rec.pop("centroid_lon")]
        rec["polyline"] = [list(p) for p in rec["polyline"]]
        blocks.append(block_from_record(rec, "blocks table"))
    return blocks


def write_blocks_table(blocks: Sequence[Block], path: str | os.PathLike, carving_rules: str | None = None) -> Path:
    """Writes the blocks table as Parquet (``.parquet``) or CSV (``.csv``; list fields as JSON)."""
    from .tables import write_table

    df = blocks_to_frame(blocks, carving_rules)
    return write_table(df, path, json_columns=BLOCK_JSON_COLUMNS)


def read_blocks_table(path: str | os.PathLike) -> list[Block]:
    from .tables import read_table

    return blocks_from_frame(read_table(path, json_columns=BLOCK_JSON_COLUMNS))


def stratum_counts(blocks: Iterable[Block]) -> dict[str, int]:
    out = {s: 0 for s in STRATA}
    for b in blocks:
        out[b.stratum] = out.get(b.stratum, 0) + 1
    return out
