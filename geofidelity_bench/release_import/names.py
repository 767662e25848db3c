"""Release names -> this package's names: negative columns, prompt levels, models, driving sides, block ids, seeds."""

from __future__ import annotations

import hashlib
import re
import unicodedata

from ..benchmark import is_safe_id

#: Release ``neg_*`` column names (lower case) -> negative role of this package.
NEGATIVE_ALIASES: dict[str, str] = {
    "neg_same_neighborhood": "same_neighborhood",
    "neg_same_neighborhood_diff_block": "same_neighborhood",
    "neg_same_neighbourhood": "same_neighborhood",
    "neg_same_neighbourhood_diff_block": "same_neighborhood",
    "neg_same_hood": "same_neighborhood",
    "neg_near": "same_neighborhood",
    "neg_same_city": "same_city",
    "neg_same_city_diff_neighborhood": "same_city",
    "neg_same_city_diff_neighbourhood": "same_city",
    "neg_same_city_far": "same_city",
    "neg_far": "same_city",
    "neg_same_driving_side": "same_driving_side",
    "neg_same_driving_side_diff_city": "same_driving_side",
    "neg_driving_side": "same_driving_side",
    "neg_same_side": "same_driving_side",
    "neg_random_city": "random_city",
    "neg_random": "random_city",
    "neg_other_city": "random_city",
}

#: Release prompt level names (normalized: upper case, ``-``/space -> ``_``) -> our condition.
LEVEL_ALIASES: dict[str, str] = {
    "L0": "L0",
    "CITY": "L0",
    "CITY_ONLY": "L0",
    "L1": "L1",
    "NAMED": "L1",
    "NAMED_BLOCK": "L1",
    "L2": "L2",
    "L3": "L2",  # the released L2 images were generated while the level was named L3
    "L1_GPS": "L2",
    "NAMED_GPS": "L2",
    "GPS": "GPS_ONLY",
    "GPS_ONLY": "GPS_ONLY",
    "L_GPS": "GPS_ONLY",
    "C_WRONG_STREET": "C_WRONG_STREET",
    "WRONG_STREET": "C_WRONG_STREET",
    "C_SHUFFLED_NEIGHBORHOOD": "C_SHUFFLED_NEIGHBORHOOD",
    "C_SHUFFLED_NEIGHBOURHOOD": "C_SHUFFLED_NEIGHBORHOOD",
    "C_SHUFFLED_NBHD": "C_SHUFFLED_NEIGHBORHOOD",
    "C_SHUFFLED_HOOD": "C_SHUFFLED_NEIGHBORHOOD",
    "SHUFFLED_NEIGHBORHOOD": "C_SHUFFLED_NEIGHBORHOOD",
    "C_WRONG_NEIGHBORHOOD": "C_SHUFFLED_NEIGHBORHOOD",
    "C_WRONG_STREET_NEIGHBORHOOD": "C_WRONG_STREET_NEIGHBORHOOD",
    "C_WRONG_STREET_NEIGHBOURHOOD": "C_WRONG_STREET_NEIGHBORHOOD",
    "C_WRONG_STREET_NBHD": "C_WRONG_STREET_NEIGHBORHOOD",
    "C_WRONG_STREET_AND_NEIGHBORHOOD": "C_WRONG_STREET_NEIGHBORHOOD",
    "C_WRONG_BOTH": "C_WRONG_STREET_NEIGHBORHOOD",
    "WRONG_STREET_NEIGHBORHOOD": "C_WRONG_STREET_NEIGHBORHOOD",
}

#: Release model names (lower case) -> this package's generator keys.
MODEL_ALIASES: dict[str, str] = {
    "sdxl_base": "sdxl",
    "sdxl-base": "sdxl",
    "sd35-large": "sd35_large",
    "sd3.5_large": "sd35_large",
    "flux-dev": "flux_dev",
    "flux-schnell": "flux_schnell",
    "pixart-sigma": "pixart_sigma",
    "hunyuan-dit": "hunyuan_dit",
}

_DRIVING_SIDES = {"l": "L", "left": "L", "lht": "L", "r": "R", "right": "R", "rht": "R"}


def canonical_block_id(release_id: str) -> str:
    """``release_id`` when it is a safe path component, else an ASCII form + 8 hex of its sha256."""
    if is_safe_id(release_id):
        return release_id
    ascii_form = unicodedata.normalize("NFKD", release_id).encode("ascii", "ignore").decode("ascii")
    ascii_form = re.sub(r"[^A-Za-z0-9._-]+", "_", ascii_form)
    ascii_form = re.sub(r"_{3,}", "__", ascii_form).strip("._-")[:100].rstrip("._-")
    digest = hashlib.sha256(release_id.encode("utf-8")).hexdigest()[:8]
    return f"{ascii_form}-{digest}" if ascii_form else f"block-{digest}"


def _norm_level(level: str) -> str:
    return re.sub(r"[\s\-]+", "_", level.strip()).upper()


def map_level(level: str | None) -> str | None:
    """Our condition for a release level name, or None when there is none (see LEVEL_ALIASES)."""
    if level is None:
        return None
    return LEVEL_ALIASES.get(_norm_level(level))


def map_negative_column(column: str) -> str | None:
    """Our negative role (``same_neighborhood``, ...) for a release ``neg_*`` column, or None."""
    return NEGATIVE_ALIASES.get(column.strip().lower())


def map_model(model: str, keep_names: bool = False) -> str:
    return model if keep_names else MODEL_ALIASES.get(model.strip().lower(), model.strip())


def release_seed(model: str, block_id: str, level: str, k: int) -> int:
    """The release's per-image seed: sha256(f"{model}/{block_id}/{level}/{k}") -> 63 bits."""
    digest = hashlib.sha256(f"{model}/{block_id}/{level}/{k}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)
