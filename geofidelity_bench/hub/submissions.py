"""What a results repo holds and what a submission is (docs/benchmark.md section 13, Submissions and
the leaderboard): the repo's layout (:data:`SUBMISSIONS_DIR`, :data:`ANCHORS_DIR`, ...), the
columns a submission adds, ``run_id``, the checks of a results folder before anything is uploaded
(:func:`validate_results_folder`), the rows and files of a submission and of the pinned anchors,
and the repo's dataset card (:func:`results_card`).

The layout is drawn in :mod:`geofidelity_bench.hub.results_repo`, which pushes submissions and reads
them back; :mod:`geofidelity_bench.hub.leaderboard` (pinning the anchors) and
:mod:`geofidelity_bench.hub.verify` read the same layout from here. This module makes no Hub call.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..comparability import AnchorCheck, comparability_of_run, run_field
from ..errors import GeoFidelityError
from ..metrics.catalog import METRICS, RESULT_METRIC_COLUMNS
from ..record_checks import reserved_rows_problem
from ..results import RESULTS_FILE, RUN_FILE, ResultsFolderError, read_results_csv
from .requests import file_digests


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


def with_columns(rows, extra: Mapping[str, Any]):
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
    return with_columns(rows, {c: extra[c] for c in SUBMISSION_COLUMNS})


def anchor_file_rows(sub: Submission):
    """The run's anchor rows as a group's anchors file holds them (:data:`ANCHOR_FILE_COLUMNS` first)."""
    keys = _key_columns(sub)
    return with_columns(sub.anchor_rows, {c: keys[c] for c in ANCHOR_FILE_COLUMNS})


def csv_bytes(frame) -> bytes:
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
        files[prefix + RESULTS_FILE] = csv_bytes(submission_rows(sub, method, anchor_check, copied))
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


def read_rows_text(text: str, name: str):
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


__all__ = [
    "ANCHORS_DIR",
    "STORED_ANCHORS",
    "STORED_SUBMISSION",
    "ANCHORS_GLOB",
    "ANCHOR_CONDITION",
    "ANCHOR_FILE_COLUMNS",
    "ORIGINAL_DIR",
    "REQUIRED_FILES",
    "REQUIRED_RUN_FIELDS",
    "SANITY_CONDITION",
    "SUBMISSIONS_DIR",
    "SUBMISSION_COLUMNS",
    "SUBMISSION_GLOB",
    "SUBMISSION_RECORD",
    "SUBMISSION_RECORD_FORMAT",
    "TEXT_COLUMNS",
    "VOLATILE_KEYS",
    "VOLATILE_PATHS",
    "Submission",
    "SubmissionError",
    "anchor_file_rows",
    "anchors_path",
    "check_rows_once_and_nans_explained",
    "copied_panels",
    "merge_anchor_rows",
    "results_card",
    "roles",
    "run_id_of",
    "stable_run_info",
    "submission_files",
    "submission_rows",
    "validate_results_folder",
]
