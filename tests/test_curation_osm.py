"""OSM input and block carving (docs/benchmark.md section 8, Curation) on the real extracts in tests/data/osm, and the
Overpass client against a loopback fake (retries, endpoint fallback, on-disk cache)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from geofidelity_bench.benchmark import is_safe_id
from geofidelity_bench.curation import CurationError
from geofidelity_bench.curation.carving import (
    STRATUM_OF_HIGHWAY,
    carve,
    format_carving_counts,
    STRATUM_QUOTAS,
    CarveParams,
    carve_blocks,
    make_block_id,
    read_blocks_table,
    slugify,
    truncate_polyline,
    write_blocks_table,
)
from geofidelity_bench.curation.cities import BUILTIN_CITIES, CitySpec, load_city_file, resolve_cities
from geofidelity_bench.curation.http import RetryPolicy
from geofidelity_bench.curation.osm import (
    OsmData,
    OverpassClient,
    PlaceNode,
    WayRecord,
    overpass_query,
    parse_overpass_json,
    read_osm_file,
)
from geofidelity_bench.geo import arc_midpoint, haversine_m, polyline_length_m

from fake_geo_servers import FakeOverpass

OSM = Path(__file__).parent / "data" / "osm"
WEST_OAKLAND = OSM / "west_oakland.osm.bz2"
HELSINKI = OSM / "helsinki.osm.pbf"
OAKLAND = CitySpec("west_oakland", "US", 37.8076, -122.3004, "R")
HELSINKI_CITY = CitySpec("helsinki", "FI", 60.1699, 24.9384, "R")
RELEASE = CarveParams(rules="release")


@pytest.fixture(scope="module")
def oakland() -> OsmData:
    return read_osm_file(WEST_OAKLAND)


@pytest.fixture(scope="module")
def helsinki() -> OsmData:
    return read_osm_file(HELSINKI)


def _convert(src: Path, dst: Path) -> Path:
    import osmium

    with osmium.SimpleWriter(str(dst), overwrite=True) as writer:
        for obj in osmium.FileProcessor(str(src)):
            writer.add(obj)
    return dst


# -- readers -----------------------------------------------------------------------------------


def test_west_oakland_records(oakland):
    assert len(oakland.ways) == 20  # the 20 named highway ways of the extract
    names = {w.name for w in oakland.ways}
    assert {"7th Street", "8th Street", "9th Street", "Campbell Street", "Chase Street", "Goss Street",
            "Willow Street", "Wood Street"} <= names
    assert oakland.places == ()
    assert [w.way_id for w in oakland.ways] == sorted(w.way_id for w in oakland.ways)
    for w in oakland.ways:
        assert w.highway and w.name and len(w.geometry) >= 2
        assert all(37.7 < lat < 37.9 and -122.4 < lon < -122.2 for lat, lon in w.geometry)


def test_stdlib_xml_and_pyosmium_readers_agree_on_west_oakland(oakland, tmp_path):
    pbf = _convert(WEST_OAKLAND, tmp_path / "west_oakland.osm.pbf")
    plain = _convert(WEST_OAKLAND, tmp_path / "west_oakland.osm")
    assert read_osm_file(pbf) == oakland  # pyosmium on PBF vs. the standard library on .osm.bz2
    assert read_osm_file(plain) == oakland  # the standard library on plain XML


def test_pyosmium_and_stdlib_readers_agree_on_helsinki(helsinki, tmp_path):
    xml = _convert(HELSINKI, tmp_path / "helsinki.osm.bz2")
    other = read_osm_file(xml)
    assert other == helsinki
    assert len(helsinki.ways) > 700
    assert {p.name for p in helsinki.places} == {"Kaartinkaupunki", "Siltasaari", "Hakaniemi", "Kluuvi", "Keskusta",
                                                 "Kaisaniemi"}  # the "city" node Helsinki is not a place kind
    assert all(p.place in ("suburb", "neighbourhood") for p in helsinki.places)


def test_ways_cut_by_the_extract_keep_their_longest_located_run(tmp_path):
    xml = tmp_path / "cut.osm"
    xml.write_text(
        """<?xml version='1.0' encoding='UTF-8'?>
<osm version="0.6">
  <node id="1" lat="60.0" lon="25.0"/><node id="2" lat="60.001" lon="25.0"/>
  <node id="4" lat="60.003" lon="25.0"/><node id="5" lat="60.006" lon="25.0"/>
  <node id="9" lat="60.0" lon="25.01"><tag k="place" v="quarter"/><tag k="name" v="Q"/></node>
  <node id="10" lat="60.0" lon="25.02"><tag k="place" v="city"/><tag k="name" v="C"/></node>
  <way id="7"><nd ref="1"/><nd ref="2"/><nd ref="3"/><nd ref="4"/><nd ref="5"/>
    <tag k="highway" v="residential"/><tag k="name" v="Cut Street"/></way>
  <way id="8"><nd ref="1"/><nd ref="3"/><tag k="highway" v="residential"/><tag k="name" v="Lost"/></way>
  <way id="11"><nd ref="1"/><nd ref="2"/><tag k="highway" v="residential"/></way>
</osm>
""",
        encoding="utf-8",
    )
    data = read_osm_file(xml)
    assert [w.way_id for w in data.ways] == [7]  # 8 has one located node, 11 no name
    assert data.ways[0].geometry == ((60.003, 25.0), (60.006, 25.0))  # the longer of the two runs
    assert data.places == (PlaceNode(9, "Q", "quarter", 60.0, 25.01),)
    pbf = _convert(xml, tmp_path / "cut.osm.pbf")
    assert read_osm_file(pbf) == data


def test_reader_errors(tmp_path):
    with pytest.raises(CurationError, match="not found"):
        read_osm_file(tmp_path / "missing.osm")
    bad = tmp_path / "bad.osm"
    bad.write_text("<osm><node id='1'", encoding="utf-8")
    with pytest.raises(CurationError, match="cannot read OSM XML"):
        read_osm_file(bad)
    other = tmp_path / "x.geojson"
    other.write_text("{}")
    with pytest.raises(CurationError, match="unknown OSM file type"):
        read_osm_file(other)


# -- Overpass -----------------------------------------------------------------------------------


def test_parse_overpass_out_geom_json():
    payload = {
        "elements": [
            {"type": "way", "id": 5, "tags": {"highway": "primary", "name": "Main"},
             "geometry": [{"lat": 1.0, "lon": 2.0}, {"lat": 1.001, "lon": 2.0}, None, {"lat": 1.002, "lon": 2.0}]},
            {"type": "way", "id": 6, "tags": {"highway": "primary"}, "geometry": [{"lat": 1, "lon": 2}, {"lat": 2, "lon": 2}]},
            {"type": "node", "id": 3, "lat": 1.0, "lon": 2.0, "tags": {"place": "suburb", "name": "S"}},
            {"type": "node", "id": 4, "lat": 1.0, "lon": 2.0, "tags": {"place": "city", "name": "X"}},
        ]
    }
    data = parse_overpass_json(payload)
    assert data.ways == (WayRecord(5, "Main", "primary", ((1.0, 2.0), (1.001, 2.0))),)
    assert data.places == (PlaceNode(3, "S", "suburb", 1.0, 2.0),)


def test_overpass_client_retries_falls_back_and_caches(oakland, tmp_path):
    sleeps: list[float] = []
    policy = RetryPolicy(max_rate_retries=2, max_server_retries=1, sleep=sleeps.append)
    with FakeOverpass(oakland) as first, FakeOverpass(oakland) as second:
        first.fail_next("interpreter", 429, count=1)
        first.fail_next("interpreter", 504, count=10)  # then the first endpoint keeps timing out
        client = OverpassClient([f"{first.url}/api/interpreter", f"{second.url}/api/interpreter"],
                                cache_dir=tmp_path / "cache", retry=policy, timeout_s=5)
        data = client.fetch(OAKLAND.lat, OAKLAND.lon, 6000)
        assert data == oakland  # the Overpass JSON gives exactly the extract's records
        assert first.count("interpreter", 429) == 1 and first.count("interpreter", 504) == 2
        assert second.count("interpreter", 200) == 1
        assert sleeps[0] == 2.0  # 429: rate sleep; then a brief 5xx sleep
        query = overpass_query(OAKLAND.lat, OAKLAND.lon, 6000)
        assert 'way["highway"]["name"](around:6000,37.8076000,-122.3004000)' in query and "out tags geom" in query
        assert 'node["place"~"^(suburb|neighbourhood|quarter|district|town)$"]["name"](around:8000' in query
        assert (tmp_path / "cache" / f"{OverpassClient.query_key(query)}.json").is_file()
        n = first.count() + second.count()
        assert client.fetch(OAKLAND.lat, OAKLAND.lon, 6000) == oakland
        assert first.count() + second.count() == n  # served from the cache
        # a small radius leaves ways out, like Overpass' around filter
        assert len(OverpassClient([f"{second.url}/api/interpreter"]).fetch(OAKLAND.lat, OAKLAND.lon, 100).ways) < 20


def test_overpass_all_endpoints_failing_is_a_clear_error(oakland):
    policy = RetryPolicy(max_server_retries=0, sleep=lambda s: None)
    with FakeOverpass(oakland) as srv:
        srv.fail_next("interpreter", 400, count=5)
        client = OverpassClient([f"{srv.url}/api/interpreter"], retry=policy)
        with pytest.raises(CurationError, match=r"(?s)every Overpass endpoint failed.*HTTP 400"):
            client.fetch(1.0, 2.0, 10)


# -- carving --------------------------------------------------------------------------------


def test_truncate_polyline_cuts_at_the_arc_length():
    line = [(0.0, 0.0), (0.0, 0.01), (0.0, 0.03)]  # ~1112 m + ~2224 m along the equator
    cut = truncate_polyline(line, 2000.0)
    assert len(cut) == 3 and cut[:2] == ((0.0, 0.0), (0.0, 0.01))
    assert polyline_length_m(cut) == pytest.approx(2000.0, abs=1e-6)
    assert truncate_polyline(line, 5000.0) == tuple(line)
    exact = truncate_polyline(line, polyline_length_m(line[:2]))
    assert exact == ((0.0, 0.0), (0.0, 0.01))


def test_slug_and_block_ids():
    assert slugify("Rue du Faubourg Saint-Honoré") == "rue_du_faubourg_saint_honore"
    assert slugify("Ålandsgatan / 7th Street") == "alandsgatan_7th_street"
    assert slugify("銀座通り") == ""
    assert make_block_id("tokyo", "銀座通り", 123) == "tokyo_way_123"
    assert make_block_id("paris", "../../etc/passwd", 1) == "paris_etc_passwd_1"
    long_id = make_block_id("san_francisco", "x" * 500, 10**15)
    assert is_safe_id(long_id)


def _check_blocks(blocks, params: CarveParams, city: CitySpec):
    assert len({b.block_id for b in blocks}) == len(blocks)
    assert len(blocks) <= params.total_blocks
    for b in blocks:
        assert is_safe_id(b.block_id) and b.block_id == make_block_id(city.key, b.street_name, b.way_id)
        assert b.city == city.key and b.country == city.country and b.driving_side == city.driving_side
        assert b.stratum == STRATUM_OF_HIGHWAY[b.highway_tag]
        assert b.length_m <= params.max_length_m + 1e-6
        assert b.length_m == pytest.approx(polyline_length_m(b.polyline))
        assert b.centroid == pytest.approx(arc_midpoint(b.polyline))
        assert b.bbox[0] <= b.centroid[0] <= b.bbox[2] and b.bbox[1] <= b.centroid[1] <= b.bbox[3]
        assert b.neighborhood or params.rules == "default"  # only the default rule leaves a name unknown
        assert b.way_ids[0] == b.way_id
    for a, b in itertools.combinations(blocks, 2):
        assert haversine_m(*a.centroid, *b.centroid) >= params.min_spacing_m
    names = [b.street_name for b in blocks]
    assert len(names) == len(set(names))


def test_carving_west_oakland_with_release_rules(oakland):
    blocks = carve_blocks(oakland, OAKLAND, RELEASE)
    _check_blocks(blocks, RELEASE, OAKLAND)
    assert [b.block_id for b in blocks] == [
        "west_oakland_7th_street_202455451",
        "west_oakland_8th_street_6358365",
        "west_oakland_campbell_street_6340506",
        "west_oakland_wood_street_202455444",
    ]
    by_id = {b.block_id: b for b in blocks}
    assert by_id["west_oakland_7th_street_202455451"].stratum == "major"
    # Wood Street: the 795 m unclassified way is longer than the 670 m service way of the same name
    wood = by_id["west_oakland_wood_street_202455444"]
    assert wood.highway_tag == "unclassified" and wood.stratum == "residential"
    assert all(b.neighborhood == "downtown" for b in blocks)  # no place node in the extract
    assert all(b.length_m >= 500 for b in blocks)
    assert all(b.way_ids == (b.way_id,) and b.neighborhood_source == "none" for b in blocks)
    assert carve_blocks(oakland, OAKLAND, RELEASE) == blocks  # deterministic


def test_carving_west_oakland_by_default_merges_streets_and_invents_no_name(oakland):
    blocks = carve_blocks(oakland, OAKLAND)
    _check_blocks(blocks, CarveParams(), OAKLAND)
    assert all(b.neighborhood is None and b.neighborhood_source == "none" for b in blocks)  # never "downtown"
    ways = {w.way_id: w for w in oakland.ways}
    for b in blocks:
        assert all(ways[i].name == b.street_name for i in b.way_ids)
        # the block is its ways laid end to end (no cut: all are under 2,000 m)
        assert b.length_m == pytest.approx(sum(ways[i].length_m for i in b.way_ids), rel=1e-9)
    seventh = next(b for b in blocks if b.street_name == "7th Street")
    assert len(seventh.way_ids) == 3 and seventh.length_m > 900  # 3 ways, vs. the release's 552 m single way
    assert carve_blocks(oakland, OAKLAND) == blocks


@pytest.mark.parametrize("rules", ["default", "release"])
def test_carving_is_independent_of_input_order(oakland, rules):
    shuffled = OsmData(tuple(reversed(oakland.ways)), tuple(reversed(oakland.places)))
    params = CarveParams(min_length_m=50, min_spacing_m=100, rules=rules)
    assert carve_blocks(shuffled, OAKLAND, params) == carve_blocks(oakland, OAKLAND, params)


def test_carving_helsinki_release_rules_and_smaller_minimum(helsinki):
    blocks = carve_blocks(helsinki, HELSINKI_CITY, RELEASE)
    # the extract is 1.6 x 1 km: a single named way reaches 500 m
    assert [(b.block_id, b.stratum, b.neighborhood) for b in blocks] == [
        ("helsinki_aleksanterinkatu_25361147", "pedestrian", "Kluuvi")]
    params = CarveParams(min_length_m=100, rules="release")
    small = carve_blocks(helsinki, HELSINKI_CITY, params)
    _check_blocks(small, params, HELSINKI_CITY)
    counts = {s: sum(b.stratum == s for b in small) for s in STRATUM_QUOTAS}
    assert counts["major"] == 3 and counts["residential"] == 3  # quotas filled
    assert all(counts[s] <= q for s, q in STRATUM_QUOTAS.items()) or len(small) <= 10
    assert {b.neighborhood for b in small} <= {p.name for p in helsinki.places}
    assert carve_blocks(helsinki, HELSINKI_CITY, params) == small


def test_carving_helsinki_default_rule_keeps_every_spaced_street(helsinki):
    """Merged streets: 7 names reach 500 m (the release's rule finds 1); their midpoints crowd the
    1.6 x 1 km extract so that at most 3 are 400 m apart, and carving keeps such a largest set."""
    from geofidelity_bench.curation.carving import carve

    carving = carve(helsinki, HELSINKI_CITY)
    blocks = carving.blocks
    _check_blocks(blocks, CarveParams(), HELSINKI_CITY)
    candidates = {}
    for name in {w.name for w in helsinki.ways}:  # independent: total length of each name's ways
        if sum(w.length_m for w in helsinki.ways if w.name == name) >= 500:
            candidates[name] = True
    long_streets = [b for b in blocks if b.length_m >= 500]
    assert len(long_streets) == len(blocks) == 3 and {b.street_name for b in blocks} <= set(candidates)
    assert sum(r["streets"] - r["same_name"] - r["too_short"] for r in carving.counts) == 7  # 7 streets >= 500 m
    assert sum(r["not_spaced"] for r in carving.counts) == 4 and sum(r["kept"] for r in carving.counts) == 3
    for r in carving.counts:
        assert r["streets"] == r["same_name"] + r["too_short"] + r["not_spaced"] + r["city_full"] + r["kept"]
    ways = {w.way_id: w for w in helsinki.ways}
    for b in blocks:
        assert len(b.way_ids) > 1 and all(ways[i].name == b.street_name for i in b.way_ids)
        assert b.neighborhood in {p.name for p in helsinki.places} and b.neighborhood_source == "node"
    assert carve_blocks(helsinki, HELSINKI_CITY) == blocks  # deterministic
    shuffled = OsmData(tuple(reversed(helsinki.ways)), tuple(reversed(helsinki.places)), helsinki.areas)
    assert carve_blocks(shuffled, HELSINKI_CITY) == blocks  # whatever the record order


def test_greedy_quotas_top_up_and_spacing_on_synthetic_ways():
    """Ways laid out on a grid: quotas first (per stratum, longest first), then the pooled top-up."""
    ways, wid = [], 1
    tags = ["primary"] * 5 + ["residential"] * 5 + ["footway"] * 3 + ["tertiary"] * 3 + ["service"] * 2
    for i, tag in enumerate(tags):
        lat = 10.0 + 0.01 * i  # ~1.1 km apart: every way is spaced
        length_deg = 0.006 + 0.0001 * (i % 5)  # ~670-710 m
        ways.append(WayRecord(wid, f"Street {i}", tag, ((lat, 20.0), (lat, 20.0 + length_deg * 1.0154))))
        wid += 1
    # the longest residential way, its midpoint ~100 m from the longest major's: rejected for spacing
    mid = 20.0 + 0.0064 * 1.0154 / 2
    ways.append(WayRecord(999, "Too Close", "residential", ((10.0409, mid - 0.004), (10.0409, mid + 0.004))))
    city = CitySpec("grid", "XX", 10.05, 20.0, "L")
    blocks = carve_blocks(OsmData(tuple(ways), ()), city, CarveParams(radius_m=50_000, rules="release"))
    strata = sorted(b.stratum for b in blocks)
    assert len(blocks) == 10
    assert "grid_too_close_999" not in {b.block_id for b in blocks}
    assert all(b.highway_tag != "service" for b in blocks)
    assert {b.block_id for b in blocks if b.stratum == "major"} == {"grid_street_4_5", "grid_street_3_4", "grid_street_2_3"}
    # quotas 3/3/2/2 are exactly filled, and nothing is left to top up beyond 10
    assert strata == sorted(["major"] * 3 + ["residential"] * 3 + ["pedestrian"] * 2 + ["tertiary"] * 2)
    # with no pedestrian or tertiary ways, the top-up fills from the pooled remainder
    only = OsmData(tuple(w for w in ways if w.highway in ("primary", "residential")), ())
    topped = carve_blocks(only, city, CarveParams(radius_m=50_000, rules="release"))
    assert len(topped) == 10 and sorted({b.stratum for b in topped}) == ["major", "residential"]
    majors = sorted((b for b in topped if b.stratum == "major"), key=lambda b: -b.length_m)
    assert len(majors) == 5  # 3 by quota + 2 by top-up


def test_blocks_table_roundtrip(oakland, tmp_path):
    blocks = carve_blocks(oakland, OAKLAND)
    assert any(len(b.way_ids) > 1 for b in blocks) and all(b.neighborhood is None for b in blocks)
    for name in ("blocks.parquet", "blocks.csv"):
        path = write_blocks_table(blocks, tmp_path / name, carving_rules="default")
        assert read_blocks_table(path) == blocks
    import pandas as pd

    df = pd.read_parquet(tmp_path / "blocks.parquet")
    for col in ("block_id", "city", "country", "driving_side", "stratum", "way_id", "street_name", "neighborhood",
                "highway_tag", "length_m", "polyline", "centroid_lat", "centroid_lon", "bbox",
                "neg_same_neighborhood", "neg_same_city", "neg_same_driving_side", "neg_random_city",
                "way_ids", "neighborhood_source", "carving_rules"):
        assert col in df.columns
    assert set(df["carving_rules"]) == {"default"} and set(df["neighborhood_source"]) == {"none"}


# -- cities and the carve command -------------------------------------------------------------


def test_builtin_cities_are_the_spec_list():
    assert len(BUILTIN_CITIES) == 25
    assert BUILTIN_CITIES["london"] == CitySpec("london", "GB", 51.5074, -0.1278, "L")
    assert BUILTIN_CITIES["melbourne"] == CitySpec("melbourne", "AU", -37.8136, 144.9631, "L")
    assert sum(c.driving_side == "L" for c in BUILTIN_CITIES.values()) == 9
    assert BUILTIN_CITIES["new_york"].display_name == "New York"


def test_city_files(tmp_path):
    csv_file = tmp_path / "cities.csv"
    csv_file.write_text("key,country,lat,lon,driving_side\nwest_oakland,us,37.8076,-122.3004,R\n", encoding="utf-8")
    assert load_city_file(csv_file) == {"west_oakland": OAKLAND}
    js = tmp_path / "cities.json"
    js.write_text(json.dumps({"helsinki": {"country": "FI", "center": [60.1699, 24.9384], "driving_side": "R"}}))
    assert resolve_cities(None, js) == [HELSINKI_CITY]
    assert [c.key for c in resolve_cities(["london", "helsinki"], js)] == ["london", "helsinki"]
    with pytest.raises(CurationError, match="unknown city 'atlantis'"):
        resolve_cities(["atlantis"])
    bad = tmp_path / "bad.csv"
    bad.write_text("key,country,lat,lon,driving_side\nx,US,1,2,middle\n", encoding="utf-8")
    with pytest.raises(CurationError, match="driving side"):
        load_city_file(bad)


def test_carve_command(tmp_path, capsys, oakland):
    from geofidelity_bench.cli import main

    out = tmp_path / "wo.parquet"
    argv = ["carve", "--osm-file", str(WEST_OAKLAND), "--city", "west_oakland", "--center", "37.8076", "-122.3004",
            "--country", "US", "--driving-side", "R", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "3 blocks" in printed and "default carving rules" in printed
    # the per-stratum counts, as carve() gives them
    assert format_carving_counts(carve(oakland, OAKLAND).counts) in printed
    assert read_blocks_table(out) == carve_blocks(oakland, OAKLAND)
    assert main(argv + ["--release-rules"]) == 0
    printed = capsys.readouterr().out
    assert "4 blocks" in printed and "release carving rules" in printed and "downtown" in printed
    assert read_blocks_table(out) == carve_blocks(oakland, OAKLAND, RELEASE)
    import pandas as pd

    assert set(pd.read_parquet(out)["carving_rules"]) == {"release"}
    with FakeOverpass(oakland) as srv:
        out2 = tmp_path / "wo2.parquet"
        argv2 = ["carve", "--overpass", "--overpass-endpoint", f"{srv.url}/api/interpreter", "--city", "west_oakland",
                 "--center", "37.8076", "-122.3004", "--country", "US", "--driving-side", "R", "--out", str(out2),
                 "--min-length-m", "100"]
        assert main(argv2) == 0
    assert read_blocks_table(out2) == carve_blocks(oakland, OAKLAND, CarveParams(min_length_m=100))
    assert main(["carve", "--osm-file", str(WEST_OAKLAND), "--city", "nowhere", "--out", str(out)]) == 2
    assert "also pass --center, --country, --driving-side" in capsys.readouterr().err
