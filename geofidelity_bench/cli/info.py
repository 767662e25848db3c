"""``geofidelity-bench info`` and ``geofidelity-bench prompts``: what a benchmark holds and the
prompts it yields."""

from __future__ import annotations

import argparse
import json
import sys

from ._common import BENCHMARK_HELP, add_num_workers_arg, add_rekey_arg, resolve_num_workers_arg, warn_rekeyed


def _add_benchmark_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--benchmark", default="demo", help=BENCHMARK_HELP + " (default: demo)")
    parser.add_argument("--revision", default=None, help="Hub revision of the benchmark dataset (default: main)")


# -- info ---------------------------------------------------------------------------------


def format_summary(summary: dict) -> str:
    lines = [
        f"benchmark   {summary['name']}  ({summary['source']})",
        f"fingerprint {summary['fingerprint'][:16]}",
        f"cities      {summary['n_cities']}: "
        + ", ".join(f"{c['name']} ({c['country']}, drives {c['driving_side']})" for c in summary["cities"]),
        f"blocks      {summary['n_blocks']}",
        f"references  {summary['n_references']} assignments of {summary['n_distinct_images']} distinct images",
    ]
    if summary.get("n_world"):
        lines.append(f"world pool  {summary['n_world']} images")
    rows = summary["blocks"]
    headers = ["block_id", "city", "stratum", "street", "neighborhood", "refs", "held-out", "gallery", "negatives"]
    table = [
        [
            r["block_id"],
            r["city"],
            r["stratum"] or "-",
            r["street_name"] or "(unknown)",
            r["neighborhood"] or "(unknown)",
            str(r["n_references"]),
            str(r["n_heldout"]),
            str(r["n_gallery"]),
            f"{r['negatives']}/4",
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(headers)]
    lines.append("")
    lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(t, widths)).rstrip() for t in table]
    refs = [r["n_references"] for r in rows]
    lines.append("")
    lines.append(f"references per block: min {min(refs)}, mean {sum(refs) / len(refs):.1f}, max {max(refs)}")
    cov = summary["negatives_coverage"]
    n = summary["n_blocks"]
    lines.append("negatives coverage:   " + ", ".join(f"{role} {cnt}/{n}" for role, cnt in cov.items()))
    if cov.get("same_neighborhood"):
        from ..caveats import same_neighborhood_counts_text

        kinds = summary.get("same_neighborhood_kinds") or {}
        lines.append(f"same_neighborhood:    {same_neighborhood_counts_text(kinds)}")
    return "\n".join(lines)


def _cmd_info(args: argparse.Namespace) -> int:
    from ..benchmark import first_lines, load_benchmark

    resolve_num_workers_arg(args)
    bench = load_benchmark(args.benchmark, revision=args.revision, rekey_mismatched_images=args.rekey_mismatched_images)
    warn_rekeyed(bench)
    summary = bench.summary()
    bad = bench.check_images(num_workers=args.num_workers) if args.check_images else None
    if args.json:
        if bad is not None:
            summary["bad_images"] = bad
        if args.rekey_mismatched_images:
            summary["rekeyed_images"] = list(bench.rekeyed_images)
        print(json.dumps(summary, indent=2))
    else:
        print(format_summary(summary))
        if bad is not None:
            n = len(bench.references) + len(bench.world)
            print(f"\nimages      {n - len(bad)}/{n} decode and hash to their stored image_sha256"
                  + ("" if not bad else f"; {len(bad)} bad:"))
            for line in first_lines(bad):
                print(f"  {line}")
    return 1 if bad else 0


def _add_info(sub) -> None:
    p = sub.add_parser(
        "info",
        help="print a benchmark's summary (cities, blocks, references, negatives)",
        description=(
            "Prints a benchmark's summary: its name, source and fingerprint, the cities, every block with its "
            "street, neighborhood and reference counts (held-out and gallery; docs/benchmark.md section 1), the "
            "world pool, and how many blocks have each negative role. --json prints it as one JSON object. "
            "Without --check-images no image is read: the fingerprint is made of the stored image_sha256 hashes, "
            "which every command checks against the bytes of each image it reads or takes a cached result for."
        ),
    )
    _add_benchmark_arg(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--check-images", action="store_true",
                   help="also decode every reference and world image (in worker threads) and check its bytes against "
                        "its stored image_sha256 (what the fingerprint is made of); list the bad ones (the first 50 "
                        "and a count; all with --json); exit status 1 when there is one")
    add_rekey_arg(p)
    add_num_workers_arg(p)
    p.set_defaults(func=_cmd_info)


# -- prompts ------------------------------------------------------------------------------


def _cmd_prompts(args: argparse.Namespace) -> int:
    from ..benchmark import load_benchmark
    from ..prompts import PromptError, build_prompt

    bench = load_benchmark(args.benchmark, revision=args.revision)
    ids = args.blocks or bench.block_ids
    rows, refused = [], []
    for condition in args.conditions:
        for block_id in ids:
            try:
                p = build_prompt(bench, block_id, condition)
            except PromptError as err:
                refused.append((condition, block_id, str(err)))
                continue
            rows.append(
                {
                    "block_id": block_id,
                    "condition": condition,
                    "prompt": p.text,
                    "street_donor": p.street_donor,
                    "street_donor_scope": p.street_donor_scope,
                    "neighborhood_donor": p.neighborhood_donor,
                    "neighborhood_donor_scope": p.neighborhood_donor_scope,
                }
            )
    for row in rows:
        print(json.dumps(row, ensure_ascii=False))
    if args.verbose:
        for _, _, msg in refused:
            print(f"refused: {msg}", file=sys.stderr)
    else:
        for line in _refusal_summary(refused, len(ids)):
            print(line, file=sys.stderr)
    return 0


def _refusal_summary(refused, n_blocks: int) -> list[str]:
    """One line per condition: how many blocks it refuses and why (each reason once, with the
    count and the first blocks; the block's own name taken out of the message so that blocks group)."""
    by_condition: dict[str, dict[str, list[str]]] = {}
    for condition, block_id, msg in refused:
        reason = msg
        for prefix in (f"block {block_id!r}: ", f"block {block_id!r} "):
            if reason.startswith(prefix):
                reason = reason[len(prefix):]
                break
        by_condition.setdefault(condition, {}).setdefault(reason, []).append(block_id)
    lines = []
    for condition, reasons in by_condition.items():
        total = sum(len(b) for b in reasons.values())
        parts = []
        for reason, blocks in reasons.items():
            shown = ", ".join(blocks[:3]) + (f", +{len(blocks) - 3} more" if len(blocks) > 3 else "")
            parts.append(f"{len(blocks)} ({shown}) {reason}")
        lines.append(f"refused: {condition} for {total} of {n_blocks} block(s): " + "; ".join(parts))
    if lines:
        lines.append("(--verbose lists every refused block with its message)")
    return lines


def _add_prompts(sub) -> None:
    from ..prompts import CONDITIONS

    p = sub.add_parser(
        "prompts",
        help="print the prompts of a benchmark (JSON lines), refusing impossible ones",
        description=(
            "Prints the exact prompt of every (block, condition) as JSON lines on standard output "
            "(docs/benchmark.md section 2). A prompt that needs a name the benchmark does not know (a street "
            "or neighborhood for L1, L2 and the controls) is refused, never invented: standard error gets one "
            "line per condition with the count of refused blocks and why (--verbose: every refused block)."
        ),
    )
    _add_benchmark_arg(p)
    p.add_argument("--conditions", nargs="+", default=list(CONDITIONS), choices=CONDITIONS, metavar="COND")
    p.add_argument("--blocks", nargs="+", default=None, help="block ids (default: all)")
    p.add_argument("--verbose", action="store_true",
                   help="list every refused (condition, block) with its message (default: one line per condition "
                        "and reason, with the count)")
    p.set_defaults(func=_cmd_prompts)


def register(sub) -> None:
    """Adds ``info`` and ``prompts``."""
    _add_info(sub)
    _add_prompts(sub)
