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

LABEL_COLUMNS = ("model", "method", "condition", "block_id", "city", "country", "source")


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def groups_text(tables) -> str:
    """The per-group table as aligned text (what the command prints)."""
    from ..results import format_table

    df = tables.per_group
    score_cols = [c for c in df.columns if c.endswith(("_mean", "_diversity"))]
    headers = [*tables.group_by, "images", *score_cols, "dropped", "unparseable"]
    rows = [[str(r[k]) for k in tables.group_by] + [str(int(r["n_images"]))] + [_fmt(r[c]) for c in score_cols]
            + [str(int(r["n_dropped_questions"])), _fmt(r["unparseable_rate"])] for _, r in df.iterrows()]
    return format_table(headers, rows)


def _collect_images(args, bench) -> list:
    from ..geodiv import generated_images, reference_images

    images = []
    if args.images:
        images += generated_images(args.images, bench, methods=args.methods, conditions=args.conditions)
    if args.real:
        images += reference_images(bench, world=not args.no_world)
    if not images:
        raise CLIError("no images: give --images DIR (a generated folder) and/or --real (the benchmark's photos)")
    return images


def _cmd_geodiv(args: argparse.Namespace) -> int:
    started = time.time()
    from ..benchmark import load_benchmark
    from ..geodiv import MIN_COVERAGE, AnswerCache, get_vqa_backend, load_question_bank, run_geodiv_to_folder

    if not args.images and not args.real:
        raise CLIError("give --images DIR (a generated folder {method}/{condition}/{block_id}/NN.jpg) and/or --real")
    bad = [c for c in args.group_by if c not in LABEL_COLUMNS]
    if bad:
        raise CLIError(f"--group-by {bad} not available; group by any of {list(LABEL_COLUMNS)}")
    bank = load_question_bank(args.questions)
    bench = load_benchmark(args.benchmark, revision=args.revision)
    images = _collect_images(args, bench)
    backend = get_vqa_backend(args.vqa_model, revision=args.vqa_revision, device=args.device, dtype=args.dtype,
                              batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                              max_image_side=args.max_image_side)
    cache = None if args.no_cache else AnswerCache(args.cache_dir)
    run = run_geodiv_to_folder(
        images, backend, args.out, group_by=args.group_by, bank=bank, cache=cache, benchmark=bench,
        progress=not args.no_progress, command=command_line(args),
        parameters={k: v for k, v in vars(args).items() if k not in ("func", "argv")}, started=started,
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
    print(f"wrote {run.out_dir}", file=sys.stderr)
    return 0


def register(sub) -> None:
    from ..geodiv.vqa import DEFAULT_VQA_MODEL

    p = sub.add_parser(
        "geodiv",
        help="GeoDiv: SEVI (affluence, maintenance) and VDI (entity, background) diversity via a VQA model",
        description=(
            "Asks a vision-language model a versioned bank of multiple-choice questions about every image and "
            "reports, per group, the SEVI mean ratings and the normalized Hill diversity of every answer "
            "distribution (docs/benchmark.md section 9, GeoDiv): D = (exp(H) - 1) / (|A| - 1)."
        ),
    )
    p.add_argument("--images", default=None,
                   help="generated folder {method}/{condition}/{block_id}/NN.jpg (e.g. the --out of generate)")
    p.add_argument("--real", action="store_true",
                   help="also score the benchmark's own photos: references (model real_references, their block's "
                        "city/country) and the world pool (model real_world, its country)")
    p.add_argument("--no-world", action="store_true", help="with --real, leave out the world pool")
    p.add_argument("--group-by", nargs="+", default=["country"], metavar="COLUMN",
                   help=f"grouping column(s), any of {', '.join(LABEL_COLUMNS)} (default: country); "
                        "e.g. --group-by model country")
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
