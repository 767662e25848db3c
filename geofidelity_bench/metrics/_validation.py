"""Input checks shared by the metric functions.

Every public metric converts its inputs through :func:`as_matrix`, so all of them accept
the same things (nested lists, numpy arrays, anything with ``__array__``) and reject the same
things with a message that names the argument and the problem. Checks raise ``ValueError``;
the evaluation layer catches that one exception type.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def as_matrix(x: ArrayLike, name: str) -> np.ndarray:
    """Return ``x`` as a finite, non-empty, 2-D float64 array.

    Args:
        x: array-like of shape (rows, columns).
        name: the argument name used in error messages (``"gen"``, ``"candidates['target']"``).

    Raises:
        ValueError: if ``x`` cannot be read as real numbers, is not 2-D, has no rows or no
            columns, or holds NaN or inf.
    """
    try:
        raw = np.asarray(x)
    except (TypeError, ValueError) as exc:  # ragged nested lists, for example
        raise ValueError(f"{name} could not be read as a numeric array: {exc}") from None
    if np.iscomplexobj(raw):
        raise ValueError(f"{name} holds complex numbers; expected real-valued embeddings")
    try:
        arr = raw.astype(np.float64, copy=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} could not be read as a numeric array: {exc}") from None
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array of shape (rows, dim); got {arr.ndim}-D with shape "
            f"{arr.shape}"
        )
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape})")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or inf values")
    return arr


def check_same_dim(a: np.ndarray, a_name: str, b: np.ndarray, b_name: str) -> None:
    """Raise ``ValueError`` unless ``a`` and ``b`` have the same number of columns."""
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"{a_name} and {b_name} have different embedding dimensions "
            f"({a.shape[1]} vs {b.shape[1]})"
        )


def require_rows(x: np.ndarray, name: str, minimum: int, purpose: str) -> None:
    """Raise ``ValueError`` unless ``x`` has at least ``minimum`` rows.

    The message reads like ``"gen has 1 row; diversity needs at least 2"``.
    """
    n = x.shape[0]
    if n < minimum:
        rows = "row" if n == 1 else "rows"
        raise ValueError(f"{name} has {n} {rows}; {purpose} needs at least {minimum}")


def unit_rows(x: np.ndarray) -> np.ndarray:
    """L2-normalize each row; an all-zero row stays all-zero (its cosines are 0).

    Exact normalization (no epsilon) keeps cosine-based results invariant to rescaling.
    """
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    return x / np.where(norms > 0.0, norms, 1.0)[:, None]
