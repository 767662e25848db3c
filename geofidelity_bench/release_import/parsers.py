"""Values of the release's CSV cells and of benchmark_v3.json -> Python values (None for a missing value).

The cells are read with the ``text`` convention of :mod:`geofidelity_bench.values` (stripped; ``""``,
``NA``, ``null``, ... are missing). A value that is present but cannot be read raises ``_BadValue``
with a message that names the field; the importer turns it into an
:class:`~geofidelity_bench.release_import.report.ImportIssue`.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from ..values import BadValue as _BadValue
from ..values import opt_float, opt_int, opt_str

_s = partial(opt_str, text=True)  # _s(value) -> str | None
_f = partial(opt_float, text=True)  # _f(value, name) -> float | None
_i = partial(opt_int, text=True)  # _i(value, name) -> int | None


def _json_value(value: Any, name: str) -> Any:
    if isinstance(value, (list, dict)):
        return value
    text = _s(value)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise _BadValue(f"{name} is not valid JSON: {text[:60]!r}") from None


def _pairs(value: Any, name: str) -> list[tuple[float, float]] | None:
    data = _json_value(value, name)
    if data is None:
        return None
    try:
        pts = [(float(p[0]), float(p[1])) for p in data]
    except (TypeError, ValueError, IndexError):
        raise _BadValue(f"{name} is not a list of [lat, lon] pairs") from None
    return pts or None
