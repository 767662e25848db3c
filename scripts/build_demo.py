#!/usr/bin/env python
"""Rebuilds the embedded demo benchmark (geofidelity_bench/data/demo) from the real photos.

Usage:
    python scripts/build_demo.py --real-data ../shared/real-data [--out geofidelity_bench/data/demo]

Input is the project's real-data folder (see its SOURCES.md): Lund (29 photos of one
residential street, split into 3 blocks of consecutive photos, i.e. segments of one street),
Arezzo (3 spatial clusters of 3 photos, 3 blocks), Berlin (3 photos of Am Lustgarten, 1
block) and the 71-photo world pool with its ``select.csv``. Images are EXIF-transposed,
downscaled with Lanczos to 512 px on the long side and re-encoded as JPEG (quality 90 for
blocks, 85 for the world pool) without EXIF; the GPS position read from EXIF goes into the
``lat``/``lon`` columns. Street and neighborhood names are left empty where the source does not
give them: prompts that need them are refused for those blocks. The output is deterministic
for the same input.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

from PIL import Image, ImageOps

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from geofidelity_bench.benchmark import Benchmark, Block, City, PoolImage, ReferenceImage, save_benchmark  # noqa: E402
from geofidelity_bench.curation.negatives import assign_negatives  # noqa: E402
from geofidelity_bench.geo import arc_midpoint, bbox, polyline_length_m  # noqa: E402

OPENSFM = "Copyright (c) 2014 Mapillary, from the OpenSfM project (data/{city}/images)"
OPENSFM_URL = "https://github.com/mapillary/OpenSfM/tree/main/data/{city}/images/{name}"
AREZZO = "exif-samples collection (ianare), contributed image"
AREZZO_URL = "https://github.com/ianare/exif-samples/blob/master/jpg/gps/{name}"
WORLD = "Mapillary contributors, via the OpenStreetView-5M dataset"
WORLD_URL = "https://www.mapillary.com/app/?pKey={id}"

CITIES = [
    City("lund", "Lund", "SE", (55.7047, 13.1910), "R"),
    City("arezzo", "Arezzo", "IT", (43.4633, 11.8796), "R"),
    City("berlin", "Berlin", "DE", (52.5200, 13.4050), "R"),
]

LUND_SEGMENTS = [("lund_seg1", 1, 10), ("lund_seg2", 11, 20), ("lund_seg3", 21, 29)]
AREZZO_CLUSTERS = [
    ("arezzo_park_path", ["DSCN0010", "DSCN0012", "DSCN0021"], "pedestrian", "a park path"),
    ("arezzo_church_streets", ["DSCN0025", "DSCN0027", "DSCN0029"], None, "stone-paved streets by a church"),
    ("arezzo_piazza_streets", ["DSCN0038", "DSCN0040", "DSCN0042"], None, "narrow streets and a piazza"),
]


def gps_of(path: Path) -> tuple[float, float]:
    gps = Image.open(path).getexif().get_ifd(0x8825)
    if not gps or 2 not in gps or 4 not in gps:
        raise SystemExit(f"{path}: no EXIF GPS position")

    def deg(dms, ref):
        value = float(dms[0]) + float(dms[1]) / 60 + float(dms[2]) / 3600
        return -value if ref in ("S", "W") else value

    return deg(gps[2], gps.get(1, "N")), deg(gps[4], gps.get(3, "E"))


def downscale(path: Path, quality: int, long_side: int = 512) -> bytes:
    img = ImageOps.exif_transpose(Image.open(path)).convert("RGB")
    scale = long_side / max(img.size)
    if scale < 1:
        img = img.resize((round(img.width * scale), round(img.height * scale)), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality, optimize=True)
    return buf.getvalue()


def make_block(block_id, city, points, *, stratum, street=None, neighborhood=None, notes=""):
    polyline = tuple((round(lat, 7), round(lon, 7)) for lat, lon in points)
    return Block(
        block_id=block_id,
        city=city.key,
        country=city.country,
        driving_side=city.driving_side,
        stratum=stratum,
        way_id=None,
        street_name=street,
        neighborhood=neighborhood,
        highway_tag=None,
        length_m=round(polyline_length_m(polyline), 2),
        polyline=polyline,
        centroid=arc_midpoint(polyline),
        bbox=bbox(polyline),
        notes=notes,
    )


def reference(block_id, image_id, path, *, url, license, attribution, quality=90):
    lat, lon = gps_of(path)
    return ReferenceImage(
        reference_id=f"{block_id}__{path.stem}",
        image_id=image_id,
        block_id=block_id,
        lat=round(lat, 7),
        lon=round(lon, 7),
        captured_at=None,
        compass_angle=None,
        sun_elevation_deg=None,
        camera_type="perspective",
        quality_score=None,
        source_url=url,
        license=license,
        attribution=attribution,
        image_bytes=downscale(path, quality),
    )


def build(real: Path) -> Benchmark:
    lund, arezzo, berlin = CITIES
    blocks, refs = [], []
    for block_id, first, last in LUND_SEGMENTS:
        paths = [real / "lund" / f"{i:02d}.jpg" for i in range(first, last + 1)]
        seg_refs = [
            reference(
                block_id,
                f"opensfm_lund_{p.stem}",
                p,
                url=OPENSFM_URL.format(city="lund", name=p.name),
                license="BSD-2-Clause",
                attribution=OPENSFM.format(city="lund"),
            )
            for p in paths
        ]
        refs += seg_refs
        blocks.append(
            make_block(
                block_id,
                lund,
                [(r.lat, r.lon) for r in seg_refs],
                stratum="residential",
                notes=(
                    f"Segment {block_id[-1]} of 3 of ONE cobbled residential street in Lund walked end to end "
                    f"(photos {first:02d}-{last:02d} of 29, consecutive); the three lund_seg blocks are segments of "
                    "the same street, so they are each other's hardest negatives. Street and neighborhood names "
                    "are unknown; polyline = the photos' GPS positions in walking order."
                ),
            )
        )
    for block_id, stems, stratum, what in AREZZO_CLUSTERS:
        paths = [real / "arezzo" / f"{s}.jpg" for s in stems]
        cl_refs = [
            reference(
                block_id,
                f"exif_samples_{p.stem}",
                p,
                url=AREZZO_URL.format(name=p.name),
                license="CC-BY-SA-4.0",
                attribution=AREZZO,
            )
            for p in paths
        ]
        refs += cl_refs
        blocks.append(
            make_block(
                block_id,
                arezzo,
                [(r.lat, r.lon) for r in cl_refs],
                stratum=stratum,
                notes=(
                    f"A spatial cluster of 3 photos in the old town of Arezzo ({what}); not an OSM way. Street and "
                    "neighborhood names are unknown; polyline = the photos' GPS positions in file order."
                ),
            )
        )
    paths = sorted((real / "berlin").glob("*.jpg"))
    b_refs = [
        reference(
            "berlin_am_lustgarten",
            f"opensfm_berlin_{p.stem}",
            p,
            url=OPENSFM_URL.format(city="berlin", name=p.name),
            license="BSD-2-Clause",
            attribution=OPENSFM.format(city="berlin"),
        )
        for p in paths
    ]
    refs += b_refs
    blocks.append(
        make_block(
            "berlin_am_lustgarten",
            berlin,
            [(r.lat, r.lon) for r in b_refs],
            stratum="pedestrian",
            street="Am Lustgarten",
            neighborhood="Mitte",
            notes=(
                "The Berliner Dom facade seen from the Lustgarten, a landmark square (not a street block); "
                "polyline = the photos' GPS positions."
            ),
        )
    )
    blocks = assign_negatives(blocks)
    world = []
    with open(real / "osv5m_world" / "select.csv", newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            path = real / "osv5m_world" / f"{row['id']}.jpg"
            if not path.is_file():
                raise SystemExit(f"{path}: listed in select.csv but missing")
            world.append(
                PoolImage(
                    image_id=f"mapillary_{row['id']}",
                    lat=float(row["latitude"]),
                    lon=float(row["longitude"]),
                    city=row["city"] or None,
                    region=row["region"] or None,
                    country=row["country"] or None,
                    source_url=WORLD_URL.format(id=row["id"]),
                    license="CC-BY-SA-4.0",
                    attribution=WORLD,
                    image_bytes=downscale(path, 85),
                )
            )
    world.sort(key=lambda w: w.image_id)
    return Benchmark(blocks, refs, cities=CITIES, world=world, name="demo")


CARD = """# GeoFidelity-Bench embedded demo benchmark

A tiny benchmark in the canonical GeoFidelity-Bench format, built by `scripts/build_demo.py`
from real street-level photographs, so that everything runs offline on a fresh install.

- `lund_seg1..3`: three consecutive segments of ONE residential street in Lund, Sweden (29
  photos, walked end to end). Street and neighborhood names are unknown (L1/L2 prompts are
  refused for these blocks).
- `arezzo_*`: three spatial clusters of 3 photos in the old town of Arezzo, Italy (names unknown).
- `berlin_am_lustgarten`: the Berliner Dom from the Lustgarten square ("Am Lustgarten", Mitte).
- `world`: 71 single Mapillary photos from all over the world (a global distractor pool).

It is far too small to rank generators; it exists to exercise the pipeline end to end.

## Licenses and attribution

- Lund and Berlin photos: Copyright (c) 2014 Mapillary, from the OpenSfM project, BSD-2-Clause.
- Arezzo photos: the `exif-samples` collection (ianare), CC BY-SA 4.0.
- World pool: Mapillary contributors, CC BY-SA 4.0, as distributed with OpenStreetView-5M.

Every row carries its own `license`, `attribution` and `source_url`. Images were downscaled to
512 px (long side) and re-encoded as JPEG; GPS positions come from the photos' EXIF (Lund,
Arezzo, Berlin) or from the OSV-5M metadata (world).
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--real-data", type=Path, required=True, help="the real-data folder (with SOURCES.md)")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[1] / "geofidelity_bench" / "data" / "demo"
    )
    args = parser.parse_args(argv)
    bench = build(args.real_data)
    save_benchmark(bench, args.out, card_body=CARD)
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(f"wrote {bench!r} and {len(bench.world)} world images to {args.out} ({size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
