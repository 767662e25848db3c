"""The domain model of a benchmark (docs/benchmark.md section 1, Domain and split): :class:`City`,
:class:`Block`, :class:`ReferenceImage`, :class:`PoolImage`, :class:`Benchmark` (lookups,
validation, the fingerprint), and the held-out split.

Held-out split (docs/benchmark.md section 1, Domain and split): a block's references are ordered by ``reference_id``
(ascending string order), shuffled with ``random.Random(seed)`` where ``seed`` is the first
8 bytes, big-endian, of ``sha256(f"0|{block_id}")``, and the first
``k = max(1, min(4, n // 2))`` of the shuffled order are held out as real queries; the rest
is the block's gallery (its panel everywhere: as target and as negative).

The canonical Parquet format that stores a benchmark (reading, writing, the features of each
config) is :mod:`geofidelity_bench.benchmark_format`; :mod:`geofidelity_bench.benchmark` is where
users import both from.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import random
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Sequence

from .errors import GeoFidelityError
from .image_store import StoredImage
from .images import load_image
from .record_checks import block_problems, reference_problems

DEMO_NAME = "demo"
STRATA = ("major", "residential", "pedestrian", "tertiary")
NEGATIVE_ROLES = ("same_neighborhood", "same_city", "same_driving_side", "random_city")
NEGATIVE_FIELDS = {role: f"neg_{role}" for role in NEGATIVE_ROLES}
#: What a block's ``same_neighborhood`` negative is (``neg_same_neighborhood_kind``, docs/benchmark.md section 8,
#: Negatives): a nearby block with the same neighborhood label, or a fallback when no block shares it (a block
#: within 1 km, else a farther block of the city). Null: unknown (benchmarks written before the column).
SAME_NEIGHBORHOOD_KINDS = ("same_neighborhood", "fallback_nearby", "fallback_far")
#: The key that counts blocks whose same-neighborhood negative has no recorded kind.
UNKNOWN_KIND = "unknown"
CONFIGS = ("blocks", "references", "cities", "world")
_SAFE_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")  # \Z: no trailing newline


class BenchmarkError(GeoFidelityError, ValueError):
    """A benchmark is malformed; the message names the offending block, reference or file."""


def display_name(city_key: str) -> str:
    """``new_york`` -> ``New York`` (docs/benchmark.md section 1, Domain and split)."""
    return city_key.replace("_", " ").title()


def is_safe_id(value: str) -> bool:
    """True when ``value`` can be used as a single path component on every platform."""
    return isinstance(value, str) and bool(_SAFE_ID.match(value)) and value not in (".", "..")


@dataclass(frozen=True)
class City:
    key: str
    name: str
    country: str
    center: tuple[float, float] | None
    driving_side: str


@dataclass(frozen=True)
class Block:
    block_id: str
    city: str
    country: str
    driving_side: str
    stratum: str | None
    way_id: int | None
    street_name: str | None
    neighborhood: str | None
    highway_tag: str | None
    length_m: float
    polyline: tuple[tuple[float, float], ...]
    centroid: tuple[float, float]
    bbox: tuple[float, float, float, float]
    neg_same_neighborhood: str | None = None
    neg_same_city: str | None = None
    neg_same_driving_side: str | None = None
    neg_random_city: str | None = None
    notes: str = ""
    #: every OSM way of the block, in the order its polyline walks them (``way_id`` is the first);
    #: empty when unknown (the release, the demo)
    way_ids: tuple[int, ...] = ()
    #: where ``neighborhood`` came from: ``area``, ``node`` or ``none`` (docs/benchmark.md section 8); None when unknown
    neighborhood_source: str | None = None
    #: what ``neg_same_neighborhood`` is, one of :data:`SAME_NEIGHBORHOOD_KINDS`; None when unknown (or no negative)
    neg_same_neighborhood_kind: str | None = None

    @property
    def city_name(self) -> str:
        return display_name(self.city)


class _ImageBytes:
    """``image_bytes`` of ReferenceImage and PoolImage: the bytes given, or a
    :class:`~geofidelity_bench.image_store.StoredImage` read on each access (nothing is kept)."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return b""  # the dataclass default
        value = obj.__dict__.get(self.name, b"")
        return value.read() if isinstance(value, StoredImage) else value

    def __set__(self, obj, value) -> None:
        if isinstance(value, _ImageBytes):  # the field default: no image
            value = b""
        obj.__dict__[self.name] = bytes(value) if isinstance(value, bytearray) else value
        obj.__dict__.pop("_sha256", None)


class _StoredImageAccess:
    """Where an image's bytes are and their sha256, without reading them when the file carries it."""

    @property
    def image_source(self) -> bytes | StoredImage:
        """What to decode or hash: the bytes, or the StoredImage that reads them on demand."""
        return self.__dict__.get("image_bytes", b"")

    @property
    def stored_sha256(self) -> str:
        """The sha256 the benchmark states for the image (its ``image_sha256``), without reading the bytes."""
        source = self.image_source
        return source.stored_sha256 if isinstance(source, StoredImage) else self.sha256

    @property
    def sha256(self) -> str:
        """sha256 hex of the image bytes: for an image kept in a Parquet file, its stored ``image_sha256``
        checked against its bytes (read and hashed once per process, :attr:`StoredImage.sha256`)."""
        source = self.image_source
        if isinstance(source, StoredImage):
            return source.sha256
        if "_sha256" not in self.__dict__:
            self.__dict__["_sha256"] = hashlib.sha256(source).hexdigest()
        return self.__dict__["_sha256"]


@dataclass(frozen=True)
class ReferenceImage(_StoredImageAccess):
    reference_id: str
    image_id: str
    block_id: str
    lat: float | None
    lon: float | None
    captured_at: int | None
    compass_angle: float | None
    sun_elevation_deg: float | None
    camera_type: str | None
    quality_score: float | None
    source_url: str | None
    license: str | None
    attribution: str | None
    #: the encoded image (read from the benchmark's Parquet file on each access when loaded from one)
    image_bytes: bytes = field(repr=False, compare=False, default=_ImageBytes())  # type: ignore[assignment]

    def image(self):
        """The decoded RGB PIL image (reads the bytes now)."""
        return load_image(self.image_bytes, name=f"reference {self.reference_id}")


@dataclass(frozen=True)
class PoolImage(_StoredImageAccess):
    """A street-level photo that belongs to no block (the ``world`` distractor pool)."""

    image_id: str
    lat: float | None
    lon: float | None
    city: str | None
    region: str | None
    country: str | None
    source_url: str | None
    license: str | None
    attribution: str | None
    image_bytes: bytes = field(repr=False, compare=False, default=_ImageBytes())  # type: ignore[assignment]

    def image(self):
        return load_image(self.image_bytes, name=f"world image {self.image_id}")


def item_name(item: Any, fallback: str) -> str:
    """How to call a panel or gallery item in messages and records: ``reference ID`` for a
    reference photo, ``world image ID`` for a world-pool photo, the path for a file, else ``fallback``."""
    if isinstance(item, ReferenceImage):
        return f"reference {item.reference_id}"
    if isinstance(item, PoolImage):
        return f"world image {item.image_id}"
    if isinstance(item, (str, os.PathLike)):
        return str(item)
    return fallback


def split_seed(block_id: str) -> int:
    """Seed of a block's held-out shuffle: sha256(f"0|{block_id}"), first 8 bytes big-endian."""
    return int.from_bytes(hashlib.sha256(f"0|{block_id}".encode()).digest()[:8], "big")


def heldout_count(n: int) -> int:
    """k = max(1, min(4, n // 2))."""
    return max(1, min(4, n // 2))


def split_references(block_id: str, references: Sequence[ReferenceImage]):
    """Returns (heldout, gallery) lists for one block (see the module docstring)."""
    ordered = sorted(references, key=lambda r: r.reference_id)
    random.Random(split_seed(block_id)).shuffle(ordered)
    k = heldout_count(len(ordered))
    return ordered[:k], ordered[k:]


class Benchmark:
    """Blocks, their reference images and negatives; immutable after construction.

    Args:
        blocks: the blocks (their ids must be unique and path-safe).
        references: the block-image assignments.
        cities: optional City records; cities without one are derived from the blocks.
        world: optional pool of world photos (PoolImage).
        name: how to call this benchmark in messages and reports.
        validate_images: decode-check every image given as bytes (names the reference on failure);
            images stored in a Parquet file are checked where they are used, or by :meth:`check_images`.
    """

    def __init__(
        self,
        blocks: Iterable[Block],
        references: Iterable[ReferenceImage],
        *,
        cities: Iterable[City] | None = None,
        world: Iterable[PoolImage] | None = None,
        name: str = "benchmark",
        source: str | None = None,
        validate_images: bool = True,
    ):
        self.name = name
        self.source = source or name
        self.blocks: list[Block] = sorted(blocks, key=lambda b: b.block_id)
        self.references: list[ReferenceImage] = sorted(references, key=lambda r: r.reference_id)
        self.world: list[PoolImage] = list(world or [])
        self._by_id: dict[str, Block] = {}
        for block in self.blocks:  # the first of duplicates (refused by _validate)
            self._by_id.setdefault(block.block_id, block)
        city_map = {c.key: c for c in (cities or [])}
        for block in self.blocks:
            if block.city not in city_map:
                city_map[block.city] = City(block.city, display_name(block.city), block.country, None, block.driving_side)
        self.cities: dict[str, City] = dict(sorted(city_map.items()))
        self._validate(validate_images)

    # -- validation ---------------------------------------------------------------------
    def _validate(self, validate_images: bool) -> None:
        """Every cheap check of the blocks and references; all problems in one BenchmarkError
        (:func:`problems_error`: the first 50 and a count)."""
        problems = self._problems(validate_images)
        if problems:
            raise problems_error(self.name, problems)

    def _problems(self, validate_images: bool) -> list[str]:
        """Every problem of the blocks and references, in the order: block ids, field values,
        strata, driving sides, negatives, reference ids, unknown blocks, missing image data,
        undecodable in-memory images, galleries under 2 images. Splits the references as it goes."""
        problems: list[str] = []
        if not self.blocks:
            problems.append("no blocks")
        seen_blocks: set[str] = set()
        for block in self.blocks:
            if not is_safe_id(block.block_id):
                problems.append(
                    f"unsafe block_id {block.block_id!r}: block ids must be a single path component of letters, "
                    "digits, '.', '_' or '-' (no separators, no '..', not empty)")
            elif block.block_id in seen_blocks:
                problems.append(f"duplicate block_id {block.block_id!r}")
            seen_blocks.add(block.block_id)
        problems += [f"block {b.block_id!r} field {why}" for b in self.blocks for why in block_problems(b)]
        problems += [f"reference {r.reference_id!r} (block {r.block_id!r}) field {why}"
                     for r in self.references for why in reference_problems(r)]
        for block in self.blocks:
            if block.stratum not in (None, "", *STRATA):
                problems.append(f"block {block.block_id!r} has stratum {block.stratum!r}; expected one of {STRATA} "
                                "or empty")
        for block in self.blocks:
            if block.driving_side not in ("L", "R"):
                problems.append(f"block {block.block_id!r} has driving_side {block.driving_side!r}; expected 'L' or "
                                "'R'")
        for block in self.blocks:
            for fld in NEGATIVE_FIELDS.values():
                neg = getattr(block, fld)
                if neg is None:
                    continue
                if neg not in self._by_id:
                    problems.append(f"block {block.block_id!r} field {fld} points to unknown block {neg!r}")
                elif neg == block.block_id:
                    problems.append(f"block {block.block_id!r} field {fld} points to the block itself")
            kind = block.neg_same_neighborhood_kind
            if kind is not None and kind not in SAME_NEIGHBORHOOD_KINDS:
                problems.append(f"block {block.block_id!r} field neg_same_neighborhood_kind is {kind!r}; expected one "
                                f"of {SAME_NEIGHBORHOOD_KINDS} or null (unknown)")
            elif kind is not None and block.neg_same_neighborhood is None:
                problems.append(f"block {block.block_id!r} field neg_same_neighborhood_kind is {kind!r} but the block "
                                "has no neg_same_neighborhood; leave the kind null")
        seen: set[str] = set()
        per_block: dict[str, list[ReferenceImage]] = {b.block_id: [] for b in self.blocks}
        unknown, no_data = [], []
        for ref in self.references:
            if ref.reference_id in seen:
                problems.append(f"duplicate reference_id {ref.reference_id!r}")
                continue
            seen.add(ref.reference_id)
            if ref.block_id not in per_block:
                unknown.append(f"reference {ref.reference_id!r} belongs to unknown block {ref.block_id!r}")
                continue
            in_memory = not isinstance(ref.image_source, StoredImage)
            if in_memory and not ref.image_source:
                no_data.append(f"reference {ref.reference_id!r} has no image data")
            per_block[ref.block_id].append(ref)
        problems += unknown + no_data
        if validate_images:  # images stored in a file are checked where they are used (or by check_images)
            items = [(f"reference {r.reference_id!r} (block {r.block_id!r})", r.image_source) for r in self.references]
            items += [(f"world image {w.image_id!r}", w.image_source) for w in self.world]
            problems += [why for label, data in items if not isinstance(data, StoredImage) and data
                         and (why := _decode_problem(data, label))]
        self._heldout: dict[str, list[ReferenceImage]] = {}
        self._gallery: dict[str, list[ReferenceImage]] = {}
        for block_id, refs in per_block.items():
            heldout, gallery = split_references(block_id, refs)
            if len(gallery) < 2:
                problems.append(
                    f"block {block_id!r} has {len(refs)} reference image(s), leaving {len(gallery)} in its gallery "
                    "after the held-out split; every block needs at least 2 gallery images (3 references)")
            self._heldout[block_id] = heldout
            self._gallery[block_id] = gallery
        return problems

    # -- access ---------------------------------------------------------------------------
    @property
    def block_ids(self) -> list[str]:
        return [b.block_id for b in self.blocks]

    def block(self, block_id: str) -> Block:
        try:
            return self._by_id[block_id]
        except KeyError:
            raise BenchmarkError(f"{self.name}: unknown block_id {block_id!r}") from None

    def __contains__(self, block_id: object) -> bool:
        return block_id in self._by_id

    def references_of(self, block_id: str) -> list[ReferenceImage]:
        self.block(block_id)
        return sorted(self._heldout[block_id] + self._gallery[block_id], key=lambda r: r.reference_id)

    def heldout(self, block_id: str) -> list[ReferenceImage]:
        """The block's held-out real queries (never part of any panel)."""
        self.block(block_id)
        return list(self._heldout[block_id])

    def gallery(self, block_id: str) -> list[ReferenceImage]:
        """The block's panel: its references minus the held-out queries."""
        self.block(block_id)
        return list(self._gallery[block_id])

    def negatives(self, block_id: str) -> dict[str, str | None]:
        """Named negatives of a block: role -> block id (None when missing)."""
        block = self.block(block_id)
        return {role: getattr(block, fld) for role, fld in NEGATIVE_FIELDS.items()}

    def city(self, key: str) -> City:
        try:
            return self.cities[key]
        except KeyError:
            raise BenchmarkError(f"{self.name}: unknown city {key!r}") from None

    #: rows keyed by the hash of their bytes instead of their stored ``image_sha256`` (``load_benchmark(...,
    #: rekey_mismatched_images=True)``; records of :func:`~geofidelity_bench.image_store.rekey_mismatched`)
    rekeyed_images: tuple[dict[str, Any], ...] = ()

    @cached_property
    def fingerprint(self) -> str:
        """sha256 over block records and reference ids with their image hashes (docs/benchmark.md section 1,
        Benchmark fingerprint): a reference's stored ``image_sha256`` (not read here; every read of its bytes,
        and every use of a result cached under it, checks it)."""
        h = hashlib.sha256()
        for block in self.blocks:
            h.update(json.dumps(fingerprint_record(block), sort_keys=True, default=str).encode())
        for ref in self.references:
            h.update(f"{ref.reference_id}|{ref.block_id}|".encode())
            h.update(bytes.fromhex(ref.stored_sha256))
        return h.hexdigest()

    def check_images(self, *, num_workers: int | None = None, progress: bool = True) -> list[str]:
        """Decodes every reference and world image (in worker threads, with a progress bar) and checks
        the bytes of each against its stored hash.

        Returns one line per bad image, naming it (reference id and block, or world image id); an
        empty list when every image decodes and hashes to its stored hash.
        """
        from .image_store import check_images

        items = [(f"reference {r.reference_id!r} (block {r.block_id!r})", r.image_source) for r in self.references]
        items += [(f"world image {w.image_id!r}", w.image_source) for w in self.world]
        return check_images(items, num_workers=num_workers, progress=progress)

    def summary(self) -> dict[str, Any]:
        """Counts a person wants to see first (used by ``geofidelity-bench info``)."""
        blocks = []
        for block in self.blocks:
            negs = self.negatives(block.block_id)
            blocks.append(
                {
                    "block_id": block.block_id,
                    "city": block.city,
                    "stratum": block.stratum or "",
                    "street_name": block.street_name or "",
                    "neighborhood": block.neighborhood or "",
                    "n_references": len(self.references_of(block.block_id)),
                    "n_heldout": len(self._heldout[block.block_id]),
                    "n_gallery": len(self._gallery[block.block_id]),
                    "negatives": sum(v is not None for v in negs.values()),
                }
            )
        coverage = {
            role: sum(getattr(b, fld) is not None for b in self.blocks) for role, fld in NEGATIVE_FIELDS.items()
        }
        kinds = {kind: len(ids) for kind, ids in self.same_neighborhood_negatives().items()}
        return {
            "name": self.name,
            "source": self.source,
            "fingerprint": self.fingerprint,
            "n_cities": len(self.cities),
            "n_blocks": len(self.blocks),
            "n_references": len(self.references),
            "n_distinct_images": len({r.image_id for r in self.references}),
            "n_world": len(self.world),
            "cities": [dataclasses.asdict(c) for c in self.cities.values()],
            "blocks": blocks,
            "negatives_coverage": coverage,
            "same_neighborhood_kinds": kinds,
        }

    def same_neighborhood_negatives(self, block_ids: Sequence[str] | None = None) -> dict[str, list[str]]:
        """The blocks with a ``same_neighborhood`` negative, by what it is: each of
        :data:`SAME_NEIGHBORHOOD_KINDS` and ``unknown`` (no recorded kind) -> sorted block ids (of
        ``block_ids`` when given). docs/benchmark.md section 8, Negatives."""
        wanted = None if block_ids is None else set(block_ids)
        out: dict[str, list[str]] = {kind: [] for kind in (*SAME_NEIGHBORHOOD_KINDS, UNKNOWN_KIND)}
        for block in self.blocks:
            if block.neg_same_neighborhood is None or (wanted is not None and block.block_id not in wanted):
                continue
            out[block.neg_same_neighborhood_kind or UNKNOWN_KIND].append(block.block_id)
        return {kind: sorted(ids) for kind, ids in out.items()}

    def __repr__(self) -> str:
        return f"Benchmark({self.name!r}, {len(self.cities)} cities, {len(self.blocks)} blocks, {len(self.references)} references)"


def _decode_problem(data: bytes, label: str) -> str | None:
    """``"{label} is not a decodable image: why"``, or None when ``data`` decodes."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
    except Exception as err:  # noqa: BLE001 - any decoder failure is a bad image
        return f"{label} is not a decodable image: {err}"
    return None


#: How many problems an error lists before it counts the rest (a benchmark's, a generated folder's).
MAX_PROBLEMS_LISTED = 50


def problems_error(name: str, problems: Sequence[str]) -> BenchmarkError:
    """One BenchmarkError for every problem of benchmark ``name`` (the first 50, then a count)."""
    if len(problems) == 1:
        return BenchmarkError(f"{name}: {problems[0]}")
    shown = "\n  ".join(problems[:MAX_PROBLEMS_LISTED])
    more = f"\n  ... and {len(problems) - MAX_PROBLEMS_LISTED} more" if len(problems) > MAX_PROBLEMS_LISTED else ""
    return BenchmarkError(f"{name}: {len(problems)} problem(s); fix them all, then load it again:\n  {shown}{more}")


# -- the canonical record of a block (the fingerprint and the format) ------------------------


def block_record(block: Block) -> dict[str, Any]:
    rec = dataclasses.asdict(block)
    rec["polyline"] = [list(p) for p in block.polyline]
    rec["centroid"] = list(block.centroid)
    rec["bbox"] = list(block.bbox)
    rec["way_ids"] = [int(v) for v in block.way_ids]
    return rec


#: optional block fields added after the first format; left out of the fingerprint while unset,
#: so that benchmarks without them (the release, the demo) keep their fingerprints
LATER_BLOCK_FIELDS = ("way_ids", "neighborhood_source", "neg_same_neighborhood_kind")


def fingerprint_record(block: Block) -> dict[str, Any]:
    rec = block_record(block)
    for key in LATER_BLOCK_FIELDS:
        if not rec[key]:
            del rec[key]
    return rec
