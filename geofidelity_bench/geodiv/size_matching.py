"""Size-matched (rarefied) GeoDiv diversity and bootstrap intervals (docs/benchmark.md section 9, GeoDiv).

The normalized Hill number of ``n`` answers over ``|A|`` options is at most
``(min(n, |A|) - 1) / (|A| - 1)`` (0.286 for 3 images and 8 options), so a group of 29 images
looks more diverse than a group of 3 drawn from the same distribution. Two companions to the
paper's plain score:

* **rarefaction**: every group is subsampled without replacement to a common size ``m``
  (default: the smallest group of at least 2 images), the group's scores are computed on each
  subsample exactly as on a whole group (the same none-of-the-above and coverage rules, with
  ``m`` images), and the mean and a percentile interval over the subsamples are reported. When
  the group has no more than ``replicates`` subsets of size ``m``, all of them are used (the
  exact expectation); otherwise ``replicates`` random subsets;
* **bootstrap**: ``replicates`` resamples of the group's ``n`` images with replacement give a
  percentile interval for the plain score.

Draws are seeded from ``seed`` and the group's key, so a group's numbers do not depend on which
other groups are in the table (only ``m`` does). Everything is numpy over answer codes; the
scoring rules are those of :func:`geofidelity_bench.geodiv.diversity.score_question` (a test
checks the two against each other subset by subset).
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
    n_source: str  # "smallest group of >= 2 images" or "given"
    replicates: int
    seed: int
    interval: float

    def as_dict(self) -> dict:
        return {
            "n": self.n, "n_source": self.n_source, "replicates": self.replicates, "seed": self.seed,
            "interval": self.interval,
            "method": ("rarefaction: each group subsampled without replacement to n images (all subsets when "
                       "there are at most `replicates` of them, else `replicates` random ones); mean and "
                       "percentile interval of the group's scores over the subsamples. Bootstrap: `replicates` "
                       "resamples of the group's images with replacement, percentile interval of the plain score"),
        }


def common_size(group_sizes: Sequence[int], n: int | None = None) -> tuple[int | None, str]:
    """The common size ``m`` (given, or the smallest group of at least 2 images) and where it came from."""
    if n is not None:
        if isinstance(n, bool) or int(n) != n or n < 2:
            raise ValueError(f"the size-matching n must be an integer >= 2 (a diversity needs 2 images), got {n!r}")
        return int(n), "given"
    sizes = [int(s) for s in group_sizes if s >= 2]
    return (min(sizes) if sizes else None), "smallest group of >= 2 images"


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
    """(mean, lower, upper percentile) over the draws where the score exists; NaN when none does."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return math.nan, math.nan, math.nan
    tail = 100 * (1 - interval) / 2
    lo, hi = np.percentile(finite, [tail, 100 - tail])
    return float(finite.mean()), float(lo), float(hi)


def size_matched_columns(
    questions: Sequence[Question],
    codes: Mapping[str, np.ndarray],
    n_images: int,
    group_key: str,
    matching: SizeMatching,
) -> dict[str, float]:
    """The bootstrap interval (``{col}_lo``, ``{col}_hi``) and the size-matched mean and interval
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
        _, lo, hi = summarize(boot[col], matching.interval) if col in boot else (math.nan,) * 3
        mean, rlo, rhi = summarize(rare[col], matching.interval) if col in rare else (math.nan,) * 3
        out.update({f"{col}_lo": lo, f"{col}_hi": hi, f"{col}_rarefied": mean,
                    f"{col}_rarefied_lo": rlo, f"{col}_rarefied_hi": rhi})
    return out


def diversity_columns(questions: Sequence[Question]) -> list[str]:
    """The per-group diversity columns, in table order."""
    cols = [f"{q.attribute}_diversity" for q in questions if q.kind == "sevi"]
    return cols + [f"{kind}_diversity" for kind in VDI_KINDS]
