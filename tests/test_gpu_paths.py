"""Device and precision paths checked on the CPU (issue 24): where each model is built under a
launcher, clean errors for CUDA that is not there, TF32 off in float32 forwards, MFP terms in
float32 under autocast, the VQA dtype choice and VAE slicing for batches."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch

from geofidelity_bench.encoders.base import EncoderOptionError, hash_config
from geofidelity_bench.encoders.devices import (
    exact_float32,
    launcher_rank,
    pick_device,
    tf32_flags,
)

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error when no GPU is visible")


# -- defect 2 and 5: where a model is built ------------------------------------------------------


@pytest.mark.parametrize(
    "requested, count, rank, world, expected",
    [
        (None, 2, 1, 2, "cuda:1"),  # launcher, no choice: this process's GPU, not cuda:0
        (None, 2, 0, 2, "cuda:0"),
        ("cuda", 2, 1, 2, "cuda:1"),  # a bare "cuda" under a launcher also means this process's GPU
        ("cpu", 2, 1, 2, "cpu"),  # an explicit CPU is honoured
        ("cuda:0", 2, 1, 2, "cuda:0"),  # an explicit index is honoured
        (None, 1, 3, 4, "cuda:0"),  # one GPU visible per process (CUDA_VISIBLE_DEVICES per rank)
        (None, 0, 1, 2, "cpu"),  # CPU-only launch (gloo)
        (None, 2, 0, 1, "cuda"),  # a plain process keeps torch's current device
        (None, 0, 0, 1, "cpu"),
        (torch.device("cpu"), 0, 0, 1, "cpu"),
    ],
)
@pytest.mark.filterwarnings("ignore:local ranks .* all run on:UserWarning")  # cuda:0 for LOCAL_RANK 3: said (below)
def test_pick_device(requested, count, rank, world, expected):
    assert pick_device(requested, cuda_count=count, local_rank=rank, world_size=world) == expected


@pytest.mark.parametrize(
    "requested, count, words",
    [("cuda", 0, "no CUDA GPU is visible"), ("cuda:2", 2, "only 2 GPU(s)"), ("cuda:0", 0, "no CUDA GPU"),
     ("tpu9", 1, "unknown device")],
)
def test_pick_device_errors_are_one_line(requested, count, words):
    with pytest.raises(EncoderOptionError) as info:
        pick_device(requested, cuda_count=count)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_launcher_rank():
    assert launcher_rank({"WORLD_SIZE": "2", "LOCAL_RANK": "1"}) == (1, 2)
    assert launcher_rank({}) == (0, 1)
    assert launcher_rank({"WORLD_SIZE": "1", "LOCAL_RANK": "0"}) == (0, 1)


@no_cuda
def test_every_model_builder_checks_the_device_before_loading(tmp_path):
    """Each model family goes through the same device choice, before it loads anything."""
    from geofidelity_bench.encoders import get_encoder
    from geofidelity_bench.encoders.dino_vit_keys import DinoViTFeatureExtractor
    from geofidelity_bench.geodiv.vqa import TransformersVQA
    from geofidelity_bench.segmentation import get_segmenter

    missing = tmp_path / "no-weights-here"
    builders = [
        lambda: get_encoder("efficientnet-lite0", device="cuda"),
        lambda: get_encoder("dinov2-base", weights=missing, device="cuda:1"),
        lambda: get_segmenter("segformer-cityscapes", weights=missing, device="cuda"),
        lambda: TransformersVQA(str(missing), device="cuda"),
        lambda: DinoViTFeatureExtractor(str(missing), device="cuda"),
    ]
    for build in builders:
        with pytest.raises(EncoderOptionError, match="no CUDA GPU is visible"):
            build()


@no_cuda
def test_cli_device_cuda_without_gpu_is_one_line(capsys):
    from geofidelity_bench.cli import main

    assert main(["embed", "--encoder", "efficientnet-lite0", "--device", "cuda", "--no-cache"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no CUDA GPU is visible" in err and "Traceback" not in err and len(err.splitlines()) == 1


# -- defect 4: TF32 --------------------------------------------------------------------------------


def test_exact_float32_restores_the_flags_also_on_error():
    before = tf32_flags()
    try:
        for flags in [(True, True), (False, True), (True, False)]:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags
            with exact_float32(device_type="cuda"):
                assert tf32_flags() == (False, False)
            assert tf32_flags() == flags
            with pytest.raises(KeyError), exact_float32(device_type="cuda"):
                raise KeyError("x")
            assert tf32_flags() == flags
            with exact_float32(enabled=False):
                assert tf32_flags() == flags
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.fixture(scope="module")
def effnet():
    from geofidelity_bench.encoders import get_encoder

    return get_encoder("efficientnet-lite0", device="cpu")


def test_float32_encoder_forward_runs_without_tf32_and_records_it(effnet):
    seen = []
    handle = effnet.model.register_forward_pre_hook(
        lambda module, args: seen.append(torch.backends.mkldnn.matmul.fp32_precision))
    before = tf32_flags()
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        torch.backends.mkldnn.matmul.fp32_precision = "bf16"  # reduced float32 matmuls on the CPU (oneDNN)
        effnet.embed_arrays([np.zeros((3, 224, 224), dtype=np.float32)])
        assert seen == ["ieee"]
        assert tf32_flags() == (True, True) and torch.backends.mkldnn.matmul.fp32_precision == "bf16"
        torch.backends.mkldnn.matmul.fp32_precision = "none"
    finally:
        handle.remove()
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    cfg = effnet.config
    # what torch had in force inside the forward, read back from torch
    assert cfg["dtype"] == "float32" and cfg["float32_precision"] == {
        "mkldnn.matmul": "ieee", "mkldnn.conv": "none", "mkldnn.rnn": "none"}
    # recorded, but not part of the cache key: float32 is the same computation on every device
    assert hash_config(cfg) == effnet.config_hash


# -- defect 3: MFP terms in float32 under autocast ---------------------------------------------------


def _numpy_terms(gen, tgt):
    """An independent float64 computation of the MFP terms."""
    def sim(k):
        k = k / np.linalg.norm(k, axis=-1, keepdims=True)
        return k @ np.swapaxes(k, -1, -2)

    g = 1.0 - ((gen.cls - tgt.cls) ** 2).mean(axis=-1)
    sq = ((sim(gen.keys) - sim(tgt.keys)) ** 2).reshape(len(gen.keys), -1)
    return {"global_score": g, "spatial_distance": np.sqrt(sq.sum(axis=1)), "spatial_mse": sq.mean(axis=1)}


def test_mfp_terms_are_float32_under_cpu_autocast():
    from geofidelity_bench.metrics.mfp import MFPFeatures, pair_terms, self_similarity

    gen_t = torch.Generator().manual_seed(0)
    gen = MFPFeatures(cls=torch.randn(2, 64, generator=gen_t), keys=torch.randn(2, 50, 64, generator=gen_t))
    tgt = MFPFeatures(cls=torch.randn(2, 64, generator=gen_t), keys=torch.randn(2, 50, 64, generator=gen_t))
    plain = pair_terms(gen, tgt)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        sim = self_similarity(gen.keys)
        under = pair_terms(gen, tgt)
        same = pair_terms(gen, gen)
    assert sim.dtype == torch.float32
    np.testing.assert_allclose(torch.diagonal(sim, dim1=-2, dim2=-1).numpy(), 1.0, atol=1e-6)
    expected = _numpy_terms(MFPFeatures(gen.cls.double().numpy(), gen.keys.double().numpy()),
                            MFPFeatures(tgt.cls.double().numpy(), tgt.keys.double().numpy()))
    for name, value in under.items():
        assert value.dtype == torch.float32, name
        np.testing.assert_allclose(value.numpy(), plain[name].numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(value.numpy(), expected[name], rtol=1e-5)
    assert float(same["spatial_mse"].abs().max()) == 0.0 and float((same["global_score"] - 1).abs().max()) == 0.0


# -- defect 5: the VQA dtype, VAE slicing -----------------------------------------------------------------


def test_default_vqa_dtype():
    from geofidelity_bench.geodiv.vqa import default_vqa_dtype

    assert default_vqa_dtype("cuda:0", bf16_supported=True) == "bfloat16"
    assert default_vqa_dtype("cuda", bf16_supported=False) == "float16"  # V100, T4
    assert default_vqa_dtype("cpu", bf16_supported=True) == "float32"


def test_batches_decode_with_vae_slicing():
    from geofidelity_bench.generation.backends import load_generator
    from geofidelity_bench.generation.registry import resolve_generator

    spec = resolve_generator("tiny")
    one = load_generator(spec, device="cpu", batch_size=1)
    three = load_generator(spec, device="cpu", batch_size=3)
    try:
        assert one.pipe.vae.use_slicing is False and one.vae_slicing is False
        assert three.pipe.vae.use_slicing is True and three.vae_slicing is True
    finally:
        one.close()
        three.close()


# -- issue 41, items 7 and 9: two ranks on one GPU ---------------------------------------------------


def _launch_env(monkeypatch, rank: int, world: int = 2, local_world: int | None = 2) -> None:
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setenv("LOCAL_RANK", str(rank))
    if local_world is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world))
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)


def _fake_gpus(monkeypatch, count: int) -> None:
    """What torch reports about the GPUs, and only that (the code under test is the library's)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def _device_and_warnings(requested=None):
    import warnings

    from geofidelity_bench.encoders.devices import this_process_device

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        device = this_process_device(requested)
    return device, [str(w.message) for w in caught]


@pytest.mark.parametrize("rank", [0, 1])
def test_two_ranks_on_one_gpu_are_said_in_one_line_naming_the_ranks_and_the_device(monkeypatch, rank):
    _fake_gpus(monkeypatch, 1)
    _launch_env(monkeypatch, rank)
    device, said = _device_and_warnings()
    assert device == "cuda:0"
    shared = [m for m in said if "cuda:0" in m]
    assert len(shared) == 1, said  # before: not a word
    line = shared[0]
    assert "\n" not in line and "local ranks 0 and 1 of 2" in line and "LOCAL_RANK" in line
    assert "CUDA_VISIBLE_DEVICES" in line  # the one setup where it is wrong, named


def test_without_local_world_size_a_rank_names_the_lower_ranks_it_shares_with(monkeypatch):
    _fake_gpus(monkeypatch, 2)
    _launch_env(monkeypatch, 3, world=4, local_world=None)
    device, said = _device_and_warnings()
    assert device == "cuda:1" and len(said) == 1 and "local ranks 1 and 3 all run on cuda:1" in said[0]
    _launch_env(monkeypatch, 1, world=4, local_world=None)
    assert _device_and_warnings() == ("cuda:1", [])  # rank 1 cannot know of rank 3: nothing to say


def test_one_rank_per_gpu_and_explicit_devices_say_nothing(monkeypatch):
    _fake_gpus(monkeypatch, 2)
    for rank in (0, 1):
        _launch_env(monkeypatch, rank)
        assert _device_and_warnings() == (f"cuda:{rank}", [])
    _fake_gpus(monkeypatch, 1)
    _launch_env(monkeypatch, 1)
    assert _device_and_warnings("cuda:0") == ("cuda:0", [])  # asked for: honoured as asked
    assert _device_and_warnings("cpu") == ("cpu", [])


class _State:
    """What the refusal reads of an ``accelerate.PartialState``."""

    def __init__(self, rank: int, world: int, device: str):
        self.process_index, self.num_processes, self.device = rank, world, torch.device(device)


def _exchange(identities: dict[int, str], devices: dict[int, str] | None = None) -> dict[int, BaseException | None]:
    """Every rank's refuse_shared_gpus, each on its own thread, through one in-memory store."""
    import threading

    from geofidelity_bench.encoders.devices import refuse_shared_gpus

    store = torch.distributed.HashStore()
    outcome: dict[int, BaseException | None] = {}

    def rank_of(rank: int) -> None:
        state = _State(rank, len(identities), (devices or {}).get(rank, "cuda:0"))
        try:
            refuse_shared_gpus(state, store=store, identity=identities[rank], timeout_s=30)
            outcome[rank] = None
        except BaseException as err:  # noqa: BLE001
            outcome[rank] = err

    threads = [threading.Thread(target=rank_of, args=(r,)) for r in identities]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    return outcome


def test_a_cuda_launch_with_two_processes_on_one_gpu_is_refused_by_every_process_in_one_line():
    from geofidelity_bench.encoders.devices import ProcessGroupError

    outcome = _exchange({0: "host-a GPU-1111", 1: "host-a GPU-1111"})
    for rank in (0, 1):
        err = outcome[rank]
        assert isinstance(err, ProcessGroupError), outcome
        text = str(err)
        assert "\n" not in text and text.startswith("processes 0 and 1 of this launch of 2 run on one GPU (cuda:0 of host-a)")
        assert "--nproc_per_node" in text and "NCCL" in text


def test_one_process_per_gpu_is_not_refused_and_the_sharing_ones_are_named():
    from geofidelity_bench.encoders.devices import ProcessGroupError, shared_gpus

    assert _exchange({0: "host-a GPU-1", 1: "host-a GPU-2", 2: "host-b GPU-1"}) == {0: None, 1: None, 2: None}
    outcome = _exchange({0: "a GPU-1", 1: "a GPU-2", 2: "a GPU-1", 3: "a GPU-2"},
                        {0: "cuda:0", 1: "cuda:1", 2: "cuda:0", 3: "cuda:1"})
    assert all(isinstance(e, ProcessGroupError) for e in outcome.values())
    assert "processes 1 and 3 " in str(outcome[1]) and "(cuda:1 of a)" in str(outcome[1])
    assert "processes 0 and 2 " in str(outcome[0])
    assert shared_gpus({0: "x", 1: "y", 2: "x", 3: "x"}) == [[0, 2, 3]]


def test_a_cpu_launch_or_a_plain_process_is_not_checked():
    from geofidelity_bench.encoders.devices import refuse_shared_gpus

    class NoStore:
        def __getattr__(self, name):
            raise AssertionError("the store was used")

    refuse_shared_gpus(_State(0, 2, "cpu"), store=NoStore(), identity="x")
    refuse_shared_gpus(_State(0, 1, "cuda:0"), store=NoStore(), identity="x")


def test_distributed_state_refuses_two_processes_on_one_gpu(monkeypatch):
    """distributed_state itself runs the check, before any collective; accelerate's PartialState,
    the process group's store and the GPU's properties are replaced at their boundaries."""
    import threading
    import types

    import accelerate
    from torch.distributed import distributed_c10d

    from geofidelity_bench.encoders import devices

    store = torch.distributed.HashStore()
    local = threading.local()

    class FakePartialState:
        _shared_state: dict = {}

        def __init__(self, cpu=False, **kwargs):
            self.process_index, self.num_processes = local.rank, 2
            self.device = torch.device("cpu" if cpu else "cuda:0")

    _fake_gpus(monkeypatch, 1)
    monkeypatch.setattr(accelerate, "PartialState", FakePartialState)
    monkeypatch.setattr(distributed_c10d, "_get_default_store", lambda: store)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: types.SimpleNamespace(uuid="GPU-0000", name="fake"))
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    outcome: dict[int, BaseException | None] = {}

    def rank_of(rank: int) -> None:
        local.rank = rank
        try:
            devices.distributed_state(30)
            outcome[rank] = None
        except BaseException as err:  # noqa: BLE001
            outcome[rank] = err

    threads = [threading.Thread(target=rank_of, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert set(outcome) == {0, 1}
    assert all(isinstance(e, devices.ProcessGroupError) and "processes 0 and 1" in str(e)
               for e in outcome.values()), outcome  # before: both went on to the first NCCL collective
