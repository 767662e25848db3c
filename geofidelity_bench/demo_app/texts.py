"""What every score means, in words: plain-language readings and the About page. Labels,
directions, ranges and one-line meanings come from :mod:`geofidelity_bench.metrics.catalog`.

Nothing here imports gradio, torch or pandas, so any front end (this demo app, the metric
Space's app) can share the wording.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from ..caveats import chance_sentence
from ..citation import CITATION_MARKDOWN
from ..metrics.catalog import NEGATIVE_LABELS, RESULT_METRICS, MetricInfo

#: How to present one result column: the catalog's record (``key``, ``label``, ``direction``,
#: ``higher_is_better``, ``meaning``, ``range``).
ScoreInfo = MetricInfo

SCORES: tuple[ScoreInfo, ...] = RESULT_METRICS
SCORE_BY_KEY: dict[str, ScoreInfo] = {s.key: s for s in SCORES}

#: Candidate role -> how to call it in a sentence.
CANDIDATE_PHRASES: dict[str, str] = {
    "target": "the target block",
    "same_neighborhood": "the same-neighborhood alternative",
    "same_city": "the same-city alternative",
    "same_driving_side": "the same-driving-side block (another city)",
    "random_city": "the random-city block",
}
ANCHOR_LABELS: dict[str, str] = {
    "heldout_real": "held-out real photos of this block",
    "random_same_country": "random photos from the same country",
    "random_global": "random photos from anywhere",
}
ANCHOR_SHORT: dict[str, str] = {
    "heldout_real": "held-out real",
    "random_same_country": "same country",
    "random_global": "global",
}
#: The random-same-country anchor of a block that is the only one of its country: its photos come from all
#: other blocks (docs/benchmark.md section 6), so it is never called "same country" there
#: (:func:`geofidelity_bench.caveats.same_country_fallback_note` says why).
FALLBACK_ANCHOR_LABELS: dict[str, str] = {
    "random_same_country": "random photos from all other blocks",
}
FALLBACK_ANCHOR_SHORT: dict[str, str] = {"random_same_country": "same country = all blocks"}


def anchor_labels(same_country_fallback: bool, short: bool = False) -> dict[str, str]:
    """How to call each anchor of a block in a sentence (``short``: on a plot); ``same_country_fallback``: the
    block is the only one of its country, so its random-same-country anchor draws from all other blocks."""
    labels = dict(ANCHOR_SHORT if short else ANCHOR_LABELS)
    if same_country_fallback:
        labels.update(FALLBACK_ANCHOR_SHORT if short else FALLBACK_ANCHOR_LABELS)
    return labels


def score_label(info: ScoreInfo) -> str:
    """``CosSim ↑``, ``MMD² ↓``; scores without a direction say what is good in words."""
    if info.higher_is_better is True:
        return f"{info.label} ↑"
    if info.higher_is_better is False:
        return f"{info.label} ↓"
    if info.key == "diversity_gap":
        return f"{info.label} (0 is ideal)"
    return f"{info.label} (below the target is better)"


def is_missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt(value, digits: int = 3, signed: bool = False) -> str:
    """``n/a`` for a missing value, else a fixed-point number."""
    if is_missing(value):
        return "n/a"
    if isinstance(value, (int, float)):
        return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    return str(value)


def md_escape(text: str) -> str:
    """Escapes Markdown (and HTML) control characters in untrusted text such as file names."""
    out = []
    for ch in str(text):
        if ch in "\\`*_[]#|<>&~":  # enough to keep text literal inside a line or a table cell
            out.append("\\" + ch)
        elif ch in "\r\n\t":
            out.append(" ")
        else:
            out.append(ch)
    return "".join(out)


def candidates_phrase(n_candidates: int, n_distinct: int | None = None) -> str:
    """How many candidates a query is ranked among, counted honestly when one negative block fills
    two roles (it is two candidates under the benchmark's rule, docs/benchmark.md section 5).

    >>> candidates_phrase(5), candidates_phrase(3, 2)
    ('5 candidate blocks', '3 candidates (2 distinct blocks)')
    """
    if n_distinct is None or n_distinct == n_candidates:
        return f"{n_candidates} candidate blocks"
    return f"{n_candidates} candidates ({n_distinct} distinct blocks)"


def retrieval_sentence(accuracy: float, n_images: int, n_candidates: int, n_distinct: int | None = None) -> str:
    """E.g. ``2 of 4 images picked the target block out of 5 candidate blocks``."""
    if is_missing(accuracy):
        return "n/a"
    hits = int(round(accuracy * n_images))
    noun = "image" if n_images == 1 else "images"
    return f"{hits} of {n_images} {noun} picked the target block out of {candidates_phrase(n_candidates, n_distinct)}"


def chance_phrase(chance_acc: float, n_candidates: int | None = None, n_distinct: int | None = None) -> str:
    """The chance level of retrieval accuracy, saying how the candidates are counted.

    >>> chance_phrase(0.2, 5)
    '1 in 5 by chance here'
    >>> chance_phrase(0.25, 5, 4)
    '1 in 4 by chance here (5 candidates, 4 distinct blocks: a block filling two roles ranks twice, ties count against the target)'
    """
    text = chance_sentence(chance_acc)
    if n_candidates is not None and n_distinct is not None and n_distinct != n_candidates:
        text += (f" ({n_candidates} candidates, {n_distinct} distinct blocks: a block filling two roles ranks twice, "
                 "ties count against the target)")
    return text


def mrr_chance_phrase(chance_mrr: float) -> str:
    """``0.52 by chance here`` (the MRR of random images against the same candidates)."""
    return "chance level unknown here" if is_missing(chance_mrr) else f"{chance_mrr:.2f} by chance here"


def margin_sentence(value: float, *, local: bool) -> str:
    if is_missing(value):
        return ("this block has no same-city alternative, so there is no local margin" if local
                else "this block has no alternative blocks, so there is no margin")
    other = "the same-city alternative" if local else "the most similar alternative block"
    if value > 0:
        return f"closer to the target than to {other} (by {value:.3f})"
    if value < 0:
        return f"closer to {other} than to the target (by {-value:.3f})"
    return f"exactly as close to {other} as to the target"


def anchor_comparison(key: str, value: float, anchors: Mapping[str, float],
                      labels: Mapping[str, str] | None = None) -> str:
    """Where ``value`` sits among this block's real-image anchors (better than / worse than); ``labels``:
    how to call each anchor (default :data:`ANCHOR_LABELS`; :func:`anchor_labels` for the block)."""
    labels = ANCHOR_LABELS if labels is None else labels
    info = SCORE_BY_KEY.get(key)
    if info is None or info.higher_is_better is None or is_missing(value):
        return ""
    known = {m: v for m, v in anchors.items() if not is_missing(v)}
    if not known:
        return ""
    better, worse = [], []
    for method, ref in sorted(known.items(), key=lambda kv: kv[1], reverse=not info.higher_is_better):
        beats = value >= ref if info.higher_is_better else value <= ref
        (better if beats else worse).append(f"{labels.get(method, method)} ({ref:.3f})")
    parts = []
    if better:
        parts.append("as good as or better than " + _join(better))
    if worse:
        parts.append("worse than " + _join(worse))
    return "; ".join(parts)


def _join(items: Sequence[str]) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def reading(key: str, row: Mapping[str, float], *, n_images: int, n_candidates: int,
            nan_reason: str | None = None, n_distinct: int | None = None,
            chance: tuple[float, float] | None = None) -> str:
    """A plain-language sentence about one score of a scored panel; ``chance`` (accuracy, MRR of random
    images against the same candidates) is said next to retrieval accuracy and MRR."""
    text = _reading(key, row, n_images=n_images, n_candidates=n_candidates, nan_reason=nan_reason,
                    n_distinct=n_distinct)
    if chance is not None and key == "retrieval_acc" and not is_missing(row.get(key)):
        text += "; " + chance_phrase(chance[0], n_candidates, n_distinct)
    elif chance is not None and key == "mrr" and not is_missing(row.get(key)):
        text += "; " + mrr_chance_phrase(chance[1])
    return text


def _reading(key: str, row: Mapping[str, float], *, n_images: int, n_candidates: int,
             nan_reason: str | None = None, n_distinct: int | None = None) -> str:
    value = row.get(key)
    if is_missing(value):
        if key == "local_margin":
            return margin_sentence(value, local=True)
        if key == "strongest_margin":
            return margin_sentence(value, local=False)
        if key.startswith("sim_"):
            return "this block has no such alternative"
        return f"not computed: {nan_reason}" if nan_reason else "not computed"
    if key == "cos_sim":
        level = ("very close to" if value >= 0.9 else "close to" if value >= 0.75
                 else "somewhat like" if value >= 0.5 else "far from")
        return f"the average look of your images is {level} the average look of the block's real photos"
    if key == "mmd":
        return ("as a set, your images are hard to tell apart from the real photos" if value < 0.05
                else "as a set, your images are distinguishable from the real photos")
    if key == "dcsf":
        return ("near the ideal 0: close to the real photos and about as varied" if value < 0.05
                else "set distance plus the variety penalty; lower is better")
    if key == "diversity_gap":
        if value > 0.01:
            return "your images are less varied than the real photos"
        if value < -0.01:
            return "your images are more varied than the real photos"
        return "about as varied as the real photos"
    if key == "gaas":
        return "difference in scene composition (road, buildings, vegetation, sky, ...); lower is better"
    if key == "retrieval_acc":
        return retrieval_sentence(value, n_images, n_candidates, n_distinct)
    if key == "mrr":
        among = candidates_phrase(n_candidates, n_distinct).replace(" candidate blocks", " candidates")
        return (f"the target's typical position among the {among} is about {1.0 / value:.1f} "
                "(harmonic mean; 1 = always first)")
    if key == "local_margin":
        return margin_sentence(value, local=True)
    if key == "strongest_margin":
        return margin_sentence(value, local=False)
    if key == "sim_target":
        return "mean similarity to the target block's photos"
    if key.startswith("sim_"):
        target = row.get("sim_target")
        role = key[4:]
        phrase = CANDIDATE_PHRASES.get(role, role)
        if is_missing(target):
            return f"mean similarity to {phrase}"
        return (f"{phrase} looks less like your images than the target does" if value < target
                else f"{phrase} looks at least as much like your images as the target does")
    return ""


def best_candidate_phrase(role: str, block_id: str | None) -> str:
    phrase = CANDIDATE_PHRASES.get(role, role)
    if role == "target":
        return f"{phrase} ✓"
    return f"{phrase} ({block_id})" if block_id else phrase


ABOUT_MARKDOWN = """\
## What GeoFidelity-Bench measures

When a text-to-image model is asked for a **named street block** ("a street-level photograph
taken on Rue X in the Y district of Paris"), does it draw *that* place, or a generic street of the
city? GeoFidelity-Bench answers with panels of real street-level photos per block, retrieval
against geographically related look-alike blocks, set-level fidelity and diversity scores, and
real-image anchors that say what "good" looks like.

Generated images are grouped by their target block into **panels** (2 or more images per block,
4 in the benchmark). Every image is embedded with an image encoder (the reference encoder is
DINOv2 ViT-B/14, `facebook/dinov2-base`, CLS token, 224x224 center crop) and each panel is compared
with the target block's real **reference gallery** and, for retrieval, with the galleries of up
to four **negative blocks**: one in the same neighborhood, one in the same city, one in another
city with the same driving side, and one in a random city. A few real photos of every block are
**held out** of its gallery; they serve as real "queries" (the *held-out real* anchor).

## The scores

| score | range | better | what it says |
| --- | --- | --- | --- |
{score_rows}

Formulas, as in the metric card:

- **CosSim**: cosine between the mean generated embedding and the mean gallery embedding.
- **MMD²**: unbiased maximum mean discrepancy with an RBF kernel on the raw embeddings, bandwidth
  `gamma = 1 / median` of the positive squared distances of the pooled set, clamped at 0.
- **DCSF** (diversity-corrected set fidelity): `MMD² + 0.5 * max(0, Div(gallery) - Div(panel))`,
  where Div is the mean pairwise cosine distance; the **diversity gap** `Div(gallery) - Div(panel)`
  is reported too.
- **GAAS**: Jensen-Shannon distance between the scene compositions (road, sidewalk, building,
  vehicle, vegetation, sky, pole, sign shares from semantic segmentation) of panel and gallery.
  It needs a semantic segmenter; this app runs without one, so GAAS shows as n/a.
- **Retrieval**: each generated image ranks the candidate panels (target + existing negatives) by
  cosine to their L2-normalized mean embedding; **accuracy** is the share that ranks the target
  first, **MRR** the mean reciprocal rank.
- **sim_\\***: the mean similarity to each candidate; **local margin** =
  `sim_target - max(same-neighborhood, same-city)`, **strongest-negative margin** =
  `sim_target - max(all negatives)`.

## Real-image anchors

Every table carries three reference points, scored exactly like a generator with panels of 4 real
photos: **held-out real** (the block's own held-out photos: what a perfect generator could reach),
**random same country** (photos of other blocks in the same country; of all other blocks when no other
block shares the block's country, where it says nothing about the country) and **random global** (photos
of any other block). A generator that scores like *random global* draws a generic street; one
that approaches *held-out real* draws the block.

Reference values (paper Table 10, full benchmark of 112 blocks in 25 cities, DINOv2): held-out real
CosSim 0.902, DCSF 0.036, retrieval 0.855; random same country 0.710 / 0.160 / 0.259; random global
0.333 / 0.249 / 0.163; the mean of six open-weight generators prompted with street and neighborhood
names 0.499 / 0.596 / 0.399.

## Limitations

- **Coverage and capture bias.** Reference photos come from Mapillary (dashcam, phone and
  action-camera frames from the road, in the season and light of their capture); a low score says
  the images differ from *those* photos, not from the street as a whole.
- **Encoder dependence.** Every score lives in the embedding space of its encoder; only DINOv2
  scores are comparable with the paper. The app names the encoder with every result.
- **Appearance, not correctness.** A panel can match a block's look and still contain wrong details.
- **The embedded demo benchmark is tiny** (7 blocks in Arezzo, Berlin and Lund; street names are
  known only for Berlin). It exists to try the pipeline offline; its numbers say nothing about a
  model.

## Citation

{citation}
"""


def about_markdown() -> str:
    """The About page: what the scores mean (text of the metric card)."""
    rows = []
    for info in SCORES:
        if info.key.startswith("sim_") and info.key != "sim_target":
            continue
        span = info.range.replace(" ", "&nbsp;")
        rows.append(f"| {info.label} | {span} | {info.direction} | {info.meaning} |")
    rows.append("| sim: negatives | [-1,&nbsp;1] | below the target is better | Mean similarity to each "
                f"look-alike block ({', '.join(NEGATIVE_LABELS.values())}). |")
    return ABOUT_MARKDOWN.format(score_rows="\n".join(rows), citation=CITATION_MARKDOWN)
