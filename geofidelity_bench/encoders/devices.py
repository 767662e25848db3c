"""Where models run and at what precision: device choice under a launcher, exact float32, the
process group of multi-process runs.

* :func:`pick_device` (pure) decides the device of every model (encoders, segmenters, the VQA
  model, CLIP alignment, the MFP extractor) from what the user asked and what this process sees.
  Under ``torchrun``/``accelerate launch`` (``WORLD_SIZE`` > 1) a model without an explicit device,
  or with a bare ``cuda``, goes to this process's own GPU, ``cuda:LOCAL_RANK`` (the device
  ``accelerate.PartialState`` gives the process), never to ``cuda:0`` in every process; an explicit
  ``cpu`` or ``cuda:N`` is honoured. Asking for CUDA where no GPU is visible, or for ``cuda:N``
  past the number of GPUs, is an :class:`~geofidelity_bench.encoders.devices.EncoderOptionError`
  (one line from the CLI), not a torch assertion later. More processes on a machine than GPUs put
  several on one GPU: a one-line :class:`SharedGPUWarning` names them and the device, and
  :func:`distributed_state` refuses such a CUDA launch (:func:`refuse_shared_gpus`: NCCL cannot
  run two ranks on one GPU).
* :func:`model_forward` (from :mod:`geofidelity_bench.float32`, re-exported here with the other
  IEEE float32 contexts) is the context of every model forward: a caller's ``torch.autocast`` is
  switched off (a model runs in its own dtype, so a float32 forward is float32 even inside a
  caller's bf16 autocast and its rows may be cached under the float32 config), and a float32 forward
  runs under :func:`exact_float32`: TF32 (and oneDNN's bf16) off for the block through torch's
  ``fp32_precision`` settings where torch has them (never mixed with the legacy ``allow_tf32``
  flags), every setting the caller had restored after, also on error. "float32" in a config means
  IEEE float32 on every device (docs/benchmark.md section 4), so GPU and CPU rows may share a cache;
  what torch had in force is read back and recorded. torch's settings belong to the process, so the
  blocks share one hold: the settings turn exact when the first block enters and the caller's come
  back when the last one leaves, and forwards that run at once (the app's two requests, a forward
  and a backward) each run, and record, IEEE float32 from start to end.
* :func:`call_in_context` runs a forward whose backward must run in that context too (the MFP
  extractor and terms, a training loss): autograd calls the backward later, outside the block.
* :func:`distributed_state` creates ``accelerate.PartialState`` with a process-group timeout that
  fits long model work (:data:`DEFAULT_DIST_TIMEOUT_S`), never NCCL's 10-minute default; on the
  CPU (gloo) when no GPU is visible or when ``accelerate launch --cpu`` asked for it
  (:func:`launcher_wants_cpu`, which :func:`this_process_device` honours too).
* :func:`raise_if_any_process_failed` and :class:`FailureNotice` let one process's error end every
  process of a launch at once, with that error, instead of leaving the others at a barrier until
  the timeout.

No torch import at module import time.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Mapping, Sequence

from ..errors import GeoFidelityError
from ..float32 import (  # noqa: F401  (IEEE float32 contexts: re-exported, their home is float32.py)
    call_in_context,
    exact_float32,
    float32_settings_in_force,
    fp32_precision_settings,
    model_forward,
    no_autocast,
    tf32_flags,
)


class EncoderOptionError(GeoFidelityError, ValueError):
    """An encoder option a user gave is not usable: an unknown encoder name, device or dtype, half
    precision on CPU, or an embedding cache folder inside the package; the message lists the choices."""


#: The config field recording how float32 forwards computed: the settings read from torch inside
#: the last float32 forward (left out of the config hash: float32 is IEEE float32 on every device,
#: so a GPU row and a CPU row of one config are the same computation).
FLOAT32_PRECISION_KEY = "float32_precision"

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


#: What ``accelerate launch --cpu`` sets in the environment of the processes it starts.
ACCELERATE_CPU_ENV = "ACCELERATE_USE_CPU"


def launcher_wants_cpu(environ: Mapping[str, str] | None = None) -> bool:
    """True when ``accelerate launch --cpu`` started this process (``ACCELERATE_USE_CPU`` true,
    read as accelerate reads it: ``1``/``true``/``yes``/``on``/``y``/``t``, any case)."""
    env = os.environ if environ is None else environ
    return str(env.get(ACCELERATE_CPU_ENV, "")).strip().lower() in {"1", "true", "yes", "on", "y", "t"}


def pick_device(requested: Any | None, *, cuda_count: int, local_rank: int = 0, world_size: int = 1,
                cpu_only: bool = False, local_world_size: int | None = None) -> str:
    """The device a model is built on (every input is an argument; its one side effect is the
    warning below).

    Args:
        requested: what the user asked (``None``, ``"cpu"``, ``"cuda"``, ``"cuda:1"``, a torch.device).
        cuda_count: GPUs visible to this process (``torch.cuda.device_count()``; 0 without CUDA).
        local_rank, world_size: this process under a launcher (see :func:`launcher_rank`).
        cpu_only: the launcher asked for the CPU (``accelerate launch --cpu``, :func:`launcher_wants_cpu`).
        local_world_size: processes of the launch on this machine (``LOCAL_WORLD_SIZE``), when known.

    Under a launcher, more processes on this machine than GPUs visible to this process put several
    ranks on one GPU (``LOCAL_RANK % cuda_count``): that is said in one line, a
    :class:`SharedGPUWarning` naming the ranks and the device (NCCL refuses it later, see
    :func:`refuse_shared_gpus`; with ``CUDA_VISIBLE_DEVICES`` set per process to a GPU of its own
    the warning is wrong and may be ignored).

    Returns:
        A torch device string: ``None`` -> this process's GPU (``cuda:LOCAL_RANK`` under a launcher,
        ``cuda`` in a plain process) or ``cpu`` (always ``cpu`` with ``cpu_only``); a bare ``cuda``
        under a launcher -> ``cuda:LOCAL_RANK``; anything explicit as given.

    Raises:
        EncoderOptionError: an unknown device, CUDA without a visible GPU, ``cuda:N`` past the count,
            or CUDA asked for under ``accelerate launch --cpu``.
    """
    import torch


    launched = world_size > 1
    if requested is None:
        if cuda_count == 0 or cpu_only:
            return "cpu"
        requested = "cuda"
    try:
        device = torch.device(requested)
    except (RuntimeError, TypeError, ValueError) as err:
        raise EncoderOptionError(f"unknown device {requested!r}: {err}") from None
    if device.type != "cuda":
        return str(device)
    if cpu_only:
        raise EncoderOptionError(
            f"device {str(device)!r} asked for, but this process was started by `accelerate launch --cpu` "
            f"({ACCELERATE_CPU_ENV} is set): drop --cpu from the launch, or drop --device")
    if cuda_count == 0:
        raise EncoderOptionError(
            f"device {str(device)!r} asked for, but no CUDA GPU is visible to this process "
            "(torch.cuda.is_available() is False; check the driver, CUDA_VISIBLE_DEVICES and the torch build); "
            "use --device cpu")
    index = device.index
    if index is None and launched:
        index = local_rank % cuda_count  # one GPU per process (CUDA_VISIBLE_DEVICES per rank) gives cuda:0
        _warn_if_shared(index, cuda_count, local_rank, local_world_size)
    if index is not None and index >= cuda_count:
        raise EncoderOptionError(
            f"device cuda:{index} asked for, but only {cuda_count} GPU(s) are visible (cuda:0 to cuda:{cuda_count - 1})")
    return "cuda" if index is None else f"cuda:{index}"


def this_process_device(requested: Any | None) -> str:
    """:func:`pick_device` with what this process sees (its GPUs and its launcher's environment)."""
    import torch

    local, world = launcher_rank()
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return pick_device(requested, cuda_count=count, local_rank=local, world_size=world, cpu_only=launcher_wants_cpu(),
                       local_world_size=local_world_size() if world > 1 else None)


def local_world_size(environ: Mapping[str, str] | None = None) -> int | None:
    """Processes of this launch on this machine (``LOCAL_WORLD_SIZE``, set by ``torchrun`` and
    ``accelerate launch``); None when not set or not a number."""
    env = os.environ if environ is None else environ
    try:
        value = int(env.get("LOCAL_WORLD_SIZE", "") or 0)
    except ValueError:
        return None
    return value if value > 0 else None


class SharedGPUWarning(UserWarning):
    """Several processes of a launch were put on one GPU (more processes on a machine than GPUs)."""


def ranks_on_device(index: int, cuda_count: int, local_rank: int, local_world_size: int | None) -> list[int]:
    """The local ranks that ``LOCAL_RANK % cuda_count`` puts on ``cuda:index``: of ``range(local_world_size)``
    when known, else the ones up to ``local_rank`` (those this process can be sure of)."""
    upto = max(local_world_size or 0, local_rank + 1)
    return [r for r in range(upto) if r % cuda_count == index]


def _warn_if_shared(index: int, cuda_count: int, local_rank: int, local_world_size: int | None) -> None:
    sharing = ranks_on_device(index, cuda_count, local_rank, local_world_size)
    if len(sharing) < 2:
        return
    of = f" of {local_world_size}" if local_world_size else ""
    warnings.warn(
        f"local ranks {_names(sharing)}{of} all run on cuda:{index}: this process sees {cuda_count} GPU(s) for more "
        f"processes on this machine (LOCAL_RANK {local_rank} -> cuda:{local_rank % cuda_count}); NCCL refuses "
        f"two ranks on one GPU: start at most {cuda_count} process(es) per machine, or give each its own GPU "
        "through CUDA_VISIBLE_DEVICES (then ignore this)", SharedGPUWarning, stacklevel=3)


def distributed_state(timeout_s: float = DEFAULT_DIST_TIMEOUT_S):
    """This process's ``accelerate.PartialState``, its process group created with a ``timeout_s``
    timeout (also the time the processes have to find each other at the start); an existing state
    is returned as it is. CPU (gloo) when no GPU is visible or when ``accelerate launch --cpu``
    started this process (:func:`launcher_wants_cpu`; accelerate's own ``PartialState`` does not
    read that flag, only its ``Accelerator`` does). A CUDA launch whose processes share a GPU is
    refused here, before any collective (:func:`refuse_shared_gpus`)."""
    from datetime import timedelta

    import torch
    from accelerate import PartialState

    if PartialState._shared_state:
        return PartialState()
    cpu = process_group_on_cpu(launcher_wants_cpu(), torch.cuda.is_available())
    try:
        state = PartialState(cpu=cpu, timeout=timedelta(seconds=float(timeout_s)))
        refuse_shared_gpus(state, timeout_s=timeout_s)
        return state
    except torch.distributed.DistError as err:  # a process that never came, a port taken, an unreachable host
        _, world = launcher_rank()
        where = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
        raise ProcessGroupError(
            f"the {world} processes of this launch could not form their process group at {where} within "
            f"{float(timeout_s):g} s (--dist-timeout): {str(err).rstrip('.')}; check that every machine was started with the "
            "same --main_process_ip/--main_process_port and --num_machines, and that the port is reachable") from None


#: Prefix of the process-group store keys through which the processes of a launch compare their GPUs.
GPU_STORE_KEY = "geofidelity_bench/gpu_of_process"


def gpu_identity(device: Any) -> str:
    """Which physical GPU ``device`` is, as the same string in every process that uses it: this
    machine's host name and the GPU's UUID (its PCI address where torch gives no UUID)."""
    import socket

    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    uuid = getattr(props, "uuid", None)
    gpu = str(uuid) if uuid else (f"pci {getattr(props, 'pci_domain_id', 0):04x}:{getattr(props, 'pci_bus_id', 0):02x}:"
                                  f"{getattr(props, 'pci_device_id', 0):02x}")
    return f"{socket.gethostname()} {gpu}"


def shared_gpus(identities: Mapping[int, str]) -> list[list[int]]:
    """The groups (two ranks or more, each sorted, by their lowest rank) of ranks whose GPU identity
    (:func:`gpu_identity`) is the same."""
    groups: dict[str, list[int]] = {}
    for rank in sorted(identities):
        groups.setdefault(identities[rank], []).append(rank)
    return sorted((g for g in groups.values() if len(g) > 1), key=lambda g: g[0])


def _names(ranks: Sequence[int]) -> str:
    return ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"


def refuse_shared_gpus(state: Any, *, store: Any | None = None, identity: str | None = None,
                       timeout_s: float = DEFAULT_DIST_TIMEOUT_S) -> None:
    """The documented refusal of a CUDA launch with two processes on one GPU (``torchrun
    --nproc_per_node 2`` on a machine with one GPU): NCCL, the process group of a CUDA launch, fails
    on it at the first collective ("Duplicate GPU detected"), so it is refused at the start, in
    every process, with one line naming the processes and the GPU.

    Every process writes the identity of its process-group GPU (``state.device``;
    :func:`gpu_identity`) to the process group's key-value store and reads the others' (no NCCL
    collective, so nothing can hang on the shared GPU). A launch on the CPU, a plain process and a
    process group without a reachable store are not checked. ``store`` and ``identity`` replace the
    process group's store and this GPU's identity (tests).

    Raises:
        ProcessGroupError: two or more processes of the launch are on one GPU.
    """
    import torch

    if int(state.num_processes) == 1 or torch.device(state.device).type != "cuda":
        return
    if store is None:
        try:
            from torch.distributed import distributed_c10d

            store = distributed_c10d._get_default_store()  # no public accessor (torch 2.x)
        except Exception:  # noqa: BLE001 - no store, no check: NCCL still refuses, in its own words
            return
    from datetime import timedelta

    rank, world = int(state.process_index), int(state.num_processes)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")  # torchrun keeps its store across restarts
    keys = [f"{GPU_STORE_KEY}/{attempt}/{r}" for r in range(world)]
    mine = identity if identity is not None else gpu_identity(state.device)
    store.set(keys[rank], f"{mine}\t{state.device}")
    store.wait(keys, timedelta(seconds=float(timeout_s)))
    entries = {r: store.get(k).decode("utf-8").split("\t") for r, k in enumerate(keys)}
    groups = shared_gpus({r: e[0] for r, e in entries.items()})
    if not groups:
        return
    group = next((g for g in groups if rank in g), groups[0])
    host = entries[group[0]][0].split(" ")[0]
    raise ProcessGroupError(
        f"processes {_names(group)} of this launch of {world} run on one GPU ({entries[group[0]][1]} of {host}), "
        "which NCCL, the process group of a CUDA launch, refuses: start at most one process per GPU "
        "(torchrun --nproc_per_node N, N the GPUs of a machine), or run the processes on the CPU "
        "(accelerate launch --cpu)")


def process_group_on_cpu(launcher_cpu: bool, cuda_available: bool) -> bool:
    """Whether the process group and the default device are the CPU's (gloo): asked for with
    ``accelerate launch --cpu`` (``launcher_cpu``), or no GPU visible."""
    return bool(launcher_cpu) or not cuda_available


class ProcessGroupError(GeoFidelityError, RuntimeError):
    """The processes of a launch could not form their process group (one never came within the
    timeout, the port is taken, the main host cannot be reached)."""


class ProcessFailedError(GeoFidelityError, RuntimeError):
    """Another process of a multi-process run failed; this one stopped too (its message names the
    failing process and its error)."""


def raise_if_any_process_failed(state: Any, error: BaseException | None, *, stopped: str = "") -> None:
    """A collective every process of ``state`` calls (after its own work, with the error it caught
    or ``None``): the failing process re-raises its own error, every other one raises
    :class:`ProcessFailedError` naming the first failing process and its error; nothing happens
    when no process failed. ``stopped`` ends the message of the others (what they kept, how to
    resume). A plain process (one of one) just re-raises its own error."""
    if int(state.num_processes) == 1:
        if error is not None:
            raise error
        return
    from accelerate.utils import gather_object

    mine = None if error is None else (int(state.process_index), type(error).__name__, str(error))
    failures = [f for f in gather_object([mine]) if f is not None]
    if error is not None:
        raise error
    if failures:
        index, kind, message = min(failures)
        raise ProcessFailedError(f"process {index} of {state.num_processes} failed with {kind}: {message}"
                                 + (f"; {stopped}" if stopped else ""))


class FailureNotice:
    """A flag in the process group's key-value store that a failing process raises and the others
    check between work units, so that they stop at once rather than finish their share first.

    Every process creates one (the main process clears a flag left by an earlier run in the same
    process group, so create it before a barrier that precedes the work). Without a process group,
    or where torch does not expose its store, :meth:`is_raised` is always False and the failure is
    still shared at :func:`raise_if_any_process_failed`."""

    KEY = "geofidelity_bench/failed_process"

    def __init__(self, state: Any):
        self._store = None
        if int(state.num_processes) > 1:
            try:
                from torch.distributed import distributed_c10d

                self._store = distributed_c10d._get_default_store()  # no public accessor (torch 2.x)
            except Exception:  # noqa: BLE001 - the notice is an early stop only; the gather still reports
                self._store = None
        if self._store is not None and state.is_main_process:
            try:
                self._store.delete_key(self.KEY)
            except Exception:  # noqa: BLE001
                pass

    def raise_flag(self, text: str) -> None:
        """Tells the other processes that this one failed (never raises)."""
        if self._store is not None:
            try:
                self._store.set(self.KEY, text)
            except Exception:  # noqa: BLE001 - the gather still reports the failure
                pass

    def is_raised(self) -> bool:
        """Whether any process has raised the flag (a non-blocking look-up)."""
        if self._store is None:
            return False
        try:
            return bool(self._store.check([self.KEY]))
        except Exception:  # noqa: BLE001
            return False


__all__ = [
    "ACCELERATE_CPU_ENV",
    "DEFAULT_DIST_TIMEOUT_S",
    "FailureNotice",
    "ProcessFailedError",
    "ProcessGroupError",
    "FLOAT32_PRECISION_KEY",
    "GPU_STORE_KEY",
    "SharedGPUWarning",
    "call_in_context",
    "distributed_state",
    "exact_float32",
    "float32_settings_in_force",
    "fp32_precision_settings",
    "gpu_identity",
    "launcher_rank",
    "launcher_wants_cpu",
    "local_world_size",
    "model_forward",
    "no_autocast",
    "pick_device",
    "process_group_on_cpu",
    "raise_if_any_process_failed",
    "ranks_on_device",
    "refuse_shared_gpus",
    "shared_gpus",
    "tf32_flags",
    "this_process_device",
]
