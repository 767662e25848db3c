"""The living leaderboard: submissions of a results repo, ranked only among equals.

The rules are those of docs/benchmark.md section 13 (Submissions); the leaderboard trusts nothing a
submitter writes:

- scores are compared only within one comparable group (:mod:`geofidelity_bench.comparability`:
  benchmark fingerprint, encoder config hash, protocol version); GAAS only within one segmenter;
- the maintainer pins the groups in ``leaderboard.json``
  (:class:`~geofidelity_bench.hub.leaderboard_config.LeaderboardConfig`, passed as ``config`` or found in
  ``df.attrs["leaderboard_config"]``): the groups shown are the pinned ones, the default group is the
  pinned default, the block set of each prompt condition is the pinned one (from the benchmark, never
  from submissions: a row on another block or condition is ignored, with a note), the anchors are
  the maintainer's (``anchors/{group_id}/results.csv``, the pinned anchor run) and GAAS is compared
  only within the pinned segmenter. A repo without ``leaderboard.json`` ("legacy") keeps the older
  rules (groups, blocks and anchors from the submissions) and its view carries
  :data:`LEGACY_BANNER`: its numbers are self-reported and unverified;
- a submission is a generator's rows (contract C3), its newest run per method by the Hub commit
  that added it (``committed_at``; never the submitted ``created_at``); sanity methods are never ranked;
- coverage is per condition and per metric: a submission is *partial in a condition* when its rows
  with a finite score there cover fewer than the group's blocks of that condition, or when one of the
  leaderboard metrics (GAAS aside) is missing on a block where the group's ``heldout_real`` anchor has
  it (a column-wide NaN hiding the worst blocks). A partial condition is listed apart (never ranked,
  never bolded, never in Table 10 or the condition tables); the submission's complete conditions stay
  ranked;
- a submission whose anchors differ from the group's, one whose images copy the benchmark's photos
  (:data:`~geofidelity_bench.caveats.COPIED_MARK`; one scored with ``evaluate --exclude-copies`` is
  ranked and marked :data:`~geofidelity_bench.caveats.COPIES_EXCLUDED_MARK`), one whose verification
  found other numbers (:data:`~geofidelity_bench.caveats.MISMATCH_MARK`) and, where the repo ranks only
  verified submissions, every one not verified, is listed apart with the reason; every ranked
  submission is marked :data:`~geofidelity_bench.caveats.VERIFIED_MARK` or
  :data:`~geofidelity_bench.caveats.SELF_REPORTED_MARK` (:attr:`LeaderboardView.marks`, and on its
  label in the tables :func:`leaderboard_tables` builds).

:func:`leaderboard_view` picks one group and applies the rules; :func:`leaderboard_tables` computes
Table 10, the condition and the control tables on the ranked rows with the report's own builders and
the one bootstrap setting (:data:`~geofidelity_bench.caveats.BOOTSTRAP_RESAMPLES`,
:data:`~geofidelity_bench.caveats.BOOTSTRAP_SEED`).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pandas as pd

from .. import caveats
from ..comparability import (
    FIELDS,
    ROW_COLUMNS,
    AnchorCheck,
    check_anchors,
    choose_gaas_segmenter,
    group_id,
    segmenter_name_of_run,
    segmenter_of_run,
)
from ..metrics.catalog import RESULT_METRIC_COLUMNS
from ..prompts import CONDITIONS
from .context import LEADERBOARD_METRICS, METRIC_LABELS, Context, ReportError, method_label

if TYPE_CHECKING:  # hub/ sits below report/ but is heavy to import; the view only reads the config's fields
    from ..hub.leaderboard_config import LeaderboardConfig, PinnedGroup

REFERENCE_ENCODER = "dinov2-base"
#: The submitted rows' columns that hold the comparability key (benchmark, encoder config, protocol).
GROUP_KEYS = tuple(ROW_COLUMNS[attr] for attr, _ in FIELDS)
ANCHOR_CONDITION, SANITY_CONDITION = "anchor", "sanity"
MAIN_CONDITION = "L1"
#: The leaderboard scores a submission must have on every block of a condition where the group's held-out
#: anchor (``heldout_real``) has them: a NaN there hides a block from the mean (GAAS needs a segmenter).
REQUIRED_METRICS = tuple(m for m in LEADERBOARD_METRICS if m != "gaas")
#: A block is covered by a row when one of the leaderboard's scores is finite (GAAS needs a segmenter, so it does
#: not count): a row with only descriptive columns (the similarities, the diversity gap) is no block of Table 10,
#: which counts a block by the same scores (:func:`geofidelity_bench.evaluation.covered`).
COVERAGE_COLUMNS = REQUIRED_METRICS
#: The scores the "listed apart" table shows (plain means over the submission's own blocks, no interval).
APART_METRICS = ("cos_sim", "dcsf", "retrieval_acc", "strongest_margin")
#: A submission's verification (those of :mod:`geofidelity_bench.hub.leaderboard_config`, kept as text here:
#: ``pending``: no verification record, the submitter's own numbers).
VERIFIED, MISMATCH, UNVERIFIABLE, PENDING = "verified", "mismatch", "unverifiable", "pending"
_SEVERITY = {VERIFIED: 0, PENDING: 1, UNVERIFIABLE: 2, MISMATCH: 3}
#: The first line of the view of a repo without leaderboard.json.
LEGACY_BANNER = ("This results repo has no leaderboard.json: nothing pins its groups, block sets or anchors, so every "
                 "number here is self-reported and unverified (groups, blocks and anchors come from the submissions "
                 "themselves). The maintainer pins the group with `geofidelity-bench leaderboard init --repo-id "
                 "ORG/NAME --benchmark ID --encoder NAME`.")
_HELPER_COLUMNS = ("_when",)
#: Columns of the loaded rows that no table reads.
_LOAD_COLUMNS = ("run", "stored_as", "anchor_check", "anchor_check_detail", "committed_at", "verification",
                 "verification_detail", "copies_excluded", *_HELPER_COLUMNS)


def finite_blocks(rows: pd.DataFrame) -> set[str]:
    """The blocks of ``rows`` with at least one finite score (a row whose every score is NaN covers nothing)."""
    if rows.empty:
        return set()
    cols = [c for c in COVERAGE_COLUMNS if c in rows.columns]
    if not cols:
        return set()
    values = rows[cols].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    return set(rows.loc[np.isfinite(values).any(axis=1), "block_id"].astype(str))


def _metric_blocks(rows: pd.DataFrame, metric: str) -> set[str]:
    """The blocks of ``rows`` where ``metric`` is finite (none when the column is missing)."""
    if rows.empty or metric not in rows.columns:
        return set()
    values = pd.to_numeric(rows[metric], errors="coerce").to_numpy(dtype=float)
    return set(rows.loc[np.isfinite(values), "block_id"].astype(str))


def _roles(df: pd.DataFrame) -> pd.Series:
    cond = df["condition"].astype(str)
    return cond.map({ANCHOR_CONDITION: "anchor", SANITY_CONDITION: "sanity"}).fillna("generator")


def _text_col(df: pd.DataFrame, col: str) -> pd.Series:
    if col not in df.columns:
        return pd.Series("", index=df.index, dtype=object)
    return df[col].map(lambda v: "" if v is None or (isinstance(v, float) and v != v) else str(v).strip())


def _when(df: pd.DataFrame, *, pinned: bool) -> pd.Series:
    """What orders runs, as sortable text ("" first): the Hub commit that added the rows (``committed_at``).
    The submitter's ``created_at`` (a file can say 2099) only orders a legacy frame that has no
    ``committed_at`` column at all; with a pinned group, never."""
    if "committed_at" in df.columns:
        text = _text_col(df, "committed_at")
    elif not pinned and "created_at" in df.columns:
        text = _text_col(df, "created_at")
    else:
        return pd.Series("", index=df.index, dtype=object)
    stamps = pd.to_datetime(text.mask(text == ""), utc=True, errors="coerce", format="ISO8601")
    return stamps.map(lambda t: "" if pd.isna(t) else t.strftime("%Y-%m-%dT%H:%M:%S.%f")).astype(object)


def _truthy(values: pd.Series) -> pd.Series:
    return values.map(lambda v: (v is True or v == 1 or str(v).strip().lower() in ("true", "1", "yes"))
                      if not (v is None or (isinstance(v, float) and v != v)) else False).astype(bool)


def _condition_order(cond: str) -> tuple:
    known = list(CONDITIONS)
    return (cond != MAIN_CONDITION, known.index(cond) if cond in known else len(known), cond)


def _conditions(values) -> list[str]:
    return sorted({str(c) for c in values}, key=_condition_order)


@dataclass
class SubmissionGroup:
    key: tuple[str, str, str]
    benchmark: str
    encoder: str
    run_ids: list[str]  # the generator submissions (runs) of the group
    newest: str  # when its newest rows were committed (sortable text; "" when not known)
    #: the maintainer's pin of the group (leaderboard.json), None in a legacy repo
    pinned: "PinnedGroup | None" = None

    @property
    def label(self) -> str:
        if self.pinned is not None:
            return self.pinned.label()
        fp, enc_hash, protocol = self.key
        return f"{self.benchmark} ({fp[:12]}), encoder {self.encoder} ({enc_hash[:12]}), protocol {protocol}"

    @property
    def group_id(self) -> str:
        return group_id(self.key)


@dataclass
class ListedApart:
    """A submission shown apart from the ranking, with why: as a whole (copied, not comparable, a
    verification mismatch, not verified where only verified submissions are ranked), or in the
    conditions where it is partial (:attr:`partial_in`) while its other conditions stay ranked
    (:attr:`ranked_in`)."""

    method: str
    run_id: str
    reasons: list[str]
    #: the group's blocks it covers (finite scores) in the main condition (L1), else in its first partial one
    n_blocks: int
    rows: pd.DataFrame
    partial: bool = False  # partial in at least one condition
    copied: bool = False
    not_comparable: bool = False
    mismatch: bool = False  # the verifier's numbers differ from the submitted ones
    self_reported: bool = False  # apart because the repo ranks only verified submissions
    verification: str = PENDING
    verification_detail: str = ""
    #: {condition: "partial in L1: covers 1 of the group's 7 block(s)"}
    partial_in: dict[str, str] = field(default_factory=dict)
    #: the conditions in which the submission is still ranked (empty: listed apart as a whole)
    ranked_in: list[str] = field(default_factory=list)
    #: {condition: the group's blocks of that condition it covers}
    n_blocks_in: dict[str, int] = field(default_factory=dict)

    @property
    def whole(self) -> bool:
        """Whether the submission is listed apart in every condition it has."""
        return not self.ranked_in

    @property
    def conditions(self) -> list[str]:
        """The conditions in which it is listed apart."""
        return list(self.n_blocks_in) if self.whole else list(self.partial_in)

    @property
    def mark(self) -> str:
        """Its verification mark."""
        if self.verification == MISMATCH:
            return caveats.MISMATCH_MARK
        return caveats.VERIFIED_MARK if self.verification == VERIFIED else caveats.SELF_REPORTED_MARK


@dataclass
class LeaderboardView:
    group: SubmissionGroup
    rows: pd.DataFrame  # the ranked generators' rows (their complete conditions) and the group's anchors
    blocks: list[str]  # the group's full block set (every condition's, and the anchors')
    methods: list[str]  # the generator methods ranked in at least one condition
    others: list[SubmissionGroup] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    apart: list[ListedApart] = field(default_factory=list)
    anchor_methods: list[str] = field(default_factory=list)
    anchor_blocks: list[str] = field(default_factory=list)
    anchor_source: str = ""
    thin_blocks: list[str] = field(default_factory=list)
    n_cities: int = 0
    gaas_segmenter: str = ""
    n_sanity_rows: int = 0
    #: {condition: the group's block set of that condition} (pinned; in a legacy repo: from the submissions)
    condition_blocks: dict[str, list[str]] = field(default_factory=dict)
    #: the conditions the view speaks of (those with generator rows, and the main one of a pinned group), main first
    conditions: list[str] = field(default_factory=list)
    #: {condition: the methods ranked in it}
    ranked: dict[str, list[str]] = field(default_factory=dict)
    #: {ranked method: its marks} ("✓ verified" or "◇ self-reported", and "⊘ copies excluded: k image(s)")
    marks: dict[str, str] = field(default_factory=dict)
    #: {ranked method: images left out of its panels (evaluate --exclude-copies)}
    copies_excluded: dict[str, int] = field(default_factory=dict)
    #: the repo ranks only verified submissions (leaderboard.json)
    require_verified: bool = False
    #: :data:`LEGACY_BANNER` for a repo without leaderboard.json ("" otherwise); first of :meth:`header_lines`
    banner: str = ""
    #: groups of submitted rows that leaderboard.json does not pin (not shown; counted in :attr:`notes`)
    unpinned: list[SubmissionGroup] = field(default_factory=list)
    #: which segmenter's GAAS a legacy group shows when its submissions used several, and why
    #: (:func:`~geofidelity_bench.comparability.choose_gaas_segmenter`; "" when there was nothing to choose)
    gaas_choice: str = ""
    #: rows scored with ``--allow-unpromptable`` (column ``unpromptable``), by (method, run_id): never ranked,
    #: listed apart with :data:`~geofidelity_bench.caveats.UNPROMPTABLE_MARK`
    unpromptable: dict[tuple[str, str], pd.DataFrame] = field(default_factory=dict)

    def other_text(self) -> str:
        """How many submissions the other groups hold, and why they are not shown."""
        if not self.others:
            return "All submissions are in this group." if not self.unpinned else \
                "No other pinned group."
        n = sum(len(g.run_ids) for g in self.others)
        parts = []
        for g in self.others:
            why = [name for name, a, b in zip(("benchmark version", "encoder config", "protocol version"),
                                               g.key, self.group.key) if a != b]
            parts.append(f"{len(g.run_ids)} in [{g.label}]: another {', another '.join(why)}")
        return (f"{n} submission(s) in {len(self.others)} other group(s) are not shown, because scores are only "
                f"comparable with the same benchmark, encoder config and protocol: " + "; ".join(parts))

    def blocks_of(self, condition: str) -> list[str]:
        """The group's block set of ``condition`` (its full block set where the condition has none)."""
        return self.condition_blocks.get(condition, self.blocks)

    def coverage(self) -> dict[str, dict[str, int]]:
        """{condition: {ranked method: the blocks of the group's set of that condition its shown rows cover}}: a
        block counts when one of the leaderboard's scores is finite there
        (:func:`geofidelity_bench.evaluation.covered`, as Table 10's Blocks column counts it)."""
        from ..evaluation import covered

        rows = self.rows
        out: dict[str, dict[str, int]] = {}
        if rows.empty:
            return {c: {m: 0 for m in self.ranked.get(c, ())} for c in self.conditions}
        ok = covered(rows).to_numpy()
        for cond in self.conditions:
            blocks = set(self.blocks_of(cond))
            in_cond = (rows["condition"].astype(str) == cond).to_numpy() & ok
            out[cond] = {m: len(set(rows.loc[in_cond & (rows["method"].astype(str) == m).to_numpy(), "block_id"]
                                    .astype(str)) & blocks) for m in self.ranked.get(cond, ())}
        return out

    def ranked_text(self) -> str:
        """How many submissions are ranked in each condition, over how many of the group's blocks, and how many
        blocks each ranked submission covers (never "all" when one covers fewer)."""
        cities = f"({self.n_cities} cit{'y' if self.n_cities == 1 else 'ies'})"
        tail = "a block counts only with a finite score."
        conds = self.conditions
        if not conds:
            return f"Ranked: no generator submission over the group's {len(self.blocks)} block(s) {cities}; {tail}"
        cover = self.coverage()
        sets = {c: tuple(self.blocks_of(c)) for c in conds}
        ranked = {c: tuple(self.ranked.get(c, ())) for c in conds}
        short = {c: {m: n for m, n in cover[c].items() if n < len(sets[c])} for c in conds}

        def fewer(c: str) -> str:
            if not short[c]:
                return ""
            return " (" + ", ".join(f"{m} covers only {n} of {len(sets[c])}" for m, n in sorted(short[c].items())) + ")"

        if len(set(sets.values())) == 1 and len(set(ranked.values())) == 1 and not any(short.values()):
            n = len(ranked[conds[0]])
            each = f", each covering all {len(sets[conds[0]])} block(s) of the group" if n else \
                f" over the group's {len(sets[conds[0]])} block(s)"
            return f"Ranked: {n} generator submission(s){each} {cities} in {', '.join(conds)}; {tail}"
        first, rest = conds[0], conds[1:]
        text = (f"Ranked in {first}: {len(ranked[first])} generator submission(s) over the group's "
                f"{len(sets[first])} block(s){fewer(first)}")
        text += "".join(f"; in {c}: {len(ranked[c])} over {len(sets[c])}{fewer(c)}" for c in rest)
        if any(short.values()):
            return f"{text} {cities}; {tail}"
        return f"{text} {cities}; each ranked submission covers all of the group's blocks of that condition; {tail}"

    def header_lines(self, n_resamples: int = caveats.BOOTSTRAP_RESAMPLES,
                     seed: int = caveats.BOOTSTRAP_SEED) -> list[str]:
        """The counts and caveats a reader needs above the tables (every count from the rows shown)."""
        partial = sum(a.partial for a in self.apart)
        mism = sum(a.not_comparable for a in self.apart)
        copied = sum(a.copied for a in self.apart)
        verify = sum(a.mismatch for a in self.apart)
        lines = [self.banner] if self.banner else []
        lines.append(self.ranked_text())
        apart = (f"Listed apart, never ranked or bolded: {partial} partial, {mism} not comparable, {copied} copied. "
                 f"Listed apart by verification: {verify} mismatch (the verifier's numbers differ)")
        if self.require_verified:
            n_self = sum(a.self_reported for a in self.apart)
            apart += f", {n_self} self-reported (only verified submissions are ranked here)"
        lines.append(apart + ".")
        if self.marks:
            n_ver = sum(caveats.VERIFIED_MARK in m for m in self.marks.values())
            lines.append(f"Verification: {n_ver} of {len(self.marks)} ranked submission(s) {caveats.VERIFIED_MARK}, "
                         f"{len(self.marks) - n_ver} {caveats.SELF_REPORTED_MARK}.")
        used = {a.mark for a in self.apart}
        used |= {mk for m in self.marks.values() for mk in caveats.MARK_LEGENDS if mk in m}
        lines += [f"{legend}." for mk, legend in caveats.MARK_LEGENDS.items() if mk in used]
        if self.copies_excluded:
            lines.append(f"{caveats.COPIES_EXCLUDED_MARK} (ranked, scored without the flagged images): "
                         + ", ".join(f"{m}: {k} image(s)" for m, k in sorted(self.copies_excluded.items())) + ".")
        if self.anchor_methods:
            lines.append(f"Real-image anchors: one set for the group ({self.anchor_source}): "
                         f"{len(self.anchor_methods)} method(s) on {len(self.anchor_blocks)} block(s); each "
                         "submission's anchors are checked against them.")
        else:
            lines.append("Real-image anchors: none stored for this group.")
        if self.n_sanity_rows:
            lines.append(f"{self.n_sanity_rows} sanity row(s) of older submissions are not shown: sanity methods "
                         "check the benchmark and are never ranked among generators.")
        lines.append(f"Intervals: {caveats.bootstrap_text(n_resamples, seed)}, percentile, over blocks.")
        n_b = len(self.blocks_of(MAIN_CONDITION)) if MAIN_CONDITION in self.conditions else len(self.blocks)
        thin = caveats.interval_caveat(n_b, self.n_cities)
        if thin:
            lines.append(f"Caveat: {thin}.")
        note = caveats.thin_anchor_note(len(self.thin_blocks), len(self.anchor_blocks))
        if note:
            lines.append(f"{caveats.REPEATS_MARK}: {note} (blocks: {', '.join(self.thin_blocks)}).")
        if self.gaas_choice:
            lines.append(f"GAAS: {self.gaas_choice}.")
        elif self.gaas_segmenter:
            lines.append(f"GAAS: compared only within segmenter {self.gaas_segmenter[:12]}.")
        if self.unpromptable:
            parts = []
            for (method, rid), rows in sorted(self.unpromptable.items()):
                for cond in _conditions(rows["condition"]):
                    blocks = sorted(set(rows.loc[rows["condition"].astype(str) == cond, "block_id"].astype(str)))
                    parts.append(f"{method} (run {rid}) under {cond} on {len(blocks)} block(s): {', '.join(blocks)}")
            lines.append(f"{caveats.UNPROMPTABLE_MARK}, never ranked or bolded: " + "; ".join(parts) + ".")
            lines.append(f"{caveats.UNPROMPTABLE_LEGEND}.")
        return lines

    def apart_markdown(self) -> str:
        """The submissions listed apart: one line per condition where a submission is partial (one line, its
        main condition's, for a submission listed apart as a whole), with its status and plain means over its
        own blocks of that condition."""
        if not self.apart and not self.unpromptable:
            return ""
        from ..metrics.catalog import METRICS

        heads = ["Model", "Run", "Condition", "Status", "Blocks",
                 *(f"{METRIC_LABELS[m]} {'↑' if METRICS[m].higher_is_better else '↓'}" for m in APART_METRICS)]
        body = []
        for a in self.apart:
            if a.whole:
                cond = MAIN_CONDITION if (MAIN_CONDITION in a.n_blocks_in or not a.n_blocks_in) \
                    else next(iter(a.n_blocks_in))
                entries = [(cond, "; ".join(a.reasons))]
            else:
                entries = list(a.partial_in.items())
            name = method_label(a.method) + (f" {caveats.COPIED_MARK}" if a.copied else "") + f" ({a.mark})"
            for cond, status in entries:
                part = a.rows[a.rows["condition"].astype(str) == cond] if len(a.rows) else a.rows
                cells = []
                for m in APART_METRICS:
                    vals = pd.to_numeric(part[m], errors="coerce").to_numpy(dtype=float) if m in part else np.array([])
                    cells.append(f"{np.nanmean(vals):.3f}" if np.isfinite(vals).any() else "n/a")
                body.append([name, a.run_id, cond, status,
                             f"{a.n_blocks_in.get(cond, 0)} of {len(self.blocks_of(cond))}", *cells])
        for (method, rid), rows in sorted(self.unpromptable.items()):
            for cond in _conditions(rows["condition"]):
                part = rows[rows["condition"].astype(str) == cond]
                cells = []
                for m in APART_METRICS:
                    vals = pd.to_numeric(part[m], errors="coerce").to_numpy(dtype=float) if m in part else np.array([])
                    cells.append(f"{np.nanmean(vals):.3f}" if np.isfinite(vals).any() else "n/a")
                status = (f"{caveats.UNPROMPTABLE_MARK}: scored with --allow-unpromptable; the benchmark has no {cond} "
                          "prompt for these blocks")
                body.append([f"{method_label(method)} {caveats.UNPROMPTABLE_MARK}", rid, cond, status,
                             f"{len(finite_blocks(part))} (no prompt)", *cells])
        lines = ["| " + " | ".join(heads) + " |", "|" + "|".join("---" for _ in heads) + "|"]
        lines += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in body]
        return "\n".join(lines)


def group_submissions(df: pd.DataFrame) -> list[SubmissionGroup]:
    """The comparable groups of submitted rows (and stored anchors), newest first (by ``committed_at``)."""
    missing = [c for c in (*GROUP_KEYS, "run_id") if c not in df.columns]
    if missing:
        raise ReportError(f"the submitted rows lack column(s) {missing}")
    groups = []
    keyed = df.assign(**{c: _text_col(df, c) for c in GROUP_KEYS}, _role=_roles(df),
                      _stored=_text_col(df, "stored_as").replace("", "submission"), _t=_when(df, pinned=False))
    for key, part in keyed.groupby(list(GROUP_KEYS), sort=True):
        gen = part[(part["_role"] == "generator") & (part["_stored"] == "submission")]
        groups.append(SubmissionGroup(
            tuple(key), str(part["benchmark_name"].iloc[0]) if "benchmark_name" in part else "?",
            ", ".join(sorted(part["encoder"].dropna().astype(str).unique())) if "encoder" in part else "?",
            sorted(_text_col(gen, "run_id").unique()), str(part["_t"].max()) if len(part) else "",
        ))
    return sorted(groups, key=lambda g: g.newest, reverse=True)


def pinned_groups(df: pd.DataFrame, config: "LeaderboardConfig") -> list[SubmissionGroup]:
    """The groups leaderboard.json pins (with the runs the rows hold in each), in the order of their ids."""
    keys = {c: _text_col(df, c) for c in GROUP_KEYS}
    gen = (_roles(df) == "generator") & (_text_col(df, "stored_as").replace("", "submission") == "submission") \
        if len(df) else pd.Series(False, index=df.index)
    when = _when(df, pinned=True)
    out = []
    for gid, pin in sorted(config.groups.items()):
        mask = pd.Series(True, index=df.index)
        for col, value in zip(GROUP_KEYS, pin.key):
            mask &= keys[col] == value
        runs = sorted(_text_col(df[mask & gen], "run_id").unique())
        out.append(SubmissionGroup(tuple(pin.key), str(pin.benchmark.get("name") or pin.benchmark.get("id") or "?"),
                                   str(pin.encoder.get("name") or "?"), runs,
                                   str(when[mask].max()) if mask.any() else "", pinned=pin))
    return out


def default_group(groups: Sequence[SubmissionGroup], config: "LeaderboardConfig | None" = None) -> SubmissionGroup:
    """With leaderboard.json: its pinned default group (no submission can change it). Without (legacy):
    the reference encoder on the newest benchmark version (by commit), else the largest group."""
    if config is not None:
        hits = [g for g in groups if g.group_id == config.default_group]
        if hits:
            return hits[0]
        raise ReportError(f"leaderboard.json's default group {config.default_group} is not among the pinned groups")
    reference = [g for g in groups if g.encoder == REFERENCE_ENCODER]
    if reference:
        return max(reference, key=lambda g: g.newest)
    return max(groups, key=lambda g: (len(g.run_ids), g.newest))


def _first_per_key(rows: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    when = rows["_when"] if "_when" in rows.columns else _when(rows, pinned=False)
    order = rows.assign(_t=when, _r=_text_col(rows, "run_id"))
    order = order.sort_values(["_t", "_r"], kind="mergesort")
    return order.drop_duplicates(list(keys), keep="first").drop(columns=["_t", "_r"])


def _group_anchors(part: pd.DataFrame, gid: str):
    """Legacy repo: (the group's anchor rows with every segmenter, where they come from, {run_id: AnchorCheck}
    of runs that kept anchors inside their submission)."""
    roles, stored = _roles(part), _text_col(part, "stored_as")
    files = part[(roles == "anchor") & (stored == "group_anchors")]
    legacy = part[(roles == "anchor") & (stored != "group_anchors")]
    checks: dict[str, AnchorCheck] = {}
    if not files.empty:
        anchors, source = files, f"anchors/{gid}/results.csv"
    elif not legacy.empty:
        anchors = _first_per_key(legacy.assign(_seg=_text_col(legacy, "segmenter")), ["method", "block_id", "_seg"])
        anchors = anchors.drop(columns="_seg")
        source = "the oldest run's anchor rows (an older repo that kept anchors inside submissions)"
    else:
        return part.iloc[0:0], "", checks
    for rid, rows in legacy.groupby(_text_col(legacy, "run_id")):
        checks[str(rid)] = check_anchors(anchors, rows, RESULT_METRIC_COLUMNS, where="the group's anchors")
    return anchors, source, checks


def _pinned_anchors(part: pd.DataFrame, pin: "PinnedGroup", notes: list[str]):
    """Pinned group: (the maintainer's anchor rows on the group's blocks, where they come from, {run_id:
    AnchorCheck} of runs that kept anchor rows inside their submission). Anchor rows of any other run, or on a
    block the group does not pin, are never the group's (a note counts them)."""
    roles, stored = _roles(part), _text_col(part, "stored_as")
    path = f"anchors/{pin.group_id}/results.csv"
    files = part[(roles == "anchor") & (stored == "group_anchors")]
    if pin.anchors_run_id:
        foreign = files[_text_col(files, "run_id") != pin.anchors_run_id]
        if len(foreign):
            notes.append(f"{len(foreign)} row(s) of {path} come from run(s) "
                         f"{', '.join(sorted(set(_text_col(foreign, 'run_id'))))}, not the maintainer's pinned anchor "
                         f"run {pin.anchors_run_id}: ignored")
        files = files[_text_col(files, "run_id") == pin.anchors_run_id]
    allowed = set(pin.all_blocks)
    outside = files[~files["block_id"].astype(str).isin(allowed)]
    if len(outside):
        notes.append(f"{len(outside)} anchor row(s) on block(s) the group does not pin are ignored: "
                     f"{', '.join(sorted(set(outside['block_id'].astype(str))))}")
    files = files[files["block_id"].astype(str).isin(allowed)]
    legacy = part[(roles == "anchor") & (stored != "group_anchors")]
    checks: dict[str, AnchorCheck] = {}
    if files.empty:
        return files, "", checks
    for rid, rows in legacy.groupby(_text_col(legacy, "run_id")):
        checks[str(rid)] = check_anchors(files, rows, RESULT_METRIC_COLUMNS, where="the pinned anchors")
    run = f", the maintainer's run {pin.anchors_run_id}" if pin.anchors_run_id else ""
    return files, f"{path}{run}", checks


def _gaas_for(rows: pd.DataFrame, segmenter: str) -> pd.DataFrame:
    """One row per (method, block): the first row's scores, with GAAS from ``segmenter``'s row (NaN without one)."""
    if rows.empty:
        return rows
    rows = rows.assign(_seg=_text_col(rows, "segmenter"))
    first = _first_per_key(rows, ["method", "block_id"]).copy()
    if "gaas" in first:
        same = rows[(rows["_seg"] == segmenter) & (segmenter != "")] if segmenter else rows.iloc[0:0]
        gaas = {(m, b): g for m, b, g in zip(same["method"], same["block_id"], same["gaas"])}
        first["gaas"] = [gaas.get((m, b), np.nan) for m, b in zip(first["method"], first["block_id"])]
    return first.drop(columns="_seg").reset_index(drop=True)


def _verification(rows: pd.DataFrame) -> tuple[str, str]:
    """(status, detail) of a submission: the worst status of its rows (no record, or an unknown word: pending)."""
    if rows.empty or "verification" not in rows.columns:
        return PENDING, ""
    status = _text_col(rows, "verification").str.lower().map(lambda v: v if v in _SEVERITY else PENDING)
    worst = max(status, key=_SEVERITY.__getitem__)
    details = [d for d in _text_col(rows, "verification_detail")[status == worst] if d]
    return worst, (details[0] if details else "")


def _outside_note(method: str, rid: str, rows: pd.DataFrame, pin: "PinnedGroup") -> str:
    """One note naming a run's rows on blocks or conditions the group does not pin (they are ignored)."""
    parts = []
    for cond in _conditions(rows["condition"]):
        blocks = sorted(set(rows.loc[rows["condition"].astype(str) == cond, "block_id"].astype(str)))
        where = cond if cond in pin.blocks else f"{cond} (a condition the group does not pin)"
        parts.append(f"{where}: {', '.join(blocks)}")
    return (f"{method} (run {rid}): {len(rows)} row(s) outside the group's pinned block set are ignored, never "
            f"counted: {'; '.join(parts)}")


def leaderboard_view(df: pd.DataFrame, group: str | None = None, *,
                     config: "LeaderboardConfig | None" = None,
                     run_infos: "Mapping[str, Mapping] | None" = None) -> LeaderboardView:
    """The ranked rows of one comparable group (``group``: a prefix of its group id, benchmark fingerprint or
    encoder config hash, or its label; default: :func:`default_group`).

    ``config``: the repo's leaderboard.json (default: ``df.attrs["leaderboard_config"]``; None: a legacy repo).
    ``run_infos``: {run_id: run.json} (the second value of :func:`~geofidelity_bench.hub.results_repo.load_submissions`):
    the registry names of the segmenters, so that a legacy group's GAAS tie goes to the benchmark's default
    segmenter (:func:`~geofidelity_bench.comparability.choose_gaas_segmenter`); a segmenter column that holds a
    registry name is read as that name without it.
    """
    if config is None:
        config = df.attrs.get("leaderboard_config")
    if config is not None and not getattr(config, "groups", None):
        config = None
    missing = [c for c in (*GROUP_KEYS, "run_id") if c not in df.columns]
    if missing:
        raise ReportError(f"the submitted rows lack column(s) {missing}")
    ignored = [str(n) for n in df.attrs.get("ignored", [])]  # rows the loader refused, named
    df = df.copy()
    df.attrs = {}
    unpinned: list[SubmissionGroup] = []
    if config is not None:
        groups = pinned_groups(df, config)
        keys = {g.key for g in groups}
        unpinned = [g for g in group_submissions(df) if g.key not in keys and g.run_ids]
    else:
        groups = group_submissions(df)
        if not groups:
            raise ReportError("no submission to show")
    if group is None:
        chosen = default_group(groups, config)
    else:
        hits = [g for g in groups if group == g.label or g.group_id.startswith(group)
                or any(k.startswith(group) for k in g.key[:2])]
        if len(hits) != 1:
            raise ReportError(f"{len(hits)} groups match {group!r}; the groups are: " + "; ".join(g.label for g in groups))
        chosen = hits[0]
    pin = chosen.pinned
    mask = pd.Series(True, index=df.index)
    for col, value in zip(GROUP_KEYS, chosen.key):
        mask &= _text_col(df, col) == value
    part = df[mask].copy()
    part["stored_as"] = _text_col(part, "stored_as").replace("", "submission")
    part["segmenter"] = _text_col(part, "segmenter")
    part["run_id"] = _text_col(part, "run_id")
    part["method"] = _text_col(part, "method")
    part["condition"] = _text_col(part, "condition")
    part["block_id"] = _text_col(part, "block_id")
    part["_when"] = _when(part, pinned=pin is not None)
    for col in (*RESULT_METRIC_COLUMNS, "n_copied"):
        if col in part.columns:  # a cell that is no finite number is no score (an infinite mean would top the board)
            values = pd.to_numeric(part[col], errors="coerce")
            part[col] = values.where(np.isfinite(values.to_numpy(dtype=float)))
    notes: list[str] = list(ignored)
    roles = _roles(part)
    n_sanity = int((roles == "sanity").sum())

    if pin is not None:
        anchors_all, anchor_source, legacy_checks = _pinned_anchors(part, pin, notes)
    else:
        anchors_all, anchor_source, legacy_checks = _group_anchors(part, chosen.group_id)

    # the newest submission of each generator method (by the commit that added it)
    gen_all = part[(roles == "generator") & (part["stored_as"] == "submission")]
    order = gen_all.sort_values(["_when", "run_id"], kind="mergesort")
    latest = order.groupby("method")["run_id"].last() if len(order) else pd.Series(dtype=str)
    for method, run_id in latest.items():
        older = sorted(set(gen_all.loc[gen_all["method"] == method, "run_id"]) - {run_id})
        if older:
            notes.append(f"{method}: the newest submission {run_id} is shown ({len(older)} older: {', '.join(older)})")
    shown = sorted((str(m), str(r)) for m, r in latest.items())
    gen = gen_all[gen_all["run_id"] == gen_all["method"].map(latest)].copy()

    # a panel scored with --allow-unpromptable has no prompt of the benchmark behind it: never ranked, never part
    # of a block set, listed apart with its mark (push-results refuses such rows for a pinned group, whose block
    # set per condition is the benchmark's promptable one; a legacy repo, or a file put there by hand, can hold them)
    unpromptable: dict[tuple[str, str], pd.DataFrame] = {}
    refused = caveats.unpromptable_mask(gen).to_numpy() if len(gen) else np.zeros(0, dtype=bool)
    if refused.any():
        for (method, rid), rows in gen[refused].groupby(["method", "run_id"], sort=True):
            unpromptable[(str(method), str(rid))] = rows.drop(columns=list(_HELPER_COLUMNS), errors="ignore")
        gen = gen[~refused]

    # a pinned group's block set per condition is the benchmark's: any other row is ignored, never counted
    if pin is not None and len(gen):
        allowed = {(c, b) for c, bl in pin.blocks.items() for b in bl}
        inside = np.array([(c, b) in allowed for c, b in zip(gen["condition"], gen["block_id"])], dtype=bool)
        for (method, rid), rows in gen[~inside].groupby(["method", "run_id"], sort=True):
            notes.append(_outside_note(str(method), str(rid), rows, pin))
        gen = gen[inside]

    # GAAS: only within one segmenter (pinned; in a legacy repo the one most of the shown submissions used)
    gaas_choice = ""
    if pin is not None:
        gaas_seg = pin.segmenter_hash
    else:  # the segmenter most shown submissions used; a tie goes to the benchmark's default segmenter
        segs = Counter(s for s in gen.drop_duplicates(["method", "run_id"])["segmenter"] if s)
        names = _segmenter_names(segs, run_infos)
        gaas_seg, gaas_choice = choose_gaas_segmenter(segs, names)
        if gaas_choice:
            gaas_choice = gaas_choice.replace(" row(s);", " submission(s);")
            notes.append(gaas_choice)
    if "gaas" in gen:
        for (method, seg), rows in gen.groupby(["method", "segmenter"]):
            has = np.isfinite(pd.to_numeric(rows["gaas"], errors="coerce").to_numpy(dtype=float)).any()
            if has and (seg != gaas_seg or not gaas_seg):
                if pin is not None and not gaas_seg:
                    why = "the group pins no segmenter"
                elif seg and gaas_seg:
                    why = f"segmenter {seg[:12]}, not the group's {gaas_seg[:12]}"
                else:
                    why = "its segmenter is not recorded"
                notes.append(f"GAAS of {method}: n/a ({why}; GAAS is compared only within one segmenter)")
        gen.loc[(gen["segmenter"] != gaas_seg) | (gaas_seg == ""), "gaas"] = np.nan
    anchors = _gaas_for(anchors_all, gaas_seg)

    # each shown submission's status
    subs = {key: gen.iloc[0:0] for key in shown}
    for (method, rid), rows in gen.groupby(["method", "run_id"], sort=True):
        subs[(str(method), str(rid))] = rows
    excluded = {k: bool(_truthy(rows["copies_excluded"]).any()) if "copies_excluded" in rows else False
                for k, rows in subs.items()}
    n_excluded = {k: int(pd.to_numeric(rows["n_copied"], errors="coerce").fillna(0).clip(lower=0).sum())
                  if "n_copied" in rows else 0 for k, rows in subs.items()}
    copied_runs = {k for k, rows in subs.items() if not excluded[k] and bool(caveats.copied_mask(rows).any())}
    verification = {k: _verification(rows) for k, rows in subs.items()}
    repeated = {k: rows[rows.duplicated(["condition", "block_id"], keep=False)] for k, rows in subs.items()}

    def check_of(rid: str, rows: pd.DataFrame) -> AnchorCheck:
        if rid in legacy_checks:
            return legacy_checks[rid]
        status = _text_col(rows, "anchor_check").iloc[0] if len(rows) else ""
        return AnchorCheck(status or "unchecked", _text_col(rows, "anchor_check_detail").iloc[0] if len(rows) else "")

    checks = {k: check_of(k[1], rows) for k, rows in subs.items()}

    # the group's block set per condition
    anchor_finite = finite_blocks(anchors)
    if pin is not None:
        cond_blocks = {str(c): set(bl) for c, bl in pin.blocks.items()}
        full = set(pin.all_blocks)
    else:
        cond_blocks = {c: set(anchor_finite) for c in _conditions(gen["condition"])}
        for k, rows in subs.items():
            if k in copied_runs or not checks[k].comparable or verification[k][0] == MISMATCH or len(repeated[k]):
                continue
            for cond, rc in rows.groupby("condition"):
                cond_blocks[str(cond)] |= finite_blocks(rc)
        for rows in unpromptable.values():  # a block whose prompt the benchmark refuses is no block of that condition
            for cond, block in zip(rows["condition"].astype(str), rows["block_id"].astype(str)):
                if cond in cond_blocks:
                    cond_blocks[cond].discard(block)
        full = set(anchor_finite).union(*cond_blocks.values())
    held = anchors[anchors["method"].astype(str) == caveats.HELDOUT_METHOD] if len(anchors) else anchors
    held_blocks = {m: _metric_blocks(held, m) for m in REQUIRED_METRICS}

    apart: list[ListedApart] = []
    ranked_parts: list[pd.DataFrame] = []
    ranked: dict[str, set[str]] = {}
    marks: dict[str, str] = {}
    copies_excluded: dict[str, int] = {}
    require_verified = bool(config.require_verified) if config is not None else False
    for key in sorted(subs):
        method, rid = key
        rows = subs[key]
        status, detail = verification[key]
        whole: list[str] = []
        is_copied = key in copied_runs
        if is_copied:
            whole.append(f"{caveats.COPIED_MARK}: {n_excluded[key]} image(s) in "
                         f"{int(caveats.copied_mask(rows).sum())} panel(s) copy the benchmark's own photos")
        not_comparable = not checks[key].comparable
        if not_comparable:
            whole.append(f"not comparable: {checks[key].detail}")
        if len(repeated[key]):
            ex = repeated[key].iloc[0]
            not_comparable = True
            whole.append(f"not comparable: {len(repeated[key])} row(s) repeat a (condition, block), e.g. "
                         f"{ex['condition']}/{ex['block_id']}")
        if rows.empty:
            whole.append("no row on the group's pinned blocks and conditions")
        is_mismatch = status == MISMATCH
        if is_mismatch:
            whole.append(f"{caveats.MISMATCH_MARK}: the verifier's numbers differ from the submitted ones"
                         + (f" ({detail})" if detail else ""))
        self_reported = require_verified and status != VERIFIED and not is_mismatch
        if self_reported:
            plain = detail[len("self-reported: "):] if detail.lower().startswith("self-reported: ") else detail
            why = f"unverifiable: {plain}" if status == UNVERIFIABLE else (plain or "no verification record yet")
            whole.append(f"{caveats.SELF_REPORTED_MARK} ({why}): this repo ranks only verified submissions")
        partial_in: dict[str, str] = {}
        covered_in: dict[str, int] = {}
        for cond in _conditions(rows["condition"]):
            rc = rows[rows["condition"] == cond]
            blocks_c = cond_blocks.get(cond, set())
            covered = finite_blocks(rc) & blocks_c
            covered_in[cond] = len(covered)
            parts = []
            if len(covered) < len(blocks_c):
                parts.append(f"covers {len(covered)} of the group's {len(blocks_c)} block(s)")
            else:
                for m in REQUIRED_METRICS:
                    need = held_blocks[m] & blocks_c
                    have = _metric_blocks(rc, m) & need
                    if len(have) < len(need):
                        parts.append(f"{METRIC_LABELS[m]} on {len(have)} of {len(need)} block(s)")
            if parts:
                partial_in[cond] = f"partial in {cond}: " + ", ".join(parts)
        ranked_in = [] if whole else [c for c in covered_in if c not in partial_in]
        if whole or partial_in:
            first = MAIN_CONDITION if MAIN_CONDITION in covered_in else next(iter(partial_in or covered_in), "")
            n_main = covered_in.get(first, 0)
            apart.append(ListedApart(method, rid, whole + list(partial_in.values()), n_main, rows,
                                     partial=bool(partial_in), copied=is_copied, not_comparable=not_comparable,
                                     mismatch=is_mismatch, self_reported=self_reported, verification=status,
                                     verification_detail=detail, partial_in=partial_in, ranked_in=ranked_in,
                                     n_blocks_in=covered_in))
        if not ranked_in:
            continue
        keep = rows[rows["condition"].isin(ranked_in)]
        keep = keep[[b in cond_blocks.get(c, set()) for c, b in zip(keep["condition"], keep["block_id"])]].copy()
        mark = [caveats.VERIFIED_MARK if status == VERIFIED else caveats.SELF_REPORTED_MARK]
        if excluded[key] and n_excluded[key]:
            copies_excluded[method] = n_excluded[key]
            mark.append(caveats.copies_excluded_mark(n_excluded[key]))
            if "n_copied" in keep:  # scored without the flagged images: no longer a copy in the tables
                keep["n_copied"] = 0.0
        marks[method] = "; ".join(mark)
        if status == UNVERIFIABLE:
            notes.append(f"{method}: {caveats.SELF_REPORTED_MARK}: unverifiable ({detail or 'no reason recorded'})")
        if checks[key].status == "unchecked":
            notes.append(f"{method}: anchors not checked ({checks[key].detail or 'not recorded'})")
        for cond in ranked_in:
            ranked.setdefault(cond, set()).add(method)
        ranked_parts.append(keep)

    ranked_rows = pd.concat(ranked_parts, ignore_index=True) if ranked_parts else gen.iloc[0:0]
    anchor_rows = anchors[anchors["block_id"].astype(str).isin(full)] if len(anchors) else anchors
    rows = pd.concat([ranked_rows, anchor_rows], ignore_index=True)
    rows = rows.drop(columns=[c for c in _HELPER_COLUMNS if c in rows.columns]).reset_index(drop=True)
    cities = rows["city"] if "city" in rows else pd.Series([], dtype=str)
    thin = caveats.thin_anchor_blocks(anchor_rows) if len(anchor_rows) else []
    shown_conds = set(gen["condition"]) | set(ranked)
    if pin is not None and MAIN_CONDITION in pin.blocks:
        shown_conds.add(MAIN_CONDITION)
    if unpinned:
        n = sum(len(g.run_ids) for g in unpinned)
        notes.append(f"{n} submission(s) in {len(unpinned)} group(s) that leaderboard.json does not pin are not shown "
                     "(only the maintainer's pinned groups are ranked): " + "; ".join(g.label for g in unpinned))
    return LeaderboardView(
        chosen, rows, sorted(full), sorted(set().union(*ranked.values())) if ranked else [],
        [g for g in groups if g is not chosen], notes,
        apart=apart, anchor_methods=sorted(anchor_rows["method"].unique()) if len(anchor_rows) else [],
        anchor_blocks=sorted(finite_blocks(anchor_rows)), anchor_source=anchor_source, thin_blocks=thin,
        n_cities=int(cities.dropna().nunique()), gaas_segmenter=gaas_seg, n_sanity_rows=n_sanity,
        condition_blocks={c: sorted(b) for c, b in sorted(cond_blocks.items(), key=lambda kv: _condition_order(kv[0]))},
        conditions=_conditions(shown_conds), ranked={c: sorted(ranked[c]) for c in _conditions(ranked)},
        marks=marks, copies_excluded=copies_excluded, require_verified=require_verified,
        banner="" if pin is not None else LEGACY_BANNER, unpinned=unpinned, gaas_choice=gaas_choice,
        unpromptable=unpromptable,
    )


def _segmenter_names(keys, run_infos: "Mapping[str, Mapping] | None") -> dict[str, str]:
    """{segmenter key of the rows (config hash, else name): its registry name}: from the runs' run.json where
    given; a key that is no hex digest (a run.json without a config hash records the name) names itself."""
    import re

    names = {k: k for k in keys if not re.fullmatch(r"[0-9a-fA-F]{16,}", k)}
    for info in (run_infos or {}).values():
        key = segmenter_of_run(info)
        if key in keys and segmenter_name_of_run(info):
            names[key] = segmenter_name_of_run(info)
    return names


def _swap_first_cell(line: str, label: str) -> str:
    """A Markdown table line with its first cell replaced by ``label`` (escaped as the report escapes it)."""
    end = line.find(" | ", 2)
    if not line.startswith("| ") or end < 0:
        return line
    return "| " + str(label).replace("|", "\\|").replace("\n", " ") + line[end:]


def _mark_tables(view: LeaderboardView, tables: dict[str, Any]) -> None:
    """Every ranked method's label carries its marks (:attr:`LeaderboardView.marks`) in Table 10 and the condition
    table (and in their data, column ``submission_marks``); their notes name the conditions a ranked submission
    is listed apart in, and Table 10's the legend of each mark used."""
    apart_main = {a.method: a.partial_in[MAIN_CONDITION] for a in view.apart
                  if a.ranked_in and MAIN_CONDITION in a.partial_in}
    for name in ("leaderboard", "cos_sim_by_condition"):
        t = tables.get(name)
        if t is None or not t.ok or "method" not in t.data.columns:
            continue
        data = t.data.reset_index(drop=True)
        groups = data["group"].astype(str) if "group" in data.columns else pd.Series("generator", index=data.index)
        ranked = (groups == "generator") & (data["method"].astype(str) != "generator_mean")
        data["submission_marks"] = [view.marks.get(str(m), "") if ok else "" for m, ok in zip(data["method"], ranked)]
        lines = t.markdown.split("\n")
        if len(lines) - 2 == len(data):  # one Markdown line per row, in the data's order (else left as it is)
            for i, (method, mark) in enumerate(zip(data["method"].astype(str), data["submission_marks"])):
                if not mark:
                    continue
                line = lines[i + 2]
                # Table 10 has a label column; Table 5's label is the Markdown's first cell (escaped)
                label = (str(data.at[i, "label"]) if "label" in data.columns
                         else line[2:line.find(" | ", 2)].replace("\\|", "|"))
                label = f"{label} ({mark})"
                lines[i + 2] = _swap_first_cell(line, label)
                if "label" in data.columns:
                    data.at[i, "label"] = label
        t.data, t.markdown = data, "\n".join(lines)
        if name == "leaderboard":
            for method, why in sorted(apart_main.items()):
                stale = f"left out: {method_label(method)} has no {MAIN_CONDITION} rows"
                t.notes = [n for n in t.notes if not n.startswith(stale)]
                t.notes.append(f"left out: {method_label(method)} is listed apart under {MAIN_CONDITION}, never ranked "
                               f"or bolded there ({why})")
            t.notes += [legend for mk, legend in caveats.MARK_LEGENDS.items()
                        if any(mk in m for m in data["submission_marks"])]
        else:
            for a in view.apart:
                if a.ranked_in:
                    t.notes += [f"{method_label(a.method)}: {why}: its {cond} cells are left out"
                                for cond, why in a.partial_in.items()]


def leaderboard_tables(view: LeaderboardView, run_infos: Sequence[dict] = (), *, seed: int = caveats.BOOTSTRAP_SEED,
                       n_resamples: int = caveats.BOOTSTRAP_RESAMPLES, confidence: float = 0.95) -> dict[str, Any]:
    """Table 10, the condition and the control tables of ``view``'s ranked rows ({name: report Table}); every
    ranked method's label carries its marks."""
    from .tables import table_controls, table_cos_sim_by_condition, table_leaderboard

    ctx = Context(view.rows.drop(columns=list(_LOAD_COLUMNS), errors="ignore"), list(run_infos), seed=seed,
                  n_resamples=n_resamples, rank_resamples=1, confidence=confidence)
    tables = {t.name: t for t in (table_leaderboard(ctx), table_cos_sim_by_condition(ctx), table_controls(ctx))}
    _mark_tables(view, tables)
    return tables


def report_from_repo(repo_id: str, out_dir: str | os.PathLike, *, endpoint: str | None = None,
                     revision: str | None = None, group: str | None = None, **kwargs: Any) -> dict:
    """The full report of one comparable group of the results repo ``repo_id`` (ranked submissions
    and the group's anchors; the submissions listed apart are named in the notes)."""
    from ..hub.results_repo import load_submissions
    from .render import build_report

    df, infos = load_submissions(repo_id, endpoint=endpoint, revision=revision)
    view = leaderboard_view(df, group, run_infos=infos)
    used = [infos[r] for r in sorted(set(view.rows["run_id"].astype(str))) if r in infos]
    rows = view.rows.drop(columns=list(_LOAD_COLUMNS), errors="ignore")
    apart = [f"listed apart: {a.method} (run {a.run_id}, {a.mark}): {'; '.join(a.reasons)}" for a in view.apart]
    marks = [f"{method}: {mark}" for method, mark in sorted(view.marks.items())]
    notes = [*view.header_lines(kwargs.get("n_resamples", caveats.BOOTSTRAP_RESAMPLES),
                                kwargs.get("seed", caveats.BOOTSTRAP_SEED)),
             view.other_text(), *marks, *view.notes, *apart]
    # report.md and report.json open with what the leaderboard says of the group (the same lines the command
    # prints): the counts and coverage a reader checks Table 10 against
    preamble = [f"Results repo {repo_id}, comparable group {view.group.label}:", *notes]
    report = build_report(rows, out_dir, run_info=used, preamble=preamble, **kwargs)
    report["leaderboard_group"] = view.group.label
    report["leaderboard_blocks"] = len(view.blocks)
    report["leaderboard_condition_blocks"] = {c: len(b) for c, b in view.condition_blocks.items()}
    report["leaderboard_marks"] = dict(view.marks)
    report["leaderboard_coverage"] = view.coverage()
    report["leaderboard_notes"] = notes
    return report


__all__ = [
    "LEGACY_BANNER",
    "REFERENCE_ENCODER",
    "LeaderboardView",
    "ListedApart",
    "SubmissionGroup",
    "default_group",
    "finite_blocks",
    "group_submissions",
    "leaderboard_tables",
    "leaderboard_view",
    "pinned_groups",
    "report_from_repo",
]
