"""The copy audit's keypoint index: which benchmark photos share local features with an audited image.

docs/benchmark.md section 5 (Copy audit): every photo of the pool keeps its strongest ORB descriptors
in one index; an audited image's descriptors (and its mirror image's) vote for the photo owning their
nearest descriptor when it passes Lowe's ratio test, and the photos with most votes are checked
geometrically. Brute force grows with the pool (about 5 ns per descriptor pair on two cores: 14.3 s
per audited image at paper scale, 9,000 photos x 200 descriptors), so indexes above
:data:`EXACT_MAX` descriptors are searched approximately with OpenCV's FLANN LSH, whose hash
functions are drawn from a seeded RNG so that votes are the same in every process and run.

Only numpy is imported at module level; OpenCV is imported when an index is searched.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

from .atomic import atomic_write

#: Indexes up to this many descriptors are searched exactly (``cv2.BFMatcher``, Hamming distance): about
#: 125 photos of 200 descriptors, the demo's pool (112 photos). Brute force of 1,600 query descriptors (an
#: image and its mirror) costs about 5 ns per descriptor pair on two cores (benchmarks/bench_keypoint_index.py:
#: 3,500 descriptors 28 ms, 28,000 220 ms), so up to ~200 ms per audited image here; LSH is faster but
#: misses more of the hardest retrievals (on the demo's pool, 40 % crops and small collage tiles: 10 of
#: 224 queries with 10 tables against 4 exact), and a small pool is where tests and the demo run.
#: Larger indexes use LSH (and OpenCV's brute force fails above about 200,000 training descriptors).
EXACT_MAX = 25_000
#: FLANN LSH parameters (``algorithm=6``), chosen by benchmarks/bench_keypoint_index.py at paper scale
#: (9,000 photos, 1.8M descriptors, 140 edited copies of demo photos): every tried setting found the
#: true photo in the top 4 for 137 of 140 (brute force: 2 of those 3 missed too); per query, 6 tables
#: of 24 bits take ~29 ms (4 tables 18 ms, 8: 36 ms, 12: 54 ms; 22-bit keys 44 ms, 20-bit 122 ms) and
#: brute force ~14.3 s. Multi-probe (level 1) is 10-20x slower: ORB bits are biased, so buckets are
#: uneven and every extra probe or shorter key scans a large part of the index. On the demo's pool, the
#: hardest retrievals (40 % crops, small collage tiles: 224 queries) missed the top 4 19 times with 6
#: tables, 15 with 8, 10 with 10 and 12 with 12 (exact: 4): 10 tables. Memory: ~55 MiB of tables per
#: million descriptors and table (10 tables at paper scale: 0.9 GiB measured, built in 8 s; a query 66 ms, and the
#: true photo of all 140 edited copies in the top 4 with the production index descriptors).
LSH_PARAMS = {"algorithm": 6, "table_number": 10, "key_size": 24, "multi_probe_level": 0}
#: FLANN search parameters (``checks`` made no measurable difference to the LSH's recall or time).
LSH_SEARCH = {"checks": 32}
#: Seed of OpenCV's RNG when the LSH tables are drawn (OpenCV's RNG is per thread: seeded and used in
#: the same call, so other threads and earlier draws do not change the tables; the building thread's
#: OpenCV RNG is left in this seeded state).
LSH_SEED = 0
#: Lowe's ratio test default: the nearest descriptor must be closer than this fraction of the second.
RATIO = 0.8
#: Tag of the saved file, so that :meth:`KeypointIndex.load` refuses other .npz files.
FORMAT = "geofidelity-bench keypoint index v1"


def settings() -> str:
    """The index's search settings as one string (saved with the index, shown in reports)."""
    lsh = ", ".join(f"{k}={v}" for k, v in {**LSH_PARAMS, **LSH_SEARCH}.items())
    return f"exact (BFMatcher NORM_HAMMING) up to {EXACT_MAX} descriptors, else FLANN LSH ({lsh}, seed {LSH_SEED})"


class KeypointIndex:
    """ORB descriptors of a pool's photos and the photo (position in the pool) owning each.

    Queries are safe from several threads at once: the exact backend uses a new matcher per query; the
    LSH matcher is built once (seeded) and searched under a lock, as OpenCV does not promise that a
    FLANN matcher may be searched concurrently."""

    def __init__(self, descriptors: np.ndarray, owners: np.ndarray) -> None:
        desc = np.ascontiguousarray(descriptors, dtype=np.uint8).reshape(-1, 32)
        own = np.ascontiguousarray(owners, dtype=np.int64).reshape(-1)
        if len(desc) != len(own):
            raise ValueError(f"{len(desc)} descriptors but {len(own)} owners")
        if len(own) and own.min() < 0:
            raise ValueError("owners must be pool positions (>= 0)")
        self.descriptors = desc
        self.owners = own
        self._lock = threading.Lock()
        self._flann = None

    def __len__(self) -> int:
        return len(self.descriptors)

    @property
    def backend(self) -> str:
        """'exact' up to :data:`EXACT_MAX` descriptors (read when called, so tests may lower it), else 'lsh'."""
        return "exact" if len(self) <= EXACT_MAX else "lsh"

    def _lsh(self):
        """The FLANN LSH matcher, built on first use with OpenCV's RNG seeded (call under the lock)."""
        if self._flann is None:
            import cv2

            cv2.setRNGSeed(LSH_SEED)
            m = cv2.FlannBasedMatcher(dict(LSH_PARAMS), dict(LSH_SEARCH))
            m.add([self.descriptors])
            m.train()
            self._flann = m
        return self._flann

    def _pairs(self, q: np.ndarray):
        if self.backend == "exact":
            import cv2

            return cv2.BFMatcher(cv2.NORM_HAMMING).knnMatch(q, self.descriptors, k=2)
        with self._lock:
            return self._lsh().knnMatch(q, k=2)

    def votes(self, query_descs: list[np.ndarray | None], n_owners: int, *, ratio: float = RATIO) -> np.ndarray:
        """Votes per owner (int64, length ``n_owners``): query descriptors whose nearest index descriptor
        passes the ratio test vote for that descriptor's owner, summed over ``query_descs`` (an audited
        image and its mirror image). None, or fewer than 2 descriptors, and an index of fewer than 2
        descriptors give no votes."""
        out = np.zeros(n_owners, np.int64)
        if len(self) < 2:
            return out
        if len(self.owners) and self.owners.max() >= n_owners:
            raise ValueError(f"owners go up to {int(self.owners.max())}, beyond n_owners={n_owners}")
        for q in query_descs:
            if q is None or len(q) < 2:
                continue
            q = np.ascontiguousarray(q, dtype=np.uint8).reshape(-1, 32)
            hit = [p[0].trainIdx for p in self._pairs(q) if len(p) == 2 and p[0].distance < ratio * p[1].distance]
            if hit:
                out += np.bincount(self.owners[np.asarray(hit, np.int64)], minlength=n_owners)
        return out

    def save(self, path: str | os.PathLike) -> Path:
        """Writes descriptors, owners and :func:`settings` as one .npz, atomically (the LSH tables are
        not saved: :meth:`load` draws them again, identically)."""
        def write(tmp: Path) -> None:
            with open(tmp, "wb") as fh:
                np.savez(fh, format=np.array(FORMAT), settings=np.array(settings()),
                         descriptors=self.descriptors, owners=self.owners)

        return atomic_write(path, write)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "KeypointIndex | None":
        """The index saved at ``path``, or None when the file is missing, unreadable or not an index
        (the caller rebuilds it from the photos)."""
        try:
            with np.load(path, allow_pickle=False) as z:
                if str(z["format"]) != FORMAT:
                    return None
                desc, own = z["descriptors"], z["owners"]
            if desc.dtype != np.uint8 or desc.ndim != 2 or desc.shape[1] != 32 or own.ndim != 1:
                return None
            return cls(desc, own)
        except Exception:  # noqa: BLE001 - any unreadable file is a missing index
            return None
