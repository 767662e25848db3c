"""GeoDiv figures (PNG, matplotlib's Agg canvas; no pyplot, no GUI).

* :func:`plot_diversity_bars`: per group (country, city, model, ...) and diversity score (SEVI
  affluence / maintenance, VDI entity / background), the paper's plain score with its bootstrap
  interval and the size-matched (rarefied) score with its interval, the group's ``n`` in its
  label; a missing value is a hatched "n/a" bar, never a zero-length one. The value axis runs
  0..1 and says that higher means more diverse; each value is written just right of its upper
  whisker cap (the axis extends past 1 to make room), never on it.
* :func:`plot_rating_distributions`: per group, the share of images at each SEVI level (1..5)
  as stacked bars, one panel per SEVI question, with the mean rating written beside each bar
  and each panel's legend below it (clear of the titles).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .diversity import GeoDivTables

_LEVEL_COLORS = ["#b2182b", "#ef8a62", "#f7f7f7", "#67a9cf", "#2166ac"]
_PLAIN, _MATCHED, _MISSING = "#a6bddb", "#2b5d9c", "#bbbbbb"
#: Whisker cap half-length in points; the value axis runs to _XMAX so that labels fit past D = 1.
_CAPSIZE, _XMAX = 2.0, 1.2
#: Says what the value axis means (every panel).
AXIS_LABEL = "D (0 to 1): higher = more diverse"


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: Path) -> str:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return str(path)


def _group_labels(tables: GeoDivTables, df) -> list[str]:
    return [" / ".join(str(r[k]) for k in tables.group_by) + f" (n={int(r['n_images'])})" for _, r in df.iterrows()]


def _draw_bars(ax, y: np.ndarray, df, col: str, color: str, height: float) -> None:
    """One series of bars (one call each for bars, n/a bars and whiskers: fast for many groups)."""
    value = df[col].to_numpy(dtype=float)
    lo, hi = df[f"{col}_lo"].to_numpy(dtype=float), df[f"{col}_hi"].to_numpy(dtype=float)
    missing = np.isnan(value)
    ax.barh(y[~missing], value[~missing], height=height, color=color)
    if missing.any():
        ax.barh(y[missing], np.ones(missing.sum()), height=height, color="none", edgecolor=_MISSING, hatch="////",
                linewidth=0.5)
    whisk = ~missing & ~np.isnan(lo) & ~np.isnan(hi)
    if whisk.any():
        v = value[whisk]
        ax.errorbar(v, y[whisk], xerr=np.vstack([np.maximum(v - lo[whisk], 0), np.maximum(hi[whisk] - v, 0)]),
                    fmt="none", ecolor="#222222", elinewidth=0.8, capsize=_CAPSIZE)
    for yy, v, h, gone in zip(y, value, hi, missing):
        if gone:
            ax.text(0.02, yy, "n/a", va="center", fontsize=6.5, color="#555555")
        else:
            # beside the end of the bar or of its upper whisker, whichever is further right, a fixed
            # distance in points past the cap (the axis runs to _XMAX > 1, so there is room at D = 1)
            end = v if math.isnan(h) else max(v, h)
            ax.annotate(f"{v:.2f}", (end, yy), xytext=(_CAPSIZE + 2.5, 0), textcoords="offset points",
                        ha="left", va="center", fontsize=6.5)


def diversity_figure(tables: GeoDivTables):
    """The figure of :func:`plot_diversity_bars`; None when there is no group."""
    df = tables.per_group
    cols = [c for c in df.columns if c.endswith("_diversity")]
    if df.empty or not cols:
        return None
    labels = _group_labels(tables, df)
    n = len(df)
    m = tables.size_matching.get("n")
    fig = _figure(2.8 * len(cols) + 1.8, 2.1 + 0.42 * n)
    y = np.arange(n)[::-1].astype(float)
    h = 0.38
    for i, col in enumerate(cols):
        ax = fig.add_subplot(1, len(cols), i + 1)
        _draw_bars(ax, y + h / 2, df, col, _PLAIN, h)
        _draw_bars(ax, y - h / 2, df, f"{col}_rarefied", _MATCHED, h)
        ax.set_xlim(0, _XMAX)
        ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.set_xticklabels(["0", "0.25", "0.5", "0.75", "1"], fontsize=7)
        ax.axvline(1.0, color="#999999", linewidth=0.6)  # D = 1: past it, only the value labels
        ax.set_ylim(-0.6, n - 0.4)
        ax.set_yticks(y)
        ax.set_yticklabels(labels if i == 0 else [""] * n, fontsize=8)
        ax.set_title(col.replace("_", " "), fontsize=9)
        ax.set_xlabel(AXIS_LABEL, fontsize=7)
        ax.grid(axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    sm = tables.size_matching
    pct = f"{sm.get('interval', 0.95):.0%}"
    draws = f"{sm.get('replicates')} draws, seed {sm.get('seed')}"
    too_small = m is not None and sm.get("min_options") is not None and m < sm["min_options"]
    handles = [Patch(color=_PLAIN, label=f"plain D (paper), {pct} bootstrap interval ({draws}); grows with n"),
               Patch(color=_MATCHED, label=(f"size-matched D (n={m}), central {pct} of subsets: "
                                            + ("can hardly tell groups apart at this n" if too_small
                                               else "compare these") if m is not None
                                            else "size-matched D: n/a (no group of 2 images)")),
               Patch(facecolor="none", edgecolor=_MISSING, hatch="////", label="n/a (no value; not zero)")]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.suptitle(f"GeoDiv diversity by {' / '.join(tables.group_by)} ({tables.question_bank}): higher = more diverse",
                 fontsize=10)
    fig.tight_layout(rect=(0, 0.45 / fig.get_figheight(), 1, 1 - 0.3 / fig.get_figheight()))
    return fig


def plot_diversity_bars(tables: GeoDivTables, path: str | Path) -> str | None:
    """Bars of every diversity column of ``tables.per_group``; None when there is no group."""
    fig = diversity_figure(tables)
    return None if fig is None else _save(fig, path)


def ratings_figure(tables: GeoDivTables):
    """The figure of :func:`plot_rating_distributions`; None without SEVI questions or groups."""
    pq = tables.per_question
    sevi = pq[pq["kind"] == "sevi"] if not pq.empty else pq
    if sevi.empty:
        return None
    qids = list(dict.fromkeys(sevi["question_id"]))
    groups = tables.per_group
    labels = _group_labels(tables, groups)
    n = len(groups)
    fig = _figure(4.4 * len(qids) + 1.6, 2.2 + 0.3 * n)
    y = np.arange(n)[::-1]
    for i, qid in enumerate(qids):
        ax = fig.add_subplot(1, len(qids), i + 1)
        rows = sevi[sevi["question_id"] == qid]
        by_group: dict[tuple, Any] = {tuple(r[k] for k in tables.group_by): r for _, r in rows.iterrows()}
        options = list(rows.iloc[0]["counts"].keys())
        shares = np.zeros((n, len(options)))
        means, missing = [], []
        for j, (_, g) in enumerate(groups.iterrows()):
            r = by_group.get(tuple(g[k] for k in tables.group_by))
            counts = np.array([r["counts"].get(o, 0) for o in options], dtype=float) if r is not None else np.zeros(len(options))
            total = counts.sum()
            shares[j] = counts / total if total else 0.0
            mean = r["mean_rating"] if r is not None else math.nan
            means.append(mean)
            missing.append(mean is None or math.isnan(mean))
        left = np.zeros(n)
        for k, option in enumerate(options):
            ax.barh(y, shares[:, k], left=left, color=_LEVEL_COLORS[k % len(_LEVEL_COLORS)], edgecolor="#555555",
                    linewidth=0.4, label=f"{k + 1} {option}")
            left += shares[:, k]
        for yy, mean, gone in zip(y, means, missing):
            if gone:
                ax.barh(yy, 1.0, color="none", edgecolor=_MISSING, hatch="////", linewidth=0.5)
            ax.text(1.02, yy, "n/a" if gone else f"{mean:.2f}", va="center", fontsize=7)
        ax.set_xlim(0, 1.15)
        ax.set_yticks(y)
        ax.set_yticklabels(labels if i == 0 else [""] * n, fontsize=8)
        ax.set_title(f"{rows.iloc[0]['attribute']} (share per level; mean)", fontsize=9)
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, frameon=False)
    fig.tight_layout()
    return fig


def plot_rating_distributions(tables: GeoDivTables, path: str | Path) -> str | None:
    """Stacked shares of SEVI levels per group; None without SEVI questions or groups."""
    fig = ratings_figure(tables)
    return None if fig is None else _save(fig, path)
