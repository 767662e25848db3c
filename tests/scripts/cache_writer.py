"""Worker for the concurrent-writer test: hammers one EmbeddingCache folder with shards.

Values are a pure function of the key, so any row read back, by any process, can be checked.
"""

from __future__ import annotations

import hashlib

import numpy as np

from geofidelity_bench.encoders.cache import EmbeddingCache

CONFIG_HASH = hashlib.sha256(b"concurrent-writer-test").hexdigest()
DIM = 16


def key_for(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def value_for(key: str) -> np.ndarray:
    return np.random.default_rng(int(key[:12], 16)).standard_normal(DIM).astype(np.float32)


def expected_keys(n_workers: int, n_shards: int, rows: int) -> set[str]:
    keys = set()
    for s in range(n_shards):
        keys.update(key_for(f"shared-{s}-{r}") for r in range(rows))
        for w in range(n_workers):
            keys.update(key_for(f"worker{w}-{s}-{r}") for r in range(rows))
    return keys


def write_shards(cache_dir: str, worker: int, n_shards: int, rows: int, barrier) -> None:
    cache = EmbeddingCache(cache_dir)
    barrier.wait()
    written: list[str] = []
    for s in range(n_shards):
        keys = [key_for(f"shared-{s}-{r}") for r in range(rows)] + [key_for(f"worker{worker}-{s}-{r}") for r in range(rows)]
        cache.put(CONFIG_HASH, keys, np.stack([value_for(k) for k in keys]), config={"encoder": "test", "worker": "any"})
        written.extend(keys)
        # Read while the other process writes (and worker 0 compacts): every row seen must be
        # right; completeness is checked once both are done (a concurrent compact() may hide a
        # row from a read for an instant, never lose it).
        got = EmbeddingCache(cache_dir).get(CONFIG_HASH, written)
        for k, v in got.items():
            if not np.array_equal(v, value_for(k)):
                raise AssertionError(f"worker {worker}: wrong value for {k}")
        if worker == 0 and s == n_shards // 2:
            cache.compact(CONFIG_HASH)
