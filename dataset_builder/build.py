"""Build the Hub dataset folder from a benchmark and, optionally, push it.

A thin entry point over ``geofidelity-bench build-dataset`` and ``push-dataset`` that always
uses the card template beside this file (``README.md`` + ``LICENSE.md``, copies of the package's
``geofidelity_bench/hub/dataset_card/`` written by ``scripts/sync_published_files.py``)::

    python dataset_builder/build.py demo --out build/demo_dataset
    python dataset_builder/build.py imported_release --out build/hub --push user/GeoFidelity-Bench
    python dataset_builder/build.py bench_dir --out build/hub --generations panels --overwrite

``SRC`` is ``demo``, a canonical benchmark folder, a Hub dataset id, or the output folder of
``geofidelity-bench import-release`` (its ``benchmark/`` and ``generations/`` are both used).
The token for ``--push`` comes from ``HF_TOKEN`` or ``hf auth login`` and is never printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

HERE = Path(__file__).resolve().parent


def main(argv: Sequence[str] | None = None) -> int:
    from geofidelity_bench.cli import main as cli_main

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", help="demo, a benchmark folder, a Hub dataset id, or an import-release output folder")
    parser.add_argument("--out", required=True, help="the dataset folder to write")
    parser.add_argument("--generations", default=None, help="a generated-panels folder (with manifest.parquet)")
    parser.add_argument("--max-shard-rows", type=int, default=500, help="images per Parquet shard (default: 500)")
    parser.add_argument("--overwrite", action="store_true", help="replace a previous build in --out")
    parser.add_argument("--push", metavar="REPO_ID", default=None, help="then push the folder to this dataset repo")
    parser.add_argument("--private", action="store_true", help="create the repo as private (with --push)")
    parser.add_argument("--endpoint", default=None, help="Hub URL (with --push; default: $HF_ENDPOINT or huggingface.co)")
    args = parser.parse_args(argv)

    build = ["build-dataset", args.src, "--out", args.out, "--card", str(HERE / "README.md"),
             "--max-shard-rows", str(args.max_shard_rows)]
    if args.generations:
        build += ["--generations", args.generations]
    if args.overwrite:
        build.append("--overwrite")
    rc = cli_main(build)
    if rc or not args.push:
        return rc
    push = ["push-dataset", args.out, "--repo-id", args.push]
    if args.private:
        push.append("--private")
    if args.endpoint:
        push += ["--endpoint", args.endpoint]
    return cli_main(push)


if __name__ == "__main__":
    sys.exit(main())
