"""On-disk cache of VQA replies keyed by (model config hash, question, image content sha256).

Layout (the embedding cache's, with JSON shards since the values are short strings)::

    <cache_dir>/<config_hash>/model.json                          the VQA config (device left out)
    <cache_dir>/<config_hash>/answers-<time_ns>-<pid>-<rand>.json
        {"format": "geofidelity-vqa-answers/2", "config_hash": ..., "payload_sha256": ...,
         "answers": [{"question": "<id>@<fingerprint>", "image": "<sha256>", "reply": "..."}]}

``payload_sha256`` is the checksum of the answers (:func:`answers_checksum`), checked on read
like the embedding cache's: a damaged file is renamed ``*.corrupt``, a file of format /1 (no
checksum) ``*.unverified``, one whose ``config_hash`` is not its folder's (copied from another
model's folder) ``*.foreign``, a warning names it and its questions are asked again; anything named
like an answer file that is not a regular file (a FIFO, a folder) is skipped with a warning. A
folder that cannot be written gives one warning and the run continues without caching.

The raw reply is stored, not the parsed option, so a change of the parser never needs the model
again, while a change of a question's wording changes its fingerprint and misses the cache.
Files are written under a temporary name and ``os.replace``-d into place and only ever added,
so several processes may share a cache. The default folder is ``$GEOFIDELITY_VQA_CACHE``, else
``$GEOFIDELITY_CACHE/vqa-answers``, else ``<HF_HOME>/geofidelity_bench/vqa-answers``.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..cache_files import (
    CORRUPT_SUFFIX,
    FOREIGN_SUFFIX,
    UNVERIFIED_SUFFIX,
    CorruptShardError,
    WriteGuard,
    payload_sha256,
    read_shard_bytes,
    set_aside,
)

FORMAT = "geofidelity-vqa-answers/2"  # /1 had no payload checksum
OLD_FORMATS = ("geofidelity-vqa-answers/1",)
CHECKSUM_KEY = "payload_sha256"
_WHAT = "VQA answer cache"
CONFIG_FILE = "model.json"
SHARD_PREFIX = "answers-"
SHARD_SUFFIX = ".json"

_PACKAGE_DIR = Path(__file__).resolve().parents[1]


def default_answer_cache_dir() -> Path:
    env = os.environ.get("GEOFIDELITY_VQA_CACHE")
    if env:
        return Path(env).expanduser()
    env = os.environ.get("GEOFIDELITY_CACHE")
    if env:
        return Path(env).expanduser() / "vqa-answers"
    from huggingface_hub import constants

    return Path(constants.HF_HOME).expanduser() / "geofidelity_bench" / "vqa-answers"


def answers_checksum(answers: list) -> str:
    """The checksum of a file's ``answers`` list: sha256 of its canonical JSON (sorted keys, no spaces)."""
    return payload_sha256(json.dumps(answers, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _check_records(answers: Any) -> list[tuple[tuple[str, str], str]]:
    if not isinstance(answers, list):
        raise CorruptShardError("'answers' is not a list")
    out = []
    for i, rec in enumerate(answers):
        if not isinstance(rec, dict) or not all(isinstance(rec.get(k), str) for k in ("question", "image", "reply")):
            raise CorruptShardError(f"answer {i} is not a record of question, image and reply strings")
        image = rec["image"]
        if len(image) != 64 or any(c not in "0123456789abcdef" for c in image):
            raise CorruptShardError(f"answer {i} has an image key that is not a sha256 digest")
        out.append(((rec["question"], image), rec["reply"]))
    return out


def _check_hash(config_hash: str) -> str:
    if not isinstance(config_hash, str) or len(config_hash) != 64 or any(c not in "0123456789abcdef" for c in config_hash):
        raise ValueError(f"not a config hash (64 lowercase hex digits): {config_hash!r}")
    return config_hash


class AnswerCache:
    """VQA replies on disk, one folder per VQA config hash.

    Args:
        cache_dir: root folder (default :func:`default_answer_cache_dir`); not inside the package.

    Example:
        >>> cache = AnswerCache("/tmp/vqa")                                     # doctest: +SKIP
        >>> cache.put(backend.config_hash, {("q@ab12", sha): "B"}, config=backend.config)  # doctest: +SKIP
        >>> cache.get(backend.config_hash, [("q@ab12", sha)])                   # doctest: +SKIP
        {('q@ab12', '...'): 'B'}
    """

    def __init__(self, cache_dir: str | os.PathLike | None = None) -> None:
        root = Path(cache_dir).expanduser() if cache_dir is not None else default_answer_cache_dir()
        resolved = root.resolve()
        if resolved == _PACKAGE_DIR or _PACKAGE_DIR in resolved.parents:
            raise ValueError(f"the VQA answer cache must not live inside the package ({resolved})")
        self.root = root
        self._rows: dict[str, dict[tuple[str, str], str]] = {}
        self._loaded: dict[str, set[str]] = {}
        self._writes = WriteGuard(_WHAT, "Pass --cache-dir with a writable folder (cache_dir= in Python), or --no-cache.")

    def __repr__(self) -> str:
        return f"AnswerCache({str(self.root)!r})"

    def _refresh(self, config_hash: str) -> dict[tuple[str, str], str]:
        rows = self._rows.setdefault(config_hash, {})
        loaded = self._loaded.setdefault(config_hash, set())
        folder = self.root / config_hash
        try:
            names = sorted(n for n in os.listdir(folder) if n.startswith(SHARD_PREFIX) and n.endswith(SHARD_SUFFIX))
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return rows
        for name in names:
            if name in loaded:
                continue
            loaded.add(name)
            records = self._read_file(folder / name, config_hash)
            for key, reply in records or []:
                rows.setdefault(key, reply)
        return rows

    @staticmethod
    def _read_file(path: Path, config_hash: str) -> list[tuple[tuple[str, str], str]] | None:
        """The file's ((question, image), reply) records, or None (vanished; not a file: skipped; damaged,
        unverified or written for another config than ``config_hash``: set aside)."""
        try:
            raw = read_shard_bytes(path, _WHAT)
            if raw is None:
                return None
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict):
                raise CorruptShardError("not a JSON object")
            if data.get("format") in OLD_FORMATS:
                set_aside(path, UNVERIFIED_SUFFIX, "unverified", "no checksum: written by an older version", _WHAT)
                return None
            if data.get("format") != FORMAT:
                raise CorruptShardError(f"format {data.get('format')!r}")
            records = _check_records(data.get("answers"))
            if answers_checksum(data["answers"]) != data.get(CHECKSUM_KEY):
                raise CorruptShardError("it does not match its checksum: its bytes changed after it was written")
            if data.get("config_hash") != config_hash:
                set_aside(path, FOREIGN_SUFFIX, "foreign",
                          f"it holds the answers of VQA config {str(data.get('config_hash'))[:12]}..., not this folder's "
                          f"{config_hash[:12]}...: copied from another config's folder?", _WHAT)
                return None
        except FileNotFoundError:
            return None
        except CorruptShardError as err:
            set_aside(path, CORRUPT_SUFFIX, "damaged", str(err), _WHAT)
            return None
        except Exception as err:  # noqa: BLE001 - one damaged file must not break the cache
            set_aside(path, CORRUPT_SUFFIX, "unreadable", f"{type(err).__name__}: {err}", _WHAT)
            return None
        return records

    def get(self, config_hash: str, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """Cached replies among ``keys`` = (question cache key, image sha256) pairs (hits only)."""
        rows = self._refresh(_check_hash(config_hash))
        return {k: rows[k] for k in keys if k in rows}

    def __len__(self) -> int:
        return sum(len(self._refresh(h)) for h in self.config_hashes())

    def config_hashes(self) -> list[str]:
        try:
            return sorted(p.name for p in self.root.iterdir() if p.is_dir() and len(p.name) == 64)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return []

    def config(self, config_hash: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.root / _check_hash(config_hash) / CONFIG_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def put(
        self, config_hash: str, replies: Mapping[tuple[str, str], str], *, config: Mapping[str, Any] | None = None
    ) -> Path | None:
        """Writes one file with ``replies`` {(question cache key, image sha256): reply}; returns its path
        (None if the folder cannot be written: one warning names it, the replies stay in memory)."""
        config_hash = _check_hash(config_hash)
        if not replies:
            return None
        folder = self.root / config_hash
        records = [{"question": q, "image": img, "reply": str(r)} for (q, img), r in replies.items()]
        data = json.dumps({"format": FORMAT, "config_hash": config_hash, CHECKSUM_KEY: answers_checksum(records),
                           "answers": records}, ensure_ascii=False)
        name = f"{SHARD_PREFIX}{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}{SHARD_SUFFIX}"
        path = self._writes.write(folder, name, data.encode("utf-8"), config_file=CONFIG_FILE, config=config,
                                  config_hash=config_hash)
        if path is not None:
            self._loaded.setdefault(config_hash, set()).add(path.name)
        rows = self._rows.setdefault(config_hash, {})
        for key, reply in replies.items():
            rows.setdefault(key, str(reply))
        return path
