"""Scoring panels from embeddings (docs/benchmark.md sections 5-7): the result row's columns
(:data:`RESULT_COLUMNS`, :data:`METRIC_COLUMNS`, :data:`CHANCE_COLUMNS`) and
:func:`score_embeddings`, pure numpy on embeddings (and group shares for GAAS), so a caller holding
precomputed embeddings needs no encoder. Where a score is NaN, the reason is recorded in
``df.attrs["nan_reasons"]``. :mod:`geofidelity_bench.evaluation` embeds and segments through the
caches, then calls this; it re-exports every name here.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from . import metrics
from .benchmark import NEGATIVE_FIELDS, Block, PoolImage, ReferenceImage
from .metrics.catalog import RESULT_METRIC_COLUMNS
from .generated_panels import EvaluationError, PanelKey

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
GAAS_UNAVAILABLE = (
    "GAAS needs a semantic segmenter (Mask2Former Swin-L Mapillary Vistas, "
    "facebook/mask2former-swin-large-mapillary-vistas-semantic); none was available, so the gaas column is NaN. "
    "Offline, pass a local copy of the weights with --segmenter-weights PATH (segmenter_weights= in Python)."
)


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
