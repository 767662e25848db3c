"""Input checks shared by the metric functions.

Every public metric converts its inputs through :func:`as_matrix`, so all of them accept
the same things (nested lists, numpy arrays, anything with ``__array__``) and reject the same
things with a message that names the argument and the problem. Checks raise ``ValueError``;
the evaluation layer catches that one exception type.
"""

from __future__ import annotations

import math

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


#: Magnitudes between 2**-SAFE_EXPONENT and 2**SAFE_EXPONENT (about 1e-144 to 1e144) square and
#: sum in float64 without overflow or underflow for any realistic embedding size. Inputs outside
#: are first rescaled by a power of two (exact, so no bit of an ordinary input's result changes):
#: without that, a squared norm of 1e154-sized entries is inf and every cosine came out 0.
SAFE_EXPONENT = 478


def max_abs(x: np.ndarray) -> float:
    """The largest magnitude in ``x`` (0.0 for an all-zero array)."""
    return max(float(x.max()), -float(x.min()))


def unsafe_exponent(magnitude: float, *, small: bool = True) -> int:
    """The binary exponent of ``magnitude`` when it lies outside the safe range, else 0.

    With ``small=False`` only too LARGE magnitudes count (for formulas whose epsilon gives tiny
    inputs their meaning, such as CosSim's). Dividing by ``2**e`` (:func:`rescaled`) brings
    the magnitude into [0.5, 1).
    """
    if magnitude == 0.0:
        return 0
    e = math.frexp(magnitude)[1]
    return e if e > SAFE_EXPONENT or (small and e < -SAFE_EXPONENT) else 0


def rescaled(x: np.ndarray, e: int) -> np.ndarray:
    """``x / 2**e`` (exact in floating point); ``x`` itself when ``e == 0``."""
    return np.ldexp(x, -e) if e else x


def unit_rows(x: np.ndarray) -> np.ndarray:
    """L2-normalize each row; an all-zero row stays all-zero (its cosines are 0).

    Exact normalization (no epsilon) keeps cosine-based results invariant to rescaling; rows
    whose squared norm would overflow or underflow are first rescaled by a power of two.
    """
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    unsafe = ~((norms > 2.0**-SAFE_EXPONENT) & (norms < 2.0**SAFE_EXPONENT))
    if unsafe.any():  # all-zero rows land here too and stay zero
        x = x.copy()
        top = np.abs(x[unsafe]).max(axis=1)
        exps = np.where(top > 0.0, np.frexp(top)[1], 0)
        x[unsafe] = np.ldexp(x[unsafe], -exps[:, None])
        norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    return x / np.where(norms > 0.0, norms, 1.0)[:, None]
