"""The parallel image input pipeline (prefetch.ordered_map inside run_cached): worker threads change
no number, keep the input order, the cache writes and the errors of the serial path, never hang on a
worker's exception, and stop promptly on an interrupt."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from geofidelity_bench.cached_batches import run_cached
from geofidelity_bench.encoders import EmbeddingCache, embed_images, get_encoder
from geofidelity_bench.images import ImageDecodeError, content_sha256
from geofidelity_bench.prefetch import WorkerOptionError, default_num_workers, ordered_map, resolve_num_workers

HERE = Path(__file__).parent
PHOTOS = sorted((HERE / "data" / "photos").glob("lund_*.jpg"))


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    import torch
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(7)
    folder = tmp_path_factory.mktemp("pipeline-dinov2")
    config = Dinov2Config(hidden_size=24, num_hidden_layers=1, num_attention_heads=2, intermediate_size=48,
                          image_size=224, patch_size=14)
    Dinov2Model(config).eval().save_pretrained(folder)
    return get_encoder("dinov2-base", weights=folder, device="cpu")


def _noise_jpeg(seed: int, size=(64, 48)) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(buf, "JPEG", quality=85)
    return buf.getvalue()


def _mixed_images(tmp_path: Path) -> list:
    """Paths, bytes, PIL images, arrays, an EXIF-rotated file, grayscale, and a repeat."""
    photo = Image.open(PHOTOS[0]).convert("RGB").resize((160, 120))
    exif = Image.Exif()
    exif[0x0112] = 6
    photo.transpose(Image.Transpose.ROTATE_90).save(tmp_path / "exif.jpg", exif=exif, quality=90)
    photo.convert("L").save(tmp_path / "gray.png")
    rng = np.random.default_rng(3)
    images = [
        PHOTOS[1], tmp_path / "exif.jpg", tmp_path / "gray.png", _noise_jpeg(1), photo,
        Image.open(PHOTOS[2]), rng.integers(0, 256, (50, 70, 3), dtype=np.uint8),
        rng.integers(0, 256, (40, 40), dtype=np.uint8), photo.convert("L"), str(PHOTOS[1]),
    ]
    return images + [_noise_jpeg(10 + i) for i in range(9)]


def test_same_embeddings_whatever_the_number_of_workers(encoder, tmp_path):
    images = _mixed_images(tmp_path)
    runs = {n: embed_images(encoder, images, batch_size=4, progress=False, num_workers=n) for n in (0, 1, 4)}
    # the serial computation written out: preprocess in order, then the same batches of 4
    arrays = [encoder.preprocess(im) for im in images]
    expected = np.concatenate([encoder.embed_arrays(arrays[i:i + 4]) for i in range(0, len(arrays), 4)])
    # repeated content is computed once: rows 0 and 9 are the same file
    assert np.abs(runs[0][0] - runs[0][9]).max() == 0
    for n, emb in runs.items():
        assert emb.dtype == np.float32
        assert np.abs(emb - runs[0]).max() == 0, n
    keep = [i for i in range(len(images)) if i != 9]  # the serial loop above computed the repeat separately
    assert np.abs(runs[4][keep[:9]] - expected[keep[:9]]).max() == 0
    for n in (0, 3):  # Encoder.embed (no cache) goes through the same pipeline
        assert np.abs(encoder.embed(images, batch_size=4, num_workers=n) - expected).max() == 0


def test_the_cache_sees_the_same_keys_and_rows(encoder, tmp_path):
    images = [_noise_jpeg(100 + i) for i in range(11)]
    caches = {}
    for n in (0, 4):
        caches[n] = EmbeddingCache(tmp_path / f"cache{n}")
        embed_images(encoder, images, cache=caches[n], batch_size=3, progress=False, num_workers=n)
    keys = [content_sha256(im) for im in images]
    serial, threaded = caches[0].get(encoder, keys), caches[4].get(encoder, keys)
    assert sorted(serial) == sorted(threaded) == sorted(keys)
    assert all(np.array_equal(serial[k], threaded[k]) for k in keys)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("num_workers", [0, 4])
def test_an_undecodable_image_is_named_and_the_ones_before_it_are_cached(encoder, tmp_path, num_workers):
    images = [_noise_jpeg(200 + i) for i in range(20)]
    images[13] = b"\xff\xd8 this is no jpeg"
    names = [f"upload-{i}.jpg" for i in range(20)]
    cache = EmbeddingCache(tmp_path / "cache")
    with pytest.raises(ImageDecodeError, match="upload-13.jpg"):
        embed_images(encoder, images, names=names, cache=cache, batch_size=4, progress=False,
                     num_workers=num_workers)
    keys = [content_sha256(im) for im in images]
    cached = cache.get(encoder, keys)
    assert sorted(cached) == sorted(keys[:13])  # 0-11 in full batches, 12 before the bad one in its batch
    good = embed_images(encoder, images[:13], batch_size=4, progress=False, num_workers=0)
    assert all(np.array_equal(cached[k], row) for k, row in zip(keys[:13], good))


def _prepare_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("geofidelity-prepare")]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_a_worker_exception_stops_the_run_without_waiting_for_the_pool(exc):
    release = threading.Event()
    timer = threading.Timer(30.0, release.set)  # a safety net: a hanging pool is released (and fails below)
    timer.start()
    calls, computed = [], []

    def prepare(item, label):
        calls.append(item)
        if item == 5:
            raise exc(f"worker failed on {label}")
        if item > 5:
            release.wait()  # later images never finish on their own
        return np.full(2, item, dtype=np.float32)

    def compute(batch):
        computed.extend(float(b[0]) for b in batch)
        return np.stack(batch)

    items = [np.full((4, 4), i, dtype=np.uint8) for i in range(200)]  # distinct contents, never decoded
    try:
        with pytest.raises(exc, match="worker failed on item 5"):
            _run(items, prepare, compute)
        returned_on_its_own = not release.is_set()
    finally:
        release.set()
        timer.cancel()
    assert returned_on_its_own, "run_cached waited for the blocked workers"
    assert computed == [0.0, 1.0, 2.0, 3.0]  # the first batch; the error is in the second, before any image
    assert len(calls) < 200  # pending work was cancelled
    for t in _prepare_threads():
        t.join(10)
    assert not _prepare_threads()


def _run(items, prepare, compute):
    index = {id(x): i for i, x in enumerate(items)}
    return run_cached(None, items, [f"item {i}" for i in range(len(items))], width=2,
                      prepare=lambda item, label: prepare(index[id(item)], label), compute=compute, batch_size=4,
                      progress=False, desc="t", num_workers=4)


def test_ordered_map_keeps_order_and_bounds_what_is_in_flight():
    started = []
    gate = threading.Semaphore(0)

    def slow_first(i):
        started.append(i)
        if i % 3 == 0:
            time.sleep(0.001 * (i % 5))
        return i * i

    assert list(ordered_map(slow_first, range(50), num_workers=4, ahead=6)) == [i * i for i in range(50)]
    # nothing is consumed: at most ``ahead`` inputs were handed to the workers
    gen = ordered_map(lambda i: (started.append(i), gate.release()), range(1000), num_workers=3, ahead=5)
    started.clear()
    next(gen)
    for _ in range(6):
        gate.acquire(timeout=10)
    assert len(started) <= 6
    gen.close()


def test_num_workers_default_and_validation(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert default_num_workers() == cores == resolve_num_workers(None)
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert default_num_workers() == max(1, cores // 4)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # one process on this machine, four in the launch
    assert default_num_workers() == cores
    assert resolve_num_workers(0) == 0 and resolve_num_workers(3) == 3
    for bad in (-1, 1.5, True):
        with pytest.raises(WorkerOptionError):
            resolve_num_workers(bad)


def test_cli_rejects_a_negative_num_workers(capsys):
    from geofidelity_bench.cli import main

    assert main(["segment", "--num-workers", "-2", "--no-cache"]) == 2
    assert "--num-workers" in capsys.readouterr().err


# A process started in the background by a non-interactive shell (``pytest ... &`` in a script, CI runners)
# inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler: restore the handler an
# interactive Ctrl-C meets, else the SIGINT case tests nothing and waits out its timeout.
_INTERRUPTED = r"""
import signal
signal.signal(signal.SIGINT, signal.default_int_handler)
import time
import numpy as np
from geofidelity_bench.cached_batches import run_cached

def prepare(item, label):
    time.sleep(0.02)
    return np.zeros(2, dtype=np.float32)

def compute(batch):
    print("computing", flush=True)
    return np.stack(batch)

items = [np.array([[[i % 256, i // 256, 0]]], dtype=np.uint8) for i in range(20000)]
run_cached(None, items, [str(i) for i in range(len(items))], width=2, prepare=prepare, compute=compute,
           batch_size=8, progress=False, desc="t", num_workers=4)
print("finished", flush=True)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_pool(sig, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(HERE.parent))
    proc = subprocess.Popen([sys.executable, "-c", _INTERRUPTED], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "computing"  # the pool is running
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)  # far more than stopping needs; 20000 images would take minutes
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "finished" not in out
    assert proc.returncode != 0
    if sig == signal.SIGINT:
        assert "KeyboardInterrupt" in err
