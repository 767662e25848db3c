"""Turning a :class:`GeneratorSpec` into something that makes images on one device.

Whatever the kind of generator, :meth:`LoadedGenerator.generate` takes a batch of
:class:`ImageRequest` and returns one PIL image per request, in order. Each request brings its
own seed; a fresh ``torch.Generator`` is made from it for every call, so an image never depends
on the other images of its batch (up to the kernels' rounding, see ``GeneratorSpec.sequential``).
"""

from __future__ import annotations

import abc
import contextlib
import gc
import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from ..extras import require
from .registry import GeneratorError, GeneratorSpec, torch_dtype
from .seeds import torch_generator

if TYPE_CHECKING:
    from PIL import Image

    from ..benchmark import Benchmark, Block
    from ..prompts import Prompt


@dataclass(frozen=True)
class ImageRequest:
    """One image to make: what the generator needs, and the metadata a custom model may use."""

    model: str
    block_id: str
    condition: str
    k: int
    seed: int
    prompt: str
    negative_prompt: str | None
    block: "Block | None" = field(default=None, compare=False, repr=False)
    prompt_info: "Prompt | None" = field(default=None, compare=False, repr=False)


#: transformers' logger of its import machinery, and the one message of it that loading a pipeline
#: without torchvision triggers (an image processor falling back to its PIL version: harmless here).
_TRANSFORMERS_IMPORT_LOGGER = "transformers.utils.import_utils"
_TORCHVISION_FALLBACK = "requires torchvision (not installed); falling back to"


def _not_torchvision_fallback(record) -> bool:
    return _TORCHVISION_FALLBACK not in record.getMessage()


@contextlib.contextmanager
def quiet_torchvision_fallback() -> Any:
    """Drops transformers' "requires torchvision ... falling back to ...Pil" warnings, and only those."""
    import logging

    logger = logging.getLogger(_TRANSFORMERS_IMPORT_LOGGER)
    logger.addFilter(_not_torchvision_fallback)
    try:
        yield
    finally:
        logger.removeFilter(_not_torchvision_fallback)


@contextlib.contextmanager
def _torch_threads(n: int | None, device) -> Any:
    import torch

    if n is None or getattr(device, "type", str(device)) != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _as_rgb(image: Any, label: str) -> "Image.Image":
    from ..images import load_image

    return load_image(image, name=label)


class LoadedGenerator(abc.ABC):
    """Base class: a generator ready on one device."""

    def __init__(self, spec: GeneratorSpec, device: Any, dtype: str, cpu_offload: bool):
        self.spec = spec
        self.device = device
        self.dtype = dtype
        self.cpu_offload = cpu_offload

    @abc.abstractmethod
    def generate(self, requests: Sequence[ImageRequest]) -> list["Image.Image"]:
        """One image per request, in order (each request carries its own seeded generator)."""

    def close(self) -> None:
        """Frees the model (and the accelerator's cached memory)."""
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - freeing memory must never fail a run
            pass


class DiffusersGenerator(LoadedGenerator):
    """A diffusers text-to-image pipeline (from the Hub, a folder, or an in-memory factory)."""

    def __init__(self, spec: GeneratorSpec, device: Any, dtype: str, cpu_offload: bool, pipeline: Any = None,
                 batch_size: int = 1):
        super().__init__(spec, device, dtype, cpu_offload)
        if pipeline is None:
            with quiet_torchvision_fallback():
                pipeline = self._load()
        elif self._offloads():  # a pipeline built by the caller: offloaded here as a loaded one would be
            pipeline = self._place(pipeline)
        self.pipe = pipeline
        if hasattr(self.pipe, "set_progress_bar_config"):
            self.pipe.set_progress_bar_config(disable=True)
        self.vae_slicing = batch_size > 1 and enable_vae_slicing(self.pipe)

    def _load(self) -> Any:
        import torch

        tdtype = torch_dtype(self.dtype)
        if self.spec.kind == "factory":
            pipe = self.spec.pipeline_factory()
            if getattr(pipe, "dtype", tdtype) != tdtype:
                pipe.to(dtype=tdtype)
            return self._place(pipe)
        diffusers = require("diffusers", "gen", "generating images")

        cls_name = self.spec.pipeline_class or "DiffusionPipeline"
        cls = getattr(diffusers, cls_name, None)
        if cls is None:
            raise GeneratorError(f"generator {self.spec.key!r}: diffusers {diffusers.__version__} has no {cls_name}")
        pipe = cls.from_pretrained(
            self.spec.weights, torch_dtype=tdtype, revision=self.spec.revision, **dict(self.spec.load_kwargs)
        )
        return self._place(pipe)

    def _offloads(self) -> bool:
        """Whether the pipeline runs with model CPU offload: asked for, on a CUDA device."""
        return bool(self.cpu_offload) and _device_of(self.device).type == "cuda"

    def _place(self, pipe: Any) -> Any:
        """``pipe`` on the device, or with model CPU offload to it (a Hub, folder or factory pipeline
        alike); a pipeline that cannot offload is refused in one line."""
        device = _device_of(self.device)
        if not self._offloads():
            pipe.to(device)
            return pipe
        if not callable(getattr(pipe, "enable_model_cpu_offload", None)):
            raise GeneratorError(
                f"generator {self.spec.key!r}: its pipeline ({type(pipe).__name__}) has no enable_model_cpu_offload, "
                "so CPU offload cannot be honoured; run without --cpu-offload (cpu_offload=False), or build a "
                "diffusers pipeline")
        require("accelerate", "gen", "--cpu-offload")
        pipe.enable_model_cpu_offload(device=device)
        return pipe

    def _call(self, requests: Sequence[ImageRequest]) -> list[Any]:
        import torch

        spec = self.spec
        kwargs: dict[str, Any] = dict(
            prompt=[r.prompt for r in requests],
            generator=[torch_generator(r.seed) for r in requests],
            num_inference_steps=int(spec.steps),
            guidance_scale=float(spec.guidance),
            height=int(spec.height),
            width=int(spec.width),
            num_images_per_prompt=1,
        )
        if spec.negative_prompt:
            kwargs["negative_prompt"] = [r.negative_prompt or "" for r in requests]
        kwargs.update(spec.call_kwargs)
        with torch.inference_mode():
            out = self.pipe(**kwargs)
        images = out.images if hasattr(out, "images") else out[0]
        if len(images) != len(requests):
            raise GeneratorError(f"generator {spec.key!r} returned {len(images)} images for {len(requests)} prompts")
        return list(images)

    def generate(self, requests: Sequence[ImageRequest]) -> list["Image.Image"]:
        with _torch_threads(self.spec.cpu_threads, _device_of(self.device)):
            if self.spec.sequential:
                images = [img for r in requests for img in self._call([r])]
            else:
                images = self._call(requests)
        return [_as_rgb(img, f"{r.model}/{r.condition}/{r.block_id}/{r.k:02d}") for img, r in zip(images, requests)]

    def close(self) -> None:
        self.pipe = None
        super().close()


def enable_vae_slicing(pipe: Any) -> bool:
    """Decodes a batch's latents through the VAE one image at a time (SDXL's fp32 VAE on a batch of
    1024 px latents otherwise needs several GB at once); True when the pipeline has such a VAE."""
    vae = getattr(pipe, "vae", None)
    if vae is None or not hasattr(vae, "enable_slicing"):
        return False
    vae.enable_slicing()
    return True


class CallableGenerator(LoadedGenerator):
    """A Python callable ``fn(prompt, negative_prompt, generator, **kw) -> image``."""

    def __init__(self, spec: GeneratorSpec, device: Any, dtype: str, cpu_offload: bool, benchmark: Any = None):
        super().__init__(spec, device, dtype, cpu_offload)
        self.benchmark = benchmark
        if spec.setup is not None:
            self.fn = spec.setup(device=device, dtype=dtype)
            if not callable(self.fn):
                raise GeneratorError(f"generator {spec.key!r}: setup() must return a callable")
        else:
            self.fn = spec.fn
        self._accepts = _accepted_kwargs(self.fn)

    def generate(self, requests: Sequence[ImageRequest]) -> list["Image.Image"]:
        spec = self.spec
        images = []
        with _torch_threads(spec.cpu_threads, _device_of(self.device)):
            for r in requests:
                extra = {
                    "block": r.block,
                    "prompt_info": r.prompt_info,
                    "benchmark": self.benchmark,
                    "model": r.model,
                    "block_id": r.block_id,
                    "condition": r.condition,
                    "k": r.k,
                    "seed": r.seed,
                    "steps": int(spec.steps),
                    "guidance": float(spec.guidance),
                    "height": int(spec.height),
                    "width": int(spec.width),
                    "device": self.device,
                    "dtype": self.dtype,
                }
                if self._accepts is not None:
                    extra = {k: v for k, v in extra.items() if k in self._accepts}
                negative = r.negative_prompt if spec.negative_prompt else None
                image = self.fn(r.prompt, negative, torch_generator(r.seed), **extra)
                images.append(_as_rgb(image, f"{r.model}/{r.condition}/{r.block_id}/{r.k:02d}"))
        return images


def _accepted_kwargs(fn: Any) -> set[str] | None:
    """Names of keyword arguments ``fn`` takes, or ``None`` when it takes ``**kw``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)}


def _device_of(device: Any):
    import torch

    return torch.device(device) if not isinstance(device, torch.device) else device


def cpu_offload_refusal(spec: GeneratorSpec, device: Any, cpu_offload: bool | None) -> str | None:
    """Why an explicit ``cpu_offload=True`` (``--cpu-offload``) cannot be honoured for ``spec`` on
    ``device`` (one line naming the generator and what to do), or None: model CPU offload moves a
    diffusers pipeline's parts to a GPU as they run, so it needs a CUDA device and a pipeline. A
    model's default (``cpu_offload=None``) is never refused."""
    if not cpu_offload:
        return None
    if spec.kind == "callable":
        return (f"generator {spec.key!r} is a Python callable, which --cpu-offload cannot offload (it applies to "
                "diffusers pipelines); run it without --cpu-offload (offload inside the callable if it needs to)")
    where = _device_of(device)
    if where.type != "cuda":
        return (f"generator {spec.key!r}: --cpu-offload needs a CUDA device (it keeps the weights in host memory "
                f"and moves each part to the GPU as it runs), but it would run on {where}; run without "
                "--cpu-offload, or on a GPU (--device cuda)")
    return None


def load_generator(
    spec: GeneratorSpec,
    *,
    device: Any = "cpu",
    dtype: str | None = None,
    cpu_offload: bool | None = None,
    benchmark: "Benchmark | None" = None,
    pipeline: Any = None,
    batch_size: int = 1,
) -> LoadedGenerator:
    """Builds the generator of ``spec`` on ``device``.

    Args:
        spec: what to load.
        device: a torch device (``cuda:1``, ``cpu``); pipelines with ``cpu_offload`` keep their
            weights on the CPU and move each component to this GPU when it runs.
        dtype: override of ``spec.dtype``.
        cpu_offload: override of ``spec.cpu_offload``. Model CPU offload (``enable_model_cpu_offload``)
            applies to diffusers pipelines on a CUDA device: Hub, folder and in-memory (factory)
            pipelines alike. A model's own default is ignored on another device; an explicit True
            that cannot be honoured (see :func:`cpu_offload_refusal`, or a factory pipeline without
            ``enable_model_cpu_offload``) is a :class:`GeneratorError`, never ignored.
        benchmark: handed to callables as ``benchmark=``.
        pipeline: an already built pipeline to use instead of loading one.
        batch_size: prompts per call; above 1 a diffusers pipeline's VAE decodes with slicing.
    """
    dtype = dtype or spec.dtype
    if refusal := cpu_offload_refusal(spec, device, cpu_offload):
        raise GeneratorError(refusal)
    offload = spec.cpu_offload if cpu_offload is None else bool(cpu_offload)
    if spec.kind == "callable":
        return CallableGenerator(spec, device, dtype, offload, benchmark=benchmark)
    return DiffusersGenerator(spec, device, dtype, offload, pipeline=pipeline, batch_size=batch_size)
