"""What an import tells: the error that stops it, the issues it records, and the report it writes."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GeoFidelityError
from .layout import REPORT_FILE


class ReleaseImportError(GeoFidelityError, ValueError):
    """The release folder cannot be imported at all (a required file or column is missing)."""


@dataclass
class ImportIssue:
    """One thing the importer did not take over as it was."""

    kind: str
    file: str
    line: int | None
    action: str
    reason: str
    values: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        where = f"{self.file} line {self.line}" if self.line else self.file
        return f"{where}: {self.reason} ({self.action})"


@dataclass
class ImportReport:
    source: str
    out: str
    release_version: str | None
    counts: dict[str, Any]
    block_id_map: dict[str, str]
    model_map: dict[str, str]
    level_map: dict[str, str]
    negative_columns: dict[str, str]
    issues: list[ImportIssue]

    @property
    def issue_counts(self) -> dict[str, int]:
        return dict(sorted(Counter(i.kind for i in self.issues).items()))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["issue_counts"] = self.issue_counts
        return data

    def summary(self, max_examples: int = 3) -> str:
        c = self.counts
        lines = [
            f"imported GeoFidelity-Bench release {self.release_version or '(version unknown)'} from {self.source}",
            f"  benchmark    {c['benchmark_dir']}: {c['blocks']} blocks in {c['cities']} cities, "
            f"{c['references']} references ({c['distinct_images']} distinct images)",
        ]
        if c.get("generations_dir"):
            models = ", ".join(
                f"{ours} (from {theirs})" if ours != theirs else ours for theirs, ours in sorted(self.model_map.items())
            )
            lines.append(
                f"  generations  {c['generations_dir']}: {c['generated_images']} images in {c['panels']} panels; "
                f"models {models or '-'}; conditions {', '.join(c['conditions']) or '-'}"
            )
            lines.append(
                f"  seeds        {c['seeds_exact']} exact, {c['seeds_missing']} missing in the release, "
                f"{c['seeds_unverified']} not verifiable (null)"
            )
        else:
            lines.append("  generations  none imported")
        pub = c.get("published")
        if c.get("published_dir") and pub:
            dis = sum(n for n in (pub.get("summary_disagreements") or {}).values() if n)
            lines.append(
                f"  published    {c['published_dir']}: {pub['rows']} of the release's {pub['release_rows']} score rows "
                f"({', '.join(pub['methods'])}; conditions {', '.join(pub['conditions'])}), as published, not "
                f"recomputed; {pub['similarities_reassigned']} similarity value(s) moved to their negative's column; "
                f"summaries: {dis} disagreement(s) with the raw rows"
            )
        else:
            lines.append("  published    none (no outputs/eval_v3/raw_results.csv converted)")
        if self.block_id_map:
            lines.append(f"  block ids    {len(self.block_id_map)} rewritten to safe ids (see block_id_map)")
        if not self.issues:
            lines.append("  issues       none: every row was imported as it was")
        else:
            lines.append(f"  issues       {len(self.issues)} row(s)/value(s) not imported as they were:")
            for kind, n in self.issue_counts.items():
                lines.append(f"    {kind} ({n})")
                for issue in [i for i in self.issues if i.kind == kind][:max_examples]:
                    lines.append(f"      - {issue.describe()}")
                if n > max_examples:
                    lines.append(f"      ... and {n - max_examples} more")
        lines.append(f"  report       {Path(self.out) / REPORT_FILE}")
        return "\n".join(lines)
