"""Where models run and at what precision: device choice under a launcher, exact float32, the
process group of multi-process runs.

* :func:`pick_device` (pure) decides the device of every model (encoders, segmenters, the VQA
  model, CLIP alignment, the MFP extractor) from what the user asked and what this process sees.
  Under ``torchrun``/``accelerate launch`` (``WORLD_SIZE`` > 1) a model without an explicit device,
  or with a bare ``cuda``, goes to this process's own GPU, ``cuda:LOCAL_RANK`` (the device
  ``accelerate.PartialState`` gives the process), never to ``cuda:0`` in every process; an explicit
  ``cpu`` or ``cuda:N`` is honoured. Asking for CUDA where no GPU is visible, or for ``cuda:N``
  past the number of GPUs, is an :class:`~geofidelity_bench.encoders.base.EncoderOptionError`
  (one line from the CLI), not a torch assertion later.
* :func:`exact_float32` turns TF32 off (cuBLAS matmuls and cuDNN convolutions) for the duration of
  a float32 forward and restores the previous flags: "float32" in a config means IEEE float32 on
  every device (docs/benchmark.md section 4), so GPU and CPU rows may share a cache.
* :func:`distributed_state` creates ``accelerate.PartialState`` with a process-group timeout that
  fits long model work (:data:`DEFAULT_DIST_TIMEOUT_S`), never NCCL's 10-minute default.

No torch import at module import time.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Mapping

#: The config field recording how float32 forwards compute (left out of the config hash: float32 is
#: IEEE float32 on every device, so a GPU row and a CPU row of one config are the same computation).
FLOAT32_PRECISION_KEY = "float32_precision"
FLOAT32_PRECISION = "ieee (TF32 off for cuBLAS matmuls and cuDNN convolutions)"

#: Default timeout of the process group's collectives (seconds), for generation and embedding:
#: a process may wait this long at a barrier for the others.
DEFAULT_DIST_TIMEOUT_S = 4 * 3600


def launcher_rank(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """(local rank, world size) set by ``torchrun``/``accelerate launch``; (0, 1) in a plain process."""
    env = os.environ if environ is None else environ
    try:
        world = int(env.get("WORLD_SIZE", "1") or 1)
        local = int(env.get("LOCAL_RANK", "0") or 0)
    except ValueError:
        return 0, 1
    return (local, world) if world > 1 else (0, 1)


def pick_device(requested: Any | None, *, cuda_count: int, local_rank: int = 0, world_size: int = 1) -> str:
    """The device a model is built on (pure: every input is an argument).

    Args:
        requested: what the user asked (``None``, ``"cpu"``, ``"cuda"``, ``"cuda:1"``, a torch.device).
        cuda_count: GPUs visible to this process (``torch.cuda.device_count()``; 0 without CUDA).
        local_rank, world_size: this process under a launcher (see :func:`launcher_rank`).

    Returns:
        A torch device string: ``None`` -> this process's GPU (``cuda:LOCAL_RANK`` under a launcher,
        ``cuda`` in a plain process) or ``cpu``; a bare ``cuda`` under a launcher -> ``cuda:LOCAL_RANK``;
        anything explicit as given.

    Raises:
        EncoderOptionError: an unknown device, CUDA without a visible GPU, or ``cuda:N`` past the count.
    """
    import torch

    from geofidelity_bench.encoders.base import EncoderOptionError

    launched = world_size > 1
    if requested is None:
        if cuda_count == 0:
            return "cpu"
        requested = "cuda"
    try:
        device = torch.device(requested)
    except (RuntimeError, TypeError, ValueError) as err:
        raise EncoderOptionError(f"unknown device {requested!r}: {err}") from None
    if device.type != "cuda":
        return str(device)
    if cuda_count == 0:
        raise EncoderOptionError(
            f"device {str(device)!r} asked for, but no CUDA GPU is visible to this process "
            "(torch.cuda.is_available() is False; check the driver, CUDA_VISIBLE_DEVICES and the torch build); "
            "use --device cpu")
    index = device.index
    if index is None and launched:
        index = local_rank % cuda_count  # one GPU per process (CUDA_VISIBLE_DEVICES per rank) gives cuda:0
    if index is not None and index >= cuda_count:
        raise EncoderOptionError(
            f"device cuda:{index} asked for, but only {cuda_count} GPU(s) are visible (cuda:0 to cuda:{cuda_count - 1})")
    return "cuda" if index is None else f"cuda:{index}"


def this_process_device(requested: Any | None) -> str:
    """:func:`pick_device` with what this process sees (its GPUs and its launcher's environment)."""
    import torch

    local, world = launcher_rank()
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return pick_device(requested, cuda_count=count, local_rank=local, world_size=world)


def tf32_flags() -> tuple[bool, bool]:
    """(cuBLAS matmul TF32, cuDNN convolution TF32) as torch has them now."""
    import torch

    return bool(torch.backends.cuda.matmul.allow_tf32), bool(torch.backends.cudnn.allow_tf32)


def _set_tf32(matmul: bool, cudnn: bool) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = matmul
    torch.backends.cudnn.allow_tf32 = cudnn


@contextlib.contextmanager
def exact_float32(enabled: bool = True) -> Iterator[None]:
    """TF32 off inside the block (when ``enabled``), the previous flags restored after, also on error."""
    if not enabled:
        yield
        return
    before = tf32_flags()
    _set_tf32(False, False)
    try:
        yield
    finally:
        _set_tf32(*before)


def distributed_state(timeout_s: float = DEFAULT_DIST_TIMEOUT_S):
    """This process's ``accelerate.PartialState`` (CPU/gloo when no GPU is visible), its process
    group created with a ``timeout_s`` timeout; an existing state is returned as it is."""
    from datetime import timedelta

    import torch
    from accelerate import PartialState

    if PartialState._shared_state:
        return PartialState()
    return PartialState(cpu=not torch.cuda.is_available(), timeout=timedelta(seconds=float(timeout_s)))


__all__ = [
    "DEFAULT_DIST_TIMEOUT_S",
    "FLOAT32_PRECISION",
    "FLOAT32_PRECISION_KEY",
    "distributed_state",
    "exact_float32",
    "launcher_rank",
    "pick_device",
    "tf32_flags",
    "this_process_device",
]
