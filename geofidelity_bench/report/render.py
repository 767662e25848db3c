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
from ..comparability import (
    FIELDS,
    choose_gaas_segmenter,
    comparability_of_run,
    not_comparable_reason,
    segmenter_name_of_run,
    segmenter_of_run,
)
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
    preamble: Sequence[str] = (),
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
        preamble: lines that open ``report.md`` (a section "Leaderboard") and ``report.json`` (``preamble``):
            what the Hub leaderboard says of the group it reports (:func:`~.leaderboard.report_from_repo`).

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
    group = groups[0] if groups else {}
    gaas = group.get("gaas") or {}
    if gaas.get("drop") is not None and gaas["drop"].any():  # GAAS of one segmenter only (docs/benchmark.md section 7)
        attrs = results_df.attrs
        results_df = results_df.copy(deep=False)
        results_df.attrs = attrs
        values = pd.to_numeric(results_df["gaas"], errors="coerce").to_numpy(dtype=float).copy()
        values[gaas["drop"]] = np.nan
        results_df["gaas"] = values
    reason_sources = list(infos)
    if isinstance(results_df.attrs.get("nan_reasons"), (list, Mapping)):
        reason_sources.append({"nan_reasons": results_df.attrs["nan_reasons"]})
    ctx = Context(results_df, reason_sources, seed=seed, n_resamples=n_resamples, rank_resamples=rank_resamples,
                   confidence=confidence)
    params["pair_keys"] = list(ctx.pair_keys)
    group_notes = list(group.get("notes") or []) + list(gaas.get("notes") or [])
    ctx.notes[:0] = group_notes
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
    for t in tables:  # Table 10 says whose GAAS it shows
        if t.name == "leaderboard" and t.ok and gaas.get("notes"):
            t.notes += list(gaas["notes"])
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
    audit = copy_audit_summary(infos, ctx.units)
    if audit["images"]:  # every flagged image with its file and sha256 (report.md groups them by panel)
        pd.DataFrame(audit["images"], columns=list(_AUDIT_IMAGE_COLUMNS)).to_csv(out / AUDIT_IMAGES_CSV, index=False)
        audit["csv"] = AUDIT_IMAGES_CSV
    report = {"title": title, "versions": library_versions(REPORT_DISTRIBUTIONS), "parameters": params, "inputs": inputs,
              "metric_na": ctx.metric_na, "notes": ctx.notes, "tables": table_json, "plots": plot_json,
              "copy_audit": audit}
    if preamble:
        report["preamble"] = list(preamble)
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
    if report.get("preamble"):
        head, *rest = report["preamble"]
        lines += ["## Leaderboard", "", head, "", *(f"- {line}" for line in rest), ""]
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


def has_run_json(info: Mapping) -> bool:
    """Whether a run info holds a run.json (:func:`~geofidelity_bench.results.load_results` gives a folder
    without one only its ``_dir``, ``_run`` and ``_clip_alignment``)."""
    return any(not str(k).startswith("_") for k in info)


def comparable_groups(results_df: pd.DataFrame, infos: Sequence[Mapping]) -> list[dict]:
    """The groups of rows whose scores may be compared (docs/benchmark.md section 7, Comparability).

    Each results folder's ``run.json`` gives its key (:func:`~geofidelity_bench.comparability.comparability_of_run`:
    benchmark fingerprint, encoder config hash, protocol version); folders with different keys, or
    rows with different encoder names, are in different groups. A folder without ``run.json`` records
    no key, so it is comparable with nothing: it is a group of its own (``no_run_json``), never ranked
    with another folder. Returns one dict per group, in first-seen order: ``key`` (the Comparability),
    ``encoder``, ``runs`` (the run labels, None when the rows carry no ``run``), ``dirs``, ``mask`` (its
    rows of ``results_df``), ``no_run_json`` (the group is one folder without run.json), ``notes`` (what the
    report of the group says of its comparability) and ``gaas`` (:func:`gaas_of_group`: whose GAAS it shows).
    """
    by_run = {str(i["_run"]): i for i in infos if i.get("_run") is not None}
    has_runs = "run" in results_df.columns and bool(by_run)
    enc = (results_df["encoder"].fillna("").astype(str) if "encoder" in results_df.columns
           else pd.Series("", index=results_df.index))
    if has_runs:
        run_col = results_df["run"].astype(str)
        keys = run_col.map(lambda r: comparability_of_run(by_run.get(r, {})))
        alone = [r if r in by_run and not has_run_json(by_run[r]) else None for r in run_col]
    else:
        key = comparability_of_run(infos[0]) if len(infos) == 1 else comparability_of_run({})
        keys = pd.Series([key] * len(results_df), index=results_df.index, dtype=object)
        alone = [None] * len(results_df)
    groups: dict[tuple, dict] = {}
    for idx, (k, e, a) in enumerate(zip(keys, enc, alone)):
        g = groups.setdefault((k.key, e, a), {"key": k, "encoder": e, "runs": [] if has_runs else None, "dirs": [],
                                              "rows": [], "no_run_json": a is not None})
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
        notes = []
        if g["no_run_json"]:
            notes.append(f"comparability is not recorded: {g['dirs'][0]} has no run.json, so nothing records its "
                         "benchmark fingerprint, encoder config or protocol version; these scores are comparable with "
                         "no other results folder's (never ranked with them). Re-run `geofidelity-bench evaluate` "
                         "(or `demo`) to write its run.json")
        out.append({**g, "mask": mask, "notes": notes,
                    "gaas": gaas_of_group(results_df, mask, by_run) if has_runs else {}})
    return out


def gaas_of_group(results_df: pd.DataFrame, mask: np.ndarray, by_run: Mapping[str, Mapping]) -> dict:
    """Whose GAAS a comparable group shows: GAAS is compared only within one segmenter (docs/benchmark.md
    section 7), so where the group's runs used several (run.json ``gaas.config_hash``, else ``gaas.segmenter``),
    :func:`~geofidelity_bench.comparability.choose_gaas_segmenter` picks one from the rows with a finite GAAS
    (most rows; a tie goes to the benchmark's default segmenter) and the others' GAAS is n/a. A run whose
    run.json records no segmenter has GAAS comparable with none: n/a too, when another run records one.

    Returns ``{"segmenter": the chosen key ("" when nothing was chosen), "drop": bool mask over
    ``results_df`` of the rows whose GAAS is set to NaN, "notes": what the report says}`` ({} without GAAS)."""
    if "gaas" not in results_df.columns or "run" not in results_df.columns:
        return {}
    runs = results_df["run"].astype(str).to_numpy()
    finite = np.isfinite(pd.to_numeric(results_df["gaas"], errors="coerce").to_numpy(dtype=float)) & mask
    if not finite.any():
        return {}
    seg_of = {r: segmenter_of_run(by_run.get(r, {})) for r in set(runs[mask])}
    row_seg = np.array([seg_of.get(r, "") for r in runs], dtype=object)
    counts = pd.Series(row_seg[finite]).value_counts()
    recorded = {str(k): int(v) for k, v in counts.items() if k}
    names = {seg_of[r]: segmenter_name_of_run(by_run.get(r, {})) for r in seg_of if seg_of[r]}
    unrecorded = sorted({r for r in runs[finite] if not seg_of.get(r)})

    def dirs(runs_: Sequence[str]) -> str:
        return ", ".join(str(by_run.get(r, {}).get("_dir", r)) for r in runs_)

    notes: list[str] = []
    if len(recorded) >= 2:
        chosen, sentence = choose_gaas_segmenter(recorded, names)
        others = sorted({r for r in runs[finite] if seg_of.get(r) and seg_of[r] != chosen})
        notes.append(f"{sentence}; GAAS n/a in the rows of {dirs(others)}")
    elif recorded:
        chosen = next(iter(recorded))
    else:
        return {"segmenter": "", "drop": np.zeros(len(results_df), dtype=bool), "notes": []}
    if unrecorded:
        notes.append(f"GAAS n/a in the rows of {dirs(unrecorded)}: its run.json records no segmenter, so its GAAS "
                     f"cannot be compared with segmenter {names.get(chosen) or chosen[:12]}'s")
    drop = finite & (row_seg != chosen)
    return {"segmenter": chosen, "drop": drop, "notes": notes}


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
        where = ", ".join(g["dirs"]) or "rows given directly"
        if g.get("no_run_json"):
            parts.append(f"[{where}: no run.json, so its benchmark fingerprint, encoder config hash and protocol "
                         "version are not recorded: comparable with nothing, never ranked with another folder]")
            continue
        why = not_comparable_reason(first["key"], g["key"]) if g is not first else None
        parts.append(f"[{where}: {g['key'].short()}, encoder {g['encoder'] or '?'}"
                     + (f"; {why}" if why else "") + "]")
    differing = _differing_values([g for g in groups if not g.get("no_run_json")])
    if differing:
        parts.append(f"({differing})")
    missing = [g["dirs"][0] for g in groups if g.get("no_run_json")]
    todo = (f" A folder without run.json ({', '.join(missing)}): re-run `geofidelity-bench evaluate` (or `demo`) to "
            "write its run.json, or report it alone (`geofidelity-bench report --results DIR`)." if missing else "")
    return (f"the results fall into {len(groups)} groups whose scores are not comparable (they need the same benchmark "
            "fingerprint, encoder config hash and protocol version, docs/benchmark.md section 7): " + " ".join(parts)
            + "." + todo + " Report one group at a time, or pass --allow-mixed-encoders (allow_mixed_encoders=True) to "
            "write one sub-report per group; no table ranks across groups")


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
                        "comparability": "no run.json: not recorded" if g.get("no_run_json") else g["key"].short(),
                        "runs": g["runs"],
                        **{attr: getattr(g["key"], attr) for attr, _ in FIELDS},
                        "tables": {k: v["status"] for k, v in rep["tables"].items()}}
    report = _json_clean({"title": title, "versions": library_versions(REPORT_DISTRIBUTIONS), "parameters": params,
                          "notes": [f"the results fall into {len(groups)} groups that are not comparable (another "
                                    "encoder, encoder config, benchmark or protocol, or a folder without run.json, "
                                    "which is comparable with nothing); one sub-report per group, and no table ranks "
                                    "across groups"],
                          "inputs": {"n_rows": int(len(results_df)), "runs": infos}, "sub_reports": subs})
    _write_json(out / "report.json", report)
    lines = [f"# {title}", "", "The results fall into groups whose scores are not comparable (docs/benchmark.md "
             "section 7); one report per group, never ranked together:", ""]
    lines += [f"- `{s['encoder']}` ({s['comparability']}; runs {', '.join(s['runs'] or ['given directly'])}): "
              f"[{s['report_md']}]({s['report_md']})" for s in subs.values()]
    differing = _differing_values([g for g in groups if not g.get("no_run_json")])
    if differing:
        lines += ["", f"The groups differ in: {differing}."]
    missing = [g["dirs"][0] for g in groups if g.get("no_run_json")]
    if missing:
        lines += ["", f"No run.json in {', '.join(missing)}: nothing records the benchmark, encoder config or protocol "
                      "of its scores, so each such folder is reported alone; re-run `geofidelity-bench evaluate` (or "
                      "`demo`) to write its run.json."]
    (out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report["out_dir"] = str(out)
    return report


# -- the copy audit ------------------------------------------------------------------------------

#: Every flagged image of the copy audit, one row each (report.md groups them by panel).
AUDIT_IMAGES_CSV = "tables/copy_audit_images.csv"
_AUDIT_IMAGE_COLUMNS = ("run", "method", "condition", "block_id", "file", "sha256", "reference_id", "reference_block_id",
                        "hash_distance", "cosine", "exact", "matched_by", "edit", "region")


def copy_audit_summary(infos: Sequence[Mapping], units: pd.DataFrame) -> dict:
    """What the runs' copy audits found: the flagged images (run.json ``near_copies``: file, sha256, matched
    photo), the audit settings where recorded (``copy_audit``), and the copied rows (``n_copied > 0``)."""
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
                row = {**{k: rec.get(k) for k in _AUDIT_IMAGE_COLUMNS if k != "run"}, "run": info.get("_run")}
                if isinstance(row.get("region"), (list, tuple)):  # x0 y0 x1 y1 in the submitted image's pixels
                    row["region"] = " ".join(str(v) for v in row["region"])
                records.append(row)
    mask = caveats.copied_mask(units) if len(units) else pd.Series([], dtype=bool)
    rows = units.loc[mask, ["method", "condition", "block_id", "n_copied", "n_generated"]] if len(units) else units
    return {"recorded": recorded, "audits": audits, "images": records, "copied_rows": rows}


def _is_path(name: str) -> bool:
    """Whether an audit record's ``file`` is a file's path (else a name such as "panel image 0" for an image
    given in memory, or "reference ID" for a benchmark photo)."""
    return "/" in name or "\\" in name or bool(os.path.splitext(name)[1])


def _files_cell(images: Sequence[Mapping]) -> str:
    """The flagged files of one panel: their folder once and each file's name when they share one, else each
    path; an image without a path (given in memory) by its name and the first 12 hex digits of its sha256."""
    names = [str(r.get("file") or "?") for r in images]
    paths = [n for n in names if _is_path(n)]
    parents = {os.path.dirname(n.replace("\\", "/")) for n in paths}
    if len(paths) == len(names) > 1 and len(parents) == 1 and next(iter(parents)):
        parent = next(iter(parents))
        return f"{parent}/: " + ", ".join(os.path.basename(n.replace("\\", "/")) for n in names)
    numbered = [re.fullmatch(r"panel image (\d+)", n) for n in names]
    if all(numbered):  # images given in memory (the demo's sanity panels): their positions and sha256
        shas = [str(r.get("sha256"))[:12] if r.get("sha256") else "not recorded" for r in images]
        return (f"panel image{'s' if len(names) > 1 else ''} {', '.join(m.group(1) for m in numbered)} "
                f"(sha256 {', '.join(shas)})")
    parts = []
    for r, n in zip(images, names):
        sha = r.get("sha256")
        parts.append(n if _is_path(n) or not sha else f"{n} (sha256 {str(sha)[:12]})")
    return ", ".join(parts)


def _span(values: Sequence, digits: int) -> str:
    vals = sorted(float(v) for v in values if v is not None and isinstance(v, (int, float)) and math.isfinite(v))
    if not vals:
        return "n/a"
    lo, hi = f"{vals[0]:.{digits}f}", f"{vals[-1]:.{digits}f}"
    return lo if lo == hi else f"{lo}-{hi}"


def _references_cell(images: Sequence[Mapping]) -> str:
    """The matched photos, grouped by their block: ``ref_a, ref_b (block); world_17 (world)``."""
    by_block: dict[str, list[str]] = {}
    for r in images:
        refs = by_block.setdefault(str(r.get("reference_block_id")), [])
        ref = str(r.get("reference_id"))
        if ref not in refs:
            refs.append(ref)
    return "; ".join(f"{', '.join(refs)} ({block})" for block, refs in by_block.items())


def _edits_cell(images: Sequence[Mapping]) -> str:
    """The edits the geometric check found (issue 42) and the copied region of each such image, e.g.
    ``crop+rotation (0 0 307 230); collage/partial (512 0 1024 384)``; plain copies are "none"; records
    written before the check have no such fields: "not recorded"."""
    if not any(r.get("matched_by") is not None or r.get("edit") is not None for r in images):
        return "not recorded"
    parts = []
    for r in images:
        edit = r.get("edit")
        if not edit or edit in ("copy", "identical"):
            continue
        region = r.get("region")
        if isinstance(region, (list, tuple)):
            region = " ".join(str(v) for v in region)
        parts.append(f"{edit} ({region})" if region else str(edit))
    return "; ".join(parts) if parts else "none (plain copies)"


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
        panels: dict[tuple, list[Mapping]] = {}
        for r in images:
            panels.setdefault((r.get("run"), r.get("method"), r.get("condition"), r.get("block_id")), []).append(r)
        size = {(str(r["method"]), str(r["condition"]), str(r["block_id"])): r.get("n_generated") for r in rows}
        several_runs = len({k[0] for k in panels}) > 1
        lines += [f"One line per panel ({len(panels)} panel(s), {len(images)} flagged image(s)); every flagged image "
                  f"with its sha256: `{audit.get('csv') or AUDIT_IMAGES_CSV}`.", "",
                  "| Panel (method / condition / block) | Flagged | Files | Matched reference photos (block) | "
                  "Hash distance | Cosine | Exact copies | Edits found (copied region x0 y0 x1 y1) |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for (run, method, condition, block), recs in panels.items():
            n = size.get((str(method), str(condition), str(block)))
            flagged = f"{len(recs)} of {int(n)}" if isinstance(n, (int, float)) and math.isfinite(n) and n else \
                str(len(recs))
            where = f"{method} / {condition} / {block}" + (f" (run {run})" if several_runs and run else "")
            exact = sum(bool(r.get("exact")) for r in recs)
            cells = [where, flagged, _files_cell(recs), _references_cell(recs),
                     _span([r.get("hash_distance") for r in recs], 0), _span([r.get("cosine") for r in recs], 4),
                     f"{exact} of {len(recs)}", _edits_cell(recs)]
            # every cell can hold text from a submitted run.json: no "|" or line break may end the row
            lines.append("| " + " | ".join(" ".join(str(c).replace("|", "/").split()) for c in cells) + " |")
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
