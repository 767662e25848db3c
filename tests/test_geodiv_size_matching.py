"""GeoDiv size matching (rarefaction), bootstrap intervals and one-image groups, checked against
brute force: every subset enumerated, and the docs/benchmark.md section 9 rules applied per subset
through :func:`score_question` (the scalar path), not the vectorized one under test."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from geofidelity_bench.geodiv import diversity_tables, question_bank_from_dict, score_question
from geofidelity_bench.geodiv.size_matching import answer_codes, score_draws

NOTA = "None of the above"

BANK = question_bank_from_dict({
    "name": "mini", "version": "0.1", "none_option": NOTA,
    "questions": [
        {"id": "aff", "kind": "sevi", "attribute": "affluence", "question": "Rich?",
         "options": ["Impoverished", "Low-income", "Middle-income", "Affluent", "Luxurious"]},
        {"id": "road", "kind": "entity", "question": "Road?", "options": ["Asphalt", "Gravel", "Cobble"]},
        {"id": "roof", "kind": "entity", "question": "Roof?", "options": ["Flat", "Gable", "Hip", "Dome"]},
        {"id": "sky", "kind": "background", "question": "Sky?", "options": ["Clear", "Cloudy", "Rain"]},
    ],
})
COLS = ["affluence_diversity", "entity_diversity", "background_diversity"]


def _answers(groups: dict[str, int], seed: int = 0) -> pd.DataFrame:
    """Random answers (options, none of the above, unparseable) for groups of the given sizes."""
    rng = np.random.default_rng(seed)
    rows = []
    for country, n in groups.items():
        for i in range(n):
            for q in BANK:
                r = rng.random()
                if r < 0.12:
                    status, choice = "unparseable", None
                elif r < 0.3 and q.none_option:
                    status, choice = "none", q.none_option
                else:
                    # a skewed distribution, so that size really matters
                    k = min(int(rng.exponential(1.2)), len(q.options) - 1)
                    status, choice = "ok", q.options[k]
                rows.append({"image": f"{country}{i}", "question_id": q.id, "status": status, "choice": choice,
                             "country": country})
    return pd.DataFrame(rows)


def _brute_group_scores(df: pd.DataFrame, images: list[str]) -> dict[str, float]:
    """The group's diversity columns on exactly these images, through score_question."""
    sub = df[df["image"].isin(images)]
    out, per_kind = {}, {"entity": [], "background": []}
    for q in BANK:
        rows = sub[sub["question_id"] == q.id]
        s = score_question(q, list(zip(rows["status"], rows["choice"])), len(images))
        if q.kind == "sevi":
            out[f"{q.attribute}_diversity"] = s.diversity
        elif s.status == "ok":
            per_kind[q.kind].append(s.diversity)
    for kind, vals in per_kind.items():
        out[f"{kind}_diversity"] = float(np.mean(vals)) if vals else math.nan
    return out


def _all_subsets(df: pd.DataFrame, country: str, m: int) -> dict[str, np.ndarray]:
    images = sorted(set(df.loc[df["country"] == country, "image"]))
    values = [_brute_group_scores(df, list(c)) for c in itertools.combinations(images, m)]
    return {c: np.array([v[c] for v in values]) for c in COLS}


def test_rarefaction_is_the_exact_expectation_over_all_subsets_when_they_are_few():
    answers = _answers({"AA": 4, "BB": 7}, seed=1)
    # C(7, 4) = 35 subsets <= 200 replicates: every subset is used, so the mean is exact
    tables = diversity_tables(answers, BANK, "country", replicates=200)
    assert tables.size_matching["n"] == 4 and tables.size_matching["n_source"].startswith("smallest")
    row = tables.per_group.set_index("country").loc["BB"]
    brute = _all_subsets(answers, "BB", 4)
    for col in COLS:
        finite = brute[col][np.isfinite(brute[col])]
        assert row[f"{col}_rarefied"] == pytest.approx(finite.mean(), abs=1e-12), col
        assert row[f"{col}_rarefied_lo"] == pytest.approx(np.percentile(finite, 2.5), abs=1e-12), col
        assert row[f"{col}_rarefied_hi"] == pytest.approx(np.percentile(finite, 97.5), abs=1e-12), col
    # the smallest group is its own only subset: size-matched = plain, a zero-width interval
    small = tables.per_group.set_index("country").loc["AA"]
    for col in COLS:
        assert small[f"{col}_rarefied"] == small[col] == small[f"{col}_rarefied_lo"] == small[f"{col}_rarefied_hi"]
    assert int(small["rarefy_n"]) == 4 and int(small["n_images"]) == 4


def test_sampled_rarefaction_estimates_the_exact_expectation():
    answers = _answers({"AA": 3, "BB": 16}, seed=2)
    tables = diversity_tables(answers, BANK, "country", replicates=3000, seed=7)  # C(16, 3) = 560 < 3000: exact
    sampled = diversity_tables(answers, BANK, "country", replicates=400, seed=7)  # 400 random subsets
    brute = _all_subsets(answers, "BB", 3)
    for col in COLS:
        finite = brute[col][np.isfinite(brute[col])]
        exact = finite.mean()
        assert tables.per_group.set_index("country").loc["BB", f"{col}_rarefied"] == pytest.approx(exact, abs=1e-12)
        got = sampled.per_group.set_index("country").loc["BB", f"{col}_rarefied"]
        assert abs(got - exact) < 4 * finite.std() / math.sqrt(400) + 1e-12, col
    # seeded: the same call gives the same numbers; another seed other draws
    again = diversity_tables(answers, BANK, "country", replicates=400, seed=7)
    pd.testing.assert_frame_equal(again.per_group, sampled.per_group)
    other = diversity_tables(answers, BANK, "country", replicates=400, seed=8)
    assert not other.per_group["entity_diversity_rarefied"].equals(sampled.per_group["entity_diversity_rarefied"])


def test_vectorized_scores_equal_score_question_draw_by_draw():
    answers = _answers({"AA": 12}, seed=3)
    images = sorted(set(answers["image"]))
    rng = np.random.default_rng(0)
    draws = np.concatenate([rng.integers(0, 12, size=(60, 12)),  # bootstrap-like, with repeats
                            np.argsort(rng.random((60, 12)), axis=1)[:, :5]], axis=None)
    for q in BANK:
        rows = answers[answers["question_id"] == q.id].set_index("image").loc[images]
        codes = answer_codes(q, list(rows["status"]), list(rows["choice"]))
        for shape, flat in ((12, draws[:720]), (5, draws[720:])):
            d, mean = score_draws(q, codes, flat.reshape(-1, shape))
            for k, draw in enumerate(flat.reshape(-1, shape)):
                s = score_question(q, [(rows["status"].iloc[i], rows["choice"].iloc[i]) for i in draw], shape)
                if s.status != "ok":
                    assert math.isnan(d[k])
                else:
                    assert d[k] == pytest.approx(s.diversity, abs=1e-12)
                    if q.kind == "sevi":
                        assert mean[k] == pytest.approx(s.mean_rating, abs=1e-12)


def test_bootstrap_interval_brackets_the_resamples_and_is_zero_width_for_a_uniform_answer():
    answers = _answers({"AA": 10, "BB": 5}, seed=4)
    same = answers["country"] == "BB"
    answers.loc[same, "status"] = "ok"
    answers.loc[same, "choice"] = answers.loc[same, "question_id"].map({q.id: q.options[0] for q in BANK})
    tables = diversity_tables(answers, BANK, "country", replicates=300)
    g = tables.per_group.set_index("country")
    for col in COLS:
        assert g.loc["BB", col] == 0.0 and g.loc["BB", f"{col}_lo"] == 0.0 and g.loc["BB", f"{col}_hi"] == 0.0
        assert g.loc["AA", f"{col}_lo"] <= g.loc["AA", f"{col}_hi"]
        assert 0.0 <= g.loc["AA", f"{col}_lo"] and g.loc["AA", f"{col}_hi"] <= 1.0
        assert g.loc["AA", f"{col}_hi"] > g.loc["AA", f"{col}_lo"]  # 10 varied images: a real interval


def test_one_image_group_is_na_with_its_reason_never_zero():
    answers = _answers({"AA": 1, "BB": 3, "CC": 6}, seed=5)
    tables = diversity_tables(answers, BANK, "country")
    g = tables.per_group.set_index("country")
    for col in COLS:
        for suffix in ("", "_lo", "_hi", "_rarefied", "_rarefied_lo", "_rarefied_hi"):
            assert math.isnan(g.loc["AA", col + suffix]), col + suffix
    assert g.loc["AA", "diversity_na_reason"] == "one image: a diversity needs at least 2 images"
    assert g.loc["BB", "diversity_na_reason"] == "" and g.loc["CC", "diversity_na_reason"] == ""
    # its mean rating is still a number when its one answer was parsed; its questions are not "dropped"
    aff = answers[(answers["country"] == "AA") & (answers["question_id"] == "aff")].iloc[0]
    if aff["status"] == "ok":
        assert g.loc["AA", "affluence_mean"] == BANK["aff"].rating_of(aff["choice"])
    statuses = tables.per_question.loc[tables.per_question["country"] == "AA", "status"]
    assert set(statuses) <= {"single_image", "low_coverage"} and "single_image" in set(statuses)
    assert (tables.dropped["country"] == "AA").sum() == (statuses == "low_coverage").sum()  # unanswered ones only
    # the common size ignores it; the warnings say both things
    assert tables.size_matching["n"] == 3
    assert any("differ in size (3 to 6 images)" in w and "_rarefied" in w for w in tables.warnings)
    assert any("1 of 3 group(s) have one image" in w for w in tables.warnings)
    record = tables.to_dict()
    aa = next(r for r in record["per_group"] if r["country"] == "AA")
    assert aa["entity_diversity"] is None and aa["diversity_na_reason"].startswith("one image")


def test_a_given_common_size_leaves_smaller_groups_without_a_size_matched_value():
    answers = _answers({"AA": 3, "BB": 8}, seed=6)
    tables = diversity_tables(answers, BANK, "country", rarefy_n=5, replicates=50)
    g = tables.per_group.set_index("country")
    assert tables.size_matching["n"] == 5 and tables.size_matching["n_source"] == "given"
    assert math.isnan(g.loc["AA", "entity_diversity_rarefied"]) and not math.isnan(g.loc["AA", "entity_diversity"])
    assert "fewer than 5 images" in g.loc["AA", "diversity_na_reason"]
    assert not math.isnan(g.loc["BB", "entity_diversity_rarefied"])
    assert any("1 group(s) have fewer than n=5" in w for w in tables.warnings)
    with pytest.raises(ValueError, match="at least 2|>= 2"):
        diversity_tables(answers, BANK, "country", rarefy_n=1)
    # groups of one size: nothing to warn about
    same = diversity_tables(_answers({"AA": 4, "BB": 4}), BANK, "country")
    assert same.warnings == []
