"""The canonical format of a benchmark (docs/benchmark.md section 11, File formats): a folder (or a Hub
dataset repo) of Parquet files, one config each:

* ``blocks``: one row per street block (docs/benchmark.md section 1, Domain and split fields),
* ``references``: one row per block-image assignment, the image embedded as
  ``datasets.Image()`` (``{"bytes", "path"}`` struct),
* ``cities``: one row per city (key, name, country, center, driving side),
* ``world`` (optional): a pool of single street-level photos from all over the world.

The folder's ``README.md`` declares the configs in its YAML header, so plain
``datasets.load_dataset(folder, "blocks")`` reads it too.

Records to objects and back (:func:`block_from_record`, :func:`reference_from_record`,
:func:`config_records`), the ``datasets`` features of each config (:func:`features`), writing
(:func:`save_benchmark`) and reading (:func:`load_benchmark`: from ``demo``, a folder or a Hub id,
checking every record and the schema of every file). The objects are
:mod:`geofidelity_bench.benchmark_model`'s; :mod:`geofidelity_bench.benchmark` re-exports both.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from .atomic import atomic_write
from .benchmark_model import (
    CONFIGS,
    DEMO_NAME,
    LATER_BLOCK_FIELDS,
    Benchmark,
    BenchmarkError,
    Block,
    City,
    PoolImage,
    ReferenceImage,
    block_record,
    display_name,
    problems_error,
)
from .errors import redact_url
from .image_store import (IMAGE_COLUMN, SHA256_COLUMN, ParquetImages, StoredImage, cell_bytes, rekey_mismatched,
                          stored_hashes)
from .images import ImageDecodeError
from .values import opt_float as _opt_float
from .values import opt_int as _opt_int
from .values import opt_str as _opt_str

# -- canonical format: records -------------------------------------------------------------


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
        yield from (block_record(b) for b in benchmark.blocks)
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
_OPTIONAL_COLUMNS = {"blocks": frozenset(LATER_BLOCK_FIELDS), "references": frozenset({SHA256_COLUMN}),
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
