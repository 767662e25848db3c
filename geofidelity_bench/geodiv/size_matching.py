"""Size-matched (rarefied) GeoDiv diversity and bootstrap intervals (docs/benchmark.md section 9, GeoDiv).

The normalized Hill number of ``n`` answers over ``|A|`` options is at most
``(min(n, |A|) - 1) / (|A| - 1)`` (0.286 for 3 images and 8 options), so a group of 29 images
looks more diverse than a group of 3 drawn from the same distribution. Two companions to the
paper's plain score:

* **rarefaction**: every group is subsampled without replacement to a common size ``m``
  (default: the smallest group of at least ``|A|min`` images, ``|A|min`` being the fewest options
  of any question of the bank, so that at least one question's D can reach 1 on ``m`` images;
  :func:`common_size`), the group's scores are computed on each subsample exactly as on a whole
  group (the same none-of-the-above and coverage rules, with ``m`` images), and the mean and the
  central interval over the subsamples are reported (the interval widened to hold the mean when
  nearly every subsample gives one value). When the group has no more than ``replicates`` subsets
  of size ``m``, all of them are used (the exact expectation); otherwise ``replicates`` random
  subsets;
* **bootstrap**: ``replicates`` resamples of the group's ``n`` images with replacement give the
  spread of the plain score; the interval is that spread placed on the plain score
  (:func:`bootstrap_interval`). Not the plain percentile interval: a resample repeats images
  (about 63 % of them are distinct), and repeats lower D, so the resamples' D sits below the plain
  score and a percentile interval can miss it altogether (0.627 [0.32, 0.57] for the entity
  diversity of 9 varied images).

Draws are seeded from ``seed`` and the group's key (``numpy.random.default_rng([seed,
zlib.crc32(key), stream])``, stream 0 for the bootstrap, 1 for the subsamples), so a group's
numbers do not depend on which other groups are in the table (only ``m`` does). Everything is
numpy over answer codes; the scoring rules are those of
:func:`geofidelity_bench.geodiv.diversity.score_question` (a test checks the two against each
other subset by subset).
"""

from __future__ import annotations

import itertools
import math
import zlib
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .questions import VDI_KINDS, Question

#: Answer codes: an option's index (0, 1, ...), or one of these.
NONE_CODE = -1
NOT_COUNTED_CODE = -2  # unparseable or not answered

DEFAULT_REPLICATES = 200
DEFAULT_INTERVAL = 0.95
DEFAULT_SEED = 0


@dataclass(frozen=True)
class SizeMatching:
    """How the size-matched and bootstrap numbers were made (recorded with the tables)."""

    n: int | None  # the common size m; None when no group has 2 images
    n_source: str  # how m was chosen (see :func:`common_size`)
    replicates: int
    seed: int
    interval: float
    min_options: int | None = None  # |A|min: the fewest options of any question of the bank

    @property
    def too_small(self) -> bool:
        """Whether ``m`` is below ``|A|min``: no question's D can reach 1 on ``m`` images."""
        return self.n is not None and self.min_options is not None and self.n < self.min_options

    def as_dict(self) -> dict:
        return {
            "n": self.n, "n_source": self.n_source, "replicates": self.replicates, "seed": self.seed,
            "interval": self.interval, "min_options": self.min_options,
            "method": ("rarefaction: each group subsampled without replacement to n images (all subsets when "
                       "there are at most `replicates` of them, else `replicates` random ones); mean of the "
                       "group's scores over the subsamples and the central `interval` share of them (widened to "
                       "hold the mean). Bootstrap: `replicates` resamples of the group's images with replacement; "
                       "interval = plain score - (median - lower percentile), plain score + (upper percentile - "
                       "median) of the resamples' scores, clipped to [0, the most the score can be on the group's "
                       "n images]: the resamples' spread placed on the plain score, which therefore lies inside "
                       "it (repeated images lower D, so the resamples' own percentiles sit below the plain score)"),
        }


def min_options(questions: Sequence[Question]) -> int | None:
    """``|A|min``: the fewest options of any question (4 in ``geodiv-street@1.0.0``); None without questions."""
    return min((q.n_options for q in questions), default=None)


def common_size(group_sizes: Sequence[int], n: int | None = None, least: int = 2) -> tuple[int | None, str]:
    """The common size ``m`` and how it was chosen.

    Given ``n``: ``n``. Otherwise the smallest group of at least ``least`` images (the caller
    passes ``|A|min``, :func:`min_options`): on fewer images than options no question's D can
    reach 1, and on 2 images a question's D is either 0 or ``1 / (|A| - 1)`` (0.25 for 5 options),
    so nearly every group would read the same. When no group has ``least`` images, the smallest
    group of at least 2 (and the tables warn that such an ``m`` can hardly tell groups apart);
    None when no group has 2 images.
    """
    if n is not None:
        if isinstance(n, bool) or int(n) != n or n < 2:
            raise ValueError(f"the size-matching n must be an integer >= 2 (a diversity needs 2 images), got {n!r}")
        return int(n), "given"
    least = max(2, int(least))
    sizes = [int(s) for s in group_sizes if s >= least]
    if sizes:
        return min(sizes), (f"smallest group of >= {least} images ({least}: the fewest options of any question)"
                            if least > 2 else "smallest group of >= 2 images")
    sizes = [int(s) for s in group_sizes if s >= 2]
    return (min(sizes) if sizes else None), (f"smallest group of >= 2 images, as no group has {least} (the fewest "
                                             "options of any question)" if least > 2 else
                                             "smallest group of >= 2 images")


def answer_codes(question: Question, statuses: Sequence[str], choices: Sequence[object | None]) -> np.ndarray:
    """One code per image: the option's index, :data:`NONE_CODE` or :data:`NOT_COUNTED_CODE`."""
    index = {o: i for i, o in enumerate(question.options)}
    out = np.full(len(statuses), NOT_COUNTED_CODE, dtype=np.int64)
    for i, (status, choice) in enumerate(zip(statuses, choices)):
        if status == "ok":
            out[i] = index[choice]
        elif status == "none":
            out[i] = NONE_CODE
    return out


def score_draws(question: Question, codes: np.ndarray, draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(D, mean rating) of ``question`` on every draw (a row of image indices), NaN where not scored.

    Each draw is treated as a group of ``draws.shape[1]`` images: the rules of
    :func:`~geofidelity_bench.geodiv.diversity.score_question` (none counted above 30 % of the
    parsed answers, coverage of at least 50 % of the images, at least 2 images).
    """
    sub = np.asarray(codes)[draws]  # (R, m)
    m = sub.shape[1]
    k = question.n_options
    counts = (sub[..., None] == np.arange(k)).sum(axis=1)  # (R, k)
    n_none = (sub == NONE_CODE).sum(axis=1)
    n_answered = counts.sum(axis=1) + n_none
    none_counted = (question.none_option is not None) & (n_answered > 0) & (10 * n_none > 3 * n_answered)
    full = np.concatenate([counts, np.where(none_counted, n_none, 0)[:, None]], axis=1).astype(float)
    n_counted = full.sum(axis=1)
    scored = (n_counted > 0) & (2 * n_counted >= m) & (m >= 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = full / n_counted[:, None]
        entropy = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(axis=1)
        d = np.clip((np.exp(entropy) - 1.0) / (k + none_counted - 1), 0.0, 1.0)
        if question.ratings is not None:
            ratings = np.array([question.rating_of(o) for o in question.options], dtype=float)
            mean = (counts * ratings).sum(axis=1) / n_counted
        else:
            mean = np.full(len(sub), np.nan)
    return np.where(scored, d, np.nan), np.where(scored, mean, np.nan)


def group_scores_on_draws(
    questions: Sequence[Question], codes: Mapping[str, np.ndarray], draws: np.ndarray
) -> dict[str, np.ndarray]:
    """Per draw, every diversity column of a group row: ``{attribute}_diversity`` (SEVI) and
    ``entity_diversity`` / ``background_diversity`` (mean D over the questions scored in that draw)."""
    out: dict[str, np.ndarray] = {}
    per_kind: dict[str, list[np.ndarray]] = {kind: [] for kind in VDI_KINDS}
    for q in questions:
        d, _ = score_draws(q, codes[q.id], draws)
        if q.kind == "sevi":
            out[f"{q.attribute}_diversity"] = d
        else:
            per_kind[q.kind].append(d)
    for kind, values in per_kind.items():
        if values:
            stack = np.stack(values)
            n = np.isfinite(stack).sum(axis=0)
            total = np.nansum(stack, axis=0)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[f"{kind}_diversity"] = np.where(n > 0, total / np.maximum(n, 1), np.nan)
        else:
            out[f"{kind}_diversity"] = np.full(len(draws), np.nan)
    return out


def _rng(seed: int, key: str, stream: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(key.encode("utf-8")), stream])


def rarefaction_draws(n: int, m: int, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """Subsets of ``m`` of ``n`` image indices: all of them when there are at most ``replicates``,
    else ``replicates`` drawn uniformly without replacement (one row each)."""
    if m > n:
        raise ValueError(f"cannot subsample {m} of {n} images")
    if math.comb(n, m) <= replicates:
        return np.array(list(itertools.combinations(range(n), m)), dtype=np.int64).reshape(-1, m)
    return np.argsort(rng.random((replicates, n)), axis=1)[:, :m]


def bootstrap_draws(n: int, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """``replicates`` resamples of ``n`` image indices with replacement."""
    return rng.integers(0, n, size=(replicates, n))


def summarize(values: np.ndarray, interval: float) -> tuple[float, float, float]:
    """(mean, lower, upper) over the draws where the score exists; NaN when none does.

    The central ``interval`` share of the draws (percentiles ``(1 - interval) / 2`` and
    ``(1 + interval) / 2``, numpy's linear interpolation), widened to hold the mean: a mean can
    lie outside the central share when nearly every draw gives one value (the mean is then an
    end of the interval)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return math.nan, math.nan, math.nan
    tail = 100 * (1 - interval) / 2
    lo, hi = np.percentile(finite, [tail, 100 - tail])
    mean = float(finite.mean())
    return mean, min(float(lo), mean), max(float(hi), mean)


def bootstrap_interval(estimate: float, values: np.ndarray, interval: float,
                       upper: float = 1.0) -> tuple[float, float]:
    """The interval of a plain score from its bootstrap resamples' scores ``values``.

    ``(estimate - (median - q_lo), estimate + (q_hi - median))`` with ``q_lo``, ``median``,
    ``q_hi`` the ``(1 - interval) / 2``, 0.5 and ``(1 + interval) / 2`` percentiles of the finite
    ``values`` (numpy's linear interpolation), clipped to ``[0, upper]`` (``upper``: the most the
    score can be, :func:`attainable_max`). It is the resamples' spread placed on the estimate: a
    percentile interval corrected for the median bias of the resamples. As ``q_lo <= median <=
    q_hi``, it always holds the estimate (a plain percentile interval need not: repeated images
    lower D, so the resamples' scores sit below the estimate). (NaN, NaN) when the estimate is
    NaN or no resample has a score.
    """
    finite = values[np.isfinite(values)]
    if finite.size == 0 or not math.isfinite(estimate):
        return math.nan, math.nan
    tail = 100 * (1 - interval) / 2
    lo, median, hi = (float(v) for v in np.percentile(finite, [tail, 50.0, 100 - tail]))
    return max(0.0, min(estimate, estimate - (median - lo))), min(max(upper, estimate), estimate + (hi - median))


def attainable_max(questions: Sequence[Question], column: str, n_images: int) -> float:
    """The most ``column`` can be on ``n_images`` images: ``(min(n, |A|) - 1) / (|A| - 1)`` for a
    SEVI question, the largest of these over the questions of the kind for a VDI mean (a mean is at
    most its largest term; counting none of the above as an option never raises the bound)."""
    def cap(q: Question) -> float:
        k = q.n_options
        return (min(n_images, k) - 1) / (k - 1)

    kind = column[: -len("_diversity")]
    caps = [cap(q) for q in questions if (q.kind == kind if kind in VDI_KINDS else
                                          (q.kind == "sevi" and q.attribute == kind))]
    return max(caps, default=1.0)


def size_matched_columns(
    questions: Sequence[Question],
    codes: Mapping[str, np.ndarray],
    n_images: int,
    group_key: str,
    matching: SizeMatching,
    estimates: Mapping[str, float],
) -> dict[str, float]:
    """The bootstrap interval (``{col}_lo``, ``{col}_hi``, around ``estimates[col]``, the group's
    plain score: :func:`bootstrap_interval`) and the size-matched mean and interval
    (``{col}_rarefied``, ``{col}_rarefied_lo``, ``{col}_rarefied_hi``) of every diversity column."""
    out: dict[str, float] = {}
    boot: dict[str, np.ndarray] = {}
    rare: dict[str, np.ndarray] = {}
    if n_images >= 2:
        boot = group_scores_on_draws(
            questions, codes, bootstrap_draws(n_images, matching.replicates, _rng(matching.seed, group_key, 0)))
    if matching.n is not None and n_images >= matching.n:
        draws = rarefaction_draws(n_images, matching.n, matching.replicates, _rng(matching.seed, group_key, 1))
        rare = group_scores_on_draws(questions, codes, draws)
    for col in diversity_columns(questions):
        lo, hi = (bootstrap_interval(float(estimates[col]), boot[col], matching.interval,
                                     attainable_max(questions, col, n_images))
                  if col in boot else (math.nan, math.nan))
        mean, rlo, rhi = summarize(rare[col], matching.interval) if col in rare else (math.nan,) * 3
        out.update({f"{col}_lo": lo, f"{col}_hi": hi, f"{col}_rarefied": mean,
                    f"{col}_rarefied_lo": rlo, f"{col}_rarefied_hi": rhi})
    return out


def diversity_columns(questions: Sequence[Question]) -> list[str]:
    """The per-group diversity columns, in table order."""
    cols = [f"{q.attribute}_diversity" for q in questions if q.kind == "sevi"]
    return cols + [f"{kind}_diversity" for kind in VDI_KINDS]
