"""A maintained leaderboard on the Hub: pinning a group (``leaderboard init``) and the one
compare-and-swap commit that every write depending on the repo's state goes through
(docs/benchmark.md section 13, Submissions and the leaderboard).

``init_leaderboard`` computes the group's real-image anchors itself (they are deterministic from
the benchmark and the encoder: seeded panels of the benchmark's own photos) and writes, in one
commit made on the commit it read:

    leaderboard.json                         the pinned groups (:mod:`.leaderboard_config`)
    anchors/{group_id}/results.csv           the group's anchor rows, computed by the maintainer
    anchors/{group_id}/run/{run_id}.json     the run.json of that computation

:func:`commit_checked` is the compare-and-swap: it reads the repo, lets the caller decide what to
write from what it read, and commits with ``parent_commit`` = the commit read; when another write
landed meanwhile (HTTP 409/412) it reads the repo again and decides again, so no check is ever made
on a state that is not the one committed on.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import GeoFidelityError
from .leaderboard_config import LEADERBOARD_FILE, LeaderboardConfig, LeaderboardConfigError, PinnedGroup, parse_config
from .requests import HubPushError, RepoChanged, check_repo_id, commit_files, describe_error, with_retries


class LeaderboardError(GeoFidelityError, ValueError):
    """A leaderboard operation that cannot be done as asked; the message says what to do."""


@dataclass
class RepoState:
    """What one read of the repo saw: its commit, its files ({path: sibling}) and a reader of a file's text
    at that commit (None when absent)."""

    commit: str
    files: dict
    read: Callable[[str], "str | None"]

    def config(self, repo_id: str) -> LeaderboardConfig | None:
        """leaderboard.json at this commit (None: a repo made before it)."""
        text = self.read(LEADERBOARD_FILE)
        if text is None:
            return None
        return parse_config(text, f"{repo_id}/{LEADERBOARD_FILE}")


def repo_state(repo) -> RepoState:
    """A :class:`RepoState` of a :class:`~geofidelity_bench.hub.push.HubRepo` (one ``dataset_info`` call)."""
    info = repo.info()
    files = {s.rfilename: s for s in (info.siblings or [])}
    sha = info.sha

    def read(path: str) -> str | None:
        return repo.read_text(path, sha) if path in files else None

    return RepoState(sha, files, read)


def commit_checked(repo, decide: Callable[[RepoState], "tuple[dict, str] | None"], *, what: str) -> str | None:
    """Compare-and-swap: ``decide(state)`` returns ({path: bytes or file}, commit message) or None (nothing
    to write); the files are committed on the commit that ``state`` read. A concurrent write makes it read
    the repo and decide again (``decide`` re-runs every check). Returns the new commit id, or None.

    Raises:
        HubPushError: the repo kept changing for every attempt.
        whatever ``decide`` raises (a check that fails on the state read).
    """
    for _ in range(max(1, repo.attempts)):
        state = repo_state(repo)
        decided = decide(state)
        if decided is None:
            return None
        files, message = decided
        if not files:
            return None
        try:
            done = commit_files(repo.api, repo.repo_id, add=files, message=message, parent_commit=state.commit,
                                what=what, retry=repo.retry)
        except RepoChanged as err:
            repo.say(f"{repo.repo_id} changed while writing {what} ({err}); reading it again and checking again")
            continue
        return getattr(done, "oid", None) or "committed"
    raise HubPushError(f"{repo.repo_id} kept changing while writing {what}; try again later")


def read_config(repo_id: str, *, endpoint: str | None = None, revision: str | None = None,
                token: str | None = None) -> tuple[LeaderboardConfig | None, str]:
    """(leaderboard.json of the results repo, or None for a repo made before it; the commit read)."""
    from huggingface_hub import HfApi

    check_repo_id(repo_id, "results repo id")
    api = HfApi(endpoint=endpoint, token=token)
    retry = dict(attempts=4, base_delay=0.5, log=lambda _m: None)
    try:
        info = with_retries(lambda: api.dataset_info(repo_id, revision=revision), f"read {repo_id}", **retry)
        names = {s.rfilename for s in (info.siblings or [])}
        if LEADERBOARD_FILE not in names:
            return None, info.sha
        with tempfile.TemporaryDirectory(prefix="geofidelity-lb-") as cache:
            path = with_retries(lambda: api.hf_hub_download(repo_id, LEADERBOARD_FILE, repo_type="dataset",
                                                            revision=info.sha, cache_dir=cache),
                                f"download {LEADERBOARD_FILE}", **retry)
            text = Path(path).read_text(encoding="utf-8")
    except LeaderboardConfigError:
        raise
    except Exception as err:  # noqa: BLE001 - offline, missing repo, HTTP error: one message
        raise LeaderboardError(f"cannot read results repo {repo_id}: {describe_error(err, token)}") from None
    return parse_config(text, f"{repo_id}/{LEADERBOARD_FILE}"), info.sha


# -- init -----------------------------------------------------------------------------------------


@dataclass
class InitReport:
    repo_id: str
    group: PinnedGroup
    commit: str | None = None
    added: bool = False  # the group was not pinned before
    default_group: str = ""
    require_verified: bool = False
    n_anchor_rows: int = 0
    anchors_path: str = ""
    notes: list = field(default_factory=list)

    def lines(self) -> list[str]:
        g = self.group
        out = [f"{self.repo_id}: {'pinned' if self.added else 'already pinned'} group {g.group_id}: {g.label()}"]
        seg = (g.segmenter or {}).get("name")
        out.append(f"{self.repo_id}: GAAS segmenter: {seg} ({g.segmenter_hash[:12]})" if seg else
                   f"{self.repo_id}: no GAAS segmenter: GAAS is not ranked in this group")
        per = ", ".join(f"{c} {len(b)}" for c, b in g.blocks.items() if b)
        out.append(f"{self.repo_id}: blocks per condition (from the benchmark): {per}")
        out.append(f"{self.repo_id}: anchors computed here: {self.n_anchor_rows} row(s) in {self.anchors_path}")
        out.append(f"{self.repo_id}: default group {self.default_group}; "
                   f"{'only verified submissions are ranked' if self.require_verified else 'self-reported submissions are ranked, marked, until verified'}")
        out += [f"{self.repo_id}: {n}" for n in self.notes]
        out.append(f"{self.repo_id}: " + (f"committed {self.commit}" if self.commit else "nothing to change"))
        return out


def compute_anchors(benchmark, encoder, *, segmenter=None, gaas_reason: str | None = None, cache=None,
                    batch_size: int = 32, num_workers: int | None = None, progress: bool = True,
                    parameters: Mapping[str, Any] | None = None):
    """(anchor rows, run.json) of the group: the three real-image anchors of ``benchmark`` scored with
    ``encoder`` (and GAAS with ``segmenter``), exactly as ``evaluate`` scores them."""
    from ..evaluation import evaluate_panels
    from ..provenance import utc_timestamp
    from ..results import run_record

    started = time.time()
    results = evaluate_panels(benchmark, {}, encoder, cache=cache, batch_size=batch_size, progress=progress,
                              include_anchors=True, segmenter=segmenter, num_workers=num_workers)
    info = {"command": "geofidelity-bench leaderboard init", "created_at": utc_timestamp(),
            "elapsed_s": round(time.time() - started, 2), "parameters": dict(parameters or {}),
            **run_record(benchmark, encoder, results, cache=cache, segmenter=segmenter, gaas_reason=gaas_reason)}
    return results[results["condition"] == "anchor"].reset_index(drop=True), info


def init_leaderboard(
    repo_id: str,
    benchmark: str,
    encoder: str,
    *,
    encoder_weights: str | None = None,
    revision: str | None = None,
    segmenter: str | None = None,
    segmenter_weights: str | None = None,
    require_verified: bool | None = None,
    make_default: bool = False,
    endpoint: str | None = None,
    token: str | None = None,
    private: bool = False,
    cache_dir: str | os.PathLike | None = None,
    device: str | None = None,
    batch_size: int = 32,
    progress: bool = True,
    attempts: int = 6,
    retry_base_delay: float = 1.0,
    log: Callable[[str], None] | None = None,
) -> InitReport:
    """Pins the comparable group of (``benchmark``, ``encoder``, protocol, ``segmenter``) in ``repo_id``.

    Computes the anchors here, then writes leaderboard.json and ``anchors/{group_id}/`` in one
    compare-and-swap commit (:func:`commit_checked`). Running it again for a pinned group re-computes the
    anchors and checks them against the stored ones (a difference is refused: the group would change under
    its submissions); ``require_verified`` (None: keep) and ``make_default`` update the repo's settings.

    Raises:
        LeaderboardError: the anchors differ from the pinned ones, or the segmenter cannot be loaded.
    """
    from ..benchmark import load_benchmark
    from ..caveats import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED
    from ..comparability import comparability_of_run
    from ..encoders import EmbeddingCache, get_encoder
    from ..provenance import library_versions
    from .leaderboard_config import condition_blocks
    from .push import HubRepo
    from .submissions import ANCHOR_FILE_COLUMNS, csv_bytes, with_columns, run_id_of

    check_repo_id(repo_id, "results repo id")
    repo = HubRepo(repo_id, token=token, endpoint=endpoint, attempts=attempts, retry_base_delay=retry_base_delay,
                   log=log)
    bench = load_benchmark(benchmark, revision=revision)
    enc = get_encoder(encoder, weights=encoder_weights, device=device)
    seg = None
    if segmenter:
        from ..segmentation import get_segmenter

        try:
            seg = get_segmenter(segmenter, weights=segmenter_weights, device=device)
        except GeoFidelityError as err:
            raise LeaderboardError(f"--segmenter {segmenter}: {err}; pin the group without GAAS (leave out --segmenter) "
                                   "or pass --segmenter-weights PATH") from None
    cache = EmbeddingCache(cache_dir) if cache_dir else None
    params = {"benchmark": benchmark, "revision": revision, "encoder": encoder, "encoder_weights": encoder_weights,
              "segmenter": segmenter, "segmenter_weights": segmenter_weights}
    anchors, info = compute_anchors(bench, enc, segmenter=seg, gaas_reason=None if seg else "no segmenter pinned",
                                    cache=cache, batch_size=batch_size, progress=progress, parameters=params)
    comp = comparability_of_run(info)
    gid = comp.group_id
    raw = csv_bytes(anchors)
    run_id = run_id_of(info, raw)
    keys = {"run_id": run_id, "benchmark_name": bench.name, "benchmark_fingerprint": bench.fingerprint,
            "encoder_config_hash": enc.config_hash, "protocol_version": comp.protocol_version,
            "segmenter": comp.segmenter, "group_id": gid,
            "library_version": library_versions().get("geofidelity-bench", ""), "created_at": info["created_at"]}
    anchor_rows = with_columns(anchors, {c: keys[c] for c in ANCHOR_FILE_COLUMNS})
    group = PinnedGroup(
        gid,
        {"id": benchmark if benchmark == "demo" or not Path(benchmark).expanduser().exists() else bench.name,
         "name": bench.name, "revision": revision, "fingerprint": bench.fingerprint},
        {"name": enc.name, "weights": encoder_weights if encoder_weights and not Path(str(encoder_weights)).exists()
         else None, "config_hash": enc.config_hash},
        comp.protocol_version,
        ({"name": seg.name, "weights": segmenter_weights if segmenter_weights and not Path(str(segmenter_weights)).exists()
          else None, "config_hash": comp.segmenter} if seg is not None else None),
        {"n_resamples": BOOTSTRAP_RESAMPLES, "seed": BOOTSTRAP_SEED},
        condition_blocks(bench),
        run_id,
        str(keys["library_version"]),
    )
    report = pin_group(repo, group, anchor_rows, info, make_default=make_default, require_verified=require_verified,
                       private=private)
    return report


def pin_group(repo, group: PinnedGroup, anchor_rows, anchor_run_info: Mapping, *, make_default: bool = False,
              require_verified: bool | None = None, private: bool = False) -> InitReport:
    """Writes ``group`` into leaderboard.json of ``repo`` (a :class:`~geofidelity_bench.hub.push.HubRepo`) with
    its anchor rows (``ANCHOR_FILE_COLUMNS`` first) and their run.json, in one compare-and-swap commit.

    A group already pinned keeps its anchors: the given rows are checked against them and a difference is
    refused (the group would change under its submissions).

    Raises:
        LeaderboardError: the anchors differ from the pinned ones.
    """
    from ..comparability import check_anchors
    from ..metrics.catalog import RESULT_METRIC_COLUMNS
    from .submissions import ORIGINAL_DIR, csv_bytes, read_rows_text, anchors_path, results_card

    repo_id, gid = repo.repo_id, group.group_id
    a_path = anchors_path(gid)
    report = InitReport(repo_id, group, anchors_path=a_path, n_anchor_rows=len(anchor_rows))
    repo.ensure_exists(private)

    def decide(state: RepoState):
        config = state.config(repo_id) or LeaderboardConfig()
        report.notes.clear()
        files: dict[str, Any] = {}
        stored_text = state.read(a_path)
        pinned = config.groups.get(gid)
        if pinned is not None and stored_text:
            stored = read_rows_text(stored_text, f"{repo_id}/{a_path}")
            check = check_anchors(stored, anchor_rows, RESULT_METRIC_COLUMNS, where=f"the pinned anchors ({a_path})")
            if check.status == "mismatch":
                raise LeaderboardError(f"{repo_id}: the anchors computed now differ from the pinned ones: {check.detail}. "
                                       "The group would change under its submissions; pin another group (another "
                                       "encoder or benchmark revision) instead")
            group_now = pinned
        else:
            if stored_text:
                report.notes.append(f"{a_path} held anchor rows written by submissions (a repo made before "
                                    "leaderboard.json): replaced by the anchors computed here")
            files[a_path] = csv_bytes(anchor_rows)
            files[f"{os.path.dirname(a_path)}/{ORIGINAL_DIR}/{group.anchors_run_id}.json"] = json.dumps(
                dict(anchor_run_info), indent=2, sort_keys=True, default=str).encode("utf-8")
            group_now = group
        new = config.with_group(group_now, make_default=make_default, require_verified=require_verified)
        report.added = pinned is None
        report.default_group, report.require_verified = new.default_group, new.require_verified
        if pinned is None or new.to_json() != config.to_json():
            files[LEADERBOARD_FILE] = new.dumps().encode("utf-8")
        card = state.read("README.md")
        if not card or LEADERBOARD_FILE not in card:
            files["README.md"] = results_card(repo_id).encode("utf-8")
        if not files:
            return None
        return files, (f"Pin group {gid} ({group.encoder.get('name')} on {group.benchmark.get('name')})"
                       if pinned is None else "Update leaderboard.json")

    report.commit = commit_checked(repo, decide, what=f"the pinned group {gid}")
    return report


__all__ = [
    "InitReport",
    "LeaderboardError",
    "RepoState",
    "commit_checked",
    "compute_anchors",
    "init_leaderboard",
    "pin_group",
    "read_config",
    "repo_state",
]
