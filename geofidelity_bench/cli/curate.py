"""``geofidelity-bench carve`` and ``geofidelity-bench curate``: building a benchmark from
OpenStreetMap and Mapillary (docs/benchmark.md section 8, Curation). The logic lives in :mod:`geofidelity_bench.curation`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._common import CLIError


def _city_spec(args):
    from ..curation.cities import BUILTIN_CITIES, CitySpec

    builtin = BUILTIN_CITIES.get(args.city)
    lat, lon = args.center if args.center else (builtin.lat, builtin.lon) if builtin else (None, None)
    country = args.country or (builtin.country if builtin else None)
    side = args.driving_side or (builtin.driving_side if builtin else None)
    missing = [flag for flag, v in (("--center", lat), ("--country", country), ("--driving-side", side)) if v is None]
    if missing:
        raise CLIError(f"city {args.city!r} is not a built-in city: also pass {', '.join(missing)}")
    return CitySpec(args.city, country.upper(), float(lat), float(lon), side.upper())


def _require_curate_extra(command: str) -> None:
    """The curate extra's geometry packages, checked before any download or file is read."""
    from ..extras import require

    for module in ("shapely", "pyproj"):
        require(module, "curate", command)


def _cmd_carve(args: argparse.Namespace) -> int:
    _require_curate_extra("carve")
    from ..curation.carving import CarveParams, carve, format_carving_counts, stratum_counts, write_blocks_table
    from ..curation.osm import OverpassClient, read_osm_file

    out = Path(args.out)
    if out.suffix.lower() not in (".parquet", ".csv"):
        raise CLIError(f"--out must end in .parquet or .csv, got {args.out!r}")
    city = _city_spec(args)
    params = CarveParams(radius_m=args.radius_m, min_length_m=args.min_length_m, min_spacing_m=args.min_spacing_m,
                         rules="release" if args.release_rules else "default")
    if args.osm_file:
        data = read_osm_file(args.osm_file, areas=params.needs_areas)
    else:
        kw = {"endpoints": args.overpass_endpoint} if args.overpass_endpoint else {}
        client = OverpassClient(cache_dir=args.cache_dir, timeout_s=args.timeout, **kw)
        data = client.fetch(city.lat, city.lon, params.radius_m, areas=params.needs_areas)
    carving = carve(data, city, params)
    blocks = carving.blocks
    write_blocks_table(blocks, out, carving_rules=params.rules)
    counts = ", ".join(f"{k} {v}" for k, v in stratum_counts(blocks).items())
    print(f"{city.key}: {len(data.ways)} named highway ways, {len(data.places)} place nodes, {len(data.areas)} "
          f"neighborhood areas -> {len(blocks)} blocks ({counts}) with the {params.rules} carving rules, written to {out}")
    print(format_carving_counts(carving.counts))
    for b in blocks:
        print(f"  {b.block_id:<50} {b.stratum:<12} {b.length_m:7.0f} m  {b.neighborhood or '(unknown)'} "
              f"[{b.neighborhood_source}]")
    return 0


def _parse_osm_files(values) -> dict[str, str]:
    out = {}
    for value in values or []:
        key, sep, path = value.partition("=")
        if not sep or not key or not path:
            raise CLIError(f"--osm-file takes CITY=PATH, got {value!r}")
        out[key.strip()] = path.strip()
    return out


def _retry_policy(args):
    """The RetryPolicy the retry options ask for (the policy's own defaults where not given)."""
    from ..curation.http import RetryPolicy

    given = {"max_rate_retries": (args.max_rate_retries, "--max-rate-retries"),
             "max_server_retries": (args.max_server_retries, "--max-server-retries"),
             "scale": (args.retry_delay_scale, "--retry-delay-scale")}
    for value, flag in given.values():
        if value is not None and value < 0:
            raise CLIError(f"{flag} must be >= 0, got {value}")
    return RetryPolicy(**{k: value for k, (value, _) in given.items() if value is not None})


def _cmd_curate(args: argparse.Namespace) -> int:
    _require_curate_extra("curate")
    from ..curation.carving import CarveParams
    from ..curation.cities import resolve_cities
    from ..curation.pipeline import CurationConfig, format_summary_table
    from ..curation.runner import run_curation

    out = Path(args.out)
    cities = resolve_cities(args.cities, args.city_file)
    config = CurationConfig(
        carve=CarveParams(radius_m=args.radius_m, min_length_m=args.min_length_m, min_spacing_m=args.min_spacing_m,
                          rules="release" if args.release_rules else "default"),
        max_images_per_block=args.max_images,
        min_images=args.min_images,
        skip_tier3=args.skip_tier3,
        skip_tier4=args.skip_tier4,
        siglip_weights=args.siglip_weights,
        segmenter=args.segmenter,
        segmenter_weights=args.segmenter_weights,
        device=args.device,
        progress=not args.no_progress,
    )
    osm_files = _parse_osm_files(args.osm_file)
    retry = _retry_policy(args)
    result = run_curation(cities, out, config, osm_files=osm_files, overpass_endpoints=args.overpass_endpoint,
                          mapillary_url=args.mapillary_url, cache_dir=args.cache_dir, timeout_s=args.timeout,
                          max_workers=args.max_workers, retry=retry)
    print(format_summary_table(result.summary))
    for tier, why in result.skipped.items():
        print(_redact(f"{tier}: {why}"))
    incomplete = _incomplete_line(result, out)
    if result.benchmark is None:
        print(f"no block kept at least {config.min_images} images: no benchmark written "
              f"(summary in {out / 'curation_summary.csv'})", file=sys.stderr)
        if incomplete:
            print(incomplete, file=sys.stderr)
        return 1
    b = result.benchmark
    print(f"benchmark written to {out}: {len(b.cities)} cities, {len(b.blocks)} blocks, {len(b.references)} references")
    if incomplete:  # the benchmark lacks what did not arrive: status 1, as for no benchmark at all
        print(incomplete, file=sys.stderr)
        return 1
    return 0


def _redact(text: str) -> str:
    import os

    from ..curation.http import redact
    from ..curation.mapillary import TOKEN_ENV

    return redact(text, [os.environ.get(TOKEN_ENV)])


def _incomplete_line(result, out: Path) -> str | None:
    """The line saying what did not arrive (searches that failed, thumbnails missing), or None."""
    if result.complete:
        return None
    parts = []
    if result.failed_searches:
        parts.append(f"the Mapillary search of {len(result.failed_searches)} block(s) failed "
                     f"({', '.join(sorted(result.failed_searches))})")
    if result.missing_thumbnails:
        parts.append(f"{len(result.missing_thumbnails)} thumbnail(s) could not be downloaded")
    return _redact(f"incomplete run: {' and '.join(parts)} (listed in {out / 'curation_summary.json'} under "
                   "failed_searches and missing_thumbnails); re-run the same command to fetch them "
                   "(what arrived is kept)")


def register(sub) -> None:
    p = sub.add_parser("carve", help="carve street blocks of one city from OSM (an extract or Overpass) into a table",
                       description="Carve the blocks of one city (docs/benchmark.md section 8, Curation) and write the blocks table.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--osm-file", help="OSM extract: .osm, .osm.bz2 (OSM XML) or .osm.pbf")
    src.add_argument("--overpass", action="store_true", help="query the Overpass API instead")
    p.add_argument("--city", required=True, help="city key (e.g. new_york); built-in cities need nothing else")
    p.add_argument("--center", nargs=2, type=float, metavar=("LAT", "LON"), help="city center")
    p.add_argument("--country", help="ISO-3166 alpha-2 country code")
    p.add_argument("--driving-side", choices=["L", "R", "l", "r"], help="L or R")
    p.add_argument("--out", required=True, help="blocks table: .parquet (or .csv)")
    p.add_argument("--radius-m", type=float, default=6000.0, help="search radius around the center (default 6000)")
    p.add_argument("--min-length-m", type=float, default=500.0, help="shortest way kept (default 500)")
    p.add_argument("--min-spacing-m", type=float, default=400.0, help="least distance between block midpoints (default 400)")
    p.add_argument("--release-rules", action="store_true",
                   help="carve as the v3.1.0 release did: longest single OSM way per name, nearest place node "
                        "else 'downtown' (default: merged streets, neighborhoods from OSM areas, never invented)")
    p.add_argument("--overpass-endpoint", nargs="+", default=None, metavar="URL",
                   help="Overpass interpreter URLs, tried in order")
    p.add_argument("--cache-dir", default=None, help="Overpass response cache folder (default: none)")
    p.add_argument("--timeout", type=float, default=200.0, help="HTTP timeout in seconds (default 200)")
    p.set_defaults(func=_cmd_carve)

    p = sub.add_parser("curate", help="build a benchmark folder from OSM + Mapillary (resumable)",
                       description="Carve blocks, search Mapillary (token from MAPILLARY_TOKEN), filter (spatial, "
                                   "tiers 1, 3, 4, 5), select and write a benchmark folder. Re-running resumes from "
                                   "the checkpoints in OUT/_work. Exit status 1 when the run is incomplete (a block's "
                                   "search failed or thumbnails are missing, named in the output and in "
                                   "curation_summary.json; a re-run fetches them) or no block kept enough images.")
    cities = p.add_argument_group("cities")
    cities.add_argument("--cities", nargs="+", metavar="KEY", help="city keys (built-in or from --city-file)")
    cities.add_argument("--city-file", help="CSV/JSON of cities: key,country,lat,lon,driving_side[,name]")
    p.add_argument("--out", required=True, help="output benchmark folder")
    p.add_argument("--osm-file", action="extend", nargs="+", metavar="CITY=PATH",
                   help="carve CITY from an OSM extract (.osm, .osm.bz2, .osm.pbf) instead of Overpass")
    p.add_argument("--overpass-endpoint", nargs="+", default=None, metavar="URL", help="Overpass URLs, tried in order")
    p.add_argument("--mapillary-url", default=None, help="Graph API root (default https://graph.mapillary.com)")
    p.add_argument("--siglip-weights", default=None, help="local SigLIP weights folder for tier 3")
    p.add_argument("--segmenter", default="mask2former-vistas", help="segmenter for tier 4 (default mask2former-vistas)")
    p.add_argument("--segmenter-weights", default=None, help="local segmenter weights folder for tier 4")
    p.add_argument("--skip-tier3", action="store_true", help="do not run tier 3 (recorded in the summary)")
    p.add_argument("--skip-tier4", action="store_true", help="do not run tier 4 (recorded in the summary)")
    p.add_argument("--min-images", type=int, default=25, help="drop blocks with fewer images (default 25)")
    p.add_argument("--max-images", type=int, default=100, help="images kept per block (default 100)")
    p.add_argument("--radius-m", type=float, default=6000.0, help="carving radius (default 6000)")
    p.add_argument("--min-length-m", type=float, default=500.0, help="shortest way kept (default 500)")
    p.add_argument("--min-spacing-m", type=float, default=400.0, help="least block spacing (default 400)")
    p.add_argument("--release-rules", action="store_true",
                   help="carve as the v3.1.0 release did: longest single OSM way per name, nearest place node "
                        "else 'downtown' (default: merged streets, neighborhoods from OSM areas, never invented)")
    p.add_argument("--max-workers", type=int, default=8, help="parallel HTTP requests (default 8)")
    p.add_argument("--timeout", type=float, default=60.0, help="HTTP timeout in seconds (default 60)")
    retry = p.add_argument_group("HTTP retries (recorded in curation_summary.json)")
    retry.add_argument("--max-rate-retries", type=int, default=None, metavar="N",
                       help="retries of a rate-limited request (HTTP 429), sleeping 2 s, 4 s, 8 s, ... (default 6)")
    retry.add_argument("--max-server-retries", type=int, default=None, metavar="N",
                       help="retries after HTTP 5xx, a timeout or a broken answer, sleeping 1 s, 2 s, 3 s, ... "
                            "(default 3)")
    retry.add_argument("--retry-delay-scale", type=float, default=None, metavar="FACTOR",
                       help="multiplies every retry sleep (default 1; 0 retries without waiting)")
    p.add_argument("--cache-dir", default=None, help="Overpass response cache (default OUT/_work/overpass_cache)")
    p.add_argument("--device", default=None, help="torch device for tiers 3 and 4")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    p.set_defaults(func=_cmd_curate)
