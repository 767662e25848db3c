"""Benchmarks load without their image bytes (issue 21): images are read where they are used."""

import hashlib
import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import jpeg_bytes
from geofidelity_bench.benchmark import _fingerprint_record, config_file, load_benchmark, save_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.images import ImageDecodeError
from geofidelity_bench.image_store import SHA256_COLUMN


@pytest.fixture(autouse=True)
def hash_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOFIDELITY_HASH_CACHE", str(tmp_path / "hash_cache"))
    return tmp_path / "hash_cache"


def _readers(bench):
    return {id(x.image_source.reader): x.image_source.reader for x in [*bench.references, *bench.world]}.values()


def _reads(bench) -> int:
    return sum(r.image_reads + r.row_group_reads for r in _readers(bench))


def _files(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in sorted(folder.rglob("*"))}


def test_demo_fingerprint_is_that_of_the_full_read():
    """The fingerprint from the stored/computed hashes equals the one over bytes read in full (the base code's)."""
    from geofidelity_bench.benchmark import demo_path

    bench = load_benchmark("demo")
    h = hashlib.sha256()
    for block in bench.blocks:
        h.update(json.dumps(_fingerprint_record(block), sort_keys=True, default=str).encode())
    rows = sorted(pq.read_table(config_file(demo_path(), "references")).to_pylist(), key=lambda r: r["reference_id"])
    for row in rows:
        h.update(f"{row['reference_id']}|{row['block_id']}|".encode())
        h.update(hashlib.sha256(row["image"]["bytes"]).digest())
    assert bench.fingerprint == h.hexdigest()
    assert {r.reference_id: r.image_bytes for r in bench.references} == {r["reference_id"]: r["image"]["bytes"] for r in rows}


def test_saved_folder_carries_hashes_and_loading_reads_no_image(tiny_benchmark, tmp_path, capsys):
    folder = save_benchmark(tiny_benchmark, tmp_path / "bench")
    table = pq.read_table(config_file(folder, "references"))
    assert table.column(SHA256_COLUMN).to_pylist() == [hashlib.sha256(r["bytes"]).hexdigest()
                                                       for r in table.column("image").to_pylist()]
    bench = load_benchmark(folder)
    bench.summary()
    from geofidelity_bench.prompts import build_prompt

    build_prompt(bench, bench.block_ids[0], "L1")
    assert _reads(bench) == 0
    assert bench.fingerprint == tiny_benchmark.fingerprint
    assert bench.gallery("a1")[0].image_bytes == tiny_benchmark.gallery("a1")[0].image_bytes
    assert _reads(bench) > 0
    # pickling carries no image bytes, and the copy still reads them
    blob = pickle.dumps(bench)
    assert len(blob) < sum(len(r.image_bytes) for r in tiny_benchmark.references)
    copy = pickle.loads(blob)
    assert [r.image_bytes for r in copy.references] == [r.image_bytes for r in tiny_benchmark.references]


def test_older_folder_is_hashed_once_into_the_user_cache(tiny_benchmark, tmp_path, hash_cache):
    folder = save_benchmark(tiny_benchmark, tmp_path / "bench")
    path = config_file(folder, "references")
    pq.write_table(pq.read_table(path).drop_columns([SHA256_COLUMN]), path)  # as written before the column
    before = _files(folder)
    first = load_benchmark(folder)
    assert _reads(first) > 0 and len(list(hash_cache.glob("*.json"))) == 1
    second = load_benchmark(folder)
    assert _reads(second) == 0
    assert first.fingerprint == second.fingerprint == tiny_benchmark.fingerprint
    assert _files(folder) == before  # nothing written into the benchmark folder


def _folder_with_bad_images(tiny_benchmark, tmp_path, bad: dict[int, bytes]):
    folder = save_benchmark(tiny_benchmark, tmp_path / "bench")
    path = config_file(folder, "references")
    table = pq.read_table(path)
    rows = table.to_pylist()
    for i, data in bad.items():
        rows[i]["image"] = {"bytes": data, "path": "x.jpg"}
        rows[i][SHA256_COLUMN] = hashlib.sha256(data).hexdigest()
    import pyarrow as pa

    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
    return folder, [rows[i]["reference_id"] for i in bad]


def test_corrupt_reference_is_named_when_embedded(tiny_benchmark, tmp_path):
    from geofidelity_bench.encoders import get_encoder
    from geofidelity_bench.evaluation import embed_items

    folder, (bad_id,) = _folder_with_bad_images(tiny_benchmark, tmp_path, {4: b"\xff\xd8 not a jpeg"})
    bench = load_benchmark(folder)  # loads: the bytes are not looked at
    bad_ref = next(r for r in bench.references if r.reference_id == bad_id)
    encoder = get_encoder("efficientnet-lite0", device="cpu")
    with pytest.raises(ImageDecodeError, match=bad_id):
        embed_items({"gallery": bench.references_of(bad_ref.block_id)}, encoder, progress=False, num_workers=0)


def test_info_check_images_lists_every_bad_reference(tiny_benchmark, tmp_path, capsys):
    good = jpeg_bytes(7)
    folder, bad_ids = _folder_with_bad_images(tiny_benchmark, tmp_path,
                                              {1: b"garbage", 6: good[: len(good) // 3], 9: b""})
    assert main(["info", "--benchmark", str(folder), "--check-images", "--num-workers", "2"]) == 1
    out = capsys.readouterr().out
    listed = [line for line in out.splitlines() if line.startswith("  ")]
    assert len(listed) == 3 and all(any(b in line for line in listed) for b in bad_ids)
    assert main(["info", "--benchmark", str(save_benchmark(tiny_benchmark, tmp_path / "ok")), "--check-images"]) == 0


def test_evaluate_with_a_warm_cache_only_hashes_reference_images(tiny_benchmark, tmp_path):
    """A warm run decodes no reference image, but streams each file once to hash the images whose cached
    embeddings it uses (issue 43: a stale image_sha256 cannot hide a replaced photo)."""
    from geofidelity_bench.encoders import EmbeddingCache, get_encoder
    from geofidelity_bench.evaluation import evaluate_panels

    folder = save_benchmark(tiny_benchmark, tmp_path / "bench")
    encoder = get_encoder("efficientnet-lite0", device="cpu")
    cache = EmbeddingCache(tmp_path / "emb")
    panels = {("m", "L1", b): [jpeg_bytes(100 + i) for i in range(3)] for b in tiny_benchmark.block_ids}
    kwargs = dict(cache=cache, progress=False, include_anchors=True, num_workers=0)
    cold = load_benchmark(folder)
    first = evaluate_panels(cold, panels, encoder, **kwargs)
    assert _reads(cold) > 0
    warm = load_benchmark(folder)
    second = evaluate_panels(warm, panels, encoder, **kwargs)
    readers = list(_readers(warm))
    assert sum(r.row_group_reads for r in readers) == sum(len(r._starts) for r in readers)  # each group once
    assert first.equals(second)


def test_loading_keeps_image_bytes_out_of_memory(tmp_path):
    """Peak Arrow and Python allocations while loading stay far below the image column's size."""
    from conftest import make_block
    from geofidelity_bench.benchmark import Benchmark, ReferenceImage

    blocks = [make_block(f"b{i}") for i in range(4)]
    base = jpeg_bytes(1, size=(640, 480))
    refs = [ReferenceImage(f"b{b}__{k}", f"img{b}_{k}", f"b{b}", 1.0, 2.0, None, None, None, None, None, None, None,
                           None, image_bytes=base + os.urandom(400_000) + bytes([b, k]))
            for b in range(4) for k in range(10)]
    folder = save_benchmark(Benchmark(blocks, refs, validate_images=False), tmp_path / "big")
    image_bytes = sum(len(r.image_bytes) for r in refs)
    assert image_bytes > 16_000_000
    script = textwrap.dedent(f"""
        import tracemalloc, pyarrow as pa
        from geofidelity_bench.benchmark import load_benchmark
        load_benchmark({str(folder)!r}).summary()  # imports everything loading needs
        tracemalloc.start()  # after the imports: what loading allocates
        bench = load_benchmark({str(folder)!r})
        bench.summary()
        print(tracemalloc.get_traced_memory()[1], pa.default_memory_pool().max_memory())
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True).stdout
    python_peak, arrow_peak = (int(v) for v in out.split())
    assert python_peak < image_bytes / 8 and arrow_peak < image_bytes / 8
