"""On-disk cache of VQA replies keyed by (model config hash, question, image content sha256).

Layout (the embedding cache's, with JSON shards since the values are short strings)::

    <cache_dir>/<config_hash>/model.json                          the VQA config (device left out)
    <cache_dir>/<config_hash>/answers-<time_ns>-<pid>-<rand>.json
        {"format": "geofidelity-vqa-answers/1", "config_hash": ...,
         "answers": [{"question": "<id>@<fingerprint>", "image": "<sha256>", "reply": "..."}]}

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
import warnings
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..atomic import atomic_write_bytes

FORMAT = "geofidelity-vqa-answers/1"
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

    def __repr__(self) -> str:
        return f"AnswerCache({str(self.root)!r})"

    def _refresh(self, config_hash: str) -> dict[tuple[str, str], str]:
        rows = self._rows.setdefault(config_hash, {})
        loaded = self._loaded.setdefault(config_hash, set())
        folder = self.root / config_hash
        try:
            names = sorted(n for n in os.listdir(folder) if n.startswith(SHARD_PREFIX) and n.endswith(SHARD_SUFFIX))
        except FileNotFoundError:
            return rows
        for name in names:
            if name in loaded:
                continue
            loaded.add(name)
            try:
                data = json.loads((folder / name).read_text(encoding="utf-8"))
                if data.get("format") != FORMAT:
                    raise ValueError(f"format {data.get('format')!r}")
                for rec in data["answers"]:
                    rows.setdefault((str(rec["question"]), str(rec["image"])), str(rec["reply"]))
            except FileNotFoundError:
                continue
            except Exception as err:  # noqa: BLE001 - one damaged file must not break the cache
                warnings.warn(f"ignoring unreadable VQA answer cache file {folder / name}: {err}", stacklevel=3)
        return rows

    def get(self, config_hash: str, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """Cached replies among ``keys`` = (question cache key, image sha256) pairs (hits only)."""
        rows = self._refresh(_check_hash(config_hash))
        return {k: rows[k] for k in keys if k in rows}

    def __len__(self) -> int:
        return sum(len(self._refresh(h)) for h in self.config_hashes())

    def config_hashes(self) -> list[str]:
        try:
            return sorted(p.name for p in self.root.iterdir() if p.is_dir() and len(p.name) == 64)
        except FileNotFoundError:
            return []

    def config(self, config_hash: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.root / _check_hash(config_hash) / CONFIG_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def put(
        self, config_hash: str, replies: Mapping[tuple[str, str], str], *, config: Mapping[str, Any] | None = None
    ) -> Path | None:
        """Writes one file with ``replies`` {(question cache key, image sha256): reply}; returns its path."""
        config_hash = _check_hash(config_hash)
        if not replies:
            return None
        folder = self.root / config_hash
        folder.mkdir(parents=True, exist_ok=True)
        if config is not None and not (folder / CONFIG_FILE).exists():
            cfg = {k: v for k, v in config.items() if k != "device"}
            cfg["config_hash"] = config_hash
            atomic_write_bytes(folder / CONFIG_FILE, (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode("utf-8"), durable=True)
        records = [{"question": q, "image": img, "reply": str(r)} for (q, img), r in replies.items()]
        data = json.dumps({"format": FORMAT, "config_hash": config_hash, "answers": records}, ensure_ascii=False)
        path = folder / f"{SHARD_PREFIX}{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:8]}{SHARD_SUFFIX}"
        atomic_write_bytes(path, data.encode("utf-8"), durable=True)
        rows = self._rows.setdefault(config_hash, {})
        self._loaded.setdefault(config_hash, set()).add(path.name)
        for key, reply in replies.items():
            rows.setdefault(key, str(reply))
        return path
