"""Carving rules (docs/benchmark.md section 8, Curation) on small hand-made OSM files: merged streets,
neighborhood areas from closed ways and multipolygon relations (file readers and Overpass agree),
unknown neighborhoods, and the release rules pinned against the base code's output."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from geofidelity_bench.curation.carving import CarveParams, carve, carve_blocks
from geofidelity_bench.curation.cities import CitySpec
from geofidelity_bench.curation.negatives import assign_negatives
from geofidelity_bench.curation.neighborhoods import NeighborhoodLabeler
from geofidelity_bench.curation.osm import OverpassClient, read_osm_file
from geofidelity_bench.geo import haversine_m

from fake_geo_servers import FakeOverpass

OSM = Path(__file__).parent / "data" / "osm"
CITY = CitySpec("testville", "XX", 60.0, 25.0, "R")
DLAT = 0.001  # ~111 m of latitude


def _nodes(rows) -> str:
    return "".join(f'<node id="{i}" lat="{lat}" lon="{lon}"/>\n' for i, lat, lon in rows)


def _way(wid, refs, **tags) -> str:
    nds = "".join(f'<nd ref="{r}"/>' for r in refs)
    tg = "".join(f'<tag k="{k.replace("_", ":") if k == "admin_level" else k}" v="{v}"/>' for k, v in tags.items())
    return f'<way id="{wid}">{nds}{tg}</way>\n'


def _write(path: Path, body: str) -> Path:
    path.write_text(f"<?xml version='1.0' encoding='UTF-8'?>\n<osm version=\"0.6\">\n{body}</osm>\n", encoding="utf-8")
    return path


# -- streets ------------------------------------------------------------------------------------


def _street_file(tmp_path: Path) -> Path:
    """Main Street: 4 ways along lon 25.0 (600 m, drawn in mixed directions, one secondary);
    Side Street: two disjoint pieces along lon 25.02 (300 m and 700 m); Lone Lane: one 550 m way."""
    main = [(100 + k, 60.0 + k * DLAT, 25.0) for k in range(7)]  # 6 segments of ~111 m
    side_a = [(200 + k, 60.0 + k * DLAT, 25.02) for k in range(4)]  # 3 segments
    side_b = [(300 + k, 60.01 + k * DLAT, 25.02) for k in range(8)]  # 7 segments, a gap of ~7 km away
    lone = [(400 + k, 60.0 + k * DLAT, 24.98) for k in range(6)]
    body = _nodes(main + side_a + side_b + lone)
    body += _way(11, [102, 101, 100], highway="residential", name="Main Street")  # reversed
    body += _way(12, [103, 104, 105], highway="secondary", name="Main Street")
    body += _way(13, [106, 105], highway="residential", name="Main Street")  # reversed
    body += _way(14, [102, 103], highway="residential", name="Main Street")
    body += _way(21, [200, 201, 202, 203], highway="residential", name="Side Street")
    body += _way(22, [300 + k for k in range(8)], highway="tertiary", name="Side Street")
    body += _way(31, [400 + k for k in range(6)], highway="residential", name="Lone Lane")
    return _write(tmp_path / "streets.osm", body)


def test_a_street_split_into_four_ways_is_one_block(tmp_path):
    data = read_osm_file(_street_file(tmp_path))
    params = CarveParams(radius_m=50_000)
    blocks = {b.street_name: b for b in carve_blocks(data, CITY, params)}
    main = blocks["Main Street"]
    ways = {w.way_id: w for w in data.ways}
    assert set(main.way_ids) == {11, 12, 13, 14}
    # walked from the southern end (the smaller (lat, lon)): 11, 14, 12, 13
    assert main.way_ids == (11, 14, 12, 13) and main.way_id == 11 and main.block_id == "testville_main_street_11"
    assert main.polyline[0] == (60.0, 25.0) and main.polyline[-1] == (60.006, 25.0) and len(main.polyline) == 7
    assert main.length_m == pytest.approx(sum(ways[i].length_m for i in main.way_ids), rel=1e-12)
    assert main.length_m == pytest.approx(haversine_m(60.0, 25.0, 60.006, 25.0), rel=1e-9)
    # 4 of 6 segments are residential: the chain is residential
    assert main.highway_tag == "residential" and main.stratum == "residential"
    # the release rule sees 4 short ways (at most 222 m) and keeps none of them
    release = carve_blocks(data, CITY, dataclasses.replace(params, rules="release"))
    assert "Main Street" not in {b.street_name for b in release}
    assert {b.street_name for b in release} == {"Lone Lane", "Side Street"}


def test_two_disjoint_streets_of_one_name_keep_the_longer(tmp_path):
    data = read_osm_file(_street_file(tmp_path))
    carving = carve(data, CITY, CarveParams(radius_m=50_000))
    side = [b for b in carving.blocks if b.street_name == "Side Street"]
    assert len(side) == 1 and side[0].way_ids == (22,) and side[0].stratum == "tertiary"
    assert side[0].length_m == pytest.approx(7 * haversine_m(60.0, 25.02, 60.001, 25.02), rel=1e-6)
    rows = {r["stratum"]: r for r in carving.counts}
    # the 333 m piece is a residential street removed by the name rule (a longer Side Street exists)
    assert rows["residential"]["same_name"] == 1 and rows["residential"]["streets"] == 3
    assert rows["residential"]["kept"] == 2 and rows["tertiary"]["kept"] == 1
    # a longer minimum removes the shorter streets by length, and the counts say so
    short = carve(data, CITY, CarveParams(radius_m=50_000, min_length_m=600))
    rows = {r["stratum"]: r for r in short.counts}
    assert rows["residential"]["too_short"] == 1 and rows["residential"]["kept"] == 1  # Lone Lane (555 m)
    # spacing: Lone Lane's midpoint is ~1.1 km from Main Street's, Side Street's ~1.6 km
    assert haversine_m(60.003, 25.0, 60.0025, 24.98) < 1300 < haversine_m(60.003, 25.0, 60.0135, 25.02)
    spaced = carve(data, CITY, CarveParams(radius_m=50_000, min_spacing_m=1300))
    rows = {r["stratum"]: r for r in spaced.counts}
    assert rows["residential"]["not_spaced"] == 1 and rows["residential"]["kept"] == 1
    assert {b.street_name for b in spaced.blocks} == {"Main Street", "Side Street"}


# -- neighborhoods --------------------------------------------------------------------------------


def _area_file(tmp_path: Path, extra_nodes: str = "", extra_ways: str = "", name: str = "areas.osm") -> Path:
    """Two areas on a 0.01-degree grid around (60.0, 25.0):

    * ``Small Quarter``: a closed way, the square [60.000, 60.004] x [25.000, 25.008];
    * ``Big District``: a multipolygon relation (admin_level 10), its outer ring [59.996, 60.012]
      x [24.990, 25.020] drawn as two member ways, with an inner ring (a hole)
      [60.008, 60.010] x [25.010, 25.014];
    * a place node ``Node Town`` at (60.02, 25.0), and an admin_level 8 boundary (not used).
    """
    sq = [(1, 60.000, 25.000), (2, 60.000, 25.008), (3, 60.004, 25.008), (4, 60.004, 25.000)]
    outer = [(11, 59.996, 24.990), (12, 59.996, 25.020), (13, 60.012, 25.020), (14, 60.012, 24.990)]
    inner = [(21, 60.008, 25.010), (22, 60.008, 25.014), (23, 60.010, 25.014), (24, 60.010, 25.010)]
    big8 = [(31, 59.9, 24.9), (32, 59.9, 25.1), (33, 60.1, 25.1), (34, 60.1, 24.9)]
    body = _nodes(sq + outer + inner + big8)
    body += '<node id="40" lat="60.02" lon="25.0"><tag k="place" v="town"/><tag k="name" v="Node Town"/></node>\n'
    body += extra_nodes
    body += _way(101, [1, 2, 3, 4, 1], place="quarter", name="Small Quarter")
    body += _way(111, [11, 12, 13])
    body += _way(112, [13, 14, 11])
    body += _way(121, [21, 22, 23, 24, 21])
    body += _way(131, [31, 32, 33, 34, 31], boundary="administrative", admin_level="8", name="Too Big")
    body += extra_ways
    body += ('<relation id="500"><member type="way" ref="111" role="outer"/><member type="way" ref="112" '
             'role="outer"/><member type="way" ref="121" role="inner"/><tag k="type" v="multipolygon"/>'
             '<tag k="boundary" v="administrative"/><tag k="admin_level" v="10"/>'
             '<tag k="name" v="Big District"/></relation>\n')
    return _write(tmp_path / name, body)


def _labels(data, points):
    labeler = NeighborhoodLabeler(data.areas, data.places, max_node_m=2000.0)
    return [labeler.label(lat, lon) for lat, lon in points]


POINTS = [
    (60.002, 25.004),  # in both areas: the smaller (the closed way) wins
    (60.006, 25.015),  # in the relation only
    (60.009, 25.012),  # in the relation's hole: no area; Node Town is ~1.2 km away
    (60.030, 25.000),  # outside every area, ~1.1 km from Node Town
    (60.050, 25.050),  # outside every area and > 2 km from any node: unknown
    (60.000, 25.004),  # on the closed way's edge: boundary points count as inside
]
EXPECTED = [("Small Quarter", "area"), ("Big District", "area"), ("Node Town", "node"), ("Node Town", "node"),
            (None, "none"), ("Small Quarter", "area")]


def test_neighborhood_areas_from_a_closed_way_and_a_multipolygon_relation(tmp_path):
    data = read_osm_file(_area_file(tmp_path))
    assert [(a.osm_type, a.osm_id, a.name, a.kind) for a in data.areas] == [
        ("relation", 500, "Big District", "admin_level=10"), ("way", 101, "Small Quarter", "quarter")]
    big = data.areas[0]
    assert len(big.polygons) == 1 and len(big.polygons[0]) == 2  # an outer ring and one hole
    # the square's area: WGS84 geodesic area of its corners (pyproj), and ~ the spherical zone
    import math

    from pyproj import Geod

    small = data.areas[1]
    geod, _ = Geod(ellps="WGS84").polygon_area_perimeter([25.0, 25.008, 25.008, 25.0], [60.0, 60.0, 60.004, 60.004])
    assert small.area_m2 == pytest.approx(abs(geod), rel=1e-9)
    r = 6_371_008.8
    zone = r * r * math.radians(0.008) * (math.sin(math.radians(60.004)) - math.sin(math.radians(60.0)))
    assert small.area_m2 == pytest.approx(zone, rel=1e-2)
    big_hole = big.area_m2 + abs(Geod(ellps="WGS84").polygon_area_perimeter(
        [25.010, 25.014, 25.014, 25.010], [60.008, 60.008, 60.010, 60.010])[0])
    outer = abs(Geod(ellps="WGS84").polygon_area_perimeter([24.99, 25.02, 25.02, 24.99], [59.996, 59.996, 60.012, 60.012])[0])
    assert big_hole == pytest.approx(outer, rel=1e-9)  # the hole is cut out
    assert _labels(data, POINTS) == EXPECTED
    # release rules ignore areas: the nearest node within 2 km, else "downtown"
    release = NeighborhoodLabeler(data.areas, data.places, max_node_m=2000.0, release=True)
    assert release.label(60.002, 25.004) == ("downtown", "none")
    assert release.label(60.030, 25.000) == ("Node Town", "node")


def test_file_formats_and_overpass_give_the_same_areas(tmp_path):
    import osmium

    xml = _area_file(tmp_path)
    data = read_osm_file(xml)
    pbf = tmp_path / "areas.osm.pbf"
    with osmium.SimpleWriter(str(pbf)) as writer:
        for obj in osmium.FileProcessor(str(xml)):
            writer.add(obj)
    assert read_osm_file(pbf) == data
    assert read_osm_file(xml, areas=False).areas == ()
    with FakeOverpass(data) as srv:
        client = OverpassClient([f"{srv.url}/api/interpreter"])
        fetched = client.fetch(60.0, 25.0, 5000)
        assert fetched.areas == data.areas  # assembled with shapely from out-geom member rings
        assert client.fetch(60.0, 25.0, 5000, areas=False).areas == ()
        assert "relation[" not in srv.queries[-1] and 'relation["boundary"="administrative"]' in srv.queries[0]


def test_blocks_take_area_labels_and_unknown_names_never_match(tmp_path):
    """Streets in the small quarter and far outside every area; unknown labels never pair up."""
    rows, body, nid = [], "", 1000
    for wid, (lat0, lon0, name) in enumerate([(60.0005, 25.001, "In Quarter"), (60.04, 25.04, "Far Away")], start=901):
        ids = []
        for k in range(7):
            rows.append((nid, lat0 + k * 0.0002, lon0 + k * 0.001))
            ids.append(nid)
            nid += 1
        body += _way(wid, ids, highway="residential", name=name)
    data = read_osm_file(_area_file(tmp_path, _nodes(rows), body, name="both.osm"))
    blocks = {b.street_name: b for b in carve_blocks(data, CITY, CarveParams(min_length_m=300, min_spacing_m=100))}
    assert (blocks["In Quarter"].neighborhood, blocks["In Quarter"].neighborhood_source) == ("Small Quarter", "area")
    assert blocks["Far Away"].neighborhood is None and blocks["Far Away"].neighborhood_source == "none"
    # negatives: A and B unknown, C labelled, all within 1 km. If unknown matched unknown, A would
    # always draw B as its same-neighborhood negative; it draws from every near block instead.
    a = blocks["Far Away"]
    b = dataclasses.replace(a, block_id="testville_b_2", centroid=(a.centroid[0] + 0.001, a.centroid[1]))
    c = dataclasses.replace(a, block_id="testville_c_3", centroid=(a.centroid[0] - 0.001, a.centroid[1]),
                            neighborhood="Somewhere", neighborhood_source="area")
    picks = {next(x for x in assign_negatives([a, b, c], seed=seed) if x.block_id == a.block_id).neg_same_neighborhood
             for seed in range(20)}
    assert picks == {b.block_id, c.block_id}
    # a labelled block always draws its same-label neighbor
    d = dataclasses.replace(c, block_id="testville_d_4", centroid=(a.centroid[0], a.centroid[1] + 0.001))
    for seed in range(5):
        assert next(x for x in assign_negatives([a, b, c, d], seed=seed)
                    if x.block_id == c.block_id).neg_same_neighborhood == d.block_id


def test_unknown_neighborhoods_refuse_l1_l2_and_neighborhood_controls(tmp_path):
    from geofidelity_bench.benchmark import load_benchmark
    from geofidelity_bench.prompts import PromptError, build_prompt

    bench = load_benchmark("demo")
    target = bench.blocks[0]
    blocks = [dataclasses.replace(target, neighborhood=None, neighborhood_source="none")] + list(bench.blocks[1:])
    from geofidelity_bench.benchmark import Benchmark

    changed = Benchmark(blocks, bench.references, cities=list(bench.cities.values()), name="t", source="t")
    for cond in ("L1", "L2", "C_SHUFFLED_NEIGHBORHOOD", "C_WRONG_STREET_NEIGHBORHOOD"):
        with pytest.raises(PromptError, match="no neighborhood"):
            build_prompt(changed, target.block_id, cond)
    assert build_prompt(changed, target.block_id, "L0").text


# -- the release rules, pinned --------------------------------------------------------------------


def test_release_rules_reproduce_the_base_code_output():
    """tests/data/osm/release_rules_expected.csv was written by the base code (commit 5a1254f) with
    tests/data/osm/make_release_rules_expected.py; the release rules must give it back exactly."""
    with open(OSM / "release_rules_expected.csv", encoding="utf-8") as fh:
        expected = list(csv.DictReader(fh))
    cities = {"west_oakland.osm.bz2": CitySpec("west_oakland", "US", 37.8076, -122.3004, "R"),
              "helsinki.osm.pbf": CitySpec("helsinki", "FI", 60.1699, 24.9384, "R")}
    cases = sorted({(r["file"], r["min_length_m"], r["min_spacing_m"]) for r in expected})
    assert len(cases) == 4
    for file, min_len, min_sp in cases:
        params = CarveParams(min_length_m=float(min_len), min_spacing_m=float(min_sp), rules="release")
        blocks = carve_blocks(read_osm_file(OSM / file, areas=False), cities[file], params)
        want = [r for r in expected if (r["file"], r["min_length_m"], r["min_spacing_m"]) == (file, min_len, min_sp)]
        got = [{"block_id": b.block_id, "way_id": str(b.way_id), "stratum": b.stratum, "highway_tag": b.highway_tag,
                "street_name": b.street_name, "neighborhood": b.neighborhood, "length_m": repr(b.length_m),
                "centroid_lat": repr(b.centroid[0]), "centroid_lon": repr(b.centroid[1]),
                "n_points": str(len(b.polyline))} for b in blocks]
        assert got == [{k: r[k] for k in got[0]} for r in want] if got else want == []
        assert all(b.way_ids == (b.way_id,) for b in blocks)


def test_canonical_format_carries_way_ids_and_keeps_old_fingerprints(tmp_path):
    import json
    import hashlib

    from geofidelity_bench.benchmark import Benchmark, load_benchmark, save_benchmark

    demo = load_benchmark("demo")
    assert all(b.way_ids == () and b.neighborhood_source is None for b in demo.blocks)
    # the fingerprint of a benchmark without the new fields, computed as the base code did
    h = hashlib.sha256()
    for b in demo.blocks:
        rec = dataclasses.asdict(b)
        rec.pop("way_ids"), rec.pop("neighborhood_source"), rec.pop("neg_same_neighborhood_kind")  # later fields
        rec["polyline"] = [list(p) for p in b.polyline]
        rec["centroid"], rec["bbox"] = list(b.centroid), list(b.bbox)
        h.update(json.dumps(rec, sort_keys=True, default=str).encode())
    for r in demo.references:
        h.update(f"{r.reference_id}|{r.block_id}|".encode())
        h.update(hashlib.sha256(r.image_bytes).digest())
    assert demo.fingerprint == h.hexdigest()
    blocks = [dataclasses.replace(b, way_ids=(5, 3), neighborhood_source="area") for b in demo.blocks]
    bench = Benchmark(blocks, demo.references, cities=list(demo.cities.values()), name="x", source="x")
    save_benchmark(bench, tmp_path / "b")
    again = load_benchmark(str(tmp_path / "b"))
    assert [(b.way_ids, b.neighborhood_source) for b in again.blocks] == [((5, 3), "area")] * len(blocks)
    assert again.fingerprint == bench.fingerprint != demo.fingerprint


def test_carving_errors_are_clear(tmp_path):
    from geofidelity_bench.curation import CurationError

    with pytest.raises(CurationError, match=r"carving rules must be one of \['default', 'release'\], got 'v3'"):
        CarveParams(rules="v3")
    # the area handler needs a sorted file; the message names the file and the fix
    body = _nodes([(1, 60.0, 25.0), (2, 60.001, 25.0), (3, 60.002, 25.0)])
    body += _way(9, [2, 3], highway="residential", name="B") + _way(8, [1, 2], highway="residential", name="A")
    unsorted = _write(tmp_path / "unsorted.osm", body)
    with pytest.raises(CurationError, match=r"unsorted\.osm.*osmium sort"):
        read_osm_file(unsorted)
    assert [w.way_id for w in read_osm_file(unsorted, areas=False).ways] == [8, 9]  # release rules need no areas


def test_a_block_exactly_at_the_near_limit_is_near():
    """docs/benchmark.md section 8: ``near`` = the same-city blocks "within" the limit, boundary included
    (``<=``). b is exactly ``near_m`` from a: b is a's only near block, so a's same-neighborhood negative is
    always b and its same-city negative always the far c, for every seed. One float below the distance,
    b is far and the draws vary."""
    from conftest import make_block

    a = make_block("t_a", neighborhood="Quarter", centroid=(48.0, 2.0))
    b = make_block("t_b", neighborhood="Quarter", centroid=(48.0 + 0.007, 2.0))  # ~780 m north
    c = make_block("t_c", neighborhood="Quarter", centroid=(48.05, 2.0))  # ~5.6 km north
    limit = haversine_m(*a.centroid, *b.centroid)

    def negatives_of_a(near_m, seed):
        out = next(x for x in assign_negatives([a, b, c], seed=seed, near_m=near_m) if x.block_id == "t_a")
        return out.neg_same_neighborhood, out.neg_same_city

    assert {negatives_of_a(limit, seed) for seed in range(20)} == {("t_b", "t_c")}
    below = {negatives_of_a(float(np.nextafter(limit, 0.0)), seed) for seed in range(20)}
    assert {n for n, _ in below} == {"t_b", "t_c"} and {s for _, s in below} == {"t_b", "t_c"}


def test_the_default_near_limit_is_1000_m():
    from conftest import make_block
    from geofidelity_bench.curation.negatives import NEAR_M

    assert NEAR_M == 1000.0
    a = make_block("t_a", neighborhood="Quarter", centroid=(48.0, 2.0))
    inside = make_block("t_b", neighborhood="Quarter", centroid=(48.0 + 995 / 111_195, 2.0))
    outside = make_block("t_c", neighborhood="Quarter", centroid=(48.0 + 1005 / 111_195, 2.0))
    assert 990 < haversine_m(*a.centroid, *inside.centroid) < 1000 < haversine_m(*a.centroid, *outside.centroid) < 1010
    for seed in range(10):
        got = next(x for x in assign_negatives([a, inside, outside], seed=seed) if x.block_id == "t_a")
        assert (got.neg_same_neighborhood, got.neg_same_city) == ("t_b", "t_c")
