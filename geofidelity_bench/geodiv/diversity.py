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
  (:func:`geofidelity_bench.metrics.normalized_hill`).

Entity (background) diversity of a group is the mean D over its kept entity (background)
questions. SEVI questions (``|A| = 5``, no none option) give the mean rating (1..5) of their
counted answers and the diversity of the rating distribution.

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

#: "None of the above" counts as an option only when its share of the parsed answers exceeds this.
NONE_SHARE_THRESHOLD = 0.30
#: A (group, question) needs counted answers for at least this share of the group's images.
MIN_COVERAGE = 0.50

LOW_COVERAGE = "low_coverage"

PER_QUESTION_COLUMNS = [
    "question_id", "kind", "attribute", "n_images", "n_answered", "n_unparseable", "n_none", "none_counted",
    "n_counted", "coverage", "n_options", "diversity", "mean_rating", "status", "counts",
]


@dataclass(frozen=True)
class QuestionScore:
    """The diversity bookkeeping of one (group, question).

    ``counts`` maps every option (and the none option when it counts) to its count, in
    letter order; ``diversity`` and ``mean_rating`` are NaN when the question is dropped
    (``status`` is then ``"low_coverage"``, else ``"ok"``).
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
        status = "ok"
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
        per_question: one row per (group, question) with the bookkeeping of
            :class:`QuestionScore` (``counts`` as a dict).
        dropped: the (group, question) pairs without a score and why.
        question_bank: ``name@version`` of the bank.
        n_images_without_group: images left out because a grouping column was empty.
    """

    group_by: list[str]
    per_group: pd.DataFrame
    per_question: pd.DataFrame
    dropped: pd.DataFrame
    question_bank: str
    n_images_without_group: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: lists of records (NaN -> None)."""
        return {
            "group_by": list(self.group_by),
            "question_bank": self.question_bank,
            "per_group": _records(self.per_group),
            "per_question": _records(self.per_question),
            "dropped": _records(self.dropped),
            "n_images_without_group": int(self.n_images_without_group),
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
    answers: pd.DataFrame, bank: QuestionBank, group_by: str | Sequence[str] = "country"
) -> GeoDivTables:
    """Per-group SEVI and VDI scores from a long answers table.

    Args:
        answers: one row per (image, question) with columns ``image`` (a unique image key),
            ``question_id``, ``status``, ``choice`` and the grouping columns (what
            :func:`~geofidelity_bench.geodiv.pipeline.answer_questions` returns).
        bank: the question bank the answers belong to (defines the options).
        group_by: one column or several (``"country"``, ``["model", "country"]``).

    Images whose grouping value is missing are left out and counted in
    ``n_images_without_group``. Every image of a group is expected to have been asked every
    question of the bank; a missing reply counts as not answered.
    """
    keys = [group_by] if isinstance(group_by, str) else list(group_by)
    if not keys:
        raise ValueError("group_by needs at least one column")
    missing = [c for c in ("image", "question_id", "status", "choice", *keys) if c not in answers.columns]
    if missing:
        raise ValueError(f"answers table lacks column(s) {missing}; it has {list(answers.columns)}")
    unknown = sorted(set(answers["question_id"]) - {q.id for q in bank})
    if unknown:
        raise ValueError(f"answers name question(s) {unknown} that are not in question bank {bank.label}")
    labelled = answers.dropna(subset=keys)
    labelled = labelled[~labelled[keys].astype(str).eq("").any(axis=1)]
    n_without = int(answers["image"].nunique() - labelled["image"].nunique())
    group_rows, question_rows = [], []
    sevi = bank.of_kind("sevi")
    for group_values, df in labelled.groupby(keys, sort=True, dropna=True):
        group_values = group_values if isinstance(group_values, tuple) else (group_values,)
        group = dict(zip(keys, group_values))
        n_images = int(df["image"].nunique())
        by_question = {qid: sub for qid, sub in df.groupby("question_id", sort=False)}
        scores: list[QuestionScore] = []
        for q in bank:
            sub = by_question.get(q.id)
            pairs = [] if sub is None else list(zip(sub["status"], sub["choice"]))
            score = score_question(q, pairs, n_images)
            scores.append(score)
            question_rows.append({**group, **score.as_row()})
        row: dict[str, Any] = {**group, "n_images": n_images}
        for q, s in zip(bank, scores):
            if q.kind == "sevi":
                row[f"{q.attribute}_mean"] = s.mean_rating
                row[f"{q.attribute}_diversity"] = s.diversity
        for kind in VDI_KINDS:
            kept = [s.diversity for s in scores if s.kind == kind and not s.dropped]
            row[f"{kind}_diversity"] = _mean(kept)
            row[f"n_{kind}_questions"] = len(kept)
        row["n_dropped_questions"] = sum(s.dropped for s in scores)
        n_unp = sum(s.n_unparseable for s in scores)
        n_replies = sum(s.n_answered + s.n_unparseable for s in scores)
        row["n_unparseable"] = n_unp
        row["unparseable_rate"] = n_unp / n_replies if n_replies else math.nan
        group_rows.append(row)
    sevi_cols = [c for q in sevi for c in (f"{q.attribute}_mean", f"{q.attribute}_diversity")]
    group_cols = keys + ["n_images", *sevi_cols, "entity_diversity", "background_diversity", "n_entity_questions",
                         "n_background_questions", "n_dropped_questions", "n_unparseable", "unparseable_rate"]
    per_group = pd.DataFrame(group_rows, columns=group_cols)
    per_question = pd.DataFrame(question_rows, columns=keys + PER_QUESTION_COLUMNS)
    dropped_mask = per_question["status"] != "ok"
    dropped = per_question.loc[dropped_mask, keys + ["question_id", "kind", "n_images", "n_counted", "coverage",
                                                     "n_unparseable", "status"]].reset_index(drop=True)
    dropped = dropped.rename(columns={"status": "reason"})
    return GeoDivTables(keys, per_group, per_question, dropped, bank.label, n_without)
