"""The release's published scores -> a results folder (``OUT/published/``) in this package's format.

The release ships the paper's own evaluation outputs next to the images (written by its
``eval/run_eval_v3.py``)::

    outputs/eval_v3/raw_results.csv              one row per (method, level, block_id)
    outputs/eval_v3/summary_by_method_level.csv  its means per (method, level), rounded to 4 places
    results/main_scores_by_model_prompt.csv      a copy of that summary for the paper's tables
    outputs/stability/*.csv                      the rank-stability analyses

``raw_results.csv`` has the columns ``method, level, block_id, city, country, stratum,
neighborhood, street_name, n_gen, n_ref, cos_sim, dcsf, mmd, diversity_gap, gaas,
retrieval_acc, mrr, sim_same_block`` followed by the positional similarity columns (below). Its
rows become the rows of ``OUT/published/results.csv`` (docs/benchmark.md section 7, Statistics and analyses; columns in
``RESULT_COLUMNS`` order), written by :func:`geofidelity_bench.results.write_results` with the
summaries and a ``run.json``, so ``report``, the app and ``compare`` read the folder like any
other. The numbers are the release's, never recomputed; ``run.json["published"]`` says so, names
each file with its sha256 and lists the documented differences (docs/benchmark.md section 12,
Differences from the paper's release code) that apply to them; the folder's format is section 11,
File formats (Published scores folder).

Conversions (each row that cannot be converted is an :class:`~.report.ImportIssue`, never lost
silently):

* methods: the release's anchors ``oracle_nn``, ``random_same_country``, ``random_global``
  become ``heldout_real``, ``random_same_country``, ``random_global`` under the condition
  ``anchor`` (the release scores them once per block, under its first level, which is a no-op
  for them); every other method is a generator, renamed by ``MODEL_ALIASES`` (``sdxl_base`` ->
  ``sdxl``) as the generated-image index is, unless ``keep_model_names``; a generator with a
  reserved name is skipped;
* ``level`` -> condition by ``LEVEL_ALIASES`` (``L3`` -> ``L2``, ...);
* ``block_id`` -> the imported benchmark's id (:func:`~.names.canonical_block_id`); rows of a
  block that was dropped or is not in ``blocks.csv`` are issues; ``city``, ``country`` and
  ``stratum`` come from the imported block;
* ``n_gen``, ``n_ref`` -> ``n_generated``, ``n_reference``; ``cos_sim``, ``mmd``, ``dcsf``,
  ``gaas``, ``retrieval_acc``, ``mrr`` as published; ``diversity_gap`` as published, which the
  release clips at 0 (its value is ``max(0, Div(X_r) - Div(X_g))``, this package's is signed:
  docs/benchmark.md section 12, Differences from the paper's release code; ``run.json`` records it);
* the similarity columns: ``sim_same_block`` is ``sim_target``. The negatives' columns are
  POSITIONAL. The release's evaluator stacks the galleries of the negatives a block has, in the
  order ``neg_same_neighborhood_diff_block``, ``neg_same_city_diff_neighborhood``,
  ``neg_same_driving_side_diff_city``, ``neg_random_city`` (its ``NEG_KEYS``), skipping a missing
  one, and writes the i-th mean similarity to the column named after the i-th key
  (``sim_neg_same_neighborhood_diff_block``, ``sim_neg_same_city_diff_neighborhood``,
  ``sim_neg_same_driving_side_diff_city``, ``sim_neg_random_city``). So a block without a
  same-driving-side negative has its random-city similarity in the same-driving-side column. Each
  value is re-assigned here to the role of the negative it was computed against: the release's
  negatives of the block (``benchmark_v3.json``, which the evaluator read, else ``blocks.csv``),
  a negative counting when it names a block of that file, as in the evaluator. A row whose
  filled similarity columns do not match its block's negatives (more values than negatives) gets
  NaN for every negative's similarity, with an issue. A negative that the imported benchmark
  lacks (it pointed to a dropped block) keeps its published similarity, with an issue;
* ``local_margin`` and ``strongest_margin`` are derived from the re-assigned similarities
  (docs/benchmark.md section 5, Metrics); ``n_distinct`` and ``n_copied`` are not published and stay NaN;
* the chance columns (``n_candidates``, ``chance_retrieval_acc``, ``chance_mrr``) are not published but do not
  depend on any score: they are computed from the candidate set the release's evaluator ranked each block's
  panel against (the target and the negatives it scored, :meth:`PublishedScores._present_roles`; a block
  filling two roles is two candidates) with :func:`geofidelity_bench.metrics.retrieval_chance`
  (docs/benchmark.md section 5, Chance level of retrieval). Ties between the two candidates of one block do not
  move the target's rank, so the release's tie rule (section 12, item 3) gives the same chance level;
* ``unpromptable``: 1 for a generator row whose condition the imported benchmark cannot prompt for its block
  (:func:`geofidelity_bench.evaluation.unpromptable_panels`: e.g. L1 of a block without a neighborhood name),
  with an issue; every view lists such a row apart, never ranked (as ``evaluate --allow-unpromptable`` rows);
  0 otherwise.

Every NaN score has its reason in ``run.json["nan_reasons"]``. A value that is not a number or
lies outside its score's range is NaN with an issue naming the file, line and column; a row whose
number of fields differs from the header's is skipped (its values cannot be placed by position).
``summary_by_method_level.csv`` (and ``main_scores_by_model_prompt.csv`` when its columns are
recognized) is checked against the means of the raw rows, per (method, level) and column, to the
4 decimals it was rounded to; each disagreement is an issue. The stability files are recorded
(sha256, rows), not read.

Without ``raw_results.csv`` no published folder is written (an issue says so; not an error).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from ..benchmark import NEGATIVE_FIELDS, NEGATIVE_ROLES, Benchmark, is_safe_id
from ..images import content_sha256
from ..record_checks import ANCHOR_CONDITION, reserved_method_problem
from .files import _read_table, _Table
from .layout import (
    MAIN_SCORES_CSV,
    PUBLISHED_DIR,
    RAW_RESULTS_CSV,
    RELEASE_VERSION,
    STABILITY_DIR,
    SUMMARY_CSV,
)
from .names import map_level, map_model
from .parsers import _s
from .report import ReleaseImportError

#: The release's anchor methods -> this package's (condition ``anchor``).
RELEASE_ANCHORS: dict[str, str] = {
    "oracle_nn": "heldout_real",
    "random_same_country": "random_same_country",
    "random_global": "random_global",
}
#: The release's positional similarity columns, in position order (position i holds the i-th negative the
#: block has, in the order of NEGATIVE_ROLES); the spellings accepted for each.
POSITIONAL_SIM_COLUMNS: tuple[tuple[str, ...], ...] = (
    ("sim_neg_same_neighborhood_diff_block", "sim_same_neighborhood_diff_block"),
    ("sim_neg_same_city_diff_neighborhood", "sim_same_city_diff_neighborhood"),
    ("sim_neg_same_driving_side_diff_city", "sim_same_driving_side_diff_city"),
    ("sim_neg_random_city", "sim_random_city"),
)
#: Scores taken as published: our column -> the release's spellings.
SCORE_COLUMNS: dict[str, tuple[str, ...]] = {
    "cos_sim": ("cos_sim",),
    "mmd": ("mmd",),
    "dcsf": ("dcsf",),
    "diversity_gap": ("diversity_gap",),
    "gaas": ("gaas",),
    "retrieval_acc": ("retrieval_acc",),
    "mrr": ("mrr",),
    "sim_target": ("sim_same_block", "sim_same_block_diff_images", "sim_target"),
}
#: The largest image count a published row may hold (``n_gen``, ``n_ref``: images of one panel or one block's
#: references; the paper's are 4 to 40). A count that is not a whole number from 0 to this is an import issue
#: (``bad_value``, the file, line and column named) and the value is NaN: 1e300 is not a count of images.
MAX_COUNT = 10**6
COUNT_COLUMNS: dict[str, tuple[str, ...]] = {"n_generated": ("n_gen", "n_generated"),
                                              "n_reference": ("n_ref", "n_reference")}
_RAW_COLUMNS = {
    "required": {"method": ("method",), "level": ("level", "condition"), "block_id": ("block_id",)},
    "optional": {
        "city": ("city",), "country": ("country",),
        **COUNT_COLUMNS, **SCORE_COLUMNS,
        **{f"_pos{i}": spellings for i, spellings in enumerate(POSITIONAL_SIM_COLUMNS)},
    },
}
_SUMMARY_COLUMNS = {
    "required": {"method": ("method", "model"), "level": ("level", "prompt", "prompt_level", "condition")},
    "optional": {},
}
#: Rounding of the release's summaries (``.round(4)``): a summary agrees with the raw rows within this.
SUMMARY_TOLERANCE = 0.5e-4 + 1e-9
#: The encoder the paper used (docs/benchmark.md section 4, Embeddings), under this package's name for it.
PAPER_ENCODER = "dinov2-base"
PAPER_ENCODER_DIM = 768

#: The documented differences (docs/benchmark.md section 12, Differences from the paper's release code) that apply to the published numbers.
DOCUMENTED_DIFFERENCES: tuple[dict[str, str], ...] = (
    {"item": "12.1", "name": "anchors", "applies": (
        "the release's random_global draws from every block's references, the target block's and held-out photos "
        "included; its random_same_country draws held-out photos of the other blocks; its oracle_nn is the release's "
        "held-out split cycled to 4")},
    {"item": "12.2", "name": "positional similarity columns", "applies": (
        "the release writes the negatives' similarities by position; the import re-assigned each to its negative's "
        "role (module docstring of geofidelity_bench.release_import.published)")},
    {"item": "12.3", "name": "ties", "applies": (
        "the release's argsort does not count ties against the target, and a block filling two roles is two equal "
        "panels whose order argsort decides")},
    {"item": "12.4", "name": "anchor seeds", "applies": (
        "random.Random(sha256('0|{block_id}|{method}') first 8 bytes) over the release's reference paths in file "
        "order, sampled with rng.sample")},
    {"item": "12.5", "name": "held-out split", "applies": (
        "the release's split (its image paths in benchmark_v3.json order, shuffled with sha256('0|{block_id}')), "
        "not this package's; the imported benchmark is re-split, so a re-run scores other galleries")},
    {"item": "12 table", "name": "diversity_gap clipped", "applies": (
        "the published diversity_gap is max(0, Div(X_r) - Div(X_g)); this package's column is signed. Compare a "
        "re-run's diversity_gap as max(0, diversity_gap)")},
    {"item": "12 table", "name": "metric edge cases", "applies": (
        "all-zero embedding rows, near-duplicate rows in the MMD bandwidth and 1-image panels are scored as the "
        "release's code scores them")},
)


def read_published_tables(root: Path) -> dict[str, _Table]:
    """The published CSVs present in the release, read (and refused: not UTF-8, a missing required column, a field
    over the CSV limit) before the import writes anything. ``{}`` without ``raw_results.csv``."""
    if not (root / RAW_RESULTS_CSV).is_file():
        return {}
    tables = {RAW_RESULTS_CSV: _read_table(root, RAW_RESULTS_CSV, _RAW_COLUMNS["required"], _RAW_COLUMNS["optional"])}
    for rel in (SUMMARY_CSV, MAIN_SCORES_CSV):
        if (root / rel).is_file():
            try:
                tables[rel] = _read_table(root, rel, _SUMMARY_COLUMNS["required"], _SUMMARY_COLUMNS["optional"])
            except ReleaseImportError as err:  # a summary whose columns are not recognized is only not checked
                if "missing required column" not in str(err):
                    raise
                tables[rel] = _Table(rel, [], [], {"_unrecognized": str(err)})
    return tables


class _Value:
    """One cell read as a float: the value (NaN when missing or bad) and why it is NaN."""

    __slots__ = ("value", "reason")

    def __init__(self, value: float, reason: str | None):
        self.value, self.reason = value, reason


def _range_problem(column: str, value: float) -> str | None:
    from ..metrics.catalog import METRICS

    info = METRICS.get(column)
    if info is None or bool(info.in_range(value)):
        return None
    return f"{value!r} is outside {info.range}"


class PublishedScores:
    """Converts the tables of :func:`read_published_tables` for one import (see the module docstring)."""

    def __init__(self, importer, tables: Mapping[str, _Table], release_negatives: Mapping[str, Mapping[str, str | None]],
                 release_blocks: set[str]):
        self.imp = importer
        self.tables = tables
        self.release_negatives = release_negatives  # release block id -> {neg_field: release id}
        self.release_blocks = release_blocks  # the block ids the release's evaluator knew
        self.nan_reasons: list[dict[str, str]] = []

    # -- reading ---------------------------------------------------------------------------------
    def _cell(self, table: _Table, row, name: str, column: str, line: int, key: tuple[str, str, str]) -> _Value:
        col = table.columns.get(name)
        if col is None:
            return _Value(math.nan, f"not published: {table.file} has no {column} column")
        text = _s(row.get(col))
        if text is None:
            return _Value(math.nan, f"blank in the release's {table.file}")
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            why = f"{col}={text!r} is not a finite number"
        else:
            why = _range_problem(column, value)
            if why is None:
                return _Value(value, None)
            why = f"{col}={why}"
        self.imp.issue("bad_value", table.file, line, "set to NaN", f"{'/'.join(key)}: {why}", column=col, value=text)
        return _Value(math.nan, f"unreadable in the release's {table.file} ({why})")

    def _count(self, table: _Table, row, name: str, line: int, key) -> float:
        col = table.columns.get(name)
        text = _s(row.get(col)) if col else None
        if text is None:
            return math.nan
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and 0 <= value <= MAX_COUNT and value == int(value)):
            why = (f"is over {MAX_COUNT:,}, not an image count" if math.isfinite(value) and value > MAX_COUNT
                   else "is not a count (a whole number >= 0)")
            self.imp.issue("bad_value", table.file, line, "set to NaN",
                           f"{'/'.join(key)}: {col}={text!r} {why}", column=col, value=text)
            return math.nan
        return value

    def _present_roles(self, rid: str) -> list[str]:
        """The roles of the negatives the release's evaluator scored for block ``rid``, in its (positional) order."""
        negs = self.release_negatives.get(rid, {})
        return [role for role in NEGATIVE_ROLES
                if (nid := negs.get(NEGATIVE_FIELDS[role])) and nid in self.release_blocks]

    # -- converting ------------------------------------------------------------------------------
    def convert(self, bench: Benchmark):
        """The published rows as result rows (a DataFrame in ``RESULT_COLUMNS`` order, ``attrs["nan_reasons"]``),
        and what was converted (``counts``)."""
        import pandas as pd

        from ..evaluation import RESULT_COLUMNS

        table = self.tables[RAW_RESULTS_CSV]
        rows: dict[tuple[str, str, str], dict[str, Any]] = {}
        first_line: dict[tuple[str, str, str], int] = {}
        method_map: dict[str, str] = {}
        level_map: dict[str, str] = {}
        reassigned = 0
        for line, row in table.rows:
            method_raw, level_raw, rid = (_s(table.get(row, n)) for n in ("method", "level", "block_id"))
            vals = dict(method=method_raw, level=level_raw, block_id=rid)
            if line in table.ragged:
                self.imp.issue("bad_row", table.file, line, "skipped",
                               f"the row has {table.ragged[line]} fields, the header {len(table.header)}: its values "
                               "cannot be placed by position", **vals)
                continue
            if method_raw is None or level_raw is None or rid is None:
                self.imp.issue("bad_value", table.file, line, "skipped", "empty method, level or block_id", **vals)
                continue
            method, condition = self._method_condition(method_raw, level_raw, table.file, line, vals)
            if method is None:
                continue
            if rid not in self.imp.id_map:
                why = (f"block {rid!r} was dropped: {self.imp.dropped[rid]}" if rid in self.imp.dropped
                       else f"block {rid!r} is not in the imported benchmark")
                self.imp.issue("unknown_block", table.file, line, "skipped", why, **vals)
                continue
            block_id = self.imp.id_map[rid]
            key = (method, condition, block_id)
            if key in rows:
                self.imp.issue("duplicate", table.file, line, "skipped",
                               f"{'/'.join(key)} is already given by line {first_line[key]}", **vals)
                continue
            block = bench.block(block_id)
            out: dict[str, Any] = {"method": method, "condition": condition, "block_id": block_id,
                                   "city": block.city, "country": block.country, "stratum": block.stratum or "",
                                   "encoder": PAPER_ENCODER}
            for name in COUNT_COLUMNS:
                out[name] = self._count(table, row, name, line, key)
            for name in SCORE_COLUMNS:
                self._put(out, key, name, self._cell(table, row, name, name, line, key))
            reassigned += self._similarities(out, key, table, row, line, rid, block_id, bench)
            self._margins(out, key)
            out.update(self._chance(rid))
            rows[key] = out
            first_line[key] = line
            method_map[method_raw] = method
            level_map[level_raw] = condition
        frame = pd.DataFrame(sorted(rows.values(), key=lambda r: (r["method"], r["condition"], r["block_id"])),
                             columns=RESULT_COLUMNS)
        refused = self._unpromptable(frame, bench, table.file, first_line)
        frame["unpromptable"] = [1.0 if (c, b) in refused else 0.0 for c, b in zip(frame["condition"], frame["block_id"])]
        frame.attrs["nan_reasons"] = list(self.nan_reasons)
        counts = {
            "rows": len(frame),
            "release_rows": len(table.rows),
            "methods": sorted(set(frame["method"])),
            "conditions": sorted(set(frame["condition"])),
            "blocks": int(frame["block_id"].nunique()),
            "similarities_reassigned": reassigned,
            "unpromptable_rows": int(frame["unpromptable"].sum()),
            "method_map": dict(sorted(method_map.items())),
            "level_map": dict(sorted(level_map.items())),
        }
        return frame, counts

    def _method_condition(self, method_raw: str, level_raw: str, file: str, line: int, vals) -> tuple:
        anchor = RELEASE_ANCHORS.get(method_raw.strip().lower())
        if anchor is not None:
            return anchor, ANCHOR_CONDITION
        method = map_model(method_raw, self.imp.keep_model_names)
        if not is_safe_id(method):
            self.imp.issue("unsafe_model", file, line, "skipped",
                           f"method {method_raw!r} is not usable as a method name", **vals)
            return None, None
        problem = reserved_method_problem(method)
        if problem:
            self.imp.issue("reserved_model", file, line, "skipped", problem, **vals)
            return None, None
        condition = map_level(level_raw)
        if condition is None:
            self.imp.issue("unmapped_level", file, line, "skipped",
                           f"level {level_raw!r} has no equivalent among our conditions "
                           "(see LEVEL_ALIASES in geofidelity_bench.release_import)", **vals)
            return None, None
        return method, condition

    def _put(self, out: dict, key, column: str, cell: _Value) -> None:
        out[column] = cell.value
        if cell.reason:
            self._nan(key, column, cell.reason)

    def _nan(self, key, column: str, reason: str) -> None:
        method, condition, block_id = key
        self.nan_reasons.append({"column": column, "reason": reason, "method": method, "condition": condition,
                                 "block_id": block_id})

    def _similarities(self, out: dict, key, table: _Table, row, line: int, rid: str, block_id: str,
                      bench: Benchmark) -> int:
        """Re-assigns the positional similarity columns to their roles; returns how many values moved column."""
        roles = self._present_roles(rid)
        cells = [self._cell(table, row, f"_pos{i}", f"sim_{NEGATIVE_ROLES[i]}", line, key)
                 for i in range(len(POSITIONAL_SIM_COLUMNS))]
        filled = [i for i, c in enumerate(cells) if not math.isnan(c.value)]
        for role in NEGATIVE_ROLES:
            out[f"sim_{role}"] = math.nan
        if filled and max(filled) >= len(roles):
            names = [table.columns.get(f"_pos{i}") or POSITIONAL_SIM_COLUMNS[i][0] for i in filled]
            self.imp.issue("similarities_mismatch", table.file, line, "negative similarities set to NaN",
                           f"{'/'.join(key)}: {len(filled)} similarity column(s) filled ({', '.join(names)}) but the "
                           f"release's block {rid!r} has {len(roles)} negative(s) ({', '.join(roles) or 'none'}): the "
                           "values cannot be given their negatives", block_id=rid)
            for role in NEGATIVE_ROLES:
                self._nan(key, f"sim_{role}", "the release's positional similarity columns do not match the "
                                              "block's negatives (see import_report.json)")
            return 0
        ours = bench.negatives(block_id)
        moved = 0
        for position, role in enumerate(roles):
            cell = cells[position]
            out[f"sim_{role}"] = cell.value
            if cell.reason:
                self._nan(key, f"sim_{role}", cell.reason)
            elif position != NEGATIVE_ROLES.index(role):
                moved += 1
            if ours.get(role) is None and not math.isnan(cell.value):
                self.imp.issue("published_negative_not_imported", table.file, line, "kept",
                               f"{'/'.join(key)}: sim_{role} was computed against the release's block "
                               f"{self.release_negatives[rid][NEGATIVE_FIELDS[role]]!r}, which the imported benchmark "
                               "does not have as this block's negative", block_id=rid, role=role)
        for role in NEGATIVE_ROLES:
            if role not in roles:
                self._nan(key, f"sim_{role}", f"the block has no {role} negative in the release")
        return moved

    def _unpromptable(self, frame, bench: Benchmark, file: str, first_line) -> set[tuple[str, str]]:
        """The (condition, block) of published generator rows whose prompt the imported benchmark refuses
        (:func:`geofidelity_bench.evaluation.unpromptable_panels`, e.g. L1 of a block without a neighborhood):
        their rows are marked ``unpromptable`` (never ranked with promptable rows, in every view) and each is an
        issue naming the release's line."""
        from ..evaluation import unpromptable_panels

        records = unpromptable_panels(bench, zip(frame["method"], frame["condition"], frame["block_id"]))
        for rec in records:
            for method in rec["methods"]:
                self.imp.issue("published_unpromptable", file, first_line.get((method, rec["condition"], rec["block_id"])),
                               "kept, marked unpromptable (never ranked)",
                               f"{method}/{rec['condition']}/{rec['block_id']}: the imported benchmark has no "
                               f"{rec['condition']} prompt for the block ({rec['reason']})", method=method,
                               condition=rec["condition"], block_id=rec["block_id"])
        return {(rec["condition"], rec["block_id"]) for rec in records}

    def _chance(self, rid: str) -> dict[str, float]:
        """The chance levels of the release's retrieval of block ``rid`` (its target and the negatives its evaluator
        scored): what an image that carries no information about the place scores (docs/benchmark.md section 5)."""
        from ..metrics import retrieval_chance

        negs = self.release_negatives.get(rid, {})
        chance = retrieval_chance({"target": rid, **{role: negs.get(NEGATIVE_FIELDS[role])
                                                     for role in self._present_roles(rid)}})
        return {"n_candidates": float(chance.n_candidates), "chance_retrieval_acc": chance.accuracy,
                "chance_mrr": chance.mrr}

    def _margins(self, out: dict, key) -> None:
        """local_margin and strongest_margin from the re-assigned similarities (docs/benchmark.md section 5, Metrics)."""
        target = out["sim_target"]
        from ..metrics.retrieval import LOCAL_NEGATIVES

        local = [out[f"sim_{r}"] for r in LOCAL_NEGATIVES if not math.isnan(out[f"sim_{r}"])]
        every = [out[f"sim_{r}"] for r in NEGATIVE_ROLES if not math.isnan(out[f"sim_{r}"])]
        for column, values, missing in (("local_margin", local, "no same-city negative similarity"),
                                        ("strongest_margin", every, "no negative similarity")):
            if math.isnan(target):
                out[column] = math.nan
                self._nan(key, column, "derived from sim_target, which is NaN")
            elif not values:
                out[column] = math.nan
                self._nan(key, column, f"derived from the published similarities: {missing}")
            else:
                out[column] = target - max(values)

    # -- checking the summaries --------------------------------------------------------------------
    def check_summaries(self) -> dict[str, dict[str, Any]]:
        """Compares each published summary with the means of the raw rows; returns ``{file: check record}``."""
        raw = self.tables[RAW_RESULTS_CSV]
        sums: dict[tuple[str, str], dict[str, list[float]]] = {}
        numeric = [c for c in raw.header if c not in ("method", "level", "block_id")]
        for line, row in raw.rows:
            if line in raw.ragged:
                continue
            key = (_s(row.get(raw.columns["method"])) or "", _s(row.get(raw.columns["level"])) or "")
            group = sums.setdefault(key, {})
            for col in numeric:
                try:
                    value = float(_s(row.get(col)) or "nan")
                except ValueError:
                    continue
                if math.isfinite(value):
                    group.setdefault(col, []).append(value)
        means = {key: {c: sum(v) / len(v) for c, v in group.items() if v} for key, group in sums.items()}
        records = {}
        for rel in (SUMMARY_CSV, MAIN_SCORES_CSV):
            table = self.tables.get(rel)
            if table is None:
                continue
            if "_unrecognized" in table.columns:
                self.imp.issue("published_summary_not_checked", rel, None, "recorded, not checked",
                               f"its columns are not recognized ({table.columns['_unrecognized']})")
                records[rel] = {"checked": False, "disagreements": None}
                continue
            records[rel] = {"checked": True, "disagreements": self._check_summary(table, numeric, means)}
        return records

    def _check_summary(self, table: _Table, numeric: list[str], means) -> int:
        n = 0
        seen = set()
        lower = {h.lower(): h for h in table.header}
        for line, row in table.rows:
            key = (_s(table.get(row, "method")) or "", _s(table.get(row, "level")) or "")
            seen.add(key)
            if key not in means:
                n += 1
                self.imp.issue("published_summary_mismatch", table.file, line, "reported",
                               f"{key[0]}/{key[1]} has no row in {RAW_RESULTS_CSV}", method=key[0], level=key[1])
                continue
            for col in numeric:
                src = lower.get(col.lower())
                text = _s(row.get(src)) if src else None
                if text is None:
                    continue
                try:
                    published = float(text)
                except ValueError:
                    continue
                mean = means[key].get(col)
                if mean is None or not math.isfinite(published):
                    continue
                if abs(published - mean) > SUMMARY_TOLERANCE:
                    n += 1
                    self.imp.issue("published_summary_mismatch", table.file, line, "reported",
                                   f"{key[0]}/{key[1]} {col}: the summary says {published!r}, the mean of the raw rows "
                                   f"is {mean:.6f}", method=key[0], level=key[1], column=src)
        for key in sorted(set(means) - seen):
            n += 1
            self.imp.issue("published_summary_mismatch", table.file, None, "reported",
                           f"{key[0]}/{key[1]} has rows in {RAW_RESULTS_CSV} but none in the summary",
                           method=key[0], level=key[1])
        return n


def _file_records(root: Path, tables: Mapping[str, _Table], checks: Mapping[str, dict]) -> list[dict[str, Any]]:
    records = []
    roles = {RAW_RESULTS_CSV: "the scores (one row per method, level and block): converted",
             SUMMARY_CSV: "means per method and level: checked against the raw rows",
             MAIN_SCORES_CSV: "the paper's copy of the summary: checked against the raw rows"}
    for rel in (RAW_RESULTS_CSV, SUMMARY_CSV, MAIN_SCORES_CSV):
        path = root / rel
        if path.is_file():
            table = tables.get(rel)
            records.append({"path": rel, "sha256": content_sha256(path), "bytes": path.stat().st_size,
                            "rows": len(table.rows) if table is not None else None, "role": roles[rel],
                            **checks.get(rel, {})})
    stability = root / STABILITY_DIR
    if stability.is_dir():
        for path in sorted(stability.glob("*.csv")):
            if path.is_file() and not path.is_symlink():
                rel = path.relative_to(root).as_posix()
                with open(path, "rb") as fh:
                    n_lines = sum(1 for _ in fh)
                records.append({"path": rel, "sha256": content_sha256(path), "bytes": path.stat().st_size,
                                "rows": max(0, n_lines - 1), "role": "rank-stability analysis: recorded, not read"})
    return records


def write_published(importer, tables: Mapping[str, _Table], bench: Benchmark, bench_dir: Path, out: Path,
                    release_negatives, release_blocks: set[str], version: str | None) -> dict[str, Any]:
    """Converts and writes ``out/published/``; returns the counts for the import report."""
    from ..results import protocol_record, write_results
    from ..provenance import library_versions, utc_timestamp

    root = importer.root
    conv = PublishedScores(importer, tables, release_negatives, release_blocks)
    frame, counts = conv.convert(bench)
    checks = conv.check_summaries()
    files = _file_records(root, tables, checks)
    counts["files"] = {f["path"]: f["sha256"] for f in files}
    counts["summary_disagreements"] = {rel: c["disagreements"] for rel, c in checks.items()}
    if frame.empty:
        importer.issue("no_published_rows", RAW_RESULTS_CSV, None, "no published folder written",
                       "no row of the published scores could be converted (see the issues above)")
        counts["published_dir"] = None
        return counts
    folder = out / PUBLISHED_DIR
    info = {
        "command": "geofidelity-bench import-release (published scores, not recomputed)",
        "created_at": utc_timestamp(),
        "published": {
            "recomputed": False,
            "statement": ("these scores are the release's own, converted from its evaluation outputs; nothing was "
                          "embedded, segmented or scored by this package (only local_margin and strongest_margin are "
                          "derived from the published similarities)"),
            "release": {"dataset": "moss-vector-714/GeoFidelity-Bench", "version": version or RELEASE_VERSION,
                        "folder": str(root)},
            "scores_file": RAW_RESULTS_CSV,
            "files": files,
            "encoder": {"paper": "DINOv2 ViT-B/14 (torch.hub dinov2_vitb14), CLS token", "name": PAPER_ENCODER},
            "conversions": {
                "methods": {**RELEASE_ANCHORS, "generators": "MODEL_ALIASES (keep_model_names="
                                                            f"{bool(importer.keep_model_names)})"},
                "method_map": counts["method_map"],
                "level_map": counts["level_map"],
                "anchors": "release anchors are scored under its first level; here they are condition 'anchor'",
                "block_ids": "canonical_block_id (import_report.json block_id_map)",
                "similarities": ("positional sim_neg_* columns re-assigned to the roles of the release's negatives of "
                                 "each block"),
                "similarities_reassigned": counts["similarities_reassigned"],
                "diversity_gap": "as published: max(0, Div(X_r) - Div(X_g)) (clipped at 0 by the release)",
                "derived": ["local_margin", "strongest_margin"],
                "chance": ("n_candidates, chance_retrieval_acc and chance_mrr are computed here from the candidates the "
                           "release's evaluator ranked each block against (the target and the negatives it scored, "
                           "a block in two roles counting twice; metrics.retrieval_chance, docs/benchmark.md section "
                           "5): they depend on no score"),
                "unpromptable": ("1 where the imported benchmark has no prompt of the row's condition for its block "
                                 "(docs/benchmark.md section 2): such a row is listed apart, never ranked; 0 "
                                 "otherwise"),
                "not_published": ["n_distinct", "n_copied"],
            },
            "documented_differences": list(DOCUMENTED_DIFFERENCES),
        },
        "benchmark": {"name": bench.name, "source": str(bench_dir), "fingerprint": bench.fingerprint,
                      "n_blocks": len(bench.blocks), "n_references": len(bench.references),
                      "city_names": {str(key): str(getattr(city, "name", key))
                                     for key, city in sorted((getattr(bench, "cities", None) or {}).items())},
                      "rekeyed_images": []},
        "encoder": {"name": PAPER_ENCODER, "dim": PAPER_ENCODER_DIM, "config": None, "config_hash": None,
                    "as_published": "the paper's DINOv2 ViT-B/14 embeddings; not recomputed, so no config hash"},
        "gaas": {"segmenter": "mask2former-vistas", "config": None, "config_hash": None,
                 "as_published": "the release's GAAS (Mask2Former Swin-L Mapillary Vistas); not recomputed"},
        "anchors": {"methods": list(RELEASE_ANCHORS.values()), "panel_size": 4,
                    "seeds": "release: random.Random(sha256('0|{block_id}|{method}') first 8 bytes), rng.sample",
                    "release_names": dict(RELEASE_ANCHORS)},
        "protocol": {**protocol_record(), "version": f"release-{version or RELEASE_VERSION}",
                     "heldout_rule": "the release's: its image paths shuffled with sha256('0|{block_id}')",
                     "anchor_rule": "the release's (docs/benchmark.md section 12, items 1 and 4)"},
        "versions": library_versions(),
    }
    write_results(folder, frame, info)
    counts["published_dir"] = str(folder)
    return counts


__all__ = ["DOCUMENTED_DIFFERENCES", "MAX_COUNT", "POSITIONAL_SIM_COLUMNS", "RELEASE_ANCHORS", "PublishedScores",
           "read_published_tables", "write_published"]
