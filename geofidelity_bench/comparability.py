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

import hashlib
import math
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


def run_field(info: Mapping, path: Sequence[str]) -> Any:
    """The value at ``path`` (keys) inside a nested run.json mapping, None where any key is missing."""
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

    @property
    def group_id(self) -> str:
        """A short id of :attr:`key` (16 hex digits of its sha256): the results repo's folder of the group's anchors."""
        return group_id(self.key)

    def short(self) -> str:
        """One line naming the fields (hashes cut to 12 characters)."""
        parts = [f"benchmark {self.benchmark_fingerprint[:12] or '?'}",
                 f"encoder config {self.encoder_config_hash[:12] or '?'}",
                 f"protocol {self.protocol_version or '?'}"]
        if self.segmenter:
            parts.append(f"segmenter {self.segmenter[:12]}")
        return ", ".join(parts)


#: Registry name of the benchmark's GAAS segmenter (docs/benchmark.md section 5): it wins a tie
#: between segmenters (:func:`choose_gaas_segmenter`). Kept as text: this module imports nothing else.
DEFAULT_SEGMENTER_NAME = "mask2former-vistas"


def segmenter_name_of_run(run_info: Mapping) -> str:
    """The registry name of a run's GAAS segmenter (``gaas.segmenter`` of run.json; "" without one)."""
    gaas = run_info.get("gaas") if isinstance(run_info, Mapping) else None
    return _text(gaas.get("segmenter")) if isinstance(gaas, Mapping) else ""


def choose_gaas_segmenter(counts: Mapping[str, int], names: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The segmenter whose GAAS a group of comparable rows shows, and the sentence that says why.

    ``counts``: {segmenter key (config hash, else name): how many rows (or runs) carry its GAAS};
    ``names``: {segmenter key: registry name} where known. The segmenter with the most rows wins; a
    tie goes to the benchmark's default segmenter (:data:`DEFAULT_SEGMENTER_NAME`), then to the
    smallest key, so the choice never depends on the order rows were read. The sentence is "" when
    only one segmenter is present (nothing was chosen). GAAS of the others is shown n/a: another
    segmenter's GAAS is another number by design (docs/benchmark.md section 7).
    """
    names = dict(names or {})
    present = {str(k): int(v) for k, v in counts.items() if _text(k) and int(v) > 0}
    if not present:
        return "", ""
    if len(present) == 1:
        return next(iter(present)), ""

    def label(key: str) -> str:
        name = names.get(key, "")
        return f"{name} ({key[:12]})" if name and name != key else key[:12]

    most = max(present.values())
    tied = sorted(k for k, v in present.items() if v == most)
    default = [k for k in tied if names.get(k, "") == DEFAULT_SEGMENTER_NAME]
    chosen = default[0] if default else tied[0]
    others = ", ".join(f"{label(k)}: {present[k]}" for k in sorted(present, key=lambda k: (-present[k], k))
                       if k != chosen)
    if len(tied) == 1:
        why = "the one most rows used"
    elif default:
        why = f"a tie, broken in favour of the benchmark's default segmenter {DEFAULT_SEGMENTER_NAME}"
    else:
        why = "a tie, broken by the smaller config hash (neither is the benchmark's default segmenter)"
    sentence = (f"GAAS is shown for segmenter {label(chosen)} ({present[chosen]} row(s); {why}); GAAS of the other "
                f"segmenter(s) is n/a here, because GAAS is compared only within one segmenter ({others})")
    return chosen, sentence


def segmenter_of_run(run_info: Mapping) -> str:
    """The GAAS segmenter of a run's ``run.json`` (config hash, else name; "" without one)."""
    gaas = run_info.get("gaas") if isinstance(run_info, Mapping) else None
    if not isinstance(gaas, Mapping) or not gaas.get("segmenter"):
        return ""
    return _text(gaas.get("config_hash")) or _text(gaas.get("segmenter"))


def comparability_of_run(run_info: Mapping) -> Comparability:
    """The comparability key of a results folder, from its ``run.json``."""
    return Comparability(
        _text(run_field(run_info, ("benchmark", "fingerprint"))),
        _text(run_field(run_info, ("encoder", "config_hash"))),
        _text(run_field(run_info, ("protocol", "version"))),
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


def group_id(key: Sequence[str]) -> str:
    """16 hex digits of the sha256 of the key fields joined by ``"\\x1f"`` (the unit separator)."""
    return hashlib.sha256("\x1f".join(_text(k) for k in key).encode("utf-8")).hexdigest()[:16]


# -- the anchor check ---------------------------------------------------------------------------

#: Tolerances of the anchor check: the real-image anchors are deterministic (seeded panels, the
#: same photos, the same encoder config), so two runs of one comparable group agree to float
#: rounding (float32 embeddings on another device: about 1e-6), while another encoder or
#: preprocessing moves them by 1e-3 or more; |a - b| <= ANCHOR_ATOL + ANCHOR_RTOL * |b| for every
#: metric value.
ANCHOR_ATOL = 1e-5
ANCHOR_RTOL = 1e-5
#: The columns that identify an anchor row.
ANCHOR_ROW_KEYS = ("method", "block_id")


@dataclass(frozen=True)
class AnchorCheck:
    """The result of comparing a run's real-image anchors with its group's stored anchors.

    ``status``: ``"match"`` (every common value agrees within the tolerance), ``"mismatch"`` (some
    value differs: another encoder or pipeline, so the run is not comparable with the group) or
    ``"unchecked"`` (the run has no anchor row in common with the group's).
    """

    status: str
    detail: str
    n_compared: int = 0

    @property
    def comparable(self) -> bool:
        return self.status != "mismatch"


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= ANCHOR_ATOL + ANCHOR_RTOL * abs(b)


def check_anchors(group_rows, run_rows, metric_columns: Sequence[str], *, gaas_column: str = "gaas",
                  where: str = "the group's anchors") -> AnchorCheck:
    """Compares ``run_rows`` (a run's anchor rows) with ``group_rows`` (its group's stored anchors).

    Rows are matched on (method, block_id); every metric of ``metric_columns`` is compared with
    :data:`ANCHOR_ATOL` / :data:`ANCHOR_RTOL` (NaN agrees only with NaN), except GAAS, which is
    compared only between rows with the same recorded ``segmenter`` column (another segmenter's
    GAAS is another number by design, not a mismatch). Deterministic: rows and metrics are visited
    in sorted order, and the first differing value is named.
    """
    import pandas as pd

    def seg(frame) -> "pd.Series":
        if "segmenter" not in frame:
            return pd.Series("", index=frame.index)
        return frame["segmenter"].map(_text)

    if run_rows is None or len(run_rows) == 0:
        return AnchorCheck("unchecked", "the run has no real-image anchor rows to check")
    g = group_rows.assign(anchor_seg=seg(group_rows))
    r = run_rows.assign(anchor_seg=seg(run_rows))
    g_first = g.sort_values(["method", "block_id", "anchor_seg"], kind="mergesort").drop_duplicates(list(ANCHOR_ROW_KEYS))
    merged = r.merge(g_first, on=list(ANCHOR_ROW_KEYS), suffixes=("", "__group"), how="inner")
    if merged.empty:
        return AnchorCheck("unchecked", f"the run's anchors share no (method, block) with {where}")
    merged = merged.sort_values(list(ANCHOR_ROW_KEYS), kind="mergesort")
    n, bad, first = 0, 0, None
    for row in merged.itertuples(index=False):
        rec = row._asdict()
        for col in sorted(metric_columns):
            if col not in rec or f"{col}__group" not in rec:
                continue
            ours, theirs = float(rec[col]), float(rec[f"{col}__group"])
            if col == gaas_column:
                same = g[(g["method"] == rec["method"]) & (g["block_id"] == rec["block_id"]) & (g["anchor_seg"] == rec["anchor_seg"])]
                if not rec["anchor_seg"] or same.empty:
                    continue
                theirs = float(same[col].iloc[0])
            n += 1
            if not _close(ours, theirs):
                bad += 1
                if first is None:
                    first = f"{rec['method']}/{rec['block_id']} {col} {ours:.6g} here vs {theirs:.6g}"
    if bad:
        return AnchorCheck("mismatch", f"{bad} of {n} anchor value(s) differ from {where} beyond the tolerance "
                                       f"(|a-b| <= {ANCHOR_ATOL:g} + {ANCHOR_RTOL:g}|b|), e.g. {first}: the anchors are "
                                       "deterministic, so this run used another encoder or pipeline", n)
    return AnchorCheck("match", f"all {n} anchor value(s) agree with {where}", n)


__all__ = ["ANCHOR_ATOL", "ANCHOR_RTOL", "AnchorCheck", "Comparability", "FIELDS", "GAAS_FIELD", "ROW_COLUMNS",
           "check_anchors", "comparability_of_row", "comparability_of_run", "group_id", "not_comparable_reason",
           "run_field", "segmenter_of_run"]
