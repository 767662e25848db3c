"""Prompt conditions and same-city controls (docs/benchmark.md section 2, Prompts), byte for byte.

Donor selection for the controls: candidates exclude the block itself and blocks whose
street (or neighborhood) is unknown or equal to the target's. Candidates are ranked
same city and same stratum (0) < same city (1) < same stratum (2) < other (3). The first
search looks at same-city candidates only, with ``random.Random(f"{block_id}|street_same_city")``
(``neighborhood_same_city`` for neighborhoods); when no same-city donor exists, all blocks
are searched with the key ``street_global_fallback`` / ``neighborhood_global_fallback``.
Within a search the donor is drawn uniformly, with ``rng.choice``, from the best non-empty
rank, candidates sorted by block id. The donor block ids and the scope used
(``same_city`` or ``global_fallback``) are recorded on every :class:`Prompt`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Sequence

from .errors import GeoFidelityError
from .geo import coordinate_problem

if TYPE_CHECKING:
    from .benchmark import Benchmark, Block

SUFFIX = "Photorealistic, daytime, clear weather."
NEGATIVE_PROMPT = (
    "panorama, fisheye, black and white, illustration, painting, cartoon, 3d render, watermark, "
    "text overlay, blurry, low resolution, night, people close up, indoor"
)
BASE_CONDITIONS = ("L0", "L1", "L2", "GPS_ONLY")
CONTROL_CONDITIONS = ("C_WRONG_STREET", "C_SHUFFLED_NEIGHBORHOOD", "C_WRONG_STREET_NEIGHBORHOOD")
CONDITIONS = BASE_CONDITIONS + CONTROL_CONDITIONS
NAMED_CONDITIONS = ("L1", "L2") + CONTROL_CONDITIONS


class PromptError(GeoFidelityError, ValueError):
    """A prompt cannot be built; the message names the block and the missing field."""


@dataclass(frozen=True)
class Prompt:
    block_id: str
    condition: str
    text: str
    negative_prompt: str = NEGATIVE_PROMPT
    street_donor: str | None = None
    street_donor_scope: str | None = None
    neighborhood_donor: str | None = None
    neighborhood_donor_scope: str | None = None
    meta: dict = field(default_factory=dict, compare=False)


def _country_and_city(block: "Block", city_name: str | None) -> tuple[str, str]:
    return city_name or block.city_name, block.country


def text_l0(city: str, country: str) -> str:
    return (
        f"A street-level photograph taken in {city}, {country}. The image shows a typical street scene with "
        f"buildings, roads, and urban environment characteristic of this location. {SUFFIX}"
    )


def _gps(lat: float, lon: float) -> str:
    """``({lat:.4f}, {lon:.4f})``; a coordinate that is not finite or not on Earth is a PromptError, so that
    no prompt ever reads ``nan`` or ``inf``."""
    why = coordinate_problem(lat, lon)
    if why:
        raise PromptError(f"GPS coordinates ({lat!r}, {lon!r}) cannot go into a prompt: {why}")
    return f"({lat:.4f}, {lon:.4f})"


def text_l1(street: str, neighborhood: str, city: str, country: str, gps: tuple[float, float] | None = None) -> str:
    where = f"{city}, {country}"
    if gps is not None:
        where += f", near GPS coordinates {_gps(gps[0], gps[1])}"
    return (
        f"A street-level photograph taken on {street} in the {neighborhood} district of {where}. The image shows a "
        f"typical street scene with buildings, roads, and urban environment characteristic of this block. {SUFFIX}"
    )


def text_gps_only(lat: float, lon: float) -> str:
    return (
        f"A street-level photograph taken near GPS coordinates {_gps(lat, lon)}. The image shows a typical "
        f"street scene with buildings, roads, and urban environment. {SUFFIX}"
    )


def location_text(street: str, neighborhood: str, city: str, country: str) -> str:
    """The location-only text of the CLIP alignment analysis (docs/benchmark.md section 7, Statistics and analyses)."""
    return f"A photo of {street} in the {neighborhood} district of {city}, {country}."


def _require_names(block: "Block", condition: str) -> None:
    missing = [f for f in ("street_name", "neighborhood") if not getattr(block, f)]
    if missing:
        raise PromptError(
            f"block {block.block_id!r} has no {' and no '.join(missing)}; condition {condition} needs the real "
            "names and none will be invented (use L0 or GPS_ONLY for this block)"
        )


def _rank(target: "Block", cand: "Block") -> int:
    same_city = cand.city == target.city
    same_stratum = bool(target.stratum) and cand.stratum == target.stratum
    if same_city and same_stratum:
        return 0
    if same_city:
        return 1
    if same_stratum:
        return 2
    return 3


def select_donor(target: "Block", blocks: Sequence["Block"], attribute: str) -> tuple[str, str]:
    """Picks the donor block for a control (see the module docstring).

    Args:
        target: the block whose prompt is altered.
        blocks: every block of the benchmark.
        attribute: ``"street_name"`` or ``"neighborhood"``.

    Returns:
        ``(donor_block_id, scope)`` with scope ``"same_city"`` or ``"global_fallback"``.
    """
    if attribute not in ("street_name", "neighborhood"):
        raise ValueError(f"attribute must be 'street_name' or 'neighborhood', got {attribute!r}")
    stem = "street" if attribute == "street_name" else "neighborhood"
    own = getattr(target, attribute)
    candidates = sorted(
        (b for b in blocks if b.block_id != target.block_id and getattr(b, attribute) and getattr(b, attribute) != own),
        key=lambda b: b.block_id,
    )
    for scope in ("same_city", "global_fallback"):
        pool = [b for b in candidates if scope == "global_fallback" or b.city == target.city]
        if not pool:
            continue
        best = min(_rank(target, b) for b in pool)
        tier = [b for b in pool if _rank(target, b) == best]
        rng = random.Random(f"{target.block_id}|{stem}_{scope}")
        return rng.choice(tier).block_id, scope
    raise PromptError(
        f"block {target.block_id!r}: no other block has a known {attribute} different from {own!r}; "
        "control prompts need a donor"
    )


def build_prompt(benchmark: "Benchmark", block_id: str, condition: str) -> Prompt:
    """The prompt of ``condition`` for one block of ``benchmark``.

    Example:
        >>> from geofidelity_bench import load_benchmark
        >>> bench = load_benchmark("demo")
        >>> build_prompt(bench, bench.block_ids[0], "L0").text.endswith("clear weather.")
        True
    """
    if condition not in CONDITIONS:
        raise PromptError(f"unknown prompt condition {condition!r}; expected one of {CONDITIONS}")
    block = benchmark.block(block_id)
    city_key = block.city
    city_name = benchmark.cities[city_key].name if city_key in benchmark.cities else block.city_name
    city, country = _country_and_city(block, city_name)
    lat, lon = block.centroid
    if condition in ("L2", "GPS_ONLY") and coordinate_problem(lat, lon):
        raise PromptError(f"block {block_id!r}: no {condition} prompt, its centroid is not a point on Earth "
                          f"({coordinate_problem(lat, lon)})")
    if condition == "L0":
        return Prompt(block_id, condition, text_l0(city, country))
    if condition == "GPS_ONLY":
        return Prompt(block_id, condition, text_gps_only(lat, lon))
    _require_names(block, condition)
    street, neighborhood = block.street_name, block.neighborhood
    if condition == "L1":
        return Prompt(block_id, condition, text_l1(street, neighborhood, city, country))
    if condition == "L2":
        return Prompt(block_id, condition, text_l1(street, neighborhood, city, country, gps=(lat, lon)))
    kwargs: dict = {}
    if condition in ("C_WRONG_STREET", "C_WRONG_STREET_NEIGHBORHOOD"):
        donor, scope = select_donor(block, benchmark.blocks, "street_name")
        street = benchmark.block(donor).street_name
        kwargs.update(street_donor=donor, street_donor_scope=scope)
    if condition in ("C_SHUFFLED_NEIGHBORHOOD", "C_WRONG_STREET_NEIGHBORHOOD"):
        donor, scope = select_donor(block, benchmark.blocks, "neighborhood")
        neighborhood = benchmark.block(donor).neighborhood
        kwargs.update(neighborhood_donor=donor, neighborhood_donor_scope=scope)
    return Prompt(block_id, condition, text_l1(street, neighborhood, city, country), **kwargs)


def build_prompts(
    benchmark: "Benchmark", conditions: Iterable[str], block_ids: Iterable[str] | None = None
) -> list[Prompt]:
    """Prompts for every (condition, block); raises PromptError on the first impossible one."""
    ids = list(block_ids) if block_ids is not None else benchmark.block_ids
    return [build_prompt(benchmark, b, c) for c in conditions for b in ids]
