"""A stored image_sha256 is checked against the bytes (issue 29): a mismatch is an error naming the row,
or, with rekey_mismatched_images / --rekey-mismatched-images, the row is keyed by its real hash; the cache
never holds an embedding under another image's key; hashing a folder streams it."""

import hashlib
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import jpeg_bytes
from geofidelity_bench.benchmark import config_file, load_benchmark, save_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.encoders import EmbeddingCache
from geofidelity_bench.evaluation import anchor_panels, evaluate_panels
from geofidelity_bench.image_store import SHA256_COLUMN, ImageHashMismatchError, ParquetImages, stored_hashes


@pytest.fixture(autouse=True)
def hash_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOFIDELITY_HASH_CACHE", str(tmp_path / "hash_cache"))


@pytest.fixture(scope="module")
def encoder():
    from geofidelity_bench.encoders import get_encoder

    return get_encoder("efficientnet-lite0", device="cpu")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _flip_entropy_byte(data: bytes) -> bytes:
    """One byte changed in the middle of the JPEG's entropy-coded data (after the SOS header): it still decodes."""
    sos = data.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(data[sos + 2 : sos + 4], "big")
    end = data.rindex(b"\xff\xd9")
    i = (start + end) // 2
    while data[i] == 0xFF or data[i - 1] == 0xFF or data[i] ^ 0x10 == 0xFF:
        i += 1
    return data[:i] + bytes([data[i] ^ 0x10]) + data[i + 1 :]


def _rewrite(folder, edit) -> None:
    """Rewrites the references file with ``edit(rows)`` applied to its rows (a list of dicts)."""
    file = config_file(folder, "references")
    table = pq.read_table(file)
    rows = table.to_pylist()
    edit(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), file)


def _tampered(kind: str, clean_folder, tmp_path):
    """(tampered folder, correctly hashed folder with the same bytes, rows whose hash is wrong)."""
    tampered, correct = tmp_path / f"{kind}_tampered", tmp_path / f"{kind}_correct"
    rows = pq.read_table(config_file(clean_folder, "references")).to_pylist()
    for folder in (tampered, correct):
        save_benchmark(load_benchmark(clean_folder), folder)
    if kind == "swapped":
        def edit(rows, fix):
            if not fix:
                rows[0][SHA256_COLUMN], rows[1][SHA256_COLUMN] = rows[1][SHA256_COLUMN], rows[0][SHA256_COLUMN]
        bad = [0, 1]
    elif kind == "stale":  # the photo replaced, its hash kept
        new = jpeg_bytes(999_999)
        def edit(rows, fix):
            rows[2]["image"] = {"bytes": new, "path": rows[2]["image"]["path"]}
            if fix:
                rows[2][SHA256_COLUMN] = _sha(new)
        bad = [2]
    else:  # one byte flipped inside the JPEG's entropy data
        flipped = _flip_entropy_byte(rows[3]["image"]["bytes"])
        def edit(rows, fix):
            rows[3]["image"] = {"bytes": flipped, "path": rows[3]["image"]["path"]}
            if fix:
                rows[3][SHA256_COLUMN] = _sha(flipped)
        bad = [3]
    _rewrite(tampered, lambda r: edit(r, False))
    _rewrite(correct, lambda r: edit(r, True))
    return tampered, correct, [rows[i]["reference_id"] for i in bad]


@pytest.fixture
def clean(tiny_benchmark, tmp_path):
    return save_benchmark(tiny_benchmark, tmp_path / "clean")


def _score(folder, encoder, cache_dir, **load_kwargs):
    bench = load_benchmark(folder, **load_kwargs)
    return bench, evaluate_panels(bench, anchor_panels(bench), encoder, cache=EmbeddingCache(cache_dir),
                                  progress=False, num_workers=0)


def test_flipped_jpeg_still_decodes(clean):
    from geofidelity_bench.images import load_image

    data = pq.read_table(config_file(clean, "references")).to_pylist()[3]["image"]["bytes"]
    assert load_image(_flip_entropy_byte(data)).size == (48, 32)


@pytest.mark.parametrize("kind", ["swapped", "stale", "flipped"])
def test_a_wrong_stored_hash_is_an_error_naming_the_row_and_the_cache_stays_clean(kind, clean, encoder, tmp_path):
    tampered, correct, bad_ids = _tampered(kind, clean, tmp_path)
    shared = tmp_path / "shared_cache"
    with pytest.raises(ImageHashMismatchError) as info:
        _score(tampered, encoder, shared)
    msg = str(info.value)
    assert any(f"reference {rid}" in msg for rid in bad_ids)
    assert "references" in msg and "row " in msg and "--rekey-mismatched-images" in msg
    # whatever the tampered run wrote into the cache, a run of the correctly hashed folder through that cache
    # gets the numbers of a run on a fresh cache
    _, fresh = _score(correct, encoder, tmp_path / f"fresh_{kind}")
    _, through_shared = _score(correct, encoder, shared)
    pd.testing.assert_frame_equal(through_shared, fresh)


@pytest.mark.parametrize("kind", ["swapped", "stale", "flipped"])
def test_rekeyed_rows_give_the_numbers_of_the_correctly_hashed_folder(kind, clean, encoder, tmp_path):
    tampered, correct, bad_ids = _tampered(kind, clean, tmp_path)
    shared = tmp_path / "shared_cache"
    bench, rekeyed = _score(tampered, encoder, shared, rekey_mismatched_images=True)
    truth_bench, truth = _score(correct, encoder, tmp_path / "fresh")
    pd.testing.assert_frame_equal(rekeyed, truth)
    assert bench.fingerprint == truth_bench.fingerprint  # the fingerprint of the bytes, not of the stored hashes
    assert sorted(r["image"] for r in bench.rekeyed_images) == sorted(f"reference {rid}" for rid in bad_ids)
    stored = pq.read_table(config_file(tampered, "references")).column(SHA256_COLUMN).to_pylist()
    for rec in bench.rekeyed_images:
        assert rec["stored_sha256"] == stored[rec["row"]] != rec["actual_sha256"]
        assert rec["file"] == "references/train-00000-of-00001.parquet"
    # the cache the re-keyed run filled serves a clean run the right embeddings
    _, again = _score(correct, encoder, shared)
    pd.testing.assert_frame_equal(again, truth)


def test_cli_embed_and_evaluate_refuse_then_rekey_and_record(clean, tmp_path, capsys):
    tampered, correct, bad_ids = _tampered("stale", clean, tmp_path)
    cache = tmp_path / "c"
    embed = ["embed", "--benchmark", str(tampered), "--encoder", "efficientnet-lite0", "--cache-dir", str(cache),
             "--no-progress", "--num-workers", "0"]
    capsys.readouterr()
    assert main(embed) == 2
    [err] = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert f"reference {bad_ids[0]}" in err and "row 2" in err and "references" in err
    assert main(embed + ["--rekey-mismatched-images"]) == 0
    assert f"row 2 (reference {bad_ids[0]})" in capsys.readouterr().err
    gen = tmp_path / "gen" / "m" / "L0" / "a1"
    gen.mkdir(parents=True)
    for k in range(3):
        (gen / f"{k:02d}.jpg").write_bytes(jpeg_bytes(5000 + k))
    evaluate = ["evaluate", "--benchmark", str(tampered), "--generated", str(tmp_path / "gen"), "--out",
                str(tmp_path / "out"), "--encoder", "efficientnet-lite0", "--cache-dir", str(tmp_path / "c2"),
                "--no-gaas", "--no-progress", "--no-anchors", "--num-workers", "0"]
    assert main(evaluate) == 2
    assert "image_sha256" in capsys.readouterr().err and not (tmp_path / "out").exists()
    assert main(evaluate + ["--rekey-mismatched-images"]) == 0
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    [rec] = run["benchmark"]["rekeyed_images"]
    assert rec["image"] == f"reference {bad_ids[0]}" and rec["row"] == 2
    assert run["benchmark"]["fingerprint"] == load_benchmark(correct).fingerprint


def test_info_check_images_lists_every_mismatch(clean, tmp_path, capsys):
    folder = tmp_path / "many"
    save_benchmark(load_benchmark(clean), folder)

    def edit(rows):  # every hash moved one row on: every row is wrong
        hashes = [r[SHA256_COLUMN] for r in rows]
        for i, r in enumerate(rows):
            r[SHA256_COLUMN] = hashes[(i + 1) % len(rows)]

    _rewrite(folder, edit)
    n = pq.read_metadata(config_file(folder, "references")).num_rows
    assert main(["info", "--benchmark", str(folder), "--check-images", "--num-workers", "0"]) == 1
    out = capsys.readouterr().out
    assert f"0/{n} decode and hash to their stored image_sha256; {n} bad" in out
    assert out.count("its image bytes hash to sha256") == n
    assert main(["info", "--benchmark", str(folder), "--check-images", "--rekey-mismatched-images"]) == 0
    captured = capsys.readouterr()
    assert f"{n} image(s) keyed by the hash of their bytes" in captured.err
    assert f"{n}/{n} decode" in captured.out
    assert load_benchmark(folder, rekey_mismatched_images=True).fingerprint == load_benchmark(clean).fingerprint


def test_info_check_images_shows_the_first_50_and_a_count(tmp_path, capsys):
    from conftest import make_block, make_refs
    from geofidelity_bench.benchmark import Benchmark

    bench = Benchmark([make_block("a1")], make_refs("a1", 53), name="many")
    folder = save_benchmark(bench, tmp_path / "b")
    _rewrite(folder, lambda rows: [r.update({SHA256_COLUMN: "0" * 64}) for r in rows])
    assert main(["info", "--benchmark", str(folder), "--check-images", "--num-workers", "0"]) == 1
    out = capsys.readouterr().out
    assert out.count("its image bytes hash to sha256") == 50 and "... and 3 more" in out
    assert main(["info", "--benchmark", str(folder), "--check-images", "--json", "--num-workers", "0"]) == 1
    assert len(json.loads(capsys.readouterr().out)["bad_images"]) == 53


# -- hashing streams --------------------------------------------------------------------------------


def test_hashing_a_one_row_group_file_streams_in_batches(tiny_benchmark, tmp_path, monkeypatch):
    """A file of one row group without the hash column is hashed batch by batch: never the whole image column
    as Python values (a counting reader), and the hashes are those of the bytes."""
    folder = save_benchmark(tiny_benchmark, tmp_path / "b")
    file = config_file(folder, "references")
    table = pq.read_table(file).drop_columns([SHA256_COLUMN])
    pq.write_table(table, file, row_group_size=table.num_rows)
    assert pq.read_metadata(file).num_row_groups == 1 and table.num_rows == 14

    import pyarrow.parquet.core as pq_core

    seen_rows = []
    real_read_row_group = pq_core.ParquetFile.read_row_group
    real_iter_batches = pq_core.ParquetFile.iter_batches

    def counting_read_row_group(self, i, *a, **k):
        out = real_read_row_group(self, i, *a, **k)
        seen_rows.append(out.num_rows)
        return out

    def counting_iter_batches(self, *a, **k):
        for batch in real_iter_batches(self, *a, **k):
            seen_rows.append(batch.num_rows)
            yield batch

    monkeypatch.setattr(pq_core.ParquetFile, "read_row_group", counting_read_row_group)
    monkeypatch.setattr(pq_core.ParquetFile, "iter_batches", counting_iter_batches)
    from geofidelity_bench import image_store

    monkeypatch.setattr(image_store, "HASH_BATCH_ROWS", 4)
    hashes = stored_hashes(ParquetImages(file))
    assert hashes == [_sha(c["bytes"]) for c in table.column("image").to_pylist()]
    assert seen_rows and max(seen_rows) <= 4  # batches of a few rows, never the 14-row group at once

