"""Damaged, old and unwritable caches (embeddings, segmentation shares, VQA answers): a run on a
damaged cache gives the numbers of a clean run, names the damaged shard and sets it aside; a
cache folder that cannot be written costs one warning, never the run's work."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from PIL import Image

from geofidelity_bench.benchmark import load_benchmark
from geofidelity_bench.cli import main
from geofidelity_bench.encoders import EmbeddingCache, embed_images

ENCODER = "efficientnet-lite0"


def _write_panel(root: Path, method: str, condition: str, block_id: str, images: list[bytes]) -> None:
    folder = root / method / condition / block_id
    folder.mkdir(parents=True, exist_ok=True)
    for k, data in enumerate(images):
        (folder / f"{k:02d}.jpg").write_bytes(data)


def _evaluate(gen: Path, out: Path, cache: Path) -> int:
    return main(["evaluate", "--benchmark", "demo", "--generated", str(gen), "--encoder", ENCODER, "--out", str(out),
                 "--cache-dir", str(cache), "--no-progress", "--no-gaas"])


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    """A generated folder, a clean cache made by evaluating it, and that run's results.csv bytes.

    The cache holds two shards: first (``_shards(cache)[0]``, the one the tests damage) the 8 panel
    images embedded alone, then what the evaluation added; so a damaged first shard costs 8 rows again."""
    from geofidelity_bench.encoders import get_encoder

    root = tmp_path_factory.mktemp("clean")
    demo = load_benchmark("demo")
    gen = root / "gen"
    panel_images = [w.image_bytes for w in demo.world[:8]]
    for i, bid in enumerate(["lund_seg1", "berlin_am_lustgarten"]):
        _write_panel(gen, "world_photos", "L0", bid, panel_images[4 * i : 4 * i + 4])
    embed_images(get_encoder(ENCODER, device="cpu"), panel_images, cache=EmbeddingCache(root / "cache"), progress=False)
    assert _evaluate(gen, root / "out", root / "cache") == 0
    shards = _shards(root / "cache")
    assert len(shards) == 2 and len(_load(shards[0])[0]) == 8
    return gen, root / "cache", (root / "out" / "results.csv").read_bytes()


def _assert_same_scores(got: bytes, want: bytes) -> None:
    """The same rows and text, every score equal up to the float noise of batching (docs/benchmark.md
    section 12: an image embedded in another batch may differ in the last float digits; with one thread
    per process it does). Byte equality is for runs that embed in the same batches."""
    a, b = (pd.read_csv(io.BytesIO(x)) for x in (got, want))
    assert not a.empty
    pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-5, atol=1e-7)


def _shards(cache: Path) -> list[Path]:
    return sorted(cache.glob("*/shard-*.safetensors"))


def _load(path: Path):
    """keys, embeddings and the metadata of a shard, read without the package's reader."""
    from safetensors.numpy import load

    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    meta = json.loads(data[8 : 8 + n]).get("__metadata__") or {}
    t = load(data)
    return t["keys"].copy(), t["embeddings"].copy(), meta


def _save(path: Path, keys, emb, meta) -> None:
    from safetensors.numpy import save

    path.write_bytes(save({"keys": np.ascontiguousarray(keys), "embeddings": np.ascontiguousarray(emb)}, metadata=meta))


def flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(len(data) - 4000, len(data) - 3000):  # inside the embeddings tensor (the file's tail)
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def swap_keys(path: Path) -> None:
    keys, emb, meta = _load(path)
    keys[[0, 1]] = keys[[1, 0]]
    _save(path, keys, emb, meta)


def zero_row(path: Path) -> None:
    keys, emb, meta = _load(path)
    emb[3] = 0.0
    _save(path, keys, emb, meta)


def nan_rows(path: Path) -> None:
    keys, emb, meta = _load(path)
    emb[:5] = np.nan
    _save(path, keys, emb, meta)


@pytest.mark.parametrize("damage", [flip_bytes, swap_keys, zero_row, nan_rows], ids=lambda f: f.__name__)
def test_evaluate_on_a_damaged_cache_equals_a_clean_run(clean_run, damage, tmp_path):
    gen, clean_cache, clean_csv = clean_run
    cache = tmp_path / "cache"
    shutil.copytree(clean_cache, cache)
    shards = _shards(cache)
    assert shards
    damage(shards[0])
    with pytest.warns(UserWarning, match="embedding cache shard") as record:
        assert _evaluate(gen, tmp_path / "out", cache) == 0
    assert (tmp_path / "out" / "results.csv").read_bytes() == clean_csv
    assert any(str(shards[0]) in str(w.message) for w in record)
    assert shards[0].with_name(shards[0].name + ".corrupt").exists() and not shards[0].exists()
    # The rows were recomputed into a new, valid shard: a third run reads everything from the cache.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _evaluate(gen, tmp_path / "out3", cache) == 0
    run = json.loads((tmp_path / "out3" / "run.json").read_text())
    assert run["embedding_stats"]["forward_images"] == 0
    assert (tmp_path / "out3" / "results.csv").read_bytes() == clean_csv


def test_non_finite_rows_with_a_valid_checksum_are_refused(tmp_path):
    """The finite check is separate from the checksum: a shard written with NaN rows is set aside too."""
    from geofidelity_bench.encoders.cache import CHECKSUM_KEY, shard_checksum

    cache = EmbeddingCache(tmp_path)
    h = "ab" * 32
    keys = [f"{i:064x}" for i in range(3)]
    path = cache.put(h, keys, np.ones((3, 4), np.float32))
    raw, emb, meta = _load(path)
    emb[1] = np.inf
    _save(path, raw, emb, {**meta, CHECKSUM_KEY: shard_checksum(raw, emb)})
    with pytest.warns(UserWarning, match=r"damaged embedding cache shard .*1 non-finite row"):
        assert EmbeddingCache(tmp_path).get(h, keys) == {}
    assert path.with_name(path.name + ".corrupt").exists()


def test_a_shard_without_checksum_is_recomputed_once(tmp_path):
    """Shards of format 1 (no checksum) are treated as unverified: set aside as *.unverified, recomputed once."""
    cache = EmbeddingCache(tmp_path)
    h = "cd" * 32
    path = cache.put(h, ["00" * 32], np.ones((1, 4), np.float32))
    raw, emb, _ = _load(path)
    _save(path, raw, emb, {"format": "geofidelity-embeddings/1", "config_hash": h})
    with pytest.warns(UserWarning, match="unverified embedding cache shard .*older version"):
        assert EmbeddingCache(tmp_path).get(h, ["00" * 32]) == {}
    assert path.with_name(path.name + ".unverified").exists()
    EmbeddingCache(tmp_path).put(h, ["00" * 32], emb)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(EmbeddingCache(tmp_path).get(h, ["00" * 32])) == ["00" * 32]


def test_embed_out_never_writes_nan_rows_from_a_damaged_cache(tmp_path, capsys):
    base = ["embed", "--benchmark", "demo", "--encoder", ENCODER, "--no-progress"]
    # a clean run (the embeddings computed) that also fills the cache
    assert main(base + ["--cache-dir", str(tmp_path / "c"), "--out", str(tmp_path / "clean.parquet")]) == 0
    nan_rows(_shards(tmp_path / "c")[0])
    with pytest.warns(UserWarning, match="embedding cache shard"):
        assert main(base + ["--cache-dir", str(tmp_path / "c"), "--out", str(tmp_path / "e.parquet")]) == 0
    got = np.stack(pq.read_table(tmp_path / "e.parquet").column("embedding").to_numpy(zero_copy_only=False))
    want = np.stack(pq.read_table(tmp_path / "clean.parquet").column("embedding").to_numpy(zero_copy_only=False))
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got, want)


def test_non_finite_rows_are_refused_naming_the_image():
    from geofidelity_bench.encoders.base import NonFiniteEmbeddingError, check_finite_rows
    from geofidelity_bench.errors import GeoFidelityError

    rows = np.ones((4, 3))
    rows[2, 1] = np.nan
    rows[3, 0] = np.inf
    with pytest.raises(NonFiniteEmbeddingError, match=r"reference r2 is not finite .*1 more") as info:
        check_finite_rows(rows, ["reference r0", "reference r1", "reference r2", "reference r3"])
    assert isinstance(info.value, GeoFidelityError)


# -- a cache folder that cannot be written ---------------------------------------------------------------------


def test_evaluate_with_a_cache_dir_under_a_regular_file_warns_once_and_scores(clean_run, tmp_path):
    gen, _, clean_csv = clean_run
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a regular file")
    with pytest.warns(UserWarning, match="cannot write the embedding cache folder") as record:
        assert _evaluate(gen, tmp_path / "out", blocker / "cache") == 0
    msgs = [str(w.message) for w in record if "cannot write" in str(w.message)]
    assert len(msgs) == 1 and str(blocker / "cache") in msgs[0] and "--cache-dir" in msgs[0]
    # nothing cached: every image embedded in the evaluation's own batches, not in the clean run's
    _assert_same_scores((tmp_path / "out" / "results.csv").read_bytes(), clean_csv)


def test_disk_full_while_writing_the_cache_keeps_the_computed_rows(tmp_path, monkeypatch):
    """A write that fails half-way (ENOSPC on the rename) warns once; the rows are still returned and served."""
    from geofidelity_bench.encoders import get_encoder

    enc = get_encoder(ENCODER, device="cpu")
    demo = load_benchmark("demo")
    imgs = [w.image_bytes for w in demo.world[:3]]
    want = embed_images(enc, imgs, cache=None, progress=False, batch_size=1)
    real_replace = os.replace

    def full_disk(src, dst, *a, **k):
        if str(tmp_path) in str(dst):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", full_disk)
    cache = EmbeddingCache(tmp_path / "cache")
    with pytest.warns(UserWarning, match="cannot write the embedding cache folder") as record:
        got = embed_images(enc, imgs, cache=cache, progress=False, batch_size=1)
        again = embed_images(enc, imgs[:1] + [w.image_bytes for w in demo.world[3:4]], cache=cache, progress=False)
    assert sum("cannot write" in str(w.message) for w in record) == 1
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(again[0], want[0])
    assert not list((tmp_path / "cache").rglob("*.tmp*"))  # no half-written file left behind


# -- the VQA answer cache ---------------------------------------------------------------------------------------


def _mean_backend():
    """A VQA stand-in that replies the mean red level of the image and counts the questions asked."""
    from geofidelity_bench.geodiv import VQABackend

    class Mean(VQABackend):
        name = "mean"

        def __init__(self):
            super().__init__()
            self._config = {"backend": "test:mean", "model": "mean-red"}
            self.batch_size = 4
            self.asked = 0

        def ask(self, images, questions):
            self.asked += len(images)
            return [f"{int(np.asarray(im)[..., 0].mean())}" for im in images]

    return Mean()


def _answers(cache_dir, n_images=3):
    from geofidelity_bench.geodiv import AnswerCache, GeoDivImage, answer_questions, load_question_bank

    backend = _mean_backend()
    images = [GeoDivImage(f"img{i}", Image.new("RGB", (8, 8), (40 * i, 10, 10)), {}) for i in range(n_images)]
    bank = load_question_bank(None)
    df = answer_questions(images, bank, backend, cache=AnswerCache(cache_dir) if cache_dir else None)
    return df, backend


def test_vqa_answer_cache_damaged_and_old_files_are_set_aside_and_asked_again(tmp_path):
    clean, _ = _answers(None)
    _answers(tmp_path)
    files = sorted(tmp_path.glob("*/answers-*.json"))
    data = json.loads(files[0].read_text())
    data["answers"][0]["reply"] = "tampered"
    files[0].write_text(json.dumps(data))
    with pytest.warns(UserWarning, match=rf"damaged VQA answer cache shard {files[0]}.*checksum"):
        got, backend = _answers(tmp_path)
    assert backend.asked > 0 and list(got["reply"]) == list(clean["reply"])
    assert files[0].with_name(files[0].name + ".corrupt").exists()
    # A file of format 1 (no checksum) is unverified: set aside, asked again once.
    new = sorted(tmp_path.glob("*/answers-*.json"))
    for f in new:
        d = json.loads(f.read_text())
        d.pop("payload_sha256", None)
        d["format"] = "geofidelity-vqa-answers/1"
        f.write_text(json.dumps(d))
    with pytest.warns(UserWarning, match="unverified VQA answer cache shard"):
        got, backend = _answers(tmp_path)
    assert list(got["reply"]) == list(clean["reply"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, backend = _answers(tmp_path)
    assert backend.asked == 0 and list(got["reply"]) == list(clean["reply"])


def test_vqa_answer_cache_under_a_regular_file_warns_once(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    clean, _ = _answers(None, n_images=5)
    with pytest.warns(UserWarning, match="cannot write the VQA answer cache folder") as record:
        got, _ = _answers(blocker / "cache", n_images=5)
    assert sum("cannot write" in str(w.message) for w in record) == 1
    assert list(got["reply"]) == list(clean["reply"])
