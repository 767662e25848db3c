"""Host-to-device copies that can overlap (issue 41, points 4 and 5), checked on the CPU.

A CPU cannot show the overlap itself, so these tests check its structure at the boundary where the
batch pipelines meet torch's devices (``encoders.base.DeviceTransfers``), with a recording stand-in
of that boundary that behaves as it does for a CUDA device (inputs go through page-locked memory,
here ``Tensor.pin_memory`` patched into a recording host copy, since a CPU build cannot page-lock):

* every input is copied into "pinned" memory once, by the worker thread that prepares it, and the
  tensors handed to the device are exactly those (no second host copy of a batch);
* pinning is asked of torch only for a CUDA device;
* each batch's results are read once, after the next batch was submitted;
* the segmenters' image processor runs in the worker threads, not in the model's thread;
* every number is bit for bit what the serial computation gives (written out here, as the code
  before these changes computed it).
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

torch = pytest.importorskip("torch")

from geofidelity_bench.encoders import EmbeddingCache, embed_images, get_encoder  # noqa: E402
from geofidelity_bench.encoders import base as encoder_base  # noqa: E402
from geofidelity_bench.encoders.devices import model_forward  # noqa: E402
from geofidelity_bench.images import load_image  # noqa: E402

HERE = Path(__file__).parent
PHOTOS = sorted((HERE / "data" / "photos").glob("lund_*.jpg"))
WORKER_PREFIX = "geofidelity-prepare"  # prefetch.ordered_map's thread names


def _images(n: int, seed: int = 0) -> list:
    """Photos and noise images of several aspect ratios (so a segmenter's batches split by size)."""
    rng = np.random.default_rng(seed)
    out: list = [PHOTOS[i % len(PHOTOS)] for i in range(min(n, 3))]
    sizes = [(70, 50), (50, 70), (64, 64), (90, 40)]
    while len(out) < n:
        w, h = sizes[len(out) % len(sizes)]
        out.append(Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)))
    return out


class _Boundary:
    """What the recording transfers saw: (event, detail) in order, and the host copies the workers made."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, object]] = []
        self.pinned: dict[int, str] = {}  # data_ptr of every "page-locked" copy -> the thread that made it
        self.fetches = 0

    def log(self, *event) -> None:
        with self.lock:
            self.events.append(event)

    def of(self, kind: str) -> list:
        return [e for e in self.events if e[0] == kind]


def _ptr(x) -> int:
    return x.ctypes.data if isinstance(x, np.ndarray) else x.data_ptr()


@pytest.fixture
def boundary(monkeypatch):
    """``DeviceTransfers`` replaced by a recording subclass that acts as for a CUDA device."""
    seen = _Boundary()

    def pin_memory(self, *args, **kwargs):  # a CPU build cannot page-lock: a recorded host copy stands in
        copy = self.clone()
        with seen.lock:
            seen.pinned[copy.data_ptr()] = threading.current_thread().name
        return copy

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    if not hasattr(encoder_base, "DeviceTransfers"):  # code without the boundary: nothing is recorded
        return seen
    from geofidelity_bench.prefetch import Pending

    class Recording(encoder_base.DeviceTransfers):
        def __init__(self, device) -> None:
            super().__init__(device)
            assert self.device == "cpu"
            self.pinned = True  # as for CUDA: prepared inputs go through page-locked host memory

        def send(self, items, dtype=None):
            seen.log("send", [_ptr(x) for x in items])
            return super().send(items, dtype)

        def fetch(self, tensors, **kwargs):
            pending = super().fetch(tensors, **kwargs)
            with seen.lock:
                number = seen.fetches
                seen.fetches += 1
            seen.log("fetch", number)

            def read():
                seen.log("read", number)
                return pending.result()

            return Pending(read)

    monkeypatch.setattr(encoder_base, "DeviceTransfers", Recording)
    return seen


def _check_structure(seen: _Boundary, batches: int) -> None:
    # every input was copied into pinned memory by a worker thread, once
    assert seen.pinned and all(name.startswith(WORKER_PREFIX) for name in seen.pinned.values()), seen.pinned
    sent = [p for _, ptrs in seen.of("send") for p in ptrs]
    # the device got exactly the workers' pinned copies: nothing copied them again on the host
    assert sent and set(sent) <= set(seen.pinned), "a batch went to the device from memory the workers did not pin"
    # each batch read once, after the next one was submitted (the last one at the end)
    order = [(kind, n) for kind, n in seen.events if kind in ("fetch", "read")]
    assert [n for kind, n in order if kind == "fetch"] == list(range(batches))
    assert sorted(n for kind, n in order if kind == "read") == list(range(batches))
    for k in range(batches - 1):
        assert order.index(("read", k)) > order.index(("fetch", k + 1)), order


# -- encoders -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(11)
    folder = tmp_path_factory.mktemp("overlap-dinov2")
    config = Dinov2Config(hidden_size=24, num_hidden_layers=1, num_attention_heads=2, intermediate_size=48,
                          image_size=224, patch_size=14)
    Dinov2Model(config).eval().save_pretrained(folder)
    return get_encoder("dinov2-base", weights=folder, device="cpu")


def _serial_embeddings(encoder, images, batch_size: int) -> np.ndarray:
    """The computation before issue 41, written out: preprocess, np.stack, one forward per batch."""
    arrays = [encoder.preprocessing(load_image(im)) for im in images]
    rows = []
    for i in range(0, len(arrays), batch_size):
        batch = torch.from_numpy(np.stack(arrays[i:i + batch_size]))
        with torch.inference_mode(), model_forward("cpu", True):
            rows.append(encoder._forward(batch).float().cpu().numpy())
    return np.concatenate(rows)


def test_encoder_batches_are_pinned_by_the_workers_and_read_one_batch_behind(encoder, boundary):
    images = _images(8)
    expected = _serial_embeddings(encoder, images, 3)
    got = encoder.embed(images, batch_size=3, num_workers=2)
    assert got.dtype == np.float32 and np.array_equal(got, expected)
    _check_structure(boundary, batches=3)
    assert len(boundary.pinned) == 8  # one host copy per image, none per batch


def test_cached_embedding_runs_keep_one_batch_in_flight(encoder, boundary, tmp_path):
    images = _images(7, seed=1)
    expected = _serial_embeddings(encoder, images, 2)
    got = embed_images(encoder, images, cache=EmbeddingCache(tmp_path), batch_size=2, progress=False, num_workers=2)
    assert np.array_equal(got, expected)
    _check_structure(boundary, batches=4)
    # every row was written to the cache, equal to what was returned
    cached = embed_images(encoder, images, cache=EmbeddingCache(tmp_path), batch_size=2, progress=False, num_workers=0)
    assert np.array_equal(cached, expected) and boundary.fetches == 4  # the second run computed nothing


def test_pinned_memory_is_asked_for_on_cuda_only(encoder, monkeypatch):
    calls: list[str] = []

    def pin_memory(self, *args, **kwargs):
        calls.append(threading.current_thread().name)
        return self.clone()

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    arr = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    cpu = encoder_base.DeviceTransfers("cpu")
    assert cpu.host_array(arr) is arr and not cpu.pinned  # on the CPU the prepared array itself, no copy
    t = torch.from_numpy(arr)
    assert cpu.host_tensor(t) is t
    assert calls == []
    cuda = encoder_base.DeviceTransfers("cuda:1")
    pinned = cuda.host_array(arr)
    assert calls == [threading.current_thread().name] and np.array_equal(pinned, arr)
    assert pinned.ctypes.data != arr.ctypes.data  # the one copy, into page-locked memory
    cuda.host_tensor(t)
    assert len(calls) == 2
    # a whole CPU run never asks for pinned memory
    calls.clear()
    encoder.embed(_images(4), batch_size=2, num_workers=2)
    assert calls == []


def test_a_failing_batch_keeps_the_rows_of_the_batch_before_it(encoder, tmp_path, monkeypatch):
    """With one batch in flight, the batch submitted before a failing one is still read and cached."""
    images = _images(6, seed=2)
    real = type(encoder).submit_arrays
    calls = [0]

    def submit(self, arrays):
        calls[0] += 1
        if calls[0] == 3:
            raise RuntimeError("device lost")
        return real(self, arrays)

    monkeypatch.setattr(type(encoder), "submit_arrays", submit)
    cache = EmbeddingCache(tmp_path)
    with pytest.raises(RuntimeError, match="device lost"):
        embed_images(encoder, images, cache=cache, batch_size=2, progress=False, num_workers=0)
    from geofidelity_bench.cached_batches import content_keys

    keys = content_keys(images, [""] * 6)
    assert set(cache.get(encoder, keys)) == set(keys[:4])


# -- segmenters (points 4 and 5) ------------------------------------------------------------------


@pytest.fixture(scope="module")
def segmenter(tiny_m2f_small_dir):
    from geofidelity_bench.segmentation import get_segmenter

    return get_segmenter("mask2former-vistas", weights=tiny_m2f_small_dir, device="cpu")


class _ThreadRecordingProcessor:
    """The segmenter's real image processor, with the thread of every preprocessing call recorded."""

    def __init__(self, real) -> None:
        self.real, self.threads = real, []

    def __call__(self, *args, **kwargs):
        self.threads.append(threading.current_thread().name)
        return self.real(*args, **kwargs)

    def __getattr__(self, name):  # post-processing, size, to_dict: the real processor's
        return getattr(self.real, name)


def _serial_shares(segmenter, images, batch_size: int) -> np.ndarray:
    """The computation before issue 41, written out: decode, preprocess and run each batch in one
    thread, one forward per preprocessed size, bincount of every label map."""
    from geofidelity_bench.segmentation.base import label_map_size
    from geofidelity_bench.segmentation.shares import shares_from_counts

    decoded = [load_image(im) for im in images]
    rows = []
    for start in range(0, len(decoded), batch_size):
        batch = decoded[start:start + batch_size]
        pixels = [segmenter.processor(images=[im], input_data_format="channels_last", return_tensors="pt")
                  ["pixel_values"] for im in batch]
        groups: dict = {}
        for i, pv in enumerate(pixels):
            groups.setdefault(tuple(pv.shape[-2:]), []).append(i)
        maps: list = [None] * len(batch)
        for idx in groups.values():
            with torch.inference_mode(), model_forward("cpu", True):
                outputs = segmenter.model(pixel_values=torch.cat([pixels[i] for i in idx]))
                for j, i in enumerate(idx):
                    maps[i] = segmenter._post_process(outputs, j, label_map_size(*batch[i].size))
        for lm in maps:
            counts = torch.bincount(lm.reshape(-1).long(), minlength=segmenter.num_classes)[: segmenter.num_classes]
            rows.append(shares_from_counts(counts.cpu().numpy(), segmenter.class_to_group).astype(np.float32))
    return np.stack(rows)


def test_segmentation_preprocessing_runs_in_the_worker_threads(segmenter, monkeypatch):
    from geofidelity_bench.segmentation import segment_images

    images = _images(7, seed=3)
    expected = _serial_shares(segmenter, images, 3)
    assert len({tuple(segmenter._pixel_values(load_image(im)).shape) for im in images}) > 1  # several sizes
    recording = _ThreadRecordingProcessor(segmenter.processor)
    monkeypatch.setattr(segmenter, "processor", recording)
    got, stats = segment_images(segmenter, images, batch_size=3, progress=False, num_workers=2, return_stats=True)
    assert len(recording.threads) == len(images)
    assert all(name.startswith(WORKER_PREFIX) for name in recording.threads), recording.threads
    assert got.dtype == np.float32 and np.array_equal(got, expected)
    assert stats.forward_calls > 3  # one per preprocessed size in a batch, as before
    # the serial path (no worker threads, or PIL images given to shares_of) gives the same bits
    recording.threads.clear()
    serial = segment_images(segmenter, images, batch_size=3, progress=False, num_workers=0)
    assert np.array_equal(serial, expected) and set(recording.threads) == {threading.current_thread().name}
    assert np.array_equal(segmenter.shares_of([load_image(im) for im in images[:3]]), expected[:3])


def test_segmentation_batches_are_pinned_by_the_workers_and_read_one_batch_behind(segmenter, boundary):
    from geofidelity_bench.segmentation import segment_images

    images = _images(7, seed=4)
    expected = _serial_shares(segmenter, images, 3)
    got = segment_images(segmenter, images, batch_size=3, progress=False, num_workers=2)
    assert np.array_equal(got, expected)
    _check_structure(boundary, batches=3)


def test_class_counts_are_bincount_without_a_wait():
    from geofidelity_bench.segmentation.base import class_counts

    lm = torch.tensor([[0, 3, 3, 9], [2, 2, 2, 65]])  # 65: past the last class, not counted (as bincount[:C])
    expected = torch.bincount(lm.reshape(-1), minlength=66)[:65]
    assert torch.equal(class_counts(lm, 65), expected)
    assert class_counts(lm.to(torch.uint8), 4).tolist() == [1, 0, 3, 2]


# -- MFP --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def extractor(tmp_path_factory):
    from transformers import ViTConfig, ViTModel

    from geofidelity_bench.encoders.dino_vit_keys import DinoViTFeatureExtractor

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("overlap-vit")
    ViTModel(ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                       image_size=32, patch_size=8), add_pooling_layer=False).save_pretrained(path)
    return DinoViTFeatureExtractor(path, image_size=32, device="cpu")


def test_mfp_batches_are_pinned_by_the_workers_and_read_one_batch_behind(extractor, boundary):
    from geofidelity_bench.metrics.mfp import pair_terms
    from geofidelity_bench.mfp import mfp_scores

    rng = np.random.default_rng(5)
    gen = [Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)) for _ in range(5)]
    tgt = [Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)) for _ in range(5)]
    df = mfp_scores(gen, tgt, extractor, batch_size=2, num_workers=2, progress=False)
    _check_structure(boundary, batches=3)
    assert len(boundary.pinned) == 10
    # the serial computation before issue 41: np.stack of each batch's arrays, both forwards, the terms
    expected: dict[str, list] = {"global_score": [], "spatial_distance": [], "spatial_mse": []}
    for start in range(0, 5, 2):
        g = torch.from_numpy(np.stack([extractor.preprocessing(im) for im in gen[start:start + 2]]))
        t = torch.from_numpy(np.stack([extractor.preprocessing(im) for im in tgt[start:start + 2]]))
        with torch.inference_mode():
            terms = pair_terms(extractor(g), extractor(t))
        for key in expected:
            expected[key].extend(float(v) for v in terms[key].double().cpu().numpy())
    for key, values in expected.items():
        assert df[key].tolist() == values, key
