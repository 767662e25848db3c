"""Block retrieval: does each generated image pick its target block out of a line-up of
negative blocks? Also the similarity margins (docs/benchmark.md section 5, Metrics).

Candidates are identified by NAME, never by position, so a missing negative leaves a NaN in
its own column and shifts nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from ._validation import as_matrix, check_same_dim, unit_rows
from .reference import PreparedReference, panel_vector

#: Every candidate role, in the column order of ``RetrievalResult.per_image_sims``.
CANDIDATE_NAMES = ("target", "same_neighborhood", "same_city", "same_driving_side", "random_city")
#: The negatives that make up the local margin (same-city negatives).
LOCAL_NEGATIVES = ("same_neighborhood", "same_city")
#: A negative whose similarity is within this of the target's counts as a tie. Identical
#: galleries (a block used for two roles) must tie even when rounding differs in the last bit
#: (numpy's summation order can depend on memory alignment); cosines live in [-1, 1], so this
#: is far below any real difference.
TIE_TOLERANCE = 1e-12


@dataclass(frozen=True, eq=False)
class RetrievalResult:
    """What :func:`retrieval` returns for one generated panel.

    Attributes:
        accuracy: share of generated images whose target rank is 0.
        mrr: mean reciprocal rank, mean of 1 / (rank + 1).
        ranks: per generated image, the number of other candidates whose similarity is >=
            the target's (ties count against the target); int array of shape (n,).
        sims: for EVERY name in :data:`CANDIDATE_NAMES`, the mean over generated images of
            the similarity to that candidate; NaN for an absent candidate.
        per_image_sims: shape (n, len(CANDIDATE_NAMES)), columns in :data:`CANDIDATE_NAMES`
            order, NaN columns for absent candidates.
        best_candidate: per generated image, the candidate it matched best; ``"target"``
            exactly when its rank is 0 (ties go to the negative, first in
            :data:`CANDIDATE_NAMES` order).
        local_margin: ``sims['target']`` minus the larger of the existing same-neighborhood
            and same-city similarities; NaN if neither exists.
        strongest_margin: ``sims['target']`` minus the largest existing negative similarity;
            NaN if there is no negative.
    """

    accuracy: float
    mrr: float
    ranks: np.ndarray
    sims: dict[str, float]
    per_image_sims: np.ndarray
    best_candidate: list[str]
    local_margin: float
    strongest_margin: float

    def as_row(self) -> dict[str, float]:
        """Flat scalars for a result table: accuracy, mrr, ``sim_<name>`` for every candidate
        name (the column names of docs/benchmark.md section 5), local_margin, strongest_margin."""
        row = {"accuracy": self.accuracy, "mrr": self.mrr}
        row.update({f"sim_{name}": self.sims[name] for name in CANDIDATE_NAMES})
        row["local_margin"] = self.local_margin
        row["strongest_margin"] = self.strongest_margin
        return row


def _candidate_vectors(
    candidates: Mapping[str, ArrayLike | PreparedReference], gen: np.ndarray
) -> dict[str, np.ndarray]:
    """Validated candidates -> their panel vectors, in :data:`CANDIDATE_NAMES` order."""
    if not isinstance(candidates, Mapping):
        raise TypeError(
            "candidates must be a mapping from candidate name to gallery embeddings; got "
            f"{type(candidates).__name__}"
        )
    for name in candidates:
        if name not in CANDIDATE_NAMES:
            raise ValueError(
                f"unknown candidate {name!r} in candidates; names must come from "
                f"{', '.join(CANDIDATE_NAMES)}"
            )
    if "target" not in candidates:
        raise ValueError("candidates must include 'target' (the target block's gallery)")
    vectors = {}
    for name in CANDIDATE_NAMES:
        if name in candidates:
            label = f"candidates[{name!r}]"
            value = candidates[name]
            if isinstance(value, PreparedReference):
                check_same_dim(gen, "gen", value.rows, label)
                vectors[name] = value.panel_vector
            else:
                arr = as_matrix(value, label)
                check_same_dim(gen, "gen", arr, label)
                vectors[name] = panel_vector(arr)
    return vectors


def retrieval(
    gen: ArrayLike, candidates: Mapping[str, ArrayLike | PreparedReference]
) -> RetrievalResult:
    r"""Rank the target block among the candidate blocks for every generated image.

    Each candidate panel c becomes :math:`p_c = \bar e_c / \lVert \bar e_c \rVert` (mean of
    its RAW gallery embeddings, then L2-normalized); each generated embedding becomes
    :math:`u_i = g_i / \lVert g_i \rVert`; similarity :math:`s_{ic} = u_i \cdot p_c`. Then

    .. math::
        \mathrm{rank}_i = \#\{c \ne \mathrm{target} : s_{ic} \ge s_{i,\mathrm{target}}\},\quad
        \mathrm{accuracy} = \tfrac1n \sum_i [\mathrm{rank}_i = 0],\quad
        \mathrm{MRR} = \tfrac1n \sum_i \frac{1}{\mathrm{rank}_i + 1}

    Ties count AGAINST the target (a negative as similar as the target outranks it), so an
    uninformative generator cannot score by ties; "as similar" means within
    :data:`TIE_TOLERANCE`. A negative present under two names (one block used for two roles)
    is two candidates and counts twice. Rescaling any embeddings changes nothing. An all-zero
    vector has similarity 0 with everything.

    Args:
        gen: generated embeddings, shape (n, d), n >= 1.
        candidates: candidate name -> that block's RAW gallery embeddings (m_c, d), or a
            :class:`~geofidelity_bench.metrics.reference.PreparedReference` of them (its
            panel vector is reused; same result). Names come from :data:`CANDIDATE_NAMES`;
            ``"target"`` is required, missing negatives are simply left out.

    Returns:
        A :class:`RetrievalResult`.

    Raises:
        ValueError: on invalid embeddings, mismatched dimensions, a missing ``"target"`` or
            an unknown candidate name.
        TypeError: if ``candidates`` is not a mapping.

    Example:
        >>> gen = [[1.0, 0.1], [0.2, 1.0]]
        >>> result = retrieval(gen, {"target": [[1.0, 0.0], [0.9, 0.1]],
        ...                          "random_city": [[0.0, 1.0]]})
        >>> result.ranks.tolist(), result.accuracy, result.mrr
        ([0, 1], 0.5, 0.75)
        >>> result.best_candidate
        ['target', 'random_city']
        >>> math.isnan(result.sims["same_city"]), math.isnan(result.local_margin)
        (True, True)
    """
    g = as_matrix(gen, "gen")
    panels = _candidate_vectors(candidates, g)
    present = list(panels)  # CANDIDATE_NAMES order, target first
    sims = unit_rows(g) @ np.array(list(panels.values())).T  # (n, k)

    target = sims[:, 0]
    negatives = sims[:, 1:]
    beats = negatives >= (target[:, None] - TIE_TOLERANCE)
    ranks = beats.sum(axis=1).astype(np.int64)

    if negatives.shape[1]:
        top_negative = np.argmax(negatives, axis=1)  # first in CANDIDATE_NAMES order on ties
        best = [
            present[1 + j] if r else "target"
            for j, r in zip(top_negative.tolist(), ranks.tolist())
        ]
    else:
        best = ["target"] * g.shape[0]

    per_image = np.full((g.shape[0], len(CANDIDATE_NAMES)), np.nan)
    per_image[:, [CANDIDATE_NAMES.index(name) for name in present]] = sims
    # Column means (NaN exactly for the absent candidates).
    mean_sims = dict(zip(CANDIDATE_NAMES, (per_image.sum(axis=0) / g.shape[0]).tolist()))

    local = [mean_sims[name] for name in LOCAL_NEGATIVES if name in panels]
    strongest = [mean_sims[name] for name in present[1:]]
    ranks.setflags(write=False)
    per_image.setflags(write=False)
    return RetrievalResult(
        accuracy=int(np.count_nonzero(ranks == 0)) / ranks.size,
        mrr=float((1.0 / (ranks + 1.0)).sum() / ranks.size),
        ranks=ranks,
        sims=mean_sims,
        per_image_sims=per_image,
        best_candidate=best,
        local_margin=mean_sims["target"] - max(local) if local else math.nan,
        strongest_margin=mean_sims["target"] - max(strongest) if strongest else math.nan,
    )


@dataclass(frozen=True)
class RetrievalChance:
    """The retrieval scores of an uninformative ranking, under :func:`retrieval`'s own candidates and tie rule.

    Attributes:
        n_candidates: the candidates :func:`retrieval` counts: the target plus one per negative
            role present (a block filling two roles counts twice).
        n_distinct: the distinct candidate galleries (the target and the distinct negative blocks).
        accuracy: the expected retrieval accuracy, ``1 / n_distinct`` (0 when a role names the
            target block itself: that candidate ties with the target on every image).
        mrr: the expected MRR.
    """

    n_candidates: int
    n_distinct: int
    accuracy: float
    mrr: float


def retrieval_chance(candidates: Mapping[str, object]) -> RetrievalChance:
    r"""Chance level of :func:`retrieval` for one target block (docs/benchmark.md section 5, Metrics).

    An image that carries no information about the place orders the distinct candidate galleries
    uniformly at random. A block that fills two negative roles is two candidates with the SAME
    panel vector: they always tie with each other, so they are above the target together or
    below it together, and a tie counts against the target. With ``D`` distinct galleries
    (target included) and multiplicity :math:`m_b` of each distinct negative block b, the target
    has ``j`` distinct negatives above it with probability ``1/D`` for each ``j = 0..D-1``, every
    ``j``-subset ``S`` equally likely, and then ``rank = sum_{b in S} m_b``. Hence

    .. math::
        \mathrm{acc} = \frac1D,\qquad
        \mathrm{MRR} = \frac1D \sum_{j=0}^{D-1} \binom{D-1}{j}^{-1}
                       \sum_{|S| = j} \frac{1}{1 + \sum_{b \in S} m_b}

    which is :math:`H_D / D` when every negative fills one role.

    Args:
        candidates: candidate name -> what identifies its gallery (the block id); names come
            from :data:`CANDIDATE_NAMES`, ``"target"`` is required, absent or ``None`` roles are
            left out. Two roles naming the same block are one gallery in two roles.

    Example:
        >>> c = retrieval_chance({"target": "a", "same_neighborhood": "b", "same_city": "b",
        ...                       "random_city": "c"})
        >>> c.n_candidates, c.n_distinct, round(c.accuracy, 4), round(c.mrr, 4)
        (4, 3, 0.3333, 0.5556)
    """
    from itertools import combinations

    unknown = [name for name in candidates if name not in CANDIDATE_NAMES]
    if unknown:
        raise ValueError(f"unknown candidate(s) {unknown}; names must come from {', '.join(CANDIDATE_NAMES)}")
    if candidates.get("target") is None:
        raise ValueError("candidates must include 'target' (the target block)")
    target = candidates["target"]
    counts: dict[object, int] = {}
    for name in CANDIDATE_NAMES[1:]:
        block = candidates.get(name)
        if block is not None:
            counts[block] = counts.get(block, 0) + 1
    # A role naming the target's own gallery ties with the target on every image: always above it.
    always_above = counts.pop(target, 0)
    multiplicities = list(counts.values())
    d = len(multiplicities) + 1
    mrr = 0.0
    for j in range(d):
        subsets = list(combinations(multiplicities, j))
        mrr += sum(1.0 / (1 + always_above + sum(s)) for s in subsets) / len(subsets)
    return RetrievalChance(n_candidates=1 + always_above + sum(multiplicities), n_distinct=d,
                           accuracy=0.0 if always_above else 1.0 / d, mrr=mrr / d)
