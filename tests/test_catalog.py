"""The metric catalog is the one source of names, order and direction of every score: each consumer
(evaluation's columns, stats' directions, the report's labels, the plain-text tables, the demo app's
texts, the metric Space's table) must agree with it, and it must cover every numeric score column
that evaluation, MFP and GeoDiv write."""

from __future__ import annotations

import doctest
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from geofidelity_bench.metrics import catalog
from geofidelity_bench.metrics.catalog import (
    GEODIV_METRICS,
    METRICS,
    MFP_METRICS,
    NEGATIVE_LABELS,
    RESULT_METRIC_COLUMNS,
    RESULT_METRICS,
    SIMILARITY_COLUMNS,
    heading,
)

#: The header of results.csv as the demo wrote it before the catalog existed (its order is part of
#: the file format and must never change).
RESULTS_CSV_HEADER = (
    "method,condition,block_id,city,country,stratum,n_generated,n_reference,n_distinct,n_copied,unpromptable,cos_sim,mmd,dcsf,"
    "diversity_gap,gaas,retrieval_acc,mrr,sim_target,sim_same_neighborhood,sim_same_city,sim_same_driving_side,"
    "sim_random_city,local_margin,strongest_margin,n_candidates,chance_retrieval_acc,chance_mrr,encoder"
)


def test_catalog_doctests_and_records_are_well_formed():
    result = doctest.testmod(catalog)
    assert result.attempted > 0 and result.failed == 0
    columns = [m.column for m in catalog.ALL_METRICS]
    assert len(columns) == len(set(columns))
    labels = [m.label for m in catalog.ALL_METRICS]
    assert len(labels) == len(set(labels)), "two scores share a label"
    for m in catalog.ALL_METRICS:
        assert m.short.isascii() and 0 < len(m.short) <= 11, m
        assert m.family in ("result", "mfp", "geodiv")
        assert m.meaning.endswith(".") and m.range[0] in "[(" and m.range[-1] in "])"
        if m.higher_is_better is not None:
            assert m.direction.startswith("higher is better" if m.higher_is_better else "lower is better"), m
        if m.ideal is not None and m.range[0] == "[" and m.range[-1] == "]":
            lo, hi = (float(x) for x in m.range[1:-1].split(","))
            assert lo <= m.ideal <= hi, m


def test_catalog_is_pure_python():
    code = ("import sys; import geofidelity_bench.metrics.catalog as c; "
            "assert c.RESULT_METRICS; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    # The results-folder module is imported by the CLI at start-up: no pandas there either.
    code = "import sys; import geofidelity_bench.results; print('pandas' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def test_evaluation_columns_come_from_the_catalog_in_the_file_order():
    from geofidelity_bench.evaluation import METRIC_COLUMNS, RESULT_COLUMNS

    assert ",".join(RESULT_COLUMNS) == RESULTS_CSV_HEADER
    assert list(METRIC_COLUMNS) == list(RESULT_METRIC_COLUMNS)
    assert all(m.family == "result" for m in RESULT_METRICS)


def test_catalog_covers_every_numeric_result_column(demo_results):
    numeric = [c for c in demo_results.columns if pd.api.types.is_numeric_dtype(demo_results[c])]
    assert set(numeric) - {"n_generated", "n_reference", "n_distinct", "n_copied", "unpromptable", "n_candidates",
                           "chance_retrieval_acc", "chance_mrr"} == set(RESULT_METRIC_COLUMNS)


@pytest.fixture(scope="module")
def demo_results():
    """Result rows of the demo benchmark's blocks, scored from random embeddings (no encoder)."""
    from geofidelity_bench.benchmark import load_benchmark
    from geofidelity_bench.evaluation import score_embeddings

    bench = load_benchmark("demo")
    rng = np.random.default_rng(0)
    galleries = {b.block_id: rng.normal(size=(4, 8)) for b in bench.blocks}
    panels = {("m", "L1", b.block_id): rng.normal(size=(4, 8)) for b in bench.blocks}
    return score_embeddings(bench.blocks, galleries, panels, encoder_name="enc")


def test_stats_directions_come_from_the_catalog():
    from geofidelity_bench import stats

    assert dict(stats.HIGHER_IS_BETTER) == {m.column: m.higher_is_better for m in RESULT_METRICS
                                            if m.higher_is_better is not None}
    assert stats.LOWER_IS_BETTER == {"mmd", "dcsf", "gaas"}  # docs/benchmark.md section 7, Statistics and analyses
    assert not {"diversity_gap", *SIMILARITY_COLUMNS[1:]} & set(stats.HIGHER_IS_BETTER)


def test_negatives_have_one_label_each():
    from geofidelity_bench.benchmark import NEGATIVE_ROLES
    from geofidelity_bench.metrics.retrieval import CANDIDATE_NAMES

    assert tuple(NEGATIVE_LABELS) == NEGATIVE_ROLES == CANDIDATE_NAMES[1:]
    assert dict(NEGATIVE_LABELS) == {"same_neighborhood": "same neighborhood", "same_city": "same city",
                                     "same_driving_side": "same driving side", "random_city": "random city"}
    assert SIMILARITY_COLUMNS == tuple(f"sim_{c}" for c in CANDIDATE_NAMES)
    for role, label in NEGATIVE_LABELS.items():
        assert METRICS[f"sim_{role}"].label == f"sim: {label}"


def test_report_labels_come_from_the_catalog():
    from geofidelity_bench.report import METRIC_LABELS
    from geofidelity_bench.report.context import HIERARCHY_COLUMNS

    assert METRIC_LABELS == {m.column: m.label for m in RESULT_METRICS}
    assert HIERARCHY_COLUMNS == SIMILARITY_COLUMNS
    assert METRIC_LABELS["mmd"] == "MMD²" and METRIC_LABELS["sim_same_neighborhood"] == "sim: same neighborhood"


def test_plain_text_tables_use_the_short_labels():
    from geofidelity_bench.results import HIERARCHY_COLUMNS, LEADERBOARD_COLUMNS

    # The headers the CLI has always printed.
    assert [h for _, h in LEADERBOARD_COLUMNS] == ["CosSim^", "MMD_v", "DCSF_v", "GAAS_v", "Retr^", "MRR^",
                                                   "LocMarg^", "StrMarg^"]
    assert [h for _, h in HIERARCHY_COLUMNS] == ["same block", "same nbhd", "same city", "same side", "random city"]
    assert [c for c, _ in HIERARCHY_COLUMNS] == list(SIMILARITY_COLUMNS)


def test_app_texts_come_from_the_catalog():
    from geofidelity_bench.demo_app import figures, texts
    from geofidelity_bench.demo_app import results as lb

    assert [s.key for s in texts.SCORES] == list(RESULT_METRIC_COLUMNS)
    assert all(texts.SCORE_BY_KEY[m.column] is m for m in RESULT_METRICS)
    assert figures.ROLE_LABELS == dict(NEGATIVE_LABELS)
    assert figures.SIM_COLUMNS == SIMILARITY_COLUMNS
    assert all(h == heading(c) for c, h in lb.LEADERBOARD_METRICS)
    assert dict(lb.LEADERBOARD_METRICS)["mmd"] == "MMD² ↓"
    about = texts.about_markdown()
    for m in RESULT_METRICS:
        if m.column not in SIMILARITY_COLUMNS[1:]:
            assert f"| {m.label} | {m.range.replace(' ', '&nbsp;')} | {m.direction} | {m.meaning} |" in about


def test_metric_space_table_comes_from_the_catalog():
    import importlib.util
    from pathlib import Path

    pytest.importorskip("gradio")
    path = Path(__file__).resolve().parents[1] / "metric_card" / "geofidelity" / "app.py"
    spec = importlib.util.spec_from_file_location("geofidelity_space_app_catalog", path)
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    assert app.SHOWN == tuple((m.column, m.label, m.direction) for m in RESULT_METRICS)


def test_catalog_covers_the_mfp_columns():
    from geofidelity_bench.metrics import mfp

    assert [m.column for m in MFP_METRICS] == list(mfp.TERM_COLUMNS + mfp.PIXEL_COLUMNS)


def test_catalog_covers_the_geodiv_score_columns():
    from geofidelity_bench.geodiv.diversity import diversity_tables
    from geofidelity_bench.geodiv.questions import load_question_bank

    bank = load_question_bank()
    rows = [{"image": f"i{i}", "question_id": q.id, "status": "ok", "choice": q.options[0], "country": "DE"}
            for i in range(3) for q in bank]
    tables = diversity_tables(pd.DataFrame(rows), bank, group_by="country")
    per_group = tables.per_group
    scores = [c for c in per_group.columns if c.endswith(("_mean", "_diversity"))]  # what `geodiv` reports
    assert sorted(scores) == sorted(m.column for m in GEODIV_METRICS)
