"""When two sets of scores may be compared: the one rule used by the report, the Hub leaderboard,
``push-results --model-card`` and the app (docs/benchmark.md section 7, Statistics).

Scores are comparable only when they come from the same benchmark (its fingerprint), the same
encoder configuration (its config hash: weights, preprocessing, dtype) and the same protocol
(anchor rule, held-out rule, metric definitions). GAAS also needs the same segmenter: a run
without a segmenter has no GAAS, and a run with another segmenter has GAAS that is not
comparable, while its other scores still are.

The key is read either from a run's ``run.json`` (:func:`comparability_of_run`) or from the
columns that a submitted row of the results repo carries (:func:`comparability_of_row`), so a
results folder, a Hub submission and a model card are grouped by the same fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

#: (field, what a reader calls it) in the order they are compared and named.
FIELDS = (
    ("benchmark_fingerprint", "benchmark"),
    ("encoder_config_hash", "encoder config"),
    ("protocol_version", "protocol version"),
)
#: The extra field that GAAS needs.
GAAS_FIELD = ("segmenter", "segmenter")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value != value:  # NaN from a CSV cell
        return ""
    return str(value).strip()


def _get(info: Mapping, path: Sequence[str]) -> Any:
    value: Any = info
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


@dataclass(frozen=True)
class Comparability:
    """What decides whether two runs' scores may be compared (empty string: not recorded)."""

    benchmark_fingerprint: str
    encoder_config_hash: str
    protocol_version: str
    #: the segmenter that computed GAAS: its config hash (else its name); "" when GAAS was not computed
    segmenter: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        """The group key of every score except GAAS."""
        return (self.benchmark_fingerprint, self.encoder_config_hash, self.protocol_version)

    @property
    def gaas_key(self) -> tuple[str, str, str, str]:
        """The group key of GAAS."""
        return (*self.key, self.segmenter)

    @property
    def complete(self) -> bool:
        """Whether every field of :attr:`key` is recorded (a run missing one is comparable with nothing)."""
        return all(self.key)

    def differences(self, other: "Comparability", *, gaas: bool = False) -> list[str]:
        """The names of the fields in which ``other`` differs (``gaas``: the segmenter too)."""
        fields = FIELDS + ((GAAS_FIELD,) if gaas else ())
        return [name for attr, name in fields if getattr(self, attr) != getattr(other, attr)]

    def comparable_with(self, other: "Comparability") -> bool:
        """Whether every score except GAAS may be compared (both complete and equal keys)."""
        return self.complete and other.complete and self.key == other.key

    def gaas_comparable_with(self, other: "Comparability") -> bool:
        """Whether GAAS may be compared: :meth:`comparable_with` and the same, recorded segmenter."""
        return self.comparable_with(other) and bool(self.segmenter) and self.segmenter == other.segmenter

    def short(self) -> str:
        """One line naming the fields (hashes cut to 12 characters)."""
        parts = [f"benchmark {self.benchmark_fingerprint[:12] or '?'}",
                 f"encoder config {self.encoder_config_hash[:12] or '?'}",
                 f"protocol {self.protocol_version or '?'}"]
        if self.segmenter:
            parts.append(f"segmenter {self.segmenter[:12]}")
        return ", ".join(parts)


def segmenter_of_run(run_info: Mapping) -> str:
    """The GAAS segmenter of a run's ``run.json`` (config hash, else name; "" without one)."""
    gaas = run_info.get("gaas") if isinstance(run_info, Mapping) else None
    if not isinstance(gaas, Mapping) or not gaas.get("segmenter"):
        return ""
    return _text(gaas.get("config_hash")) or _text(gaas.get("segmenter"))


def comparability_of_run(run_info: Mapping) -> Comparability:
    """The comparability key of a results folder, from its ``run.json``."""
    return Comparability(
        _text(_get(run_info, ("benchmark", "fingerprint"))),
        _text(_get(run_info, ("encoder", "config_hash"))),
        _text(_get(run_info, ("protocol", "version"))),
        segmenter_of_run(run_info),
    )


#: The columns of a submitted row (results repo) that hold the key, by field.
ROW_COLUMNS = {
    "benchmark_fingerprint": "benchmark_fingerprint",
    "encoder_config_hash": "encoder_config_hash",
    "protocol_version": "protocol_version",
    "segmenter": "segmenter",
}


def comparability_of_row(row: Mapping) -> Comparability:
    """The comparability key of a submitted row (a mapping or a pandas row with the columns above)."""
    def cell(col: str) -> str:
        try:
            return _text(row[col])
        except (KeyError, IndexError):
            return ""

    return Comparability(*(cell(ROW_COLUMNS[f]) for f in ("benchmark_fingerprint", "encoder_config_hash",
                                                          "protocol_version", "segmenter")))


def not_comparable_reason(a: Comparability, b: Comparability, *, gaas: bool = False) -> str | None:
    """Why ``b``'s scores cannot be compared with ``a``'s (None when they can)."""
    if not a.complete or not b.complete:
        missing = [name for attr, name in FIELDS if not getattr(a, attr) or not getattr(b, attr)]
        return f"not recorded: {', '.join(missing)}"
    diff = a.differences(b, gaas=gaas)
    if gaas and not (a.segmenter and b.segmenter) and "segmenter" not in diff:
        diff.append("segmenter")
    return f"another {', another '.join(diff)}" if diff else None


__all__ = ["Comparability", "FIELDS", "GAAS_FIELD", "ROW_COLUMNS", "comparability_of_row",
           "comparability_of_run", "not_comparable_reason", "segmenter_of_run"]
