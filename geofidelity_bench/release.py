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

Output: ``OUT/benchmark/`` (a canonical benchmark folder: ``blocks``, ``references``, ``cities``),
``OUT/generations/`` (``{model}/{condition}/{block_id}/{k:02d}.jpg`` + ``manifest.parquet``,
read by ``geofidelity-bench evaluate --generated``, plus ``release_index.csv`` with the
release's own names of every copied image), and ``OUT/import_report.json``.

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
* The held-out split is this package's (SPEC section 1), not the release evaluator's, so scores
  recomputed here can differ slightly from the archived ones (as the release README notes for any
  re-run).
* A block keeps at least 3 references (2 gallery images after the held-out split) or is dropped;
  negatives pointing to a dropped or unknown block become null; a panel keeps at least 2 images
  (what evaluation needs) or is not written. All of these are reported.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import re
import shutil
import unicodedata
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from .benchmark import (
    NEGATIVE_FIELDS,
    STRATA,
    Benchmark,
    Block,
    ReferenceImage,
    is_safe_id,
    save_benchmark,
)
from .errors import GeoFidelityError

RELEASE_VERSION = "3.1.0"
BLOCKS_CSV = "metadata/blocks.csv"
REFERENCES_CSV = "metadata/reference_images.csv"
GENERATED_CSV = "metadata/generated_images.csv"
CONTROLS_CSV = "metadata/prompt_controls.csv"
BENCHMARK_JSON = "data/processed/v3/benchmark_v3.json"
REFERENCE_DIR = "data/raw/mapillary_v3"
GENERATION_DIR = "generations_v3"
REPORT_FILE = "import_report.json"
RELEASE_INDEX_FILE = "release_index.csv"
DEFAULT_LICENSE = "CC-BY-SA-4.0"
MIN_REFERENCES = 3
MIN_PANEL_IMAGES = 2

#: Release ``neg_*`` column names (lower case) -> negative role of this package.
NEGATIVE_ALIASES: dict[str, str] = {
    "neg_same_neighborhood": "same_neighborhood",
    "neg_same_neighborhood_diff_block": "same_neighborhood",
    "neg_same_neighbourhood": "same_neighborhood",
    "neg_same_neighbourhood_diff_block": "same_neighborhood",
    "neg_same_hood": "same_neighborhood",
    "neg_near": "same_neighborhood",
    "neg_same_city": "same_city",
    "neg_same_city_diff_neighborhood": "same_city",
    "neg_same_city_diff_neighbourhood": "same_city",
    "neg_same_city_far": "same_city",
    "neg_far": "same_city",
    "neg_same_driving_side": "same_driving_side",
    "neg_same_driving_side_diff_city": "same_driving_side",
    "neg_driving_side": "same_driving_side",
    "neg_same_side": "same_driving_side",
    "neg_random_city": "random_city",
    "neg_random": "random_city",
    "neg_other_city": "random_city",
}

#: Release prompt level names (normalized: upper case, ``-``/space -> ``_``) -> our condition.
LEVEL_ALIASES: dict[str, str] = {
    "L0": "L0",
    "CITY": "L0",
    "CITY_ONLY": "L0",
    "L1": "L1",
    "NAMED": "L1",
    "NAMED_BLOCK": "L1",
    "L2": "L2",
    "L3": "L2",  # the released L2 images were generated while the level was named L3
    "L1_GPS": "L2",
    "NAMED_GPS": "L2",
    "GPS": "GPS_ONLY",
    "GPS_ONLY": "GPS_ONLY",
    "L_GPS": "GPS_ONLY",
    "C_WRONG_STREET": "C_WRONG_STREET",
    "WRONG_STREET": "C_WRONG_STREET",
    "C_SHUFFLED_NEIGHBORHOOD": "C_SHUFFLED_NEIGHBORHOOD",
    "C_SHUFFLED_NEIGHBOURHOOD": "C_SHUFFLED_NEIGHBORHOOD",
    "C_SHUFFLED_NBHD": "C_SHUFFLED_NEIGHBORHOOD",
    "C_SHUFFLED_HOOD": "C_SHUFFLED_NEIGHBORHOOD",
    "SHUFFLED_NEIGHBORHOOD": "C_SHUFFLED_NEIGHBORHOOD",
    "C_WRONG_NEIGHBORHOOD": "C_SHUFFLED_NEIGHBORHOOD",
    "C_WRONG_STREET_NEIGHBORHOOD": "C_WRONG_STREET_NEIGHBORHOOD",
    "C_WRONG_STREET_NEIGHBOURHOOD": "C_WRONG_STREET_NEIGHBORHOOD",
    "C_WRONG_STREET_NBHD": "C_WRONG_STREET_NEIGHBORHOOD",
    "C_WRONG_STREET_AND_NEIGHBORHOOD": "C_WRONG_STREET_NEIGHBORHOOD",
    "C_WRONG_BOTH": "C_WRONG_STREET_NEIGHBORHOOD",
    "WRONG_STREET_NEIGHBORHOOD": "C_WRONG_STREET_NEIGHBORHOOD",
}

#: Release model names (lower case) -> this package's generator keys.
MODEL_ALIASES: dict[str, str] = {
    "sdxl_base": "sdxl",
    "sdxl-base": "sdxl",
    "sd35-large": "sd35_large",
    "sd3.5_large": "sd35_large",
    "flux-dev": "flux_dev",
    "flux-schnell": "flux_schnell",
    "pixart-sigma": "pixart_sigma",
    "hunyuan-dit": "hunyuan_dit",
}

_DRIVING_SIDES = {"l": "L", "left": "L", "lht": "L", "r": "R", "right": "R", "rht": "R"}
_NULLS = {"", "nan", "none", "null", "na", "n/a"}


class ReleaseImportError(GeoFidelityError, ValueError):
    """The release folder cannot be imported at all (a required file or column is missing)."""


@dataclass
class ImportIssue:
    """One thing the importer did not take over as it was."""

    kind: str
    file: str
    line: int | None
    action: str
    reason: str
    values: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        where = f"{self.file} line {self.line}" if self.line else self.file
        return f"{where}: {self.reason} ({self.action})"


@dataclass
class ImportReport:
    source: str
    out: str
    release_version: str | None
    counts: dict[str, Any]
    block_id_map: dict[str, str]
    model_map: dict[str, str]
    level_map: dict[str, str]
    negative_columns: dict[str, str]
    issues: list[ImportIssue]

    @property
    def issue_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(i.kind for i in self.issues).items()))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["issue_counts"] = self.issue_counts
        return data

    def summary(self, max_examples: int = 3) -> str:
        c = self.counts
        lines = [
            f"imported GeoFidelity-Bench release {self.release_version or '(version unknown)'} from {self.source}",
            f"  benchmark    {c['benchmark_dir']}: {c['blocks']} blocks in {c['cities']} cities, "
            f"{c['references']} references ({c['distinct_images']} distinct images)",
        ]
        if c.get("generations_dir"):
            models = ", ".join(
                f"{ours} (from {theirs})" if ours != theirs else ours for theirs, ours in sorted(self.model_map.items())
            )
            lines.append(
                f"  generations  {c['generations_dir']}: {c['generated_images']} images in {c['panels']} panels; "
                f"models {models or '-'}; conditions {', '.join(c['conditions']) or '-'}"
            )
            lines.append(
                f"  seeds        {c['seeds_exact']} exact, {c['seeds_missing']} missing in the release, "
                f"{c['seeds_unverified']} not verifiable (null)"
            )
        else:
            lines.append("  generations  none imported")
        if self.block_id_map:
            lines.append(f"  block ids    {len(self.block_id_map)} rewritten to safe ids (see block_id_map)")
        if not self.issues:
            lines.append("  issues       none: every row was imported as it was")
        else:
            lines.append(f"  issues       {len(self.issues)} row(s)/value(s) not imported as they were:")
            for kind, n in self.issue_counts.items():
                lines.append(f"    {kind} ({n})")
                for issue in [i for i in self.issues if i.kind == kind][:max_examples]:
                    lines.append(f"      - {issue.describe()}")
                if n > max_examples:
                    lines.append(f"      ... and {n - max_examples} more")
        lines.append(f"  report       {Path(self.out) / REPORT_FILE}")
        return "\n".join(lines)


# -- names ----------------------------------------------------------------------------------------


def canonical_block_id(release_id: str) -> str:
    """``release_id`` when it is a safe path component, else an ASCII form + 8 hex of its sha256."""
    if is_safe_id(release_id):
        return release_id
    ascii_form = unicodedata.normalize("NFKD", release_id).encode("ascii", "ignore").decode("ascii")
    ascii_form = re.sub(r"[^A-Za-z0-9._-]+", "_", ascii_form)
    ascii_form = re.sub(r"_{3,}", "__", ascii_form).strip("._-")[:100].rstrip("._-")
    digest = hashlib.sha256(release_id.encode("utf-8")).hexdigest()[:8]
    return f"{ascii_form}-{digest}" if ascii_form else f"block-{digest}"


def _norm_level(level: str) -> str:
    return re.sub(r"[\s\-]+", "_", level.strip()).upper()


def map_level(level: str | None) -> str | None:
    """Our condition for a release level name, or None when there is none (see LEVEL_ALIASES)."""
    if level is None:
        return None
    return LEVEL_ALIASES.get(_norm_level(level))


def map_negative_column(column: str) -> str | None:
    """Our negative role (``same_neighborhood``, ...) for a release ``neg_*`` column, or None."""
    return NEGATIVE_ALIASES.get(column.strip().lower())


def map_model(model: str, keep_names: bool = False) -> str:
    return model if keep_names else MODEL_ALIASES.get(model.strip().lower(), model.strip())


def release_seed(model: str, block_id: str, level: str, k: int) -> int:
    """The release's per-image seed: sha256(f"{model}/{block_id}/{level}/{k}") -> 63 bits."""
    digest = hashlib.sha256(f"{model}/{block_id}/{level}/{k}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


# -- values ---------------------------------------------------------------------------------------


class _BadValue(ValueError):
    pass


def _s(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return None if text.lower() in _NULLS else text


def _f(value: Any, name: str) -> float | None:
    text = _s(value)
    if text is None:
        return None
    try:
        out = float(text)
    except ValueError:
        raise _BadValue(f"{name}={text!r} is not a number") from None
    return None if math.isnan(out) else out


def _i(value: Any, name: str) -> int | None:
    text = _s(value)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        raise _BadValue(f"{name}={text!r} is not an integer") from None
    if math.isnan(number) or number != int(number):
        raise _BadValue(f"{name}={text!r} is not an integer")
    return int(number)


def _json_value(value: Any, name: str) -> Any:
    if isinstance(value, (list, dict)):
        return value
    text = _s(value)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise _BadValue(f"{name} is not valid JSON: {text[:60]!r}") from None


def _pairs(value: Any, name: str) -> list[tuple[float, float]] | None:
    data = _json_value(value, name)
    if data is None:
        return None
    try:
        pts = [(float(p[0]), float(p[1])) for p in data]
    except (TypeError, ValueError, IndexError):
        raise _BadValue(f"{name} is not a list of [lat, lon] pairs") from None
    return pts or None


def _haversine_m(a: tuple[float, float], b: tuple[float, float]) -> float:
    lat1, lon1, lat2, lon2 = map(math.radians, (a[0], a[1], b[0], b[1]))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * 6_371_000.0 * math.asin(math.sqrt(min(1.0, h)))


# -- files ----------------------------------------------------------------------------------------


@dataclass
class _Table:
    file: str
    header: list[str]
    rows: list[tuple[int, dict[str, str]]]
    columns: dict[str, str | None]  # our name -> the file's column (None when absent)

    def get(self, row: Mapping[str, str], name: str) -> str | None:
        col = self.columns.get(name)
        return row.get(col) if col else None


def _read_table(
    root: Path, rel: str, required: Mapping[str, tuple[str, ...]], optional: Mapping[str, tuple[str, ...]]
) -> _Table:
    """Reads a CSV (strings kept as written); each name maps to accepted column spellings."""
    path = root / rel
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        reader.fieldnames = header
        lower = {h.lower(): h for h in header}
        columns: dict[str, str | None] = {}
        for name, spellings in {**required, **optional}.items():
            columns[name] = next((lower[s.lower()] for s in spellings if s.lower() in lower), None)
        for name, spellings in required.items():
            if columns[name] is None:
                alts = f" (or {', '.join(repr(s) for s in spellings[1:])})" if len(spellings) > 1 else ""
                raise ReleaseImportError(
                    f"{rel}: missing required column {spellings[0]!r}{alts}; the file has columns {header}"
                )
        rows = []
        for row in reader:
            rows.append((reader.line_num, {k: v for k, v in row.items() if k is not None}))
    return _Table(rel, header, rows, columns)


def _relocate(root: Path, text: str | None, fallbacks: Iterable[str]) -> Path | None:
    """The file an image path of the release points to, or None."""
    candidates: list[str] = []
    if text:
        norm = text.replace("\\", "/")
        candidates.append(norm)
        for marker in ("data/raw/", f"{GENERATION_DIR}/"):
            if marker in norm:
                candidates.append(norm[norm.index(marker) :])
    candidates += list(fallbacks)
    for cand in candidates:
        path = Path(cand)
        path = path if path.is_absolute() else root / cand
        if path.is_file():
            return path
    return None


def _decode_check(data: bytes) -> str | None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
    except Exception as err:  # noqa: BLE001 - any decoder failure is a bad image
        return f"{type(err).__name__}: {err}"
    return None


_BLOCK_COLUMNS = {
    "required": {
        "block_id": ("block_id",),
        "city": ("city",),
        "country": ("country",),
        "driving_side": ("driving_side",),
        "centroid_lat": ("centroid_lat", "centroid_latitude"),
        "centroid_lon": ("centroid_lon", "centroid_longitude"),
    },
    "optional": {
        "stratum": ("stratum",),
        "way_id": ("way_id",),
        "street_name": ("street_name", "street"),
        "neighborhood": ("neighborhood", "neighbourhood"),
        "highway_tag": ("highway_tag", "highway"),
        "length_m": ("length_m",),
        "polyline": ("polyline",),
        "bbox": ("bbox",),
    },
}
_REFERENCE_COLUMNS = {
    "required": {"reference_id": ("reference_id",), "image_id": ("image_id",), "block_id": ("block_id",)},
    "optional": {
        "image_path": ("image_path", "path"),
        "city": ("city",),
        "country": ("country",),
        "lat": ("lat", "latitude"),
        "lon": ("lon", "longitude"),
        "captured_at": ("captured_at_utc_ms", "captured_at"),
        "compass_angle": ("compass_angle",),
        "sun_elevation_deg": ("sun_elevation_deg", "sun_elev_deg"),
        "camera_type": ("camera_type",),
        "quality_score": ("quality_score", "mapillary_quality"),
        "source_url": ("source_url", "mapillary_url", "mapillary_page_url", "mapillary_link"),
        "license": ("license",),
        "attribution": ("attribution", "creator", "creator_username"),
    },
}
_GENERATED_COLUMNS = {
    "required": {
        "model": ("model",),
        "block_id": ("block_id",),
        "level": ("level", "condition"),
        "sample_index": ("sample_index", "k"),
    },
    "optional": {
        "image_path": ("image_path", "path"),
        "seed": ("seed",),
        "prompt": ("prompt",),
        "prompt_meta": ("prompt_meta",),
        "image_origin": ("image_origin",),
        "metadata_source": ("metadata_source",),
        "image_url": ("image_url", "url"),
    },
}
_CONTROL_COLUMNS = {
    "required": {"block_id": ("block_id",), "level": ("level", "condition")},
    "optional": {
        "source_block_id": ("source_block_id",),
        "street_source_block_id": ("street_source_block_id",),
        "neighborhood_source_block_id": ("neighborhood_source_block_id",),
    },
}


# -- the importer ---------------------------------------------------------------------------------


class _Importer:
    def __init__(self, root: Path, out: Path, *, keep_model_names: bool, hardlink: bool):
        self.root, self.out = root, out
        self.keep_model_names, self.hardlink = keep_model_names, hardlink
        self.issues: list[ImportIssue] = []
        self.id_map: dict[str, str] = {}  # release block id -> ours (accepted blocks only)
        self.dropped: dict[str, str] = {}  # release block id -> why it was dropped
        self.negative_columns: dict[str, str] = {}
        self.json_blocks: dict[str, dict[str, Any]] = {}
        self.json_images: dict[tuple[str, str], dict[str, Any]] = {}
        self.version: str | None = None
        self._controls: dict[tuple[str, str], dict[str, str | None]] = {}

    def issue(self, kind: str, file: str, line: int | None, action: str, reason: str, **values: Any) -> None:
        self.issues.append(ImportIssue(kind, file, line, action, reason, {k: v for k, v in values.items() if v is not None}))

    # -- benchmark_v3.json ----------------------------------------------------------------------
    def read_json(self) -> None:
        path = self.root / BENCHMARK_JSON
        if not path.is_file():
            self.issue("missing_optional_file", BENCHMARK_JSON, None, "not used",
                       "not found; capture metadata beyond reference_images.csv and the JSON negatives are unavailable")
            return
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as err:
            raise ReleaseImportError(f"{BENCHMARK_JSON}: not valid JSON ({err})") from None
        blocks = payload.get("blocks") if isinstance(payload, dict) else None
        if not isinstance(blocks, list):
            raise ReleaseImportError(f"{BENCHMARK_JSON}: expected an object with a 'blocks' list")
        self.version = _s(payload.get("version"))
        for b in blocks:
            if not isinstance(b, dict) or not _s(b.get("block_id")):
                continue
            bid = str(b["block_id"])
            self.json_blocks[bid] = b
            for img in b.get("images") or []:
                if isinstance(img, dict) and _s(img.get("image_id")):
                    self.json_images[(bid, str(img["image_id"]))] = img

    # -- blocks ----------------------------------------------------------------------------------
    def read_blocks(self) -> dict[str, dict[str, Any]]:
        table = _read_table(self.root, BLOCKS_CSV, _BLOCK_COLUMNS["required"], _BLOCK_COLUMNS["optional"])
        neg_cols = [h for h in table.header if h.lower().startswith("neg_")]
        for col in neg_cols:
            role = map_negative_column(col)
            if role is None:
                self.issue("unmapped_negative_column", BLOCKS_CSV, None, "column ignored",
                           f"column {col!r} has no equivalent among {list(NEGATIVE_FIELDS.values())} "
                           "(see NEGATIVE_ALIASES in geofidelity_bench.release)", column=col)
            else:
                self.negative_columns[col] = NEGATIVE_FIELDS[role]
        blocks: dict[str, dict[str, Any]] = {}
        for line, row in table.rows:
            rid = _s(table.get(row, "block_id"))
            if rid is None:
                self.issue("bad_value", BLOCKS_CSV, line, "skipped", "empty block_id")
                continue
            if rid in blocks:
                self.issue("duplicate", BLOCKS_CSV, line, "skipped", f"block {rid!r} appears again", block_id=rid)
                continue
            try:
                rec = self._block_record(table, row, rid, line, neg_cols)
            except _BadValue as err:
                self.dropped[rid] = str(err)
                self.issue("bad_value", BLOCKS_CSV, line, "block dropped", f"block {rid!r}: {err}", block_id=rid)
                continue
            blocks[rid] = rec
        for rid in sorted(set(self.json_blocks) - set(blocks) - set(self.dropped)):
            self.issue("block_not_in_blocks_csv", BENCHMARK_JSON, None, "skipped",
                       f"block {rid!r} is in {BENCHMARK_JSON} but not in {BLOCKS_CSV}", block_id=rid)
        return blocks

    def _block_record(self, table: _Table, row, rid: str, line: int, neg_cols: list[str]) -> dict[str, Any]:
        jb = self.json_blocks.get(rid, {})
        city = _s(table.get(row, "city"))
        country = _s(table.get(row, "country"))
        if city is None or country is None:
            raise _BadValue("empty city or country")
        side_raw = _s(table.get(row, "driving_side")) or ""
        side = _DRIVING_SIDES.get(side_raw.lower())
        if side is None:
            raise _BadValue(f"driving_side={side_raw!r} is not L/R/left/right")
        lat, lon = _f(table.get(row, "centroid_lat"), "centroid_lat"), _f(table.get(row, "centroid_lon"), "centroid_lon")
        if lat is None or lon is None:
            raise _BadValue("empty centroid_lat/centroid_lon")
        notes = []
        polyline = None
        try:
            polyline = _pairs(table.get(row, "polyline"), "polyline")
        except _BadValue as err:
            self.issue("bad_value", BLOCKS_CSV, line, "taken from the JSON or the centroid", f"block {rid!r}: {err}", block_id=rid)
        if polyline is None and jb.get("polyline"):
            try:
                polyline = _pairs(jb["polyline"], "polyline")
            except _BadValue:
                polyline = None
        if polyline is None:
            polyline = [(lat, lon)]
            self.issue("missing_value", BLOCKS_CSV, line, "set to the centroid",
                       f"block {rid!r} has no usable polyline", block_id=rid)
        bbox = None
        for source in (table.get(row, "bbox"), jb.get("bbox")):
            try:
                data = _json_value(source, "bbox")
            except _BadValue:
                data = None
            if isinstance(data, list) and len(data) == 4:
                try:
                    bbox = tuple(float(v) for v in data)
                    break
                except (TypeError, ValueError):
                    bbox = None
        if bbox is None:
            lats, lons = [p[0] for p in polyline], [p[1] for p in polyline]
            bbox = (min(lats), min(lons), max(lats), max(lons))
        length = _f(table.get(row, "length_m"), "length_m")
        if length is None:
            length = _f(jb.get("length_m"), "length_m")
        if length is None:
            length = sum(_haversine_m(a, b) for a, b in zip(polyline, polyline[1:]))
            self.issue("missing_value", BLOCKS_CSV, line, "computed from the polyline",
                       f"block {rid!r} has no length_m", block_id=rid)
        stratum = _s(table.get(row, "stratum"))
        if stratum is not None and stratum.lower() not in STRATA:
            self.issue("bad_value", BLOCKS_CSV, line, "set to null",
                       f"block {rid!r}: stratum {stratum!r} is not one of {STRATA}", block_id=rid)
            notes.append(f"release stratum: {stratum}")
            stratum = None
        way_id = None
        try:
            way_id = _i(table.get(row, "way_id"), "way_id")
        except _BadValue as err:
            self.issue("bad_value", BLOCKS_CSV, line, "set to null", f"block {rid!r}: {err}", block_id=rid)
        negs: dict[str, str | None] = {}
        for col in neg_cols:
            fld = self.negative_columns.get(col)
            value = _s(row.get(col))
            if fld is None or value is None:
                continue
            if negs.get(fld) not in (None, value):
                self.issue("negative_conflict", BLOCKS_CSV, line, f"kept {negs[fld]!r}",
                           f"block {rid!r}: two columns give {fld} = {negs[fld]!r} and {value!r}", block_id=rid)
                continue
            negs[fld] = value
        for key, value in jb.items():
            if not key.lower().startswith("neg_"):
                continue
            role = map_negative_column(key)
            value = _s(value)
            if role is None or value is None:
                continue
            fld = NEGATIVE_FIELDS[role]
            if negs.get(fld) is not None and negs[fld] != value:
                self.issue("negative_conflict", BLOCKS_CSV, line, f"kept {value!r} from {BENCHMARK_JSON}",
                           f"block {rid!r}: {fld} is {negs[fld]!r} in {BLOCKS_CSV} but {value!r} in {BENCHMARK_JSON}",
                           block_id=rid)
            negs[fld] = value
        return {
            "line": line,
            "block_id": rid,
            "city": city,
            "country": country.upper(),
            "driving_side": side,
            "stratum": stratum.lower() if stratum else None,
            "way_id": way_id,
            "street_name": _s(table.get(row, "street_name")),
            "neighborhood": _s(table.get(row, "neighborhood")),
            "highway_tag": _s(table.get(row, "highway_tag")),
            "length_m": float(length),
            "polyline": tuple(polyline),
            "centroid": (lat, lon),
            "bbox": bbox,
            "negatives": negs,
            "notes": notes,
        }

    # -- references ------------------------------------------------------------------------------
    def read_references(self, blocks: Mapping[str, dict[str, Any]]) -> dict[str, list[ReferenceImage]]:
        table = _read_table(self.root, REFERENCES_CSV, _REFERENCE_COLUMNS["required"], _REFERENCE_COLUMNS["optional"])
        per_block: dict[str, list[ReferenceImage]] = defaultdict(list)
        seen: set[str] = set()
        listed: set[tuple[str, str]] = set()
        for line, row in table.rows:
            ref_id, image_id, rid = (_s(table.get(row, n)) for n in ("reference_id", "image_id", "block_id"))
            if ref_id is None or image_id is None or rid is None:
                self.issue("bad_value", REFERENCES_CSV, line, "skipped", "empty reference_id, image_id or block_id",
                           reference_id=ref_id, image_id=image_id, block_id=rid)
                continue
            listed.add((rid, image_id))
            if rid not in blocks:
                why = f"block {rid!r} was dropped: {self.dropped[rid]}" if rid in self.dropped else (
                    f"block {rid!r} is not in {BLOCKS_CSV}")
                self.issue("unknown_block", REFERENCES_CSV, line, "skipped", f"reference {ref_id!r}: {why}",
                           reference_id=ref_id, block_id=rid)
                continue
            if ref_id in seen:
                self.issue("duplicate", REFERENCES_CSV, line, "skipped", f"reference_id {ref_id!r} appears again",
                           reference_id=ref_id)
                continue
            block = blocks[rid]
            for name in ("city", "country"):
                value = _s(table.get(row, name))
                if value is not None and value.lower() != str(block[name]).lower():
                    self.issue("block_mismatch", REFERENCES_CSV, line, "kept",
                               f"reference {ref_id!r}: {name} {value!r} differs from its block's {block[name]!r}",
                               reference_id=ref_id)
            path = _relocate(
                self.root,
                _s(table.get(row, "image_path")),
                [f"{REFERENCE_DIR}/{rid}/mapillary_{image_id}.jpg", f"{REFERENCE_DIR}/{rid}/{image_id}.jpg"],
            )
            if path is None:
                self.issue("missing_image", REFERENCES_CSV, line, "skipped",
                           f"reference {ref_id!r}: image file not found ({_s(table.get(row, 'image_path')) or 'no image_path'})",
                           reference_id=ref_id, image_path=_s(table.get(row, "image_path")))
                continue
            data = path.read_bytes()
            bad = _decode_check(data)
            if bad:
                self.issue("undecodable_image", REFERENCES_CSV, line, "skipped",
                           f"reference {ref_id!r}: {path.relative_to(self.root) if path.is_relative_to(self.root) else path} "
                           f"is not a decodable image ({bad})", reference_id=ref_id)
                continue
            img = self.json_images.get((rid, image_id), {})
            try:
                ref = ReferenceImage(
                    reference_id=ref_id,
                    image_id=image_id,
                    block_id=rid,  # rewritten to our id below
                    lat=_first(_f(table.get(row, "lat"), "lat"), _f(img.get("lat"), "lat")),
                    lon=_first(_f(table.get(row, "lon"), "lon"), _f(img.get("lon"), "lon")),
                    captured_at=_first(_i(table.get(row, "captured_at"), "captured_at_utc_ms"),
                                       _i(img.get("captured_at_utc_ms"), "captured_at_utc_ms")),
                    compass_angle=_first(_f(table.get(row, "compass_angle"), "compass_angle"),
                                         _f(img.get("compass_angle"), "compass_angle")),
                    sun_elevation_deg=_first(_f(table.get(row, "sun_elevation_deg"), "sun_elevation_deg"),
                                             _f(img.get("sun_elev_deg"), "sun_elev_deg")),
                    camera_type=_first(_s(table.get(row, "camera_type")), _s(img.get("camera_type"))),
                    quality_score=_first(_f(table.get(row, "quality_score"), "quality_score"),
                                         _f(img.get("mapillary_quality"), "mapillary_quality")),
                    source_url=_s(table.get(row, "source_url")),
                    license=_s(table.get(row, "license")) or DEFAULT_LICENSE,
                    attribution=_s(table.get(row, "attribution")) or f"Mapillary contributors (image {image_id})",
                    image_bytes=data,
                )
            except _BadValue as err:
                self.issue("bad_value", REFERENCES_CSV, line, "skipped", f"reference {ref_id!r}: {err}", reference_id=ref_id)
                continue
            seen.add(ref_id)
            per_block[rid].append(ref)
        for key in sorted(set(self.json_images) - listed):
            if key[0] in blocks:
                self.issue("reference_not_in_reference_csv", BENCHMARK_JSON, None, "skipped",
                           f"image {key[1]!r} of block {key[0]!r} is in {BENCHMARK_JSON} but not in {REFERENCES_CSV} "
                           "(the authoritative index)", block_id=key[0], image_id=key[1])
        return per_block

    # -- assembling the benchmark -----------------------------------------------------------------
    def assemble(self, blocks: dict[str, dict[str, Any]], refs: dict[str, list[ReferenceImage]]) -> Benchmark:
        for rid in sorted(blocks):
            n = len(refs.get(rid, []))
            if n < MIN_REFERENCES:
                self.dropped[rid] = f"{n} usable reference image(s); a block needs at least {MIN_REFERENCES}"
                self.issue("too_few_references", BLOCKS_CSV, blocks[rid]["line"], "block dropped",
                           f"block {rid!r}: {self.dropped[rid]}", block_id=rid,
                           reference_ids=[r.reference_id for r in refs.get(rid, [])] or None)
                del blocks[rid]
        if not blocks:
            raise ReleaseImportError(f"{self.root}: no block could be imported (see the issues above)")
        used: dict[str, str] = {}
        for rid in sorted(blocks):
            ours = canonical_block_id(rid)
            if ours in used:
                raise ReleaseImportError(f"{BLOCKS_CSV}: block ids {used[ours]!r} and {rid!r} both map to {ours!r}")
            used[ours] = rid
            self.id_map[rid] = ours
        out_blocks = []
        for rid, rec in sorted(blocks.items()):
            negs = {}
            for fld in NEGATIVE_FIELDS.values():
                target = rec["negatives"].get(fld)
                if target is None:
                    negs[fld] = None
                elif target == rid:
                    self.issue("self_negative", BLOCKS_CSV, rec["line"], "set to null",
                               f"block {rid!r}: {fld} points to the block itself", block_id=rid)
                    negs[fld] = None
                elif target not in self.id_map:
                    why = f"was dropped: {self.dropped[target]}" if target in self.dropped else "is not in the release"
                    self.issue("dangling_negative", BLOCKS_CSV, rec["line"], "set to null",
                               f"block {rid!r}: {fld} = {target!r}, which {why}", block_id=rid, negative=target)
                    negs[fld] = None
                else:
                    negs[fld] = self.id_map[target]
            notes = list(rec["notes"])
            if self.id_map[rid] != rid:
                notes.insert(0, f"release block_id: {rid}")
            out_blocks.append(
                Block(
                    block_id=self.id_map[rid], city=rec["city"], country=rec["country"],
                    driving_side=rec["driving_side"], stratum=rec["stratum"], way_id=rec["way_id"],
                    street_name=rec["street_name"], neighborhood=rec["neighborhood"],
                    highway_tag=rec["highway_tag"], length_m=rec["length_m"], polyline=rec["polyline"],
                    centroid=rec["centroid"], bbox=rec["bbox"], notes="; ".join(notes), **negs,
                )
            )
        out_refs = []
        for rid in blocks:
            for ref in refs[rid]:
                out_refs.append(_replace_block(ref, self.id_map[rid]))
        version = self.version or RELEASE_VERSION
        return Benchmark(out_blocks, out_refs, name=f"GeoFidelity-Bench v{version} (imported)", source=str(self.root))

    # -- generations -----------------------------------------------------------------------------
    def read_controls(self) -> dict[tuple[str, str], dict[str, str]]:
        if not (self.root / CONTROLS_CSV).is_file():
            self.issue("missing_optional_file", CONTROLS_CSV, None, "not used",
                       "not found; control donors come from prompt_meta only")
            return {}
        table = _read_table(self.root, CONTROLS_CSV, _CONTROL_COLUMNS["required"], _CONTROL_COLUMNS["optional"])
        out = {}
        for line, row in table.rows:
            rid, cond = _s(table.get(row, "block_id")), map_level(_s(table.get(row, "level")))
            if rid is None or cond is None:
                self.issue("unmapped_level" if rid else "bad_value", CONTROLS_CSV, line, "skipped",
                           f"control row with block {rid!r} and level {_s(table.get(row, 'level'))!r} cannot be mapped")
                continue
            out[(rid, cond)] = {k: _s(table.get(row, k)) for k in _CONTROL_COLUMNS["optional"]}
        return out

    def import_generations(self, bench: Benchmark, gen_out: Path) -> dict[str, Any]:
        from .generation.manifest import file_sha256, panel_relpath, write_manifest

        table = _read_table(self.root, GENERATED_CSV, _GENERATED_COLUMNS["required"], _GENERATED_COLUMNS["optional"])
        self._controls = self.read_controls()
        entries: dict[tuple[str, str, str, int], dict[str, Any]] = {}
        model_map: dict[str, str] = {}
        level_map: dict[str, str] = {}
        for line, row in table.rows:
            model_raw, rid, level_raw = (_s(table.get(row, n)) for n in ("model", "block_id", "level"))
            k_raw = table.get(row, "sample_index")
            vals = dict(model=model_raw, level=level_raw, block_id=rid, sample_index=_s(k_raw))
            if model_raw is None or rid is None or level_raw is None:
                self.issue("bad_value", GENERATED_CSV, line, "skipped", "empty model, block_id or level", **vals)
                continue
            model = map_model(model_raw, self.keep_model_names)
            if not is_safe_id(model):
                self.issue("unsafe_model", GENERATED_CSV, line, "skipped",
                           f"model name {model_raw!r} is not usable as a folder name", **vals)
                continue
            cond = map_level(level_raw)
            if cond is None:
                self.issue("unmapped_level", GENERATED_CSV, line, "skipped",
                           f"level {level_raw!r} has no equivalent among our conditions "
                           "(see LEVEL_ALIASES in geofidelity_bench.release)", **vals)
                continue
            if rid not in self.id_map:
                why = f"block {rid!r} was dropped: {self.dropped[rid]}" if rid in self.dropped else (
                    f"block {rid!r} is not in {BLOCKS_CSV}")
                self.issue("unknown_block", GENERATED_CSV, line, "skipped", why, **vals)
                continue
            try:
                k = _i(k_raw, "sample_index")
            except _BadValue as err:
                self.issue("bad_value", GENERATED_CSV, line, "skipped", str(err), **vals)
                continue
            if k is None or k < 0:
                self.issue("bad_value", GENERATED_CSV, line, "skipped", f"sample_index {k_raw!r} is not >= 0", **vals)
                continue
            key = (model, cond, self.id_map[rid], k)
            if key in entries:
                self.issue("duplicate", GENERATED_CSV, line, "skipped",
                           f"image {panel_relpath(*key)} is already given by line {entries[key]['line']}", **vals)
                continue
            path = _relocate(
                self.root,
                _s(table.get(row, "image_path")),
                [f"{GENERATION_DIR}/{model_raw}/{level_raw}/{rid}/{k:02d}.jpg"],
            )
            if path is None:
                self.issue("missing_image", GENERATED_CSV, line, "skipped",
                           f"image file not found ({_s(table.get(row, 'image_path')) or 'no image_path'})", **vals)
                continue
            model_map[model_raw] = model
            level_map[level_raw] = cond
            entries[key] = {"line": line, "row": row, "path": path, "model_raw": model_raw, "level_raw": level_raw,
                            "rid": rid, "k": k}
        panels: dict[tuple[str, str, str], list[tuple]] = defaultdict(list)
        for key in entries:
            panels[key[:3]].append(key)
        seeds = Counter()
        manifest_rows, index_rows = [], []
        gen_out.mkdir(parents=True, exist_ok=True)
        for panel, keys in sorted(panels.items()):
            if len(keys) < MIN_PANEL_IMAGES:
                for key in keys:
                    e = entries[key]
                    self.issue("panel_too_small", GENERATED_CSV, e["line"], "skipped",
                               f"panel {'/'.join(panel)} has {len(keys)} image(s); evaluation needs at least "
                               f"{MIN_PANEL_IMAGES}", model=e["model_raw"], level=e["level_raw"], block_id=e["rid"],
                               sample_index=e["k"])
                continue
            for key in sorted(keys):
                e = entries[key]
                rel = panel_relpath(*key)
                data = e["path"].read_bytes()
                bad = _decode_check(data)
                if bad:
                    self.issue("undecodable_image", GENERATED_CSV, e["line"], "skipped",
                               f"{rel}: not a decodable image ({bad})", model=e["model_raw"], block_id=e["rid"])
                    continue
                target = gen_out / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                if not data.startswith(b"\xff\xd8"):
                    data = _to_jpeg(data)
                    self.issue("converted_to_jpeg", GENERATED_CSV, e["line"], "kept", f"{rel}: re-encoded as JPEG")
                    target.write_bytes(data)
                else:
                    _copy(e["path"], target, self.hardlink)
                manifest_rows.append(self._manifest_row(bench, key, e, target, rel, seeds, table, file_sha256))
                index_rows.append(self._index_row(e, rel, table))
        write_manifest(gen_out, manifest_rows)
        _write_csv(gen_out / RELEASE_INDEX_FILE, index_rows)
        written = Counter(r["model"] for r in manifest_rows)
        return {
            "generated_images": len(manifest_rows),
            "panels": len({(r["model"], r["condition"], r["block_id"]) for r in manifest_rows}),
            "images_per_model": dict(sorted(written.items())),
            "conditions": sorted({r["condition"] for r in manifest_rows}),
            "seeds_exact": seeds["exact"],
            "seeds_missing": seeds["missing"],
            "seeds_unverified": seeds["unverified"],
            "model_map": {k: v for k, v in sorted(model_map.items()) if written.get(v)},
            "level_map": dict(sorted(level_map.items())),
        }

    def _seed(self, e, table, seeds: Counter) -> int | None:
        raw = _s(table.get(e["row"], "seed"))
        if raw is None:
            seeds["missing"] += 1
            return None
        level_names = [e["level_raw"]] + (["L3"] if map_level(e["level_raw"]) == "L2" else [])
        candidates = [release_seed(e["model_raw"], e["rid"], lv, e["k"]) for lv in level_names]
        if re.fullmatch(r"-?\d+", raw):
            seeds["exact"] += 1
            return int(raw)
        try:
            recorded = float(raw)
        except ValueError:
            recorded = float("nan")
        for cand in candidates:
            if float(cand) == recorded:
                seeds["exact"] += 1
                return cand
        seeds["unverified"] += 1
        self.issue("seed_unverified", GENERATED_CSV, e["line"], "set to null",
                   f"seed {raw!r} is not an exact integer and matches no recomputed seed", model=e["model_raw"],
                   level=e["level_raw"], block_id=e["rid"], sample_index=e["k"])
        return None

    def _donor(self, rid: str | None, e) -> str | None:
        if rid is None:
            return None
        if rid in self.id_map:
            return self.id_map[rid]
        self.issue("unknown_donor", GENERATED_CSV, e["line"], "set to null",
                   f"control donor {rid!r} is not an imported block", model=e["model_raw"], block_id=e["rid"])
        return None

    def _manifest_row(self, bench, key, e, target: Path, rel: str, seeds: Counter, table, file_sha256) -> dict[str, Any]:
        from .generation.registry import REGISTRY, GeneratorError
        from .prompts import NEGATIVE_PROMPT

        model, cond, block_id, k = key
        row = e["row"]
        spec = None
        try:
            spec = REGISTRY.get(map_model(e["model_raw"]))
        except GeneratorError:
            spec = None
        street_donor = neighborhood_donor = None
        if cond.startswith("C_"):
            meta = {}
            try:
                meta = _json_value(table.get(row, "prompt_meta"), "prompt_meta") or {}
            except _BadValue:
                meta = {}
            control = meta.get("control") if isinstance(meta, dict) else None
            control = control if isinstance(control, dict) else self._controls.get((e["rid"], cond), {})
            if cond == "C_WRONG_STREET":
                street_donor = self._donor(_s(control.get("source_block_id")), e)
            elif cond == "C_SHUFFLED_NEIGHBORHOOD":
                neighborhood_donor = self._donor(_s(control.get("source_block_id")), e)
            else:
                street_donor = self._donor(_s(control.get("street_source_block_id")), e)
                neighborhood_donor = self._donor(_s(control.get("neighborhood_source_block_id")), e)
        return {
            "model": model,
            "block_id": block_id,
            "condition": cond,
            "k": k,
            "seed": self._seed(e, table, seeds),
            "prompt": _s(table.get(row, "prompt")),
            "negative_prompt": (NEGATIVE_PROMPT if spec.negative_prompt else None) if spec else None,
            "steps": spec.steps if spec else None,
            "guidance": spec.guidance if spec else None,
            "dtype": spec.dtype if spec else None,
            "height": spec.height if spec else None,
            "width": spec.width if spec else None,
            "weights": spec.source if spec else None,
            "weights_revision": spec.revision if spec else None,
            "pipeline": spec.pipeline_class if spec else None,
            "call_kwargs": json.dumps(dict(spec.call_kwargs), sort_keys=True) if spec else None,
            "street_donor": street_donor,
            "neighborhood_donor": neighborhood_donor,
            "benchmark": bench.name,
            "benchmark_fingerprint": bench.fingerprint,
            "path": rel,
            "sha256": file_sha256(target),
            "file_size": target.stat().st_size,
        }

    def _index_row(self, e, rel: str, table) -> dict[str, Any]:
        row = e["row"]
        return {
            "path": rel,
            "release_model": e["model_raw"],
            "release_level": e["level_raw"],
            "release_block_id": e["rid"],
            "sample_index": e["k"],
            "release_image_path": e["path"].relative_to(self.root).as_posix()
            if e["path"].is_relative_to(self.root) else str(e["path"]),
            "release_seed": _s(table.get(row, "seed")),
            "image_origin": _s(table.get(row, "image_origin")),
            "metadata_source": _s(table.get(row, "metadata_source")),
            "image_url": _s(table.get(row, "image_url")),
            "prompt_meta": _s(table.get(row, "prompt_meta")),
        }


def _first(*values):
    return next((v for v in values if v is not None), None)


def _replace_block(ref: ReferenceImage, block_id: str) -> ReferenceImage:
    import dataclasses

    return dataclasses.replace(ref, block_id=block_id)


def _copy(src: Path, dst: Path, hardlink: bool) -> None:
    if dst.exists():
        dst.unlink()
    if hardlink:
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copyfile(src, dst)


def _to_jpeg(data: bytes) -> bytes:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        buf = io.BytesIO()
        img.convert("RGB").save(buf, format="JPEG", quality=95)
        return buf.getvalue()


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    fields = list(rows[0]) if rows else ["path"]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _prepare_out(out: Path, overwrite: bool) -> None:
    managed = ("benchmark", "generations", REPORT_FILE)
    present = [name for name in managed if (out / name).exists()]
    if present and not overwrite:
        raise ReleaseImportError(f"{out} already holds {', '.join(present)}; pass --overwrite to replace them")
    for name in present:
        target = out / name
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
    out.mkdir(parents=True, exist_ok=True)


def import_release(
    release_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    generations: bool = True,
    keep_model_names: bool = False,
    hardlink: bool = False,
    overwrite: bool = False,
    log: Callable[[str], None] | None = None,
) -> ImportReport:
    """Converts the release at ``release_dir`` into ``out`` (see the module docstring).

    Args:
        release_dir: a local copy of the published release (``metadata/``, ``data/``, ``generations_v3/``).
        out: output folder (``benchmark/``, ``generations/``, ``import_report.json``).
        generations: also import the generated panels (needs ``metadata/generated_images.csv``).
        keep_model_names: keep the release's model names (e.g. ``sdxl_base``) instead of ours.
        hardlink: hard-link generated images instead of copying them (same file system only).
        overwrite: replace ``benchmark/``, ``generations/`` and the report of a previous import.
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
    _prepare_out(out, overwrite)
    imp = _Importer(root, out, keep_model_names=keep_model_names, hardlink=hardlink)
    imp.read_json()
    manifest_path = root / "dataset_manifest.json"
    if imp.version is None and manifest_path.is_file():
        try:
            imp.version = _s(json.loads(manifest_path.read_text(encoding="utf-8")).get("version"))
        except (ValueError, AttributeError):
            pass
    say(f"reading the release at {root}")
    blocks = imp.read_blocks()
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
