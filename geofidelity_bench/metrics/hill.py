"""GeoDiv diversity score (docs/benchmark.md section 9, GeoDiv): the normalized Hill number of order 1.

Pure numpy. The answer bookkeeping (which answers count, "none of the above", coverage) lives
in :mod:`geofidelity_bench.geodiv.diversity`; this module only turns answer counts into D.
"""

from __future__ import annotations

import math
import numbers
from typing import Mapping

import numpy as np
from numpy.typing import ArrayLike


def normalized_hill(counts: ArrayLike | Mapping[object, float], n_options: int) -> float:
    r"""Normalized Hill number of order 1 of an answer distribution.

    .. math::
        D = \frac{\exp(H(p)) - 1}{|A| - 1}, \qquad H(p) = -\sum_{a:\,p_a > 0} p_a \ln p_a,
        \qquad p_a = \frac{c_a}{\sum_b c_b}

    ``exp(H)`` is the effective number of answers (1 when every image got the same answer,
    ``|A|`` when the answers are spread uniformly over all options), so D is 0 for a one-hot
    distribution and 1 for the uniform one over the *whole* option set: options nobody chose
    still count in ``|A|`` (pass them as zeros, or leave them out and give ``n_options``).

    Args:
        counts: how often each option was chosen: a 1-D array-like or a mapping option -> count.
            Non-negative and finite; they need not be integers (proportions give the same D).
            At most ``n_options`` entries; missing options are never-chosen ones.
        n_options: ``|A|``, the size of the full option set (an integer >= 2).

    Returns:
        D in [0, 1] as a Python float (clipped to [0, 1] against rounding).

    Raises:
        ValueError: ``n_options`` is not an integer >= 2; ``counts`` is not 1-D, is negative,
            non-finite, has more entries than ``n_options``; or every count is zero (no
            answers: the distribution is undefined, so there is no diversity to report).

    Example:
        >>> normalized_hill([5, 5, 5, 5], 4)          # uniform over all options
        1.0
        >>> normalized_hill({"brick": 7}, 4)          # every image gave the same answer
        0.0
        >>> round(normalized_hill([3, 3, 0, 0], 4), 6)  # 2 of 4 options, evenly: (2 - 1) / 3
        0.333333
    """
    if isinstance(n_options, bool) or not isinstance(n_options, numbers.Integral):
        if isinstance(n_options, numbers.Real) and not isinstance(n_options, bool) and float(n_options).is_integer():
            n_options = int(n_options)
        else:
            raise ValueError(f"n_options must be an integer >= 2 (the size of the option set), got {n_options!r}")
    n_options = int(n_options)
    if n_options < 2:
        raise ValueError(f"n_options must be >= 2 (the size of the option set), got {n_options}")
    values = list(counts.values()) if isinstance(counts, Mapping) else counts
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"counts could not be read as numbers: {err}") from None
    if arr.ndim != 1:
        raise ValueError(f"counts must be 1-D (one count per option), got shape {arr.shape}")
    if arr.size > n_options:
        raise ValueError(f"counts has {arr.size} entries but the option set has only n_options={n_options}")
    if not np.isfinite(arr).all():
        raise ValueError("counts contains NaN or inf")
    if (arr < 0).any():
        raise ValueError("counts must be non-negative")
    total = float(arr.sum())
    if total <= 0.0:
        raise ValueError("counts are all zero: no answers, so the diversity is undefined")
    p = arr[arr > 0] / total
    entropy = float(-(p * np.log(p)).sum())
    d = (math.exp(entropy) - 1.0) / (n_options - 1)
    return float(min(1.0, max(0.0, d)))


__all__ = ["normalized_hill"]
