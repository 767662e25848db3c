"""Everything the app computes, without any UI: the benchmark, the encoder, the embeddings of every
gallery and the real-image anchors (computed once at startup), prompts, and scoring of uploads.

:class:`AppData` is built once per server; its methods only read it, so the web server's
worker threads can share one instance.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .. import metrics, near_copies
from ..benchmark import Benchmark
from ..evaluation import (
    ANCHOR_CONDITION,
    ANCHOR_METHODS,
    METRIC_COLUMNS,
    anchor_panels,
    embed_items,
    sanity_panels,
    score_embeddings,
)
from ..metrics.catalog import METRICS, SIMILARITY_COLUMNS
from ..prompts import CONDITIONS, NEGATIVE_PROMPT, Prompt, PromptError, build_prompt
from .results import annotate_results, block_candidates, candidate_chance, finite_or_none  # noqa: F401  (candidate_chance: the app's ui reads it here)
from .texts import SCORES, best_candidate_phrase, reading

UPLOAD_METHOD = "your_upload"
UPLOAD_CONDITION = "upload"
#: The fewest images scored as a panel: with fewer left once the copies are left out, nothing is scored.
MIN_SCORED = 2


def block_label(bench: Benchmark, block_id: str, short: bool = False) -> str:
    """``lund_seg1 — Lund, residential`` (street and neighborhood when known); ``short``: the id and the street
    only (``berlin_am_lustgarten — Am Lustgarten``), for a list of one city's blocks whose table says the rest."""
    block = bench.block(block_id)
    if short:
        return f"{block_id} — {block.street_name}" if block.street_name else block_id
    city = bench.cities[block.city].name if block.city in bench.cities else block.city_name
    where = ", ".join(x for x in (block.street_name, block.neighborhood, city, block.stratum) if x)
    return f"{block_id} — {where}"


def block_choices(bench: Benchmark, city: str | None = None) -> list[tuple[str, str]]:
    """(label, block_id) pairs for a dropdown, optionally only one city's blocks (labelled short: the city's own
    dropdown and the block's table say the rest, and a phone shows the chosen label whole)."""
    return [(block_label(bench, b.block_id, short=city is not None), b.block_id)
            for b in bench.blocks if city in (None, b.city)]


def city_choices(bench: Benchmark) -> list[tuple[str, str]]:
    out = []
    for key, city in bench.cities.items():
        n = sum(b.city == key for b in bench.blocks)
        if n:
            out.append((f"{city.name} ({city.country}, {n} block{'s' if n != 1 else ''})", key))
    return out


@dataclass(frozen=True)
class PromptView:
    condition: str
    text: str | None  # None when unavailable
    reason: str | None  # PromptError's message when unavailable
    prompt: Prompt | None = None

    @property
    def shown(self) -> str:
        return self.text if self.text is not None else f"not available: {self.reason}"


@dataclass
class PanelScore:
    """The scores of one uploaded panel, ready to show."""

    block_id: str
    names: list[str]  # the images scored (without the copies left out)
    row: dict[str, Any]  # one result row (RESULT_COLUMNS); every score NaN when withheld
    retrieval: metrics.RetrievalResult | None  # None when withheld
    candidates: dict[str, str]  # role -> block id ("target" -> the block itself)
    anchors: dict[str, dict[str, float]]  # anchor method -> its result row for this block
    nan_reasons: dict[str, str]
    #: uploaded images that copy a photo of the benchmark (the flagged records of ``copy_audit``)
    near_copies: list[dict[str, Any]] = field(default_factory=list)
    #: the copy audit of every uploaded image (:func:`~geofidelity_bench.near_copies.audit_panels`)
    copy_audit: list[dict[str, Any]] = field(default_factory=list)
    #: when the block is the only one of its country: what its random-same-country anchor is
    #: (:func:`geofidelity_bench.caveats.same_country_fallback_note`); None otherwise
    same_country_note: str | None = None
    #: the uploaded images the copy audit flags: left out of every score (``names`` are the images scored)
    copies_left_out: list[str] = field(default_factory=list)
    #: why nothing was scored (fewer than :data:`MIN_SCORED` images are left once the copies are left out);
    #: None when ``row`` holds the scores of ``names``
    withheld: str | None = None

    @property
    def n_uploaded(self) -> int:
        """The images uploaded: those scored and the copies left out."""
        return len(self.names) + len(self.copies_left_out)

    @property
    def scored(self) -> bool:
        return self.withheld is None

    @property
    def n_candidates(self) -> int:
        return len(self.candidates)

    @property
    def n_distinct_blocks(self) -> int:
        """Distinct blocks among the candidates (one negative block may fill two roles)."""
        return len(set(self.candidates.values()))

    @property
    def chance(self) -> tuple[float, float]:
        """(retrieval accuracy, MRR) of random images against this block's candidates (ties against the target)."""
        return candidate_chance(self.candidates)

    def readings(self) -> dict[str, str]:
        return {
            s.key: reading(s.key, self.row, n_images=len(self.names), n_candidates=self.n_candidates,
                           nan_reason=self.nan_reasons.get(s.key), n_distinct=self.n_distinct_blocks,
                           chance=self.chance)
            for s in SCORES
        }

    def per_image(self) -> list[dict[str, Any]]:
        """One dict per scored image: best candidate, target rank (1 = first) and similarities (none when
        nothing was scored)."""
        out = []
        if self.retrieval is None:
            return out
        sims = self.retrieval.per_image_sims
        for i, name in enumerate(self.names):
            best = self.retrieval.best_candidate[i]
            out.append({
                "image": name,
                "best_candidate": best,
                "best_block_id": self.candidates.get(best),
                "target_rank": int(self.retrieval.ranks[i]) + 1,
                "sims": {role: (None if np.isnan(v) else float(v))
                         for role, v in zip(metrics.CANDIDATE_NAMES, sims[i])},
            })
        return out

    def ranking_rows(self) -> list[list[Any]]:
        """Rows of the per-image ranking table (see :data:`RANKING_HEADERS`)."""
        rows = []
        for i, item in enumerate(self.per_image(), start=1):
            rows.append(
                [i, item["image"], best_candidate_phrase(item["best_candidate"], item["best_block_id"]),
                 f"{item['target_rank']} of {self.n_candidates}"]
                + [None if item["sims"][r] is None else round(item["sims"][r], 3) for r in metrics.CANDIDATE_NAMES]
            )
        return rows

    def as_json(self) -> dict[str, Any]:
        return {
            "block_id": self.block_id,
            "encoder": self.row["encoder"],
            "n_images": len(self.names),  # the images scored (copies left out)
            "n_uploaded": self.n_uploaded,
            "copies_left_out": list(self.copies_left_out),
            "withheld": self.withheld,
            "candidates": self.candidates,
            "scores": {s.key: finite_or_none(self.row.get(s.key)) for s in SCORES},
            "readings": self.readings(),
            "per_image": self.per_image(),
            "anchors": {m: {k: finite_or_none(v) for k, v in r.items()} for m, r in self.anchors.items()},
            "nan_reasons": self.nan_reasons,
            "copy_audit": self.copy_audit,
            "same_country_note": self.same_country_note,
        }


#: Per-image ranking columns; the similarity headers are the catalog's short labels.
RANKING_HEADERS = ["#", "image", "best match", "target rank"] + [
    f"sim {METRICS[column].short}" for column in SIMILARITY_COLUMNS
]


@dataclass
class AppData:
    """The app's data, computed once at startup.

    Attributes:
        benchmark: the loaded benchmark.
        encoder: the image encoder (``encoder.name`` is shown with every score).
        galleries: block id -> raw gallery embeddings (m, d).
        anchor_results: result rows of the three real-image anchors and the demo's sanity
            methods, scored at startup with ``encoder``.
        results: the leaderboard's default rows (``anchor_results`` unless a results.csv was given),
            with the chance and repeated-photo columns filled in where this benchmark knows them
            (:func:`~geofidelity_bench.demo_app.results.annotate_results`).
        results_source: where ``results`` came from, in words.
        run_info: the ``run.json`` of ``results`` (the app's own record for the startup scores; the
            file next to a given results.csv; None when there is none: its benchmark is unknown).
        own_info: what the app itself scores with (benchmark, encoder, protocol).
    """

    benchmark: Benchmark
    encoder: Any
    galleries: dict[str, np.ndarray]
    anchor_results: pd.DataFrame
    results: pd.DataFrame
    results_source: str
    run_info: dict | None = None
    own_info: dict = field(default_factory=dict)
    batch_size: int = 16
    num_workers: int | None = None  # image-preparing threads (None: the cores this process may use)
    #: every photo of the benchmark and the world pool, embedded and hashed, for the copy audit of uploads
    pool: Any = None

    # -- building -------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        benchmark: Benchmark,
        encoder,
        *,
        cache=None,
        results: pd.DataFrame | None = None,
        results_source: str | None = None,
        results_run_info: dict | None = None,
        batch_size: int = 16,
        progress: bool = False,
        log=None,
        num_workers: int | None = None,
    ) -> "AppData":
        """Embeds every gallery and every anchor/sanity panel (through ``cache``) and scores them."""
        log = log or (lambda msg: print(msg, file=sys.stderr))
        started = time.time()
        panels = {**anchor_panels(benchmark), **sanity_panels(benchmark)}
        to_embed = {("gallery", b): benchmark.gallery(b) for b in benchmark.block_ids}
        to_embed.update({("panel", k): v for k, v in panels.items()})
        to_embed[("audit", "pool")] = near_copies.pool_items(benchmark)  # the copy audit compares uploads with them
        log(f"geofidelity app: embedding the galleries and {len(panels)} anchor/sanity panels of "
            f"{benchmark.name!r} with {encoder.name} ...")
        embedded, stats = embed_items(to_embed, encoder, cache=cache, batch_size=batch_size, progress=progress,
                                      num_workers=num_workers)
        galleries = {b: embedded[("gallery", b)] for b in benchmark.block_ids}
        panel_emb = {k: embedded[("panel", k)] for k in panels}
        anchor_results = score_embeddings(benchmark.blocks, galleries, panel_emb, encoder_name=encoder.name)
        hash_cache = near_copies.HashCache.beside(cache)
        pool = near_copies.reference_pool(benchmark, embedded[("audit", "pool")], hash_cache=hash_cache)
        # the sanity methods go through the copy audit like any submission (as in `evaluate`), so the
        # leaderboard marks them copied; the anchors are the benchmark's own photos and are not audited
        audited = [k for k in panels if k[1] != ANCHOR_CONDITION]
        copied = near_copies.copied_counts(near_copies.audit_panels(
            pool, {k: panels[k] for k in audited}, {k: panel_emb[k] for k in audited}, hash_cache=hash_cache))
        anchor_results["n_copied"] = [float(copied[k]) if k in copied else float("nan") for k in
                                      zip(anchor_results["method"], anchor_results["condition"],
                                          anchor_results["block_id"])]
        log(f"geofidelity app: ready in {time.time() - started:.1f} s ({stats['from_cache']} embeddings from cache, "
            f"{stats['computed']} computed)")
        from ..comparability import comparability_of_run
        from ..results import protocol_record

        own_info = {
            "benchmark": {"name": benchmark.name, "source": benchmark.source, "fingerprint": benchmark.fingerprint,
                          # city names for the plots (as evaluate's run.json records them)
                          "city_names": {str(k): str(c.name) for k, c in benchmark.cities.items()}},
            "encoder": {"name": encoder.name, "dim": encoder.dim, "config_hash": getattr(encoder, "config_hash", None)},
            "protocol": protocol_record(),
        }
        if results is None:
            results, results_run_info, results_source = anchor_results, own_info, (
                f"real-image anchors and sanity methods of benchmark `{benchmark.name}`, scored at startup with "
                f"`{encoder.name}`")
        # Chance levels and held-out photo counts come from this benchmark only for results of this benchmark.
        same = results_run_info is not None and (
            comparability_of_run(results_run_info).benchmark_fingerprint == benchmark.fingerprint)
        results = annotate_results(results, benchmark if same else None)
        return cls(benchmark=benchmark, encoder=encoder, galleries=galleries,
                   anchor_results=annotate_results(anchor_results, benchmark), results=results,
                   results_source=results_source or "a results table", run_info=results_run_info, own_info=own_info,
                   batch_size=batch_size, num_workers=num_workers, pool=pool)

    # -- explore --------------------------------------------------------------------------
    def prompts(self, block_id: str) -> list[PromptView]:
        """The prompt of every condition, or why it cannot be built (PromptError's message)."""
        self.benchmark.block(block_id)
        out = []
        for condition in CONDITIONS:
            try:
                p = build_prompt(self.benchmark, block_id, condition)
            except PromptError as err:
                out.append(PromptView(condition, None, str(err)))
            else:
                out.append(PromptView(condition, p.text, None, p))
        return out

    @property
    def negative_prompt(self) -> str:
        return NEGATIVE_PROMPT

    def block_chance(self, block_id: str) -> tuple[dict[str, str], float, float]:
        """A block's retrieval line-up and the chance (accuracy, MRR) of random images against it."""
        candidates = block_candidates(self.benchmark, block_id)
        return (candidates, *candidate_chance(candidates))

    def thin_anchor_blocks(self) -> list[str]:
        """The blocks whose held-out anchor panel repeats photos (sorted)."""
        from ..caveats import thin_anchor_blocks

        return thin_anchor_blocks(self.anchor_results)

    def same_country_fallback_blocks(self) -> list[str]:
        """The blocks that are the only one of their country: their random-same-country anchor draws from all
        other blocks (:func:`geofidelity_bench.caveats.same_country_fallback_blocks` on the startup anchors)."""
        from ..caveats import same_country_fallback_blocks

        return same_country_fallback_blocks(self.anchor_results)

    def same_country_note(self, block_id: str) -> str | None:
        """What the block's random-same-country anchor is when it falls back to all other blocks, else None."""
        from ..caveats import same_country_fallback_note

        blocks = self.same_country_fallback_blocks()
        return same_country_fallback_note(blocks, len(self.benchmark.blocks)) if block_id in blocks else None

    def anchors_of(self, block_id: str) -> dict[str, dict[str, float]]:
        """Anchor method -> its result row (metric columns) for ``block_id``."""
        df = self.anchor_results
        sub = df[(df["block_id"] == block_id) & (df["condition"] == ANCHOR_CONDITION)]
        out = {}
        for method in ANCHOR_METHODS:
            rows = sub[sub["method"] == method]
            if len(rows):
                out[method] = {c: float(rows.iloc[0][c]) for c in METRIC_COLUMNS}
        return out

    # -- scoring --------------------------------------------------------------------------
    def score(self, block_id: str, images: Sequence[Any], names: Sequence[str] | None = None, *,
              exclude_copies: bool = True) -> PanelScore:
        """Scores a panel of generated images against ``block_id``, without the images that copy a photo of
        the benchmark.

        Every image goes through the copy audit first (:func:`geofidelity_bench.near_copies.audit_panels`):
        a copy scores like the benchmark's own photos, so its numbers would measure the benchmark, not a
        model. The copies are left out of every score (as ``evaluate --exclude-copies`` does) and named in
        ``copies_left_out``; the others are scored when at least :data:`MIN_SCORED` remain, else nothing is
        (``withheld`` says why, every score is NaN). ``exclude_copies=False`` scores every image (the copies
        still flagged in ``near_copies``): for checking the scoring itself on the benchmark's own photos, never
        what the app shows a visitor.

        Uploaded images are embedded without the embedding cache: nothing a visitor sends is
        stored.
        """
        from ..encoders import embed_images

        self.benchmark.block(block_id)  # BenchmarkError for an unknown block
        names = list(names) if names is not None else [f"image {i + 1}" for i in range(len(images))]
        if len(images) < 2:
            raise ValueError("a panel needs at least 2 images")
        gen = embed_images(self.encoder, list(images), names=names, cache=None, batch_size=self.batch_size,
                           progress=False, num_workers=self.num_workers)
        key = (UPLOAD_METHOD, UPLOAD_CONDITION, block_id)
        # the copy audit: every upload against every photo of the benchmark (uploads are hashed, never cached)
        audit = (near_copies.audit_panels(self.pool, {key: list(images)}, {key: gen}, names={key: names},
                                          num_workers=self.num_workers) if self.pool is not None else [])
        flagged = [bool(r["flagged"]) for r in audit] if audit else [False] * len(names)
        keep = [i for i, f in enumerate(flagged) if not (f and exclude_copies)]
        left_out = [n for n, f in zip(names, flagged) if f and exclude_copies]
        candidates = block_candidates(self.benchmark, block_id)
        common = dict(block_id=block_id, candidates=candidates, anchors=self.anchors_of(block_id),
                      near_copies=[r for r in audit if r["flagged"]], copy_audit=audit,
                      same_country_note=self.same_country_note(block_id), copies_left_out=left_out)
        n_copied = float(sum(flagged)) if self.pool is not None else float("nan")
        if len(keep) < MIN_SCORED:
            why = (f"{len(left_out)} of the {len(names)} uploaded images copy photos of this benchmark, which "
                   f"leaves {len(keep)} to score; a panel needs at least {MIN_SCORED} images that are not copies")
            row = {"method": UPLOAD_METHOD, "condition": UPLOAD_CONDITION, "block_id": block_id,
                   "encoder": self.encoder.name, **{c: float("nan") for c in METRIC_COLUMNS},
                   "n_generated": float(len(keep)), "n_copied": n_copied}
            return PanelScore(names=[names[i] for i in keep], row=row, retrieval=None,
                              nan_reasons={c: why for c in METRIC_COLUMNS}, withheld=why, **common)
        gen = np.asarray(gen)[keep]
        names = [names[i] for i in keep]
        df = score_embeddings(self.benchmark.blocks, self.galleries, {key: gen}, encoder_name=self.encoder.name)
        row = df.iloc[0].to_dict()
        ret = metrics.retrieval(gen, {role: self.galleries[bid] for role, bid in candidates.items()})
        reasons = {}
        for r in df.attrs.get("nan_reasons", []):
            reasons.setdefault(r["column"], r["reason"])
        if "gaas" in reasons:
            reasons["gaas"] = ("GAAS needs a semantic segmenter (Mask2Former trained on Mapillary Vistas); "
                               "this app scores without one")
        row["n_copied"] = n_copied
        return PanelScore(names=names, row=row, retrieval=ret, nan_reasons=reasons, **common)

    def photo(self, photo_id: str):
        """The benchmark photo (a reference or a world-pool photo) with this id, for showing a matched copy."""
        for item in near_copies.pool_items(self.benchmark):
            if getattr(item, "reference_id", None) == photo_id or (
                    not hasattr(item, "reference_id") and item.image_id == photo_id):
                return item
        raise KeyError(photo_id)


def load_app_data(
    benchmark: str = "demo",
    encoder: str = "efficientnet-lite0",
    *,
    encoder_weights: str | None = None,
    revision: str | None = None,
    device: str | None = None,
    dtype: str = "float32",
    cache_dir: str | None = None,
    use_cache: bool = True,
    results_csv: str | None = None,
    batch_size: int = 16,
    progress: bool = False,
    num_workers: int | None = None,
) -> AppData:
    """Loads the benchmark and the encoder and builds :class:`AppData`.

    Offline this works with the defaults (the embedded demo benchmark and the offline encoder);
    with network and weights, e.g. ``benchmark="user/geofidelity-bench", encoder="dinov2-base"``.
    ``results_csv`` (a results.csv written by ``geofidelity-bench evaluate``) replaces the
    leaderboard's default rows; the ``run.json`` next to it says which benchmark, encoder and
    protocol produced them (without one they are unknown, never assumed to be this app's).
    """
    from ..benchmark import load_benchmark
    from ..encoders import EmbeddingCache, get_encoder
    from ..results import read_results_csv
    from .results import ResultsError, check_results

    bench = load_benchmark(benchmark, revision=revision)
    results = source = results_info = None
    if results_csv is not None:
        try:
            results = check_results(read_results_csv(results_csv), str(results_csv))
        except FileNotFoundError:
            raise ResultsError(f"results file {results_csv!r} does not exist") from None
        source = f"`{results_csv}`"
        results_info = results_run_info(results_csv)
    enc = get_encoder(encoder, weights=encoder_weights, device=device, dtype=dtype)
    cache = EmbeddingCache(cache_dir) if use_cache else None
    return AppData.build(bench, enc, cache=cache, results=results, results_source=source,
                         results_run_info=results_info, batch_size=batch_size, progress=progress,
                         num_workers=num_workers)


def results_run_info(results_csv) -> dict | None:
    """The ``run.json`` next to a results.csv (None when there is none).

    Raises:
        ResultsError: the file exists but is not a JSON object.
    """
    import json
    from pathlib import Path

    from ..results import RUN_FILE
    from .results import ResultsError

    path = Path(results_csv).parent / RUN_FILE
    if not path.is_file():
        return None
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ResultsError(f"{path} (the run record next to {results_csv}) cannot be read: {err}") from None
    if not isinstance(info, dict):
        raise ResultsError(f"{path} (the run record next to {results_csv}) is not a JSON object")
    return info


__all__ = ["AppData", "PanelScore", "PromptView", "RANKING_HEADERS", "block_choices", "block_label",
           "city_choices", "load_app_data"]
