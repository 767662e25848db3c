"""``geofidelity-bench audit``: the copy audit inside a benchmark (docs/benchmark.md section 5, Copy audit).

Held-out photos that near-duplicate a gallery photo of their own block (they inflate the held-out
anchor), and reference photos that near-duplicate another block's or the world pool's (a leak between a
target and its negatives). Writes a report per block (Markdown) with CSV and JSON tables and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ._common import BENCHMARK_HELP, add_encoder_args, encoder_and_cache


def _check_pool_images(bench, items) -> None:
    """Decodes every photo the audit compares (cheaply, as ``evaluate`` does) before any work, and raises one
    error naming every undecodable one (the first :data:`MAX_PROBLEMS_LISTED`, then how many more)."""
    from ..benchmark import MAX_PROBLEMS_LISTED, ReferenceImage
    from ..images import ImageDecodeError, check_image

    problems = []
    for x in items:
        name = f"reference {x.reference_id}" if isinstance(x, ReferenceImage) else f"world image {x.image_id}"
        try:
            problem = check_image(x.image_bytes, name=name).problem
        except ImageDecodeError as err:  # bytes that cannot even be read
            problem = str(err)
        if problem is not None:
            problems.append(problem)
    if problems:
        shown = "\n  ".join(problems[:MAX_PROBLEMS_LISTED])
        more = (f"\n  ... and {len(problems) - MAX_PROBLEMS_LISTED} more" if len(problems) > MAX_PROBLEMS_LISTED
                else "")
        raise ImageDecodeError(f"{len(problems)} photo(s) of {bench!r} cannot be decoded (nothing was audited):\n  "
                               f"{shown}{more}\nFix or replace them in the benchmark folder.")


def _check_output_folder(path: str) -> Path:
    """``--out`` checked before any work: a folder or nothing yet; an existing file is a usage error."""
    from ._common import CLIError

    out = Path(path)
    if out.exists() and not out.is_dir():
        raise CLIError(f"--out {path}: it exists and is not a folder; give a folder (new or existing) for the "
                       "copy audit's report files")
    for parent in out.parents:  # a file on the way to it: said now, not after the audit
        if parent.exists():
            if not parent.is_dir():
                raise CLIError(f"--out {out}: cannot create this folder (Not a directory: a file stands on its "
                               f"path, {parent}); give another folder")
            break
    return out


def _make_output_folder(out: Path) -> None:
    from ._common import CLIError

    try:
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as err:  # a file on the way to it
        raise CLIError(f"--out {out}: cannot create this folder ({err.strerror}: a file stands on its path); "
                       "give another folder") from None


def _cmd_audit(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..atomic import atomic_write_bytes
    from ..benchmark import load_benchmark
    from ..evaluation import embed_items
    from ..near_copies import PAIR_KINDS, HashCache, audit_benchmark, benchmark_audit_markdown, pool_items
    from ..provenance import command_line, utc_timestamp

    bench = load_benchmark(args.benchmark, revision=args.revision)
    out = _check_output_folder(args.out)
    _check_pool_images(bench, pool_items(bench))
    embeddings, encoder_name, cache = None, None, None
    if not args.hash_only:
        encoder, cache = encoder_and_cache(args)
        encoder_name = encoder.name
        embedded, _ = embed_items({"pool": pool_items(bench)}, encoder, cache=cache, batch_size=args.batch_size,
                                  progress=not args.no_progress, num_workers=args.num_workers)
        embeddings = embedded["pool"]
    elif not args.no_cache:
        from ..encoders import EmbeddingCache

        cache = EmbeddingCache(args.cache_dir)
    hash_cache = HashCache.beside(cache)
    audit = audit_benchmark(bench, embeddings, hash_cache=hash_cache, progress=not args.no_progress)
    _make_output_folder(out)
    record = {"command": command_line(args), "created_at": utc_timestamp(),
              "benchmark": {"name": bench.name, "source": bench.source, "fingerprint": bench.fingerprint},
              "encoder": encoder_name, **audit}
    atomic_write_bytes(out / "copy_audit.json", json.dumps(record, indent=2).encode())
    pair_cols = ["reference_id", "block_id", "role", "duplicate_id", "duplicate_block_id", "duplicate_role", "kind",
                 "hash_distance", "cosine", "exact"]
    atomic_write_bytes(out / "copy_audit_pairs.csv", pd.DataFrame(audit["pairs"], columns=pair_cols)
                       .to_csv(index=False).encode())
    atomic_write_bytes(out / "copy_audit_blocks.csv", pd.DataFrame(audit["blocks"]).to_csv(index=False).encode())
    atomic_write_bytes(out / "copy_audit.md", benchmark_audit_markdown(audit, bench.name, encoder_name).encode())
    counts = {k: sum(p["kind"] == k for p in audit["pairs"]) for k in PAIR_KINDS}
    print(f"copy audit of {bench!r}: {audit['n_references']} reference photos against every other photo and "
          f"{audit['n_world']} world-pool photos ({'embeddings of ' + encoder_name + ' and ' if encoder_name else ''}"
          f"perceptual hashes)")
    print(f"{len(audit['pairs'])} near-duplicate pair(s): " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    for p in audit["pairs"][:20]:
        print(f"  {p['kind']}: {p['reference_id']} ({p['role']}) ~ {p['duplicate_id']} ({p['duplicate_role']}, "
              f"{p['duplicate_block_id']}): hash distance {p['hash_distance']}, cosine {p['cosine']}")
    if len(audit["pairs"]) > 20:
        print(f"  ... and {len(audit['pairs']) - 20} more")
    closest = [b for b in audit["blocks"] if b["min_hash_distance_heldout_vs_gallery"] is not None]
    if closest:
        b = min(closest, key=lambda b: b["min_hash_distance_heldout_vs_gallery"])
        print(f"closest held-out/own-gallery pair: hash distance {b['min_hash_distance_heldout_vs_gallery']} in "
              f"{b['block_id']} (flagged at <= {audit['thresholds']['hash_distance_max']})")
    print(f"wrote {out}/copy_audit.md (a section per block), copy_audit_blocks.csv, copy_audit_pairs.csv, "
          "copy_audit.json", file=sys.stderr)
    return 1 if (args.fail_on_copies and audit["pairs"]) else 0


def register(sub) -> None:
    p = sub.add_parser(
        "audit",
        help="copy audit inside a benchmark: held-out photos that near-duplicate their gallery, leaks between blocks",
        description=(
            "The copy audit of docs/benchmark.md section 5 inside a benchmark: every reference photo against every "
            "other photo of the benchmark and the world pool (perceptual hashes and the embedding nearest "
            "neighbour). Held-out photos that near-duplicate a gallery photo of their own block inflate the held-out "
            "anchor; a photo that near-duplicates another block's or the world pool's leaks between a target and its "
            "negatives. Writes --out/copy_audit.md (a section per block), copy_audit_blocks.csv, "
            "copy_audit_pairs.csv and copy_audit.json."
        ),
    )
    p.add_argument("--benchmark", default="demo", help=BENCHMARK_HELP + " (default: demo)")
    p.add_argument("--revision", default=None, help="Hub revision of the benchmark dataset")
    p.add_argument("--out", default="geofidelity-audit", help="output folder (default: ./geofidelity-audit)")
    p.add_argument("--hash-only", action="store_true",
                   help="compare perceptual hashes and bytes only (no encoder, no cosine)")
    p.add_argument("--fail-on-copies", action="store_true", help="exit with status 1 when any pair is flagged")
    add_encoder_args(p, "dinov2-base")
    p.set_defaults(func=_cmd_audit)
