"""The curation filters of docs/benchmark.md section 8, Curation, as pure functions that return measurement tables.

Every function returns a DataFrame with the measurements *and* the pass flags, so thresholds
can be re-tuned on the tables without downloading or re-running models:

* :func:`spatial_filter` - distance of each image to its block's polyline, measured in an
  azimuthal equidistant projection centered on the block (pyproj + shapely); pass <= 30 m;
* :func:`tier1_filter` - no panoramas; camera_type empty, ``perspective`` or ``flat``;
  ``captured_at`` present; NOAA sun elevation (no refraction) >= 20 degrees;
* :func:`tier3_filter` - SigLIP zero-shot over :data:`TIER3_TEXTS` (softmax over the 9 texts);
  pass when the target text is the top one and its probability >= 0.35;
* :func:`tier4_filter` - :func:`tier4_gate` (the composition gate) on group shares;
  :func:`shares_table` and :func:`write_shares_table` - the ``segment`` command's table of a
  benchmark's reference shares with the gate (segmentation never imports curation);
* :func:`tier5_filter` - image statistics (:func:`image_statistics`): Laplacian variance >= 80,
  mean gray in [55, 215], Hasler-Suesstrunk colorfulness >= 14, aspect (width / height) in
  [0.5, 2.2], all on the image as downloaded (before any resize), bounds inclusive.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from ..benchmark import Block
from ..extras import require
from ..images import ImageSource, load_image
from ..segmentation.labels import GROUP_NAMES
from ..segmentation.shares import SHARE_TOLERANCE, unlabeled_share
from .solar import sun_elevation_deg

# -- thresholds -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FilterThresholds:
    """Every threshold of the filters; the defaults are docs/benchmark.md section 8, Curation."""

    max_distance_m: float = 30.0
    camera_types: tuple[str, ...] = ("", "perspective", "flat")
    min_sun_elevation_deg: float = 20.0
    tier3_min_prob: float = 0.35
    min_laplacian_var: float = 80.0
    gray_range: tuple[float, float] = (55.0, 215.0)
    min_colorfulness: float = 14.0
    aspect_range: tuple[float, float] = (0.5, 2.2)

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_distance_m": self.max_distance_m,
            "camera_types": list(self.camera_types),
            "min_sun_elevation_deg": self.min_sun_elevation_deg,
            "tier3_min_prob": self.tier3_min_prob,
            "min_laplacian_var": self.min_laplacian_var,
            "gray_range": list(self.gray_range),
            "min_colorfulness": self.min_colorfulness,
            "aspect_range": list(self.aspect_range),
        }


# -- spatial --------------------------------------------------------------------------------------


def local_projection(lat: float, lon: float):
    """A pyproj Transformer from WGS84 (lon, lat) to metres in an azimuthal equidistant
    projection centered on (lat, lon): distances near the center are true to well under 0.1%."""
    require("pyproj", "curate", "curation")
    from pyproj import CRS, Transformer

    crs = CRS.from_proj4(f"+proj=aeqd +lat_0={lat:.9f} +lon_0={lon:.9f} +datum=WGS84 +units=m +no_defs")
    return Transformer.from_crs("EPSG:4326", crs, always_xy=True)


def distances_to_polyline_m(polyline: Sequence[Sequence[float]], lats: Sequence[float], lons: Sequence[float],
                            center: tuple[float, float] | None = None) -> np.ndarray:
    """Metres from each (lat, lon) to the polyline (a list of [lat, lon]), in a local
    azimuthal equidistant projection centered on ``center`` (default: the polyline's first point)."""
    require("shapely", "curate", "curation")
    import shapely

    if len(lats) == 0:
        return np.zeros(0)
    c = center or (polyline[0][0], polyline[0][1])
    tr = local_projection(c[0], c[1])
    px, py = tr.transform([p[1] for p in polyline], [p[0] for p in polyline])
    line = shapely.linestrings(np.column_stack([px, py])) if len(polyline) > 1 else shapely.points(px[0], py[0])
    x, y = tr.transform(np.asarray(lons, dtype=float), np.asarray(lats, dtype=float))
    return np.asarray(shapely.distance(line, shapely.points(np.column_stack([x, y]))), dtype=float)


def spatial_filter(candidates, blocks: Mapping[str, Block], thresholds: FilterThresholds = FilterThresholds()):
    """Adds ``distance_m`` and ``spatial_pass`` to a candidates table (block_id, image_id, lat, lon)."""
    df = candidates.copy()
    dist = np.full(len(df), np.nan)
    for block_id, idx in df.groupby("block_id").indices.items():
        block = blocks[block_id]
        sub = df.iloc[idx]
        ok = sub["lat"].notna().to_numpy() & sub["lon"].notna().to_numpy()
        if ok.any():
            d = distances_to_polyline_m(block.polyline, sub["lat"].to_numpy()[ok], sub["lon"].to_numpy()[ok],
                                        center=block.centroid)
            vals = np.full(len(idx), np.nan)
            vals[ok] = d
            dist[idx] = vals
    df["distance_m"] = dist
    df["spatial_pass"] = np.nan_to_num(dist, nan=np.inf) <= thresholds.max_distance_m
    return df


# -- tier 1 ---------------------------------------------------------------------------------------


def _is_missing(value: Any) -> bool:
    if value is None or isinstance(value, (str, bytes)):
        return value is None
    import pandas as pd

    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def tier1_checks(is_pano: Any, camera_type: Any, captured_at: Any, lat: Any, lon: Any,
                 thresholds: FilterThresholds = FilterThresholds()) -> dict[str, Any]:
    """The tier-1 measurements and flags of one image."""
    pano = bool(is_pano) if not _is_missing(is_pano) else False
    cam = "" if _is_missing(camera_type) else str(camera_type).strip().lower()
    has_time = not _is_missing(captured_at)
    sun = sun_elevation_deg(lat, lon, int(captured_at)) if has_time and not _is_missing(lat) else None
    flags = {
        "not_pano": not pano,
        "camera_ok": cam in thresholds.camera_types,
        "captured_at_ok": has_time,
        "sun_ok": sun is not None and sun >= thresholds.min_sun_elevation_deg,
    }
    return {"sun_elevation_deg": float("nan") if sun is None else float(sun), **flags, "tier1_pass": all(flags.values())}


def tier1_filter(table, thresholds: FilterThresholds = FilterThresholds()):
    """Adds ``sun_elevation_deg``, ``not_pano``, ``camera_ok``, ``captured_at_ok``, ``sun_ok`` and
    ``tier1_pass`` to a candidates table."""
    import pandas as pd

    rows = [
        tier1_checks(r.is_pano, r.camera_type, r.captured_at, r.lat, r.lon, thresholds)
        for r in table[["is_pano", "camera_type", "captured_at", "lat", "lon"]].itertuples(index=False)
    ]
    extra = pd.DataFrame(rows, index=table.index,
                         columns=["sun_elevation_deg", "not_pano", "camera_ok", "captured_at_ok", "sun_ok", "tier1_pass"])
    return pd.concat([table, extra], axis=1)


# -- tier 3 ---------------------------------------------------------------------------------------

#: docs/benchmark.md section 8, Curation, tier 3: the target description first, then the 8 distractors (key, text).
TIER3_TEXTS: tuple[tuple[str, str], ...] = (
    ("target", "a daytime urban street scene with buildings and sidewalks"),
    ("highway", "a highway with only cars on it and no buildings or sidewalks"),
    ("night", "a street at night, dark and lit by street lights"),
    ("tunnel_garage", "the inside of a tunnel or a parking garage"),
    ("rural", "a rural road through fields or a forest"),
    ("blocked", "a view blocked by a truck or a bus right in front of the camera"),
    ("blurry", "a blurry, out of focus image"),
    ("indoor", "an indoor scene inside a building"),
    ("sign", "a close-up of a sign"),
)
TIER3_TARGET = TIER3_TEXTS[0][1]


def tier3_from_probs(image_ids: Sequence[str], probs: np.ndarray,
                     thresholds: FilterThresholds = FilterThresholds(), texts=TIER3_TEXTS):
    """The tier-3 table from (n, 9) zero-shot probabilities (columns in ``texts`` order)."""
    import pandas as pd

    probs = np.asarray(probs, dtype=np.float64)
    if probs.ndim != 2 or probs.shape[1] != len(texts):
        raise ValueError(f"need ({len(image_ids)}, {len(texts)}) probabilities, got {probs.shape}")
    top = probs.argmax(axis=1) if len(probs) else np.zeros(0, dtype=int)
    df = pd.DataFrame({"image_id": list(image_ids)})
    for j, (key, _text) in enumerate(texts):
        df[f"p_{key}"] = probs[:, j]
    df["top_text"] = [texts[int(k)][0] for k in top]
    df["tier3_pass"] = (top == 0) & (probs[:, 0] >= thresholds.tier3_min_prob) if len(probs) else np.zeros(0, bool)
    return df


def tier3_filter(encoder, image_ids: Sequence[str], images: Sequence[ImageSource], *,
                 thresholds: FilterThresholds = FilterThresholds(), cache=None, batch_size: int = 16,
                 progress: bool = True, num_workers: int | None = None):
    """Zero-shot SigLIP probabilities over :data:`TIER3_TEXTS` and the tier-3 flag per image.

    Image embeddings go through ``embed_images`` (and ``cache`` when given), so an interrupted
    run does not embed the same image twice.
    """
    from ..encoders import embed_images

    texts = [t for _k, t in TIER3_TEXTS]
    if len(images) == 0:
        return tier3_from_probs([], np.zeros((0, len(texts))), thresholds)
    emb = embed_images(encoder, list(images), names=[f"image {i}" for i in image_ids], cache=cache,
                       batch_size=batch_size, progress=progress, num_workers=num_workers)
    probs = encoder.zero_shot_probs(None, texts, image_embeddings=emb)
    return tier3_from_probs(image_ids, probs, thresholds)


# -- tier 4 ---------------------------------------------------------------------------------------

#: docs/benchmark.md section 8, Curation, tier 4: inclusive (low, high) bounds; None means unbounded on that side.
TIER4_BOUNDS: Mapping[str, tuple[float | None, float | None]] = MappingProxyType(
    {
        "sky": (0.01, 0.55),
        "building": (0.03, 0.70),
        "road": (0.01, 0.55),
        "vehicle": (None, 0.40),
        "vegetation": (None, 0.80),
        "urbanness": (0.05, None),
    }
)
#: Shares the gate reads.
TIER4_INPUTS = ("sky", "building", "road", "sidewalk", "vehicle", "vegetation")
#: Urbanness is a sum of products: this much float rounding below 0.05 still counts as 0.05.
URBANNESS_ROUNDING = 1e-12


def urbanness(building: float, sidewalk: float, vehicle: float, road: float) -> float:
    """``building + 0.3 sidewalk - max(0, vehicle - 0.10) - max(0, road - 0.30)`` (docs/benchmark.md section 8, Curation)."""
    return float(building + 0.3 * sidewalk - max(0.0, vehicle - 0.10) - max(0.0, road - 0.30))


def _gate_inputs(shares: Mapping[str, float] | Sequence[float] | np.ndarray) -> dict[str, float]:
    if isinstance(shares, Mapping):
        missing = [k for k in TIER4_INPUTS if k not in shares]
        if missing:
            raise ValueError(f"tier4_gate needs the shares of {', '.join(TIER4_INPUTS)}; missing {', '.join(missing)}")
        values = {k: float(shares[k]) for k in TIER4_INPUTS}
    else:
        arr = np.asarray(shares, dtype=np.float64)
        if arr.shape != (len(GROUP_NAMES),):
            raise ValueError(
                f"tier4_gate takes a mapping or a {len(GROUP_NAMES)}-vector in the order {', '.join(GROUP_NAMES)}, "
                f"got shape {arr.shape}"
            )
        values = {k: float(arr[GROUP_NAMES.index(k)]) for k in TIER4_INPUTS}
    for k, v in values.items():
        if not math.isfinite(v) or v < -SHARE_TOLERANCE or v > 1.0 + SHARE_TOLERANCE:
            raise ValueError(f"share of {k} must be a number in [0, 1], got {v!r}")
    return values


def tier4_gate(shares: Mapping[str, float] | Sequence[float] | np.ndarray) -> tuple[bool, dict[str, Any]]:
    """The tier-4 curation filter of docs/benchmark.md section 8, Curation, on one image's group shares.

    Passes when, with every bound inclusive: sky in [0.01, 0.55], building in [0.03, 0.70],
    road in [0.01, 0.55], vehicle <= 0.40, vegetation <= 0.80 and
    ``urbanness = building + 0.3 sidewalk - max(0, vehicle - 0.10) - max(0, road - 0.30) >= 0.05``.

    Args:
        shares: a mapping with at least sky, building, road, sidewalk, vehicle, vegetation, or a
            12-vector in :data:`GROUP_NAMES` order.

    Returns:
        ``(passed, measurements)``; measurements holds the six shares read, ``urbanness`` and
        ``failed``, the names of the failed checks (keys of :data:`TIER4_BOUNDS`) in order.

    Example:
        >>> tier4_gate({"sky": 0.2, "building": 0.3, "road": 0.25, "sidewalk": 0.1, "vehicle": 0.05,
        ...             "vegetation": 0.1})[0]
        True
    """
    values = _gate_inputs(shares)
    measured = dict(values)
    measured["urbanness"] = urbanness(values["building"], values["sidewalk"], values["vehicle"], values["road"])
    failed = []
    for check, (low, high) in TIER4_BOUNDS.items():
        v = measured[check]
        slack = URBANNESS_ROUNDING if check == "urbanness" else 0.0
        if (low is not None and v < low - slack) or (high is not None and v > high):
            failed.append(check)
    measured["failed"] = failed
    return not failed, measured


def tier4_from_shares(image_ids: Sequence[str], shares: np.ndarray):
    """The tier-4 table (12 group shares, urbanness, pass, failed checks) from shares."""
    import pandas as pd

    rows = []
    for image_id, row in zip(image_ids, np.asarray(shares, dtype=np.float64)):
        passed, measured = tier4_gate(row)
        rows.append({"image_id": image_id, **{f"share_{g}": float(v) for g, v in zip(GROUP_NAMES, row)},
                     "urbanness": measured["urbanness"], "tier4_pass": bool(passed),
                     "tier4_failed": ",".join(measured["failed"])})
    cols = ["image_id", *[f"share_{g}" for g in GROUP_NAMES], "urbanness", "tier4_pass", "tier4_failed"]
    return pd.DataFrame(rows, columns=cols)


def tier4_filter(segmenter, image_ids: Sequence[str], images: Sequence[ImageSource], *, cache=None,
                 batch_size: int = 4, progress: bool = True, num_workers: int | None = None):
    """Group shares of each image (``segment_images``) and the tier-4 gate."""
    from ..segmentation import segment_images

    if len(images) == 0:
        return tier4_from_shares([], np.zeros((0, len(GROUP_NAMES))))
    shares = segment_images(segmenter, list(images), names=[f"image {i}" for i in image_ids], cache=cache,
                            batch_size=batch_size, progress=progress, num_workers=num_workers)
    return tier4_from_shares(image_ids, shares)


# -- the segment command's table: a benchmark's reference shares with the tier-4 gate ----------------


def shares_table(bench, segmenter, shares, keys):
    """One row per reference: ids, role, content hash, the 12 shares, unlabeled, the tier-4 gate.

    Args:
        bench: the :class:`~geofidelity_bench.benchmark.Benchmark` whose references were segmented.
        segmenter: the :class:`~geofidelity_bench.segmentation.Segmenter` that did it.
        shares: (n, 12) shares of ``bench.references``, in order.
        keys: the content sha256 of each reference image.

    Returns:
        ``pandas.DataFrame`` with the columns of ``geofidelity-bench segment --out``.
    """
    import pandas as pd


    heldout = {r.reference_id for b in bench.block_ids for r in bench.heldout(b)}
    unlabeled = unlabeled_share(shares)
    rows = []
    for ref, row, key, unl in zip(bench.references, shares, keys, unlabeled):
        passed, measured = tier4_gate(row)
        rows.append(
            {
                "reference_id": ref.reference_id,
                "image_id": ref.image_id,
                "block_id": ref.block_id,
                "role": "heldout" if ref.reference_id in heldout else "gallery",
                "image_sha256": key,
                **{f"share_{g}": float(v) for g, v in zip(GROUP_NAMES, row)},
                "share_unlabeled": float(unl),
                "urbanness": measured["urbanness"],
                "tier4_pass": bool(passed),
                "tier4_failed": ",".join(measured["failed"]),
                "segmenter": segmenter.name,
                "segmenter_config_hash": segmenter.config_hash,
            }
        )
    return pd.DataFrame(rows)


#: The tier-4 bounds as recorded next to a shares table.
TIER4_RECORD = ("docs/benchmark.md section 8, Curation, bounds inclusive: sky 0.01-0.55, building 0.03-0.70, "
                "road 0.01-0.55, vehicle <= 0.40, vegetation <= 0.80, urbanness >= 0.05")


def write_shares_table(table, path, *, bench, segmenter, stats, cache_root=None, command=None):
    """Writes :func:`shares_table`'s ``table`` (``.parquet``, else CSV) and its record beside it
    (``.json``: command, time, benchmark, segmenter config, segment stats, cache, tier-4 bounds).

    Args:
        table: the shares table; path: where it goes (``.parquet`` or ``.csv``).
        bench, segmenter: the benchmark and the segmenter it came from.
        stats: the :class:`~geofidelity_bench.segmentation.SegmentStats` of the run.
        cache_root: the cache folder used (None: no cache); command: the command line to record.

    Returns:
        The record's path (``path`` with the suffix ``.json``).
    """
    import json
    from pathlib import Path

    from geofidelity_bench.atomic import atomic_write
    from geofidelity_bench.provenance import utc_timestamp

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() == ".parquet":
        atomic_write(out, lambda p: table.to_parquet(p, index=False))
    else:
        atomic_write(out, lambda p: table.to_csv(p, index=False))
    meta = {
        "command": command,
        "created_at": utc_timestamp(),
        "benchmark": {"name": bench.name, "source": bench.source, "fingerprint": bench.fingerprint},
        "segmenter": {"name": segmenter.name, "config": segmenter.config, "config_hash": segmenter.config_hash},
        "segment_stats": stats.as_dict(),
        "cache": None if cache_root is None else str(cache_root),
        "table": out.name,
        "tier4": TIER4_RECORD,
    }
    meta_path = out.with_suffix(".json")
    atomic_write(meta_path, lambda p: p.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8"))
    return meta_path


# -- tier 5 ---------------------------------------------------------------------------------------

#: The 3x3 Laplacian kernel (OpenCV ``Laplacian`` with ksize=1, scipy ``ndimage.laplace``).
LAPLACIAN_KERNEL = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])


def grayscale(rgb: np.ndarray) -> np.ndarray:
    """ITU-R 601 luma as PIL's ``convert("L")`` computes it (uint8, rounded), as float64."""
    from PIL import Image

    return np.asarray(Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8)).convert("L"), dtype=np.float64)


def laplacian_variance(gray: np.ndarray) -> float:
    """Variance of the 3x3 Laplacian of a grayscale image.

    Borders are mirrored without repeating the edge pixel (OpenCV's default ``BORDER_REFLECT_101``,
    scipy's ``mode="mirror"``), so this equals ``cv2.Laplacian(gray, cv2.CV_64F).var()``.
    """
    g = np.asarray(gray, dtype=np.float64)
    if g.ndim != 2 or min(g.shape) < 2:
        return 0.0
    p = np.pad(g, 1, mode="reflect")
    lap = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4.0 * g
    return float(lap.var())


def colorfulness(rgb: np.ndarray) -> float:
    """Hasler and Suesstrunk (2003): ``sigma_rgyb + 0.3 mu_rgyb`` with ``rg = R - G``,
    ``yb = (R + G) / 2 - B``, population standard deviations."""
    arr = np.asarray(rgb, dtype=np.float64)
    r, g, b = arr[..., 0], arr[..., 1], arr[..., 2]
    rg = r - g
    yb = 0.5 * (r + g) - b
    sigma = math.sqrt(rg.std() ** 2 + yb.std() ** 2)
    mu = math.sqrt(rg.mean() ** 2 + yb.mean() ** 2)
    return float(sigma + 0.3 * mu)


def image_statistics(image: ImageSource, name: str | None = None) -> dict[str, float]:
    """Width, height, aspect, Laplacian variance, mean gray and colorfulness of an image as
    decoded (EXIF orientation applied, never resized)."""
    img = load_image(image, name=name)
    rgb = np.asarray(img, dtype=np.uint8)
    gray = grayscale(rgb)
    return {
        "width": int(img.width),
        "height": int(img.height),
        "aspect": float(img.width / img.height),
        "laplacian_var": laplacian_variance(gray),
        "mean_gray": float(gray.mean()),
        "colorfulness": colorfulness(rgb),
    }


def tier5_checks(stats: Mapping[str, float], thresholds: FilterThresholds = FilterThresholds()) -> dict[str, bool]:
    lo_g, hi_g = thresholds.gray_range
    lo_a, hi_a = thresholds.aspect_range
    flags = {
        "sharp_ok": stats["laplacian_var"] >= thresholds.min_laplacian_var,
        "exposure_ok": lo_g <= stats["mean_gray"] <= hi_g,
        "color_ok": stats["colorfulness"] >= thresholds.min_colorfulness,
        "aspect_ok": lo_a <= stats["aspect"] <= hi_a,
    }
    flags["tier5_pass"] = all(flags.values())
    return flags


def tier5_filter(image_ids: Sequence[str], images: Sequence[ImageSource],
                 thresholds: FilterThresholds = FilterThresholds(), progress: bool = False,
                 num_workers: int | None = None):
    """The tier-5 table: statistics and flags per image (computed by ``num_workers`` threads,
    default the cores this process may use, 0 the calling thread; in input order either way)."""
    from contextlib import closing

    import pandas as pd
    from tqdm.auto import tqdm

    from ..prefetch import ordered_map, resolve_num_workers

    pairs = list(zip(image_ids, images))
    workers = resolve_num_workers(num_workers)
    stats_iter = ordered_map(lambda p: image_statistics(p[1], name=f"image {p[0]}"), pairs,
                             num_workers=workers, ahead=4 * max(1, workers))
    rows = []
    with closing(stats_iter):
        for (image_id, _), stats in tqdm(zip(pairs, stats_iter), total=len(pairs), desc="tier 5 (image statistics)",
                                         unit="img", disable=not progress):
            rows.append({"image_id": image_id, **stats, **tier5_checks(stats, thresholds)})
    cols = ["image_id", "width", "height", "aspect", "laplacian_var", "mean_gray", "colorfulness",
            "sharp_ok", "exposure_ok", "color_ok", "aspect_ok", "tier5_pass"]
    return pd.DataFrame(rows, columns=cols)


def rank_key(urbanness: float | None, quality: float | None, sun: float | None, image_id: str) -> tuple:
    """Selection order: urbanness, quality, sun elevation (each descending, missing last), then
    image id ascending so ties are deterministic."""

    def desc(v):
        return (1, 0.0) if v is None or (isinstance(v, float) and math.isnan(v)) else (0, -float(v))

    return (*desc(urbanness), *desc(quality), *desc(sun), str(image_id))


def select_top(rows: Iterable[Mapping[str, Any]], max_images: int) -> list[Mapping[str, Any]]:
    """The ``max_images`` best rows by :func:`rank_key`."""
    ordered = sorted(rows, key=lambda r: rank_key(r.get("urbanness"), r.get("quality_score"),
                                                  r.get("sun_elevation_deg"), r["image_id"]))
    return ordered[:max_images]


DEFAULT_THRESHOLDS = FilterThresholds()
TIER_NAMES = MappingProxyType({"spatial": "spatial", "tier1": "tier 1", "tier3": "tier 3", "tier4": "tier 4",
                               "tier5": "tier 5"})
