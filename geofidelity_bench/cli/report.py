"""``geofidelity-bench report``: the paper's tables and plots from one or more results folders."""

from __future__ import annotations

import argparse
import os
import re
import sys

from ..errors import GeoFidelityError
from ._common import BENCHMARK_HELP, CLIError, add_batch_size_arg


def _cmd_report(args: argparse.Namespace) -> int:
    from ..report import report_from_dirs

    if args.n_resamples < 1 or args.rank_resamples < 1:
        raise CLIError("--n-resamples and --rank-resamples must be positive")
    if not 0 < args.confidence < 1:
        raise CLIError("--confidence must be between 0 and 1")
    for r in args.results:  # a path that is not there is a missing folder, never a Hub repo id
        if not os.path.exists(r) and _looks_like_path(r):
            raise CLIError(f"results folder {r} does not exist")
    repos = [r for r in args.results if not os.path.exists(r) and re.fullmatch(r"[\w.-]+/[\w.-]+", r)]
    common = dict(
        seed=args.seed,
        n_resamples=args.n_resamples,
        rank_resamples=args.rank_resamples,
        confidence=args.confidence,
        plots=not args.no_plots,
    )
    if repos:
        from ..report.leaderboard import report_from_repo

        if len(args.results) > 1:
            raise CLIError("--results takes one results repo (ORG/NAME) or one or more folders, not both")
        out_dir = args.out or os.path.join("report_" + repos[0].replace("/", "_"))
        try:
            report = report_from_repo(repos[0], out_dir, endpoint=args.endpoint, revision=args.revision,
                                      group=args.group, **common)
        except GeoFidelityError as err:  # ORG/NAME may have been meant as a folder: say there is none
            raise CLIError(f"{err} (--results {repos[0]} was read as a results repo on the Hub: there is no local "
                           f"folder {repos[0]})") from None
        for line in report["leaderboard_notes"]:
            print(line)
        sets = ", ".join(f"{c} {n}" for c, n in report["leaderboard_condition_blocks"].items() if n)
        print(f"group: {report['leaderboard_group']}; its block set per condition: {sets or 'none'} (what each "
              "ranked submission covers is the 'Ranked' line above)")
    else:
        report = report_from_dirs(args.results, args.out, allow_mixed_encoders=args.allow_mixed_encoders, **common)
    out = report["out_dir"]
    if "tables" in report:
        for name, entry in report["tables"].items():
            status = "ok" if entry["status"] == "ok" else f"skipped: {entry.get('reason')}"
            print(f"{name:28s} {status}")
            for note in entry.get("notes") or []:
                if note.startswith("left out:") or "not comparable" in note:
                    print(f"{'':28s} {note.replace('**', '')}")
    else:
        for sub in report.get("sub_reports", {}).values():
            print(f"encoder {sub['encoder']} ({sub['comparability']}): {out}/{sub['report_md']}")
    print(f"\nwrote {out}/report.md, report.json, tables/ and plots/", file=sys.stderr)
    return 0


def _looks_like_path(text: str) -> bool:
    """Whether ``--results TEXT`` can only be a local folder, never a Hub repo id (``ORG/NAME``): it starts
    with ``.``, ``/`` or ``~``, ends with a separator, holds more than one ``/`` or a separator other than
    ``/`` (``\\`` on Windows)."""
    seps = {s for s in (os.sep, os.altsep) if s} - {"/"}
    return (text.startswith((".", "/", "~")) or text.endswith(("/", *seps)) or text.count("/") > 1
            or any(s in text for s in seps))


def _cmd_clip_alignment(args: argparse.Namespace) -> int:
    from ..clip_alignment import folder_images, run_clip_alignment
    from ..report.context import MAIN_CONDITION

    try:
        scores = run_clip_alignment(args.results, args.benchmark, folder_images(args.generated),
                                    weights=args.clip_weights, device=args.device, conditions=args.conditions,
                                    blocks=args.blocks, batch_size=args.batch_size)
    except FileNotFoundError as err:  # a panel's images are missing
        raise CLIError(str(err)) from None
    weights = scores["clip_weights"].iloc[0]
    print(f"scored {len(scores)} panel(s) with {scores['clip_encoder'].iloc[0]}" + (f" ({weights})" if weights else "")
          + f"; wrote {args.results}/clip_alignment.csv")
    missing = scores[scores["clip_prompt"].isna() | scores["clip_location"].isna()]
    if len(missing):
        first = missing.iloc[0]
        print(f"{len(missing)} panel(s) have no prompt or no location score (NaN, the reason in the note column), "
              f"e.g. {first['block_id']} ({first['condition']}): {first['note']}")
    scored = list(dict.fromkeys(scores["condition"]))
    others = [c for c in scored if c != MAIN_CONDITION]
    if MAIN_CONDITION in scored:
        print(f"`geofidelity-bench report` now adds the CLIP tables, from the {MAIN_CONDITION} panels"
              + (f"; it reads no CLIP scores of {', '.join(others)}" if others else ""))
    else:
        print(f"`geofidelity-bench report` builds its CLIP tables from {MAIN_CONDITION} panels only, so it reads none "
              f"of these ({', '.join(scored)}): score {MAIN_CONDITION} for the report's tables")
    return 0


def register(sub) -> None:
    c = sub.add_parser(
        "clip-alignment",
        help="CLIP image-text scores of a results folder's generated panels (input of the report's CLIP tables)",
        description="Scores each generated panel with CLIP ViT-B/32 against its exact prompt and the location-only "
        "text, and against texts with wrong names (docs/benchmark.md section 7, Statistics and analyses); writes clip_alignment.csv into the results folder.",
    )
    c.add_argument("--results", required=True, metavar="DIR", help="results folder (results.csv from `evaluate`)")
    c.add_argument("--generated", required=True, metavar="DIR",
                   help="the generated panels {method}/{condition}/{block_id}/NN.jpg that were evaluated")
    c.add_argument("--benchmark", default="demo", help=BENCHMARK_HELP + " (default: demo)")
    c.add_argument("--conditions", nargs="+", default=["L1"],
                   help="conditions to score (default: L1, as the paper; the report's CLIP tables read L1 only)")
    c.add_argument("--blocks", nargs="+", default=None, help="block ids (default: all)")
    c.add_argument("--clip-weights", default=None, help="local folder (or Hub id) of openai/clip-vit-base-patch32")
    c.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    add_batch_size_arg(c, 32, "images per CLIP batch")
    c.set_defaults(func=_cmd_clip_alignment)

    p = sub.add_parser(
        "report",
        help="tables (Markdown, CSV, JSON) and plots of the paper from one or more results folders",
        description="Builds report.md, report.json, tables/*.csv and plots/*.png from results folders written by "
        "`geofidelity-bench evaluate` or `demo`. Tables whose inputs are missing are skipped with a reason.",
    )
    p.add_argument("--results", nargs="+", required=True, metavar="DIR",
                   help="results folder(s) with results.csv (and run.json, optionally clip_alignment.csv), or one "
                   "results repo ORG/NAME on the Hub (see push-results): the report of one comparable group")
    p.add_argument("--endpoint", default=None, metavar="URL", help="Hub URL for a results repo (default: huggingface.co)")
    p.add_argument("--revision", default=None, help="revision of the results repo (default: main)")
    p.add_argument("--group", default=None,
                   help="which comparable group of a results repo (a benchmark fingerprint or encoder config hash "
                   "prefix; default: dinov2-base on the newest benchmark, else the largest group)")
    p.add_argument("--out", default=None, metavar="DIR", help="output folder (default: <first results folder>/report)")
    p.add_argument("--seed", type=int, default=42, help="seed of every bootstrap (default: 42)")
    p.add_argument("--n-resamples", type=int, default=5000, help="bootstrap resamples (default: 5000)")
    p.add_argument("--rank-resamples", type=int, default=2000,
                   help="city bootstraps for rank stability (default: 2000)")
    p.add_argument("--confidence", type=float, default=0.95, help="interval level (default: 0.95)")
    p.add_argument("--allow-mixed-encoders", action="store_true",
                   help="accept results folders that are not comparable (another encoder, encoder config, benchmark "
                   "or protocol): one sub-report per comparable group, never ranked together")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(func=_cmd_report)
