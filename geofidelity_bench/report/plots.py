"""The report's PNG plots, drawn on the Agg canvas from the tables' data (no pyplot, no GUI)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..metrics.catalog import METRICS, heading
from ..caveats import COPIED_MARK
from .context import HIERARCHY_COLUMNS, confidence_label, method_label


def _figure(width: float, height: float):
    # The Agg canvas directly, not pyplot: no global backend switch, no GUI, thread-safe.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: Path, layout: bool = True) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout:
        fig.tight_layout()
    fig.savefig(path, format="png")
    return str(path)


#: The colour of each row group of the leaderboard, and its legend entry.
GROUP_STYLES = {
    "generator": ("#4C72B0", "Generators (L1 prompts)"),
    "generator_mean": ("#2F4B7C", "Mean over generators"),
    "anchor": ("#999999", "Real-image anchors"),
    "sanity": ("#DD8452", "Sanity methods (demo)"),
}
def plot_captions(confidence: float = 0.95) -> dict[str, str]:
    """What the whiskers, points and lines of the plots are (report.md's plot captions)."""
    pct = confidence_label(confidence)
    return {
        "leaderboard": f"Leaderboard under L1: bars are means over blocks, whiskers their bootstrap {pct} intervals "
                       "over blocks (Table 10); dashed lines on retrieval accuracy and MRR: each row's chance level "
                       "(random order of its blocks' candidates); colours: generators, the real-image anchors and "
                       "the demo's sanity methods.",
        "cos_sim_by_condition": f"CosSim per prompt condition: points are means over blocks, whiskers their bootstrap "
                                f"{pct} intervals over blocks (Table 5); n: the blocks of each point. Conditions are "
                                "categories (no line joins them); points over different blocks are not comparable.",
        "hierarchy": "Mean image-to-panel cosine of the query panels to the target block and to each negative "
                     "(Table 4).",
        "city_heatmap": "Mean CosSim per city and method (L1 generators and held-out real).",
    }


#: The captions at the default 95% level.
PLOT_CAPTIONS = plot_captions()
#: The chance column of each retrieval metric: a dashed line on every retrieval plot.
CHANCE_OF = {"retrieval_acc": "chance_retrieval_acc", "mrr": "chance_mrr"}
COPIED_EDGE = "#8B0000"

_MIN_FONT = 8  # points; at the figures' 100 dpi about 11 px


def plot_leaderboard(table: pd.DataFrame, path: Path, metric_na: Mapping[str, str] = {}, *,
                     confidence: float = 0.95) -> str | None:
    metrics = [m for m in ("cos_sim", "retrieval_acc", "mrr", "dcsf", "gaas") if m not in metric_na
               and np.isfinite(table[m].to_numpy(dtype=float)).any()]
    if not metrics:
        return None
    n = len(table)
    names = ["Generator mean" if g == "generator_mean" else method_label(m)
             for g, m in zip(table["group"], table["method"])]
    marked = table["marks"] if "marks" in table.columns else [""] * n
    labels = [f"{name} ({int(b)} blocks)" + (f"\n{mk}" if mk else "")
              for name, b, mk in zip(names, table["n_blocks"], marked)]
    copied = [int(c) > 0 for c in table["n_copied_panels"]] if "n_copied_panels" in table.columns else [False] * n
    label_w = 0.065 * max(len(line) for x in labels for line in x.split("\n"))
    fig = _figure(max(7.0, 1.2 + label_w + 2.3 * len(metrics)), 1.8 + 0.4 * n)
    y = np.arange(n)[::-1]
    for i, m in enumerate(metrics):
        ax = fig.add_subplot(1, len(metrics), i + 1)
        v = table[m].to_numpy(dtype=float)
        lo = table[f"{m}_ci_low"].to_numpy(dtype=float)
        hi = table[f"{m}_ci_high"].to_numpy(dtype=float)
        err = np.vstack([np.where(np.isfinite(lo), v - lo, 0), np.where(np.isfinite(hi), hi - v, 0)])
        bars = ax.barh(y, np.nan_to_num(v), xerr=err, color=[GROUP_STYLES.get(g, GROUP_STYLES["generator"])[0]
                                                            for g in table["group"]], capsize=2, ecolor="black")
        for bar, is_copy in zip(bars, copied):
            if is_copy:  # a copy of the benchmark's own photos: hatched, never read as a model's result
                bar.set_hatch("///")
                bar.set_edgecolor(COPIED_EDGE)
        chance_drawn = False
        if m in CHANCE_OF and CHANCE_OF[m] in table.columns:
            chance = table[CHANCE_OF[m]].to_numpy(dtype=float)
            ok = np.isfinite(chance)
            if ok.any():  # each row's own chance level: its blocks' candidates differ
                ax.vlines(chance[ok], y[ok] - 0.45, y[ok] + 0.45, colors="#C44E52", linestyles="dashed", linewidth=1.4,
                          zorder=3)
                chance_drawn = True
        ax.set_yticks(y)
        ax.set_yticklabels(labels if i == 0 else [""] * n, fontsize=_MIN_FONT)
        ax.tick_params(axis="x", labelsize=_MIN_FONT)
        ax.set_title(heading(m) + (" (- - chance)" if chance_drawn else ""), fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    present = [g for g in GROUP_STYLES if g in set(table["group"])]
    handles = [Patch(color=GROUP_STYLES[g][0], label=GROUP_STYLES[g][1]) for g in present]
    if any(copied):
        handles.append(Patch(facecolor="white", edgecolor=COPIED_EDGE, hatch="///",
                             label=f"{COPIED_MARK}: copies reference photos"))
    if any(c in table.columns and np.isfinite(table[c].to_numpy(dtype=float)).any() for c in CHANCE_OF.values()):
        handles.append(Line2D([], [], color="#C44E52", linestyle="dashed", label="chance level (random order)"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=_MIN_FONT, frameon=False)
    fig.suptitle(f"Bars: mean over blocks; whiskers: bootstrap {confidence_label(confidence)} interval over blocks",
                 fontsize=_MIN_FONT + 1)
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, 0.4 / height, 1, 1 - 0.1 / height))
    return _save(fig, path, layout=False)


def plot_cos_sim_by_condition(table: pd.DataFrame, conditions: Sequence[str], path: Path, *,
                              confidence: float = 0.95, note: str | None = None) -> str | None:
    if not conditions:
        return None
    fig = _figure(max(6.0, 1.2 * len(conditions) + 3.0), 4.5)
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(conditions))
    n_rows = len(table)
    width = min(0.7, 0.15 * n_rows)
    offsets = np.linspace(-width / 2, width / 2, n_rows) if n_rows > 1 else np.zeros(1)
    lows = []
    for k, (_, r) in enumerate(table.iterrows()):
        mean = "generator_mean" == r["method"]
        name = "Generator mean" if mean else method_label(r["method"])
        if not mean and bool(r.get("copied", False)):
            name += f" {COPIED_MARK}"
        v = r[list(conditions)].to_numpy(dtype=float)
        lo = np.array([r.get(f"{c}_ci_low", np.nan) for c in conditions], dtype=float)
        hi = np.array([r.get(f"{c}_ci_high", np.nan) for c in conditions], dtype=float)
        err = np.vstack([np.where(np.isfinite(lo), v - lo, 0), np.where(np.isfinite(hi), hi - v, 0)])
        style = dict(color="black", marker="D") if mean else dict(marker="o")
        xs = x + offsets[k]
        ax.errorbar(xs, v, yerr=err, linestyle="none", capsize=3, label=name, **style)
        lows.append(np.nanmin(np.where(np.isfinite(lo), lo, v)) if np.isfinite(v).any() else 0.0)
        for xi, vi, hii, c in zip(xs, v, hi, conditions):
            n = r.get(f"{c}_n_blocks")
            if np.isfinite(vi) and n is not None and np.isfinite(float(n)):
                top = hii if np.isfinite(hii) else vi
                ax.annotate(f"n={int(n)}", (xi, top), textcoords="offset points", xytext=(0, 3), ha="center",
                            fontsize=_MIN_FONT, color="#444444")
    ax.set_xticks(x)
    ax.set_xticklabels(conditions, fontsize=_MIN_FONT)
    ax.set_xlim(-0.6, len(conditions) - 0.4)
    # An honest axis: from 0 (or the lowest interval below it) to the top of CosSim's range.
    ax.set_ylim(min(0.0, float(np.nanmin(lows)) - 0.05) if lows else 0.0, 1.0)
    ax.tick_params(axis="y", labelsize=_MIN_FONT)
    ax.set_xlabel("prompt condition", fontsize=_MIN_FONT + 1)
    ax.set_ylabel(f"{METRICS['cos_sim'].label} (mean over blocks, {confidence_label(confidence)} CI)",
                  fontsize=_MIN_FONT + 1)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=_MIN_FONT, loc="lower left")
    if note:
        ax.set_title(f"\u26a0 {note}", fontsize=_MIN_FONT, color="#8B0000", wrap=True)
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
    ax.legend(fontsize=_MIN_FONT)
    return _save(fig, path)


def plot_city_heatmap(table: pd.DataFrame, path: Path) -> str | None:
    values = table.drop(columns="city").to_numpy(dtype=float)
    if values.size == 0:
        return None
    marked = table.attrs.get("labels", {})
    cities = list(table["city"])
    methods = [marked.get(c, method_label(c)) for c in table.columns if c != "city"]
    # Sized from the content: room for the longest labels, cells wide enough for "0.00" at 8 pt.
    label_w = 0.075 * max(len(str(c)) for c in cities)
    rot_h = 0.055 * max(len(line) for m in methods for line in m.split("\n"))
    fig = _figure(max(4.5, 1.8 + label_w + 0.85 * len(methods)), max(3.0, 1.0 + rot_h + 0.45 * len(cities)))
    ax = fig.add_subplot(1, 1, 1)
    im = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap="viridis")
    ax.set_xticks(np.arange(len(methods)))
    ax.set_xticklabels(methods, rotation=35, ha="right", fontsize=_MIN_FONT)
    ax.set_yticks(np.arange(len(cities)))
    ax.set_yticklabels(cities, fontsize=_MIN_FONT)
    finite = values[np.isfinite(values)]
    mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=_MIN_FONT,
                    color="white" if v < mid else "black")
    cbar = fig.colorbar(im, ax=ax)
    cbar.set_label(f"{METRICS['cos_sim'].label} (mean over blocks)", fontsize=_MIN_FONT)
    cbar.ax.tick_params(labelsize=_MIN_FONT)
    return _save(fig, path)
