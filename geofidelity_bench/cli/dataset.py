"""``geofidelity-bench build-dataset``, ``push-dataset`` and ``import-release``.

::

    geofidelity-bench import-release ~/GeoFidelity-Bench --out imported
    geofidelity-bench build-dataset imported --out hub_folder        # benchmark + generations
    geofidelity-bench build-dataset demo --out demo_hub --generations gen_tiny
    geofidelity-bench push-dataset hub_folder --repo-id user/GeoFidelity-Bench [--private]
"""

from __future__ import annotations

import argparse
import os
import sys

from ._common import BENCHMARK_HELP, CLIError, add_hub_retry_args, hub_repo_id, hub_retry_kwargs


def _cmd_build(args: argparse.Namespace) -> int:
    from ..hub import DatasetBuildError, build_dataset

    try:
        report = build_dataset(
            args.src,
            args.out,
            generations=args.generations,
            card_template=args.card,
            max_shard_rows=args.max_shard_rows,
            overwrite=args.overwrite,
        )
    except DatasetBuildError as err:
        raise CLIError(str(err)) from None
    configs = ", ".join(f"{c} {n}" for c, n in report.configs.items())
    print(f"wrote {len(report.files)} file(s) to {report.out} ({configs}); check it with "
          f"`geofidelity-bench info --benchmark {report.out}`")
    return 0


def _cmd_push(args: argparse.Namespace) -> int:
    from ..hub import HubPushError, push_dataset

    if not os.path.isdir(args.dir):
        raise CLIError(f"{args.dir} is not a folder")
    try:
        report = push_dataset(args.dir, args.repo_id, endpoint=args.endpoint, private=True if args.private else None,
                              **hub_retry_kwargs(args))
    except HubPushError as err:
        raise CLIError(str(err)) from None
    n = len(report.uploaded)
    print(f"{args.repo_id}: {n} file(s) uploaded in {len(report.commits)} commit(s)"
          + ("" if n else " (everything was up to date)"))
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    from ..release_import import ReleaseImportError, import_release

    try:
        report = import_release(
            args.dir,
            args.out,
            generations=not args.no_generations,
            published=not args.no_published,
            keep_model_names=args.keep_model_names,
            hardlink=args.hardlink,
            overwrite=args.overwrite,
        )
    except ReleaseImportError as err:
        raise CLIError(str(err)) from None
    print(report.summary(max_examples=args.examples))
    if args.strict and report.issues:
        print(f"--strict: {len(report.issues)} issue(s), see {args.out}/import_report.json", file=sys.stderr)
        return 1
    return 0


def register(sub) -> None:
    """Adds ``build-dataset``, ``push-dataset`` and ``import-release``."""
    p = sub.add_parser(
        "build-dataset",
        help="write the Hub-ready dataset folder of a benchmark (Parquet configs with embedded images + card)",
        description=(
            "Writes OUT/{blocks,references,cities[,world]}/train-*.parquet, OUT/generations/{model}/train-*.parquet "
            "(with --generations, or found in an import-release output), README.md (the dataset card with the "
            "counts filled in) and LICENSE.md. The folder loads with datasets.load_dataset(OUT, config) and "
            "geofidelity_bench.load_benchmark(OUT)."
        ),
    )
    p.add_argument("src", help=BENCHMARK_HELP + ", or an import-release output folder")
    p.add_argument("--out", required=True, help="output folder (must be empty unless --overwrite)")
    p.add_argument("--generations", default=None,
                   help="a generated-panels folder with manifest.parquet (from `generate` or `import-release`)")
    p.add_argument("--card", default=None, help="dataset card template (default: dataset_builder/README.md)")
    p.add_argument("--max-shard-rows", type=int, default=500, help="images per Parquet shard (default: 500)")
    p.add_argument("--overwrite", action="store_true", help="replace a previous build in --out")
    p.set_defaults(func=_cmd_build)

    q = sub.add_parser(
        "push-dataset",
        help="upload a built dataset folder to a Hub dataset repo (resumable: unchanged files are skipped)",
        description=(
            "Uploads a folder written by `build-dataset` (Parquet configs and the dataset card) to a Hub dataset "
            "repo, created if missing. Resumable: files already on the Hub with the same content are skipped. "
            "The Hub is --endpoint, else $HF_ENDPOINT, else huggingface.co."
        ),
    )
    q.add_argument("dir", help="a folder written by `build-dataset`")
    q.add_argument("--repo-id", required=True, type=hub_repo_id, help="dataset repo id (user/name), created if missing")
    q.add_argument("--private", action="store_true", help="create the repo as private (if it does not exist)")
    q.add_argument(
        "--endpoint",
        default=None,
        help="Hub URL (default: $HF_ENDPOINT or https://huggingface.co); the token comes from HF_TOKEN or `hf auth login`",
    )
    add_hub_retry_args(q)
    q.set_defaults(func=_cmd_push)

    r = sub.add_parser(
        "import-release",
        help="convert a local copy of the published GeoFidelity-Bench release (v3.1.0) to the canonical format",
        description=(
            "Reads metadata/*.csv, data/processed/v3/benchmark_v3.json and the image folders of the published "
            "release and writes OUT/benchmark (canonical benchmark folder), OUT/generations "
            "({model}/{condition}/{block_id}/{k:02d}.jpg + manifest.parquet, for `evaluate --generated`) and "
            "OUT/published (the release's published per-block scores, outputs/eval_v3/raw_results.csv, as a results "
            "folder that `report` and `compare` read; the numbers are the release's, not recomputed) and "
            "OUT/import_report.json, which lists every row or value that was not imported as it was."
        ),
    )
    r.add_argument("dir", help="the release folder (with metadata/, data/, generations_v3/)")
    r.add_argument("--out", required=True, help="output folder")
    r.add_argument("--no-generations", action="store_true", help="do not import the generated panels")
    r.add_argument("--no-published", action="store_true",
                   help="do not convert the published scores (outputs/eval_v3/raw_results.csv) to OUT/published")
    r.add_argument("--keep-model-names", action="store_true",
                   help="keep the release's model names (e.g. sdxl_base) instead of this package's keys (sdxl)")
    r.add_argument("--hardlink", action="store_true", help="hard-link generated images instead of copying them")
    r.add_argument("--overwrite", action="store_true", help="replace a previous import in --out")
    r.add_argument("--strict", action="store_true", help="exit with status 1 when anything was not imported as it was")
    r.add_argument("--examples", type=int, default=3, help="examples printed per issue kind (default: 3)")
    r.set_defaults(func=_cmd_import)


__all__ = ["register"]
