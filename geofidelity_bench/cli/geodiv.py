"""``geofidelity-bench geodiv``: GeoDiv SEVI and VDI diversity of generated panels and real photos.

A VQA model (a transformers image-text-to-text model, or your own as ``--vqa-model
module:factory``) answers the question bank (``--questions``, default the shipped street-scene
bank) about every image of a generated folder (``--images``:
``{method}/{condition}/{block_id}/NN.jpg``, labelled ``model`` = method, the block's ``city``
and ``country``) and/or the benchmark's own photos (``--real``: references by their block's city
and country, and the world pool by its country). Replies are cached on disk per (model config,
question, image content). The work is
:func:`geofidelity_bench.geodiv.run_geodiv_to_folder`; it writes the ``geodiv_*.csv`` tables,
``geodiv.json`` (the tables and the run's record) and two PNG plots to ``--out`` (see
:mod:`geofidelity_bench.geodiv.outputs`).

Importing this module loads neither torch nor transformers.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

from ..provenance import command_line
from ._common import BENCHMARK_HELP, CLIError, add_batch_size_arg

LABEL_COLUMNS = ("model", "method", "condition", "block_id", "city", "country", "source", "origin", "label")
#: Exit status of a run that finished but has no score because every reply was unparseable.
EXIT_NO_SCORES = 1


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _interval(row, col: str) -> str:
    """`` [lo, hi]`` at the precision of :func:`_fmt` (3 decimals): rounding is monotone, so a value
    inside its interval is printed inside it (at 2 decimals 0.222 [0.00, 0.22] read as outside)."""
    lo, hi = row[f"{col}_lo"], row[f"{col}_hi"]
    return "" if _fmt(lo) == "n/a" else f" [{_fmt(float(lo))}, {_fmt(float(hi))}]"


def groups_text(tables) -> str:
    """The per-group tables as aligned text (what the command prints): the paper's plain scores with
    bootstrap intervals, then the size-matched diversities (the ones to compare across groups)."""
    from ..results import format_table

    df = tables.per_group
    means = [c for c in df.columns if c.endswith("_mean")]
    divs = [c for c in df.columns if c.endswith("_diversity")]
    keys = list(tables.group_by)
    headers = [*keys, "n", *means, *divs, "dropped", "unparseable"]
    rows = [[str(r[k]) for k in keys] + [str(int(r["n_images"]))] + [_fmt(r[c]) for c in means]
            + [_fmt(r[c]) + _interval(r, c) for c in divs]
            + [str(int(r["n_dropped_questions"])), _fmt(r["unparseable_rate"])] for _, r in df.iterrows()]
    sm = tables.size_matching
    pct = f"{sm.get('interval', 0.95):.0%}"
    draws = f"{sm.get('replicates')} draws, seed {sm.get('seed')}"
    text = (f"Plain diversity (the paper's normalized Hill number, 0..1, higher = more diverse; [{pct} bootstrap "
            f"interval over images: {draws}, the resamples' spread placed on the score]); it grows with n:\n"
            + format_table(headers, rows))
    if sm.get("n") is not None:
        rows = [[str(r[k]) for k in keys] + [str(int(r["n_images"]))]
                + [_fmt(r[f"{c}_rarefied"]) + _interval(r, f"{c}_rarefied") for c in divs] for _, r in df.iterrows()]
        m, least = sm["n"], sm.get("min_options")
        if least is not None and m < least:
            verdict = (f"n={m} is below {least}, the fewest options of any question: these can hardly tell groups "
                       "apart" + (" (on 2 images a question's D is either 0 or 1/(|A|-1))" if m == 2 else ""))
        else:
            verdict = "compare groups by these"
        text += (f"\n\nSize-matched diversity (every group subsampled to n={m} images: {sm.get('n_source')}; "
                 f"mean over all subsets, or {draws} when there are more [central {pct} of them]; higher = more "
                 f"diverse); {verdict}:\n"
                 + format_table([*keys, "n", *divs], rows))
    by_reason: dict[str, list[str]] = {}
    for _, r in df.iterrows():
        if r["diversity_na_reason"]:
            by_reason.setdefault(r["diversity_na_reason"], []).append(" / ".join(str(r[k]) for k in keys))
    if by_reason:
        text += "\n\nn/a (why a value is missing):\n" + "\n".join(
            f"  {why}: {len(names)} group(s): {', '.join(names[:12])}{', ...' if len(names) > 12 else ''}"
            for why, names in by_reason.items())
    return text


def _collect_images(args, bench) -> list:
    from ..geodiv import generated_images, reference_images

    from ..geodiv import labelled_folder_images

    images = []
    if args.labelled_images:
        images += labelled_folder_images(args.labelled_images)
    if args.images:
        images += generated_images(args.images, bench, methods=args.methods, conditions=args.conditions)
    if args.real:
        images += reference_images(bench, world=not args.no_world)
    if not images:
        raise CLIError("no images: give --images DIR (a generated folder), --labelled-images DIR and/or --real "
                       "(the benchmark's photos)")
    return images


def _cmd_geodiv(args: argparse.Namespace) -> int:
    started = time.time()
    from ..benchmark import load_benchmark
    from ..geodiv import MIN_COVERAGE, AnswerCache, get_vqa_backend, load_question_bank, run_geodiv_to_folder

    if not args.images and not args.real and not args.labelled_images:
        raise CLIError("give --images DIR (a generated folder {method}/{condition}/{block_id}/NN.jpg), "
                       "--labelled-images DIR (photos in {label}/ folders) and/or --real")
    if args.group_by is None:
        args.group_by = ["label"] if args.labelled_images and not (args.images or args.real) else ["country"]
    bad = [c for c in args.group_by if c not in LABEL_COLUMNS]
    if bad:
        raise CLIError(f"--group-by {bad} not available; group by any of {list(LABEL_COLUMNS)}")
    if args.rarefy_n is not None and args.rarefy_n < 2:
        raise CLIError(f"--rarefy-n must be at least 2 (a diversity needs 2 images), got {args.rarefy_n}")
    if args.n_resamples < 1:
        raise CLIError(f"--n-resamples must be positive, got {args.n_resamples}")
    bank = load_question_bank(args.questions)
    bench = load_benchmark(args.benchmark, revision=args.revision) if (args.images or args.real) else None
    images = _collect_images(args, bench)
    backend = get_vqa_backend(args.vqa_model, revision=args.vqa_revision, device=args.device, dtype=args.dtype,
                              batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                              max_image_side=args.max_image_side)
    cache = None if args.no_cache else AnswerCache(args.cache_dir)
    run = run_geodiv_to_folder(
        images, backend, args.out, group_by=args.group_by, bank=bank, cache=cache, benchmark=bench,
        progress=not args.no_progress, command=command_line(args),
        parameters={k: v for k, v in vars(args).items() if k not in ("func", "argv")}, started=started,
        pool_sources=args.pool_sources, rarefy_n=args.rarefy_n, replicates=args.n_resamples, seed=args.seed,
    )
    tables, stats = run.tables, run.record["answer_stats"]
    print(groups_text(tables))
    print(f"\nVQA model {backend.model_id} (config {backend.config_hash[:12]}), question bank {bank.label}; "
          f"{stats['n_images']} images, {stats['n_asked']} questions asked, {stats['n_cached']} from the cache, "
          f"{run.n_unparseable} unparseable replies, {len(tables.dropped)} (group, question) pairs dropped "
          f"for coverage < {MIN_COVERAGE:.0%}.", file=sys.stderr)
    if tables.n_images_without_group:
        print(f"{tables.n_images_without_group} image(s) have no {'/'.join(tables.group_by)} label and were left out.",
              file=sys.stderr)
    for warning in run.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"wrote {run.out_dir}", file=sys.stderr)
    if run.all_unparseable:
        print(f"ERROR: no GeoDiv score: all {len(run.answers)} replies of VQA model {backend.model_id} were "
              f"unparseable (see the warning above; exit status {EXIT_NO_SCORES}).", file=sys.stderr)
        return EXIT_NO_SCORES
    return 0


def register(sub) -> None:
    from ..geodiv.vqa import DEFAULT_VQA_MODEL

    p = sub.add_parser(
        "geodiv",
        help="GeoDiv: SEVI (affluence, maintenance) and VDI (entity, background) diversity via a VQA model",
        description=(
            "Asks a vision-language model a versioned bank of multiple-choice questions about every image and "
            "reports, per group, the SEVI mean ratings and the normalized Hill diversity of every answer "
            "distribution (docs/benchmark.md section 9, GeoDiv): D = (exp(H) - 1) / (|A| - 1), higher = more "
            "diverse, with a bootstrap interval and a size-matched (rarefied) value to compare groups of different "
            "sizes. Exit status 1 when "
            "every reply was unparseable (no score; the files are written for inspection), 2 for bad input."
        ),
    )
    p.add_argument("--images", default=None,
                   help="generated folder {method}/{condition}/{block_id}/NN.jpg (e.g. the --out of generate)")
    p.add_argument("--labelled-images", default=None, metavar="DIR",
                   help="a plain folder of photos grouped by label, DIR/{label}/*.jpg (group column label, the "
                        "default grouping when it is the only input)")
    p.add_argument("--real", action="store_true",
                   help="also score the benchmark's own photos: references (model real_references, their block's "
                        "city/country) and the world pool (model real_world, its country)")
    p.add_argument("--no-world", action="store_true", help="with --real, leave out the world pool")
    p.add_argument("--group-by", nargs="+", default=None, metavar="COLUMN",
                   help=f"grouping column(s), any of {', '.join(LABEL_COLUMNS)} (default: country, or label with "
                        "only --labelled-images); e.g. --group-by model country. Images of different origins "
                        "(generated, real, folder) are kept apart: origin joins the grouping when it would mix them")
    p.add_argument("--pool-sources", action="store_true",
                   help="let a group mix generated, real and folder images (default: kept apart)")
    p.add_argument("--rarefy-n", type=int, default=None, metavar="N",
                   help="size-matched diversity: subsample every group to N images (default: the smallest group "
                        "of at least as many images as the fewest options of any question, 4 for the shipped bank, "
                        "else of at least 2 with a warning that it can hardly tell groups apart; smaller groups get "
                        "none)")
    p.add_argument("--n-resamples", type=int, default=200,
                   help="subsamples per group for the size-matched diversity, and bootstrap resamples for the "
                        "intervals (default: 200)")
    p.add_argument("--seed", type=int, default=0, help="seed of the subsamples and resamples (default: 0)")
    p.add_argument("--benchmark", default="demo", help=BENCHMARK_HELP + " (default: demo)")
    p.add_argument("--revision", default=None, help="Hub revision of the benchmark dataset")
    p.add_argument("--methods", nargs="+", default=None, help="only these method folders of --images")
    p.add_argument("--conditions", nargs="+", default=None, help="only these condition folders of --images")
    p.add_argument("--vqa-model", default=DEFAULT_VQA_MODEL,
                   help=f"Hub id or local save_pretrained folder (model + processor) of an image-text-to-text "
                        f"model (default: {DEFAULT_VQA_MODEL}), or your own model as MODULE:FACTORY or "
                        "FILE.py:FACTORY, where FACTORY(**options) returns a geofidelity_bench.geodiv.VQABackend "
                        "(options: those given of device, dtype, batch_size, max_new_tokens, max_image_side, "
                        "revision)")
    p.add_argument("--vqa-revision", default=None, help="Hub revision of --vqa-model")
    p.add_argument("--questions", default=None, help="question bank JSON/YAML (default: the shipped street bank)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: bfloat16 on GPU, float32 on CPU)")
    add_batch_size_arg(p, 8, "(image, question) pairs per generate call")
    p.add_argument("--max-new-tokens", type=int, default=8, help="reply length cap in tokens (default: 8)")
    p.add_argument("--max-image-side", type=int, default=768,
                   help="downscale images whose longer side exceeds this (default: 768; 0 keeps them)")
    p.add_argument("--cache-dir", default=None,
                   help="VQA answer cache (default: $GEOFIDELITY_VQA_CACHE, else $GEOFIDELITY_CACHE/vqa-answers, "
                        "else under HF_HOME)")
    p.add_argument("--no-cache", action="store_true", help="neither read nor write the answer cache")
    p.add_argument("--out", required=True, help="output folder (CSV, JSON and PNG files)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=_cmd_geodiv)
