"""``geofidelity-bench embed``: embed a benchmark's reference images into the cache."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ..atomic import atomic_write
from ._common import BENCHMARK_HELP, CLIError, add_encoder_args, encoder_and_cache


def _cmd_embed(args: argparse.Namespace) -> int:
    if args.list:
        from ..encoders import list_encoders

        print("\n".join(list_encoders()))
        return 0
    from ..benchmark import load_benchmark
    from ..encoders import embed_distributed, embed_named_images

    bench = load_benchmark(args.benchmark, revision=args.revision)
    encoder, cache = encoder_and_cache(args)
    items = [(f"reference {r.reference_id}", r.image_bytes) for r in bench.references]
    if args.include_world:
        items += [(f"world image {w.image_id}", w.image_bytes) for w in bench.world]
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:
        # Under `accelerate launch` / `torchrun`: split across processes, gather in order.
        from accelerate import PartialState

        emb = embed_distributed(encoder, [src for _, src in items], names=[n for n, _ in items], cache=cache,
                                batch_size=args.batch_size)
        if not PartialState().is_main_process:
            return 0
        summary = f"{len(items)} images embedded on {world_size} processes"
    else:
        _, emb, stats = embed_named_images(encoder, items, cache=cache, batch_size=args.batch_size,
                                           progress=not args.no_progress)
        summary = f"{stats.total} images: {stats}"
    print(f"{bench.name}: {summary} with {encoder.name} ({encoder.dim}-d); cache: "
          f"{cache.root if cache is not None else 'disabled'}")
    if args.out:
        _write_embeddings(Path(args.out), [n for n, _ in items], emb, encoder, bench)
        print(f"wrote {args.out}")
    return 0


def _write_embeddings(path: Path, names, emb, encoder, bench) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..encoders.base import check_finite_rows

    if path.suffix != ".parquet":
        raise CLIError(f"--out must be a .parquet file, got {str(path)!r}")
    check_finite_rows(emb, names)  # never a NaN row in the file
    kinds, ids = zip(*(n.split(" ", 1) if n.startswith("reference ") else ("world", n.split(" ", 2)[2]) for n in names))
    table = pa.table({
        "kind": list(kinds),
        "id": list(ids),
        "embedding": pa.array(list(emb.astype("float32")), type=pa.list_(pa.float32(), emb.shape[1])),
    })
    meta = {"encoder": json.dumps(encoder.config), "encoder_config_hash": encoder.config_hash,
            "benchmark_fingerprint": bench.fingerprint}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), **{k: v.encode() for k, v in meta.items()}})
    atomic_write(path, lambda tmp: pq.write_table(table, tmp))


def register(sub) -> None:
    p = sub.add_parser("embed", help="embed a benchmark's reference images (cached; runs under accelerate launch too)")
    p.add_argument("--benchmark", default="demo", help=BENCHMARK_HELP + " (default: demo)")
    p.add_argument("--revision", default=None, help="Hub revision of the benchmark dataset")
    p.add_argument("--include-world", action="store_true", help="also embed the benchmark's world pool")
    p.add_argument("--out", default=None, help="also write the embeddings to this .parquet file")
    p.add_argument("--list", action="store_true", help="list the available encoders and exit")
    add_encoder_args(p, "dinov2-base")
    p.set_defaults(func=_cmd_embed)
