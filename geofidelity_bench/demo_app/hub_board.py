"""The app's Hub leaderboard: a results repo (``push-results``) loaded at start and on refresh.

Plain library code (no gradio): :class:`HubBoard` keeps the last state that loaded; a failed
refresh (offline, missing repo, HTTP error) keeps showing it and says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..provenance import utc_timestamp


@dataclass
class HubBoard:
    repo_id: str
    endpoint: str | None = None
    n_resamples: int = 1000
    markdown: str = ""
    loaded_at: str | None = None
    status: str = ""
    tables: dict[str, Any] = field(default_factory=dict)

    def refresh(self) -> "HubBoard":
        """Loads the repo again; on failure keeps the last loaded state and records the reason."""
        from ..errors import GeoFidelityError
        from ..hub.results_repo import load_submissions
        from ..report.leaderboard import leaderboard_tables, leaderboard_view

        try:
            df, infos = load_submissions(self.repo_id, endpoint=self.endpoint)
            view = leaderboard_view(df)
            tables = leaderboard_tables(view, list(infos.values()), n_resamples=self.n_resamples)
        except (GeoFidelityError, OSError) as err:
            when = f"the state loaded at {self.loaded_at}" if self.loaded_at else "nothing (never loaded)"
            self.status = f"Could not load {self.repo_id} ({err}); showing {when}."
            return self
        self.tables, self.loaded_at = tables, utc_timestamp()
        self.markdown = render_board(self.repo_id, view, tables)
        self.status = f"Loaded {self.repo_id} at {self.loaded_at}: {df['run_id'].nunique()} submission(s)."
        return self


def render_board(repo_id: str, view, tables) -> str:
    lines = [f"### Comparable group: {view.group.label}",
             f"{len(view.methods)} method(s), {len(view.blocks)} block(s) covered by every method.",
             "", view.other_text(), *(f"- {n}" for n in view.notes)]
    for t in tables.values():
        lines += ["", f"#### {t.title}", t.caption, "", t.markdown if t.ok else f"skipped: {t.reason}"]
        lines += [f"- {n}" for n in t.notes]
    return "\n".join(lines)


def submit_markdown(repo_id: str | None) -> str:
    """How to submit: generate -> evaluate -> push-results (no token ever goes through the app)."""
    repo = repo_id or "ORG/NAME"
    return f"""### Submit your model

Run these three commands on your own machine (the app never asks for a token: `push-results`
uses your own `HF_TOKEN` or `hf auth login`):

```bash
geofidelity-bench generate --model YOUR_MODEL --benchmark BENCHMARK --out gen
geofidelity-bench evaluate --generated gen --benchmark BENCHMARK --encoder dinov2-base --out results
geofidelity-bench push-results results --repo-id {repo} [--model-card YOUR_ORG/YOUR_MODEL]
```

`push-results` checks the folder (scores finite and in range; run.json with the benchmark
fingerprint, the encoder config and hash, the protocol and the library version) and uploads it
under `submissions/{{method}}/{{run_id}}/`. Only submissions with the same benchmark, encoder
config and protocol are ranked together. Press "Refresh" on the Hub leaderboard tab to see yours.
"""
