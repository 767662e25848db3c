"""``geofidelity-bench embed``: embed a benchmark's reference images into the cache (and, with
``--out``, a Parquet file: :func:`geofidelity_bench.encoders.export.write_embeddings_parquet`)."""

from __future__ import annotations

import argparse
import os

from ._common import BENCHMARK_HELP, add_encoder_args, add_rekey_arg, encoder_and_cache, warn_rekeyed


def _cmd_embed(args: argparse.Namespace) -> int:
    if args.list:
        from ..encoders import list_encoders

        print("\n".join(list_encoders()))
        return 0
    from ..benchmark import load_benchmark
    from ..encoders import embed_distributed, embed_named_images
    from ..encoders.export import check_parquet_path

    from ._common import CLIError

    if args.dist_timeout is not None and not 0 < args.dist_timeout < float("inf"):
        raise CLIError(f"--dist-timeout must be a finite number of seconds > 0, got {args.dist_timeout}")
    out = check_parquet_path(args.out) if args.out else None  # before the work, not after it
    bench = load_benchmark(args.benchmark, revision=args.revision, rekey_mismatched_images=args.rekey_mismatched_images)
    warn_rekeyed(bench)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:
        # Under `accelerate launch` / `torchrun`: the process group first (with a timeout that fits
        # the work); the encoder is then built on this process's own device unless --device says otherwise.
        from ..encoders.devices import DEFAULT_DIST_TIMEOUT_S, distributed_state

        distributed_state(args.dist_timeout or DEFAULT_DIST_TIMEOUT_S)
    encoder, cache = encoder_and_cache(args)
    rows = [("reference", r.reference_id, r.image_source) for r in bench.references]  # read when embedded
    if args.include_world:
        rows += [("world", w.image_id, w.image_source) for w in bench.world]
    items = [(f"reference {i}" if kind == "reference" else f"world image {i}", src) for kind, i, src in rows]
    if world_size > 1:
        # split what is not cached across processes, gather in order
        from accelerate import PartialState

        emb = embed_distributed(encoder, [src for _, src in items], names=[n for n, _ in items], cache=cache,
                                batch_size=args.batch_size, num_workers=args.num_workers,
                                dist_timeout_s=args.dist_timeout)
        state = PartialState()
        try:
            if state.is_main_process:
                _report(args, bench, encoder, cache, out, rows, emb, f"{len(items)} images embedded on {world_size} processes")
        finally:
            # every process leaves together, through a clean process-group shutdown (a process that exits
            # while another still holds the group can be aborted by the backend at interpreter exit)
            import torch.distributed as dist

            state.wait_for_everyone()
            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
        return 0
    _, emb, stats = embed_named_images(encoder, items, cache=cache, batch_size=args.batch_size,
                                       progress=not args.no_progress, num_workers=args.num_workers)
    _report(args, bench, encoder, cache, out, rows, emb, f"{stats.total} images: {stats}")
    return 0


def _report(args, bench, encoder, cache, out, rows, emb, summary: str) -> None:
    from ..encoders.export import write_embeddings_parquet

    print(f"{bench.name}: {summary} with {encoder.name} ({encoder.dim}-d); cache: "
          f"{cache.root if cache is not None else 'disabled'}")
    if out is not None:
        write_embeddings_parquet(out, [k for k, _, _ in rows], [i for _, i, _ in rows], emb, encoder, bench)
        print(f"wrote {args.out}")


def register(sub) -> None:
    p = sub.add_parser(
        "embed",
        help="embed a benchmark's reference images (cached; runs under accelerate launch too)",
        description=(
            "Embeds every reference photo of a benchmark (and with --include-world its world pool) with an "
            "encoder into the embedding cache (docs/benchmark.md section 4), so that `evaluate` later reads them "
            "from there; a re-run computes only what is missing. --out also writes them to a Parquet file. "
            "Runs under `accelerate launch` / `torchrun` on several processes or machines too."
        ),
    )
    p.add_argument("--benchmark", default="demo", help=BENCHMARK_HELP + " (default: demo)")
    p.add_argument("--revision", default=None, help="Hub revision of the benchmark dataset")
    p.add_argument("--include-world", action="store_true", help="also embed the benchmark's world pool")
    p.add_argument("--out", default=None, help="also write the embeddings to this .parquet file")
    p.add_argument("--list", action="store_true", help="list the available encoders and exit")
    add_rekey_arg(p)
    add_encoder_args(p, "dinov2-base")
    p.add_argument("--dist-timeout", type=float, default=None, metavar="SECONDS",
                   help="multi-process runs: how long a process may wait for the others at a barrier, and how "
                        "long the processes have to find each other at the start (default: 14400 = 4 h)")
    p.set_defaults(func=_cmd_embed)
