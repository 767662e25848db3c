"""What a reader must be told next to a number, worded once for the report, the app and the Hub.

A benchmark is read, not only computed (docs/benchmark.md section 7, Statistics): a retrieval
accuracy means little without the chance level of its candidate set, an interval over a handful
of blocks is wide for a reason, a held-out anchor whose panel repeats one photo is penalized by
the diversity terms, and a panel that copies the benchmark's own photos is not a model's result.
Each such caveat has one function here, so every view says the same thing.

Pure Python and pandas (pandas is imported inside the functions that take a table).
"""

from __future__ import annotations

import math
from typing import Any

#: The one bootstrap setting of every interval the project shows (the report's, the app's, the Hub's).
BOOTSTRAP_RESAMPLES = 5000
BOOTSTRAP_SEED = 42
#: An interval resting on fewer blocks or cities than this gets :func:`interval_caveat`.
MIN_INTERVAL_BLOCKS = 10
MIN_INTERVAL_CITIES = 5
#: The mark shown next to a method, row or point whose panels copy reference photos.
COPIED_MARK = "\u26a0 copied"
#: The mark shown next to a row whose panel repeats photos (n_distinct < n_generated).
REPEATS_MARK = "\u21bb repeats photos"

#: The mark shown next to a row scored with ``--allow-unpromptable``: the benchmark refuses the
#: condition's prompt for the block (e.g. L1 without a street name), so no prompt could have produced
#: the panel; such rows are listed apart and never ranked with promptable rows.
UNPROMPTABLE_MARK = "\u2205 unpromptable"
UNPROMPTABLE_LEGEND = (f"{UNPROMPTABLE_MARK}: scored with --allow-unpromptable although the benchmark has no prompt "
                       "of that condition for the block (docs/benchmark.md section 2): listed after every promptable "
                       "row and never ranked with them")

HELDOUT_METHOD = "heldout_real"
#: The mark shown next to a row or point that rests on fewer blocks than the others beside it.
FEWER_BLOCKS_MARK = "\u2020 fewer blocks"

#: The marks of a Hub leaderboard submission (docs/benchmark.md section 13), each with its one-line legend.
#: Re-computed by the leaderboard's verifier from the submitted images: the numbers shown are the verifier's.
VERIFIED_MARK = "\u2713 verified"
#: The submitter's own numbers (no verification record yet, or a verifier that could not re-compute them).
SELF_REPORTED_MARK = "\u25c7 self-reported"
#: Re-computed by the verifier with other numbers than the submitted ones: never ranked.
MISMATCH_MARK = "\u2717 mismatch"
#: Scored with ``evaluate --exclude-copies``: the images flagged by the copy audit were left out of its panels.
COPIES_EXCLUDED_MARK = "\u2298 copies excluded"
VERIFIED_LEGEND = (f"{VERIFIED_MARK}: the leaderboard's verifier re-computed every score of the submission from its "
                   "images, and the numbers shown are the verifier's")
SELF_REPORTED_LEGEND = (f"{SELF_REPORTED_MARK}: the submitter's own numbers, not re-computed by the leaderboard's "
                        "verifier (not verified yet, or unverifiable)")
MISMATCH_LEGEND = (f"{MISMATCH_MARK}: the verifier re-computed the scores from the submitted images and they differ "
                   "from the submitted ones; such a submission is never ranked")
COPIES_EXCLUDED_LEGEND = (f"{COPIES_EXCLUDED_MARK}: the images flagged by the copy audit (copies of the benchmark's "
                          "own photos) were left out of its panels before scoring (`evaluate --exclude-copies`); the "
                          "count says how many")
#: {mark: its one-line legend}
MARK_LEGENDS = {VERIFIED_MARK: VERIFIED_LEGEND, SELF_REPORTED_MARK: SELF_REPORTED_LEGEND,
                MISMATCH_MARK: MISMATCH_LEGEND, COPIES_EXCLUDED_MARK: COPIES_EXCLUDED_LEGEND}


def copies_excluded_mark(n_images: int) -> str:
    """``"\u2298 copies excluded: 3 image(s)"``: a submission scored without the images the copy audit flagged."""
    return f"{COPIES_EXCLUDED_MARK}: {int(n_images)} image(s)"


def fewer_blocks_note(n_blocks: int, n_most: int) -> str:
    """``"† fewer blocks: 1 of 7, not comparable"``: a row or point over fewer blocks than the others."""
    return f"{FEWER_BLOCKS_MARK}: {int(n_blocks)} of {int(n_most)}, not comparable"


def bootstrap_text(n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> str:
    """``"5,000 bootstrap resamples, seed 42"``."""
    return f"{int(n_resamples):,} bootstrap resamples, seed {int(seed)}"


def interval_caveat(n_blocks: int, n_cities: int | None = None) -> str | None:
    """A warning for an interval over fewer than 10 blocks or 5 cities (None otherwise)."""
    thin = []
    if n_blocks < MIN_INTERVAL_BLOCKS:
        thin.append(f"{n_blocks} block(s) (< {MIN_INTERVAL_BLOCKS})")
    if n_cities is not None and n_cities < MIN_INTERVAL_CITIES:
        thin.append(f"{n_cities} cit{'y' if n_cities == 1 else 'ies'} (< {MIN_INTERVAL_CITIES})")
    if not thin:
        return None
    return ("intervals rest on only " + " and ".join(thin) + ": a bootstrap over so few units is unstable "
            "and usually too narrow; read them as rough")


def chance_sentence(chance_acc: float, n_candidates: float | None = None) -> str:
    """``"1 in 4 by chance here"`` (or ``"0.27 by chance here"`` for a mean over blocks)."""
    if chance_acc is None or not math.isfinite(float(chance_acc)) or chance_acc <= 0:
        return "chance level unknown here"
    inv = 1.0 / float(chance_acc)
    if abs(inv - round(inv)) < 1e-9:
        text = f"1 in {int(round(inv))} by chance here"
    else:
        text = f"{float(chance_acc):.2f} by chance here (mean over blocks)"
    if n_candidates is not None and math.isfinite(float(n_candidates)):
        text += f" ({int(round(float(n_candidates)))} candidates)"
    return text


def chance_counting_note(min_candidates: int, max_candidates: int, n_two_roles: int = 0,
                         n_blocks: int | None = None) -> str:
    """How the chance level of retrieval is counted (the candidates, and a block that fills two roles)."""
    k = str(min_candidates) if min_candidates == max_candidates else f"{min_candidates}-{max_candidates}"
    text = (f"chance: the expected retrieval accuracy and MRR of images that carry no information about the place, "
            f"i.e. of a random order of each block's candidates (its target gallery plus one per negative role "
            f"present: {k} candidates here); a retrieval score near its chance level says nothing about the place")
    if n_two_roles:
        of = f" of {n_blocks}" if n_blocks is not None else ""
        text += (f". Where one block fills two negative roles ({n_two_roles}{of} block(s) here) it is counted as two "
                 "candidates with the same gallery: the two always tie, and a tie counts against the target, so "
                 "chance accuracy is 1 / (distinct candidate blocks), not 1 / candidates, and chance MRR counts the "
                 "pair as two places above the target whenever that block outranks it (docs/benchmark.md section 5)")
    return text


def repeats_photos(n_generated: Any, n_distinct: Any) -> bool:
    """Whether a panel holds fewer distinct images than it scores (False when not recorded)."""
    try:
        g, d = float(n_generated), float(n_distinct)
    except (TypeError, ValueError):
        return False
    return math.isfinite(g) and math.isfinite(d) and d < g


def thin_anchor_blocks(results) -> list[str]:
    """The blocks whose ``heldout_real`` panel repeats photos (sorted), from a results table."""
    if results is None or "n_distinct" not in results or "method" not in results:
        return []
    rows = results[results["method"] == HELDOUT_METHOD]
    return sorted({str(r.block_id) for r in rows.itertuples() if repeats_photos(r.n_generated, r.n_distinct)})


def thin_anchor_note(n_thin: int, n_blocks: int) -> str | None:
    """What a repeating held-out panel means (None when no block repeats)."""
    if n_thin <= 0:
        return None
    return (f"{n_thin} of {n_blocks} block(s) have fewer held-out photos than the panel size, so their "
            f"held-out panel repeats photos (the paper's rule: cycle the held-out photos to the panel size). "
            f"MMD\u00b2 and DCSF then penalize the missing diversity, and the held-out anchor looks worse on them "
            f"than the photos deserve; its CosSim and retrieval are unaffected")


def copied_mask(results):
    """Rows whose panel holds images flagged by the copy audit (``n_copied > 0``; NaN counts as not)."""
    import pandas as pd

    if "n_copied" not in results:
        return pd.Series(False, index=results.index)
    return pd.to_numeric(results["n_copied"], errors="coerce").fillna(0) > 0


def unpromptable_mask(results):
    """Per row of ``results``: scored although the benchmark refuses its prompt (``unpromptable == 1``;
    a file without the column, or NaN, reads as not unpromptable)."""
    import pandas as pd

    if "unpromptable" not in results:
        return pd.Series(False, index=results.index)
    return pd.to_numeric(results["unpromptable"], errors="coerce").fillna(0).astype(float) > 0


def copied_note(n_rows: int, n_images: int) -> str | None:
    """What a copied row means (None when nothing was flagged)."""
    if n_rows <= 0:
        return None
    return (f"{COPIED_MARK}: {n_images} image(s) in {n_rows} panel(s) are copies of the benchmark's own reference "
            f"photos (the copy audit, docs/benchmark.md); their scores say how close the photos are, not how "
            f"good a model is, and such rows are never ranked as a model's result")


#: What a block's same-neighborhood negative is (``neg_same_neighborhood_kind``, docs/benchmark.md section 8,
#: Negatives), worded once for ``info``, the dataset card and the report.
SAME_NEIGHBORHOOD_KIND_LABELS = {
    "same_neighborhood": "same neighborhood",
    "fallback_nearby": "fallback: a block within 1 km in another or unknown neighborhood",
    "fallback_far": "fallback: a farther block of the same city",
    "unknown": "not recorded (a benchmark written before the column)",
}


def same_neighborhood_counts_text(counts: dict[str, int]) -> str:
    """``"5 same neighborhood, 2 fallback: a block within 1 km, ..."``: the blocks with a same-neighborhood
    negative counted by kind (kinds with no block are left out; ``"none"`` when there is no such block)."""
    parts = [f"{int(counts.get(kind, 0))} {label}" for kind, label in SAME_NEIGHBORHOOD_KIND_LABELS.items()
             if counts.get(kind, 0)]
    return ", ".join(parts) or "none"


def same_neighborhood_note(counts: dict[str, int]) -> str | None:
    """The caveat of a same-neighborhood number (similarity to the same-neighborhood negative, the local margin)
    whose blocks mix real same-neighborhood negatives with fallbacks (None when they do not, or when no kind
    is recorded: a benchmark written before the column cannot tell)."""
    fallbacks = int(counts.get("fallback_nearby", 0)) + int(counts.get("fallback_far", 0))
    if not fallbacks:
        return None
    total = sum(int(v) for v in counts.values())
    real = int(counts.get("same_neighborhood", 0))
    return (f"same neighborhood: only {real} of {total} block(s) have a negative from their own neighborhood; "
            f"{fallbacks} use a fallback when no block shares the neighborhood ({same_neighborhood_counts_text(counts)}; "
            "docs/benchmark.md section 8, Negatives), so the same-neighborhood similarity and the local margin mix "
            "neighborhood look-alikes with merely nearby or same-city blocks")


def same_country_fallback_blocks(results) -> list[str]:
    """The blocks whose random-same-country anchor cannot be "same country": their country has no other
    block among the rows' blocks, so the anchor draws from all other blocks (docs/benchmark.md section 6).

    Read from the rows themselves (each block's ``country``, over every block of ``results``, anchors
    included), so a results.csv alone tells it. Sorted block ids; [] when every country has two blocks."""
    import pandas as pd

    if results is None or len(results) == 0 or not {"block_id", "country"} <= set(results.columns):
        return []
    blocks = results[["block_id", "country"]].astype(str).drop_duplicates("block_id")
    per_country = blocks.groupby("country")["block_id"].transform("size")
    return sorted(blocks.loc[per_country.to_numpy() < 2, "block_id"].tolist()) if len(blocks) else []


def same_country_fallback_note(blocks, n_blocks: int) -> str | None:
    """What the random-same-country anchor is on ``blocks`` (:func:`same_country_fallback_blocks`), or None."""
    blocks = list(blocks)
    if not blocks:
        return None
    names = ", ".join(blocks[:5]) + (f" and {len(blocks) - 5} more" if len(blocks) > 5 else "")
    return (f"random same country: {len(blocks)} of {n_blocks} block(s) ({names}) are the only block of their country, "
            "so their \"same-country\" anchor draws from all other blocks, like random global (docs/benchmark.md "
            "section 6); on those blocks it says nothing about the country")


def missing_negative_blocks(results, role: str) -> list[str]:
    """The blocks of ``results`` with no ``role`` negative (``sim_{role}`` NaN on every row of the block):
    a mean of that similarity, or of a margin using it, is over the other blocks only."""
    import numpy as np

    col = f"sim_{role}"
    if results is None or len(results) == 0 or col not in results.columns:
        return []
    values = results[col].astype(float).to_numpy()
    has = results.assign(_has=np.isfinite(values)).groupby("block_id")["_has"].any()
    return sorted(map(str, has.index[~has.to_numpy()]))


__all__ = ["BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "COPIED_MARK", "FEWER_BLOCKS_MARK", "HELDOUT_METHOD", "MIN_INTERVAL_BLOCKS",
           "MIN_INTERVAL_CITIES", "REPEATS_MARK", "SAME_NEIGHBORHOOD_KIND_LABELS", "bootstrap_text", "chance_counting_note", "chance_sentence",
           "copied_mask", "copied_note", "fewer_blocks_note", "interval_caveat", "repeats_photos", "same_neighborhood_counts_text",
           "same_neighborhood_note", "thin_anchor_blocks", "thin_anchor_note"]
__all__ += ["COPIES_EXCLUDED_LEGEND", "COPIES_EXCLUDED_MARK", "MARK_LEGENDS", "MISMATCH_LEGEND", "MISMATCH_MARK",
            "SELF_REPORTED_LEGEND", "SELF_REPORTED_MARK", "VERIFIED_LEGEND", "VERIFIED_MARK", "copies_excluded_mark"]
__all__ += ["UNPROMPTABLE_LEGEND", "UNPROMPTABLE_MARK", "missing_negative_blocks", "same_country_fallback_blocks",
            "same_country_fallback_note", "unpromptable_mask"]
