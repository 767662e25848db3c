"""GeoDiv figures (PNG, matplotlib's Agg canvas; no pyplot, no GUI).

* :func:`plot_diversity_bars`: per group (country, city, model, ...), horizontal bars of the
  SEVI diversities and the VDI entity / background diversities (all in [0, 1]).
* :func:`plot_rating_distributions`: per group, the share of images at each SEVI level (1..5)
  as stacked bars, one panel per SEVI question, with the mean rating written beside each bar.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .diversity import GeoDivTables

_LEVEL_COLORS = ["#b2182b", "#ef8a62", "#f7f7f7", "#67a9cf", "#2166ac"]


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: Path, top: float = 1.0) -> str:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=(0, 0, 1, top))
    fig.savefig(path, format="png")
    return str(path)


def _group_labels(tables: GeoDivTables, df) -> list[str]:
    return [" / ".join(str(r[k]) for k in tables.group_by) for _, r in df.iterrows()]


def plot_diversity_bars(tables: GeoDivTables, path: str | Path) -> str | None:
    """Bars of every diversity column of ``tables.per_group``; None when there is no group."""
    df = tables.per_group
    cols = [c for c in df.columns if c.endswith("_diversity")]
    if df.empty or not cols:
        return None
    labels = _group_labels(tables, df)
    n = len(df)
    fig = _figure(2.6 * len(cols) + 1.2, 1.6 + 0.3 * n)
    y = np.arange(n)[::-1]
    for i, col in enumerate(cols):
        ax = fig.add_subplot(1, len(cols), i + 1)
        values = df[col].to_numpy(dtype=float)
        ax.barh(y, np.nan_to_num(values), color="#4C72B0")
        for yy, v in zip(y, values):
            if math.isnan(v):
                ax.text(0.02, yy, "n/a", va="center", fontsize=7, color="#777777")
        ax.set_xlim(0, 1)
        ax.set_yticks(y)
        ax.set_yticklabels(labels if i == 0 else [""] * n, fontsize=8)
        ax.set_title(col.replace("_", " "), fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"GeoDiv diversity by {' / '.join(tables.group_by)} ({tables.question_bank})", fontsize=10)
    return _save(fig, path, top=1.0 - 0.35 / fig.get_figheight())


def plot_rating_distributions(tables: GeoDivTables, path: str | Path) -> str | None:
    """Stacked shares of SEVI levels per group; None without SEVI questions or groups."""
    pq = tables.per_question
    sevi = pq[pq["kind"] == "sevi"] if not pq.empty else pq
    if sevi.empty:
        return None
    qids = list(dict.fromkeys(sevi["question_id"]))
    groups = tables.per_group
    labels = _group_labels(tables, groups)
    n = len(groups)
    fig = _figure(4.2 * len(qids) + 1.2, 1.2 + 0.3 * n)
    y = np.arange(n)[::-1]
    for i, qid in enumerate(qids):
        ax = fig.add_subplot(1, len(qids), i + 1)
        rows = sevi[sevi["question_id"] == qid]
        by_group: dict[tuple, Any] = {tuple(r[k] for k in tables.group_by): r for _, r in rows.iterrows()}
        options = list(rows.iloc[0]["counts"].keys())
        shares = np.zeros((n, len(options)))
        means = []
        for j, (_, g) in enumerate(groups.iterrows()):
            r = by_group.get(tuple(g[k] for k in tables.group_by))
            counts = np.array([r["counts"].get(o, 0) for o in options], dtype=float) if r is not None else np.zeros(len(options))
            total = counts.sum()
            shares[j] = counts / total if total else 0.0
            means.append(r["mean_rating"] if r is not None else math.nan)
        left = np.zeros(n)
        for k, option in enumerate(options):
            ax.barh(y, shares[:, k], left=left, color=_LEVEL_COLORS[k % len(_LEVEL_COLORS)], edgecolor="#555555",
                    linewidth=0.4, label=f"{k + 1} {option}")
            left += shares[:, k]
        for yy, m in zip(y, means):
            ax.text(1.02, yy, "n/a" if m is None or math.isnan(m) else f"{m:.2f}", va="center", fontsize=7)
        ax.set_xlim(0, 1.15)
        ax.set_yticks(y)
        ax.set_yticklabels(labels if i == 0 else [""] * n, fontsize=8)
        ax.set_title(f"{rows.iloc[0]['attribute']} (share per level; mean)", fontsize=9)
        ax.legend(fontsize=6, loc="lower center", bbox_to_anchor=(0.5, 1.08), ncol=3, frameon=False)
    return _save(fig, path)
