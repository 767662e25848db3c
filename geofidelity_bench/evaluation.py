"""Scores generated panels against their target blocks (docs/benchmark.md sections 5-7).

The flow is: collect every image that needs an embedding (target galleries, negatives'
galleries, the panels), embed each distinct image once through the embedding cache, then
score every (method, condition, block) panel from the embeddings. Scoring is pure numpy
(:func:`score_embeddings`), so a caller holding precomputed embeddings skips the encoder.

Result rows have exactly the columns of docs/benchmark.md section 7, Statistics and analyses (:data:`RESULT_COLUMNS`). Where a
score is NaN, the reason is recorded in ``df.attrs["nan_reasons"]`` (and in ``run.json`` by
the CLI), e.g. GAAS without a segmenter.
"""

from __future__ import annotations

import collections.abc
import io
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from . import metrics
from .benchmark import (MAX_PROBLEMS_LISTED, NEGATIVE_FIELDS, Benchmark, Block, PoolImage, ReferenceImage, is_safe_id,
                        item_name)
from .errors import GeoFidelityError
from .generated_folder import (
    PANEL_FILE,
    check_generation_manifest,
    did_you_mean,
    duplicate_index_problems,
    known_conditions,
    unknown_block_problem,
    unknown_condition_problem,
)
from .images import load_image
from .metrics.catalog import RESULT_METRIC_COLUMNS
from .record_checks import ANCHOR_CONDITION, ANCHOR_METHODS, reserved_method_problem

#: The retrieval candidates of a row and the chance level of its retrieval accuracy and MRR
#: (:func:`geofidelity_bench.metrics.retrieval_chance`; docs/benchmark.md section 5, Metrics).
CHANCE_COLUMNS = ("n_candidates", "chance_retrieval_acc", "chance_mrr")
#: The columns of ``results.csv``, in order: the panel's keys and sizes (``n_distinct``: distinct
#: images in the panel; ``n_copied``: images the copy audit flagged, NaN when not audited;
#: ``unpromptable``: 1 for a panel scored with ``allow_unpromptable`` although the benchmark refuses
#: its prompt for the block, 0 otherwise, NaN in a file written before the column existed), every
#: metric of the catalog (:data:`geofidelity_bench.metrics.catalog.RESULT_METRICS`), the chance
#: columns, then the encoder.
RESULT_COLUMNS = [
    "method",
    "condition",
    "block_id",
    "city",
    "country",
    "stratum",
    "n_generated",
    "n_reference",
    "n_distinct",
    "n_copied",
    "unpromptable",
    *RESULT_METRIC_COLUMNS,
    *CHANCE_COLUMNS,
    "encoder",
]
METRIC_COLUMNS = list(RESULT_METRIC_COLUMNS)
ANCHOR_PANEL_SIZE = 4
GAAS_UNAVAILABLE = (
    "GAAS needs a semantic segmenter (Mask2Former Swin-L Mapillary Vistas, "
    "facebook/mask2former-swin-large-mapillary-vistas-semantic); none was available, so the gaas column is NaN. "
    "Offline, pass a local copy of the weights with --segmenter-weights PATH (segmenter_weights= in Python)."
)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")

PanelKey = tuple  # (method, condition, block_id)


class EvaluationError(GeoFidelityError, ValueError):
    """Bad panels or generated folders; the message names every offending item."""


# -- anchors ------------------------------------------------------------------------------------


def _sample(pool: Sequence, n: int, seed: str) -> list:
    """``n`` distinct items drawn with ``random.Random(seed)`` (with replacement if the pool is smaller).

    ``random`` reads a sequence only through its length and indexing, so a :class:`_Without` view
    draws exactly what the list of its items would."""
    rng = random.Random(seed)
    pool = pool if isinstance(pool, _Without) else list(pool)
    if len(pool) >= n:
        return rng.sample(pool, n)
    return [rng.choice(pool) for _ in range(n)]


class _Without(collections.abc.Sequence):
    """``items`` without the items at the ascending positions ``skip``, as a sequence (nothing copied)."""

    def __init__(self, items: Sequence, skip: Sequence[int]) -> None:
        self.items, self.skip = items, skip

    def __len__(self) -> int:
        return len(self.items) - len(self.skip)

    def __getitem__(self, i: int):
        if not isinstance(i, int) or not 0 <= i < len(self):
            raise IndexError(i)
        for p in self.skip:  # the i-th kept item: step over every skipped position up to it
            if p > i:
                break
            i += 1
        return self.items[i]


def _sorted_with_positions(pairs: list[tuple[str, ReferenceImage]]) -> tuple[list[ReferenceImage], dict[str, list[int]]]:
    """(block_id, reference) pairs sorted by reference id (stable), and each block's positions in that order."""
    ordered = sorted(pairs, key=lambda pair: pair[1].reference_id)
    positions: dict[str, list[int]] = {}
    for pos, (bid, _) in enumerate(ordered):
        positions.setdefault(bid, []).append(pos)
    return [ref for _, ref in ordered], positions


def anchor_panels(benchmark: Benchmark, n: int = ANCHOR_PANEL_SIZE) -> dict[PanelKey, list[ReferenceImage]]:
    """The three real-image anchors of docs/benchmark.md section 6, Real-image anchors, keyed ``(method, "anchor", block_id)``.

    * ``heldout_real``: the block's held-out queries, cycled to fill ``n``.
    * ``random_same_country``: ``n`` images from the galleries of OTHER blocks in the same
      country (all other blocks when the country has no other block), drawn with
      ``random.Random(f"0|{block_id}|random_same_country")`` from the pool sorted by reference id.
    * ``random_global``: ``n`` images from the galleries of all OTHER blocks,
      ``random.Random(f"0|{block_id}|random_global")``.
    Draws are without replacement when the pool is large enough, else with replacement.
    """
    panels: dict[PanelKey, list[ReferenceImage]] = {}
    # Every pool is one of two sorted lists (all galleries; the country's galleries) without the
    # block's own photos: each list is sorted once and viewed without the block (not re-sorted per block).
    pairs = [(b.block_id, r) for b in benchmark.blocks for r in benchmark.gallery(b.block_id)]
    everything = _sorted_with_positions(pairs)
    country_of = {b.block_id: b.country for b in benchmark.blocks}
    countries = {c: _sorted_with_positions([p for p in pairs if country_of[p[0]] == c]) for c in set(country_of.values())}
    n_blocks = {c: sum(1 for b in benchmark.blocks if b.country == c) for c in countries}
    for block in benchmark.blocks:
        bid = block.block_id
        held = benchmark.heldout(bid)
        panels[("heldout_real", ANCHOR_CONDITION, bid)] = [held[i % len(held)] for i in range(n)]
        # the galleries of the other blocks of the same country (all other blocks when it has none)
        same_country = countries[block.country] if n_blocks[block.country] > 1 else everything
        for method, (ordered, positions) in (("random_same_country", same_country), ("random_global", everything)):
            pool = _Without(ordered, positions.get(bid, []))
            if not len(pool):
                continue
            panels[(method, ANCHOR_CONDITION, bid)] = _sample(pool, n, f"0|{bid}|{method}")
    return panels


# -- generated folders -----------------------------------------------------------------------------


def problems_text(head: str, problems: Sequence[str], hints: Sequence[str] = ()) -> str:
    """``head`` with the number of problems, the first :data:`MAX_PROBLEMS_LISTED` of them, how many
    more there are, and the hints (what to do) after them."""
    shown = "\n  ".join(problems[:MAX_PROBLEMS_LISTED])
    more = (f"\n  ... and {len(problems) - MAX_PROBLEMS_LISTED} more" if len(problems) > MAX_PROBLEMS_LISTED
            else "")
    tail = "".join(f"\n{h}" for h in dict.fromkeys(hints))
    return f"{head} has {len(problems)} problem(s):\n  {shown}{more}{tail}"


_MANIFEST_HINT = ("(to score these panels anyway, pass --ignore-manifest, ignore_manifest=True in Python; run.json "
                  "records it)")


def _scan_generated_folder(
    root: Path,
    benchmark: Benchmark,
    *,
    methods: Iterable[str] | None,
    conditions: Iterable[str] | None,
    min_images: int,
    extra_conditions: Iterable[str] | None,
    ignore_manifest: bool,
) -> tuple[dict[PanelKey, list[Path]], list[str], list[str]]:
    """The panels of ``root`` that passed every layout check, every layout and manifest problem, and hints."""
    if not root.is_dir():
        raise EvaluationError(f"generated folder {str(root)!r} does not exist or is not a folder")
    try:
        known = known_conditions(extra_conditions)
    except ValueError as err:
        raise EvaluationError(str(err)) from None
    want_m = list(methods) if methods else None
    want_c = list(conditions) if conditions else None
    problems: list[str] = []
    hints: list[str] = []
    panels: dict[PanelKey, list[Path]] = {}
    method_dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    found_m = {p.name for p in method_dirs}
    for m in want_m or []:
        if m not in found_m:
            problems.append(f"requested method {m!r} has no folder in {root}{did_you_mean(m, found_m)}")
    found_c: set[str] = set()
    for mdir in method_dirs:
        if want_m and mdir.name not in want_m:
            continue
        if not is_safe_id(mdir.name):
            problems.append(f"{mdir}: unsafe method folder name {mdir.name!r}")
            continue
        reserved = reserved_method_problem(mdir.name)
        if reserved:
            problems.append(f"{mdir}: {reserved}")
            continue
        for cdir in sorted(p for p in mdir.iterdir() if not p.name.startswith(".")):
            if not cdir.is_dir():
                problems.append(f"{cdir}: unexpected file where a condition folder was expected")
                continue
            if want_c and cdir.name not in want_c:
                continue
            found_c.add(cdir.name)
            if not is_safe_id(cdir.name):
                problems.append(f"{cdir}: unsafe condition folder name {cdir.name!r}")
                continue
            if cdir.name not in known:
                problems.append(unknown_condition_problem(cdir, known))
                continue
            for bdir in sorted(p for p in cdir.iterdir() if not p.name.startswith(".")):
                if not bdir.is_dir():
                    problems.append(f"{bdir}: unexpected file where a block folder was expected")
                    continue
                if bdir.name not in benchmark:
                    problems.append(unknown_block_problem(bdir, benchmark.block_ids, benchmark.name))
                    continue
                files = []
                for f in sorted(bdir.iterdir()):
                    if f.name.startswith("."):
                        continue
                    if not f.is_file() or not PANEL_FILE.match(f.name):
                        shown = f if f.name.isprintable() else f"{bdir}/{f.name!r}"
                        problems.append(f"{shown}: not a panel image (expected NN.jpg/.png/.webp, NN two or more "
                                        "ASCII digits)")
                        continue
                    files.append(f)
                duplicates = duplicate_index_problems(bdir, files)
                problems += duplicates
                if not files:
                    problems.append(f"{bdir}: empty panel (no images)")
                elif len(files) < min_images:
                    problems.append(f"{bdir}: {len(files)} image(s); a panel needs at least {min_images}")
                elif not duplicates:
                    panels[(mdir.name, cdir.name, bdir.name)] = files
    for c in want_c or []:
        if c not in found_c:
            problems.append(f"requested condition {c!r} has no folder under any method in {root}")
    if not ignore_manifest:  # the panels that passed the layout checks, whatever else is wrong
        manifest = check_generation_manifest(root, panels, benchmark_fingerprint=lambda: benchmark.fingerprint)
        problems += manifest.problems
        if manifest.problems:
            hints.append(_MANIFEST_HINT)
    return panels, problems, hints


def read_generated_folder(
    root: str | os.PathLike,
    benchmark: Benchmark,
    *,
    methods: Iterable[str] | None = None,
    conditions: Iterable[str] | None = None,
    min_images: int = 2,
    extra_conditions: Iterable[str] | None = None,
    ignore_manifest: bool = False,
) -> dict[PanelKey, list[Path]]:
    """Reads ``{method}/{condition}/{block_id}/{k:02d}.jpg`` panels under ``root``.

    Every problem (unknown block ids and conditions, with a did-you-mean; unsafe or reserved
    method names (:data:`~geofidelity_bench.record_checks.RESERVED_METHODS`: the anchors' and
    sanity methods' names); empty panels; files that are not panel images; two files with one
    index; panels with fewer than ``min_images``; with a generation ``manifest.parquet``, images it
    does not list, made with other settings or for another benchmark, see
    :func:`geofidelity_bench.generated_folder.check_generation_manifest`) is collected and
    reported in one EvaluationError (the first 50 and a count); nothing is skipped silently.
    ``methods``/``conditions`` restrict what is read (a requested one that is missing is an error
    too). Condition folders must be prompt conditions of the benchmark or declared in
    ``extra_conditions`` (the report shows those in a section of their own).
    ``ignore_manifest=True`` skips the manifest check (the caller records that).
    :func:`load_generated_panels` also decodes the images and checks the prompts, in the same error.
    """
    root = Path(root)
    panels, problems, hints = _scan_generated_folder(root, benchmark, methods=methods, conditions=conditions,
                                                     min_images=min_images, extra_conditions=extra_conditions,
                                                     ignore_manifest=ignore_manifest)
    if problems:
        raise EvaluationError(problems_text(f"generated folder {root}", problems, hints))
    if not panels:
        raise EvaluationError(f"generated folder {root} contains no panels ({{method}}/{{condition}}/{{block_id}}/NN.jpg)")
    return panels


@dataclass
class GeneratedPanels:
    """A generated folder that passed every cheap check (:func:`load_generated_panels`).

    ``panels``: the panels as read (paths); ``image_check``: their decoding check (with
    ``skip_bad_images``, the panels to score without their bad images);
    ``unpromptable``: the :func:`unpromptable_panels` records (only when they were allowed).
    """

    panels: dict
    image_check: Any
    unpromptable: list


def load_generated_panels(
    root: str | os.PathLike,
    benchmark: Benchmark,
    *,
    methods: Iterable[str] | None = None,
    conditions: Iterable[str] | None = None,
    extra_conditions: Iterable[str] | None = None,
    ignore_manifest: bool = False,
    skip_bad_images: bool = False,
    allow_unpromptable: bool = False,
    progress: bool = False,
) -> GeneratedPanels:
    """Every cheap check of a generated folder before any model is loaded, all problems in one error.

    What :func:`read_generated_folder` checks (layout, names, manifest), plus: every image file
    decodes (:func:`~geofidelity_bench.panel_images.check_panel_images`; with
    ``skip_bad_images``, bad ones are left out and recorded instead) and every panel of a prompt
    condition has a prompt (:func:`unpromptable_panels`, unless ``allow_unpromptable``). The images
    and prompts of the panels that passed the layout checks are checked even when other panels
    did not, so one run names every problem of every kind (the first 50 and a count).

    Raises:
        EvaluationError: any problem of the folder (listing them all).
        BadImagesError: undecodable images and no other problem (as :func:`check_panel_images`).
    """
    from .panel_images import SKIP_HINT, BadImagesError, bad_images_message, check_panel_images

    root = Path(root)
    panels, problems, hints = _scan_generated_folder(root, benchmark, methods=methods, conditions=conditions,
                                                     min_images=2, extra_conditions=extra_conditions,
                                                     ignore_manifest=ignore_manifest)
    unpromptable = unpromptable_panels(benchmark, panels)
    if unpromptable and not allow_unpromptable:
        lines = unpromptable_message(unpromptable).splitlines()  # a head, one line per panel, what to do
        problems += [f"no prompt could have produced panel {line.strip()}" for line in lines[1:-1]]
        hints.append(lines[-1])
    check = check_panel_images(panels, skip_bad_images=True, progress=progress)
    if check.skipped and not skip_bad_images:
        if not problems:
            raise BadImagesError(bad_images_message(check.skipped))
        problems += [r["reason"] for r in check.skipped]
        hints.append(f"Fix or remove the undecodable images, or {SKIP_HINT}.")
    if problems:
        raise EvaluationError(problems_text(f"generated folder {root}", problems, hints))
    if not panels:
        raise EvaluationError(f"generated folder {root} contains no panels ({{method}}/{{condition}}/{{block_id}}/NN.jpg)")
    return GeneratedPanels(panels, check, unpromptable)


# -- panel keys -----------------------------------------------------------------------------------


def check_panel_keys(benchmark: Benchmark, keys: Iterable[Any]) -> None:
    """Refuses panel keys that are not ``(method, condition, block_id)`` tuples of safe ids, and
    reserved method names under another condition than their own
    (:func:`~geofidelity_bench.record_checks.reserved_method_problem`).

    Names are single path components (letters, digits, ``.``, ``_``, ``-``; first a letter or
    digit; at most 128 characters), as in a generated folder, so no two keys can name the same
    panel however a front end joins them (``('m/x', 'L1', b)`` and ``('m', 'x/L1', b)`` would).
    Every bad name is listed in one EvaluationError.
    """
    problems = []
    for key in keys:
        if not (isinstance(key, tuple) and len(key) == 3):
            raise EvaluationError(f"panel key {key!r} must be a (method, condition, block_id) tuple")
        for part, value in zip(("method", "condition", "block_id"), key):
            if not is_safe_id(value):
                problems.append(f"panel {key!r}: {part} {value!r} is not a safe id")
        if is_safe_id(key[2]) and key[2] not in benchmark:
            problems.append(f"panel {key}: unknown block id {key[2]!r} (not in benchmark {benchmark.name!r})")
        reserved = reserved_method_problem(key[0], key[1]) if is_safe_id(key[0]) else None
        if reserved:
            problems.append(f"panel {key}: {reserved}")
    if problems:
        raise EvaluationError(
            f"{len(problems)} bad panel key(s):\n  " + "\n  ".join(problems[:MAX_PROBLEMS_LISTED])
            + (f"\n  ... and {len(problems) - MAX_PROBLEMS_LISTED} more" if len(problems) > MAX_PROBLEMS_LISTED else "")
            + f"\nmethod, condition and block_id must be safe ids: {SAFE_ID_RULE}"
        )


#: The rule of :func:`~geofidelity_bench.benchmark.is_safe_id`, in words.
SAFE_ID_RULE = ("1-128 characters from letters, digits, '.', '_' and '-', the first a letter or digit "
                "(one folder name: no '/', spaces or control characters)")


def unpromptable_panels(benchmark: Benchmark, keys: Iterable[PanelKey]) -> list[dict[str, Any]]:
    """The (condition, block) pairs of ``keys`` whose prompt the benchmark refuses, and why.

    Only prompt conditions of the benchmark (docs/benchmark.md section 2, Prompts) are checked:
    anchors, sanity methods and declared extra conditions have no benchmark prompt to check.
    E.g. ``L1`` needs the block's street and neighborhood names, which the benchmark may not
    know; no prompt could then have produced the panel. One record per (condition, block):
    ``condition``, ``block_id``, ``methods`` (sorted) and ``reason`` (the PromptError's message).
    """
    from .prompts import CONDITIONS, PromptError, build_prompt

    methods: dict[tuple[str, str], set[str]] = {}
    for method, condition, bid in keys:
        if condition in CONDITIONS and bid in benchmark:
            methods.setdefault((condition, bid), set()).add(method)
    out = []
    for condition, bid in sorted(methods):
        try:
            build_prompt(benchmark, bid, condition)
        except PromptError as err:
            out.append({"condition": condition, "block_id": bid, "methods": sorted(methods[(condition, bid)]),
                        "reason": str(err)})
    return out


def unpromptable_message(records: Sequence[Mapping[str, Any]]) -> str:
    """The error (or warning) text naming every refused (condition, block) and why."""
    lines = [f"{len(records)} (condition, block) panel(s) that no prompt of the benchmark could have produced:"]
    lines += [f"  {r['condition']}/{r['block_id']} (method {', '.join(r['methods'])}): {r['reason']}"
              for r in records]
    lines.append("Score only panels that have a prompt (`geofidelity-bench prompts` lists them; `generate` skips the "
                 "others), or pass --allow-unpromptable (allow_unpromptable=True in Python) to score them anyway "
                 "(run.json records it)")
    return "\n".join(lines)


# -- embedding ------------------------------------------------------------------------------------


def _label_text(label: Any) -> str:
    """A label of :func:`embed_items` in words: ``("panel", (m, c, b))`` -> ``panel m/c/b`` (display only)."""
    if isinstance(label, tuple) and len(label) == 2:
        kind, name = label
        return f"{kind} {'/'.join(map(str, name)) if isinstance(name, tuple) else name}"
    return str(label)


def _item_source_and_name(item: Any, label: Any, i: int) -> tuple[Any, str]:
    """What to embed for one panel or gallery item, and how to call it in errors."""
    name = item_name(item, f"{_label_text(label)} image {i}")
    if isinstance(item, (ReferenceImage, PoolImage)):
        return item.image_source, name  # read (and hashed) only when needed
    return item, name


def _flatten(items_by_label: Mapping[Any, Sequence[Any]]):
    """[(name, source)] over all labels, and each label's (start, stop) span in that list."""
    flat, spans = [], {}
    for label, items in items_by_label.items():
        start = len(flat)
        flat += [_item_source_and_name(item, label, i)[::-1] for i, item in enumerate(items)]
        spans[label] = (start, len(flat))
    return flat, spans


def embed_items(
    items_by_label: Mapping[Any, Sequence[Any]],
    encoder,
    *,
    cache=None,
    batch_size: int = 32,
    progress: bool = True,
    num_workers: int | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Embeds every item of every labelled list (identical images are computed once).

    Labels are any hashable values (:func:`evaluate_panels` uses tuples, never names joined into
    one string, so two panels can never share a label).

    Returns a mapping label -> (n, d) float32 array, and counts: ``total``, ``from_cache``,
    ``computed`` (per image), ``forward_images`` (images run through the model) and ``num_workers``
    (threads that decoded and preprocessed the images; it changes no number).
    """
    from .encoders import embed_named_images

    flat, spans = _flatten(items_by_label)
    _, emb, stats = embed_named_images(encoder, flat, cache=cache, batch_size=batch_size, progress=progress,
                                       num_workers=num_workers)
    counts = {"total": stats.total, "from_cache": stats.from_cache, "computed": stats.computed,
              "forward_images": stats.forward_images, "num_workers": stats.num_workers}
    return {label: emb[a:b] for label, (a, b) in spans.items()}, counts


def segment_items(
    items_by_label: Mapping[Any, Sequence[Any]],
    segmenter,
    *,
    cache=None,
    batch_size: int = 8,
    progress: bool = True,
    num_workers: int | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """GAAS-group shares (n, 8) of every item of every labelled list, through the cache."""
    from .segmentation import gaas_shares, segment_named_images

    flat, spans = _flatten(items_by_label)
    _, shares12, stats = segment_named_images(segmenter, flat, cache=cache, batch_size=batch_size, progress=progress,
                                              num_workers=num_workers)
    shares8 = gaas_shares(shares12) if len(flat) else np.zeros((0, 8))
    return {label: shares8[a:b] for label, (a, b) in spans.items()}, stats.as_dict()


# -- scoring ------------------------------------------------------------------------------------


def n_distinct_rows(embeddings: np.ndarray) -> int:
    """Distinct rows of a panel's embeddings (identical images give identical rows)."""
    emb = np.ascontiguousarray(embeddings)
    # the rows' bytes in a set: np.unique(axis=0) sorts a structured view, ~8 ms a panel on the hot path
    return len({row.tobytes() for row in emb}) if emb.ndim == 2 and emb.shape[0] else 0


def _item_sha256(item: Any) -> str | None:
    """sha256 of a panel item's encoded bytes, when it has bytes (a PIL image or an embedding has none)."""
    import hashlib

    if isinstance(item, (ReferenceImage, PoolImage)):
        return item.sha256
    if isinstance(item, (bytes, bytearray)):
        return hashlib.sha256(bytes(item)).hexdigest()
    if isinstance(item, (str, os.PathLike)) and os.path.isfile(item):
        h = hashlib.sha256()
        with open(item, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    return None


def panel_n_distinct(items: Sequence[Any] | None, embeddings: np.ndarray) -> int:
    """Distinct images of a panel: distinct sha256 of the items' bytes where every item has bytes,
    else distinct embedding rows (docs/benchmark.md section 7, ``n_distinct``)."""
    if items is not None and not isinstance(items, np.ndarray):
        digests = [_item_sha256(item) for item in items]
        if digests and all(d is not None for d in digests):
            return len(set(digests))
    return n_distinct_rows(embeddings)


def chance_columns(block: Block) -> dict[str, float]:
    """``n_candidates``, ``chance_retrieval_acc`` and ``chance_mrr`` of a block's retrieval candidates
    (:func:`geofidelity_bench.metrics.retrieval_chance`: a block filling two roles is two tied candidates)."""
    roles = {role: getattr(block, fld) for role, fld in NEGATIVE_FIELDS.items()}
    chance = metrics.retrieval_chance({"target": block.block_id, **roles})
    return {"n_candidates": chance.n_candidates, "chance_retrieval_acc": chance.accuracy, "chance_mrr": chance.mrr}


def _nan_row_reasons(key: PanelKey, reasons: list[dict], column: str, reason: str) -> None:
    reasons.append({"method": key[0], "condition": key[1], "block_id": key[2], "column": column, "reason": reason})


#: Blocks whose galleries :func:`score_embeddings` prepares together before scoring their panels
#: (memory holds about this many blocks' prepared galleries, with their negatives).
PREPARE_BLOCKS = 128


def score_embeddings(
    blocks: Iterable[Block],
    galleries: Mapping[str, np.ndarray],
    panels: Mapping[PanelKey, np.ndarray],
    *,
    encoder_name: str,
    shares: tuple[Mapping[PanelKey, np.ndarray], Mapping[str, np.ndarray]] | None = None,
    gaas_unavailable_reason: str = GAAS_UNAVAILABLE,
) -> pd.DataFrame:
    """Per-block result rows from embeddings (no images, no encoder).

    Args:
        blocks: the benchmark's blocks (targets and negatives).
        galleries: block_id -> raw gallery embeddings (m, d).
        panels: (method, condition, block_id) -> raw panel embeddings (n, d).
        encoder_name: written in the ``encoder`` column.
        shares: optional (panel shares, gallery shares) of the 8 GAAS groups; without it
            GAAS is NaN and ``gaas_unavailable_reason`` is recorded.

    Returns:
        A DataFrame with :data:`RESULT_COLUMNS`, sorted by method, condition, block_id;
        ``df.attrs["nan_reasons"]`` lists every NaN score with its reason.
    """
    by_id = {b.block_id: b for b in blocks}
    # Each gallery is prepared once, on first use (as a target or as a negative), and reused
    # by every panel that compares against it: validation, mean, panel vector, Div and its
    # own pairwise distances are computed a single time. Panels are scored block by block and
    # a prepared gallery is dropped after its last use, so memory holds the galleries still
    # needed, not all of them (a prepared gallery is several float64 copies of its rows).
    prepared: dict[str, metrics.PreparedReference] = {}
    uses: dict[str, int] = {}

    def negatives_of(block: Block) -> list[tuple[str, str]]:
        pairs = [(role, getattr(block, fld)) for role, fld in NEGATIVE_FIELDS.items()]
        return [(role, neg) for role, neg in pairs if neg is not None]

    def gallery(block_id: str, name: str) -> metrics.PreparedReference:
        ref = prepared.get(block_id)
        if ref is None:
            ref = prepared[block_id] = metrics.prepare_reference(np.asarray(galleries[block_id], dtype=np.float64),
                                                                 name=name)
        return ref

    def release(block_id: str) -> None:
        uses[block_id] -= 1
        if uses[block_id] == 0:
            prepared.pop(block_id, None)

    def score(key: PanelKey) -> tuple[dict, list[dict]]:
        """One panel's row and its NaN reasons."""
        method, condition, bid = key
        reasons: list[dict] = []
        if bid not in by_id:
            raise EvaluationError(f"panel {key}: unknown block id {bid!r}")
        block = by_id[bid]
        if bid not in galleries:
            raise EvaluationError(f"panel {key}: no gallery embeddings for block {bid!r}")
        gen = np.asarray(panels[key], dtype=np.float64)
        negatives = negatives_of(block)
        for role, neg in negatives:
            if neg not in galleries:
                raise EvaluationError(f"panel {key}: no gallery embeddings for negative block {neg!r} ({role})")
        try:
            target = gallery(bid, "ref")
            fidelity = metrics.set_fidelity(gen, target)
            mmd, mmd_reason = fidelity.mmd2, fidelity.mmd2_reason
            if mmd_reason is not None:  # a set under 2 rows: the diversity gap refuses it
                metrics.diversity_gap(gen, target)
            gap, dcsf = fidelity.diversity_gap, fidelity.dcsf
            candidates = {"target": target}
            for role, neg in negatives:
                candidates[role] = gallery(neg, f"candidates[{role!r}]")
            ret = metrics.retrieval(gen, candidates)
            cos = metrics.cos_sim(gen, target)
        except ValueError as err:
            raise EvaluationError(f"panel {method}/{condition}/{bid}: {err}") from err
        if mmd_reason is not None:
            _nan_row_reasons(key, reasons, "mmd", mmd_reason)
            _nan_row_reasons(key, reasons, "dcsf", mmd_reason)
        gaas = float("nan")
        if shares is not None and key in shares[0] and bid in shares[1]:
            gaas = metrics.gaas(shares[0][key], shares[1][bid])
        else:
            _nan_row_reasons(key, reasons, "gaas", gaas_unavailable_reason)
        for col, value in (("local_margin", ret.local_margin), ("strongest_margin", ret.strongest_margin)):
            if np.isnan(value):
                _nan_row_reasons(key, reasons, col, "no same-city negative" if col == "local_margin" else "no negative")
        for name in metrics.CANDIDATE_NAMES:  # a similarity to a negative the block does not have
            if np.isnan(ret.sims[name]):
                _nan_row_reasons(key, reasons, f"sim_{name}", f"the block has no {name} negative")
        row = {
            "method": method,
            "condition": condition,
            "block_id": bid,
            "city": block.city,
            "country": block.country,
            "stratum": block.stratum or "",
            "n_generated": int(gen.shape[0]),
            "n_reference": target.n_rows,
            "n_distinct": n_distinct_rows(gen),
            "n_copied": float("nan"),
            "unpromptable": 0.0,
            "cos_sim": cos,
            "mmd": mmd,
            "dcsf": dcsf,
            "diversity_gap": gap,
            "gaas": gaas,
            "retrieval_acc": ret.accuracy,
            "mrr": ret.mrr,
            **{f"sim_{name}": ret.sims[name] for name in metrics.CANDIDATE_NAMES},
            "local_margin": ret.local_margin,
            "strongest_margin": ret.strongest_margin,
            **chance_columns(block),
            "encoder": encoder_name,
        }
        return row, reasons

    ordered = sorted(panels)  # the rows' order: method, condition, block_id
    scored: dict[PanelKey, tuple[dict, list[dict]]] = {}
    by_block: dict[str, list[PanelKey]] = {}
    for key in sorted(ordered, key=lambda k: (k[2], k[0], k[1])):
        by_block.setdefault(key[2], []).append(key)

    def needed(key: PanelKey) -> set[str]:
        return {key[2], *(neg for _, neg in negatives_of(by_id[key[2]]))}

    for key in ordered:
        if key[2] in by_id:
            for used in needed(key):
                uses[used] = uses.get(used, 0) + 1
    block_ids = list(by_block)
    try:
        for start in range(0, len(block_ids), PREPARE_BLOCKS):
            group = [key for bid in block_ids[start : start + PREPARE_BLOCKS] for key in by_block[bid]]
            # The group's galleries are prepared together, ahead of its panels: the few large matrix
            # products stay in one burst (interleaved with the small per-panel ones, multithreaded BLAS
            # slows the whole loop down on a busy machine). A bad gallery is left for its panel to report.
            for used in sorted({g for key in group if key[2] in by_id for g in needed(key)}):
                if used in galleries and used not in prepared:
                    try:
                        gallery(used, "ref")
                    except Exception:  # noqa: BLE001 - raised again, naming the panel, when the panel uses it
                        pass
            for key in group:
                scored[key] = score(key)
                for used in needed(key):
                    release(used)
    except EvaluationError:
        # Report the bad panel that comes first in row order (the one a row-by-row pass stops at).
        prepared.clear()
        uses.clear()
        for key in ordered:
            score(key)
        raise
    rows = [scored[key][0] for key in ordered]
    reasons = [reason for key in ordered for reason in scored[key][1]]
    df = pd.DataFrame(rows, columns=RESULT_COLUMNS)
    df.attrs["nan_reasons"] = reasons
    return df


def evaluate_panels(
    benchmark: Benchmark,
    panels: Mapping[PanelKey, Any],
    encoder,
    *,
    cache=None,
    batch_size: int = 32,
    progress: bool = True,
    include_anchors: bool = False,
    segmenter=None,
    segment_batch_size: int = 8,
    num_workers: int | None = None,
    skip_bad_images: bool = False,
    image_check=None,
    allow_unpromptable: bool = False,
    exclude_copies: bool = False,
) -> pd.DataFrame:
    """Scores panels of images (or precomputed embeddings) against their target blocks.

    Args:
        benchmark: the benchmark (targets, galleries, negatives).
        panels: (method, condition, block_id) -> a sequence of images (PIL, paths, bytes,
            ReferenceImage) or an (n, d) float array of precomputed raw embeddings from
            ``encoder``.
        encoder: an Encoder (``geofidelity_bench.encoders.get_encoder``).
        cache: an EmbeddingCache, or None for no cache.
        include_anchors: also score the three real-image anchors.
        segmenter: a Segmenter (``geofidelity_bench.segmentation.get_segmenter``) for GAAS;
            without one the gaas column is NaN with the reason recorded. Panels given as
            embeddings have no images to segment: their GAAS is NaN too.
        num_workers: threads decoding and preprocessing images ahead of the encoder and the
            segmenter (default: the cores this process may use; 0: in the calling thread); it
            changes no number and is recorded in the stats.
        skip_bad_images: leave undecodable files out of their panels (recorded, with the reason,
            in ``df.attrs["skipped_images"]``; ``n_generated`` counts the images scored) instead
            of raising one error that lists them all; a panel left with fewer than 2 images gets
            a NaN row with the reason.
        image_check: the :func:`~geofidelity_bench.panel_images.check_panel_images` result of
            ``panels`` when the caller already ran it (the CLI does, before loading a model);
            its panels are the ones scored.
        allow_unpromptable: score panels of a prompt condition whose prompt the benchmark refuses
            for their block (:func:`unpromptable_panels`, e.g. ``L1`` for a block without a street
            name) instead of refusing them all in one EvaluationError; they are recorded in
            ``df.attrs["unpromptable_panels"]`` (and in run.json).
        exclude_copies: score every audited panel without its images that the copy audit flags
            (``n_generated`` counts the images scored, ``n_copied`` the flagged ones; a panel left
            with fewer than 2 images gets a NaN row with the reason); recorded in ``copy_audit``.

    Every panel whose condition is not ``"anchor"`` goes through the copy audit
    (docs/benchmark.md section 5, Copy audit; :mod:`geofidelity_bench.near_copies`): each image is
    compared with every photo of the benchmark (gallery and held-out photos of all blocks, and the
    world pool, embedded through ``cache`` like the galleries; their perceptual hashes are kept next
    to the embeddings). ``n_copied`` counts the flagged images of each audited panel (NaN for anchors).

    Returns:
        Result rows (:data:`RESULT_COLUMNS`); ``df.attrs`` holds ``nan_reasons``,
        ``embedding_stats``, ``skipped_images``, ``animated_images`` (files whose first frame was
        scored), ``copy_audit`` (:func:`~geofidelity_bench.near_copies.audit_summary`: settings and one
        record per audited image), ``near_copies`` (its flagged records) and, with a segmenter,
        ``segment_stats``.

    Raises:
        EvaluationError: a panel key that is not a ``(method, condition, block_id)`` tuple of safe
            ids (:func:`check_panel_keys`), an unknown block, or panels that no prompt of the
            benchmark could have produced (unless ``allow_unpromptable``).
        BadImagesError: images that cannot be decoded (all listed), unless ``skip_bad_images``.
    """
    from . import near_copies
    from .panel_images import check_panel_images

    panels = dict(panels)
    check_panel_keys(benchmark, panels)
    unpromptable = unpromptable_panels(benchmark, panels)
    if unpromptable and not allow_unpromptable:
        raise EvaluationError(unpromptable_message(unpromptable))
    if image_check is None:
        image_check = check_panel_images(panels, skip_bad_images=skip_bad_images, progress=progress)
    panels = dict(image_check.panels)
    if include_anchors:
        for key, value in anchor_panels(benchmark).items():
            panels.setdefault(key, value)
    if not panels and not image_check.too_small:
        raise EvaluationError("no panels to evaluate")
    needed = set()
    for _, _, bid in panels:
        needed.add(bid)
        needed.update(v for v in benchmark.negatives(bid).values() if v)
    # Labels are tuples, ("gallery", block_id) and ("panel", key): names are never joined into one string.
    to_embed: dict[tuple, Sequence[Any]] = {("gallery", b): benchmark.gallery(b) for b in sorted(needed)}
    precomputed: dict[PanelKey, np.ndarray] = {}
    for key, value in panels.items():
        if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.ndim == 2:
            if value.shape[1] != encoder.dim:
                raise EvaluationError(
                    f"panel {key}: precomputed embeddings have dimension {value.shape[1]}, but encoder "
                    f"{encoder.name!r} gives {encoder.dim}"
                )
            precomputed[key] = value
        else:
            items = list(value)
            if not items:
                raise EvaluationError(f"panel {key}: no images")
            to_embed[("panel", key)] = items
    to_embed[AUDIT_POOL_LABEL] = near_copies.pool_items(benchmark)  # the copy audit compares with every photo
    embedded, stats = embed_items(to_embed, encoder, cache=cache, batch_size=batch_size, progress=progress,
                                  num_workers=num_workers)
    galleries = {label[1]: emb for label, emb in embedded.items() if label[0] == "gallery"}
    panel_emb = dict(precomputed)
    for key in panels:
        if ("panel", key) in embedded:
            panel_emb[key] = embedded[("panel", key)]
    # the copy audit of every panel that is not an anchor (the anchors are the benchmark's own photos)
    hash_cache = near_copies.HashCache.beside(cache)
    pool = near_copies.reference_pool(benchmark, embedded[AUDIT_POOL_LABEL], hash_cache=hash_cache, progress=progress)
    audited = [key for key in panels if key[1] != ANCHOR_CONDITION and key in panel_emb]
    records = near_copies.audit_panels(pool, {k: panels[k] for k in audited}, {k: panel_emb[k] for k in audited},
                                       hash_cache=hash_cache, progress=progress)
    n_copied = near_copies.copied_counts(records)
    copies_left_too_few: dict[PanelKey, int] = {}
    scored_items = dict(panels)  # the items behind each scored panel (fewer with exclude_copies)
    if exclude_copies:
        flagged_at: dict[PanelKey, list[int]] = {}
        start = 0
        for key in audited:
            rows = records[start : start + len(panel_emb[key])]
            start += len(panel_emb[key])
            flagged_at[key] = [i for i, r in enumerate(rows) if r["flagged"]]
    shares, gaas_reason, segment_stats = None, GAAS_UNAVAILABLE, None
    if segmenter is not None:
        to_segment = {("gallery", bid): benchmark.gallery(bid) for bid in sorted({k[2] for k in panels})}
        to_segment.update({label: items for label, items in to_embed.items() if label[0] == "panel"})
        segmented, segment_stats = segment_items(to_segment, segmenter, cache=cache, batch_size=segment_batch_size,
                                                 progress=progress, num_workers=num_workers)
        shares = (
            {key: segmented[("panel", key)] for key in panels if ("panel", key) in segmented},
            {label[1]: v for label, v in segmented.items() if label[0] == "gallery"},
        )
        gaas_reason = "the panel was given as precomputed embeddings; GAAS needs its images"
    if exclude_copies:
        for key, drop in flagged_at.items():
            if not drop:
                continue
            keep = [i for i in range(len(panel_emb[key])) if i not in set(drop)]
            if len(keep) < 2:
                copies_left_too_few[key] = len(keep)
                panel_emb.pop(key)
                continue
            panel_emb[key] = np.asarray(panel_emb[key])[keep]
            if not isinstance(panels[key], np.ndarray):
                scored_items[key] = [list(panels[key])[i] for i in keep]
            if shares is not None and key in shares[0]:
                shares[0][key] = np.asarray(shares[0][key])[keep]
    df = score_embeddings(benchmark.blocks, galleries, panel_emb, encoder_name=encoder.name, shares=shares,
                          gaas_unavailable_reason=gaas_reason)
    if len(df):  # distinct images by their bytes where the panel's items have bytes (else embedding rows)
        df["n_distinct"] = [panel_n_distinct(scored_items.get(k), panel_emb[k])
                            for k in zip(df["method"], df["condition"], df["block_id"])]
    if image_check.too_small:
        df = _with_too_small_panels(df, benchmark, image_check.too_small, encoder.name)
    if copies_left_too_few:
        df = _with_too_small_panels(df, benchmark, copies_left_too_few, encoder.name, reason=_copies_left_too_few)
    if len(df):  # n_copied of every audited panel; NaN for the anchors (not audited)
        df["n_copied"] = [float(n_copied[k]) if k in n_copied else float("nan")
                          for k in zip(df["method"], df["condition"], df["block_id"])]
    df.attrs["embedding_stats"] = stats
    df.attrs["skipped_images"] = image_check.skipped
    df.attrs["animated_images"] = image_check.animated
    if len(df):  # a panel the benchmark refuses to prompt carries its mark in every view (never ranked)
        refused = {(m, r["condition"], r["block_id"]) for r in unpromptable for m in r["methods"]}
        df["unpromptable"] = [1.0 if k in refused else 0.0
                              for k in zip(df["method"], df["condition"], df["block_id"])]
    df.attrs["unpromptable_panels"] = {"allowed": bool(allow_unpromptable), "panels": unpromptable}
    df.attrs["copy_audit"] = near_copies.audit_summary(records, excluded=exclude_copies)
    df.attrs["near_copies"] = [r for r in records if r["flagged"]]
    if segment_stats is not None:
        df.attrs["segment_stats"] = segment_stats
    return df


#: run.json label of the photos the copy audit compares with (embedded with the galleries).
AUDIT_POOL_LABEL = ("audit", "benchmark photos")


def _copies_left_too_few(n_left: int) -> str:
    return (f"--exclude-copies left {n_left} image(s) after removing the images the copy audit flagged; "
            "a panel needs at least 2")


def _with_too_small_panels(df: pd.DataFrame, benchmark: Benchmark, too_small: Mapping[PanelKey, int],
                           encoder_name: str, reason=None) -> pd.DataFrame:
    """``df`` plus a NaN row (with its reasons) for every panel left under 2 images by skipped files
    (or by ``reason(n_left)``)."""
    from .panel_images import too_small_reason

    too_small_reason = reason or too_small_reason
    reasons = list(df.attrs.get("nan_reasons", []))
    rows = []
    for key, n_left in too_small.items():
        block = benchmark.block(key[2])
        rows.append({"method": key[0], "condition": key[1], "block_id": key[2], "city": block.city,
                     "country": block.country, "stratum": block.stratum or "", "n_generated": n_left,
                     "n_reference": len(benchmark.gallery(key[2])), "n_distinct": float("nan"),
                     "n_copied": float("nan"), "unpromptable": 0.0, **{c: float("nan") for c in METRIC_COLUMNS},
                     **chance_columns(block), "encoder": encoder_name})
        for column in METRIC_COLUMNS:
            _nan_row_reasons(key, reasons, column, too_small_reason(n_left))
    extra = pd.DataFrame(rows, columns=RESULT_COLUMNS)
    out = pd.concat([df, extra], ignore_index=True) if len(df) else extra
    out = out.sort_values(["method", "condition", "block_id"], kind="stable").reset_index(drop=True)
    out.attrs["nan_reasons"] = reasons
    return out


# -- summaries ------------------------------------------------------------------------------------

SUMMARY_GROUPS = {
    "by_method": ["method"],
    "by_method_condition": ["method", "condition"],
    "by_city_method": ["city", "method"],
    "by_condition": ["condition"],
}


def covered(results: pd.DataFrame) -> pd.Series:
    """Per row: whether it has a finite value in one of the leaderboard scores
    (:data:`~geofidelity_bench.metrics.catalog.LEADERBOARD_METRIC_COLUMNS`). A row whose every score
    is NaN covers no block: every view's "blocks" count is the blocks its rows cover."""
    from .metrics.catalog import LEADERBOARD_METRIC_COLUMNS

    cols = [c for c in LEADERBOARD_METRIC_COLUMNS if c in results.columns]
    if not cols or results.empty:
        return pd.Series(False, index=results.index)
    values = results[cols].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    return pd.Series(np.isfinite(values).any(axis=1), index=results.index)


def summarize(results: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Mean of every metric per group (NaN-skipping) with ``n_blocks`` per group and, where the rows
    carry them, the chance levels of retrieval accuracy and MRR averaged over the same rows as the
    retrieval mean (those with a finite retrieval accuracy; docs/benchmark.md section 5).

    ``n_blocks``: the distinct blocks of the group's rows that have a finite leaderboard score
    (:func:`covered`); a row whose every score is NaN (a panel left too small, a failed image) adds
    nothing to a mean, so it is not counted either (docs/benchmark.md section 7)."""
    results = results.copy(deep=False)
    results.attrs = {}  # the rows only: pandas deep-copies attrs into every derived frame
    grouped = results.groupby(list(by), sort=True, dropna=False)
    out = grouped[METRIC_COLUMNS].mean(numeric_only=True)
    blocks = results["block_id"].where(covered(results))
    out.insert(0, "n_blocks", blocks.groupby([results[c] for c in by], sort=True, dropna=False).nunique()
               .reindex(out.index).fillna(0).astype(int))
    chance = [c for c in CHANCE_COLUMNS[1:] if c in results.columns]
    if chance:
        finite = pd.to_numeric(results["retrieval_acc"], errors="coerce").notna()
        values = results[chance].apply(pd.to_numeric, errors="coerce").where(finite)
        out = out.join(values.groupby([results[c] for c in by], sort=True, dropna=False).mean())
    return out.reset_index()


def leaderboard_summary(results: pd.DataFrame, sort_by: str = "cos_sim") -> pd.DataFrame:
    """The leaderboard's rows, the same for the printed table, the app and the evaluate module: one row per
    (method, condition), with the panels scored with ``allow_unpromptable`` apart (docs/benchmark.md
    section 7, Statistics and analyses).

    Columns: those of :func:`summarize` (``n_blocks``: blocks with a finite score), ``unpromptable``
    (the row holds the unpromptable panels of its method and condition), ``n_copied_panels`` (panels
    the copy audit flagged, scored or not), ``n_repeating`` (panels with a score that repeat photos: k of
    ``n_blocks``) and ``ranked`` (neither copied
    nor unpromptable). Order: ranked rows best ``sort_by`` first (NaN last; ties by method, condition),
    then rows with copied panels, then unpromptable rows: neither is ever a model's ranked result.
    """
    from . import caveats
    from .metrics.catalog import HIGHER_IS_BETTER

    frame = results.copy(deep=False)
    frame.attrs = {}
    if sort_by not in frame.columns:
        raise ValueError(f"cannot sort the leaderboard by {sort_by!r}: the rows have no such column")
    for col in ("n_generated", "n_distinct", "n_copied"):
        if col not in frame.columns:
            frame[col] = float("nan")
    frame["unpromptable"] = caveats.unpromptable_mask(frame).to_numpy()
    frame["_copied"] = caveats.copied_mask(frame).to_numpy()
    # a repeating panel counts where it counts in the mean (k of the n_blocks with a score); a copied one always
    frame["_repeats"] = [caveats.repeats_photos(g, d) and ok
                         for g, d, ok in zip(frame["n_generated"], frame["n_distinct"], covered(frame))]
    keys = ["method", "condition", "unpromptable"]
    out = summarize(frame, keys)
    if out.empty:  # no rows: the columns all the same
        out = out.reindex(columns=[*keys, "n_blocks", *METRIC_COLUMNS,
                                   *(c for c in CHANCE_COLUMNS[1:] if c in frame.columns)])
    marks = frame.groupby(keys, sort=True, dropna=False)[["_copied", "_repeats"]].sum()
    out = out.merge(marks.rename(columns={"_copied": "n_copied_panels", "_repeats": "n_repeating"})
                    .astype(int).reset_index(), on=keys, how="left")
    out["ranked"] = (out["n_copied_panels"] == 0) & ~out["unpromptable"].astype(bool)
    ascending = not HIGHER_IS_BETTER.get(sort_by, True)
    out = out.assign(_tier=np.where(out["unpromptable"], 2, np.where(out["n_copied_panels"] > 0, 1, 0)))
    out = out.sort_values(["_tier", sort_by, "method", "condition"], ascending=[True, ascending, True, True],
                          na_position="last", kind="mergesort")
    return out.drop(columns="_tier").reset_index(drop=True)


def summaries(results: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The four summaries of docs/benchmark.md section 7, Statistics and analyses.

    Each groups by its columns and by ``unpromptable`` (0 or 1): panels scored with ``allow_unpromptable``
    are averaged apart from the promptable ones, as the printed leaderboard and every other view keeps them."""
    from .caveats import unpromptable_mask

    frame = results.copy(deep=False)
    frame.attrs = {}
    frame["unpromptable"] = unpromptable_mask(frame).astype(int).to_numpy()
    return {name: summarize(frame, [*by, "unpromptable"]) for name, by in SUMMARY_GROUPS.items()}


# -- demo sanity methods ------------------------------------------------------------------------------


def augmented(image_bytes: bytes, seed: str, name: str) -> bytes:
    """A lightly cropped (92-98 % of each side) and brightness/contrast-jittered (+-6 %) copy, seeded."""
    from PIL import ImageEnhance

    rng = random.Random(seed)
    img = load_image(image_bytes, name=name)
    w, h = img.size
    fw, fh = rng.uniform(0.92, 0.98), rng.uniform(0.92, 0.98)
    cw, ch = max(1, round(w * fw)), max(1, round(h * fh))
    x0, y0 = rng.randint(0, w - cw), rng.randint(0, h - ch)
    img = img.crop((x0, y0, x0 + cw, y0 + ch))
    img = ImageEnhance.Brightness(img).enhance(rng.uniform(0.94, 1.06))
    img = ImageEnhance.Contrast(img).enhance(rng.uniform(0.94, 1.06))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=92)
    return buf.getvalue()


def sanity_panels(benchmark: Benchmark, n: int = ANCHOR_PANEL_SIZE) -> dict[PanelKey, list[bytes]]:
    """Two clearly labelled sanity methods built from real photos (condition ``sanity``).

    * ``sanity_augmented_heldout``: the block's held-out photos, cycled to ``n`` and each
      lightly cropped and jittered (seed ``"0|{block_id}|sanity_augmented_heldout|{k}"``);
      expected near the top.
    * ``sanity_world``: ``n`` photos of the ``world`` pool (not of any block), drawn with
      ``random.Random(f"0|{block_id}|sanity_world")``; expected near the bottom.
    """
    panels: dict[PanelKey, list[bytes]] = {}
    world = sorted(benchmark.world, key=lambda w: w.image_id)
    for bid in benchmark.block_ids:
        held = benchmark.heldout(bid)
        panels[("sanity_augmented_heldout", "sanity", bid)] = [
            augmented(held[k % len(held)].image_bytes, f"0|{bid}|sanity_augmented_heldout|{k}", held[k % len(held)].reference_id)
            for k in range(n)
        ]
        if world:
            panels[("sanity_world", "sanity", bid)] = [w.image_bytes for w in _sample(world, n, f"0|{bid}|sanity_world")]
    return panels
