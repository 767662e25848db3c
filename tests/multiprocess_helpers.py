"""What the tests of multi-process runs share (generate and embed under torchrun, accelerate
launch and srun-style rank variables, on the CPU with gloo): a free port, the environment of a
launched process, and the comparisons of an output folder with a one-process run."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
from pathlib import Path

import pyarrow.parquet as pq

from geofidelity_bench.generation.manifest import VOLATILE_COLUMNS
from geofidelity_bench.generation.runner import UNIT_DELAY_ENV

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A loopback port nobody listens on now (other runs may hold accelerate's default 29500)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_env(hf_home: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a launched process: offline, CPU only (gloo, so that files compare bit
    for bit with a CPU run on any machine), this checkout first on the path, no slow-down or
    ``accelerate launch --cpu`` flag inherited from the caller; ``hf_home`` keeps a user's
    accelerate config out."""
    e = {k: v for k, v in os.environ.items() if k not in (UNIT_DELAY_ENV, "ACCELERATE_USE_CPU")}
    e.update(HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1",
             CUDA_VISIBLE_DEVICES="", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    if hf_home is not None:
        e["HF_HOME"] = str(hf_home)
    e.update(extra)
    return e


def jpg_hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*.jpg"))}


def all_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def stable_manifest(root: Path) -> list[dict]:
    """The merged manifest file's rows without the when/where columns (timings, process, device)."""
    rows = pq.read_table(root / "manifest.parquet").to_pylist()
    return [{k: v for k, v in r.items() if k not in VOLATILE_COLUMNS} for r in rows]


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL to a process and everything under it, as when a machine dies (torchrun starts its
    workers in sessions of their own, so killing the launcher's process group would not reach them)."""
    import psutil

    try:
        tree = psutil.Process(proc.pid)
    except psutil.NoSuchProcess:
        return
    for p in [tree, *tree.children(recursive=True)]:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
