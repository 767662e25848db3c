"""Streets for carving (docs/benchmark.md section 8, Curation): what one block is cut from.

* Default rule: a street is the longest chain of connected OSM ways that share an exact
  ``name``: the ways are merged with :func:`shapely.ops.linemerge` into pieces (which end where
  three or more ways of the name meet), the pieces are split at gaps into connected sets, and
  each set gives its longest simple path of pieces (every path is tried for sets of up to
  :data:`EXHAUSTIVE_PIECES` pieces, larger sets grow greedily from their longest piece). A
  name can thus give several streets (one per connected set). Its ``highway`` is the
  value that covers the most length of the chain (ties: the alphabetically first), its
  polyline runs from the end whose ``(lat, lon)`` is smaller, and it keeps the ids of its ways
  in the order they are walked.
* Release rule (``--release-rules``): every way is a street of its own.

Then, for either rule, :func:`longest_per_name` keeps the longest street of every name (ties:
smaller first way id).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from ..geo import haversine_m, polyline_length_m
from .osm import WayRecord

Point = tuple[float, float]


@dataclass(frozen=True)
class Street:
    """A polyline of ``(lat, lon)`` points made of whole OSM ways of one name.

    ``segment_ways[i]`` is the id of the way that holds segment ``i`` (points ``i`` to ``i + 1``).
    """

    name: str
    highway: str
    geometry: tuple[Point, ...]
    segment_ways: tuple[int, ...]

    @property
    def way_ids(self) -> tuple[int, ...]:
        """The ids of the street's ways, in the order the polyline walks them."""
        return ways_of_segments(self.segment_ways)

    @property
    def way_id(self) -> int:
        return self.way_ids[0]

    @property
    def length_m(self) -> float:
        return polyline_length_m(self.geometry)


def ways_of_segments(segment_ways: Sequence[int]) -> tuple[int, ...]:
    """Distinct way ids in order of first appearance."""
    return tuple(dict.fromkeys(segment_ways))


def single_way_streets(ways: Iterable[WayRecord]) -> list[Street]:
    """The release rule: one street per way (its own direction)."""
    return [Street(w.name, w.highway, w.geometry, (w.way_id,) * (len(w.geometry) - 1)) for w in ways]


def _segment_key(a: Point, b: Point) -> tuple[Point, Point]:
    return (a, b) if a <= b else (b, a)


def _dominant_highway(segment_ways: Sequence[int], geometry: Sequence[Point], highway_of: dict[int, str]) -> str:
    lengths: dict[str, float] = {}
    for wid, a, b in zip(segment_ways, geometry, geometry[1:]):
        hw = highway_of[wid]
        lengths[hw] = lengths.get(hw, 0.0) + haversine_m(a[0], a[1], b[0], b[1])
    return min(lengths, key=lambda hw: (-lengths[hw], hw))


#: a connected set of same-name pieces with more pieces than this is searched greedily (from the
#: longest piece) instead of over every simple path
EXHAUSTIVE_PIECES = 24


def _longest_path(pieces: Sequence[tuple[Point, ...]]) -> list[tuple[Point, ...]]:
    """The longest simple path (no node twice) through connected pieces (polylines meeting at
    their ends), as pieces oriented along the path; ties go to the path found first."""
    lengths = [polyline_length_m(p) for p in pieces]
    adjacent: dict[Point, list[int]] = {}
    for i, p in enumerate(pieces):
        adjacent.setdefault(p[0], []).append(i)
        if p[-1] != p[0]:
            adjacent.setdefault(p[-1], []).append(i)
    best: tuple[float, list[tuple[Point, ...]]] = (-1.0, [])

    def walk(node: Point, seen_nodes: set, used: list[tuple[Point, ...]], total: float) -> None:
        nonlocal best
        if total > best[0]:
            best = (total, list(used))
        for i in adjacent.get(node, []):
            p = pieces[i]
            if p[0] == p[-1]:
                continue  # a closed piece cannot be walked through
            nxt, oriented = (p[-1], p) if p[0] == node else (p[0], p[::-1])
            if nxt in seen_nodes:
                continue
            seen_nodes.add(nxt)
            used.append(oriented)
            walk(nxt, seen_nodes, used, total + lengths[i])
            used.pop()
            seen_nodes.discard(nxt)

    if len(pieces) <= EXHAUSTIVE_PIECES:
        for node in sorted(adjacent):
            walk(node, {node}, [], 0.0)
    else:  # greedy: extend the longest piece at both ends by the longest unused piece
        first = max(range(len(pieces)), key=lambda i: (lengths[i], -i))
        path, seen = [pieces[first]], {pieces[first][0], pieces[first][-1]}
        for end in (-1, 0):
            while True:
                node = path[end][-1] if end == -1 else path[0][0]
                options = [i for i in adjacent.get(node, []) if pieces[i][0] != pieces[i][-1]
                           and ({pieces[i][0], pieces[i][-1]} - {node}).isdisjoint(seen)]
                if not options:
                    break
                i = max(options, key=lambda j: (lengths[j], -j))
                p = pieces[i]
                if end == -1:
                    path.append(p if p[0] == node else p[::-1])
                    seen.add(path[-1][-1])
                else:
                    path.insert(0, p if p[-1] == node else p[::-1])
                    seen.add(path[0][0])
        best = (sum(polyline_length_m(p) for p in path), path)
    if not best[1]:  # only closed pieces: the longest ring itself
        best = (0.0, [max(pieces, key=polyline_length_m)])
    return best[1]


def _components(pieces: Sequence[tuple[Point, ...]]) -> list[list[tuple[Point, ...]]]:
    """Pieces grouped by shared end points (union-find), in order of their first piece."""
    parent = list(range(len(pieces)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    at: dict[Point, int] = {}
    for i, p in enumerate(pieces):
        for end in (p[0], p[-1]):
            if end in at:
                parent[root(i)] = root(at[end])
            else:
                at[end] = i
    groups: dict[int, list[tuple[Point, ...]]] = {}
    for i, p in enumerate(pieces):
        groups.setdefault(root(i), []).append(p)
    return list(groups.values())


def merged_streets(ways: Iterable[WayRecord]) -> list[Street]:
    """The default rule (see the module docstring): per name, the ways merged with ``linemerge``
    into pieces, the pieces grouped into connected sets (split at gaps), and of each set the
    longest chain (simple path) of pieces; sorted by name then first way id."""
    from shapely.geometry import LineString, MultiLineString
    from shapely.ops import linemerge

    by_name: dict[str, list[WayRecord]] = {}
    for w in sorted(ways, key=lambda w: w.way_id):
        by_name.setdefault(w.name, []).append(w)
    streets: list[Street] = []
    for name in sorted(by_name):
        group = by_name[name]
        owner: dict[tuple[Point, Point], int] = {}
        for w in group:
            for a, b in zip(w.geometry, w.geometry[1:]):
                owner.setdefault(_segment_key(a, b), w.way_id)
        highway_of = {w.way_id: w.highway for w in group}
        merged = linemerge(MultiLineString([LineString([(lon, lat) for lat, lon in w.geometry]) for w in group]))
        pieces = [tuple((lat, lon) for lon, lat in line.coords) for line in getattr(merged, "geoms", [merged])]
        for component in _components(pieces):
            path = _longest_path(component)
            pts = list(path[0])
            for piece in path[1:]:
                pts.extend(piece[1:])
            if pts[0] > pts[-1]:
                pts.reverse()
            seg_ways = tuple(owner[_segment_key(a, b)] for a, b in zip(pts, pts[1:]))
            geometry = tuple(pts)
            streets.append(Street(name, _dominant_highway(seg_ways, geometry, highway_of), geometry, seg_ways))
    return sorted(streets, key=lambda s: (s.name, s.way_id))


def longest_per_name(streets: Iterable[Street]) -> tuple[list[Street], list[Street]]:
    """``(kept, shorter)``: the longest street of every exact name (ties: smaller first way id),
    sorted by name, and the others of the same names."""
    best: dict[str, Street] = {}
    others: list[Street] = []
    for s in streets:
        if s.name not in best or (-s.length_m, s.way_id) < (-best[s.name].length_m, best[s.name].way_id):
            if s.name in best:
                others.append(best[s.name])
            best[s.name] = s
        else:
            others.append(s)
    return [best[n] for n in sorted(best)], others
