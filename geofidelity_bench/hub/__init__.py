"""Publishing a benchmark and generated panels to the Hugging Face Hub as a dataset repo, and reading it back.

Built folder (what ``geofidelity-bench build-dataset`` writes and ``push-dataset`` uploads)::

    README.md                                       dataset card: YAML configs + dataset_info, counts
    LICENSE.md                                      the license mixture (images, OSM data, code)
    blocks/train-00000-of-00001.parquet             one config per folder (docs/benchmark.md section 1, Domain and split fields)
    references/train-0000i-of-0000N.parquet         images embedded as datasets.Image() bytes
    cities/train-00000-of-00001.parquet
    world/train-0000i-of-0000N.parquet              only when the benchmark has a world pool
    generations/{model}/train-0000i-of-0000N.parquet  generated panels (image + manifest columns)

Every Parquet file carries its ``datasets`` features in the schema metadata, the benchmark's
image configs are written in row groups of 100 rows (what the dataset viewer reads well), and
rows are in a fixed order (blocks and references by id, generations by model, condition,
block, k), so that rebuilding unchanged data gives byte-identical files and a re-push uploads
nothing. The folder
loads with plain ``datasets.load_dataset(folder, config)`` and with
:func:`geofidelity_bench.load_benchmark`, locally or from the Hub.

Pushing (:func:`push_dataset`, and :func:`push_generations` for a ``generate`` folder; both are
:func:`~geofidelity_bench.hub.push.push`) makes one commit per group - each benchmark config, each
generations model, then the card - with ``parent_commit`` set, so an interrupted push resumes at
the first group that is not up to date. A file whose sha256 (LFS) or git blob id already matches
the repo is not uploaded again; stale shards inside a group that is pushed (a config re-sharded)
are deleted; other models' generations already in the repo are never touched (the card keeps
their ``generations`` entry). Transient HTTP errors are retried with exponential backoff (the
helpers of :mod:`geofidelity_bench.hub.requests`). The token is never printed or logged.

Modules: :mod:`~geofidelity_bench.hub.configs` (config names, features, rows),
:mod:`~geofidelity_bench.hub.parquet` (shards), :mod:`~geofidelity_bench.hub.card` (the dataset
card; its template and ``LICENSE.md`` ship in ``hub/dataset_card/``, the only source of both),
:mod:`~geofidelity_bench.hub.build` (``build_dataset``), :mod:`~geofidelity_bench.hub.push`
(the one push), :mod:`~geofidelity_bench.hub.fetch` (reading back) and
:mod:`~geofidelity_bench.hub.requests` (retries, digests, errors without the token).
"""

from __future__ import annotations

# Every name that ``geofidelity_bench.hub`` (and ``generation.hub``) offered before the split
# stays importable from here.
from .build import BuildReport, build_dataset
from .card import (
    CARD_FILE,
    COUNTS_END,
    COUNTS_START,
    LICENSE_FILE,
    benchmark_stats,
    counts_markdown,
    dataset_info_yaml,
    default_card_template,
    default_license,
    render_card,
    size_category,
    split_front_matter,
    update_readme,
)
from .configs import (
    DATASET_CONFIGS,
    GENERATIONS_CONFIG,
    GENERATIONS_DIR,
    IMAGE_CONFIGS,
    BuildSources,
    DatasetBuildError,
    benchmark_rows,
    config_features,
    generation_features,
    generation_rows,
    iter_config_rows,
    resolve_sources,
)
from .fetch import export_generations, fetch_dataset
from .parquet import DEFAULT_MAX_SHARD_ROWS, IMAGE_ROW_GROUP_SIZE, build_model_shards, shard_name, shard_path, write_config
from .push import *  # noqa: F403  (the one push, its reports and HubPushError: push.__all__)
from .push import __all__ as _push_names

__all__ = [
    "DATASET_CONFIGS",
    "BuildReport",
    "BuildSources",
    "DatasetBuildError",
    "benchmark_rows",
    "build_dataset",
    "build_model_shards",
    "config_features",
    "export_generations",
    "fetch_dataset",
    "generation_features",
    "generation_rows",
    "iter_config_rows",
    "render_card",
    "resolve_sources",
    "update_readme",
    # push.py's names, but dataset_groups (push_dataset's grouping), which this list never had
    *(name for name in _push_names if name != "dataset_groups"),
]
