"""``geofidelity-bench compare``: how far apart two results folders are (a re-run against a reference).

Exit status: 0 compared (and within ``--fail-above`` when given); 1 ``--fail-above`` was exceeded
(a matched difference above it, a value on one side only, or with ``--fail-on-one-sided`` a row
on one side only; never GAAS when the folders used different segmenters), or nothing could be
checked (no row joins, no metric with a value on both sides, or a metric column one side lacks or
that ``--metrics`` names and a side lacks); 2 bad input (one line on stderr, nothing written: an
empty method, condition or block_id in a results.csv, or an ``--out`` that is a file compare reads,
a folder's results.csv or run.json, or one of the folders).
"""

from __future__ import annotations

import argparse
import math
import sys

from ._common import CLIError


def _cmd_compare(args: argparse.Namespace) -> int:
    from ..compare import compare_results

    for name in ("tolerance", "fail_above"):
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise CLIError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {value}")
    if args.fail_on_one_sided and args.fail_above is None:
        raise CLIError("--fail-on-one-sided needs --fail-above TOL")
    if args.out:
        _refuse_input_as_output(args.out, args.results_a, args.results_b)
    result = compare_results(args.results_a, args.results_b, tolerance=args.tolerance, metrics=args.metrics,
                             allow_different_benchmarks=args.allow_different_benchmarks,
                             max_listed=args.max_listed)
    if args.out:
        path = result.write(args.out, args.format)
        print(f"wrote {path}", file=sys.stderr)
    else:
        sys.stdout.write(result.render(args.format))
        sys.stdout.flush()  # the output before the warnings that follow it on stderr
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.fail_above is not None:
        failures = result.failures(args.fail_above, one_sided_rows=args.fail_on_one_sided)
        if failures:
            print(f"compare: {len(failures)} difference(s) above --fail-above {args.fail_above:g}: "
                  + "; ".join(failures), file=sys.stderr)
            return 1
    return 0


def _refuse_input_as_output(out: str, *folders: str) -> None:
    """Refuses an ``--out`` that is a file compare reads (a folder's results.csv or run.json) or a folder itself.

    The check follows symbolic links and hard links (the same file under another name), as ``evaluate``
    refuses to write into its benchmark folder: the output never replaces an input.
    """
    import os
    from pathlib import Path

    from ..results import CLIP_FILE, RESULTS_FILE, RUN_FILE

    target = Path(out)
    for name, folder in zip("AB", folders):
        for path in (Path(folder), *(Path(folder) / f for f in (RESULTS_FILE, RUN_FILE, CLIP_FILE))):
            same = os.path.realpath(target) == os.path.realpath(path)
            if not same and target.exists() and path.exists():
                try:
                    same = os.path.samefile(target, path)
                except OSError:
                    same = False
            if same:
                what = f"the results folder {name}" if path == Path(folder) else f"{name}'s {path.name}"
                raise CLIError(f"--out {out} is {what} ({path}), which compare reads: refusing to overwrite an "
                               "input; write the output to another file")


def register(sub) -> None:
    from ..compare import DEFAULT_MAX_LISTED, DEFAULT_TOLERANCE, FORMATS

    p = sub.add_parser(
        "compare",
        help="compare two results folders row by row (a re-run against the paper's published scores)",
        description="Joins two results folders on (method, condition, block_id) and reports, per metric, the rows "
        "matched, the max and mean absolute difference and the rows beyond --tolerance; per condition, whether "
        "the methods rank in the same order (Kendall tau, rank 1 of each side); the rows on one side only "
        "(docs/benchmark.md section 7, Comparing two results folders). Folders of different benchmark "
        "fingerprints are refused (--allow-different-benchmarks); different encoders are compared with a warning; GAAS "
        "of different segmenters is shown, said not comparable and never fails --fail-above. "
        "Exit status: 0 compared, 1 --fail-above exceeded, 2 bad input.",
    )
    p.add_argument("results_a", metavar="RESULTS_A", help="the reference results folder (e.g. OUT/published)")
    p.add_argument("results_b", metavar="RESULTS_B", help="the results folder compared with it (e.g. a re-run)")
    p.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                   help=f"list the rows whose |B - A| is above this (default: {DEFAULT_TOLERANCE:g})")
    p.add_argument("--fail-above", type=float, default=None, metavar="TOL",
                   help="exit with status 1 when a matched row differs by more than TOL in any compared metric, or "
                   "has a value on one side only (for CI); GAAS of different segmenters never fails")
    p.add_argument("--fail-on-one-sided", action="store_true",
                   help="with --fail-above: also exit 1 when a row is present in one folder only")
    p.add_argument("--metrics", nargs="+", default=None, metavar="COLUMN",
                   help="compare only these metric columns (default: every metric column of results.csv)")
    p.add_argument("--format", choices=FORMATS, default="md", help="output format (default: md, Markdown)")
    p.add_argument("--out", default=None, metavar="FILE", help="write the output to FILE (atomically) instead "
                   "of printing it")
    p.add_argument("--max-listed", type=int, default=DEFAULT_MAX_LISTED, metavar="N",
                   help=f"rows shown in each list (default: {DEFAULT_MAX_LISTED})")
    p.add_argument("--allow-different-benchmarks", action="store_true",
                   help="compare folders whose benchmark fingerprints differ or are not recorded (said in the output)")
    p.set_defaults(func=_cmd_compare)
