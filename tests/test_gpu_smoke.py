"""The GPU smoke script's CPU dry run passes (every check runs on the CPU or says why it is skipped)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_smoke_cpu_dry_run():
    env = dict(os.environ, HF_HUB_OFFLINE="1", CUDA_VISIBLE_DEVICES="",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "benchmarks/gpu_smoke.py", "cpu"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line and not line.startswith("gpu_smoke:")]
    labels = [line.split()[0] for line in lines]
    assert labels == ["encoders", "tf32", "segmenters", "mfp", "vqa", "generation", "offload", "cli", "torchrun"]
    assert all(" ok: " in line or "skipped (" in line for line in lines)
    assert "FAIL" not in proc.stdout
    for label in ("tf32", "offload", "torchrun"):
        assert next(line for line in lines if line.startswith(label)).endswith("skipped (no CUDA)")
