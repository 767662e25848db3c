"""GeoDiv diversity tables from parsed VQA answers, exactly as docs/benchmark.md section 9, GeoDiv states.

Per (group, question), from the answers of the group's images:

* unparseable replies are dropped and counted (``n_unparseable``);
* "none of the above" answers are dropped unless they are MORE than 30% of the question's
  parsed answers (options + none; unparseable replies are not answers), in which case "none
  of the above" counts as one more option: ``|A| + 1`` (exactly 30% is dropped);
* ``|A|`` counts every option of the question, chosen or not;
* if the answers left (``n_counted``) cover fewer than 50% of the group's images, the
  (group, question) is dropped (no score) and reported in ``dropped``; exactly 50% is kept;
* the score is ``D = normalized_hill(counts, |A|)``
  (:func:`geofidelity_bench.metrics.normalized_hill`);
* a group of one image has no diversity (status ``single_image``: D is n/a, never 0; its mean
  rating is kept).

Entity (background) diversity of a group is the mean D over its kept entity (background)
questions. SEVI questions (``|A| = 5``, no none option) give the mean rating (1..5) of their
counted answers and the diversity of the rating distribution.

Beside every diversity column, a bootstrap interval over images (the resamples' spread placed
on the plain score, which it always holds) and the size-matched (rarefied) mean and interval
(:mod:`geofidelity_bench.geodiv.size_matching`): D grows with the number of images, so groups of
different sizes are compared by the rarefied columns.

Everything here is pandas/numpy on the answers table; nothing calls a model.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from ..metrics import normalized_hill
from .parser import NONE, OK, UNPARSEABLE
from .questions import VDI_KINDS, Question, QuestionBank
from .size_matching import (
    DEFAULT_INTERVAL,
    DEFAULT_REPLICATES,
    DEFAULT_SEED,
    SizeMatching,
    answer_codes,
    common_size,
    diversity_columns,
    min_options,
    size_matched_columns,
)

#: "None of the above" counts as an option only when its share of the parsed answers exceeds this.
NONE_SHARE_THRESHOLD = 0.30
#: A (group, question) needs counted answers for at least this share of the group's images.
MIN_COVERAGE = 0.50

LOW_COVERAGE = "low_coverage"
SINGLE_IMAGE = "single_image"
#: Why a group's diversity is n/a (``diversity_na_reason``).
SINGLE_IMAGE_REASON = "one image: a diversity needs at least 2 images"

PER_QUESTION_COLUMNS = [
    "question_id", "kind", "attribute", "n_images", "n_answered", "n_unparseable", "n_none", "none_counted",
    "n_counted", "coverage", "n_options", "diversity", "mean_rating", "status", "counts",
]


@dataclass(frozen=True)
class QuestionScore:
    """The diversity bookkeeping of one (group, question).

    ``counts`` maps every option (and the none option when it counts) to its count, in
    letter order; ``diversity`` and ``mean_rating`` are NaN when the question is dropped
    (``status`` is then ``"low_coverage"``, else ``"ok"``); in a group of one image
    ``diversity`` is NaN and ``status`` is ``"single_image"`` (the mean rating is kept).
    """

    question_id: str
    kind: str
    attribute: str
    n_images: int
    n_answered: int
    n_unparseable: int
    n_none: int
    none_counted: bool
    n_counted: int
    coverage: float
    n_options: int
    diversity: float
    mean_rating: float
    status: str
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def dropped(self) -> bool:
        return self.status != "ok"

    def as_row(self) -> dict[str, Any]:
        return {c: getattr(self, c) for c in PER_QUESTION_COLUMNS}


def score_question(
    question: Question, answers: Iterable[tuple[str, str | None]], n_images: int | None = None
) -> QuestionScore:
    """Scores one question from ``(status, choice)`` pairs, one per image.

    Args:
        question: the question (its options define ``|A|``).
        answers: ``(status, choice)`` with status ``"ok"`` / ``"none"`` / ``"unparseable"``
            (as :func:`~geofidelity_bench.geodiv.parser.parse_answer` gives them).
        n_images: how many images the group has (default: the number of answers); images
            without any reply count as not answered.
    """
    answers = list(answers)
    n_images = len(answers) if n_images is None else int(n_images)
    if n_images < len(answers):
        raise ValueError(f"{question.id}: {len(answers)} answers for {n_images} images")
    counts = {o: 0 for o in question.options}
    n_none = n_unparseable = 0
    for status, choice in answers:
        if status == OK:
            if choice not in counts:
                raise ValueError(f"{question.id}: answer {choice!r} is not one of its options")
            counts[choice] += 1
        elif status == NONE:
            n_none += 1
        elif status == UNPARSEABLE:
            n_unparseable += 1
        else:
            raise ValueError(f"{question.id}: unknown answer status {status!r}")
    n_ok = sum(counts.values())
    n_answered = n_ok + n_none
    # "exceeds 30%", in integers so that exactly 30% is never rounded above the threshold.
    none_counted = question.none_option is not None and n_answered > 0 and 10 * n_none > 3 * n_answered
    if none_counted:
        counts[question.none_option] = n_none
    n_counted = n_ok + (n_none if none_counted else 0)
    n_options = question.n_options + (1 if none_counted else 0)
    coverage = n_counted / n_images if n_images else math.nan
    diversity = mean_rating = math.nan
    if n_counted == 0 or 2 * n_counted < n_images:  # coverage < 50% (exactly 50% is kept)
        status = LOW_COVERAGE
    else:
        status = "ok" if n_images >= 2 else SINGLE_IMAGE
        if n_images >= 2:
            diversity = normalized_hill(list(counts.values()), n_options)
        if question.ratings is not None:
            mean_rating = sum(question.rating_of(o) * c for o, c in counts.items()) / n_counted
    return QuestionScore(
        question_id=question.id, kind=question.kind, attribute=question.attribute, n_images=n_images,
        n_answered=n_answered, n_unparseable=n_unparseable, n_none=n_none, none_counted=bool(none_counted),
        n_counted=n_counted, coverage=coverage, n_options=n_options, diversity=diversity,
        mean_rating=mean_rating, status=status, counts=counts,
    )


@dataclass
class GeoDivTables:
    """GeoDiv results for one grouping.

    Attributes:
        group_by: the grouping columns.
        per_group: one row per group: ``n_images``, ``{attribute}_mean`` and
            ``{attribute}_diversity`` for every SEVI question (``affluence_*``,
            ``maintenance_*``), ``entity_diversity``, ``background_diversity`` (means over
            kept questions), ``n_entity_questions`` / ``n_background_questions`` (kept),
            ``n_dropped_questions``, ``n_unparseable`` and ``unparseable_rate`` (over all replies).
            Beside every diversity column ``{col}``: ``{col}_lo`` / ``{col}_hi`` (bootstrap
            interval over images, holding ``{col}``:
            :func:`~geofidelity_bench.geodiv.size_matching.bootstrap_interval`),
            ``{col}_rarefied`` with ``{col}_rarefied_lo`` / ``{col}_rarefied_hi`` (size-matched to
            ``rarefy_n`` images: compare these across groups), and ``diversity_na_reason`` (why a
            diversity is n/a; empty when none is).
        per_question: one row per (group, question) with the bookkeeping of
            :class:`QuestionScore` (``counts`` as a dict).
        dropped: the (group, question) pairs without a score and why (not the questions of a
            one-image group: its ``diversity_na_reason`` says why).
        question_bank: ``name@version`` of the bank.
        n_images_without_group: images left out because a grouping column was empty.
        size_matching: how the size-matched and bootstrap numbers were made
            (:meth:`~geofidelity_bench.geodiv.size_matching.SizeMatching.as_dict`).
        warnings: what a reader must know before comparing groups (e.g. their sizes differ).
    """

    group_by: list[str]
    per_group: pd.DataFrame
    per_question: pd.DataFrame
    dropped: pd.DataFrame
    question_bank: str
    n_images_without_group: int = 0
    size_matching: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: lists of records (NaN -> None)."""
        return {
            "group_by": list(self.group_by),
            "question_bank": self.question_bank,
            "per_group": _records(self.per_group),
            "per_question": _records(self.per_question),
            "dropped": _records(self.dropped),
            "n_images_without_group": int(self.n_images_without_group),
            "size_matching": dict(self.size_matching),
            "warnings": list(self.warnings),
        }

    def per_question_csv_frame(self) -> pd.DataFrame:
        """``per_question`` with ``counts`` as a JSON string (for CSV)."""
        df = self.per_question.copy()
        df["counts"] = [json.dumps(c, ensure_ascii=False) for c in df["counts"]]
        return df


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _clean(v) for k, v in row.items()} for row in df.to_dict("records")]


def _mean(values: Sequence[float]) -> float:
    vals = [v for v in values if not math.isnan(v)]
    return float(sum(vals) / len(vals)) if vals else math.nan


def diversity_tables(
    answers: pd.DataFrame,
    bank: QuestionBank,
    group_by: str | Sequence[str] = "country",
    *,
    rarefy_n: int | None = None,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
    interval: float = DEFAULT_INTERVAL,
) -> GeoDivTables:
    """Per-group SEVI and VDI scores from a long answers table.

    Args:
        answers: one row per (image, question) with columns ``image`` (a unique image key),
            ``question_id``, ``status``, ``choice`` and the grouping columns (what
            :func:`~geofidelity_bench.geodiv.pipeline.answer_questions` returns).
        bank: the question bank the answers belong to (defines the options).
        group_by: one column or several (``"country"``, ``["model", "country"]``).
        rarefy_n: the common size groups are subsampled to for the size-matched columns
            (default: the smallest group of at least ``|A|min`` images, the fewest options of any
            question of the bank, else the smallest group of at least 2 with a warning;
            :func:`~geofidelity_bench.geodiv.size_matching.common_size`; groups smaller than it get none).
        replicates: subsamples per group for the size-matched columns, and bootstrap resamples
            for the intervals of the plain ones.
        seed: seeds the draws (with each group's key, so a group's numbers do not depend on the
            other groups).
        interval: the confidence of the intervals (0.95: built from the 2.5th, 50th and 97.5th
            percentiles of the draws).

    Images whose grouping value is missing are left out and counted in
    ``n_images_without_group``. Every image of a group is expected to have been asked every
    question of the bank; a missing reply counts as not answered.
    """
    keys = [group_by] if isinstance(group_by, str) else list(group_by)
    if not keys:
        raise ValueError("group_by needs at least one column")
    if isinstance(replicates, bool) or int(replicates) != replicates or replicates < 1:
        raise ValueError(f"replicates must be an integer >= 1, got {replicates!r}")
    if not 0 < interval < 1:
        raise ValueError(f"interval must be in (0, 1), got {interval!r}")
    missing = [c for c in ("image", "question_id", "status", "choice", *keys) if c not in answers.columns]
    if missing:
        raise ValueError(f"answers table lacks column(s) {missing}; it has {list(answers.columns)}")
    unknown = sorted(set(answers["question_id"]) - {q.id for q in bank})
    if unknown:
        raise ValueError(f"answers name question(s) {unknown} that are not in question bank {bank.label}")
    labelled = answers.dropna(subset=keys)
    labelled = labelled[~labelled[keys].astype(str).eq("").any(axis=1)]
    n_without = int(answers["image"].nunique() - labelled["image"].nunique())
    groups = [(gv if isinstance(gv, tuple) else (gv,), df) for gv, df in labelled.groupby(keys, sort=True, dropna=True)]
    sizes = [int(df["image"].nunique()) for _, df in groups]
    questions = list(bank)
    m, m_source = common_size(sizes, rarefy_n, least=min_options(questions) or 2)
    matching = SizeMatching(m, m_source, int(replicates), int(seed), float(interval), min_options(questions))
    div_cols = diversity_columns(questions)
    group_rows, question_rows = [], []
    sevi = bank.of_kind("sevi")
    for (group_values, df), n_images in zip(groups, sizes):
        group = dict(zip(keys, group_values))
        images = list(dict.fromkeys(df["image"]))
        by_question = {qid: sub for qid, sub in df.groupby("question_id", sort=False)}
        scores: list[QuestionScore] = []
        codes: dict[str, np.ndarray] = {}
        for q in bank:
            sub = by_question.get(q.id)
            pairs = [] if sub is None else list(zip(sub["status"], sub["choice"]))
            score = score_question(q, pairs, n_images)
            scores.append(score)
            question_rows.append({**group, **score.as_row()})
            reply = {} if sub is None else dict(zip(sub["image"], zip(sub["status"], sub["choice"])))
            got = [reply.get(name, ("unparseable", None)) for name in images]
            codes[q.id] = answer_codes(q, [s for s, _ in got], [c for _, c in got])
        row: dict[str, Any] = {**group, "n_images": n_images}
        for q, s in zip(bank, scores):
            if q.kind == "sevi":
                row[f"{q.attribute}_mean"] = s.mean_rating
                row[f"{q.attribute}_diversity"] = s.diversity
        for kind in VDI_KINDS:
            kept = [s.diversity for s in scores if s.kind == kind and s.status == "ok"]
            row[f"{kind}_diversity"] = _mean(kept)
            row[f"n_{kind}_questions"] = len(kept)
        row["n_dropped_questions"] = sum(s.status == LOW_COVERAGE for s in scores)
        n_unp = sum(s.n_unparseable for s in scores)
        n_replies = sum(s.n_answered + s.n_unparseable for s in scores)
        row["n_unparseable"] = n_unp
        row["unparseable_rate"] = n_unp / n_replies if n_replies else math.nan
        row.update(size_matched_columns(questions, codes, n_images, "\x1f".join(map(str, group_values)), matching,
                                        {c: row[c] for c in div_cols}))
        row["rarefy_n"] = m
        row["diversity_na_reason"] = _na_reason(row, div_cols, n_images, m)
        group_rows.append(row)
    sevi_cols = [c for q in sevi for c in (f"{q.attribute}_mean", f"{q.attribute}_diversity")]
    extra = [f"{c}{suffix}" for c in div_cols for suffix in ("_lo", "_hi", "_rarefied", "_rarefied_lo", "_rarefied_hi")]
    group_cols = keys + ["n_images", *sevi_cols, "entity_diversity", "background_diversity", "n_entity_questions",
                         "n_background_questions", "n_dropped_questions", "n_unparseable", "unparseable_rate",
                         *extra, "rarefy_n", "diversity_na_reason"]
    per_group = pd.DataFrame(group_rows, columns=group_cols)
    per_question = pd.DataFrame(question_rows, columns=keys + PER_QUESTION_COLUMNS)
    dropped_mask = per_question["status"] == LOW_COVERAGE
    dropped = per_question.loc[dropped_mask, keys + ["question_id", "kind", "n_images", "n_counted", "coverage",
                                                     "n_unparseable", "status"]].reset_index(drop=True)
    dropped = dropped.rename(columns={"status": "reason"})
    warnings = size_warnings(sizes, matching)
    return GeoDivTables(keys, per_group, per_question, dropped, bank.label, n_without, matching.as_dict(), warnings)


def _na_reason(row: dict[str, Any], div_cols: Sequence[str], n_images: int, m: int | None) -> str:
    if n_images < 2:
        return SINGLE_IMAGE_REASON
    reasons = []
    for col in div_cols:
        if math.isnan(row[col]):
            kind = col.rsplit("_", 1)[0]
            what = "no question kept" if kind in VDI_KINDS else "the question was dropped"
            reasons.append(f"{col}: {what} (counted answers for fewer than {MIN_COVERAGE:.0%} of the images)")
    if m is None:
        reasons.append("no size-matched value: no group has 2 images")
    elif n_images < m:
        reasons.append(f"no size-matched value: fewer than {m} images (the size-matched n)")
    return "; ".join(reasons)


def size_warnings(sizes: Sequence[int], matching: SizeMatching) -> list[str]:
    """What a reader must know before comparing groups of these sizes (empty when nothing)."""
    out = []
    multi = [s for s in sizes if s >= 2]
    if len(set(multi)) > 1:
        out.append(
            f"groups differ in size ({min(multi)} to {max(multi)} images): the plain diversity grows with the number "
            f"of images (at most (n-1)/(|A|-1) for n images), so compare groups by the size-matched columns "
            f"*_diversity_rarefied (each group subsampled to n={matching.n} images, {matching.replicates} draws), "
            "not by the plain *_diversity")
    single = sum(s < 2 for s in sizes)
    if single:
        out.append(f"{single} of {len(sizes)} group(s) have one image: their diversity is n/a (a diversity needs at "
                   "least 2 images)")
    if matching.n is not None:
        small = sum(2 <= s < matching.n for s in sizes)
        if small:
            out.append(f"{small} group(s) have fewer than n={matching.n} images: no size-matched value")
    if matching.too_small:
        m, k = matching.n, matching.min_options
        out.append(
            f"the size-matched n={m} is below {k}, the fewest options of any question: on {m} images a question's "
            f"D is at most ({m}-1)/(|A|-1) ({(m - 1) / 4:.2f} for 5 options)"
            + (", either 0 or that: it only says whether the two images agree, so nearly every group reads the "
               "same" if m == 2 else "")
            + f"; the size-matched columns can hardly tell groups apart (give groups of at least {k} images, or "
            f"--rarefy-n {k} or more)")
    return out
