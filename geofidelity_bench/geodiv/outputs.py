"""A GeoDiv output folder: the answers and diversity tables of a run, its plots and its record.

:func:`run_geodiv_to_folder` asks the question bank about the images (through the answer
cache), computes the diversity tables and writes, atomically:

    geodiv_groups.csv       one row per group: n, SEVI mean ratings and diversities, VDI diversities,
                            their bootstrap intervals and size-matched (rarefied) values, why a value is n/a
    geodiv_questions.csv    one row per (group, question): counts, |A|, coverage, D, status
    geodiv_dropped.csv      the (group, question) pairs dropped for coverage < 50%
    geodiv_answers.csv      one row per (image, question): raw reply, parsed choice, status
    geodiv.json             all tables plus the VQA model id and config, the bank, the rules, the
                            size matching, the warnings, how sources were grouped, versions
    geodiv_diversity.png    per-group bars of every diversity score (plain and size-matched, intervals, n)
    geodiv_ratings.png      per-group distributions of the SEVI ratings
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from ..atomic import atomic_write, temporary_path
from ..provenance import library_versions, utc_timestamp
from .cache import AnswerCache
from .diversity import MIN_COVERAGE, NONE_SHARE_THRESHOLD, GeoDivTables, diversity_tables
from .pipeline import GeoDivImage, answer_questions
from .questions import QuestionBank, load_question_bank
from .size_matching import DEFAULT_INTERVAL, DEFAULT_REPLICATES, DEFAULT_SEED
from .sources import keep_sources_apart
from .vqa import VQABackend

#: How the tables are made (recorded in geodiv.json).
RULES = {
    "diversity": "D = (exp(H_nats(p)) - 1) / (|A| - 1); |A| counts every option, chosen or not",
    "none_of_the_above": f"dropped unless more than {NONE_SHARE_THRESHOLD:.0%} of the question's parsed "
                         "answers, then counted as one more option (|A| + 1)",
    "unparseable": "dropped and counted",
    "coverage": f"a (group, question) with counted answers for fewer than {MIN_COVERAGE:.0%} of the "
                "group's images is dropped and listed in dropped",
    "vdi": "entity / background diversity = mean D over the kept questions of that kind",
    "sevi": "mean rating (1..5) and D of the rating distribution (|A| = 5)",
    "single_image": "a group of one image has no diversity (n/a, with the reason in diversity_na_reason)",
    "size_matching": "D grows with the number of images n (at most (n-1)/(|A|-1)): compare groups by the "
                     "*_diversity_rarefied columns (every group subsampled to the same n; by default the smallest "
                     "group of at least as many images as the fewest options of any question)",
    "bootstrap_interval": "*_lo, *_hi: D - (median - q_lo), D + (q_hi - median) of the bootstrap resamples' D, "
                          "clipped to [0, the most D can be on n images]; it always holds D (the resamples repeat "
                          "images, which lowers their D, so their own percentiles can miss D)",
}


@dataclass
class GeoDivRun:
    """What :func:`run_geodiv_to_folder` computed and wrote.

    Attributes:
        out_dir: the output folder.
        answers: one row per (image, question) (:func:`~.pipeline.answer_questions`).
        tables: the diversity tables.
        record: the contents of ``geodiv.json``.
        plots: the PNG files written (a plot with nothing to draw is not written).
    """

    out_dir: Path
    answers: pd.DataFrame
    tables: GeoDivTables
    record: dict[str, Any]
    plots: list[str]

    @property
    def n_unparseable(self) -> int:
        return int(self.record["answer_stats"]["n_unparseable"])

    @property
    def all_unparseable(self) -> bool:
        """Whether every reply was unparseable (no score at all: check the VQA model)."""
        return bool(self.record["all_unparseable"])

    @property
    def warnings(self) -> list[str]:
        return list(self.record["warnings"])


def run_geodiv_to_folder(
    images: Sequence[GeoDivImage],
    backend: VQABackend,
    out_dir: str | os.PathLike,
    *,
    group_by: str | Sequence[str] = "country",
    bank: QuestionBank | str | None = None,
    cache: AnswerCache | None = None,
    benchmark: Any = None,
    progress: bool = False,
    command: str | None = None,
    parameters: Mapping[str, Any] | None = None,
    started: float | None = None,
    pool_sources: bool = False,
    rarefy_n: int | None = None,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
    interval: float = DEFAULT_INTERVAL,
) -> GeoDivRun:
    """Answers, tables, plots and ``geodiv.json`` for ``images`` in ``out_dir`` (see the module docstring).

    Args:
        images: the images and their grouping labels.
        backend: the VQA model (any :class:`VQABackend`; a scripted one in tests).
        out_dir: the output folder (created).
        group_by: the grouping column(s).
        bank: a question bank, a bank file, or None for the shipped street bank.
        cache: the answer cache (None: neither read nor written).
        benchmark: the :class:`~geofidelity_bench.benchmark.Benchmark` the images come from
            (its name, source and fingerprint are recorded), or None.
        progress: show a progress bar.
        command, parameters: the command line and the parameters to record.
        started: ``time.time()`` when the run began (default: now), for ``elapsed_s``.
        pool_sources: let a group hold images of different origins (generated, real, folder);
            by default ``origin`` joins the grouping when ``group_by`` alone would mix them
            (:func:`~geofidelity_bench.geodiv.sources.keep_sources_apart`; recorded in ``sources``).
        rarefy_n, replicates, seed, interval: the size matching and bootstrap
            (:func:`~geofidelity_bench.geodiv.diversity.diversity_tables`).
    """
    started = time.time() if started is None else started
    bank = load_question_bank(bank)
    group_by, sources = keep_sources_apart(images, [group_by] if isinstance(group_by, str) else group_by,
                                           pool=pool_sources)
    answers = answer_questions(images, bank, backend, cache=cache, progress=progress)
    tables = diversity_tables(answers, bank, group_by, rarefy_n=rarefy_n, replicates=replicates, seed=seed,
                              interval=interval)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "geodiv_groups.csv", lambda p: tables.per_group.to_csv(p, index=False))
    atomic_write(out / "geodiv_questions.csv", lambda p: tables.per_question_csv_frame().to_csv(p, index=False))
    atomic_write(out / "geodiv_dropped.csv", lambda p: tables.dropped.to_csv(p, index=False))
    atomic_write(out / "geodiv_answers.csv", lambda p: answers.to_csv(p, index=False))
    plots = _write_plots(tables, out)
    stats = answers.attrs["answer_stats"]
    n_unparseable = int((answers["status"] == "unparseable").sum())
    all_unparseable = len(answers) > 0 and n_unparseable == len(answers)
    warnings = unparseable_warnings(answers) + ([sources["note"]] if sources["note"] else []) + tables.warnings
    record = {
        "command": command,
        "created_at": utc_timestamp(),
        "elapsed_s": round(time.time() - started, 2),
        "parameters": dict(parameters or {}),
        "benchmark": None if benchmark is None else {
            "name": benchmark.name, "source": benchmark.source, "fingerprint": benchmark.fingerprint},
        "vqa": {"model": backend.model_id, "config": backend.config, "config_hash": backend.config_hash},
        "question_bank": {"label": bank.label, "source": bank.source, "fingerprint": bank.fingerprint,
                          "n_questions": len(bank)},
        "rules": dict(RULES),
        "answer_cache": str(cache.root) if cache is not None else None,
        "answer_stats": {**stats, "n_unparseable": n_unparseable,
                         "unparseable_rate": n_unparseable / len(answers) if len(answers) else None},
        "unparseable_by_question": {
            qid: int(n) for qid, n in answers[answers["status"] == "unparseable"].groupby("question_id").size().items()
        },
        "all_unparseable": all_unparseable,
        "sources": sources,
        **{k: v for k, v in tables.to_dict().items() if k not in ("question_bank", "warnings")},
        "warnings": warnings,
        "plots": sorted(plots),
        "versions": library_versions(),
    }
    atomic_write(out / "geodiv.json",
                 lambda p: p.write_text(json.dumps(record, indent=2, default=str, allow_nan=False), encoding="utf-8"))
    return GeoDivRun(out, answers, tables, record, sorted(plots))


def unparseable_warnings(answers: pd.DataFrame) -> list[str]:
    """A warning when every reply, or every reply to some questions, was unparseable."""
    if answers.empty:
        return []
    bad = answers["status"] == "unparseable"
    if bad.all():
        first = answers["reply"].iloc[0]
        return [f"every reply was unparseable ({len(answers)} replies: {answers['image'].nunique()} images x "
                f"{answers['question_id'].nunique()} questions), so there is no score at all. Check the VQA "
                f"model or plugin: it must answer with an option's letter (e.g. 'A') or the option's exact text; "
                f"its first reply was {first!r} (all replies: geodiv_answers.csv, column reply)"]
    per_question = bad.groupby(answers["question_id"]).all()
    dead = sorted(per_question[per_question].index)
    if dead:
        return [f"every reply to {len(dead)} question(s) was unparseable ({', '.join(dead[:10])}"
                f"{', ...' if len(dead) > 10 else ''}): they have no score; check how the VQA model answers them "
                "(geodiv_answers.csv, column reply)"]
    return []


def _write_plots(tables: GeoDivTables, out: Path) -> dict[str, str]:
    from .plots import plot_diversity_bars, plot_rating_distributions

    plots = {}
    for name, fn in (("geodiv_diversity.png", plot_diversity_bars), ("geodiv_ratings.png", plot_rating_distributions)):
        tmp = temporary_path(out / name)
        try:
            if fn(tables, tmp):  # False: nothing to plot, no file
                os.replace(tmp, out / name)
                plots[name] = str(out / name)
        finally:
            tmp.unlink(missing_ok=True)
    return plots
