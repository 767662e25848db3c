"""A generator plugin that fails in one process only: ``--plugin tests/scripts/gen_failing_plugin.py
--model failing_on_rank1``. Process 1 of a launch (``RANK=1``) raises on its first image; every
other process paints seeded noise. Used to check that a failure in one process ends the whole run
at once, with that process's error."""

from __future__ import annotations

import os

import numpy as np
import torch
from PIL import Image

from geofidelity_bench.generation import GeneratorSpec, register_generator

FAILURE = "the failing plugin's process 1 cannot paint this image"


def paint_or_fail(prompt, negative_prompt, generator, *, height, width, **kw):
    if os.environ.get("RANK") == "1":
        raise RuntimeError(FAILURE)
    noise = torch.rand((height, width, 3), generator=generator).numpy() * 255.0
    return Image.fromarray(noise.astype(np.uint8))


register_generator(
    GeneratorSpec("failing_on_rank1", fn=paint_or_fail, steps=1, guidance=0.0, dtype="fp32", height=32, width=32),
    overwrite=True,
)
