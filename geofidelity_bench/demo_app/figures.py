"""Matplotlib figures of the app: a block and its negatives on a map, a panel against the anchors.

Figures are made on the Agg canvas directly (no pyplot): no global backend, safe in the
threads of a web server.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from ..benchmark import Benchmark
from ..geo import haversine_m
from ..metrics.catalog import METRICS, NEGATIVE_LABELS, SIMILARITY_COLUMNS
from .texts import ANCHOR_SHORT, CANDIDATE_PHRASES, SCORE_BY_KEY, is_missing

ROLE_LABELS = dict(NEGATIVE_LABELS)
_ROLE_COLORS = {
    "same_neighborhood": "#DD8452",
    "same_city": "#C44E52",
    "same_driving_side": "#8172B3",
    "random_city": "#937860",
}
YOURS = "your images"


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _distance_text(metres: float) -> str:
    if metres >= 10_000:
        return f"{metres / 1000:.0f} km"
    return f"{metres / 1000:.1f} km" if metres >= 1000 else f"{metres:.0f} m"


def negatives_by_block(bench: Benchmark, block_id: str) -> dict[str, list[str]]:
    """Negative block id -> its roles (one block may serve several roles), in role order."""
    out: dict[str, list[str]] = {}
    for role, neg in bench.negatives(block_id).items():
        if neg is not None:
            out.setdefault(neg, []).append(role)
    return out


def off_map_negatives(bench: Benchmark, block_id: str) -> list[str]:
    """One line per negative outside the block's city (not drawn on the map)."""
    block = bench.block(block_id)
    lines = []
    for neg, roles in negatives_by_block(bench, block_id).items():
        other = bench.block(neg)
        if other.city == block.city:
            continue
        dist = haversine_m(*block.centroid, *other.centroid)
        city = bench.cities[other.city].name if other.city in bench.cities else other.city_name
        lines.append(f"{' + '.join(ROLE_LABELS[r] for r in roles)}: {neg} in {city} ({other.country}), "
                     f"{_distance_text(dist)} away")
    return lines


def block_map_figure(bench: Benchmark, block_id: str):
    """The block's polyline, its centroid, and the centroids (and polylines) of its same-city
    negatives, labelled by role; negatives in other cities are listed under the map."""
    block = bench.block(block_id)
    fig = _figure(6.4, 5.2)
    ax = fig.add_subplot(1, 1, 1)
    lat0 = block.centroid[0]
    # Metres look square; the limits (not the axes box) stretch to fill the figure.
    ax.set_aspect(1.0 / max(math.cos(math.radians(lat0)), 1e-6), adjustable="datalim")
    lats = [p[0] for p in block.polyline]
    lons = [p[1] for p in block.polyline]
    ax.plot(lons, lats, "-", color="#4C72B0", linewidth=3, label=f"target: {block.block_id}", zorder=3)
    ax.plot([block.centroid[1]], [block.centroid[0]], marker="*", markersize=16, color="#4C72B0",
            markeredgecolor="black", linestyle="none", zorder=4)
    for ref in bench.references_of(block_id):
        if ref.lat is not None and ref.lon is not None:
            lats.append(ref.lat)
            lons.append(ref.lon)
    labels = []  # the negatives' names, turned towards the middle of the map below (never cut at its edge)
    for neg, roles in negatives_by_block(bench, block_id).items():
        other = bench.block(neg)
        if other.city != block.city:
            continue
        color = _ROLE_COLORS[roles[0]]
        label = " + ".join(ROLE_LABELS[r] for r in roles)
        olat = [p[0] for p in other.polyline]
        olon = [p[1] for p in other.polyline]
        ax.plot(olon, olat, "-", color=color, linewidth=1.5, alpha=0.6, zorder=2)
        ax.plot([other.centroid[1]], [other.centroid[0]], marker="o", markersize=10, color=color,
                markeredgecolor="black", linestyle="none", label=f"{label}: {neg}", zorder=4)
        labels.append(ax.annotate(neg, (other.centroid[1], other.centroid[0]), textcoords="offset points",
                                  xytext=(6, 6), fontsize=8, color=color))
        lats += olat + [other.centroid[0]]
        lons += olon + [other.centroid[1]]
    pad_lat = max((max(lats) - min(lats)) * 0.12, 0.0003)
    pad_lon = max((max(lons) - min(lons)) * 0.12, 0.0003)
    ax.update_datalim([(min(lons) - pad_lon, min(lats) - pad_lat), (max(lons) + pad_lon, max(lats) + pad_lat)])
    ax.autoscale_view()
    _labels_inward(ax, labels)
    ax.set_xlabel("longitude")
    ax.set_ylabel("latitude")
    ax.ticklabel_format(useOffset=False)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best", framealpha=0.85)
    off = off_map_negatives(bench, block_id)
    if off:
        fig.text(0.01, 0.01, "Off the map: " + "; ".join(off), fontsize=7, wrap=True, va="bottom")
        fig.tight_layout(rect=(0, 0.06 + 0.03 * (len(off) - 1), 1, 0.94))
    else:
        fig.tight_layout(rect=(0, 0, 1, 0.94))  # room for the Gradio label drawn over the top left
    return fig


def _labels_inward(ax, labels) -> None:
    """Puts each point's label on the side of the point that faces the middle of the map: a label of a
    point near the right (top) edge is written to its left (below it), so no label runs off the axes."""
    x0, x1 = ax.get_xlim()
    y0, y1 = ax.get_ylim()
    for ann in labels:
        x, y = ann.xy
        right = x > (x0 + x1) / 2
        top = y > (y0 + y1) / 2
        ann.set_position((-6 if right else 6, -6 if top else 6))
        ann.set_horizontalalignment("right" if right else "left")
        ann.set_verticalalignment("top" if top else "bottom")


#: Scores shown against the anchors (2 x 4 grid; the last cell shows the similarity profile).
ANCHOR_PLOT_METRICS = ("cos_sim", "mmd", "dcsf", "retrieval_acc", "mrr", "local_margin", "strongest_margin")
SIM_COLUMNS = SIMILARITY_COLUMNS


#: The colour and style of a chance line, as on the report's leaderboard.png.
CHANCE_COLOR = "#C44E52"
CHANCE_OF = {"retrieval_acc": 0, "mrr": 1}
ANCHOR_PLOT_TITLE = "Your images against this block's real-image anchors"


def anchor_figure(yours: Mapping[str, float], anchors: Mapping[str, Mapping[str, float]], *, block_id: str,
                  labels: Mapping[str, str] | None = None, chance: Sequence[float] | None = None,
                  title: str = ANCHOR_PLOT_TITLE, yours_label: str = YOURS, narrow: bool = False):
    """Your panel's scores next to the same block's real-image anchors; ``labels``: each anchor's name on the
    plot (default :data:`~geofidelity_bench.demo_app.texts.ANCHOR_SHORT`; ``texts.anchor_labels(..., short=True)``).

    ``chance`` (retrieval accuracy, MRR of random images against the block's candidates) is drawn as a dashed
    line on those two plots, as on the report's leaderboard.png. ``title`` is drawn on the figure (the page
    shows no label over it); ``narrow``: two plots a row (a phone's width) instead of four."""
    from matplotlib.ticker import MaxNLocator

    labels = ANCHOR_SHORT if labels is None else labels
    rows = [(yours_label, yours)] + [(labels.get(m, m), v) for m, v in anchors.items()]
    names = [n for n, _ in rows]
    colors = ["#4C72B0"] + ["#AAAAAA", "#888888", "#666666"][: len(rows) - 1]
    ncols = 1 if narrow else 4
    nrows = 8 if narrow else 2
    fig = _figure(*((4.4, 13.0) if narrow else (12.0, 5.6)))
    small, mid = (8, 9) if narrow else (7, 9)
    y = list(range(len(rows)))[::-1]
    for i, key in enumerate(ANCHOR_PLOT_METRICS):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        values = [r.get(key) for _, r in rows]
        shown = [0.0 if is_missing(v) else float(v) for v in values]
        ax.barh(y, shown, color=colors)
        for yy, v, s in zip(y, values, shown):
            ax.text(s, yy, " n/a" if is_missing(v) else f" {v:.2f}", va="center", fontsize=small)
        info = SCORE_BY_KEY[key]
        arrow = "↑" if info.higher_is_better else "↓"
        level = None
        if chance is not None and key in CHANCE_OF and not is_missing(chance[CHANCE_OF[key]]):
            level = float(chance[CHANCE_OF[key]])
            ax.axvline(level, color=CHANCE_COLOR, linestyle="--", linewidth=1.4, zorder=3)
        ax.set_title(f"{info.label} {arrow}" + (" (- - chance)" if level is not None else ""), fontsize=mid)
        ax.set_yticks(y)
        ax.set_yticklabels(names if i % ncols == 0 else [""] * len(names), fontsize=small)
        ax.axvline(0, color="black", linewidth=0.6)
        ax.tick_params(axis="x", labelsize=small)
        ax.xaxis.set_major_locator(MaxNLocator(4))  # a few ticks: never run into each other
        ax.grid(axis="x", alpha=0.3)
        lo = min(shown + [0.0])
        hi = max(shown + [0.0] + ([level] if level is not None else []))
        span = (hi - lo) or 1.0
        ax.set_xlim(lo - 0.05 * span if lo < 0 else lo, hi + 0.3 * span)
    ax = fig.add_subplot(nrows, ncols, 8)
    width = 0.8 / len(rows)
    for j, ((name, r), color) in enumerate(zip(rows, colors)):
        vals = [0.0 if is_missing(r.get(c)) else float(r.get(c)) for c in SIM_COLUMNS]
        xs = [k + (j - (len(rows) - 1) / 2) * width for k in range(len(SIM_COLUMNS))]
        ax.bar(xs, vals, width, color=color, label=name)
    ax.set_xticks(range(len(SIM_COLUMNS)))
    ax.set_xticklabels([METRICS[c].short for c in SIM_COLUMNS], rotation=30, fontsize=small)
    ax.set_title("similarity to each candidate", fontsize=mid)
    ax.tick_params(axis="y", labelsize=small)
    ax.grid(axis="y", alpha=0.3)
    handles, texts = ax.get_legend_handles_labels()
    if chance is not None:
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], color=CHANCE_COLOR, linestyle="--", label="chance level (random order)"))
        texts.append("chance level (random order)")
    fig.legend(handles, texts, fontsize=small, loc="lower center", ncol=2 if narrow else 5, frameon=False)
    fig.suptitle(title, fontsize=mid + 1 if narrow else mid + 2, wrap=True)
    fig.text(0.99, 0.002, f"block {block_id}", ha="right", va="bottom", fontsize=small - 1, color="#666666")
    fig.tight_layout(rect=(0, 0.055, 1, 0.975) if narrow else (0, 0.06, 1, 0.95))
    return fig


def candidate_phrase(role: str) -> str:
    return CANDIDATE_PHRASES.get(role, role)


def best_match_summary(best: Sequence[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for b in best:
        counts[b] = counts.get(b, 0) + 1
    return counts
