"""What the on-disk caches (embeddings and segmentation shares, VQA answers) share: shard
checksums, setting a damaged shard aside, and running on when the folder cannot be written.

A shard carries the sha256 of its payload, written with it and checked on read. A shard that
fails the check (or that cannot be parsed, or holds a non-finite row) is renamed
``<name>.corrupt`` and named in a warning; a shard written before checksums existed is renamed
``<name>.unverified``; a shard whose recorded config (encoder, VQA model or hashing settings)
is not the one its folder is keyed by, e.g. copied from another config's folder, is renamed
``<name>.foreign``. None of these names is read again, so their rows are recomputed once and
written to a new, checksummed shard: the numbers of the run equal those of a clean run.

A shard is opened without blocking and read only when it is a regular file
(:func:`read_shard_bytes`): a FIFO, a folder or a device named like a shard is skipped with a
warning (it is left where it is: it is no file of the cache's).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import warnings
from pathlib import Path
from typing import Any, Mapping

from .atomic import atomic_write_bytes
from .errors import REDACTED_USERINFO, redact_url

CORRUPT_SUFFIX = ".corrupt"
UNVERIFIED_SUFFIX = ".unverified"
FOREIGN_SUFFIX = ".foreign"


class CorruptShardError(ValueError):
    """A cache shard whose payload does not match its checksum or holds invalid values (internal)."""


def payload_sha256(*parts: bytes) -> str:
    """The sha256 of the concatenated parts (each prefixed by its length, so parts cannot shift)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


#: ``scheme:/`` then user-info: a URL given as a folder (``--cache-dir http://user:pw@host/c``) after
#: :class:`~pathlib.Path` collapsed its ``//`` (a one-letter scheme would be a Windows drive: left alone).
_COLLAPSED_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]+:/)(?!/)[^/?#\s'\"<>`@]*(?:@[^/?#\s'\"<>`@]*)*@")


def redact_path(path: Any) -> str:
    """``str(path)`` with the user-info of any URL in it redacted, also where ``Path`` turned ``scheme://``
    into ``scheme:/`` (a cache folder given as a URL): the one form of a cache folder in messages,
    warnings and written files.

    >>> redact_path(Path("http://alice:s3cret@host/cache") / "ab12")
    'http:/***@host/cache/ab12'
    """
    text = redact_url(str(path))
    return _COLLAPSED_URL_USERINFO.sub(lambda m: m.group(1) + REDACTED_USERINFO, text)


def read_shard_bytes(path: Path, what: str) -> bytes | None:
    """The bytes of the shard file ``path``; None, with a warning naming it, when it is not a regular file.

    The file is opened non-blocking and checked on the open descriptor (so a FIFO named like a shard
    neither blocks the run nor can be swapped in between a check and the read). Raises
    FileNotFoundError when it vanished (e.g. merged away by a concurrent compaction), and OSError when
    it cannot be read.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
            warnings.warn(f"skipping {what} shard {redact_path(path)}: it is {kind}, not a file this cache wrote; "
                          f"remove it from the cache folder", stacklevel=4)
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def set_aside(path: Path, suffix: str, kind: str, why: str, what: str) -> None:
    """Renames a bad shard to ``<name><suffix>`` and warns, naming it, that its rows are recomputed.

    The warning reads "ignoring <kind> <what> shard <path> (<why>); moved aside to ...", e.g. "ignoring damaged
    embedding cache shard .../shard-1.safetensors (it does not match its checksum); ...".
    """
    target = path.with_name(path.name + suffix)
    try:
        os.replace(path, target)
        where = f"moved aside to {target.name}"
    except FileNotFoundError:  # another process set it aside (or merged it) first
        return
    except OSError as err:
        where = f"ignored (it could not be renamed: {err})"
    warnings.warn(redact_path(f"ignoring {kind} {what} shard {path} ({why}); {where}; its rows will be recomputed"),
                  stacklevel=4)


class WriteGuard:
    """Turns the first failure to write a cache folder into one warning; later writes are skipped.

    The run goes on without caching (everything computed is still returned to the caller).
    """

    def __init__(self, what: str, hint: str) -> None:
        self.what, self.hint = what, hint
        self.failed = False

    def fail(self, folder: Path, err: OSError) -> None:
        if not self.failed:
            self.failed = True
            reason = err.strerror or str(err)
            warnings.warn(
                redact_path(f"cannot write the {self.what} folder {folder} ({type(err).__name__}: {reason}); this run "
                            f"continues without caching. {self.hint}"),
                stacklevel=4,
            )

    def write(self, folder: Path, name: str, data: bytes, *, config_file: str, config: Mapping[str, Any] | None,
              config_hash: str) -> Path | None:
        """Writes shard ``folder/name`` (and the config file beside it, once) atomically; None if the folder
        cannot be written (then one warning, and later writes are skipped)."""
        if self.failed:
            return None
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if config is not None and not (folder / config_file).exists():
                cfg = {k: v for k, v in config.items() if k != "device"}
                cfg["config_hash"] = config_hash
                text = json.dumps(cfg, indent=2, sort_keys=True) + "\n"
                atomic_write_bytes(folder / config_file, text.encode("utf-8"), durable=True)
            return atomic_write_bytes(folder / name, data, durable=True)
        except OSError as err:  # read-only, a path under a file, disk full: keep going without the cache
            self.fail(folder, err)
            return None
