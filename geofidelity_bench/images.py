"""Decoding images safely and hashing their content.

Every component that reads a picture (benchmark validation, encoders, segmenters, the
folder reader of generated panels, the app) goes through :func:`load_image`, so that bad
input is rejected the same way everywhere, with the offending name in the message.
"""

from __future__ import annotations

import hashlib
import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Union

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .errors import GeoFidelityError

ImageSource = Union[Image.Image, str, os.PathLike, bytes, bytearray, np.ndarray]


class ImageDecodeError(GeoFidelityError, ValueError):
    """An image could not be decoded; the message names the image."""


def _describe(source: ImageSource, name: str | None) -> str:
    if name:
        return str(name)
    if isinstance(source, (str, os.PathLike)):
        return str(source)
    return f"<{type(source).__name__}>"


def _to_rgb(img: Image.Image, label: str) -> Image.Image:
    """Converts any PIL mode to 8-bit RGB; alpha is composited on white."""
    if img.mode == "RGB":
        return img
    if img.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        # 16-bit grayscale (PIL opens it as I;16*, older files as I): scaled by the bit depth,
        # 0..65535 -> 0..255, never by the image's own maximum (a dark image stays dark).
        arr = np.asarray(img).astype(np.float64)
        if arr.size and (arr.min() < 0 or arr.max() > 65535):
            raise ImageDecodeError(
                f"image {label} is a 32-bit integer image with values {arr.min():.0f}..{arr.max():.0f}, outside the "
                "16-bit range 0..65535; save it as an 8- or 16-bit image"
            )
        return Image.fromarray(np.round(arr * (255.0 / 65535.0)).astype(np.uint8), mode="L").convert("RGB")
    if img.mode == "F":
        # Floating-point grayscale: the documented range is 0..1 (as for float arrays).
        arr = np.asarray(img, dtype=np.float64)
        if arr.size and not (np.isfinite(arr).all() and arr.min() >= 0.0 and arr.max() <= 1.0):
            raise ImageDecodeError(
                f"image {label} is a floating-point image with values outside 0..1 (or not finite); "
                "floating-point images must hold values in 0..1: save it as an 8- or 16-bit image"
            )
        return Image.fromarray(np.round(arr * 255.0).astype(np.uint8), mode="L").convert("RGB")
    if img.mode == "P" and "transparency" in img.info:
        img = img.convert("RGBA")
    if img.mode in ("RGBA", "LA", "PA", "La", "RGBa"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    try:
        return img.convert("RGB")
    except (ValueError, OSError) as err:
        raise ImageDecodeError(f"cannot convert image {label} from mode {img.mode} to RGB: {err}") from err


def _open(source: ImageSource, label: str, *, draft: bool = False) -> Image.Image:
    """The decoded (loaded) PIL image of ``source``, in its own mode; the first frame of an animation.

    ``draft`` lets JPEG decode at 1/8 scale: every byte is still read and checked, at a fraction
    of the cost (what :func:`check_image` uses).
    """
    if isinstance(source, Image.Image):
        img = source
        try:
            img.load()  # a lazily opened file may still be truncated
        except (OSError, SyntaxError, ValueError) as err:
            raise ImageDecodeError(f"cannot decode image {label}: {err}") from err
        return img
    if isinstance(source, np.ndarray):
        arr = source
        if arr.dtype != np.uint8:
            if np.issubdtype(arr.dtype, np.floating) and arr.size and 0.0 <= arr.min() and arr.max() <= 1.0:
                arr = (arr * 255.0).round().astype(np.uint8)
            else:
                raise ImageDecodeError(f"image array {label} must be uint8 (or float in [0, 1]), got {arr.dtype}")
        if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] not in (1, 3, 4)) or arr.size == 0:
            raise ImageDecodeError(f"image array {label} must be HxW or HxWxC with C in 1/3/4, got shape {arr.shape}")
        if arr.ndim == 3 and arr.shape[2] == 1:
            arr = arr[:, :, 0]
        return Image.fromarray(arr)
    if isinstance(source, (bytes, bytearray)):
        data = bytes(source)
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise ImageDecodeError(f"image file not found: {label}")
        try:
            data = path.read_bytes()
        except OSError as err:
            raise ImageDecodeError(f"cannot read image {label}: {err}") from err
    else:
        raise ImageDecodeError(f"unsupported image input {label}: {type(source).__name__}")
    if not data:
        raise ImageDecodeError(f"image {label} is empty (0 bytes)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
            if draft and img.format == "JPEG":
                img.draft(img.mode, (max(1, img.width // 8), max(1, img.height // 8)))
            img.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        raise ImageDecodeError(f"image {label} is too large to decode safely: {err}") from err
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError) as err:
        raise ImageDecodeError(f"cannot decode image {label}: {err}") from err
    return img


def frame_count(img: Image.Image) -> int:
    """How many frames ``img`` has (1 for a still image; GIF, APNG and WebP may be animated)."""
    return int(getattr(img, "n_frames", 1) or 1)


def load_image(source: ImageSource, name: str | None = None) -> Image.Image:
    """Decodes ``source`` into an RGB PIL image with EXIF orientation applied.

    Args:
        source: a PIL image, a path, encoded bytes, or an HxW / HxWx3 / HxWx4 uint8 array.
        name: how to call the image in error messages (defaults to the path).

    16-bit images are scaled by their bit depth (65535 -> 255), floating-point images from
    0..1 (other values are refused); of an animated image (GIF, APNG, WebP) the first frame is
    used (:func:`check_image` reports which files are animated).

    Raises:
        ImageDecodeError: empty, truncated, undecodable or oversized (decompression bomb)
            input; the message names the image.
    """
    label = _describe(source, name)
    img = _open(source, label)
    try:
        img = ImageOps.exif_transpose(img)
    except Exception as err:  # noqa: BLE001 - a broken EXIF block must not hide the image
        warnings.warn(f"ignoring unreadable EXIF orientation of {label}: {err}", stacklevel=2)
    if img.width < 1 or img.height < 1:
        raise ImageDecodeError(f"image {label} has no pixels ({img.width}x{img.height})")
    return _to_rgb(img, label)


@dataclass(frozen=True)
class ImageCheck:
    """What :func:`check_image` found: ``problem`` (None if the image decodes) and ``frames``."""

    name: str
    problem: str | None
    frames: int


def check_image(source: ImageSource, name: str | None = None) -> ImageCheck:
    """Checks cheaply that ``source`` decodes (JPEG at 1/8 scale), and counts its frames.

    Meant to run over all of a run's files before any model work, so that every bad file is
    reported at once. ``problem`` is the message :func:`load_image` would raise (naming the image).
    """
    label = _describe(source, name)
    try:
        img = _open(source, label, draft=True)
        if img.width < 1 or img.height < 1:
            raise ImageDecodeError(f"image {label} has no pixels ({img.width}x{img.height})")
        if img.mode in ("I", "F"):  # whose values may be out of range
            _to_rgb(img, label)
        return ImageCheck(label, None, frame_count(img))
    except ImageDecodeError as err:
        return ImageCheck(label, str(err), 0)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def content_sha256(source: ImageSource) -> str:
    """Hash identifying an image's content.

    Encoded inputs (paths, bytes) hash their file bytes; in-memory images hash mode, size and
    pixels, so the same pixels give the same key whatever object carries them.
    """
    if isinstance(source, (bytes, bytearray)):
        return sha256_bytes(bytes(source))
    if isinstance(source, (str, os.PathLike)):
        h = hashlib.sha256()
        with open(source, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()
    if isinstance(source, np.ndarray):
        arr = np.ascontiguousarray(source)
        if arr.ndim == 3 and arr.shape[2] == 1:
            arr = np.ascontiguousarray(arr[:, :, 0])
        if arr.dtype == np.uint8 and (arr.ndim == 2 or (arr.ndim == 3 and arr.shape[2] in (3, 4))):
            source = Image.fromarray(arr)
        else:
            # Arrays PIL cannot wrap (float images in [0, 1], ...): hash dtype, shape and raw bytes.
            h = hashlib.sha256()
            h.update(f"ndarray:{arr.dtype.str}:{'x'.join(map(str, arr.shape))}:".encode())
            h.update(arr.tobytes())
            return h.hexdigest()
    if isinstance(source, Image.Image):
        h = hashlib.sha256()
        h.update(f"pil:{source.mode}:{source.size[0]}x{source.size[1]}:".encode())
        h.update(source.tobytes())
        return h.hexdigest()
    raise TypeError(f"cannot hash image of type {type(source).__name__}")
