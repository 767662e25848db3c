"""The generators of docs/benchmark.md section 3, Generation, the offline ``tiny`` pipeline, and user generators.

A :class:`GeneratorSpec` says everything needed to reproduce a model's images: the weights id
(and revision), the pipeline class, steps, guidance, dtype, resolution, whether it takes a
negative prompt, extra call arguments and whether it needs CPU offload. It travels into every
manifest row, the way open_clip's registry keeps preprocessing with the weights id.

=================  ==========================================  ==========================  =====  ========  =====  =======
key                Hub weights                                 pipeline                    steps  guidance  dtype  offload
=================  ==========================================  ==========================  =====  ========  =====  =======
``sdxl``           stabilityai/stable-diffusion-xl-base-1.0    StableDiffusionXLPipeline      30     5.0    fp16   no
``sd35_large``     stabilityai/stable-diffusion-3.5-large      StableDiffusion3Pipeline       28     3.5    bf16   yes
``flux_dev``       black-forest-labs/FLUX.1-dev                FluxPipeline                   28     3.5    bf16   yes
``flux_schnell``   black-forest-labs/FLUX.1-schnell            FluxPipeline                    4     0.0    bf16   yes
``pixart_sigma``   PixArt-alpha/PixArt-Sigma-XL-2-1024-MS      PixArtSigmaPipeline            20     4.5    fp16   no
``hunyuan_dit``    Tencent-Hunyuan/HunyuanDiT-Diffusers        HunyuanDiTPipeline             50     5.0    fp16   no
``tiny``           (built in memory, random weights)           StableDiffusionPipeline         2     5.0    fp32   no
=================  ==========================================  ==========================  =====  ========  =====  =======

All real models run at 1024x1024; FLUX takes no negative prompt and is called with
``max_sequence_length=256``. Approximate peak GPU memory for one 1024x1024 image (batch 1),
as a guide for choosing GPUs, not a measurement of this code:

* ``sdxl`` ~10 GB; ``pixart_sigma`` ~12 GB (T5-XXL text encoder); ``hunyuan_dit`` ~12 GB;
* ``sd35_large`` ~28 GB on the GPU, ~18 GB with model CPU offload (8B MMDiT + T5-XXL);
* ``flux_dev`` / ``flux_schnell`` ~34 GB on the GPU, ~24 GB with model CPU offload (12B).

The three offloaded models fit a 24 GB card with offload; on an 80 GB card pass
``--no-cpu-offload`` to keep them resident (faster). ``sd35_large`` and ``flux_dev`` are gated
on the Hub: accept their licenses and provide a token (``HF_TOKEN`` or ``hf auth login``).

Users add their own generator with :func:`register_generator`: any diffusers pipeline
(``weights=`` a Hub id or a local folder), or a Python callable
``fn(prompt, negative_prompt, generator, **kw) -> PIL.Image`` that also receives the block and
prompt metadata (``block``, ``prompt_info``, ``benchmark``, ``condition``, ``k``, ``seed``,
``steps``, ``guidance``, ``height``, ``width``, ``device``), so models that take coordinates or
images plug in the same way.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from ..errors import GeoFidelityError

DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}
_DTYPE_ALIASES = {
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
}


class GeneratorError(GeoFidelityError, ValueError):
    """A generator is unknown or badly specified; the message names it."""


def normalize_dtype(dtype: str) -> str:
    """``"float16"`` -> ``"fp16"`` (the names recorded in manifests: fp16, bf16, fp32)."""
    try:
        return _DTYPE_ALIASES[str(dtype).lower()]
    except KeyError:
        raise GeneratorError(f"unknown dtype {dtype!r}; expected one of {sorted(DTYPES)}") from None


def torch_dtype(dtype: str):
    import torch

    return getattr(torch, DTYPES[normalize_dtype(dtype)])


@dataclass(frozen=True)
class GeneratorSpec:
    """How one generator makes its images. Exactly one of ``weights``, ``pipeline_factory``,
    ``fn`` or ``setup`` says where the images come from.

    Args:
        key: the name used in folders and manifests (a safe single path component).
        weights: Hub repo id or local folder of a diffusers pipeline.
        pipeline_class: diffusers class name (``None``: ``DiffusionPipeline`` picks it from
            ``model_index.json``).
        steps, guidance: ``num_inference_steps`` and ``guidance_scale``.
        dtype: ``fp16``, ``bf16`` or ``fp32``.
        cpu_offload: use ``enable_model_cpu_offload`` by default (GPU only).
        negative_prompt: whether the pipeline takes a negative prompt (FLUX does not).
        height, width: generation resolution (saved panels are always 512x512).
        call_kwargs: extra pipeline call arguments (FLUX: ``max_sequence_length=256``).
        load_kwargs: extra ``from_pretrained`` arguments (e.g. ``variant="fp16"``).
        revision: Hub revision of the weights.
        pipeline_factory: builds a diffusers-style pipeline in memory (the ``tiny`` model).
        fn: per-image callable ``fn(prompt, negative_prompt, generator, **kw) -> PIL.Image``.
        setup: called once per process as ``setup(device=..., dtype=...)``; returns such a
            callable (load heavy weights once).
        sequential: run the images of a batch one after another. CPU kernels are not
            batch-invariant in the last bits, so the smoke model uses this to make its files
            identical whatever ``--batch-size``.
        cpu_threads: torch threads while generating on a CPU (results of CPU kernels depend
            on the thread count; ``torchrun`` gives each of several processes one thread).
        vram: a human note on GPU memory needs (documentation only).
    """

    key: str
    weights: str | None = None
    pipeline_class: str | None = None
    steps: int = 30
    guidance: float = 5.0
    dtype: str = "fp16"
    cpu_offload: bool = False
    negative_prompt: bool = True
    height: int = 1024
    width: int = 1024
    call_kwargs: Mapping[str, Any] = field(default_factory=dict)
    load_kwargs: Mapping[str, Any] = field(default_factory=dict)
    revision: str | None = None
    pipeline_factory: Callable[[], Any] | None = field(default=None, compare=False)
    fn: Callable[..., Any] | None = field(default=None, compare=False)
    setup: Callable[..., Callable[..., Any]] | None = field(default=None, compare=False)
    sequential: bool = False
    cpu_threads: int | None = None
    vram: str = ""

    def __post_init__(self) -> None:
        from ..benchmark import is_safe_id

        if not is_safe_id(self.key):
            raise GeneratorError(
                f"generator key {self.key!r} must be a single path component of letters, digits, '.', '_' or '-'"
            )
        sources = [n for n in ("weights", "pipeline_factory", "fn", "setup") if getattr(self, n) is not None]
        if len(sources) != 1:
            raise GeneratorError(
                f"generator {self.key!r}: give exactly one of weights, pipeline_factory, fn or setup (got {sources or 'none'})"
            )
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))
        object.__setattr__(self, "call_kwargs", MappingProxyType(dict(self.call_kwargs)))
        object.__setattr__(self, "load_kwargs", MappingProxyType(dict(self.load_kwargs)))
        if int(self.steps) < 1:
            raise GeneratorError(f"generator {self.key!r}: steps must be >= 1, got {self.steps}")
        if int(self.height) < 8 or int(self.width) < 8:
            raise GeneratorError(f"generator {self.key!r}: height and width must be >= 8")

    @property
    def kind(self) -> str:
        """``diffusers``, ``factory`` or ``callable``."""
        if self.weights is not None:
            return "diffusers"
        if self.pipeline_factory is not None:
            return "factory"
        return "callable"

    @property
    def source(self) -> str:
        """What made the images, as recorded in the manifest's ``weights`` column."""
        if self.weights is not None:
            return self.weights
        target = self.pipeline_factory or self.fn or self.setup
        return f"{self.kind}:{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"

    def replace(self, **changes: Any) -> "GeneratorSpec":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


def _tiny_factory():
    from .tiny import build_tiny_pipeline

    return build_tiny_pipeline()


# Recorded as the ``weights`` of the tiny model: name the function that really builds it.
_tiny_factory.__module__, _tiny_factory.__qualname__ = "geofidelity_bench.generation.tiny", "build_tiny_pipeline"


BUILTIN_GENERATORS: Mapping[str, GeneratorSpec] = MappingProxyType(
    {
        spec.key: spec
        for spec in (
            GeneratorSpec(
                "sdxl",
                weights="stabilityai/stable-diffusion-xl-base-1.0",
                pipeline_class="StableDiffusionXLPipeline",
                steps=30,
                guidance=5.0,
                dtype="fp16",
                load_kwargs={"variant": "fp16", "use_safetensors": True},
                vram="~10 GB",
            ),
            GeneratorSpec(
                "sd35_large",
                weights="stabilityai/stable-diffusion-3.5-large",
                pipeline_class="StableDiffusion3Pipeline",
                steps=28,
                guidance=3.5,
                dtype="bf16",
                cpu_offload=True,
                vram="~28 GB resident, ~18 GB with model CPU offload (~27 GB host RAM per process); gated",
            ),
            GeneratorSpec(
                "flux_dev",
                weights="black-forest-labs/FLUX.1-dev",
                pipeline_class="FluxPipeline",
                steps=28,
                guidance=3.5,
                dtype="bf16",
                cpu_offload=True,
                negative_prompt=False,
                call_kwargs={"max_sequence_length": 256},
                vram="~34 GB resident, ~24 GB with model CPU offload (~33 GB host RAM per process); gated",
            ),
            GeneratorSpec(
                "flux_schnell",
                weights="black-forest-labs/FLUX.1-schnell",
                pipeline_class="FluxPipeline",
                steps=4,
                guidance=0.0,
                dtype="bf16",
                cpu_offload=True,
                negative_prompt=False,
                call_kwargs={"max_sequence_length": 256},
                vram="~34 GB resident, ~24 GB with model CPU offload (~33 GB host RAM per process)",
            ),
            GeneratorSpec(
                "pixart_sigma",
                weights="PixArt-alpha/PixArt-Sigma-XL-2-1024-MS",
                pipeline_class="PixArtSigmaPipeline",
                steps=20,
                guidance=4.5,
                dtype="fp16",
                vram="~12 GB",
            ),
            GeneratorSpec(
                "hunyuan_dit",
                weights="Tencent-Hunyuan/HunyuanDiT-Diffusers",
                pipeline_class="HunyuanDiTPipeline",
                steps=50,
                guidance=5.0,
                dtype="fp16",
                vram="~12 GB",
            ),
            GeneratorSpec(
                "tiny",
                pipeline_factory=_tiny_factory,
                pipeline_class="StableDiffusionPipeline",
                steps=2,
                guidance=5.0,
                dtype="fp32",
                height=64,
                width=64,
                sequential=True,
                cpu_threads=1,
                vram="none (CPU, random weights, offline)",
            ),
        )
    }
)

#: The six generators of the paper (docs/benchmark.md section 3, Generation), in table order.
PAPER_GENERATORS = ("sdxl", "sd35_large", "flux_dev", "flux_schnell", "pixart_sigma", "hunyuan_dit")


class GeneratorRegistry:
    """Name -> :class:`GeneratorSpec`; starts with the built-in generators."""

    def __init__(self, specs: Iterable[GeneratorSpec] = ()):
        self._specs: dict[str, GeneratorSpec] = dict(BUILTIN_GENERATORS)
        for spec in specs:
            self.register(spec)

    def register(self, spec: GeneratorSpec, *, overwrite: bool = False) -> GeneratorSpec:
        if not isinstance(spec, GeneratorSpec):
            raise GeneratorError(f"expected a GeneratorSpec, got {type(spec).__name__}")
        if spec.key in self._specs and not overwrite and self._specs[spec.key] is not spec:
            raise GeneratorError(f"generator {spec.key!r} is already registered (pass overwrite=True to replace it)")
        self._specs[spec.key] = spec
        return spec

    def get(self, key: str) -> GeneratorSpec:
        try:
            return self._specs[key]
        except KeyError:
            raise GeneratorError(f"unknown generator {key!r}; registered: {', '.join(sorted(self._specs))}") from None

    def __contains__(self, key: object) -> bool:
        return key in self._specs

    def keys(self) -> list[str]:
        return list(self._specs)


#: The registry the command line and the module-level helpers use.
REGISTRY = GeneratorRegistry()


def register_generator(
    key: str | GeneratorSpec,
    fn: Callable[..., Any] | None = None,
    *,
    overwrite: bool = False,
    registry: GeneratorRegistry | None = None,
    **fields: Any,
) -> GeneratorSpec:
    """Registers a generator under ``key`` and returns its spec.

    Examples:
        A diffusers pipeline from the Hub (or a local folder):

        >>> spec = register_generator("sdxl_turbo_demo", weights="stabilityai/sdxl-turbo",
        ...                           steps=1, guidance=0.0, height=512, width=512,
        ...                           registry=GeneratorRegistry())

        A Python callable (it also receives ``block``, ``prompt_info``, ``benchmark``...):

        >>> from PIL import Image
        >>> def grey(prompt, negative_prompt, generator, **kw):
        ...     return Image.new("RGB", (64, 64), (128, 128, 128))
        >>> register_generator("grey_demo", grey, registry=GeneratorRegistry()).kind
        'callable'
    """
    reg = registry if registry is not None else REGISTRY
    if isinstance(key, GeneratorSpec):
        if fn is not None or fields:
            raise GeneratorError("pass either a GeneratorSpec or a key with fields, not both")
        return reg.register(key, overwrite=overwrite)
    if fn is not None:
        fields["fn"] = fn
    fields.setdefault("dtype", "fp32" if "weights" not in fields else "fp16")
    return reg.register(GeneratorSpec(key, **fields), overwrite=overwrite)


def get_generator(key: str, registry: GeneratorRegistry | None = None) -> GeneratorSpec:
    return (registry if registry is not None else REGISTRY).get(key)


def list_generators(registry: GeneratorRegistry | None = None) -> list[str]:
    return (registry if registry is not None else REGISTRY).keys()


def _load_object(target: str) -> Any:
    """``pkg.module:attr`` or ``path/to/file.py:attr`` -> the object."""
    from ..plugins import load_object

    return load_object(target, what="generator", error=GeneratorError)


def load_plugin(target: str) -> None:
    """Imports a module (``pkg.module``) or file (``path/to/file.py``) that registers generators."""
    if target.endswith(".py"):
        _load_object(f"{target}:__name__")
        return
    try:
        importlib.import_module(target)
    except ImportError as err:
        raise GeneratorError(f"cannot import generator plugin {target!r}: {err}") from err


def _derived_key(text: str) -> str:
    key = re.sub(r"[^A-Za-z0-9._-]+", "_", text.replace("/", "__")).strip("._-")
    return key[:128] or "model"


def resolve_generator(text: str, registry: GeneratorRegistry | None = None) -> GeneratorSpec:
    """Turns a command-line model argument into a spec.

    Accepted forms:

    * ``KEY``: a registered generator (``sdxl``, ``tiny``, ...);
    * ``NAME=diffusers:REPO_OR_FOLDER`` or ``REPO_ID`` (``org/name``, key ``org__name``): any
      diffusers text-to-image pipeline, with default steps 30, guidance 5.0, fp16 at 1024 px
      (change them with the command's ``--steps/--guidance/--dtype/--resolution``);
    * ``NAME=pkg.module:attr`` or ``NAME=path/file.py:attr``: a :class:`GeneratorSpec` or a
      per-image callable (see :func:`register_generator`).
    """
    reg = registry if registry is not None else REGISTRY
    name, eq, target = text.partition("=")
    if not eq:
        if text in reg:
            return reg.get(text)
        if text.startswith("diffusers:"):
            return GeneratorSpec(_derived_key(text[len("diffusers:") :]), weights=text[len("diffusers:") :])
        if text.count("/") == 1 and ":" not in text and not Path(text).exists():
            return GeneratorSpec(_derived_key(text), weights=text)
        raise GeneratorError(
            f"unknown generator {text!r}; registered: {', '.join(reg.keys())}. "
            "Use NAME=diffusers:REPO_ID, NAME=module:callable or NAME=file.py:callable for others."
        )
    if target.startswith("diffusers:"):
        return GeneratorSpec(name, weights=target[len("diffusers:") :])
    if ":" not in target:
        if target in reg:
            return reg.get(target).replace(key=name)
        return GeneratorSpec(name, weights=target)
    obj = _load_object(target)
    if isinstance(obj, GeneratorSpec):
        return obj.replace(key=name)
    if callable(obj):
        return GeneratorSpec(name, fn=obj, dtype="fp32")
    raise GeneratorError(f"{target!r} is neither a GeneratorSpec nor a callable")
