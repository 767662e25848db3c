"""Optional values -> Python values: one rule for what is missing and how a number is read.

Two conventions, chosen per call with ``text``:

* records (``text=False``, the default): values of this package's own Parquet/JSON records, as
  pandas or ``json`` give them back. Missing means ``None`` or a float NaN (and, for strings, a
  blank string); a present value goes through Python's ``str``/``float``/``int`` as it is, and a
  value they reject raises their own ``ValueError``/``TypeError`` (used by
  :mod:`geofidelity_bench.benchmark` when it reads a canonical benchmark).
* text (``text=True``): cells of someone else's CSV export (the published release). Values are
  stripped; missing also means one of :data:`NULL_WORDS` in any case (``""``, ``NA``, ``None``,
  ...); a present value that is not a number raises :class:`BadValue` naming the field; an
  integer may be written as an integral float (``"12.0"``, ``"1e3"``, how a float64 column
  writes it). Used by :mod:`geofidelity_bench.release_import`.

>>> opt_str("  Rue  "), opt_str("  Rue  ", text=True), opt_str("N/A"), opt_str("N/A", text=True)
('  Rue  ', 'Rue', 'N/A', None)
>>> opt_float(float("nan")), opt_float(" 2.5 ", "lat", text=True), opt_float("null", "lat", text=True)
(None, 2.5, None)
>>> opt_int(3.7), opt_int("1e3", "way_id", text=True)
(3, 1000)
>>> opt_int("3.7", "way_id", text=True)
Traceback (most recent call last):
...
geofidelity_bench.values.BadValue: way_id='3.7' is not an integer
"""

from __future__ import annotations

import math
from typing import Any

#: Spellings of a missing value in a CSV export (compared lower case, after stripping).
NULL_WORDS = frozenset({"", "nan", "none", "null", "na", "n/a"})


class BadValue(ValueError):
    """A value that is present but cannot be read as the type asked for; the message names the field."""


def is_missing(value: Any) -> bool:
    """``None`` or a float NaN (what pandas gives for an empty cell)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def opt_str(value: Any, *, text: bool = False) -> str | None:
    """The value as a string, or None when it is missing.

    Records: None, NaN and blank strings are missing; any other string is returned as it is
    (not stripped). Text: the value is stripped, and missing also when it is one of
    :data:`NULL_WORDS`.
    """
    if is_missing(value):
        return None
    raw = str(value)
    stripped = raw.strip()
    if text:
        return None if stripped.lower() in NULL_WORDS else stripped
    return raw if stripped else None


def opt_float(value: Any, name: str = "value", *, text: bool = False) -> float | None:
    """The value as a float, or None when it is missing or NaN.

    Records: ``float(value)`` (so a blank string raises ``ValueError``). Text: the stripped text
    (see :func:`opt_str`), and :class:`BadValue` naming ``name`` when it is not a number.
    """
    if text:
        cell = opt_str(value, text=True)
        if cell is None:
            return None
        try:
            out = float(cell)
        except ValueError:
            raise BadValue(f"{name}={cell!r} is not a number") from None
    else:
        if value is None:
            return None
        out = float(value)
    return None if math.isnan(out) else out


def opt_int(value: Any, name: str = "value", *, text: bool = False) -> int | None:
    """The value as an int, or None when it is missing.

    Records: ``int(value)`` (a float such as 12.0 from a nullable Parquet column is truncated by
    ``int``). Text: the stripped text as an integer, also when written as an integral float
    (``"12.0"``, ``"1e3"``); anything else raises :class:`BadValue` naming ``name``.
    """
    if not text:
        return None if is_missing(value) else int(value)
    cell = opt_str(value, text=True)
    if cell is None:
        return None
    try:
        return int(cell)
    except ValueError:
        pass
    try:
        number = float(cell)
    except ValueError:
        raise BadValue(f"{name}={cell!r} is not an integer") from None
    if not math.isfinite(number) or number != int(number):  # 1e400 reads as inf: not an integer
        raise BadValue(f"{name}={cell!r} is not an integer")
    return int(number)


__all__ = ["NULL_WORDS", "BadValue", "is_missing", "opt_float", "opt_int", "opt_str"]
