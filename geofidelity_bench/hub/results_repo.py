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

from ..comparability import AnchorCheck, check_anchors, comparability_of_run, run_field
from ..errors import GeoFidelityError, redact_url
from ..metrics.catalog import METRICS, RESULT_METRIC_COLUMNS
from ..record_checks import reserved_rows_problem
from ..results import RESULTS_FILE, RUN_FILE, ResultsFolderError, read_results_csv
from .card import CARD_FILE
from .leaderboard_config import LEADERBOARD_FILE
from .requests import HubPushError, check_repo_id, describe_error, file_digests, same_remote, with_retries

SUBMISSIONS_DIR = "submissions"
SUBMISSION_GLOB = f"{SUBMISSIONS_DIR}/*/*/{RESULTS_FILE}"
ORIGINAL_DIR = "run"
ANCHORS_DIR = "anchors"
ANCHORS_GLOB = f"{ANCHORS_DIR}/*/{RESULTS_FILE}"
#: Beside each submission's results.csv: its generations (repo, commit) and the sha256 of every image it scored.
SUBMISSION_RECORD = "submission.json"
SUBMISSION_RECORD_FORMAT = "geofidelity-bench-submission/1"
#: Condition of the real-image anchor rows and of the sanity rows (contract C3); every other row is a generator's.
ANCHOR_CONDITION = "anchor"
SANITY_CONDITION = "sanity"
#: Columns added to every submitted row (first, in this order). ``segmenter``: the GAAS segmenter
#: (its config hash, else name; empty without GAAS); ``group_id``: the comparable group;
#: ``anchor_check``: match / mismatch / unchecked, ``anchor_check_detail``: why.
SUBMISSION_COLUMNS = ("run_id", "benchmark_name", "benchmark_fingerprint", "encoder_config_hash",
                      "protocol_version", "segmenter", "group_id", "anchor_check", "anchor_check_detail",
                      "library_version", "created_at")
#: Columns added to every row of a group's anchors file (first, in this order).
ANCHOR_FILE_COLUMNS = ("run_id", "benchmark_name", "benchmark_fingerprint", "encoder_config_hash",
                       "protocol_version", "segmenter", "group_id", "library_version", "created_at")
#: Text columns of submitted rows that results.read_results_csv does not know (kept as strings here).
TEXT_COLUMNS = ("segmenter", "group_id", "anchor_check", "anchor_check_detail", "run_id", "protocol_version")
#: ``stored_as`` of the rows :func:`load_submissions` returns.
STORED_SUBMISSION, STORED_ANCHORS = "submission", "group_anchors"
#: The files the report needs in a results folder.
REQUIRED_FILES = (RESULTS_FILE, RUN_FILE, "summary_by_method_condition.csv")
#: run.json keys that change from one run of the same thing to the next (left out of run_id).
VOLATILE_KEYS = ("created_at", "elapsed_s", "command", "embedding_cache", "embedding_stats")
#: Nested run.json entries left out of run_id for the same reason: cache hits of the segmenter,
#: folders and settings that change no number (results.csv, whose bytes are in run_id, holds the numbers).
VOLATILE_PATHS = (
    ("gaas", "segment_stats"),
    ("parameters", "out"),
    ("parameters", "generated"),
    ("parameters", "cache_dir"),
    ("parameters", "no_cache"),
    ("parameters", "no_progress"),
    ("parameters", "num_workers"),
    ("generation_manifest", "file"),
    # what torch's float32 settings were in the last forward: null when every embedding (or segmentation)
    # came from the cache, so the same evaluate twice would otherwise be two runs; left out of the
    # config hash too (encoders/devices.py), and the numbers are in results.csv's bytes
    ("encoder", "config", "float32_precision"),
    ("gaas", "config", "float32_precision"),
)
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


def roles(rows):
    """``"anchor"``, ``"sanity"`` or ``"generator"`` for each row, from its condition (contract C3)."""
    cond = rows["condition"].astype(str)
    return cond.map({ANCHOR_CONDITION: "anchor", SANITY_CONDITION: "sanity"}).fillna("generator")


@dataclass
class Submission:
    """A validated results folder, ready to push."""

    folder: Path
    rows: Any  # pandas.DataFrame
    run_info: dict
    run_id: str

    @property
    def methods(self) -> list[str]:
        """The generator methods (what is submitted)."""
        return sorted(self.rows.loc[roles(self.rows) == "generator", "method"].unique())

    @property
    def sanity_methods(self) -> list[str]:
        return sorted(self.rows.loc[roles(self.rows) == "sanity", "method"].unique())

    @property
    def anchor_rows(self):
        return self.rows[roles(self.rows) == "anchor"]

    @property
    def segmenter(self) -> str:
        return comparability_of_run(self.run_info).segmenter

    @property
    def group_id(self) -> str:
        return comparability_of_run(self.run_info).group_id

    def prefix(self, method: str) -> str:
        return f"{SUBMISSIONS_DIR}/{method}/{self.run_id}/"


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


def stable_run_info(run_info: Mapping) -> dict:
    """run.json without :data:`VOLATILE_KEYS` and :data:`VOLATILE_PATHS` (what run_id hashes)."""
    import copy

    stable = {k: copy.deepcopy(v) for k, v in run_info.items() if k not in VOLATILE_KEYS}
    for path in VOLATILE_PATHS:
        parent = run_field(stable, path[:-1])
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
    return stable


def run_id_of(run_info: Mapping, results_bytes: bytes) -> str:
    """The submission id of a run: see the module docstring."""
    stable = stable_run_info(run_info)
    canonical = json.dumps(stable, sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(canonical.encode("utf-8"))
    digest.update(hashlib.sha256(results_bytes).digest())
    return digest.hexdigest()[:16]


def validate_results_folder(folder: str | os.PathLike) -> Submission:
    """Checks that ``folder`` can be submitted and returns it with its ``run_id``.

    Raises:
        SubmissionError: a required file is missing, run.json lacks a field
            (:data:`REQUIRED_RUN_FIELDS`), a metric value is infinite or out of its range
            (:mod:`geofidelity_bench.metrics.catalog`), a row lacks its method, condition or block,
            two rows share a (method, condition, block_id), or a NaN score has no reason in
            run.json (:func:`check_rows_once_and_nans_explained`).
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
    absent = [f"{'.'.join(path)} ({what})" for path, what in REQUIRED_RUN_FIELDS if run_field(info, path) in (None, "", {})]
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
    if reserved := reserved_rows_problem(rows["method"], rows["condition"], str(csv)):  # rows named like an anchor
        raise SubmissionError(reserved)
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
    check_rows_once_and_nans_explained(rows, info, csv)
    return Submission(folder, rows, info, run_id_of(info, csv.read_bytes()))


def _nan_explanations(info: Mapping) -> tuple[set[str], set[tuple[str, str]], list[str]]:
    """What run.json explains: (columns NaN everywhere for a stated reason, {(column, "method/condition/block")},
    the columns of records that name no row).

    ``nan_reasons`` as ``evaluate`` writes it: records with ``column``, ``reason`` and ``rows``. A reason
    is per (method, condition, block) row, never column-wide (docs/benchmark.md section 13): a record
    without ``rows`` (or a ``{column: reason}`` mapping) explains nothing and is returned as the third
    item, so that a column-wide record cannot blank a submission's worst blocks. The one column-wide
    reason is GAAS's ``gaas.reason`` of a run without a segmenter (GAAS then is n/a for every row).
    """
    columns: set[str] = set()
    cells: set[tuple[str, str]] = set()
    column_wide: list[str] = []
    reasons = info.get("nan_reasons")
    if isinstance(reasons, Mapping):
        column_wide += sorted(str(c) for c, why in reasons.items() if why)
    elif isinstance(reasons, list):
        for rec in reasons:
            if not isinstance(rec, Mapping) or not rec.get("reason"):
                continue
            col = str(rec.get("column") or rec.get("metric") or "")
            rows = rec.get("rows")
            if isinstance(rows, list):
                cells |= {(col, str(r)) for r in rows}
            else:
                column_wide.append(col)
    gaas = info.get("gaas")
    if isinstance(gaas, Mapping) and not gaas.get("segmenter") and gaas.get("reason"):
        columns.add("gaas")
    return columns, cells, column_wide


def check_rows_once_and_nans_explained(rows, info: Mapping, csv) -> None:
    """Refuses a results table that would break the repo's leaderboard: two rows of one (method, condition,
    block_id), or a NaN score of a row to be submitted (generator or anchor) that run.json's ``nan_reasons``
    does not explain (docs/benchmark.md section 13, Submissions).

    Raises:
        SubmissionError: naming the first offending row and how many there are.
    """
    import numpy as np

    keys = rows[["method", "condition", "block_id"]].astype(str)
    repeated = keys.duplicated(keep=False).to_numpy()
    if repeated.any():
        first = keys[repeated].iloc[0]
        same = np.flatnonzero((keys == first).all(axis=1).to_numpy()) + 2
        n = int(keys[repeated].drop_duplicates().shape[0])
        raise SubmissionError(
            f"{csv}: {n} (method, condition, block_id) key(s) have more than one row, e.g. "
            f"{first['method']}/{first['condition']}/{first['block_id']} in rows {', '.join(map(str, same))}: a "
            "results table has one row per panel (merge runs with `geofidelity-bench report --results A B`, never "
            "by concatenating their results.csv); nothing was uploaded"
        )
    columns, cells, column_wide = _nan_explanations(info)
    submitted = (roles(rows) != "sanity").to_numpy()
    labels = (keys["method"] + "/" + keys["condition"] + "/" + keys["block_id"]).to_numpy()
    unexplained: list[tuple[int, str]] = []
    for col in RESULT_METRIC_COLUMNS:
        if col in columns:
            continue
        nan = np.isnan(rows[col].to_numpy(dtype=float)) & submitted
        unexplained += [(int(i), col) for i in np.flatnonzero(nan) if (col, labels[i]) not in cells]
    if unexplained:
        i, col = min(unexplained)
        if col in column_wide:
            raise SubmissionError(
                f"{csv}: run.json nan_reasons has a record for column {col!r} that lists no rows, and {len(unexplained)} "
                f"NaN score(s) rely on such records, e.g. row {i + 2} ({labels[i]}): a reason is per (method, "
                "condition, block) row, never column-wide (a column-wide reason could blank any block); re-run "
                "`geofidelity-bench evaluate`, which lists every row; nothing was uploaded")
        raise SubmissionError(
            f"{csv}: {len(unexplained)} NaN score(s) have no reason in run.json nan_reasons, e.g. column {col!r} in "
            f"row {i + 2} ({labels[i]}): a missing score must say why (`geofidelity-bench evaluate` records every "
            "reason); nothing was uploaded"
        )


# -- the files of a submission --------------------------------------------------------------------


def copied_panels(sub: Submission) -> dict[tuple[str, str, str], int]:
    """{(method, condition, block_id): flagged images} of the generator panels the copy audit flagged.

    Read from results.csv's ``n_copied`` (contract C1) and from run.json's ``near_copies`` records
    (contract C2; the larger count per panel); anchor and sanity panels are not the submission's.
    """
    import pandas as pd

    rows = sub.rows[roles(sub.rows) == "generator"]
    found: dict[tuple[str, str, str], int] = {}
    if "n_copied" in rows:
        n = pd.to_numeric(rows["n_copied"], errors="coerce")
        for r, k in zip(rows.itertuples(index=False), n):
            if k == k and k > 0:
                found[(str(r.method), str(r.condition), str(r.block_id))] = int(k)
    per_panel: dict[tuple[str, str, str], int] = {}
    for rec in sub.run_info.get("near_copies") or []:
        if not isinstance(rec, Mapping) or rec.get("flagged") is False:
            continue
        cond = str(rec.get("condition", ""))
        if cond in (ANCHOR_CONDITION, SANITY_CONDITION):
            continue
        key = (str(rec.get("method", "")), cond, str(rec.get("block_id", "")))
        per_panel[key] = per_panel.get(key, 0) + 1
    for key, k in per_panel.items():
        found[key] = max(found.get(key, 0), k)
    return dict(sorted(found.items()))


def _copies_error(sub: Submission, found: Mapping[tuple[str, str, str], int]) -> SubmissionError:
    records = [r for r in sub.run_info.get("near_copies") or [] if isinstance(r, Mapping)
               and (str(r.get("method")), str(r.get("condition")), str(r.get("block_id"))) in found]
    ex = ""
    if records:
        r = records[0]
        ex = (f", e.g. {r.get('method')}/{r.get('condition')}/{r.get('block_id')}/{r.get('file', '?')} copies "
              f"reference {r.get('reference_id', '?')}")
    else:
        (m, c, b), k = next(iter(found.items()))
        ex = f", e.g. {k} image(s) of {m}/{c}/{b}"
    return SubmissionError(
        f"{sub.folder}: {sum(found.values())} generated image(s) in {len(found)} panel(s) are flagged by the copy audit "
        f"(results.csv n_copied, run.json near_copies){ex}. A copy of the benchmark's own photos is not a model's "
        "result: score the panels without them (`geofidelity-bench evaluate --exclude-copies`), or pass "
        "--allow-copies to submit the folder marked as copied (it is then never ranked)"
    )


def _key_columns(sub: Submission) -> dict[str, Any]:
    info = sub.run_info
    return {
        "run_id": sub.run_id,
        "benchmark_name": run_field(info, ("benchmark", "name")),
        "benchmark_fingerprint": run_field(info, ("benchmark", "fingerprint")),
        "encoder_config_hash": run_field(info, ("encoder", "config_hash")),
        "protocol_version": str(run_field(info, ("protocol", "version"))),
        "segmenter": sub.segmenter,
        "group_id": sub.group_id,
        "library_version": run_field(info, ("versions", "geofidelity-bench")),
        "created_at": info.get("created_at"),
    }


def _with_columns(rows, extra: Mapping[str, Any]):
    rows = rows.copy()
    for i, (col, value) in enumerate(extra.items()):
        if col in rows.columns:
            rows = rows.drop(columns=col)
        rows.insert(i, col, value)
    return rows


def submission_rows(sub: Submission, method: str, anchor_check: AnchorCheck | None = None,
                    copied: Mapping[tuple[str, str, str], int] | None = None):
    """The generator ``method``'s rows with :data:`SUBMISSION_COLUMNS` first (``n_copied`` filled
    from the copy audit when ``copied`` is given)."""
    rows = sub.rows[(sub.rows["method"] == method) & (roles(sub.rows) == "generator")].copy()
    if copied is not None:
        import pandas as pd

        given = pd.to_numeric(rows["n_copied"], errors="coerce") if "n_copied" in rows else pd.Series(
            float("nan"), index=rows.index)
        audit = [copied.get((str(r.method), str(r.condition), str(r.block_id))) for r in rows.itertuples()]
        rows["n_copied"] = [float(a) if a is not None else g for a, g in zip(audit, given)]
    keys = _key_columns(sub)
    check = anchor_check or AnchorCheck("unchecked", "not checked")
    extra = {c: keys[c] for c in SUBMISSION_COLUMNS if c in keys}
    extra.update(anchor_check=check.status, anchor_check_detail=check.detail)
    return _with_columns(rows, {c: extra[c] for c in SUBMISSION_COLUMNS})


def anchor_file_rows(sub: Submission):
    """The run's anchor rows as a group's anchors file holds them (:data:`ANCHOR_FILE_COLUMNS` first)."""
    keys = _key_columns(sub)
    return _with_columns(sub.anchor_rows, {c: keys[c] for c in ANCHOR_FILE_COLUMNS})


def _csv_bytes(frame) -> bytes:
    buf = io.StringIO()
    frame.to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue().encode("utf-8")


def _originals(sub: Submission) -> list[Path]:
    return sorted(p for p in sub.folder.iterdir()
                  if p.is_file() and (p.name in (RESULTS_FILE, RUN_FILE) or re.fullmatch(r"summary_.*\.csv", p.name)))


def submission_files(sub: Submission, anchor_check: AnchorCheck | None = None,
                     copied: Mapping[tuple[str, str, str], int] | None = None,
                     record: Mapping[str, Any] | None = None) -> dict[str, Path | bytes]:
    """{path in the repo: content} of every generator method's folder (with ``record``, its
    :data:`SUBMISSION_RECORD` holding that method's images)."""
    originals = _originals(sub)
    files: dict[str, Path | bytes] = {}
    for method in sub.methods:
        prefix = sub.prefix(method)
        files[prefix + RESULTS_FILE] = _csv_bytes(submission_rows(sub, method, anchor_check, copied))
        if record is not None:
            mine = dict(record, method=method, images=(record.get("images") or {}).get(method, {}))
            files[prefix + SUBMISSION_RECORD] = (json.dumps(mine, indent=2, sort_keys=True) + "\n").encode("utf-8")
        for p in originals:
            files[f"{prefix}{ORIGINAL_DIR}/{p.name}"] = p
    return files


def anchors_path(group_id: str) -> str:
    return f"{ANCHORS_DIR}/{group_id}/{RESULTS_FILE}"


def merge_anchor_rows(stored, ours):
    """``stored`` with the rows of ``ours`` it lacks: a (method, block) it has not, or, for GAAS,
    a (method, block, segmenter) it has not. Returns (merged, number of rows added)."""
    import pandas as pd

    if stored is None or stored.empty:
        return ours.reset_index(drop=True), len(ours)

    def seg(frame):
        return frame["segmenter"].fillna("").astype(str) if "segmenter" in frame else pd.Series("", index=frame.index)

    have_mb = set(zip(stored["method"], stored["block_id"]))
    have_mbs = set(zip(stored["method"], stored["block_id"], seg(stored)))
    add = [((m, b) not in have_mb) or (bool(sg) and (m, b, sg) not in have_mbs)
           for m, b, sg in zip(ours["method"], ours["block_id"], seg(ours))]
    new = ours[add]
    if new.empty:
        return stored, 0
    return pd.concat([stored, new], ignore_index=True), len(new)


def results_card(repo_id: str) -> str:
    """The results repo's dataset card (``configs:`` entries reading every submission and every group's anchors)."""
    return f"""---
configs:
- config_name: default
  data_files:
  - split: train
    path: {SUBMISSION_GLOB}
- config_name: anchors
  data_files:
  - split: train
    path: {ANCHORS_GLOB}
tags:
- geofidelity-bench
- leaderboard
---

# GeoFidelity-Bench results: {repo_id}

Submissions to the GeoFidelity-Bench leaderboard. The maintainer pins each comparable group in
`leaderboard.json` (`geofidelity-bench leaderboard init`: benchmark, encoder, protocol, segmenter,
the block set per condition) and computes its real-image anchors; submitters never write anchors.
`geofidelity-bench leaderboard verify` re-computes every submission from the images it names
(`submission.json`: the generations repo, the commit, every image's sha256) and writes
`verifications/{{method}}/{{run_id}}.json` (verified / mismatch / unverifiable) with its own rows:
a verified submission shows the verifier's numbers; the others are marked self-reported. A submission is a generator's rows, one folder
per method and run: `submissions/{{method}}/{{run_id}}/results.csv` holds the method's rows (one per
condition and block) with the run's id, benchmark fingerprint, encoder config hash, protocol
version, GAAS segmenter, comparable group and the check of its real-image anchors;
`submissions/{{method}}/{{run_id}}/run/` keeps the run's original files (`results.csv`, `run.json`,
`summary_*.csv`).

The real-image anchors belong to the comparable group (same benchmark fingerprint, encoder config
hash and protocol version) and are stored once per group in `anchors/{{group_id}}/results.csv`
(config `anchors`); each new submission's anchors are checked against them (a mismatch means
another encoder or pipeline: that submission is shown apart). Sanity methods are never submitted.
A submission that does not cover the group's blocks is partial and listed apart; one whose images
copy the benchmark's photos is marked and never ranked; GAAS is compared only within one
segmenter. Read everything with `datasets.load_dataset("{repo_id}")` or
`geofidelity_bench.hub.results_repo.load_submissions("{repo_id}")`; submit with
`geofidelity-bench push-results RESULTS_DIR --repo-id {repo_id} --generations ORG/NAME`.
"""


def _card(repo_id: str) -> Callable[[Sequence[str], Callable[[], "str | None"]], str]:
    def card(_remote: Sequence[str], current: Callable[[], "str | None"]) -> str:
        text = current()
        return text if text and SUBMISSION_GLOB in text and ANCHORS_GLOB in text else results_card(repo_id)

    return card


def _digests(content: Path | bytes) -> tuple[str, str]:
    if isinstance(content, bytes):
        return hashlib.sha256(content).hexdigest(), hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    return file_digests(content)


def _read_rows_text(text: str, name: str):
    """A results table from CSV text (results.read_results_csv's parsing, plus :data:`TEXT_COLUMNS` as text)."""
    with tempfile.TemporaryDirectory(prefix="geofidelity-rows-") as tmp:
        path = Path(tmp) / RESULTS_FILE
        path.write_text(text, encoding="utf-8")
        return _read_rows(path, name)


def _read_rows(path: Path, name: str | None = None):
    import pandas as pd

    try:
        df = read_results_csv(path)
    except ResultsFolderError as err:
        raise ResultsFolderError(f"{name or path}: {err}") from None
    text_cols = [c for c in TEXT_COLUMNS if c in df.columns]
    if text_cols:
        raw = pd.read_csv(path, usecols=text_cols, dtype=str, keep_default_na=False)
        for c in text_cols:
            df[c] = raw[c].to_numpy()
    return df


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
        stored = _read_rows_text(stored_text, f"{repo_id}/{a_path}") if stored_text else None
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


# -- model cards ----------------------------------------------------------------------------------


#: metric_args keys that hold a model-card entry's comparability key (docs/benchmark.md section 13).
CARD_KEY_ARGS = ("benchmark_fingerprint", "encoder_config_hash", "protocol_version")


@dataclass
class ModelCardUpdate:
    n_results: int  # results in the card afterwards
    written: int  # results written now
    removed: int  # results of the same comparability key that were replaced or removed (a NaN removes)
    unkeyed: int  # older GeoFidelity-Bench results that record no comparability key (kept, not comparable)


def card_key(result) -> tuple | None:
    """The comparability key of a model-index result written by this library (None for others)."""
    args = getattr(result, "metric_args", None) or {}
    if not all(args.get(k) for k in CARD_KEY_ARGS):
        return None
    return (result.task_type, result.dataset_type, *(str(args[k]) for k in CARD_KEY_ARGS))


def read_model_card(model_repo: str, *, endpoint: str | None = None, token: str | None = None):
    """The model repo's card (a new one from the template when the repo has no README.md), parsed.

    ``push-results --model-card`` calls it before anything is pushed, so that a card that cannot
    be updated stops the command before the results are uploaded.

    Raises:
        RepoIdError: ``model_repo`` is not a valid repo id.
        SubmissionError: the card's YAML metadata (or its ``model-index``) cannot be parsed: the
            message names the repo and the line, and says to fix the card first.
        HubPushError: the Hub could not be read.
    """
    from huggingface_hub import ModelCard, ModelCardData
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError

    from .requests import resolve_token

    check_repo_id(model_repo, "model repo id")
    token = resolve_token(token)
    api = _api(endpoint, token)
    retry = dict(attempts=4, base_delay=0.5, log=lambda _m: None, token=token)
    try:
        with tempfile.TemporaryDirectory(prefix="geofidelity-card-") as cache:
            try:
                path = with_retries(lambda: api.hf_hub_download(model_repo, CARD_FILE, cache_dir=cache),
                                    f"read {model_repo}/{CARD_FILE}", **retry)
            except EntryNotFoundError:
                return ModelCard.from_template(ModelCardData())
            data = Path(path).read_bytes()
    except HfHubHTTPError as err:
        status = getattr(getattr(err, "response", None), "status_code", None)
        if isinstance(err, RepositoryNotFoundError) or status == 404:
            where = redact_url(endpoint) if endpoint else "the Hub"
            raise HubPushError(
                f"--model-card {model_repo}: model repo not found on {where} (or your token cannot read it): create "
                f"it first (`hf repo create {model_repo}`, or HfApi().create_repo({model_repo!r})), check the name "
                "and the token, or leave out --model-card; nothing was pushed") from None
        raise HubPushError(f"cannot read the model card of {model_repo}: {describe_error(err, token)}") from None
    try:
        return ModelCard(data.decode("utf-8"))
    except Exception as err:  # noqa: BLE001 - yaml's errors and huggingface_hub's ValueError alike
        first = " ".join(str(err).split())[:200]
        raise SubmissionError(
            f"the model card {model_repo}/{CARD_FILE} cannot be updated: it is not UTF-8 text with YAML metadata that "
            "parses "
            f"({type(err).__name__}: {first}); fix the card (or leave out --model-card) and run again"
        ) from None


def update_model_card(
    model_repo: str,
    scores: Sequence[Mapping[str, Any]],
    *,
    comparability,
    encoder: str,
    dataset_type: str,
    dataset_name: str,
    dataset_config: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    source_url: str | None = None,
    card=None,
    verified: bool = False,
) -> ModelCardUpdate:
    """Writes ``scores`` into the ``model-index`` of the model repo's card, keeping its other results.

    ``scores``: ``{"metric": column, "value", "ci_low", "ci_high", "confidence", "n_blocks"}`` records
    of one run. An entry is keyed by the run's comparability key
    (:class:`~geofidelity_bench.comparability.Comparability`: benchmark fingerprint, encoder config
    hash, protocol version) and names the encoder (and, for GAAS, the segmenter); the run replaces
    every entry of the same key, so a NaN score removes the stale value instead of leaving an
    older run's number beside the new ones, and a run with another encoder adds its own entries.
    ``card``: the card as :func:`read_model_card` returned it (default: read now). ``verified``: whether
    the numbers are a verifier's re-computation (``leaderboard verify``); otherwise every entry says it is
    self-reported (``metric_args.verified: false`` and "self-reported" in its name).
    """
    from huggingface_hub import EvalResult
    from huggingface_hub.errors import HfHubHTTPError

    from .requests import resolve_token

    check_repo_id(model_repo, "model repo id")
    if not comparability.complete:
        raise SubmissionError(f"the run records no complete comparability key ({comparability.short()}): "
                              "its scores cannot be written to a model card")
    token = resolve_token(token)
    api = _api(endpoint, token)
    retry = dict(attempts=4, base_delay=0.5, log=lambda _m: None, token=token)
    fp, enc_hash, protocol = comparability.key
    key_args = dict(zip(CARD_KEY_ARGS, comparability.key))
    if card is None:
        card = read_model_card(model_repo, endpoint=endpoint, token=token)
    try:
        data = card.data
        new = []
        for s in scores:
            value = s["value"]
            if value is None or not math.isfinite(float(value)):
                continue
            info = METRICS[s["metric"]]
            conf = s.get("confidence", 0.95)
            config = f"encoder {encoder} ({enc_hash[:12]}), protocol {protocol}"
            args = {"ci_low": round(float(s["ci_low"]), 6), "ci_high": round(float(s["ci_high"]), 6),
                    "confidence": conf, "encoder": encoder, "verified": bool(verified), **key_args}
            if s.get("n_blocks") is not None:
                args["n_blocks"] = int(s["n_blocks"])
            if s["metric"] == "gaas":
                config += f", segmenter {comparability.segmenter[:12]}"
                args["segmenter"] = comparability.segmenter
            new.append(EvalResult(
                task_type="text-to-image", dataset_type=dataset_type, dataset_name=dataset_name,
                dataset_config=dataset_config, dataset_revision=fp, metric_type=s["metric"],
                metric_value=round(float(value), 6), metric_config=config,
                metric_name=f"{info.label} ({'verified' if verified else 'self-reported, not verified'}; "
                            f"{'higher' if info.higher_is_better else 'lower'} is better; encoder "
                            f"{encoder}; {conf:.0%} CI {float(s['ci_low']):.3f} to {float(s['ci_high']):.3f})",
                metric_args=args, source_name="GeoFidelity-Bench", source_url=source_url,
            ))
        ours = ("text-to-image", dataset_type, fp, enc_hash, protocol)
        before = list(data.eval_results or [])
        kept = [r for r in before if card_key(r) != ours]
        unkeyed = sum(1 for r in kept if card_key(r) is None and r.source_name == "GeoFidelity-Bench")
        data.eval_results = kept + new
        if not data.model_name:
            data.model_name = model_repo.split("/")[-1]
        text = str(card)
        with_retries(lambda: api.upload_file(path_or_fileobj=text.encode("utf-8"), path_in_repo=CARD_FILE,
                                             repo_id=model_repo, commit_message="GeoFidelity-Bench results"),
                     f"update {model_repo}/{CARD_FILE}", **retry)
    except HfHubHTTPError as err:
        raise HubPushError(f"cannot update the model card of {model_repo}: {describe_error(err, token)}") from None
    return ModelCardUpdate(len(data.eval_results), len(new), len(before) - len(kept), unkeyed)


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
