"""Tests for geofidelity_bench.metrics against independent, deliberately naive implementations.

The reference implementations below loop over pairs in plain Python and compute distances as
sum((x - y) ** 2), i.e. they share no code or numerical tricks with the library.
"""

from __future__ import annotations

import doctest
import importlib
import itertools
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from scipy.spatial.distance import jensenshannon

from geofidelity_bench import metrics
from geofidelity_bench.metrics import (
    CANDIDATE_NAMES,
    GAAS_GROUPS,
    SEMANTIC_GROUPS,
    RetrievalResult,
    cos_sim,
    dcsf,
    diversity,
    diversity_gap,
    gaas,
    median_heuristic_gamma,
    mmd2,
    mmd2_with_reason,
    normalized_hill,
    retrieval,
)
from geofidelity_bench.metrics import composition, panel, reference

# The package re-exports the functions `retrieval` and `set_fidelity`, which shadow the
# submodule attributes.
retrieval_module = importlib.import_module("geofidelity_bench.metrics.retrieval")
set_fidelity = importlib.import_module("geofidelity_bench.metrics.set_fidelity")

# --------------------------------------------------------------------------- references


def ref_cos_sim(gen, ref):
    mg = [sum(col) / len(gen) for col in zip(*gen)]
    mr = [sum(col) / len(ref) for col in zip(*ref)]
    dot = sum(a * b for a, b in zip(mg, mr))
    return dot / (math.sqrt(sum(a * a for a in mg)) * math.sqrt(sum(b * b for b in mr)) + 1e-8)


def ref_cosine(x, y):
    return float(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y)))


def ref_diversity(x):
    pairs = list(itertools.combinations(range(len(x)), 2))
    return sum(1.0 - ref_cosine(x[i], x[j]) for i, j in pairs) / len(pairs)


def ref_sq_dist(x, y):
    return float(np.sum((np.asarray(x, float) - np.asarray(y, float)) ** 2))


def ref_gamma(gen, ref):
    pooled = list(gen) + list(ref)
    dists = [
        ref_sq_dist(pooled[i], pooled[j])
        for i in range(len(pooled))
        for j in range(len(pooled))
        if i != j
    ]
    return 1.0 / float(np.median([d for d in dists if d > 0]))


def ref_mmd2(gen, ref, gamma=None):
    if gamma is None:
        gamma = ref_gamma(gen, ref)
    n, m = len(gen), len(ref)

    def k(x, y):
        return math.exp(-gamma * ref_sq_dist(x, y))

    xx = sum(k(gen[i], gen[j]) for i in range(n) for j in range(n) if i != j) / (n * (n - 1))
    yy = sum(k(ref[i], ref[j]) for i in range(m) for j in range(m) if i != j) / (m * (m - 1))
    xy = sum(k(x, y) for x in gen for y in ref) / (n * m)
    return max(0.0, xx + yy - 2.0 * xy)


def ref_retrieval(gen, candidates):
    """Plain loops; returns (ranks, per-name mean sims)."""
    present = [name for name in CANDIDATE_NAMES if name in candidates]
    panels = {}
    for name in present:
        mean = np.mean(np.asarray(candidates[name], float), axis=0)
        panels[name] = mean / np.linalg.norm(mean)
    ranks, sims = [], {name: [] for name in present}
    for g in np.asarray(gen, float):
        u = g / np.linalg.norm(g)
        s = {name: float(np.dot(u, panels[name])) for name in present}
        for name in present:
            sims[name].append(s[name])
        ranks.append(sum(1 for name in present if name != "target" and s[name] >= s["target"]))
    return ranks, {name: float(np.mean(v)) for name, v in sims.items()}


def ref_gaas(gen_shares, ref_shares):
    gen_shares, ref_shares = np.asarray(gen_shares), np.asarray(ref_shares)
    distances = []
    for j in range(8):
        p, _ = np.histogram(gen_shares[:, j], bins=10, range=(0, 1))
        q, _ = np.histogram(ref_shares[:, j], bins=10, range=(0, 1))
        p = (p + 1e-8) / (p + 1e-8).sum()
        q = (q + 1e-8) / (q + 1e-8).sum()
        distances.append(jensenshannon(p, q, base=2))
    return float(np.mean(distances))


def embeddings(rng, n, d=48, offset=0.0, dtype=np.float64):
    """DINOv2-like: a shared offset plus noise (offset makes |x|^2 + |y|^2 - 2xy cancel)."""
    return (offset + rng.normal(size=(n, d))).astype(dtype)


@pytest.fixture
def rng():
    return np.random.default_rng(20240601)


# --------------------------------------------------------------------------- CosSim


@pytest.mark.parametrize("n, m", [(1, 1), (4, 25), (7, 3)])
def test_cos_sim_matches_reference(rng, n, m):
    gen, ref = embeddings(rng, n, offset=0.3), embeddings(rng, m)
    assert cos_sim(gen, ref) == pytest.approx(ref_cos_sim(gen.tolist(), ref.tolist()), abs=1e-12)


def test_cos_sim_identical_sets_is_one_and_scale_invariant(rng):
    x = embeddings(rng, 10, offset=1.0)
    assert cos_sim(x, x) == pytest.approx(1.0, abs=1e-9)
    y = embeddings(rng, 6, offset=0.5)
    # invariant up to the 1e-8 in the denominator (|mean| is O(1) here)
    assert cos_sim(3.5 * x, 0.5 * y) == pytest.approx(cos_sim(x, y), abs=1e-8)


def test_cos_sim_accepts_lists_and_ints():
    # mean(gen) = (1, 1), mean(ref) = (1, 0): cosine 1/sqrt(2)
    assert cos_sim([[2, 0], [0, 2]], [[1, 0]]) == pytest.approx(1 / math.sqrt(2), abs=1e-8)


# --------------------------------------------------------------------------- Diversity


@pytest.mark.parametrize("n", [2, 3, 9])
def test_diversity_matches_reference(rng, n):
    x = embeddings(rng, n, offset=0.5)
    assert diversity(x) == pytest.approx(ref_diversity(x), abs=1e-12)


def test_diversity_hand_worked():
    # (1,0), (0,1), (-1,0): pair distances 1, 2, 1 -> mean 4/3
    assert diversity([[1, 0], [0, 1], [-1, 0]]) == pytest.approx(4 / 3, abs=1e-12)


def test_diversity_identical_rows_is_zero_and_scale_invariant(rng):
    x = embeddings(rng, 1, offset=2.0)
    assert diversity(np.repeat(x, 5, axis=0)) == 0.0
    y = embeddings(rng, 6)
    scaled = y * rng.uniform(0.1, 10.0, size=(6, 1))  # per-row scaling is also invisible
    assert diversity(scaled) == pytest.approx(diversity(y), abs=1e-12)


def test_diversity_gap_and_dcsf_match_reference(rng):
    gen, ref = embeddings(rng, 4, offset=1.0), embeddings(rng, 12, offset=0.8)
    gap = ref_diversity(ref) - ref_diversity(gen)
    assert diversity_gap(gen, ref) == pytest.approx(gap, abs=1e-12)
    expected = ref_mmd2(gen, ref) + 0.5 * max(0.0, gap)
    assert dcsf(gen, ref) == pytest.approx(expected, abs=1e-12)


def test_dcsf_does_not_reward_extra_diversity(rng):
    # gen more varied than ref: negative gap, so DCSF is MMD^2 alone
    gen = np.eye(4) + 0.01 * rng.normal(size=(4, 4))
    ref = np.ones((5, 4)) + 0.01 * rng.normal(size=(5, 4))
    assert diversity_gap(gen, ref) < 0
    assert dcsf(gen, ref) == pytest.approx(mmd2(gen, ref), abs=1e-15)


# --------------------------------------------------------------------------- MMD^2


@pytest.mark.parametrize(
    "n, m, offset, dtype",
    [
        (2, 2, 0.0, np.float64),
        (4, 25, 5.0, np.float32),
        (6, 6, 0.0, np.float64),
        (3, 10, 40.0, np.float32),
    ],
)
def test_mmd2_matches_reference(rng, n, m, offset, dtype):
    gen = embeddings(rng, n, offset=offset, dtype=dtype)
    ref = embeddings(rng, m, offset=offset, dtype=dtype)
    gen = gen + np.asarray(0.3, dtype)  # a shift, so MMD^2 is usually > 0
    assert median_heuristic_gamma(gen, ref) == pytest.approx(ref_gamma(gen, ref), rel=1e-9)
    assert mmd2(gen, ref) == pytest.approx(ref_mmd2(gen, ref), abs=1e-10)
    assert mmd2(gen, ref, gamma=0.01) == pytest.approx(ref_mmd2(gen, ref, gamma=0.01), abs=1e-10)


def test_mmd2_hand_worked():
    # gen = {0, 1}, ref = {1, 3} on a line (three distinct points, one shared).
    # Squared distances between distinct pairs: 0-1: 1 (twice), 0-3: 9, 1-1: 0, 1-3: 4 (twice).
    # Strictly positive: 1, 1, 4, 4, 9 -> median 4 -> gamma = 1/4.
    # within gen: k(0,1) = e^-0.25; within ref: k(1,3) = e^-1;
    # cross: mean(k(0,1), k(0,3), k(1,1), k(1,3)) = (e^-0.25 + e^-2.25 + 1 + e^-1) / 4
    # MMD^2 = e^-0.25 + e^-1 - (e^-0.25 + e^-2.25 + 1 + e^-1) / 2
    #       = 0.5 * (0.7788008 + 0.3678794 - 1 - 0.1053992) = 0.0206405
    gen, ref = [[0.0], [1.0]], [[1.0], [3.0]]
    assert median_heuristic_gamma(gen, ref) == 0.25
    assert mmd2(gen, ref) == pytest.approx(0.0206405, abs=1e-7)
    value, reason = mmd2_with_reason(gen, ref)
    assert reason is None and value == mmd2(gen, ref)


def test_gamma_median_excludes_diagonal_and_zero_distances():
    gen, ref = [[0.0], [1.0]], [[1.0], [3.0]]
    # Counting the zero distance of the duplicated point 1 would give median(0,1,1,4,4,9) = 2.5,
    # counting the four diagonal zeros of the full matrix would give median 1.0; only
    # excluding both gives 4.
    assert median_heuristic_gamma(gen, ref) == 1 / 4
    assert mmd2(gen, ref) == pytest.approx(mmd2(gen, ref, gamma=1 / 4), abs=1e-15)
    assert abs(mmd2(gen, ref) - mmd2(gen, ref, gamma=1 / 2.5)) > 1e-3
    assert abs(mmd2(gen, ref) - mmd2(gen, ref, gamma=1.0)) > 1e-3


def test_gamma_ignores_rounding_noise_of_duplicated_rows(rng):
    # The held-out anchor repeats real images; with a large shared offset the Gram identity
    # leaves noise on duplicate pairs that must not count as positive distances.
    ref = embeddings(rng, 8, d=768, offset=50.0, dtype=np.float32)
    gen = ref[[0, 0, 1, 1]]
    assert median_heuristic_gamma(gen, ref) == pytest.approx(ref_gamma(gen, ref), rel=1e-9)
    assert mmd2(gen, ref) == pytest.approx(ref_mmd2(gen, ref), abs=1e-10)


def test_mmd2_identical_sets_is_zero(rng):
    x = embeddings(rng, 6, offset=3.0)
    assert mmd2(x, x) == 0.0
    assert mmd2(x, x[::-1]) == 0.0
    assert dcsf(x, x) == 0.0
    assert diversity_gap(x, x) == pytest.approx(0.0, abs=1e-15)


def test_mmd2_all_points_identical_is_zero():
    x = [[1.0, 2.0]] * 3
    assert math.isnan(median_heuristic_gamma(x, x))
    assert mmd2_with_reason(x, x[:2]) == (0.0, None)


@pytest.mark.parametrize(
    "n, m, short", [(1, 5, "gen has 1 row"), (5, 1, "ref has 1 row"), (1, 1, "gen has 1 row")]
)
def test_mmd2_nan_with_reason_for_single_rows(rng, n, m, short):
    gen, ref = embeddings(rng, n), embeddings(rng, m)
    value, reason = mmd2_with_reason(gen, ref)
    assert math.isnan(value)
    assert short in reason and "at least 2" in reason
    assert math.isnan(mmd2(gen, ref))


def test_set_metrics_permutation_invariant(rng):
    gen, ref = embeddings(rng, 5, offset=1.0), embeddings(rng, 11, offset=1.2)
    pg, pr = gen[rng.permutation(5)], ref[rng.permutation(11)]
    for f in (cos_sim, mmd2, dcsf, diversity_gap):
        assert f(pg, pr) == pytest.approx(f(gen, ref), abs=1e-12)
    assert diversity(pg) == pytest.approx(diversity(gen), abs=1e-12)


# --------------------------------------------------------------------------- retrieval


def full_candidates(rng, d=32, offset=0.0):
    return {
        name: embeddings(rng, 3 + i, d=d, offset=offset) for i, name in enumerate(CANDIDATE_NAMES)
    }


@pytest.mark.parametrize("offset", [0.0, 0.15])
def test_retrieval_matches_reference(rng, offset):
    # A small offset makes the target tend to win for some images and lose for others.
    candidates = full_candidates(rng, offset=offset)
    gen = embeddings(rng, 40, d=32, offset=offset) + 0.4 * candidates["target"].mean(axis=0)
    result = retrieval(gen, candidates)
    ranks, sims = ref_retrieval(gen, candidates)
    assert result.ranks.tolist() == ranks
    assert result.accuracy == pytest.approx(np.mean([r == 0 for r in ranks]), abs=1e-15)
    assert result.mrr == pytest.approx(np.mean([1 / (r + 1) for r in ranks]), abs=1e-15)
    for name in CANDIDATE_NAMES:
        assert result.sims[name] == pytest.approx(sims[name], abs=1e-12)
    negatives = [sims[name] for name in CANDIDATE_NAMES[1:]]
    assert result.local_margin == pytest.approx(
        sims["target"] - max(sims["same_neighborhood"], sims["same_city"]), abs=1e-12
    )
    assert result.strongest_margin == pytest.approx(sims["target"] - max(negatives), abs=1e-12)
    assert result.per_image_sims.shape == (40, len(CANDIDATE_NAMES))
    assert 0 < result.accuracy < 1  # the test exercises both outcomes


def test_retrieval_hand_worked():
    # Panels: target gallery mean (1, 1) -> (1, 1)/sqrt2; same_city (1, 0); random_city (0, 1).
    # image (1, 1):  s_t = 1,         s_city = 0.7071,  s_rand = 0.7071  -> rank 0
    # image (3, 1):  s_t = 4/sqrt20 = 0.8944, s_city = 3/sqrt10 = 0.9487 -> rank 1 (city)
    # image (1, -1): s_t = 0,         s_city = 0.7071,  s_rand = -0.7071 -> rank 1 (city)
    # image (-1, 0): s_t = -0.7071,   s_city = -1,      s_rand = 0       -> rank 1 (random)
    # accuracy 1/4, MRR (1 + 1/2 + 1/2 + 1/2) / 4 = 0.625
    # mean s_t = (1 + 0.894427 + 0 - 0.707107) / 4 = 0.296830
    # mean s_city = (0.707107 + 0.948683 + 0.707107 - 1) / 4 = 0.340724
    # mean s_rand = (0.707107 + 0.316228 - 0.707107 + 0) / 4 = 0.079057
    gen = [[1, 1], [3, 1], [1, -1], [-1, 0]]
    candidates = {
        "target": [[2, 0], [0, 2]],
        "same_city": [[5, 0]],
        "random_city": [[0, 3]],
    }
    result = retrieval(gen, candidates)
    assert result.ranks.tolist() == [0, 1, 1, 1]
    assert result.accuracy == 0.25
    assert result.mrr == 0.625
    assert result.best_candidate == ["target", "same_city", "same_city", "random_city"]
    assert result.sims["target"] == pytest.approx(0.296830, abs=1e-6)
    assert result.sims["same_city"] == pytest.approx(0.340724, abs=1e-6)
    assert result.sims["random_city"] == pytest.approx(0.079057, abs=1e-6)
    assert math.isnan(result.sims["same_neighborhood"])
    assert math.isnan(result.sims["same_driving_side"])
    assert result.local_margin == pytest.approx(0.296830 - 0.340724, abs=1e-6)
    assert result.strongest_margin == pytest.approx(0.296830 - 0.340724, abs=1e-6)


def test_retrieval_ties_count_against_target():
    # gen (1, 0) sees target panel (1, 1)/sqrt2 and same_city panel (1, -1)/sqrt2 equally.
    result = retrieval([[1, 0], [2, 0]], {"target": [[1, 1]], "same_city": [[1, -1]]})
    assert result.ranks.tolist() == [1, 1]
    assert result.accuracy == 0.0
    assert result.best_candidate == ["same_city", "same_city"]


def test_retrieval_target_gallery_reused_as_negative_ties(rng):
    # The same images in another order: the panel means differ only by rounding.
    target = embeddings(rng, 7, offset=0.2)
    gen = embeddings(rng, 5, offset=0.2)
    result = retrieval(gen, {"target": target, "same_city": target[::-1].copy()})
    assert result.ranks.tolist() == [1] * 5


def test_retrieval_repeated_negative_counts_twice(rng):
    d = 16
    target = embeddings(rng, 5, d=d)
    negative = embeddings(rng, 5, d=d)
    # half the images look like the negative, half like the target
    gen = np.vstack(
        [negative.mean(axis=0) + 0.05 * rng.normal(size=(3, d)),
         target.mean(axis=0) + 0.05 * rng.normal(size=(3, d))]
    )
    once = retrieval(gen, {"target": target, "same_city": negative})
    twice = retrieval(
        gen, {"target": target, "same_city": negative, "random_city": negative.copy()}
    )
    assert once.ranks.tolist() == [1, 1, 1, 0, 0, 0]
    assert twice.ranks.tolist() == [2, 2, 2, 0, 0, 0]
    assert twice.mrr == pytest.approx((3 * (1 / 3) + 3) / 6, abs=1e-15)
    assert twice.sims["random_city"] == pytest.approx(twice.sims["same_city"], abs=1e-12)


def test_retrieval_missing_negative_is_nan_in_its_own_column(rng):
    candidates = full_candidates(rng)
    gen = embeddings(rng, 6, d=32)
    full = retrieval(gen, candidates)
    del candidates["same_city"]
    partial = retrieval(gen, candidates)
    j = CANDIDATE_NAMES.index("same_city")
    assert math.isnan(partial.sims["same_city"])
    assert np.isnan(partial.per_image_sims[:, j]).all()
    for i, name in enumerate(CANDIDATE_NAMES):
        if name != "same_city":
            assert partial.sims[name] == pytest.approx(full.sims[name], abs=1e-15)
            np.testing.assert_allclose(partial.per_image_sims[:, i], full.per_image_sims[:, i])
    # the local margin now uses same_neighborhood alone
    assert partial.local_margin == pytest.approx(
        partial.sims["target"] - partial.sims["same_neighborhood"], abs=1e-15
    )
    row = partial.as_row()
    assert list(row) == ["accuracy", "mrr"] + [f"sim_{n}" for n in CANDIDATE_NAMES] + [
        "local_margin",
        "strongest_margin",
    ]
    assert math.isnan(row["sim_same_city"])
    assert (row["accuracy"], row["mrr"]) == (partial.accuracy, partial.mrr)
    assert (row["local_margin"], row["strongest_margin"]) == (partial.local_margin, partial.strongest_margin)
    assert all(row[f"sim_{n}"] == partial.sims[n] for n in CANDIDATE_NAMES if n != "same_city")
    # The per-image arrays are read-only (a frozen result cannot be changed through them).
    for array in (partial.ranks, partial.per_image_sims):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 0


def test_retrieval_target_only_has_nan_margins(rng):
    result = retrieval(embeddings(rng, 3), {"target": embeddings(rng, 4)})
    assert result.ranks.tolist() == [0, 0, 0] and result.accuracy == 1.0 and result.mrr == 1.0
    assert math.isnan(result.local_margin) and math.isnan(result.strongest_margin)
    assert result.best_candidate == ["target"] * 3
    assert sum(math.isnan(v) for v in result.sims.values()) == 4


def test_retrieval_only_far_negatives_gives_nan_local_margin(rng):
    cands = {"target": embeddings(rng, 4), "random_city": embeddings(rng, 4)}
    result = retrieval(embeddings(rng, 3), cands)
    assert math.isnan(result.local_margin)
    assert result.strongest_margin == pytest.approx(
        result.sims["target"] - result.sims["random_city"], abs=1e-15
    )


def test_retrieval_scale_and_permutation_invariant(rng):
    candidates = full_candidates(rng)
    gen = embeddings(rng, 8, d=32)
    base = retrieval(gen, candidates)
    scaled = retrieval(
        gen * rng.uniform(0.1, 10, size=(8, 1)),
        {name: 7.5 * arr for name, arr in candidates.items()},
    )
    perm = rng.permutation(8)
    shuffled = retrieval(gen[perm], {name: arr[::-1] for name, arr in candidates.items()})
    assert scaled.ranks.tolist() == base.ranks.tolist()
    assert shuffled.ranks.tolist() == base.ranks[perm].tolist()
    for other in (scaled, shuffled):
        assert other.accuracy == base.accuracy and other.mrr == pytest.approx(base.mrr)
        for name in CANDIDATE_NAMES:
            assert other.sims[name] == pytest.approx(base.sims[name], abs=1e-12)


def test_retrieval_result_is_frozen(rng):
    result = retrieval(embeddings(rng, 2), {"target": embeddings(rng, 2)})
    assert isinstance(result, RetrievalResult)
    with pytest.raises(AttributeError):
        result.accuracy = 1.0
    with pytest.raises(ValueError):
        result.ranks[0] = 3
    assert result.ranks.dtype.kind == "i"


# --------------------------------------------------------------------------- GAAS


def test_semantic_groups_match_spec():
    assert list(SEMANTIC_GROUPS) == [
        "road", "sidewalk", "building", "vehicle", "person", "vegetation",
        "sky", "pole", "sign", "water", "snow", "other",
    ]
    assert set(SEMANTIC_GROUPS["road"]) == {13, 14, 23, 24}
    assert set(SEMANTIC_GROUPS["sidewalk"]) == {15, 11, 2, 8, 9}
    assert set(SEMANTIC_GROUPS["building"]) == {17, 6, 16, 18, 3, 5}
    assert set(SEMANTIC_GROUPS["vehicle"]) == set(range(52, 65))
    assert set(SEMANTIC_GROUPS["person"]) == {19, 20, 21, 22}
    assert set(SEMANTIC_GROUPS["vegetation"]) == {30, 29, 25}
    assert set(SEMANTIC_GROUPS["sky"]) == {27}
    assert set(SEMANTIC_GROUPS["pole"]) == {45, 47, 44}
    assert set(SEMANTIC_GROUPS["sign"]) == {48, 49, 50, 46, 35, 32}
    assert set(SEMANTIC_GROUPS["water"]) == {31}
    assert set(SEMANTIC_GROUPS["snow"]) == {28}
    assert set(SEMANTIC_GROUPS["other"]) == {0, 1, 4, 26, 33, 34, *range(36, 44), 51}
    all_ids = [i for ids in SEMANTIC_GROUPS.values() for i in ids]
    assert len(all_ids) == len(set(all_ids))  # disjoint
    # docs/benchmark.md section 5, Metrics leaves Vistas ids 7, 10 and 12 out of every group
    assert set(range(65)) - set(all_ids) == {7, 10, 12}
    assert GAAS_GROUPS == (
        "road", "sidewalk", "building", "vehicle", "vegetation", "sky", "pole", "sign"
    )
    with pytest.raises(TypeError):
        SEMANTIC_GROUPS["road"] = (1,)


def test_gaas_matches_scipy(rng):
    gen = rng.dirichlet(np.ones(9), size=4)[:, :8]
    ref = rng.dirichlet(np.ones(9) * 0.5, size=60)[:, :8]
    assert gaas(gen, ref) == pytest.approx(ref_gaas(gen, ref), abs=1e-12)


def test_gaas_bin_edges_match_numpy_histogram():
    # Values on (and just around) every bin edge, including 0.3 (which np.histogram puts in
    # bin 2) and 1.0 (last bin).
    edges = np.linspace(0, 1, 11)
    values = np.concatenate([edges, np.nextafter(edges, 2)[:-1], [0.3, 0.7, 0.6, 0.1]])
    gen = np.tile(values[:, None], (1, 8))
    gen[:, 3] = values[::-1]
    ref = np.full((5, 8), 0.05)
    assert gaas(gen, ref) == pytest.approx(ref_gaas(gen, ref), abs=1e-12)
    assert gaas(gen[:12], gen[12:]) == pytest.approx(ref_gaas(gen[:12], gen[12:]), abs=1e-12)


def test_gaas_identical_is_zero_and_permutation_invariant(rng):
    x = rng.dirichlet(np.ones(9), size=20)[:, :8]
    assert gaas(x, x) == pytest.approx(0.0, abs=1e-7)
    y = rng.dirichlet(np.ones(9), size=7)[:, :8]
    assert gaas(y[::-1], x[rng.permutation(20)]) == pytest.approx(gaas(y, x), abs=1e-15)


def test_gaas_tolerates_rounding_outside_unit_interval():
    shares = np.full((3, 8), 0.1)
    shares[0, 0] = 1.0 + 5e-7
    shares[1, 1] = -5e-7
    clipped = np.clip(shares, 0, 1)
    assert gaas(shares, clipped) == pytest.approx(0.0, abs=1e-7)


# --------------------------------------------------------------------------- prepared references


def _plain_and_prepared(ref):
    return [("array", ref), ("prepared", metrics.prepare_reference(ref))]


@pytest.mark.parametrize(
    "n, m, offset, dtype",
    [(4, 25, 0.0, np.float64), (4, 100, 5.0, np.float32), (2, 2, 0.0, np.float64), (7, 3, 40.0, np.float32)],
)
def test_prepared_reference_gives_the_same_results(rng, n, m, offset, dtype):
    gen = embeddings(rng, n, d=64, offset=offset, dtype=dtype) + np.asarray(0.6, dtype)
    ref = embeddings(rng, m, d=64, offset=offset, dtype=dtype)
    prepared = metrics.prepare_reference(ref)
    assert mmd2(gen, ref) > 0.0
    for f in (cos_sim, mmd2, dcsf, diversity_gap, median_heuristic_gamma):
        assert f(gen, prepared) == pytest.approx(f(gen, ref), rel=1e-12, abs=1e-12), f.__name__
    assert mmd2(gen, prepared, gamma=0.003) == pytest.approx(mmd2(gen, ref, gamma=0.003), abs=1e-12)
    assert mmd2_with_reason(gen, prepared)[1] is None
    # and both agree with the naive references (in float64)
    gen64, ref64 = gen.astype(np.float64), ref.astype(np.float64)
    assert mmd2(gen, prepared) == pytest.approx(ref_mmd2(gen64, ref64), abs=1e-10)
    assert median_heuristic_gamma(gen, prepared) == pytest.approx(ref_gamma(gen64, ref64), rel=1e-9)
    assert cos_sim(gen, prepared) == pytest.approx(ref_cos_sim(gen64, ref64), abs=1e-12)


def test_prepared_reference_contents(rng):
    ref = embeddings(rng, 9, d=16, offset=2.0)
    ref[4] = ref[1]  # a duplicate pair: exactly 0, not counted as positive
    p = metrics.prepare_reference(ref)
    assert isinstance(p, metrics.PreparedReference) and p.n_rows == 9 and p.dim == 16
    i, j = np.triu_indices(9, k=1)
    naive = np.array([ref_sq_dist(ref[a], ref[b]) for a, b in zip(i, j)])
    np.testing.assert_allclose(p.pair_sq_dists, naive, rtol=1e-12)
    assert p.pair_sq_dists[(i == 1) & (j == 4)].tolist() == [0.0]
    np.testing.assert_array_equal(p.sorted_positive_pair_sq_dists, np.sort(p.pair_sq_dists[p.pair_sq_dists > 0]))
    assert p.sorted_positive_pair_sq_dists.size == naive.size - 1
    np.testing.assert_allclose(p.mean, ref.mean(axis=0), rtol=1e-15)
    np.testing.assert_allclose(p.centered, ref - ref.mean(axis=0), rtol=1e-15)
    np.testing.assert_allclose(p.sq_norms, ((ref - ref.mean(axis=0)) ** 2).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(p.unit_rows, ref / np.linalg.norm(ref, axis=1, keepdims=True), rtol=1e-14)
    np.testing.assert_allclose(p.panel_vector, ref.mean(0) / np.linalg.norm(ref.mean(0)), rtol=1e-14)
    assert p.mean_norm == pytest.approx(np.linalg.norm(ref.mean(0)), rel=1e-15)
    assert p.diversity == pytest.approx(ref_diversity(ref), abs=1e-12)
    assert p.diversity == diversity(ref)
    assert metrics.prepare_reference(p) is p
    assert "m=9" in repr(p) and "d=16" in repr(p)


def test_prepared_reference_is_read_only_and_leaves_the_input_alone(rng):
    ref = embeddings(rng, 5, d=8)
    before = ref.copy()
    p = metrics.prepare_reference(ref)
    assert ref.flags.writeable
    ref[0, 0] = 99.0  # the prepared copy does not change with the caller's array
    assert p.rows[0, 0] == before[0, 0]
    for name in ("rows", "mean", "panel_vector", "unit_rows", "centered", "sq_norms", "pair_sq_dists",
                 "sorted_positive_pair_sq_dists"):
        with pytest.raises(ValueError):
            getattr(p, name)[...] = 0.0
    with pytest.raises(AttributeError):
        p.diversity = 0.0  # frozen


def test_prepared_single_row_reference(rng):
    ref = embeddings(rng, 1, d=8)
    gen = embeddings(rng, 3, d=8)
    p = metrics.prepare_reference(ref)
    assert p.pair_sq_dists.size == 0 and math.isnan(p.diversity)
    assert cos_sim(gen, p) == cos_sim(gen, ref)
    assert median_heuristic_gamma(gen, p) == pytest.approx(median_heuristic_gamma(gen, ref), rel=1e-12)
    value, reason = mmd2_with_reason(gen, p)
    assert math.isnan(value) and reason == mmd2_with_reason(gen, ref)[1] == (
        "ref has 1 row; MMD^2 needs at least 2 rows in each set"
    )
    with pytest.raises(ValueError, match="ref has 1 row; DCSF needs at least 2"):
        dcsf(gen, p)
    with pytest.raises(ValueError, match="ref has 1 row; the diversity gap needs at least 2"):
        diversity_gap(gen, p)


def test_median_uses_all_pooled_pairs_including_gallery_pairs():
    # gen {0, 1}, ref {10, 20, 30}: gen-gen 1; gen-ref 100, 400, 900, 81, 361, 841;
    # ref-ref 100, 400, 100 -> sorted 1, 81, 100, 100, 100 | 361, 400, 400, 841, 900
    # -> median (100 + 361) / 2 = 230.5 (without the gallery's own pairs it would be 361).
    gen, ref = [[0.0], [1.0]], [[10.0], [20.0], [30.0]]
    for _, r in _plain_and_prepared(ref):
        assert median_heuristic_gamma(gen, r) == 1 / 230.5
        assert mmd2(gen, r) == pytest.approx(ref_mmd2(gen, ref), abs=1e-14)
    gen, ref = [[0.0], [1.0]], [[10.0], [10.0], [10.0]]  # ref-ref all 0: excluded
    # positive: gen-gen 1, gen-ref 100 x3, 81 x3 -> 1, 81, 81, 81, 100, 100, 100 -> 81
    for _, r in _plain_and_prepared(ref):
        assert median_heuristic_gamma(gen, r) == 1 / 81


def test_median_of_union_matches_numpy(rng):
    median_of_union = set_fidelity._median_of_union
    for _ in range(300):
        a = np.sort(rng.integers(1, 12, size=rng.integers(0, 15)).astype(float))
        b = np.sort(rng.integers(1, 12, size=rng.integers(0, 15)).astype(float))
        if a.size + b.size == 0:
            assert math.isnan(median_of_union(a, b))
            continue
        assert median_of_union(a, b) == np.median(np.concatenate([a, b]))
    a = np.sort(rng.random(2001))
    b = np.sort(rng.random(250))
    assert median_of_union(a, b) == np.median(np.concatenate([a, b]))


def test_prepared_duplicate_rows_noise_is_ignored(rng):
    ref = embeddings(rng, 8, d=768, offset=50.0, dtype=np.float32)
    gen = ref[[0, 0, 1, 1]]
    p = metrics.prepare_reference(ref)
    assert median_heuristic_gamma(gen, p) == pytest.approx(ref_gamma(gen, ref), rel=1e-9)
    assert mmd2(gen, p) == pytest.approx(ref_mmd2(gen, ref), abs=1e-10)
    assert mmd2(ref, p) == 0.0 and dcsf(ref, p) == 0.0


def test_set_fidelity_equals_the_separate_metrics(rng):
    gen, ref = embeddings(rng, 4, offset=1.0), embeddings(rng, 30, offset=1.1)
    for _, r in _plain_and_prepared(ref):
        fid = metrics.set_fidelity(gen, r)
        assert isinstance(fid, metrics.SetFidelity)
        assert fid.mmd2_reason is None
        assert fid.mmd2 == mmd2(gen, ref)
        assert fid.div_gen == diversity(gen) and fid.div_ref == diversity(ref)
        assert fid.diversity_gap == diversity_gap(gen, ref) == fid.div_ref - fid.div_gen
        assert fid.dcsf == dcsf(gen, ref) == fid.mmd2 + 0.5 * max(0.0, fid.diversity_gap)
        assert fid.mmd2 == pytest.approx(ref_mmd2(gen, ref), abs=1e-10)
    with pytest.raises(AttributeError):
        fid.mmd2 = 0.0


def test_set_fidelity_short_sets_are_nan_with_reason(rng):
    gen, ref = embeddings(rng, 1), embeddings(rng, 5)
    fid = metrics.set_fidelity(gen, ref)
    assert fid.mmd2_reason == mmd2_with_reason(gen, ref)[1]
    assert math.isnan(fid.mmd2) and math.isnan(fid.dcsf) and math.isnan(fid.div_gen)
    assert math.isnan(fid.diversity_gap) and fid.div_ref == diversity(ref)
    fid = metrics.set_fidelity(ref, gen)  # the 1-row set as the reference
    assert fid.mmd2_reason.startswith("ref has 1 row") and math.isnan(fid.div_ref)
    assert fid.div_gen == diversity(ref) and math.isnan(fid.diversity_gap) and math.isnan(fid.dcsf)


def test_set_fidelity_identical_and_degenerate_sets():
    x = [[1.0, 2.0], [3.0, 5.0], [0.5, 1.0]]
    fid = metrics.set_fidelity(x, metrics.prepare_reference(x))
    assert fid.mmd2 == 0.0 and fid.dcsf == 0.0
    same = [[1.0, 2.0]] * 3
    assert metrics.set_fidelity(same, same[:2]).mmd2 == 0.0  # every pooled point identical


def test_retrieval_with_prepared_candidates(rng):
    candidates = full_candidates(rng, offset=0.1)
    gen = embeddings(rng, 12, d=32, offset=0.1) + 0.4 * candidates["target"].mean(axis=0)
    plain = retrieval(gen, candidates)
    prepared = {name: metrics.prepare_reference(c) for name, c in candidates.items()}
    mixed = {name: (prepared[name] if i % 2 else c) for i, (name, c) in enumerate(candidates.items())}
    for cands in (prepared, mixed):
        result = retrieval(gen, cands)
        assert result.ranks.tolist() == plain.ranks.tolist()
        assert result.best_candidate == plain.best_candidate
        np.testing.assert_allclose(result.per_image_sims, plain.per_image_sims, rtol=0, atol=1e-14)
        assert result.as_row() == pytest.approx(plain.as_row(), abs=1e-14)
    # one prepared gallery under two roles is two exactly tied candidates
    p = prepared["target"]
    twice = retrieval(gen, {"target": p, "same_city": p})
    assert twice.ranks.tolist() == [1] * len(gen) and twice.accuracy == 0.0


def test_prepared_reference_errors():
    with pytest.raises(ValueError, match="ref contains NaN"):
        metrics.prepare_reference([[np.nan, 1.0]])
    with pytest.raises(ValueError, match=r"candidates\['same_city'\] is empty"):
        metrics.prepare_reference(np.ones((0, 2)), name="candidates['same_city']")
    p = metrics.prepare_reference(X2)
    with pytest.raises(ValueError, match=r"gen and ref have different embedding dimensions \(3 vs 2\)"):
        mmd2([[1.0, 2.0, 3.0], [1.0, 0.0, 0.0]], p)
    with pytest.raises(ValueError, match="gen and ref have different"):
        cos_sim([[1.0]], p)
    with pytest.raises(ValueError, match="gen and ref have different"):
        diversity_gap([[1.0], [2.0]], p)
    with pytest.raises(ValueError, match=r"gen and candidates\['target'\] have different"):
        retrieval([[1.0, 2.0, 3.0]], {"target": p})
    with pytest.raises(ValueError, match="gen has 1 row; DCSF needs at least 2"):
        dcsf([[1.0, 2.0]], p)
    with pytest.raises(ValueError, match="gamma must be a positive finite number"):
        mmd2(X2, p, gamma=-1.0)


# --------------------------------------------------------------------------- errors

X2 = [[1.0, 2.0], [3.0, 4.0]]
S8 = np.full((2, 8), 0.1)


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda: cos_sim([1.0, 2.0], X2), "gen must be a 2-D array"),
        (lambda: cos_sim(X2, np.ones((2, 2, 2))), "ref must be a 2-D array"),
        (lambda: cos_sim(np.ones((0, 2)), X2), "gen is empty"),
        (lambda: cos_sim(X2, np.ones((2, 0))), "ref is empty"),
        (lambda: cos_sim(X2, [[1.0, 2.0, 3.0]]), "different embedding dimensions (2 vs 3)"),
        (lambda: cos_sim([[1.0, np.nan]], X2), "gen contains NaN or inf"),
        (lambda: cos_sim(X2, [[np.inf, 1.0]]), "ref contains NaN or inf"),
        (lambda: cos_sim([[1.0, 2.0], [3.0]], X2), "gen could not be read"),
        (lambda: cos_sim([["a", "b"]], X2), "gen could not be read"),
        (lambda: cos_sim(np.array([[1j, 2.0]]), X2), "gen holds complex"),
        (lambda: diversity([[1.0, 2.0]]), "x has 1 row; diversity needs at least 2"),
        (lambda: diversity([[np.nan, 1.0], [1.0, 1.0]]), "x contains NaN"),
        (lambda: mmd2(X2, [[1.0]]), "different embedding dimensions"),
        (lambda: mmd2(np.ones((0, 2)), X2), "gen is empty"),
        (lambda: mmd2(X2, X2, gamma=0.0), "gamma must be a positive finite number"),
        (lambda: mmd2(X2, X2, gamma=float("nan")), "gamma must be a positive finite number"),
        (lambda: mmd2_with_reason(X2, [[np.inf, 0.0], [0.0, 0.0]]), "ref contains NaN or inf"),
        (lambda: median_heuristic_gamma([1.0], X2), "gen must be a 2-D array"),
        (lambda: dcsf([[1.0, 2.0]], X2), "gen has 1 row; DCSF needs at least 2"),
        (lambda: dcsf(X2, [[1.0, 2.0]]), "ref has 1 row; DCSF needs at least 2"),
        (lambda: diversity_gap(X2, [[1.0, 2.0]]), "ref has 1 row; the diversity gap needs"),
        (lambda: retrieval([1.0, 2.0], {"target": X2}), "gen must be a 2-D array"),
        (lambda: retrieval(X2, {"same_city": X2}), "must include 'target'"),
        (lambda: retrieval(X2, {"target": X2, "same_town": X2}), "unknown candidate 'same_town'"),
        (lambda: retrieval(X2, {"target": [[1.0, 2.0, 3.0]]}), "candidates['target'] have"),
        (
            lambda: retrieval(X2, {"target": X2, "same_city": [[np.nan, 1.0]]}),
            "candidates['same_city'] contains NaN",
        ),
        (
            lambda: retrieval(X2, {"target": X2, "random_city": np.ones((0, 2))}),
            "candidates['random_city'] is empty",
        ),
        (lambda: gaas(np.full((2, 7), 0.1), S8), "gen_shares has 7 columns; GAAS needs 8"),
        (lambda: gaas(S8, np.full((2, 9), 0.1)), "ref_shares has 9 columns"),
        (lambda: gaas(S8 + 1.0, S8), "gen_shares has pixel shares outside [0, 1]"),
        (lambda: gaas(S8, S8 - 0.10001), "ref_shares has pixel shares outside"),
        (lambda: gaas(S8 * np.nan, S8), "gen_shares contains NaN"),
        (lambda: gaas(S8[0], S8), "gen_shares must be a 2-D array"),
        (lambda: gaas(S8[:0], S8), "gen_shares is empty"),
    ],
)
def test_value_errors(call, fragment):
    with pytest.raises(ValueError) as excinfo:
        call()
    assert fragment in str(excinfo.value)


def test_retrieval_rejects_non_mapping():
    with pytest.raises(TypeError, match="mapping"):
        retrieval(X2, [X2])


# --------------------------------------------------------------------------- magnitudes


def magnitude_case(rng):
    return embeddings(rng, 5, d=16, offset=0.2), embeddings(rng, 7, d=16), full_candidates(rng, d=16)


@pytest.mark.parametrize("scale", [1e154, 1e300, 1e-170])
def test_scores_do_not_collapse_on_huge_or_tiny_embeddings(rng, scale):
    """Squared norms of 1e154-sized entries overflow: every cosine came out 0.0 and MMD^2 0.0."""
    gen, ref, candidates = magnitude_case(rng)
    big_gen, big_ref = gen * scale, ref * scale
    big_candidates = {name: arr * scale for name, arr in candidates.items()}
    with np.errstate(all="raise"):  # no silent overflow or underflow on the way either
        # against the plain-loop references on the unscaled inputs (all scale-invariant)
        assert diversity(big_gen) == pytest.approx(ref_diversity(gen), abs=1e-12)
        assert mmd2(big_gen, big_ref) == pytest.approx(ref_mmd2(gen, ref), abs=1e-12)
        assert mmd2(big_gen, reference.prepare_reference(big_ref)) == pytest.approx(ref_mmd2(gen, ref), abs=1e-12)
        expected_gap = ref_diversity(ref) - ref_diversity(gen)
        assert diversity_gap(big_gen, big_ref) == pytest.approx(expected_gap, abs=1e-12)
        assert dcsf(big_gen, big_ref) == pytest.approx(ref_mmd2(gen, ref) + 0.5 * max(0.0, expected_gap), abs=1e-12)
        ranks, sims = ref_retrieval(gen, candidates)
        result = retrieval(big_gen, big_candidates)
        assert result.ranks.tolist() == ranks
        for name in CANDIDATE_NAMES:
            assert result.sims[name] == pytest.approx(sims[name], abs=1e-12)
        prepared = {name: reference.prepare_reference(arr) for name, arr in big_candidates.items()}
        assert retrieval(big_gen, prepared).ranks.tolist() == ranks
    if scale > 1:  # CosSim's 1e-8 in the denominator gives tiny sets their (near-0) value by definition
        expected = ref_cos_sim(gen.tolist(), ref.tolist())
        assert cos_sim(big_gen, big_ref) == pytest.approx(expected, abs=1e-7)
        assert cos_sim(big_gen, reference.prepare_reference(big_ref)) == pytest.approx(expected, abs=1e-7)
        assert median_heuristic_gamma(gen * 1e150, ref * 1e150) * 1e300 == pytest.approx(ref_gamma(gen, ref), rel=1e-9)


def test_power_of_two_rescaling_is_exact(rng):
    """The guard divides by a power of two: huge inputs give bit-identical scores, ordinary ones untouched."""
    gen, ref, candidates = magnitude_case(rng)
    k = 2.0**600
    assert diversity(gen * k) == diversity(gen)
    assert mmd2(gen * k, ref * k) == mmd2(gen, ref)
    assert dcsf(gen * k, ref * k) == dcsf(gen, ref)
    assert retrieval(gen * k, {n: a * k for n, a in candidates.items()}).sims == retrieval(gen, candidates).sims


def test_mmd2_refuses_a_gamma_it_cannot_apply_to_huge_embeddings(rng):
    gen, ref, _ = magnitude_case(rng)
    with pytest.raises(ValueError, match="gamma=1.0 cannot be applied"):
        mmd2(gen * 1e154, ref * 1e154, gamma=1.0)
    assert mmd2(gen * 2.0**500, ref * 2.0**500, gamma=0.01 * 2.0**-1000) == mmd2(gen, ref, gamma=0.01)


# --------------------------------------------------------------------------- packaging


@pytest.mark.parametrize("module", [panel, set_fidelity, composition, retrieval_module, reference])
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_public_api_and_no_heavy_imports():
    assert set(metrics.__all__) >= {
        "cos_sim", "diversity", "mmd2", "mmd2_with_reason", "dcsf", "diversity_gap", "gaas",
        "retrieval", "RetrievalResult", "CANDIDATE_NAMES", "SEMANTIC_GROUPS", "GAAS_GROUPS",
        "PreparedReference", "prepare_reference", "SetFidelity", "set_fidelity",
    }
    code = (
        "import sys, geofidelity_bench.metrics\n"
        "heavy = ('torch', 'evaluate', 'pandas', 'gradio', 'datasets')\n"
        "heavy = [m for m in heavy if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_error_messages_name_the_argument():
    """What a wrong call reads: which argument, what is expected (kills message mutants of mutation testing)."""
    import re

    gen = np.eye(3)[:2]
    with pytest.raises(TypeError, match=r"^candidates must be a mapping from candidate name to gallery embeddings; "
                                        r"got list$"):
        retrieval(gen, [[1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match=re.escape(", ".join(CANDIDATE_NAMES)) + "$"):
        retrieval(gen, {"target": np.eye(3), "nearby": np.eye(3)})
    with pytest.raises(ValueError, match=r"^candidates must include 'target' \(the target block's gallery\)$"):
        retrieval(gen, {"random_city": np.eye(3)})
    for value in (np.ones((2, 4)), reference.prepare_reference(np.ones((2, 4)))):
        with pytest.raises(ValueError, match=r"^gen and candidates\['random_city'\] have different embedding"):
            retrieval(gen, {"target": np.eye(3), "random_city": value})
    with pytest.raises(ValueError, match=r"^gen could not be read"):
        diversity_gap([["a", "b"]], np.eye(2))
    with pytest.raises(ValueError, match=r"^ref could not be read"):
        diversity_gap(np.eye(2), [["a", "b"]])
    assert mmd2_with_reason([[0.0]], [[1.0], [2.0]])[1] == "gen has 1 row; MMD^2 needs at least 2 rows in each set"


# --------------------------------------------------------------------------- mutation-testing survivors (run 2)


def test_gamma_out_of_float64_range_is_inf_or_zero_under_strict_float_errors(rng):
    """A median-heuristic gamma beyond float64 comes back as inf / 0.0, not a FloatingPointError.

    The user's numpy error settings must not turn the documented inf / 0 into an exception.
    """
    gen, ref, _ = magnitude_case(rng)
    gamma0 = ref_gamma(gen, ref)  # the gamma of the unscaled embeddings
    # scaling the embeddings by s scales gamma by s**-2: 1e-300 -> gamma0 * 1e600, 1e300 -> gamma0 * 1e-600
    assert math.log10(gamma0) + 600 > 309 and math.log10(gamma0) - 600 < -324  # beyond float64 both ways
    with np.errstate(all="raise"):
        assert median_heuristic_gamma(gen * 1e-300, ref * 1e-300) == math.inf
        assert median_heuristic_gamma(gen * 1e300, ref * 1e300) == 0.0


@pytest.mark.parametrize("scale,gamma", [(1e300, 1.0), (1e-200, 1e-300)])
def test_mmd2_unappliable_gamma_is_a_value_error_under_strict_float_errors(rng, scale, gamma):
    """gamma * scale**2 overflows (huge embeddings) or underflows to 0 (tiny ones): a ValueError
    that says what to do, whatever numpy's error settings, and never a silent MMD^2 with gamma 0."""
    gen, ref, _ = magnitude_case(rng)
    with np.errstate(all="raise"):
        with pytest.raises(ValueError, match=rf"^gamma={gamma!r} cannot be applied to embeddings of magnitude about "
                                             r"2\*\*-?\d+: the kernel values are not representable in float64; "
                                             r"rescale the embeddings or use gamma=None$"):
            mmd2_with_reason(gen * scale, ref * scale, gamma=gamma)


def test_normalized_hill_uniform_is_one_and_never_above():
    """Uniform over all |A| options is D = 1, and D never leaves [0, 1] (docs/benchmark.md section 9)
    even where exp(H) rounds a little above |A| in float64 (n = 5, 9, 11, 12, ...)."""
    for n in range(2, 41):
        d = normalized_hill([7] * n, n)
        assert d == pytest.approx(1.0, abs=1e-12) and 0.0 <= d <= 1.0, n


def test_normalized_hill_accepts_an_integral_float_option_count():
    """|A| given as 4.0 (e.g. read from JSON) is the integer 4."""
    counts = [3, 1, 0, 0]
    expected = (4 / 3 ** 0.75 - 1) / 3  # hand-worked: p = (3/4, 1/4), exp(H) = 4 / 3**(3/4)
    assert normalized_hill(counts, 4.0) == pytest.approx(expected, abs=1e-12)
    assert normalized_hill(counts, np.float64(4.0)) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    "counts,message",
    [
        ([1.0, math.inf], "counts contains NaN or inf"),
        ([1, -1], "counts must be non-negative"),
        ([0, 0], "counts are all zero: no answers, so the diversity is undefined"),
    ],
)
def test_normalized_hill_error_messages(counts, message):
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        normalized_hill(counts, 3)


def test_gaas_column_error_lists_the_groups_in_order():
    with pytest.raises(ValueError, match=re.escape(
        "gen_shares has 7 columns; GAAS needs 8 (road, sidewalk, building, vehicle, vegetation, sky, pole, sign)"
    ) + "$"):
        gaas(np.full((2, 7), 0.1), np.full((2, 8), 0.1))


def test_gaas_accepts_shares_exactly_1e6_outside_the_unit_interval():
    """docs/benchmark.md section 5: shares may stray *at most* 1e-6 outside [0, 1] (then clipped)."""
    shares = np.full((3, 8), 0.1)
    shares[0, 0] = 1.0 + 1e-6
    shares[1, 1] = -1e-6
    clipped = np.clip(shares, 0.0, 1.0)
    assert gaas(shares, clipped) == 0.0
    assert gaas(clipped, shares) == 0.0
    for bad in (1.0 + 1e-6 + 1e-12, -1e-6 - 1e-12):
        off = shares.copy()
        off[2, 2] = bad
        with pytest.raises(ValueError, match="gen_shares has pixel shares outside"):
            gaas(off, clipped)


def test_duplicate_threshold_is_relative_to_the_pair_scale(rng):
    """docs/benchmark.md section 5: a squared distance at or below 1e-12 * (|x_i|^2 + |x_j|^2) counts as 0;
    the threshold scales with the data, so tiny and large embeddings (with repeated images) keep the
    median-heuristic gamma of the plain-loop reference."""
    x = embeddings(rng, 7, d=16, offset=0.3)
    gen, ref = x[[0, 1, 2, 0, 1, 0]], x[[2, 3, 4, 5, 6, 3, 3]]  # duplicates within and across the sets
    for s in (1e-4, 3e4):
        assert median_heuristic_gamma(gen * s, ref * s) == pytest.approx(ref_gamma(gen * s, ref * s), rel=1e-9)
        prepared = reference.prepare_reference(ref * s)
        assert median_heuristic_gamma(gen * s, prepared) == pytest.approx(ref_gamma(gen * s, ref * s), rel=1e-9)


def test_clamped_sq_dists_zeroes_a_distance_exactly_at_the_threshold():
    """The boundary itself counts as a duplicate ("at or below"), built with exact dyadic arithmetic:
    a = (B, 2**-20), b = (B, 0), so |a - b|^2 = 2**-40, and |a|^2 + |b|^2 = S with 1e-12 * S == 2**-40."""
    from fractions import Fraction

    target = 2.0**-40
    s = 0.9094947017729282
    assert reference.DUPLICATE_RTOL * s == target  # S is chosen so the threshold is exactly 2**-40
    # |B|^2 = (S - 2**-40) / 2 as a sum of squares of powers of two (bit 2**-k: (2**-(k/2))^2, or
    # two (2**-((k+1)/2))^2 when k is odd), so every product and partial sum below is exact
    rest, comps, k = (Fraction(s) - Fraction(target)) / 2, [], 1
    while rest:
        if rest >= Fraction(1, 2**k):
            rest -= Fraction(1, 2**k)
            comps += [2.0 ** -(k // 2)] if k % 2 == 0 else [2.0 ** -((k + 1) // 2)] * 2
        k += 1
    for delta, expected in ((2.0**-20, 0.0), (2.0**-19, 4 * target)):  # at the threshold; 4x above it
        a, b = np.array([comps + [delta]]), np.array([comps + [0.0]])
        sqa, sqb = np.einsum("ij,ij->i", a, a), np.einsum("ij,ij->i", b, b)
        assert Fraction(sqa[0]) + Fraction(sqb[0]) == Fraction(s) + Fraction(delta) ** 2 - Fraction(target)
        assert sum((Fraction(p) - Fraction(q)) ** 2 for p, q in zip(a[0], b[0])) == Fraction(delta) ** 2
        assert reference.clamped_sq_dists(a, sqa, b, sqb).tolist() == [[expected]]


def test_diversity_of_antipodal_rows_is_two_and_never_above(rng):
    """cos(x, -x) = -1, so Div = 2, the top of its documented range [0, 2] (docs/benchmark.md section 5);
    for some directions the unit rows' squared norms round above 1 and the clamp must hold it at 2."""
    for _ in range(200):
        x = rng.normal(size=8)
        value = diversity(np.stack([x, -x]))
        assert value == pytest.approx(2.0, abs=1e-12) and value <= 2.0
        assert reference.prepare_reference(np.stack([x, -x])).diversity <= 2.0


def test_panel_vectors_of_near_max_float_galleries(rng):
    """A gallery whose raw sum overflows float64 (entries near 2**1024) keeps its panel vector: the
    rows are rescaled by a power of two first, so retrieval is bit-identical to the unscaled gallery."""
    gen = embeddings(rng, 4, d=16)
    candidates = {name: 8.0 + rng.normal(size=(9, 16)) for name in CANDIDATE_NAMES}
    huge = {name: arr * 2.0**1020 for name, arr in candidates.items()}
    with np.errstate(over="ignore"):
        assert all(np.isfinite(arr).all() and np.isinf(arr.sum(axis=0)).any() for arr in huge.values())
    expected = retrieval(gen, candidates)
    result = retrieval(gen, huge)
    assert result.sims == expected.sims and result.ranks.tolist() == expected.ranks.tolist()
    assert reference.prepare_reference(huge["target"]).panel_vector.tolist() == pytest.approx(
        (candidates["target"].mean(axis=0) / np.linalg.norm(candidates["target"].mean(axis=0))).tolist(), abs=1e-15
    )


def test_prepared_reference_does_not_alias_an_array_subclass_or_view(rng):
    """np.asarray of an ndarray subclass is a view of the caller's data (not the caller's object
    itself): it is copied too, so changing the caller's array later leaves the prepared gallery alone."""

    class Tagged(np.ndarray):
        pass

    base = embeddings(rng, 5, d=8)
    before = base.copy()
    p = metrics.prepare_reference(base.view(Tagged))
    base[0, 0] = 99.0
    assert base.flags.writeable
    assert p.rows.tolist() == before.tolist()
    assert p.mean.tolist() == pytest.approx(before.mean(axis=0).tolist(), abs=1e-15)


@pytest.mark.parametrize("k", [500, -500])
def test_prepared_reference_raw_scale_fields_of_rescaled_galleries(rng, k):
    """Galleries outside the safe magnitude range are computed on rows / 2**e and scaled back: the
    recorded squared norms and pair distances are those of the raw rows (a power of two is exact)."""
    x = embeddings(rng, 6, d=8, offset=0.5)
    p, p_big = reference.prepare_reference(x), reference.prepare_reference(x * 2.0**k)
    assert p_big.sq_norms.tolist() == (p.sq_norms * 2.0 ** (2 * k)).tolist()
    assert p_big.pair_sq_dists.tolist() == (p.pair_sq_dists * 2.0 ** (2 * k)).tolist()
    assert p_big.centered.tolist() == (p.centered * 2.0**k).tolist()
    assert p_big.mean_norm == p.mean_norm * 2.0**k
    # and p's own fields against plain loops on the unscaled rows
    centered = x - x.mean(axis=0)
    assert p.sq_norms.tolist() == pytest.approx([float(np.sum(c * c)) for c in centered], rel=1e-12)
    pairs = [ref_sq_dist(x[i], x[j]) for i, j in zip(*np.triu_indices(6, 1))]
    assert p.pair_sq_dists.tolist() == pytest.approx(pairs, rel=1e-9)


def test_negative_dominated_huge_sets_are_rescaled_by_their_largest_magnitude(rng):
    """The rescaling looks at the largest MAGNITUDE, also when it is a negative entry: a set of
    entries near -1e300 whose maximum is 0.0 still scores like the unscaled set."""
    gen, ref = embeddings(rng, 5, d=16, offset=-6.0), embeddings(rng, 7, d=16, offset=-6.0)
    gen[0, 0] = ref[0, 0] = 0.0  # the largest *value* is 0
    big_gen, big_ref = gen * 1e300, ref * 1e300
    assert reference.prepare_reference(big_ref).max_abs == float(np.abs(big_ref).max())
    with np.errstate(all="raise"):
        assert mmd2(big_gen, big_ref) == pytest.approx(ref_mmd2(gen, ref), abs=1e-12)
        assert median_heuristic_gamma(gen * 1e150, ref * 1e150) * 1e300 == pytest.approx(ref_gamma(gen, ref), rel=1e-9)


def test_cos_sim_of_tiny_sets_keeps_its_epsilon(rng):
    """CosSim's 1e-8 in the denominator (docs/benchmark.md section 5) is not rescaled away: for means of size
    1e-170 the dot product is about 1e-340, so CosSim is 0 to within 1e-300 (not the cosine of the directions)."""
    gen, ref = embeddings(rng, 5, d=16, offset=1.0), embeddings(rng, 7, d=16, offset=1.0)
    assert cos_sim(gen, ref) > 0.5  # the directions agree: a large cosine at ordinary scale
    assert abs(cos_sim(gen * 1e-170, ref * 1e-170)) < 1e-300
    assert abs(cos_sim(gen * 1e-170, reference.prepare_reference(ref * 1e-170))) < 1e-300


@pytest.mark.parametrize("scale", [1e-158, 1e-150])
def test_diversity_of_rows_whose_squared_norms_are_subnormal(rng, scale):
    """Rows of size 1e-158 have squared norms near 1e-314 (subnormal, few significant bits): they are
    rescaled before normalizing, so Div matches the plain-loop reference on the unscaled rows."""
    x = embeddings(rng, 6, d=16, offset=0.3)
    assert diversity(x * scale) == pytest.approx(ref_diversity(x), abs=1e-12)
    assert reference.prepare_reference(x * scale).diversity == pytest.approx(ref_diversity(x), abs=1e-12)


def test_all_zero_rows_have_cosine_zero_with_every_row():
    """docs/benchmark.md section 5: an all-zero row has cosine 0 with every row (so distance 1), no NaN."""
    x = [[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]]
    # pairs: (0, 1) -> 1, (0, 2) -> 1, (1, 2) orthogonal -> 1
    assert diversity(x) == 1.0
    assert diversity([[0.0, 0.0], [3.0, 4.0], [3.0, 4.0]]) == pytest.approx(2 / 3, abs=1e-15)  # 1, 1, 0
    result = retrieval([[0.0, 0.0], [1.0, 0.0]], {"target": [[1.0, 0.0]], "random_city": [[0.0, 1.0]]})
    assert result.per_image_sims[:, CANDIDATE_NAMES.index("target")].tolist() == [0.0, 1.0]


@pytest.mark.parametrize("scale", [1e150, 2.0**600])
def test_cos_sim_of_huge_sets_is_the_formula_on_raw_values(rng, scale):
    """The 1e-8 of CosSim is in raw units: on sets of size 1e150 it is negligible next to |g||r| ~ 1e292,
    so CosSim is the plain cosine of the means, also when the means are far smaller than the entries
    (the rescaling for overflow must not turn the 1e-8 into a relative error of the rescaled means)."""
    def centered_with_small_mean(n, direction):
        x = rng.normal(size=(n, 8))
        return x - x.mean(axis=0) + 1e-4 * direction

    gen = centered_with_small_mean(5, np.arange(1.0, 9.0))
    ref = centered_with_small_mean(7, np.arange(8.0, 0.0, -1.0))
    mg, mr = gen.mean(axis=0), ref.mean(axis=0)
    plain = float(np.dot(mg, mr) / (np.linalg.norm(mg) * np.linalg.norm(mr)))  # 1e-8 / 1e292 is nothing
    assert cos_sim(gen * scale, ref * scale) == pytest.approx(plain, rel=1e-9)
    assert cos_sim(gen * scale, reference.prepare_reference(ref * scale)) == pytest.approx(plain, rel=1e-9)


@pytest.mark.parametrize("scale", [8e307, 1.7e308])
def test_cos_sim_with_a_prepared_gallery_near_the_float64_limit(scale):
    """A prepared gallery whose entries are close to the largest float64: its rows are divided by a power of
    two before the means meet (else the dot product overflows), as for an array gallery."""
    rng = np.random.default_rng(41)
    gen = rng.normal(size=(5, 8))
    gen = gen / np.abs(gen).max() * scale
    gallery = np.full((3, 8), scale)
    mg, mr = (gen / 2.0**1000).mean(axis=0), (gallery / 2.0**1000).mean(axis=0)  # exact: a power of two
    plain = float(np.dot(mg, mr) / (np.linalg.norm(mg) * np.linalg.norm(mr)))  # the 1e-8 is nothing here
    assert cos_sim(gen, reference.prepare_reference(gallery)) == pytest.approx(plain, rel=1e-12)
    assert cos_sim(gen, gallery) == pytest.approx(plain, rel=1e-12)
