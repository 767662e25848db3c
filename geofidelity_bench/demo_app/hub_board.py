"""The app's Hub leaderboard: a results repo (``push-results``) loaded at start and on refresh.

Plain library code (no gradio): :class:`HubBoard` keeps the last state that loaded; a failed
refresh (offline, missing repo, HTTP error) keeps showing it and says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..caveats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, MISMATCH_MARK, UNPROMPTABLE_MARK
from ..provenance import utc_timestamp


@dataclass
class HubBoard:
    repo_id: str
    endpoint: str | None = None
    #: the one bootstrap setting of the project (the report's): the Hub tab's intervals are the CLI report's
    n_resamples: int = BOOTSTRAP_RESAMPLES
    seed: int = BOOTSTRAP_SEED
    markdown: str = ""
    loaded_at: str | None = None
    status: str = ""
    tables: dict[str, Any] = field(default_factory=dict)
    #: the group's report plots (leaderboard.png with its whiskers, CosSim by condition, ...): (PIL image, caption)
    plots: list[tuple[Any, str]] = field(default_factory=list)
    #: why there are no plots ("" when there are)
    plots_note: str = ""

    def refresh(self) -> "HubBoard":
        """Loads the repo again; on failure keeps the last loaded state and records the reason."""
        from ..errors import GeoFidelityError, redact_url
        from ..hub.results_repo import load_submissions
        from ..report.leaderboard import leaderboard_tables, leaderboard_view
        from .results import report_images

        try:
            df, infos = load_submissions(self.repo_id, endpoint=self.endpoint)
            view = leaderboard_view(df, run_infos=infos)
            tables = leaderboard_tables(view, list(infos.values()), n_resamples=self.n_resamples, seed=self.seed)
        except (GeoFidelityError, OSError) as err:
            when = f"the state loaded at {self.loaded_at}" if self.loaded_at else "nothing (never loaded)"
            self.status = redact_url(f"Could not load {self.repo_id} ({err}); showing {when}.")
            return self
        used = [infos[r] for r in sorted(set(view.rows["run_id"].astype(str))) if r in infos]
        rows = view.rows.drop(columns=["stored_as", "anchor_check", "anchor_check_detail", "committed_at",
                                       "verification", "verification_detail", "copies_excluded"], errors="ignore")
        # the same rows, bootstrap and seed as the tables: the whiskers of leaderboard.png are their intervals
        plots, note = report_images(rows, used, n_resamples=self.n_resamples, seed=self.seed, rank_resamples=1)
        self.plots, self.plots_note = plots, ("" if plots else note)
        self.tables, self.loaded_at = tables, utc_timestamp()
        self.markdown = render_board(self.repo_id, view, tables, n_resamples=self.n_resamples, seed=self.seed)
        gen = df[~df["condition"].isin(("anchor", "sanity"))]
        n_subs = len(gen[["method", "run_id"]].drop_duplicates())
        self.status = f"Loaded {self.repo_id} at {self.loaded_at}: {n_subs} generator submission(s)."
        return self


def render_board(repo_id: str, view, tables, *, n_resamples: int = BOOTSTRAP_RESAMPLES,
                 seed: int = BOOTSTRAP_SEED) -> str:
    """The Hub tab's Markdown: the legacy banner (a repo without leaderboard.json), the group, its counts per
    condition and caveats, each ranked submission's marks, the ranked tables (labels marked), the submissions
    listed apart."""
    header = view.header_lines(n_resamples, seed)
    banner = getattr(view, "banner", "")
    lines = []
    if banner:  # the first thing a reader sees: nothing here is verified
        lines += [f"> **{banner}**".replace("ORG/NAME", repo_id), ""]
        header = [line for line in header if line != banner]
    lines += [f"### Comparable group: {view.group.label}", ""]
    lines += [f"- {line}" for line in header]
    lines += ["", view.other_text(), *(f"- {n}" for n in view.notes)]
    marks = getattr(view, "marks", {}) or {}
    if marks:
        ranked = getattr(view, "ranked", {}) or {}
        lines += ["", "#### Ranked submissions"]
        for method, mark in sorted(marks.items()):
            conds = [c for c, methods in ranked.items() if method in methods]
            lines.append(f"- {method}: {mark}" + (f" (ranked in {', '.join(conds)})" if conds else ""))
    for t in tables.values():
        lines += ["", f"#### {t.title}", t.caption, "", t.markdown if t.ok else f"skipped: {t.reason}"]
        lines += [f"- {n}" for n in t.notes]
    if view.apart or getattr(view, "unpromptable", None):
        lines += ["", "#### Listed apart (not ranked)",
                  "Submissions, or the conditions of a submission, that are partial (do not cover the group's blocks "
                  "of that condition, or miss a score on a block where the held-out anchor has it), not comparable "
                  "(their anchors differ from the group's), copied, whose verification found other numbers "
                  f"({MISMATCH_MARK}), not verified where this repo ranks only verified submissions, or scored "
                  f"without a prompt of the benchmark ({UNPROMPTABLE_MARK}): plain means "
                  "over their own blocks, never ranked or bolded.",
                  "", view.apart_markdown()]
    return "\n".join(lines)


def submit_markdown(repo_id: str | None, *, hub_tab: bool | None = None) -> str:
    """How to submit: generate -> evaluate -> push-results (no token ever goes through the app).

    ``hub_tab``: whether the running app has the "Hub leaderboard" tab (default: when ``repo_id`` is
    given, as ``geofidelity-bench app --results-repo``); the last sentence says where to see the result."""
    repo = repo_id or "ORG/NAME"
    hub_tab = bool(repo_id) if hub_tab is None else hub_tab
    if hub_tab:
        see = f'Press "Refresh" on the Hub leaderboard tab of this app to see yours (it shows `{repo}`).'
    else:
        see = ("This app shows no Hub leaderboard (it was started without `--results-repo`): run "
               "`geofidelity-bench app --results-repo ORG/NAME` to add that tab, or build the report of the "
               "repo with `geofidelity-bench report --results ORG/NAME --out report`.")
    return f"""### Submit your model

Run these three commands on your own machine (the app never asks for a token: `push-results`
uses your own `HF_TOKEN` or `hf auth login`):

```bash
geofidelity-bench generate --model YOUR_MODEL --benchmark BENCHMARK --out gen
geofidelity-bench evaluate --generated gen --benchmark BENCHMARK --encoder dinov2-base --out results
geofidelity-bench push-results results --repo-id {repo} [--model-card YOUR_ORG/YOUR_MODEL]
```

`push-results` checks the folder (scores finite and in range; run.json with the benchmark
fingerprint, the encoder config and hash, the protocol and the library version; no generated
image flagged by the copy audit unless `--allow-copies`) and uploads each generator's rows under
`submissions/{{method}}/{{run_id}}/`. The real-image anchors are stored once per comparable group and
your run's anchors are checked against them; sanity methods are not submitted. Only submissions
with the same benchmark, encoder config and protocol that cover all of the group's blocks are
ranked together (GAAS only with the same segmenter). {see}
"""
