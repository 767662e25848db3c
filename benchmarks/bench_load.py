"""How long ``load_benchmark`` takes and how much memory it needs, on a synthetic benchmark.

Default: the paper's size, 112 blocks x 60 references of 2048x1536 JPEG (~2.4 GB of image bytes)
in 8 Parquet shards. ``--blocks 1120`` builds ten times that (67,200 references, ~24 GB on disk).
A few distinct JPEGs are encoded once and every row stores one of them with a per-row suffix (so
every row's bytes, and hash, differ); the Parquet files hold the full bytes.

Each measurement runs in a fresh Python process and prints wall time and peak RSS
(``VmHWM`` of ``/proc/self/status``, Linux) of: the imports alone, ``load_benchmark`` + ``summary()``
(what ``info`` does), and the same plus a walk over every gallery reading each image once (what
embedding does before the model).

``--evaluate`` also measures ``geofidelity-bench evaluate`` with a warm embedding cache. It writes a
generated folder (one method, condition L1, ``--panel-size`` 256x256 JPEGs per block), seeds the cache
of ``--encoder`` (default ``efficientnet-lite0``, which needs no network even on a miss) with seeded
unit-norm Gaussian embeddings of every reference and generated image, through the library's own writer
(``EmbeddingCache.put``, keyed by the encoder's config hash and each image's sha256: a reference's
stored ``image_sha256``), then runs ``evaluate --no-gaas`` (panels and the three anchors) in a fresh
process that calls the CLI's ``main`` and prints its peak RSS and the images read from the benchmark's
Parquet files (the library counts every read). It prints wall time, peak RSS and run.json's embedding
statistics, and exits 1 unless the cache was warm: 0 embeddings computed, 0 images through the model.
The reference images a warm run reads are only hashed against their ``image_sha256`` (issue 43: each file
streamed once, no image decoded), so that a photo replaced behind a stale hash cannot get the cached
embedding of the old one. Example:

    python benchmarks/bench_load.py                 # paper size in a temp dir
    python benchmarks/bench_load.py --blocks 1120   # ten times the paper (check disk space first)
    python benchmarks/bench_load.py --blocks 16     # a quick run
    python benchmarks/bench_load.py --blocks 1120 --size 1024 768 --evaluate   # 9.5 GB; evaluate too
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _jpegs(n: int, size: tuple[int, int]) -> list[bytes]:
    import numpy as np
    from PIL import Image

    out = []
    for seed in range(n):
        rng = np.random.default_rng(seed)
        small = rng.integers(0, 256, size=(size[1] // 16, size[0] // 16, 3), dtype=np.uint8)
        img = Image.fromarray(small).resize(size, Image.BICUBIC)
        noise = rng.integers(-3, 4, size=(size[1], size[0], 3))
        arr = np.clip(np.asarray(img, dtype=np.int16) + noise, 0, 255).astype(np.uint8)
        buf = io.BytesIO()
        Image.fromarray(arr).save(buf, format="JPEG", quality=85)
        out.append(buf.getvalue())
    return out


def build(folder: Path, n_blocks: int, n_refs: int, n_shards: int, distinct: int, size: tuple[int, int]) -> int:
    """Writes the synthetic benchmark; returns the image bytes written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from geofidelity_bench.benchmark import features, readme_configs_yaml

    blocks = []
    for b in range(n_blocks):
        lat, lon = 48.0 + b * 1e-3, 2.0
        blocks.append({"block_id": f"synth_{b:05d}", "city": "synthville", "country": "FR", "driving_side": "R",
                       "stratum": "residential", "way_id": b, "street_name": f"Rue {b}", "neighborhood": "Centre",
                       "highway_tag": "residential", "length_m": 100.0, "polyline": [[lat, lon], [lat + 5e-4, lon]],
                       "centroid": [lat + 2.5e-4, lon], "bbox": [lat, lon, lat + 5e-4, lon],
                       "neg_same_neighborhood": None, "neg_same_city": None, "neg_same_driving_side": None,
                       "neg_random_city": None, "notes": "", "way_ids": [b], "neighborhood_source": "area"})
    (folder / "blocks").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(blocks, schema=features("blocks").arrow_schema),
                   folder / "blocks" / "train-00000-of-00001.parquet")
    images = _jpegs(distinct, size)
    schema = features("references").arrow_schema
    (folder / "references").mkdir()
    total, per_shard = 0, -(-n_blocks // n_shards)
    import hashlib

    for s in range(n_shards):
        rows = []
        for b in range(s * per_shard, min(n_blocks, (s + 1) * per_shard)):
            for k in range(n_refs):
                rid = f"synth_{b:05d}__{k:03d}"
                data = images[(b * n_refs + k) % distinct] + rid.encode()  # bytes after the JPEG's end marker
                total += len(data)
                rows.append({"reference_id": rid, "image_id": rid, "block_id": f"synth_{b:05d}", "lat": 48.0,
                             "lon": 2.0, "captured_at": None, "compass_angle": None, "sun_elevation_deg": None,
                             "camera_type": "perspective", "quality_score": None, "source_url": None,
                             "license": "CC0-1.0", "attribution": "synthetic",
                             "image": {"bytes": data, "path": f"{rid}.jpg"},
                             "image_sha256": hashlib.sha256(data).hexdigest()})
        name = f"train-{s:05d}-of-{n_shards:05d}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / "references" / name, row_group_size=100)
        del rows
    (folder / "README.md").write_text(f"---\n{readme_configs_yaml(['blocks', 'references'])}\n---\n", encoding="utf-8")
    return total


_MEASURE = """
import json, sys, time

def peak_rss():  # VmHWM: this process's peak resident set (ru_maxrss would carry the parent's over exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

t0 = time.perf_counter()
from geofidelity_bench.benchmark import load_benchmark
t1 = time.perf_counter()
rss_imports = peak_rss()
mode = sys.argv[2]
out = {"imports_s": t1 - t0, "rss_after_imports": rss_imports}
if mode != "imports":
    bench = load_benchmark(sys.argv[1])
    bench.summary()
    out["load_s"] = time.perf_counter() - t1
    if mode == "read":
        n = sum(len(r.image_bytes) for b in bench.block_ids for r in bench.gallery(b))
        out["read_s"], out["gallery_bytes"] = time.perf_counter() - t1 - out["load_s"], n
out["peak_rss"] = peak_rss()
print(json.dumps(out))
"""


def measure(folder: Path, mode: str) -> dict:
    env_path = str(ROOT)
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(folder), mode], capture_output=True, text=True,
                         check=True, env={"PYTHONPATH": env_path, "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- evaluate with a warm embedding cache ------------------------------------------------------------

PANEL_METHOD, PANEL_CONDITION = "synthetic_model", "L1"


def write_generated(folder: Path, bench_folder: Path, n: int, size: tuple[int, int] = (256, 256)) -> int:
    """A generated folder: one panel of ``n`` small JPEGs ({method}/L1/{block_id}/NN.jpg) for every block.

    Every file's bytes differ (a per-file suffix after the JPEG's end marker). Returns the number of files."""
    from geofidelity_bench.benchmark import load_benchmark

    images, count = _jpegs(4, size), 0
    for b, bid in enumerate(load_benchmark(bench_folder).block_ids):
        panel = folder / PANEL_METHOD / PANEL_CONDITION / bid
        panel.mkdir(parents=True)
        for k in range(n):
            (panel / f"{k:02d}.jpg").write_bytes(images[(b + k) % len(images)] + f"{bid}/{k}".encode())
            count += 1
    return count


def seed_cache(cache_dir: Path, bench_folder: Path, generated: Path, encoder_name: str) -> dict:
    """Writes a synthetic embedding for every reference and every generated image into the embedding cache,
    through the library's own writer (``EmbeddingCache.put``), keyed as ``evaluate`` looks them up: the
    encoder's config hash and each image's sha256 (a reference's stored ``image_sha256``, a file's bytes).
    Rows are seeded unit-norm Gaussians, written in shards of ``FLUSH_ROWS`` rows as a real run writes them."""
    import numpy as np

    from geofidelity_bench.benchmark import load_benchmark
    from geofidelity_bench.cached_batches import FLUSH_ROWS
    from geofidelity_bench.encoders import EmbeddingCache, get_encoder
    from geofidelity_bench.images import content_sha256

    encoder = get_encoder(encoder_name, device="cpu")
    bench = load_benchmark(bench_folder)
    keys = [r.stored_sha256 for r in bench.references]  # the stored image_sha256: no image is read
    keys += [content_sha256(p) for p in sorted(generated.rglob("*.jpg"))]
    keys = list(dict.fromkeys(keys))
    cache = EmbeddingCache(cache_dir)
    rng = np.random.default_rng(0)
    for start in range(0, len(keys), FLUSH_ROWS):
        chunk = keys[start : start + FLUSH_ROWS]
        rows = rng.standard_normal((len(chunk), encoder.dim)).astype(np.float32)
        cache.put(encoder, chunk, rows / np.linalg.norm(rows, axis=1, keepdims=True))
    return {"rows": len(keys), "dim": encoder.dim, "config_hash": encoder.config_hash,
            "shards": -(-len(keys) // FLUSH_ROWS)}


# Runs the CLI's main in this process (as `geofidelity-bench ...` does) and prints, as the last line, its
# wall time, this process's peak RSS and how many images were read from the benchmark's Parquet files
# (every ParquetImages made in the run is recorded; the library counts each read).
_EVALUATE = """
import json, sys, time

t0 = time.perf_counter()
from geofidelity_bench import image_store
from geofidelity_bench.cli import main

readers = []
_init = image_store.ParquetImages.__init__

def _recording_init(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    readers.append(self)

image_store.ParquetImages.__init__ = _recording_init
t1 = time.perf_counter()
rc = main(sys.argv[1:])
t2 = time.perf_counter()
peak = next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"rc": rc, "imports_s": t1 - t0, "main_s": t2 - t1, "peak_rss": peak, "parquet_files": len(readers),
                  "image_reads": sum(r.image_reads for r in readers),
                  "row_group_reads": sum(r.row_group_reads for r in readers)}))
"""


def measure_evaluate(bench_folder: Path, generated: Path, cache_dir: Path, out: Path, encoder: str) -> dict:
    """``geofidelity-bench evaluate`` in a fresh process; its measurements and run.json's embedding_stats."""
    argv = ["evaluate", "--benchmark", str(bench_folder), "--generated", str(generated), "--out", str(out),
            "--encoder", encoder, "--device", "cpu", "--cache-dir", str(cache_dir), "--no-gaas", "--no-progress"]
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _EVALUATE, *argv], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"evaluate failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    res.update(wall_s=wall, embedding_stats=run["embedding_stats"], n_blocks=run["benchmark"]["n_blocks"],
               n_references=run["benchmark"]["n_references"], rows=sum(1 for _ in open(out / "results.csv")) - 1)
    return res


def run_evaluate(folder: Path, work: Path, encoder: str, panel_size: int) -> bool:
    """Seeds the cache, runs evaluate, prints what it measured; False when the cache was not warm."""
    generated, cache_dir = work / "generated", work / "embeddings"
    t = time.perf_counter()
    n_files = write_generated(generated, folder, panel_size)
    seeded = seed_cache(cache_dir, folder, generated, encoder)
    print(f"seeded the {encoder} cache ({seeded['dim']}-d, config {seeded['config_hash'][:12]}) with {seeded['rows']} "
          f"synthetic rows in {seeded['shards']} shards (references + {n_files} generated images) "
          f"in {time.perf_counter() - t:.1f} s")
    res = measure_evaluate(folder, generated, cache_dir, work / "out", encoder)
    stats = res["embedding_stats"]
    print(f"evaluate (warm cache): {res['wall_s']:.1f} s wall ({res['main_s']:.1f} s in the command, "
          f"{res['imports_s']:.1f} s imports), peak RSS {res['peak_rss'] / 2**20:.0f} MiB; {res['rows']} result rows "
          f"for {res['n_blocks']} blocks")
    print(f"  embeddings: {stats['total']} total, {stats['from_cache']} from cache, {stats['computed']} computed, "
          f"{stats['forward_images']} through the model; reference images read (hashed against their "
          f"image_sha256, none decoded): {res['image_reads']} ({res['row_group_reads']} row groups) from "
          f"{res['parquet_files']} Parquet files")
    warm = stats["computed"] == 0 and stats["forward_images"] == 0
    if not warm:
        print("  NOT WARM: evaluate computed embeddings", file=sys.stderr)
    return warm


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--blocks", type=int, default=112, help="blocks (default: 112, the paper; 1120: ten times)")
    p.add_argument("--refs", type=int, default=60, help="references per block (default: 60)")
    p.add_argument("--shards", type=int, default=8, help="Parquet shards of the references config (default: 8)")
    p.add_argument("--distinct", type=int, default=4, help="distinct JPEGs encoded (default: 4)")
    p.add_argument("--size", type=int, nargs=2, default=(2048, 1536), metavar=("W", "H"))
    p.add_argument("--keep", default=None, help="build into this folder and keep it (default: a temp dir, removed)")
    p.add_argument("--read", action="store_true", help="also time reading every gallery image once")
    p.add_argument("--evaluate", action="store_true",
                   help="also run `geofidelity-bench evaluate` with a warm embedding cache (seeded with synthetic "
                        "embeddings of every reference and generated image) and report its time and peak RSS")
    p.add_argument("--encoder", default="efficientnet-lite0",
                   help="encoder whose cache is seeded for --evaluate (default: efficientnet-lite0, offline)")
    p.add_argument("--panel-size", type=int, default=4, help="generated images per block for --evaluate (default: 4)")
    args = p.parse_args(argv)
    tmp = None if args.keep else tempfile.mkdtemp(prefix="bench_load_")
    folder = Path(args.keep or tmp) / "bench"
    try:
        t = time.perf_counter()
        total = build(folder, args.blocks, args.refs, args.shards, args.distinct, tuple(args.size))
        print(f"built {args.blocks} blocks x {args.refs} refs ({total / 1e9:.2f} GB image bytes, {args.shards} shards) "
              f"in {time.perf_counter() - t:.1f} s at {folder}")
        base = measure(folder, "imports")
        print(f"imports alone:        {base['imports_s']:.2f} s, peak RSS {base['peak_rss'] / 2**20:.0f} MiB")
        res = measure(folder, "load")
        print(f"load_benchmark+info:  {res['load_s']:.2f} s, peak RSS {res['peak_rss'] / 2**20:.0f} MiB")
        if args.read:
            res = measure(folder, "read")
            print(f"+ read every gallery image once: {res['read_s']:.1f} s ({res['gallery_bytes'] / 1e9:.2f} GB), "
                  f"peak RSS {res['peak_rss'] / 2**20:.0f} MiB")
        if args.evaluate and not run_evaluate(folder, folder.parent / "evaluate", args.encoder, args.panel_size):
            return 1
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
