"""``geofidelity-bench segment``: precompute (and cache) the semantic group shares of a benchmark's
reference images, optionally writing them as a table with the tier-4 gate of docs/benchmark.md section 8, Curation."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..provenance import command_line
from ._common import (BENCHMARK_HELP, CLIError, add_batch_size_arg, add_num_workers_arg, add_rekey_arg,
                      resolve_num_workers_arg, warn_rekeyed)

_TABLE_SUFFIXES = (".parquet", ".csv")


def _table_path(out: str | None) -> Path | None:
    if out is None:
        return None
    path = Path(out)
    if path.suffix.lower() not in _TABLE_SUFFIXES:
        raise CLIError(f"--out must end in .parquet or .csv, got {out!r}")
    return path


def _cmd_segment(args: argparse.Namespace) -> int:
    from ..segmentation import (
        DEFAULT_WEIGHTS,
        get_segmenter,
        list_segmenters,
        segment_named_images,
    )
    from ..curation.filters import shares_table, write_shares_table

    if args.list:
        for name in list_segmenters():
            print(f"{name}\t{DEFAULT_WEIGHTS[name]}")
        return 0
    out = _table_path(args.out)
    resolve_num_workers_arg(args)

    from ..benchmark import load_benchmark
    from ..encoders import EmbeddingCache
    from ..cached_batches import content_keys

    bench = load_benchmark(args.benchmark, revision=args.revision, rekey_mismatched_images=args.rekey_mismatched_images)
    warn_rekeyed(bench)
    segmenter = get_segmenter(args.segmenter, weights=args.segmenter_weights, device=args.device)
    cache = None if args.no_cache else EmbeddingCache(args.cache_dir)
    items = [(f"reference {r.reference_id}", r.image_source) for r in bench.references]  # read when segmented
    print(
        f"segmenting {len(items)} reference images of {bench!r} with {segmenter.name} "
        f"(config {segmenter.config_hash[:12]}, device {segmenter.device})",
        file=sys.stderr,
    )
    _, shares, stats = segment_named_images(
        segmenter, items, cache=cache, batch_size=args.batch_size, progress=not args.no_progress,
        num_workers=args.num_workers,
    )
    print(f"{stats.total} images: {stats}")
    if cache is not None:
        print(f"cache: {cache.dir_for(segmenter)}")
    if out is not None:
        table = shares_table(bench, segmenter, shares, content_keys([s for _, s in items], [n for n, _ in items]))
        meta_path = write_shares_table(table, out, bench=bench, segmenter=segmenter, stats=stats,
                                       cache_root=cache.root if cache is not None else None,
                                       command=command_line(args))
        print(f"wrote {out} ({len(table)} rows, {int(table['tier4_pass'].sum())} pass tier 4) and {meta_path}")
    return 0


def _add_segment(sub) -> None:
    p = sub.add_parser(
        "segment",
        help="precompute and cache the semantic group shares (GAAS, tier-4 gate) of a benchmark's reference images",
        description=(
            "Segments every reference photo of a benchmark with a semantic segmenter (default mask2former-vistas) "
            "and caches each photo's semantic group shares (sky, building, vegetation, road, ...; docs/benchmark.md "
            "section 5, GAAS), so that `evaluate --segmenter` later reads the gallery side from the cache. "
            "--out writes the shares table with the curation tier-4 gate per photo. Offline, pass the weights "
            "as a save_pretrained folder with --segmenter-weights PATH."
        ),
    )
    p.add_argument("--benchmark", default="demo", help=BENCHMARK_HELP + " (default: demo)")
    p.add_argument("--revision", default=None, help="Hub revision of the benchmark dataset")
    p.add_argument("--segmenter", default="mask2former-vistas",
                   help="segmenter name (default: mask2former-vistas; see --list)")
    p.add_argument("--segmenter-weights", default=None, metavar="PATH",
                   help="local folder saved with save_pretrained() (or a Hub id) for the segmenter's weights")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    add_batch_size_arg(p, 8, "images per segmenter batch")
    p.add_argument("--cache-dir", default=None,
                   help="cache folder, shared with the embeddings (default: $GEOFIDELITY_CACHE or under HF_HOME)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the cache")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_num_workers_arg(p)
    add_rekey_arg(p)
    p.add_argument("--out", default=None, metavar="FILE",
                   help="write the shares table (.parquet or .csv) and its config beside it (.json)")
    p.add_argument("--list", action="store_true", help="list the segmenters and their default weights, then exit")
    p.set_defaults(func=_cmd_segment)


def register(sub) -> None:
    _add_segment(sub)
