"""Computes the release-rules carving of the two test extracts. Run on base commit 5a1254f, where
CarveParams() was the release rules; on later code pass rules="release" to every CarveParams."""
import csv, sys
from geofidelity_bench.curation.carving import CarveParams, carve_blocks
from geofidelity_bench.curation.cities import CitySpec
from geofidelity_bench.curation.osm import read_osm_file
cases = [
    ("west_oakland.osm.bz2", CitySpec("west_oakland", "US", 37.8076, -122.3004, "R"), CarveParams()),
    ("west_oakland.osm.bz2", CitySpec("west_oakland", "US", 37.8076, -122.3004, "R"), CarveParams(min_length_m=50, min_spacing_m=100)),
    ("helsinki.osm.pbf", CitySpec("helsinki", "FI", 60.1699, 24.9384, "R"), CarveParams()),
    ("helsinki.osm.pbf", CitySpec("helsinki", "FI", 60.1699, 24.9384, "R"), CarveParams(min_length_m=100)),
]
w = csv.writer(sys.stdout, lineterminator="\n")
w.writerow(["file", "min_length_m", "min_spacing_m", "block_id", "way_id", "stratum", "highway_tag", "street_name",
            "neighborhood", "length_m", "centroid_lat", "centroid_lon", "n_points"])
for f, city, p in cases:
    for b in carve_blocks(read_osm_file("tests/data/osm/" + f), city, p):
        w.writerow([f, p.min_length_m, p.min_spacing_m, b.block_id, b.way_id, b.stratum, b.highway_tag, b.street_name,
                    b.neighborhood, repr(b.length_m), repr(b.centroid[0]), repr(b.centroid[1]), len(b.polyline)])
