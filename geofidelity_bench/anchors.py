"""Panels made of the benchmark's own photos, scored like a generator's (docs/benchmark.md section 5,
Metrics and section 7): the real-image anchors (:func:`anchor_panels`: held-out photos of the
block, of its negatives and of the world pool, methods :data:`ANCHOR_METHODS`, condition
``anchor``) and the demo's two sanity methods (:func:`sanity_panels`, condition ``sanity``).
Seeded and deterministic; :mod:`geofidelity_bench.evaluation` re-exports every name here.
"""

from __future__ import annotations

import collections.abc
import io
import random
from typing import Sequence


from .benchmark import Benchmark, ReferenceImage
from .images import load_image
from .record_checks import ANCHOR_CONDITION
from .generated_panels import PanelKey

ANCHOR_PANEL_SIZE = 4


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
