"""IEEE float32 math, whatever the caller set: the context of every model forward and of the MFP terms.

"float32" in a config means IEEE float32 on every device (docs/benchmark.md section 4), so GPU and
CPU rows may share a cache:

* :func:`exact_float32` turns TF32 (and oneDNN's bf16) off for a block through torch's
  ``fp32_precision`` settings where torch has them (never mixed with the legacy ``allow_tf32``
  flags), every setting the caller had restored after, also on error. torch's settings belong to
  the process, so the blocks share one hold (:class:`_ExactHold`): the settings turn exact when the
  first block enters and the caller's come back when the last one leaves;
* :func:`no_autocast` switches a caller's ``torch.autocast`` off; :func:`model_forward` is both, the
  context of every model forward (encoders, segmenters, the MFP extractor, VQA);
* :func:`call_in_context` runs a computation whose backward must run in that context too (the MFP
  terms, a training loss): autograd calls the backward later, outside the block;
* :func:`fp32_precision_settings`, :func:`float32_settings_in_force`, :func:`tf32_flags` read what
  torch has in force (recorded next to every number computed in float32).

A foundation: it imports nothing else from the package, and torch only inside its functions, so the
pure math of :mod:`geofidelity_bench.metrics` can use it without importing a model.
:mod:`geofidelity_bench.encoders.devices` re-exports every name.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Iterator, Sequence


#: The operations whose float32 precision torch's ``fp32_precision`` settings govern, per backend.
_FP32_OPS = ("matmul", "conv", "rnn")
#: Values of those settings under which a float32 operation is not IEEE float32 (TF32 on cuBLAS/cuDNN/
#: oneDNN-on-XPU, bfloat16 on oneDNN-on-CPU); "none" (inherit, torch's default) and "ieee" are exact.
_REDUCED = ("tf32", "bf16")


def _fp32_api(torch) -> bool:
    """Whether this torch has the ``fp32_precision`` settings (torch >= 2.9)."""
    return hasattr(torch._C, "_get_fp32_precision_getter") and hasattr(torch._C, "_set_fp32_precision_setter")


def _backend_of(device_type: str) -> str:
    """The ``fp32_precision`` backend of a device type: cuBLAS/cuDNN for CUDA, oneDNN for the rest."""
    return "cuda" if device_type == "cuda" else "mkldnn"


def fp32_precision_settings() -> dict[str, str]:
    """Every ``fp32_precision`` setting as torch reports it now (``{"generic.all": "none",
    "cuda.matmul": "tf32", ...}``; empty before torch 2.9). Read through the new API only, so it
    never raises on a mix of the two APIs."""
    import torch

    if not _fp32_api(torch):
        return {}
    get = torch._C._get_fp32_precision_getter
    pairs = [("generic", "all")] + [(b, op) for b in ("cuda", "mkldnn") for op in ("all",) + _FP32_OPS]
    return {f"{b}.{op}": get(b, op) for b, op in pairs}


def float32_settings_in_force(device: Any) -> dict[str, Any]:
    """The float32 precision settings that govern a forward on ``device`` (a device or a device type,
    ``"cuda"``, ``"cuda:1"``, ``torch.device("cpu")``) now, as read
    from torch: ``{"cuda.matmul": ..., "cuda.conv": ..., "cuda.rnn": ...}`` for CUDA,
    ``{"mkldnn.matmul": ..., ...}`` (oneDNN) otherwise (``"none"``: nothing reduced, i.e. IEEE);
    before torch 2.9 the legacy ``{"cuda.matmul.allow_tf32": ..., "cudnn.allow_tf32": ...}``.
    Changes nothing; never reads the legacy flags where the new settings exist."""
    import torch

    if not _fp32_api(torch):
        return {"cuda.matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
                "cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32)}
    backend = _backend_of(torch.device(device).type)
    return {f"{backend}.{op}": torch._C._get_fp32_precision_getter(backend, op) for op in _FP32_OPS}


def tf32_flags() -> tuple[bool, bool]:
    """(cuBLAS matmul TF32, cuDNN convolution TF32) as torch has them now: through the
    ``fp32_precision`` settings where torch has them (so a caller's new-API settings never make this
    raise), else the legacy ``allow_tf32`` flags."""
    import torch

    if _fp32_api(torch):
        get = torch._C._get_fp32_precision_getter
        return get("cuda", "matmul") == "tf32", get("cuda", "conv") == "tf32"
    return bool(torch.backends.cuda.matmul.allow_tf32), bool(torch.backends.cudnn.allow_tf32)


def _set_tf32(matmul: bool, cudnn: bool) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = matmul
    torch.backends.cudnn.allow_tf32 = cudnn


def _legacy_matmul_precision(torch) -> str:
    """The legacy ``float32_matmul_precision`` ("high" or "medium") of a caller whose cuBLAS TF32
    is on through the legacy API. torch's getter raises when the oneDNN setting disagrees with it;
    the disagreement then tells the value (bf16 goes with "medium", tf32 with "high")."""
    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        return "high" if torch._C._get_fp32_precision_getter("mkldnn", "matmul") == "bf16" else "medium"


def _legacy_cublas_tf32_on(torch) -> bool:
    """Whether the legacy cuBLAS flag says TF32 (``float32_matmul_precision`` is not "highest").
    Called when the new setting says tf32: torch's legacy getter raises exactly when the legacy flag
    disagrees (the caller set TF32 through the new API only), i.e. when it is off."""
    try:
        return bool(torch.backends.cuda.matmul.allow_tf32)
    except RuntimeError:
        return False


class _ExactHold:
    """The process-wide hold on IEEE float32 that every float32 forward (and backward) takes.

    torch's precision settings belong to the process, not to a thread, so two forwards that each
    set them on entry and put the caller's back on exit race: the first to leave restores TF32 (or
    oneDNN's bf16) while the other still runs and has recorded "ieee". Here the first forward to
    enter saves what the caller had and makes the settings exact, later ones (of any device type,
    on any thread) only make exact what is not yet, and the last one to leave restores everything,
    in the reverse order it was changed. Between those two moments the settings only ever move
    towards IEEE, so every forward that runs concurrently runs, and records, what it asked for.
    The lock is held only while the settings change, never while a model runs.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.made_exact: set[str] = set()  # backends made exact since the first forward entered
        self.undo: list[Callable[[], None]] = []  # how to restore them, in the order they were changed

    def acquire(self, device_type: str) -> dict[str, Any]:
        with self.lock:
            self.count += 1
            try:
                backend = _backend_of(device_type)
                if backend not in self.made_exact:
                    self.undo.append(_make_exact(backend))
                    self.made_exact.add(backend)
                return float32_settings_in_force(device_type)
            except BaseException:
                self._release_locked()
                raise

    def release(self) -> None:
        with self.lock:
            self._release_locked()

    def _release_locked(self) -> None:
        self.count -= 1
        if self.count:
            return
        undo, self.undo, self.made_exact = self.undo, [], set()
        for restore in reversed(undo):
            restore()


_HOLD = _ExactHold()


def _make_exact(backend: str) -> Callable[[], None]:
    """Makes ``backend``'s float32 settings IEEE now; returns what puts back what it changed."""
    import torch

    if not _fp32_api(torch):
        before = (bool(torch.backends.cuda.matmul.allow_tf32), bool(torch.backends.cudnn.allow_tf32))
        _set_tf32(False, False)
        return lambda: _set_tf32(*before)

    get, set_ = torch._C._get_fp32_precision_getter, torch._C._set_fp32_precision_setter
    saved = {op: get(backend, op) for op in _FP32_OPS}
    touched = {(backend, op): value for op, value in saved.items() if value in _REDUCED}
    legacy_matmul = None
    if backend == "cuda" and saved["matmul"] == "tf32" and _legacy_cublas_tf32_on(torch):
        legacy_matmul = _legacy_matmul_precision(torch)
        # set_float32_matmul_precision also writes oneDNN's matmul setting: put that back too
        touched.setdefault(("mkldnn", "matmul"), get("mkldnn", "matmul"))

    def restore() -> None:
        if legacy_matmul is not None:
            torch.set_float32_matmul_precision(legacy_matmul)
        for (b, op), value in touched.items():
            set_(b, op, "none")  # inherited, if that gives back what the caller had
            if get(b, op) != value:
                set_(b, op, value)

    try:
        if legacy_matmul is not None:
            torch.set_float32_matmul_precision("highest")
        for (b, op) in touched:
            set_(b, op, "ieee")
    except BaseException:
        restore()
        raise
    return restore


@contextlib.contextmanager
def exact_float32(enabled: bool = True, device_type: str = "cuda") -> Iterator[dict[str, Any]]:
    """IEEE float32 matmuls and convolutions inside the block (when ``enabled``), for a model on a
    ``device_type`` device; every setting the caller had is restored after, also on error.

    Safe when blocks run concurrently (threads of an app scoring two requests at once, a forward on
    one thread and a backward on autograd's): the settings are held exact from the moment the first
    block enters until the last one leaves (see :class:`_ExactHold`), so no block's exit restores a
    reduced precision under another block that is still running. Nested blocks are fine.

    With torch's ``fp32_precision`` settings (torch >= 2.9) only those are used (the legacy
    ``allow_tf32`` flags are never read: reading them after a new-API setting raises "mix of the
    legacy and new APIs"). Of the device's backend (``cuda`` for CUDA, ``mkldnn`` otherwise), each
    of ``matmul``/``conv``/``rnn`` that is ``tf32`` or ``bf16`` is set to ``ieee`` and set back after;
    one already exact is not touched. A caller who turned cuBLAS TF32 on through the legacy API
    (``allow_tf32 = True``, ``set_float32_matmul_precision("high")``) also has the legacy matmul
    precision set to "highest" for the block and back after, because torch refuses a new-API
    ``ieee`` beside a legacy "high" (the mixed state) when it picks the cuBLAS math mode. A setting
    that was inherited (``none``) is restored as inherited when that gives back what torch reported;
    the one thing torch does not let a program restore is the soft default of cuDNN's
    ``conv``/``rnn`` (``tf32`` until a parent setting is assigned): after a CUDA forward they are an
    explicit ``tf32``, which reads the same.

    Before torch 2.9: the legacy cuBLAS and cuDNN ``allow_tf32`` flags are turned off and restored.

    Yields:
        The settings in force inside the block, as read from torch (``{"cuda.matmul": "ieee",
        "cuda.conv": "ieee", "cuda.rnn": "ieee"}``; ``"none"`` means nothing reduced, i.e. IEEE;
        before torch 2.9 ``{"cuda.matmul.allow_tf32": False, "cudnn.allow_tf32": False}``); ``{}``
        when not ``enabled``.
    """
    if not enabled:
        yield {}
        return
    seen = _HOLD.acquire(device_type)
    try:
        yield seen
    finally:
        _HOLD.release()


def _autocast_types(device_type: str) -> list[str]:
    return list(dict.fromkeys([device_type, "cpu"]))


@contextlib.contextmanager
def no_autocast(device_type: str) -> Iterator[None]:
    """A caller's ``torch.autocast`` switched off inside the block, for ``device_type`` and the CPU
    (the device types a forward on ``device_type`` uses); a device type without autocast has none."""
    import torch

    with contextlib.ExitStack() as stack:
        for kind in _autocast_types(device_type):
            try:
                stack.enter_context(torch.autocast(device_type=kind, enabled=False))
            except RuntimeError:  # no autocast on this device type: nothing to turn off
                pass
        yield


@contextlib.contextmanager
def model_forward(device: Any, float32: bool) -> Iterator[dict[str, Any]]:
    """The context of every model forward: no caller autocast (a model runs in its own dtype), and,
    for a float32 model, IEEE float32 (:func:`exact_float32`). Yields what :func:`exact_float32`
    read from torch (``{}`` for a half-precision model)."""
    import torch

    device_type = torch.device(device).type
    with no_autocast(device_type), exact_float32(float32, device_type) as seen:
        yield seen


def call_in_context(context: Callable[[], Any], fn: Callable[..., Sequence[Any]], inputs: Sequence[Any],
                    leaves: Sequence[Any] = ()) -> tuple[Any, ...]:
    """``fn(*inputs)`` (a tuple of tensors) computed inside ``context()``, and its backward too.

    A context such as :func:`model_forward` only covers the code inside it, but autograd runs a
    forward's backward later, when the caller calls ``backward()``, long after the block has
    restored the caller's TF32 or bf16: the gradient of a float32 forward would be computed in
    reduced precision. So when autograd will differentiate the result (grad mode on and some input
    or leaf requires grad), ``fn`` runs inside a custom autograd function that enters a fresh
    ``context()`` again for its backward, which differentiates ``fn``'s own graph (kept from the
    forward, no recomputation; a second backward through a retained graph recomputes ``fn`` inside
    ``context()``). Otherwise this is just ``with context(): fn(*inputs)``.

    Args:
        context: makes a fresh context manager (entered once for the forward, once per backward).
        fn: takes ``inputs`` (detached copies that require grad as the originals do) and returns a
            tuple of tensors.
        inputs: the tensors ``fn`` reads.
        leaves: tensors ``fn`` uses directly (e.g. parameters) whose gradients must flow back too.

    Returns:
        ``fn``'s outputs; their gradients reach ``inputs`` and ``leaves``. Twice differentiable
        only through a plain call (``create_graph=True`` through this function raises).
    """
    import torch

    tensors = (*inputs, *leaves)
    if not (torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in tensors)):
        with context():
            return tuple(fn(*inputs))
    return _backward_in_context_class().apply(_Call(context, fn, len(inputs)), *tensors)


class _Call:
    """What :func:`call_in_context`'s autograd function runs (kept by the graph for its backward)."""

    def __init__(self, context: Callable[[], Any], fn: Callable[..., Sequence[Any]], n_inputs: int) -> None:
        self.context, self.fn, self.n_inputs = context, fn, n_inputs
        self.graph: tuple[Any, Any] | None = None  # (detached inputs, outputs) of the forward

    def forward(self, inputs: Sequence[Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        import torch

        detached = tuple(t.detach().requires_grad_(t.requires_grad) for t in inputs)
        with torch.enable_grad(), self.context():
            outputs = tuple(self.fn(*detached))
        return detached, outputs


@functools.lru_cache(maxsize=None)
def _backward_in_context_class() -> type:
    import torch
    from torch.autograd.function import once_differentiable

    class BackwardInContext(torch.autograd.Function):
        @staticmethod
        def forward(ctx, call: _Call, *tensors):  # noqa: ANN001 - torch's signature
            inputs = tensors[:call.n_inputs]
            call.graph = call.forward(inputs)
            ctx.call = call
            ctx.save_for_backward(*tensors)  # what a second backward (retained graph) recomputes from
            returned = tuple(out.detach() for out in call.graph[1])
            ctx.mark_non_differentiable(*(r for r, out in zip(returned, call.graph[1]) if not out.requires_grad))
            return returned

        @staticmethod
        @once_differentiable
        def backward(ctx, *grads):  # noqa: ANN001
            call: _Call = ctx.call
            tensors = ctx.saved_tensors
            inputs, leaves = tensors[:call.n_inputs], tensors[call.n_inputs:]
            graph, call.graph = call.graph, None  # the forward's graph is differentiated once, then freed
            with call.context():
                detached, outputs = graph if graph is not None else call.forward(inputs)
                wanted = [t for t in (*detached, *leaves) if t.requires_grad]
                pairs = [(o, g) for o, g in zip(outputs, grads) if o.requires_grad and g is not None]
                got = iter(torch.autograd.grad([o for o, _ in pairs], wanted, [g for _, g in pairs],
                                               allow_unused=True) if pairs and wanted else [None] * len(wanted))
            return (None, *(next(got) if t.requires_grad else None for t in (*detached, *leaves)))

    BackwardInContext.__qualname__ = "call_in_context.<autograd function>"
    return BackwardInContext


__all__ = [
    "call_in_context",
    "exact_float32",
    "float32_settings_in_force",
    "fp32_precision_settings",
    "model_forward",
    "no_autocast",
    "tf32_flags",
]
