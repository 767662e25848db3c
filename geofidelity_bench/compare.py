"""Comparing two results folders row by row: does a re-run reproduce a reference run?

The use case is reproducing the paper: ``import-release`` writes the release's published scores
as a results folder, a re-run of the same generations with the same encoder writes another, and
:func:`compare_results` says how far apart they are (docs/benchmark.md section 7, Statistics and
analyses, "Comparing two results folders").

Rows are joined on ``(method, condition, block_id)``. For every metric column of the catalog
(:data:`~geofidelity_bench.metrics.catalog.RESULT_METRIC_COLUMNS`, which includes the
similarities of :data:`~geofidelity_bench.metrics.catalog.SIMILARITY_COLUMNS`):

- ``n_matched``: rows of both sides where both values are finite; their maximum and mean absolute
  difference, and the rows whose absolute difference exceeds the tolerance (the worst listed);
- ``n_nan_a_only`` / ``n_nan_b_only``: rows where exactly one side has no finite value (listed,
  never dropped silently); ``n_both_nan``: rows where neither has one (they agree).

Per condition and per metric with a direction (:data:`~geofidelity_bench.metrics.catalog.HIGHER_IS_BETTER`),
the methods that both sides score under that condition are ranked on each side by their mean
over the blocks where both sides have a finite value for that method (so a missing row moves
neither side's mean); the result says whether the two orders are the same, Kendall's tau-b
(``scipy.stats.kendalltau``) and each side's rank-1 method. Rows present on one side only are
counted per (method, condition) and the first ones listed.

Two folders whose ``run.json`` records different benchmark fingerprints are refused unless
``allow_different_benchmarks`` (then the comparison says so), and so is a folder whose
benchmark is not recorded (no ``run.json``, or none with ``benchmark.fingerprint``): there is
nothing to check the join against. Folders of different encoders are compared, with a warning
first: their differences measure the encoders, not a reproduction; so is a folder whose rows mix
encoders (whatever its ``run.json`` names). GAAS of two different segmenters (``run.json``
``gaas.segmenter``, and ``gaas.config_hash`` where both record one) is not comparable: it is still
computed, said in a warning naming both segmenters, and never counted by :meth:`Comparison.failures`.
Against the release's published scores, the ``sim_*`` and margin columns carry a note: the release
adds :data:`RELEASE_NORM_EPS` to every L2 norm of its retrieval similarities (docs/benchmark.md
section 12, item 7).

Example:
    >>> from geofidelity_bench.compare import compare_results  # doctest: +SKIP
    >>> result = compare_results("results", "published", tolerance=1e-4)  # doctest: +SKIP
    >>> print(result.to_markdown())  # doctest: +SKIP
    >>> result.failures(1e-3)  # what `--fail-above 1e-3` exits 1 for  # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .errors import GeoFidelityError
from .metrics.catalog import HIGHER_IS_BETTER, RESULT_METRIC_COLUMNS, SIMILARITY_COLUMNS

#: The join keys of two results tables.
KEYS = ("method", "condition", "block_id")
#: The default tolerance: a difference above it is listed. Scores are float64 means of float32
#: embeddings' cosines; a re-run with the same encoder on the same machine agrees to about 1e-7,
#: another GPU or batch size to about 1e-6.
DEFAULT_TOLERANCE = 1e-6
#: How many rows each list shows (worst differences, one-sided NaNs, one-sided rows).
DEFAULT_MAX_LISTED = 20
#: The metrics compared by default: every metric column of results.csv (the similarities included).
COMPARED_METRICS: tuple[str, ...] = tuple(dict.fromkeys(RESULT_METRIC_COLUMNS + SIMILARITY_COLUMNS))
#: The metrics whose ranking is compared: those with a direction.
RANKED_METRICS: tuple[str, ...] = tuple(m for m in COMPARED_METRICS if m in HIGHER_IS_BETTER)
#: The release's code adds this to every L2 norm of its retrieval similarities (generated rows and panel
#: means); section 5 here normalizes exactly (docs/benchmark.md section 12, item 7).
RELEASE_NORM_EPS = 1e-8
#: The columns that epsilon moves: the similarities and the margins made of them.
NORM_EPS_METRICS: tuple[str, ...] = tuple(SIMILARITY_COLUMNS) + ("local_margin", "strongest_margin")
#: Why those columns of published scores differ from a re-run by more than float noise. A similarity
#: s moves by s * eps * (1/|g| + 1/|p|) to first order (|g| a generated embedding's norm, |p| a panel
#: mean's), a margin by up to twice that; measured (float64, 768-d, tests/test_compare.py checks it).
NORM_EPS_EFFECT = ("the release adds 1e-8 to every L2 norm in its retrieval similarities, this package normalizes "
                   "exactly (docs/benchmark.md section 12, item 7): a similarity moves by at most 1e-8 x (1/|g| + "
                   "1/|p|) (|g| a generated embedding's norm, |p| a panel mean's), a margin by the difference of "
                   "two such moves; measured on 768-d embeddings, about 2e-8 for unit-norm embeddings (less for "
                   "larger norms) but 1.6e-5 to 2.0e-5 at norms near 1e-3, beyond a tolerance of 1e-6 once a norm "
                   "is below about 0.02")
FORMATS = ("md", "csv", "json")


class CompareError(GeoFidelityError, ValueError):
    """Two results folders that cannot be compared (the message names the folder and what to do)."""


# -- the result ---------------------------------------------------------------------------------


@dataclass
class MetricComparison:
    """One metric over the rows both sides have."""

    metric: str
    n_common_rows: int
    n_matched: int
    n_both_nan: int
    n_nan_a_only: int
    n_nan_b_only: int
    max_abs_diff: float | None
    mean_abs_diff: float | None
    n_beyond_tolerance: int
    #: the rows beyond the tolerance, worst first (at most ``max_listed``): keys, a, b, diff (b - a), abs_diff
    worst: list[dict] = field(default_factory=list)
    #: rows where exactly one side has no finite value (at most ``max_listed``): keys, a, b, nan_side
    one_sided_nan: list[dict] = field(default_factory=list)
    #: why the metric was not compared (a column missing on a side), else None
    skipped: str | None = None
    #: why its differences are not comparable (GAAS of two segmenters): computed and shown, never a failure
    not_comparable: str | None = None
    #: what a reader must know about its differences (the release's norm epsilon), else None
    note: str | None = None


@dataclass
class RankingComparison:
    """The order of the methods under one condition by one metric, on both sides."""

    condition: str
    metric: str
    higher_is_better: bool | None
    methods: list[str]
    #: per method, its mean on each side over the blocks both sides score (same order as ``methods``)
    mean_a: list[float]
    mean_b: list[float]
    n_blocks: list[int]
    order_a: list[str]
    order_b: list[str]
    same_order: bool | None
    kendall_tau: float | None
    rank1_a: str | None
    rank1_b: str | None
    #: why tau (or the whole ranking) is n/a, or why the metric is not comparable, else None
    reason: str | None = None


@dataclass
class Comparison:
    """What :func:`compare_results` found; render with :meth:`to_markdown`, :meth:`to_frame`, :meth:`to_dict`."""

    parameters: dict
    warnings: list[str]
    metrics: list[MetricComparison]
    rankings: list[RankingComparison]
    n_rows_a: int
    n_rows_b: int
    n_common_rows: int
    #: rows present on one side only: ``{"a": {...}, "b": {...}}``, each with ``n_rows``,
    #: ``by_method_condition`` (list of {method, condition, n_rows}) and ``rows`` (the first ``max_listed`` keys)
    one_sided_rows: dict

    def metric(self, name: str) -> MetricComparison:
        """The comparison of one metric column."""
        for m in self.metrics:
            if m.metric == name:
                return m
        raise KeyError(name)

    def ranking(self, condition: str, metric: str) -> RankingComparison:
        """The ranking comparison of one (condition, metric)."""
        for r in self.rankings:
            if r.condition == condition and r.metric == metric:
                return r
        raise KeyError((condition, metric))

    def failures(self, threshold: float, *, one_sided_rows: bool = False) -> list[str]:
        """Why ``--fail-above threshold`` fails (empty: it passes).

        A metric fails when a matched row differs by more than ``threshold`` or when a row has a
        value on one side and none on the other (no tolerance covers a missing value). Rows present
        on one side only fail only with ``one_sided_rows`` (``--fail-on-one-sided``): a re-run of a
        subset of the methods is a normal comparison. A metric that is not comparable (GAAS of two
        segmenters, :attr:`MetricComparison.not_comparable`) never fails.

        A check that checked nothing fails: no row joins, no compared metric has a value on both
        sides of any joined row, or a metric was not compared because one side lacks its column
        (renamed or dropped) or because ``--metrics`` asked for it and a side lacks it. A metric
        neither side has, among the default ones, is not a failure.
        """
        out = []
        given = bool(self.parameters.get("metrics_given"))
        for m in self.metrics:
            if m.skipped:
                # a column one side has and the other lacks (renamed, dropped), or one asked for by name, is a
                # check that could not be made; a metric that neither side scores is not a difference
                sides = m.skipped.rsplit(" in ", 1)[-1]
                if given or " and " not in sides:
                    out.append(f"{m.metric} could not be checked ({m.skipped})")
                continue
            if m.not_comparable:
                continue
            if m.max_abs_diff is not None and m.max_abs_diff > threshold:
                out.append(f"{m.metric}: max |diff| {m.max_abs_diff:.3g} > {threshold:g}")
            if m.n_nan_a_only or m.n_nan_b_only:
                out.append(f"{m.metric}: {m.n_nan_a_only + m.n_nan_b_only} row(s) with a value on one side only")
        if not self.n_common_rows:
            out.append(f"nothing could be checked: no row joins on (method, condition, block_id) "
                       f"(0 of {self.n_rows_a} rows of A and {self.n_rows_b} of B matched)")
        elif not any(m.n_matched for m in self.metrics if not (m.skipped or m.not_comparable)):
            out.append(f"nothing could be checked: no metric has a value on both sides in any of the "
                       f"{self.n_common_rows} joined rows (compared: {', '.join(m.metric for m in self.metrics)})")
        if one_sided_rows:
            for side in ("a", "b"):
                n = self.one_sided_rows[side]["n_rows"]
                if n:
                    out.append(f"{n} row(s) only in {side.upper()}")
        return out

    # -- rendering ------------------------------------------------------------------------------

    def to_dict(self) -> dict:
        """Everything, as JSON-ready values (NaN as null)."""
        return _clean({
            "parameters": self.parameters,
            "warnings": self.warnings,
            "rows": {"a": self.n_rows_a, "b": self.n_rows_b, "common": self.n_common_rows},
            "metrics": [vars(m) for m in self.metrics],
            "rankings": [vars(r) for r in self.rankings],
            "one_sided_rows": self.one_sided_rows,
        })

    def to_frame(self):
        """One long table (the CSV output): a ``section`` column says what each row is.

        Sections: ``parameter`` (``parameter``, ``value``), ``warning`` (``note``), ``metric`` (the
        per-metric counts and differences), ``beyond_tolerance`` and ``one_sided_nan`` (one row per
        listed row, with its keys, ``value_a``, ``value_b``, ``abs_diff``), ``ranking`` (one row per
        condition and metric), ``one_sided_rows`` (counts per method and condition, ``side``) and
        ``one_sided_row`` (the listed rows).
        """
        import pandas as pd

        rows: list[dict] = []
        for key, value in _flat(self.parameters):
            rows.append({"section": "parameter", "parameter": key, "value": value})
        rows += [{"section": "warning", "note": w} for w in self.warnings]
        for m in self.metrics:
            rows.append({"section": "metric", "metric": m.metric, "n_common_rows": m.n_common_rows,
                         "n_matched": m.n_matched, "n_both_nan": m.n_both_nan, "n_nan_a_only": m.n_nan_a_only,
                         "n_nan_b_only": m.n_nan_b_only, "max_abs_diff": m.max_abs_diff,
                         "mean_abs_diff": m.mean_abs_diff, "n_beyond_tolerance": m.n_beyond_tolerance,
                         "note": "; ".join(x for x in (m.skipped, m.not_comparable, m.note) if x) or None})
            for w in m.worst:
                rows.append({"section": "beyond_tolerance", "metric": m.metric, **{k: w[k] for k in KEYS},
                             "value_a": w["a"], "value_b": w["b"], "abs_diff": w["abs_diff"]})
            for w in m.one_sided_nan:
                rows.append({"section": "one_sided_nan", "metric": m.metric, **{k: w[k] for k in KEYS},
                             "value_a": w["a"], "value_b": w["b"], "side": w["nan_side"]})
        for r in self.rankings:
            rows.append({"section": "ranking", "condition": r.condition, "metric": r.metric,
                         "n_methods": len(r.methods), "same_order": r.same_order, "kendall_tau": r.kendall_tau,
                         "rank1_a": r.rank1_a, "rank1_b": r.rank1_b, "order_a": " > ".join(r.order_a),
                         "order_b": " > ".join(r.order_b), "note": r.reason})
        for side in ("a", "b"):
            part = self.one_sided_rows[side]
            for g in part["by_method_condition"]:
                rows.append({"section": "one_sided_rows", "side": side.upper(), "method": g["method"],
                             "condition": g["condition"], "n_rows": g["n_rows"]})
            for k in part["rows"]:
                rows.append({"section": "one_sided_row", "side": side.upper(), **k})
        columns = ["section", "parameter", "value", "metric", "condition", "method", "block_id", "side",
                   "n_common_rows", "n_matched", "n_both_nan", "n_nan_a_only", "n_nan_b_only", "max_abs_diff",
                   "mean_abs_diff", "n_beyond_tolerance", "value_a", "value_b", "abs_diff", "n_methods",
                   "same_order", "kendall_tau", "rank1_a", "rank1_b", "order_a", "order_b", "n_rows", "note"]
        return pd.DataFrame(rows, columns=columns)

    def to_markdown(self) -> str:
        """The comparison as a Markdown document (what the command prints by default)."""
        p = self.parameters
        a, b = p["a"], p["b"]
        lines = ["# Comparison of two results folders", ""]
        for name, side, n in (("A", a, self.n_rows_a), ("B", b, self.n_rows_b)):
            lines.append(f"- {name}: `{side['folder']}` (benchmark {_short(side['benchmark_fingerprint'])}, encoder "
                         f"{side['encoder'] or 'not recorded'}, segmenter {_segmenter_text(side)}, {n} rows)"
                         + ("; the release's published numbers, not recomputed" if side.get("published") else ""))
        lines += [f"- rows joined on (method, condition, block_id): {self.n_common_rows} in both",
                  f"- tolerance: {p['tolerance']:g} (|B - A| above it is listed)"
                  + ("; for " + ", ".join(m.metric for m in self.metrics if m.note) + " see the note in the table"
                     if any(m.note for m in self.metrics) else ""),
                  f"- metrics: {', '.join(p['metrics'])}",
                  f"- compared by geofidelity-bench {p['versions'].get('geofidelity-bench', '?')} at "
                  f"{p['created_at']}; A written with {_version_text(a)}, B with {_version_text(b)}", ""]
        for w in self.warnings:
            lines.append(f"> **Warning:** {w}")
        if self.warnings:
            lines.append("")
        lines += ["## Differences per metric", "",
                  "| metric | matched | max abs diff | mean abs diff | beyond tolerance | value in A only "
                  "| value in B only | both NaN | note |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for m in self.metrics:
            if m.skipped:
                lines.append(f"| {m.metric} | not compared: {m.skipped} | | | | | | | |")
                continue
            name = f"{m.metric} (not comparable)" if m.not_comparable else m.metric
            lines.append(f"| {name} | {m.n_matched} | {_num(m.max_abs_diff)} | {_num(m.mean_abs_diff)} | "
                         f"{m.n_beyond_tolerance} | {m.n_nan_b_only} | {m.n_nan_a_only} | {m.n_both_nan} | "
                         f"{m.not_comparable or m.note or ''} |")
        lines.append("")
        beyond = [m for m in self.metrics if m.worst and not m.not_comparable]
        if beyond:
            lines += [f"## Rows beyond the tolerance ({p['tolerance']:g}), worst first", "",
                      "| metric | method | condition | block_id | A | B | abs diff |",
                      "| --- | --- | --- | --- | ---: | ---: | ---: |"]
            for m in beyond:
                for w in m.worst:
                    lines.append(f"| {m.metric} | {w['method']} | {w['condition']} | {w['block_id']} | "
                                 f"{_num(w['a'])} | {_num(w['b'])} | {_num(w['abs_diff'])} |")
                if m.n_beyond_tolerance > len(m.worst):
                    lines.append(f"| {m.metric} | ... {m.n_beyond_tolerance - len(m.worst)} more | | | | | |")
            lines.append("")
        nan_rows = [m for m in self.metrics if m.one_sided_nan]
        if nan_rows:
            lines += ["## Rows with a value on one side only", "",
                      "| metric | method | condition | block_id | A | B |", "| --- | --- | --- | --- | ---: | ---: |"]
            for m in nan_rows:
                for w in m.one_sided_nan:
                    lines.append(f"| {m.metric} | {w['method']} | {w['condition']} | {w['block_id']} | "
                                 f"{_num(w['a'])} | {_num(w['b'])} |")
                more = m.n_nan_a_only + m.n_nan_b_only - len(m.one_sided_nan)
                if more > 0:
                    lines.append(f"| {m.metric} | ... {more} more | | | | |")
            lines.append("")
        lines += ["## Rankings per condition", "",
                  "Methods scored under the condition on both sides, each averaged over the blocks both sides "
                  "score for it. Kendall tau-b of the two sides' means; 1 = the same order.", "",
                  "| condition | metric | methods | same order | Kendall tau | rank 1 in A | rank 1 in B | note |",
                  "| --- | --- | ---: | --- | ---: | --- | --- | --- |"]
        for r in self.rankings:
            same = "n/a" if r.same_order is None else ("yes" if r.same_order else "**no**")
            lines.append(f"| {r.condition} | {r.metric} | {len(r.methods)} | {same} | {_num(r.kendall_tau)} | "
                         f"{r.rank1_a or 'n/a'} | {r.rank1_b or 'n/a'} | {r.reason or ''} |")
        lines.append("")
        lines += ["## Rows on one side only", ""]
        for side, name in (("a", "A"), ("b", "B")):
            part = self.one_sided_rows[side]
            if not part["n_rows"]:
                lines.append(f"- only in {name}: none")
                continue
            groups = ", ".join(f"{g['method']}/{g['condition']} ({g['n_rows']})" for g in part["by_method_condition"])
            lines.append(f"- only in {name}: {part['n_rows']} row(s): {groups}")
            shown = ", ".join(f"{k['method']}/{k['condition']}/{k['block_id']}" for k in part["rows"])
            more = part["n_rows"] - len(part["rows"])
            lines.append(f"  - rows: {shown}" + (f", ... {more} more" if more > 0 else ""))
        return "\n".join(lines) + "\n"

    def render(self, fmt: str) -> str:
        """The text of ``fmt`` (``md``, ``csv`` or ``json``)."""
        import json

        if fmt == "md":
            return self.to_markdown()
        if fmt == "csv":
            return self.to_frame().to_csv(index=False)
        if fmt == "json":
            return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"
        raise CompareError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")

    def write(self, path: str | os.PathLike, fmt: str) -> Path:
        """Writes :meth:`render` to ``path`` atomically (the old file or the whole new one, never a part)."""
        from .atomic import atomic_write, write_error_text

        text = self.render(fmt)
        try:
            return atomic_write(path, lambda p: Path(p).write_text(text, encoding="utf-8"))
        except OSError as err:
            raise CompareError(f"cannot write {path}: {write_error_text(err)}") from None


# -- computing ----------------------------------------------------------------------------------


def compare_results(
    a: str | os.PathLike,
    b: str | os.PathLike,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    metrics: Sequence[str] | None = None,
    allow_different_benchmarks: bool = False,
    max_listed: int = DEFAULT_MAX_LISTED,
) -> Comparison:
    """Compares the ``results.csv`` of two results folders (A, the reference, and B).

    Args:
        a, b: results folders (``results.csv``, and ``run.json`` for the benchmark fingerprint).
        tolerance: an absolute difference above it is listed (default :data:`DEFAULT_TOLERANCE`).
        metrics: the metric columns to compare (default :data:`COMPARED_METRICS`); rankings use
            those among them that have a direction.
        allow_different_benchmarks: compare folders whose benchmark fingerprints differ or are not
            recorded (the comparison then says so first).
        max_listed: how many rows each list shows.

    Raises:
        CompareError: bad arguments, an unknown metric, different or unrecorded benchmark
            fingerprints without ``allow_different_benchmarks``, or a results.csv with the same
            (method, condition, block_id) twice.
        ResultsFolderError: a folder or its files cannot be read.
    """
    from .comparability import comparability_of_run
    from .provenance import library_versions, utc_timestamp
    from .results import load_results

    if not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance) and tolerance >= 0):
        raise CompareError(f"the tolerance must be a finite number >= 0, got {tolerance!r}")
    if int(max_listed) < 0:
        raise CompareError(f"max_listed must be >= 0, got {max_listed!r}")
    chosen = list(COMPARED_METRICS if metrics is None else dict.fromkeys(metrics))
    unknown = [m for m in chosen if m not in COMPARED_METRICS]
    if unknown or not chosen:
        raise CompareError(f"unknown metric(s) {unknown}: choose among {', '.join(COMPARED_METRICS)}"
                           if unknown else "no metric to compare")

    frames, sides = [], []
    for name, folder in (("A", a), ("B", b)):
        df, infos = load_results(folder, allow_mixed_encoders=True)  # said below, never refused: see _encoder_notes
        info = infos[0]
        _check_keys(df, Path(folder))
        _check_unique(df, Path(folder))
        key = comparability_of_run(info)
        segmenter = _get(info, "gaas", "segmenter")
        sides.append({
            "folder": str(folder),
            "has_run_json": any(not k.startswith("_") for k in info),
            "benchmark_fingerprint": key.benchmark_fingerprint or None,
            "benchmark_name": _get(info, "benchmark", "name"),
            "encoder": _encoder_name(info, df),
            "row_encoders": sorted({str(e) for e in df["encoder"].dropna() if str(e)}) if "encoder" in df else [],
            "segmenter": str(segmenter) if segmenter else None,
            "segmenter_config_hash": (_get(info, "gaas", "config_hash") or None) if segmenter else None,
            "gaas_recorded": isinstance(info.get("gaas"), dict),
            "gaas_reason": None if segmenter else _get(info, "gaas", "reason"),
            "encoder_config_hash": key.encoder_config_hash or None,
            "protocol_version": key.protocol_version or None,
            "created_at": info.get("created_at"),
            "versions": info.get("versions") if isinstance(info.get("versions"), dict) else {},
            "published": info.get("published") if isinstance(info.get("published"), dict) else None,
        })
        frames.append(df)
    notes = _check_benchmarks(sides, allow_different_benchmarks)
    notes += _encoder_notes(sides)
    gaas_note = _gaas_note(sides) if "gaas" in chosen else None
    if gaas_note:
        notes.append(f"GAAS NOT COMPARABLE: {gaas_note} (run.json gaas): GAAS differences measure the segmenters, so "
                     "GAAS is shown but never counted as a failure (--fail-above); the other metrics are compared "
                     "as usual")
    published = [s["folder"] for s in sides if s["published"]]
    if published and any(m in NORM_EPS_METRICS for m in chosen):
        notes.append(f"{' and '.join(published)} holds the release's published scores: in "
                     f"{', '.join(m for m in chosen if m in NORM_EPS_METRICS)}, {NORM_EPS_EFFECT}; differences "
                     "of that size against published scores are expected, not a failed reproduction")
    df_a, df_b = frames
    missing = {m: [s for s, df in (("A", df_a), ("B", df_b)) if m not in df.columns] for m in chosen}
    parameters = {
        "a": sides[0], "b": sides[1], "tolerance": float(tolerance), "metrics": chosen,
        "ranked_metrics": [m for m in chosen if m in HIGHER_IS_BETTER],
        "metrics_given": metrics is not None,
        "allow_different_benchmarks": bool(allow_different_benchmarks), "max_listed": int(max_listed),
        "gaas_not_comparable": gaas_note, "release_norm_eps": RELEASE_NORM_EPS if published else None,
        "created_at": utc_timestamp(), "versions": library_versions(),
    }
    return _compare_frames(df_a, df_b, parameters, notes, missing)


def _compare_frames(df_a, df_b, parameters: dict, notes: list[str], missing: dict) -> Comparison:
    import numpy as np
    import pandas as pd

    tolerance, max_listed = parameters["tolerance"], parameters["max_listed"]
    chosen = parameters["metrics"]
    keys = list(KEYS)
    a = df_a.set_index(keys)
    b = df_b.set_index(keys)
    common = a.index.intersection(b.index).sort_values()
    only_a = a.index.difference(b.index).sort_values()
    only_b = b.index.difference(a.index).sort_values()

    results = []
    for metric in chosen:
        if missing[metric]:
            results.append(MetricComparison(metric, len(common), 0, 0, 0, 0, None, None, 0,
                                            skipped=f"no {metric} column in {' and '.join(missing[metric])}"))
            continue
        va = a.loc[common, metric].to_numpy(dtype=float)
        vb = b.loc[common, metric].to_numpy(dtype=float)
        fa, fb = np.isfinite(va), np.isfinite(vb)
        both = fa & fb
        diff = np.abs(vb - va)
        diff[~both] = np.nan
        n_matched = int(both.sum())
        beyond = np.flatnonzero(both & (diff > tolerance))
        beyond = beyond[np.argsort(-diff[beyond], kind="stable")]
        worst = [dict(_key(common[i]), a=float(va[i]), b=float(vb[i]), diff=float(vb[i] - va[i]),
                      abs_diff=float(diff[i])) for i in beyond[:max_listed]]
        one = np.flatnonzero(fa ^ fb)
        one_sided = [dict(_key(common[i]), a=_float(va[i]), b=_float(vb[i]), nan_side="A" if not fa[i] else "B")
                     for i in one[:max_listed]]
        results.append(MetricComparison(
            metric, len(common), n_matched, int((~fa & ~fb).sum()), int((~fa & fb).sum()), int((fa & ~fb).sum()),
            float(np.nanmax(diff)) if n_matched else None, float(np.nanmean(diff)) if n_matched else None,
            int(len(beyond)), worst, one_sided,
            not_comparable=parameters.get("gaas_not_comparable") if metric == "gaas" else None,
            note=("the release's 1e-8 norm epsilon moves published values (see the warning)"
                  if parameters.get("release_norm_eps") and metric in NORM_EPS_METRICS else None)))

    rankings = []
    ranked = [m for m in parameters["ranked_metrics"] if not missing[m]]
    in_a, in_b = set(df_a["condition"]), set(df_b["condition"])
    for condition in sorted(in_a | in_b):
        for metric in ranked:
            r = _ranking(a, b, common, condition, metric, condition in in_a, condition in in_b)
            if metric == "gaas" and parameters.get("gaas_not_comparable"):
                r.reason = "; ".join(x for x in ("not comparable: the folders used different segmenters", r.reason)
                                     if x)
            rankings.append(r)

    def one_sided(index) -> dict:
        frame = pd.DataFrame(list(index), columns=keys) if len(index) else pd.DataFrame(columns=keys)
        groups = frame.groupby(["method", "condition"]).size().reset_index(name="n_rows") if len(frame) else frame
        return {"n_rows": int(len(index)),
                "by_method_condition": [{"method": r.method, "condition": r.condition, "n_rows": int(r.n_rows)}
                                        for r in groups.itertuples()] if len(frame) else [],
                "rows": [_key(k) for k in list(index)[:max_listed]]}

    return Comparison(parameters, notes, results, rankings, len(a), len(b), len(common),
                      {"a": one_sided(only_a), "b": one_sided(only_b)})


def _ranking(a, b, common, condition: str, metric: str, in_a: bool, in_b: bool) -> RankingComparison:
    import numpy as np
    from scipy import stats as sps

    hib = HIGHER_IS_BETTER[metric]
    at = common[common.get_level_values("condition") == condition]

    def empty(reason: str, methods=()) -> RankingComparison:
        return RankingComparison(condition, metric, hib, list(methods), [], [], [], [], [], None, None, None, None,
                                 reason)

    if not (in_a and in_b):
        return empty(f"condition only in {'A' if in_a else 'B'}")
    va = a.loc[at, metric].to_numpy(dtype=float)
    vb = b.loc[at, metric].to_numpy(dtype=float)
    ok = np.isfinite(va) & np.isfinite(vb)
    # a panel scored with --allow-unpromptable (on either side) is never ranked with promptable ones
    refused = np.zeros(len(at), dtype=bool)
    for side in (a, b):
        if "unpromptable" in side.columns:
            refused |= np.nan_to_num(side.loc[at, "unpromptable"].to_numpy(dtype=float)) > 0
    ok &= ~refused
    methods_of = np.asarray(at.get_level_values("method"), dtype=object)
    methods = sorted(set(methods_of[ok]))
    mean_a = [float(va[ok & (methods_of == m)].mean()) for m in methods]
    mean_b = [float(vb[ok & (methods_of == m)].mean()) for m in methods]
    n_blocks = [int((ok & (methods_of == m)).sum()) for m in methods]
    if len(methods) < 2:
        r = empty(f"fewer than 2 methods with {metric} on both sides ({len(methods)})", methods)
        r.mean_a, r.mean_b, r.n_blocks = mean_a, mean_b, n_blocks
        r.rank1_a = r.rank1_b = methods[0] if methods else None
        r.order_a = r.order_b = list(methods)
        return r
    sign = -1.0 if hib else 1.0  # rank 1 = best
    rank_a = sps.rankdata(sign * np.asarray(mean_a), method="min")
    rank_b = sps.rankdata(sign * np.asarray(mean_b), method="min")
    order_a = [m for _, m in sorted(zip(rank_a, methods))]
    order_b = [m for _, m in sorted(zip(rank_b, methods))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input: tau is NaN, given a reason below
        tau = float(sps.kendalltau(mean_a, mean_b).statistic)
    reason = None
    if not math.isfinite(tau):
        tau = None
        reason = "Kendall tau undefined: every method has the same mean on one side"
    if refused.any():
        left = sorted(set(methods_of[refused]))
        reason = "; ".join(x for x in (reason, f"{int(refused.sum())} unpromptable panel(s) of {', '.join(left)} "
                                                "left out of the ranking (scored with --allow-unpromptable)") if x)
    return RankingComparison(
        condition, metric, hib, methods, mean_a, mean_b, n_blocks, order_a, order_b,
        bool(np.array_equal(rank_a, rank_b)), tau,
        ", ".join(m for m, r in zip(methods, rank_a) if r == 1),
        ", ".join(m for m, r in zip(methods, rank_b) if r == 1), reason)


# -- checks and helpers -------------------------------------------------------------------------


def _check_keys(df, folder: Path) -> None:
    """Refuses a row whose method, condition or block_id is empty: it joins with nothing and sorts with nothing."""
    for col in KEYS:
        blank = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if blank.any():
            i = int(blank.to_numpy().nonzero()[0][0])
            raise CompareError(
                f"{folder / 'results.csv'}: row {i + 1} (line {i + 2}) has an empty {col} (column {col!r}"
                + (f"; {int(blank.sum())} rows in all" if int(blank.sum()) > 1 else "")
                + "): every row needs a method, condition and block_id to be joined; fix or remove the row"
            )


def _check_unique(df, folder: Path) -> None:
    dup = df.duplicated(list(KEYS), keep=False)
    if dup.any():
        first = df.loc[dup, list(KEYS)].iloc[0]
        raise CompareError(
            f"{folder / 'results.csv'} has {int(dup.sum())} rows sharing a (method, condition, block_id), e.g. "
            f"{first['method']}/{first['condition']}/{first['block_id']}: a results folder scores each panel once; "
            "compare the folders it was concatenated from"
        )


def _check_benchmarks(sides: list[dict], allowed: bool) -> list[str]:
    fa, fb = sides[0]["benchmark_fingerprint"], sides[1]["benchmark_fingerprint"]
    if fa and fb and fa == fb:
        return []
    flag = "--allow-different-benchmarks (allow_different_benchmarks=True)"
    if fa and fb:
        if not allowed:
            raise CompareError(
                f"the folders score different benchmarks: {sides[0]['folder']} has benchmark fingerprint {fa}, "
                f"{sides[1]['folder']} has {fb}; rows with the same block_id may be different blocks. Compare runs "
                f"of one benchmark, or pass {flag} to compare anyway"
            )
        return [f"different benchmarks (A {fa}, B {fb}), compared as asked (--allow-different-benchmarks): "
                "rows with the same block_id may be different blocks"]
    unrecorded = [s["folder"] + (" (no run.json)" if not s["has_run_json"] else " (run.json without "
                                 "benchmark.fingerprint)") for s in sides if not s["benchmark_fingerprint"]]
    if not allowed:
        raise CompareError(
            f"cannot check that both folders score the same benchmark: no benchmark fingerprint recorded for "
            f"{' and '.join(unrecorded)}; keep the run.json that evaluate writes beside results.csv, or pass {flag} "
            "to compare anyway"
        )
    return [f"benchmark not recorded for {' and '.join(unrecorded)}, compared as asked "
            "(--allow-different-benchmarks): nothing checks that both folders score the same blocks"]


def _encoder_notes(sides: list[dict]) -> list[str]:
    ea, eb = sides[0]["encoder"], sides[1]["encoder"]
    rows = []  # a folder's rows against its run.json: mixed encoders, or another encoder than the one named
    for s in sides:
        named = ", ".join(s["row_encoders"])
        if len(s["row_encoders"]) > 1:
            rows.append(f"{s['folder']} mixes encoders ({named}) in its results.csv"
                        + (f" (run.json names {s['encoder']})" if s["encoder"] != named else "")
                        + ": its scores are not comparable with each other")
        elif s["row_encoders"] and s["encoder"] and s["encoder"] != named:
            rows.append(f"{s['folder']}: run.json names encoder {s['encoder']} but the rows of its results.csv "
                        f"name {named}")
    if ea and eb and ea != eb:
        return [f"DIFFERENT ENCODERS: A was scored with {ea}, B with {eb}. Scores of different encoders are not "
                "comparable: the differences below measure the encoders, not a reproduction"] + rows
    notes = rows
    if not (ea and eb):
        notes.append(f"encoder not recorded for {' and '.join(s['folder'] for s in sides if not s['encoder'])}: "
                     "nothing checks that both folders were scored with the same encoder")
    ha, hb = sides[0]["encoder_config_hash"], sides[1]["encoder_config_hash"]
    if ha and hb and ha != hb:
        notes.append(f"same encoder name, different encoder configs (A {ha[:12]}, B {hb[:12]}: weights, "
                     "preprocessing or dtype): expect differences beyond float noise")
    pa, pb = sides[0]["protocol_version"], sides[1]["protocol_version"]
    if pa and pb and pa != pb:
        notes.append(f"different protocol versions (A {pa}, B {pb}): anchors, held-out rule or metric definitions "
                     "differ (docs/benchmark.md section 7, Comparability)")
    return notes


def _gaas_note(sides: list[dict]) -> str | None:
    """Why GAAS is not comparable between the folders (their segmenters, named), else None.

    The segmenters differ when their names differ, or when both record a config hash and the hashes
    differ (the published scores record the name only: the release's Mask2Former, not recomputed).
    """
    a, b = sides
    if not (a["segmenter"] and b["segmenter"]):
        return None
    ha, hb = a["segmenter_config_hash"], b["segmenter_config_hash"]
    if a["segmenter"] == b["segmenter"] and not (ha and hb and ha != hb):
        return None
    return f"A ({a['folder']}) was segmented with {_segmenter_text(a)}, B ({b['folder']}) with {_segmenter_text(b)}"


def _segmenter_text(side: dict) -> str:
    if not side.get("segmenter"):
        if not side.get("gaas_recorded"):
            return "not recorded"
        return "none" + (f" ({side['gaas_reason']})" if side.get("gaas_reason") else "")
    h = side.get("segmenter_config_hash")
    return side["segmenter"] + (f" (config {str(h)[:12]})" if h else "")


def _encoder_name(info: dict, df) -> str | None:
    enc = info.get("encoder")
    if isinstance(enc, dict) and enc.get("name"):
        return str(enc["name"])
    if isinstance(enc, str) and enc:
        return enc
    if "encoder" in df.columns:
        names = sorted({str(e) for e in df["encoder"].dropna() if str(e)})
        if names:
            return ", ".join(names)
    return None


def _get(info: dict, *path: str) -> Any:
    for k in path:
        if not isinstance(info, dict) or k not in info:
            return None
        info = info[k]
    return info


def _key(k) -> dict:
    return {name: str(v) for name, v in zip(KEYS, k)}


def _float(x) -> float | None:
    return float(x) if math.isfinite(float(x)) else None


def _num(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if x == 0:
        return "0"
    return f"{x:.4g}" if abs(x) >= 1e-3 else f"{x:.3g}"


def _short(fp: str | None) -> str:
    return fp[:12] if fp else "not recorded"


def _version_text(side: dict) -> str:
    v = side.get("versions") or {}
    return f"geofidelity-bench {v['geofidelity-bench']}" if v.get("geofidelity-bench") else "an unrecorded version"


def _clean(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):  # numpy scalars
        return _clean(obj.item())
    return obj


def _flat(d: dict, prefix: str = ""):
    for k, v in d.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            yield from _flat(v, name + ".")
        elif isinstance(v, (list, tuple)):
            yield name, ", ".join(map(str, v))
        else:
            yield name, v


__all__ = [
    "COMPARED_METRICS",
    "CompareError",
    "Comparison",
    "DEFAULT_MAX_LISTED",
    "DEFAULT_TOLERANCE",
    "FORMATS",
    "KEYS",
    "MetricComparison",
    "NORM_EPS_EFFECT",
    "NORM_EPS_METRICS",
    "RANKED_METRICS",
    "RELEASE_NORM_EPS",
    "RankingComparison",
    "compare_results",
]
