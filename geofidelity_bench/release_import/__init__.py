"""Import a local copy of the published GeoFidelity-Bench release (v3.1.0) into the canonical format.

Input: the release folder ``DIR`` as published on the Hub (``moss-vector-714/GeoFidelity-Bench``)
and described by its README and ``croissant.json``; paths are relative to ``DIR``::

    metadata/blocks.csv                    required: the block table
    metadata/reference_images.csv          required: the authoritative reference index
    metadata/generated_images.csv          optional: the generated-image index (no panels without it)
    metadata/prompt_controls.csv           optional: donors of the control prompts
    data/processed/v3/benchmark_v3.json    optional: blocks with ``images[]`` and ``neg_*`` fields
    data/raw/mapillary_v3/{block_id}/mapillary_{image_id}.jpg
    generations_v3/{model}/{level}/{block_id}/{sample_index:02d}.jpg

    outputs/eval_v3/raw_results.csv        optional: the paper's published scores (+ its summaries,
                                           results/main_scores_by_model_prompt.csv, outputs/stability/*.csv)

Output: ``OUT/benchmark/`` (a canonical benchmark folder: ``blocks``, ``references``, ``cities``),
``OUT/generations/`` (``{model}/{condition}/{block_id}/{k:02d}.jpg`` + ``manifest.parquet``,
read by ``geofidelity-bench evaluate --generated``, plus ``release_index.csv`` with the
release's own names of every copied image), ``OUT/published/`` (the release's published
per-block scores as a results folder, :mod:`.published`: ``results.csv``, the summaries and a
``run.json`` that says they are the release's, not recomputed) and ``OUT/import_report.json``.

Nothing is dropped silently: every row that is not imported, and every value that is changed
or set to null, is an :class:`ImportIssue` (kind, file, CSV line, action, reason, values) in the
report, and the command prints a summary by kind.

Columns (missing optional columns give nulls; a missing required column is an error that names
the file and the column):

* ``blocks.csv``: required ``block_id``, ``city``, ``country``, ``driving_side``,
  ``centroid_lat``, ``centroid_lon``; optional ``stratum``, ``way_id``, ``street_name``,
  ``neighborhood``, ``highway_tag``, ``length_m``, ``polyline`` (a JSON list of [lat, lon]),
  ``bbox`` (JSON [lat_min, lon_min, lat_max, lon_max]) and ``neg_*`` columns.
* ``reference_images.csv``: required ``reference_id``, ``image_id``, ``block_id``; optional
  ``image_path``, ``lat``, ``lon``, ``captured_at_utc_ms``, ``compass_angle``,
  ``sun_elevation_deg`` (or ``sun_elev_deg``), ``camera_type``, ``quality_score`` (or
  ``mapillary_quality``), ``source_url`` (or ``mapillary_url``), ``license``, ``attribution``;
  other columns (``city``, ``country``, ``image_url``, ...) are read for checks or ignored.
* ``generated_images.csv``: required ``model``, ``block_id``, ``level``, ``sample_index``;
  optional ``image_path``, ``seed``, ``prompt``, ``prompt_meta`` (JSON), ``image_origin``,
  ``metadata_source``, ``image_url``.

Assumptions (the real files could not be inspected here; each is checked and reported):

* ``benchmark_v3.json`` is what the paper's evaluation read, so its ``neg_*`` values win over
  those of ``blocks.csv``; a disagreement is reported. Its per-image records (keyed by block and
  ``image_id``) fill capture metadata that ``reference_images.csv`` lacks (compass angle, sun
  elevation, camera type, quality). Blocks or images only in the JSON are reported, not imported
  (``reference_images.csv`` is the authoritative index).
* Negative columns are mapped by :data:`NEGATIVE_ALIASES` (the release writes
  ``neg_same_neighborhood_diff_block``, ``neg_same_city_diff_neighborhood``,
  ``neg_same_driving_side_diff_city``, ``neg_random_city``; ``neg_near``/``neg_far`` variants map
  to same-neighborhood/same-city). Any other ``neg_*`` column is reported and ignored.
* Prompt levels are mapped by :data:`LEVEL_ALIASES` (case-insensitive, ``-``/space as ``_``):
  ``L0``, ``L1``, ``L2`` (also ``L3``, the level's name when the released L2 images were made),
  ``GPS``/``GPS_ONLY``, and the controls with their short forms (``C_SHUFFLED_NBHD``, ...).
  A level with no equivalent is reported with every row it concerns.
* Model names are mapped by :data:`MODEL_ALIASES` (``sdxl_base`` -> ``sdxl``; the others already
  match this package's keys); ``keep_model_names=True`` keeps the release's names.
* ``driving_side`` may be ``L``/``R`` or ``left``/``right``. Block ids that are not safe path
  components (the release builds them from street names, which can hold any character) are
  rewritten to ASCII plus an 8-hex hash of the original (:func:`canonical_block_id`); the
  original id is kept in the block's ``notes`` and in the report.
* Reference images without ``license``/``attribution`` columns get ``CC-BY-SA-4.0`` and
  "Mapillary contributors (image {image_id})", the terms the release states for all of them.
* An image path that does not exist as written is also looked up under the standard folders
  (``data/raw/mapillary_v3/{block_id}/mapillary_{image_id}.jpg``,
  ``generations_v3/{model}/{level}/{block_id}/{k:02d}.jpg``); absolute paths from the authors'
  machine are cut at ``data/raw/`` or ``generations_v3/``.
* Seeds: the v3.1.0 ``seed`` column went through float64 (rounded) and is blank for L0. The exact
  seed is recomputed with the release's formula ``sha256(f"{model}/{block_id}/{level}/{k}")``
  (first 8 bytes, big-endian, 63 bits; the release's L2 images used the level name ``L3``) and
  kept only when it rounds to the recorded value; otherwise the seed is null and reported.
* The held-out split is this package's (docs/benchmark.md section 1, Domain and split), not the release evaluator's, so scores
  recomputed here can differ slightly from the archived ones (as the release README notes for any
  re-run).
* A block keeps at least 3 references (2 gallery images after the held-out split) or is dropped;
  negatives pointing to a dropped or unknown block become null; a panel keeps at least 2 images
  (what evaluation needs) or is not written. All of these are reported.

Modules: :mod:`.layout` (file paths, limits, column spellings), :mod:`.names` (release names -> ours,
block ids, seeds), :mod:`.parsers` (cell values), :mod:`.files` (reading tables and images, writing the
output), :mod:`.importer` (the importer), :mod:`.published` (the published scores -> ``OUT/published/``),
:mod:`.report` (issues and the report); :func:`import_release` (here) runs them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from ..benchmark import save_benchmark
from .files import _prepare_out
from .importer import _Importer
from .layout import BLOCKS_CSV, GENERATED_CSV, PUBLISHED_DIR, RAW_RESULTS_CSV, REFERENCES_CSV, REPORT_FILE
from .names import (
    LEVEL_ALIASES,
    MODEL_ALIASES,
    NEGATIVE_ALIASES,
    canonical_block_id,
    map_level,
    map_model,
    map_negative_column,
    release_seed,
)
from .parsers import _s
from .published import RELEASE_ANCHORS, read_published_tables, write_published
from .report import ImportIssue, ImportReport, ReleaseImportError


def import_release(
    release_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    generations: bool = True,
    published: bool = True,
    keep_model_names: bool = False,
    hardlink: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] | None = None,
) -> ImportReport:
    """Converts the release at ``release_dir`` into ``out`` (see the module docstring).

    Args:
        release_dir: a local copy of the published release (``metadata/``, ``data/``, ``generations_v3/``).
        out: output folder (``benchmark/``, ``generations/``, ``published/``, ``import_report.json``).
        generations: also import the generated panels (needs ``metadata/generated_images.csv``).
        published: also convert the published scores (``outputs/eval_v3/raw_results.csv``) to ``out/published/``.
        keep_model_names: keep the release's model names (e.g. ``sdxl_base``) instead of ours.
        hardlink: hard-link generated images instead of copying them (same file system only).
        overwrite: replace ``benchmark/``, ``generations/``, ``published/`` and the report of a previous import.
        log: where progress messages go (default: print).

    Returns:
        The :class:`ImportReport` (also written to ``out/import_report.json``).
    """
    say = log or (lambda msg: print(msg, flush=True))
    root, out = Path(release_dir), Path(out)
    if not root.is_dir():
        raise ReleaseImportError(f"release folder {str(root)!r} does not exist")
    for rel in (BLOCKS_CSV, REFERENCES_CSV):
        if not (root / rel).is_file():
            raise ReleaseImportError(f"{root}: missing required file {rel}")
    imp = _Importer(root, out, keep_model_names=keep_model_names, hardlink=hardlink)
    imp.read_tables(generations)  # every CSV is read (and refused) before anything is written
    published_tables = read_published_tables(root) if published else {}
    _prepare_out(out, overwrite)
    imp.read_json()
    manifest_path = root / "dataset_manifest.json"
    if imp.version is None and manifest_path.is_file():
        try:
            imp.version = _s(json.loads(manifest_path.read_text(encoding="utf-8")).get("version"))
        except (ValueError, AttributeError):
            pass
    say(f"reading the release at {root}")
    blocks = imp.read_blocks()
    # what the release's evaluator saw, kept before assemble() drops blocks: each block's negatives (release ids)
    # and the blocks it knew (benchmark_v3.json's, else blocks.csv's)
    release_negatives = {rid: dict(rec["negatives"]) for rid, rec in blocks.items()}
    release_blocks = set(imp.json_blocks) or (set(blocks) | set(imp.dropped))
    refs = imp.read_references(blocks)
    bench = imp.assemble(blocks, refs)
    bench_dir = out / "benchmark"
    save_benchmark(
        bench,
        bench_dir,
        card_body=(
            f"# {bench.name}\n\nConverted by `geofidelity-bench import-release` from the published GeoFidelity-Bench "
            f"release (version {imp.version or 'unknown'}): {len(bench.cities)} cities, {len(bench.blocks)} blocks, "
            f"{len(bench.references)} reference images. See `../{REPORT_FILE}` for everything that was not imported "
            "as it was.\n\nReference images: CC BY-SA 4.0 (attribution per row). Block metadata derived from "
            "OpenStreetMap: ODbL 1.0, (c) OpenStreetMap contributors.\n"
        ),
    )
    summary = bench.summary()
    counts: dict[str, Any] = {
        "benchmark_dir": str(bench_dir),
        "blocks": summary["n_blocks"],
        "cities": summary["n_cities"],
        "references": summary["n_references"],
        "distinct_images": summary["n_distinct_images"],
        "negatives_coverage": summary["negatives_coverage"],
        "blocks_dropped": len(imp.dropped),
        "generations_dir": None,
    }
    model_map: dict[str, str] = {}
    level_map: dict[str, str] = {}
    if generations:
        if (root / GENERATED_CSV).is_file():
            say(f"copying the generated images to {out / 'generations'}")
            gen = imp.import_generations(bench, out / "generations")
            model_map, level_map = gen.pop("model_map"), gen.pop("level_map")
            counts.update(gen)
            counts["generations_dir"] = str(out / "generations")
        else:
            imp.issue("missing_optional_file", GENERATED_CSV, None, "not used", "not found; no generated panels imported")
    counts["published_dir"] = None
    if published:
        if published_tables:
            say(f"converting the published scores to {out / PUBLISHED_DIR}")
            counts["published"] = write_published(imp, published_tables, bench, bench_dir, out, release_negatives,
                                                  release_blocks, imp.version)
            counts["published_dir"] = counts["published"]["published_dir"]
        else:
            imp.issue("missing_optional_file", RAW_RESULTS_CSV, None, "not used",
                      "not found; no published scores converted (no published/ folder)")
    report = ImportReport(
        source=str(root),
        out=str(out),
        release_version=imp.version,
        counts=counts,
        block_id_map={k: v for k, v in sorted(imp.id_map.items()) if k != v},
        model_map=model_map,
        level_map=level_map,
        negative_columns=dict(imp.negative_columns),
        issues=imp.issues,
    )
    (out / REPORT_FILE).write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    return report


__all__ = [
    "LEVEL_ALIASES",
    "RELEASE_ANCHORS",
    "MODEL_ALIASES",
    "NEGATIVE_ALIASES",
    "ImportIssue",
    "ImportReport",
    "ReleaseImportError",
    "canonical_block_id",
    "import_release",
    "map_level",
    "map_model",
    "map_negative_column",
    "release_seed",
]
