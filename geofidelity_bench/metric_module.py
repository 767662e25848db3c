"""The ``geofidelity`` evaluate metric: where its module file lives, and the glue it runs.

The Hugging Face ``evaluate`` module (``geofidelity.py``) ships inside this package, so it
loads from any working directory once ``geofidelity-bench`` is installed::

    >>> import evaluate, geofidelity_bench                                       # doctest: +SKIP
    >>> geofidelity = evaluate.load(geofidelity_bench.metric_path())             # doctest: +SKIP
    >>> geofidelity.compute(predictions=images, references=block_ids,            # doctest: +SKIP
    ...                     encoder="efficientnet-lite0")

The module file is thin: it declares the inputs (``_info``) and calls the functions here,
which only validate, group and convert. Every number comes from
:func:`geofidelity_bench.evaluation.evaluate_panels` (config ``default``) or
:mod:`geofidelity_bench.metrics` (config ``sets``); no formula is repeated.

Inputs travel through evaluate's Arrow writer as one struct per item,
``{"image": {"bytes", "path"} | None, "embedding": [float32] | None}``
(:func:`to_item`), so images and embeddings share one declared feature. PIL images and
arrays are stored as lossless PNG of exactly the pixels the encoder would see; encoded
bytes and paths are stored as given, so nothing is re-compressed on the way.

Importing this module does not import ``evaluate``, ``datasets`` or torch.

One subject, kept whole: the input normalization and the compute function of each config
share one item format, so they read best side by side.
"""

from __future__ import annotations

import io
import numbers
import os
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

#: Name of the evaluate module (the folder and the ``.py`` file share it).
METRIC_NAME = "geofidelity"
#: Config used when ``evaluate.load`` gets no ``config_name``.
DEFAULT_CONFIG = "default"
#: Encoder used when ``encoder`` is not given: the benchmark's reference encoder (docs/benchmark.md section 4, Embeddings).
DEFAULT_ENCODER = "dinov2-base"
#: What a padded row of the ``sets`` config holds (its two sets may differ in length).
EMPTY_ITEM: dict[str, Any] = {"image": None, "embedding": None}
#: Panels need at least this many images per block (MMD^2 and the diversity terms need 2).
MIN_PANEL_IMAGES = 2


def metric_path() -> str:
    """Folder of the ``geofidelity`` evaluate module shipped inside the package.

    ``evaluate.load(metric_path())`` works from any working directory (pass a config name as
    the second argument: ``"default"`` or ``"sets"``).

    Example:
        >>> Path(metric_path(), "geofidelity.py").is_file()
        True
    """
    return str(Path(__file__).resolve().parent / "evaluate_module" / METRIC_NAME)


def load_metric(config_name: str | None = None, **kwargs: Any):
    """``evaluate.load(metric_path(), config_name, **kwargs)`` (imports ``evaluate``, ~10 s)."""
    from .extras import require

    evaluate = require("evaluate", "metric", "the evaluate metric")
    return evaluate.load(metric_path(), config_name, **kwargs)


# -- input normalization (runs in add / add_batch, before evaluate's Arrow writer) ------------------


def _png_bytes(image: Any, label: str) -> bytes:
    """Lossless PNG of the RGB pixels the encoder would see (EXIF orientation applied)."""
    from .images import load_image

    rgb = load_image(image, name=label)
    buf = io.BytesIO()
    rgb.save(buf, format="PNG")
    return buf.getvalue()


def _embedding(value: Any, label: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{label}: an embedding must be a 1-D vector of numbers ({err})") from err
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{label}: an embedding must be a non-empty 1-D vector, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{label}: embedding contains NaN or infinite values")
    return arr


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def to_item(value: Any, label: str) -> dict[str, Any]:
    """One image or embedding -> the stored struct ``{"image": ..., "embedding": ...}``.

    Images: a path (str or PathLike; must exist), encoded bytes, a PIL image, an HxW or
    HxWxC array (uint8, or float in [0, 1]), or a ``{"bytes", "path"}`` dict (a ``datasets``
    image). Embeddings: a 1-D vector of numbers (list, tuple or array), stored as float32.

    Raises:
        ValueError: anything else, a missing file, empty bytes or a non-finite embedding;
            the message starts with ``label`` (e.g. ``predictions[3]``).
    """
    from PIL import Image

    if isinstance(value, Mapping):
        if set(value) == {"image", "embedding"}:  # already normalized
            if (value["image"] is None) == (value["embedding"] is None):
                raise ValueError(f"{label}: give exactly one of 'image' and 'embedding'")
            if value["image"] is not None:
                return {"image": to_item(value["image"], label)["image"], "embedding": None}
            return {"image": None, "embedding": _embedding(value["embedding"], label)}
        if set(value) <= {"bytes", "path"} and (value.get("bytes") or value.get("path")):
            if value.get("bytes"):
                return {"image": {"bytes": bytes(value["bytes"]), "path": None}, "embedding": None}
            return to_item(value["path"], label)
        raise ValueError(f"{label}: a dict must be a datasets image {{'bytes', 'path'}}, got keys {sorted(value)}")
    if isinstance(value, (str, os.PathLike)):
        path = Path(value).expanduser()
        if not path.is_file():
            raise ValueError(f"{label}: image file not found: {value}")
        return {"image": {"bytes": None, "path": str(path.resolve())}, "embedding": None}
    if isinstance(value, (bytes, bytearray, memoryview)):
        if len(value) == 0:
            raise ValueError(f"{label}: image bytes are empty")
        return {"image": {"bytes": bytes(value), "path": None}, "embedding": None}
    if isinstance(value, Image.Image):
        return {"image": {"bytes": _png_bytes(value, label), "path": None}, "embedding": None}
    if isinstance(value, (list, tuple)):
        if value and all(_is_number(v) for v in value):
            return {"image": None, "embedding": _embedding(value, label)}
        raise ValueError(f"{label}: a list must be an embedding (a non-empty vector of numbers)")
    if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
        arr = np.asarray(value)
        if arr.ndim == 1:
            return {"image": None, "embedding": _embedding(arr, label)}
        if arr.ndim in (2, 3):
            return {"image": {"bytes": _png_bytes(arr, label), "path": None}, "embedding": None}
        raise ValueError(f"{label}: an array must be an embedding (1-D) or an image (HxW or HxWxC), got shape {arr.shape}")
    raise ValueError(
        f"{label}: expected an image (PIL image, path, encoded bytes, HxWxC uint8 array) or an embedding "
        f"(1-D vector of floats), got {type(value).__name__}"
    )


def _as_list(values: Any, field: str) -> list:
    if values is None:
        return []
    from PIL import Image

    if isinstance(values, (str, bytes, os.PathLike, Mapping, Image.Image)):
        raise ValueError(f"{field} must be a list (one entry per image), got a single {type(values).__name__}")
    if isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype.kind in "fiu":
        raise ValueError(f"{field} must be a list of images or embeddings (or a 2-D array of embeddings), got a 1-D array")
    return list(values)


def to_items(values: Any, field: str, start: int = 0) -> list[dict[str, Any]]:
    """A list of images/embeddings (or a 2-D embedding array) -> stored structs (see :func:`to_item`)."""
    return [to_item(v, f"{field}[{start + i}]") for i, v in enumerate(_as_list(values, field))]


def to_block_ids(values: Any, field: str = "references", start: int = 0) -> list[str]:
    """Target block ids (non-empty strings), one per prediction."""
    out = []
    for i, v in enumerate(_as_list(values, field)):
        if not isinstance(v, str) or not v:
            raise ValueError(f"{field}[{start + i}] must be the target block id (a non-empty string), got {v!r}")
        out.append(str(v))
    return out


def normalize_default_batch(predictions: Any, references: Any) -> tuple[list, list]:
    """``default`` config: images/embeddings and one target block id per prediction."""
    if predictions is None:
        raise ValueError("predictions is missing: give the generated images (or their embeddings)")
    if references is None:
        raise ValueError("references is missing: give the target block id of every prediction")
    preds = to_items(predictions, "predictions")
    refs = to_block_ids(references, "references")
    if len(preds) != len(refs):
        raise ValueError(
            f"predictions has {len(preds)} item(s) but references has {len(refs)}: "
            "give the target block id of every prediction"
        )
    return preds, refs


def normalize_sets_batch(predictions: Any, references: Any) -> tuple[list, list]:
    """``sets`` config: two sets of images/embeddings of any lengths (the shorter is padded)."""
    preds = to_items(predictions, "predictions")
    refs = to_items(references, "references")
    n = max(len(preds), len(refs))
    preds += [dict(EMPTY_ITEM) for _ in range(n - len(preds))]
    refs += [dict(EMPTY_ITEM) for _ in range(n - len(refs))]
    return preds, refs


def normalize_pairs_batch(predictions: Any, references: Any) -> tuple[list, list]:
    """``mfp`` config: generated map images and their target images, paired by position."""
    preds = to_items(predictions, "predictions")
    refs = to_items(references, "references")
    if len(preds) != len(refs):
        raise ValueError(
            f"predictions has {len(preds)} image(s) but references has {len(refs)}: MFP compares pairs "
            "(generated map i with target map i)"
        )
    for field, items in (("predictions", preds), ("references", refs)):
        for i, item in enumerate(items):
            if _kind(item) != "image":
                raise ValueError(f"{field}[{i}] is not an image: MFP compares images (it embeds them with DINO itself)")
    return preds, refs


# -- reading stored items back ------------------------------------------------------------------------


def _kind(item: Mapping[str, Any] | None) -> str | None:
    if not item:
        return None
    if item.get("image") is not None:
        return "image"
    if item.get("embedding") is not None:
        return "embedding"
    return None


def _split(items: Sequence[Mapping[str, Any] | None], field: str) -> tuple[str, list]:
    """Stored items (padding dropped) -> ("image", [bytes | path]) or ("embedding", (n, d) array)."""
    kept = [it for it in items if _kind(it) is not None]
    kinds = {_kind(it) for it in kept}
    if not kept:
        raise ValueError(f"{field} is empty: nothing to score")
    if len(kinds) > 1:
        n_img = sum(_kind(it) == "image" for it in kept)
        raise ValueError(
            f"{field} mixes images ({n_img}) and embeddings ({len(kept) - n_img}); give one kind per computation"
        )
    if kinds == {"embedding"}:
        dims = {len(it["embedding"]) for it in kept}
        if len(dims) > 1:
            raise ValueError(f"{field}: embeddings have different dimensions {sorted(dims)}")
        return "embedding", np.asarray([it["embedding"] for it in kept], dtype=np.float32)
    return "image", [it["image"]["bytes"] if it["image"].get("bytes") else it["image"]["path"] for it in kept]


# -- resources (built once per metric instance) ---------------------------------------------------------


class MetricResources:
    """Benchmarks, encoders and embedding caches a metric instance reuses across computations."""

    def __init__(self) -> None:
        self._benchmarks: dict[str, Any] = {}
        self._encoders: dict[tuple, Any] = {}

    def benchmark(self, benchmark: Any):
        from .benchmark import Benchmark, load_benchmark

        if isinstance(benchmark, Benchmark):
            return benchmark
        key = str(benchmark)
        if key not in self._benchmarks:
            self._benchmarks[key] = load_benchmark(benchmark)
        return self._benchmarks[key]

    def encoder(self, encoder: Any, weights: Any = None, revision: str | None = None, device: Any = None):
        from .encoders import Encoder, EncoderUnavailableError, get_encoder

        if isinstance(encoder, Encoder):
            given = [n for n, v in (("encoder_weights", weights), ("encoder_revision", revision), ("device", device))
                     if v is not None]
            if given:
                raise ValueError(f"{', '.join(given)} cannot be applied to an already built encoder; pass the encoder name")
            return encoder
        name = DEFAULT_ENCODER if encoder is None else str(encoder)
        key = (name, None if weights is None else str(weights), revision, None if device is None else str(device))
        if key not in self._encoders:
            try:
                self._encoders[key] = get_encoder(name, weights=weights, revision=revision, device=device)
            except EncoderUnavailableError as err:
                raise EncoderUnavailableError(
                    f"{err} In the geofidelity metric: compute(..., encoder_weights=<local folder>) or "
                    f"compute(..., encoder='efficientnet-lite0') (the offline encoder; its scores are not "
                    f"comparable with the paper's DINOv2 values)."
                ) from err
        return self._encoders[key]

    @staticmethod
    def cache(cache_dir: Any, use_cache: bool):
        from .encoders import EmbeddingCache

        return EmbeddingCache(cache_dir) if use_cache else None

    def vqa_backend(self, model: Any = None, **options: Any):
        """A GeoDiv VQA backend, built once per (model, options); a built backend is used as it is."""
        from .geodiv.vqa import VQABackend, get_vqa_backend

        if isinstance(model, VQABackend):
            return get_vqa_backend(model)
        backends = self.__dict__.setdefault("_vqa_backends", {})
        key = (None if model is None else str(model), tuple(sorted((k, str(v)) for k, v in options.items())))
        if key not in backends:
            backends[key] = get_vqa_backend(model, **options)
        return backends[key]


def resolve_segmenter(segmenter: Any, weights: Any = None, device: Any = None) -> tuple[Any, str | None]:
    """(segmenter to pass on, reason GAAS is NaN).

    ``None`` -> no GAAS; a name (``"mask2former-vistas"``, ``"segformer-cityscapes"``) ->
    ``get_segmenter(name, weights=weights, device=device)``, whose errors (weights
    unavailable offline, wrong label set) propagate with the weights id named; an object
    with ``segment`` is used as it is.
    """
    from .evaluation import GAAS_UNAVAILABLE

    if segmenter is None:
        return None, GAAS_UNAVAILABLE
    if isinstance(segmenter, str):
        from .segmentation import get_segmenter

        return get_segmenter(segmenter, weights=weights, device=device), None
    if hasattr(segmenter, "segment") and hasattr(segmenter, "config"):
        return segmenter, None
    raise ValueError(f"segmenter must be None, a segmenter name or a Segmenter, got {segmenter!r}")


def _encoder_info(encoder) -> dict[str, Any]:
    return {"encoder": encoder.name, "encoder_config": encoder.config, "encoder_config_hash": encoder.config_hash}


def _fingerprint(benchmark) -> str:
    fp = benchmark.fingerprint  # a property now; a method in older versions
    return fp() if callable(fp) else fp


def _py(value: Any) -> Any:
    """numpy scalars -> Python numbers (NaN stays float NaN)."""
    if isinstance(value, np.generic):
        return value.item()
    return value


# -- config "default": generated panels vs their target blocks ---------------------------------------


def group_panels(
    images_or_embeddings: Any, block_ids: Sequence[str], benchmark, method: str, condition: str
) -> dict[tuple, Any]:
    """Predictions grouped by target block (input order kept) -> evaluate_panels panels.

    Raises:
        ValueError: unknown block ids (all named) or blocks with fewer than 2 predictions.
    """
    unknown = sorted({b for b in block_ids if b not in benchmark})
    if unknown:
        known = benchmark.block_ids
        shown = ", ".join(known[:20]) + (f", ... ({len(known)} in all)" if len(known) > 20 else "")
        raise ValueError(
            f"references name block id(s) not in benchmark {benchmark.name!r}: {', '.join(map(repr, unknown))}; "
            f"known block ids: {shown}"
        )
    rows: dict[str, list[int]] = {}
    for i, bid in enumerate(block_ids):
        rows.setdefault(bid, []).append(i)
    short = {bid: len(ix) for bid, ix in rows.items() if len(ix) < MIN_PANEL_IMAGES}
    if short:
        listed = ", ".join(f"{bid!r} ({n})" for bid, n in sorted(short.items()))
        raise ValueError(
            f"every target block needs at least {MIN_PANEL_IMAGES} predictions (a panel; MMD² and the "
            f"diversity terms need 2 images), but these blocks have fewer: {listed}"
        )
    if isinstance(images_or_embeddings, np.ndarray):
        return {(method, condition, bid): images_or_embeddings[ix] for bid, ix in rows.items()}
    return {(method, condition, bid): [images_or_embeddings[i] for i in ix] for bid, ix in rows.items()}


def _nan_reasons(reasons: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, set[str]] = {}
    for r in reasons:
        out.setdefault(r["column"], set()).add(r["reason"])
    return {col: sorted(v) for col, v in sorted(out.items())}


def compute_default(
    predictions: Sequence[Mapping[str, Any]],
    references: Sequence[str],
    *,
    resources: MetricResources,
    benchmark: Any = "demo",
    encoder: Any = None,
    encoder_weights: Any = None,
    encoder_revision: str | None = None,
    device: Any = None,
    segmenter: Any = None,
    segmenter_weights: Any = None,
    cache_dir: Any = None,
    use_cache: bool = True,
    method: str = "submission",
    condition: str = "default",
    return_per_block: bool = False,
    exclude_copies: bool = False,
    batch_size: int = 32,
    progress: bool = False,
) -> dict[str, Any]:
    """Scores of generated panels against their target blocks (docs/benchmark.md section 5, Metrics), averaged over blocks.

    Predictions are grouped by target block into panels and scored with
    :func:`~geofidelity_bench.evaluation.evaluate_panels`; every score is the NaN-skipping
    mean over blocks (:func:`~geofidelity_bench.evaluation.summarize`).

    Every prediction goes through the copy audit of ``evaluate`` (docs/benchmark.md section 5,
    Copy audit): ``copy_audit`` holds its settings and one record per prediction (input order,
    ``index`` = position in ``predictions``), ``near_copies`` the flagged ones and ``n_copied``
    their count; flagged predictions raise one :class:`CopiedImagesWarning` naming them, as the
    command line warns. ``exclude_copies=True`` scores the panels without them (``evaluate
    --exclude-copies``).
    """
    from .evaluation import METRIC_COLUMNS, RESULT_COLUMNS, evaluate_panels, summarize

    for name, value in (("method", method), ("condition", condition)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string label, got {value!r}")
    seg, gaas_reason = resolve_segmenter(segmenter, segmenter_weights, device)
    kind, data = _split(predictions, "predictions")
    block_ids = list(references)
    bench = resources.benchmark(benchmark)
    panels = group_panels(data, block_ids, bench, method, condition)
    enc = resources.encoder(encoder, encoder_weights, encoder_revision, device)
    if kind == "embedding" and data.shape[1] != enc.dim:
        raise ValueError(
            f"predictions are embeddings of dimension {data.shape[1]}, but encoder {enc.name!r} gives {enc.dim}: "
            "embed with the same encoder the benchmark galleries are embedded with"
        )
    extra = {"segmenter": seg} if seg is not None else {}
    df = evaluate_panels(
        bench, panels, enc, cache=resources.cache(cache_dir, use_cache), batch_size=batch_size, progress=progress,
        exclude_copies=bool(exclude_copies), **extra,
    )
    audit = _audit_by_prediction(df.attrs["copy_audit"], block_ids, data if kind == "image" else None)
    flagged = [r for r in audit["images"] if r["flagged"]]
    summary = summarize(df, ["method", "condition"]).iloc[0]
    out: dict[str, Any] = {col: float(summary[col]) for col in METRIC_COLUMNS}
    out.update(
        n_blocks=int(summary["n_blocks"]),  # blocks with a finite score, as every view counts them
        n_images=int(df["n_generated"].sum()),
        benchmark=bench.name,
        benchmark_fingerprint=_fingerprint(bench),
        method=method,
        condition=condition,
        input_kind=kind,
        **_encoder_info(enc),
        segmenter=None if seg is None else getattr(seg, "name", str(seg)),
        segmenter_config=None if seg is None else getattr(seg, "config", None),
        gaas_unavailable_reason=gaas_reason,
        nan_reasons=_nan_reasons(df.attrs.get("nan_reasons", [])),
        n_copied=len(flagged),
        near_copies=flagged,
        copy_audit=audit,
    )
    if return_per_block:
        out["per_block"] = [{c: _py(row[c]) for c in RESULT_COLUMNS} for row in df.to_dict("records")]
    if flagged:
        warnings.warn(copies_warning(flagged, excluded=bool(exclude_copies)), CopiedImagesWarning, stacklevel=2)
    return out


class CopiedImagesWarning(UserWarning):
    """Some predictions are copies of the benchmark's own photos (the copy audit flagged them)."""


def copies_warning(flagged: Sequence[Mapping[str, Any]], *, excluded: bool = False) -> str:
    """The command line's copy warning (:func:`~geofidelity_bench.near_copies.near_copies_warning`),
    pointing at the metric's result instead of run.json."""
    from .near_copies import near_copies_warning

    text = near_copies_warning(flagged, recorded_in=None)
    how = ("they were left out of the scores (exclude_copies=True)" if excluded
           else "compute(..., exclude_copies=True) scores without them")
    return f"{text} (every one is listed under near_copies in the result; {how})"


def _audit_by_prediction(audit: Mapping[str, Any], block_ids: Sequence[str], items: Sequence[Any] | None) -> dict:
    """evaluate_panels' copy audit with its records in input order, each naming its prediction.

    evaluate_panels audits panel by panel, a panel's images in the order they were grouped
    (:func:`group_panels` keeps the input order within a block), so the k-th record of block b
    is the k-th prediction whose reference is b. A prediction given as bytes or an array is
    named ``predictions[i]`` (a file keeps its path). Panels under the ``anchor`` condition (the
    evaluation's own real-photo rows) are not audited, as in ``evaluate``: no records.
    """
    if not audit["images"]:  # the anchor condition is the benchmark's own photos: not audited (n_audited 0)
        return dict(audit)
    positions: dict[str, list[int]] = {}
    for i, bid in enumerate(block_ids):
        positions.setdefault(bid, []).append(i)
    seen: dict[str, int] = {}
    by_index: dict[int, dict[str, Any]] = {}
    for record in audit["images"]:
        bid = record["block_id"]
        k = seen.get(bid, 0)
        seen[bid] = k + 1
        i = positions[bid][k]
        is_path = items is not None and isinstance(items[i], (str, os.PathLike))
        by_index[i] = {"index": i, **record, "file": str(items[i]) if is_path else f"predictions[{i}]"}
    if sorted(by_index) != list(range(len(block_ids))):  # every prediction is audited exactly once
        raise RuntimeError(f"copy audit covers {len(by_index)} of {len(block_ids)} predictions")
    return {**audit, "images": [by_index[i] for i in range(len(block_ids))]}


# -- config "sets": benchmark-free set fidelity -----------------------------------------------------------


def compute_sets(
    predictions: Sequence[Mapping[str, Any]],
    references: Sequence[Mapping[str, Any]],
    *,
    resources: MetricResources,
    encoder: Any = None,
    encoder_weights: Any = None,
    encoder_revision: str | None = None,
    device: Any = None,
    cache_dir: Any = None,
    use_cache: bool = True,
    batch_size: int = 32,
    progress: bool = False,
) -> dict[str, Any]:
    """CosSim, MMD^2, DCSF and the diversity gap between a generated and a reference set.

    Either set may be images (embedded with ``encoder``) or precomputed embeddings; the
    encoder is built only when some set holds images.
    """
    from . import metrics

    sides = {}
    for field, items in (("predictions", predictions), ("references", references)):
        sides[field] = _split(items, field)
        n = len(sides[field][1])
        if n < 2:
            raise ValueError(f"{field} has {n} item; set fidelity (MMD², DCSF, diversity) needs at least 2 in each set")
    enc = None
    if any(kind == "image" for kind, _ in sides.values()):
        from .encoders import embed_images

        enc = resources.encoder(encoder, encoder_weights, encoder_revision, device)
        cache = resources.cache(cache_dir, use_cache)
    emb = {}
    for field, (kind, data) in sides.items():
        if kind == "image":
            emb[field] = embed_images(enc, data, names=[f"{field}[{i}]" for i in range(len(data))], cache=cache,
                                      batch_size=batch_size, progress=progress)
        else:
            if enc is not None and data.shape[1] != enc.dim:
                raise ValueError(
                    f"{field} are embeddings of dimension {data.shape[1]}, but encoder {enc.name!r} (used for the "
                    f"other set's images) gives {enc.dim}"
                )
            emb[field] = data
    gen, ref = emb["predictions"], emb["references"]
    if gen.shape[1] != ref.shape[1]:
        raise ValueError(f"predictions have dimension {gen.shape[1]} but references have {ref.shape[1]}")
    mmd, reason = metrics.mmd2_with_reason(gen, ref)
    out: dict[str, Any] = {
        "cos_sim": metrics.cos_sim(gen, ref),
        "mmd": mmd,
        "dcsf": metrics.dcsf(gen, ref),
        "diversity_gap": metrics.diversity_gap(gen, ref),
        "diversity_predictions": metrics.diversity(gen),
        "diversity_references": metrics.diversity(ref),
        "n_predictions": int(gen.shape[0]),
        "n_references": int(ref.shape[0]),
        "input_kind": {field: kind for field, (kind, _) in sides.items()},
    }
    if enc is not None:
        out.update(_encoder_info(enc))
    else:
        out.update(encoder=None, encoder_config=None, encoder_config_hash=None)
    out["nan_reasons"] = {"mmd": [reason]} if reason else {}
    return {k: (float(v) if isinstance(v, (float, np.floating)) and not isinstance(v, bool) else v) for k, v in out.items()}


# -- config "mfp": Map Feature Perception of paired map tiles -------------------------------------------


def compute_mfp(
    predictions: Sequence[Mapping[str, Any]],
    references: Sequence[Mapping[str, Any]],
    *,
    resources: MetricResources,
    model: Any = None,
    image_size: int = 224,
    device: Any = None,
    batch_size: int = 8,
    revision: str | None = None,
    global_weight: float = 10.0,
    spatial_weight: float = 1.0,
    pixel_metrics: bool = True,
    resize_pixel_metrics: bool = False,
) -> dict[str, Any]:
    """MFP global and spatial terms, loss, SSIM and PSNR (docs/benchmark.md section 10, Map Feature Perception (MFP)) of paired map images.

    A thin wrapper over :func:`geofidelity_bench.mfp.mfp_compute` (``model``: Hub id or
    local folder of a DINO ViT, default ``facebook/dino-vitb8``). Pairs of different sizes are
    refused unless ``resize_pixel_metrics=True`` (the generated image is resized to its target's
    size for SSIM and PSNR, each such pair marked ``pixel_resized`` in ``per_pair``).
    """
    from .mfp import mfp_compute

    _, generated = _split(predictions, "predictions")
    _, targets = _split(references, "references")
    return mfp_compute(generated, targets, model=model, image_size=image_size, device=device,
                       batch_size=batch_size, revision=revision, global_weight=global_weight,
                       spatial_weight=spatial_weight, pixel_metrics=pixel_metrics,
                       resize_pixel_metrics=resize_pixel_metrics)


# -- config "geodiv": GeoDiv SEVI / VDI diversity per group ---------------------------------------------


def normalize_geodiv_batch(predictions: Any, references: Any) -> tuple[list, list]:
    """``geodiv`` config: images and one group label (a non-empty string) per image."""
    if predictions is None:
        raise ValueError("predictions is missing: give the images")
    if references is None:
        raise ValueError("references is missing: give the group label (country, city, model, ...) of every image")
    preds = to_items(predictions, "predictions")
    refs = []
    for i, v in enumerate(_as_list(references, "references")):
        if not isinstance(v, str) or not v:
            raise ValueError(f"references[{i}] must be the image's group label (a non-empty string), got {v!r}")
        refs.append(v)
    if len(preds) != len(refs):
        raise ValueError(
            f"predictions has {len(preds)} item(s) but references has {len(refs)}: give the group label of every image"
        )
    for i, item in enumerate(preds):
        if _kind(item) != "image":
            raise ValueError(f"predictions[{i}] is not an image: GeoDiv asks a VQA model about images")
    return preds, refs


def compute_geodiv(
    predictions: Sequence[Mapping[str, Any]],
    references: Sequence[str],
    *,
    resources: MetricResources,
    vqa_model: Any = None,
    question_bank: Any = None,
    device: Any = None,
    cache_dir: Any = None,
    use_cache: bool = True,
    vqa_revision: str | None = None,
    dtype: str | None = None,
    batch_size: int | None = None,
    max_new_tokens: int | None = None,
    max_image_side: int | None = None,
    group_name: str = "group",
    return_answers: bool = False,
    progress: bool = False,
) -> dict[str, Any]:
    """GeoDiv tables (docs/benchmark.md section 9, GeoDiv) of images grouped by their labels.

    A thin wrapper over :func:`geofidelity_bench.geodiv.answer_questions` and
    :func:`geofidelity_bench.geodiv.diversity_tables` (``group_by = group_name``).
    ``vqa_model``: a Hub id or local folder of an image-text-to-text model (default
    :data:`geofidelity_bench.geodiv.DEFAULT_VQA_MODEL`) or a built ``VQABackend``;
    ``question_bank``: a JSON/YAML path (default: the shipped street bank); ``cache_dir``:
    the VQA answer cache (``use_cache=False`` to bypass it).
    """
    from .geodiv import AnswerCache, GeoDivImage, answer_questions, diversity_tables, load_question_bank

    if not isinstance(group_name, str) or not group_name:
        raise ValueError(f"group_name must be a non-empty string, got {group_name!r}")
    _, sources = _split(predictions, "predictions")
    labels = list(references)
    bank = load_question_bank(question_bank)
    options = {k: v for k, v in (("revision", vqa_revision), ("device", device), ("dtype", dtype),
                                 ("batch_size", batch_size), ("max_new_tokens", max_new_tokens),
                                 ("max_image_side", max_image_side)) if v is not None}
    backend = resources.vqa_backend(vqa_model, **options)
    images = [GeoDivImage(name=f"predictions[{i}]", source=src, labels={group_name: label})
              for i, (src, label) in enumerate(zip(sources, labels))]
    cache = AnswerCache(cache_dir) if use_cache else None
    answers = answer_questions(images, bank, backend, cache=cache, progress=progress)
    tables = diversity_tables(answers, bank, group_name)
    out: dict[str, Any] = tables.to_dict()
    n_unparseable = int((answers["status"] == "unparseable").sum())
    out.update(
        n_images=len(images),
        n_unparseable=n_unparseable,
        vqa_model=backend.model_id,
        vqa_config=backend.config,
        vqa_config_hash=backend.config_hash,
        answer_stats=answers.attrs["answer_stats"],
    )
    if return_answers:
        out["answers"] = [
            {k: _py(v) for k, v in row.items()}
            for row in answers[["image", "question_id", "reply", "status", "choice", group_name]].to_dict("records")
        ]
    return out


__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_ENCODER",
    "METRIC_NAME",
    "CopiedImagesWarning",
    "MetricResources",
    "compute_default",
    "compute_geodiv",
    "compute_mfp",
    "compute_sets",
    "group_panels",
    "load_metric",
    "metric_path",
    "normalize_default_batch",
    "normalize_geodiv_batch",
    "normalize_pairs_batch",
    "normalize_sets_batch",
    "resolve_segmenter",
    "to_item",
    "to_items",
]
