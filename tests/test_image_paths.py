"""An image cell's ``path`` stays inside its benchmark folder (issue 29, leaks): a benchmark can never make
``info --check-images``, ``evaluate`` or ``build-dataset`` read (and ``push-dataset`` publish) another
file of the machine."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import jpeg_bytes
from geofidelity_bench.benchmark import config_file, load_benchmark, save_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.image_store import SHA256_COLUMN, ImagePathError, cell_bytes, confined_file

ROW = 2  # a reference of block a1 (the tiny benchmark's references are in block order)


@pytest.fixture(autouse=True)
def hash_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOFIDELITY_HASH_CACHE", str(tmp_path / "hash_cache"))


@pytest.fixture()
def secret(tmp_path) -> Path:
    """A file outside the benchmark folder that decodes as an image (the worst case: it passes every
    image check of today's code)."""
    path = tmp_path / "private" / "holiday.jpg"
    path.parent.mkdir()
    path.write_bytes(jpeg_bytes(4242))
    return path


def _with_path_cell(tiny_benchmark, folder: Path, cell_path: str, data: bytes) -> tuple[Path, str]:
    """``folder`` holding the tiny benchmark with row ROW's image as ``{"bytes": None, "path": cell_path}``
    and the ``image_sha256`` of ``data`` (what an attacker who knows the file would store)."""
    save_benchmark(tiny_benchmark, folder)
    file = config_file(folder, "references")
    table = pq.read_table(file)
    rows = table.to_pylist()
    rows[ROW]["image"] = {"bytes": None, "path": cell_path}
    rows[ROW][SHA256_COLUMN] = hashlib.sha256(data).hexdigest()
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), file)
    return folder, rows[ROW]["reference_id"]


def _escapes(tmp_path: Path, secret: Path):
    """(name, folder, cell path) of each way out of the folder: absolute, '..', a link inside that leads out."""
    linked = tmp_path / "linked"
    (linked / "images").mkdir(parents=True)
    os.symlink(secret, linked / "images" / "photo.jpg")
    return [("absolute", tmp_path / "absolute", str(secret)),
            ("dotdot", tmp_path / "dotdot", "../private/holiday.jpg"),
            ("symlink", linked, "images/photo.jpg")]


def _leaked(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]


def test_confined_file_refuses_every_way_out(tmp_path, secret):
    root = tmp_path / "bench"
    (root / "images").mkdir(parents=True)
    (root / "images" / "a.jpg").write_bytes(b"x")
    os.symlink(secret, root / "images" / "out.jpg")
    os.symlink(root / "images" / "a.jpg", root / "images" / "in.jpg")
    assert confined_file("images/a.jpg", root) == ((root / "images" / "a.jpg").resolve(), None)
    assert confined_file("images/in.jpg", root)[0] == (root / "images" / "a.jpg").resolve()  # a link inside
    assert confined_file(str(secret), root) == (None, "an absolute path")
    assert confined_file("images/../../private/holiday.jpg", root) == (None, "a '..' component")
    assert confined_file("images/out.jpg", root) == (None, "a link that leads outside the folder")
    with pytest.raises(ImagePathError, match="holiday.jpg"):
        cell_bytes({"bytes": None, "path": str(secret)}, "reference r", root)
    with pytest.raises(ImagePathError, match="no benchmark folder"):  # no root: a path is never read
        cell_bytes({"bytes": None, "path": str(secret)}, "reference r")


def test_a_path_out_of_the_folder_is_refused_by_info_evaluate_and_build_dataset(tiny_benchmark, tmp_path, secret,
                                                                               capsys):
    data = secret.read_bytes()
    for kind, folder, cell_path in _escapes(tmp_path, secret):
        folder, ref_id = _with_path_cell(tiny_benchmark, folder, cell_path, data)
        # info --check-images lists the row as bad, naming it and the path
        assert main(["info", "--benchmark", str(folder), "--check-images", "--num-workers", "1"]) == 1, kind
        out = capsys.readouterr().out
        bad = [line for line in out.splitlines() if ref_id in line]
        assert len(bad) == 1 and cell_path in bad[0] and "outside the benchmark folder" in bad[0], (kind, out)

        # build-dataset: one line naming the row, nothing with the file's bytes written
        built = tmp_path / f"built-{kind}"
        assert main(["build-dataset", str(folder), "--out", str(built)]) == 2, kind
        err = capsys.readouterr().err
        assert ref_id in err and cell_path in err and "Traceback" not in err, (kind, err)
        assert not built.exists() or not _leaked(built, data), kind

        # evaluate: the gallery embedding refuses the row before any score
        gen = tmp_path / f"gen-{kind}"
        (gen / "m" / "L0" / "a1").mkdir(parents=True)
        for k in range(2):
            (gen / "m" / "L0" / "a1" / f"{k:02d}.jpg").write_bytes(jpeg_bytes(900 + k))
        out_dir = tmp_path / f"out-{kind}"
        assert main(["evaluate", "--benchmark", str(folder), "--generated", str(gen), "--encoder", "efficientnet-lite0",
                     "--out", str(out_dir), "--cache-dir", str(tmp_path / "cache"), "--no-progress", "--no-gaas",
                     "--no-anchors"]) == 2, kind
        err = capsys.readouterr().err
        assert ref_id in err and "outside the benchmark folder" in err and "Traceback" not in err, (kind, err)
        assert not (out_dir / "results.csv").exists()


def test_a_relative_path_inside_the_folder_still_works(tiny_benchmark, tmp_path, capsys):
    data = jpeg_bytes(77)
    folder, ref_id = _with_path_cell(tiny_benchmark, tmp_path / "bench", "images/photo.jpg", data)
    (folder / "images").mkdir()
    (folder / "images" / "photo.jpg").write_bytes(data)
    assert main(["info", "--benchmark", str(folder), "--check-images"]) == 0
    bench = load_benchmark(folder)
    assert next(r for r in bench.references if r.reference_id == ref_id).image_bytes == data
    built = tmp_path / "built"
    assert main(["build-dataset", str(folder), "--out", str(built)]) == 0
    assert load_benchmark(built).fingerprint == bench.fingerprint
    # resolved against the benchmark folder, not the working directory
    (folder / "images" / "photo.jpg").unlink()
    assert main(["info", "--benchmark", str(folder), "--check-images"]) == 1
    assert "does not exist in the benchmark folder" in capsys.readouterr().out


def test_a_manifest_path_cannot_make_build_dataset_read_another_file(tmp_path, secret):
    """The ``generations`` rows are read from each panel's own file (the one the manifest's hash was checked
    against), not from the manifest's ``path`` text."""
    from PIL import Image

    from geofidelity_bench.atomic import atomic_write_bytes
    from geofidelity_bench.generation.manifest import encode_panel, panel_relpath, write_manifest

    demo = load_benchmark("demo")
    gen = tmp_path / "gen"
    data = encode_panel(Image.new("RGB", (16, 16), (10, 200, 30)))
    rel = panel_relpath("m", "L0", demo.block_ids[0], 0)
    atomic_write_bytes(gen / rel, data)
    write_manifest(gen, [dict(model="m", block_id=demo.block_ids[0], condition="L0", k=0, seed=1, prompt="p",
                              path=str(secret), sha256=hashlib.sha256(data).hexdigest(), file_size=len(data),
                              benchmark=demo.name, benchmark_fingerprint=demo.fingerprint)])
    built = tmp_path / "built"
    assert main(["build-dataset", "demo", "--out", str(built), "--generations", str(gen)]) == 0
    assert not _leaked(built, secret.read_bytes())
    rows = pq.read_table(next((built / "generations" / "m").glob("*.parquet"))).to_pylist()
    assert [(r["image"]["bytes"], r["image"]["path"]) for r in rows] == [(data, rel)]
