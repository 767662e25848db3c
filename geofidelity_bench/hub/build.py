"""``build_dataset``: the Hub-ready folder of a benchmark (Parquet configs, card, license).

See :mod:`geofidelity_bench.hub` for the layout of the folder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..benchmark import CONFIGS as BENCHMARK_CONFIGS
from ..benchmark import load_benchmark
from ..manifest_format import load_manifest
from .card import CARD_FILE, LICENSE_FILE, benchmark_stats, default_card_template, default_license, render_card
from .configs import DATASET_CONFIGS, GENERATIONS_CONFIG, DatasetBuildError, benchmark_rows, resolve_sources
from .parquet import DEFAULT_MAX_SHARD_ROWS, arrow_nbytes, build_model_shards, write_config


@dataclass
class BuildReport:
    out: Path
    configs: dict[str, int]
    files: list[str]
    stats: dict[str, Any]


def _prepare_out(out: Path, overwrite: bool) -> None:
    from ..curation.card import CURATION_SUMMARY_FILE

    if out.exists() and not out.is_dir():
        raise DatasetBuildError(f"--out {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise DatasetBuildError(f"--out {out} is not empty; pass --overwrite to replace a previous build there")
        # Only what a build writes is removed; anything else in the folder is left alone.
        for name in DATASET_CONFIGS:
            if (out / name).is_dir():
                shutil.rmtree(out / name)
        for name in (CARD_FILE, LICENSE_FILE, CURATION_SUMMARY_FILE):
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
    """Writes the Hub-ready dataset folder of ``src`` (see :mod:`geofidelity_bench.hub`).

    Args:
        src: ``demo``, a canonical benchmark folder, a Hub dataset id, or an ``import-release``
            output folder (its ``benchmark/`` and ``generations/`` are used).
        out: the folder to write (must be empty unless ``overwrite``).
        generations: a generation folder (panels + ``manifest.parquet``) for the ``generations``
            config; only images whose manifest hash matches the file are included.
        card_template: the dataset card to fill (default: the card shipped with the package,
            :func:`~geofidelity_bench.hub.card.default_card_template`). ``LICENSE.md`` is the
            one beside the template, else the one shipped with the package.
        max_shard_rows: rows per Parquet shard of the image configs.
        overwrite: replace a previous build in ``out``.
        log: where progress messages go, one line per config written (default: print); the summary of
            the whole build is the returned :class:`BuildReport`.
    """
    say = log or (lambda msg: print(msg, flush=True))
    from ..curation.card import CURATION_SUMMARY_FILE

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
    template_path = Path(card_template) if card_template is not None else default_card_template()
    if not template_path.is_file():
        raise DatasetBuildError(f"card template {template_path} does not exist")
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
                    nbytes += arrow_nbytes(target)
                    files.append(repo_path)
        infos[GENERATIONS_CONFIG] = (int(len(manifest)), nbytes)
        say(f"generations: {len(manifest)} images of {manifest['model'].nunique()} model(s)")

    stats = benchmark_stats(bench, manifest)
    stats["name"] = sources.name or stats["name"]
    template = template_path.read_text(encoding="utf-8")
    license_src = template_path.parent / LICENSE_FILE
    if not license_src.is_file():
        license_src = default_license()
    (out / CARD_FILE).write_text(render_card(template, stats, infos, release=sources.release,
                                             curation=sources.curation), encoding="utf-8")
    (out / LICENSE_FILE).write_text(license_src.read_text(encoding="utf-8"), encoding="utf-8")
    files += [CARD_FILE, LICENSE_FILE]
    if sources.curation is not None:  # the curation record travels with the benchmark it describes
        shutil.copyfile(Path(sources.benchmark).expanduser() / CURATION_SUMMARY_FILE, out / CURATION_SUMMARY_FILE)
        files.append(CURATION_SUMMARY_FILE)
    return BuildReport(out, {c: n for c, (n, _) in infos.items()}, sorted(files), stats)


__all__ = ["BuildReport", "build_dataset"]
