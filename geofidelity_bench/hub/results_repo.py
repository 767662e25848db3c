"""A results repo on the Hub: submissions of ``evaluate`` results folders, read back as one table.

A submission is a generator's rows (docs/benchmark.md section 13, Submissions and the leaderboard):
rows of condition ``anchor`` (the real-image anchors) belong to the comparable group
(:mod:`..comparability`), pinned and computed by the maintainer; rows of condition ``sanity`` (the
demo's sanity methods) are checks of the benchmark and are never submitted.

Layout of the dataset repo (one folder per generator method and run; nothing is ever overwritten)::

    README.md                                   dataset card; ``configs:`` entries read
                                                submissions/*/*/results.csv (default) and
                                                anchors/*/results.csv (anchors) as tables
    leaderboard.json                            the maintainer's pin (:mod:`.leaderboard_config`)
    anchors/{group_id}/results.csv              the group's anchor rows, computed by ``leaderboard init``
    anchors/{group_id}/run/{run_id}.json        the run.json of that computation
    submissions/{method}/{run_id}/results.csv   the method's rows of the run, with the columns
                                                SUBMISSION_COLUMNS added
    submissions/{method}/{run_id}/run/...       the run's original files (results.csv, run.json,
                                                summary_*.csv), unchanged
    submissions/{method}/{run_id}/submission.json  the generations (repo, commit) and the sha256 of
                                                every image the run scored
    verifications/{method}/{run_id}.json        the verifier's record (:mod:`.verify`)
    verifications/{method}/{run_id}/results.csv the verifier's rows (shown once verified)

A push needs a pinned repo (:mod:`.leaderboard`), a run of a pinned group and rows on the group's
blocks; the run's anchors are checked against the pinned ones (recorded in each submitted row as
``anchor_check``) and never written. Every write is one compare-and-swap commit on the commit it
read (:func:`~geofidelity_bench.hub.leaderboard.commit_checked`).

``run_id`` is the first 16 hex digits of the sha256 of run.json's canonical JSON (sorted keys,
without what changes from one run of the same thing to the next: timestamps, duration, cache and
segmentation statistics, output and cache folders; :data:`VOLATILE_KEYS`, :data:`VOLATILE_PATHS`)
followed by the sha256 of results.csv: pushing the same run again uploads nothing, another run of
the same method is a new submission.

A results folder whose generator rows hold images flagged by the copy audit (``n_copied > 0`` in
results.csv, or ``near_copies`` records of generator panels in run.json) is refused unless
``allow_copies`` (its rows then carry ``n_copied`` and the leaderboard never ranks it) or it was
scored without them (``evaluate --exclude-copies``: accepted, marked "copies excluded").

:func:`validate_results_folder` checks a folder before anything is uploaded; :func:`push_results`
submits it; :func:`load_submissions` reads every submission's rows back with what the repo says of
them (commit dates, verification); :func:`update_model_card` writes a method's scores into a model
repo's ``model-index``.

This module pushes and reads back; the layout's names, ``run_id``, the checks of a folder and the
rows and files of a submission are :mod:`.submissions` (which :mod:`.leaderboard` and :mod:`.verify`
read too), the model cards :mod:`.model_card`; every name is re-exported here.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..comparability import AnchorCheck, check_anchors, comparability_of_run
from ..errors import GeoFidelityError
from ..metrics.catalog import RESULT_METRIC_COLUMNS
from ..results import RESULTS_FILE, RUN_FILE, ResultsFolderError, read_results_csv
from .card import CARD_FILE
from .leaderboard_config import LEADERBOARD_FILE
from .requests import HubPushError, check_repo_id, describe_error, same_remote, with_retries
from .model_card import (  # noqa: F401  (model cards, re-exported: their home is model_card.py)
    CARD_KEY_ARGS,
    ModelCardUpdate,
    card_key,
    read_model_card,
    update_model_card,
)
from .submissions import (  # noqa: F401  (the layout and the submission format, re-exported: their home is submissions.py)
    ANCHORS_DIR,
    ANCHORS_GLOB,
    ANCHOR_CONDITION,
    ANCHOR_FILE_COLUMNS,
    ORIGINAL_DIR,
    REQUIRED_FILES,
    REQUIRED_RUN_FIELDS,
    SANITY_CONDITION,
    STORED_ANCHORS,
    STORED_SUBMISSION,
    SUBMISSIONS_DIR,
    SUBMISSION_COLUMNS,
    SUBMISSION_GLOB,
    SUBMISSION_RECORD,
    SUBMISSION_RECORD_FORMAT,
    TEXT_COLUMNS,
    VOLATILE_KEYS,
    VOLATILE_PATHS,
    Submission,
    SubmissionError,
    anchor_file_rows,
    anchors_path,
    check_rows_once_and_nans_explained,
    copied_panels,
    _copies_error,
    csv_bytes,
    _digests,
    merge_anchor_rows,
    _read_rows,
    read_rows_text,
    results_card,
    roles,
    run_id_of,
    stable_run_info,
    submission_files,
    submission_rows,
    validate_results_folder,
    with_columns,
)


@dataclass
class ResultsPushReport:
    repo_id: str
    run_id: str
    new: list[str] = field(default_factory=list)  # generator methods submitted now
    already: list[str] = field(default_factory=list)  # generator methods whose run was already in the repo
    commit: str | None = None
    sanity: list[str] = field(default_factory=list)  # sanity methods of the folder (never submitted)
    group: str = ""  # the comparable group, in words
    anchors_path: str = ""  # where the group's anchors are stored
    anchor_check: AnchorCheck | None = None
    copied: dict = field(default_factory=dict)  # {(method, condition, block_id): flagged images} of generator panels
    copies_excluded: int = 0  # flagged images the run left out (evaluate --exclude-copies)
    generations: dict | None = None  # {"repo_id", "revision", "commit"} of the submitted images
    record_added: list[str] = field(default_factory=list)  # methods already submitted whose submission.json came now

    def lines(self) -> list[str]:
        """What the push did, one line each (the CLI prints them)."""
        out = [f"{self.repo_id}: submitted {m} as run {self.run_id}" for m in self.new]
        out += [f"{self.repo_id}: {m} run {self.run_id} is already submitted (nothing uploaded)" for m in self.already]
        if not self.new and not self.already:
            out.append(f"{self.repo_id}: the folder holds no generator rows, so no submission was made")
        out += [f"{self.repo_id}: {m} run {self.run_id}: its generations are now recorded" for m in self.record_added]
        if self.generations:
            g = self.generations
            out.append(f"{self.repo_id}: images: {g['repo_id']} at commit {g['commit'][:12]}"
                       + (f" ({g['revision']})" if g.get("revision") else "")
                       + "; `geofidelity-bench leaderboard verify` re-computes every number from them")
        elif self.new:
            out.append(f"{self.repo_id}: no --generations: the numbers are self-reported and can never be verified "
                       "(push the panels with `push-generations` and submit with --generations ORG/NAME)")
        if self.copies_excluded:
            out.append(f"{self.repo_id}: copies excluded: the run was scored without {self.copies_excluded} image(s) "
                       "flagged by the copy audit (evaluate --exclude-copies); the leaderboard marks it so")
        if self.copied and not self.copies_excluded:
            out.append(f"{self.repo_id}: submitted with --allow-copies: {sum(self.copied.values())} image(s) in "
                       f"{len(self.copied)} generator panel(s) are flagged by the copy audit; the leaderboard marks "
                       "this submission as copied and never ranks it")
        if self.sanity:
            out.append(f"{self.repo_id}: not submitted: sanity method(s) {', '.join(self.sanity)} (sanity methods "
                       "check the benchmark and are never ranked among generators)")
        chk = self.anchor_check
        if chk is not None:
            if chk.status == "mismatch":
                out.append(f"{self.repo_id}: anchors NOT comparable with the pinned ones ({self.anchors_path}): "
                           f"{chk.detail}; the leaderboard shows this submission apart")
            else:
                out.append(f"{self.repo_id}: anchors ({self.group}): {chk.status}: {chk.detail}")
        return out


# -- push -----------------------------------------------------------------------------------------


def push_results(
    results_dir: str | os.PathLike,
    repo_id: str,
    *,
    generations: str | None = None,
    allow_copies: bool = False,
    endpoint: str | None = None,
    token: str | None = None,
    attempts: int = 6,
    retry_base_delay: float = 1.0,
    log: Callable[[str], None] | None = None,
) -> ResultsPushReport:
    """Validates ``results_dir`` and submits its generators to the results repo ``repo_id``.

    The repo must have been pinned by its maintainer (``leaderboard init``: leaderboard.json and the
    group's anchors); the run must belong to a pinned group, and its rows to the group's conditions and
    blocks. The run's anchors are only checked against the pinned ones, never written. ``generations``
    (``ORG/NAME[@REVISION]``, a dataset pushed with ``push-generations``) is resolved to a commit, which
    the submission records (``submission.json``) together with the sha256 of every panel image the run
    scored, so that ``leaderboard verify`` can re-compute every number from those images.

    One compare-and-swap commit (:func:`~geofidelity_bench.hub.leaderboard.commit_checked`) adds
    ``submissions/{method}/{run_id}/`` for every generator method; every check is made again on the
    state it commits on. A run already in the repo makes no commit; a folder of the same run_id with
    other original files is never overwritten (:class:`HubPushError`).

    Raises:
        SubmissionError: the folder is not a valid results folder, the repo is not pinned, the run is in
            no pinned group, a row names a block or condition the group does not have, its generator
            panels hold images flagged by the copy audit (and neither ``allow_copies`` nor
            ``evaluate --exclude-copies``), or ``generations`` cannot be resolved.
    """
    from .leaderboard import commit_checked
    from .push import HubRepo

    check_repo_id(repo_id, "results repo id")
    sub = validate_results_folder(results_dir)
    copied = copied_panels(sub)
    excluded = copies_excluded(sub)
    if copied and not allow_copies and not excluded:
        raise _copies_error(sub, copied)
    repo = HubRepo(repo_id, token=token, endpoint=endpoint, attempts=attempts, retry_base_delay=retry_base_delay, log=log)
    try:
        exists = with_retries(lambda: repo.api.repo_exists(repo_id, repo_type="dataset"), f"look up {repo_id}",
                              **repo.retry)
    except Exception as err:  # noqa: BLE001 - offline, HTTP error: one message
        raise HubPushError(f"cannot look up results repo {repo_id}: {describe_error(err, repo.token)}") from None
    if not exists:
        raise SubmissionError(
            f"results repo {repo_id} does not exist (or your token cannot read it): a results repo is created by its "
            f"maintainer with `geofidelity-bench leaderboard init --repo-id {repo_id} --benchmark ID --encoder NAME`, "
            "which pins the group; nothing was uploaded")
    gens = resolve_generations(generations, sub, endpoint=endpoint, token=repo.token) if generations else None
    comp = comparability_of_run(sub.run_info)
    a_path = anchors_path(comp.group_id)
    record = submission_record(sub, gens)

    def decide(state):
        report = ResultsPushReport(repo_id, sub.run_id, sanity=sub.sanity_methods, group=comp.short(),
                                   anchors_path=a_path, copied=copied, copies_excluded=excluded,
                                   generations=gens)
        decide.report = report
        config = _pinned_config(state, repo_id)
        group = config.groups.get(comp.group_id)
        if group is None:
            raise SubmissionError(_not_pinned_text(sub, comp, config, repo_id))
        _check_group_rows(sub, group)
        stored_text = state.read(a_path)
        stored = read_rows_text(stored_text, f"{repo_id}/{a_path}") if stored_text else None
        ours_anchors = anchor_file_rows(sub)
        if ours_anchors.empty:
            check = AnchorCheck("unchecked", "the run has no real-image anchor rows to check (evaluate --no-anchors?)")
        elif stored is None or stored.empty:
            check = AnchorCheck("unchecked", f"the group has no pinned anchors ({a_path})")
        else:
            check = check_anchors(stored, ours_anchors, RESULT_METRIC_COLUMNS, where=f"the pinned anchors ({a_path})")
        report.anchor_check = check
        sub_files = submission_files(sub, check, copied, record)
        files: dict[str, Path | bytes] = {}
        for method in sub.methods:
            prefix = sub.prefix(method)
            ours = {p for p in sub_files if p.startswith(prefix)}
            theirs = {p for p in state.files if p.startswith(prefix)}
            if not theirs:
                report.new.append(method)
                files.update({p: sub_files[p] for p in ours})
                continue
            report.already.append(method)
            originals = {p for p in ours if p.startswith(prefix + ORIGINAL_DIR + "/")}
            record_path = prefix + SUBMISSION_RECORD
            differ = sorted(((theirs ^ ours) - {record_path})
                            | {p for p in originals if not same_remote(state.files[p], _digests(sub_files[p]))})
            if differ:
                raise HubPushError(f"{repo_id} already has {prefix} with other content ({differ[0]}); "
                                   "a submission is never overwritten")
            if record_path in ours and record_path not in theirs:  # the run, now with its generations
                files[record_path] = sub_files[record_path]
                report.record_added.append(method)
            elif record_path in ours and not same_remote(state.files[record_path], _digests(sub_files[record_path])):
                theirs_record = json.loads(state.read(record_path) or "{}")
                if theirs_record.get("generations") or not record.get("generations"):
                    raise HubPushError(f"{repo_id} already has {record_path} with other generations; a submission is "
                                       "never overwritten")
                files[record_path] = sub_files[record_path]  # a self-reported submission, now with its images
                report.record_added.append(method)
        if not files:
            return None
        card = state.read(CARD_FILE)
        if not card or SUBMISSION_GLOB not in card or ANCHORS_GLOB not in card:
            files[CARD_FILE] = results_card(repo_id).encode("utf-8")
        what = ", ".join(report.new or report.record_added)
        return files, f"Submit run {sub.run_id} ({what})"

    commit = commit_checked(repo, decide, what=f"run {sub.run_id}")
    report = decide.report
    report.commit = commit
    return report


def _pinned_config(state, repo_id: str):
    config = state.config(repo_id)
    if config is None:
        raise SubmissionError(
            f"{repo_id} has no {LEADERBOARD_FILE}: its maintainer has not pinned a group, so nothing can be ranked "
            f"there. The maintainer runs `geofidelity-bench leaderboard init --repo-id {repo_id} --benchmark ID "
            "--encoder NAME` first (docs/benchmark.md section 13); nothing was uploaded")
    return config


def _not_pinned_text(sub: Submission, comp, config, repo_id: str) -> str:
    from ..comparability import Comparability

    parts = []
    for g in config.groups.values():
        pinned = Comparability(*g.key)
        diff = pinned.differences(comp)
        parts.append(f"{g.group_id} [{g.label()}]: another {', another '.join(diff) or 'segmenter'}")
    return (f"{sub.folder}: the run ({comp.short()}) is in no group pinned in {repo_id}/{LEADERBOARD_FILE}; the pinned "
            f"group(s): {'; '.join(parts)}. Evaluate with the pinned benchmark and encoder (`geofidelity-bench "
            "evaluate --benchmark ID --encoder NAME`), or ask the maintainer to pin yours; nothing was uploaded")


def _check_group_rows(sub: Submission, group) -> None:
    """Refuses generator rows of a condition or block the pinned group does not have (its block set
    comes from the benchmark, never from submissions)."""
    rows = sub.rows[roles(sub.rows) == "generator"]
    bad_cond = sorted(set(rows["condition"].astype(str)) - {c for c, b in group.blocks.items() if b})
    if bad_cond:
        raise SubmissionError(
            f"{sub.folder / RESULTS_FILE}: condition(s) {bad_cond} are not among the pinned group's prompt conditions "
            f"with blocks ({', '.join(c for c, b in group.blocks.items() if b)}): conditions of your own are not "
            "ranked; evaluate without them (`evaluate --conditions ...`); nothing was uploaded")
    unknown = sorted({f"{c}/{b}" for c, b in zip(rows["condition"].astype(str), rows["block_id"].astype(str))
                      if b not in set(group.blocks.get(c, ()))})
    if unknown:
        raise SubmissionError(
            f"{sub.folder / RESULTS_FILE}: {len(unknown)} row(s) name a block the pinned benchmark does not have in "
            f"that condition, e.g. {', '.join(unknown[:5])}: the group's blocks come from the benchmark "
            f"{group.benchmark.get('name')} ({str(group.benchmark.get('fingerprint'))[:12]}); nothing was uploaded")


def copies_excluded(sub: Submission) -> int:
    """How many flagged images the run left out of its generator panels (``evaluate --exclude-copies``; 0 without)."""
    audit = sub.run_info.get("copy_audit")
    if not isinstance(audit, Mapping) or audit.get("excluded") is not True:
        return 0
    return sum(copied_panels(sub).values())


def resolve_generations(spec: str, sub: Submission, *, endpoint: str | None = None, token: str | None = None) -> dict:
    """``ORG/NAME[@REVISION]`` -> {"repo_id", "revision", "commit"}, checked: the revision exists and holds
    ``generations/{method}/*.parquet`` for every submitted method.

    Raises:
        SubmissionError: naming the repo, the revision or the missing method.
    """
    from huggingface_hub import HfApi

    repo_id, _, revision = str(spec).partition("@")
    check_repo_id(repo_id, "--generations repo id")
    api = HfApi(endpoint=endpoint, token=token)
    retry = dict(attempts=4, base_delay=0.5, log=lambda _m: None, token=token)
    try:
        info = with_retries(lambda: api.dataset_info(repo_id, revision=revision or None),
                            f"read {repo_id}", **retry)
    except Exception as err:  # noqa: BLE001 - missing repo or revision, HTTP error: one message
        raise SubmissionError(f"--generations {spec}: cannot read it ({describe_error(err, token)}); push the "
                              "panels first with `geofidelity-bench push-generations GEN --repo-id ORG/NAME`") from None
    names = {s.rfilename for s in (info.siblings or [])}
    missing = [m for m in sub.methods if not any(n.startswith(f"generations/{m}/") and n.endswith(".parquet")
                                                 for n in names)]
    if missing:
        raise SubmissionError(f"--generations {spec} (commit {info.sha[:12]}) has no generations/{{method}}/*.parquet "
                              f"of method(s) {missing}: push them with `geofidelity-bench push-generations`")
    return {"repo_id": repo_id, "revision": revision or None, "commit": info.sha}


def submission_record(sub: Submission, gens: Mapping | None) -> dict:
    """What ``submission.json`` records: the generations (repo and resolved commit) and the sha256 of every
    panel image the run scored, per method and panel (from run.json's copy audit records)."""
    from ..near_copies import panel_image_hashes

    images: dict[str, dict[str, list[str]]] = {}
    if gens is not None:
        try:
            hashes = panel_image_hashes(sub.run_info)
        except GeoFidelityError as err:
            raise SubmissionError(f"{sub.folder / RUN_FILE}: {err}; re-run `geofidelity-bench evaluate` with this "
                                  "version, which records every image's sha256") from None
        for (method, cond, block), shas in hashes.items():
            if method in sub.methods:
                images.setdefault(method, {})[f"{cond}/{block}"] = list(shas)
        lacking = sorted({f"{m}/{c}/{b}" for m, c, b in zip(sub.rows["method"], sub.rows["condition"],
                                                                  sub.rows["block_id"])
                          if m in sub.methods and f"{c}/{b}" not in images.get(m, {})})
        if lacking:
            raise SubmissionError(f"{sub.folder / RUN_FILE}: the copy audit records no image of panel(s) "
                                  f"{', '.join(lacking[:5])}: the images scored cannot be named; re-run evaluate")
    return {"format": SUBMISSION_RECORD_FORMAT, "generations": dict(gens) if gens else None, "images": images,
            "copies_excluded": copies_excluded(sub)}


# -- reading back ---------------------------------------------------------------------------------


def _api(endpoint: str | None, token: str | None = None):
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint, token=token)


def _read_failed(repo_id: str, err: BaseException) -> GeoFidelityError:
    return ResultsFolderError(f"cannot read results repo {repo_id}: {describe_error(err, None)}")


def load_submissions(repo_id: str, *, endpoint: str | None = None, revision: str | None = None,
                     with_run_info: bool = True, log: Callable[[str], None] | None = None):
    """Every submission's rows and every group's anchors of ``repo_id`` (one DataFrame, with a
    ``stored_as`` column: :data:`STORED_SUBMISSION` or :data:`STORED_ANCHORS`) and {run_id: run.json}.

    Every file is read at one commit (the one ``revision`` names when read). The rows also carry
    what the repo, not the submitter, says of them: ``committed_at`` (the date of the Hub commit that
    added the file: order and "newest run" come from it, never from a submitted ``created_at``),
    ``verification`` (``verified``, ``mismatch``, ``unverifiable``, or ``pending`` without a
    verification record: self-reported) with ``verification_detail`` (for a verified submission the
    scores are the verifier's), and ``copies_excluded`` (the run was scored with ``evaluate
    --exclude-copies``). ``df.attrs["leaderboard_config"]`` is the pinned leaderboard.json (None for a
    repo made before it: its numbers are self-reported, read-only). Older repos (before anchors were
    stored per group) hold anchor and sanity rows inside ``submissions/``: they are returned as they
    are (``stored_as`` "submission"), and the leaderboard treats them by their condition (contract C3).

    Raises:
        ResultsFolderError: the repo cannot be read or holds no submission.
        LeaderboardConfigError: its leaderboard.json is broken (naming the field).
    """
    import pandas as pd

    from .leaderboard_config import parse_config

    check_repo_id(repo_id, "results repo id")
    api = _api(endpoint)
    retry = dict(attempts=4, base_delay=0.5, log=log or (lambda _m: None))
    try:
        info = with_retries(lambda: api.dataset_info(repo_id, revision=revision), f"read {repo_id}", **retry)
    except Exception as err:  # noqa: BLE001 - offline, missing repo, HTTP error: one message
        raise _read_failed(repo_id, err) from None
    commit = info.sha
    paths = {s.rfilename for s in (info.siblings or [])}
    csvs = sorted(p for p in paths if re.fullmatch(rf"{SUBMISSIONS_DIR}/[^/]+/[^/]+/{re.escape(RESULTS_FILE)}", p))
    anchor_csvs = sorted(p for p in paths if re.fullmatch(rf"{ANCHORS_DIR}/[^/]+/{re.escape(RESULTS_FILE)}", p))
    if not csvs and not anchor_csvs:
        raise ResultsFolderError(f"results repo {repo_id} holds no submission ({SUBMISSION_GLOB})")
    frames, infos, ignored = [], {}, []
    with tempfile.TemporaryDirectory(prefix="geofidelity-results-") as cache:
        def download(path: str) -> Path:
            return Path(with_retries(lambda: api.hf_hub_download(repo_id, path, repo_type="dataset", revision=commit,
                                                                cache_dir=cache), f"download {path}", **retry))

        def read_json(path: str):
            if path not in paths:
                return None
            try:
                return json.loads(download(path).read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise ResultsFolderError(f"{repo_id}/{path} is not valid JSON ({err})") from None

        def add_info(run_json: str, run_id: str, where: str) -> None:
            if with_run_info and run_json in paths and run_id not in infos:
                run = read_json(run_json)
                infos[run_id] = dict(run, _run=run_id, _dir=f"{repo_id}/{where}")

        try:
            config = None
            if LEADERBOARD_FILE in paths:
                config = parse_config(download(LEADERBOARD_FILE).read_text(encoding="utf-8"),
                                      f"{repo_id}/{LEADERBOARD_FILE}")
            dates = commit_dates(api, repo_id, commit, [*csvs, *anchor_csvs], retry)
            for path in csvs:
                df = _read_rows(download(path), f"{repo_id}/{path}")
                folder = path.rsplit("/", 1)[0]
                method, rid = folder.split("/")[1:3]
                # the folder says whose rows these are: rows naming another method or run are not this
                # submission's (a file uploaded around push-results could otherwise speak for another method)
                own = (df["method"].astype(str) == method) & (df["run_id"].astype(str) == rid) \
                    if "run_id" in df.columns else df["method"].astype(str) == method
                if not own.all():
                    ignored.append(f"{repo_id}/{path}: {int((~own).sum())} row(s) name another method or run than "
                                   "their folder; ignored")
                    df = df[own].reset_index(drop=True)
                df["stored_as"] = STORED_SUBMISSION
                df["committed_at"] = dates.get(path, "")
                record = read_json(f"{folder}/{SUBMISSION_RECORD}") or {}
                df["copies_excluded"] = bool(record.get("copies_excluded")) if isinstance(record, Mapping) else False
                df = _with_verification(df, method, rid, read_json, download, f"{repo_id}/{folder}")
                frames.append(df)
                rid = str(df["run_id"].iloc[0]) if len(df) else ""
                add_info(f"{folder}/{ORIGINAL_DIR}/{RUN_FILE}", rid, path)
            for path in anchor_csvs:
                df = _read_rows(download(path), f"{repo_id}/{path}")
                df["stored_as"] = STORED_ANCHORS
                df["committed_at"] = dates.get(path, "")
                df["verification"], df["verification_detail"], df["copies_excluded"] = "", "", False
                frames.append(df)
                folder = path.rsplit("/", 1)[0]
                for rid in sorted(set(df["run_id"].astype(str))):
                    add_info(f"{folder}/{ORIGINAL_DIR}/{rid}.json", rid, path)
        except (ResultsFolderError, GeoFidelityError):
            raise
        except Exception as err:  # noqa: BLE001
            raise _read_failed(repo_id, err) from None
    out = pd.concat(frames, ignore_index=True)
    out.attrs["leaderboard_config"] = config
    out.attrs["commit"] = commit
    out.attrs["ignored"] = ignored
    return out, infos


def commit_dates(api, repo_id: str, revision: str, paths: Sequence[str], retry: Mapping) -> dict[str, str]:
    """{path: ISO date of the last commit that changed it}, from the Hub (``get_paths_info(expand=True)``).

    A submission's files are never changed after they are added, so this is the date it was submitted:
    what a submitter writes (``created_at``) is never used to order submissions.
    """
    out: dict[str, str] = {}
    paths = list(paths)
    for i in range(0, len(paths), 50):
        chunk = paths[i:i + 50]
        infos = with_retries(lambda: api.get_paths_info(repo_id, chunk, expand=True, repo_type="dataset",
                                                        revision=revision), f"read commit dates of {repo_id}", **retry)
        for entry in infos:
            last = getattr(entry, "last_commit", None)
            date = getattr(last, "date", None)
            if date is not None:
                out[entry.path] = date.isoformat() if hasattr(date, "isoformat") else str(date)
    return out


#: Columns a verified submission shows from the verifier's rows (its scores, and its copy audit's counts).
VERIFIED_COLUMNS = (*RESULT_METRIC_COLUMNS, "n_generated", "n_copied", "n_distinct")


def _with_verification(df, method: str, run_id: str, read_json, download, where: str):
    """The submission's rows with ``verification``/``verification_detail``; a verified one with the verifier's
    numbers (the record and its rows are the maintainer's, read from ``verifications/``)."""
    import pandas as pd

    from .leaderboard_config import PENDING, VERIFICATION_STATUSES, VERIFIED, VERIFICATIONS_DIR

    record = read_json(f"{VERIFICATIONS_DIR}/{method}/{run_id}.json")
    if not isinstance(record, Mapping) or record.get("status") not in VERIFICATION_STATUSES:
        df["verification"] = PENDING
        df["verification_detail"] = "self-reported: no verification record yet (`geofidelity-bench leaderboard verify`)"
        return df
    df["verification"] = str(record["status"])
    df["verification_detail"] = str(record.get("detail") or "")
    if record["status"] != VERIFIED:
        return df
    try:
        ours = read_results_csv(download(f"{VERIFICATIONS_DIR}/{method}/{run_id}/{RESULTS_FILE}"))
    except Exception as err:  # noqa: BLE001 - a verified record without its rows shows nothing as verified
        df["verification"] = PENDING
        df["verification_detail"] = f"the verification record of {where} has no readable rows ({type(err).__name__})"
        return df
    ours = ours[ours["method"].astype(str) == method]
    key = pd.MultiIndex.from_arrays([df["condition"].astype(str), df["block_id"].astype(str)])
    theirs = ours.set_index([ours["condition"].astype(str), ours["block_id"].astype(str)])
    for col in VERIFIED_COLUMNS:
        if col in theirs.columns:
            df[col] = theirs[col].reindex(key).to_numpy()
    return df


def load_leaderboard(repo_id: str, *, endpoint: str | None = None, revision: str | None = None):
    """Every submitted row of the results repo ``repo_id`` (and every group's anchor rows): one row
    per method x condition x block and submission, with the columns :data:`SUBMISSION_COLUMNS`."""
    return load_submissions(repo_id, endpoint=endpoint, revision=revision, with_run_info=False)[0]


__all__ = [
    "ANCHORS_DIR",
    "ANCHOR_FILE_COLUMNS",
    "ModelCardUpdate",
    "SUBMISSION_COLUMNS",
    "anchors_path",
    "card_key",
    "check_rows_once_and_nans_explained",
    "copied_panels",
    "merge_anchor_rows",
    "roles",
    "stable_run_info",
    "SUBMISSION_GLOB",
    "ResultsPushReport",
    "Submission",
    "SubmissionError",
    "load_leaderboard",
    "load_submissions",
    "push_results",
    "read_model_card",
    "results_card",
    "run_id_of",
    "submission_files",
    "update_model_card",
    "validate_results_folder",
]
