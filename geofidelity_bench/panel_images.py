"""Checking the image files of generated panels before any model work.

Every encoded image of every panel (paths and bytes; benchmark photos and decoded images are
not re-checked) is decoded once, cheaply (JPEG at 1/8 scale), on a few threads. Every file that
does not decode is reported in ONE error (the first :data:`MAX_LISTED` and a count), or, with
``skip_bad_images``, left out of its panel and recorded with its reason; a panel left with fewer
than :data:`MIN_PANEL_IMAGES` images is then scored as NaN with that reason. Animated files
(GIF, APNG, WebP) are listed: their first frame is what gets scored.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .images import ImageDecodeError, check_image

MAX_LISTED = 50
MIN_PANEL_IMAGES = 2
SKIP_HINT = "pass --skip-bad-images (skip_bad_images=True in Python) to score the panels without them"


class BadImagesError(ImageDecodeError):
    """Generated images that cannot be decoded; the message lists every one (first 50 and a count)."""


@dataclass
class PanelImageCheck:
    """The result of :func:`check_panel_images`.

    ``panels``: the panels with their bad images left out (all panels, unchanged, when none is
    bad); ``too_small``: panel -> number of images left, for panels left under 2 images
    (not in ``panels``); ``skipped`` and ``animated``: one record per file (``method``,
    ``condition``, ``block_id``, ``file``, and ``reason`` or ``frames``).
    """

    panels: dict
    skipped: list[dict] = field(default_factory=list)
    animated: list[dict] = field(default_factory=list)
    too_small: dict = field(default_factory=dict)


def _checkable(item: Any) -> bool:
    return isinstance(item, (str, os.PathLike, bytes, bytearray))


def _is_embedding(value: Any) -> bool:
    return isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.ndim == 2


def _name(key: tuple, i: int, item: Any) -> str:
    return str(item) if isinstance(item, (str, os.PathLike)) else f"panel {'/'.join(key)} image {i}"


def check_panel_images(panels: Mapping[tuple, Any], *, skip_bad_images: bool = False,
                       progress: bool = False) -> PanelImageCheck:
    """Decodes every encoded image of ``panels`` once, before any model work.

    Raises:
        BadImagesError: some images do not decode and ``skip_bad_images`` is off; the message
            lists all of them (the first 50, then how many more) and how to skip them.
    """
    from concurrent.futures import ThreadPoolExecutor

    from tqdm.auto import tqdm

    jobs = [(key, i, item) for key, value in panels.items() if not _is_embedding(value)
            for i, item in enumerate(value) if _checkable(item)]
    workers = max(1, min(8, os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:
        results = list(tqdm(pool.map(lambda job: check_image(job[2], _name(*job)), jobs), total=len(jobs),
                            desc="checking images", unit="img", disable=not progress or not jobs))
    bad: dict[tuple, set[int]] = {}
    check = PanelImageCheck(panels={})
    for (key, i, _), res in zip(jobs, results):
        where = {"method": key[0], "condition": key[1], "block_id": key[2], "file": res.name}
        if res.problem is not None:
            bad.setdefault(key, set()).add(i)
            check.skipped.append({**where, "reason": res.problem})
        elif res.frames > 1:
            check.animated.append({**where, "frames": res.frames, "used": "first frame"})
    if check.skipped and not skip_bad_images:
        raise BadImagesError(bad_images_message(check.skipped))
    for key, value in panels.items():
        if key not in bad:
            check.panels[key] = value
            continue
        kept = [item for i, item in enumerate(value) if i not in bad[key]]
        if len(kept) < MIN_PANEL_IMAGES:
            check.too_small[key] = len(kept)
        else:
            check.panels[key] = kept
    return check


def bad_images_message(skipped: list[dict]) -> str:
    """The error naming the undecodable images of ``skipped`` (the first 50, then how many more);
    its last line says what to do."""
    shown = "\n  ".join(r["reason"] for r in skipped[:MAX_LISTED])
    more = f"\n  ... and {len(skipped) - MAX_LISTED} more" if len(skipped) > MAX_LISTED else ""
    return (f"{len(skipped)} generated image(s) cannot be decoded (nothing was scored):\n  {shown}{more}\n"
            f"Fix or remove them, or {SKIP_HINT}.")


def too_small_reason(n_left: int) -> str:
    """The NaN reason of a panel left with ``n_left`` images after skipping bad ones."""
    return (f"only {n_left} decodable image(s) left after skipping undecodable images (--skip-bad-images); "
            f"a panel needs at least {MIN_PANEL_IMAGES}")
