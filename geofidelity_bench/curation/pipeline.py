"""The curation run: cities -> blocks -> Mapillary candidates -> filters -> a benchmark folder.

Stages, each with a checkpoint under ``{out}/_work/`` (a table plus ``stage.json`` holding a key
over the stage's settings and its inputs), so that running the same command again resumes where
it stopped and a changed threshold re-runs only the stages it affects:

=====  ================  ===========================================================================
 no.    stage              output table (Parquet; filter tables also as CSV)
=====  ================  ===========================================================================
 01     carve              ``blocks.parquet`` (per city, checkpointed city by city)
 02     metadata           ``candidates.parquet``: one row per (block, Mapillary image) (per city)
 03     spatial_tier1      ``spatial_tier1``: distance to the polyline, sun elevation, tier-1 flags
 04     download           ``download``: file, status, bytes, sha256, error; images in ``_work/images``;
                           failed downloads are tried again by the next run
 05     tier3              ``tier3``: 9 zero-shot probabilities, top text, pass (SigLIP)
 06     tier4              ``tier4``: 12 group shares, urbanness, pass, failed checks (segmenter)
 07     tier5              ``tier5``: size, aspect, Laplacian variance, mean gray, colorfulness, flags
 08     select             ``select``: per (block, image) every flag, rank, kept
=====  ================  ===========================================================================

Tiers 3 to 5 look at images, not pairs: they run once per distinct image that passed the
previous stages for at least one block, and in order (tier 4 only sees tier-3 passes, ...).
Selection keeps, per block, the best ``max_images_per_block`` (100) pairs by urbanness, quality
score and sun elevation (descending; missing values last; then image id), and drops blocks left
with fewer than ``min_images`` (25). A skipped tier (``skip_tier3``/``skip_tier4``) filters
nothing: its pass column in ``select`` is null (not measured, never a pass), and the summary
records it under ``tiers_skipped`` and names no model for it; without tier 4 there is no
urbanness, and the ranking starts at the quality score.

The result is a benchmark folder in the canonical format (:func:`~geofidelity_bench.benchmark.save_benchmark`)
with negatives (:func:`~geofidelity_bench.curation.negatives.assign_negatives`), plus
``curation_summary.csv`` / ``.json``: per city, blocks carved, images found, images passing each
stage, kept blocks and references; the JSON also records the settings, the tiers run and skipped
and the benchmark written (name, fingerprint, same-neighborhood negatives by kind). The folder's
``README.md`` is written from that record (:mod:`~geofidelity_bench.curation.card`).

One subject, kept whole: the stages share the checkpoint and summary machinery and hand each
other their tables in order; the work of each stage lives in its own module (carving, osm,
mapillary, filters, negatives).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..provenance import utc_timestamp
from ..benchmark import NEGATIVE_FIELDS, Benchmark, Block, ReferenceImage, save_benchmark
from ..segmentation import GROUP_NAMES
from .card import CURATION_SUMMARY_FILE, FILTER_TIERS, curation_markdown
from .carving import BLOCK_JSON_COLUMNS, CarveParams, blocks_from_frame, blocks_to_frame, carve_blocks
from .cities import CitySpec
from .errors import CurationError
import numpy as np

from .filters import (
    TIER3_TEXTS,
    FilterThresholds,
    rank_key,
    spatial_filter,
    tier1_filter,
    tier3_filter,
    tier3_from_probs,
    tier4_filter,
    tier4_from_shares,
    tier5_filter,
)
from .http import RetryPolicy, redact
from .mapillary import CANDIDATE_COLUMNS, MapillaryClient
from .negatives import assign_negatives
from .osm import OverpassClient, overpass_query, parse_overpass_json, read_osm_file
from .tables import read_table, write_table

STAGES = ("carve", "metadata", "spatial_tier1", "download", "tier3", "tier4", "tier5", "select")
LICENSE = "CC-BY-SA-4.0"
ATTRIBUTION = "Mapillary contributors"
SOURCE_URL = "https://www.mapillary.com/app/?pKey={id}"
SIGLIP_ID = "google/siglip-so400m-patch14-384"


@dataclass
class CurationConfig:
    """Everything that changes what curation produces; defaults are docs/benchmark.md section 8, Curation."""

    carve: CarveParams = field(default_factory=CarveParams)
    thresholds: FilterThresholds = field(default_factory=FilterThresholds)
    max_images_per_block: int = 100
    min_images: int = 25
    skip_tier3: bool = False
    skip_tier4: bool = False
    siglip_weights: str | None = None
    segmenter: str = "mask2former-vistas"
    segmenter_weights: str | None = None
    segmenter_kwargs: dict[str, Any] = field(default_factory=dict)
    device: str | None = None
    tier3_batch_size: int = 16
    tier4_batch_size: int = 4
    progress: bool = True

    def __post_init__(self) -> None:
        if self.min_images < 3:
            raise CurationError(
                f"min_images must be >= 3 (a block needs at least 2 gallery images after the held-out split), "
                f"got {self.min_images}"
            )
        if self.max_images_per_block < self.min_images:
            raise CurationError(f"max_images_per_block ({self.max_images_per_block}) < min_images ({self.min_images})")


@dataclass
class CurationResult:
    out_dir: Path
    benchmark: Benchmark | None
    summary: Any  # pandas DataFrame
    skipped: dict[str, str]
    resumed: list[str]
    computed: list[str]
    #: the blocks whose Mapillary search failed in this run (block id -> the redacted reason); searched again
    #: by the next run
    failed_searches: dict[str, str] = field(default_factory=dict)
    #: the thumbnails that could not be downloaded in this run (image_id, error); tried again by the next run
    missing_thumbnails: list[dict[str, str]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether everything the run set out to fetch arrived: no failed search, no missing thumbnail (a
        re-run of an incomplete run fetches what is missing and may give another benchmark)."""
        return not self.failed_searches and not self.missing_thumbnails


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Curator:
    """Runs (and resumes) the curation of ``cities`` into ``out_dir``.

    Args:
        cities: the cities (:class:`~.cities.CitySpec`).
        out_dir: the benchmark folder to write; checkpoints live in ``out_dir/_work``.
        config: a :class:`CurationConfig`.
        osm_files: city key -> OSM extract to carve from offline; other cities use ``overpass``.
        overpass: an :class:`~.osm.OverpassClient` (default: public endpoints, cache in ``_work``).
        mapillary: a :class:`~.mapillary.MapillaryClient`, or a zero-argument factory (called
            only when the metadata or download stage runs; default reads ``MAPILLARY_TOKEN``).
        log: where progress messages go (default: stderr); every message is redacted.
        retry: the HTTP retry policy of the default clients, recorded in
            ``curation_summary.json`` (give clients built with the same policy).
    """

    def __init__(
        self,
        cities: Sequence[CitySpec],
        out_dir: str | os.PathLike,
        config: CurationConfig | None = None,
        *,
        osm_files: Mapping[str, str | os.PathLike] | None = None,
        overpass: OverpassClient | None = None,
        mapillary: MapillaryClient | Callable[[], MapillaryClient] | None = None,
        log: Callable[[str], None] | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not cities:
            raise CurationError("no cities to curate")
        keys = [c.key for c in cities]
        if len(set(keys)) != len(keys):
            raise CurationError(f"a city is listed twice: {keys}")
        self.cities = list(cities)
        self.out_dir = Path(out_dir)
        self.work = self.out_dir / "_work"
        self.config = config or CurationConfig()
        self.osm_files = {k: Path(v) for k, v in (osm_files or {}).items()}
        unknown = set(self.osm_files) - set(keys)
        if unknown:
            raise CurationError(f"--osm-file given for cities that are not curated: {sorted(unknown)}")
        for key, path in self.osm_files.items():
            if not path.is_file():
                raise CurationError(f"OSM file for {key!r} not found: {str(path)!r}")
        self._overpass = overpass
        self._mapillary_arg = mapillary
        self._mapillary: MapillaryClient | None = mapillary if isinstance(mapillary, MapillaryClient) else None
        self._log = log or _stderr
        self.retry = retry or RetryPolicy()
        self.resumed: list[str] = []
        self.computed: list[str] = []
        self.skipped: dict[str, str] = {}
        self.copy_gate: dict[str, Any] | None = None  # what the copy-audit gate found and removed (build_benchmark)
        self.missing_thumbnails: list[dict[str, str]] = []  # downloads that failed in this run (stage_download)
        self.failed_searches: dict[str, dict[str, str]] = {}  # block id -> city, error (stage_metadata)

    # -- plumbing ---------------------------------------------------------------------------
    def redact(self, text: Any) -> str:
        """``text`` without the Mapillary token (in any encoding) or any URL credential: what every message,
        summary file and card of the run goes through."""
        secrets = self._mapillary.secrets if self._mapillary is not None else []
        return redact(text, [*secrets, os.environ.get("MAPILLARY_TOKEN")])

    def log(self, msg: str) -> None:
        self._log(self.redact(msg))

    @property
    def overpass(self) -> OverpassClient:
        if self._overpass is None:
            self._overpass = OverpassClient(cache_dir=self.work / "overpass_cache", retry=self.retry)
        return self._overpass

    @property
    def mapillary(self) -> MapillaryClient:
        if self._mapillary is None:
            if callable(self._mapillary_arg):
                self._mapillary = self._mapillary_arg()
            else:
                self._mapillary = MapillaryClient(retry=self.retry)
        return self._mapillary

    def _stage_dir(self, name: str) -> Path:
        return self.work / f"{STAGES.index(name) + 1:02d}_{name}"

    def _checkpoint(self, name: str, key: str, compute: Callable[[], Any], *, csv_copy: bool = False,
                    json_columns: Sequence[str] = (), still_valid: Callable[[Any], bool] | None = None):
        """Loads the stage's table when its checkpoint key matches, else computes and saves it."""
        folder = self._stage_dir(name)
        meta_path, table_path = folder / "stage.json", folder / f"{name}.parquet"
        if meta_path.is_file() and table_path.is_file():
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
            except ValueError:
                meta = {}
            if meta.get("key") == key:
                df = read_table(table_path, json_columns=json_columns)
                if still_valid is None or still_valid(df):
                    self.log(f"[{name}] resumed from checkpoint ({len(df)} rows)")
                    self.resumed.append(name)
                    return df
        self.log(f"[{name}] running")
        df = compute()
        write_table(df, table_path, json_columns=json_columns)
        if csv_copy:
            write_table(df, folder / f"{name}.csv", json_columns=json_columns)
        meta = {"stage": name, "key": key, "rows": int(len(df)),
                "finished_at": utc_timestamp()}
        _atomic_text(meta_path, json.dumps(meta, indent=2))
        self.computed.append(name)
        self.log(f"[{name}] done ({len(df)} rows)")
        return df

    def _per_city(self, name: str, city: CitySpec, key: str, compute: Callable[[], Any],
                  json_columns: Sequence[str] = (), complete: Callable[[], bool] | None = None):
        """The city's table from its checkpoint when the key matches, else computed and saved. With
        ``complete`` false after ``compute`` (a search that failed), the table is kept for reading but its
        checkpoint is recorded as failed (``"complete": false``, no key), so the next run computes it again."""
        folder = self._stage_dir(name) / "cities"
        table_path, meta_path = folder / f"{city.key}.parquet", folder / f"{city.key}.json"
        if meta_path.is_file() and table_path.is_file():
            try:
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
            except ValueError:
                meta = {}
            if meta.get("key") == key:
                return read_table(table_path, json_columns=json_columns), True
        df = compute()
        write_table(df, table_path, json_columns=json_columns)
        done = complete is None or complete()
        _atomic_text(meta_path, json.dumps({"city": city.key, "key": key if done else None, "complete": done,
                                            "rows": int(len(df))}, indent=2))
        return df, False

    # -- stage 1: carve ---------------------------------------------------------------------
    def _carve_source(self, city: CitySpec) -> dict[str, Any]:
        if city.key in self.osm_files:
            path = self.osm_files[city.key]
            return {"osm_file": path.name, "sha256": _file_sha256(path)}
        return {"overpass_query": overpass_query(city.lat, city.lon, self.config.carve.radius_m,
                                                 areas=self.config.carve.needs_areas)}

    def carve_city(self, city: CitySpec) -> list[Block]:
        """Blocks of one city from its OSM file or Overpass."""
        areas = self.config.carve.needs_areas
        if city.key in self.osm_files:
            data = read_osm_file(self.osm_files[city.key], areas=areas)
        else:
            data = parse_overpass_json(self.overpass.run(overpass_query(city.lat, city.lon, self.config.carve.radius_m,
                                                                        areas=areas)))
        return carve_blocks(data, city, self.config.carve)

    def stage_carve(self):
        import pandas as pd

        keys, frames = [], []
        fresh = 0
        for city in self.cities:
            key = _digest({"city": dataclasses.asdict(city), "carve": self.config.carve.as_dict(),
                           "source": self._carve_source(city)})
            df, resumed = self._per_city("carve", city, key, lambda c=city: blocks_to_frame(self.carve_city(c), self.config.carve.rules),
                                         json_columns=BLOCK_JSON_COLUMNS)
            fresh += not resumed
            self.log(f"[carve] {city.key}: {len(df)} blocks" + (" (checkpoint)" if resumed else ""))
            keys.append(key)
            frames.append(df)
        (self.resumed if fresh == 0 else self.computed).append("carve")
        blocks_df = pd.concat(frames, ignore_index=True) if frames else blocks_to_frame([])
        write_table(blocks_df, self._stage_dir("carve") / "blocks.parquet", json_columns=BLOCK_JSON_COLUMNS)
        return blocks_df, _digest(keys)

    # -- stage 2: metadata ------------------------------------------------------------------
    def stage_metadata(self, blocks_df, carve_key: str):
        import pandas as pd

        keys, frames = [], []
        fresh = 0
        for city in self.cities:
            city_blocks = blocks_df[blocks_df["city"] == city.key]
            block_digest = _digest(city_blocks.drop(columns=["polyline", "bbox"]).to_dict("records")
                                   + [list(map(list, p)) for p in city_blocks["polyline"]])
            search = self._search_params()
            key = _digest({"blocks": block_digest, "search": search})

            failed: dict[str, str] = {}  # blocks whose search failed after the retries

            def compute(c=city, cb=city_blocks):
                blocks = blocks_from_frame(cb)
                rows = self.mapillary.search_blocks(blocks, progress=self.config.progress, failures=failed,
                                                    desc=f"Mapillary search ({c.key})") if blocks else []
                return _candidates_frame(rows)

            df, resumed = self._per_city("metadata", city, key, compute, complete=lambda: not failed)
            if failed:  # recorded as failed, not as done: the next run searches this city again
                for block_id, why in sorted(failed.items()):
                    why = self.redact(why)
                    self.failed_searches[block_id] = {"block_id": block_id, "city": city.key, "error": why}
                    self.skipped[f"search {block_id}"] = f"{why}; no images for this block (re-run to search it again)"
                    self.log(f"[metadata] {block_id}: {self.skipped[f'search {block_id}']}")
                key = _digest([key, sorted(failed)])  # later stages are redone once the search succeeds
            fresh += not resumed
            self.log(f"[metadata] {city.key}: {len(df)} block-image pairs, {df['image_id'].nunique()} images"
                     + (" (checkpoint)" if resumed else ""))
            keys.append(key)
            frames.append(df)
        (self.resumed if fresh == 0 else self.computed).append("metadata")
        cands = pd.concat(frames, ignore_index=True) if frames else _candidates_frame([])
        cands = _candidates_frame(cands.to_dict("records"))
        write_table(cands, self._stage_dir("metadata") / "candidates.parquet")
        return cands, _digest([carve_key, keys])

    def _search_params(self) -> dict[str, Any]:
        return self.mapillary.search_params()

    # -- stage 3: spatial + tier 1 ----------------------------------------------------------
    def stage_spatial_tier1(self, blocks_df, cands, upstream: str):
        th = self.config.thresholds
        key = _digest({"up": upstream, "max_distance_m": th.max_distance_m, "camera_types": th.camera_types,
                       "min_sun_elevation_deg": th.min_sun_elevation_deg})
        blocks = {b.block_id: b for b in blocks_from_frame(blocks_df)}

        def compute():
            return tier1_filter(spatial_filter(cands, blocks, th), th)

        return self._checkpoint("spatial_tier1", key, compute, csv_copy=True), key

    # -- stage 4: download ------------------------------------------------------------------
    @property
    def images_dir(self) -> Path:
        return self.work / "images"

    def stage_download(self, filt, upstream: str):
        import pandas as pd

        passing = filt[filt["spatial_pass"] & filt["tier1_pass"]]
        first = passing.sort_values(["image_id", "block_id"]).drop_duplicates("image_id")
        items = list(zip(first["image_id"], first["thumb_1024_url"].where(first["thumb_1024_url"].notna(), None)))
        key = _digest({"up": upstream, "images": [i for i, _ in items]})

        def compute():
            rows = self.mapillary.download(items, self.images_dir, progress=self.config.progress) if items else []
            df = pd.DataFrame(rows, columns=["image_id", "file", "status", "attempts", "n_bytes", "sha256", "error"])
            failed = df[df["status"] == "failed"]
            for r in failed.itertuples():
                self.log(f"[download] image {r.image_id} failed: {r.error}")
            return df

        def complete(df) -> bool:  # a download that failed is tried again by the next run
            ok = df[df["status"] != "failed"]
            return len(ok) == len(df) and all((self.images_dir / f).is_file() for f in ok["file"])

        df = self._checkpoint("download", key, compute, csv_copy=True, still_valid=complete)
        failed = df[df["status"] == "failed"]
        self.missing_thumbnails = [{"image_id": str(r.image_id), "error": str(r.error)} for r in failed.itertuples()]
        if self.missing_thumbnails:
            self.log(f"[download] {len(failed)} thumbnail(s) still missing (listed in curation_summary.json "
                     "under missing_thumbnails); re-run the same command to try them again")
        # the later stages depend on which images arrived: a re-run that fetches a missing one redoes them
        missing = sorted(m["image_id"] for m in self.missing_thumbnails)
        return df, (_digest([key, missing]) if missing else key)

    def _downloaded(self, dl) -> dict[str, Path]:
        ok = dl[dl["status"] != "failed"]
        return {i: self.images_dir / f for i, f in zip(ok["image_id"], ok["file"])}

    # -- stages 5-7: image tiers ------------------------------------------------------------
    def _embedding_cache(self):
        from ..encoders import EmbeddingCache

        return EmbeddingCache(self.work / "model_cache")

    def stage_tier3(self, paths: Mapping[str, Path], upstream: str):
        ids = sorted(paths)
        th = self.config.thresholds
        if self.config.skip_tier3:
            self.skipped["tier3"] = "skipped (--skip-tier3)"
            return None, _digest({"up": upstream, "tier3": "skipped"})
        key = _digest({"up": upstream, "weights": self.config.siglip_weights, "p": th.tier3_min_prob})

        def compute():
            if not ids:
                return tier3_from_probs([], np.zeros((0, len(TIER3_TEXTS))), th)
            encoder = self._load_siglip()
            return tier3_filter(encoder, ids, [str(paths[i]) for i in ids], thresholds=th,
                                cache=self._embedding_cache(), batch_size=self.config.tier3_batch_size,
                                progress=self.config.progress)

        return self._checkpoint("tier3", key, compute, csv_copy=True), key

    def stage_tier4(self, paths: Mapping[str, Path], upstream: str):
        ids = sorted(paths)
        if self.config.skip_tier4:
            self.skipped["tier4"] = "skipped (--skip-tier4)"
            return None, _digest({"up": upstream, "tier4": "skipped"})
        key = _digest({"up": upstream, "segmenter": self.config.segmenter, "weights": self.config.segmenter_weights,
                       "kwargs": self.config.segmenter_kwargs})

        def compute():
            if not ids:
                return tier4_from_shares([], np.zeros((0, len(GROUP_NAMES))))
            segmenter = self._load_segmenter()
            return tier4_filter(segmenter, ids, [str(paths[i]) for i in ids], cache=self._embedding_cache(),
                                batch_size=self.config.tier4_batch_size, progress=self.config.progress)

        return self._checkpoint("tier4", key, compute, csv_copy=True), key

    def stage_tier5(self, paths: Mapping[str, Path], upstream: str):
        ids = sorted(paths)
        key = _digest({"up": upstream, "thresholds": self.config.thresholds.as_dict()})

        def compute():
            return tier5_filter(ids, [str(paths[i]) for i in ids], self.config.thresholds, progress=self.config.progress)

        return self._checkpoint("tier5", key, compute, csv_copy=True), key

    # -- model loading ----------------------------------------------------------------------
    def preflight(self) -> None:
        """Fails early (before any network stage) without a Mapillary token, or when a tier's
        model cannot be had offline."""
        self.mapillary  # noqa: B018 - builds the client, which needs the token
        if not self.config.skip_tier3:
            _check_weights("tier 3", "SigLIP", SIGLIP_ID, self.config.siglip_weights, "--siglip-weights", "--skip-tier3")
        if not self.config.skip_tier4:
            from ..segmentation import default_weights_id

            try:
                default_id = default_weights_id(self.config.segmenter)
            except ValueError as err:
                raise CurationError(f"tier 4: {err}") from None
            _check_weights("tier 4", "segmenter", default_id, self.config.segmenter_weights, "--segmenter-weights",
                           "--skip-tier4")

    def _load_siglip(self):
        from ..encoders import EncoderUnavailableError, get_encoder

        try:
            return get_encoder("siglip-so400m", weights=self.config.siglip_weights, device=self.config.device)
        except EncoderUnavailableError as err:
            raise CurationError(f"tier 3 needs SigLIP ({SIGLIP_ID}): {err} Or skip tier 3 with --skip-tier3.") from err

    def _load_segmenter(self):
        from ..segmentation import LabelMismatchError, SegmenterUnavailableError, get_segmenter

        try:
            return get_segmenter(self.config.segmenter, weights=self.config.segmenter_weights,
                                 device=self.config.device, **self.config.segmenter_kwargs)
        except (SegmenterUnavailableError, LabelMismatchError) as err:
            raise CurationError(f"tier 4 needs the segmenter: {err} Or skip tier 4 with --skip-tier4.") from err

    # -- stage 8: select --------------------------------------------------------------------
    def stage_select(self, filt, dl, t3, t4, t5, upstream: str):
        import pandas as pd

        # format 2: a skipped tier's pass column is null (format 1 wrote True), so older checkpoints are redone
        key = _digest({"up": upstream, "max": self.config.max_images_per_block, "min": self.config.min_images,
                       "format": 2})

        def compute():
            df = filt.merge(dl[["image_id", "file", "status"]].rename(columns={"status": "download_status"}),
                            on="image_id", how="left")
            df["downloaded"] = df["download_status"].isin(["downloaded", "cached"])
            eligible = df["spatial_pass"] & df["tier1_pass"] & df["downloaded"]
            for name, table, col in (("tier3", t3, "tier3_pass"), ("tier4", t4, "tier4_pass"),
                                     ("tier5", t5, "tier5_pass")):
                if table is None:  # a skipped tier measured nothing: null, never a pass (tiers_skipped says why)
                    df[col] = pd.array([pd.NA] * len(df), dtype="boolean")
                    continue
                extra = ["urbanness"] if name == "tier4" else []
                df = df.merge(table[["image_id", col, *extra]], on="image_id", how="left")
                df[col] = df[col].fillna(False).astype(bool)
                eligible = eligible & df[col]
            if "urbanness" not in df.columns:
                df["urbanness"] = float("nan")
            df["eligible"] = eligible.astype(bool)
            df["rank"] = pd.array([pd.NA] * len(df), dtype="Int64")
            df["kept"] = False
            df["block_kept"] = False
            for block_id, idx in df[df["eligible"]].groupby("block_id").groups.items():
                sub = df.loc[idx]
                order = sorted(idx, key=lambda i: rank_key(sub.at[i, "urbanness"], sub.at[i, "quality_score"],
                                                           sub.at[i, "sun_elevation_deg"], sub.at[i, "image_id"]))
                for r, i in enumerate(order, start=1):
                    df.at[i, "rank"] = r
                top = order[: self.config.max_images_per_block]
                if len(top) >= self.config.min_images:
                    df.loc[top, "kept"] = True
                    df.loc[df["block_id"] == block_id, "block_kept"] = True
            return df.sort_values(["block_id", "image_id"]).reset_index(drop=True)

        return self._checkpoint("select", key, compute, csv_copy=True), key

    # -- output -----------------------------------------------------------------------------
    def build_benchmark(self, blocks_df, selected) -> Benchmark | None:
        kept = selected[selected["kept"]]
        if kept.empty:
            return None
        blocks = [b for b in blocks_from_frame(blocks_df) if b.block_id in set(kept["block_id"])]
        blocks = assign_negatives(blocks)
        refs = []
        for r in kept.itertuples(index=False):
            data = (self.images_dir / r.file).read_bytes()
            refs.append(
                ReferenceImage(
                    reference_id=f"{r.block_id}__{r.image_id}",
                    image_id=str(r.image_id),
                    block_id=r.block_id,
                    lat=_f(r.lat),
                    lon=_f(r.lon),
                    captured_at=None if _missing(r.captured_at) else int(r.captured_at),
                    compass_angle=_f(r.compass_angle),
                    sun_elevation_deg=_f(r.sun_elevation_deg),
                    camera_type=None if _missing(r.camera_type) else str(r.camera_type),
                    quality_score=_f(r.quality_score),
                    source_url=SOURCE_URL.format(id=r.image_id),
                    license=LICENSE,
                    attribution=ATTRIBUTION,
                    image_bytes=data,
                )
            )
        cities = [c.to_city() for c in self.cities if c.key in {b.city for b in blocks}]
        bench = Benchmark(blocks, refs, cities=cities, name=self.out_dir.name or "curated", source=str(self.out_dir))
        bench, self.copy_gate = copy_audit_gate(bench, min_images=self.config.min_images)
        return bench

    def summary(self, blocks_df, cands, filt, dl, t3, t4, t5, selected):
        import pandas as pd

        ok_dl = set(dl.loc[dl["status"] != "failed", "image_id"]) if dl is not None else set()
        failed_dl = set(dl.loc[dl["status"] == "failed", "image_id"]) if dl is not None else set()
        p3 = None if t3 is None else set(t3.loc[t3["tier3_pass"], "image_id"])
        p4 = None if t4 is None else set(t4.loc[t4["tier4_pass"], "image_id"])
        p5 = set(t5.loc[t5["tier5_pass"], "image_id"]) if t5 is not None else set()
        rows = []
        for city in self.cities:
            c_blocks = blocks_df[blocks_df["city"] == city.key]
            c_cands = cands[cands["city"] == city.key]
            c_filt = filt[filt["city"] == city.key]
            spatial = set(c_filt.loc[c_filt["spatial_pass"], "image_id"])
            tier1 = set(c_filt.loc[c_filt["spatial_pass"] & c_filt["tier1_pass"], "image_id"])
            down = tier1 & ok_dl
            s3 = down if p3 is None else down & p3
            s4 = s3 if p4 is None else s3 & p4
            s5 = s4 & p5
            c_sel = selected[selected["city"] == city.key]
            kept = c_sel[c_sel["kept"]]
            rows.append({
                "city": city.key,
                "carving_rules": self.config.carve.rules,
                "blocks_carved": int(len(c_blocks)),
                "images_found": int(c_cands["image_id"].nunique()),
                "pass_spatial": len(spatial),
                "pass_tier1": len(tier1),
                "downloaded": len(down),
                "download_failed": len(tier1 & failed_dl),
                "pass_tier3": "skipped" if p3 is None else len(s3),
                "pass_tier4": "skipped" if p4 is None else len(s4),
                "pass_tier5": len(s5),
                "blocks_kept": int(kept["block_id"].nunique()),
                "references_kept": int(len(kept)),
            })
        return pd.DataFrame(rows)

    # -- the run ----------------------------------------------------------------------------
    def run(self) -> CurationResult:
        """Runs every stage (resuming from checkpoints) and writes the benchmark folder."""
        self.preflight()
        self.work.mkdir(parents=True, exist_ok=True)
        blocks_df, k = self.stage_carve()
        cands, k = self.stage_metadata(blocks_df, k)
        filt, k = self.stage_spatial_tier1(blocks_df, cands, k)
        dl, k = self.stage_download(filt, k)
        paths = self._downloaded(dl)
        t3, k = self.stage_tier3(paths, k)
        if t3 is not None:
            paths = {i: p for i, p in paths.items() if i in set(t3.loc[t3["tier3_pass"], "image_id"])}
        t4, k = self.stage_tier4(paths, k)
        if t4 is not None:
            paths = {i: p for i, p in paths.items() if i in set(t4.loc[t4["tier4_pass"], "image_id"])}
        t5, k = self.stage_tier5(paths, k)
        selected, k = self.stage_select(filt, dl, t3, t4, t5, k)
        summary = self.summary(blocks_df, cands, filt, dl, t3, t4, t5, selected)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        info = {
            "cities": [c.key for c in self.cities],
            "config": _config_record(self.config),
            "retry": self.retry.as_dict(),
            "complete": not self.failed_searches and not self.missing_thumbnails,
            "skipped": self.skipped,
            "failed_searches": [self.failed_searches[b] for b in sorted(self.failed_searches)],
            "missing_thumbnails": self.missing_thumbnails,
            "summary": summary.to_dict("records"),
        }
        # written before the benchmark is built, so that a failure there leaves the record of the filters
        write_table(summary, self.out_dir / "curation_summary.csv")
        self._write_record(info)
        bench = self.build_benchmark(blocks_df, selected)
        if self.copy_gate is not None:  # what the copy-audit gate removed, next to the summary
            removed_in = {}
            city_of = {b.block_id: b.city for b in blocks_from_frame(blocks_df)}
            for r in self.copy_gate["removed"]:
                removed_in[city_of.get(r["block_id"])] = removed_in.get(city_of.get(r["block_id"]), 0) + 1
            summary["removed_by_copy_gate"] = [removed_in.get(c, 0) for c in summary["city"]]
            kept_blocks = {} if bench is None else {b.block_id: b.city for b in bench.blocks}
            summary["blocks_kept"] = [sum(1 for c in kept_blocks.values() if c == city) for city in summary["city"]]
            summary["references_kept"] = [0 if bench is None else sum(1 for r in bench.references
                                                                      if kept_blocks.get(r.block_id) == city)
                                          for city in summary["city"]]
            write_table(summary, self.out_dir / "curation_summary.csv")
            info["summary"] = summary.to_dict("records")
            info["copy_audit_gate"] = self.copy_gate
            import pandas as pd

            write_table(pd.DataFrame(self.copy_gate["removed"], columns=GATE_COLUMNS),
                        self.out_dir / "copy_audit_removed.csv")
            if self.copy_gate["removed"]:
                self.log(f"copy-audit gate: removed {len(self.copy_gate['removed'])} near-duplicate reference photo(s)"
                         + (f" and {len(self.copy_gate['blocks_dropped'])} block(s) left with too few"
                            if self.copy_gate["blocks_dropped"] else "") + " (copy_audit_removed.csv)")
        if bench is not None:  # what was written: its name (never a path), fingerprint, negatives by kind
            info["benchmark"] = {"name": bench.name, "fingerprint": bench.fingerprint, "n_blocks": len(bench.blocks),
                                 "n_references": len(bench.references),
                                 "same_neighborhood_kinds": bench.summary()["same_neighborhood_kinds"]}
        self._write_record(info)
        if bench is None:
            self.log("no block kept enough images; no benchmark written (see curation_summary.csv)")
        else:
            save_benchmark(bench, self.out_dir,
                           card_body=self.redact(_card(bench, json.loads(json.dumps(info, default=str)))))
        if self.failed_searches or self.missing_thumbnails:
            self.log(f"incomplete: {len(self.failed_searches)} block search(es) failed, {len(self.missing_thumbnails)} "
                     "thumbnail(s) missing (curation_summary.json: failed_searches, missing_thumbnails); re-run the "
                     "same command to fetch them")
        return CurationResult(self.out_dir, bench, summary, dict(self.skipped), list(self.resumed), list(self.computed),
                              {b: r["error"] for b, r in sorted(self.failed_searches.items())},
                              list(self.missing_thumbnails))

    def _write_record(self, info: Mapping[str, Any]) -> None:
        """``curation_summary.json``, redacted as every message is (the reasons it lists quote URLs)."""
        _atomic_text(self.out_dir / CURATION_SUMMARY_FILE, self.redact(json.dumps(info, indent=2, default=str)))


NEGATIVE_BLOCK_FIELDS = (*NEGATIVE_FIELDS.values(), "neg_same_neighborhood_kind")


# -- the copy-audit gate ------------------------------------------------------------------------------

GATE_COLUMNS = ["reference_id", "block_id", "kind", "duplicate_id", "duplicate_block_id", "hash_distance", "exact",
                "reason"]


def copy_audit_gate(bench: Benchmark, *, min_images: int, hash_cache=None) -> tuple[Benchmark | None, dict[str, Any]]:
    """The copy audit inside the curated benchmark (docs/benchmark.md section 5, Copy audit; section 8),
    as a gate, on perceptual hashes and bytes (no model needed).

    Near-duplicate photos of one block (a held-out photo and a gallery photo, or two of one role):
    the first by reference id is kept, the others are removed. Near-duplicates between a block and one
    of its negatives (either way): both are removed (the photo cannot tell the two blocks apart). Other
    pairs (blocks that never meet in a retrieval line-up) are recorded, not removed. A block left with
    fewer than ``min_images`` photos is dropped and the negatives are assigned again.

    Returns the gated benchmark (None when no block is left) and the record: ``pairs`` (every flagged
    pair), ``removed`` (one row per removed photo with the reason) and ``blocks_dropped``.
    """
    from ..near_copies import audit_benchmark, thresholds

    audit = audit_benchmark(bench, hash_cache=hash_cache)
    negatives = {b.block_id: {v for v in bench.negatives(b.block_id).values() if v} for b in bench.blocks}
    removed: dict[str, dict[str, Any]] = {}

    def drop(ref_id: str, block_id: str, pair: Mapping[str, Any], other: str, other_block: str, reason: str) -> None:
        removed.setdefault(ref_id, {"reference_id": ref_id, "block_id": block_id, "kind": pair["kind"],
                                    "duplicate_id": other, "duplicate_block_id": other_block,
                                    "hash_distance": pair["hash_distance"], "exact": pair["exact"], "reason": reason})

    for p in audit["pairs"]:
        a, b = (p["reference_id"], p["block_id"]), (p["duplicate_id"], p["duplicate_block_id"])
        if p["kind"] in ("heldout_vs_own_gallery", "within_block"):
            keep, gone = sorted([a, b])
            drop(gone[0], gone[1], p, keep[0], keep[1], "near-duplicates a photo of its own block (the first by "
                 "reference id is kept)")
        elif p["kind"] == "cross_block" and (b[1] in negatives.get(a[1], ()) or a[1] in negatives.get(b[1], ())):
            reason = "near-duplicates a photo of a block that is its target or negative (both removed)"
            drop(a[0], a[1], p, b[0], b[1], reason)
            drop(b[0], b[1], p, a[0], a[1], reason)
    record: dict[str, Any] = {"thresholds": thresholds(), "pairs": audit["pairs"],
                              "removed": sorted(removed.values(), key=lambda r: r["reference_id"]), "blocks_dropped": []}
    if not removed:
        return bench, record
    refs = [r for r in bench.references if r.reference_id not in removed]
    counts: dict[str, int] = {}
    for r in refs:
        counts[r.block_id] = counts.get(r.block_id, 0) + 1
    kept_blocks = [b for b in bench.blocks if counts.get(b.block_id, 0) >= min_images]
    record["blocks_dropped"] = sorted(b.block_id for b in bench.blocks if counts.get(b.block_id, 0) < min_images)
    if not kept_blocks:
        return None, record
    blocks = assign_negatives([dataclasses.replace(b, **{f: None for f in NEGATIVE_BLOCK_FIELDS}) for b in kept_blocks])
    kept_ids = {b.block_id for b in blocks}
    return Benchmark(blocks, [r for r in refs if r.block_id in kept_ids], cities=list(bench.cities.values()),
                     world=bench.world, name=bench.name, source=bench.source), record


# -- helpers ----------------------------------------------------------------------------------------


def _candidates_frame(rows):
    import pandas as pd

    df = pd.DataFrame(list(rows), columns=list(CANDIDATE_COLUMNS))
    df["captured_at"] = pd.array([None if _missing(v) else int(v) for v in df["captured_at"]], dtype="Int64")
    df["is_pano"] = pd.array([None if _missing(v) else bool(v) for v in df["is_pano"]], dtype="boolean")
    for col in ("lat", "lon", "compass_angle", "quality_score"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    for col in ("block_id", "city", "image_id", "geometry_source", "camera_type", "thumb_1024_url"):
        df[col] = df[col].astype("object").where(df[col].notna(), None)
    return df.sort_values(["block_id", "image_id"]).reset_index(drop=True)


def _missing(value: Any) -> bool:
    if value is None:
        return True
    import pandas as pd

    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _f(value: Any) -> float | None:
    return None if _missing(value) else float(value)


def _atomic_text(path: Path, text: str) -> None:
    from ..atomic import atomic_write_bytes

    atomic_write_bytes(path, text.encode("utf-8"))


def _tiers_skipped(config: CurationConfig) -> list[str]:
    """The filter tiers a run did not run (``tier3``, ``tier4``), in order."""
    return [tier for tier, skip in (("tier3", config.skip_tier3), ("tier4", config.skip_tier4)) if skip]


def _config_record(config: CurationConfig) -> dict[str, Any]:
    """What ``curation_summary.json`` records of the settings. A skipped tier names no model (its
    weights never ran) and its thresholds are left out of ``thresholds``: ``tiers_run`` and
    ``tiers_skipped`` say which tiers filtered the images."""
    skipped = _tiers_skipped(config)
    thresholds = config.thresholds.as_dict()
    if "tier3" in skipped:
        thresholds.pop("tier3_min_prob")
    return {
        "carve": config.carve.as_dict(),
        "thresholds": thresholds,
        "max_images_per_block": config.max_images_per_block,
        "min_images": config.min_images,
        "tiers_run": [t for t in FILTER_TIERS if t not in skipped],
        "tiers_skipped": skipped,
        "skip_tier3": config.skip_tier3,
        "skip_tier4": config.skip_tier4,
        "siglip_weights": None if config.skip_tier3 else (config.siglip_weights or SIGLIP_ID),
        "segmenter": None if config.skip_tier4 else config.segmenter,
        "segmenter_weights": None if config.skip_tier4 else config.segmenter_weights,
    }


def _hf_offline() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    return bool(constants.HF_HUB_OFFLINE) or env


def _check_weights(tier: str, what: str, default_id: str, weights: str | None, flag: str, skip_flag: str) -> None:
    if weights is not None:
        path = Path(str(weights)).expanduser()
        if path.exists() and not path.is_dir():
            raise CurationError(f"{tier}: {flag} {str(weights)!r} is not a folder saved with save_pretrained()")
        if str(weights).startswith((".", "/", "~")) and not path.is_dir():
            raise CurationError(f"{tier}: {flag} folder {str(weights)!r} does not exist")
        return
    if not _hf_offline():
        return
    from huggingface_hub import try_to_load_from_cache

    if not isinstance(try_to_load_from_cache(default_id, "config.json"), str):
        raise CurationError(
            f"{tier} needs the {what} weights {default_id}, which are not in the local Hugging Face cache, and "
            f"HF_HUB_OFFLINE is set. Pass a local copy with {flag} PATH (a save_pretrained folder), or skip "
            f"{tier} with {skip_flag} (recorded in the summary)."
        )


def format_summary_table(summary) -> str:
    """The summary as an aligned text table."""
    cols = list(summary.columns)
    cells = [[str(v) for v in row] for row in summary.itertuples(index=False)]
    widths = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def _card(bench: Benchmark, record: Mapping[str, Any]) -> str:
    """The folder's README body: its counts and the curation provenance of its record."""
    return (
        f"# {bench.name}\n\n"
        "A GeoFidelity-Bench benchmark curated with `geofidelity-bench curate`: "
        f"{len(bench.cities)} cities, {len(bench.blocks)} blocks, {len(bench.references)} reference assignments "
        f"({len({r.image_id for r in bench.references})} distinct images).\n\n"
        "## How it was built\n\n"
        + curation_markdown(record, same_neighborhood_kinds=record.get("benchmark", {}).get("same_neighborhood_kinds"))
        + "\n\n## Licenses and attribution\n\n"
        "- Images: Mapillary contributors, CC BY-SA 4.0 (each row has its `source_url`).\n"
        "- Street geometry and names: (c) OpenStreetMap contributors, ODbL 1.0.\n"
    )
