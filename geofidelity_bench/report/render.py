"""Writing a report: :func:`build_report` (tables, plots, ``report.json``, ``report.md``) and
:func:`report_from_dirs` (read results folders, then build)."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from .. import stats
from ..provenance import library_versions
from ..results import (
    REQUIRED_COLUMNS,
    ResultsFolderError,
    check_encoders,
    encoders_of,
    load_clip_scores,
    load_results,
)
from .context import (
    CONTROL_METRICS,
    DELTA_METRICS,
    LEADERBOARD_METRICS,
    MAIN_CONDITION,
    PROMPT_COMPARISONS,
    Context,
    ReportError,
)
from .plots import PLOT_CAPTIONS, plot_city_heatmap, plot_cos_sim_by_condition, plot_hierarchy, plot_leaderboard
from .tables import (
    Table,
    table_city_by_method,
    table_controls,
    table_cos_sim_by_condition,
    table_extra_conditions,
    table_hierarchy,
    table_leaderboard,
    table_leave_one_city_out,
    table_prompt_deltas,
    table_rank_stability,
    table_summary,
    tables_clip,
)

#: Versions recorded in report.json.
REPORT_DISTRIBUTIONS = ("geofidelity-bench", "numpy", "pandas", "scipy", "matplotlib")


def _json_clean(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_json_clean(v) for v in obj]
    if isinstance(obj, pd.DataFrame):
        return _json_clean(obj.to_dict(orient="records"))
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(float(obj)) else None
    if isinstance(obj, (str, int)) or obj is None:
        return obj
    if obj is pd.NA or obj is pd.NaT:
        return None
    return str(obj)


def _as_infos(run_info: Any) -> list[dict]:
    if run_info is None:
        return []
    if isinstance(run_info, Mapping):
        return [dict(run_info)]
    return [dict(r) for r in run_info]


def _methods_of(units: pd.DataFrame, condition: str) -> list[str]:
    return sorted(map(str, units.loc[units["condition"] == condition, "method"].unique()))


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False, allow_nan=False), encoding="utf-8")


def _safe_name(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("._") or "encoder"


def build_report(
    results_df: pd.DataFrame,
    out_dir: str | os.PathLike,
    *,
    run_info: Mapping | Sequence[Mapping] | None = None,
    seed: int = 42,
    n_resamples: int = 5000,
    confidence: float = 0.95,
    rank_resamples: int = 2000,
    clip_scores: pd.DataFrame | None = None,
    allow_mixed_encoders: bool = False,
    plots: bool = True,
    title: str = "GeoFidelity-Bench report",
) -> dict:
    """Writes ``report.md``, ``report.json``, ``tables/*.csv`` and ``plots/*.png`` to ``out_dir``.

    Args:
        results_df: result rows (docs/benchmark.md section 7, Statistics and analyses columns; a ``run`` column is optional).
        out_dir: output folder (created).
        run_info: the ``run.json`` of the results (a dict) or a list of them (as returned by
            :func:`geofidelity_bench.results.load_results`); used for the parameters section and n/a reasons.
        seed, n_resamples, confidence: every bootstrap (paired, city, block).
        rank_resamples: city bootstraps of the rank-stability table.
        clip_scores: per-panel CLIP scores (:func:`geofidelity_bench.clip_alignment.score_panels`);
            default: the ``clip_alignment.csv`` files named in ``run_info`` (``_clip_alignment``).
        allow_mixed_encoders: with several encoders in ``results_df``, write one sub-report per
            encoder (``out_dir/encoder_<name>/``) and an index; otherwise raise.
        plots: write the PNG plots.

    Returns:
        The content of ``report.json`` (tables as records, parameters, skip reasons), plus
        ``"out_dir"``.

    Raises:
        ReportError: mixed encoders without ``allow_mixed_encoders``, missing required
            columns, or a (method, condition, block) repeated within one run.
    """
    out = Path(out_dir)
    infos = _as_infos(run_info)
    if not isinstance(results_df, pd.DataFrame):
        raise ReportError(f"results_df must be a pandas DataFrame, got {type(results_df).__name__}")
    missing = [c for c in REQUIRED_COLUMNS if c not in results_df.columns]
    if missing:
        raise ReportError(f"results lack required column(s) {missing}")
    if results_df.empty:
        raise ReportError("results are empty")
    if clip_scores is None:
        clip_scores = load_clip_scores(infos)
    encoders = encoders_of(results_df)
    try:
        check_encoders(results_df, allow_mixed_encoders)
    except ResultsFolderError as err:
        raise ReportError(str(err)) from None
    params = {"seed": int(seed), "n_resamples": int(n_resamples), "rank_resamples": int(rank_resamples),
              "confidence": float(confidence), "interval": "percentile bootstrap",
              "rng": "numpy.random.default_rng(seed), one fresh generator per estimate",
              "prompt_comparisons": [f"{a} - {b}" for a, b in PROMPT_COMPARISONS],
              "delta_metrics": list(DELTA_METRICS), "control_metrics": list(CONTROL_METRICS),
              "leaderboard_condition": MAIN_CONDITION, "leaderboard_metrics": list(LEADERBOARD_METRICS),
              "lower_is_better": sorted(stats.LOWER_IS_BETTER), "encoders": encoders}
    if len(encoders) > 1:
        return _build_mixed(results_df, out, infos, encoders, params, clip_scores, title, plots)
    reason_sources = list(infos)
    if isinstance(results_df.attrs.get("nan_reasons"), (list, Mapping)):
        reason_sources.append({"nan_reasons": results_df.attrs["nan_reasons"]})
    ctx = Context(results_df, reason_sources, seed=seed, n_resamples=n_resamples, rank_resamples=rank_resamples,
                   confidence=confidence)
    params["pair_keys"] = list(ctx.pair_keys)
    tables: list[Table] = [
        table_hierarchy(ctx),
        table_cos_sim_by_condition(ctx),
        table_prompt_deltas(ctx),
        table_leave_one_city_out(ctx),
        table_controls(ctx),
        *tables_clip(ctx, clip_scores),
        table_leaderboard(ctx),
        table_rank_stability(ctx),
        table_city_by_method(ctx),
        table_summary(ctx),
    ]
    if not ctx.extra_units.empty:  # only then: reports without extra conditions stay as they were
        tables.insert(-1, table_extra_conditions(ctx))
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(exist_ok=True)
    by_name = {t.name: t for t in tables}
    table_json: dict[str, Any] = {}
    for t in tables:
        entry: dict[str, Any] = {"title": t.title, "status": "ok" if t.ok else "skipped"}
        if t.ok:
            rel = f"tables/{t.name}.csv"
            t.data.to_csv(out / rel, index=False)
            entry.update(csv=rel, caption=t.caption, notes=t.notes, rows=t.data)
        else:
            entry.update(reason=t.reason)
        table_json[t.name] = entry
    plot_json: dict[str, Any] = {}
    if plots:
        plot_json = _write_plots(ctx, by_name, out)
    inputs = {
        "n_rows": int(len(results_df)),
        "runs": infos,
        "methods": sorted(map(str, ctx.units["method"].unique())),
        "generated_conditions": ctx.conditions,
        "anchor_methods": _methods_of(ctx.units, stats.ANCHOR_CONDITION),
        "sanity_methods": _methods_of(ctx.units, stats.SANITY_CONDITION),
        "n_blocks": int(ctx.units["block_id"].nunique()),
        "n_cities": ctx.n_cities(ctx.units),
        "clip_alignment": clip_scores is not None and len(clip_scores) > 0,
        "benchmark_fingerprints": sorted({str(i["benchmark"]["fingerprint"]) for i in infos
                                          if isinstance(i.get("benchmark"), Mapping)
                                          and i["benchmark"].get("fingerprint")}),
    }
    report = {"title": title, "versions": library_versions(REPORT_DISTRIBUTIONS), "parameters": params, "inputs": inputs,
              "metric_na": ctx.metric_na, "notes": ctx.notes, "tables": table_json, "plots": plot_json}
    report = _json_clean(report)
    _write_json(out / "report.json", report)
    (out / "report.md").write_text(_markdown(title, report, tables), encoding="utf-8")
    report["out_dir"] = str(out)
    return report


def _write_plots(ctx: Context, tables: Mapping[str, Table], out: Path) -> dict[str, Any]:
    res: dict[str, Any] = {}

    def run(name: str, table: str, fn) -> None:
        t = tables[table]
        if not t.ok:
            res[name] = {"status": "skipped", "reason": f"table {table} skipped: {t.reason}"}
            return
        path = fn(t.data, out / "plots" / f"{name}.png")
        res[name] = ({"status": "ok", "png": f"plots/{name}.png", "caption": PLOT_CAPTIONS[name]} if path
                     else {"status": "skipped", "reason": "nothing to plot"})

    run("leaderboard", "leaderboard", lambda d, p: plot_leaderboard(d, p, ctx.metric_na))
    run("cos_sim_by_condition", "cos_sim_by_condition", lambda d, p: plot_cos_sim_by_condition(d, ctx.conditions, p))
    run("hierarchy", "hierarchy", plot_hierarchy)
    run("city_heatmap", "city_by_method", plot_city_heatmap)
    return res


def _markdown(title: str, report: Mapping, tables: Sequence[Table]) -> str:
    p, inp = report["parameters"], report["inputs"]
    lines = [f"# {title}", ""]
    lines += [
        f"- encoder: {', '.join(p['encoders']) or 'not recorded'}",
        f"- inputs: {inp['n_rows']} result rows; {inp['n_blocks']} blocks in {inp['n_cities']} cities; methods "
        f"{', '.join(inp['methods'])}; generated conditions {', '.join(inp['generated_conditions']) or 'none'}",
        "- runs: " + (", ".join(f"{r['_run']} ({r.get('_dir', '')})" if r.get("_run") else "run info given directly"
                                for r in inp["runs"]) or "no run.json"),
    ]
    if inp["benchmark_fingerprints"]:
        lines.append(f"- benchmark fingerprint: {', '.join(f[:16] for f in inp['benchmark_fingerprints'])}")
    lines += [
        f"- statistics: {p['interval']} {p['confidence']:.0%} intervals, {p['n_resamples']} resamples, "
        f"seed {p['seed']} ({p['rng']}); rank stability {p['rank_resamples']} city resamples; pairs matched by "
        f"({', '.join(p.get('pair_keys', []))})",
        f"- lower is better: {', '.join(p['lower_is_better'])}; every other reported metric: higher is better",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()),
        "",
    ]
    for metric, why in report["metric_na"].items():
        lines.append(f"- n/a: `{metric}`: {why}")
    for note in report["notes"]:
        lines.append(f"- note: {note}")
    if report["metric_na"] or report["notes"]:
        lines.append("")
    for t in tables:
        if t.name == "summary_method_condition":
            if t.ok:
                lines += [f"## {t.title}", "", "CSV only: `tables/summary_method_condition.csv`.", ""]
            continue
        lines += [f"## {t.title}", ""]
        if not t.ok:
            lines += [f"skipped: {t.reason}", ""]
            continue
        lines += [t.caption, "", t.markdown, ""]
        for note in t.notes:
            lines.append(f"- {note}")
        if t.notes:
            lines.append("")
        lines += [f"CSV: `tables/{t.name}.csv`", ""]
    plots = report.get("plots") or {}
    if plots:
        lines += ["## Plots", ""]
        for name, entry in plots.items():
            if entry.get("status") == "ok":
                lines += [f"![{name}]({entry['png']})", "", entry.get("caption", ""), ""]
            else:
                lines += [f"- {name}: skipped: {entry.get('reason')}"]
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _build_mixed(results_df, out: Path, infos, encoders, params, clip_scores, title, plots) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    subs = {}
    for enc in encoders:
        sub_df = results_df[results_df["encoder"] == enc]
        runs = set(sub_df["run"]) if "run" in sub_df.columns else None
        sub_infos = [i for i in infos if runs is None or i.get("_run") in runs]
        sub_clip = clip_scores
        if clip_scores is not None and runs is not None and "run" in clip_scores.columns:
            sub_clip = clip_scores[clip_scores["run"].isin(runs)]
        folder = f"encoder_{_safe_name(enc)}"
        rep = build_report(sub_df, out / folder, run_info=sub_infos, seed=params["seed"],
                           n_resamples=params["n_resamples"], confidence=params["confidence"],
                           rank_resamples=params["rank_resamples"], clip_scores=sub_clip, plots=plots,
                           title=f"{title}: encoder {enc}")
        subs[enc] = {"folder": folder, "report_md": f"{folder}/report.md",
                     "tables": {k: v["status"] for k, v in rep["tables"].items()}}
    report = _json_clean({"title": title, "versions": library_versions(REPORT_DISTRIBUTIONS), "parameters": params,
                          "notes": ["the results mix encoders; one sub-report per encoder (scores across encoders "
                                    "are not comparable)"],
                          "inputs": {"n_rows": int(len(results_df)), "runs": infos}, "sub_reports": subs})
    _write_json(out / "report.json", report)
    lines = [f"# {title}", "", "The results mix encoders, whose scores are not comparable; one report per encoder:", ""]
    lines += [f"- `{enc}`: [{s['report_md']}]({s['report_md']})" for enc, s in subs.items()]
    (out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report["out_dir"] = str(out)
    return report


def report_from_dirs(
    dirs: str | os.PathLike | Sequence[str | os.PathLike],
    out_dir: str | os.PathLike | None = None,
    *,
    allow_mixed_encoders: bool = False,
    **kwargs: Any,
) -> dict:
    """:func:`~geofidelity_bench.results.load_results` then :func:`build_report`; ``out_dir`` defaults
    to ``<first dir>/report``. ``dirs`` is one results folder or several. A folder that cannot be
    read raises :class:`ReportError` too."""
    if isinstance(dirs, (str, os.PathLike)):
        dirs = [dirs]
    try:
        df, infos = load_results(dirs, allow_mixed_encoders=allow_mixed_encoders)
    except ReportError:
        raise
    except ResultsFolderError as err:
        raise ReportError(str(err)) from None
    out = Path(out_dir) if out_dir is not None else Path(list(dirs)[0]) / "report"
    return build_report(df, out, run_info=infos, allow_mixed_encoders=allow_mixed_encoders, **kwargs)
