"""Chance level of block retrieval (issue 28 part 2): the expected accuracy and MRR of an image that
carries no information about the place, under the metric's own candidate set and tie rule.

The chance values are checked against the real :func:`retrieval` run on every ordering of the
distinct candidate galleries (exact enumeration), and on random isotropic images (simulation),
including a block that fills two negative roles (two candidates that always tie).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from geofidelity_bench.metrics import retrieval, retrieval_chance

CASES = [
    # (roles -> block), the candidate sets of the demo and the edge cases
    {"same_neighborhood": "b", "same_city": "c", "same_driving_side": "d", "random_city": "e"},
    {"same_neighborhood": "b", "same_city": "b", "same_driving_side": "d", "random_city": "e"},
    {"same_neighborhood": "b", "same_city": "b", "random_city": "c"},
    {"same_neighborhood": "b", "same_city": "b", "same_driving_side": "c", "random_city": "c"},
    {"random_city": "b"},
    {},
]


def _galleries(roles):
    """One orthonormal panel vector per distinct block: every ordering of them is equally reachable."""
    blocks = ["a", *sorted(set(roles.values()))]
    eye = np.eye(len(blocks) + 1)
    vec = {b: eye[i] for i, b in enumerate(blocks)}
    candidates = {"target": vec["a"][None, :], **{r: vec[b][None, :] for r, b in roles.items()}}
    return blocks, vec, candidates


@pytest.mark.parametrize("roles", CASES)
def test_chance_equals_retrieval_over_every_ordering_of_the_distinct_galleries(roles):
    blocks, vec, candidates = _galleries(roles)
    # one generated image per ordering of the distinct galleries: similarity falls with the position
    rows = []
    for order in itertools.permutations(blocks):
        rows.append(sum((len(order) - pos) * vec[b] for pos, b in enumerate(order)))
    result = retrieval(np.array(rows, dtype=float), candidates)
    chance = retrieval_chance({"target": "a", **roles})
    assert chance.n_candidates == 1 + len(roles)
    assert chance.n_distinct == len(blocks)
    assert chance.accuracy == pytest.approx(result.accuracy, abs=1e-12)
    assert chance.mrr == pytest.approx(result.mrr, abs=1e-12)


@pytest.mark.parametrize("roles", CASES[:4])
def test_chance_matches_random_images_through_the_metric(roles):
    _, _, candidates = _galleries(roles)
    rng = np.random.default_rng(0)
    gen = rng.standard_normal((200_000, len(next(iter(candidates.values()))[0])))
    result = retrieval(gen, candidates)
    chance = retrieval_chance({"target": "a", **roles})
    assert result.accuracy == pytest.approx(chance.accuracy, abs=0.005)
    assert result.mrr == pytest.approx(chance.mrr, abs=0.005)


def test_two_roles_of_one_block_hand_worked():
    # target a; b fills two roles; c one: 4 candidates, 3 distinct galleries.
    # P(rank 0) = 1/3; b above alone: rank 2; c above alone: rank 1; both: rank 3.
    # MRR = 1/3 * (1 + (1/3 + 1/2) / 2 + 1/4) = 5/9
    c = retrieval_chance({"target": "a", "same_neighborhood": "b", "same_city": "b", "random_city": "c"})
    assert (c.n_candidates, c.n_distinct) == (4, 3)
    assert c.accuracy == pytest.approx(1 / 3)
    assert c.mrr == pytest.approx(5 / 9)
    # not the naive 1/k and H_k/k of 4 distinct candidates
    assert c.accuracy != pytest.approx(1 / 4) and c.mrr != pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)


def test_distinct_negatives_give_one_over_k_and_harmonic_mrr():
    for k in range(1, 6):
        roles = dict(zip(("same_neighborhood", "same_city", "same_driving_side", "random_city"), "bcde"[: k - 1]))
        c = retrieval_chance({"target": "a", **roles})
        assert c.accuracy == pytest.approx(1 / k)
        assert c.mrr == pytest.approx(sum(1 / r for r in range(1, k + 1)) / k)


def test_chance_refuses_unknown_roles_and_a_missing_target():
    with pytest.raises(ValueError, match="unknown candidate"):
        retrieval_chance({"target": "a", "nearby": "b"})
    with pytest.raises(ValueError, match="target"):
        retrieval_chance({"same_city": "b"})
    assert math.isclose(retrieval_chance({"target": "a", "same_city": None}).accuracy, 1.0)


def test_summaries_carry_the_chance_of_the_rows_their_retrieval_mean_averages():
    import pandas as pd

    from geofidelity_bench.evaluation import METRIC_COLUMNS, summarize

    rows = []
    for block, acc, chance, chance_mrr in (("a", 1.0, 0.25, 0.52), ("b", 0.0, 0.5, 0.75), ("c", np.nan, 1 / 3, 0.61)):
        row = {c: 0.5 for c in METRIC_COLUMNS}
        row.update(method="m", condition="L0", block_id=block, retrieval_acc=acc,
                   chance_retrieval_acc=chance, chance_mrr=chance_mrr)
        rows.append(row)
    out = summarize(pd.DataFrame(rows), ["method", "condition"]).iloc[0]
    # block c has no retrieval score, so its chance is not part of the mean beside the retrieval mean
    assert out["retrieval_acc"] == pytest.approx(0.5)
    assert out["chance_retrieval_acc"] == pytest.approx((0.25 + 0.5) / 2)
    assert out["chance_mrr"] == pytest.approx((0.52 + 0.75) / 2)
    assert out["n_blocks"] == 3
    legacy = summarize(pd.DataFrame(rows).drop(columns=["chance_retrieval_acc", "chance_mrr"]), ["method"])
    assert "chance_mrr" not in legacy.columns  # results written before the chance columns: nothing invented
