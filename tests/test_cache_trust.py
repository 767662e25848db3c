"""What a cache folder holds is not trusted: a shard written for another config (copied from another
encoder's, VQA model's or hashing setting's folder) is set aside as ``*.foreign`` and its rows
recomputed; a FIFO or a folder named like a shard is skipped with a warning instead of blocking the
run; and an embedding run writes its rows as it goes (a batch that took long is written at once), so a
``kill -9`` keeps the finished batches, which a re-run reads instead of computing them again."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from geofidelity_bench.benchmark import load_benchmark
from geofidelity_bench.encoders import EmbeddingCache, embed_images, get_encoder


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.fixture(scope="module")
def photos():
    return [r.image_bytes for r in load_benchmark("demo").references[:6]]


@pytest.fixture(scope="module")
def two_dinos(tmp_path_factory):
    """Two tiny random DINOv2 of the same dimension that differ only in their weights (--encoder-weights)."""
    import torch
    from transformers import Dinov2Config, Dinov2Model

    encoders = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=64, image_size=224, patch_size=14)).eval()
        path = tmp_path_factory.mktemp(f"dino-seed{seed}")
        model.save_pretrained(path)
        encoders.append(get_encoder("dinov2-base", weights=path, device="cpu"))
    return encoders


def _call_with_timeout(fn, fifos, timeout=120):
    """``fn()`` in a thread; a call still blocked after ``timeout`` fails the test (and the FIFOs are opened
    for writing, then closed, so the blocked reader gets EOF and the thread ends)."""
    out: dict = {}

    def target():
        try:
            with warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                out["value"] = fn()
            out["warnings"] = [str(w.message) for w in record]
        except BaseException as err:  # noqa: BLE001 - re-raised in the test's thread
            out["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        for fifo in fifos:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        thread.join(30)
        pytest.fail(f"reading the cache blocked on a FIFO named like a shard ({fifos[0]})")
    if "error" in out:
        raise out["error"]
    return out["value"], out["warnings"]


needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")


# -- 1. a shard of another config ------------------------------------------------------------------------------


def test_embedding_shards_copied_from_another_encoder_config_are_set_aside(two_dinos, photos, tmp_path):
    a, b = two_dinos
    assert a.dim == b.dim and a.config_hash != b.config_hash
    clean_b = embed_images(b, photos, progress=False)  # no cache
    clean_a = embed_images(a, photos, progress=False)
    assert not np.allclose(clean_a, clean_b, atol=1e-3)
    embed_images(a, photos, cache=EmbeddingCache(tmp_path), progress=False)
    folder_b = EmbeddingCache(tmp_path).dir_for(b)
    folder_b.mkdir(parents=True)
    copied = [Path(shutil.copy(s, folder_b / s.name)) for s in EmbeddingCache(tmp_path).dir_for(a).glob("shard-*")]
    assert copied

    with pytest.warns(UserWarning, match="foreign embedding cache shard") as record:
        got = embed_images(b, photos, cache=EmbeddingCache(tmp_path), progress=False)
    np.testing.assert_allclose(got, clean_b, rtol=0, atol=1e-6)
    for shard in copied:
        assert any(str(shard) in str(w.message) for w in record)
        assert shard.with_name(shard.name + ".foreign").exists() and not shard.exists()
    # B's own rows were written: a later run reads them, without a warning, and A's cache is untouched
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache = EmbeddingCache(tmp_path)
        assert len(cache.keys(b)) == len(set(photos))
        np.testing.assert_allclose(embed_images(b, photos, cache=cache, progress=False), clean_b, rtol=0, atol=1e-6)
        np.testing.assert_allclose(embed_images(a, photos, cache=cache, progress=False), clean_a, rtol=0, atol=1e-6)


def test_a_segmentation_share_shard_of_another_segmenter_is_set_aside(tmp_path):
    """Segmentation shares live in the embedding cache (one folder per segmenter config): the same check."""
    from geofidelity_bench.cached_batches import run_cached

    images = [bytes([i]) * 50 for i in range(5)]

    def shares(scale):
        return lambda batch: np.array([[b[0] * scale, 1.0] for b in batch], dtype=np.float32)

    def run(owner, scale):
        return run_cached(owner, images, [f"img{i}" for i in range(5)], width=2, prepare=lambda src, _: src,
                          compute=shares(scale), cache=EmbeddingCache(tmp_path), batch_size=2, progress=False, desc="test",
                          num_workers=0).rows

    seg_a, seg_b = "a" * 64, "b" * 64
    run(seg_a, 1.0)
    (tmp_path / seg_b).mkdir()
    for s in (tmp_path / seg_a).glob("shard-*"):
        shutil.copy(s, tmp_path / seg_b / s.name)
    with pytest.warns(UserWarning, match="foreign embedding cache shard"):
        got = run(seg_b, 2.0)
    np.testing.assert_array_equal(got, np.array([[2.0 * i, 1.0] for i in range(5)], dtype=np.float32))


def test_a_hash_shard_copied_from_other_hash_settings_is_set_aside(tmp_path, monkeypatch):
    import geofidelity_bench.perceptual_hashes as nc

    photos = [r.image_bytes for r in load_benchmark("demo").gallery("berlin_am_lustgarten")][:4]
    real = nc.HashCache(tmp_path).dir
    clean, shas = nc.hash_items(photos)  # no cache
    # a shard written under other settings (its own folder), then copied into this setting's folder
    monkeypatch.setattr(nc, "_settings_key", lambda: "0" * 16)
    other = nc.HashCache(tmp_path)
    other.put(shas, [np.zeros_like(b) for b in clean])
    monkeypatch.undo()
    real.mkdir(parents=True)
    shard = Path(shutil.copy(next(other.dir.glob("hashes-*.npz")), real))
    nc._memo.clear()
    with pytest.warns(UserWarning, match=rf"foreign perceptual-hash cache shard {re.escape(str(shard))}"):
        again, _ = nc.hash_items(photos, cache=nc.HashCache(tmp_path))
    assert all((x == y).all() for x, y in zip(again, clean))
    assert shard.with_name(shard.name + ".foreign").exists()


def _vqa(reply_channel: int, model: str):
    from geofidelity_bench.geodiv import VQABackend

    class Mean(VQABackend):
        name = "mean"

        def __init__(self):
            super().__init__()
            self._config = {"backend": "test:mean", "model": model}
            self.batch_size = 4
            self.asked = 0

        def ask(self, images, questions):
            self.asked += len(images)
            return [f"{int(np.asarray(im)[..., reply_channel].mean())}" for im in images]

    return Mean()


def _ask(backend, cache_dir):
    from geofidelity_bench.geodiv import AnswerCache, GeoDivImage, answer_questions, load_question_bank

    images = [GeoDivImage(f"img{i}", Image.new("RGB", (8, 8), (40 * i, 7 * i, 10)), {}) for i in range(3)]
    return answer_questions(images, load_question_bank(None), backend,
                            cache=AnswerCache(cache_dir) if cache_dir else None)


def test_vqa_answer_files_copied_from_another_model_are_set_aside(tmp_path):
    a, b = _vqa(0, "red"), _vqa(1, "green")
    assert a.config_hash != b.config_hash
    clean_b = _ask(_vqa(1, "green"), None)
    _ask(a, tmp_path)
    (tmp_path / b.config_hash).mkdir()
    copied = [Path(shutil.copy(f, tmp_path / b.config_hash)) for f in (tmp_path / a.config_hash).glob("answers-*")]
    with pytest.warns(UserWarning, match=rf"foreign VQA answer cache shard {re.escape(str(copied[0]))}"):
        got = _ask(b, tmp_path)
    assert b.asked > 0 and list(got["reply"]) == list(clean_b["reply"])
    assert copied[0].with_name(copied[0].name + ".foreign").exists()


# -- 2. a FIFO or a folder named like a shard ---------------------------------------------------------------


@needs_fifo
def test_a_fifo_or_folder_named_like_an_embedding_shard_is_skipped(two_dinos, photos, tmp_path):
    a = two_dinos[0]
    clean = embed_images(a, photos, progress=False)
    embed_images(a, photos[:3], cache=EmbeddingCache(tmp_path), progress=False)
    folder = EmbeddingCache(tmp_path).dir_for(a)
    fifo = folder / "shard-00000000000000000000-1-fifo.safetensors"
    os.mkfifo(fifo)
    (folder / "shard-00000000000000000000-1-dir.safetensors").mkdir()
    got, messages = _call_with_timeout(
        lambda: embed_images(a, photos, cache=EmbeddingCache(tmp_path), progress=False), [fifo])
    np.testing.assert_allclose(got, clean, rtol=0, atol=1e-6)
    assert any(str(fifo) in m and "FIFO" in m for m in messages)
    assert any("-dir.safetensors" in m and "folder" in m for m in messages)
    assert fifo.exists()  # not the cache's: left where it is, and skipped again (with a warning) next time
    with pytest.warns(UserWarning, match="skipping embedding cache shard"):
        assert len(EmbeddingCache(tmp_path).keys(a)) == len(set(photos))


@needs_fifo
def test_a_fifo_named_like_a_hash_shard_or_an_answer_file_is_skipped(tmp_path):
    import geofidelity_bench.near_copies as nc

    photos = [r.image_bytes for r in load_benchmark("demo").gallery("berlin_am_lustgarten")][:3]
    nc.hash_items(photos, cache=nc.HashCache(tmp_path))
    folder = nc.HashCache(tmp_path).dir
    fifo = folder / "hashes-fifo.npz"
    os.mkfifo(fifo)
    (folder / "hashes-dir.npz").mkdir()
    shas = [nc.hashlib.sha256(p).hexdigest() for p in photos]
    got, messages = _call_with_timeout(lambda: nc.HashCache(tmp_path).get(shas), [fifo])
    assert set(got) == set(shas)
    assert any(str(fifo) in m and "FIFO" in m for m in messages)
    assert (folder / "hashes-dir.npz").is_dir()  # not ours: left where it is

    backend = _vqa(0, "red")
    clean = _ask(_vqa(0, "red"), None)
    _ask(backend, tmp_path / "vqa")
    answers_fifo = tmp_path / "vqa" / backend.config_hash / "answers-fifo.json"
    os.mkfifo(answers_fifo)
    (tmp_path / "vqa" / backend.config_hash / "answers-dir.json").mkdir()
    again = _vqa(0, "red")
    got, messages = _call_with_timeout(lambda: _ask(again, tmp_path / "vqa"), [answers_fifo])
    assert again.asked == 0 and list(got["reply"]) == list(clean["reply"])
    assert any(str(answers_fifo) in m and "FIFO" in m for m in messages)


# -- 3. flushing while embedding -------------------------------------------------------------------------------


def test_a_batch_that_took_long_is_written_before_the_next_batch_starts(tmp_path, monkeypatch):
    """A fake clock makes every batch take 6 s: each batch's rows are on disk (checksummed, read back by a
    fresh cache) before the next batch is computed, and the run leaves one shard behind, not one a batch."""
    from geofidelity_bench import cached_batches

    now = [0.0]
    monkeypatch.setattr(cached_batches, "_clock", lambda: now[0], raising=False)
    images = [bytes([i]) * 40 for i in range(10)]
    owner = "c" * 64
    on_disk_at_start: list[set] = []

    def compute(batch):
        on_disk_at_start.append(EmbeddingCache(tmp_path).keys(owner))
        now[0] += 6.0  # the batch takes 6 s
        return np.array([[b[0], 0.5] for b in batch], dtype=np.float32)

    run = cached_batches.run_cached(owner, images, [f"img{i}" for i in range(10)], width=2,
                                    prepare=lambda src, _: src, compute=compute, cache=EmbeddingCache(tmp_path),
                                    batch_size=2, progress=False, num_workers=0, desc="test")
    keys = cached_batches.content_keys(images, [""] * 10)
    for k, seen in enumerate(on_disk_at_start):
        assert seen == set(keys[: 2 * k]), f"batch {k} started before the rows of the batches before it were written"
    assert len(list((tmp_path / owner).glob("shard-*.safetensors"))) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cached = EmbeddingCache(tmp_path).get(owner, keys)
    np.testing.assert_array_equal(np.stack([cached[k] for k in keys]), run.rows)


_KILLED_EMBED = r"""
import sys, time
from pathlib import Path
from geofidelity_bench import cached_batches
from geofidelity_bench.encoders.efficientnet_lite import EfficientNetLite0Encoder

cached_batches.FLUSH_SECONDS = 0.0  # every batch counts as a slow one: written as soon as it is done
markers = Path(sys.argv[1])
original = EfficientNetLite0Encoder.embed_arrays
calls = [0]

def slow(self, arrays):
    calls[0] += 1
    (markers / f"batch-{calls[0]}").write_text("")
    if calls[0] >= 3:
        time.sleep(600)  # killed here
    return original(self, arrays)

EfficientNetLite0Encoder.embed_arrays = slow
from geofidelity_bench.cli import main
sys.exit(main(["embed", "--benchmark", "demo", "--encoder", "efficientnet-lite0", "--device", "cpu",
               "--batch-size", "4", "--num-workers", "0", "--cache-dir", sys.argv[2], "--no-progress"]))
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs kill -9")
def test_a_killed_embed_keeps_the_finished_batches_and_a_rerun_embeds_only_the_rest(tmp_path, capsys):
    from geofidelity_bench.cli import main

    markers, cache_dir = tmp_path / "markers", tmp_path / "cache"
    markers.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_EMBED, str(markers), str(cache_dir)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not (markers / "batch-3").exists():  # batches 1 and 2 done, the third one running
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")
            assert time.monotonic() < deadline, "the embed run never reached its third batch"
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()

    demo = load_benchmark("demo")
    photos = [r.image_bytes for r in demo.references]
    encoder = get_encoder("efficientnet-lite0", device="cpu")
    from geofidelity_bench.images import content_sha256

    first_two = [content_sha256(p) for p in photos[:8]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every flushed shard is whole and verified
        cache = EmbeddingCache(cache_dir)
        kept = cache.get(encoder, [content_sha256(p) for p in photos])
    assert set(kept) == set(first_two)
    expected = embed_images(encoder, photos[:8], batch_size=4, progress=False, num_workers=0)
    np.testing.assert_allclose(np.stack([kept[k] for k in first_two]), expected, rtol=0, atol=1e-5)

    capsys.readouterr()
    assert main(["embed", "--benchmark", "demo", "--encoder", "efficientnet-lite0", "--device", "cpu",
                 "--batch-size", "4", "--cache-dir", str(cache_dir), "--no-progress"]) == 0
    n = len(photos)
    assert f"{n} images: 8 from cache, {n - 8} computed" in capsys.readouterr().out
