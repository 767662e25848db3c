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

Users import everything from here; the code lives in two modules beside it:
:mod:`geofidelity_bench.benchmark_model` (the domain model, validation, the fingerprint, the split)
and :mod:`geofidelity_bench.benchmark_format` (the canonical Parquet format: records, features,
saving and loading). Every name of both is re-exported here.
"""

from __future__ import annotations

from .benchmark_format import (  # noqa: F401  (the canonical format, re-exported: its home is benchmark_format.py)
    _OPTIONAL_COLUMNS,
    _attach_stored_images,
    block_from_record,
    _city,
    _city_from_record,
    config_file,
    config_records,
    _config_schema_problems,
    demo_path,
    features,
    first_lines,
    _image_bytes,
    image_record,
    load_benchmark,
    _opt_real,
    _pool_from_record,
    _pool_image,
    _read_config,
    readme_configs_yaml,
    _real,
    _records,
    reference_from_record,
    resolve_benchmark_path,
    save_benchmark,
    _type_problem,
    _way_ids,
)
from .benchmark_model import (  # noqa: F401  (the domain model, re-exported: its home is benchmark_model.py)
    CONFIGS,
    DEMO_NAME,
    LATER_BLOCK_FIELDS,
    MAX_PROBLEMS_LISTED,
    NEGATIVE_FIELDS,
    NEGATIVE_ROLES,
    _SAFE_ID,
    SAME_NEIGHBORHOOD_KINDS,
    STRATA,
    UNKNOWN_KIND,
    Benchmark,
    BenchmarkError,
    Block,
    City,
    _ImageBytes,
    PoolImage,
    ReferenceImage,
    _StoredImageAccess,
    block_record,
    _decode_problem,
    display_name,
    fingerprint_record,
    heldout_count,
    is_safe_id,
    item_name,
    problems_error,
    split_references,
    split_seed,
)
from .image_store import SHA256_COLUMN  # noqa: F401  (read from here by older callers)
from .benchmark_model import block_record as _block_record  # noqa: F401  (the old private names)
from .benchmark_model import fingerprint_record as _fingerprint_record  # noqa: F401
