"""Hashing a benchmark's images is streamed (issue 43): the first load of a folder without image_sha256 and the
check of every image's bytes (what a warm evaluate adds) hold at most the largest page pyarrow decodes, held
compressed and decompressed at once: twice a row group's image column when a writer put that column in one
page (pyarrow's default writer does, for a row group written in one call), about a megabyte when its pages are
small. Before, a row group's column chunk was read whole on top of that (three times the column at the peak).
``benchmarks/bench_hash_memory.py`` measures the same at paper size."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_hash_memory", ROOT / "benchmarks" / "bench_hash_memory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_MEASURE = textwrap.dedent("""
    import json, sys
    import pyarrow as pa
    from geofidelity_bench.benchmark import load_benchmark
    from geofidelity_bench.image_store import verify_images

    bench = load_benchmark(sys.argv[1])
    if sys.argv[2] == "verify":
        verify_images([r.image_source for r in bench.references])
        assert all(r.image_source._verified for r in bench.references)
    print(json.dumps({"arrow_peak": pa.default_memory_pool().max_memory(), "fingerprint": bench.fingerprint}))
""")


def _peak(folder: Path, what: str, hash_cache: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "GEOFIDELITY_HASH_CACHE": str(hash_cache)}
    out = subprocess.run([sys.executable, "-c", _MEASURE, str(folder), what], capture_output=True, text=True,
                         env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("small_pages", [False, True], ids=["one page a row group", "small pages"])
@pytest.mark.parametrize("with_hashes", [False, True], ids=["first load, no image_sha256", "every image checked"])
def test_hashing_holds_at_most_the_largest_page_twice(small_pages, with_hashes, tmp_path):
    bench = _bench_module()
    folder = tmp_path / "bench"
    column = bench.build(folder, 600, 2, (320, 240), with_hashes, small_pages)  # 2 files of one row group each
    per_group = column / 2
    assert per_group > 15_000_000
    res = _peak(folder, "verify" if with_hashes else "load", tmp_path / "hash_cache")
    if small_pages:  # about a page (one image) and pyarrow's buffers, whatever the size of the row group
        assert res["arrow_peak"] < per_group / 2, (res, per_group)
    else:  # the one page compressed and decompressed, nothing more (was about three times)
        assert res["arrow_peak"] < 2.4 * per_group, (res, per_group)
