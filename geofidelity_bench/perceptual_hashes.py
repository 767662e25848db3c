"""Perceptual hashes of the copy audit (docs/benchmark.md section 5, Copy audit): the hash bank of an image
(a 256-bit pHash and a 256-bit dHash of the grayscale image, of :data:`CROP_BOXES` crops of it and of its
mirror image), their cache on disk and in this process keyed by image sha256 (:class:`HashCache`), hashing
many items in worker threads (:func:`hash_items`) and the aligned distance of two banks
(:func:`aligned_distance`). :mod:`geofidelity_bench.near_copies` decides with them what is a copy, and
re-exports every name here.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

#: Hash size of pHash and dHash (``hash_size`` of ``imagehash``): HASH_SIZE**2 = 256 bits each.
HASH_SIZE = 16
#: Sides of the crops tried (fractions of each side, independently in x and y) ...
CROP_SCALES = (1.0, 0.95, 0.90)
#: ... and where the crop sits in the room left (0 = left/top, 1 = right/bottom).
CROP_POSITIONS = (0.0, 0.5, 1.0)
#: Each image is reduced to this many pixels on its long side (grayscale) before cropping and hashing.
HASH_THUMBNAIL = 128


def _boxes(w: float, h: float) -> list[tuple[float, float, float, float]]:
    out = []
    for sx in CROP_SCALES:
        for sy in CROP_SCALES:
            cw, ch = w * sx, h * sy
            for px in CROP_POSITIONS if sx < 1 else (0.0,):
                for py in CROP_POSITIONS if sy < 1 else (0.0,):
                    x0, y0 = (w - cw) * px, (h - ch) * py
                    out.append((x0, y0, x0 + cw, y0 + ch))
    return out


#: Crops hashed per image (the first is the whole image); one more hash is its mirror image.
CROP_BOXES = len(_boxes(1.0, 1.0))
WORDS = HASH_SIZE * HASH_SIZE // 64  # uint64 words per hash


# -- hashing ------------------------------------------------------------------------------------


def image_hashes(image) -> np.ndarray:
    """The hash bank of one image: (2, CROP_BOXES + 1, 4) uint64 (pHash, dHash) x (crops, mirror).

    ``image`` is a PIL image (any mode) or anything :func:`~geofidelity_bench.images.load_image` reads.
    """
    import imagehash
    from PIL import Image, ImageOps

    from .images import load_image

    if not isinstance(image, Image.Image):
        image = load_image(image)
    gray = image.convert("L")
    gray.thumbnail((HASH_THUMBNAIL, HASH_THUMBNAIL), Image.Resampling.LANCZOS)
    side = 4 * HASH_SIZE  # pHash's own working size: each crop is resampled to it once
    views = [gray.resize((side, side), Image.Resampling.LANCZOS, box=box) for box in _boxes(*gray.size)]
    views.append(ImageOps.mirror(views[0]))
    bank = np.zeros((2, len(views), HASH_SIZE * HASH_SIZE), dtype=bool)
    for i, view in enumerate(views):
        bank[0, i] = imagehash.phash(view, hash_size=HASH_SIZE).hash.ravel()
        bank[1, i] = imagehash.dhash(view, hash_size=HASH_SIZE).hash.ravel()
    return np.packbits(bank, axis=2).view(">u8").astype(np.uint64)


def _settings_key() -> str:
    import imagehash

    text = f"{imagehash.__version__}|{HASH_SIZE}|{CROP_SCALES}|{CROP_POSITIONS}|{HASH_THUMBNAIL}|lanczos|v1"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class HashCache:
    """Hash banks on disk keyed by image sha256 (one folder per hashing setting), next to the embeddings.

    Each :meth:`put` writes one checksummed ``.npz`` shard atomically, through the caches' shared
    mechanism (:mod:`geofidelity_bench.cache_files`): a shard that fails its checksum or cannot be read
    is set aside as ``*.corrupt`` (one without a checksum or settings key as ``*.unverified``, one whose
    settings key is not its folder's as ``*.foreign``) with a warning and its images are hashed again;
    anything named like a shard that is not a regular file is skipped with a warning; a folder that
    cannot be written gives one warning and the run goes on without caching hashes.
    """

    def __init__(self, root: str | os.PathLike, *, write_guard=None) -> None:
        from .cache_files import WriteGuard

        self.dir = Path(root) / "perceptual-hashes" / _settings_key()
        self._mem: dict[str, np.ndarray] | None = None
        self._guard = write_guard or WriteGuard("perceptual-hash cache",
                                                "The copy audit hashes the photos again next run.")

    @classmethod
    def beside(cls, cache) -> "HashCache | None":
        """The hash cache next to an embedding cache (None without one), sharing its write warning."""
        if cache is None or not hasattr(cache, "root"):
            return None
        return cls(cache.root, write_guard=getattr(cache, "write_guard", None))

    @staticmethod
    def _checksum(keys: np.ndarray, banks: np.ndarray) -> str:
        from .cache_files import payload_sha256

        return payload_sha256("\n".join(map(str, keys)).encode(), np.ascontiguousarray(banks, dtype="<u8").tobytes())

    def _load(self) -> dict[str, np.ndarray]:
        import io

        from .cache_files import CORRUPT_SUFFIX, FOREIGN_SUFFIX, UNVERIFIED_SUFFIX, read_shard_bytes, set_aside

        what = "perceptual-hash cache"
        if self._mem is None:
            self._mem = {}
            for shard in sorted(self.dir.glob("hashes-*.npz")) if self.dir.is_dir() else []:
                try:
                    data = read_shard_bytes(shard, what)
                    if data is None:  # a FIFO or a folder named like a shard: skipped, with a warning
                        continue
                    with np.load(io.BytesIO(data)) as z:
                        checksum = str(z["checksum"]) if "checksum" in z.files else None
                        settings = str(z["settings"]) if "settings" in z.files else None
                        keys, banks = z["keys"], z["banks"]
                    if checksum is None or settings is None:  # written before hash shards had checksums and settings
                        set_aside(shard, UNVERIFIED_SUFFIX, "unverified",
                                  "it has no " + ("checksum" if checksum is None else "settings key"), what)
                        continue
                    if banks.shape != (len(keys), 2, CROP_BOXES + 1, WORDS) or checksum != self._checksum(keys, banks):
                        raise ValueError("it does not match its checksum")
                    if settings != self.dir.name:
                        set_aside(shard, FOREIGN_SUFFIX, "foreign", f"it was hashed with settings {settings[:16]}, "
                                  f"not this folder's {self.dir.name}: copied from another folder?", what)
                        continue
                except FileNotFoundError:  # vanished meanwhile
                    continue
                except Exception as err:  # noqa: BLE001 - unreadable or damaged: its images are hashed again
                    set_aside(shard, CORRUPT_SUFFIX, "damaged", str(err) or type(err).__name__, what)
                    continue
                self._mem.update(zip((str(k) for k in keys), banks))
        return self._mem

    def get(self, shas: Iterable[str]) -> dict[str, np.ndarray]:
        mem = self._load()
        return {s: mem[s] for s in shas if s in mem}

    def put(self, shas: Sequence[str], banks: Sequence[np.ndarray]) -> None:
        import io

        if not shas:
            return
        keys = np.array(list(shas))
        arr = np.stack(list(banks)).astype(np.uint64)
        buf = io.BytesIO()
        np.savez(buf, keys=keys, banks=arr, checksum=np.array(self._checksum(keys, arr)), settings=np.array(self.dir.name))
        name = hashlib.sha256("".join(shas).encode()).hexdigest()[:20]
        self._guard.write(self.dir, f"hashes-{name}.npz", buf.getvalue(), config_file="settings.json", config=None,
                          config_hash=_settings_key())
        self._load().update(zip(shas, arr))


#: Hash banks already computed in this process, by image sha256 (a bank is 640 bytes; the hashes
#: are a pure function of the bytes and the settings above, so a second evaluate, the app or the
#: audit command in the same process neither decodes nor hashes a photo again). Bounded, oldest out.
MEMO_SIZE = 32768
_memo: "OrderedDict[str, np.ndarray]" = OrderedDict()


def _memo_get(shas: Iterable[str]) -> dict[str, np.ndarray]:
    found = {}
    for s in shas:
        bank = _memo.get(s)
        if bank is not None:
            _memo.move_to_end(s)
            found[s] = bank
    return found


def _memo_put(banks: Mapping[str, np.ndarray]) -> None:
    for s, bank in banks.items():
        _memo[s] = bank
        _memo.move_to_end(s)
    while len(_memo) > MEMO_SIZE:
        _memo.popitem(last=False)


def item_bytes(item: Any) -> bytes | None:
    """The encoded bytes of a panel item, when it has them (a PIL image or an embedding has none)."""
    from .benchmark import PoolImage, ReferenceImage

    if isinstance(item, (ReferenceImage, PoolImage)):
        return item.image_bytes
    if isinstance(item, (bytes, bytearray)):
        return bytes(item)
    if isinstance(item, (str, os.PathLike)) and os.path.isfile(item):
        with open(item, "rb") as fh:
            return fh.read()
    return None


def _known_sha(item: Any) -> str | None:
    from .benchmark import PoolImage, ReferenceImage

    if isinstance(item, (ReferenceImage, PoolImage)):
        return item.sha256  # stored: the image is read only when it must be hashed
    return None


def hash_items(items: Sequence[Any], *, cache: HashCache | None = None, names: Sequence[str] | None = None,
               progress: bool = False, num_workers: int | None = None) -> tuple[list[np.ndarray | None], list[str | None]]:
    """The hash bank and sha256 of every item (None for items without pixels, e.g. embeddings).

    Items with bytes (paths, bytes, benchmark photos) are looked up in ``cache`` by sha256 and stored
    there when computed; PIL images are hashed every time (nothing keys them). Images are decoded and
    hashed by ``num_workers`` threads (default: the cores this process may use)."""
    from contextlib import closing

    from PIL import Image

    from .images import load_image
    from .prefetch import ordered_map, resolve_num_workers

    shas: list[str | None] = []
    for item in items:
        sha = _known_sha(item)
        if sha is None and not isinstance(item, (Image.Image, np.ndarray)):
            data = item_bytes(item)
            sha = hashlib.sha256(data).hexdigest() if data else None
        shas.append(sha)
    wanted = {s for s in shas if s}
    cached = cache.get(wanted) if cache is not None else {}
    from_memo = _memo_get(wanted - cached.keys())  # hashed earlier in this process, for another cache folder
    if cache is not None and from_memo:
        cache.put(list(from_memo), list(from_memo.values()))
    cached.update(from_memo)
    banks: list[np.ndarray | None] = [cached.get(s) if s else None for s in shas]
    todo, first_of = [], {}
    for i, item in enumerate(items):
        if banks[i] is not None or isinstance(item, np.ndarray):
            continue  # cached, or an embedding (no pixels)
        if shas[i] and shas[i] in first_of:
            continue  # the same bytes as an earlier item: hashed once
        if shas[i]:
            first_of[shas[i]] = i
        if isinstance(item, Image.Image) or shas[i]:
            todo.append(i)

    def compute(i: int) -> np.ndarray:
        item = items[i]
        image = item if isinstance(item, Image.Image) else load_image(item_bytes(item),
                                                                      name=names[i] if names is not None else None)
        return image_hashes(image)

    bar = None
    if progress and len(todo) > 32:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc="copy audit: hashing images", unit="img")
    new_shas, new_banks = [], []
    workers = resolve_num_workers(num_workers)
    with closing(ordered_map(compute, todo, num_workers=workers, ahead=2 * max(1, workers))) as results:
        for i, bank in zip(todo, results):
            banks[i] = bank
            if shas[i]:
                new_shas.append(shas[i])
                new_banks.append(bank)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    done = dict(zip(new_shas, new_banks))
    for i, s in enumerate(shas):
        if banks[i] is None and s and s in done:
            banks[i] = done[s]
    if cache is not None and new_shas:
        cache.put(new_shas, new_banks)
    _memo_put({s: b for s, b in zip(shas, banks) if s and b is not None})
    return banks, shas


# -- comparing ----------------------------------------------------------------------------------


def popcount(x: np.ndarray) -> np.ndarray:
    """Set bits of each row of uint64 words (the last axis), summed."""
    x = np.ascontiguousarray(x, dtype=np.uint64)
    if hasattr(np, "bitwise_count"):  # numpy >= 2.0
        return np.bitwise_count(x).sum(axis=-1, dtype=np.int64)
    return np.unpackbits(x.view(np.uint8), axis=-1).sum(axis=-1, dtype=np.int64)


def aligned_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hash distance of paired banks ``a[i]``, ``b[i]`` ((n, 2, CROP_BOXES + 1, 4) each): for each hash,
    the smallest distance between one image (whole or mirrored) and the crops of the other, either way
    round; then the larger of the two hashes' distances. Returns (n,) int64."""
    a, b = np.asarray(a).reshape(-1, 2, CROP_BOXES + 1, WORDS), np.asarray(b).reshape(-1, 2, CROP_BOXES + 1, WORDS)
    whole = [0, CROP_BOXES]  # the whole image and its mirror image
    # a (whole or mirrored) against b's crops, and b (whole or mirrored) against a's crops
    d1 = popcount(a[:, :, whole, None, :] ^ b[:, :, None, :CROP_BOXES, :]).min(axis=(2, 3))
    d2 = popcount(b[:, :, whole, None, :] ^ a[:, :, None, :CROP_BOXES, :]).min(axis=(2, 3))
    return np.minimum(d1, d2).max(axis=1)


__all__ = ["CROP_BOXES", "CROP_POSITIONS", "CROP_SCALES", "HASH_SIZE", "HASH_THUMBNAIL", "HashCache",
           "MEMO_SIZE", "WORDS", "aligned_distance", "hash_items", "image_hashes", "item_bytes", "popcount"]
