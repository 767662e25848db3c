"""A photo replaced in a benchmark folder behind a stale ``image_sha256`` (issue 43): every reader of the
benchmark's images fails naming the file, the row, the reference and its block, and the field, even when a
cache already holds a result under the stale hash (run once on the clean folder, then again on the changed one).

Before issue 43 a warm embedding cache (evaluate, embed, the app), a warm segmentation cache and a warm
copy-audit hash cache served the old photo's result: same fingerprint, same numbers as the clean run."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import jpeg_bytes
from geofidelity_bench.benchmark import config_file, load_benchmark, save_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.image_store import SHA256_COLUMN, ImageHashMismatchError, verify_images

ENCODER = "efficientnet-lite0"


@pytest.fixture(autouse=True)
def hash_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOFIDELITY_HASH_CACHE", str(tmp_path / "hash_cache"))


@pytest.fixture(scope="module")
def encoder():
    from geofidelity_bench.encoders import get_encoder

    return get_encoder(ENCODER, device="cpu")


@pytest.fixture
def folder(tiny_benchmark, tmp_path):
    return save_benchmark(tiny_benchmark, tmp_path / "bench")


class CommandFailed(Exception):
    """A command's exit status and what it printed."""


def _cli(args, capsys) -> None:
    capsys.readouterr()
    rc = main(args)
    captured = capsys.readouterr()
    if rc != 0:
        raise CommandFailed(f"exit {rc}\n{captured.out}\n{captured.err}")


def _generated(tmp_path, block_id):
    gen = tmp_path / "gen"
    panel = gen / "m" / "L0" / block_id
    panel.mkdir(parents=True, exist_ok=True)
    for k in range(3):
        (panel / f"{k:02d}.jpg").write_bytes(jpeg_bytes(7000 + k))
    return gen


# -- the readers: each runs once on the clean folder (warming its cache), then on the changed one ------------


def _evaluate_python(folder, tmp_path, capsys, request):
    from geofidelity_bench.encoders import EmbeddingCache
    from geofidelity_bench.evaluation import anchor_panels, evaluate_panels

    bench = load_benchmark(folder)
    evaluate_panels(bench, anchor_panels(bench), request.getfixturevalue("encoder"),
                    cache=EmbeddingCache(tmp_path / "cache"), progress=False, num_workers=0)


def _evaluate_cli(folder, tmp_path, capsys, request):
    out = tmp_path / f"out{len(list(tmp_path.glob('out*')))}"
    _cli(["evaluate", "--benchmark", str(folder), "--generated", str(_generated(tmp_path, "a1")), "--out", str(out),
          "--encoder", ENCODER, "--cache-dir", str(tmp_path / "cache"), "--no-gaas", "--no-progress", "--no-anchors",
          "--num-workers", "0"], capsys)


def _embed_cli(folder, tmp_path, capsys, request):
    _cli(["embed", "--benchmark", str(folder), "--encoder", ENCODER, "--cache-dir", str(tmp_path / "cache"),
          "--no-progress", "--num-workers", "0"], capsys)


def _segment(folder, tmp_path, capsys, request):
    from geofidelity_bench.encoders import EmbeddingCache
    from geofidelity_bench.segmentation import get_segmenter, segment_images

    seg = get_segmenter("mask2former-vistas", weights=request.getfixturevalue("tiny_m2f_small_dir"), device="cpu")
    bench = load_benchmark(folder)
    segment_images(seg, [r.image_source for r in bench.references], names=[r.reference_id for r in bench.references],
                   cache=EmbeddingCache(tmp_path / "cache"), progress=False, num_workers=0)


def _audit_python(folder, tmp_path, capsys, request):
    from geofidelity_bench.near_copies import HashCache, audit_benchmark

    audit_benchmark(load_benchmark(folder), None, hash_cache=HashCache(tmp_path / "hashes"), progress=False)


def _audit_cli(folder, tmp_path, capsys, request):
    _cli(["audit", "--benchmark", str(folder), "--hash-only", "--cache-dir", str(tmp_path / "cache"), "--no-progress",
          "--out", str(tmp_path / "audit")], capsys)


def _app_data(folder, tmp_path, capsys, request):
    from geofidelity_bench.demo_app.state import load_app_data

    load_app_data(str(folder), ENCODER, cache_dir=str(tmp_path / "cache"), num_workers=0)


def _geodiv_sources(folder, tmp_path, capsys, request):
    from geofidelity_bench.geodiv.sources import reference_images

    reference_images(load_benchmark(folder))


def _info_check_images(folder, tmp_path, capsys, request):
    _cli(["info", "--benchmark", str(folder), "--check-images", "--num-workers", "0"], capsys)


#: (reader, whether a cache could hide the change before issue 43)
READERS = {
    "evaluate (Python, warm embedding cache)": _evaluate_python,
    "evaluate (command, warm embedding cache)": _evaluate_cli,
    "embed (command, warm embedding cache)": _embed_cli,
    "segment (warm shares cache)": _segment,
    "copy audit (Python, warm hash cache)": _audit_python,
    "copy audit (command)": _audit_cli,
    "app data (warm embedding cache)": _app_data,
    "geodiv reference photos": _geodiv_sources,
    "info --check-images": _info_check_images,
}


def _replace_photo(folder, block_id="a1"):
    """Replaces the bytes of the first gallery photo of ``block_id``, keeping its image_sha256; returns
    (reference id, row)."""
    ref = load_benchmark(folder).gallery(block_id)[0]
    row = ref.image_source.row
    file = config_file(folder, "references")
    table = pq.read_table(file)
    rows = table.to_pylist()
    assert rows[row]["reference_id"] == ref.reference_id
    rows[row]["image"] = {"bytes": jpeg_bytes(424242), "path": rows[row]["image"]["path"]}
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), file)
    assert pq.read_table(file).column(SHA256_COLUMN)[row].as_py() == table.column(SHA256_COLUMN)[row].as_py()
    return ref.reference_id, row


@pytest.mark.parametrize("reader", list(READERS.values()), ids=list(READERS))
def test_a_replaced_photo_behind_a_stale_hash_fails_every_reader(reader, folder, tmp_path, capsys, request):
    reader(folder, tmp_path, capsys, request)  # the clean folder: caches warmed
    fingerprint = load_benchmark(folder).fingerprint
    rid, row = _replace_photo(folder)
    assert load_benchmark(folder).fingerprint == fingerprint  # the stale hash: nothing else tells
    with pytest.raises((ImageHashMismatchError, CommandFailed)) as info:
        reader(folder, tmp_path, capsys, request)
    msg = str(info.value)
    for part in (f"reference {rid} (block a1)", f"row {row} of", "references/train-00000-of-00001.parquet",
                 f"stored {SHA256_COLUMN}", "re-save the benchmark", "--rekey-mismatched-images"):
        assert part in msg, (part, msg)


def test_a_stale_hash_shared_with_a_computed_photo_is_caught(folder, tmp_path, encoder):
    """Two rows claiming one hash: the first is computed from its bytes, the second (whose bytes differ) is not
    read for the embedding, and is hashed all the same."""
    from geofidelity_bench.encoders import EmbeddingCache, embed_images

    file = config_file(folder, "references")
    table = pq.read_table(file)
    rows = table.to_pylist()
    rows[1][SHA256_COLUMN] = rows[0][SHA256_COLUMN]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), file)
    bench = load_benchmark(folder)
    by_row = {r.image_source.row: r for r in bench.references}
    with pytest.raises(ImageHashMismatchError, match=f"reference {rows[1]['reference_id']} "):
        embed_images(encoder, [by_row[0].image_source, by_row[1].image_source], cache=EmbeddingCache(tmp_path / "c"),
                     progress=False, num_workers=0)


def test_every_mismatch_is_named_in_one_error(folder, tmp_path):
    file = config_file(folder, "references")
    table = pq.read_table(file)
    rows = table.to_pylist()
    for i in (0, 3, 7):
        rows[i]["image"] = {"bytes": jpeg_bytes(900 + i), "path": rows[i]["image"]["path"]}
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), file)
    bench = load_benchmark(folder)
    with pytest.raises(ImageHashMismatchError) as info:
        verify_images([r.image_source for r in bench.references])
    msg = str(info.value)
    assert msg.startswith(f"3 image(s) whose bytes do not hash to their stored {SHA256_COLUMN}")
    assert all(f"reference {rows[i]['reference_id']} " in msg for i in (0, 3, 7))


def test_checked_images_are_not_read_again_and_a_clean_warm_run_gives_the_same_numbers(folder, tmp_path, encoder):
    from geofidelity_bench.encoders import EmbeddingCache
    from geofidelity_bench.evaluation import anchor_panels, evaluate_panels

    def run():
        bench = load_benchmark(folder)
        out = evaluate_panels(bench, anchor_panels(bench), encoder, cache=EmbeddingCache(tmp_path / "c"),
                              progress=False, num_workers=0)
        readers = {id(r.image_source.reader): r.image_source.reader for r in bench.references}.values()
        # every reference hashed once; the file streamed once (warm) or read for the model (cold)
        assert all(r.image_source._verified for r in bench.references)
        before = sum(r.image_reads for r in readers)
        assert {r.sha256 for r in bench.references} == {r.stored_sha256 for r in bench.references}
        assert sum(r.image_reads for r in readers) == before  # .sha256 after the check reads nothing
        return out

    cold, warm = run(), run()
    assert cold.equals(warm)
    shutil.rmtree(tmp_path / "c")


def test_embed_distributed_checks_an_image_computed_under_its_claimed_hash_by_another(folder, tmp_path, encoder,
                                                                                      monkeypatch):
    """Across processes: a row claiming the stored hash of a row computed by one process is not read by any,
    and is hashed before it gets that row's embedding."""
    pytest.importorskip("accelerate")
    import types

    import numpy as np

    import accelerate.utils
    from geofidelity_bench.encoders import EmbeddingCache, devices, embed_distributed

    file = config_file(folder, "references")
    table = pq.read_table(file)
    rows = table.to_pylist()
    rows[1][SHA256_COLUMN] = rows[0][SHA256_COLUMN]
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), file)
    by_row = {r.image_source.row: r for r in load_benchmark(folder).references}
    state = types.SimpleNamespace(num_processes=2, process_index=0, is_main_process=True,
                                  wait_for_everyone=lambda: None)
    monkeypatch.setattr(devices, "distributed_state", lambda *a, **k: state)
    # the other process had nothing to compute: the only distinct claimed hash was this one's
    monkeypatch.setattr(accelerate.utils, "gather_object",
                        lambda parts: [*parts, (1, [], np.zeros((0, encoder.dim), np.float32), None)])
    with pytest.raises(ImageHashMismatchError, match=f"reference {rows[1]['reference_id']} "):
        embed_distributed(encoder, [by_row[0].image_source, by_row[1].image_source],
                          cache=EmbeddingCache(tmp_path / "c"), num_workers=0)
