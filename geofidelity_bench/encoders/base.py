"""The :class:`Encoder` interface and the explicit, recorded image preprocessing.

An encoder turns images into one float32 vector each. Everything that changes those vectors
(weights id and revision, resize, crop, interpolation, normalization, dtype, which output is
taken) lives in ``encoder.config``, a JSON-serializable dict that is written next to every
number computed from the embeddings; ``encoder.config_hash`` keys the embedding cache.

This module imports no torch at import time; backends import it when they are built.
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Sequence

import numpy as np
from PIL import Image

from geofidelity_bench.encoders.devices import (  # noqa: F401  (EncoderOptionError: defined with the device rules)
    FLOAT32_PRECISION_KEY,
    EncoderOptionError,
    model_forward,
)
from geofidelity_bench.errors import GeoFidelityError, ModelUnavailableError, offline_hint
from geofidelity_bench.images import ImageSource, load_image
from geofidelity_bench.prefetch import submits_with

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: Config keys that describe where an encoder runs (the device, the float32 precision, the Pillow
#: version that decodes its images), not what it computes; recorded, but left out of the hash: like a
#: GPU's rounding, another Pillow's JPEG decoder moves the numbers at the level of float noise, and
#: hashing it would make every submission of another Pillow version incomparable (its own group).
_UNHASHED_KEYS = ("device", "float32_precision", "pillow")

_DTYPES = ("float32", "bfloat16", "float16")

_RESAMPLE = {
    "bicubic": Image.Resampling.BICUBIC,
    "bilinear": Image.Resampling.BILINEAR,
    "nearest": Image.Resampling.NEAREST,
    "lanczos": Image.Resampling.LANCZOS,
}

#: crop_rounding -> how the config describes the crop position.
_CROP_ROUNDING = {
    "floor": "center, top-left = ((w - crop) // 2, (h - crop) // 2)",
    "round": "center, top-left = (int(round((w - crop) / 2)), int(round((h - crop) / 2))), round half to even "
    "(torchvision CenterCrop)",
}


class EncoderUnavailableError(ModelUnavailableError):
    """An encoder's weights (or its package) cannot be had; the message says how to run offline."""


#: How to run an encoder without the Hub (the one wording of :func:`geofidelity_bench.errors.offline_hint`).
OFFLINE_HINT = offline_hint(
    flag="--encoder-weights",
    python_arg="weights=",
    alternative="Or use the offline encoder 'efficientnet-lite0', whose weights ship inside a pip package.",
)


@dataclass(frozen=True)
class Preprocessing:
    """Image preprocessing, done with PIL and numpy so that it is exactly what is recorded.

    Steps, in order: decode to RGB with EXIF orientation (:func:`~geofidelity_bench.images.load_image`);
    resize; center crop; scale to [0, 1] (``/ 255``); ``(x - mean) / std`` per channel, in float32.

    Attributes:
        resize: target of the resize step; an int is the shorter side (``resize_mode="shorter_side"``),
            a ``(height, width)`` pair is the exact output size (``resize_mode="exact"``).
        resize_mode: ``"shorter_side"`` keeps the aspect ratio, the longer side becomes
            ``int(resize * long / short)`` (torchvision's rounding); ``"exact"`` ignores aspect.
        crop: side of the square center crop, or ``None``; the crop's top-left corner is
            :meth:`crop_offsets`.
        crop_rounding: where an odd margin puts the crop: ``"floor"`` (``(w - crop) // 2``, as the
            Hugging Face image processors' ``center_crop``) or ``"round"`` (``int(round((w - crop) / 2))``,
            Python's round half to even, as torchvision's ``CenterCrop``). ``"round"`` is recorded in
            the config as the key ``crop_rounding``; ``"floor"`` adds no key, so the configs (and
            cache keys) of the encoders that always cropped that way stay as they were.
        interpolation: PIL resampling filter name (PIL's filters antialias when downscaling).
        mean, std: per-channel normalization applied after scaling to [0, 1].
    """

    resize: int | tuple[int, int]
    crop: int | None
    interpolation: str = "bicubic"
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    resize_mode: str = "shorter_side"
    crop_rounding: str = "floor"

    def __post_init__(self) -> None:
        if self.crop_rounding not in _CROP_ROUNDING:
            raise ValueError(f"unknown crop_rounding {self.crop_rounding!r}; one of {sorted(_CROP_ROUNDING)}")
        if self.interpolation not in _RESAMPLE:
            raise ValueError(f"unknown interpolation {self.interpolation!r}; one of {sorted(_RESAMPLE)}")
        if self.resize_mode not in ("shorter_side", "exact"):
            raise ValueError(f"unknown resize_mode {self.resize_mode!r}")
        if self.resize_mode == "shorter_side" and self.crop is not None and int(self.resize) < self.crop:
            raise ValueError(f"resize {self.resize} is smaller than crop {self.crop}")

    @property
    def output_size(self) -> tuple[int, int]:
        """(height, width) of the tensor fed to the model."""
        if self.crop is not None:
            return (self.crop, self.crop)
        if self.resize_mode == "exact":
            h, w = self.resize  # type: ignore[misc]
            return (int(h), int(w))
        raise ValueError("shorter-side resize without a crop has no fixed output size")

    def resized_size(self, width: int, height: int) -> tuple[int, int]:
        """(width, height) after the resize step."""
        if self.resize_mode == "exact":
            h, w = self.resize  # type: ignore[misc]
            return (int(w), int(h))
        target = int(self.resize)  # type: ignore[arg-type]
        if width <= height:
            return (target, max(1, int(target * height / width)))
        return (max(1, int(target * width / height)), target)

    def crop_offsets(self, width: int, height: int) -> tuple[int, int]:
        """(left, top) of the center crop in a ``width`` x ``height`` image (after the resize)."""
        if self.crop is None:
            return (0, 0)
        if self.crop_rounding == "round":  # torchvision CenterCrop: int(round(...)), half to even
            return (int(round((width - self.crop) / 2.0)), int(round((height - self.crop) / 2.0)))
        return ((width - self.crop) // 2, (height - self.crop) // 2)

    def to_pil(self, image: Image.Image) -> Image.Image:
        """Resize and crop an RGB image (the geometric part, before normalization)."""
        size = self.resized_size(*image.size)
        if size != image.size:
            image = image.resize(size, resample=_RESAMPLE[self.interpolation])
        if self.crop is not None:
            left, top = self.crop_offsets(*image.size)
            image = image.crop((left, top, left + self.crop, top + self.crop))
        return image

    def __call__(self, image: Image.Image) -> np.ndarray:
        """RGB PIL image -> float32 array (3, H, W), normalized."""
        arr = np.asarray(self.to_pil(image), dtype=np.float32) / np.float32(255.0)
        arr = (arr - np.asarray(self.mean, dtype=np.float32)) / np.asarray(self.std, dtype=np.float32)
        return np.ascontiguousarray(arr.transpose(2, 0, 1), dtype=np.float32)

    def to_config(self) -> dict[str, Any]:
        d = asdict(self)
        d["resize"] = list(self.resize) if isinstance(self.resize, tuple) else int(self.resize)
        d["mean"] = [float(v) for v in self.mean]
        d["std"] = [float(v) for v in self.std]
        d["rescale"] = "1/255"
        d["crop_position"] = _CROP_ROUNDING[self.crop_rounding] if self.crop else None
        if self.crop_rounding == "floor":
            del d["crop_rounding"]  # the configs written before the option existed
        d["library"] = "PIL.Image.resize + numpy (float32)"
        d["channel_order"] = "RGB"
        return d


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def hash_config(config: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of ``config`` without the keys that only say where it ran."""
    kept = {k: v for k, v in config.items() if k not in _UNHASHED_KEYS}
    return hashlib.sha256(canonical_json(kept).encode("utf-8")).hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


class NonFiniteEmbeddingError(GeoFidelityError, ValueError):
    """An embedding that is NaN or infinite; the message names the image."""


def check_finite_rows(rows: np.ndarray, names: Sequence[str]) -> None:
    """Raises NonFiniteEmbeddingError naming the first image whose row is not finite (and how many are)."""
    bad = np.flatnonzero(~np.isfinite(np.asarray(rows, dtype=np.float64)).all(axis=1))
    if bad.size:
        more = f" (and {bad.size - 1} more image(s))" if bad.size > 1 else ""
        raise NonFiniteEmbeddingError(
            f"the embedding of {names[bad[0]]} is not finite (NaN or inf){more}; nothing was written. "
            "Check the image and the encoder (e.g. --dtype float32)"
        )


def resolve_device(device: Any | None) -> str:
    """The device a model is built on: under a launcher ``None``/``cuda`` is this process's own GPU,
    CUDA without a visible GPU is an :class:`EncoderOptionError` (see
    :func:`geofidelity_bench.encoders.devices.pick_device`)."""
    from geofidelity_bench.encoders.devices import this_process_device

    return this_process_device(device)


def resolve_dtype(dtype: Any, device: str):
    """Returns (name, torch.dtype); half precision is accepted on GPU only."""
    import torch

    name = str(dtype).replace("torch.", "")
    aliases = {"fp32": "float32", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
    name = aliases.get(name, name)
    if name not in _DTYPES:
        raise EncoderOptionError(f"unsupported dtype {dtype!r}; one of {list(_DTYPES)}")
    if name != "float32" and not device.startswith("cuda"):
        raise EncoderOptionError(f"dtype {name} is supported on GPU only; on {device} use dtype='float32'")
    return name, getattr(torch, name)


class DeviceTransfers:
    """Every copy between the host and ``device`` of the batch pipelines (encoders, segmenters, MFP).

    * :meth:`host_array` / :meth:`host_tensor` run in the worker threads that prepare the images. For
      a CUDA device they copy the prepared input once into page-locked ("pinned") host memory, so
      that its copy to the device can be asynchronous; on any other device they return the input
      itself (no copy).
    * :meth:`send` (the model's thread) makes one batch on the device of those inputs, as the workers
      left them: each is copied to the device (non-blocking from pinned memory) and the batch is
      stacked there, so the host makes no second copy of a batch bound for a GPU. On the CPU the
      stack is the one copy that makes the batch (as ``np.stack`` did).
    * :meth:`fetch`, once the forward is queued, starts copying the results back into pinned host
      memory and returns a :class:`~geofidelity_bench.prefetch.Pending` whose ``result()`` waits for
      that copy only (a CUDA event recorded after it): the host synchronises where it reads. It keeps
      the batch's host inputs alive until then.

    The numbers are those of a plain ``.to(device)`` and ``.cpu()``.
    """

    def __init__(self, device: Any) -> None:
        self.device = str(device)
        #: whether prepared inputs are copied into page-locked host memory (a CUDA device only)
        self.pinned = self.device.startswith("cuda")

    def host_array(self, array: np.ndarray) -> np.ndarray:
        """(A worker thread.) ``array`` where :meth:`send` will copy it from: for CUDA a page-locked
        copy (an ndarray over pinned memory), else ``array`` itself."""
        if not self.pinned:
            return array
        import torch

        return torch.from_numpy(np.ascontiguousarray(array)).pin_memory().numpy()

    def host_tensor(self, tensor):
        """(A worker thread.) A CPU tensor where :meth:`send` will copy it from: for CUDA a page-locked
        copy, else ``tensor`` itself."""
        return tensor.pin_memory() if self.pinned else tensor

    def send(self, items: Sequence[Any], dtype=None):
        """(The model's thread.) The batch of ``items`` (arrays or CPU tensors of one shape, from
        :meth:`host_array` / :meth:`host_tensor`) on the device, stacked along a new first dimension,
        in ``dtype`` (default: theirs)."""
        import torch

        tensors = [torch.from_numpy(x) if isinstance(x, np.ndarray) else x for x in items]
        batch = torch.stack([t.to(self.device, non_blocking=self.pinned) for t in tensors])
        return batch if dtype is None or batch.dtype == dtype else batch.to(dtype)

    def fetch(self, tensors: Sequence[Any], *, keep: Any = None, then: Any = None):
        """(The model's thread, after the forward is queued.) A Pending of ``tensors`` on the host (a
        list), or of ``then(that list)``: the copies back start now, ``result()`` waits for them."""
        from geofidelity_bench.prefetch import Pending

        tensors = list(tensors)
        finish = then if then is not None else (lambda hosts: hosts)
        cuda = [t for t in tensors if t.device.type == "cuda"]
        if not cuda:
            def read_here():
                nonlocal keep
                keep = None
                return finish([t.cpu() for t in tensors])

            return Pending(read_here)
        import torch

        hosts = []
        for t in tensors:
            host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            host.copy_(t, non_blocking=True)
            hosts.append(host)
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(cuda[0].device))

        def read_after_copy():
            nonlocal keep
            done.synchronize()  # this batch's work and copies only: later batches may still run
            keep = None  # the pinned inputs: their copies to the device are done
            return finish(hosts)

        return Pending(read_after_copy)


def _is_single_image(images: Any) -> bool:
    if isinstance(images, (str, bytes, bytearray, os.PathLike, Image.Image)):
        return True
    return isinstance(images, np.ndarray) and images.ndim in (2, 3)


def as_image_list(images: Any) -> list[ImageSource]:
    """A list of image sources; a single image becomes a list of one, an (N, H, W[, C]) array N images."""
    if _is_single_image(images):
        return [images]
    if isinstance(images, np.ndarray):
        return list(images)
    return list(images)


def default_names(images: Sequence[ImageSource]) -> list[str]:
    return [str(s) if isinstance(s, (str, os.PathLike)) else f"image[{i}]" for i, s in enumerate(images)]


class RecordedConfig:
    """The identity of a model-backed component: ``config`` (a deep, JSON-clean copy of
    ``self._config`` plus the device, the float32 precision and the Pillow version that decodes its
    images, all three recorded but left out of the hash) and
    ``config_hash`` (the cache key part). Shared by encoders, segmenters and the MFP extractor.

    ``config["float32_precision"]`` is what torch had in force during the component's last float32
    forward in this process, as read from torch (:func:`~geofidelity_bench.encoders.devices.exact_float32`),
    or None when none ran here (every row came from a cache, or the model is not float32).
    """

    _config: dict[str, Any]
    device: str
    #: set by each float32 forward: the precision settings read from torch inside it.
    _float32_in_force: dict[str, Any] | None = None

    def _recorded(self) -> dict[str, Any]:
        """The config that is hashed (a component whose dtype can change overrides this)."""
        return self._config

    def _forward_context(self, float32: bool):
        """The context of one forward on ``self.device`` (no caller autocast; IEEE float32 for a
        float32 model), recording the float32 settings in force inside it."""
        return _RecordingForward(self, float32)

    @property
    def config(self) -> dict[str, Any]:
        import PIL

        cfg = json.loads(canonical_json(self._recorded()))
        cfg["device"] = self.device
        cfg["pillow"] = PIL.__version__
        cfg[FLOAT32_PRECISION_KEY] = None if self._float32_in_force is None else dict(self._float32_in_force)
        return cfg

    @property
    def config_hash(self) -> str:
        return hash_config(self._recorded())


class _RecordingForward:
    """:func:`~geofidelity_bench.encoders.devices.model_forward` that keeps what it read in the component."""

    def __init__(self, owner: RecordedConfig, float32: bool) -> None:
        self._owner, self._float32 = owner, float32
        self._cm: Any = None

    def __enter__(self) -> dict[str, Any]:
        self._cm = model_forward(self._owner.device, self._float32)
        seen = self._cm.__enter__()
        if self._float32:
            self._owner._float32_in_force = dict(seen)
        return seen

    def __exit__(self, *exc: Any) -> Any:
        return self._cm.__exit__(*exc)


class Encoder(RecordedConfig, abc.ABC):
    """Images in, one float32 vector per image out.

    Attributes:
        name: the registry name (``"dinov2-base"``).
        dim: embedding dimension.
        config: JSON-serializable description of everything that determines the embeddings
            (encoder, weights, revision, preprocessing, dtype, output) plus the device.
        preprocessing: the :class:`Preprocessing` applied to every image.
        model: the ``torch.nn.Module`` called once per batch of images.
        device: torch device string.
    """

    name: str
    dim: int
    preprocessing: Preprocessing
    device: str
    model: Any
    #: whether ``embed_text`` / ``zero_shot_probs`` exist.
    supports_text: bool = False

    def __init__(self) -> None:
        self._config: dict[str, Any] = {}

    # -- identity ---------------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dim={self.dim}, device={self.device!r}, config_hash={self.config_hash[:12]})"

    # -- computation ------------------------------------------------------------------------
    @abc.abstractmethod
    def _forward(self, pixel_values):
        """(B, 3, H, W) float tensor on ``self.device`` -> (B, dim) tensor."""

    def to(self, device: Any) -> "Encoder":
        """Moves the model to ``device`` (half precision stays GPU-only)."""
        dev = resolve_device(device)
        if self._config.get("dtype", "float32") != "float32" and not dev.startswith("cuda"):
            raise EncoderOptionError(f"dtype {self._config['dtype']} is supported on GPU only")
        self.model.to(dev)
        self.device = dev
        return self

    def preprocess(self, image: ImageSource, name: str | None = None) -> np.ndarray:
        """Decodes one image and returns the normalized float32 (3, H, W) array fed to the model. For
        a CUDA encoder the array lies in page-locked host memory, copied there by the thread that
        prepares the image (:meth:`DeviceTransfers.host_array`), so that the batch's copy to the GPU is
        asynchronous and the host copies it once."""
        return DeviceTransfers(self.device).host_array(self.preprocessing(load_image(image, name=name)))

    @submits_with("submit_arrays")
    def embed_arrays(self, arrays: Sequence[np.ndarray]) -> np.ndarray:
        """Runs the model on already preprocessed (3, H, W) arrays (one forward call)."""
        return self.submit_arrays(arrays).result()

    def submit_arrays(self, arrays: Sequence[np.ndarray]):
        """:meth:`embed_arrays` without the wait: queues the batch (copy to the device, forward, start
        of the copy back) and returns a :class:`~geofidelity_bench.prefetch.Pending` whose
        ``result()`` is the float32 (n, dim) array."""
        import torch

        from geofidelity_bench.prefetch import Pending

        if len(arrays) == 0:
            return Pending.ready(np.zeros((0, self.dim), dtype=np.float32))
        dtype = next(self.model.parameters()).dtype
        configured = self._config.get("dtype", "float32")
        if str(dtype).replace("torch.", "") != configured:
            raise EncoderOptionError(
                f"encoder {self.name!r}: its model's parameters are {str(dtype).replace('torch.', '')} but its "
                f"config (and cache key) says {configured}; build the encoder with that dtype "
                "(get_encoder(..., dtype=...)) instead of converting its model")
        transfers = DeviceTransfers(self.device)
        batch = transfers.send(arrays, dtype)
        with torch.inference_mode(), self._forward_context(dtype == torch.float32):
            out = self._forward(batch).float()
        return transfers.fetch([out], keep=arrays,
                               then=lambda hosts: hosts[0].numpy().astype(np.float32, copy=False))

    def embed(
        self,
        images: Iterable[ImageSource] | ImageSource,
        *,
        batch_size: int = 32,
        progress: bool | None = None,
        names: Sequence[str] | None = None,
        num_workers: int | None = None,
    ) -> np.ndarray:
        """Embeds images (PIL images, paths, encoded bytes or uint8 arrays), no cache.

        Args:
            images: a sequence of images (a single image is treated as a list of one).
            batch_size: images per forward call; it does not change the result beyond float noise.
            progress: show a tqdm bar; ``None`` shows it for runs of more than 4 batches.
            names: how to call each image in error messages (default: the path, or ``image[i]``).
            num_workers: threads preprocessing images ahead of the model (default: the cores this
                process may use; 0: in the calling thread); it does not change the embeddings.

        Returns:
            float32 array (n, dim), raw (not normalized).

        Raises:
            ImageDecodeError: for an image that cannot be decoded; the message names it.
        """
        from contextlib import closing

        from tqdm.auto import tqdm

        from geofidelity_bench.prefetch import Pending, ordered_map, prefetch_items, resolve_num_workers, submitter_of

        items = as_image_list(images)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        labels = list(names) if names is not None else default_names(items)
        if len(labels) != len(items):
            raise ValueError(f"got {len(labels)} names for {len(items)} images")
        if progress is None:
            progress = len(items) > 4 * batch_size
        workers = resolve_num_workers(num_workers)
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        prepared = ordered_map(lambda i: self.preprocess(items[i], labels[i]), range(len(items)),
                               num_workers=workers, ahead=prefetch_items(workers, batch_size))
        submit = submitter_of(self.embed_arrays) or (lambda arrays: Pending.ready(self.embed_arrays(arrays)))
        in_flight = None  # (start, stop, pending) of the batch submitted last, read after the next is submitted

        def read(start: int, stop: int, pending) -> None:
            out[start:stop] = pending.result()
            bar.update(stop - start)

        with closing(prepared), \
                tqdm(total=len(items), desc=f"embedding ({self.name})", unit="img", disable=not progress) as bar:
            for start in range(0, len(items), batch_size):
                stop = min(start + batch_size, len(items))
                arrays = [next(prepared) for _ in range(start, stop)]
                submitted = (start, stop, submit(arrays))
                if in_flight is not None:
                    read(*in_flight)
                in_flight = submitted
            if in_flight is not None:
                read(*in_flight)
        return out


class TextImageEncoder(Encoder):
    """An encoder with a text tower sharing the image embedding space (CLIP, SigLIP)."""

    supports_text = True

    @abc.abstractmethod
    def embed_text(self, texts: Sequence[str] | str, *, batch_size: int = 64) -> np.ndarray:
        """Texts -> float32 (n, dim) raw text embeddings."""

    @abc.abstractmethod
    def _logit_scale_bias(self) -> tuple[float, float]:
        """(scale, bias) such that logits = scale * cosine + bias."""

    def zero_shot_probs(
        self,
        images: Iterable[ImageSource] | ImageSource,
        texts: Sequence[str],
        *,
        batch_size: int = 32,
        image_embeddings: np.ndarray | None = None,
    ) -> np.ndarray:
        """Softmax over ``texts`` of ``scale * cos(image, text) + bias`` for every image.

        Args:
            images: the images (ignored when ``image_embeddings`` is given).
            texts: candidate descriptions (at least one).
            image_embeddings: precomputed raw image embeddings (e.g. from the cache).

        Returns:
            float32 (n_images, n_texts); rows sum to 1.
        """
        texts = [texts] if isinstance(texts, str) else list(texts)
        if not texts:
            raise ValueError("zero_shot_probs needs at least one text")
        img = image_embeddings if image_embeddings is not None else self.embed(images, batch_size=batch_size)
        img = np.asarray(img, dtype=np.float64)
        txt = self.embed_text(texts).astype(np.float64)
        img = img / np.maximum(np.linalg.norm(img, axis=1, keepdims=True), 1e-12)
        txt = txt / np.maximum(np.linalg.norm(txt, axis=1, keepdims=True), 1e-12)
        scale, bias = self._logit_scale_bias()
        logits = scale * img @ txt.T + bias
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        return probs.astype(np.float32)
