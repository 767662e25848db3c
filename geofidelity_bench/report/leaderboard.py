"""The living leaderboard: submissions of a results repo, ranked only among equals.

The rules are those of docs/benchmark.md section 13 (Submissions):

- scores are compared only within one comparable group (:mod:`geofidelity_bench.comparability`:
  benchmark fingerprint, encoder config hash, protocol version); GAAS only within one segmenter
  (the group's most frequent; other submissions' GAAS is shown as n/a with the reason);
- a submission is a generator's rows (contract C3); the real-image anchors belong to the group
  (stored once, ``anchors/{group_id}/results.csv``; older repos kept them inside each submission,
  and the oldest run's are then the group's); sanity methods are never ranked;
- a submission whose anchors differ from the group's (another encoder or pipeline), one whose
  images copy the benchmark's photos (:data:`~geofidelity_bench.caveats.COPIED_MARK`) and one
  that does not cover the group's full block set ("partial"; blocks count only finite scores) are
  listed apart with the reason: never ranked, never bolded, never in rank stability.

:func:`leaderboard_view` picks one group (default: the reference encoder ``dinov2-base`` on the
newest benchmark version, else the largest group), keeps the newest submission of each method and
applies the rules; :func:`leaderboard_tables` computes Table 10, the condition and the control
tables on the ranked rows with the report's own builders and the one bootstrap setting
(:data:`~geofidelity_bench.caveats.BOOTSTRAP_RESAMPLES`, :data:`~geofidelity_bench.caveats.BOOTSTRAP_SEED`).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .. import caveats
from ..comparability import FIELDS, ROW_COLUMNS, AnchorCheck, check_anchors, group_id
from ..metrics.catalog import RESULT_METRIC_COLUMNS
from .context import METRIC_LABELS, Context, ReportError, method_label

REFERENCE_ENCODER = "dinov2-base"
#: The submitted rows' columns that hold the comparability key (benchmark, encoder config, protocol).
GROUP_KEYS = tuple(ROW_COLUMNS[attr] for attr, _ in FIELDS)
ANCHOR_CONDITION, SANITY_CONDITION = "anchor", "sanity"
MAIN_CONDITION = "L1"
#: A block is covered by a row when one of these scores is finite (GAAS needs a segmenter, so it does not count).
COVERAGE_COLUMNS = tuple(c for c in RESULT_METRIC_COLUMNS if c != "gaas")
#: The scores the "listed apart" table shows (plain means over the submission's own blocks, no interval).
APART_METRICS = ("cos_sim", "dcsf", "retrieval_acc", "strongest_margin")


def finite_blocks(rows: pd.DataFrame) -> set[str]:
    """The blocks of ``rows`` with at least one finite score (a row whose every score is NaN covers nothing)."""
    if rows.empty:
        return set()
    cols = [c for c in COVERAGE_COLUMNS if c in rows.columns]
    values = rows[cols].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    return set(rows.loc[np.isfinite(values).any(axis=1), "block_id"].astype(str))


def _roles(df: pd.DataFrame) -> pd.Series:
    cond = df["condition"].astype(str)
    return cond.map({ANCHOR_CONDITION: "anchor", SANITY_CONDITION: "sanity"}).fillna("generator")


def _text_col(df: pd.DataFrame, col: str) -> pd.Series:
    if col not in df.columns:
        return pd.Series("", index=df.index)
    return df[col].map(lambda v: "" if v is None or (isinstance(v, float) and v != v) else str(v).strip())


@dataclass
class SubmissionGroup:
    key: tuple[str, str, str]
    benchmark: str
    encoder: str
    run_ids: list[str]  # the generator submissions (runs) of the group
    newest: str

    @property
    def label(self) -> str:
        fp, enc_hash, protocol = self.key
        return f"{self.benchmark} ({fp[:12]}), encoder {self.encoder} ({enc_hash[:12]}), protocol {protocol}"

    @property
    def group_id(self) -> str:
        return group_id(self.key)


@dataclass
class ListedApart:
    """A submission shown apart from the ranking, with why."""

    method: str
    run_id: str
    reasons: list[str]
    n_blocks: int  # blocks it covers (finite scores)
    rows: pd.DataFrame
    partial: bool = False
    copied: bool = False
    not_comparable: bool = False


@dataclass
class LeaderboardView:
    group: SubmissionGroup
    rows: pd.DataFrame  # the ranked generators' rows and the group's anchors, on the group's blocks
    blocks: list[str]  # the group's full block set (finite scores)
    methods: list[str]  # the ranked generator methods
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

    def other_text(self) -> str:
        """How many submissions the other groups hold, and why they are not shown."""
        if not self.others:
            return "All submissions are in this group."
        n = sum(len(g.run_ids) for g in self.others)
        parts = []
        for g in self.others:
            why = [name for name, a, b in zip(("benchmark version", "encoder config", "protocol version"),
                                               g.key, self.group.key) if a != b]
            parts.append(f"{len(g.run_ids)} in [{g.label}]: another {', another '.join(why)}")
        return (f"{n} submission(s) in {len(self.others)} other group(s) are not shown, because scores are only "
                f"comparable with the same benchmark, encoder config and protocol: " + "; ".join(parts))

    def header_lines(self, n_resamples: int = caveats.BOOTSTRAP_RESAMPLES,
                     seed: int = caveats.BOOTSTRAP_SEED) -> list[str]:
        """The counts and caveats a reader needs above the tables (every count from the rows shown)."""
        n_b = len(self.blocks)
        partial = sum(a.partial for a in self.apart)
        mism = sum(a.not_comparable for a in self.apart)
        copied = sum(a.copied for a in self.apart)
        lines = [
            f"Ranked: {len(self.methods)} generator submission(s), each covering all {n_b} block(s) of the group "
            f"({self.n_cities} cit{'y' if self.n_cities == 1 else 'ies'}); a block counts only with a finite score.",
            f"Listed apart, never ranked or bolded: {partial} partial, {mism} not comparable, {copied} copied.",
        ]
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
        thin = caveats.interval_caveat(n_b, self.n_cities)
        if thin:
            lines.append(f"Caveat: {thin}.")
        note = caveats.thin_anchor_note(len(self.thin_blocks), len(self.anchor_blocks))
        if note:
            lines.append(f"{caveats.REPEATS_MARK}: {note} (blocks: {', '.join(self.thin_blocks)}).")
        if self.gaas_segmenter:
            lines.append(f"GAAS: compared only within segmenter {self.gaas_segmenter[:12]}.")
        return lines

    def apart_markdown(self) -> str:
        """The submissions listed apart: status and plain means over their own blocks ({MAIN_CONDITION})."""
        if not self.apart:
            return ""
        from ..metrics.catalog import METRICS

        heads = ["Model", "Run", "Status", "Blocks",
                 *(f"{METRIC_LABELS[m]} {'↑' if METRICS[m].higher_is_better else '↓'} ({MAIN_CONDITION})"
                   for m in APART_METRICS)]
        body = []
        for a in self.apart:
            main = a.rows[a.rows["condition"] == MAIN_CONDITION]
            cells = []
            for m in APART_METRICS:
                vals = pd.to_numeric(main[m], errors="coerce").to_numpy(dtype=float) if m in main else np.array([])
                cells.append(f"{np.nanmean(vals):.3f}" if np.isfinite(vals).any() else "n/a")
            name = method_label(a.method) + (f" {caveats.COPIED_MARK}" if a.copied else "")
            body.append([name, a.run_id, "; ".join(a.reasons), f"{a.n_blocks} of {len(self.blocks)}", *cells])
        lines = ["| " + " | ".join(heads) + " |", "|" + "|".join("---" for _ in heads) + "|"]
        lines += ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in body]
        return "\n".join(lines)


def group_submissions(df: pd.DataFrame) -> list[SubmissionGroup]:
    """The comparable groups of submitted rows (and stored anchors), newest first."""
    missing = [c for c in (*GROUP_KEYS, "run_id") if c not in df.columns]
    if missing:
        raise ReportError(f"the submitted rows lack column(s) {missing}")
    groups = []
    keyed = df.assign(**{c: _text_col(df, c) for c in GROUP_KEYS}, _role=_roles(df),
                      _stored=_text_col(df, "stored_as").replace("", "submission"))
    for key, part in keyed.groupby(list(GROUP_KEYS), sort=True):
        created = part["created_at"].dropna().astype(str) if "created_at" in part else pd.Series([], dtype=str)
        gen = part[(part["_role"] == "generator") & (part["_stored"] == "submission")]
        groups.append(SubmissionGroup(
            tuple(key), str(part["benchmark_name"].iloc[0]) if "benchmark_name" in part else "?",
            ", ".join(sorted(part["encoder"].dropna().astype(str).unique())) if "encoder" in part else "?",
            sorted(gen["run_id"].astype(str).unique()), created.max() if len(created) else "",
        ))
    return sorted(groups, key=lambda g: g.newest, reverse=True)


def default_group(groups: Sequence[SubmissionGroup]) -> SubmissionGroup:
    """The reference encoder on the newest benchmark version, else the largest group."""
    reference = [g for g in groups if g.encoder == REFERENCE_ENCODER]
    if reference:
        return max(reference, key=lambda g: g.newest)
    return max(groups, key=lambda g: (len(g.run_ids), g.newest))


def _first_per_key(rows: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    order = rows.assign(_t=_text_col(rows, "created_at"), _r=_text_col(rows, "run_id"))
    order = order.sort_values(["_t", "_r"], kind="mergesort")
    return order.drop_duplicates(list(keys), keep="first").drop(columns=["_t", "_r"])


def _group_anchors(part: pd.DataFrame, gid: str):
    """(the group's anchor rows with every segmenter, where they come from, {run_id: AnchorCheck} of legacy runs)."""
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


def leaderboard_view(df: pd.DataFrame, group: str | None = None) -> LeaderboardView:
    """The ranked rows of one comparable group (``group``: a prefix of its benchmark fingerprint,
    encoder config hash or group id, or its label; default: :func:`default_group`)."""
    groups = group_submissions(df)
    if not groups:
        raise ReportError("no submission to show")
    if group is None:
        chosen = default_group(groups)
    else:
        hits = [g for g in groups if group == g.label or g.group_id.startswith(group)
                or any(k.startswith(group) for k in g.key[:2])]
        if len(hits) != 1:
            raise ReportError(f"{len(hits)} groups match {group!r}; the groups are: " + "; ".join(g.label for g in groups))
        chosen = hits[0]
    mask = pd.Series(True, index=df.index)
    for col, value in zip(GROUP_KEYS, chosen.key):
        mask &= _text_col(df, col) == value
    part = df[mask].copy()
    part["stored_as"] = _text_col(part, "stored_as").replace("", "submission")
    part["segmenter"] = _text_col(part, "segmenter")
    part["run_id"] = _text_col(part, "run_id")
    notes: list[str] = []
    roles = _roles(part)
    n_sanity = int((roles == "sanity").sum())

    anchors_all, anchor_source, legacy_checks = _group_anchors(part, chosen.group_id)

    # the newest submission of each generator method
    gen_all = part[(roles == "generator") & (part["stored_as"] == "submission")]
    order = gen_all.assign(_t=_text_col(gen_all, "created_at")).sort_values(["_t", "run_id"], kind="mergesort")
    latest = order.groupby("method")["run_id"].last() if len(order) else pd.Series(dtype=str)
    for method, run_id in latest.items():
        older = sorted(set(gen_all.loc[gen_all["method"] == method, "run_id"]) - {run_id})
        if older:
            notes.append(f"{method}: the newest submission {run_id} is shown ({len(older)} older: {', '.join(older)})")
    gen = gen_all[gen_all["run_id"] == gen_all["method"].map(latest)].copy()

    # GAAS: only within one segmenter (the one most of the shown submissions used)
    per_run = gen.drop_duplicates("run_id")
    segs = Counter(s for s in per_run["segmenter"] if s)
    gaas_seg = sorted(segs.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] if segs else ""
    if "gaas" in gen:
        for (method, seg), rows in gen.groupby(["method", "segmenter"]):
            has = np.isfinite(pd.to_numeric(rows["gaas"], errors="coerce").to_numpy(dtype=float)).any()
            if has and seg != gaas_seg:
                why = (f"segmenter {seg[:12]}, not the group's {gaas_seg[:12]}" if seg and gaas_seg
                       else "its segmenter is not recorded")
                notes.append(f"GAAS of {method}: n/a ({why}; GAAS is compared only within one segmenter)")
        gen.loc[(gen["segmenter"] != gaas_seg) | (gaas_seg == ""), "gaas"] = np.nan
    anchors = _gaas_for(anchors_all, gaas_seg)

    # the group's full block set, and each submission's status
    subs = {rid: rows for rid, rows in gen.groupby("run_id")}
    copied_runs = {rid for rid, rows in subs.items() if bool(caveats.copied_mask(rows).any())}

    def check_of(rid: str, rows: pd.DataFrame) -> AnchorCheck:
        if rid in legacy_checks:
            return legacy_checks[rid]
        status = _text_col(rows, "anchor_check").iloc[0] if len(rows) else ""
        return AnchorCheck(status or "unchecked", _text_col(rows, "anchor_check_detail").iloc[0] if len(rows) else "")

    checks = {rid: check_of(rid, rows) for rid, rows in subs.items()}
    full = finite_blocks(anchors)
    for rid, rows in subs.items():
        if rid not in copied_runs and checks[rid].comparable:
            full |= finite_blocks(rows)
    blocks = sorted(full)
    apart: list[ListedApart] = []
    ranked: list[str] = []
    for rid, rows in sorted(subs.items(), key=lambda kv: str(kv[1]["method"].iloc[0])):
        method = str(rows["method"].iloc[0])
        covered = finite_blocks(rows) & full
        reasons = []
        is_copied = rid in copied_runs
        if is_copied:
            n_img = int(pd.to_numeric(rows["n_copied"], errors="coerce").fillna(0).clip(lower=0).sum())
            reasons.append(f"{caveats.COPIED_MARK}: {n_img} image(s) in {int(caveats.copied_mask(rows).sum())} "
                           "panel(s) copy the benchmark's own photos")
        mismatch = not checks[rid].comparable
        if mismatch:
            reasons.append(f"not comparable: {checks[rid].detail}")
        is_partial = len(covered) < len(full)
        if is_partial:
            reasons.append(f"partial: covers {len(covered)} of the group's {len(full)} block(s)")
        if reasons:
            apart.append(ListedApart(method, rid, reasons, len(covered), rows, is_partial, is_copied, mismatch))
        else:
            ranked.append(rid)
            if checks[rid].status == "unchecked":
                notes.append(f"{method}: anchors not checked ({checks[rid].detail or 'not recorded'})")

    ranked_rows = gen[gen["run_id"].isin(ranked)]
    anchor_rows = anchors[anchors["block_id"].astype(str).isin(full)] if len(anchors) else anchors
    rows = pd.concat([ranked_rows, anchor_rows], ignore_index=True)
    rows = rows[rows["block_id"].astype(str).isin(full)].reset_index(drop=True)
    cities = rows["city"] if "city" in rows else pd.Series([], dtype=str)
    thin = caveats.thin_anchor_blocks(anchor_rows) if len(anchor_rows) else []
    return LeaderboardView(
        chosen, rows, blocks, sorted(ranked_rows["method"].unique()), [g for g in groups if g is not chosen], notes,
        apart=apart, anchor_methods=sorted(anchor_rows["method"].unique()) if len(anchor_rows) else [],
        anchor_blocks=sorted(finite_blocks(anchor_rows)), anchor_source=anchor_source, thin_blocks=thin,
        n_cities=int(cities.dropna().nunique()), gaas_segmenter=gaas_seg, n_sanity_rows=n_sanity,
    )


def leaderboard_tables(view: LeaderboardView, run_infos: Sequence[dict] = (), *, seed: int = caveats.BOOTSTRAP_SEED,
                       n_resamples: int = caveats.BOOTSTRAP_RESAMPLES, confidence: float = 0.95) -> dict[str, Any]:
    """Table 10, the condition and the control tables of ``view``'s ranked rows ({name: report Table})."""
    from .tables import table_controls, table_cos_sim_by_condition, table_leaderboard

    drop = ["run", "stored_as", "anchor_check", "anchor_check_detail"]
    ctx = Context(view.rows.drop(columns=drop, errors="ignore"), list(run_infos), seed=seed,
                  n_resamples=n_resamples, rank_resamples=1, confidence=confidence)
    tables = {t.name: t for t in (table_leaderboard(ctx), table_cos_sim_by_condition(ctx), table_controls(ctx))}
    return tables


def report_from_repo(repo_id: str, out_dir: str | os.PathLike, *, endpoint: str | None = None,
                     revision: str | None = None, group: str | None = None, **kwargs: Any) -> dict:
    """The full report of one comparable group of the results repo ``repo_id`` (ranked submissions
    and the group's anchors; the submissions listed apart are named in the notes)."""
    from ..hub.results_repo import load_submissions
    from .render import build_report

    df, infos = load_submissions(repo_id, endpoint=endpoint, revision=revision)
    view = leaderboard_view(df, group)
    used = [infos[r] for r in sorted(set(view.rows["run_id"].astype(str))) if r in infos]
    rows = view.rows.drop(columns=["stored_as", "anchor_check", "anchor_check_detail"], errors="ignore")
    report = build_report(rows, out_dir, run_info=used, **kwargs)
    report["leaderboard_group"] = view.group.label
    report["leaderboard_blocks"] = len(view.blocks)
    apart = [f"listed apart: {a.method} (run {a.run_id}): {'; '.join(a.reasons)}" for a in view.apart]
    report["leaderboard_notes"] = [*view.header_lines(kwargs.get("n_resamples", caveats.BOOTSTRAP_RESAMPLES),
                                                      kwargs.get("seed", caveats.BOOTSTRAP_SEED)),
                                   view.other_text(), *view.notes, *apart]
    return report


__all__ = [
    "REFERENCE_ENCODER",
    "LeaderboardView",
    "ListedApart",
    "SubmissionGroup",
    "default_group",
    "finite_blocks",
    "group_submissions",
    "leaderboard_tables",
    "leaderboard_view",
    "report_from_repo",
]
