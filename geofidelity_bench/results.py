"""The results folder: the one writer and the one reader of its files.

A results folder is what ``geofidelity-bench evaluate`` and ``demo`` write (docs/benchmark.md section 7, Statistics and analyses)::

    results.csv                  one row per (method, condition, block_id), the columns of
                                 :data:`geofidelity_bench.evaluation.RESULT_COLUMNS`, in that order
    summary_<name>.csv           means per method, condition, method and condition, city and method
                                 (:func:`geofidelity_bench.evaluation.summaries`)
    run.json                     parameters, benchmark, encoder, versions, provenance, and the reason
                                 for every NaN (``nan_reasons``), plus the list of ``files``
    clip_alignment.csv           optional: per-panel CLIP scores
                                 (``geofidelity-bench clip-alignment``)

:func:`write_results` writes the first three (all or none: a failed write, e.g. a full disk,
leaves the folder as it was), with the provenance that :func:`run_record` gathers;
:func:`read_results_csv` and :func:`load_results` read one or more folders back, keeping ids as
strings (a country ``NA`` stays ``NA``). :func:`leaderboard_text` and :func:`hierarchy_text` are
the plain-text tables the commands print.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .atomic import atomic_write_files, write_error_text
from .cache_files import redact_path
from .errors import GeoFidelityError
from .provenance import library_versions, utc_timestamp
from .metrics.catalog import METRICS, RESULT_METRIC_COLUMNS, SIMILARITY_COLUMNS, ascii_heading

RESULTS_FILE = "results.csv"
RUN_FILE = "run.json"
CLIP_FILE = "clip_alignment.csv"
REQUIRED_COLUMNS = ("method", "condition", "block_id")
STRING_COLUMNS = ("method", "condition", "block_id", "city", "country", "stratum", "encoder",
                  # the columns a results repo adds to each submission (hub/results_repo.py)
                  "run_id", "benchmark_name", "benchmark_fingerprint", "encoder_config_hash", "protocol_version",
                  "library_version", "created_at")
#: Columns added after the first release of the format: a results.csv without them reads them as NaN.
ADDED_COLUMNS = ("n_distinct", "n_copied", "unpromptable", "n_candidates", "chance_retrieval_acc", "chance_mrr")
NUMERIC_COLUMNS = ("n_generated", "n_reference", "n_distinct", "n_copied", "unpromptable") + RESULT_METRIC_COLUMNS + (
    "n_candidates", "chance_retrieval_acc", "chance_mrr")

#: (column, header) of :func:`leaderboard_text`; ``^`` higher is better, ``v`` lower is better.
LEADERBOARD_COLUMNS = [
    (c, ascii_heading(c))
    for c in ("cos_sim", "mmd", "dcsf", "gaas", "retrieval_acc", "mrr", "local_margin", "strongest_margin")
]
#: (column, header) of :func:`hierarchy_text`.
HIERARCHY_COLUMNS = [(c, METRICS[c].short) for c in SIMILARITY_COLUMNS]


#: The evaluation protocol recorded in run.json (docs/benchmark.md sections 1, Domain and split, 5, Metrics
#: and 6, Real-image anchors). Change the version whenever the held-out rule, the anchors or a metric
#: definition changes: results with different protocol versions are never ranked together.
PROTOCOL_VERSION = "1"
METRIC_DEFINITIONS_VERSION = "1"
HELDOUT_RULE = (
    "references ordered by reference_id, shuffled with random.Random(sha256('0|{block_id}') first 8 bytes); "
    "the first max(1, min(4, n // 2)) are held out"
)


class ResultsFolderError(GeoFidelityError, ValueError):
    """A results folder (or its ``results.csv`` / ``run.json``) that cannot be read; the message names it."""


# -- writing --------------------------------------------------------------------------------


def write_results(
    out_dir: str | os.PathLike, results, run_info: Mapping[str, Any] | None = None
) -> dict[str, Path]:
    """Writes ``results.csv``, the four summary CSVs and ``run.json`` (all or none).

    Args:
        out_dir: the results folder (created).
        results: result rows from :func:`geofidelity_bench.evaluation.evaluate_panels`.
        run_info: what ``run.json`` records; :func:`run_record` builds the library's part
            (benchmark, encoder, GAAS, anchors, versions), the same as the command writes.
            ``nan_reasons`` (from ``results.attrs``), ``files`` and, when absent,
            ``created_at`` are added.

    Returns:
        ``{file name: path}`` of the CSV files written.

    Raises:
        ResultsFolderError: ``results`` is not a DataFrame with the columns
            method, condition and block_id, or a file cannot be written (a full disk): the
            message names the folder, and none of the files was replaced.
    """
    from .evaluation import summaries

    missing = [c for c in REQUIRED_COLUMNS if c not in getattr(results, "columns", ())]
    if missing:
        raise ResultsFolderError(
            f"cannot write results to {out_dir}: expected a DataFrame of result rows "
            f"(evaluate_panels' output), got {type(results).__name__} without column(s) {missing}"
        )
    out_dir = Path(out_dir)
    existed = out_dir.is_dir()
    info = dict(run_info or {})
    info.setdefault("created_at", utc_timestamp())
    info["nan_reasons"] = _compact_reasons(results.attrs.get("nan_reasons", []))
    files: dict[Path, Any] = {out_dir / RESULTS_FILE: lambda p: results.to_csv(p, index=False)}
    for name, table in summaries(results).items():
        files[out_dir / f"summary_{name}.csv"] = lambda p, t=table: t.to_csv(p, index=False)
    info["files"] = sorted(p.name for p in files) + [RUN_FILE]
    text = json.dumps(info, indent=2, default=str)
    files[out_dir / RUN_FILE] = lambda p: p.write_text(text, encoding="utf-8")
    # All files or none: each is written under a temporary name and renamed only when all are
    # written, so a full disk leaves the folder as it was (never a results.csv without its run.json).
    try:
        atomic_write_files(files)
    except OSError as err:
        if not existed:
            with contextlib.suppress(OSError):
                out_dir.rmdir()  # only when empty: the folder this call created
        raise ResultsFolderError(
            f"cannot write the results to {out_dir}: {write_error_text(err)}; nothing was written there: free "
            "space or choose another output folder, and run again"
        ) from None
    return {p.name: p for p in files if p.name != RUN_FILE}


def run_record(benchmark, encoder, results, *, cache=None, segmenter=None, gaas_reason: str | None = None) -> dict:
    """The library's part of ``run.json``: what produced ``results``, as the command records it.

    Keys, in order: ``benchmark`` (name, source, fingerprint, sizes), ``encoder`` (name, dim,
    config, config hash), ``embedding_cache`` (its folder or None), ``embedding_stats``,
    ``skipped_images`` and ``animated_images`` (files left out with ``skip_bad_images``, and
    animated files of which the first frame was scored), ``copy_audit`` (the copy audit's settings
    and one record per audited image, docs/benchmark.md section 5, Copy audit) and ``near_copies``
    (its flagged records: submitted images that copy a photo of the benchmark),
    ``gaas`` (the segmenter's name, config and hash, or why GAAS is n/a), ``anchors`` (the
    real-image anchor rule, docs/benchmark.md section 6, Real-image anchors),
    ``unpromptable_panels`` (``allowed`` and the (condition, block) panels scored although the
    benchmark refuses their prompt, with ``allow_unpromptable``), ``protocol``
    (:func:`protocol_record`) and ``versions``.
    ``geofidelity-bench evaluate``/``demo`` put the command line, time and parameters before it.

    Args:
        benchmark, encoder, cache, segmenter: what was passed to ``evaluate_panels``.
        results: its output (for the embedding and segmentation statistics).
        gaas_reason: why there is no segmenter (default: none was given).
    """
    from .evaluation import ANCHOR_METHODS, ANCHOR_PANEL_SIZE

    if segmenter is None:
        gaas = {"segmenter": None, "reason": gaas_reason or "no segmenter was given (segmenter=None)"}
    else:
        gaas = {"segmenter": segmenter.name, "config": segmenter.config, "config_hash": segmenter.config_hash,
                "segment_stats": results.attrs.get("segment_stats")}
    return {
        "benchmark": {"name": benchmark.name, "source": benchmark.source, "fingerprint": benchmark.fingerprint,
                      "n_blocks": len(benchmark.blocks), "n_references": len(benchmark.references),
                      "city_names": {str(key): str(getattr(city, "name", key))
                                     for key, city in sorted((getattr(benchmark, "cities", None) or {}).items())},
                      # rows keyed by the hash of their bytes, not their stored image_sha256 (--rekey-mismatched-images)
                      "rekeyed_images": list(getattr(benchmark, "rekeyed_images", ())),
                      # which same-neighborhood negatives are real and which are fallbacks (the report's caveat)
                      "same_neighborhood_negatives": (benchmark.same_neighborhood_negatives()
                                                      if hasattr(benchmark, "same_neighborhood_negatives") else None)},
        "encoder": {"name": encoder.name, "dim": encoder.dim, "config": encoder.config,
                    "config_hash": getattr(encoder, "config_hash", None)},
        "embedding_cache": redact_path(cache.root) if cache is not None else None,
        "embedding_stats": results.attrs.get("embedding_stats"),
        "skipped_images": results.attrs.get("skipped_images", []),
        "animated_images": results.attrs.get("animated_images", []),
        "copy_audit": results.attrs.get("copy_audit"),
        "near_copies": results.attrs.get("near_copies", []),
        "gaas": gaas,
        "anchors": {
            "methods": list(ANCHOR_METHODS),
            "panel_size": ANCHOR_PANEL_SIZE,
            "seeds": "random.Random(f'0|{block_id}|{method}')",
        },
        # panels of a prompt condition whose prompt the benchmark refuses, scored only when allowed
        "unpromptable_panels": results.attrs.get("unpromptable_panels", {"allowed": False, "panels": []}),
        "protocol": protocol_record(),
        "versions": library_versions(),
    }


def protocol_record() -> dict:
    """The ``protocol`` block of ``run.json``: what makes two runs' scores comparable."""
    from .evaluation import ANCHOR_METHODS, ANCHOR_PANEL_SIZE

    return {
        "version": PROTOCOL_VERSION,
        "anchor_rule": f"{', '.join(ANCHOR_METHODS)}: {ANCHOR_PANEL_SIZE} photos per panel, "
                       "seeded random.Random(f'0|{block_id}|{method}')",
        "heldout_rule": HELDOUT_RULE,
        "metric_definitions_version": METRIC_DEFINITIONS_VERSION,
    }


def _compact_reasons(reasons: list[dict]) -> list[dict]:
    """Groups identical (column, reason) pairs, listing the affected panels."""
    grouped: dict[tuple[str, str], list[str]] = {}
    for r in reasons:
        grouped.setdefault((r["column"], r["reason"]), []).append(f"{r['method']}/{r['condition']}/{r['block_id']}")
    return [{"column": c, "reason": why, "n_rows": len(p), "rows": p} for (c, why), p in sorted(grouped.items())]


# -- plain-text tables ----------------------------------------------------------------------


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def format_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


#: (chance column, header) shown after the retrieval columns of :func:`leaderboard_text`.
CHANCE_TEXT_COLUMNS = [("chance_retrieval_acc", "Retr@chance"), ("chance_mrr", "MRR@chance")]


def leaderboard_text(results) -> str:
    """Mean scores per (method, condition), best CosSim first; ^ higher is better, v lower.

    The rows are :func:`geofidelity_bench.evaluation.leaderboard_summary`'s, the same as the app's and
    the report's: "blocks" counts the blocks with a finite score; rows with copied panels come after
    the ranked ones and rows scored with ``--allow-unpromptable`` last, each with its mark. Beside
    retrieval and MRR, their chance level (mean over the blocks with a retrieval score); after the
    table, what each mark shown means."""
    from . import caveats
    from .evaluation import leaderboard_summary

    summary = leaderboard_summary(results)
    headers = ["method", "condition", "blocks"]
    for c, h in LEADERBOARD_COLUMNS:
        headers.append(h)
        if c == "retrieval_acc":
            headers.append(CHANCE_TEXT_COLUMNS[0][1])
        elif c == "mrr":
            headers.append(CHANCE_TEXT_COLUMNS[1][1])
    rows, marked = [], {"copied": False, "repeats": False, "unpromptable": False}
    for _, r in summary.iterrows():
        name = str(r["method"])
        if r["n_copied_panels"]:
            name += f" [{caveats.COPIED_MARK}]"
            marked["copied"] = True
        if r["n_repeating"]:
            name += f" [{caveats.REPEATS_MARK} {int(r['n_repeating'])}/{int(r['n_blocks'])}]"
            marked["repeats"] = True
        if r["unpromptable"]:
            name += f" [{caveats.UNPROMPTABLE_MARK}]"
            marked["unpromptable"] = True
        cells = [name, str(r["condition"]), str(int(r["n_blocks"]))]
        for c, _ in LEADERBOARD_COLUMNS:
            cells.append(_fmt(r[c]))
            if c in ("retrieval_acc", "mrr"):
                col = "chance_retrieval_acc" if c == "retrieval_acc" else "chance_mrr"
                cells.append(_fmt(r[col]) if col in summary.columns else "n/a")
        rows.append(cells)
    text = format_table(headers, rows)
    text += ("\nblocks: the blocks with a finite score (a row whose every score is n/a is not counted)"
             "\n@chance: the retrieval accuracy / MRR of images that carry no information about the place "
             "(a random order of each block's candidates)")
    if marked["copied"]:
        text += f"\n[{caveats.COPIED_MARK}]: panels that copy the benchmark's reference photos (listed after the ranked rows: never a model's result)"
    if marked["repeats"]:
        text += (f"\n[{caveats.REPEATS_MARK} k/n]: k of n blocks' panels repeat photos (held-out anchors cycle their "
                 "photos to 4: MMD/DCSF penalize it)")
    if marked["unpromptable"]:
        text += f"\n[{caveats.UNPROMPTABLE_LEGEND}]"
    return text


def hierarchy_text(results) -> str:
    """Table-4 style: mean similarity of each query panel to its target and to each negative."""
    from .evaluation import summarize

    summary = summarize(results, ["method", "condition"]).sort_values("sim_target", ascending=False)
    headers = ["method", "condition"] + [h for _, h in HIERARCHY_COLUMNS]
    rows = [[r["method"], r["condition"]] + [_fmt(r[c]) for c, _ in HIERARCHY_COLUMNS] for _, r in summary.iterrows()]
    return format_table(headers, rows)


# -- reading --------------------------------------------------------------------------------


def read_utf8_text(path: str | os.PathLike, what: str = "file") -> str:
    """The text of a file that must be UTF-8 (a byte-order mark is allowed and dropped).

    Raises:
        ResultsFolderError: it is not UTF-8; the message names the file, the line and byte, and how to convert it.
    """
    path = Path(path)
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ResultsFolderError(
            f"{path} is not UTF-8 text (byte 0x{data[err.start]:02x} at line {line}, byte {err.start}): save the "
            f"{what} as UTF-8 (e.g. `iconv -f latin1 -t utf-8 {path.name} > utf8_{path.name}`)"
        ) from None


def read_results_csv(path: str | os.PathLike):
    """Reads a ``results.csv`` keeping ids as strings (a country ``NA`` stays ``NA``).

    A file written before the columns of :data:`ADDED_COLUMNS` existed (``n_distinct``,
    ``n_copied``, the chance columns) reads them as NaN: not recorded.

    Raises:
        ResultsFolderError: the file is not UTF-8 text or not a CSV table, or a numeric column holds text.
    """
    import io

    import pandas as pd

    path = Path(path)
    text = read_utf8_text(path, "results table")
    try:
        header = pd.read_csv(io.StringIO(text), nrows=0).columns
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise ResultsFolderError(f"{path} is not a CSV table ({str(err).strip().splitlines()[0]})") from None
    na = {c: ["", "nan", "NaN", "NA", "N/A", "null", "None"] for c in header if c in NUMERIC_COLUMNS}
    na.update({c: [""] for c in header if c not in NUMERIC_COLUMNS})
    df = pd.read_csv(
        io.StringIO(text),
        dtype={c: str for c in header if c in STRING_COLUMNS},
        keep_default_na=False,
        na_values=na,
    )
    for col in NUMERIC_COLUMNS:
        if col in df.columns:
            try:
                df[col] = pd.to_numeric(df[col], errors="raise").astype(float)
            except (ValueError, TypeError) as err:
                raise ResultsFolderError(f"{path}: column {col!r} is not numeric ({err})") from None
    for col in ADDED_COLUMNS:
        if col not in df.columns:
            df[col] = float("nan")
    return df


def load_results(
    dirs: str | os.PathLike | Iterable[str | os.PathLike], *, allow_mixed_encoders: bool = False
):
    """Reads and concatenates the ``results.csv`` of one or more results folders.

    Each row gets a ``run`` column naming its folder. Each folder's ``run.json`` (``{}`` when
    absent) is returned with ``_dir``, ``_run`` and, when the folder has one, ``_clip_alignment``
    (the path of its ``clip_alignment.csv``) added.

    Returns:
        ``(DataFrame, list of run infos)``.

    Raises:
        ResultsFolderError: a folder or its results.csv is missing, required columns are
            missing, or the folders use different encoders and ``allow_mixed_encoders`` is false.
    """
    import pandas as pd

    if isinstance(dirs, (str, os.PathLike)):
        dirs = [dirs]
    dirs = [Path(d) for d in dirs]
    if not dirs:
        raise ResultsFolderError("no results folder given")
    names = [d.resolve().name or str(d) for d in dirs]
    labels = names if len(set(names)) == len(names) else [f"{i}:{n}" for i, n in enumerate(names)]
    frames, infos = [], []
    for folder, label in zip(dirs, labels):
        csv = folder / RESULTS_FILE
        if not folder.is_dir():
            raise ResultsFolderError(f"results folder {folder} does not exist")
        if not csv.is_file():
            raise ResultsFolderError(
                f"{folder} has no {RESULTS_FILE} (write one with `geofidelity-bench evaluate` or `demo`)"
            )
        df = read_results_csv(csv)
        missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
        if missing:
            raise ResultsFolderError(f"{csv} lacks required column(s) {missing}")
        df["run"] = label
        frames.append(df)
        info: dict[str, Any] = {}
        run_json = folder / RUN_FILE
        if run_json.is_file():
            try:
                info = json.loads(read_utf8_text(run_json, "run.json"))
            except json.JSONDecodeError as err:
                raise ResultsFolderError(f"{run_json} is not valid JSON: {err}") from None
            if not isinstance(info, dict):
                raise ResultsFolderError(f"{run_json} must hold a JSON object")
        info = dict(info, _dir=str(folder), _run=label)
        if (folder / CLIP_FILE).is_file():
            info["_clip_alignment"] = str(folder / CLIP_FILE)
        infos.append(info)
    df = pd.concat(frames, ignore_index=True)
    check_encoders(df, allow_mixed_encoders)
    return df, infos


def encoders_of(df) -> list[str]:
    """The distinct encoders named in the ``encoder`` column (sorted; ``[]`` without the column)."""
    if "encoder" not in df.columns:
        return []
    return sorted(map(str, df["encoder"].dropna().unique()))


def check_encoders(df, allow_mixed: bool) -> None:
    """Raises :class:`ResultsFolderError` when ``df`` mixes encoders and ``allow_mixed`` is false."""
    encoders = encoders_of(df)
    if len(encoders) > 1 and not allow_mixed:
        raise ResultsFolderError(
            f"the results mix encoders {encoders}: scores from different encoders are not comparable. "
            "Report one encoder at a time, or pass --allow-mixed-encoders (allow_mixed_encoders=True) "
            "to write one sub-report per encoder"
        )


def load_clip_scores(run_infos: Sequence[Mapping]):
    """Concatenates the ``clip_alignment.csv`` files named by ``load_results``' run infos (None if none)."""
    import pandas as pd

    frames = []
    for info in run_infos:
        path = info.get("_clip_alignment")
        if path:
            header = pd.read_csv(path, nrows=0).columns
            na = {c: ["", "nan", "NaN"] if c.startswith("clip_") or c == "n_images" else [""] for c in header}
            df = pd.read_csv(path, dtype={c: str for c in ("method", "condition", "block_id", "city") if c in header},
                             keep_default_na=False, na_values=na)
            df["run"] = info.get("_run")
            frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else None


def nan_reasons_from_run_info(run_infos: Sequence[Mapping]) -> dict[str, str]:
    """Why metric columns are NaN, as stated by ``run.json``.

    Understands ``nan_reasons`` as a list of ``{"column", "reason", ...}`` records (what
    ``geofidelity-bench evaluate`` writes, and what ``evaluate_panels`` leaves in
    ``df.attrs["nan_reasons"]``) or a ``{metric: reason}`` mapping; failing those, a top-level
    string entry named after a metric (e.g. ``"gaas": "not computed: ..."``).
    """
    out: dict[str, list[str]] = {}

    def add(metric: Any, reason: Any) -> None:
        if isinstance(metric, str) and metric in RESULT_METRIC_COLUMNS and reason:
            lst = out.setdefault(metric, [])
            if str(reason) not in lst:
                lst.append(str(reason))

    for info in run_infos:
        reasons = info.get("nan_reasons")
        if isinstance(reasons, Mapping):
            for metric, reason in reasons.items():
                add(metric, reason)
        elif isinstance(reasons, list):
            for rec in reasons:
                if isinstance(rec, Mapping):
                    add(rec.get("column") or rec.get("metric"), rec.get("reason"))
    for info in run_infos:  # a bare top-level note only where no nan_reasons record explains the column
        for metric in RESULT_METRIC_COLUMNS:
            if metric not in out and isinstance(info.get(metric), str):
                add(metric, info[metric])
    return {m: "; ".join(r) for m, r in out.items()}


__all__ = [
    "CLIP_FILE",
    "RESULTS_FILE",
    "RUN_FILE",
    "ResultsFolderError",
    "check_encoders",
    "encoders_of",
    "format_table",
    "hierarchy_text",
    "leaderboard_text",
    "load_clip_scores",
    "load_results",
    "nan_reasons_from_run_info",
    "read_results_csv",
    "read_utf8_text",
    "run_record",
    "write_results",
]
