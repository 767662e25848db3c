"""The paper's tables and plots from evaluation results (paper Tables 4-10).

Input: result rows (docs/benchmark.md section 7, Statistics and analyses), from one or more results folders written by
``geofidelity-bench evaluate`` / ``demo`` (``results.csv``, ``run.json`` and, optionally,
``clip_alignment.csv`` from :func:`geofidelity_bench.clip_alignment.run_clip_alignment`).

Output folder::

    report.md            every table (Markdown), parameters, and one line per skipped table
    report.json          the same tables as records, every parameter (seeds, resamples,
                         confidence, pairing keys, encoders, inputs) and every skip reason
    tables/<name>.csv    one CSV per table that was produced
    plots/<name>.png     leaderboard.png, cos_sim_by_condition.png, hierarchy.png, city_heatmap.png

Tables (``name``: content):

- ``hierarchy`` (Table 4): mean ``sim_*`` of held-out real queries and of each generator under
  L1 (and their mean) to the target and to each negative type.
- ``cos_sim_by_condition`` (Table 5): mean CosSim per generator and condition.
- ``prompt_deltas`` (Table 6): L1-L0, L2-L1, L2-L0, GPS_ONLY-L0 on every metric: matched
  (method, block) delta with a paired bootstrap interval, positives, Wilcoxon p, and the
  city-balanced delta with cities positive. ``leave_one_city_out``: L1-L0 CosSim without
  each city.
- ``controls`` (Table 7): L1 versus each control; benefits sign-flipped for lower-is-better
  metrics so that positive means "the correct names help".
- ``clip_associations``, ``clip_name_sensitivity``, ``clip_no_retrieval`` (Tables 8-9):
  only when CLIP scores are available.
- ``leaderboard`` (Table 10): generators under L1, their mean, the real-image anchors (and
  demo sanity methods) on CosSim, DCSF, MMD, GAAS, retrieval, MRR and both margins, with
  bootstrap intervals over blocks. ``rank_stability``: city-balanced city-bootstrap ranks under L1.
- ``city_by_method``: mean CosSim per city and method (L1 generators and held-out real).

A table whose inputs are missing is skipped with a one-line reason (``skipped: no L0 rows``),
never filled with placeholders. A metric that is NaN throughout (e.g. GAAS without a
segmenter) is shown as ``n/a`` with the reason found in ``run.json`` where there is one.

Averages: a generator's score is the mean over its blocks; "generator mean" rows are the mean
over blocks of the per-block average across generators (equal to the mean of the generator
means when all generators cover the same blocks). When several folders score the same
(method, condition, block) (e.g. L1 in both a prompt run and a control run), summaries
average the duplicates and paired comparisons pair within a run (``run`` joins the pairing
keys), as in the paper's control analysis.
"""

from __future__ import annotations

from .context import (
    CONTROL_LABELS,
    METHOD_LABELS,
    METRIC_LABELS,
    PROMPT_COMPARISONS,
    ReportError,
)
from .render import build_report, report_from_dirs
from .tables import Table

__all__ = [
    "CONTROL_LABELS",
    "METHOD_LABELS",
    "METRIC_LABELS",
    "PROMPT_COMPARISONS",
    "ReportError",
    "Table",
    "build_report",
    "report_from_dirs",
]
