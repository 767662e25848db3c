"""CLIP text alignment versus geographic fidelity (docs/benchmark.md section 7, Statistics and analyses, paper Tables 8-9).

Two steps, kept apart so that the statistics can be rerun without a model:

1. :func:`score_panels` (needs a CLIP encoder): per generated image, the cosine between its
   image embedding and the text embedding of

   - ``prompt``: the exact generation prompt of the panel's condition
     (:func:`geofidelity_bench.prompts.build_prompt`), and
   - ``location``: the location-only text
     ``A photo of {street} in the {neighborhood} district of {city}, {country}.``
     (:func:`geofidelity_bench.prompts.location_text`),

   averaged over the panel's images. For **name sensitivity** the same images are scored
   against the same texts with the street name, the neighborhood label or both replaced by
   those of the control donors (:func:`geofidelity_bench.prompts.select_donor`, the donors of
   the control prompts; "both" reuses the two single donors). Altered *prompts* exist for
   panels whose prompt carries the names (L1, L2; the GPS part of L2 is kept); altered
   *location texts* for every panel whose block has both names. Column names:
   ``clip_{text}`` and ``clip_{text}_{alteration}`` with text in :data:`TEXT_KINDS` and
   alteration in :data:`ALTERATIONS`. A score that cannot exist (a block without names) is
   NaN with the reason in ``note``; names are never invented.

2. :func:`alignment_analysis` (numbers only): joins the scores with the evaluation rows and
   reports Spearman rho of each CLIP score with CosSim, the local margin and retrieval
   accuracy, the AUROC of the CLIP score for "all images retrieve the target"
   (``retrieval_acc == 1``), each with a block-bootstrap interval (blocks resampled with all
   their methods; :func:`geofidelity_bench.stats.block_bootstrap_ci`); the original-minus-
   altered differences (mean with block-bootstrap interval, share of positive panels); and
   the share of panels with no retrieving image (``retrieval_acc == 0``) among the top CLIP
   quartile versus all panels.

The encoder is any object with ``embed(images) -> (n, d)`` and ``embed_text(texts) -> (n, d)``
(normally ``geofidelity_bench.encoders.get_encoder("clip-vit-b32")``). CLIP reads at most 77
tokens; the encoder warns when a text is longer and those warnings are passed through
untouched.

:func:`run_clip_alignment` does step 1 for a results folder and writes
``clip_alignment.csv`` into it, where ``geofidelity-bench report`` finds it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from . import stats
from .encoders.base import EncoderUnavailableError
from .errors import GeoFidelityError, offline_hint
from .prompts import CONDITIONS, PromptError, build_prompt, location_text, select_donor, text_l1

if TYPE_CHECKING:
    from .benchmark import Benchmark

#: The CLIP model of the analysis (encoder registry name and Hub weights).
CLIP_ENCODER = "clip-vit-b32"
CLIP_WEIGHTS = "openai/clip-vit-base-patch32"
CLIP_TOKEN_LIMIT = 77
#: The texts scored per image.
TEXT_KINDS = ("prompt", "location")
#: Name alterations -> which names are replaced by the donors'.
ALTERATIONS: Mapping[str, tuple[str, ...]] = {
    "wrong_street": ("street_name",),
    "shuffled_neighborhood": ("neighborhood",),
    "wrong_both": ("street_name", "neighborhood"),
}
#: Conditions whose generation prompt carries the block's true names.
NAMED_PROMPT_CONDITIONS = ("L1", "L2")
#: Geographic outcomes correlated with the CLIP scores, in table order.
OUTCOMES = ("cos_sim", "local_margin", "retrieval_acc")
OUTCOME_LABELS = {
    "cos_sim": "Target CosSim",
    "local_margin": "Local margin",
    "retrieval_acc": "Retrieval accuracy",
    "all_retrieve": "All-images retrieval AUROC",
}
ALTERATION_LABELS = {
    "wrong_street": "Wrong street",
    "shuffled_neighborhood": "Shuffled neighborhood",
    "wrong_both": "Both local names",
}
PANEL_KEYS = ("method", "condition", "block_id")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")


#: The encoder's identity, recorded on every row of ``clip_alignment.csv`` (as ``results.csv``
#: records ``encoder_config_hash``): registry name, weights (local folder or Hub id), the sha256
#: of a local folder's weight files or the Hub commit that was loaded, and the config hash.
IDENTITY_COLUMNS = ("clip_encoder", "clip_weights", "clip_weights_sha256", "clip_weights_commit", "clip_config_hash")


def encoder_identity(encoder: Any) -> dict[str, Any]:
    """:data:`IDENTITY_COLUMNS` of ``encoder`` (None for what an encoder without a recorded config lacks)."""
    config = getattr(encoder, "config", None)
    config = config if isinstance(config, Mapping) else {}
    return {
        "clip_encoder": str(getattr(encoder, "name", type(encoder).__name__)),
        "clip_weights": config.get("weights"),
        "clip_weights_sha256": config.get("weights_sha256"),
        "clip_weights_commit": config.get("commit"),
        "clip_config_hash": getattr(encoder, "config_hash", None),
    }


def score_column(text: str, alteration: str | None = None) -> str:
    """``clip_prompt``, ``clip_location_wrong_street``, ..."""
    return f"clip_{text}" if alteration is None else f"clip_{text}_{alteration}"


SCORE_COLUMNS = tuple(score_column(t) for t in TEXT_KINDS) + tuple(
    score_column(t, a) for t in TEXT_KINDS for a in ALTERATIONS
)


# -- texts --------------------------------------------------------------------------------


def panel_texts(benchmark: "Benchmark", block_id: str, condition: str) -> dict[str, Any]:
    """Every text scored for a panel of ``block_id`` under ``condition``.

    Returns:
        A dict with the score columns of :data:`SCORE_COLUMNS` mapped to their text (``None``
        when it cannot exist), the donors and their scopes, and ``note`` (why texts are
        missing, ``""`` if none).

    A text that cannot exist for this block (its prompt, when the benchmark refuses it: no
    street name or neighborhood, no control donor, no GPS point; the location texts, when a name
    is missing) is ``None`` and ``note`` says why: one panel never stops the others.

    Raises:
        PromptError: the condition is not a prompt condition.
    """
    if condition not in CONDITIONS:
        raise PromptError(
            f"panel ({block_id!r}, {condition!r}): CLIP alignment scores generated panels, whose condition is "
            f"one of {CONDITIONS}"
        )
    block = benchmark.block(block_id)
    city = benchmark.cities[block.city].name if block.city in benchmark.cities else block.city_name
    country = block.country
    out: dict[str, Any] = {c: None for c in SCORE_COLUMNS}
    out.update(street_donor=None, street_donor_scope=None, neighborhood_donor=None, neighborhood_donor_scope=None)
    notes: list[str] = []
    try:
        out[score_column("prompt")] = build_prompt(benchmark, block_id, condition).text
    except PromptError as err:  # this panel's prompt cannot exist (no names, no donor, no GPS): NaN, the reason kept
        notes.append(f"no {condition} prompt ({err})")
    has_prompt = out[score_column("prompt")] is not None
    names = {"street_name": block.street_name, "neighborhood": block.neighborhood}
    if not (names["street_name"] and names["neighborhood"]):
        missing = [k for k, v in names.items() if not v]
        notes.append(f"block has no {' and no '.join(missing)}: no location text")
        out["note"] = "; ".join(notes)
        return out
    out[score_column("location")] = location_text(names["street_name"], names["neighborhood"], city, country)
    donors: dict[str, str] = {}
    for attribute, stem in (("street_name", "street"), ("neighborhood", "neighborhood")):
        try:
            donor, scope = select_donor(block, benchmark.blocks, attribute)
        except PromptError as err:
            notes.append(f"no {stem} donor ({err})")
            continue
        donors[attribute] = getattr(benchmark.block(donor), attribute)
        out[f"{stem}_donor"] = donor
        out[f"{stem}_donor_scope"] = scope
    gps = block.centroid if condition == "L2" else None
    for alteration, replaced in ALTERATIONS.items():
        if not all(a in donors for a in replaced):
            continue
        alt = {**names, **{a: donors[a] for a in replaced}}
        out[score_column("location", alteration)] = location_text(
            alt["street_name"], alt["neighborhood"], city, country
        )
        if condition in NAMED_PROMPT_CONDITIONS and has_prompt:
            out[score_column("prompt", alteration)] = text_l1(
                alt["street_name"], alt["neighborhood"], city, country, gps=gps
            )
    if condition not in NAMED_PROMPT_CONDITIONS:
        notes.append(f"{condition} prompt carries no names: no altered prompts")
    elif not has_prompt:
        notes.append("no altered prompts")
    out["note"] = "; ".join(notes)
    return out


# -- images -------------------------------------------------------------------------------

ImageSource = Callable[[str, str, str], Sequence[Any]]


def folder_images(root: str | os.PathLike) -> ImageSource:
    """Image lookup for the layout ``{root}/{method}/{condition}/{block_id}/{k:02d}.jpg``.

    Returns a function ``(method, condition, block_id) -> sorted list of image paths``; it
    raises ``FileNotFoundError`` naming the folder when a panel has no images.
    """
    base = Path(root)

    def lookup(method: str, condition: str, block_id: str) -> list[Path]:
        folder = base / method / condition / block_id
        files = sorted(p for p in folder.glob("*") if p.suffix.lower() in IMAGE_SUFFIXES) if folder.is_dir() else []
        if not files:
            raise FileNotFoundError(f"no generated images in {folder}")
        return files

    return lookup


def _panel_list(panels: Any) -> list[tuple[str, str, str]]:
    if isinstance(panels, pd.DataFrame):
        missing = [c for c in PANEL_KEYS if c not in panels.columns]
        if missing:
            raise ValueError(f"panels need columns {list(PANEL_KEYS)}; missing {missing}")
        items = list(panels[list(PANEL_KEYS)].itertuples(index=False, name=None))
    else:
        items = [tuple(p) for p in panels]
    out, seen = [], set()
    for item in items:
        if len(item) != 3:
            raise ValueError(f"a panel is (method, condition, block_id), got {item!r}")
        key = tuple(str(v) for v in item)
        if key not in seen:
            seen.add(key)
            out.append(key)
    return out


def _unit_rows(x: np.ndarray, what: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"{what} must be a non-empty (n, d) array, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def score_panels(
    encoder: Any,
    benchmark: "Benchmark",
    panels: Any,
    images: ImageSource | str | os.PathLike | None = None,
    *,
    image_embeddings: Mapping[tuple[str, str, str], np.ndarray] | Callable[[str, str, str], np.ndarray] | None = None,
    batch_size: int = 32,
) -> pd.DataFrame:
    """Per-panel CLIP image-text scores (step 1 of the module docstring).

    Args:
        encoder: object with ``embed(images, batch_size=...) -> (n, d)`` and
            ``embed_text(texts) -> (n, d)`` (raw embeddings; they are L2-normalized here).
        benchmark: the benchmark the panels were generated for (names, donors, prompts).
        panels: a DataFrame with ``method, condition, block_id`` (e.g. evaluation rows of the
            generated conditions) or an iterable of such triples; duplicates are scored once.
        images: ``(method, condition, block_id) -> images`` or a folder in the generation
            layout (see :func:`folder_images`); not needed with ``image_embeddings``.
        image_embeddings: precomputed raw CLIP image embeddings per panel (mapping or callable),
            e.g. from the embedding cache.

    Returns:
        One row per panel: method, condition, block_id, city, n_images, the
        :data:`SCORE_COLUMNS` (mean image-text cosine, NaN where the text cannot exist),
        street/neighborhood donors and scopes, note, and the encoder's identity
        (:data:`IDENTITY_COLUMNS`: name, weights, their sha256 or Hub commit, config hash).
    """
    items = _panel_list(panels)
    if not items:
        raise ValueError("no panels to score")
    if image_embeddings is None and images is None:
        raise ValueError("pass images (a lookup function or a folder) or image_embeddings")
    lookup = folder_images(images) if isinstance(images, (str, os.PathLike)) else images
    texts = {key: panel_texts(benchmark, key[2], key[1]) for key in items}
    unique = sorted({t for d in texts.values() for c in SCORE_COLUMNS if (t := d[c]) is not None})
    # Texts longer than CLIP's 77 tokens: the encoder warns (and truncates); not caught here.
    text_emb = _unit_rows(encoder.embed_text(unique), "text embeddings")
    if text_emb.shape[0] != len(unique):
        raise ValueError(f"encoder.embed_text returned {text_emb.shape[0]} rows for {len(unique)} texts")
    text_row = {t: i for i, t in enumerate(unique)}
    identity = encoder_identity(encoder)
    rows = []
    for key in items:
        method, condition, block_id = key
        if image_embeddings is not None:
            emb = image_embeddings(*key) if callable(image_embeddings) else image_embeddings[key]
        else:
            emb = encoder.embed(list(lookup(method, condition, block_id)), batch_size=batch_size)
        img = _unit_rows(emb, f"image embeddings of panel {key}")
        if img.shape[1] != text_emb.shape[1]:
            raise ValueError(f"panel {key}: image dim {img.shape[1]} != text dim {text_emb.shape[1]}")
        panel = texts[key]
        row: dict[str, Any] = {
            "method": method,
            "condition": condition,
            "block_id": block_id,
            "city": benchmark.block(block_id).city,
            "n_images": int(img.shape[0]),
        }
        for col in SCORE_COLUMNS:
            t = panel[col]
            row[col] = math.nan if t is None else float(np.mean(img @ text_emb[text_row[t]]))
        for col in ("street_donor", "street_donor_scope", "neighborhood_donor", "neighborhood_donor_scope", "note"):
            row[col] = panel[col]
        row.update(identity)
        rows.append(row)
    return pd.DataFrame(rows)


# -- analysis -----------------------------------------------------------------------------


def _merge(clip_scores: pd.DataFrame, results: pd.DataFrame, condition: str | None) -> pd.DataFrame:
    missing = [c for c in (*PANEL_KEYS, *[score_column(t) for t in TEXT_KINDS]) if c not in clip_scores.columns]
    if missing:
        raise ValueError(f"CLIP scores lack column(s) {missing}")
    missing = [c for c in (*PANEL_KEYS, *OUTCOMES) if c not in results.columns]
    if missing:
        raise ValueError(f"results lack column(s) {missing}")
    res = results[list(PANEL_KEYS) + list(OUTCOMES)]
    # The same panel scored in two runs (e.g. L1 in the prompt and the control runs) counts once.
    res = res.groupby(list(PANEL_KEYS), as_index=False, sort=True)[list(OUTCOMES)].mean()
    scores = clip_scores.drop(columns=[c for c in OUTCOMES if c in clip_scores.columns])
    scores = scores.groupby(list(PANEL_KEYS), as_index=False, sort=True)[
        [c for c in SCORE_COLUMNS if c in scores.columns]
    ].mean()
    merged = scores.merge(res, on=list(PANEL_KEYS), how="inner")
    if condition is not None:
        if condition not in set(merged["condition"]):
            raise ValueError(
                f"no CLIP-scored panels with evaluation rows under condition {condition!r} "
                f"(scored conditions: {sorted(set(clip_scores['condition']))})"
            )
        merged = merged[merged["condition"] == condition]
    return merged.reset_index(drop=True)


def _bb_row(statistic: str, arrays: list[np.ndarray], blocks: np.ndarray, **kw) -> dict[str, Any]:
    try:
        r = stats.block_bootstrap_ci(statistic, *arrays, blocks=blocks, **kw)
    except ValueError as err:
        return {"estimate": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n_blocks": len(set(blocks)),
                "n_undefined": 0, "reason": str(err)}
    reason = None if math.isfinite(r.estimate) else f"{statistic} undefined (constant input)"
    return {"estimate": r.estimate, "ci_low": r.ci_low, "ci_high": r.ci_high, "n_blocks": r.n_blocks,
            "n_undefined": r.n_undefined, "reason": reason}


def alignment_analysis(
    clip_scores: pd.DataFrame,
    results: pd.DataFrame,
    *,
    condition: str | None = "L1",
    n_resamples: int = 5000,
    seed: int = 42,
    confidence: float = 0.95,
    top_quantile: float = 0.75,
) -> dict[str, pd.DataFrame]:
    """Statistics of CLIP alignment against the geographic outcomes (step 2 of the module docstring).

    Args:
        clip_scores: output of :func:`score_panels` (or a ``clip_alignment.csv``).
        results: evaluation rows (docs/benchmark.md section 7, Statistics and analyses columns) of the same panels.
        condition: the condition analysed (paper: L1); ``None`` pools every scored condition.
        n_resamples, seed, confidence: the block bootstrap (blocks = ``block_id``; all methods
            of a block stay together).
        top_quantile: panels with a score >= this quantile form the "top CLIP" group.

    Returns:
        ``{"associations", "name_sensitivity", "no_retrieval"}``:

        - associations: outcome, statistic (``spearman`` / ``auroc``), text, estimate, ci_low,
          ci_high, n_panels, n_blocks, n_undefined, reason. The AUROC outcome
          ``all_retrieve`` is ``retrieval_acc == 1``.
        - name_sensitivity: text, alteration, mean_difference (original minus altered),
          ci_low, ci_high, positive_share, n_panels, n_blocks.
        - no_retrieval: text, threshold, n_top, share_no_retrieval_top, n_all,
          share_no_retrieval_all (no retrieving image = ``retrieval_acc == 0``).

    Raises:
        ValueError: missing columns, or no scored panels under ``condition``.
    """
    merged = _merge(clip_scores, results, condition)
    kw = dict(n_resamples=n_resamples, seed=seed, confidence=confidence)
    assoc, sens, none = [], [], []
    for text in TEXT_KINDS:
        col = score_column(text)
        for outcome in OUTCOMES:
            sub = merged[np.isfinite(merged[col].astype(float)) & np.isfinite(merged[outcome].astype(float))]
            row = {"outcome": outcome, "statistic": "spearman", "text": text, "n_panels": len(sub)}
            row.update(_bb_row("spearman", [sub[col].to_numpy(float), sub[outcome].to_numpy(float)],
                               sub["block_id"].to_numpy(), **kw))
            assoc.append(row)
        sub = merged[np.isfinite(merged[col].astype(float)) & np.isfinite(merged["retrieval_acc"].astype(float))]
        labels = (sub["retrieval_acc"].to_numpy(float) >= 1.0 - 1e-9).astype(float)
        row = {"outcome": "all_retrieve", "statistic": "auroc", "text": text, "n_panels": len(sub),
               "n_positive": int(labels.sum())}
        if len(sub) and 0 < labels.sum() < len(labels):
            row.update(_bb_row("auroc", [labels, sub[col].to_numpy(float)], sub["block_id"].to_numpy(), **kw))
        else:
            row.update(estimate=math.nan, ci_low=math.nan, ci_high=math.nan, n_blocks=sub["block_id"].nunique(),
                       n_undefined=0, reason=f"AUROC undefined: {int(labels.sum())} of {len(labels)} panels retrieve "
                       "with all images (one class)")
        assoc.append(row)
        for alteration in ALTERATIONS:
            alt = score_column(text, alteration)
            if alt not in merged.columns:
                continue
            diff = (merged[col] - merged[alt]).astype(float)
            ok = np.isfinite(diff.to_numpy())
            row = {"text": text, "alteration": alteration, "n_panels": int(ok.sum())}
            d, blocks = diff.to_numpy()[ok], merged["block_id"].to_numpy()[ok]
            r = _bb_row("mean", [d], blocks, **kw)
            row.update(mean_difference=r["estimate"], ci_low=r["ci_low"], ci_high=r["ci_high"],
                       positive_share=float(np.mean(d > 0)) if d.size else math.nan,
                       n_blocks=r["n_blocks"], reason=r["reason"] if d.size else "no panel has this altered text")
            sens.append(row)
        sub = merged[np.isfinite(merged[col].astype(float)) & np.isfinite(merged["retrieval_acc"].astype(float))]
        if len(sub):
            threshold = float(np.quantile(sub[col].to_numpy(float), top_quantile))
            top = sub[sub[col] >= threshold]
            none.append({
                "text": text,
                "top_quantile": top_quantile,
                "threshold": threshold,
                "n_top": len(top),
                "share_no_retrieval_top": float(np.mean(top["retrieval_acc"].to_numpy(float) <= 1e-9)),
                "n_all": len(sub),
                "share_no_retrieval_all": float(np.mean(sub["retrieval_acc"].to_numpy(float) <= 1e-9)),
            })
    return {
        "associations": pd.DataFrame(assoc),
        "name_sensitivity": pd.DataFrame(sens),
        "no_retrieval": pd.DataFrame(none),
    }


# -- a results folder ---------------------------------------------------------------------


class ClipAlignmentError(GeoFidelityError, ValueError):
    """A results folder cannot be CLIP-scored as asked (e.g. no rows under the requested conditions)."""


class ClipModelUnavailableError(EncoderUnavailableError):
    """The CLIP weights (or tokenizer) cannot be had; the message says how to run offline."""


#: How to run CLIP alignment without the Hub (the one wording of :func:`geofidelity_bench.errors.offline_hint`).
#: CLIP alignment needs a text tower, so no image-only encoder can stand in.
OFFLINE_HINT = offline_hint(
    flag="--clip-weights",
    python_arg="weights=",
    weights_id=CLIP_WEIGHTS,
    saved_with="CLIPModel.save_pretrained() and its tokenizer's save_pretrained()",
)


def load_clip_encoder(weights: str | os.PathLike | None = None, *, device: Any | None = None) -> Any:
    """``get_encoder("clip-vit-b32", weights=, device=)``, whose unavailability error says how to run
    CLIP alignment offline (``--clip-weights`` / ``weights=``) instead of the encoders' general hint.

    Raises:
        ClipModelUnavailableError: the weights or the tokenizer cannot be loaded.
    """
    from .encoders import get_encoder
    from .encoders.base import OFFLINE_HINT as ENCODER_HINT

    try:
        return get_encoder(CLIP_ENCODER, weights=weights, device=device)
    except EncoderUnavailableError as err:
        message = str(err)
        message = message[: -len(ENCODER_HINT)].rstrip() if message.endswith(ENCODER_HINT) else message
        raise ClipModelUnavailableError(f"{message} {OFFLINE_HINT}") from err


def _read_results(folder: Path) -> pd.DataFrame:
    from .results import read_results_csv

    path = folder / "results.csv"
    if not path.is_file():
        raise ClipAlignmentError(f"{path} not found: --results needs a folder written by `geofidelity-bench evaluate`")
    results = read_results_csv(path)
    missing = [c for c in PANEL_KEYS if c not in results.columns]
    if missing:
        raise ClipAlignmentError(f"{path} lacks column(s) {missing}")
    return results


def select_panels(results: pd.DataFrame, benchmark: "Benchmark", conditions: Sequence[str],
                  blocks: Sequence[str] | None = None, *, where: str = "results.csv") -> pd.DataFrame:
    """The rows of ``results`` to score: under ``conditions`` and, when given, of ``blocks``.

    Raises:
        ClipAlignmentError: an unknown condition or block id (with a did-you-mean), a requested
            block without rows under ``conditions``, or no rows at all; each names what is missing.
    """
    from .generated_folder import did_you_mean

    conditions = list(dict.fromkeys(conditions))
    unknown = [c for c in conditions if c not in CONDITIONS]
    if unknown:
        raise ClipAlignmentError(
            "; ".join(f"unknown condition {c!r}{did_you_mean(c, CONDITIONS)}" for c in unknown)
            + f": CLIP alignment scores generated panels, under one of {list(CONDITIONS)}"
        )
    panels = results[results["condition"].isin(conditions)]
    if panels.empty:
        raise ClipAlignmentError(f"{where} has no rows under {conditions}")
    if blocks:
        blocks = list(dict.fromkeys(str(b) for b in blocks))
        known = set(benchmark.block_ids)
        unknown = [b for b in blocks if b not in known]
        if unknown:
            raise ClipAlignmentError(
                "; ".join(f"unknown block id {b!r}{did_you_mean(b, benchmark.block_ids)}" for b in unknown)
                + f" (not in benchmark {benchmark.name!r})"
            )
        absent = [b for b in blocks if b not in set(panels["block_id"])]
        if absent:
            raise ClipAlignmentError(f"{where} has no rows under {conditions} for block(s) {absent}")
        panels = panels[panels["block_id"].isin(blocks)]
    return panels


def run_clip_alignment(
    results_dir: str | os.PathLike,
    benchmark: "Benchmark | str | os.PathLike",
    images: ImageSource | str | os.PathLike,
    *,
    encoder: Any = None,
    weights: str | None = None,
    device: Any | None = None,
    conditions: Sequence[str] = ("L1",),
    blocks: Sequence[str] | None = None,
    out_name: str = "clip_alignment.csv",
    batch_size: int = 32,
) -> pd.DataFrame:
    """Scores the generated panels of a results folder with CLIP and writes ``clip_alignment.csv``.

    The rows to score are checked (conditions, blocks, rows present) before the model is loaded. A
    panel whose text cannot exist (e.g. a block without a street name under L1) is a row with NaN
    scores and the reason in ``note``, whatever the condition.

    Args:
        results_dir: a folder with ``results.csv`` (from ``geofidelity-bench evaluate``).
        benchmark: the benchmark (object, folder, Hub id or ``"demo"``).
        images: the generated images (lookup or folder, see :func:`score_panels`).
        encoder: a CLIP encoder; default :func:`load_clip_encoder` (``weights``, ``device``).
        conditions: which conditions' panels to score (paper: L1 only).
        blocks: only these block ids (default: every block with rows).

    Returns:
        The scores that were written (with the encoder's :data:`IDENTITY_COLUMNS`).

    Raises:
        ClipAlignmentError: no ``results.csv``, an unknown condition or block, or no rows to score.
        ClipModelUnavailableError: the CLIP weights cannot be loaded (the message says how offline).
        FileNotFoundError: a panel's images are missing.
    """
    from .atomic import atomic_write
    from .benchmark import load_benchmark

    folder = Path(results_dir)
    results = _read_results(folder)
    if not hasattr(benchmark, "blocks"):
        benchmark = load_benchmark(benchmark)
    panels = select_panels(results, benchmark, conditions, blocks, where=str(folder / "results.csv"))
    if encoder is None:
        encoder = load_clip_encoder(weights, device=device)
    scores = score_panels(encoder, benchmark, panels, images, batch_size=batch_size)
    atomic_write(folder / out_name, lambda p: scores.to_csv(p, index=False))
    return scores


__all__ = [
    "ALTERATIONS",
    "CLIP_ENCODER",
    "CLIP_TOKEN_LIMIT",
    "CLIP_WEIGHTS",
    "ClipAlignmentError",
    "ClipModelUnavailableError",
    "IDENTITY_COLUMNS",
    "OFFLINE_HINT",
    "SCORE_COLUMNS",
    "TEXT_KINDS",
    "alignment_analysis",
    "encoder_identity",
    "folder_images",
    "load_clip_encoder",
    "panel_texts",
    "run_clip_alignment",
    "score_column",
    "score_panels",
    "select_panels",
]
