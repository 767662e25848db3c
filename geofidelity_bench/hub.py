"""Publishing a benchmark to the Hugging Face Hub as a dataset repo, and reading it back.

Built folder (what ``geofidelity-bench build-dataset`` writes and ``push-dataset`` uploads)::

    README.md                                       dataset card: YAML configs + dataset_info, counts
    LICENSE.md                                      the license mixture (images, OSM data, code)
    blocks/train-00000-of-00001.parquet             one config per folder (SPEC section 1 fields)
    references/train-0000i-of-0000N.parquet         images embedded as datasets.Image() bytes
    cities/train-00000-of-00001.parquet
    world/train-0000i-of-0000N.parquet              only when the benchmark has a world pool
    generations/{model}/train-0000i-of-0000N.parquet  generated panels (image + manifest columns)

Every Parquet file carries its ``datasets`` features in the schema metadata, image configs are
written in row groups of 100 rows (what the dataset viewer reads well), and rows are in a fixed
order (blocks and references by id, generations by model, condition, block, k), so that
rebuilding unchanged data gives byte-identical files and a re-push uploads nothing. The folder
loads with plain ``datasets.load_dataset(folder, config)`` and with
:func:`geofidelity_bench.load_benchmark`, locally or from the Hub.

Pushing (:func:`push_dataset`) makes one commit per group - each benchmark config, each
generations model, then the card - with ``parent_commit`` set, so an interrupted push resumes at
the first group that is not up to date. A file whose sha256 (LFS) or git blob id already matches
the repo is not uploaded again; stale shards inside a group that is pushed (a config re-sharded)
are deleted; other models' generations already in the repo are never touched (the card keeps
their ``generations`` entry). Transient HTTP errors are retried with exponential backoff (the
helpers of :mod:`geofidelity_bench.hub_requests`). The token is never printed or logged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from .atomic import atomic_write
from .benchmark import CONFIGS as BENCHMARK_CONFIGS
from .benchmark import Benchmark, BenchmarkError, load_benchmark
from .errors import GeoFidelityError
from .generation.hub import (
    GENERATIONS_CONFIG,
    GENERATIONS_DIR,
    build_model_shards,
    generation_features,
    split_front_matter,
    update_readme,
)
from .generation.manifest import MANIFEST_FILE, load_manifest
from .hub_requests import (
    HubPushError,
    RepoChanged,
    auth_hint,
    commit_files,
    describe_error,
    file_digests,
    resolve_token,
    same_remote,
    with_retries,
)

DATASET_CONFIGS = (*BENCHMARK_CONFIGS, GENERATIONS_CONFIG)
IMAGE_CONFIGS = ("references", "world", GENERATIONS_CONFIG)
DEFAULT_MAX_SHARD_ROWS = 500
IMAGE_ROW_GROUP_SIZE = 100
CARD_FILE = "README.md"
LICENSE_FILE = "LICENSE.md"
COUNTS_START = "<!-- geofidelity:counts:start -->"
COUNTS_END = "<!-- geofidelity:counts:end -->"
_CARD_TEMPLATE = Path(__file__).resolve().parent.parent / "dataset_builder" / CARD_FILE


class DatasetBuildError(GeoFidelityError, ValueError):
    """The dataset folder cannot be built; the message names the file or the problem."""


# -- rows and features ---------------------------------------------------------------------------


def config_features(config: str):
    """``datasets.Features`` of a config of the dataset repo (benchmark configs + ``generations``)."""
    if config == GENERATIONS_CONFIG:
        return generation_features()
    from .benchmark import features

    return features(config)


def _jsonable_pairs(values) -> list[list[float]]:
    return [list(v) for v in values]


def benchmark_rows(benchmark: Benchmark, config: str) -> Iterator[dict[str, Any]]:
    """The rows of one benchmark config, in the canonical order and with the canonical fields.

    Images are ``{"bytes", "path"}`` dicts (``path`` = ``{reference_id}.jpg`` / ``{image_id}.jpg``).
    """
    if config == "blocks":
        for b in benchmark.blocks:
            rec = dataclasses.asdict(b)
            rec["polyline"] = _jsonable_pairs(b.polyline)
            rec["centroid"] = list(b.centroid)
            rec["bbox"] = list(b.bbox)
            yield rec
    elif config == "references":
        for r in benchmark.references:
            rec = dataclasses.asdict(r)
            data = rec.pop("image_bytes")
            rec["image"] = {"bytes": data, "path": f"{r.reference_id}.jpg"}
            yield rec
    elif config == "cities":
        for c in benchmark.cities.values():
            yield {
                "key": c.key,
                "name": c.name,
                "country": c.country,
                "center_lat": c.center[0] if c.center else None,
                "center_lon": c.center[1] if c.center else None,
                "driving_side": c.driving_side,
            }
    elif config == "world":
        for w in benchmark.world:
            rec = dataclasses.asdict(w)
            data = rec.pop("image_bytes")
            rec["image"] = {"bytes": data, "path": f"{w.image_id}.jpg"}
            yield rec
    else:
        raise ValueError(f"unknown benchmark config {config!r}; expected one of {BENCHMARK_CONFIGS}")


def generation_rows(generations_dir: str | os.PathLike, manifest=None) -> Iterator[dict[str, Any]]:
    """One row per verified generated image: ``image`` plus every manifest column.

    Ordered by (model, condition, block_id, k) - the order of the built ``generations`` files.
    """
    from .generation.hub import is_missing
    from .generation.manifest import MANIFEST_COLUMNS

    root = Path(generations_dir)
    if manifest is None:
        manifest = load_manifest(root, verify=True)
    for row in manifest.sort_values(["model", "condition", "block_id", "k"]).to_dict("records"):
        out: dict[str, Any] = {"image": {"bytes": (root / row["path"]).read_bytes(), "path": row["path"]}}
        for col in MANIFEST_COLUMNS:
            value = row.get(col)
            out[col] = None if is_missing(value) else value
        yield out


@dataclass(frozen=True)
class BuildSources:
    """Where a build reads from: a benchmark (folder, ``demo`` or Hub id) and optional panels."""

    benchmark: str
    generations: Path | None


def resolve_sources(src: str | os.PathLike, generations: str | os.PathLike | None = None) -> BuildSources:
    """``src`` is a benchmark (``demo``, a canonical folder, a Hub id) or an ``import-release`` output.

    An ``import-release`` output (``OUT/benchmark`` + ``OUT/generations``) is recognized and both
    parts are used; ``generations`` (a folder written by ``generate`` or ``import-release``)
    overrides the panels found there.
    """
    text = str(src)
    path = Path(text).expanduser()
    bench = text
    gen = Path(generations) if generations is not None else None
    if path.is_dir() and (path / "benchmark" / "blocks").is_dir() and not (path / "blocks").is_dir():
        bench = str(path / "benchmark")
        if gen is None and (path / GENERATIONS_DIR / MANIFEST_FILE).is_file():
            gen = path / GENERATIONS_DIR
    if gen is not None and not gen.is_dir():
        raise DatasetBuildError(f"generations folder {str(gen)!r} does not exist")
    return BuildSources(bench, gen)


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


# -- Parquet ---------------------------------------------------------------------------------------


def shard_name(index: int, total: int) -> str:
    return f"train-{index:05d}-of-{total:05d}.parquet"


def _write_table(rows: list[dict[str, Any]], features, target: Path, image_config: bool) -> int:
    """Encodes ``rows`` with ``features`` and writes one Parquet file atomically; returns Arrow bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    batch = {name: [row.get(name) for row in rows] for name in features}
    table = pa.Table.from_pydict(features.encode_batch(batch), schema=features.arrow_schema)
    kwargs = {"row_group_size": IMAGE_ROW_GROUP_SIZE} if image_config else {}
    atomic_write(target, lambda tmp: pq.write_table(table, tmp, **kwargs))
    return int(table.nbytes)


def write_config(
    rows: Sequence[dict[str, Any]], config: str, folder: Path, *, max_shard_rows: int = DEFAULT_MAX_SHARD_ROWS
) -> tuple[list[Path], int]:
    """Writes ``folder/{config}/train-*.parquet`` (shards of ``max_shard_rows`` for image configs)."""
    features = config_features(config)
    image_config = config in IMAGE_CONFIGS
    per_shard = max_shard_rows if image_config else max(1, len(rows))
    total = max(1, -(-len(rows) // per_shard))
    files, nbytes = [], 0
    for i in range(total):
        target = folder / config / shard_name(i, total)
        nbytes += _write_table(list(rows[i * per_shard : (i + 1) * per_shard]), features, target, image_config)
        files.append(target)
    return files, nbytes


# -- the card -------------------------------------------------------------------------------------

_FALLBACK_CARD = """---
pretty_name: GeoFidelity-Bench
license: other
license_name: cc-by-sa-4.0-odbl-1.0-mit
license_link: LICENSE.md
---
# GeoFidelity-Bench

A benchmark for block-level geographic fidelity of text-to-image street-view generation
(Kaizhen Tan, arXiv:2606.23669), in the canonical Parquet format of `geofidelity-bench`.

{counts_start}
{counts_end}

Reference images: CC BY-SA 4.0, attribution per row (`license`, `attribution`, `source_url`).
Block metadata derived from OpenStreetMap: ODbL 1.0, (c) OpenStreetMap contributors. Code: MIT.
"""

_FALLBACK_LICENSE = """# Licenses

- Reference images: CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/); every row of
  the `references` and `world` configs names its own `license`, `attribution` and `source_url`.
- Block geometry, street and neighborhood names (derived from OpenStreetMap): ODbL 1.0
  (https://opendatacommons.org/licenses/odbl/1-0/), (c) OpenStreetMap contributors.
- Generated images: the terms of the model that produced them (see the dataset card).
- Code (geofidelity-bench): MIT.
"""


def default_card_template() -> Path | None:
    """``dataset_builder/README.md`` of a source checkout, or None when it is not there."""
    return _CARD_TEMPLATE if _CARD_TEMPLATE.is_file() else None


def size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "1M<n<10M"


def _config_entry(config: str) -> dict[str, Any]:
    path = f"{GENERATIONS_DIR}/*/*.parquet" if config == GENERATIONS_CONFIG else f"{config}/*.parquet"
    return {"config_name": config, "data_files": [{"split": "train", "path": path}]}


def dataset_info_yaml(infos: Mapping[str, tuple[int, int]]) -> list[dict[str, Any]]:
    """The card's ``dataset_info`` list: features and train split size of each config."""
    from datasets.info import DatasetInfo, DatasetInfosDict
    from datasets.splits import SplitDict, SplitInfo
    from huggingface_hub import DatasetCardData

    dicts = DatasetInfosDict()
    for config, (n_rows, nbytes) in infos.items():
        splits = SplitDict()
        splits.add(SplitInfo(name="train", num_bytes=int(nbytes), num_examples=int(n_rows)))
        dicts[config] = DatasetInfo(features=config_features(config), splits=splits, config_name=config)
    card = DatasetCardData()
    dicts.to_dataset_card_data(card)
    info = card.to_dict()["dataset_info"]
    return info if isinstance(info, list) else [info]


def _fmt(n: int | float) -> str:
    return f"{n:,}" if isinstance(n, int) else f"{n:,.1f}"


def counts_markdown(stats: Mapping[str, Any]) -> str:
    """The counts table of the card (between the COUNTS_START / COUNTS_END markers)."""
    lines = [
        "| | count |",
        "| :-- | --: |",
        f"| cities | {_fmt(stats['n_cities'])} |",
        f"| countries | {_fmt(stats['n_countries'])} |",
        f"| street blocks | {_fmt(stats['n_blocks'])} |",
        f"| reference assignments (`references` rows) | {_fmt(stats['n_references'])} |",
        f"| distinct reference images | {_fmt(stats['n_distinct_images'])} |",
        f"| references per block (min / mean / max) | {stats['refs_min']} / {stats['refs_mean']:.1f} / {stats['refs_max']} |",
        f"| held-out real queries / gallery images | {_fmt(stats['n_heldout'])} / {_fmt(stats['n_gallery'])} |",
    ]
    cov = stats["negatives_coverage"]
    lines.append(
        "| blocks with each negative (same neighborhood / same city / same driving side / random city) | "
        + " / ".join(str(cov[k]) for k in ("same_neighborhood", "same_city", "same_driving_side", "random_city"))
        + " |"
    )
    if stats.get("n_world"):
        lines.append(f"| world distractor pool (`world` rows) | {_fmt(stats['n_world'])} |")
    if stats.get("n_generated"):
        models = ", ".join(f"`{m}`" for m in stats["models"])
        conds = ", ".join(f"`{c}`" for c in stats["conditions"])
        lines.append(f"| generated images (`generations` rows) | {_fmt(stats['n_generated'])} |")
        lines.append(f"| generators | {len(stats['models'])}: {models} |")
        lines.append(f"| prompt conditions | {len(stats['conditions'])}: {conds} |")
    lines.append("")
    lines.append(f"Benchmark fingerprint (sha256 of blocks and reference images): `{stats['fingerprint']}`.")
    return "\n".join(lines)


def render_card(
    template: str,
    stats: Mapping[str, Any],
    infos: Mapping[str, tuple[int, int]],
) -> str:
    """Fills a card template: YAML ``configs``/``dataset_info``/``size_categories`` and the counts.

    Every other YAML key (license, tags, ...) and the body are kept. ``infos`` maps each config
    present to ``(rows, arrow_bytes)``.
    """
    import yaml

    meta, body = split_front_matter(template)
    meta["configs"] = [_config_entry(c) for c in DATASET_CONFIGS if c in infos]
    meta["dataset_info"] = dataset_info_yaml({c: infos[c] for c in DATASET_CONFIGS if c in infos})
    meta["size_categories"] = [size_category(sum(n for n, _ in infos.values()))]
    table = counts_markdown(stats)
    if COUNTS_START in body and COUNTS_END in body:
        head, rest = body.split(COUNTS_START, 1)
        _, tail = rest.split(COUNTS_END, 1)
        body = f"{head}{COUNTS_START}\n{table}\n{COUNTS_END}{tail}"
    else:
        body = f"{body.rstrip()}\n\n## Counts\n\n{COUNTS_START}\n{table}\n{COUNTS_END}\n"
    header = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000)
    return f"---\n{header}---\n{body if body.startswith(chr(10)) else chr(10) + body}"


def benchmark_stats(benchmark: Benchmark, manifest=None) -> dict[str, Any]:
    """Counts shown in the card (and returned by :func:`build_dataset`)."""
    summary = benchmark.summary()
    refs = [b["n_references"] for b in summary["blocks"]]
    stats: dict[str, Any] = {
        "name": benchmark.name,
        "fingerprint": benchmark.fingerprint,
        "n_cities": summary["n_cities"],
        "n_countries": len({c.country for c in benchmark.cities.values()}),
        "n_blocks": summary["n_blocks"],
        "n_references": summary["n_references"],
        "n_distinct_images": summary["n_distinct_images"],
        "refs_min": min(refs),
        "refs_mean": sum(refs) / len(refs),
        "refs_max": max(refs),
        "n_heldout": sum(b["n_heldout"] for b in summary["blocks"]),
        "n_gallery": sum(b["n_gallery"] for b in summary["blocks"]),
        "negatives_coverage": summary["negatives_coverage"],
        "n_world": summary["n_world"],
        "n_generated": 0,
        "models": [],
        "conditions": [],
    }
    if manifest is not None and len(manifest):
        stats["n_generated"] = int(len(manifest))
        stats["models"] = sorted(manifest["model"].unique())
        stats["conditions"] = sorted(manifest["condition"].unique())
    return stats


# -- build ----------------------------------------------------------------------------------------


@dataclass
class BuildReport:
    out: Path
    configs: dict[str, int]
    files: list[str]
    stats: dict[str, Any]


def _prepare_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise DatasetBuildError(f"--out {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise DatasetBuildError(f"--out {out} is not empty; pass --overwrite to replace a previous build there")
        # Only what a build writes is removed; anything else in the folder is left alone.
        for name in DATASET_CONFIGS:
            if (out / name).is_dir():
                shutil.rmtree(out / name)
        for name in (CARD_FILE, LICENSE_FILE):
            if (out / name).is_file():
                (out / name).unlink()
    out.mkdir(parents=True, exist_ok=True)


def build_dataset(
    src: str | os.PathLike,
    out: str | os.PathLike,
    *,
    generations: str | os.PathLike | None = None,
    card_template: str | os.PathLike | None = None,
    max_shard_rows: int = DEFAULT_MAX_SHARD_ROWS,
    overwrite: bool = False,
    log: Callable[[str], None] | None = None,
) -> BuildReport:
    """Writes the Hub-ready dataset folder of ``src`` (see the module docstring).

    Args:
        src: ``demo``, a canonical benchmark folder, a Hub dataset id, or an ``import-release``
            output folder (its ``benchmark/`` and ``generations/`` are used).
        out: the folder to write (must be empty unless ``overwrite``).
        generations: a generation folder (panels + ``manifest.parquet``) for the ``generations``
            config; only images whose manifest hash matches the file are included.
        card_template: the dataset card to fill (default: ``dataset_builder/README.md`` of the
            source checkout, else a minimal card).
        max_shard_rows: rows per Parquet shard of the image configs.
        overwrite: replace a previous build in ``out``.
        log: where progress messages go (default: print).
    """
    say = log or (lambda msg: print(msg, flush=True))
    if max_shard_rows < 1:
        raise DatasetBuildError("max_shard_rows must be >= 1")
    sources = resolve_sources(src, generations)
    bench = load_benchmark(sources.benchmark)
    manifest = None
    if sources.generations is not None:
        manifest = load_manifest(sources.generations, verify=True)
        if manifest.empty:
            raise DatasetBuildError(
                f"{sources.generations}: no generated image with a valid manifest row (manifest.parquet missing, "
                "or every file changed since it was written)"
            )
        unknown = sorted(set(manifest["block_id"]) - set(bench.block_ids))
        if unknown:
            raise DatasetBuildError(
                f"{sources.generations}: panels of {len(unknown)} block(s) not in benchmark {bench.name!r}: "
                + ", ".join(unknown[:10])
            )
    out = Path(out)
    _prepare_out(out, overwrite)

    infos: dict[str, tuple[int, int]] = {}
    files: list[str] = []
    for config in BENCHMARK_CONFIGS:
        rows = list(benchmark_rows(bench, config))
        if config == "world" and not rows:
            continue
        written, nbytes = write_config(rows, config, out, max_shard_rows=max_shard_rows)
        infos[config] = (len(rows), nbytes)
        files += [p.relative_to(out).as_posix() for p in written]
        say(f"{config}: {len(rows)} rows in {len(written)} file(s)")
    if manifest is not None:
        nbytes = 0
        with tempfile.TemporaryDirectory(prefix="geofidelity-build-") as tmp:
            for model in sorted(manifest["model"].unique()):
                shards = build_model_shards(sources.generations, manifest, model, tmp, max_shard_rows=max_shard_rows)
                for repo_path, local, _ in shards:
                    target = out / repo_path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(str(local), target)
                    nbytes += _arrow_nbytes(target)
                    files.append(repo_path)
        infos[GENERATIONS_CONFIG] = (int(len(manifest)), nbytes)
        say(f"generations: {len(manifest)} images of {manifest['model'].nunique()} model(s)")

    stats = benchmark_stats(bench, manifest)
    template_path = Path(card_template) if card_template is not None else default_card_template()
    if template_path is not None:
        if not template_path.is_file():
            raise DatasetBuildError(f"card template {template_path} does not exist")
        template = template_path.read_text(encoding="utf-8")
        license_src = template_path.parent / LICENSE_FILE
        license_text = license_src.read_text(encoding="utf-8") if license_src.is_file() else _FALLBACK_LICENSE
    else:
        template = _FALLBACK_CARD.format(counts_start=COUNTS_START, counts_end=COUNTS_END)
        license_text = _FALLBACK_LICENSE
    (out / CARD_FILE).write_text(render_card(template, stats, infos), encoding="utf-8")
    (out / LICENSE_FILE).write_text(license_text, encoding="utf-8")
    files += [CARD_FILE, LICENSE_FILE]
    say(
        f"built {out}: {stats['n_blocks']} blocks, {stats['n_references']} references"
        + (f", {stats['n_world']} world images" if stats["n_world"] else "")
        + (f", {stats['n_generated']} generated images" if stats["n_generated"] else "")
    )
    return BuildReport(out, {c: n for c, (n, _) in infos.items()}, sorted(files), stats)


def _arrow_nbytes(path: Path) -> int:
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    return int(sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)))


# -- push -----------------------------------------------------------------------------------------


@dataclass
class GroupPush:
    """One commit group: a benchmark config, one model's generations, or the card."""

    name: str
    files: list[str]
    uploaded: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    commit: str | None = None

    @property
    def up_to_date(self) -> bool:
        return self.commit is None


@dataclass
class DatasetPushReport:
    repo_id: str
    groups: list[GroupPush]

    @property
    def uploaded(self) -> list[str]:
        return [p for g in self.groups for p in g.uploaded]

    @property
    def commits(self) -> list[str]:
        return [g.commit for g in self.groups if g.commit]


def _local_groups(folder: Path) -> list[tuple[str, str | None, list[tuple[str, Path]]]]:
    """``[(group name, repo prefix it owns or None, [(path_in_repo, local file)])]`` in push order."""
    groups: list[tuple[str, str | None, list[tuple[str, Path]]]] = []
    for config in BENCHMARK_CONFIGS:
        files = sorted((folder / config).glob("*.parquet"))
        if files:
            groups.append((config, f"{config}/", [(f"{config}/{f.name}", f) for f in files]))
    gen_root = folder / GENERATIONS_DIR
    if gen_root.is_dir():
        for model_dir in sorted(p for p in gen_root.iterdir() if p.is_dir()):
            files = sorted(model_dir.glob("*.parquet"))
            if files:
                prefix = f"{GENERATIONS_DIR}/{model_dir.name}/"
                groups.append((f"{GENERATIONS_DIR}/{model_dir.name}", prefix, [(prefix + f.name, f) for f in files]))
    return groups


def _check_built(folder: Path) -> None:
    if not folder.is_dir():
        raise HubPushError(f"{folder} is not a folder")
    missing = [c for c in ("blocks", "references") if not any((folder / c).glob("*.parquet"))]
    if missing or not (folder / CARD_FILE).is_file():
        what = ", ".join([*(f"{c}/*.parquet" for c in missing), *([CARD_FILE] if not (folder / CARD_FILE).is_file() else [])])
        raise HubPushError(
            f"{folder} is not a built dataset folder (missing {what}); run `geofidelity-bench build-dataset SRC --out {folder}` first"
        )


def _bytes_digests(data: bytes) -> tuple[str, str]:
    return hashlib.sha256(data).hexdigest(), hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _card_with_foreign_generations(card: str, remote_files: Sequence[str]) -> str:
    """The card for a repo that also holds generations of models this build does not have.

    Those generations (pushed earlier, e.g. by ``push-generations``) stay declared in
    ``configs``, and the ``generations`` size is dropped from ``dataset_info`` since this build
    does not know it (a wrong ``num_examples`` would make ``load_dataset`` fail its check).
    """
    import yaml

    meta, body = split_front_matter(update_readme(card, remote_files))
    info = meta.get("dataset_info")
    if isinstance(info, list):
        meta["dataset_info"] = [i for i in info if not (isinstance(i, dict) and i.get("config_name") == GENERATIONS_CONFIG)]
    header = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000)
    return f"---\n{header}---\n{body if body.startswith(chr(10)) else chr(10) + body}"


def push_dataset(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    token: str | None = None,
    endpoint: str | None = None,
    private: bool | None = None,
    attempts: int = 6,
    retry_base_delay: float = 1.0,
    log: Callable[[str], None] | None = None,
) -> DatasetPushReport:
    """Uploads a built dataset folder to the dataset repo ``repo_id`` (created if missing).

    Resumable and idempotent (see the module docstring). The token comes from ``token`` or the
    standard sources (``HF_TOKEN``, ``hf auth login``); ``endpoint`` selects another Hub server.
    """
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError

    say = log or (lambda msg: print(msg, flush=True))
    folder = Path(folder)
    _check_built(folder)
    if constants.is_offline_mode():
        raise HubPushError("HF_HUB_OFFLINE is set: unset it (or set HF_HUB_OFFLINE=0) to push to the Hub")
    token = resolve_token(token)
    api = HfApi(endpoint=endpoint, token=token)
    retry = dict(attempts=attempts, base_delay=retry_base_delay, log=say, token=token)

    try:
        exists = with_retries(lambda: api.repo_exists(repo_id, repo_type="dataset"), f"look up {repo_id}", **retry)
        if not exists:
            with_retries(
                lambda: api.create_repo(repo_id, repo_type="dataset", exist_ok=True, private=private),
                f"create dataset repo {repo_id}",
                **retry,
            )
            say(f"{repo_id}: created dataset repo{' (private)' if private else ''}")
    except HfHubHTTPError as err:
        raise HubPushError(f"cannot create or access dataset repo {repo_id}: {describe_error(err, token)}{auth_hint(err)}") from None

    groups = _local_groups(folder)
    local_models = {name.split("/", 1)[1] for name, _, _ in groups if name.startswith(f"{GENERATIONS_DIR}/")}
    card_files = [(CARD_FILE, folder / CARD_FILE)] + (
        [(LICENSE_FILE, folder / LICENSE_FILE)] if (folder / LICENSE_FILE).is_file() else []
    )
    report = DatasetPushReport(repo_id, [])

    def read_remote():
        try:
            return with_retries(lambda: api.dataset_info(repo_id, files_metadata=True), f"read repo {repo_id}", **retry)
        except HfHubHTTPError as err:
            raise HubPushError(f"cannot read dataset repo {repo_id}: {describe_error(err, token)}{auth_hint(err)}") from None

    for name, prefix, files in [*groups, ("card", None, card_files)]:
        result = GroupPush(name, [p for p, _ in files])
        for conflict_try in range(1, attempts + 1):
            info = read_remote()
            remote = {s.rfilename: s for s in (info.siblings or [])}
            contents: dict[str, bytes | Path] = {p: local for p, local in files}
            if name == "card":
                card = (folder / CARD_FILE).read_text(encoding="utf-8")
                foreign_models = {
                    p.split("/")[1] for p in remote if p.startswith(f"{GENERATIONS_DIR}/") and p.endswith(".parquet")
                } - local_models
                if foreign_models:
                    card = _card_with_foreign_generations(card, list(remote))
                contents[CARD_FILE] = card.encode("utf-8")
            digests = {
                p: (_bytes_digests(c) if isinstance(c, bytes) else file_digests(c)) for p, c in contents.items()
            }
            changed = [p for p in contents if not same_remote(remote.get(p), digests[p])]
            local_set = set(contents)
            stale = sorted(p for p in remote if prefix and p.startswith(prefix) and p not in local_set)
            if not changed and not stale:
                say(f"{repo_id}: {name} is up to date ({len(files)} file(s))")
                break

            try:
                done = commit_files(api, repo_id, add={p: contents[p] for p in changed}, delete=stale,
                                    parent_commit=info.sha, what=name, retry=retry,
                                    message=f"Update {name} ({len(changed)} file(s) added, {len(stale)} removed)")
            except RepoChanged as err:
                if conflict_try == attempts:
                    raise HubPushError(f"{repo_id} kept changing while pushing {name}; try again later") from None
                say(f"{repo_id} changed while pushing {name} ({err}); reading it again")
                continue
            result.uploaded, result.deleted = changed, stale
            result.commit = getattr(done, "oid", None) or "committed"
            say(f"{repo_id}: pushed {name}: {len(changed)} file(s) uploaded, {len(stale)} stale file(s) removed")
            break
        else:
            raise HubPushError(f"{repo_id} kept changing while pushing {name}; try again later")
        report.groups.append(result)
    return report


# -- reading from the Hub -----------------------------------------------------------------------


def fetch_dataset(
    repo_id: str,
    local_dir: str | os.PathLike | None = None,
    *,
    revision: str | None = None,
    endpoint: str | None = None,
    token: str | bool | None = None,
    generations: bool = True,
) -> Path:
    """Downloads a dataset repo's card and Parquet files; returns the local folder.

    The folder is a canonical benchmark folder: :func:`load_benchmark` and
    ``datasets.load_dataset(folder, config)`` read it, and :func:`export_generations` turns its
    ``generations`` config back into a panels folder for ``geofidelity-bench evaluate``.
    """
    from huggingface_hub import snapshot_download

    patterns = [CARD_FILE, LICENSE_FILE, *(f"{c}/*.parquet" for c in BENCHMARK_CONFIGS)]
    if generations:
        patterns.append(f"{GENERATIONS_DIR}/*/*.parquet")
    try:
        path = snapshot_download(
            repo_id=repo_id,
            repo_type="dataset",
            revision=revision,
            endpoint=endpoint,
            token=token,
            local_dir=str(local_dir) if local_dir is not None else None,
            allow_patterns=patterns,
        )
    except Exception as err:  # noqa: BLE001 - one clear message whatever went wrong
        tok = token if isinstance(token, str) else None
        raise BenchmarkError(f"cannot download dataset {repo_id!r}: {describe_error(err, tok)}") from err
    return Path(path)


def export_generations(
    folder: str | os.PathLike, out_dir: str | os.PathLike, *, models: Sequence[str] | None = None
) -> int:
    """Writes the ``generations`` config of a built/downloaded folder as a panels folder.

    Output: ``{model}/{condition}/{block_id}/{k:02d}.jpg`` plus ``manifest.parquet`` (the rows'
    manifest columns), which ``geofidelity-bench evaluate --generated`` reads. Returns the number
    of images written. Each image's bytes are checked against its recorded sha256.
    """
    import pyarrow.parquet as pq

    from .generation.manifest import MANIFEST_COLUMNS, atomic_write_bytes, panel_relpath, write_manifest

    folder, out_dir = Path(folder), Path(out_dir)
    files = sorted((folder / GENERATIONS_DIR).glob("*/*.parquet"))
    if not files:
        raise DatasetBuildError(f"{folder} has no generations/*/*.parquet files")
    rows = []
    for file in files:
        if models and file.parent.name not in models:
            continue
        for row in pq.read_table(file).to_pylist():
            data = (row.get("image") or {}).get("bytes")
            if not data:
                raise DatasetBuildError(f"{file}: row {row.get('path')!r} has no embedded image bytes")
            if row.get("sha256") and hashlib.sha256(data).hexdigest() != row["sha256"]:
                raise DatasetBuildError(f"{file}: image {row.get('path')!r} does not match its recorded sha256")
            rel = panel_relpath(row["model"], row["condition"], row["block_id"], row["k"])
            atomic_write_bytes(out_dir / rel, data)
            rec = {c: row.get(c) for c in MANIFEST_COLUMNS}
            rec["path"] = rel
            rows.append(rec)
    write_manifest(out_dir, rows)
    return len(rows)


__all__ = [
    "DATASET_CONFIGS",
    "BuildReport",
    "BuildSources",
    "DatasetBuildError",
    "DatasetPushReport",
    "GroupPush",
    "HubPushError",
    "benchmark_rows",
    "build_dataset",
    "config_features",
    "export_generations",
    "fetch_dataset",
    "generation_rows",
    "iter_config_rows",
    "push_dataset",
    "render_card",
    "resolve_sources",
]
