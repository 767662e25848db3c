"""Map Feature Perception of image files (docs/benchmark.md section 10, Map Feature Perception (MFP)): pairing, scoring a table of pairs, summaries.

The MFP family's runner, under the ``geofidelity-bench mfp`` command and the evaluate module's
``mfp`` config:

* pairing: :func:`pair_folders` matches ``gen/r1/t03.png`` with ``gt/r1/t03.png`` by relative
  path (the extension may differ: ``t03.jpg`` pairs with ``t03.png``); :func:`read_pairs_csv`
  reads an explicit ``generated,target`` CSV. Both raise :class:`PairingError`, naming the files;
* :func:`mfp_scores`: one row per pair with the MFP terms of
  :mod:`geofidelity_bench.metrics.mfp` (features from
  :class:`~geofidelity_bench.encoders.dino_vit_keys.DinoViTFeatureExtractor`) and SSIM/PSNR of
  :mod:`geofidelity_bench.metrics.image_quality`. SSIM/PSNR need equal sizes: pairs of different
  sizes are a :class:`PixelSizeError` (:func:`check_pixel_sizes`, from the image headers, before
  the model loads) unless ``resize_pixel_metrics=True`` resizes the generated image to its
  target's size (bicubic) and marks the row ``pixel_resized`` (docs/benchmark.md section 10);
* :func:`summarize_scores` (dataset means) and :func:`mfp_compute` (plain dict, for the evaluate module);
* :func:`mfp_loss`: the training loss of :mod:`geofidelity_bench.metrics.mfp` given the DINO-ViT extractor;
* :func:`write_mfp_folder`: ``mfp.csv``, ``summary.json`` (means, model config, parameters,
  versions) and ``mfp.png`` (:func:`plot_mfp`), what the command writes.

Importing this module loads neither torch nor transformers (scoring does, when called).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from PIL import Image

from geofidelity_bench.errors import GeoFidelityError
from geofidelity_bench.images import load_image
from geofidelity_bench.metrics.image_quality import PSNR_CONFIG, SSIM_CONFIG, psnr, ssim
from geofidelity_bench.metrics.mfp import (
    DEFAULT_IMAGE_SIZE,
    GLOBAL_WEIGHT,
    PIXEL_COLUMNS,
    SPATIAL_WEIGHT,
    TERM_COLUMNS,
    combine_loss,
    pair_terms,
)

if TYPE_CHECKING:
    from geofidelity_bench.encoders.dino_vit_keys import DinoViTFeatureExtractor

class PairingError(GeoFidelityError, ValueError):
    """Generated images and targets cannot be paired (missing folder or file, unmatched names, a bad CSV)."""


class PixelSizeError(GeoFidelityError, ValueError):
    """SSIM/PSNR were asked for pairs of different sizes without ``resize_pixel_metrics``; the message
    names the pairs and their sizes."""


#: What ``resize_pixel_metrics=True`` does to a pair of different sizes (docs/benchmark.md section 10).
RESIZE_NOTE = ("the generated image is resized to its target's size (PIL bicubic) before SSIM and PSNR; "
               "the target is never resized")
#: The per-pair column that marks those pairs (True: SSIM/PSNR of the resized generated image).
RESIZED_COLUMN = "pixel_resized"


# -- pairing -----------------------------------------------------------------------------------

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".gif")
_MAX_LISTED = 10


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_LISTED])
    return shown + (f" (and {len(names) - _MAX_LISTED} more)" if len(names) > _MAX_LISTED else "")


def _image_files(folder: Path, flag: str) -> dict[str, Path]:
    """{relative path without extension (posix): file} of the images under ``folder``, recursively."""
    if not folder.exists():
        raise PairingError(f"{flag} folder not found: {folder}")
    if not folder.is_dir():
        raise PairingError(f"{flag} is not a folder: {folder}")
    found: dict[str, Path] = {}
    clashes: list[str] = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.suffix.lower() not in IMAGE_SUFFIXES or path.name.startswith("."):
            continue
        rel = path.relative_to(folder)
        key = rel.with_suffix("").as_posix()
        if key in found:
            clashes.append(f"{found[key].relative_to(folder).as_posix()} / {rel.as_posix()}")
            continue
        found[key] = path
    if clashes:
        raise PairingError(f"{flag} {folder} has images that differ only by extension, so pairing is ambiguous: "
                       f"{_listing(clashes)}")
    if not found:
        raise PairingError(f"no images ({', '.join(IMAGE_SUFFIXES)}) found in {flag} folder {folder}")
    return found


def pair_folders(generated: str | os.PathLike, targets: str | os.PathLike) -> list[tuple[str, Path, Path]]:
    """[(pair name, generated file, target file)] matched by relative path (extension ignored).

    Raises:
        PairingError: a missing or empty folder, unequal counts, or names without a partner (listed).
    """
    gen_dir, tgt_dir = Path(generated), Path(targets)
    gen, tgt = _image_files(gen_dir, "--generated"), _image_files(tgt_dir, "--targets")
    only_gen = [gen[k].relative_to(gen_dir).as_posix() for k in sorted(set(gen) - set(tgt))]
    only_tgt = [tgt[k].relative_to(tgt_dir).as_posix() for k in sorted(set(tgt) - set(gen))]
    if only_gen or only_tgt:
        parts = [f"--generated has {len(gen)} images and --targets has {len(tgt)}"
                 if len(gen) != len(tgt) else "file names do not match"]
        if only_gen:
            parts.append(f"in {gen_dir} without a target: {_listing(only_gen)}")
        if only_tgt:
            parts.append(f"in {tgt_dir} without a generated image: {_listing(only_tgt)}")
        raise PairingError("; ".join(parts) + ". Pairs are matched by relative path (use --pairs CSV to pair explicitly)")
    return [(gen[k].relative_to(gen_dir).as_posix(), gen[k], tgt[k]) for k in sorted(gen)]


def read_pairs_csv(path: str | os.PathLike, generated: str | None = None,
                   targets: str | None = None) -> list[tuple[str, Path, Path]]:
    """[(pair name, generated file, target file)] from a CSV with columns ``generated,target``.

    Relative paths are resolved against ``generated`` / ``targets`` when given, else against the
    CSV's folder. Raises PairingError for a missing file, missing columns, no rows or missing images.
    """
    csv_path = Path(path)
    if not csv_path.is_file():
        raise PairingError(f"--pairs file not found: {csv_path}")
    with open(csv_path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        columns = [c.strip() for c in (reader.fieldnames or [])]
        missing = [c for c in ("generated", "target") if c not in columns]
        if missing:
            raise PairingError(f"--pairs {csv_path} needs columns 'generated' and 'target'; missing {missing}, "
                           f"found {columns}")
        rows = [{(k or "").strip(): (v or "").strip() for k, v in row.items()} for row in reader]
    if not rows:
        raise PairingError(f"--pairs {csv_path} has no rows")
    gen_base = Path(generated) if generated else csv_path.parent
    tgt_base = Path(targets) if targets else csv_path.parent
    pairs, absent, empty = [], [], []
    for line, row in enumerate(rows, start=2):
        if not row["generated"] or not row["target"]:
            empty.append(str(line))
            continue
        g, t = Path(row["generated"]), Path(row["target"])
        g, t = (g if g.is_absolute() else gen_base / g), (t if t.is_absolute() else tgt_base / t)
        absent += [str(p) for p in (g, t) if not p.is_file()]
        pairs.append((row["generated"], g, t))
    if empty:
        raise PairingError(f"--pairs {csv_path}: empty generated/target on line(s) {_listing(empty)}")
    if absent:
        raise PairingError(f"--pairs {csv_path} names image files that do not exist: {_listing(absent)}")
    return pairs


# -- scoring image files -----------------------------------------------------------------------


def _image_list(images: Any, what: str) -> list:
    if isinstance(images, (str, bytes, bytearray, os.PathLike, Image.Image)):
        return [images]
    if isinstance(images, np.ndarray):
        return [images] if images.ndim in (2, 3) else list(images)
    try:
        return list(images)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of images, got {type(images).__name__}") from None


def _labels(items: Sequence, given: Sequence[str] | None, what: str) -> list[str]:
    if given is not None:
        labels = [str(n) for n in given]
        if len(labels) != len(items):
            raise ValueError(f"got {len(labels)} names for {len(items)} {what} images")
        return labels
    return [str(s) if isinstance(s, (str, os.PathLike)) else f"{what}[{i}]" for i, s in enumerate(items)]


def _oriented_size(item: Any) -> tuple[int, int] | None:
    """(width, height) of an image as :func:`~geofidelity_bench.images.load_image` will see it (EXIF
    orientation applied), read from the header only; None when that cannot be done cheaply (the
    decoded size is checked again while scoring)."""
    import io

    if isinstance(item, np.ndarray):
        return (int(item.shape[1]), int(item.shape[0])) if item.ndim in (2, 3) else None
    try:
        if isinstance(item, Image.Image):
            img, close = item, False
        elif isinstance(item, (str, os.PathLike)):
            img, close = Image.open(item), True
        elif isinstance(item, (bytes, bytearray)):
            img, close = Image.open(io.BytesIO(item)), True
        else:
            return None
        try:
            width, height = img.size
            orientation = img.getexif().get(0x0112)  # EXIF Orientation: 5-8 swap the axes
        finally:
            if close:
                img.close()
    except Exception:  # noqa: BLE001 - an undecodable image is named by load_image when scored
        return None
    return (height, width) if orientation in (5, 6, 7, 8) else (width, height)


def _size_text(size: tuple[int, int]) -> str:
    return f"{size[0]}x{size[1]}"


def _size_error(mismatched: list[tuple[str, tuple[int, int], tuple[int, int]]], n_pairs: int) -> PixelSizeError:
    listed = _listing([f"{name} {_size_text(g)} vs target {_size_text(t)}" for name, g, t in mismatched])
    return PixelSizeError(
        f"SSIM and PSNR need images of equal size, but {len(mismatched)} of {n_pairs} pair(s) differ: {listed}. "
        "Pass --resize-pixel-metrics (resize_pixel_metrics=True in Python) to compare them after resizing the "
        f"generated image to its target's size (bicubic; each such pair is marked in the {RESIZED_COLUMN!r} column), "
        "or --no-pixel-metrics (pixel_metrics=False) to leave SSIM and PSNR out"
    )


def check_pixel_sizes(generated: Any, targets: Any, names: Sequence[str] | None = None, *,
                      resize_pixel_metrics: bool = False) -> list[int]:
    """The positions of the pairs whose images differ in size (EXIF orientation applied), read from
    the image headers, before any model is loaded.

    Raises:
        PixelSizeError: some pairs differ and ``resize_pixel_metrics`` is False; the message names
            every such pair (the first ten) with both sizes, and the two ways on.
    """
    gen_items, tgt_items = _image_list(generated, "generated"), _image_list(targets, "targets")
    labels = _labels(gen_items, names, "generated")
    mismatched = []
    for i, (g, t) in enumerate(zip(gen_items, tgt_items)):
        gs, ts = _oriented_size(g), _oriented_size(t)
        if gs is not None and ts is not None and gs != ts:
            mismatched.append((i, gs, ts))
    if mismatched and not resize_pixel_metrics:
        raise _size_error([(labels[i], gs, ts) for i, gs, ts in mismatched], len(gen_items))
    return [i for i, _, _ in mismatched]


def mfp_scores(
    generated: Any,
    targets: Any,
    extractor: DinoViTFeatureExtractor | None = None,
    *,
    model: str | os.PathLike | None = None,
    revision: str | None = None,
    image_size: int = DEFAULT_IMAGE_SIZE,
    device: Any | None = None,
    batch_size: int = 8,
    global_weight: float = GLOBAL_WEIGHT,
    spatial_weight: float = SPATIAL_WEIGHT,
    names: Sequence[str] | None = None,
    target_names: Sequence[str] | None = None,
    pixel_metrics: bool = True,
    resize_pixel_metrics: bool = False,
    progress: bool | None = None,
    num_workers: int | None = None,
):
    """MFP terms (and SSIM/PSNR) for paired images; one row per pair.

    Args:
        generated, targets: equally long sequences of images (paths, PIL images, encoded bytes or
            uint8 arrays), paired by position.
        extractor: a ready :class:`DinoViTFeatureExtractor`; built from ``model``/``revision``/
            ``image_size``/``device`` when None (passing both ``extractor`` and ``model`` is an error).
        batch_size: pairs per forward call (it does not change the result beyond float noise).
        global_weight, spatial_weight: weights of the ``loss`` column.
        names: the ``pair`` column and how generated images are called in errors (default: the
            path, or ``generated[i]``); ``target_names`` likewise for targets.
        pixel_metrics: also compute ``ssim`` and ``psnr`` (they need a generated image and its
            target of equal size).
        resize_pixel_metrics: for a pair of different sizes, resize the generated image to the
            target's size (PIL bicubic) before SSIM/PSNR, and mark the row ``pixel_resized=True``;
            without it such a pair is a :class:`PixelSizeError`, raised before the model runs
            (the sizes are read from the image headers).
        num_workers: threads decoding and preprocessing images ahead of the model (default: the
            cores this process may use; 0: in the calling thread); it changes no number.

    Returns:
        ``pandas.DataFrame`` with columns ``pair, global_score, spatial_distance, spatial_mse, loss``
        (+ ``ssim, psnr, pixel_resized``); ``attrs`` holds ``config`` (extractor), ``parameters``
        (with ``resize_pixel_metrics``) and ``n_pixel_resized``.

    Raises:
        PixelSizeError: pairs of different sizes with ``pixel_metrics`` and without
            ``resize_pixel_metrics`` (all named).
        ValueError: unequal counts, empty input, bad arguments.
        ImageDecodeError: an image cannot be decoded; the message names it.
    """
    import pandas as pd
    import torch
    from tqdm.auto import tqdm

    gen_items, tgt_items = _image_list(generated, "generated"), _image_list(targets, "targets")
    if len(gen_items) != len(tgt_items):
        raise ValueError(f"got {len(gen_items)} generated images but {len(tgt_items)} targets; MFP needs pairs")
    if not gen_items:
        raise ValueError("no image pairs to score")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    gen_labels = _labels(gen_items, names, "generated")
    tgt_labels = _labels(tgt_items, target_names, "target")
    if pixel_metrics:  # before the model is loaded: sizes from the headers
        check_pixel_sizes(gen_items, tgt_items, gen_labels, resize_pixel_metrics=resize_pixel_metrics)
    if extractor is None:
        from geofidelity_bench.encoders.dino_vit_keys import DinoViTFeatureExtractor

        extractor = DinoViTFeatureExtractor(model, revision=revision, image_size=image_size, device=device)
    elif model is not None:
        raise ValueError("pass either extractor= or model=, not both")
    if progress is None:
        progress = len(gen_items) > 4 * batch_size

    from contextlib import closing

    from geofidelity_bench.encoders.base import DeviceTransfers
    from geofidelity_bench.prefetch import ordered_map, prefetch_items, resolve_num_workers

    transfers = DeviceTransfers(str(extractor._mean.device))

    def prepared(task: tuple[bool, int]):
        # in a worker thread: decode, preprocess, and (for CUDA) copy into page-locked memory once
        items, labels = (gen_items, gen_labels) if task[0] else (tgt_items, tgt_labels)
        image = load_image(items[task[1]], name=labels[task[1]])
        return image, transfers.host_array(extractor.preprocessing(image))

    # Tasks in the serial loop's order (a batch's generated images, then its targets), so that the
    # first bad image named is the same whatever the number of workers.
    starts = range(0, len(gen_items), batch_size)
    tasks = [(is_gen, i) for start in starts for is_gen in (True, False)
             for i in range(start, min(start + batch_size, len(gen_items)))]
    workers = resolve_num_workers(num_workers)
    columns: dict[str, list] = {c: [] for c in TERM_COLUMNS + (PIXEL_COLUMNS + (RESIZED_COLUMN,)
                                                               if pixel_metrics else ())}

    def submit(gen_arrs, tgt_arrs):
        """Queues one batch (copies, both forwards, the terms) and starts copying the terms back."""
        with torch.inference_mode():
            terms = pair_terms(extractor(transfers.send(gen_arrs)), extractor(transfers.send(tgt_arrs)))
        names = list(terms)
        return transfers.fetch([terms[k] for k in names], keep=(gen_arrs, tgt_arrs),
                               then=lambda hosts: {k: v.double().numpy() for k, v in zip(names, hosts)})

    def read(start: int, stop: int, gen_imgs, tgt_imgs, pending) -> None:
        terms = pending.result()
        loss = combine_loss(terms["global_score"], terms["spatial_mse"], global_weight=global_weight,
                            spatial_weight=spatial_weight)
        for key in ("global_score", "spatial_distance", "spatial_mse"):
            columns[key].extend(float(v) for v in terms[key])
        columns["loss"].extend(float(v) for v in loss)
        if pixel_metrics:
            for i, g, t in zip(range(start, stop), gen_imgs, tgt_imgs):
                resized = g.size != t.size
                if resized:  # a size the headers did not tell (e.g. an image given as another object)
                    if not resize_pixel_metrics:
                        raise _size_error([(gen_labels[i], g.size, t.size)], len(gen_items))
                    g = g.resize(t.size, resample=Image.Resampling.BICUBIC)
                g_arr, t_arr = np.asarray(g), np.asarray(t)  # decoded RGB (load_image): metrics take arrays
                columns["ssim"].append(ssim(g_arr, t_arr))
                columns["psnr"].append(psnr(g_arr, t_arr))
                columns[RESIZED_COLUMN].append(resized)
        bar.update(stop - start)

    results = ordered_map(prepared, tasks, num_workers=workers, ahead=prefetch_items(workers, 2 * batch_size))
    in_flight = None  # the batch submitted last: read (and its pixel metrics computed) after the next is submitted
    with closing(results), tqdm(total=len(gen_items), desc="MFP", unit="pair", disable=not progress) as bar:
        for start in starts:
            stop = min(start + batch_size, len(gen_items))
            gen_imgs, gen_arrs = zip(*[next(results) for _ in range(start, stop)])
            tgt_imgs, tgt_arrs = zip(*[next(results) for _ in range(start, stop)])
            submitted = (start, stop, gen_imgs, tgt_imgs, submit(gen_arrs, tgt_arrs))
            if in_flight is not None:
                read(*in_flight)
            in_flight = submitted
        if in_flight is not None:
            read(*in_flight)

    df = pd.DataFrame({"pair": gen_labels, **columns})
    df.attrs["config"] = extractor.config
    df.attrs["parameters"] = {
        "global_weight": float(global_weight), "spatial_weight": float(spatial_weight), "batch_size": int(batch_size),
        "num_workers": workers, "loss": "global_weight * (1 - global_score) + spatial_weight * spatial_mse",
        "pixel_metrics": bool(pixel_metrics),
    }
    if pixel_metrics:
        df.attrs["parameters"]["resize_pixel_metrics"] = bool(resize_pixel_metrics)
        df.attrs["n_pixel_resized"] = int(sum(columns[RESIZED_COLUMN]))
        df.attrs["ssim"] = dict(SSIM_CONFIG)
        df.attrs["psnr"] = dict(PSNR_CONFIG)
    return df


def mfp_loss(model: Any | None = None, *, revision: str | None = None, image_size: int = DEFAULT_IMAGE_SIZE,
             device: Any | None = None, cls_source: str = "last_block", **loss_options: Any):
    """MFP as a training loss with the benchmark's extractor: a
    :class:`~geofidelity_bench.metrics.mfp.MapFeaturePerceptionLoss` given the DINO-ViT extractor
    (:class:`~geofidelity_bench.encoders.dino_vit_keys.DinoViTFeatureExtractor` of ``model``, default
    ``facebook/dino-vitb8``). The loss itself is math (``metrics/``) and imports no model; this is
    where the two meet.

    Args:
        model, revision, image_size, device, cls_source: the extractor's (see ``DinoViTFeatureExtractor``).
        loss_options: the loss's own (``global_weight``, ``spatial_weight``, ``l1_weight``, ``input_range``).
    """
    from geofidelity_bench.encoders.dino_vit_keys import DinoViTFeatureExtractor
    from geofidelity_bench.metrics.mfp import MapFeaturePerceptionLoss

    return MapFeaturePerceptionLoss(model=model, revision=revision, image_size=image_size, device=device,
                                    cls_source=cls_source, extractor_factory=DinoViTFeatureExtractor,
                                    **loss_options)


def summarize_scores(df) -> dict[str, Any]:
    """Dataset means of the per-pair columns. PSNR's mean is over pairs with a finite PSNR
    (identical pairs have ``inf``); ``psnr_infinite_pairs`` counts the others."""
    means: dict[str, Any] = {}
    for col in TERM_COLUMNS + PIXEL_COLUMNS:
        if col not in df.columns:
            continue
        values = np.asarray(df[col], dtype=np.float64)
        finite = values[np.isfinite(values)]
        means[col] = float(finite.mean()) if finite.size else None
    out: dict[str, Any] = {"n_pairs": int(len(df)), "means": means}
    if "psnr" in df.columns:
        out["psnr_infinite_pairs"] = int(np.isinf(np.asarray(df["psnr"], dtype=np.float64)).sum())
    return out


def mfp_compute(
    predictions: Any,
    references: Any,
    model: str | os.PathLike | DinoViTFeatureExtractor | None = None,
    image_size: int = DEFAULT_IMAGE_SIZE,
    device: Any | None = None,
    batch_size: int = 8,
    *,
    revision: str | None = None,
    global_weight: float = GLOBAL_WEIGHT,
    spatial_weight: float = SPATIAL_WEIGHT,
    pixel_metrics: bool = True,
    resize_pixel_metrics: bool = False,
) -> dict[str, Any]:
    """Entry point for the ``mfp`` config of the evaluate module: paired images in, plain dict out.

    Args:
        predictions: generated images; references: their targets (same length, paired by position).
        model: Hub id, local ``save_pretrained`` folder, or a ready :class:`DinoViTFeatureExtractor`
            (default ``facebook/dino-vitb8``).
        pixel_metrics, resize_pixel_metrics: as in :func:`mfp_scores` (pairs of different sizes are
            a :class:`PixelSizeError` unless resized).

    Returns:
        ``{"global_score", "spatial_distance", "spatial_mse", "loss", "ssim", "psnr"}`` (dataset
        means; PSNR over finite pairs) plus ``n_pairs``, ``psnr_infinite_pairs``, ``per_pair``
        (a list per column, in input order; ``pixel_resized`` as booleans) and ``config`` (extractor
        config, image size, weights, ``n_pixel_resized``).
        All values are JSON-serializable except that per-pair PSNR may be ``inf``.
    """
    from geofidelity_bench.encoders.dino_vit_keys import DinoViTFeatureExtractor

    extractor = model if isinstance(model, DinoViTFeatureExtractor) else None
    df = mfp_scores(
        predictions, references, extractor,
        model=None if extractor is not None else model, revision=revision, image_size=image_size, device=device,
        batch_size=batch_size, global_weight=global_weight, spatial_weight=spatial_weight,
        pixel_metrics=pixel_metrics, resize_pixel_metrics=resize_pixel_metrics, progress=False,
    )
    summary = summarize_scores(df)
    out: dict[str, Any] = dict(summary["means"])
    out["n_pairs"] = summary["n_pairs"]
    if "psnr_infinite_pairs" in summary:
        out["psnr_infinite_pairs"] = summary["psnr_infinite_pairs"]
    out["per_pair"] = {c: [bool(v) if c == RESIZED_COLUMN else float(v) for v in df[c]]
                       for c in df.columns if c != "pair"}
    cfg = df.attrs["config"]
    out["config"] = {
        "model": cfg,
        "image_size": cfg["image_size"],
        **df.attrs["parameters"],
        **({"ssim": df.attrs["ssim"], "psnr": df.attrs["psnr"], "n_pixel_resized": df.attrs["n_pixel_resized"]}
           if pixel_metrics else {}),
    }
    return out


#: The directions of the per-pair columns (recorded in summary.json).
DIRECTIONS = {"global_score": "higher is better (1 = identical CLS)", "spatial_distance": "lower is better",
              "spatial_mse": "lower is better", "loss": "lower is better", "ssim": "higher is better",
              "psnr": "higher is better"}


def write_mfp_folder(
    df,
    pairs: Sequence[tuple[str, Path, Path]],
    out_dir: str | os.PathLike,
    *,
    extractor: DinoViTFeatureExtractor,
    pairing: str,
    generated: str | None = None,
    targets: str | None = None,
    pairs_csv: str | None = None,
    command: str | None = None,
    started: float | None = None,
) -> dict[str, Any]:
    """Writes ``mfp.csv``, ``summary.json`` and ``mfp.png`` for the scores of ``pairs``; returns the summary.

    Args:
        df: :func:`mfp_scores` of ``pairs`` (in their order); the ``generated`` and ``target``
            paths are inserted as its 2nd and 3rd columns.
        pairs: ``(name, generated path, target path)`` (:func:`pair_folders`, :func:`read_pairs_csv`).
        out_dir: the output folder (created).
        extractor: the extractor that scored them (its config and device are recorded).
        pairing, generated, targets, pairs_csv: how the pairs were found (recorded).
        command: the command line to record; started: ``time.time()`` at the start (for ``elapsed_s``).
    """
    import json
    import time

    from .atomic import atomic_write
    from .provenance import library_versions, utc_timestamp

    started = time.time() if started is None else started
    df.insert(1, "generated", [str(g) for _, g, _ in pairs])
    df.insert(2, "target", [str(t) for _, _, t in pairs])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "metric": "Map Feature Perception (MFP), docs/benchmark.md section 10, Map Feature Perception (MFP)",
        "command": command,
        "created_at": utc_timestamp(),
        **summarize_scores(df),
        "directions": dict(DIRECTIONS),
        "image_size": extractor.image_size,
        "model": extractor.config,
        "parameters": {
            **df.attrs["parameters"],
            "pairing": pairing,
            "generated": generated,
            "targets": targets,
            "pairs_csv": pairs_csv,
            "device": extractor.device,
        },
        "ssim": df.attrs.get("ssim"),
        "psnr": df.attrs.get("psnr"),
        "n_pixel_resized": df.attrs.get("n_pixel_resized"),
        "pixel_resize": RESIZE_NOTE if df.attrs.get("n_pixel_resized") else None,
        "versions": library_versions(),
        "elapsed_s": round(time.time() - started, 2),
        "files": ["mfp.csv", "summary.json", "mfp.png"],
    }
    atomic_write(out / "mfp.csv", lambda p: df.to_csv(p, index=False))
    atomic_write(out / "mfp.png", lambda p: plot_mfp(p, df))
    atomic_write(out / "summary.json",
                 lambda p: p.write_text(json.dumps(summary, indent=2, default=str), encoding="utf-8"))
    return summary


def plot_mfp(path: str | os.PathLike, df) -> None:
    """Writes :func:`mfp_figure` of ``df`` as a PNG."""
    import matplotlib.pyplot as plt

    fig = mfp_figure(df)
    fig.savefig(path, dpi=100, format="png")  # explicit: the temporary name ends in .tmp
    plt.close(fig)


def plain_tick_labels(values: Sequence[float]) -> list[str]:
    """Tick labels that each read as their own value: no offset (``1e-5+9.999e-1``) and no shared
    multiplier (``1e-7``) for the axis.

    Fixed-point with as many decimals as the spacing of the ticks needs (``0.999984``); when every
    tick is below 1e-4 in size, each label in e-notation with as many digits as that spacing
    needs (``1.2e-07``). The digits grow until neighbouring labels differ and every label is
    within a hundredth of the spacing of its tick."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return []
    steps = np.diff(np.unique(v))
    step = float(steps.min()) if steps.size else (abs(float(v[0])) or 1.0)
    biggest = float(np.abs(v).max())
    scientific = 0 < biggest < 1e-4
    if scientific:
        digits = max(0, int(np.floor(np.log10(biggest))) - int(np.floor(np.log10(step))))
    else:
        digits = max(0, -int(np.floor(np.log10(step))))
    for extra in range(12):
        fmt = f"{{:.{digits + extra}{'e' if scientific else 'f'}}}"
        labels = [fmt.format(x) for x in v]
        labels = [t[1:] if t.startswith("-") and float(t) == 0 else t for t in labels]  # no "-0.00"
        if len(set(labels)) == len(set(v.tolist())) and all(
                abs(float(t) - x) <= step / 100 for t, x in zip(labels, v)):
            return labels
    return [repr(float(x)) for x in v]


def _plain_formatter():
    """A matplotlib tick formatter writing :func:`plain_tick_labels` (no offset text on the axis)."""
    from matplotlib.ticker import Formatter

    class PlainFormatter(Formatter):
        def format_ticks(self, values):
            return plain_tick_labels(values)

        def __call__(self, x, pos=None):  # one value on its own (e.g. a cursor readout)
            return f"{x:.10g}"

        def get_offset(self):
            return ""

    return PlainFormatter()


def mfp_figure(df):
    """Histograms of the per-pair terms (a matplotlib figure, Agg backend; the caller closes it).

    The pair-count axes have integer ticks; the value axes plain labels (:func:`plain_tick_labels`:
    G near 1 reads ``0.99998``, never an offset ``1e-5+9.999e-1``); each title says whether higher or
    lower is better; the PSNR panel says how many identical pairs (PSNR ``inf``) it leaves out, and
    the SSIM/PSNR panels how many pairs were resized (``pixel_resized``)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    panels = [
        ("global_score", "global score G (higher better)"),
        ("spatial_distance", "spatial distance ||dS||_F (lower better)"),
        ("spatial_mse", "spatial MSE (lower better)"),
        ("loss", "MFP loss (lower better)"),
        ("ssim", "SSIM (higher better)"),
        ("psnr", "PSNR dB (higher better)"),
    ]
    panels = [p for p in panels if p[0] in df.columns]
    n_resized = int(np.asarray(df[RESIZED_COLUMN], dtype=bool).sum()) if RESIZED_COLUMN in df.columns else 0
    fig, axes = plt.subplots(2, 3, figsize=(12, 6.5))
    for ax, (col, title) in zip(axes.flat, panels):
        values = np.asarray(df[col], dtype=np.float64)
        n_inf = int(np.isinf(values).sum())
        values = values[np.isfinite(values)]
        if values.size:
            ax.hist(values, bins=min(30, max(5, values.size)), color="#4C72B0", edgecolor="white")
            ax.axvline(float(values.mean()), color="#C44E52", linestyle="--", label=f"mean {values.mean():.6g}")
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no finite values", ha="center", va="center", transform=ax.transAxes)
            ax.set_xticks([])  # no value axis to read
        lines = [title]
        if col == "psnr":
            lines.append(f"{values.size} finite pair(s); {n_inf} identical pair(s) (PSNR = inf) left out")
        if col in PIXEL_COLUMNS and n_resized:
            lines.append(f"{n_resized} pair(s) with the generated image resized (bicubic)")
        ax.set_title("\n".join(lines), fontsize=9)
        ax.set_ylabel("pairs", fontsize=8)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        if values.size:
            ax.xaxis.set_major_locator(MaxNLocator(nbins=5))  # small values (spatial MSE) get long labels
            ax.xaxis.set_major_formatter(_plain_formatter())
        ax.tick_params(axis="x", labelsize=8)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"Map Feature Perception, {len(df)} pair(s)")
    fig.tight_layout()
    return fig


__all__ = [
    "IMAGE_SUFFIXES",
    "PairingError",
    "PixelSizeError",
    "RESIZED_COLUMN",
    "RESIZE_NOTE",
    "check_pixel_sizes",
    "mfp_compute",
    "mfp_figure",
    "mfp_loss",
    "mfp_scores",
    "pair_folders",
    "plain_tick_labels",
    "plot_mfp",
    "read_pairs_csv",
    "summarize_scores",
    "write_mfp_folder",
]
