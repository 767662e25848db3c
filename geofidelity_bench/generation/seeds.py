"""Per-image seeds (docs/benchmark.md section 3, Generation).

Every image has its own seed, derived from what the image *is* (model, block, condition, index),
never from where or when it was computed. With one ``torch.Generator`` per image, the starting
noise of an image is the same whatever the batch size, the number of processes, or the order in
which work units are processed.
"""

from __future__ import annotations

import hashlib

SEED_MASK = 2**63 - 1


def image_seed(model: str, block_id: str, condition: str, k: int) -> int:
    """Seed of image ``k`` of (model, block, condition).

    ``int.from_bytes(sha256(f"{model}/{block_id}/{condition}/{k}").digest()[:8], "big") & (2**63 - 1)``

    Example:
        >>> image_seed("sdxl", "berlin_am_lustgarten", "L1", 0) < 2**63
        True
    """
    digest = hashlib.sha256(f"{model}/{block_id}/{condition}/{int(k)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & SEED_MASK


def torch_generator(seed: int):
    """A CPU ``torch.Generator`` seeded with ``seed``.

    The noise is drawn on the CPU and moved to the accelerator by the pipeline, so an image's
    starting noise is the same on every device (diffusers' ``randn_tensor`` supports this).
    """
    import torch

    return torch.Generator(device="cpu").manual_seed(int(seed))
