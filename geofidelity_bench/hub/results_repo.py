"""A results repo on the Hub: submissions of ``evaluate`` results folders, read back as one table.

Layout of the dataset repo (one folder per method and run; nothing is ever overwritten)::

    README.md                                   dataset card; its ``configs:`` entry reads
                                                submissions/*/*/results.csv as one table
    submissions/{method}/{run_id}/results.csv   the method's rows of the run, with the columns
                                                SUBMISSION_COLUMNS added
    submissions/{method}/{run_id}/run/...       the run's original files (results.csv, run.json,
                                                summary_*.csv), unchanged

``run_id`` is the first 16 hex digits of the sha256 of run.json's canonical JSON (sorted keys,
without its timestamps and duration) followed by the sha256 of results.csv: pushing the same run
again uploads nothing, another run of the same method is a new submission.

:func:`validate_results_folder` checks a folder before anything is uploaded; :func:`push_results`
pushes it with the one push of :mod:`geofidelity_bench.hub.push`; :func:`load_leaderboard` reads
every submission's rows back; :func:`update_model_card` writes a method's scores into a model
repo's ``model-index``.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..errors import GeoFidelityError
from ..metrics.catalog import METRICS, RESULT_METRIC_COLUMNS
from ..results import RESULTS_FILE, RUN_FILE, ResultsFolderError, read_results_csv
from .card import CARD_FILE
from .requests import HubPushError, describe_error, file_digests, same_remote, with_retries

SUBMISSIONS_DIR = "submissions"
SUBMISSION_GLOB = f"{SUBMISSIONS_DIR}/*/*/{RESULTS_FILE}"
ORIGINAL_DIR = "run"
#: Columns added to every submitted row (first, in this order).
SUBMISSION_COLUMNS = ("run_id", "benchmark_name", "benchmark_fingerprint", "encoder_config_hash",
                      "protocol_version", "library_version", "created_at")
#: The files the report needs in a results folder.
REQUIRED_FILES = (RESULTS_FILE, RUN_FILE, "summary_by_method_condition.csv")
#: run.json keys that change from one run of the same thing to the next (left out of run_id).
VOLATILE_KEYS = ("created_at", "elapsed_s", "command", "embedding_cache", "embedding_stats")
#: (path in run.json, what it is) that a submission needs.
REQUIRED_RUN_FIELDS = (
    (("benchmark", "fingerprint"), "the benchmark fingerprint"),
    (("encoder", "name"), "the encoder name"),
    (("encoder", "config"), "the encoder config"),
    (("encoder", "config_hash"), "the encoder config hash"),
    (("protocol", "version"), "the protocol version"),
    (("protocol", "anchor_rule"), "the protocol's anchor rule"),
    (("protocol", "heldout_rule"), "the protocol's held-out rule"),
    (("protocol", "metric_definitions_version"), "the metric definitions version"),
    (("versions", "geofidelity-bench"), "the library version"),
)


class SubmissionError(GeoFidelityError, ValueError):
    """A results folder that cannot be submitted; the message names the file, field or column."""


@dataclass
class Submission:
    """A validated results folder, ready to push."""

    folder: Path
    rows: Any  # pandas.DataFrame
    run_info: dict
    run_id: str

    @property
    def methods(self) -> list[str]:
        return sorted(self.rows["method"].unique())

    def prefix(self, method: str) -> str:
        return f"{SUBMISSIONS_DIR}/{method}/{self.run_id}/"


@dataclass
class ResultsPushReport:
    repo_id: str
    run_id: str
    new: list[str] = field(default_factory=list)  # methods submitted now
    already: list[str] = field(default_factory=list)  # methods whose run was already in the repo
    commit: str | None = None


# -- validation ---------------------------------------------------------------------------------


def _parse_range(text: str) -> tuple[float, bool, float, bool]:
    """``"[-1, 1]"`` -> (low, low included, high, high included)."""
    match = re.fullmatch(r"\s*([\[(])\s*([^,]+),\s*([^\])]+)([\])])\s*", text)
    if not match:
        raise ValueError(f"unknown range {text!r}")
    lo, hi = float(match.group(2)), float(match.group(3))
    return lo, match.group(1) == "[", hi, match.group(4) == "]"


def _out_of_range(values, text: str):
    import numpy as np

    lo, lo_in, hi, hi_in = _parse_range(text)
    eps = 1e-6  # float rounding at the bounds (a cosine of 1.0000000002)
    below = values < lo - eps if lo_in else values <= lo
    above = values > hi + eps if hi_in else values >= hi
    return np.isfinite(values) & (below | above)


def _get(info: Mapping, path: Sequence[str]) -> Any:
    value: Any = info
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def run_id_of(run_info: Mapping, results_bytes: bytes) -> str:
    """The submission id of a run: see the module docstring."""
    stable = {k: v for k, v in run_info.items() if k not in VOLATILE_KEYS}
    canonical = json.dumps(stable, sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(canonical.encode("utf-8"))
    digest.update(hashlib.sha256(results_bytes).digest())
    return digest.hexdigest()[:16]


def validate_results_folder(folder: str | os.PathLike) -> Submission:
    """Checks that ``folder`` can be submitted and returns it with its ``run_id``.

    Raises:
        SubmissionError: a required file is missing, run.json lacks a field
            (:data:`REQUIRED_RUN_FIELDS`), a metric value is infinite or out of its range
            (:mod:`geofidelity_bench.metrics.catalog`), or a row lacks its method, condition or block.
    """
    import numpy as np

    from ..evaluation import RESULT_COLUMNS

    folder = Path(folder)
    if not folder.is_dir():
        raise SubmissionError(f"results folder {folder} does not exist")
    missing = [f for f in REQUIRED_FILES if not (folder / f).is_file()]
    if missing:
        raise SubmissionError(f"{folder} lacks {', '.join(missing)}: submit the whole folder written by "
                              "`geofidelity-bench evaluate`")
    try:
        info = json.loads((folder / RUN_FILE).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SubmissionError(f"{folder / RUN_FILE} is not valid JSON: {err}") from None
    if not isinstance(info, dict):
        raise SubmissionError(f"{folder / RUN_FILE} must hold a JSON object")
    absent = [f"{'.'.join(path)} ({what})" for path, what in REQUIRED_RUN_FIELDS if _get(info, path) in (None, "", {})]
    if absent:
        raise SubmissionError(f"{folder / RUN_FILE} lacks {'; '.join(absent)}: re-run `geofidelity-bench evaluate` "
                              "with this version of the library, which records them")
    csv = folder / RESULTS_FILE
    try:
        rows = read_results_csv(csv)
    except ResultsFolderError as err:
        raise SubmissionError(str(err)) from None
    lacking = [c for c in RESULT_COLUMNS if c not in rows.columns]
    if lacking:
        raise SubmissionError(f"{csv} lacks column(s) {lacking}")
    if rows.empty:
        raise SubmissionError(f"{csv} has no rows")
    for col in ("method", "condition", "block_id"):
        blank = rows[col].isna() | (rows[col].astype(str).str.strip() == "")
        if blank.any():
            raise SubmissionError(f"{csv}: row {int(np.flatnonzero(blank)[0]) + 2} has no {col}")
    bad_method = sorted(m for m in rows["method"].unique() if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", m))
    if bad_method:
        raise SubmissionError(f"{csv}: method name(s) {bad_method} cannot name a repo folder "
                              "(use letters, digits, '.', '_' and '-')")
    for col in RESULT_METRIC_COLUMNS:
        values = rows[col].to_numpy(dtype=float)
        infinite = np.isinf(values)
        out = _out_of_range(values, METRICS[col].range)
        bad = np.flatnonzero(infinite | out)
        if bad.size:
            i = int(bad[0])
            raise SubmissionError(
                f"{csv}: column {col!r} has {bad.size} value(s) that are infinite or outside {METRICS[col].range}, "
                f"e.g. {values[i]!r} in row {i + 2} ({rows['method'].iloc[i]}/{rows['condition'].iloc[i]}/"
                f"{rows['block_id'].iloc[i]}); these results cannot be submitted"
            )
    return Submission(folder, rows, info, run_id_of(info, csv.read_bytes()))


# -- the files of a submission --------------------------------------------------------------------


def submission_rows(sub: Submission, method: str):
    """The method's rows with :data:`SUBMISSION_COLUMNS` first."""
    rows = sub.rows[sub.rows["method"] == method].copy()
    info = sub.run_info
    extra = {
        "run_id": sub.run_id,
        "benchmark_name": _get(info, ("benchmark", "name")),
        "benchmark_fingerprint": _get(info, ("benchmark", "fingerprint")),
        "encoder_config_hash": _get(info, ("encoder", "config_hash")),
        "protocol_version": str(_get(info, ("protocol", "version"))),
        "library_version": _get(info, ("versions", "geofidelity-bench")),
        "created_at": info.get("created_at"),
    }
    for i, (col, value) in enumerate(extra.items()):
        if col in rows.columns:
            rows = rows.drop(columns=col)
        rows.insert(i, col, value)
    return rows


def submission_files(sub: Submission) -> dict[str, Path | bytes]:
    """{path in the repo: content} of every method's folder."""
    originals = sorted(p for p in sub.folder.iterdir()
                       if p.is_file() and (p.name in (RESULTS_FILE, RUN_FILE) or re.fullmatch(r"summary_.*\.csv", p.name)))
    files: dict[str, Path | bytes] = {}
    for method in sub.methods:
        prefix = sub.prefix(method)
        buf = io.StringIO()
        submission_rows(sub, method).to_csv(buf, index=False, lineterminator="\n")
        files[prefix + RESULTS_FILE] = buf.getvalue().encode("utf-8")
        for p in originals:
            files[f"{prefix}{ORIGINAL_DIR}/{p.name}"] = p
    return files


def results_card(repo_id: str) -> str:
    """The results repo's dataset card (a ``configs:`` entry reading every submission)."""
    return f"""---
configs:
- config_name: default
  data_files:
  - split: train
    path: {SUBMISSION_GLOB}
tags:
- geofidelity-bench
- leaderboard
---

# GeoFidelity-Bench results: {repo_id}

Submissions to the GeoFidelity-Bench leaderboard, one folder per method and run:
`submissions/{{method}}/{{run_id}}/results.csv` holds the method's rows (one per condition and
block) with the run's id, benchmark fingerprint, encoder config hash and protocol version;
`submissions/{{method}}/{{run_id}}/run/` keeps the run's original files (`results.csv`, `run.json`,
`summary_*.csv`).

Only submissions with the same benchmark fingerprint, encoder config hash and protocol version
are comparable. Read everything with `datasets.load_dataset("{repo_id}")` or
`geofidelity_bench.hub.results_repo.load_leaderboard("{repo_id}")`; submit with
`geofidelity-bench push-results RESULTS_DIR --repo-id {repo_id}`.
"""


def _card(repo_id: str) -> Callable[[Sequence[str], Callable[[], "str | None"]], str]:
    def card(_remote: Sequence[str], current: Callable[[], "str | None"]) -> str:
        text = current()
        return text if text and SUBMISSION_GLOB in text else results_card(repo_id)

    return card


def _digests(content: Path | bytes) -> tuple[str, str]:
    if isinstance(content, bytes):
        return hashlib.sha256(content).hexdigest(), hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    return file_digests(content)


# -- push -----------------------------------------------------------------------------------------


def push_results(
    results_dir: str | os.PathLike,
    repo_id: str,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    private: bool = False,
    attempts: int = 6,
    retry_base_delay: float = 1.0,
    log: Callable[[str], None] | None = None,
) -> ResultsPushReport:
    """Validates ``results_dir`` and submits it to the dataset repo ``repo_id`` (created if missing).

    One commit adds ``submissions/{method}/{run_id}/`` for every method of the run (and the card
    when the repo has none). A run already in the repo makes no commit; a folder of the same
    run_id with other content is never overwritten (:class:`HubPushError`).
    """
    from .push import HubRepo, PushGroup

    sub = validate_results_folder(results_dir)
    repo = HubRepo(repo_id, token=token, endpoint=endpoint, attempts=attempts, retry_base_delay=retry_base_delay, log=log)
    repo.ensure_exists(private)
    files = submission_files(sub)
    info = repo.info()
    remote = {s.rfilename: s for s in (info.siblings or [])}
    report = ResultsPushReport(repo_id, sub.run_id)
    for method in sub.methods:
        ours = {p for p in files if p.startswith(sub.prefix(method))}
        theirs = {p for p in remote if p.startswith(sub.prefix(method))}
        (report.already if theirs else report.new).append(method)
        differ = sorted((theirs ^ ours) | {p for p in theirs & ours if not same_remote(remote[p], _digests(files[p]))})
        if theirs and differ:
            raise HubPushError(f"{repo_id} already has {sub.prefix(method)} with other content ({differ[0]}); "
                               "a submission is never overwritten")
    group = PushGroup(
        f"submission {sub.run_id}", files, None,
        lambda changed, stale: f"Submit run {sub.run_id} ({', '.join(sub.methods)})",
        card=_card(repo_id), label=f"run {sub.run_id}",
    )
    report.commit = repo.push_group(group).commit
    return report


# -- reading back ---------------------------------------------------------------------------------


def _api(endpoint: str | None, token: str | None = None):
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint, token=token)


def _read_failed(repo_id: str, err: BaseException) -> GeoFidelityError:
    return ResultsFolderError(f"cannot read results repo {repo_id}: {describe_error(err, None)}")


def load_submissions(repo_id: str, *, endpoint: str | None = None, revision: str | None = None,
                     with_run_info: bool = True, log: Callable[[str], None] | None = None):
    """Every submission's rows of ``repo_id`` (one DataFrame) and {run_id: run.json}.

    Raises:
        ResultsFolderError: the repo cannot be read or holds no submission.
    """
    import pandas as pd

    api = _api(endpoint)
    retry = dict(attempts=4, base_delay=0.5, log=log or (lambda _m: None))
    try:
        paths = with_retries(lambda: api.list_repo_files(repo_id, repo_type="dataset", revision=revision),
                             f"list {repo_id}", **retry)
    except Exception as err:  # noqa: BLE001 - offline, missing repo, HTTP error: one message
        raise _read_failed(repo_id, err) from None
    csvs = sorted(p for p in paths if re.fullmatch(rf"{SUBMISSIONS_DIR}/[^/]+/[^/]+/{re.escape(RESULTS_FILE)}", p))
    if not csvs:
        raise ResultsFolderError(f"results repo {repo_id} holds no submission ({SUBMISSION_GLOB})")
    frames, infos = [], {}
    with tempfile.TemporaryDirectory(prefix="geofidelity-results-") as cache:
        def download(path: str) -> Path:
            return Path(with_retries(lambda: api.hf_hub_download(repo_id, path, repo_type="dataset", revision=revision,
                                                                cache_dir=cache), f"download {path}", **retry))

        try:
            for path in csvs:
                df = read_results_csv(download(path))
                frames.append(df)
                run_json = path.rsplit("/", 1)[0] + f"/{ORIGINAL_DIR}/{RUN_FILE}"
                if with_run_info and run_json in paths:
                    info = json.loads(download(run_json).read_text(encoding="utf-8"))
                    infos[str(df["run_id"].iloc[0])] = dict(info, _run=str(df["run_id"].iloc[0]), _dir=f"{repo_id}/{path}")
        except ResultsFolderError:
            raise
        except Exception as err:  # noqa: BLE001
            raise _read_failed(repo_id, err) from None
    return pd.concat(frames, ignore_index=True), infos


def load_leaderboard(repo_id: str, *, endpoint: str | None = None, revision: str | None = None):
    """Every submitted row of the results repo ``repo_id``: one row per method x condition x block
    and submission, with the columns :data:`SUBMISSION_COLUMNS`."""
    return load_submissions(repo_id, endpoint=endpoint, revision=revision, with_run_info=False)[0]


# -- model cards ----------------------------------------------------------------------------------


def update_model_card(
    model_repo: str,
    scores: Sequence[Mapping[str, Any]],
    *,
    dataset_type: str,
    dataset_name: str,
    dataset_config: str | None = None,
    dataset_revision: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    source_url: str | None = None,
) -> int:
    """Writes ``scores`` into the ``model-index`` of the model repo's card, keeping its other results.

    ``scores``: ``{"metric": column, "value", "ci_low", "ci_high", "confidence"}`` records. A result
    of the same task, dataset, config and metric is replaced; every other result is kept.
    Returns the number of results in the card afterwards.
    """
    from huggingface_hub import EvalResult, ModelCard, ModelCardData
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError

    from .requests import resolve_token

    token = resolve_token(token)
    api = _api(endpoint, token)
    retry = dict(attempts=4, base_delay=0.5, log=lambda _m: None, token=token)
    try:
        with tempfile.TemporaryDirectory(prefix="geofidelity-card-") as cache:
            try:
                path = with_retries(lambda: api.hf_hub_download(model_repo, CARD_FILE, cache_dir=cache),
                                    f"read {model_repo}/{CARD_FILE}", **retry)
                card = ModelCard(Path(path).read_text(encoding="utf-8"))
            except EntryNotFoundError:
                card = ModelCard.from_template(ModelCardData())
        data = card.data
        new = []
        for s in scores:
            value = s["value"]
            if value is None or not math.isfinite(float(value)):
                continue
            info = METRICS[s["metric"]]
            conf = s.get("confidence", 0.95)
            new.append(EvalResult(
                task_type="text-to-image", dataset_type=dataset_type, dataset_name=dataset_name,
                dataset_config=dataset_config, dataset_revision=dataset_revision, metric_type=s["metric"],
                metric_value=round(float(value), 6),
                metric_name=f"{info.label} ({'higher' if info.higher_is_better else 'lower'} is better; "
                            f"{conf:.0%} CI {float(s['ci_low']):.3f} to {float(s['ci_high']):.3f})",
                metric_args={"ci_low": round(float(s["ci_low"]), 6), "ci_high": round(float(s["ci_high"]), 6),
                             "confidence": conf},
                source_name="GeoFidelity-Bench", source_url=source_url,
            ))

        def key(r) -> tuple:
            return (r.task_type, r.dataset_type, r.dataset_config, r.metric_type)

        replaced = {key(r) for r in new}
        kept = [r for r in (data.eval_results or []) if key(r) not in replaced]
        data.eval_results = kept + new
        if not data.model_name:
            data.model_name = model_repo.split("/")[-1]
        text = str(card)
        with_retries(lambda: api.upload_file(path_or_fileobj=text.encode("utf-8"), path_in_repo=CARD_FILE,
                                             repo_id=model_repo, commit_message="GeoFidelity-Bench results"),
                     f"update {model_repo}/{CARD_FILE}", **retry)
    except HfHubHTTPError as err:
        raise HubPushError(f"cannot update the model card of {model_repo}: {describe_error(err, token)}") from None
    return len(data.eval_results)


__all__ = [
    "SUBMISSION_COLUMNS",
    "SUBMISSION_GLOB",
    "ResultsPushReport",
    "Submission",
    "SubmissionError",
    "load_leaderboard",
    "load_submissions",
    "push_results",
    "results_card",
    "run_id_of",
    "submission_files",
    "update_model_card",
    "validate_results_folder",
]
