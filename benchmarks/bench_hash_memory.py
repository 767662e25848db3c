"""Peak memory of the first load of a benchmark folder that has no ``image_sha256`` column.

Such a folder (written before the column existed) is hashed once on its first load
(:func:`geofidelity_bench.image_store.stored_hashes`): every image is read and hashed. This script
writes a synthetic folder of large random-noise JPEGs in few Parquet files of ONE row group each (the
worst case: a row group is the unit pyarrow reads), without the hash column, and measures in a fresh
Python process (with an empty hash cache) the peak RSS (``VmHWM`` of ``/proc/self/status``, Linux) and
pyarrow's peak allocation (``pyarrow.default_memory_pool().max_memory()``) of ``load_benchmark`` +
``fingerprint``, next to the same for the folder with the column. Example:

    python benchmarks/bench_hash_memory.py                  # ~400 MB in 2 files of one row group each
    python benchmarks/bench_hash_memory.py --refs 1200 --files 8

The folder with the column is also checked in full: every image's bytes hashed against its image_sha256
(:func:`geofidelity_bench.image_store.verify_images`), what a warm ``evaluate`` adds before it uses cached
embeddings. ``--small-pages`` writes the image column in ~1 MB pages instead of one page a row group.

Issue 29 measured 2.1 GB of peak memory for the paper-size folder (2.4 GB of JPEG in 8 files of one row
group each) without the column, 0.19 GB with it. Issue 43 (``--refs 6720 --files 8 --size 724 543``: 2395 MB
of JPEG, 285 MiB a row group): before, 1409 MiB peak RSS (pyarrow 868 MiB: the column chunk read whole, its
one page, and the page decompressed) and 7.1 s; after, 764 MiB (pyarrow 583 MiB: the page compressed and
decompressed, which pyarrow must hold at once) and 9.2 s on a shared 2-core machine; checking every image
of the folder with the column: 8.4 s (about 4.5 s of it sha256 at ~540 MB/s), peak 776 MiB. With
``--small-pages`` the first load peaks at 208 MiB (pyarrow 17 MiB) and the full check at 213 MiB (2.8 s).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _noise_jpegs(n: int, size: tuple[int, int]) -> list[bytes]:
    """Random-noise JPEGs (noise does not compress: ~1 byte a pixel at quality 90)."""
    import numpy as np
    from PIL import Image

    out = []
    for seed in range(n):
        arr = np.random.default_rng(seed).integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def build(folder: Path, n_refs: int, n_files: int, size: tuple[int, int], with_hashes: bool,
          small_pages: bool = False) -> int:
    """Writes one block and ``n_refs`` references in ``n_files`` Parquet files of one row group each.

    By default with pyarrow's default writer, which puts the image column of a row group written in one
    call in ONE page (a dictionary page as large as the row group's image column: the worst case for a
    reader, which must hold that page compressed and decompressed at once). ``small_pages``: PLAIN pages of
    about 1 MB (one image a page: pages are cut between write batches, here of one row)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from geofidelity_bench.benchmark import SHA256_COLUMN, features, readme_configs_yaml

    block = {"block_id": "synth_0", "city": "synthville", "country": "FR", "driving_side": "R",
             "stratum": "residential", "way_id": 1, "street_name": "Rue 0", "neighborhood": "Centre",
             "highway_tag": "residential", "length_m": 100.0, "polyline": [[48.0, 2.0], [48.0005, 2.0]],
             "centroid": [48.00025, 2.0], "bbox": [48.0, 2.0, 48.0005, 2.0], "neg_same_neighborhood": None,
             "neg_same_city": None, "neg_same_driving_side": None, "neg_random_city": None, "notes": "",
             "way_ids": [1], "neighborhood_source": "area"}
    (folder / "blocks").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([block], schema=features("blocks").arrow_schema),
                   folder / "blocks" / "train-00000-of-00001.parquet")
    schema = features("references").arrow_schema
    if not with_hashes:
        schema = schema.remove(schema.get_field_index(SHA256_COLUMN))
    images = _noise_jpegs(4, size)
    (folder / "references").mkdir()
    per_file, total = -(-n_refs // n_files), 0
    for f in range(n_files):
        rows = []
        for k in range(f * per_file, min(n_refs, (f + 1) * per_file)):
            rid = f"synth_0__{k:05d}"
            data = images[k % len(images)] + rid.encode()  # bytes after the end marker: every hash differs
            total += len(data)
            row = {"reference_id": rid, "image_id": rid, "block_id": "synth_0", "lat": 48.0, "lon": 2.0,
                   "captured_at": None, "compass_angle": None, "sun_elevation_deg": None,
                   "camera_type": "perspective", "quality_score": None, "source_url": None, "license": "CC0-1.0",
                   "attribution": "synthetic", "image": {"bytes": data, "path": f"{rid}.jpg"}}
            if with_hashes:
                row[SHA256_COLUMN] = hashlib.sha256(data).hexdigest()
            rows.append(row)
        table = pa.Table.from_pylist(rows, schema=schema)
        del rows
        pq.write_table(table, folder / "references" / f"train-{f:05d}-of-{n_files:05d}.parquet",
                       row_group_size=len(table),  # one row group per file
                       **({"use_dictionary": False, "write_batch_size": 1} if small_pages else {}))
        del table
    (folder / "README.md").write_text(f"---\n{readme_configs_yaml(['blocks', 'references'])}\n---\n", encoding="utf-8")
    return total


_MEASURE = """
import json, sys, time
import pyarrow as pa
from geofidelity_bench.benchmark import load_benchmark

def peak_rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

before = peak_rss()
t = time.perf_counter()
bench = load_benchmark(sys.argv[1])
fp = bench.fingerprint
out = {"load_s": time.perf_counter() - t, "rss_before": before, "peak_rss": peak_rss(),
       "arrow_peak": pa.default_memory_pool().max_memory(), "arrow_backend": pa.default_memory_pool().backend_name,
       "fingerprint": fp}
if sys.argv[2] == "verify":  # what a warm evaluate adds: every image's bytes hashed against its image_sha256
    from geofidelity_bench.image_store import verify_images
    t = time.perf_counter()
    verify_images([r.image_source for r in bench.references])
    out.update(verify_s=time.perf_counter() - t, verify_peak_rss=peak_rss(),
               verify_arrow_peak=pa.default_memory_pool().max_memory())
print(json.dumps(out))
"""


def measure(folder: Path, hash_cache: Path, verify: bool = False) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "GEOFIDELITY_HASH_CACHE": str(hash_cache)}
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(folder), "verify" if verify else "-"],
                         capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(out.stderr[-4000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--refs", type=int, default=300, help="reference images (default: 300)")
    p.add_argument("--files", type=int, default=2, help="Parquet files, one row group each (default: 2)")
    p.add_argument("--size", type=int, nargs=2, default=(1024, 768), metavar=("W", "H"),
                   help="JPEG size (default: 1024 768, ~1.3 MB of noise each)")
    p.add_argument("--small-pages", action="store_true",
                   help="write the image column in ~1 MB pages (default: one page a row group, the worst case)")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench_hash_memory_"))
    try:
        results = {}
        for with_hashes in (False, True):
            folder = tmp / ("with_column" if with_hashes else "without_column")
            t = time.perf_counter()
            total = build(folder, args.refs, args.files, tuple(args.size), with_hashes, args.small_pages)
            print(f"built {args.refs} references ({total / 1e6:.0f} MB of JPEG) in {args.files} file(s) of one row "
                  f"group, {'with' if with_hashes else 'without'} the image_sha256 column, in "
                  f"{time.perf_counter() - t:.1f} s")
            res = measure(folder, tmp / f"hash_cache_{with_hashes}", verify=with_hashes)
            results[with_hashes] = res
            print(f"  first load: {res['load_s']:.1f} s, peak RSS {res['peak_rss'] / 2**20:.0f} MiB "
                  f"(imports {res['rss_before'] / 2**20:.0f} MiB), pyarrow peak {res['arrow_peak'] / 2**20:.0f} MiB "
                  f"({res['arrow_backend']}); largest file {total / args.files / 2**20:.0f} MiB")
            if "verify_s" in res:
                print(f"  checking every image's bytes against its image_sha256 (what a warm evaluate adds): "
                      f"{res['verify_s']:.1f} s ({total / 1e6 / max(res['verify_s'], 1e-9):.0f} MB/s), peak RSS "
                      f"{res['verify_peak_rss'] / 2**20:.0f} MiB, pyarrow peak {res['verify_arrow_peak'] / 2**20:.0f} MiB")
        same = results[False]["fingerprint"] == results[True]["fingerprint"]
        print(f"same fingerprint with and without the column: {same}")
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
