"""The domain model (City, Block, ReferenceImage, Benchmark) and the canonical format.

A benchmark is a folder (or a Hub dataset repo) of Parquet files, one config each:

* ``blocks``: one row per street block (docs/benchmark.md section 1, Domain and split fields),
* ``references``: one row per block-image assignment, the image embedded as
  ``datasets.Image()`` (``{"bytes", "path"}`` struct),
* ``cities``: one row per city (key, name, country, center, driving side),
* ``world`` (optional): a pool of single street-level photos from all over the world.

The folder's ``README.md`` declares the configs in its YAML header, so plain
``datasets.load_dataset(folder, "blocks")`` reads it too.

Held-out split (docs/benchmark.md section 1, Domain and split): a block's references are ordered by ``reference_id``
(ascending string order), shuffled with ``random.Random(seed)`` where ``seed`` is the first
8 bytes, big-endian, of ``sha256(f"0|{block_id}")``, and the first
``k = max(1, min(4, n // 2))`` of the shuffled order are held out as real queries; the rest
is the block's gallery (its panel everywhere: as target and as negative).

This module is longer than the project's ~600-line guide on purpose: the domain model and its
one canonical file format share every record field (each field's reading, validation and
writing sit next to its definition), and the loader is the only way records become objects.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import io
import json
import os
import random
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from .atomic import atomic_write
from .errors import GeoFidelityError, redact_url
from .image_store import (IMAGE_COLUMN, SHA256_COLUMN, ParquetImages, StoredImage, cell_bytes, rekey_mismatched,
                          stored_hashes)
from .images import ImageDecodeError, load_image
from .record_checks import block_problems, reference_problems
from .values import opt_float as _opt_float
from .values import opt_int as _opt_int
from .values import opt_str as _opt_str

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
            h.update(json.dumps(_fingerprint_record(block), sort_keys=True, default=str).encode())
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


# -- canonical format: records -------------------------------------------------------------


def _block_record(block: Block) -> dict[str, Any]:
    rec = dataclasses.asdict(block)
    rec["polyline"] = [list(p) for p in block.polyline]
    rec["centroid"] = list(block.centroid)
    rec["bbox"] = list(block.bbox)
    rec["way_ids"] = [int(v) for v in block.way_ids]
    return rec


#: optional block fields added after the first format; left out of the fingerprint while unset,
#: so that benchmarks without them (the release, the demo) keep their fingerprints
_LATER_BLOCK_FIELDS = ("way_ids", "neighborhood_source", "neg_same_neighborhood_kind")


def _fingerprint_record(block: Block) -> dict[str, Any]:
    rec = _block_record(block)
    for key in _LATER_BLOCK_FIELDS:
        if not rec[key]:
            del rec[key]
    return rec


def _way_ids(value: Any) -> tuple[int, ...]:
    """The optional ``way_ids``: a list or array of integers, or its JSON text; missing (None,
    blank, NaN) is ``()``. Anything else raises ValueError/TypeError (a malformed field)."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else None
    if value is None or (isinstance(value, float) and value != value):
        return ()
    if isinstance(value, (int, float)):
        raise ValueError(f"way_ids must be a list of integers, got {value!r}")
    return tuple(int(v) for v in value)


def _real(value: Any, name: str) -> float:
    """A number field as a float (NaN and infinity kept, for the field checks to name); text, a
    boolean or a missing value raise TypeError naming the field."""
    if value is None or isinstance(value, (str, bytes, bool)):
        raise TypeError(f"{name} {value!r} is not a number" + (" (stored as text)" if isinstance(value, str) else ""))
    return float(value)


def _opt_real(value: Any, name: str) -> float | None:
    """An optional number field: None when missing (null), else as :func:`_real` (a NaN is kept:
    it is a value, and the field checks refuse it like infinity)."""
    return None if value is None else _real(value, name)


def block_from_record(rec: Mapping[str, Any], where: str = "blocks") -> Block:
    """A Block from one row of the canonical ``blocks`` config (numbers must be numbers, not text).

    Raises:
        BenchmarkError: a missing or malformed field, naming the block and the field.
    """
    try:
        return Block(
            block_id=str(rec["block_id"]),
            city=str(rec["city"]),
            country=str(rec["country"]),
            driving_side=str(rec["driving_side"]),
            stratum=_opt_str(rec.get("stratum")),
            way_id=_opt_int(rec.get("way_id")),
            street_name=_opt_str(rec.get("street_name")),
            neighborhood=_opt_str(rec.get("neighborhood")),
            highway_tag=_opt_str(rec.get("highway_tag")),
            length_m=_real(rec["length_m"], "length_m"),
            polyline=tuple((_real(p[0], "polyline"), _real(p[1], "polyline")) for p in rec["polyline"]),
            centroid=(_real(rec["centroid"][0], "centroid"), _real(rec["centroid"][1], "centroid")),
            bbox=tuple(_real(v, "bbox") for v in rec["bbox"]),  # type: ignore[arg-type]
            neg_same_neighborhood=_opt_str(rec.get("neg_same_neighborhood")),
            neg_same_city=_opt_str(rec.get("neg_same_city")),
            neg_same_driving_side=_opt_str(rec.get("neg_same_driving_side")),
            neg_random_city=_opt_str(rec.get("neg_random_city")),
            notes=_opt_str(rec.get("notes")) or "",
            way_ids=_way_ids(rec.get("way_ids")),
            neighborhood_source=_opt_str(rec.get("neighborhood_source")),
            neg_same_neighborhood_kind=_opt_str(rec.get("neg_same_neighborhood_kind")),
        )
    except KeyError as err:
        raise BenchmarkError(f"{where}: block {rec.get('block_id')!r} is missing field {err.args[0]!r}") from None
    except (TypeError, ValueError, IndexError) as err:
        raise BenchmarkError(f"{where}: block {rec.get('block_id')!r} has a malformed field: {err}") from None


def _image_bytes(value: Any, label: str) -> bytes | StoredImage:
    if isinstance(value, StoredImage):  # loaded from a Parquet file: read when used
        return value
    try:
        return cell_bytes(value, label)
    except ImageDecodeError as err:
        raise BenchmarkError(str(err)) from None


def reference_from_record(rec: Mapping[str, Any], where: str = "references") -> ReferenceImage:
    """A ReferenceImage from one row of the canonical ``references`` config. ``lat``/``lon`` are
    None only when null; a NaN stays NaN, so the field checks refuse it like infinity.

    Raises:
        BenchmarkError: a missing or malformed field, naming the reference and the field.
    """
    rid = rec.get("reference_id")
    label = f"{where}: reference {rid!r}"
    try:
        return ReferenceImage(
            reference_id=str(rec["reference_id"]),
            image_id=str(rec["image_id"]),
            block_id=str(rec["block_id"]),
            lat=_opt_real(rec.get("lat"), "lat"),
            lon=_opt_real(rec.get("lon"), "lon"),
            captured_at=_opt_int(rec.get("captured_at")),
            compass_angle=_opt_float(rec.get("compass_angle")),
            sun_elevation_deg=_opt_float(rec.get("sun_elevation_deg")),
            camera_type=_opt_str(rec.get("camera_type")),
            quality_score=_opt_float(rec.get("quality_score")),
            source_url=_opt_str(rec.get("source_url")),
            license=_opt_str(rec.get("license")),
            attribution=_opt_str(rec.get("attribution")),
            image_bytes=_image_bytes(rec.get("image"), label),
        )
    except KeyError as err:
        raise BenchmarkError(f"{label} is missing field {err.args[0]!r}") from None
    except (TypeError, ValueError) as err:
        raise BenchmarkError(f"{label} has a malformed field: {err}") from None


def _pool_from_record(rec: Mapping[str, Any]) -> PoolImage:
    label = f"world: image {rec.get('image_id')!r}"
    try:
        return _pool_image(rec, label)
    except KeyError as err:
        raise BenchmarkError(f"{label} is missing field {err.args[0]!r}") from None
    except (TypeError, ValueError) as err:
        raise BenchmarkError(f"{label} has a malformed field: {err}") from None


def _pool_image(rec: Mapping[str, Any], label: str) -> PoolImage:
    return PoolImage(
        image_id=str(rec["image_id"]),
        lat=_opt_float(rec.get("lat")),
        lon=_opt_float(rec.get("lon")),
        city=_opt_str(rec.get("city")),
        region=_opt_str(rec.get("region")),
        country=_opt_str(rec.get("country")),
        source_url=_opt_str(rec.get("source_url")),
        license=_opt_str(rec.get("license")),
        attribution=_opt_str(rec.get("attribution")),
        image_bytes=_image_bytes(rec.get("image"), label),
    )


def _city_from_record(rec: Mapping[str, Any]) -> City:
    try:
        return _city(rec)
    except KeyError as err:
        raise BenchmarkError(f"cities: city {rec.get('key')!r} is missing field {err.args[0]!r}") from None
    except (TypeError, ValueError) as err:
        raise BenchmarkError(f"cities: city {rec.get('key')!r} has a malformed field: {err}") from None


def _city(rec: Mapping[str, Any]) -> City:
    lat, lon = _opt_float(rec.get("center_lat")), _opt_float(rec.get("center_lon"))
    return City(
        key=str(rec["key"]),
        name=_opt_str(rec.get("name")) or display_name(str(rec["key"])),
        country=str(rec["country"]),
        center=(lat, lon) if lat is not None and lon is not None else None,
        driving_side=str(rec["driving_side"]),
    )


# -- canonical format: features and files -----------------------------------------------------


def features(config: str):
    """The ``datasets.Features`` of a config of the canonical format."""
    from datasets import Features, Image, List, Value

    if config == "blocks":
        return Features(
            {
                "block_id": Value("string"),
                "city": Value("string"),
                "country": Value("string"),
                "driving_side": Value("string"),
                "stratum": Value("string"),
                "way_id": Value("int64"),
                "street_name": Value("string"),
                "neighborhood": Value("string"),
                "highway_tag": Value("string"),
                "length_m": Value("float64"),
                "polyline": List(List(Value("float64"))),
                "centroid": List(Value("float64")),
                "bbox": List(Value("float64")),
                "neg_same_neighborhood": Value("string"),
                "neg_same_city": Value("string"),
                "neg_same_driving_side": Value("string"),
                "neg_random_city": Value("string"),
                "notes": Value("string"),
                "way_ids": List(Value("int64")),
                "neighborhood_source": Value("string"),
                "neg_same_neighborhood_kind": Value("string"),
            }
        )
    if config == "references":
        return Features(
            {
                "reference_id": Value("string"),
                "image_id": Value("string"),
                "block_id": Value("string"),
                "lat": Value("float64"),
                "lon": Value("float64"),
                "captured_at": Value("int64"),
                "compass_angle": Value("float64"),
                "sun_elevation_deg": Value("float64"),
                "camera_type": Value("string"),
                "quality_score": Value("float64"),
                "source_url": Value("string"),
                "license": Value("string"),
                "attribution": Value("string"),
                "image": Image(),
                SHA256_COLUMN: Value("string"),
            }
        )
    if config == "cities":
        return Features(
            {
                "key": Value("string"),
                "name": Value("string"),
                "country": Value("string"),
                "center_lat": Value("float64"),
                "center_lon": Value("float64"),
                "driving_side": Value("string"),
            }
        )
    if config == "world":
        return Features(
            {
                "image_id": Value("string"),
                "lat": Value("float64"),
                "lon": Value("float64"),
                "city": Value("string"),
                "region": Value("string"),
                "country": Value("string"),
                "source_url": Value("string"),
                "license": Value("string"),
                "attribution": Value("string"),
                "image": Image(),
                SHA256_COLUMN: Value("string"),
            }
        )
    raise ValueError(f"unknown config {config!r}; expected one of {CONFIGS}")


def config_records(benchmark: Benchmark, config: str) -> Iterator[dict[str, Any]]:
    """The rows of one config in the canonical order and with the canonical fields, one at a time
    (images are ``{"bytes", "path"}`` dicts with their ``image_sha256``: one image's bytes are read
    per row). The one source of rows for :func:`save_benchmark` and the Hub dataset builder."""
    if config == "blocks":
        yield from (_block_record(b) for b in benchmark.blocks)
    elif config == "references":
        yield from (image_record(r, r.reference_id) for r in benchmark.references)
    elif config == "cities":
        for c in benchmark.cities.values():
            yield {
                "key": c.key,
                "name": c.name,
                "country": c.country,
                "center_lat": c.center[0] if c.center else None,
                "center_lon": c.center[1] if c.center else None,
                "driving_side": c.driving_side,
            }
    elif config == "world":
        yield from (image_record(w, w.image_id) for w in benchmark.world)
    else:
        raise ValueError(f"unknown benchmark config {config!r}; expected one of {CONFIGS}")


def image_record(item: ReferenceImage | PoolImage, stem: str) -> dict[str, Any]:
    """The canonical row of a reference or world image: its fields, ``image`` (``{"bytes", "path"}``,
    path ``{stem}.jpg``) and ``image_sha256`` (hex sha256 of the bytes)."""
    rec = {f.name: getattr(item, f.name) for f in dataclasses.fields(item) if f.name != "image_bytes"}
    data = item.image_bytes
    rec[IMAGE_COLUMN] = {"bytes": data, "path": f"{stem}.jpg"}
    rec[SHA256_COLUMN] = hashlib.sha256(data).hexdigest()
    return rec


def config_file(folder: str | os.PathLike, config: str) -> Path:
    return Path(folder) / config / "train-00000-of-00001.parquet"


def readme_configs_yaml(configs: Sequence[str]) -> str:
    lines = ["configs:"]
    for config in configs:
        lines += [f"- config_name: {config}", "  data_files:", "  - split: train", f"    path: {config}/*.parquet"]
    return "\n".join(lines)


def save_benchmark(benchmark: Benchmark, folder: str | os.PathLike, *, card_body: str | None = None) -> Path:
    """Writes ``benchmark`` to ``folder`` in the canonical Parquet format (atomically per file)."""
    from datasets import Dataset

    folder = Path(folder)
    configs = ["blocks", "references", "cities"] + (["world"] if benchmark.world else [])
    for config in configs:
        ds = Dataset.from_list(list(config_records(benchmark, config)), features=features(config))
        atomic_write(config_file(folder, config), lambda tmp: ds.to_parquet(str(tmp)))
    body = card_body or (
        f"# {benchmark.name}\n\nA GeoFidelity-Bench benchmark in the canonical format: "
        f"{len(benchmark.cities)} cities, {len(benchmark.blocks)} blocks, {len(benchmark.references)} reference images.\n"
    )
    (folder / "README.md").write_text(f"---\n{readme_configs_yaml(configs)}\n---\n{body}", encoding="utf-8")
    return folder


def _records(rows: Sequence[Mapping[str, Any]], convert, bad: list[str]) -> list:
    """``convert`` of every row; the message of every row it refuses is added to ``bad``."""
    out = []
    for row in rows:
        try:
            out.append(convert(row))
        except BenchmarkError as err:
            bad.append(str(err))
    return out


#: Columns a canonical file may lack: added to the format later, read as missing.
_OPTIONAL_COLUMNS = {"blocks": frozenset(_LATER_BLOCK_FIELDS), "references": frozenset({SHA256_COLUMN}),
                     "cities": frozenset(), "world": frozenset({SHA256_COLUMN})}


def _type_problem(feature: Any, arrow_type: Any) -> str | None:
    """Why a Parquet column of ``arrow_type`` cannot hold ``feature`` (a ``datasets`` feature of the
    canonical format), or None. Any integer or float width reads as a number and any string type as
    text; an all-null column fits every feature; a number stored as text, or text stored as a
    number, does not."""
    import pyarrow as pa
    from datasets import Image, List, Value

    t = pa.types
    if t.is_null(arrow_type):
        return None
    if isinstance(feature, Value):
        fits = {"string": lambda a: t.is_string(a) or t.is_large_string(a) or t.is_string_view(a),
                "int64": t.is_integer,
                "float64": lambda a: t.is_integer(a) or t.is_floating(a)}[feature.dtype]
        ok = fits(arrow_type)
    elif isinstance(feature, List):
        ok = (t.is_list(arrow_type) or t.is_large_list(arrow_type) or t.is_fixed_size_list(arrow_type)) and (
            _type_problem(feature.feature, arrow_type.value_type) is None)
    elif isinstance(feature, Image):
        names = {arrow_type.field(i).name: arrow_type.field(i).type for i in range(arrow_type.num_fields)} \
            if t.is_struct(arrow_type) else {}
        ok = "bytes" in names and (t.is_binary(names["bytes"]) or t.is_large_binary(names["bytes"])
                                   or t.is_null(names["bytes"]))
    else:  # pragma: no cover - every feature of the format is one of the above
        return None
    if ok:
        return None
    if isinstance(feature, Value):
        expected = {"string": "text", "int64": "an integer", "float64": "a number"}[feature.dtype]
    else:
        expected = "a list of numbers" if isinstance(feature, List) else "an image struct {bytes, path}"
    return f"has type {arrow_type}, but the format stores {expected} there"


def _config_schema_problems(folder: Path, config: str) -> list[str]:
    """Every required column missing from, or of the wrong type in, a Parquet file of ``config``
    (read from the file's footer only), naming the file and the column."""
    import pyarrow.parquet as pq

    expected = features(config)
    problems = []
    for file in sorted(glob.glob(str(folder / config / "*.parquet"))):
        try:
            schema = pq.ParquetFile(file).schema_arrow
        except Exception as err:  # noqa: BLE001 - name the file whatever pyarrow raised
            problems.append(f"cannot read {file}: {err}")
            continue
        extra = [n for n in schema.names if n not in expected]
        for name, feature in expected.items():
            if name not in schema.names:
                if name not in _OPTIONAL_COLUMNS[config]:
                    others = f"; it has other columns: {', '.join(map(repr, extra))}" if extra else ""
                    problems.append(f"{file}: missing field {name!r}, a required column of config {config!r} "
                                    f"(docs/benchmark.md section 11){others}")
                continue
            why = _type_problem(feature, schema.field(name).type)
            if why:
                problems.append(f"{file}: column {name!r} {why}")
    return problems


def _read_config(folder: Path, config: str) -> list[dict[str, Any]] | None:
    import pyarrow.parquet as pq

    files = sorted(glob.glob(str(folder / config / "*.parquet")))
    if not files:
        return None
    rows: list[dict[str, Any]] = []
    for file in files:
        try:
            names = pq.ParquetFile(file).schema_arrow.names
            table = pq.read_table(file, columns=[n for n in names if n != IMAGE_COLUMN])
        except Exception as err:  # noqa: BLE001 - name the file whatever pyarrow raised
            raise BenchmarkError(f"cannot read {file}: {err}") from err
        file_rows = table.to_pylist()
        if IMAGE_COLUMN in names:
            _attach_stored_images(file, file_rows, config)
        rows.extend(file_rows)
    return rows


def _attach_stored_images(file: str, rows: list[dict[str, Any]], config: str) -> None:
    """Puts a StoredImage (file, row, sha256) in each row's ``image``; the bytes stay in the file."""
    reader = ParquetImages(file)
    hashes = [r.pop(SHA256_COLUMN, None) for r in rows]
    if any(h is None for h in hashes):  # a folder written before the column: hashed once, then cached
        hashes = stored_hashes(reader, desc=f"hashing {config} images of {Path(file).name}")
    id_field = "reference_id" if config == "references" else "image_id"
    kind = "reference" if config == "references" else "world image"
    for i, (row, sha) in enumerate(zip(rows, hashes)):
        row[IMAGE_COLUMN] = StoredImage(reader, i, f"{kind} {row.get(id_field)}", sha,
                                        block=row.get("block_id") if config == "references" else None)


def demo_path() -> Path:
    """Folder of the embedded demo benchmark shipped inside the package."""
    return Path(__file__).resolve().parent / "data" / "demo"


def resolve_benchmark_path(path_or_id: str | os.PathLike, *, revision: str | None = None,
                           endpoint: str | None = None) -> Path:
    """``demo`` -> the embedded demo; a folder -> itself; else a Hub dataset repo id, downloaded from
    ``endpoint`` (default: ``$HF_ENDPOINT``, else huggingface.co)."""
    text = str(path_or_id)
    if text == DEMO_NAME:
        return demo_path()
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise BenchmarkError(f"benchmark path {text!r} is not a folder")
        return path
    if text.count("/") == 1 and not text.startswith((".", "/")):
        from huggingface_hub import snapshot_download

        try:
            local = snapshot_download(
                repo_id=text,
                repo_type="dataset",
                revision=revision,
                allow_patterns=["README.md", *(f"{c}/*.parquet" for c in CONFIGS)],
                endpoint=endpoint,
            )
        except Exception as err:  # noqa: BLE001 - offline, missing repo, auth: one clear message
            raise BenchmarkError(
                f"cannot get benchmark {text!r} from the Hugging Face Hub ({type(err).__name__}: {redact_url(str(err))}). "
                "Offline, pass a local benchmark folder or 'demo' (the embedded demo benchmark)."
            ) from err
        return Path(local)
    raise BenchmarkError(
        f"benchmark {text!r} is neither 'demo', an existing folder, nor a Hub dataset id of the form 'user/name'"
    )


def load_benchmark(
    path_or_id: str | os.PathLike = DEMO_NAME,
    *,
    revision: str | None = None,
    validate_images: bool = False,
    rekey_mismatched_images: bool = False,
    endpoint: str | None = None,
) -> Benchmark:
    """Loads a benchmark: ``"demo"``, a canonical folder, or a Hub dataset repo id.

    A Hub id is downloaded (into the Hugging Face cache) from ``endpoint``, a self-hosted or local
    Hub such as ``"http://127.0.0.1:8765"``; default: ``$HF_ENDPOINT``, else huggingface.co.

    Every field is read and checked; image bytes stay in the Parquet files and are read when
    used (``ReferenceImage.image_bytes``, ``image()``, embedding). ``validate_images=True``
    decodes every image now (:meth:`Benchmark.check_images`) and raises naming every bad one.

    Every read of an image checks its bytes against the stored ``image_sha256`` and raises
    :class:`~geofidelity_bench.image_store.ImageHashMismatchError` naming the row when they differ.
    ``rekey_mismatched_images=True`` hashes every image now (streamed, one pass per file) and keys
    each mismatched row by the hash of its bytes instead; ``Benchmark.rekeyed_images`` records them
    (and ``run.json`` under ``benchmark.rekeyed_images``), and the fingerprint is that of the bytes.

    Example:
        >>> bench = load_benchmark("demo")
        >>> len(bench.gallery(bench.block_ids[0])) >= 2
        True
    """
    folder = resolve_benchmark_path(path_or_id, revision=revision, endpoint=endpoint)
    label = DEMO_NAME if str(path_or_id) == DEMO_NAME else str(path_or_id)
    schema = [why for config in CONFIGS for why in _config_schema_problems(folder, config)]
    if schema:
        raise problems_error(f"benchmark {label!r}", schema)
    block_rows = _read_config(folder, "blocks")
    ref_rows = _read_config(folder, "references")
    if block_rows is None or ref_rows is None:
        missing = [c for c, rows in (("blocks", block_rows), ("references", ref_rows)) if rows is None]
        raise BenchmarkError(f"benchmark {label!r} ({folder}) has no Parquet files for config(s) {missing}")
    bad: list[str] = []
    blocks = _records(block_rows, lambda r: block_from_record(r, f"{label}/blocks"), bad)
    refs = _records(ref_rows, lambda r: reference_from_record(r, f"{label}/references"), bad)
    cities = _records(_read_config(folder, "cities") or [], _city_from_record, bad)
    world = _records(_read_config(folder, "world") or [], _pool_from_record, bad)
    if len(bad) == 1:
        raise BenchmarkError(bad[0])
    if bad:
        raise problems_error(f"benchmark {label!r}", bad)
    bench = Benchmark(
        blocks,
        refs,
        cities=cities,
        world=world,
        name=label,
        source=str(folder),
    )
    if rekey_mismatched_images:  # before anything (the fingerprint, a cache lookup) uses the hashes
        stored = [x.image_source for x in [*bench.references, *bench.world] if isinstance(x.image_source, StoredImage)]
        bench.rekeyed_images = tuple(rekey_mismatched(stored))
    if validate_images:
        bad = bench.check_images()
        if bad:
            raise BenchmarkError(f"{label}: {len(bad)} bad image(s) (undecodable, or not the bytes their stored "
                                 f"{SHA256_COLUMN} names):\n  " + "\n  ".join(first_lines(bad)))
    return bench


def first_lines(lines: Sequence[str], limit: int = 50) -> list[str]:
    """The first ``limit`` lines, and one saying how many more there are."""
    return list(lines[:limit]) + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])
