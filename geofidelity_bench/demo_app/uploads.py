"""Checking what visitors upload: generated images and results tables.

The app never opens a path a client typed: Gradio stores every upload in its own upload
folder and hands the app that file's path; :func:`read_uploaded_images` still refuses any path
that does not resolve inside that folder (a second line of defence, e.g. when the Blocks are
mounted in another server). Images are accepted by DECODING them with
:func:`geofidelity_bench.images.load_image`, never by their file name.
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from PIL import Image

from ..errors import GeoFidelityError
from ..images import ImageDecodeError, frame_count, load_image

MIN_IMAGES = 2
MAX_IMAGES = 16
MAX_IMAGE_BYTES = 10 * 1024 * 1024
MAX_PIXELS = 40_000_000
MAX_RESULTS_BYTES = 20 * 1024 * 1024


class UploadError(GeoFidelityError, ValueError):
    """An upload was refused; the message is meant for the visitor."""


@dataclass(frozen=True)
class UploadedImage:
    name: str  # the file's own name (for messages; never used as a path)
    image: Image.Image  # decoded RGB (of an animated file: its first frame)
    frames: int = 1  # > 1 for an animated GIF / APNG / WebP


class RecentUploads:
    """The bytes of the uploads read in the last ``ttl`` seconds, by their path in the upload folder.

    Gradio stores an upload under the hash of its content and its name, so identical uploads of two
    visitors share one path, and the first request to read it deletes it (uploads are not kept). A
    request that finds its path gone takes the bytes read there instead: the same path holds the same
    content, and each request decodes its own copy. Bounded (``max_bytes``, oldest dropped first) and
    held in memory only; one per app (:func:`geofidelity_bench.demo_app.build_app`).
    """

    def __init__(self, ttl: float = 900.0, max_bytes: int = 16 * MAX_IMAGE_BYTES):
        import threading
        from collections import OrderedDict

        self.ttl, self.max_bytes = ttl, max_bytes
        self._items: "OrderedDict[Path, tuple[float, bytes]]" = OrderedDict()
        self._lock = threading.Lock()

    def _expire(self, now: float) -> None:
        total = sum(len(d) for _, d in self._items.values())
        while self._items:
            path, (when, data) = next(iter(self._items.items()))
            if now - when <= self.ttl and total <= self.max_bytes:
                break
            del self._items[path]
            total -= len(data)

    def put(self, path: Path, data: bytes) -> None:
        import time

        with self._lock:
            self._items.pop(path, None)
            self._items[path] = (time.monotonic(), data)
            self._expire(time.monotonic())

    def get(self, path: Path) -> bytes | None:
        import time

        with self._lock:
            self._expire(time.monotonic())
            item = self._items.get(path)
            return item[1] if item else None


def default_upload_root() -> Path:
    """Gradio's upload folder: ``$GRADIO_TEMP_DIR``, else ``<system temp>/gradio``."""
    import tempfile

    return Path(os.environ.get("GRADIO_TEMP_DIR") or (Path(tempfile.gettempdir()) / "gradio")).resolve()


def _raw_path(item) -> str | None:
    raw = item if isinstance(item, str) else (getattr(item, "path", None) or getattr(item, "name", None))
    return raw if isinstance(raw, str) and raw else None


def _as_upload_path(item, root: Path, what: str, recent: RecentUploads | None = None) -> Path:
    """The path of a Gradio upload, refused unless it is a regular file inside ``root`` (or, gone, one
    that ``recent`` read)."""
    raw = _raw_path(item)
    if raw is None:
        raise UploadError(f"{what} is not an uploaded file")
    path = Path(raw).resolve()
    if not path.is_relative_to(root):
        raise UploadError(f"{what} is not an uploaded file")
    if not path.is_file() and (recent is None or recent.get(path) is None):
        raise UploadError(f"{what} is missing (upload it again)")
    return path


def _upload_bytes(path: Path, limit: int, recent: RecentUploads | None) -> bytes | None:
    """At most ``limit`` + 1 bytes of the upload at ``path``, from the file or, when another request
    with the same upload deleted it meanwhile, from ``recent``; kept in ``recent``. None: gone."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except FileNotFoundError:
        return recent.get(path) if recent is not None else None
    if recent is not None and len(data) <= limit:
        recent.put(path, data)
    return data


def _mb(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MB"


def decode_upload(data: bytes, name: str, *, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """Decodes one uploaded file, refusing non-images and images over ``max_pixels``."""
    try:  # size from the header first, so a huge image is refused before it is decoded
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as probe:
                width, height = probe.size
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise UploadError(f"{name}: the image is too large (over {max_pixels / 1e6:.0f} megapixels)") from None
    except Exception:  # noqa: BLE001 - not readable as an image: load_image below says why
        width = height = 0
    if width * height > max_pixels:
        raise UploadError(
            f"{name}: the image is {width}x{height} = {width * height / 1e6:.1f} megapixels; "
            f"the limit is {max_pixels / 1e6:.0f} megapixels"
        )
    try:
        image = load_image(data, name=name)
    except ImageDecodeError as err:
        why = str(err)
        if "cannot identify image file" in why:  # PIL's message names an in-memory buffer: say it plainly
            why = "its content is not a picture in any format this app decodes (e.g. JPEG, PNG, WebP)"
        raise UploadError(f"{name} is not an image this app can read: {why}") from None
    if image.width * image.height > max_pixels:
        raise UploadError(f"{name}: the image is over {max_pixels / 1e6:.0f} megapixels")
    return image


def read_uploaded_images(
    files: Sequence | None,
    *,
    upload_root: str | os.PathLike | None = None,
    min_images: int = MIN_IMAGES,
    max_images: int = MAX_IMAGES,
    max_bytes: int = MAX_IMAGE_BYTES,
    max_pixels: int = MAX_PIXELS,
    recent: RecentUploads | None = None,
) -> list[UploadedImage]:
    """Validates and decodes the uploaded generated images of one panel.

    Args:
        files: what Gradio handed over for a ``gr.File(file_count="multiple")``: paths of
            files in its upload folder.
        upload_root: that folder (default: :func:`default_upload_root`).
        recent: the app's :class:`RecentUploads`: identical uploads of concurrent visitors share
            a path that the first reader deletes; the others read its bytes from here.

    Raises:
        UploadError: too few or too many files, a file over ``max_bytes``, a file that does
            not decode as an image, an image over ``max_pixels``, or a path outside the
            upload folder. The message names every such file, not only the first, before
            saying that too few are left.
    """
    files = [f for f in (files or []) if f]
    if len(files) > max_images:
        raise UploadError(f"Upload at most {max_images} images at a time (you gave {len(files)}).")
    root = Path(upload_root).resolve() if upload_root else default_upload_root()
    out, problems = [], []
    for i, item in enumerate(files, start=1):
        try:
            out.append(_read_one_upload(item, root, i, max_bytes=max_bytes, max_pixels=max_pixels, recent=recent))
        except UploadError as err:  # every bad file is listed, not only the first
            problems.append(str(err))
    # what is wrong with a file is said first (a text file named .png alone is "not an image", not "too few")
    too_few = len(out) < min_images
    few = (f" A set needs at least {min_images} images (this upload has {len(out)} that can be read)."
           if too_few else "")
    problems = [p if p.rstrip().endswith(".") else p.rstrip() + "." for p in problems]
    if len(problems) == 1:
        raise UploadError(problems[0] + few)
    if problems:
        raise UploadError(f"{len(problems)} of the {len(files)} files cannot be used:\n"
                          + "\n".join(f"- {p}" for p in problems) + ("\n" + few.strip() if few else ""))
    if too_few:
        raise UploadError(
            f"Upload at least {min_images} generated images of the block (you gave {len(files)}): "
            "the scores compare a set of images with the block's real photos."
        )
    return out


def _read_one_upload(item, root: Path, i: int, *, max_bytes: int, max_pixels: int,
                     recent: RecentUploads | None = None) -> UploadedImage:
    path = _as_upload_path(item, root, f"file {i}", recent)
    name = path.name
    try:
        size = path.stat().st_size
    except FileNotFoundError:  # read and deleted by a concurrent request with the same upload
        size = None
    if size is not None and size > max_bytes:
        raise UploadError(f"{name} is {_mb(size)}; the limit is {_mb(max_bytes)} per image.")
    data = _upload_bytes(path, max_bytes, recent)
    if data is None:
        raise UploadError(f"file {i} is missing (upload it again)")
    if not data:
        raise UploadError(f"{name} is empty (0 bytes).")
    if len(data) > max_bytes:
        raise UploadError(f"{name} is over the limit of {_mb(max_bytes)} per image.")
    image = decode_upload(data, name, max_pixels=max_pixels)
    with Image.open(io.BytesIO(data)) as probe:  # it decoded above, so it opens
        frames = frame_count(probe)
    return UploadedImage(name=name, image=image, frames=frames)


def read_uploaded_results(
    item, *, upload_root: str | os.PathLike | None = None, max_bytes: int = MAX_RESULTS_BYTES
):
    """Reads an uploaded ``results.csv`` (docs/benchmark.md section 7, Statistics and analyses columns) into a DataFrame.

    Raises:
        UploadError: no file, over ``max_bytes``, not a CSV, or without the columns
            ``method``, ``condition`` and ``block_id``.
    """
    from .results import ResultsError, check_results
    from ..report import ReportError
    from ..results import read_results_csv

    if not item:
        raise UploadError("Choose a results.csv file first.")
    root = Path(upload_root).resolve() if upload_root else default_upload_root()
    path = _as_upload_path(item, root, "the results file")
    size = path.stat().st_size
    if size > max_bytes:
        raise UploadError(f"{path.name} is {_mb(size)}; the limit is {_mb(max_bytes)}.")
    try:
        df = read_results_csv(path)
    except (ReportError, ValueError, UnicodeDecodeError, OSError) as err:
        raise UploadError(f"{path.name} is not a readable results.csv ({type(err).__name__}: {err})") from None
    try:
        return check_results(df, path.name)
    except ResultsError as err:
        raise UploadError(str(err)) from None


class HeldUploads:
    """The uploads each visitor's page still lists, kept so that they can be scored again (after a refusal,
    or against another block) without uploading them again, and deleted once no page lists them.

    :meth:`hold` records the files a session lists now (its file list changed, or it pressed Score) and
    deletes those it listed before and lists no more; :meth:`release` (the page closed) deletes every file
    it held. A file is deleted only when no other session holds it: Gradio stores identical uploads of two
    visitors at one path. Files never listed by a session are left to Gradio's cache cleanup
    (``delete_cache``), which also removes anything held past its age.
    """

    def __init__(self, upload_root: str | os.PathLike | None = None):
        import threading

        self.upload_root = upload_root
        self._held: dict[str, set[Path]] = {}
        self._lock = threading.Lock()

    def _root(self) -> Path:
        return Path(self.upload_root).resolve() if self.upload_root else default_upload_root()

    def _paths(self, items) -> set[Path]:
        root = self._root()
        items = items if isinstance(items, (list, tuple)) else [items]
        out = set()
        for item in items:
            raw = _raw_path(item) if item else None
            if raw:
                path = Path(raw).resolve()
                if path != root and path.is_relative_to(root):
                    out.add(path)
        return out

    def _drop(self, paths: set[Path]) -> list[Path]:
        """Deletes ``paths`` that no session holds (call with the lock held)."""
        held = set().union(*self._held.values()) if self._held else set()
        gone = [p for p in paths if p not in held]
        return discard_uploads([str(p) for p in gone], upload_root=self._root())

    def hold(self, session: str | None, items) -> list[Path]:
        """Records that ``session`` lists ``items`` now; returns the files deleted (listed before, not now)."""
        if session is None:
            return []
        now = self._paths(items)
        with self._lock:
            before = self._held.get(session, set())
            if now:
                self._held[session] = now
            else:
                self._held.pop(session, None)
            return self._drop(before - now)

    def release(self, session: str | None) -> list[Path]:
        """The page of ``session`` closed: deletes the files it held (unless another session holds them)."""
        if session is None:
            return []
        with self._lock:
            return self._drop(self._held.pop(session, set()))

    def held(self, session: str | None) -> set[Path]:
        with self._lock:
            return set(self._held.get(session, set()))


def discard_uploads(items, *, upload_root: str | os.PathLike | None = None) -> list[Path]:
    """Deletes uploaded files (a results table once read; images once no page lists them, see
    :class:`HeldUploads`), with the folders Gradio made for them when those are left empty.

    ``items`` is what Gradio handed over (one upload or a list). Only files inside the upload
    folder are touched; anything else is left alone. Returns the files deleted.
    """
    root = Path(upload_root).resolve() if upload_root else default_upload_root()
    items = items if isinstance(items, (list, tuple)) else [items]
    deleted = []
    for item in items:
        raw = _raw_path(item) if item else None
        path = Path(raw).resolve() if raw else None
        if path is None or path == root or not path.is_relative_to(root) or not path.is_file():
            continue
        try:
            path.unlink()
        except OSError:
            continue
        deleted.append(path)
        folder = path.parent
        while folder != root and folder.is_relative_to(root):
            try:
                folder.rmdir()  # only when empty
            except OSError:
                break
            folder = folder.parent
    return deleted
