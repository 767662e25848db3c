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

from .. import caveats, stats
from ..comparability import FIELDS, comparability_of_run, not_comparable_reason
from ..metrics.catalog import RESULT_METRICS
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
    confidence_label,
)
from .plots import plot_captions, plot_city_heatmap, plot_cos_sim_by_condition, plot_hierarchy, plot_leaderboard
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
    groups = comparable_groups(results_df, infos)
    if len(groups) > 1 and not allow_mixed_encoders:
        raise ReportError(_not_comparable_message(groups))
    params = {"seed": int(seed), "n_resamples": int(n_resamples), "rank_resamples": int(rank_resamples),
              "confidence": float(confidence), "interval": "percentile bootstrap",
              "rng": "numpy.random.default_rng(seed), one fresh generator per estimate",
              "prompt_comparisons": [f"{a} - {b}" for a, b in PROMPT_COMPARISONS],
              "delta_metrics": list(DELTA_METRICS), "control_metrics": list(CONTROL_METRICS),
              "leaderboard_condition": MAIN_CONDITION, "leaderboard_metrics": list(LEADERBOARD_METRICS),
              "lower_is_better": sorted(stats.LOWER_IS_BETTER),
              "higher_is_better": sorted(m.column for m in RESULT_METRICS if m.higher_is_better is True),
              "no_direction": sorted(m.column for m in RESULT_METRICS if m.higher_is_better is None),
              "encoders": encoders}
    if len(encoders) > 1 or len(groups) > 1:
        return _build_mixed(results_df, out, infos, groups, params, clip_scores, title, plots)
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
    inputs["comparability"] = groups[0]["key"] if groups else None
    report = {"title": title, "versions": library_versions(REPORT_DISTRIBUTIONS), "parameters": params, "inputs": inputs,
              "metric_na": ctx.metric_na, "notes": ctx.notes, "tables": table_json, "plots": plot_json,
              "copy_audit": copy_audit_summary(infos, ctx.units)}
    report = _json_clean(report)
    _write_json(out / "report.json", report)
    (out / "report.md").write_text(_markdown(title, report, tables), encoding="utf-8")
    report["out_dir"] = str(out)
    return report


def _write_plots(ctx: Context, tables: Mapping[str, Table], out: Path) -> dict[str, Any]:
    res: dict[str, Any] = {}

    captions = plot_captions(ctx.confidence)

    def run(name: str, table: str, fn) -> None:
        t = tables[table]
        if not t.ok:
            res[name] = {"status": "skipped", "reason": f"table {table} skipped: {t.reason}"}
            return
        path = fn(t.data, out / "plots" / f"{name}.png")
        res[name] = ({"status": "ok", "png": f"plots/{name}.png", "caption": captions[name]} if path
                     else {"status": "skipped", "reason": "nothing to plot"})

    run("leaderboard", "leaderboard", lambda d, p: plot_leaderboard(d, p, ctx.metric_na, confidence=ctx.confidence))
    run("cos_sim_by_condition", "cos_sim_by_condition",
        lambda d, p: plot_cos_sim_by_condition(d, ctx.conditions, p, confidence=ctx.confidence,
                                               note=_unequal_note(tables["cos_sim_by_condition"])))
    run("hierarchy", "hierarchy", lambda d, p: plot_hierarchy(d, p, confidence=ctx.confidence))
    run("city_heatmap", "city_by_method", plot_city_heatmap)
    return res


def _unequal_note(t: Table) -> str | None:
    """The not-comparable note of a table, for its plot (None when its rows are comparable)."""
    if any("not comparable across rows" in n for n in t.notes):
        return "generators cover different blocks: not comparable across generators (Table 5)"
    return None


def _published_line(run: Mapping) -> list[str]:
    """A run converted from the release's published scores (``run.json["published"]``, written by
    ``import-release``) says so: its numbers are the release's, not recomputed here."""
    published = run.get("published")
    if not isinstance(published, Mapping) or published.get("recomputed", True):
        return []
    release = published.get("release") or {}
    sha = next((f.get("sha256") for f in published.get("files") or []
                if isinstance(f, Mapping) and f.get("path") == published.get("scores_file")), None)
    source = f"`{published.get('scores_file', '?')}`" + (f" (sha256 {str(sha)[:12]}...)" if sha else "")
    return [f"- published scores (run {run.get('_run', '?')}): the numbers of release "
            f"{release.get('version', '?')} as published in {source}, not recomputed here (its `diversity_gap` is "
            "the release's max(0, gap); docs/benchmark.md section 12, Differences from the paper's release code)"]


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
    for run in inp["runs"]:
        lines.extend(_published_line(run))
    if inp["benchmark_fingerprints"]:
        lines.append(f"- benchmark fingerprint: {', '.join(inp['benchmark_fingerprints'])}")
    lines += [
        f"- statistics: {p['interval']} {confidence_label(p['confidence'])} intervals, "
        f"{caveats.bootstrap_text(p['n_resamples'], p['seed'])} ({p['rng']}); rank stability "
        f"{p['rank_resamples']:,} city resamples; pairs matched by ({', '.join(p.get('pair_keys', []))})",
        f"- higher is better: {', '.join(p['higher_is_better'])}; lower is better: {', '.join(p['lower_is_better'])}; "
        f"no direction (descriptive): {', '.join(p['no_direction'])} (Table 4's similarities to the negatives say "
        "how alike two places look, neither higher nor lower is better)",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()),
        "",
    ]
    if (p["n_resamples"], p["seed"]) != (caveats.BOOTSTRAP_RESAMPLES, caveats.BOOTSTRAP_SEED):
        lines[-1:-1] = [f"- note: these intervals use {caveats.bootstrap_text(p['n_resamples'], p['seed'])}, not "
                        f"the project's setting ({caveats.bootstrap_text()}): they differ from other reports'"]
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
    lines += _copied_section(report.get("copy_audit") or {})
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


def comparable_groups(results_df: pd.DataFrame, infos: Sequence[Mapping]) -> list[dict]:
    """The groups of rows whose scores may be compared (docs/benchmark.md section 7, Comparability).

    Each results folder's ``run.json`` gives its key (:func:`~geofidelity_bench.comparability.comparability_of_run`:
    benchmark fingerprint, encoder config hash, protocol version); folders with different keys, or
    rows with different encoder names, are in different groups. Returns one dict per group, in
    first-seen order: ``key`` (the Comparability), ``encoder``, ``runs`` (the run labels, None when
    the rows carry no ``run``), ``dirs``, ``mask`` (its rows of ``results_df``).
    """
    by_run = {str(i["_run"]): i for i in infos if i.get("_run") is not None}
    has_runs = "run" in results_df.columns and bool(by_run)
    enc = (results_df["encoder"].fillna("").astype(str) if "encoder" in results_df.columns
           else pd.Series("", index=results_df.index))
    if has_runs:
        keys = results_df["run"].astype(str).map(lambda r: comparability_of_run(by_run.get(r, {})))
    else:
        key = comparability_of_run(infos[0]) if len(infos) == 1 else comparability_of_run({})
        keys = pd.Series([key] * len(results_df), index=results_df.index, dtype=object)
    groups: dict[tuple, dict] = {}
    for idx, (k, e) in enumerate(zip(keys, enc)):
        g = groups.setdefault((k.key, e), {"key": k, "encoder": e, "runs": [] if has_runs else None, "dirs": [],
                                           "rows": []})
        g["rows"].append(idx)
        if has_runs:
            run = str(results_df["run"].iloc[idx])
            if run not in g["runs"]:
                g["runs"].append(run)
                g["dirs"].append(str(by_run.get(run, {}).get("_dir", run)))
    out = []
    for g in groups.values():
        mask = np.zeros(len(results_df), dtype=bool)
        mask[g.pop("rows")] = True
        out.append({**g, "mask": mask})
    return out


#: How a message calls each field of the comparability key when it gives its full value.
_FULL_NAMES = {"benchmark_fingerprint": "benchmark fingerprint", "encoder_config_hash": "encoder config hash",
               "protocol_version": "protocol version"}


def _differing_values(groups: Sequence[dict]) -> str:
    """The full values of every key field in which the groups differ, with the folders of each, e.g.
    ``benchmark fingerprint: abab... (a), cdcd... (b)`` (two 12-character prefixes can be equal)."""
    parts = []
    for attr, _ in FIELDS:
        by_value: dict[str, list[str]] = {}
        for g in groups:
            by_value.setdefault(getattr(g["key"], attr), []).extend(g["dirs"] or ["rows given directly"])
        if len(by_value) > 1:
            parts.append(f"{_FULL_NAMES[attr]}: " + ", ".join(f"{value or 'not recorded'} ({', '.join(dirs)})"
                                                            for value, dirs in by_value.items()))
    return "; ".join(parts)


def _not_comparable_message(groups: Sequence[dict]) -> str:
    first = groups[0]
    parts = []
    for g in groups:
        why = not_comparable_reason(first["key"], g["key"]) if g is not first else None
        where = ", ".join(g["dirs"]) or "rows given directly"
        parts.append(f"[{where}: {g['key'].short()}, encoder {g['encoder'] or '?'}"
                     + (f"; {why}" if why else "") + "]")
    differing = _differing_values(groups)
    if differing:
        parts.append(f"({differing})")
    return (f"the results fall into {len(groups)} groups whose scores are not comparable (they need the same benchmark "
            "fingerprint, encoder config hash and protocol version, docs/benchmark.md section 7): " + " ".join(parts)
            + ". Report one group at a time, or pass --allow-mixed-encoders (allow_mixed_encoders=True) to write one "
            "sub-report per group; no table ranks across groups")


def _build_mixed(results_df, out: Path, infos, groups, params, clip_scores, title, plots) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    subs = {}
    encoders = [g["encoder"] for g in groups]
    for n, g in enumerate(groups, 1):
        sub_df = results_df[g["mask"]]
        runs = set(g["runs"]) if g["runs"] is not None else None
        sub_infos = [i for i in infos if runs is None or i.get("_run") in runs]
        sub_clip = clip_scores
        if clip_scores is not None and runs is not None and "run" in clip_scores.columns:
            sub_clip = clip_scores[clip_scores["run"].isin(runs)]
        folder = f"encoder_{_safe_name(g['encoder'])}" + (f"_group{n}" if encoders.count(g["encoder"]) > 1 else "")
        rep = build_report(sub_df, out / folder, run_info=sub_infos, seed=params["seed"],
                           n_resamples=params["n_resamples"], confidence=params["confidence"],
                           rank_resamples=params["rank_resamples"], clip_scores=sub_clip, plots=plots,
                           title=f"{title}: encoder {g['encoder']} ({g['key'].short()})")
        subs[folder] = {"folder": folder, "report_md": f"{folder}/report.md", "encoder": g["encoder"],
                        "comparability": g["key"].short(), "runs": g["runs"],
                        **{attr: getattr(g["key"], attr) for attr, _ in FIELDS},
                        "tables": {k: v["status"] for k, v in rep["tables"].items()}}
    report = _json_clean({"title": title, "versions": library_versions(REPORT_DISTRIBUTIONS), "parameters": params,
                          "notes": [f"the results fall into {len(groups)} groups that are not comparable (another "
                                    "encoder, encoder config, benchmark or protocol); one sub-report per group, and "
                                    "no table ranks across groups"],
                          "inputs": {"n_rows": int(len(results_df)), "runs": infos}, "sub_reports": subs})
    _write_json(out / "report.json", report)
    lines = [f"# {title}", "", "The results fall into groups whose scores are not comparable (docs/benchmark.md "
             "section 7); one report per group, never ranked together:", ""]
    lines += [f"- `{s['encoder']}` ({s['comparability']}; runs {', '.join(s['runs'] or ['given directly'])}): "
              f"[{s['report_md']}]({s['report_md']})" for s in subs.values()]
    differing = _differing_values(groups)
    if differing:
        lines += ["", f"The groups differ in: {differing}."]
    (out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report["out_dir"] = str(out)
    return report


# -- the copy audit ------------------------------------------------------------------------------


def copy_audit_summary(infos: Sequence[Mapping], units: pd.DataFrame) -> dict:
    """What the runs' copy audits found: the flagged images (run.json ``near_copies``), the audit
    settings where recorded (``copy_audit``), and the copied rows (``n_copied > 0``)."""
    records, audits = [], []
    recorded = False
    for info in infos:
        if "near_copies" in info or "copy_audit" in info:
            recorded = True
        audit = info.get("copy_audit")
        if isinstance(audit, Mapping):
            audits.append({k: audit.get(k) for k in ("method", "compared_with", "thresholds", "n_audited",
                                                      "n_flagged", "excluded")} | {"run": info.get("_run")})
        for rec in info.get("near_copies") or []:
            if isinstance(rec, Mapping) and rec.get("flagged", True):
                records.append({**{k: rec.get(k) for k in ("method", "condition", "block_id", "file", "reference_id",
                                                           "reference_block_id", "hash_distance", "cosine",
                                                           "exact")}, "run": info.get("_run")})
    mask = caveats.copied_mask(units) if len(units) else pd.Series([], dtype=bool)
    rows = units.loc[mask, ["method", "condition", "block_id", "n_copied", "n_generated"]] if len(units) else units
    return {"recorded": recorded, "audits": audits, "images": records, "copied_rows": rows}


def _copied_section(audit: Mapping) -> list[str]:
    lines = ["## Copied reference photos", ""]
    images, rows = audit.get("images") or [], audit.get("copied_rows") or []
    if not audit.get("recorded") and not rows:
        return lines + ["not recorded: the run.json of these results has no copy audit (`near_copies`); re-run "
                        "`geofidelity-bench evaluate` to audit the panels", ""]
    for a in audit.get("audits") or []:
        th = a.get("thresholds")
        lines.append(f"- audit{' of ' + str(a['run']) if a.get('run') else ''}: {a.get('method') or 'copy audit'}; "
                     f"compared with {a.get('compared_with') or 'the reference photos'}; "
                     f"{a.get('n_audited')} image(s) audited, {a.get('n_flagged')} flagged"
                     + (f"; thresholds {json.dumps(th, sort_keys=True)}" if th else "")
                     + ("; flagged images excluded from the scores" if a.get("excluded") else ""))
    if not images and not rows:
        return lines + (["", ""] if audit.get("audits") else []) + ["The copy audit flagged no image: no panel copies a "
                                                                    "reference photo of the benchmark.", ""]
    lines += ["", caveats.copied_note(len(rows), len(images) or int(sum(r.get("n_copied") or 0 for r in rows))) or "",
              ""]
    if images:
        def num(x, digits):
            return "n/a" if x is None else (f"{x:.{digits}f}" if isinstance(x, float) else str(x))

        lines += ["| File | Method / condition / block | Matched reference (block) | Hash distance | Cosine | Exact |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for r in images:
            lines.append(f"| {str(r.get('file')).replace('|', '/')} | {r.get('method')} / {r.get('condition')} / "
                         f"{r.get('block_id')} | {r.get('reference_id')} ({r.get('reference_block_id')}) | "
                         f"{num(r.get('hash_distance'), 0)} | {num(r.get('cosine'), 4)} | "
                         f"{'yes' if r.get('exact') else 'no'} |")
        lines.append("")
    if rows:
        per_method: dict[str, int] = {}
        for r in rows:
            per_method[r["method"]] = per_method.get(r["method"], 0) + 1
        lines += ["Rows marked " + caveats.COPIED_MARK + " in the tables and plots: "
                  + ", ".join(f"{m} ({k} panel(s))" for m, k in per_method.items()), ""]
    return lines


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
