"""GeoDiv intervals, the common size of the size-matched columns, and the diversity plot
(docs/benchmark.md section 9, GeoDiv; issue 39, case 16).

The bootstrap interval of a plain score is checked against scipy.stats.bootstrap run on the
scalar scoring path (:func:`score_question`, not the vectorized one under test), and every
estimate against its own intervals on many random inputs; the plot is checked on the rendered
figure's geometry.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sstats

from geofidelity_bench.geodiv import diversity_tables, load_question_bank, question_bank_from_dict, score_question

NOTA = "None of the above"

MINI = question_bank_from_dict({
    "name": "mini", "version": "0.1", "none_option": NOTA,
    "questions": [
        {"id": "aff", "kind": "sevi", "attribute": "affluence", "question": "Rich?",
         "options": ["Impoverished", "Low-income", "Middle-income", "Affluent", "Luxurious"]},
        {"id": "road", "kind": "entity", "question": "Road?", "options": ["Asphalt", "Gravel", "Cobble"]},
        {"id": "roof", "kind": "entity", "question": "Roof?", "options": ["Flat", "Gable", "Hip", "Dome"]},
        {"id": "wall", "kind": "entity", "question": "Wall?", "options": ["Brick", "Stone", "Wood", "Glass", "Plaster"]},
        {"id": "sky", "kind": "background", "question": "Sky?", "options": ["Clear", "Cloudy", "Rain"]},
        {"id": "land", "kind": "background", "question": "Land?", "options": ["Homes", "Shops", "Mixed", "Parks"]},
    ],
})
STREET = load_question_bank()


def _columns(bank) -> list[str]:
    return ([f"{q.attribute}_diversity" for q in bank if q.kind == "sevi"]
            + ["entity_diversity", "background_diversity"])


def _answers(bank, groups: dict[str, int], rng: np.random.Generator, *, spread: float = 1.0,
             p_none: float = 0.0, p_unparseable: float = 0.0) -> pd.DataFrame:
    """Answers drawn per (group, question) from a Dirichlet(spread) distribution over the options:
    spread 100 is close to uniform, 0.2 concentrates on one or two options."""
    rows = []
    for country, n in groups.items():
        probs = {q.id: rng.dirichlet(np.full(q.n_options, spread)) for q in bank}
        for i in range(n):
            for q in bank:
                r = rng.random()
                if r < p_unparseable:
                    status, choice = "unparseable", None
                elif r < p_unparseable + p_none and q.none_option:
                    status, choice = "none", q.none_option
                else:
                    status, choice = "ok", q.options[rng.choice(q.n_options, p=probs[q.id])]
                rows.append({"image": f"{country}{i}", "question_id": q.id, "status": status, "choice": choice,
                             "country": country})
    return pd.DataFrame(rows)


def _replies(group: pd.DataFrame) -> dict[str, dict[str, tuple]]:
    """question id -> image -> (status, choice) of one group's answers."""
    return {qid: dict(zip(sub["image"], zip(sub["status"], sub["choice"])))
            for qid, sub in group.groupby("question_id", sort=False)}


def _scalar_columns(bank, replies: dict[str, dict[str, tuple]], images: list[str]) -> dict[str, float]:
    """Every diversity column of a group made of ``images`` (repeats allowed), through score_question."""
    out, per_kind = {}, {"entity": [], "background": []}
    for q in bank:
        s = score_question(q, [replies[q.id][name] for name in images], len(images))
        if q.kind == "sevi":
            out[f"{q.attribute}_diversity"] = s.diversity
        elif s.status == "ok":
            per_kind[q.kind].append(s.diversity)
    for kind, values in per_kind.items():
        out[f"{kind}_diversity"] = float(np.mean(values)) if values else math.nan
    return out


def _scipy_bootstrap(statistic, n: int, generator: np.random.Generator, **options):
    """scipy.stats.bootstrap over image indices 0..n-1 with ``generator`` (``rng`` from scipy 1.15,
    ``random_state`` before)."""
    import inspect

    key = "rng" if "rng" in inspect.signature(sstats.bootstrap).parameters else "random_state"
    return sstats.bootstrap((np.arange(n),), statistic, vectorized=False, method="percentile",
                            **{key: generator}, **options)


def _most_possible(bank, column: str, n: int) -> float:
    """The largest value a column can take on n images: (min(n, |A|) - 1) / (|A| - 1), the largest over a kind."""
    kind = column[: -len("_diversity")]
    qs = [q for q in bank if (q.kind == kind if kind in ("entity", "background") else q.attribute == kind)]
    return max((min(n, q.n_options) - 1) / (q.n_options - 1) for q in qs)


def test_the_reported_bug_a_plain_percentile_interval_misses_its_estimate():
    """The cause, shown independently: scipy's percentile bootstrap of the entity diversity of 9 and 29
    images with varied answers lies wholly below the plain estimate (resamples repeat images, and repeats
    lower D), so a plain percentile interval cannot be the fix; the tables' interval holds the estimate."""
    rng = np.random.default_rng(0)
    answers = _answers(STREET, {"IT": 9, "SE": 29}, rng, spread=100.0)
    tables = diversity_tables(answers, STREET, "country", replicates=200, seed=0, interval=0.95)
    g = tables.per_group.set_index("country")
    for country in ("IT", "SE"):
        group = _replies(answers[answers["country"] == country])
        names = list(dict.fromkeys(answers.loc[answers["country"] == country, "image"]))
        estimate = _scalar_columns(STREET, group, names)["entity_diversity"]
        res = _scipy_bootstrap(lambda idx: _scalar_columns(STREET, group, [names[int(i)] for i in idx])["entity_diversity"],
                               len(names), np.random.default_rng(1), n_resamples=200, confidence_level=0.95)
        assert res.confidence_interval.high < estimate, (country, estimate, res.confidence_interval)
        assert g.loc[country, "entity_diversity"] == pytest.approx(estimate, abs=1e-12)
        assert g.loc[country, "entity_diversity_lo"] <= estimate <= g.loc[country, "entity_diversity_hi"]


@pytest.mark.parametrize("confidence, replicates, seed", [(0.95, 200, 0), (0.8, 150, 11)])
def test_bootstrap_interval_equals_scipy_bootstrap_on_the_scalar_path(confidence, replicates, seed):
    """scipy.stats.bootstrap draws its resamples as ``rng.integers(0, n, (R, n))``, the documented draws
    (``default_rng([seed, crc32(group key), 0])``); on the scalar scorer its bootstrap distribution gives
    the interval of docs section 9: D - (median - q_lo), D + (q_hi - median), clipped to [0, D_max(n)]."""
    rng = np.random.default_rng(100 + seed)
    answers = _answers(MINI, {"AA": 7, "BB": 13}, rng, spread=1.5, p_none=0.15, p_unparseable=0.08)
    tables = diversity_tables(answers, MINI, "country", replicates=replicates, seed=seed, interval=confidence)
    assert tables.size_matching["replicates"] == replicates and tables.size_matching["interval"] == confidence
    g = tables.per_group.set_index("country")
    tail = 100 * (1 - confidence) / 2
    for country in ("AA", "BB"):
        group = _replies(answers[answers["country"] == country])
        names = list(dict.fromkeys(answers.loc[answers["country"] == country, "image"]))
        plain = _scalar_columns(MINI, group, names)
        for col in _columns(MINI):
            res = _scipy_bootstrap(lambda idx: _scalar_columns(MINI, group, [names[int(i)] for i in idx])[col],
                                   len(names), np.random.default_rng([seed, zlib.crc32(country.encode("utf-8")), 0]),
                                   n_resamples=replicates, confidence_level=confidence)
            dist = np.asarray(res.bootstrap_distribution, dtype=float)
            dist = dist[np.isfinite(dist)]
            q_lo, med, q_hi = np.percentile(dist, [tail, 50, 100 - tail])
            d = plain[col]
            expected = (max(0.0, d - (med - q_lo)), min(_most_possible(MINI, col, len(names)), d + (q_hi - med)))
            where = f"{country} {col} (confidence {confidence}, {replicates} resamples, seed {seed})"
            assert g.loc[country, col] == pytest.approx(d, abs=1e-12), where
            assert g.loc[country, f"{col}_lo"] == pytest.approx(expected[0], abs=1e-12), where
            assert g.loc[country, f"{col}_hi"] == pytest.approx(expected[1], abs=1e-12), where


def test_every_estimate_lies_inside_its_intervals_on_random_inputs():
    """Random banks, group sizes, answer spreads, none/unparseable rates, confidences, resample counts,
    seeds and common sizes: every plain and size-matched estimate lies inside its own interval, the
    intervals inside [0, 1], and a plain interval never above what the score can be on its n images."""
    rng = np.random.default_rng(2024)
    checked = 0
    for trial in range(40):
        bank = STREET if trial % 3 == 0 else MINI
        n_groups = int(rng.integers(1, 5))
        groups = {f"G{k}": int(rng.choice([2, 3, 4, 5, 6, 9, 12, 20, 29, 40])) for k in range(n_groups)}
        spread = float(rng.choice([0.2, 1.0, 5.0, 100.0]))
        params = dict(replicates=int(rng.choice([20, 60, 200])), seed=int(rng.integers(0, 1000)),
                      interval=float(rng.choice([0.5, 0.8, 0.9, 0.95, 0.99])),
                      rarefy_n=None if rng.random() < 0.6 else int(rng.integers(2, 6)))
        answers = _answers(bank, groups, rng, spread=spread, p_none=float(rng.choice([0, 0.1, 0.4])),
                           p_unparseable=float(rng.choice([0, 0.05, 0.3])))
        tables = diversity_tables(answers, bank, "country", **params)
        for _, row in tables.per_group.iterrows():
            for col in _columns(bank):
                where = f"trial {trial} {bank.label} {row['country']} n={row['n_images']} {col} {params} spread {spread}"
                for est, lo, hi in ((col, f"{col}_lo", f"{col}_hi"),
                                    (f"{col}_rarefied", f"{col}_rarefied_lo", f"{col}_rarefied_hi")):
                    if math.isnan(row[est]):
                        continue
                    if math.isnan(row[lo]):
                        assert math.isnan(row[hi]), where
                        continue
                    assert 0.0 <= row[lo] <= row[est] <= row[hi] <= 1.0, (where, row[lo], row[est], row[hi])
                    checked += 1
                if not math.isnan(row[f"{col}_hi"]):
                    assert row[f"{col}_hi"] <= _most_possible(bank, col, int(row["n_images"])) + 1e-12, where
    assert checked > 500


def test_the_default_common_size_is_the_smallest_group_with_as_many_images_as_the_fewest_options():
    """Groups of 2 images: on them a question's D is either 0 or 1/(|A|-1) (0.25 for 5 options), so a size
    match at 2 reads nearly every group the same. The default m is the smallest group of at least |A|min
    images; smaller groups get no size-matched value and say why."""
    least = min(q.n_options for q in STREET)  # 4 in geodiv-street@1.0.0
    sizes = {"AA": 2, "BB": 2, "CC": 3, "DD": 5, "EE": 9, "FF": 1}
    expected_m = min(n for n in sizes.values() if n >= least)
    rng = np.random.default_rng(5)
    tables = diversity_tables(_answers(STREET, sizes, rng, spread=2.0), STREET, "country")
    sm = tables.size_matching
    assert sm["n"] == expected_m == 5 and sm["min_options"] == least
    assert sm["n_source"] == f"smallest group of >= {least} images ({least}: the fewest options of any question)"
    g = tables.per_group.set_index("country")
    for country in ("AA", "BB", "CC"):
        assert g.loc[country, ["entity_diversity_rarefied", "affluence_diversity_rarefied"]].isna().all()
        assert not math.isnan(g.loc[country, "entity_diversity"])
        assert f"no size-matched value: fewer than {expected_m} images" in g.loc[country, "diversity_na_reason"]
    assert g.loc[["DD", "EE"], "entity_diversity_rarefied"].notna().all()
    assert not any("hardly tell" in w for w in tables.warnings)
    # the mini bank's fewest options is 3: groups of 3 are enough there
    mini = diversity_tables(_answers(MINI, {"AA": 2, "BB": 3, "CC": 7}, rng), MINI, "country")
    assert mini.size_matching["n"] == 3 and mini.size_matching["min_options"] == 3


def test_a_common_size_below_the_fewest_options_says_plainly_it_cannot_tell_groups_apart(tmp_path):
    from geofidelity_bench.cli.geodiv import groups_text
    from geofidelity_bench.geodiv.plots import diversity_figure

    rng = np.random.default_rng(6)
    tables = diversity_tables(_answers(STREET, {"AA": 2, "BB": 3, "CC": 2}, rng, spread=100.0), STREET, "country")
    sm = tables.size_matching
    assert sm["n"] == 2 and sm["n_source"].startswith("smallest group of >= 2 images, as no group has 4")
    said = [w for w in tables.warnings if "hardly tell groups apart" in w]
    assert len(said) == 1 and "either 0 or" in said[0] and "n=2" in said[0]
    text = groups_text(tables)
    assert "n=2 is below 4, the fewest options of any question: these can hardly tell groups apart" in text
    assert "compare groups by these" not in text
    fig = diversity_figure(tables)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("can hardly tell groups apart" in t for t in legend), legend
    # the same when the user asks for it
    given = diversity_tables(_answers(STREET, {"AA": 6, "BB": 9}, rng), STREET, "country", rarefy_n=2)
    assert given.size_matching["n_source"] == "given" and any("hardly tell groups apart" in w for w in given.warnings)
    # and nothing of the kind at a common size that can
    fine = diversity_tables(_answers(STREET, {"AA": 6, "BB": 9}, rng), STREET, "country")
    assert fine.size_matching["n"] == 6 and not any("hardly tell" in w for w in fine.warnings)
    assert "compare groups by these" in groups_text(fine)


def test_printed_tables_name_the_interval_parameters():
    from geofidelity_bench.cli.geodiv import groups_text

    rng = np.random.default_rng(7)
    tables = diversity_tables(_answers(MINI, {"AA": 4, "BB": 8}, rng), MINI, "country", replicates=123, seed=9,
                              interval=0.8)
    text = groups_text(tables)
    assert "[80% bootstrap interval over images: 123 draws, seed 9" in text
    assert "every group subsampled to n=4 images" in text and "higher = more diverse" in text


def test_printed_values_lie_inside_their_printed_intervals():
    """What the command prints: every "value [lo, hi]" cell reads lo <= value <= hi (the intervals were
    printed at 2 decimals beside values at 3: "0.222 [0.00, 0.22]")."""
    import re

    from geofidelity_bench.cli.geodiv import groups_text

    rng = np.random.default_rng(8)
    cells = 0
    for trial in range(12):
        bank = STREET if trial % 2 else MINI
        sizes = {f"G{k}": int(rng.choice([2, 3, 4, 6, 9, 29])) for k in range(4)}
        answers = _answers(bank, sizes, rng, spread=float(rng.choice([0.3, 3.0, 100.0])), p_none=0.1)
        text = groups_text(diversity_tables(answers, bank, "country", replicates=50, seed=trial))
        for value, lo, hi in re.findall(r"(\d\.\d+) \[(\d\.\d+), (\d\.\d+)\]", text):
            assert float(lo) <= float(value) <= float(hi), (trial, value, lo, hi)
            cells += 1
    assert cells > 100


# -- the plot ----------------------------------------------------------------------------------------------


def _plot_tables():
    """Many varied images in one group (upper whiskers reach 0.9 to 1), a few in others, a one-image group."""
    rng = np.random.default_rng(0)
    answers = _answers(STREET, {"DE": 3, "IT": 9, "SE": 29, "FR": 2, "AU": 1}, rng, spread=100.0)
    return diversity_tables(answers, STREET, "country")


def _cap_and_whisker_boxes(ax, renderer):
    """Display-space boxes of every whisker cap (its marker: markersize tall, markeredgewidth wide) and
    every whisker line of the errorbars drawn on ``ax``."""
    from matplotlib.container import ErrorbarContainer
    from matplotlib.transforms import Bbox

    px = ax.figure.dpi / 72.0
    caps, whiskers = [], []
    for container in ax.containers:
        if not isinstance(container, ErrorbarContainer):
            continue
        _, caplines, barlinecols = container.lines
        for line in caplines:
            half_h = line.get_markersize() / 2 * px
            half_w = max(line.get_markeredgewidth(), 1.0) / 2 * px
            xy = ax.transData.transform(np.column_stack([line.get_xdata(), line.get_ydata()]))
            caps += [Bbox([[x - half_w, y - half_h], [x + half_w, y + half_h]]) for x, y in xy]
        for collection in barlinecols:
            half_lw = max(collection.get_linewidth()) / 2 * px
            for seg in collection.get_segments():
                (x0, y0), (x1, y1) = ax.transData.transform(seg)
                whiskers.append(Bbox([[min(x0, x1), min(y0, y1) - half_lw], [max(x0, x1), max(y0, y1) + half_lw]]))
    return caps, whiskers


def test_value_labels_stay_clear_of_the_whisker_caps_and_inside_their_panel(tmp_path):
    from geofidelity_bench.geodiv.plots import diversity_figure, plot_diversity_bars

    tables = _plot_tables()
    hi = tables.per_group[[c for c in tables.per_group.columns if c.endswith("_diversity_hi")]].to_numpy(float)
    assert np.nanmax(hi) >= 0.9  # whiskers that end near D = 1, where labels used to land on them
    fig = diversity_figure(tables)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    n_caps = n_labels = 0
    for ax in fig.axes:
        caps, whiskers = _cap_and_whisker_boxes(ax, renderer)
        panel = ax.get_window_extent(renderer)
        for text in ax.texts:
            box = text.get_window_extent(renderer)
            n_labels += 1
            for cap in caps:
                assert not box.overlaps(cap), (ax.get_title(), text.get_text(), box.bounds, cap.bounds)
            for whisker in whiskers:
                assert not box.overlaps(whisker), (ax.get_title(), text.get_text(), box.bounds, whisker.bounds)
            assert panel.x0 <= box.x0 and box.x1 <= panel.x1, (ax.get_title(), text.get_text())
        n_caps += len(caps)
    assert n_caps > 0 and n_labels > 0
    path = plot_diversity_bars(tables, tmp_path / "geodiv_diversity.png")
    assert path and (tmp_path / "geodiv_diversity.png").read_bytes()[:4] == b"\x89PNG"


def test_the_plot_says_that_higher_means_more_diverse():
    from geofidelity_bench.geodiv.plots import diversity_figure

    fig = diversity_figure(_plot_tables())
    fig.canvas.draw()
    for ax in fig.axes:
        assert "higher = more diverse" in ax.get_xlabel(), ax.get_title()
        lo, hi = ax.get_xlim()
        assert lo == 0 and hi > 1  # room past D = 1 for the labels
        assert [float(t) for t in ax.get_xticks()] == [0, 0.25, 0.5, 0.75, 1.0]
    assert "higher = more diverse" in fig._suptitle.get_text()
