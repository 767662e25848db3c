"""The configs of the dataset repo: their names, ``datasets`` features and rows.

Benchmark configs (``blocks``, ``references``, ``cities``, ``world``; docs/benchmark.md section 1, Domain and split fields)
come from a :class:`~geofidelity_bench.benchmark.Benchmark`; the ``generations`` config has one
row per verified generated image: ``image`` (``{"bytes", "path"}``, path = the panel's relative
path ``{model}/{condition}/{block_id}/{k:02d}.jpg``) plus every manifest column (model,
block_id, condition, k, seed, prompt, negative_prompt, steps, guidance, dtype, versions,
sha256, ...). A generated folder without a generation manifest (any folder in the layout
``evaluate --generated`` reads, ``{model}/{condition}/{block_id}/NN.{jpg,jpeg,png,webp}``) gets
manifest-shaped rows from :func:`folder_manifest`: the file's own bytes, its real relative path
(a ``.png`` stays a ``.png``) and its sha256, the columns only ``generate`` knows left empty. The rows of a config are always in the same order (blocks and references by id,
generations by model, condition, block, k), so that rebuilding unchanged data gives
byte-identical files.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Iterator, Mapping

from ..benchmark import CONFIGS as BENCHMARK_CONFIGS
from ..benchmark import Benchmark, config_records, load_benchmark
from ..benchmark import is_safe_id
from ..errors import GeoFidelityError
from ..generated_folder import PANEL_FILE, duplicate_index_problems, panel_index
from ..manifest_format import MANIFEST_COLUMNS, MANIFEST_FILE, load_manifest, panel_relpath
from ..image_store import confined_file
from ..record_checks import reserved_method_problem

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


#: How many problems of a folder :func:`folder_manifest` lists before "... and N more".
MAX_FOLDER_PROBLEMS = 20


def folder_manifest(root: str | os.PathLike) -> list[dict[str, Any]]:
    """Manifest-shaped rows for a generated folder that has no ``manifest.parquet``, one per panel file.

    The folder is read in the layout ``evaluate --generated`` reads (docs/benchmark.md section 11, File
    formats): ``{model}/{condition}/{block_id}/NN.{jpg,jpeg,png,webp}`` (any letter case; names starting
    with ``.`` and files at the top level are skipped, as ``evaluate`` skips them). Each row has
    ``model``, ``condition``, ``block_id``, ``k`` (the file's index,
    :func:`~geofidelity_bench.generated_folder.panel_index`), ``path`` (the file's relative path with
    its real extension), ``sha256`` and ``file_size`` of the file's bytes; every other manifest column
    is None (only ``generate`` knows seeds, prompts and settings). Rows are sorted by (model,
    condition, block_id, k). A folder with no panel file gives ``[]``.

    Raises:
        DatasetBuildError: every problem at once, each naming its file or folder: an unusable or
            reserved model name, an unusable condition or block id, a file where a folder belongs, a
            file that is not a panel image, two files with one index, a link that leads outside ``root``.
    """
    import hashlib

    root = Path(root)
    if not root.is_dir():
        raise DatasetBuildError(f"generated folder {str(root)!r} does not exist or is not a folder")
    rows: list[dict[str, Any]] = []
    problems: list[str] = []

    def visible(folder: Path) -> list[Path]:
        return sorted(p for p in folder.iterdir() if not p.name.startswith("."))

    for mdir in (p for p in visible(root) if p.is_dir()):  # top-level files: manifest, summaries, notes
        if not is_safe_id(mdir.name):
            problems.append(f"{mdir}: unusable model folder name {mdir.name!r} (letters, digits, '.', '_', '-')")
            continue
        reserved = reserved_method_problem(mdir.name)
        if reserved:
            problems.append(f"{mdir}: {reserved}")
            continue
        for cdir in visible(mdir):
            if not cdir.is_dir() or not is_safe_id(cdir.name):
                problems.append(f"{cdir}: expected a condition folder (a usable name: letters, digits, '.', '_', '-')")
                continue
            for bdir in visible(cdir):
                if not bdir.is_dir() or not is_safe_id(bdir.name):
                    problems.append(f"{bdir}: expected a block folder (a usable name: letters, digits, '.', '_', '-')")
                    continue
                files = []
                for f in visible(bdir):
                    shown = f if f.name.isprintable() else f"{bdir}/{f.name!r}"
                    if not PANEL_FILE.match(f.name):
                        problems.append(f"{shown}: not a panel image (expected NN.jpg/.jpeg/.png/.webp, NN two or "
                                        "more ASCII digits)")
                        continue
                    rel = f.relative_to(root).as_posix()
                    # Every symbolic link is followed and must stay inside the folder: a folder cannot
                    # make the push read, and publish, another file of the machine.
                    real, refused = confined_file(rel, root)
                    if refused is not None or real is None:
                        problems.append(f"{shown}: {refused}, outside the generated folder {str(root)!r}")
                        continue
                    if not real.is_file():
                        problems.append(f"{shown}: not a regular file")
                        continue
                    files.append(f)
                    data = real.read_bytes()
                    rows.append({**dict.fromkeys(MANIFEST_COLUMNS), "model": mdir.name, "condition": cdir.name,
                                 "block_id": bdir.name, "k": panel_index(f), "path": rel,
                                 "sha256": hashlib.sha256(data).hexdigest(), "file_size": len(data)})
                problems += duplicate_index_problems(bdir, files)
    if problems:
        shown = "\n  ".join(problems[:MAX_FOLDER_PROBLEMS])
        more = len(problems) - MAX_FOLDER_PROBLEMS
        raise DatasetBuildError(f"generated folder {root} has {len(problems)} problem(s):\n  {shown}"
                                + (f"\n  ... and {more} more" if more > 0 else ""))
    return sorted(rows, key=lambda r: (r["model"], r["condition"], r["block_id"], r["k"]))


def generation_row(root: Path, record: Mapping[str, Any], *, from_scan: bool = False) -> dict[str, Any]:
    """The ``generations`` row of one manifest record: the image file's bytes plus every manifest column.

    The file read is the panel's own ``{model}/{condition}/{block_id}/{k:02d}.jpg`` inside ``root`` (the one
    whose hash :func:`~geofidelity_bench.manifest_format.load_manifest` verified), never the record's
    ``path`` text: a manifest cannot make the build read, and ``push-generations`` publish, another file.

    ``from_scan=True``: the record is a :func:`folder_manifest` row (a folder without manifest), whose
    ``path`` is the file the scan found, with its own extension; it is read only if it is still a file
    of the record's own panel slot (folder and index), inside ``root``, with the sha256 the scan saw.
    """
    if from_scan:
        return _scanned_row(root, record)
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


def _scanned_row(root: Path, record: Mapping[str, Any]) -> dict[str, Any]:
    import hashlib

    rel = str(record["path"])
    slot = PurePosixPath(rel)
    own_slot = (slot.parts[:-1] == (record["model"], record["condition"], record["block_id"])
                and PANEL_FILE.match(slot.name) is not None and panel_index(Path(slot.name)) == int(record["k"]))
    if not own_slot:
        raise DatasetBuildError(f"{root / rel}: not the panel file of {record['model']}/{record['condition']}/"
                                f"{record['block_id']} index {record['k']}")
    path, refused = confined_file(rel, root)
    if refused is not None or path is None:
        raise DatasetBuildError(f"{root / rel}: {refused}, outside the generated folder {str(root)!r}")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != record["sha256"]:
        raise DatasetBuildError(f"{root / rel}: changed while it was being pushed (its sha256 differs from the "
                                "one read before); push again")
    out: dict[str, Any] = {"image": {"bytes": data, "path": rel}}
    for col in MANIFEST_COLUMNS:
        value = record.get(col)
        out[col] = None if is_missing(value) else value
    return out


def generation_rows(
    generations_dir: str | os.PathLike, manifest=None, model: str | None = None, *, from_scan: bool = False
) -> Iterator[dict[str, Any]]:
    """One row per verified generated image (:func:`generation_row`), of every model or of ``model``.

    Ordered by (model, condition, block_id, k) - the order of the built ``generations`` files.
    ``from_scan=True``: ``manifest`` holds :func:`folder_manifest` rows (a DataFrame or a list of
    them); without ``manifest`` they are read from the folder.
    """
    import pandas as pd

    root = Path(generations_dir)
    if manifest is None:
        manifest = folder_manifest(root) if from_scan else load_manifest(root, verify=True)
    if not isinstance(manifest, pd.DataFrame):
        manifest = pd.DataFrame(list(manifest), columns=list(MANIFEST_COLUMNS))
    if model is not None:
        manifest = manifest[manifest["model"] == model]
    for record in manifest.sort_values(["model", "condition", "block_id", "k"]).to_dict("records"):
        yield generation_row(root, record, from_scan=from_scan)


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
    "folder_manifest",
    "generation_features",
    "generation_row",
    "generation_rows",
    "is_missing",
    "iter_config_rows",
    "resolve_sources",
]
