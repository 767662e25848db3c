"""Retrieval negatives of every block (docs/benchmark.md section 8, Curation).

``near`` = other same-city blocks whose centroid is within 1,000 m (haversine);
``far`` = the other same-city blocks.

* ``neg_same_neighborhood``: a near block with the same neighborhood label (labels that are
  empty or ``downtown`` never match), else any near block, else a far block; which of the three
  it is goes into ``neg_same_neighborhood_kind`` (``same_neighborhood``, ``fallback_nearby``,
  ``fallback_far``), so a fallback is never mistaken for a block of the same neighborhood;
* ``neg_same_city``: a far block, else any other same-city block;
* ``neg_same_driving_side``: a block of another city with the same driving side;
* ``neg_random_city``: a block of any other city.

One ``random.Random(42)`` draws all choices, blocks visited in sorted id order, roles in the
order above, ``rng.choice`` over candidates sorted by block id; a role with no candidate is
None and draws nothing. Two roles may pick the same block (it then counts twice in retrieval).
"""

from __future__ import annotations

import dataclasses
import random
from typing import Sequence

from ..benchmark import Block
from ..geo import haversine_m

NEAR_M = 1_000.0
NEGATIVES_SEED = 42


def assign_negatives(blocks: Sequence[Block], *, seed: int = NEGATIVES_SEED, near_m: float = NEAR_M) -> list[Block]:
    """Returns copies of ``blocks`` (sorted by id) with the four negative fields and the kind of the
    same-neighborhood negative filled in."""
    ordered = sorted(blocks, key=lambda b: b.block_id)
    rng = random.Random(seed)
    out = []
    for block in ordered:
        same_city = [b for b in ordered if b.city == block.city and b.block_id != block.block_id]
        near = [b for b in same_city if haversine_m(*block.centroid, *b.centroid) <= near_m]
        far = [b for b in same_city if b not in near]
        label = (block.neighborhood or "").strip()
        same_label = [b for b in near if label and label.lower() != "downtown" and b.neighborhood == label]
        same_side = [b for b in ordered if b.city != block.city and b.driving_side == block.driving_side]
        other_city = [b for b in ordered if b.city != block.city]

        def pick(*pools: list[Block]) -> str | None:
            return pick_kind(*((pool, None) for pool in pools))[0]

        def pick_kind(*pools: tuple[list[Block], str | None]) -> tuple[str | None, str | None]:
            for pool, kind in pools:
                if pool:
                    return rng.choice(pool).block_id, kind
            return None, None

        same_neighborhood, kind = pick_kind((same_label, "same_neighborhood"), (near, "fallback_nearby"),
                                            (far, "fallback_far"))
        out.append(
            dataclasses.replace(
                block,
                neg_same_neighborhood=same_neighborhood,
                neg_same_neighborhood_kind=kind,
                neg_same_city=pick(far, same_city),
                neg_same_driving_side=pick(same_side),
                neg_random_city=pick(other_city),
            )
        )
    return out
