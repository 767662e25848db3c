"""GeoDiv pieces without a model: the Hill score, the docs/benchmark.md section 9, GeoDiv rules, the parser, the bank, the cache."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from geofidelity_bench.geodiv import (
    AnswerCache,
    QuestionBankError,
    diversity_tables,
    load_question_bank,
    parse_answer,
    question_bank_from_dict,
    score_question,
)
from geofidelity_bench.geodiv.questions import Question
from geofidelity_bench.metrics import normalized_hill

NOTA = "None of the above"


def _hill_reference(counts, n_options):
    """Independent: the effective number of answers from the probabilities, then the normalization."""
    c = np.array([x for x in counts if x > 0], dtype=float)
    p = c / c.sum()
    return (np.exp(-np.sum(p * np.log(p))) - 1) / (n_options - 1)


# -- normalized_hill ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 11])
def test_uniform_over_all_options_is_one(n):
    assert normalized_hill([7] * n, n) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("counts,n", [([9], 5), ([0, 4, 0], 3), ({"brick": 3}, 8)])
def test_one_hot_is_zero(counts, n):
    assert normalized_hill(counts, n) == 0.0


def test_unused_options_count_in_the_denominator():
    # The same two-way even split is fully diverse over 2 options, one third over 4, one fifth over 6.
    assert normalized_hill([5, 5], 2) == pytest.approx(1.0)
    assert normalized_hill([5, 5], 4) == pytest.approx(1 / 3)
    assert normalized_hill([5, 5, 0, 0, 0, 0], 6) == pytest.approx(1 / 5)
    assert normalized_hill({"a": 5, "b": 5}, 4) == normalized_hill([5, 5, 0, 0], 4)


def test_hand_computed_two_of_four():
    # p = (3/4, 1/4) over |A| = 4: H = -(3/4 ln 3/4 + 1/4 ln 1/4) = ln 4 - (3/4) ln 3 = 0.562335...
    # exp(H) = 4 / 3^(3/4) = 1.754765..., D = 0.754765 / 3 = 0.251588...
    expected = (4 / 3 ** 0.75 - 1) / 3
    assert expected == pytest.approx(0.2515884, abs=1e-7)
    assert normalized_hill([3, 1, 0, 0], 4) == pytest.approx(expected, abs=1e-12)
    assert normalized_hill([0.75, 0.25], 4) == pytest.approx(expected, abs=1e-12)  # proportions work too


def test_random_distributions_match_an_independent_formula():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(2, 12))
        counts = rng.integers(0, 6, size=int(rng.integers(1, n + 1)))
        if counts.sum() == 0:
            counts[0] = 1
        d = normalized_hill(counts, n)
        assert 0.0 <= d <= 1.0
        assert d == pytest.approx(_hill_reference(counts, n), abs=1e-12)


@pytest.mark.parametrize(
    "counts,n,match",
    [
        ([1, 2], 1, "n_options must be >= 2"),
        ([1, 2], 2.5, "n_options must be an integer"),
        ([1, 2], True, "n_options must be an integer"),
        ([1, -1], 3, "non-negative"),
        ([1, 2, 3], 2, "has 3 entries but the option set has only n_options=2"),
        ([0, 0, 0], 3, "all zero"),
        ([], 3, "all zero"),
        ([1, float("nan")], 3, "NaN"),
        ([[1, 2]], 3, "1-D"),
        (["a"], 3, "could not be read"),
    ],
)
def test_invalid_inputs_raise(counts, n, match):
    with pytest.raises(ValueError, match=match):
        normalized_hill(counts, n)


# -- per-question rules (docs/benchmark.md section 9, GeoDiv) ------------------------------------------------------------------


def _q(n_options=4, kind="entity"):
    opts = tuple(f"opt{i}" for i in range(n_options))
    if kind == "sevi":
        return Question("q", "sevi", "affluence", "?", opts, None, (1, 2, 3, 4, 5))
    return Question("q", kind, "x", "?", opts, NOTA)


def _answers(*groups):
    """("ok", "opt0") x n ... from (status, choice, n) triples."""
    out = []
    for status, choice, n in groups:
        out += [(status, choice)] * n
    return out


def test_none_of_the_above_at_exactly_30_percent_is_dropped():
    q = _q(4)
    s = score_question(q, _answers(("ok", "opt0", 4), ("ok", "opt1", 3), ("none", NOTA, 3)))
    assert s.n_none == 3 and s.n_answered == 10 and not s.none_counted
    assert s.n_options == 4 and s.n_counted == 7 and NOTA not in s.counts
    assert s.diversity == pytest.approx(_hill_reference([4, 3], 4))


def test_none_of_the_above_just_above_30_percent_counts_as_an_option():
    q = _q(4)
    # 4 of 13 parsed answers = 30.8% > 30%
    s = score_question(q, _answers(("ok", "opt0", 5), ("ok", "opt1", 4), ("none", NOTA, 4)))
    assert s.none_counted and s.n_options == 5 and s.n_counted == 13
    assert s.counts == {"opt0": 5, "opt1": 4, "opt2": 0, "opt3": 0, NOTA: 4}
    assert s.diversity == pytest.approx(_hill_reference([5, 4, 4], 5))


def test_the_none_share_is_taken_over_parsed_answers_only():
    q = _q(4)
    # 3 none of 9 parsed (33%) counts, although it is 3 of 12 replies (25%) with the unparseable ones.
    s = score_question(q, _answers(("ok", "opt0", 6), ("none", NOTA, 3), ("unparseable", None, 3)))
    assert s.none_counted and s.n_unparseable == 3 and s.n_counted == 9


def test_unparseable_answers_are_dropped_and_counted():
    q = _q(3)
    s = score_question(q, _answers(("ok", "opt0", 3), ("ok", "opt1", 3), ("unparseable", None, 2)))
    assert s.n_unparseable == 2 and s.n_counted == 6 and s.status == "ok"
    assert s.diversity == pytest.approx(_hill_reference([3, 3], 3))


def test_under_answered_questions_are_dropped_exactly_half_is_kept():
    q = _q(4)
    half = score_question(q, _answers(("ok", "opt0", 2), ("ok", "opt1", 3), ("unparseable", None, 5)))
    assert half.status == "ok" and half.coverage == 0.5
    below = score_question(q, _answers(("ok", "opt0", 2), ("ok", "opt1", 2), ("unparseable", None, 6)))
    assert below.status == "low_coverage" and below.dropped and math.isnan(below.diversity)
    # Dropped none-of-the-above answers do not cover an image either; images never asked do not.
    nota = score_question(q, _answers(("ok", "opt0", 4), ("none", NOTA, 1)), n_images=10)
    assert nota.n_counted == 4 and nota.status == "low_coverage"


def test_sevi_mean_rating_and_rating_diversity():
    q = _q(5, "sevi")
    s = score_question(q, _answers(("ok", "opt0", 1), ("ok", "opt2", 2), ("ok", "opt4", 1), ("unparseable", None, 1)))
    assert s.mean_rating == pytest.approx((1 + 3 + 3 + 5) / 4)
    assert s.n_options == 5 and s.diversity == pytest.approx(_hill_reference([1, 2, 1], 5))


def test_diversity_tables_group_mean_over_questions_and_report_dropped():
    bank = question_bank_from_dict({
        "name": "t", "version": "0", "none_option": NOTA,
        "questions": [
            {"id": "aff", "kind": "sevi", "attribute": "affluence", "question": "?",
             "options": ["l1", "l2", "l3", "l4", "l5"]},
            {"id": "e1", "kind": "entity", "question": "?", "options": ["o1", "o2", "o3"]},
            {"id": "e2", "kind": "entity", "question": "?", "options": ["o1", "o2"]},
            {"id": "b1", "kind": "background", "question": "?", "options": ["o1", "o2", "o3", "o4"]},
        ],
    })
    rows = []

    def add(img, country, qid, status, choice):
        rows.append({"image": img, "country": country, "question_id": qid, "status": status, "choice": choice})

    for i, (aff, e1, e2) in enumerate([("l1", "o1", "o1"), ("l3", "o2", "o2"), ("l5", "o3", "o1"), ("l3", "o1", "o2")]):
        add(f"x{i}", "XX", "aff", "ok", aff)
        add(f"x{i}", "XX", "e1", "ok", e1)
        add(f"x{i}", "XX", "e2", "ok", e2)
        add(f"x{i}", "XX", "b1", "unparseable" if i else "ok", None if i else "o4")  # 1 of 4 answered
    add("y0", "YY", "aff", "ok", "l2")
    add("y0", "YY", "e1", "ok", "o1")  # y0 never got e2 / b1: counted as not answered
    add("z0", None, "aff", "ok", "l2")  # no country: left out
    tables = diversity_tables(pd.DataFrame(rows), bank, "country")
    xx = tables.per_group.set_index("country").loc["XX"]
    assert xx["n_images"] == 4
    assert xx["affluence_mean"] == pytest.approx(3.0)
    assert xx["affluence_diversity"] == pytest.approx(_hill_reference([1, 2, 1], 5))
    assert xx["entity_diversity"] == pytest.approx((_hill_reference([2, 1, 1], 3) + 1.0) / 2)
    assert math.isnan(xx["background_diversity"]) and xx["n_background_questions"] == 0
    assert xx["n_unparseable"] == 3 and xx["unparseable_rate"] == pytest.approx(3 / 16)
    dropped = {(r["country"], r["question_id"]) for _, r in tables.dropped.iterrows()}
    assert dropped == {("XX", "b1"), ("YY", "e2"), ("YY", "b1")}
    assert set(tables.dropped["reason"]) == {"low_coverage"}
    assert tables.n_images_without_group == 1
    as_json = json.loads(json.dumps(tables.to_dict()))
    assert as_json["question_bank"] == "t@0" and len(as_json["per_group"]) == 2
    assert as_json["per_group"][0]["background_diversity"] is None


# -- parser ---------------------------------------------------------------------------------------------------


CHOICES = ["Brick", "Stone", "Glass curtain wall", NOTA]


@pytest.mark.parametrize(
    "reply,choice",
    [
        ("B", "Stone"), ("B.", "Stone"), ("(B)", "Stone"), ("B)", "Stone"), ("  B\n", "Stone"),
        ("Answer: B", "Stone"), ("answer: b", "Stone"), ("The answer is B.", "Stone"), ("Answer: (B)", "Stone"),
        ("**B**", "Stone"), ("`B`", "Stone"), ("'B'", "Stone"),
        ("B. Stone", "Stone"), ("(B) Stone", "Stone"), ("B: stone", "Stone"),
        ("stone", "Stone"), ("STONE.", "Stone"), ("glass   curtain wall", "Glass curtain wall"),
        ("D", NOTA), ("none of the above", NOTA),
    ],
)
def test_parser_accepts_exact_answers(reply, choice):
    got = parse_answer(reply, CHOICES, NOTA)
    assert got.choice == choice and got.index == CHOICES.index(choice)
    assert got.status == ("none" if choice == NOTA else "ok")


@pytest.mark.parametrize(
    "reply",
    [
        "", None, "   ", "B or C", "B, C", "BC", "B and C", "A/B", "B. Brick", "E", "Z", "b", "a",
        "I think B", "Probably B", "maybe stone", "B?", "Stone or Brick", "Marble", "Stone wall",
        "Answer: B. Actually C", "B\nC", "The image shows a street.", "answer:", "(B", "B. Stone because it is grey",
        "<image>", "Answer: E",
    ],
)
def test_parser_rejects_everything_else(reply):
    got = parse_answer(reply, CHOICES, NOTA)
    assert got.status == "unparseable" and got.choice is None and got.index is None


def test_parser_without_a_none_option():
    got = parse_answer("A", ["Poor", "Rich"])
    assert got.status == "ok" and got.choice == "Poor"


# -- the question bank --------------------------------------------------------------------------------------


def test_shipped_bank_is_versioned_and_covers_the_spec():
    bank = load_question_bank()
    assert bank.version == "1.0.0" and bank.label.startswith("geodiv-street@")
    sevi = {q.attribute: q for q in bank.of_kind("sevi")}
    assert set(sevi) == {"affluence", "maintenance"}
    assert sevi["maintenance"].options == ("Severely damaged", "Poor", "Moderate", "Well-maintained", "Excellent")
    assert sevi["affluence"].options[0] == "Impoverished" and sevi["affluence"].options[-1] == "Luxurious"
    assert all(q.none_option is None and q.n_options == 5 for q in sevi.values())
    entity = {q.attribute for q in bank.of_kind("entity")}
    assert {"facade material", "building height", "roof form", "storefront density", "road surface",
            "signage script", "vehicle types", "sidewalk presence and material"} <= entity
    background = {q.attribute for q in bank.of_kind("background")}
    assert {"road or terrain type", "visible modern infrastructure", "vegetation type", "sky and weather"} <= background
    for q in bank.of_kind("entity", "background"):
        assert q.choices[-1] == NOTA and q.none_option == NOTA
        assert f"{q.letters[-1]}. {NOTA}" in q.prompt and "letter" in q.prompt
    assert len({q.id for q in bank}) == len(bank)
    assert len({q.cache_key for q in bank}) == len(bank)


def test_bank_validation_names_the_problem(tmp_path):
    base = {"name": "b", "version": "1", "none_option": NOTA,
            "questions": [{"id": "q1", "kind": "entity", "question": "?", "options": ["ox", "oy"]}]}
    assert len(question_bank_from_dict(base)) == 1
    cases = [
        ({"version": ""}, "version"),
        ({"questions": [{"id": "q1", "kind": "weird", "question": "?", "options": ["x", "y"]}]}, "kind"),
        ({"questions": [{"id": "q1", "kind": "entity", "question": "?", "options": ["ox", "OX"]}]}, "repeat"),
        ({"questions": [{"id": "q1", "kind": "entity", "question": "?", "options": ["ox", "B"]}]}, "bare letters"),
        ({"questions": [{"id": "q1", "kind": "entity", "question": "?", "options": ["ox", NOTA]}]}, "added automatically"),
        ({"questions": [{"id": "s", "kind": "sevi", "question": "?", "options": ["oa", "ob", "oc"]}]}, "exactly 5"),
        ({"questions": base["questions"] * 2}, "duplicate id"),
    ]
    for change, match in cases:
        with pytest.raises(QuestionBankError, match=match):
            question_bank_from_dict({**base, **change})
    path = tmp_path / "bank.yaml"
    path.write_text("name: y\nversion: 2\nnone_option: Nothing\nquestions:\n"
                    "  - {id: q, kind: background, question: 'Sky?', options: [Blue, Grey]}\n")
    bank = load_question_bank(path)
    assert bank.label == "y@2" and bank["q"].choices == ("Blue", "Grey", "Nothing")
    with pytest.raises(QuestionBankError, match="not found"):
        load_question_bank(tmp_path / "missing.json")


def test_changing_a_question_changes_its_cache_key():
    a = Question("q", "entity", "x", "Road?", ("Asphalt", "Gravel"), NOTA)
    b = Question("q", "entity", "x", "Road?", ("Gravel", "Asphalt"), NOTA)
    assert a.cache_key != b.cache_key and a.cache_key.startswith("q@")


# -- the answer cache ---------------------------------------------------------------------------------------


def test_answer_cache_roundtrip_and_isolation(tmp_path):
    h1, h2 = "a" * 64, "b" * 64
    cache = AnswerCache(tmp_path)
    sha = "c" * 64
    assert cache.put(h1, {("q@1", sha): "B", ("q@2", sha): ""}, config={"model": "m", "device": "cpu"})
    assert cache.get(h1, [("q@1", sha), ("q@2", sha), ("q@3", sha)]) == {("q@1", sha): "B", ("q@2", sha): ""}
    assert cache.get(h2, [("q@1", sha)]) == {}
    fresh = AnswerCache(tmp_path)  # another process: reads the files
    assert fresh.get(h1, [("q@1", sha)]) == {("q@1", sha): "B"}
    assert fresh.config(h1) == {"model": "m", "config_hash": h1}
    (tmp_path / h1 / "answers-zzz.json").write_text("{broken")
    with pytest.warns(UserWarning, match="ignoring unreadable"):
        assert len(AnswerCache(tmp_path).get(h1, [("q@1", sha), ("q@2", sha)])) == 2
    assert not [p for p in (tmp_path / h1).iterdir() if p.name.startswith(".tmp")]
    with pytest.raises(ValueError, match="config hash"):
        cache.get("nothex", [])
