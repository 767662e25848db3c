"""A user generator plugged in from a file: paints a flat colour derived from the block's
coordinates plus seeded noise. Used by tests as ``--plugin tests/scripts/gen_plugin.py`` or
``--model coords=tests/scripts/gen_plugin.py:coordinate_painter``; it shows that a model taking
coordinates (or anything else about the block) receives that metadata."""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image

from geofidelity_bench.generation import GeneratorSpec, register_generator

CALLS: list[dict] = []


def coordinate_painter(prompt, negative_prompt, generator, *, block, prompt_info, seed, height, width, **kw):
    lat, lon = block.centroid
    base = np.array([int(abs(lat) * 7) % 256, int(abs(lon) * 11) % 256, len(prompt) % 256], dtype=np.float32)
    noise = torch.rand((height, width, 3), generator=generator).numpy() * 40.0
    CALLS.append({"block_id": block.block_id, "condition": prompt_info.condition, "seed": seed, "negative": negative_prompt})
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))


register_generator(
    GeneratorSpec("coords", fn=coordinate_painter, steps=1, guidance=0.0, dtype="fp32", height=32, width=32),
    overwrite=True,
)
