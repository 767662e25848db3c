"""The report's PNG plots, drawn on the Agg canvas from the tables' data (no pyplot, no GUI)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..metrics.catalog import METRICS, heading
from ..caveats import COPIED_MARK, FEWER_BLOCKS_MARK, UNPROMPTABLE_MARK, fewer_blocks_note
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
                       f"the demo's sanity methods; {FEWER_BLOCKS_MARK} (faded bars): a row over fewer blocks than "
                       "the most, not comparable with them; a value of 0 is labelled 0.00, a missing one n/a.",
        "cos_sim_by_condition": f"CosSim per prompt condition: points are means over blocks, whiskers their bootstrap "
                                f"{pct} intervals over blocks (Table 5); n: the blocks of each point. Conditions are "
                                "categories (no line joins them); points over different blocks are not comparable: a hollow "
                                f"point with {FEWER_BLOCKS_MARK} rests on fewer blocks than the most; horizontal lines: "
                                "the real-image anchors' CosSim (mean over their blocks).",
        "hierarchy": f"Reference hierarchy (Table 4): mean image-to-panel cosine of the query panels to the target "
                     f"block and to each negative, whiskers bootstrap {pct} intervals over blocks. All bars of a query "
                     "set average the same blocks (n in the legend): those where every negative shown exists, so a "
                     "bar can differ from Table 4, which averages each column over the blocks where that negative "
                     "exists; n/a: no block of the query set has that negative.",
        "city_heatmap": "Mean CosSim per city and method (L1 generators and held-out real); the city's blocks in its "
                        "label, a cell over fewer of them says 'k of n'; colour scale fixed from 0 to 1 (wider only "
                        "when a value falls outside); n/a: the method has no row in that city.",
    }


#: The captions at the default 95% level.
PLOT_CAPTIONS = plot_captions()
#: The chance column of each retrieval metric: a dashed line on every retrieval plot.
CHANCE_OF = {"retrieval_acc": "chance_retrieval_acc", "mrr": "chance_mrr"}
COPIED_EDGE = "#8B0000"
UNPROMPTABLE_EDGE = "#555555"

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
    caveat = table["caveat"].fillna("") if "caveat" in table.columns else [""] * n
    # rows scored with --allow-unpromptable are compared with nothing: neither the most blocks nor a mark of fewer
    refused = (table["unpromptable"].fillna(False).astype(bool).tolist() if "unpromptable" in table.columns
               else [False] * n)
    n_blocks = table["n_blocks"].to_numpy(dtype=float)
    counted = n_blocks[~np.array(refused, dtype=bool)]
    n_most = int(np.nanmax(counted)) if np.isfinite(counted).any() else 0
    fewer = [bool(np.isfinite(b) and b < n_most and not u) for b, u in zip(n_blocks, refused)]
    labels = [f"{name} ({int(b)} block{'s' if int(b) != 1 else ''})"
              + (f"\n{fewer_blocks_note(int(b), n_most)}" if few else "")
              + (f"\n{mk}" if mk else "") + (f"\n{cv}" if cv else "")
              for name, b, mk, few, cv in zip(names, table["n_blocks"], marked, fewer, caveat)]
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
        for bar, is_copy, few, no_prompt in zip(bars, copied, fewer, refused):
            if is_copy:  # a copy of the benchmark's own photos: hatched, never read as a model's result
                bar.set_hatch("///")
                bar.set_edgecolor(COPIED_EDGE)
            if few:  # over fewer blocks than the others: faded, and marked in its label
                bar.set_alpha(0.45)
            if no_prompt:  # no prompt of the benchmark could make the panel: dotted, faded, marked in its label
                bar.set_hatch("..")
                bar.set_edgecolor(UNPROMPTABLE_EDGE)
                bar.set_alpha(0.45)
                bar.set_gid("unpromptable")
        for yi, vi in zip(y, v):  # a bar of length 0 and a missing value both draw nothing: say which
            if not np.isfinite(vi) or vi == 0:
                ax.text(0, yi, " n/a" if not np.isfinite(vi) else " 0.00", va="center", ha="left",
                        fontsize=_MIN_FONT, color="#555555" if not np.isfinite(vi) else "black",
                        style="italic" if not np.isfinite(vi) else "normal", gid="value_label")
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
    if any(fewer):
        handles.append(Patch(color=GROUP_STYLES["generator"][0], alpha=0.45,
                             label=f"{FEWER_BLOCKS_MARK} than the {n_most} of the others: not comparable"))
    if any(refused):
        handles.append(Patch(facecolor="white", edgecolor=UNPROMPTABLE_EDGE, hatch="..",
                             label=f"{UNPROMPTABLE_MARK}: no prompt of the benchmark, never ranked"))
    if any(c in table.columns and np.isfinite(table[c].to_numpy(dtype=float)).any() for c in CHANCE_OF.values()):
        handles.append(Line2D([], [], color="#C44E52", linestyle="dashed", label="chance level (random order)"))
    ncol = min(len(handles), 3)
    legend_rows = -(-len(handles) // ncol) if handles else 0
    fig.set_figheight(fig.get_figheight() + 0.2 * max(0, legend_rows - 1))
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=_MIN_FONT, frameon=False)
    fig.suptitle(f"Bars: mean over blocks; whiskers: bootstrap {confidence_label(confidence)} interval over blocks",
                 fontsize=_MIN_FONT + 1)
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, (0.15 + 0.22 * legend_rows) / height, 1, 1 - 0.1 / height))
    return _save(fig, path, layout=False)


def plot_cos_sim_by_condition(table: pd.DataFrame, conditions: Sequence[str], path: Path, *,
                              confidence: float = 0.95, note: str | None = None) -> str | None:
    if not conditions:
        return None
    fig = _figure(max(6.0, 1.2 * len(conditions) + 3.0) + 3.2, 4.5)  # + the legend, right of the axes
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(conditions))
    n_rows = len(table)
    width = min(0.7, 0.15 * n_rows)
    offsets = np.linspace(-width / 2, width / 2, n_rows) if n_rows > 1 else np.zeros(1)
    lows = []
    counts = np.array([float(r.get(f"{c}_n_blocks", np.nan)) for _, r in table.iterrows() for c in conditions])
    n_most = int(np.nanmax(counts)) if np.isfinite(counts).any() else 0
    any_fewer = False
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
        line = ax.errorbar(xs, v, yerr=err, linestyle="none", capsize=3, label=name, **style)
        colour = line.lines[0].get_color()
        lows.append(np.nanmin(np.where(np.isfinite(lo), lo, v)) if np.isfinite(v).any() else 0.0)
        for xi, vi, hii, c in zip(xs, v, hi, conditions):
            n = r.get(f"{c}_n_blocks")
            if np.isfinite(vi) and n is not None and np.isfinite(float(n)):
                few = int(n) < n_most
                any_fewer |= few
                if few:  # over fewer blocks than the most: a hollow point and the mark
                    ax.plot([xi], [vi], linestyle="none", marker=style["marker"], markersize=9, markerfacecolor="white",
                            markeredgecolor=colour, markeredgewidth=1.5, zorder=4, gid="fewer_blocks")
                top = hii if np.isfinite(hii) else vi
                ax.annotate(f"n={int(n)}" + (" \u2020" if few else ""), (xi, top), textcoords="offset points",
                            xytext=(0, 7), ha="center", fontsize=_MIN_FONT,
                            color="#8B0000" if few else "#444444")
            elif not np.isfinite(vi):
                ax.annotate("n/a", (xi, 0), textcoords="offset points", xytext=(0, 3), ha="center",
                            fontsize=_MIN_FONT, color="#555555", style="italic")
    anchor_styles = {"heldout_real": ("#333333", "--"), "random_same_country": ("#777777", "-."),
                     "random_global": ("#AAAAAA", ":")}
    for a in table.attrs.get("anchors", []):
        if np.isfinite(a["cos_sim"]):
            colour, dash = anchor_styles.get(a["method"], ("#999999", ":"))
            ax.axhline(a["cos_sim"], color=colour, linestyle=dash, linewidth=1.2, zorder=1, gid="anchor",
                       label=f"{a['label']} (anchor, {a['n_blocks']} blocks)"
                       + (f"\n{a['caveat']}" if a.get("caveat") else ""))
            lows.append(min(a["cos_sim"], 0.0))
    if any_fewer:
        from matplotlib.lines import Line2D

        ax.add_line(Line2D([], [], linestyle="none", marker="o", markerfacecolor="white", markeredgecolor="#444444",
                           label=f"{FEWER_BLOCKS_MARK} than the most ({n_most}): not comparable"))
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
    ax.legend(fontsize=_MIN_FONT, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.suptitle(f"CosSim by prompt condition (Table 5): mean over blocks, {confidence_label(confidence)} CI",
                 fontsize=_MIN_FONT + 1)
    if note:
        ax.set_title(f"\u26a0 {note}", fontsize=_MIN_FONT, color="#8B0000", wrap=True)
    return _save(fig, path)


def plot_hierarchy(table: pd.DataFrame, path: Path, *, confidence: float = 0.95) -> str | None:
    """Grouped bars per query set over ONE set of blocks each (``table.attrs["plot"]``, from
    ``tables._common_block_means``), with bootstrap whiskers; a missing bar reads "n/a"."""
    sets = table.attrs.get("plot")
    if not sets:
        return None
    cols = list(HIERARCHY_COLUMNS)
    fig = _figure(8.5, 5.0)
    ax = fig.add_subplot(1, 1, 1)
    n = len(sets)
    width = 0.8 / max(n, 1)
    x = np.arange(len(cols))
    top = 0.0
    n_most = max(len(q["blocks"]) for q in sets)
    # the reference: the first query set over the most blocks (Held-out Real where it has them)
    ref = next(q for q in sets if len(q["blocks"]) == n_most)
    for i, q in enumerate(sets):
        v = np.array([q[c] for c in cols], dtype=float)
        lo = np.array([q[f"{c}_ci_low"] for c in cols], dtype=float)
        hi = np.array([q[f"{c}_ci_high"] for c in cols], dtype=float)
        err = np.vstack([np.where(np.isfinite(lo), v - lo, 0), np.where(np.isfinite(hi), hi - v, 0)])
        xs = x + (i - (n - 1) / 2) * width
        nb = len(q["blocks"])
        label = f"{q['label']}: {nb} block{'s' if nb != 1 else ''}" + _against(q, ref, n_most)
        bars = ax.bar(xs, np.nan_to_num(v), width, yerr=err, capsize=3, ecolor="black", label=label)
        colour = bars.patches[0].get_facecolor()
        for xi, vi in zip(xs, v):
            if not np.isfinite(vi):  # no bar is not a bar of 0
                ax.text(xi, 0.01, "n/a", ha="center", va="bottom", rotation=90, fontsize=_MIN_FONT, color=colour,
                        style="italic", gid="missing_bar")
        top = max(top, float(np.nanmax(np.where(np.isfinite(hi), hi, v))) if np.isfinite(v).any() else 0.0)
    ax.set_xticks(x)
    ax.set_xticklabels([METRICS[c].short for c in cols], fontsize=_MIN_FONT)
    ax.set_ylim(0, max(1.0, top + 0.05))
    ax.set_ylabel(f"mean image-to-panel cosine ({confidence_label(confidence)} CI)", fontsize=_MIN_FONT + 1)
    ax.tick_params(axis="y", labelsize=_MIN_FONT)
    ax.set_title("Reference hierarchy (Table 4): query panels vs the target block and each negative",
                 fontsize=_MIN_FONT + 2)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=_MIN_FONT, loc="upper right")
    left = [f"{q['label'].split(' (')[0]}: " + ", ".join(
        f"{b} (no {', '.join(METRICS[c].short for c in miss)})" for b, miss in q["left_out"].items())
            for q in sets if q["left_out"]]
    foot = ("Each query set's bars average the same blocks: those where every negative shown exists."
            + (" Left out: " + "; ".join(left) + "." if left else ""))
    fig.text(0.01, 0.01, foot, fontsize=_MIN_FONT, ha="left", va="bottom", wrap=True, gid="footnote")
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    return _save(fig, path, layout=False)


def _against(q: Mapping, ref: Mapping, n_most: int) -> str:
    """What a hierarchy query set's blocks are beside the reference set's (its legend's parenthesis, or "")."""
    if q is ref:
        return ""
    mine, theirs = set(q["blocks"]), set(ref["blocks"])
    name = str(ref["label"]).split(" (")[0]
    common = len(mine & theirs)
    if mine and not common:
        return f" ({FEWER_BLOCKS_MARK}: no block in common with {name}'s {len(theirs)}, not comparable)" if len(
            mine) < n_most else f" (no block in common with {name}'s {len(theirs)}, not comparable)"
    if len(mine) < n_most:
        return f" ({fewer_blocks_note(len(mine), n_most)})"
    if mine != theirs:
        return f" ({common} of its {len(mine)} blocks in common with {name}'s, not comparable)"
    return ""


def plot_city_heatmap(table: pd.DataFrame, path: Path) -> str | None:
    values = table.drop(columns="city").to_numpy(dtype=float)
    if values.size == 0:
        return None
    marked = table.attrs.get("labels", {})
    names = table.attrs.get("city_names", {})
    n_city = table.attrs.get("n_blocks", {})
    cell_n = table.attrs.get("cell_blocks", {})
    keys = list(table["city"])
    method_cols = [c for c in table.columns if c != "city"]
    cities = [f"{names.get(k, k)} ({n_city[k]} block{'s' if n_city[k] != 1 else ''})" if k in n_city
              else str(names.get(k, k)) for k in keys]
    methods = [marked.get(c, method_label(c)) for c in method_cols]
    # Sized from the content: room for the longest labels, cells wide enough for "0.00 (1 of 3)" at 8 pt.
    label_w = 0.075 * max(len(str(c)) for c in cities)
    rot_h = 0.055 * max(len(line) for m in methods for line in m.split("\n"))
    fig = _figure(max(5.0, 2.4 + label_w + 1.1 * len(methods)), max(3.0, 1.0 + rot_h + 0.5 * len(cities)))
    ax = fig.add_subplot(1, 1, 1)
    finite = values[np.isfinite(values)]
    # a fixed scale over CosSim's usual range: colours compare across reports, never stretch a small spread
    vmin = min(0.0, float(finite.min())) if finite.size else 0.0
    vmax = max(1.0, float(finite.max())) if finite.size else 1.0
    ax.set_facecolor("#EEEEEE")
    im = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap="viridis", vmin=vmin, vmax=vmax)
    ax.set_xticks(np.arange(len(methods)))
    ax.set_xticklabels(methods, rotation=35, ha="right", fontsize=_MIN_FONT)
    ax.set_yticks(np.arange(len(cities)))
    ax.set_yticklabels(cities, fontsize=_MIN_FONT)
    mid = (vmin + vmax) / 2
    for (i, j), v in np.ndenumerate(values):
        key = keys[i]
        if np.isfinite(v):
            text = f"{v:.2f}"
            n, of = cell_n.get((key, method_cols[j])), n_city.get(key)
            if n is not None and of is not None and n < of:
                text += f"\n({n} of {of})"
            ax.text(j, i, text, ha="center", va="center", fontsize=_MIN_FONT, color="white" if v < mid else "black")
        else:
            ax.text(j, i, "n/a", ha="center", va="center", fontsize=_MIN_FONT, color="#555555", style="italic",
                    gid="missing_cell")
    cbar = fig.colorbar(im, ax=ax)
    cbar.set_label(f"{METRICS['cos_sim'].label} (mean over blocks; fixed scale {vmin:g} to {vmax:g})",
                   fontsize=_MIN_FONT)
    cbar.ax.tick_params(labelsize=_MIN_FONT)
    ax.set_title("CosSim per city (L1 generators, held-out real)", fontsize=_MIN_FONT + 1)
    return _save(fig, path)
