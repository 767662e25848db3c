"""``leaderboard verify``: re-computes every submitted number from the submission's own images
(docs/benchmark.md section 13, Verification).

For each submission of a pinned results repo that has no verification record yet, the verifier

1. reads its run.json and ``submission.json`` (the generations repo and the commit it resolved, and
   the sha256 of every panel image the run scored);
2. downloads that method's ``generations/{method}/*.parquet`` at the recorded commit and checks the
   images of every submitted panel against the recorded sha256s;
3. re-runs the evaluation with the pinned group's benchmark, encoder and segmenter (and
   ``--exclude-copies`` when the run used it), its own copy audit included;
4. compares every submitted number with its own (:data:`VERIFY_ATOL`, :data:`VERIFY_RTOL`; NaN agrees
   only with NaN; ``n_copied`` exactly) and writes ``verifications/{method}/{run_id}.json`` (the
   status and why) and ``verifications/{method}/{run_id}/results.csv`` (the verifier's rows: the numbers
   shown once verified) in one compare-and-swap commit.

Statuses: ``verified`` (every number within the tolerance), ``mismatch`` (which columns and blocks, by
how much; a copy the submitter's audit hid is one), ``unverifiable`` (why: no generations recorded,
missing or changed images, a commit that no longer exists, a group that is not pinned, a verifier that
cannot load the pinned encoder). Under ``accelerate launch``/``torchrun`` each process takes every
``WORLD_SIZE``-th submission (by ``RANK``) and commits its own records.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import GeoFidelityError
from .leaderboard_config import MISMATCH, UNVERIFIABLE, VERIFICATIONS_DIR, VERIFIED, PinnedGroup

#: Tolerance of the verification: |submitted - verified| <= VERIFY_ATOL + VERIFY_RTOL * |verified|.
#: float32 embeddings of the same images agree to about 1e-6 across batch sizes, thread counts and
#: devices (CPU oneDNN/OpenBLAS, CUDA with TF32 off, as the encoders force); the scores are means and
#: differences of cosines of those embeddings, so an honest re-run agrees to ~1e-6. 1e-4 leaves a
#: factor of 100 for that noise and still catches any edit that changes a number shown with three
#: decimals (5e-4 or more). Counts (``n_copied``, ``n_generated``) must agree exactly.
VERIFY_ATOL = 1e-4
VERIFY_RTOL = 1e-4
#: Count columns compared exactly.
COUNT_COLUMNS = ("n_generated", "n_copied")
VERIFICATION_FORMAT = "geofidelity-bench-verification/1"


class VerifyError(GeoFidelityError, ValueError):
    """The verifier cannot run at all (no pinned repo); per-submission problems become records instead."""


class _Unverifiable(Exception):
    """Internal: this submission cannot be verified, for the reason given."""


def verification_paths(method: str, run_id: str) -> tuple[str, str]:
    """(the record, the verifier's results.csv) of one submission."""
    return (f"{VERIFICATIONS_DIR}/{method}/{run_id}.json", f"{VERIFICATIONS_DIR}/{method}/{run_id}/results.csv")


@dataclass
class Outcome:
    method: str
    run_id: str
    status: str
    detail: str
    commit: str | None = None
    seconds: float = 0.0

    def line(self) -> str:
        return f"{self.method} run {self.run_id}: {self.status}: {self.detail} ({self.seconds:.1f} s)"


@dataclass
class VerifyReport:
    repo_id: str
    outcomes: list = field(default_factory=list)
    pending: int = 0  # submissions without a record, before this run
    skipped_other_ranks: int = 0

    def lines(self) -> list[str]:
        out = [f"{self.repo_id}: {o.line()}" for o in self.outcomes]
        left = self.pending - len(self.outcomes) - self.skipped_other_ranks
        out.append(f"{self.repo_id}: verified {len(self.outcomes)} submission(s) here"
                   + (f", {self.skipped_other_ranks} by other processes" if self.skipped_other_ranks else "")
                   + (f"; {left} still without a record (run again to continue)" if left > 0 else ""))
        return out


def compare_rows(submitted, verified, columns) -> tuple[list[dict], list[str]]:
    """Every (column, condition, block) where ``submitted`` differs from ``verified`` beyond the tolerance
    (counts exactly; NaN agrees only with NaN), and the panels present on one side only."""
    import math

    def key(df):
        return {(str(c), str(b)): r for c, b, r in zip(df["condition"], df["block_id"], df.to_dict("records"))}

    sub, ver = key(submitted), key(verified)
    one_sided = [f"{c}/{b} only in the submission" for c, b in sorted(set(sub) - set(ver))]
    one_sided += [f"{c}/{b} only in the verifier's run" for c, b in sorted(set(ver) - set(sub))]
    diffs = []
    for k in sorted(set(sub) & set(ver)):
        for col in columns:
            if col not in sub[k] or col not in ver[k]:
                continue
            a, b = sub[k][col], ver[k][col]
            a = float("nan") if a is None or a == "" else float(a)
            b = float("nan") if b is None or b == "" else float(b)
            if col in COUNT_COLUMNS:
                a = 0.0 if math.isnan(a) and col == "n_copied" else a
                b = 0.0 if math.isnan(b) and col == "n_copied" else b
                same = (math.isnan(a) and math.isnan(b)) or a == b
            elif math.isnan(a) or math.isnan(b):
                same = math.isnan(a) and math.isnan(b)
            else:
                same = abs(a - b) <= VERIFY_ATOL + VERIFY_RTOL * abs(b)
            if not same:
                diffs.append({"column": col, "condition": k[0], "block_id": k[1], "submitted": a, "verified": b,
                              "abs_diff": abs(a - b) if not (math.isnan(a) or math.isnan(b)) else None})
    return diffs, one_sided


def _diff_text(diffs: list[dict], one_sided: list[str]) -> str:
    parts = []
    if diffs:
        cols = sorted({d["column"] for d in diffs})
        first = diffs[0]
        by = f"{first['abs_diff']:.3g}" if first["abs_diff"] is not None else "NaN on one side"
        parts.append(f"{len(diffs)} value(s) differ beyond |a-b| <= {VERIFY_ATOL:g} + {VERIFY_RTOL:g}|b| in column(s) "
                     f"{', '.join(cols)}, e.g. {first['column']} of {first['condition']}/{first['block_id']}: "
                     f"submitted {first['submitted']:.6g}, verified {first['verified']:.6g} (by {by})")
    if one_sided:
        parts.append(f"{len(one_sided)} panel(s) on one side only, e.g. {one_sided[0]}")
    return "; ".join(parts)


class Verifier:
    """Re-computes submissions of one results repo (see the module docstring)."""

    def __init__(self, repo_id: str, *, endpoint: str | None = None, token: str | None = None,
                 benchmark: str | None = None, encoder_weights: str | None = None,
                 segmenter_weights: str | None = None, cache_dir: str | os.PathLike | None = None,
                 device: str | None = None, batch_size: int = 32, progress: bool = True, attempts: int = 6,
                 retry_base_delay: float = 1.0, log: Callable[[str], None] | None = None):
        from .push import HubRepo

        self.repo = HubRepo(repo_id, token=token, endpoint=endpoint, attempts=attempts,
                            retry_base_delay=retry_base_delay, log=log)
        self.repo_id, self.endpoint = repo_id, endpoint
        self.say = self.repo.say
        self.benchmark_override, self.encoder_weights, self.segmenter_weights = benchmark, encoder_weights, segmenter_weights
        self.cache_dir, self.device, self.batch_size, self.progress = cache_dir, device, batch_size, progress
        self._models: dict[str, Any] = {}

    # -- what to verify --------------------------------------------------------------------------

    def pending(self, state) -> list[tuple[str, str]]:
        """(method, run_id) of every submission without a verification record, in path order."""
        from .submissions import SUBMISSIONS_DIR

        subs = sorted({(m.group(1), m.group(2)) for p in state.files
                       if (m := re.fullmatch(rf"{SUBMISSIONS_DIR}/([^/]+)/([^/]+)/results\.csv", p))})
        return [(m, r) for m, r in subs if verification_paths(m, r)[0] not in state.files]

    def run(self, *, max_submissions: int | None = None, rank: int | None = None,
            world_size: int | None = None) -> VerifyReport:
        from .leaderboard import repo_state

        rank = int(os.environ.get("RANK", "0") or 0) if rank is None else rank
        world_size = int(os.environ.get("WORLD_SIZE", "1") or 1) if world_size is None else world_size
        state = repo_state(self.repo)
        config = state.config(self.repo_id)
        if config is None:
            raise VerifyError(f"{self.repo_id} has no leaderboard.json: nothing is pinned to verify against; the "
                              f"maintainer runs `geofidelity-bench leaderboard init --repo-id {self.repo_id} ...` first")
        todo = self.pending(state)
        report = VerifyReport(self.repo_id, pending=len(todo))
        limit = len(todo) if max_submissions is None else max(0, int(max_submissions))
        mine = [t for i, t in enumerate(todo[:limit]) if i % world_size == rank]
        report.skipped_other_ranks = len(todo[:limit]) - len(mine)
        for n, (method, run_id) in enumerate(mine, 1):
            self.say(f"{self.repo_id}: verifying {method} run {run_id} ({n} of {len(mine)})")
            started = time.time()
            record, rows = self.verify_one(state, config, method, run_id)
            commit = self._write(method, run_id, record, rows)
            report.outcomes.append(Outcome(method, run_id, record["status"], record["detail"], commit,
                                           time.time() - started))
        return report

    # -- one submission --------------------------------------------------------------------------

    def verify_one(self, state, config, method: str, run_id: str) -> tuple[dict, Any]:
        """(the verification record, the verifier's rows or None) of one submission."""
        from ..comparability import comparability_of_run
        from .submissions import ORIGINAL_DIR, RUN_FILE, SUBMISSION_RECORD, SUBMISSIONS_DIR, read_rows_text

        prefix = f"{SUBMISSIONS_DIR}/{method}/{run_id}/"
        record: dict[str, Any] = {"format": VERIFICATION_FORMAT, "method": method, "run_id": run_id,
                                  "tolerance": {"atol": VERIFY_ATOL, "rtol": VERIFY_RTOL, "exact": list(COUNT_COLUMNS)}}
        try:
            try:
                info = json.loads(state.read(prefix + f"{ORIGINAL_DIR}/{RUN_FILE}") or "null")
                submitted = read_rows_text(state.read(prefix + "results.csv") or "", f"{self.repo_id}/{prefix}results.csv")
            except (GeoFidelityError, json.JSONDecodeError) as err:
                raise _Unverifiable(f"the submission's files cannot be read ({err})") from None
            if not isinstance(info, dict):
                raise _Unverifiable("the submission has no run.json")
            sub_record = json.loads(state.read(prefix + SUBMISSION_RECORD) or "null")
            if not isinstance(sub_record, dict) or not sub_record.get("generations"):
                raise _Unverifiable("no generations recorded: the images were never pushed with the submission "
                                    "(push-generations, then push-results --generations ORG/NAME)")
            gid = comparability_of_run(info).group_id
            group = config.groups.get(gid)
            if group is None:
                raise _Unverifiable(f"its group {gid} is not pinned in leaderboard.json (another benchmark, encoder "
                                    "or protocol)")
            record["group_id"] = gid
            record["generations"] = sub_record["generations"]
            rows, detail, extra = self._recompute(group, method, info, sub_record, submitted)
        except _Unverifiable as why:
            record.update(status=UNVERIFIABLE, detail=str(why))
            return record, None
        record.update(extra)
        record.update(detail=detail["text"], differences=detail["diffs"][:200], n_differences=len(detail["diffs"]),
                      one_sided=detail["one_sided"], status=MISMATCH if detail["diffs"] or detail["one_sided"]
                      or detail["copies"] else VERIFIED)
        if record["status"] == VERIFIED:
            record["detail"] = (f"all {detail['n_values']} submitted value(s) of {detail['n_panels']} panel(s) agree "
                                f"with the verifier's re-computation (|a-b| <= {VERIFY_ATOL:g} + {VERIFY_RTOL:g}|b|)")
        return record, rows

    def _models_for(self, group: PinnedGroup):
        """(benchmark, encoder, segmenter or None, gaas reason), built once per group."""
        if group.group_id in self._models:
            return self._models[group.group_id]
        from ..benchmark import load_benchmark
        from ..encoders import get_encoder

        bench_id = self.benchmark_override or group.benchmark.get("id")
        try:
            bench = load_benchmark(bench_id, revision=None if self.benchmark_override else group.benchmark.get("revision"))
        except GeoFidelityError as err:
            raise _Unverifiable(f"the pinned benchmark {bench_id} cannot be loaded here ({err}); pass --benchmark") from None
        if bench.fingerprint != group.benchmark.get("fingerprint"):
            raise _Unverifiable(f"the benchmark loaded here ({bench_id}) has fingerprint {bench.fingerprint[:12]}, not the "
                                f"pinned {str(group.benchmark.get('fingerprint'))[:12]}")
        weights = self.encoder_weights or group.encoder.get("weights")
        try:
            enc = get_encoder(group.encoder["name"], weights=weights, device=self.device)
        except GeoFidelityError as err:
            raise _Unverifiable(f"the pinned encoder {group.encoder['name']} cannot be loaded here ({err}); pass "
                                "--encoder-weights PATH") from None
        if enc.config_hash != group.encoder.get("config_hash"):
            raise _Unverifiable(f"the encoder loaded here has config hash {enc.config_hash[:12]}, not the pinned "
                                f"{str(group.encoder.get('config_hash'))[:12]} (another encoder or weights)")
        seg, reason = None, "the pinned group has no GAAS segmenter"
        if group.segmenter:
            from ..segmentation import get_segmenter

            try:
                seg = get_segmenter(group.segmenter["name"], weights=self.segmenter_weights
                                    or group.segmenter.get("weights"), device=self.device)
                reason = None
            except GeoFidelityError as err:
                reason = f"the pinned segmenter cannot be loaded by the verifier ({err})"
        self._models[group.group_id] = (bench, enc, seg, reason)
        return self._models[group.group_id]

    def _images(self, gens: Mapping, method: str, wanted: Mapping[str, list], folder: Path) -> None:
        """Writes the method's panels of ``gens`` (at its commit) into ``folder/{method}/{condition}/{block}/``,
        checking every panel's sha256s against ``wanted`` ({"condition/block": [sha256, ...]})."""
        import pyarrow.parquet as pq
        from huggingface_hub import HfApi

        api = HfApi(endpoint=self.endpoint, token=self.repo.token)
        repo_id, commit = str(gens.get("repo_id")), str(gens.get("commit"))
        try:
            files = api.list_repo_files(repo_id, repo_type="dataset", revision=commit)
        except Exception as err:  # noqa: BLE001 - a missing repo or commit is a reason, not a crash
            raise _Unverifiable(f"the generations {repo_id} at commit {commit[:12]} cannot be read (deleted or "
                                f"rewritten?): {type(err).__name__}") from None
        shards = sorted(f for f in files if f.startswith(f"generations/{method}/") and f.endswith(".parquet"))
        if not shards:
            raise _Unverifiable(f"{repo_id} at commit {commit[:12]} has no generations/{method}/*.parquet")
        got: dict[str, list[str]] = {}
        seen_names: set[str] = set()
        with tempfile.TemporaryDirectory(prefix="geofidelity-verify-dl-") as cache:
            for shard in shards:
                local = api.hf_hub_download(repo_id, shard, repo_type="dataset", revision=commit, cache_dir=cache)
                table = pq.read_table(local, columns=["image", "condition", "block_id", "k"])
                for rec in table.to_pylist():
                    panel = f"{rec['condition']}/{rec['block_id']}"
                    if panel not in wanted:
                        continue
                    data = (rec.get("image") or {}).get("bytes")
                    if not data:
                        raise _Unverifiable(f"{repo_id}: an image of {method}/{panel} has no bytes")
                    sha = hashlib.sha256(data).hexdigest()
                    got.setdefault(panel, []).append(sha)
                    if sha not in set(wanted[panel]):
                        continue  # not scored by the run (a panel may hold more images than were scored)
                    path = str((rec.get("image") or {}).get("path") or "")
                    suffix = Path(path).suffix.lower() if Path(path).suffix.lower() in (
                        ".jpg", ".jpeg", ".png", ".webp") else ".jpg"
                    name = f"{int(rec['k']):02d}{suffix}"
                    target = folder / method / rec["condition"] / rec["block_id"] / name
                    if str(target) in seen_names:
                        name = f"{int(rec['k']):02d}_{sha[:8]}{suffix}"
                        target = target.with_name(name)
                    seen_names.add(str(target))
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
        problems = []
        for panel, shas in sorted(wanted.items()):
            have = sorted(got.get(panel, []))
            missing = sorted(set(shas) - set(have))
            if missing:
                problems.append(f"{method}/{panel}: {len(missing)} of {len(shas)} scored image(s) are not in the "
                                f"generations (sha256 {missing[0][:12]}...)")
        if problems:
            raise _Unverifiable(f"the images at {repo_id}@{commit[:12]} are not those the run scored: "
                                + "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else ""))

    def _recompute(self, group: PinnedGroup, method: str, info: Mapping, sub_record: Mapping, submitted):
        from ..evaluation import evaluate_panels, load_generated_panels
        from ..metrics.catalog import RESULT_METRIC_COLUMNS
        from ..near_copies import near_copies_warning

        bench, enc, seg, gaas_reason = self._models_for(group)
        wanted = sub_record.get("images") or {}
        if not isinstance(wanted, Mapping) or not wanted:
            raise _Unverifiable("submission.json names no scored image")
        excluded = bool(isinstance(info.get("copy_audit"), Mapping) and info["copy_audit"].get("excluded") is True)
        cache = None
        if self.cache_dir:
            from ..encoders import EmbeddingCache

            cache = EmbeddingCache(self.cache_dir)
        with tempfile.TemporaryDirectory(prefix="geofidelity-verify-") as tmp:
            folder = Path(tmp) / "generated"
            self._images(sub_record["generations"], method, wanted, folder)
            try:
                loaded = load_generated_panels(folder, bench, methods=[method], ignore_manifest=True,
                                               allow_unpromptable=False, progress=False)
            except GeoFidelityError as err:
                raise _Unverifiable(f"the submitted panels cannot be scored under the pinned protocol ({err})") from None
            results = evaluate_panels(bench, loaded.panels, enc, cache=cache, batch_size=self.batch_size,
                                      progress=self.progress, include_anchors=False, segmenter=seg,
                                      image_check=loaded.image_check, exclude_copies=excluded)
        ours = results[results["method"] == method].reset_index(drop=True)
        sub_rows = submitted[submitted["method"].astype(str) == method]
        columns = [c for c in RESULT_METRIC_COLUMNS if not (c == "gaas" and seg is None)] + list(COUNT_COLUMNS)
        diffs, one_sided = compare_rows(sub_rows, ours, columns)
        flagged = [r for r in results.attrs.get("near_copies", []) if r.get("method") == method]
        claimed = sum(1 for r in info.get("near_copies") or [] if isinstance(r, Mapping) and r.get("method") == method
                      and r.get("flagged", True))
        copies = []
        if len(flagged) > claimed:
            copies.append(f"the verifier's copy audit flags {len(flagged)} image(s) of {method} as copies of the "
                          f"benchmark's photos; the submission's run.json reports {claimed}: "
                          + (near_copies_warning(flagged, first=3, recorded_in=None) or ""))
        text = "; ".join(x for x in (*copies, _diff_text(diffs, one_sided)) if x)
        extra = {"verifier": {"encoder": enc.name, "encoder_config_hash": enc.config_hash, "device": str(enc.device),
                              "segmenter": getattr(seg, "name", None), "gaas": "compared" if seg is not None else
                              f"not verified: {gaas_reason}; shown as n/a once verified",
                              "exclude_copies": excluded},
                 "copy_audit": {"submitted_flagged": claimed, "verified_flagged": len(flagged),
                                "flagged": [{k: r.get(k) for k in ("condition", "block_id", "reference_id", "sha256",
                                                                    "hash_distance", "cosine")} for r in flagged][:50]}}
        n_values = len(set(zip(sub_rows["condition"], sub_rows["block_id"]))) * len(columns)
        return ours, {"text": text, "diffs": diffs, "one_sided": one_sided, "copies": copies, "n_values": n_values,
                      "n_panels": len(ours)}, extra

    # -- writing ---------------------------------------------------------------------------------

    def _write(self, method: str, run_id: str, record: dict, rows) -> str | None:
        from ..provenance import library_versions, utc_timestamp
        from .leaderboard import commit_checked

        rec_path, rows_path = verification_paths(method, run_id)
        record = dict(record, versions=library_versions(), written_at=utc_timestamp())
        files: dict[str, bytes] = {rec_path: (json.dumps(record, indent=2, sort_keys=True, default=str) + "\n").encode()}
        if rows is not None:
            buf = io.StringIO()
            rows.to_csv(buf, index=False, lineterminator="\n")
            files[rows_path] = buf.getvalue().encode("utf-8")

        def decide(state):
            if rec_path in state.files:  # another verifier wrote it meanwhile: its record stands
                return None
            return files, f"Verify {method} run {run_id}: {record['status']}"

        return commit_checked(self.repo, decide, what=f"the verification of {method} run {run_id}")


def verify_repo(repo_id: str, *, max_submissions: int | None = None, **kwargs: Any) -> VerifyReport:
    """Verifies the submissions of ``repo_id`` that have no record yet (see :class:`Verifier`)."""
    return Verifier(repo_id, **kwargs).run(max_submissions=max_submissions)


__all__ = ["COUNT_COLUMNS", "VERIFY_ATOL", "VERIFY_RTOL", "Outcome", "Verifier", "VerifyError", "VerifyReport",
           "compare_rows", "verification_paths", "verify_repo"]
