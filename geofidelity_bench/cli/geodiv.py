"""``geofidelity-bench geodiv``: GeoDiv SEVI and VDI diversity of generated panels and real photos.

A VQA model (a transformers image-text-to-text model, ``--vqa-model``) answers the question bank
(``--questions``, default the shipped street-scene bank) about every image of a generated folder
(``--images``: ``{method}/{condition}/{block_id}/NN.jpg``, labelled ``model`` = method, the
block's ``city`` and ``country``) and/or the benchmark's own photos (``--real``: references by
their block's city and country, and the world pool by its country). Replies are cached on disk
per (model config, question, image content). Writes to ``--out``:

    geodiv_groups.csv       one row per group: SEVI mean ratings and diversities, VDI diversities
    geodiv_questions.csv    one row per (group, question): counts, |A|, coverage, D, status
    geodiv_dropped.csv      the (group, question) pairs dropped for coverage < 50%
    geodiv_answers.csv      one row per (image, question): raw reply, parsed choice, status
    geodiv.json             all tables plus the VQA model id and config, the bank, the rules, versions
    geodiv_diversity.png    per-group bars of every diversity score
    geodiv_ratings.png      per-group distributions of the SEVI ratings

Importing this module loads neither torch nor transformers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from ..provenance import command_line, library_versions, utc_timestamp
from ..atomic import atomic_write, temporary_path
from ._common import BENCHMARK_HELP, CLIError

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


def get_vqa_backend(model, **kwargs):
    """The VQA backend the arguments ask for (a seam for tests: replace it to script the model)."""
    from ..geodiv.vqa import get_vqa_backend as build

    return build(model, **kwargs)


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
    from ..geodiv import (
        MIN_COVERAGE,
        NONE_SHARE_THRESHOLD,
        AnswerCache,
        answer_questions,
        diversity_tables,
        load_question_bank,
    )
    from ..geodiv.plots import plot_diversity_bars, plot_rating_distributions

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
    answers = answer_questions(images, bank, backend, cache=cache, progress=not args.no_progress)
    tables = diversity_tables(answers, bank, args.group_by)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "geodiv_groups.csv", lambda p: tables.per_group.to_csv(p, index=False))
    atomic_write(out / "geodiv_questions.csv", lambda p: tables.per_question_csv_frame().to_csv(p, index=False))
    atomic_write(out / "geodiv_dropped.csv", lambda p: tables.dropped.to_csv(p, index=False))
    atomic_write(out / "geodiv_answers.csv", lambda p: answers.to_csv(p, index=False))
    plots = {}
    for name, fn in (("geodiv_diversity.png", plot_diversity_bars), ("geodiv_ratings.png", plot_rating_distributions)):
        tmp = temporary_path(out / name)
        try:
            if fn(tables, tmp):  # False: nothing to plot, no file
                os.replace(tmp, out / name)
                plots[name] = str(out / name)
        finally:
            tmp.unlink(missing_ok=True)
    stats = answers.attrs["answer_stats"]
    n_unparseable = int((answers["status"] == "unparseable").sum())
    info = {
        "command": command_line(args),
        "created_at": utc_timestamp(),
        "elapsed_s": round(time.time() - started, 2),
        "parameters": {k: v for k, v in vars(args).items() if k not in ("func", "argv")},
        "benchmark": {"name": bench.name, "source": bench.source, "fingerprint": bench.fingerprint},
        "vqa": {"model": backend.model_id, "config": backend.config, "config_hash": backend.config_hash},
        "question_bank": {"label": bank.label, "source": bank.source, "fingerprint": bank.fingerprint,
                          "n_questions": len(bank)},
        "rules": {
            "diversity": "D = (exp(H_nats(p)) - 1) / (|A| - 1); |A| counts every option, chosen or not",
            "none_of_the_above": f"dropped unless more than {NONE_SHARE_THRESHOLD:.0%} of the question's parsed "
                                 "answers, then counted as one more option (|A| + 1)",
            "unparseable": "dropped and counted",
            "coverage": f"a (group, question) with counted answers for fewer than {MIN_COVERAGE:.0%} of the "
                        "group's images is dropped and listed in dropped",
            "vdi": "entity / background diversity = mean D over the kept questions of that kind",
            "sevi": "mean rating (1..5) and D of the rating distribution (|A| = 5)",
        },
        "answer_cache": str(cache.root) if cache is not None else None,
        "answer_stats": {**stats, "n_unparseable": n_unparseable,
                         "unparseable_rate": n_unparseable / len(answers) if len(answers) else None},
        "unparseable_by_question": {
            qid: int(n) for qid, n in answers[answers["status"] == "unparseable"].groupby("question_id").size().items()
        },
        **{k: v for k, v in tables.to_dict().items() if k != "question_bank"},
        "plots": sorted(plots),
        "versions": library_versions(),
    }
    atomic_write(out / "geodiv.json",
            lambda p: p.write_text(json.dumps(info, indent=2, default=str, allow_nan=False), encoding="utf-8"))
    print(groups_text(tables))
    print(f"\nVQA model {backend.model_id} (config {backend.config_hash[:12]}), question bank {bank.label}; "
          f"{stats['n_images']} images, {stats['n_asked']} questions asked, {stats['n_cached']} from the cache, "
          f"{n_unparseable} unparseable replies, {len(tables.dropped)} (group, question) pairs dropped "
          f"for coverage < {MIN_COVERAGE:.0%}.", file=sys.stderr)
    if tables.n_images_without_group:
        print(f"{tables.n_images_without_group} image(s) have no {'/'.join(tables.group_by)} label and were left out.",
              file=sys.stderr)
    print(f"wrote {out}", file=sys.stderr)
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
                        f"model (default: {DEFAULT_VQA_MODEL})")
    p.add_argument("--vqa-revision", default=None, help="Hub revision of --vqa-model")
    p.add_argument("--questions", default=None, help="question bank JSON/YAML (default: the shipped street bank)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: bfloat16 on GPU, float32 on CPU)")
    p.add_argument("--batch-size", type=int, default=8, help="(image, question) pairs per generate call (default: 8)")
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
