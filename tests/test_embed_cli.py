"""`geofidelity-bench embed`: embeds a benchmark's references through the cache, also on 2 processes."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from geofidelity_bench.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_embed_demo_then_served_from_cache(tmp_path, capsys):
    args = ["embed", "--benchmark", "demo", "--encoder", "efficientnet-lite0", "--cache-dir", str(tmp_path / "c"),
            "--no-progress"]
    assert main(args) == 0
    assert "41 images: 0 from cache, 41 computed" in capsys.readouterr().out
    assert main(args + ["--out", str(tmp_path / "e.parquet")]) == 0
    assert "41 images: 41 from cache, 0 computed" in capsys.readouterr().out
    table = pq.read_table(tmp_path / "e.parquet")
    assert table.num_rows == 41 and table.schema.field("embedding").type.list_size == 1280
    assert b"efficientnet-lite0" in table.schema.metadata[b"encoder"]
    from geofidelity_bench.benchmark import load_benchmark

    assert table.column("kind").to_pylist() == ["reference"] * 41
    assert table.column("id").to_pylist() == [r.reference_id for r in load_benchmark("demo").references]


def test_a_wrong_out_suffix_fails_before_any_embedding(tmp_path, capsys):
    cache = tmp_path / "c"
    assert main(["embed", "--encoder", "efficientnet-lite0", "--cache-dir", str(cache), "--no-progress",
                 "--out", str(tmp_path / "e.csv")]) == 2
    assert "--out must be a .parquet file" in capsys.readouterr().err
    assert not cache.exists()  # nothing was embedded


def test_bad_encoder_options_are_clean_errors(capsys):
    assert main(["embed", "--encoder", "efficientnet-lite0", "--device", "cpu", "--dtype", "bfloat16"]) == 2
    assert "GPU only" in capsys.readouterr().err
    assert main(["embed", "--encoder", "no-such-encoder"]) == 2
    assert "no-such-encoder" in capsys.readouterr().err


def test_embed_list_and_offline_error(capsys):
    assert main(["embed", "--list"]) == 0
    listed = capsys.readouterr().out.split()
    assert {"dinov2-base", "efficientnet-lite0", "clip-vit-b32", "siglip-so400m"} <= set(listed)
    assert main(["embed", "--encoder", "dinov2-base"]) == 2
    err = capsys.readouterr().err
    assert "facebook/dinov2-base" in err and "efficientnet-lite0" in err


@pytest.mark.timeout(300)
def test_embed_under_accelerate_launch_two_processes(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1",
               CUDA_VISIBLE_DEVICES="")
    one = tmp_path / "one.parquet"
    assert main(["embed", "--encoder", "efficientnet-lite0", "--no-cache", "--no-progress", "--out", str(one)]) == 0
    two = tmp_path / "two.parquet"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port),
           "-m", "geofidelity_bench.cli", "embed", "--encoder", "efficientnet-lite0", "--no-cache", "--out", str(two)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=280, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "embedded on 2 processes" in proc.stdout
    a, b = pq.read_table(one).to_pydict(), pq.read_table(two).to_pydict()
    assert a["id"] == b["id"]
    np.testing.assert_allclose(np.array(a["embedding"]), np.array(b["embedding"]), atol=1e-5)
