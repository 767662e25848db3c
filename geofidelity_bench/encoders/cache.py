"""On-disk embedding cache keyed by (encoder config hash, image content sha256).

Layout::

    <cache_dir>/<config_hash>/encoder.json                     the encoder config (device left out)
    <cache_dir>/<config_hash>/shard-<time_ns>-<pid>-<rand>.safetensors
        tensors "keys" uint8 (n, 32) = sha256 digests, "embeddings" float32 (n, dim); metadata
        "payload_sha256" = the checksum of keys and embeddings (see :mod:`geofidelity_bench.cache_files`)

Every file is written to a temporary name in the same folder and then ``os.replace``-d into
place, so a reader never sees half a shard and any number of processes may write at once;
shards are only ever added (``compact`` merges them, and readers tolerate shards vanishing).
Every shard is checked on read (checksum, shapes, finite rows): a damaged one is renamed
``*.corrupt``, one without a checksum (written by version 1 of the format) ``*.unverified``, a
warning names it, and its rows are recomputed. A shard whose metadata names another config hash
than its folder (copied from another encoder's folder) is renamed ``*.foreign`` the same way, and
anything named like a shard that is not a regular file (a FIFO, a folder) is skipped with a
warning. A folder that cannot be written gives one warning and the run continues without caching.
The default folder is ``$GEOFIDELITY_CACHE`` if set, else ``<HF_HOME>/geofidelity_bench/embeddings``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from geofidelity_bench.atomic import atomic_write_bytes
from geofidelity_bench.cache_files import (
    CORRUPT_SUFFIX,
    FOREIGN_SUFFIX,
    UNVERIFIED_SUFFIX,
    CorruptShardError,
    WriteGuard,
    payload_sha256,
    read_shard_bytes,
    redact_path,
    set_aside,
)
from geofidelity_bench.encoders.base import EncoderOptionError

SHARD_PREFIX = "shard-"
SHARD_SUFFIX = ".safetensors"
CONFIG_FILE = "encoder.json"
FORMAT = "geofidelity-embeddings/2"  # /1 had no payload checksum
CHECKSUM_KEY = "payload_sha256"
_WHAT = "embedding cache"

_PACKAGE_DIR = Path(__file__).resolve().parents[1]


def default_cache_dir() -> Path:
    """``$GEOFIDELITY_CACHE``, else ``<HF_HOME>/geofidelity_bench/embeddings``."""
    env = os.environ.get("GEOFIDELITY_CACHE")
    if env:
        return Path(env).expanduser()
    from huggingface_hub import constants

    return Path(constants.HF_HOME).expanduser() / "geofidelity_bench" / "embeddings"


def _config_hash_of(encoder_or_hash: Any) -> str:
    h = encoder_or_hash if isinstance(encoder_or_hash, str) else encoder_or_hash.config_hash
    if len(h) != 64 or any(c not in "0123456789abcdef" for c in h):
        raise ValueError(f"not a config hash (64 lowercase hex digits): {h!r}")
    return h


def _check_key(key: str) -> bytes:
    try:
        raw = bytes.fromhex(key)
    except (ValueError, TypeError) as err:
        raise ValueError(f"cache key must be a sha256 hex digest, got {key!r}") from err
    if len(raw) != 32:
        raise ValueError(f"cache key must be a sha256 hex digest, got {key!r}")
    return raw


def shard_checksum(raw_keys: np.ndarray, embeddings: np.ndarray) -> str:
    """The payload checksum of a shard: sha256 over its shapes, key bytes and little-endian float32 rows."""
    shape = f"{raw_keys.shape[0]}x{embeddings.shape[1]}".encode()
    return payload_sha256(shape, np.ascontiguousarray(raw_keys, dtype=np.uint8).tobytes(),
                          np.ascontiguousarray(embeddings, dtype="<f4").tobytes())


def _header_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file (its JSON header follows an 8-byte length)."""
    n = int.from_bytes(data[:8], "little")
    meta = json.loads(data[8 : 8 + n].decode("utf-8")).get("__metadata__") or {}
    if not isinstance(meta, dict):
        raise CorruptShardError("bad metadata")
    return meta


def _shard_bytes(config_hash: str, raw_keys: np.ndarray, emb: np.ndarray) -> bytes:
    from safetensors.numpy import save

    raw_keys, emb = np.ascontiguousarray(raw_keys), np.ascontiguousarray(emb, dtype=np.float32)
    return save({"keys": raw_keys, "embeddings": emb},
                metadata={"format": FORMAT, "config_hash": config_hash, CHECKSUM_KEY: shard_checksum(raw_keys, emb)})


def _new_shard_path(folder: Path) -> Path:
    return folder / f"{SHARD_PREFIX}{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}{SHARD_SUFFIX}"


@dataclass
class _Index:
    rows: dict[str, np.ndarray] = field(default_factory=dict)
    loaded: set[str] = field(default_factory=set)
    dim: int | None = None


class EmbeddingCache:
    """Embeddings on disk, one folder per encoder config hash.

    Args:
        cache_dir: root folder; default :func:`default_cache_dir`. Must not lie inside the
            installed package.

    Example:
        >>> cache = EmbeddingCache("/tmp/emb")                       # doctest: +SKIP
        >>> cache.put(encoder, [sha], vectors)                       # doctest: +SKIP
        >>> cache.get(encoder, [sha])[sha].shape                     # doctest: +SKIP
        (768,)
    """

    def __init__(self, cache_dir: str | os.PathLike | None = None) -> None:
        root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        resolved = root.resolve()
        if resolved == _PACKAGE_DIR or _PACKAGE_DIR in resolved.parents:
            raise EncoderOptionError(f"the embedding cache must not live inside the package ({redact_path(resolved)})")
        self.root = root
        self._indexes: dict[str, _Index] = {}
        self._writes = WriteGuard(_WHAT, "Pass --cache-dir with a writable folder (cache_dir= in Python), or --no-cache.")

    def __repr__(self) -> str:
        return f"EmbeddingCache({redact_path(self.root)!r})"

    @property
    def write_guard(self) -> WriteGuard:
        """The folder's one "cannot write" warning, shared with what is cached beside the embeddings
        (the copy audit's perceptual hashes), so an unwritable folder is named once."""
        return self._writes

    def dir_for(self, encoder_or_hash: Any) -> Path:
        return self.root / _config_hash_of(encoder_or_hash)

    # -- reading ----------------------------------------------------------------------------
    def _shard_names(self, folder: Path) -> list[str]:
        try:
            names = os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError, PermissionError):  # nothing readable there
            return []
        return sorted(n for n in names if n.startswith(SHARD_PREFIX) and n.endswith(SHARD_SUFFIX))

    def _read_shard(self, path: Path, config_hash: str) -> tuple[list[str], np.ndarray] | None:
        """The shard's keys and rows, or None (vanished; not a file: skipped; or damaged / unverified / written
        for another config than ``config_hash``: set aside; each with a warning)."""
        from safetensors.numpy import load

        try:
            data = read_shard_bytes(path, _WHAT)
            if data is None:
                return None
        except FileNotFoundError:  # merged away by a concurrent compact(); its rows live on elsewhere
            return None
        except OSError as err:
            warnings.warn(redact_path(f"ignoring unreadable {_WHAT} shard {path}: {err}"), stacklevel=3)
            return None
        try:
            meta = _header_metadata(data)
            tensors = load(data)
            keys, emb = tensors["keys"], tensors["embeddings"]
            if keys.dtype != np.uint8 or keys.ndim != 2 or keys.shape[1] != 32:
                raise CorruptShardError(f"bad keys tensor {keys.dtype} {keys.shape}")
            if emb.dtype != np.float32 or emb.ndim != 2 or emb.shape[0] != keys.shape[0]:
                raise CorruptShardError(f"bad embeddings tensor {emb.dtype} {emb.shape} for {keys.shape[0]} keys")
            if CHECKSUM_KEY not in meta:
                set_aside(path, UNVERIFIED_SUFFIX, "unverified", "no checksum: written by an older version", _WHAT)
                return None
            if shard_checksum(keys, emb) != meta[CHECKSUM_KEY]:
                raise CorruptShardError("it does not match its checksum: its bytes changed after it was written")
            if meta.get("config_hash") != config_hash:
                set_aside(path, FOREIGN_SUFFIX, "foreign",
                          f"it was written for encoder config {str(meta.get('config_hash'))[:12]}..., not this folder's "
                          f"{config_hash[:12]}...: copied from another config's folder?", _WHAT)
                return None
            bad = int((~np.isfinite(emb).all(axis=1)).sum())
            if bad:
                raise CorruptShardError(f"it holds {bad} non-finite row(s)")
        except Exception as err:  # noqa: BLE001 - one foreign or damaged file must not break the cache
            if isinstance(err, CorruptShardError):
                set_aside(path, CORRUPT_SUFFIX, "damaged", str(err), _WHAT)
            else:
                set_aside(path, CORRUPT_SUFFIX, "unreadable", f"{type(err).__name__}: {err}", _WHAT)
            return None
        return [bytes(k).hex() for k in keys], emb

    def _refresh(self, config_hash: str) -> _Index:
        index = self._indexes.setdefault(config_hash, _Index())
        folder = self.root / config_hash
        for name in self._shard_names(folder):
            if name in index.loaded:
                continue
            index.loaded.add(name)
            got = self._read_shard(folder / name, config_hash)
            if got is None:
                continue
            keys, emb = got
            if index.dim is None:
                index.dim = int(emb.shape[1])
            elif emb.shape[1] != index.dim:
                warnings.warn(
                    f"ignoring embedding cache shard {redact_path(folder / name)}: dim {emb.shape[1]} != {index.dim}",
                    stacklevel=3,
                )
                continue
            for key, row in zip(keys, emb):
                index.rows.setdefault(key, row)
        return index

    def get(self, encoder_or_hash: Any, keys: Iterable[str]) -> dict[str, np.ndarray]:
        """The cached embeddings among ``keys`` (hits only), as float32 (dim,) arrays."""
        index = self._refresh(_config_hash_of(encoder_or_hash))
        return {k: index.rows[k] for k in keys if k in index.rows}

    def keys(self, encoder_or_hash: Any) -> set[str]:
        """All content hashes cached for this encoder config."""
        return set(self._refresh(_config_hash_of(encoder_or_hash)).rows)

    def __contains__(self, item: tuple[Any, str]) -> bool:
        encoder_or_hash, key = item
        return key in self._refresh(_config_hash_of(encoder_or_hash)).rows

    def config(self, encoder_or_hash: Any) -> dict[str, Any] | None:
        """The encoder config stored beside the shards, if any."""
        path = self.dir_for(encoder_or_hash) / CONFIG_FILE
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    # -- writing ----------------------------------------------------------------------------
    def put(
        self,
        encoder_or_hash: Any,
        keys: Sequence[str],
        embeddings: np.ndarray,
        *,
        config: dict[str, Any] | None = None,
    ) -> Path | None:
        """Writes one shard with ``embeddings[i]`` under ``keys[i]``; returns its path (None if empty, or if
        the folder cannot be written: then one warning names it and the rows stay in memory only).

        ``config`` (default: the encoder's, when an encoder is passed) is stored once as encoder.json.
        """
        config_hash = _config_hash_of(encoder_or_hash)
        if len(keys) == 0:
            return None
        emb = np.ascontiguousarray(np.asarray(embeddings, dtype=np.float32))
        if emb.ndim != 2 or emb.shape[0] != len(keys):
            raise ValueError(f"embeddings of shape {emb.shape} do not match {len(keys)} keys")
        if not np.isfinite(emb).all():
            raise ValueError("refusing to cache non-finite embeddings")
        raw_keys = np.frombuffer(b"".join(_check_key(k) for k in keys), dtype=np.uint8).reshape(len(keys), 32)
        folder = self.root / config_hash
        if config is None and not isinstance(encoder_or_hash, str):
            config = encoder_or_hash.config
        path = self._writes.write(folder, _new_shard_path(folder).name, _shard_bytes(config_hash, raw_keys, emb),
                                  config_file=CONFIG_FILE, config=config, config_hash=config_hash)
        index = self._indexes.get(config_hash)
        if index is not None and (index.dim is None or index.dim == emb.shape[1]):
            if path is not None:
                index.loaded.add(path.name)
            index.dim = int(emb.shape[1])
            for key, row in zip(keys, emb):
                index.rows.setdefault(key, row)
        return path

    def compact(self, encoder_or_hash: Any, shards: Iterable[str | os.PathLike] | None = None) -> Path | None:
        """Merges this config's shards into one (safe while other processes read or write).

        ``shards``: merge only these shards of the config's folder (e.g. the ones one run wrote; names or
        paths), default all. Every shard merged is verified as on read; the merged shard is in place before
        any of them is deleted. Returns the merged shard (None when there was nothing to merge).
        """
        config_hash = _config_hash_of(encoder_or_hash)
        folder = self.root / config_hash
        names = self._shard_names(folder)
        if shards is not None:
            wanted = {Path(p).name for p in shards}
            names = [n for n in names if n in wanted]
        if len(names) < 2:
            return folder / names[0] if names else None
        rows: dict[str, np.ndarray] = {}
        merged: list[str] = []
        dim = None
        for name in names:
            got = self._read_shard(folder / name, config_hash)
            if got is None:
                continue
            keys, emb = got
            if dim is None:
                dim = emb.shape[1]
            if emb.shape[1] != dim:
                continue
            merged.append(name)
            for key, row in zip(keys, emb):
                rows.setdefault(key, row)
        if not rows:
            return None
        keys = list(rows)
        raw = np.frombuffer(b"".join(bytes.fromhex(k) for k in keys), dtype=np.uint8).reshape(len(keys), 32)
        data = _shard_bytes(config_hash, raw, np.stack([rows[k] for k in keys]).astype(np.float32))
        path = atomic_write_bytes(_new_shard_path(folder), data, durable=True)
        for name in merged:  # only after the merged shard is in place
            with contextlib.suppress(OSError):
                (folder / name).unlink()
        index = self._indexes.get(config_hash)
        if index is not None and index.dim == dim:  # the rows are known: no need to read the folder again
            index.loaded.add(path.name)
            for key in keys:
                index.rows.setdefault(key, rows[key])
        else:
            self._indexes.pop(config_hash, None)
        return path

    def shard_count(self, encoder_or_hash: Any) -> int:
        """How many shards this config's folder holds."""
        return len(self._shard_names(self.dir_for(encoder_or_hash)))

    def clear(self, encoder_or_hash: Any | None = None) -> None:
        """Deletes one config's embeddings, or the whole cache folder."""
        target = self.root if encoder_or_hash is None else self.dir_for(encoder_or_hash)
        shutil.rmtree(target, ignore_errors=True)
        if encoder_or_hash is None:
            self._indexes.clear()
        else:
            self._indexes.pop(_config_hash_of(encoder_or_hash), None)
