"""Preparing images in a pool of worker threads, ahead of the model, in input order.

Decoding and resizing (PIL releases the GIL there) run in ``num_workers`` threads while the
caller runs the model on the previous batch. :func:`ordered_map` yields ``fn(x)`` for every
input *in input order*, whatever order the workers finish in, with at most ``ahead`` inputs
submitted beyond the one being consumed (memory stays bounded whatever the input size). The
exception of input ``i`` is raised when input ``i`` is reached, exactly as the serial loop
would raise it, and leaving early (an error, Ctrl-C, closing the iterator) cancels what is
pending and shuts the pool down without waiting for it. ``num_workers=0`` is the serial loop
itself: ``fn`` is called lazily in the calling thread.

The model side keeps one batch in flight: a batch method marked :func:`submits_with` has an
asynchronous twin that queues the batch (host-to-device copy, forward, start of the copy back) and
returns a :class:`Pending`; the loops (``Encoder.embed``, ``cached_batches.run_cached``, the
segmenters, ``mfp_scores``) submit batch ``k + 1`` before they read batch ``k``, so on a GPU the
next batch is queued while the current one computes, and the host waits only where it reads
results.
"""

from __future__ import annotations

import os
from collections import deque
from itertools import islice
from typing import Any, Callable, Generic, Iterable, Iterator, TypeVar

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


class Pending(Generic[R]):
    """A batch's results on their way to the host: :meth:`result` waits for them (the first call
    reads them, later calls return the same value)."""

    __slots__ = ("_read", "_value", "_read_done")

    def __init__(self, read: Callable[[], R]) -> None:
        self._read: Callable[[], R] | None = read
        self._value: Any = None
        self._read_done = False

    @classmethod
    def ready(cls, value: R) -> "Pending[R]":
        """A result that is already on the host."""
        return cls(lambda: value)

    def result(self) -> R:
        if not self._read_done:
            read, self._read = self._read, None
            self._value = read()  # type: ignore[misc]
            self._read_done = True
        return self._value


_SUBMIT_ATTR = "__geofidelity_submit__"


def submits_with(name: str) -> Callable[[Callable], Callable]:
    """Marks a batch method ``m(batch) -> rows`` (which waits for its rows) as having an asynchronous
    twin, the method ``name(batch) -> Pending`` of the same object: given ``compute=obj.m``,
    :func:`~geofidelity_bench.cached_batches.run_cached` submits each batch through the twin and
    reads it after the next one is submitted. A subclass or a caller that replaces ``m`` with a plain
    function drops the mark, and ``m`` is then called as it is, one batch at a time."""

    def mark(fn: Callable) -> Callable:
        setattr(fn, _SUBMIT_ATTR, name)
        return fn

    return mark


def submitter_of(compute: Callable) -> Callable[[Any], Pending] | None:
    """The asynchronous twin of ``compute`` (a bound method marked :func:`submits_with`), or None."""
    name = getattr(compute, _SUBMIT_ATTR, None)  # a bound method reads its function's attributes
    owner = getattr(compute, "__self__", None)
    if not isinstance(name, str) or owner is None:
        return None
    return getattr(owner, name)


__all__ = ["PREFETCH_BATCHES", "Pending", "WorkerOptionError", "default_num_workers", "ordered_map",
           "prefetch_items", "resolve_num_workers", "submits_with", "submitter_of"]
