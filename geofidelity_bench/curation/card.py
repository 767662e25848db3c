"""The curation provenance of a benchmark made by ``curate``, written for a reader: what the folder's
``curation_summary.json`` recorded (tiers run and skipped, thresholds, counts), as the Markdown of
its dataset cards (the folder's own ``README.md`` and the card of ``build-dataset``).

Only what the record says is written: a tier that was skipped is named as skipped and its model
and thresholds are not, and a bias sentence names only the filters that ran
(docs/benchmark.md section 8, Curation). Pure Python on the parsed JSON; nothing heavy is imported.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from .errors import CurationError

#: The curation record ``curate`` writes beside a benchmark's configs, and ``build-dataset`` ships.
CURATION_SUMMARY_FILE = "curation_summary.json"
CURATION_SUMMARY_CSV = "curation_summary.csv"
#: The filters of docs/benchmark.md section 8 in order; tiers 3 and 4 may be skipped.
FILTER_TIERS = ("spatial", "tier1", "tier3", "tier4", "tier5")


def read_curation_record(folder: str | os.PathLike) -> dict[str, Any] | None:
    """The parsed ``curation_summary.json`` of a benchmark folder, or None when it has none.

    Raises:
        CurationError: the file is there but is not a JSON object with a ``config`` (naming the file).
    """
    path = Path(folder) / CURATION_SUMMARY_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CurationError(f"{path}: cannot read the curation record ({err}); re-run `geofidelity-bench curate` "
                            "with the same options to write it again, or remove it") from None
    if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
        raise CurationError(f"{path}: not a curation record of `geofidelity-bench curate` (no 'config' object); "
                            "re-run curate to write it again, or remove it")
    return record


def tiers_skipped(record: Mapping[str, Any]) -> list[str]:
    """The tiers the run skipped (``tier3``, ``tier4``): ``config.tiers_skipped``, or for a record
    written before that field, its ``skip_tier3``/``skip_tier4`` flags."""
    config = record.get("config") or {}
    if isinstance(config.get("tiers_skipped"), list):
        return [str(t) for t in config["tiers_skipped"]]
    return [t for t in ("tier3", "tier4") if config.get(f"skip_{t}")]


def tiers_run(record: Mapping[str, Any]) -> list[str]:
    skipped = set(tiers_skipped(record))
    return [t for t in FILTER_TIERS if t not in skipped]


def _num(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return f"{int(value):,}"
    return f"{value:,}" if isinstance(value, (int, float)) else str(value)


def _range(values: Any) -> str:
    lo, hi = values
    return f"[{_num(lo)}, {_num(hi)}]"


def filter_lines(record: Mapping[str, Any]) -> list[str]:
    """One Markdown list item per filter, in order: what it checked and its thresholds, or that it was skipped."""
    config = record.get("config") or {}
    th = config.get("thresholds") or {}
    skipped = set(tiers_skipped(record))
    cameras = ", ".join(f"`{c}`" if c else "empty" for c in th.get("camera_types", []))
    lines = [
        f"- **spatial**: images within {_num(th.get('max_distance_m'))} m of the block polyline;",
        f"- **tier 1**: no panoramas; camera type {cameras or 'any'}; capture time present; sun elevation at "
        f"capture of at least {_num(th.get('min_sun_elevation_deg'))} degrees;",
    ]
    if "tier3" in skipped:
        lines.append("- **tier 3** (SigLIP scene check): **skipped** (`--skip-tier3`): no image was checked for "
                     "being a daytime urban street scene;")
    else:
        lines.append(f"- **tier 3**: SigLIP `{config.get('siglip_weights')}` zero-shot over 9 texts: the daytime "
                     f"urban street scene text must come first, with probability at least "
                     f"{_num(th.get('tier3_min_prob'))};")
    if "tier4" in skipped:
        lines.append("- **tier 4** (segmentation composition gate): **skipped** (`--skip-tier4`): no image was "
                     "segmented, and there is no urbanness score;")
    else:
        weights = config.get("segmenter_weights")
        lines.append(f"- **tier 4**: segmenter `{config.get('segmenter')}`"
                     + (f" (weights `{Path(str(weights)).name}`)" if weights else "")
                     + ": sky, building, road, vehicle and vegetation shares and the urbanness score within the "
                       "bounds of docs/benchmark.md section 8;")
    lines.append(f"- **tier 5**: Laplacian variance at least {_num(th.get('min_laplacian_var'))}, mean gray in "
                 f"{_range(th.get('gray_range', (None, None)))}, colorfulness at least "
                 f"{_num(th.get('min_colorfulness'))}, aspect ratio in {_range(th.get('aspect_range', (None, None)))}.")
    return lines


def _summary_table(rows: list[Mapping[str, Any]]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def curation_markdown(record: Mapping[str, Any], *, same_neighborhood_kinds: Mapping[str, int] | None = None) -> str:
    """How a curated benchmark was built, from its curation record (docs/benchmark.md section 8)."""
    from ..caveats import same_neighborhood_counts_text

    config = record.get("config") or {}
    carve = config.get("carve") or {}
    skipped = tiers_skipped(record)
    cities = ", ".join(f"`{c}`" for c in record.get("cities", []))
    rules = carve.get("rules", "default")
    parts = [
        f"Curated with `geofidelity-bench curate` (docs/benchmark.md section 8, Curation) from OpenStreetMap street "
        f"geometry and Mapillary street-level photos, for the cities {cities or '(not recorded)'}. Everything below "
        f"is read from `{CURATION_SUMMARY_FILE}`, shipped with this benchmark.",
        "",
        f"1. **Blocks** ({rules} carving rules): named streets within {_num(carve.get('radius_m'))} m of each city "
        f"center, at least {_num(carve.get('min_length_m'))} m long, cut at {_num(carve.get('max_length_m'))} m, "
        f"block midpoints at least {_num(carve.get('min_spacing_m'))} m apart, up to {_num(carve.get('total_blocks'))} "
        "blocks per city.",
        "2. **Candidate images**: the Mapillary Graph API along each block.",
        "3. **Filters**, in order (tiers run: " + ", ".join(tiers_run(record))
        + ("; skipped: " + ", ".join(skipped) if skipped else "") + "):",
        "",
        *("   " + line for line in filter_lines(record)),
        "",
        f"4. **Selection**: per block the best {_num(config.get('max_images_per_block'))} images by "
        + ("quality score and sun elevation (no urbanness: tier 4 was skipped)" if "tier4" in skipped
           else "urbanness, quality score and sun elevation")
        + f"; blocks left with fewer than {_num(config.get('min_images'))} images are dropped.",
        "5. **Negatives** (one PRNG seeded 42): a nearby block of the same neighborhood (else a fallback: a block "
        "within 1 km, else a farther block of the city), a distant block of the same city, a block of another city "
        "with the same driving side, a block of a random other city"
        + (f". Same-neighborhood negatives here: {same_neighborhood_counts_text(dict(same_neighborhood_kinds))} "
           "(column `neg_same_neighborhood_kind` of `blocks`)." if same_neighborhood_kinds is not None else "."),
    ]
    gate = record.get("copy_audit_gate")
    if isinstance(gate, dict):
        parts.append(f"6. **Copy-audit gate**: {len(gate.get('removed', []))} near-duplicate photo(s) removed, "
                     f"{len(gate.get('blocks_dropped', []))} block(s) dropped for too few photos.")
    if record.get("complete") is False:
        failed = [str(r.get("block_id")) for r in record.get("failed_searches") or [] if isinstance(r, Mapping)]
        parts += ["", "**This run was incomplete**: " + "; ".join(
            ([f"the Mapillary search of {len(failed)} block(s) failed ({', '.join(failed)}): they have no images "
              "here"] if failed else [])
            + ([f"{len(record.get('missing_thumbnails') or [])} thumbnail(s) are missing"]
               if record.get("missing_thumbnails") else []))
            + f". Re-running `curate` with the same options fetches them (`{CURATION_SUMMARY_FILE}` lists them)."]
    other = {k: v for k, v in (record.get("skipped") or {}).items() if k not in ("tier3", "tier4")}
    if other:
        parts += ["", "Not done in this run: " + "; ".join(f"{k}: {v}" for k, v in sorted(other.items())) + "."]
    if record.get("missing_thumbnails"):
        parts += ["", f"{len(record['missing_thumbnails'])} thumbnail(s) could not be downloaded (listed in "
                      f"`{CURATION_SUMMARY_FILE}` under `missing_thumbnails`)."]
    table = _summary_table(list(record.get("summary") or []))
    if table:
        parts += ["", "Counts per city (images passing each stage; `skipped` for a tier that did not run):", "",
                  table]
    return "\n".join(parts)


def filters_bias_markdown(record: Mapping[str, Any]) -> str:
    """The card's *Capture* and *Filters* bias items for a curated benchmark: only the filters that ran."""
    th = (record.get("config") or {}).get("thresholds") or {}
    skipped = set(tiers_skipped(record))
    model_filters = []
    if "tier3" not in skipped:
        model_filters.append("the SigLIP scene check (tier 3)")
    if "tier4" not in skipped:
        model_filters.append("the segmentation composition gate (tier 4)")
    lines = [
        f"- **Capture**: the sun-elevation gate (at least {_num(th.get('min_sun_elevation_deg'))} degrees) biases "
        "the images toward daytime; contributor setups (phones, dashcams, bicycle or pedestrian mounts) vary; "
        "panoramas are excluded.",
    ]
    if model_filters:
        lines.append(f"- **Filters and encoders**: {' and '.join(model_filters)} may behave differently across "
                     "scripts, urban forms and regions; scores depend on the encoder (DINOv2 ViT-B/14 by default) and "
                     "the segmentation model used for GAAS.")
    else:
        lines.append("- **Filters and encoders**: no model filtered these images (tiers 3 and 4 were skipped): "
                     "only position, capture metadata and image statistics did, so scenes that are not urban street "
                     "views (interiors, tunnels, rural roads, views blocked by a vehicle) may remain; scores depend on "
                     "the encoder (DINOv2 ViT-B/14 by default) and the segmentation model used for GAAS.")
    if skipped and model_filters:
        lines[-1] = lines[-1][:-1] + f"; {', '.join(skipped)} did not run."
    return "\n".join(lines)


__all__ = ["CURATION_SUMMARY_CSV", "CURATION_SUMMARY_FILE", "FILTER_TIERS", "curation_markdown", "filter_lines",
           "filters_bias_markdown", "read_curation_record", "tiers_run", "tiers_skipped"]
