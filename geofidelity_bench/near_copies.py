"""The copy audit: submitted images that are (nearly) copies of the benchmark's own photos.

A generated panel made of a block's reference photos scores "better than held-out real": the score
then says nothing about a model. docs/benchmark.md section 5 (Copy audit) defines the audit; in
short, every audited image is compared with EVERY photo of the benchmark (the gallery and held-out
photos of all blocks, and the world pool) in two ways:

* **perceptual hashes** (the ``imagehash`` library): a 256-bit pHash and a 256-bit dHash of the
  grayscale image, of :data:`CROP_BOXES` crops of it (up to 10 % off each side, so a small crop
  or an added border still lines up) and of its mirror image (a horizontal flip). The *hash
  distance* of two images is the larger of their aligned pHash and dHash distances (both hashes
  must agree), the aligned distance being the smallest Hamming distance between one image (or its
  mirror) and the crops of the other;
* **the embedding nearest neighbour**: the cosine similarity of the raw embeddings (the
  evaluation's encoder).

An image is *flagged* as a copy of a photo when its bytes are that photo's (sha256), when their hash
distance is at most :data:`HASH_DISTANCE_MAX`, or when their cosine is at least
:data:`COPY_COSINE` (the only test for a panel given as embeddings, which has no pixels). Hash
distances are computed for the :data:`CANDIDATES` nearest photos by embedding and the
:data:`CANDIDATES` nearest by the full-image pHash, so the cost grows with images x photos only
through matrix products and XORs. The thresholds were calibrated on the demo benchmark
(``scripts/calibrate_copy_audit.py``): distinct photos of one place are never flagged, resized,
recompressed, cropped, bordered, brightened and flipped copies always are.

Reference hashes are kept in a :class:`HashCache` keyed by image sha256, so a benchmark's photos are
hashed once, not on every run.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .errors import GeoFidelityError
# the hashes themselves (re-exported: near_copies is where users and the tests find them)
from .perceptual_hashes import (  # noqa: F401
    CROP_BOXES,
    CROP_POSITIONS,
    CROP_SCALES,
    HASH_SIZE,
    HASH_THUMBNAIL,
    MEMO_SIZE,
    WORDS,
    HashCache,
    aligned_distance,
    hash_items,
    image_hashes,
    item_bytes,
    popcount,
)

#: Two images whose hash distance (the larger of the aligned pHash and dHash distances, 0-256
#: bits) is at most this are copies. On the demo benchmark distinct photos are >= 68 bits apart,
#: copies <= 54 (docs/benchmark.md section 5, Copy audit).
HASH_DISTANCE_MAX = 60
#: Cosine similarity of the raw embeddings from which an image is a copy whatever its hashes say
#: (and the only test for panels given as embeddings). On the demo (efficientnet-lite0) distinct
#: photos reach 0.932, the full-resolution originals of its Berlin photos 0.991-0.996.
COPY_COSINE = 0.99
#: Kept for readers of the old name: the cosine rule.
NEAR_COPY_COSINE = COPY_COSINE
#: Hash distances are computed for this many nearest photos by embedding and by full-image pHash.
CANDIDATES = 5
#: What run.json and the docs call the reference set.
COMPARED_WITH = ("every photo of the benchmark (gallery and held-out photos of all blocks) and the world pool")
WORLD = "world"




def thresholds() -> dict[str, Any]:
    """The audit's settings, as run.json and the audit report record them."""
    import imagehash

    return {"hash_distance_max": HASH_DISTANCE_MAX, "copy_cosine": COPY_COSINE,
            "hashes": f"imagehash {imagehash.__version__} phash+dhash, hash_size {HASH_SIZE} ({HASH_SIZE ** 2} bits)",
            "hash_distance": "max(aligned pHash distance, aligned dHash distance)",
            "crop_scales": list(CROP_SCALES), "crop_positions": list(CROP_POSITIONS), "mirror": True,
            "thumbnail": HASH_THUMBNAIL, "candidates": CANDIDATES, **_geometry_settings()}


def _geometry_settings() -> dict[str, Any]:
    if not geometry_available():
        return {}
    from . import copy_geometry as cg

    from . import keypoint_index

    return {"geometry": {**cg.settings(), "index": cg.index_settings(), "index_search": keypoint_index.settings(),
                         "index_candidates": cg.INDEX_CANDIDATES, "min_votes": cg.MIN_VOTES,
                         "min_votes_candidate": cg.MIN_VOTES_CANDIDATE}}


METHOD = ("perceptual hashes (pHash and dHash, 256 bits, over crops and the mirror image) and the embedding "
          "nearest neighbour; flagged at identical bytes, hash distance <= {h} or cosine >= {c}")
METHOD_GEOMETRY = ("; candidates are also checked with local features (ORB keypoints matched under an affine "
                   "transform, RANSAC, then the aligned pixels compared): flagged at median tile correlation >= {n} "
                   "(an edited copy: crop, rotation, mirror, border, collage)")


def method_text() -> str:
    text = METHOD.format(h=HASH_DISTANCE_MAX, c=COPY_COSINE)
    if geometry_available():
        from .copy_geometry import LOCAL_NCC_MIN

        text += METHOD_GEOMETRY.format(n=LOCAL_NCC_MIN)
    return text


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


@dataclass
class ReferencePool:
    """The photos an image is compared with: ids, block ids (``"world"`` for the pool), sha256,
    unit embeddings (or None) and hash banks (a zero-row bank for a photo that could not be hashed)."""

    ids: list[str]
    blocks: list[str]
    heldout: list[bool]
    shas: list[str]
    embeddings: np.ndarray | None
    banks: np.ndarray  # (n, 2, CROP_BOXES + 1, 4) uint64
    #: the photos themselves (pool order), for the geometric check; None: hashes and embeddings only
    items: list | None = None

    def __len__(self) -> int:
        return len(self.ids)


def pool_items(benchmark) -> list[Any]:
    """Every photo the audit compares with, in pool order: the references by reference id, then the
    world pool by image id (what :func:`reference_pool` expects embeddings of)."""
    refs = sorted(benchmark.references, key=lambda r: r.reference_id)
    return [*refs, *sorted(benchmark.world, key=lambda w: w.image_id)]


def reference_pool(benchmark, embeddings: np.ndarray | None = None, *, hash_cache: HashCache | None = None,
                   progress: bool = False) -> ReferencePool:
    """The :class:`ReferencePool` of ``benchmark``; ``embeddings``: raw embeddings of :func:`pool_items`."""
    from .benchmark import ReferenceImage

    items = pool_items(benchmark)
    held = {r.reference_id for b in benchmark.block_ids for r in benchmark.heldout(b)}
    names = [f"reference {x.reference_id}" if isinstance(x, ReferenceImage) else f"world image {x.image_id}"
             for x in items]
    banks, shas = hash_items(items, cache=hash_cache, names=names, progress=progress)
    if embeddings is not None and len(embeddings) != len(items):
        raise ValueError(f"{len(embeddings)} pool embeddings for {len(items)} pool photos")
    return ReferencePool(
        ids=[x.reference_id if isinstance(x, ReferenceImage) else x.image_id for x in items],
        blocks=[x.block_id if isinstance(x, ReferenceImage) else WORLD for x in items],
        heldout=[isinstance(x, ReferenceImage) and x.reference_id in held for x in items],
        shas=[s or "" for s in shas],
        embeddings=None if embeddings is None else _unit(embeddings),
        banks=np.stack(banks) if banks else np.zeros((0, 2, CROP_BOXES + 1, WORDS), dtype=np.uint64),
        items=list(items),
    )


def _top(scores: np.ndarray, k: int, largest: bool) -> np.ndarray:
    """Column indices of the k best scores of each row (any order)."""
    k = min(k, scores.shape[1])
    if k <= 0:
        return np.zeros((len(scores), 0), dtype=np.int64)
    s = -scores if largest else scores
    return np.argpartition(s, k - 1, axis=1)[:, :k]


QUERY_ROWS = 1024


def candidates(pool: ReferencePool, banks: Sequence[np.ndarray | None], embeddings: np.ndarray | None,
               shas: Sequence[str | None], *, exclude: Sequence[Iterable[int]] | None = None,
               query_items: Sequence[Any] | None = None, geometry_cache: "GeometryCache | None" = None,
               num_workers: int | None = None) -> list[list[dict]]:
    """For each query: its candidate pool photos (the :data:`CANDIDATES` nearest by embedding and by
    full-image pHash, and every photo with the same bytes), each ``{"pos", "hash_distance", "cosine",
    "exact", "flagged", "geometry"}``. ``exclude[i]``: pool positions query ``i`` is not compared with (itself).

    With ``query_items`` (the queries' images; None for one without pixels) and a pool that keeps its
    photos, each query is also checked geometrically (:mod:`geofidelity_bench.copy_geometry`) against its
    candidates and the photos its local features retrieve: ``geometry`` is the verdict (or None), and a
    verified one flags the pair."""
    n = len(banks)
    unit = None if embeddings is None else _unit(embeddings)
    sha_pos: dict[str, list[int]] = {}
    for j, s in enumerate(pool.shas):
        if s:
            sha_pos.setdefault(s, []).append(j)
    full = pool.banks[:, 0, 0, :] if len(pool) else None  # the whole-image pHash of every pool photo
    out: list[list[dict]] = []
    for start in range(0, n, QUERY_ROWS):
        stop = min(n, start + QUERY_ROWS)
        cos = None
        if unit is not None and pool.embeddings is not None and len(pool):
            cos = unit[start:stop] @ pool.embeddings.T
        hd = None
        if len(pool) and any(banks[i] is not None for i in range(start, stop)):
            q = np.stack([banks[i][0, [0, CROP_BOXES], :] if banks[i] is not None else np.zeros((2, WORDS), np.uint64)
                          for i in range(start, stop)])
            hd = popcount(q[:, :, None, :] ^ full[None, None, :, :]).min(axis=1).astype(np.float64)
        for r, i in enumerate(range(start, stop)):
            skip = sorted(set(exclude[i])) if exclude is not None else []
            c_row = cos[r].copy() if cos is not None else None
            h_row = hd[r].copy() if hd is not None and banks[i] is not None else None
            if skip:
                if c_row is not None:
                    c_row[skip] = -np.inf
                if h_row is not None:
                    h_row[skip] = np.inf
            cand: list[int] = []
            if c_row is not None:
                cand += _top(c_row[None, :], CANDIDATES, True)[0].tolist()
            if h_row is not None:
                cand += _top(h_row[None, :], CANDIDATES, False)[0].tolist()
            exact_pos = {j for j in sha_pos.get(shas[i] or "", []) if j not in skip}
            cand = sorted({j for j in cand if j not in skip} | exact_pos)
            dist = (aligned_distance(np.repeat(banks[i][None], len(cand), axis=0), pool.banks[np.array(cand)])
                    if banks[i] is not None and cand else None)
            found = []
            for k, j in enumerate(cand):
                h = int(dist[k]) if dist is not None else None
                c = float(c_row[j]) if c_row is not None else None
                is_exact = j in exact_pos
                flagged = is_exact or (h is not None and h <= HASH_DISTANCE_MAX) or (c is not None and c >= COPY_COSINE)
                found.append({"pos": j, "hash_distance": h, "cosine": c, "exact": is_exact, "flagged": flagged,
                              "geometry": None})
            out.append(found)
    if query_items is not None and pool.items is not None and len(pool):
        _geometry(pool, out, banks, unit, shas, query_items, exclude, geometry_cache, num_workers)
    return out


def _best(found: Sequence[dict]) -> dict | None:
    """The matched photo (flagged first, identical bytes first, then the smallest hash distance, then the
    highest cosine), or when nothing is flagged the embedding nearest neighbour (else the hash nearest)."""
    if not found:
        return None
    flagged = [f for f in found if f["flagged"]]
    if flagged:
        def by_hash(f):
            h = f["hash_distance"]
            return h if h is not None and h <= HASH_DISTANCE_MAX else 10 ** 6

        def ncc(f):
            g = f.get("geometry")
            return g["local_ncc"] if g and g.get("verified") else -2.0

        return min(flagged, key=lambda f: (not f["exact"], by_hash(f), -ncc(f),
                                           -(f["cosine"] if f["cosine"] is not None else -2.0), f["pos"]))
    with_cos = [f for f in found if f["cosine"] is not None]
    if with_cos:
        return max(with_cos, key=lambda f: (f["cosine"], -f["pos"]))
    return min(found, key=lambda f: (f["hash_distance"], f["pos"]))


def nearest(pool: ReferencePool, banks: Sequence[np.ndarray | None], embeddings: np.ndarray | None,
            shas: Sequence[str | None], *, exclude: Sequence[Iterable[int]] | None = None,
            query_items: Sequence[Any] | None = None, geometry_cache: "GeometryCache | None" = None,
            num_workers: int | None = None) -> list[dict]:
    """For each query: the matched (or nearest) pool photo, its hash distance and cosine, exact, flagged;
    with ``query_items`` (see :func:`candidates`) also ``matched_by``, and for a geometric match ``region``
    (the copied region, [x0, y0, x1, y1] in the query's pixels), ``edit`` (the kinds of edit found, joined
    by "+") and ``local_ncc``."""
    out = []
    for found in candidates(pool, banks, embeddings, shas, exclude=exclude, query_items=query_items,
                            geometry_cache=geometry_cache, num_workers=num_workers):
        b = _best(found)
        if b is None:
            out.append({"reference_id": None, "reference_block_id": None, "hash_distance": None, "cosine": None,
                        "exact": False, "flagged": False})
            continue
        rec = {"reference_id": pool.ids[b["pos"]], "reference_block_id": pool.blocks[b["pos"]],
               "hash_distance": b["hash_distance"],
               "cosine": None if b["cosine"] is None else round(b["cosine"], 6),
               "exact": bool(b["exact"]), "flagged": bool(b["flagged"])}
        rec.update(_geometry_fields(b))
        out.append(rec)
    return out


def _matched_by(f: Mapping[str, Any]) -> str | None:
    if not f["flagged"]:
        return None
    if f["exact"]:
        return "bytes"
    if f["hash_distance"] is not None and f["hash_distance"] <= HASH_DISTANCE_MAX:
        return "hashes"
    g = f.get("geometry")
    if g and g.get("verified"):
        return "geometry"
    return "embedding"


def _geometry_fields(f: Mapping[str, Any]) -> dict[str, Any]:
    """The optional fields of an audit record that the geometric check adds (absent in old run.json files)."""
    out: dict[str, Any] = {}
    if "geometry" not in f:
        return out
    out["matched_by"] = _matched_by(f)
    g = f.get("geometry")
    if g is not None:
        out["local_ncc"] = g["local_ncc"]
        if g.get("verified"):
            out["region"] = list(g["region"])
            out["edit"] = "+".join(g["kinds"]) or ("identical" if f["exact"] else "copy")
    return out


# -- the geometric check ----------------------------------------------------------------------


def geometry_available() -> bool:
    """Whether OpenCV (``opencv-python-headless``, a dependency) can be imported: without it the audit is
    the hashes and the embedding nearest neighbour only, as before."""
    from importlib.util import find_spec

    return find_spec("cv2") is not None


def _geometry_key() -> str:
    from . import copy_geometry as cg

    text = repr(sorted(_geometry_settings()["geometry"].items())) + f"|{CANDIDATES}|v2"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _pool_fingerprint(pool: ReferencePool) -> str:
    fp = getattr(pool, "_fingerprint", None)
    if fp is None:
        fp = hashlib.sha256("\n".join(pool.shas).encode()).hexdigest()[:16]
        pool._fingerprint = fp  # type: ignore[attr-defined]
    return fp


class GeometryCache:
    """The geometric verdicts of audited images, on disk beside the hash cache, keyed by (the pool's photos,
    the image's sha256): a second ``evaluate`` of the same images neither decodes them nor matches features.

    One JSON shard per run (written atomically through the caches' shared mechanism); an unreadable
    shard is ignored (its images are checked again)."""

    def __init__(self, root: str | os.PathLike, *, write_guard=None) -> None:
        from .cache_files import WriteGuard

        self.dir = Path(root) / "copy-geometry" / _geometry_key()
        self._mem: dict[str, dict] | None = None
        self._guard = write_guard or WriteGuard("copy-geometry cache", "The copy audit checks the images again next run.")

    @classmethod
    def beside(cls, hash_cache: "HashCache | None") -> "GeometryCache | None":
        if hash_cache is None:
            return None
        return cls(hash_cache.dir.parent.parent, write_guard=hash_cache._guard)

    def _load(self) -> dict[str, dict]:
        import json

        if self._mem is None:
            self._mem = {}
            for shard in sorted(self.dir.glob("verdicts-*.json")) if self.dir.is_dir() else []:
                try:
                    data = json.loads(shard.read_text())
                    if data.get("settings") != self.dir.name or not isinstance(data.get("entries"), dict):
                        continue
                    self._mem.update(data["entries"])
                except (OSError, ValueError, AttributeError):
                    continue
        return self._mem

    def get(self, key: str) -> dict | None:
        return self._load().get(key)

    def put(self, entries: Mapping[str, dict]) -> None:
        import json

        if not entries:
            return
        data = json.dumps({"settings": self.dir.name, "entries": dict(entries)}, sort_keys=True).encode()
        name = hashlib.sha256(data).hexdigest()[:20]
        self._guard.write(self.dir, f"verdicts-{name}.json", data, config_file="settings.json", config=None,
                          config_hash=self.dir.name)
        self._load().update(entries)


_geometry_memo: "OrderedDict[str, dict]" = OrderedDict()


def _geometry(pool: ReferencePool, out: list[list[dict]], banks, unit, shas, query_items, exclude,
              cache: "GeometryCache | None", num_workers: int | None) -> None:
    """Adds the geometric verdicts to each query's candidates (``out``, in place); see :func:`candidates`."""
    if not geometry_available():
        return
    from contextlib import closing

    from PIL import Image

    from . import copy_geometry as cg
    from .prefetch import ordered_map, resolve_num_workers

    stage = getattr(pool, "_geometry_stage", None)
    if stage is None:
        stage = cg.GeometryStage(pool, index_dir=None if cache is None else cache.dir,
                                 write_guard=None if cache is None else cache._guard)
        pool._geometry_stage = stage  # type: ignore[attr-defined]
    fp = _pool_fingerprint(pool)
    pos_of = {}
    for j, s_ in enumerate(pool.shas):
        pos_of.setdefault(s_, j)
    todo, verdicts, keys = [], {}, {}
    for i, found in enumerate(out):
        item = query_items[i] if i < len(query_items) else None
        if item is None or isinstance(item, np.ndarray) or any(f["exact"] for f in found):
            continue
        skip = frozenset(exclude[i]) if exclude is not None else frozenset()
        # keyed by the pool, the image and the photos it is not compared with (itself, inside a benchmark)
        key = (f"{fp}:{shas[i]}" + (":x" + ",".join(sorted(pool.shas[j] for j in skip)) if skip else "")
               if shas[i] else None)
        hit = None
        if key is not None:
            hit = _geometry_memo.get(key)
            if hit is None and cache is not None:
                hit = cache.get(key)
        if hit is not None:
            verdicts[i] = {pos_of[sh]: v for sh, v in hit.items() if sh in pos_of}
        else:
            todo.append(i)
            keys[i] = key

    def run(i: int) -> dict[int, dict]:
        item = query_items[i]
        skip = set(exclude[i]) if exclude is not None else set()
        try:
            from .images import load_image

            image = item if isinstance(item, Image.Image) else load_image(item_bytes(item))
        except Exception:  # noqa: BLE001 - undecodable: no geometry (evaluate names such images elsewhere)
            return {}
        by_hash = [f["pos"] for f in out[i] if f["flagged"] and f["pos"] not in skip]
        if by_hash:  # already a copy by its hashes: the geometry of those photos only (the edit and the region)
            return stage.check(image, by_hash, exclude=skip, retrieve=False)
        return stage.check(image, [f["pos"] for f in out[i] if f["pos"] not in skip], exclude=skip)

    new_entries = {}
    workers = resolve_num_workers(num_workers)
    with closing(ordered_map(run, todo, num_workers=workers, ahead=2 * max(1, workers))) as results:
        for i, v in zip(todo, results):
            verdicts[i] = v
            if keys.get(i):
                entry = {pool.shas[j]: g for j, g in v.items()}
                new_entries[keys[i]] = entry
                _geometry_memo[keys[i]] = entry
                while len(_geometry_memo) > MEMO_SIZE:
                    _geometry_memo.popitem(last=False)
    if cache is not None and new_entries:
        cache.put(new_entries)
    for i, v in verdicts.items():
        have = {f["pos"]: f for f in out[i]}
        for j, g in v.items():
            f = have.get(j)
            if f is None:  # a photo only the local features found: its hash distance and cosine for the record
                h = (int(aligned_distance(banks[i][None], pool.banks[j][None])[0]) if banks[i] is not None else None)
                c = float(unit[i] @ pool.embeddings[j]) if unit is not None and pool.embeddings is not None else None
                f = {"pos": j, "hash_distance": h, "cosine": c, "exact": False,
                     "flagged": (h is not None and h <= HASH_DISTANCE_MAX) or (c is not None and c >= COPY_COSINE)}
                out[i].append(f)
            f["geometry"] = g
            if g.get("verified"):
                f["flagged"] = True
        for f in out[i]:
            f.setdefault("geometry", None)


# -- submitted panels ---------------------------------------------------------------------------


def audit_panels(
    pool: ReferencePool,
    panel_items: Mapping[tuple[str, str, str], Sequence[Any]],
    panel_embeddings: Mapping[tuple[str, str, str], np.ndarray],
    *,
    names: Mapping[tuple[str, str, str], Sequence[str]] | None = None,
    hash_cache: HashCache | None = None,
    progress: bool = False,
    num_workers: int | None = None,
) -> list[dict]:
    """One record per image of every panel in ``panel_embeddings`` (panel order, then image order).

    Args:
        pool: the photos compared with (:func:`reference_pool`).
        panel_items: the panels' items (paths, bytes, PIL images, ReferenceImage ...); a panel given as
            an embedding array (or missing here) is compared by cosine only.
        panel_embeddings: the panels' raw embeddings, by key (same order as the items).
        names: what to call each image (default: its path, or its position in the panel).
        hash_cache: where the hash banks of items with bytes are kept (None: computed every time).

    Returns:
        Records ``{method, condition, block_id, file, sha256, reference_id, reference_block_id,
        hash_distance, cosine, exact, flagged}`` (docs/benchmark.md section 11, run.json ``copy_audit``).
        ``sha256`` is the hex sha256 of the image's encoded bytes (a file's or bytes item's own bytes, a
        benchmark photo's stored hash), so a record names exactly the file that was audited and scored;
        None for an item without bytes (a PIL image, an embedding).
    """
    from .benchmark import item_name

    keys = list(panel_embeddings)
    flat_items, flat_names, flat_emb = [], [], []
    for key in keys:
        emb = np.asarray(panel_embeddings[key])
        items = panel_items.get(key)
        items = list(items) if items is not None and not isinstance(items, np.ndarray) else [None] * len(emb)
        for i, item in enumerate(items):
            if names is not None and key in names:
                name = names[key][i]
            else:
                name = item_name(item, f"panel image {i}") if item is not None else f"embedding {i}"
            flat_items.append(item)
            flat_names.append(name)
        flat_emb.append(emb)
    hashable = [x if x is not None else np.zeros(1) for x in flat_items]
    banks, shas = hash_items(hashable, cache=hash_cache, names=flat_names, progress=progress,
                             num_workers=num_workers)
    embeddings = np.concatenate(flat_emb) if flat_emb else None
    if embeddings is not None and len(embeddings) == 0:
        embeddings = None
    found = (nearest(pool, banks, embeddings, shas, query_items=flat_items,
                     geometry_cache=GeometryCache.beside(hash_cache), num_workers=num_workers) if flat_items else [])
    records, row = [], 0
    for key in keys:
        for _ in range(len(panel_embeddings[key])):
            records.append({"method": key[0], "condition": key[1], "block_id": key[2], "file": flat_names[row],
                            "sha256": shas[row], **found[row]})
            row += 1
    return records


def audit_summary(records: Sequence[Mapping[str, Any]], *, excluded: bool = False) -> dict[str, Any]:
    """run.json's ``copy_audit`` (docs/benchmark.md section 11)."""
    return {"thresholds": thresholds(), "method": method_text(), "compared_with": COMPARED_WITH,
            "n_audited": len(records), "n_flagged": sum(bool(r["flagged"]) for r in records), "excluded": bool(excluded),
            "images": [dict(r) for r in records]}


class AuditRecordError(GeoFidelityError, ValueError):
    """A run.json's copy audit cannot give what was asked of it; the message names the panel and file."""


def panel_image_hashes(run_info: Mapping[str, Any]) -> dict[tuple[str, str, str], list[str]]:
    """(method, condition, block_id) -> the sorted sha256 of the panel's audited images, from a run.json.

    Every generated panel ``evaluate`` scored is in the copy audit (``copy_audit.images``), one record
    per image with the sha256 of its bytes; the real-image anchors (condition ``anchor``, not audited)
    and the demo's sanity methods (condition ``sanity``) are left out. Sorted, the list is the panel's
    content whatever the file names: two runs scored the same images when their lists are equal.

    Raises:
        AuditRecordError: the run.json has no copy audit, or a record has no sha256 (a run.json written
            before the audit recorded hashes, or a panel given without bytes); the message names the
            panel and the file.
    """
    from .record_checks import ANCHOR_CONDITION, RESERVED_METHODS, SANITY_CONDITION

    audit = run_info.get("copy_audit") if isinstance(run_info, Mapping) else None
    if not isinstance(audit, Mapping) or not isinstance(audit.get("images"), list):
        raise AuditRecordError("run.json has no copy_audit.images (the copy audit of evaluate, docs/benchmark.md "
                               "section 11); evaluate the panels again with this version")
    out: dict[tuple[str, str, str], list[str]] = {}
    for i, record in enumerate(audit["images"]):
        key = (str(record.get("method")), str(record.get("condition")), str(record.get("block_id")))
        if key[1] in (ANCHOR_CONDITION, SANITY_CONDITION) or key[0] in RESERVED_METHODS:
            continue
        sha = record.get("sha256")
        if not isinstance(sha, str) or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
            what = "has no sha256" if sha is None else f"has sha256 {sha!r}, not 64 lowercase hex digits"
            raise AuditRecordError(f"run.json copy_audit.images[{i}]: panel {'/'.join(key)}, file "
                                   f"{record.get('file')!r} {what} (a run.json written before the audit recorded "
                                   "hashes, or an image given without bytes); evaluate the panels again")
        out.setdefault(key, []).append(sha)
    return {key: sorted(shas) for key, shas in out.items()}


def copied_counts(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], int]:
    """(method, condition, block_id) -> how many of the panel's images are flagged (every audited panel)."""
    out: dict[tuple[str, str, str], int] = {}
    for r in records:
        key = (r["method"], r["condition"], r["block_id"])
        out[key] = out.get(key, 0) + int(bool(r["flagged"]))
    return out


def find_near_copies(benchmark, panel_items, panel_embeddings, pool_embeddings=None, *, names=None,
                     hash_cache=None) -> list[dict]:
    """The flagged records only (:func:`audit_panels` against the whole benchmark)."""
    pool = reference_pool(benchmark, pool_embeddings, hash_cache=hash_cache)
    return [r for r in audit_panels(pool, panel_items, panel_embeddings, names=names, hash_cache=hash_cache)
            if r["flagged"]]


def _describe(r: Mapping[str, Any]) -> str:
    where = "the world pool" if r["reference_block_id"] == WORLD else f"block {r['reference_block_id']}"
    how = ("identical bytes" if r.get("exact") else
           ", ".join(x for x in (f"hash distance {r['hash_distance']}" if r.get("hash_distance") is not None else None,
                                 f"cosine {r['cosine']:.3f}" if r.get("cosine") is not None else None) if x))
    if r.get("matched_by") == "geometry" and r.get("local_ncc") is not None:
        how = ", ".join(x for x in (how, f"aligned-pixel correlation {r['local_ncc']:.2f}") if x)
    if r.get("edit") and r["edit"] not in ("copy", "identical"):
        how += f"; edited: {r['edit']}"
    if r.get("region"):
        how += f"; region {tuple(r['region'])}"
    return f"{r['file']} ({r['method']}/{r['condition']}/{r['block_id']}) = photo {r['reference_id']} of {where} ({how})"


def near_copies_warning(records: Sequence[Mapping[str, Any]], *, first: int = 10,
                        recorded_in: str | None = "run.json") -> str | None:
    """One warning naming the first ``first`` copied files, their matched photos, and how many there are."""
    records = [r for r in records if r.get("flagged", True)]
    if not records:
        return None
    listed = "; ".join(_describe(r) for r in records[:first])
    more = f"; and {len(records) - first} more" if len(records) > first else ""
    expected = [m for m in sorted({r["method"] for r in records}) if m in EXPECTED_COPIES]
    note = (f". {' and '.join(expected)} {'is' if len(expected) == 1 else 'are'} made of the benchmark's own photos "
            "by construction: flagged as expected" if expected else "")
    geo = " or an edited copy found by local features" if any(r.get("matched_by") == "geometry" for r in records) else ""
    return (f"{len(records)} submitted image(s) are copies of the benchmark's own photos (identical bytes, hash "
            f"distance <= {HASH_DISTANCE_MAX}, cosine >= {COPY_COSINE}{geo}): {listed}{more}. Such panels score like real "
            "photos of the block, not like a model's images" + note
            + (f" (all listed under near_copies in {recorded_in}; `evaluate --exclude-copies` scores without them)"
               if recorded_in else ""))


#: Methods that are copies by construction: the demo's sanity methods are made of the benchmark's own
#: photos (lightly augmented held-out photos; photos of the world pool), so the audit flags them.
EXPECTED_COPIES = ("sanity_augmented_heldout", "sanity_world")


__all__ = ["COPY_COSINE", "CROP_BOXES", "HASH_DISTANCE_MAX", "HASH_SIZE", "AuditRecordError", "HashCache",
           "NEAR_COPY_COSINE", "ReferencePool", "aligned_distance", "audit_panels", "audit_summary", "copied_counts",
           "find_near_copies", "hash_items", "image_hashes", "near_copies_warning", "nearest", "panel_image_hashes",
           "pool_items", "reference_pool", "thresholds"]


# -- inside a benchmark -------------------------------------------------------------------------

#: Kinds of near-duplicate pairs inside a benchmark (docs/benchmark.md section 5, Copy audit).
PAIR_KINDS = {
    "heldout_vs_own_gallery": "a held-out photo near-duplicates a gallery photo of its own block: the held-out "
                              "anchor (heldout_real) scores too well",
    "within_block": "two gallery (or two held-out) photos of one block near-duplicate each other",
    "cross_block": "photos of two blocks near-duplicate each other: a leak between a target and its negatives",
    "world": "a reference photo near-duplicates a photo of the world pool",
}


def audit_benchmark(benchmark, pool_embeddings: np.ndarray | None = None, *, hash_cache: HashCache | None = None,
                    progress: bool = False) -> dict[str, Any]:
    """The copy audit inside a benchmark: every reference photo against every other photo of the benchmark
    (references of all blocks and the world pool), with the thresholds of submitted images.

    Args:
        pool_embeddings: raw embeddings of :func:`pool_items` (None: hashes and bytes only).

    Returns:
        ``{"thresholds", "method", "embeddings": bool, "pairs": [...], "blocks": [...]}``: one record per
        flagged pair (``reference_id``, ``block_id``, ``role``, ``duplicate_id``, ``duplicate_block_id``,
        ``duplicate_role``, ``kind`` (:data:`PAIR_KINDS`), ``hash_distance``, ``cosine``, ``exact``), each pair
        once; and one record per block (its photos, the closest held-out/own-gallery pair, flagged pairs by kind).
    """
    pool = reference_pool(benchmark, pool_embeddings, hash_cache=hash_cache, progress=progress)
    n_refs = sum(1 for b in pool.blocks if b != WORLD)
    queries = list(range(n_refs))
    found = candidates(pool, [pool.banks[i] for i in queries],
                       None if pool.embeddings is None else pool.embeddings[:n_refs],
                       [pool.shas[i] for i in queries], exclude=[[i] for i in queries],
                       query_items=None if pool.items is None else [pool.items[i] for i in queries])

    def role(j: int) -> str:
        return WORLD if pool.blocks[j] == WORLD else ("held-out" if pool.heldout[j] else "gallery")

    def kind(i: int, j: int) -> str:
        if pool.blocks[j] == WORLD:
            return "world"
        if pool.blocks[j] != pool.blocks[i]:
            return "cross_block"
        return "heldout_vs_own_gallery" if pool.heldout[i] != pool.heldout[j] else "within_block"

    pairs: dict[tuple[int, int], dict] = {}
    for i, cands in zip(queries, found):
        for f in cands:
            j = f["pos"]
            if not f["flagged"]:
                continue
            a, b = (i, j) if (j >= n_refs or i < j) else (j, i)
            if pool.heldout[b] and not pool.heldout[a] and pool.blocks[a] == pool.blocks[b]:
                a, b = b, a  # the held-out photo first
            rec = {"reference_id": pool.ids[a], "block_id": pool.blocks[a], "role": role(a),
                   "duplicate_id": pool.ids[b], "duplicate_block_id": pool.blocks[b], "duplicate_role": role(b),
                   "kind": kind(a, b), "hash_distance": f["hash_distance"],
                   "cosine": None if f["cosine"] is None else round(f["cosine"], 6), "exact": bool(f["exact"])}
            g = f.get("geometry")
            if g is not None and g.get("verified"):
                rec.update(matched_by=_matched_by(f), edit="+".join(g["kinds"]) or "copy", local_ncc=g["local_ncc"])
            old = pairs.get((min(a, b), max(a, b)))
            if old is None or (rec["hash_distance"] or 0) < (old["hash_distance"] or 0):
                pairs[(min(a, b), max(a, b))] = rec
    pair_list = sorted(pairs.values(), key=lambda r: (r["block_id"], r["reference_id"], r["duplicate_id"]))
    # per block: the closest held-out / own-gallery pair (computed directly, every such pair)
    blocks = []
    pos = {rid: j for j, rid in enumerate(pool.ids)}
    for bid in benchmark.block_ids:
        held = [pos[r.reference_id] for r in benchmark.heldout(bid)]
        gal = [pos[r.reference_id] for r in benchmark.gallery(bid)]
        dmin = cmax = None
        if held and gal:
            a = np.repeat(np.array(held), len(gal))
            b = np.tile(np.array(gal), len(held))
            dmin = int(aligned_distance(pool.banks[a], pool.banks[b]).min())
            if pool.embeddings is not None:
                cmax = round(float((pool.embeddings[held] @ pool.embeddings[gal].T).max()), 6)
        mine = [p for p in pair_list if bid in (p["block_id"], p["duplicate_block_id"])]
        blocks.append({"block_id": bid, "n_references": len(held) + len(gal), "n_heldout": len(held),
                       "n_gallery": len(gal), "min_hash_distance_heldout_vs_gallery": dmin,
                       "max_cosine_heldout_vs_gallery": cmax,
                       **{f"n_{k}": sum(p["kind"] == k for p in mine) for k in PAIR_KINDS},
                       "flagged": bool(mine)})
    return {"thresholds": thresholds(), "method": method_text(), "compared_with": COMPARED_WITH,
            "embeddings": pool.embeddings is not None, "kinds": dict(PAIR_KINDS),
            "n_references": n_refs, "n_world": len(pool) - n_refs, "pairs": pair_list, "blocks": blocks}


def benchmark_audit_markdown(audit: Mapping[str, Any], benchmark_name: str, encoder: str | None) -> str:
    """The audit report: settings, one row per block, and every flagged pair under its block."""
    lines = [f"# Copy audit of benchmark `{benchmark_name}`", "",
             f"Every reference photo ({audit['n_references']}) was compared with every other photo of the benchmark "
             f"and the world pool ({audit['n_world']} photos): {audit['method']}"
             + (f"; embeddings: `{encoder}`." if audit["embeddings"] else "; hashes and bytes only (no encoder).")
             + " docs/benchmark.md section 5 (Copy audit) defines the audit.", ""]
    counts = {k: sum(p["kind"] == k for p in audit["pairs"]) for k in PAIR_KINDS}
    lines += [f"**{len(audit['pairs'])} near-duplicate pair(s)**: "
              + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in counts.items()) + ".", ""]
    for k, text in PAIR_KINDS.items():
        lines.append(f"- *{k.replace('_', ' ')}*: {text}.")
    lines += ["", "| block | photos | held out | closest held-out/gallery hash distance | highest held-out/gallery "
              "cosine | flagged pairs |", "| --- | --- | --- | --- | --- | --- |"]
    for b in audit["blocks"]:
        n = sum(b[f"n_{k}"] for k in PAIR_KINDS)
        dmin, cmax = b["min_hash_distance_heldout_vs_gallery"], b["max_cosine_heldout_vs_gallery"]
        lines.append(f"| `{b['block_id']}` | {b['n_references']} | {b['n_heldout']} | "
                     f"{'–' if dmin is None else dmin} | {'–' if cmax is None else f'{cmax:.3f}'} | {n} |")
    lines += ["", f"A pair is flagged at hash distance <= {HASH_DISTANCE_MAX} (of 256 bits), cosine >= {COPY_COSINE} "
              "or identical bytes.", ""]
    for b in audit["blocks"]:
        mine = [p for p in audit["pairs"] if b["block_id"] in (p["block_id"], p["duplicate_block_id"])]
        lines += [f"## `{b['block_id']}`", ""]
        if not mine:
            lines += ["No near-duplicate pair.", ""]
            continue
        for p in mine:
            how = "identical bytes" if p["exact"] else ", ".join(
                x for x in (f"hash distance {p['hash_distance']}" if p["hash_distance"] is not None else None,
                            f"cosine {p['cosine']:.3f}" if p["cosine"] is not None else None) if x)
            lines.append(f"- {p['kind'].replace('_', ' ')}: `{p['reference_id']}` ({p['role']}, {p['block_id']}) ~ "
                         f"`{p['duplicate_id']}` ({p['duplicate_role']}, {p['duplicate_block_id']}): {how}")
        lines.append("")
    return "\n".join(lines)
