"""Scores generated panels against their target blocks (docs/benchmark.md sections 5-7).

The flow is: collect every image that needs an embedding (target galleries, negatives'
galleries, the panels), embed each distinct image once through the embedding cache, then
score every (method, condition, block) panel from the embeddings. Scoring is pure numpy
(:func:`score_embeddings`), so a caller holding precomputed embeddings skips the encoder.

Result rows have exactly the columns of docs/benchmark.md section 7, Statistics and analyses (:data:`RESULT_COLUMNS`). Where a
score is NaN, the reason is recorded in ``df.attrs["nan_reasons"]`` (and in ``run.json`` by
the CLI), e.g. GAAS without a segmenter.

This module is the flow (:func:`evaluate_panels`: embedding and segmenting through the caches, the
copy audit, scoring) and the summaries; its parts live beside it and are re-exported here:
:mod:`geofidelity_bench.generated_panels` (reading and checking generated folders and panel keys),
:mod:`geofidelity_bench.scoring` (the result columns, :func:`score_embeddings`) and
:mod:`geofidelity_bench.anchors` (the real-image anchors and the sanity methods).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from .benchmark import Benchmark, PoolImage, ReferenceImage, item_name
from .record_checks import ANCHOR_CONDITION, ANCHOR_METHODS  # noqa: F401  (ANCHOR_METHODS: read through evaluation)
from .anchors import (  # noqa: F401  (the anchors and sanity methods, re-exported: their home is anchors.py)
    ANCHOR_PANEL_SIZE,
    _Without,
    anchor_panels,
    augmented,
    _sample,
    sanity_panels,
    _sorted_with_positions,
)
from .generated_panels import (  # noqa: F401  (reading generated folders, re-exported: their home is generated_panels.py)
    IMAGE_SUFFIXES,
    _MANIFEST_HINT,
    SAFE_ID_RULE,
    EvaluationError,
    GeneratedPanels,
    PanelKey,
    check_panel_keys,
    load_generated_panels,
    problems_text,
    read_generated_folder,
    _scan_generated_folder,
    unpromptable_message,
    unpromptable_panels,
)
from .scoring import (  # noqa: F401  (the result columns and scoring, re-exported: their home is scoring.py)
    CHANCE_COLUMNS,
    GAAS_UNAVAILABLE,
    METRIC_COLUMNS,
    PREPARE_BLOCKS,
    RESULT_COLUMNS,
    chance_columns,
    _item_sha256,
    n_distinct_rows,
    _nan_row_reasons,
    panel_n_distinct,
    score_embeddings,
)


# -- embedding ------------------------------------------------------------------------------------


def _label_text(label: Any) -> str:
    """A label of :func:`embed_items` in words: ``("panel", (m, c, b))`` -> ``panel m/c/b`` (display only)."""
    if isinstance(label, tuple) and len(label) == 2:
        kind, name = label
        return f"{kind} {'/'.join(map(str, name)) if isinstance(name, tuple) else name}"
    return str(label)


def _item_source_and_name(item: Any, label: Any, i: int) -> tuple[Any, str]:
    """What to embed for one panel or gallery item, and how to call it in errors."""
    name = item_name(item, f"{_label_text(label)} image {i}")
    if isinstance(item, (ReferenceImage, PoolImage)):
        return item.image_source, name  # read (and hashed) only when needed
    return item, name


def _flatten(items_by_label: Mapping[Any, Sequence[Any]]):
    """[(name, source)] over all labels, and each label's (start, stop) span in that list."""
    flat, spans = [], {}
    for label, items in items_by_label.items():
        start = len(flat)
        flat += [_item_source_and_name(item, label, i)[::-1] for i, item in enumerate(items)]
        spans[label] = (start, len(flat))
    return flat, spans


def embed_items(
    items_by_label: Mapping[Any, Sequence[Any]],
    encoder,
    *,
    cache=None,
    batch_size: int = 32,
    progress: bool = True,
    num_workers: int | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Embeds every item of every labelled list (identical images are computed once).

    Labels are any hashable values (:func:`evaluate_panels` uses tuples, never names joined into
    one string, so two panels can never share a label).

    Returns a mapping label -> (n, d) float32 array, and counts: ``total``, ``from_cache``,
    ``computed`` (per image), ``forward_images`` (images run through the model) and ``num_workers``
    (threads that decoded and preprocessed the images; it changes no number).
    """
    from .encoders import embed_named_images

    flat, spans = _flatten(items_by_label)
    _, emb, stats = embed_named_images(encoder, flat, cache=cache, batch_size=batch_size, progress=progress,
                                       num_workers=num_workers)
    counts = {"total": stats.total, "from_cache": stats.from_cache, "computed": stats.computed,
              "forward_images": stats.forward_images, "num_workers": stats.num_workers}
    return {label: emb[a:b] for label, (a, b) in spans.items()}, counts


def segment_items(
    items_by_label: Mapping[Any, Sequence[Any]],
    segmenter,
    *,
    cache=None,
    batch_size: int = 8,
    progress: bool = True,
    num_workers: int | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """GAAS-group shares (n, 8) of every item of every labelled list, through the cache."""
    from .segmentation import gaas_shares, segment_named_images

    flat, spans = _flatten(items_by_label)
    _, shares12, stats = segment_named_images(segmenter, flat, cache=cache, batch_size=batch_size, progress=progress,
                                              num_workers=num_workers)
    shares8 = gaas_shares(shares12) if len(flat) else np.zeros((0, 8))
    return {label: shares8[a:b] for label, (a, b) in spans.items()}, stats.as_dict()


def evaluate_panels(
    benchmark: Benchmark,
    panels: Mapping[PanelKey, Any],
    encoder,
    *,
    cache=None,
    batch_size: int = 32,
    progress: bool = True,
    include_anchors: bool = False,
    segmenter=None,
    segment_batch_size: int = 8,
    num_workers: int | None = None,
    skip_bad_images: bool = False,
    image_check=None,
    allow_unpromptable: bool = False,
    exclude_copies: bool = False,
) -> pd.DataFrame:
    """Scores panels of images (or precomputed embeddings) against their target blocks.

    Args:
        benchmark: the benchmark (targets, galleries, negatives).
        panels: (method, condition, block_id) -> a sequence of images (PIL, paths, bytes,
            ReferenceImage) or an (n, d) float array of precomputed raw embeddings from
            ``encoder``.
        encoder: an Encoder (``geofidelity_bench.encoders.get_encoder``).
        cache: an EmbeddingCache, or None for no cache.
        include_anchors: also score the three real-image anchors.
        segmenter: a Segmenter (``geofidelity_bench.segmentation.get_segmenter``) for GAAS;
            without one the gaas column is NaN with the reason recorded. Panels given as
            embeddings have no images to segment: their GAAS is NaN too.
        num_workers: threads decoding and preprocessing images ahead of the encoder and the
            segmenter (default: the cores this process may use; 0: in the calling thread); it
            changes no number and is recorded in the stats.
        skip_bad_images: leave undecodable files out of their panels (recorded, with the reason,
            in ``df.attrs["skipped_images"]``; ``n_generated`` counts the images scored) instead
            of raising one error that lists them all; a panel left with fewer than 2 images gets
            a NaN row with the reason.
        image_check: the :func:`~geofidelity_bench.panel_images.check_panel_images` result of
            ``panels`` when the caller already ran it (the CLI does, before loading a model);
            its panels are the ones scored.
        allow_unpromptable: score panels of a prompt condition whose prompt the benchmark refuses
            for their block (:func:`unpromptable_panels`, e.g. ``L1`` for a block without a street
            name) instead of refusing them all in one EvaluationError; they are recorded in
            ``df.attrs["unpromptable_panels"]`` (and in run.json).
        exclude_copies: score every audited panel without its images that the copy audit flags
            (``n_generated`` counts the images scored, ``n_copied`` the flagged ones; a panel left
            with fewer than 2 images gets a NaN row with the reason); recorded in ``copy_audit``.

    Every panel whose condition is not ``"anchor"`` goes through the copy audit
    (docs/benchmark.md section 5, Copy audit; :mod:`geofidelity_bench.near_copies`): each image is
    compared with every photo of the benchmark (gallery and held-out photos of all blocks, and the
    world pool, embedded through ``cache`` like the galleries; their perceptual hashes are kept next
    to the embeddings). ``n_copied`` counts the flagged images of each audited panel (NaN for anchors).

    Returns:
        Result rows (:data:`RESULT_COLUMNS`); ``df.attrs`` holds ``nan_reasons``,
        ``embedding_stats``, ``skipped_images``, ``animated_images`` (files whose first frame was
        scored), ``copy_audit`` (:func:`~geofidelity_bench.near_copies.audit_summary`: settings and one
        record per audited image), ``near_copies`` (its flagged records) and, with a segmenter,
        ``segment_stats``.

    Raises:
        EvaluationError: a panel key that is not a ``(method, condition, block_id)`` tuple of safe
            ids (:func:`check_panel_keys`), an unknown block, or panels that no prompt of the
            benchmark could have produced (unless ``allow_unpromptable``).
        BadImagesError: images that cannot be decoded (all listed), unless ``skip_bad_images``.
    """
    from . import near_copies
    from .panel_images import check_panel_images

    panels = dict(panels)
    check_panel_keys(benchmark, panels)
    unpromptable = unpromptable_panels(benchmark, panels)
    if unpromptable and not allow_unpromptable:
        raise EvaluationError(unpromptable_message(unpromptable))
    if image_check is None:
        image_check = check_panel_images(panels, skip_bad_images=skip_bad_images, progress=progress)
    panels = dict(image_check.panels)
    if include_anchors:
        for key, value in anchor_panels(benchmark).items():
            panels.setdefault(key, value)
    if not panels and not image_check.too_small:
        raise EvaluationError("no panels to evaluate")
    needed = set()
    for _, _, bid in panels:
        needed.add(bid)
        needed.update(v for v in benchmark.negatives(bid).values() if v)
    # Labels are tuples, ("gallery", block_id) and ("panel", key): names are never joined into one string.
    to_embed: dict[tuple, Sequence[Any]] = {("gallery", b): benchmark.gallery(b) for b in sorted(needed)}
    precomputed: dict[PanelKey, np.ndarray] = {}
    for key, value in panels.items():
        if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.ndim == 2:
            if value.shape[1] != encoder.dim:
                raise EvaluationError(
                    f"panel {key}: precomputed embeddings have dimension {value.shape[1]}, but encoder "
                    f"{encoder.name!r} gives {encoder.dim}"
                )
            precomputed[key] = value
        else:
            items = list(value)
            if not items:
                raise EvaluationError(f"panel {key}: no images")
            to_embed[("panel", key)] = items
    to_embed[AUDIT_POOL_LABEL] = near_copies.pool_items(benchmark)  # the copy audit compares with every photo
    embedded, stats = embed_items(to_embed, encoder, cache=cache, batch_size=batch_size, progress=progress,
                                  num_workers=num_workers)
    galleries = {label[1]: emb for label, emb in embedded.items() if label[0] == "gallery"}
    panel_emb = dict(precomputed)
    for key in panels:
        if ("panel", key) in embedded:
            panel_emb[key] = embedded[("panel", key)]
    # the copy audit of every panel that is not an anchor (the anchors are the benchmark's own photos)
    hash_cache = near_copies.HashCache.beside(cache)
    pool = near_copies.reference_pool(benchmark, embedded[AUDIT_POOL_LABEL], hash_cache=hash_cache, progress=progress)
    audited = [key for key in panels if key[1] != ANCHOR_CONDITION and key in panel_emb]
    records = near_copies.audit_panels(pool, {k: panels[k] for k in audited}, {k: panel_emb[k] for k in audited},
                                       hash_cache=hash_cache, progress=progress)
    n_copied = near_copies.copied_counts(records)
    copies_left_too_few: dict[PanelKey, int] = {}
    scored_items = dict(panels)  # the items behind each scored panel (fewer with exclude_copies)
    if exclude_copies:
        flagged_at: dict[PanelKey, list[int]] = {}
        start = 0
        for key in audited:
            rows = records[start : start + len(panel_emb[key])]
            start += len(panel_emb[key])
            flagged_at[key] = [i for i, r in enumerate(rows) if r["flagged"]]
    shares, gaas_reason, segment_stats = None, GAAS_UNAVAILABLE, None
    if segmenter is not None:
        to_segment = {("gallery", bid): benchmark.gallery(bid) for bid in sorted({k[2] for k in panels})}
        to_segment.update({label: items for label, items in to_embed.items() if label[0] == "panel"})
        segmented, segment_stats = segment_items(to_segment, segmenter, cache=cache, batch_size=segment_batch_size,
                                                 progress=progress, num_workers=num_workers)
        shares = (
            {key: segmented[("panel", key)] for key in panels if ("panel", key) in segmented},
            {label[1]: v for label, v in segmented.items() if label[0] == "gallery"},
        )
        gaas_reason = "the panel was given as precomputed embeddings; GAAS needs its images"
    if exclude_copies:
        for key, drop in flagged_at.items():
            if not drop:
                continue
            keep = [i for i in range(len(panel_emb[key])) if i not in set(drop)]
            if len(keep) < 2:
                copies_left_too_few[key] = len(keep)
                panel_emb.pop(key)
                continue
            panel_emb[key] = np.asarray(panel_emb[key])[keep]
            if not isinstance(panels[key], np.ndarray):
                scored_items[key] = [list(panels[key])[i] for i in keep]
            if shares is not None and key in shares[0]:
                shares[0][key] = np.asarray(shares[0][key])[keep]
    df = score_embeddings(benchmark.blocks, galleries, panel_emb, encoder_name=encoder.name, shares=shares,
                          gaas_unavailable_reason=gaas_reason)
    if len(df):  # distinct images by their bytes where the panel's items have bytes (else embedding rows)
        df["n_distinct"] = [panel_n_distinct(scored_items.get(k), panel_emb[k])
                            for k in zip(df["method"], df["condition"], df["block_id"])]
    if image_check.too_small:
        df = _with_too_small_panels(df, benchmark, image_check.too_small, encoder.name)
    if copies_left_too_few:
        df = _with_too_small_panels(df, benchmark, copies_left_too_few, encoder.name, reason=_copies_left_too_few)
    if len(df):  # n_copied of every audited panel; NaN for the anchors (not audited)
        df["n_copied"] = [float(n_copied[k]) if k in n_copied else float("nan")
                          for k in zip(df["method"], df["condition"], df["block_id"])]
    df.attrs["embedding_stats"] = stats
    df.attrs["skipped_images"] = image_check.skipped
    df.attrs["animated_images"] = image_check.animated
    if len(df):  # a panel the benchmark refuses to prompt carries its mark in every view (never ranked)
        refused = {(m, r["condition"], r["block_id"]) for r in unpromptable for m in r["methods"]}
        df["unpromptable"] = [1.0 if k in refused else 0.0
                              for k in zip(df["method"], df["condition"], df["block_id"])]
    df.attrs["unpromptable_panels"] = {"allowed": bool(allow_unpromptable), "panels": unpromptable}
    df.attrs["copy_audit"] = near_copies.audit_summary(records, excluded=exclude_copies)
    df.attrs["near_copies"] = [r for r in records if r["flagged"]]
    if segment_stats is not None:
        df.attrs["segment_stats"] = segment_stats
    return df


#: run.json label of the photos the copy audit compares with (embedded with the galleries).
AUDIT_POOL_LABEL = ("audit", "benchmark photos")


def _copies_left_too_few(n_left: int) -> str:
    return (f"--exclude-copies left {n_left} image(s) after removing the images the copy audit flagged; "
            "a panel needs at least 2")


def _with_too_small_panels(df: pd.DataFrame, benchmark: Benchmark, too_small: Mapping[PanelKey, int],
                           encoder_name: str, reason=None) -> pd.DataFrame:
    """``df`` plus a NaN row (with its reasons) for every panel left under 2 images by skipped files
    (or by ``reason(n_left)``)."""
    from .panel_images import too_small_reason

    too_small_reason = reason or too_small_reason
    reasons = list(df.attrs.get("nan_reasons", []))
    rows = []
    for key, n_left in too_small.items():
        block = benchmark.block(key[2])
        rows.append({"method": key[0], "condition": key[1], "block_id": key[2], "city": block.city,
                     "country": block.country, "stratum": block.stratum or "", "n_generated": n_left,
                     "n_reference": len(benchmark.gallery(key[2])), "n_distinct": float("nan"),
                     "n_copied": float("nan"), "unpromptable": 0.0, **{c: float("nan") for c in METRIC_COLUMNS},
                     **chance_columns(block), "encoder": encoder_name})
        for column in METRIC_COLUMNS:
            _nan_row_reasons(key, reasons, column, too_small_reason(n_left))
    extra = pd.DataFrame(rows, columns=RESULT_COLUMNS)
    out = pd.concat([df, extra], ignore_index=True) if len(df) else extra
    out = out.sort_values(["method", "condition", "block_id"], kind="stable").reset_index(drop=True)
    out.attrs["nan_reasons"] = reasons
    return out


# -- summaries ------------------------------------------------------------------------------------

SUMMARY_GROUPS = {
    "by_method": ["method"],
    "by_method_condition": ["method", "condition"],
    "by_city_method": ["city", "method"],
    "by_condition": ["condition"],
}


def covered(results: pd.DataFrame) -> pd.Series:
    """Per row: whether it has a finite value in one of the leaderboard scores
    (:data:`~geofidelity_bench.metrics.catalog.LEADERBOARD_METRIC_COLUMNS`). A row whose every score
    is NaN covers no block: every view's "blocks" count is the blocks its rows cover."""
    from .metrics.catalog import LEADERBOARD_METRIC_COLUMNS

    cols = [c for c in LEADERBOARD_METRIC_COLUMNS if c in results.columns]
    if not cols or results.empty:
        return pd.Series(False, index=results.index)
    values = results[cols].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    return pd.Series(np.isfinite(values).any(axis=1), index=results.index)


def summarize(results: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Mean of every metric per group (NaN-skipping) with ``n_blocks`` per group and, where the rows
    carry them, the chance levels of retrieval accuracy and MRR averaged over the same rows as the
    retrieval mean (those with a finite retrieval accuracy; docs/benchmark.md section 5).

    ``n_blocks``: the distinct blocks of the group's rows that have a finite leaderboard score
    (:func:`covered`); a row whose every score is NaN (a panel left too small, a failed image) adds
    nothing to a mean, so it is not counted either (docs/benchmark.md section 7)."""
    results = results.copy(deep=False)
    results.attrs = {}  # the rows only: pandas deep-copies attrs into every derived frame
    grouped = results.groupby(list(by), sort=True, dropna=False)
    out = grouped[METRIC_COLUMNS].mean(numeric_only=True)
    blocks = results["block_id"].where(covered(results))
    out.insert(0, "n_blocks", blocks.groupby([results[c] for c in by], sort=True, dropna=False).nunique()
               .reindex(out.index).fillna(0).astype(int))
    chance = [c for c in CHANCE_COLUMNS[1:] if c in results.columns]
    if chance:
        finite = pd.to_numeric(results["retrieval_acc"], errors="coerce").notna()
        values = results[chance].apply(pd.to_numeric, errors="coerce").where(finite)
        out = out.join(values.groupby([results[c] for c in by], sort=True, dropna=False).mean())
    return out.reset_index()


def leaderboard_summary(results: pd.DataFrame, sort_by: str = "cos_sim") -> pd.DataFrame:
    """The leaderboard's rows, the same for the printed table, the app and the evaluate module: one row per
    (method, condition), with the panels scored with ``allow_unpromptable`` apart (docs/benchmark.md
    section 7, Statistics and analyses).

    Columns: those of :func:`summarize` (``n_blocks``: blocks with a finite score), ``unpromptable``
    (the row holds the unpromptable panels of its method and condition), ``n_copied_panels`` (panels
    the copy audit flagged, scored or not), ``n_repeating`` (panels with a score that repeat photos: k of
    ``n_blocks``) and ``ranked`` (neither copied
    nor unpromptable). Order: ranked rows best ``sort_by`` first (NaN last; ties by method, condition),
    then rows with copied panels, then unpromptable rows: neither is ever a model's ranked result.
    """
    from . import caveats
    from .metrics.catalog import HIGHER_IS_BETTER

    frame = results.copy(deep=False)
    frame.attrs = {}
    if sort_by not in frame.columns:
        raise ValueError(f"cannot sort the leaderboard by {sort_by!r}: the rows have no such column")
    for col in ("n_generated", "n_distinct", "n_copied"):
        if col not in frame.columns:
            frame[col] = float("nan")
    frame["unpromptable"] = caveats.unpromptable_mask(frame).to_numpy()
    frame["_copied"] = caveats.copied_mask(frame).to_numpy()
    # a repeating panel counts where it counts in the mean (k of the n_blocks with a score); a copied one always
    frame["_repeats"] = [caveats.repeats_photos(g, d) and ok
                         for g, d, ok in zip(frame["n_generated"], frame["n_distinct"], covered(frame))]
    keys = ["method", "condition", "unpromptable"]
    out = summarize(frame, keys)
    if out.empty:  # no rows: the columns all the same
        out = out.reindex(columns=[*keys, "n_blocks", *METRIC_COLUMNS,
                                   *(c for c in CHANCE_COLUMNS[1:] if c in frame.columns)])
    marks = frame.groupby(keys, sort=True, dropna=False)[["_copied", "_repeats"]].sum()
    out = out.merge(marks.rename(columns={"_copied": "n_copied_panels", "_repeats": "n_repeating"})
                    .astype(int).reset_index(), on=keys, how="left")
    out["ranked"] = (out["n_copied_panels"] == 0) & ~out["unpromptable"].astype(bool)
    ascending = not HIGHER_IS_BETTER.get(sort_by, True)
    out = out.assign(_tier=np.where(out["unpromptable"], 2, np.where(out["n_copied_panels"] > 0, 1, 0)))
    out = out.sort_values(["_tier", sort_by, "method", "condition"], ascending=[True, ascending, True, True],
                          na_position="last", kind="mergesort")
    return out.drop(columns="_tier").reset_index(drop=True)


def summaries(results: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The four summaries of docs/benchmark.md section 7, Statistics and analyses.

    Each groups by its columns and by ``unpromptable`` (0 or 1): panels scored with ``allow_unpromptable``
    are averaged apart from the promptable ones, as the printed leaderboard and every other view keeps them."""
    from .caveats import unpromptable_mask

    frame = results.copy(deep=False)
    frame.attrs = {}
    frame["unpromptable"] = unpromptable_mask(frame).astype(int).to_numpy()
    return {name: summarize(frame, [*by, "unpromptable"]) for name, by in SUMMARY_GROUPS.items()}
