"""The metric catalog: one record per score the benchmark reports (docs/benchmark.md sections 6-10).

Every place that names, orders or orients a score reads it from here: the result columns of
:mod:`geofidelity_bench.evaluation` (:data:`RESULT_METRICS`, in ``results.csv`` order), the
directions of :mod:`geofidelity_bench.stats` (``HIGHER_IS_BETTER``), the labels of the report,
the plain-text tables the commands print, the demo app's score texts and the metric Space's
table. Adding a metric means adding one :class:`MetricInfo` here (and computing it).

Pure Python: importing this module needs neither numpy nor torch.

Example:
    >>> METRICS["mmd"].label, METRICS["mmd"].higher_is_better, METRICS["mmd"].ideal
    ('MMD²', False, 0.0)
    >>> heading("retrieval_acc"), ascii_heading("retrieval_acc")
    ('Retrieval accuracy ↑', 'Retr^')
    >>> NEGATIVE_LABELS["same_driving_side"]
    'same driving side'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class MetricInfo:
    """How to name, orient and read one score.

    Attributes:
        column: the column (or output key) holding the score.
        label: the one label of the score, in every table, plot and app (Unicode allowed).
        short: an ASCII label of at most 11 characters, for plain-text tables and tight plot axes.
        higher_is_better: ``True`` / ``False``; ``None`` when the score has no direction
            (the diversity gap, the similarities to the negatives, descriptive ratings).
        ideal: the value of a perfect result, or ``None`` when there is no single one.
        range: the values the score can take, as text (``"[-1, 1]"``).
        direction: what is good, in words, for tables (``"lower is better"``).
        meaning: one sentence for a newcomer.
        family: ``"result"`` (a column of ``results.csv``), ``"mfp"`` (per-pair MFP output) or
            ``"geodiv"`` (per-group GeoDiv output).
    """

    column: str
    label: str
    short: str
    higher_is_better: bool | None
    ideal: float | None
    range: str
    direction: str
    meaning: str
    family: str = "result"

    @property
    def key(self) -> str:
        """The column (the name the app's texts use)."""
        return self.column

    @property
    def bounds(self) -> tuple[float, float, bool, bool]:
        """``range`` as numbers: (low, high, low included, high included); ``inf`` for no bound.

        >>> METRICS["mrr"].bounds
        (0.0, 1.0, False, True)
        """
        text = self.range.strip()
        low, high = (float(part) for part in text[1:-1].split(","))
        return low, high, text[0] == "[", text[-1] == "]"

    def in_range(self, value, tolerance: float = 1e-9):
        """Whether ``value`` (a number, or elementwise for a numpy array) lies in :attr:`range`;
        included ends are widened by ``tolerance`` for rounding (a cosine of identical sets may
        be written as 1.0000000000000002). NaN is never in range.

        >>> METRICS["mrr"].in_range(0.0), METRICS["cos_sim"].in_range(1.0 + 1e-15)
        (False, True)
        """
        low, high, low_in, high_in = self.bounds
        above = value >= low - tolerance if low_in else value > low
        below = value <= high + tolerance if high_in else value < high
        return above & below


#: The negative (look-alike) blocks of a target, by role, and their one label (docs/benchmark.md section 4, Embeddings).
NEGATIVE_LABELS: Mapping[str, str] = {
    "same_neighborhood": "same neighborhood",
    "same_city": "same city",
    "same_driving_side": "same driving side",
    "random_city": "random city",
}
_NEGATIVE_SHORT = {
    "same_neighborhood": "same nbhd",
    "same_city": "same city",
    "same_driving_side": "same side",
    "random_city": "random city",
}
_NEGATIVE_MEANING = {
    "same_neighborhood": "Mean similarity to a block in the same neighborhood.",
    "same_city": "Mean similarity to another block of the same city.",
    "same_driving_side": "Mean similarity to a block in another city that drives on the same side.",
    "random_city": "Mean similarity to a block in a random other city.",
}
_HIGHER, _LOWER = "higher is better", "lower is better"


def _negative(role: str) -> MetricInfo:
    return MetricInfo(f"sim_{role}", f"sim: {NEGATIVE_LABELS[role]}", _NEGATIVE_SHORT[role], None, None, "[-1, 1]",
                      "below the target is better", _NEGATIVE_MEANING[role])


#: The metric columns of ``results.csv``, in their column order (the order must not change).
RESULT_METRICS: tuple[MetricInfo, ...] = (
    MetricInfo("cos_sim", "CosSim", "CosSim", True, 1.0, "[-1, 1]", _HIGHER,
               "How close the average look of your images is to the average look of the block's real photos "
               "(cosine of the mean embeddings; 1 = the same)."),
    MetricInfo("mmd", "MMD²", "MMD", False, 0.0, "[0, 2]", _LOWER,
               "How distinguishable your set of images is from the set of real photos (0 = indistinguishable)."),
    MetricInfo("dcsf", "DCSF", "DCSF", False, 0.0, "[0, 3]", _LOWER,
               "MMD² plus a penalty when your images are less varied than the real photos (0 = ideal)."),
    MetricInfo("diversity_gap", "Diversity gap", "DivGap", None, 0.0, "[-2, 2]",
               "0 is ideal; > 0 = less varied than the real photos",
               "Variety of the real photos minus the variety of your images."),
    MetricInfo("gaas", "GAAS", "GAAS", False, 0.0, "[0, 1]", _LOWER,
               "How different the scene composition is (road, sidewalk, buildings, vehicles, vegetation, sky, "
               "poles, signs), as a Jensen-Shannon distance (0 = same mix)."),
    MetricInfo("retrieval_acc", "Retrieval accuracy", "Retr", True, 1.0, "[0, 1]", _HIGHER,
               "Share of your images that pick the target block out of a line-up of look-alike blocks."),
    MetricInfo("mrr", "MRR", "MRR", True, 1.0, "(0, 1]", _HIGHER,
               "Mean reciprocal rank of the target block in that line-up (1 = always first)."),
    MetricInfo("sim_target", "sim: target block", "same block", True, 1.0, "[-1, 1]", _HIGHER,
               "Mean similarity of your images to the target block's photos."),
    *(_negative(role) for role in NEGATIVE_LABELS),
    MetricInfo("local_margin", "Local margin", "LocMarg", True, None, "[-2, 2]",
               "higher is better; > 0 beats the same-city alternatives",
               "Similarity to the target minus the similarity to its closest same-city alternative."),
    MetricInfo("strongest_margin", "Strongest-negative margin", "StrMarg", True, None, "[-2, 2]",
               "higher is better; > 0 beats every alternative",
               "Similarity to the target minus the similarity to its most similar alternative block."),
)

#: Per-pair scores of the MFP command (``mfp.csv``; docs/benchmark.md section 10, Map Feature Perception (MFP)).
MFP_METRICS: tuple[MetricInfo, ...] = (
    MetricInfo("global_score", "MFP global score", "MFP G", True, 1.0, "(-inf, 1]", _HIGHER,
               "1 minus the mean squared difference of the DINO-ViT CLS tokens (1 = identical).", "mfp"),
    MetricInfo("spatial_distance", "MFP spatial distance", "MFP S dist", False, 0.0, "[0, inf)", _LOWER,
               "Frobenius distance between the key self-similarity matrices (0 = same layout).", "mfp"),
    MetricInfo("spatial_mse", "MFP spatial MSE", "MFP S mse", False, 0.0, "[0, 4]", _LOWER,
               "Mean squared difference of the key self-similarity matrices (0 = same layout).", "mfp"),
    MetricInfo("loss", "MFP loss", "MFP loss", False, 0.0, "[0, inf)", _LOWER,
               "10 * (1 - global score) + spatial MSE (0 = identical).", "mfp"),
    MetricInfo("ssim", "SSIM", "SSIM", True, 1.0, "[-1, 1]", _HIGHER,
               "Structural similarity of the pixels (Wang et al. 2004; 1 = identical).", "mfp"),
    MetricInfo("psnr", "PSNR (dB)", "PSNR", True, None, "[0, inf]", _HIGHER,
               "Peak signal-to-noise ratio of the pixels in dB (inf = identical).", "mfp"),
)

#: Per-group scores of the GeoDiv command (``geodiv_scores.csv``; docs/benchmark.md section 9, GeoDiv).
GEODIV_METRICS: tuple[MetricInfo, ...] = (
    MetricInfo("affluence_mean", "Affluence (mean rating)", "affl mean", None, None, "[1, 5]",
               "descriptive (1 = impoverished, 5 = luxurious)",
               "Mean SEVI affluence rating of the group's images.", "geodiv"),
    MetricInfo("affluence_diversity", "Affluence diversity", "affl div", True, 1.0, "[0, 1]", _HIGHER,
               "Normalized Hill diversity of the affluence ratings (1 = all levels equally often).", "geodiv"),
    MetricInfo("maintenance_mean", "Maintenance (mean rating)", "maint mean", None, None, "[1, 5]",
               "descriptive (1 = severely damaged, 5 = excellent)",
               "Mean SEVI maintenance rating of the group's images.", "geodiv"),
    MetricInfo("maintenance_diversity", "Maintenance diversity", "maint div", True, 1.0, "[0, 1]", _HIGHER,
               "Normalized Hill diversity of the maintenance ratings.", "geodiv"),
    MetricInfo("entity_diversity", "Entity diversity", "entity div", True, 1.0, "[0, 1]", _HIGHER,
               "Mean normalized Hill diversity of the answers to the entity (foreground) questions.", "geodiv"),
    MetricInfo("background_diversity", "Background diversity", "bg div", True, 1.0, "[0, 1]", _HIGHER,
               "Mean normalized Hill diversity of the answers to the background questions.", "geodiv"),
)

ALL_METRICS: tuple[MetricInfo, ...] = RESULT_METRICS + MFP_METRICS + GEODIV_METRICS
#: Every record by column.
METRICS: Mapping[str, MetricInfo] = {m.column: m for m in ALL_METRICS}
#: The metric columns of ``results.csv``, in order.
RESULT_METRIC_COLUMNS: tuple[str, ...] = tuple(m.column for m in RESULT_METRICS)
#: The similarity to the target and to each negative, in candidate order (paper Table 4).
SIMILARITY_COLUMNS: tuple[str, ...] = ("sim_target",) + tuple(f"sim_{role}" for role in NEGATIVE_LABELS)
#: Result metrics with a direction; the others (diversity gap, negatives) have none.
HIGHER_IS_BETTER: Mapping[str, bool] = {
    m.column: m.higher_is_better for m in RESULT_METRICS if m.higher_is_better is not None
}
#: The scores every leaderboard shows (the report's Table 10, the app, the printed table, the Hub view),
#: in the order the app and the printed table show them. A row *covers* a block when one of them is
#: finite there: every view's "blocks" count is the blocks its row covers (docs/benchmark.md section 7).
LEADERBOARD_METRIC_COLUMNS: tuple[str, ...] = ("cos_sim", "mmd", "dcsf", "gaas", "retrieval_acc", "mrr",
                                               "local_margin", "strongest_margin")
#: Every record's label by column.
LABELS: Mapping[str, str] = {m.column: m.label for m in ALL_METRICS}


def arrow(column: str) -> str:
    """``↑`` (higher is better), ``↓`` (lower is better) or ``""`` (no direction)."""
    hib = METRICS[column].higher_is_better
    return "" if hib is None else ("↑" if hib else "↓")


def heading(column: str) -> str:
    """The label with its direction arrow, e.g. ``MMD² ↓`` (the label alone without a direction)."""
    a = arrow(column)
    return f"{METRICS[column].label} {a}" if a else METRICS[column].label


def ascii_heading(column: str) -> str:
    """The short label with an ASCII direction (``^`` higher, ``_v`` lower), e.g. ``MMD_v``."""
    hib = METRICS[column].higher_is_better
    return METRICS[column].short + ("" if hib is None else "^" if hib else "_v")


__all__ = [
    "ALL_METRICS",
    "GEODIV_METRICS",
    "HIGHER_IS_BETTER",
    "LABELS",
    "LEADERBOARD_METRIC_COLUMNS",
    "METRICS",
    "MFP_METRICS",
    "MetricInfo",
    "NEGATIVE_LABELS",
    "RESULT_METRICS",
    "RESULT_METRIC_COLUMNS",
    "SIMILARITY_COLUMNS",
    "arrow",
    "ascii_heading",
    "heading",
]
