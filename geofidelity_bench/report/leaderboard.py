"""The living leaderboard: submissions of a results repo, compared only where comparable.

Submissions (:func:`geofidelity_bench.hub.results_repo.load_submissions`) are grouped by
(benchmark fingerprint, encoder config hash, protocol version); scores of different groups are
never ranked together. :func:`leaderboard_view` picks one group (default: the reference encoder
``dinov2-base`` on the newest benchmark version, else the largest group), keeps the newest
submission of each method, restricts the rows to the blocks every method covers, and says how
many submissions the other groups hold and why they are not shown. :func:`leaderboard_tables`
computes Table 10 (L1 generators with the real-image anchors, bootstrap intervals), the
condition table and the control table on those rows with the report's own builders.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import pandas as pd

from .context import Context, ReportError

REFERENCE_ENCODER = "dinov2-base"
GROUP_KEYS = ("benchmark_fingerprint", "encoder_config_hash", "protocol_version")


@dataclass
class SubmissionGroup:
    key: tuple[str, str, str]
    benchmark: str
    encoder: str
    run_ids: list[str]
    newest: str

    @property
    def label(self) -> str:
        fp, enc_hash, protocol = self.key
        return f"{self.benchmark} ({fp[:12]}), encoder {self.encoder} ({enc_hash[:12]}), protocol {protocol}"


@dataclass
class LeaderboardView:
    group: SubmissionGroup
    rows: pd.DataFrame  # the compared rows (newest submission per method, common blocks)
    blocks: list[str]
    methods: list[str]
    others: list[SubmissionGroup] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

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


def group_submissions(df: pd.DataFrame) -> list[SubmissionGroup]:
    """The comparable groups of submitted rows, newest first."""
    missing = [c for c in (*GROUP_KEYS, "run_id") if c not in df.columns]
    if missing:
        raise ReportError(f"the submitted rows lack column(s) {missing}")
    groups = []
    keyed = df.assign(**{c: df[c].fillna("").astype(str) for c in GROUP_KEYS})
    for key, part in keyed.groupby(list(GROUP_KEYS), sort=True):
        created = part["created_at"].dropna().astype(str) if "created_at" in part else pd.Series([], dtype=str)
        groups.append(SubmissionGroup(
            tuple(key), str(part["benchmark_name"].iloc[0]) if "benchmark_name" in part else "?",
            ", ".join(sorted(part["encoder"].dropna().astype(str).unique())) if "encoder" in part else "?",
            sorted(part["run_id"].astype(str).unique()), created.max() if len(created) else "",
        ))
    return sorted(groups, key=lambda g: g.newest, reverse=True)


def default_group(groups: Sequence[SubmissionGroup]) -> SubmissionGroup:
    """The reference encoder on the newest benchmark version, else the largest group."""
    reference = [g for g in groups if g.encoder == REFERENCE_ENCODER]
    if reference:
        return max(reference, key=lambda g: g.newest)
    return max(groups, key=lambda g: (len(g.run_ids), g.newest))


def leaderboard_view(df: pd.DataFrame, group: str | None = None) -> LeaderboardView:
    """The rows of one comparable group (``group``: a prefix of its benchmark fingerprint or encoder
    config hash, or its label; default: :func:`default_group`)."""
    groups = group_submissions(df)
    if not groups:
        raise ReportError("no submission to show")
    if group is None:
        chosen = default_group(groups)
    else:
        hits = [g for g in groups if group == g.label or any(k.startswith(group) for k in g.key[:2])]
        if len(hits) != 1:
            raise ReportError(f"{len(hits)} groups match {group!r}; the groups are: " + "; ".join(g.label for g in groups))
        chosen = hits[0]
    mask = pd.Series(True, index=df.index)
    for col, value in zip(GROUP_KEYS, chosen.key):
        mask &= df[col].fillna("").astype(str) == value
    part = df[mask]
    notes = []
    # the newest submission of each method
    order = part.assign(_t=part["created_at"].fillna("").astype(str)).sort_values(["_t", "run_id"], kind="mergesort")
    latest = order.groupby("method")["run_id"].last()
    for method, run_id in latest.items():
        older = sorted(set(part.loc[part["method"] == method, "run_id"]) - {run_id})
        if older:
            notes.append(f"{method}: the newest submission {run_id} is shown ({len(older)} older: {', '.join(older)})")
    rows = part[part["run_id"] == part["method"].map(latest)]
    methods = sorted(rows["method"].unique())
    blocks = sorted(set.intersection(*(set(rows.loc[rows["method"] == m, "block_id"]) for m in methods)))
    dropped = sorted(set(rows["block_id"]) - set(blocks))
    if dropped:
        notes.append(f"{len(dropped)} block(s) not covered by every method are left out: {', '.join(dropped)}")
    rows = rows[rows["block_id"].isin(blocks)].reset_index(drop=True)
    return LeaderboardView(chosen, rows, blocks, methods, [g for g in groups if g is not chosen], notes)


def leaderboard_tables(view: LeaderboardView, run_infos: Sequence[dict] = (), *, seed: int = 42,
                       n_resamples: int = 1000, confidence: float = 0.95) -> dict[str, Any]:
    """Table 10, the condition and the control tables of ``view`` ({name: report Table})."""
    from .tables import table_controls, table_cos_sim_by_condition, table_leaderboard

    ctx = Context(view.rows.drop(columns=["run"], errors="ignore"), list(run_infos), seed=seed,
                  n_resamples=n_resamples, rank_resamples=1, confidence=confidence)
    return {t.name: t for t in (table_leaderboard(ctx), table_cos_sim_by_condition(ctx), table_controls(ctx))}


def report_from_repo(repo_id: str, out_dir: str | os.PathLike, *, endpoint: str | None = None,
                     revision: str | None = None, group: str | None = None, **kwargs: Any) -> dict:
    """The full report of one comparable group of the results repo ``repo_id``."""
    from ..hub.results_repo import load_submissions
    from .render import build_report

    df, infos = load_submissions(repo_id, endpoint=endpoint, revision=revision)
    view = leaderboard_view(df, group)
    used = [infos[r] for r in sorted(set(view.rows["run_id"])) if r in infos]
    report = build_report(view.rows, out_dir, run_info=used, **kwargs)
    report["leaderboard_group"] = view.group.label
    report["leaderboard_blocks"] = len(view.blocks)
    report["leaderboard_notes"] = [view.other_text(), *view.notes]
    return report


__all__ = [
    "REFERENCE_ENCODER",
    "LeaderboardView",
    "SubmissionGroup",
    "default_group",
    "group_submissions",
    "leaderboard_tables",
    "leaderboard_view",
    "report_from_repo",
]
