"""Preparing images in a pool of worker threads, ahead of the model, in input order.

Decoding and resizing (PIL releases the GIL there) run in ``num_workers`` threads while the
caller runs the model on the previous batch. :func:`ordered_map` yields ``fn(x)`` for every
input *in input order*, whatever order the workers finish in, with at most ``ahead`` inputs
submitted beyond the one being consumed (memory stays bounded whatever the input size). The
exception of input ``i`` is raised when input ``i`` is reached, exactly as the serial loop
would raise it, and leaving early (an error, Ctrl-C, closing the iterator) cancels what is
pending and shuts the pool down without waiting for it. ``num_workers=0`` is the serial loop
itself: ``fn`` is called lazily in the calling thread.
"""

from __future__ import annotations

import os
from collections import deque
from itertools import islice
from typing import Callable, Iterable, Iterator, TypeVar

from .errors import GeoFidelityError

T = TypeVar("T")
R = TypeVar("R")

#: Batches prepared ahead of the one the model is running on.
PREFETCH_BATCHES = 2


class WorkerOptionError(GeoFidelityError, ValueError):
    """A ``num_workers`` value that is not a non-negative integer."""


def default_num_workers() -> int:
    """The cores this process may use (``os.sched_getaffinity``), divided among the processes of a
    launch on this machine (``LOCAL_WORLD_SIZE``, else ``WORLD_SIZE``, as set by ``accelerate
    launch`` / ``torchrun``); at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    processes = 1
    for var in ("LOCAL_WORLD_SIZE", "WORLD_SIZE"):
        try:
            processes = max(1, int(os.environ[var]))
            break
        except (KeyError, ValueError):
            continue
    return max(1, cores // processes)


def resolve_num_workers(num_workers: int | None) -> int:
    """``None`` -> :func:`default_num_workers`; a non-negative int as it is (0: the serial path)."""
    if num_workers is None:
        return default_num_workers()
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise WorkerOptionError(f"num_workers must be an integer >= 0 (0: no worker threads), got {num_workers!r}")
    return num_workers


def prefetch_items(num_workers: int, batch_size: int) -> int:
    """How many inputs :func:`ordered_map` keeps submitted ahead: :data:`PREFETCH_BATCHES` batches,
    and at least two per worker so that no worker idles on small batches."""
    return max(PREFETCH_BATCHES * batch_size, 2 * num_workers, 1)


def ordered_map(fn: Callable[[T], R], inputs: Iterable[T], *, num_workers: int, ahead: int) -> Iterator[R]:
    """``fn(x)`` for every ``x`` of ``inputs``, in input order, computed by ``num_workers`` threads.

    Use it as a context manager or close it (``contextlib.closing``) so that a consumer that stops
    early also stops the pool at once rather than when the generator is collected.
    """
    if num_workers == 0:
        for x in inputs:
            yield fn(x)
        return
    from concurrent.futures import ThreadPoolExecutor

    source = iter(inputs)
    pool = ThreadPoolExecutor(max_workers=num_workers, thread_name_prefix="geofidelity-prepare")
    pending: deque = deque(pool.submit(fn, x) for x in islice(source, max(1, ahead)))
    finished = False
    try:
        while pending:
            future = pending.popleft()
            pending.extend(pool.submit(fn, x) for x in islice(source, 1))  # keep ``ahead`` in flight
            result = future.result()  # raises input i's exception when input i is reached
            yield result
        finished = True
    finally:
        for future in pending:
            future.cancel()
        # On an error or an interrupt, do not wait for the (at most num_workers) running items.
        pool.shutdown(wait=finished, cancel_futures=True)


__all__ = ["PREFETCH_BATCHES", "WorkerOptionError", "default_num_workers", "ordered_map", "prefetch_items",
           "resolve_num_workers"]
