"""The image files the app writes for its answers (thumbnails of uploads, copy pairs, report plots,
reference photos), and when they are deleted.

Gradio serves a gallery image as a file that the browser fetches *after* the answer arrives, so a
file cannot be deleted when the request ends. Left to Gradio, each image would be written under the
hash of its bytes in Gradio's temporary folder and stay there (for an hour, or for ever without
``delete_cache``), shared by every visitor who gets the same image. Instead the app writes each
answer's images into a folder of its own inside Gradio's folder (which Gradio then serves as it is)
and deletes that folder at the same visitor's next answer of the same kind (which replaces the
images on the page) or when the visitor's page closes (Gradio's ``unload`` event). Nothing is
shared between visitors, so deleting one visitor's files never breaks another's page.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from pathlib import Path
from typing import Any, Sequence


class SessionFiles:
    """One folder of image files per (visitor session, kind of answer), replaced and deleted as above."""

    def __init__(self, root: str | Path | None):
        self.root = Path(root) if root else None
        self._held: dict[tuple[str, str], Path] = {}
        self._lock = threading.Lock()

    def _swap(self, key: tuple[str, str], folder: Path | None) -> None:
        with self._lock:
            old = self._held.pop(key, None)
            if folder is not None:
                self._held[key] = folder
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def write(self, session: str | None, kind: str, images: Sequence[tuple[Any, str]], *,
              fmt: str = "jpeg") -> list[tuple[Any, str]]:
        """Saves ``(PIL image, caption)`` pairs as files of this answer and returns ``(path, caption)``
        pairs for a gallery; the session's previous files of ``kind`` are deleted. Without a folder
        (the app is not built yet) the images are returned as they are."""
        if self.root is None or session is None:
            return list(images)
        folder = self.root / f"geofidelity-{kind}-{uuid.uuid4().hex}"
        folder.mkdir(parents=True)
        out = []
        suffix = "jpg" if fmt == "jpeg" else fmt
        for i, (image, caption) in enumerate(images):
            path = folder / f"{i:02d}.{suffix}"
            image.convert("RGB").save(path, format=fmt.upper(), quality=90) if fmt == "jpeg" else image.save(path)
            out.append((str(path), caption))
        self._swap((session, kind), folder)
        return out

    def drop(self, session: str | None, kind: str) -> None:
        """Deletes the session's files of ``kind`` (its answer is being replaced)."""
        if session is not None:
            self._swap((session, kind), None)

    def release(self, session: str | None) -> None:
        """Deletes every file of the session (its page was closed)."""
        with self._lock:
            keys = [k for k in self._held if k[0] == session]
        for key in keys:
            self._swap(key, None)

    def folders(self) -> list[Path]:
        with self._lock:
            return sorted(self._held.values())


__all__ = ["SessionFiles"]
