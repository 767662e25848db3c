"""Metrics of GeoFidelity-Bench (docs/benchmark.md section 5, Metrics): pure numpy/scipy functions on arrays.

Panel similarity (:func:`cos_sim`), set fidelity (:func:`mmd2`, :func:`diversity`,
:func:`diversity_gap`, :func:`dcsf`), scene composition (:func:`gaas`) and block retrieval
(:func:`retrieval`). Inputs are raw embeddings of shape (images, dim) (or per-image group
shares for GAAS); every function validates them and raises ``ValueError`` with a message
naming the argument. Only :func:`mmd2` returns NaN (a set with fewer than 2 rows);
:func:`mmd2_with_reason` also says why.

For many comparisons against the same galleries: :func:`set_fidelity` computes MMD^2, both
diversities, the gap and DCSF in one pass, and :func:`prepare_reference` turns a gallery into
a :class:`PreparedReference` that every ``ref`` argument (and every retrieval candidate)
accepts in place of the array, with the same results, so the gallery's own work (validation,
mean, panel vector, Div, its pairwise distances) is done once.

This package imports nothing heavier than numpy, so the evaluate module and the demo app can
use it without torch.
"""

from __future__ import annotations

from .composition import GAAS_GROUPS, SEMANTIC_GROUPS, gaas
from .hill import normalized_hill
from .panel import cos_sim, diversity
from .reference import PreparedReference, prepare_reference
from .retrieval import CANDIDATE_NAMES, RetrievalChance, RetrievalResult, retrieval, retrieval_chance
from .set_fidelity import (
    SetFidelity,
    dcsf,
    diversity_gap,
    median_heuristic_gamma,
    mmd2,
    mmd2_with_reason,
    set_fidelity,
)

__all__ = [
    "CANDIDATE_NAMES",
    "GAAS_GROUPS",
    "SEMANTIC_GROUPS",
    "PreparedReference",
    "RetrievalChance",
    "RetrievalResult",
    "SetFidelity",
    "cos_sim",
    "dcsf",
    "diversity",
    "diversity_gap",
    "gaas",
    "median_heuristic_gamma",
    "mmd2",
    "mmd2_with_reason",
    "normalized_hill",
    "prepare_reference",
    "retrieval",
    "retrieval_chance",
    "set_fidelity",
]
