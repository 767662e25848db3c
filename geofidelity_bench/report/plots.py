"""The report's PNG plots, drawn on the Agg canvas from the tables' data (no pyplot, no GUI)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..metrics.catalog import METRICS, heading
from .context import HIERARCHY_COLUMNS, method_label


def _figure(width: float, height: float):
    # The Agg canvas directly, not pyplot: no global backend switch, no GUI, thread-safe.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return str(path)


def plot_leaderboard(table: pd.DataFrame, path: Path, metric_na: Mapping[str, str] = {}) -> str | None:
    metrics = [m for m in ("cos_sim", "retrieval_acc", "dcsf", "gaas") if m not in metric_na
               and np.isfinite(table[m].to_numpy(dtype=float)).any()]
    if not metrics:
        return None
    n = len(table)
    fig = _figure(3.6 * len(metrics), 0.9 + 0.35 * n)
    colors = {"generator": "#4C72B0", "generator_mean": "#2F4B7C", "anchor": "#999999", "sanity": "#DD8452"}
    labels = ["Generator mean" if g == "generator_mean" else method_label(m)
              for g, m in zip(table["group"], table["method"])]
    y = np.arange(n)[::-1]
    for i, m in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), i + 1)
        v = table[m].to_numpy(dtype=float)
        lo = table[f"{m}_ci_low"].to_numpy(dtype=float)
        hi = table[f"{m}_ci_high"].to_numpy(dtype=float)
        err = np.vstack([np.where(np.isfinite(lo), v - lo, 0), np.where(np.isfinite(hi), hi - v, 0)])
        ax.barh(y, np.nan_to_num(v), xerr=err, color=[colors.get(g, "#4C72B0") for g in table["group"]],
                capsize=2, ecolor="black")
        ax.set_yticks(y)
        ax.set_yticklabels(labels if i == 0 else [""] * n, fontsize=8)
        ax.set_title(heading(m), fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def plot_cos_sim_by_condition(table: pd.DataFrame, conditions: Sequence[str], path: Path) -> str | None:
    if not conditions:
        return None
    fig = _figure(max(5.0, 1.1 * len(conditions) + 2.5), 4.0)
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(conditions))
    for _, r in table.iterrows():
        name = "Generator mean" if r["method"] == "generator_mean" else method_label(r["method"])
        style = dict(color="black", linewidth=2.5) if r["method"] == "generator_mean" else {}
        ax.plot(x, r[list(conditions)].to_numpy(dtype=float), marker="o", label=name, **style)
    ax.set_xticks(x)
    ax.set_xticklabels(conditions, rotation=20, fontsize=8)
    ax.set_ylabel("CosSim (mean over blocks)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return _save(fig, path)


def plot_hierarchy(table: pd.DataFrame, path: Path) -> str | None:
    cols = list(HIERARCHY_COLUMNS)
    fig = _figure(7.0, 4.0)
    ax = fig.add_subplot(1, 1, 1)
    n = len(table)
    width = 0.8 / max(n, 1)
    x = np.arange(len(cols))
    for i, (_, r) in enumerate(table.iterrows()):
        ax.bar(x + (i - (n - 1) / 2) * width, np.nan_to_num(r[cols].to_numpy(dtype=float)), width, label=r["query_set"])
    ax.set_xticks(x)
    ax.set_xticklabels([METRICS[c].short for c in cols], fontsize=8)
    ax.set_ylabel("mean image-to-panel cosine")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_city_heatmap(table: pd.DataFrame, path: Path) -> str | None:
    values = table.drop(columns="city").to_numpy(dtype=float)
    if values.size == 0:
        return None
    cities, methods = list(table["city"]), [method_label(c) for c in table.columns if c != "city"]
    fig = _figure(1.2 + 0.9 * len(methods), 1.0 + 0.35 * len(cities))
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap="viridis")
    ax.set_xticks(np.arange(len(methods)))
    ax.set_xticklabels(methods, rotation=35, ha="right", fontsize=8)
    ax.set_yticks(np.arange(len(cities)))
    ax.set_yticklabels(cities, fontsize=8)
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6, color="white")
    fig.colorbar(im, ax=ax, label="CosSim")
    return _save(fig, path)
