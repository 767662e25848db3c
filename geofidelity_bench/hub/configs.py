"""The configs of the dataset repo: their names, ``datasets`` features and rows.

Benchmark configs (``blocks``, ``references``, ``cities``, ``world``; docs/benchmark.md section 1, Domain and split fields)
come from a :class:`~geofidelity_bench.benchmark.Benchmark`; the ``generations`` config has one
row per verified generated image: ``image`` (``{"bytes", "path"}``, path = the panel's relative
path ``{model}/{condition}/{block_id}/{k:02d}.jpg``) plus every manifest column (model,
block_id, condition, k, seed, prompt, negative_prompt, steps, guidance, dtype, versions,
sha256, ...). The rows of a config are always in the same order (blocks and references by id,
generations by model, condition, block, k), so that rebuilding unchanged data gives
byte-identical files.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from ..benchmark import CONFIGS as BENCHMARK_CONFIGS
from ..benchmark import Benchmark, config_records, load_benchmark
from ..errors import GeoFidelityError
from ..generation.manifest import MANIFEST_COLUMNS, MANIFEST_FILE, load_manifest, panel_relpath
from ..image_store import confined_file

GENERATIONS_CONFIG = "generations"
GENERATIONS_DIR = "generations"
DATASET_CONFIGS = (*BENCHMARK_CONFIGS, GENERATIONS_CONFIG)
IMAGE_CONFIGS = ("references", "world", GENERATIONS_CONFIG)


class DatasetBuildError(GeoFidelityError, ValueError):
    """The dataset folder cannot be built; the message names the file or the problem."""


def generation_features():
    """``datasets.Features`` of the ``generations`` config: the image plus manifest columns."""
    from datasets import Features, Image, Value

    types = {"string": "string", "int64": "int64", "float64": "float64"}
    cols = {"image": Image()}
    cols.update({c: Value(types[t]) for c, t in MANIFEST_COLUMNS.items()})
    return Features(cols)


def config_features(config: str):
    """``datasets.Features`` of a config of the dataset repo (benchmark configs + ``generations``)."""
    if config == GENERATIONS_CONFIG:
        return generation_features()
    from ..benchmark import features

    return features(config)


def is_missing(value: Any) -> bool:
    """None or a float NaN (how pandas gives back an empty manifest cell)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def benchmark_rows(benchmark: Benchmark, config: str) -> Iterator[dict[str, Any]]:
    """The rows of one benchmark config, in the canonical order and with the canonical fields
    (:func:`geofidelity_bench.benchmark.config_records`: the same rows a saved folder holds).

    Images are ``{"bytes", "path"}`` dicts (``path`` = ``{reference_id}.jpg`` / ``{image_id}.jpg``)
    with their ``image_sha256``; one image's bytes are read at a time.
    """
    return config_records(benchmark, config)


def generation_row(root: Path, record: Mapping[str, Any]) -> dict[str, Any]:
    """The ``generations`` row of one manifest record: the image file's bytes plus every manifest column.

    The file read is the panel's own ``{model}/{condition}/{block_id}/{k:02d}.jpg`` inside ``root`` (the one
    whose hash :func:`~geofidelity_bench.generation.manifest.load_manifest` verified), never the record's
    ``path`` text: a manifest cannot make the build read, and ``push-generations`` publish, another file.
    """
    rel = panel_relpath(record["model"], record["condition"], record["block_id"], record["k"])
    path, refused = confined_file(rel, root)
    if refused is not None or path is None:
        raise DatasetBuildError(f"{root / MANIFEST_FILE}: the panel {rel!r} (model {record['model']!r}) is {refused}, "
                                "outside the generations folder; fix the manifest row")
    out: dict[str, Any] = {"image": {"bytes": path.read_bytes(), "path": rel}}
    for col in MANIFEST_COLUMNS:
        value = record.get(col)
        out[col] = None if is_missing(value) else value
    return out


def generation_rows(generations_dir: str | os.PathLike, manifest=None, model: str | None = None) -> Iterator[dict[str, Any]]:
    """One row per verified generated image (:func:`generation_row`), of every model or of ``model``.

    Ordered by (model, condition, block_id, k) - the order of the built ``generations`` files.
    """
    root = Path(generations_dir)
    if manifest is None:
        manifest = load_manifest(root, verify=True)
    if model is not None:
        manifest = manifest[manifest["model"] == model]
    for record in manifest.sort_values(["model", "condition", "block_id", "k"]).to_dict("records"):
        yield generation_row(root, record)


@dataclass(frozen=True)
class BuildSources:
    """Where a build reads from: a benchmark (folder, ``demo`` or Hub id) and optional panels."""

    benchmark: str
    generations: Path | None
    #: an ``import-release`` output: the published release, whose card keeps the release's curation steps
    release: bool = False
    #: the ``curation_summary.json`` of a benchmark folder made by ``curate`` (its card is written from it)
    curation: dict[str, Any] | None = None
    #: how the card names the benchmark: its recorded name, a folder's own name, ``demo`` or a Hub id (never
    #: the path it was given on this machine)
    name: str = ""


def resolve_sources(src: str | os.PathLike, generations: str | os.PathLike | None = None) -> BuildSources:
    """``src`` is a benchmark (``demo``, a canonical folder, a Hub id) or an ``import-release`` output.

    An ``import-release`` output (``OUT/benchmark`` + ``OUT/generations``) is recognized and both
    parts are used; ``generations`` (a folder written by ``generate`` or ``import-release``)
    overrides the panels found there.
    """
    text = str(src)
    path = Path(text).expanduser()
    bench = text
    release = False
    gen = Path(generations) if generations is not None else None
    if path.is_dir() and (path / "benchmark" / "blocks").is_dir() and not (path / "blocks").is_dir():
        bench = str(path / "benchmark")
        release = True
        if gen is None and (path / GENERATIONS_DIR / MANIFEST_FILE).is_file():
            gen = path / GENERATIONS_DIR
    if gen is not None and not gen.is_dir():
        raise DatasetBuildError(f"generations folder {str(gen)!r} does not exist")
    curation = None
    name = bench
    bench_dir = Path(bench).expanduser()
    if bench != "demo" and bench_dir.is_dir():
        from ..curation.card import read_curation_record

        curation = None if release else read_curation_record(bench_dir)
        recorded = (curation or {}).get("benchmark")
        name = str(recorded["name"]) if isinstance(recorded, dict) and recorded.get("name") else \
            bench_dir.resolve().name
    return BuildSources(bench, gen, release, curation, name)


def iter_config_rows(
    src: str | os.PathLike, config: str, generations: str | os.PathLike | None = None
) -> Iterator[dict[str, Any]]:
    """The rows of ``config`` built from ``src`` (see :func:`resolve_sources`); used by the builder."""
    sources = resolve_sources(src, generations)
    if config == GENERATIONS_CONFIG:
        if sources.generations is None:
            raise DatasetBuildError(
                f"{src}: no generated panels to build the 'generations' config from (pass a generations folder)"
            )
        yield from generation_rows(sources.generations)
        return
    yield from benchmark_rows(load_benchmark(sources.benchmark), config)


__all__ = [
    "BENCHMARK_CONFIGS",
    "DATASET_CONFIGS",
    "GENERATIONS_CONFIG",
    "GENERATIONS_DIR",
    "IMAGE_CONFIGS",
    "BuildSources",
    "DatasetBuildError",
    "benchmark_rows",
    "config_features",
    "generation_features",
    "generation_row",
    "generation_rows",
    "is_missing",
    "iter_config_rows",
    "resolve_sources",
]
