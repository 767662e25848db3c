"""Semantic group shares, the tier-4 gate and the ``segment`` command. Offline: tiny random
Mask2Former and SegFormer models are built from configs, saved to tmp and loaded through
get_segmenter(weights=...), the real loading path, then run on real street photos."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
from PIL import Image

from conftest import _tiny_mask2former_config, _vistas_id2label
from geofidelity_bench.encoders import EmbeddingCache
from geofidelity_bench.images import ImageDecodeError, content_sha256
from geofidelity_bench.segmentation import (
    CITYSCAPES_CLASS_TO_GROUP,
    CITYSCAPES_CLASSES,
    DEFAULT_SEGMENTER,
    GROUP_NAMES,
    LabelMismatchError,
    SegmenterUnavailableError,
    VISTAS_CLASS_TO_GROUP,
    VISTAS_V12_CLASSES,
    check_id2label,
    gaas_shares,
    get_segmenter,
    list_segmenters,
    segment_images,
    segment_named_images,
    shares_from_label_map,
    unlabeled_share,
)
from geofidelity_bench.curation.filters import tier4_gate

HERE = Path(__file__).parent
PHOTOS = sorted((HERE / "data" / "photos").glob("lund_*.jpg"))

# docs/benchmark.md section 5, Metrics, written out again here (independently of metrics.composition).
SPEC_GROUPS = {
    "road": {13, 14, 23, 24},
    "sidewalk": {15, 11, 2, 8, 9},
    "building": {17, 6, 16, 18, 3, 5},
    "vehicle": set(range(52, 65)),
    "person": {19, 20, 21, 22},
    "vegetation": {30, 29, 25},
    "sky": {27},
    "pole": {45, 47, 44},
    "sign": {48, 49, 50, 46, 35, 32},
    "water": {31},
    "snow": {28},
    "other": {0, 1, 4, 26, 33, 34, 36, 37, 38, 39, 40, 41, 42, 43, 51},
}
SPEC_ORDER = ["road", "sidewalk", "building", "vehicle", "person", "vegetation", "sky", "pole", "sign", "water", "snow", "other"]
GAAS_ORDER = ["road", "sidewalk", "building", "vehicle", "vegetation", "sky", "pole", "sign"]


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


# -- tiny models, saved the way real weights are ---------------------------------------------------


@pytest.fixture(scope="session")
def tiny_segformer_dir(tmp_path_factory) -> Path:
    import torch
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    torch.manual_seed(1)
    cfg = SegformerConfig(
        num_encoder_blocks=4, depths=[1, 1, 1, 1], sr_ratios=[8, 4, 2, 1], hidden_sizes=[8, 16, 16, 16],
        num_attention_heads=[1, 1, 1, 1], decoder_hidden_size=16, mlp_ratios=[2, 2, 2, 2],
        id2label=dict(enumerate(CITYSCAPES_CLASSES)), label2id={c: i for i, c in enumerate(CITYSCAPES_CLASSES)},
    )
    path = tmp_path_factory.mktemp("tiny-segformer")
    SegformerForSemanticSegmentation(cfg).eval().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def m2f(tiny_m2f_dir):
    return get_segmenter("mask2former-vistas", weights=tiny_m2f_dir, device="cpu", input_size=64, max_input_size=128)


class ForwardCounter:
    """Counts real calls of the segmenter's torch model (a hook, not a mock)."""

    def __init__(self, module) -> None:
        self.calls = self.images = 0
        self._handle = module.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        x = args[0] if args else kwargs["pixel_values"]
        self.calls += 1
        self.images += int(x.shape[0])

    def close(self) -> None:
        self._handle.remove()


def _check_shares(shares: np.ndarray, n: int) -> None:
    assert shares.shape == (n, 12) and shares.dtype == np.float32
    assert np.isfinite(shares).all() and (shares >= 0).all() and (shares <= 1).all()
    assert (shares.sum(axis=1) <= 1 + 1e-6).all()


# -- surface ---------------------------------------------------------------------------------------


def test_the_tier4_gate_and_the_shares_table_are_curations():
    # segmentation never imports curation (docs/ARCHITECTURE.md): the gate and the segment command's
    # table that applies it live in curation/filters.py only
    import geofidelity_bench.segmentation as segmentation
    from geofidelity_bench.curation import filters

    assert filters.tier4_gate is tier4_gate and callable(filters.shares_table) and callable(filters.write_shares_table)
    for name in ("tier4_gate", "TIER4_BOUNDS", "urbanness", "shares_table", "write_shares_table", "nope"):
        with pytest.raises(AttributeError, match=f"no attribute '{name}'"):
            getattr(segmentation, name)


def test_import_is_light():
    code = (
        "import sys; import geofidelity_bench.segmentation, geofidelity_bench.cli.segment; "
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_registry():
    assert DEFAULT_SEGMENTER == "mask2former-vistas"
    assert list_segmenters() == ["mask2former-vistas", "segformer-cityscapes"]
    with pytest.raises(ValueError, match="unknown segmenter 'nope'.*mask2former-vistas"):
        get_segmenter("nope")


# -- label sets and group tables -------------------------------------------------------------------


def test_vistas_mapping_is_the_spec_table():
    assert list(GROUP_NAMES) == SPEC_ORDER
    assert len(VISTAS_V12_CLASSES) == 65 and VISTAS_CLASS_TO_GROUP.shape == (65,)
    for c in range(65):
        expected = [g for g, ids in SPEC_GROUPS.items() if c in ids]
        got = VISTAS_CLASS_TO_GROUP[c]
        assert (GROUP_NAMES[got] if got >= 0 else None) == (expected[0] if expected else None), c
    assert set(np.flatnonzero(VISTAS_CLASS_TO_GROUP < 0)) == {7, 10, 12}  # in no group: unlabeled
    readable = {i: r for i, (_, r) in enumerate(VISTAS_V12_CLASSES)}
    for i, name in {0: "Bird", 1: "Ground Animal", 2: "Curb", 3: "Fence", 7: "Bike Lane", 13: "Road", 15: "Sidewalk",
                    17: "Building", 27: "Sky", 30: "Vegetation", 31: "Water", 45: "Pole", 50: "Traffic Sign (Front)",
                    55: "Car", 64: "Ego Vehicle"}.items():
        assert readable[i] == name
    assert VISTAS_V12_CLASSES[13][0] == "construction--flat--road"


def test_cityscapes_mapping():
    assert len(CITYSCAPES_CLASSES) == 19
    expected = {
        "road": "road", "sidewalk": "sidewalk", "building": "building", "wall": "building", "fence": "building",
        "pole": "pole", "traffic light": "sign", "traffic sign": "sign", "vegetation": "vegetation",
        "terrain": "vegetation", "sky": "sky", "person": "person", "rider": "person", "car": "vehicle",
        "truck": "vehicle", "bus": "vehicle", "train": "vehicle", "motorcycle": "vehicle", "bicycle": "vehicle",
    }
    assert {c: GROUP_NAMES[CITYSCAPES_CLASS_TO_GROUP[i]] for i, c in enumerate(CITYSCAPES_CLASSES)} == expected


def test_shares_of_a_synthetic_label_map_are_hand_counts():
    lm = np.array(
        [
            [27, 27, 27, 27, 27],  # 5 sky
            [17, 17, 6, 30, 29],  # 3 building (building, wall), 2 vegetation (vegetation, terrain)
            [55, 13, 23, 15, 2],  # 1 vehicle, 2 road (road, crosswalk marking), 2 sidewalk (sidewalk, curb)
            [7, 10, 12, 45, 31],  # 3 unlabeled (bike lane, parking, rail track), 1 pole, 1 water
        ],
        dtype=np.uint8,
    )
    s = shares_from_label_map(lm)
    hand = {"sky": 5, "building": 3, "vegetation": 2, "vehicle": 1, "road": 2, "sidewalk": 2, "pole": 1, "water": 1}
    assert s.tolist() == [hand.get(g, 0) / 20 for g in SPEC_ORDER]
    assert unlabeled_share(s)[0] == pytest.approx(3 / 20)
    cs = shares_from_label_map(np.array([[0, 1, 3, 9, 16, 12]]), CITYSCAPES_CLASS_TO_GROUP)
    assert cs[GROUP_NAMES.index("building")] == pytest.approx(1 / 6)
    assert cs[GROUP_NAMES.index("vehicle")] == cs[GROUP_NAMES.index("person")] == pytest.approx(1 / 6)
    assert cs.sum() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="outside 0..64"):
        shares_from_label_map(np.array([[65]]))
    with pytest.raises(ValueError, match="integer"):
        shares_from_label_map(np.array([[1.0]]))


def test_both_label_spellings_are_accepted():
    for id2label in (
        _vistas_id2label(0),
        _vistas_id2label(1),
        {i: n.upper().replace(" ", "_") for i, n in _vistas_id2label(1).items()},
        {str(i): n for i, n in _vistas_id2label(0).items()},
    ):
        labels = check_id2label(id2label, VISTAS_V12_CLASSES, segmenter="s", weights="w", label_set="Vistas")
        assert len(labels) == 65
    swapped = _vistas_id2label(1)
    swapped[13], swapped[55] = swapped[55], swapped[13]
    with pytest.raises(LabelMismatchError, match=r"id 13 is 'Car', expected 'construction--flat--road' or 'Road'"):
        check_id2label(swapped, VISTAS_V12_CLASSES, segmenter="s", weights="w", label_set="Vistas")


def test_a_model_with_other_labels_is_rejected(tmp_path):
    generic = tmp_path / "generic"
    _tiny_mask2former_config({i: f"LABEL_{i}" for i in range(65)}).save_pretrained(generic)
    with pytest.raises(LabelMismatchError) as info:
        get_segmenter("mask2former-vistas", weights=generic, device="cpu")
    msg = str(info.value)
    assert "id 0 is 'LABEL_0'" in msg and "'Bird'" in msg and "Mapillary Vistas v1.2" in msg and str(generic) in msg

    cityscapes = tmp_path / "cityscapes"
    _tiny_mask2former_config(dict(enumerate(CITYSCAPES_CLASSES))).save_pretrained(cityscapes)
    with pytest.raises(LabelMismatchError, match="19 classes.*65 classes"):
        get_segmenter("mask2former-vistas", weights=cityscapes, device="cpu")


def test_wrong_model_type_is_rejected(tiny_segformer_dir):
    with pytest.raises(SegmenterUnavailableError, match="'segformer' model"):
        get_segmenter("mask2former-vistas", weights=tiny_segformer_dir, device="cpu")


# -- missing weights -------------------------------------------------------------------------------


def test_missing_default_weights_name_the_id_and_the_offline_way(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    with pytest.raises(SegmenterUnavailableError) as info:
        get_segmenter("mask2former-vistas", device="cpu")
    msg = str(info.value)
    assert "facebook/mask2former-swin-large-mapillary-vistas-semantic" in msg
    assert "--segmenter-weights PATH" in msg and "HF_HUB_OFFLINE" in msg
    with pytest.raises(SegmenterUnavailableError, match="nvidia/segformer-b5-finetuned-cityscapes-1024-1024"):
        get_segmenter("segformer", device="cpu")


def test_a_local_path_that_is_not_a_saved_model(tmp_path):
    with pytest.raises(SegmenterUnavailableError, match="not a directory saved with save_pretrained"):
        get_segmenter("mask2former-vistas", weights=tmp_path / "missing", device="cpu")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SegmenterUnavailableError, match="--segmenter-weights"):
        get_segmenter("mask2former-vistas", weights=tmp_path / "empty", device="cpu")


# -- end to end ------------------------------------------------------------------------------------


def test_mask2former_end_to_end_and_cache(m2f, tiny_m2f_dir, tmp_path):
    photos = PHOTOS[:3]
    counter = ForwardCounter(m2f.model)
    try:
        cache = EmbeddingCache(tmp_path / "cache")
        first, stats = segment_images(m2f, photos, cache=cache, batch_size=2, progress=False, return_stats=True)
        _check_shares(first, 3)
        assert (counter.calls, counter.images) == (2, 3)  # same-size photos share a forward call
        assert (stats.total, stats.from_cache, stats.computed, stats.forward_images, stats.forward_calls) == (3, 0, 3, 3, 2)

        counter.calls = counter.images = 0
        second, stats = segment_images(
            m2f, photos, cache=EmbeddingCache(tmp_path / "cache"), progress=False, return_stats=True
        )
        assert counter.calls == 0 and str(stats) == "3 from cache, 0 computed"
        np.testing.assert_array_equal(first, second)

        names, third, stats = segment_named_images(
            m2f, [(p.name, p) for p in [PHOTOS[3], *photos]], cache=cache, progress=False
        )
        assert counter.images == 1 and str(stats) == "3 from cache, 1 computed" and names[0] == PHOTOS[3].name
        np.testing.assert_array_equal(third[1:], first)
    finally:
        counter.close()

    cfg = m2f.config
    json.dumps(cfg, allow_nan=False)
    assert cfg["weights"] == str(tiny_m2f_dir.resolve()) and len(cfg["weights_sha256"]) == 64
    assert cfg["input"]["input_size"] == 64 and cfg["input"]["max_input_size"] == 128
    assert cfg["label_mapping"]["road"] == [[13, "Road"], [14, "Service Lane"], [23, "Lane Marking - Crosswalk"],
                                            [24, "Lane Marking - General"]]
    assert cfg["unlabeled_classes"] == [[7, "Bike Lane"], [10, "Parking"], [12, "Rail Track"]]
    assert cfg["unsupported_groups"] == [] and "post_process_semantic_segmentation" in cfg["post_processing"]
    assert cfg["device"] == "cpu" and len(m2f.config_hash) == 64
    assert (cache.root / m2f.config_hash).is_dir()
    other = get_segmenter("mask2former", weights=tiny_m2f_dir, device="cpu", input_size=96, max_input_size=128)
    assert other.config_hash != m2f.config_hash  # the input size is part of the key


def test_shares_are_the_counts_of_the_transformers_label_map(m2f):
    import torch

    img = Image.open(PHOTOS[0]).convert("RGB")
    inputs = m2f.processor(images=[img], return_tensors="pt")
    with torch.inference_mode():
        outputs = m2f.model(pixel_values=inputs["pixel_values"])
    lm = m2f.processor.post_process_semantic_segmentation(outputs, target_sizes=[(img.height, img.width)])[0].numpy()
    assert lm.shape == (img.height, img.width)
    expected = shares_from_label_map(lm)
    np.testing.assert_allclose(m2f.segment([img], progress=False)[0], expected, atol=1e-7)
    assert len(np.unique(lm)) > 1  # the tiny model is not trivially constant


def test_images_of_other_sizes_are_not_padded_into_each_other(m2f):
    small = Image.open(PHOTOS[1]).convert("RGB").resize((120, 200))
    photo = Image.open(PHOTOS[0]).convert("RGB")
    alone = m2f.segment([small], progress=False)
    calls = m2f.forward_calls
    together = m2f.segment([photo, small], batch_size=2, progress=False)
    assert m2f.forward_calls - calls == 2  # two preprocessed sizes: two forward calls
    np.testing.assert_allclose(together[1], alone[0], atol=1e-7)


def test_segformer_end_to_end(tiny_segformer_dir, tmp_path):
    seg = get_segmenter("segformer-cityscapes", weights=tiny_segformer_dir, device="cpu", input_size=64)
    shares = segment_images(seg, PHOTOS[:2], cache=EmbeddingCache(tmp_path), batch_size=4, progress=False)
    _check_shares(shares, 2)
    np.testing.assert_allclose(shares.sum(axis=1), 1.0, atol=1e-6)  # every Cityscapes class is in a group
    for g in ("water", "snow", "other"):
        assert (shares[:, GROUP_NAMES.index(g)] == 0).all()
    cfg = seg.config
    assert cfg["unsupported_groups"] == ["water", "snow", "other"]
    assert cfg["label_mapping"]["vegetation"] == [[8, "vegetation"], [9, "terrain"]]
    assert seg.forward_calls == 1


def test_bad_image_is_named_and_earlier_shares_are_kept(m2f, tmp_path):
    cache = EmbeddingCache(tmp_path)
    items = [("good photo", PHOTOS[2].read_bytes()), ("broken.jpg", b"not an image")]
    with pytest.raises(ImageDecodeError, match="broken.jpg"):
        segment_named_images(m2f, items, cache=cache, batch_size=4, progress=False)
    assert content_sha256(PHOTOS[2].read_bytes()) in cache.keys(m2f)


# -- GAAS on the shares ----------------------------------------------------------------------------


def test_gaas_on_segmenter_shares():
    from scipy.spatial.distance import jensenshannon

    from geofidelity_bench.metrics import gaas

    rng = np.random.default_rng(0)
    a = rng.dirichlet(np.ones(13), size=9)[:, :12]  # 12 group shares + an unlabeled remainder
    b = rng.dirichlet(np.ones(13) * 0.5, size=7)[:, :12]
    ga, gb = gaas_shares(a), gaas_shares(b)
    assert ga.shape == (9, 8)
    np.testing.assert_array_equal(ga, a[:, [SPEC_ORDER.index(g) for g in GAAS_ORDER]])
    assert gaas(ga, ga) == 0.0

    def hist(col):
        h = np.histogram(col, bins=10, range=(0, 1))[0] + 1e-8
        return h / h.sum()

    expected = np.mean([jensenshannon(hist(ga[:, k]), hist(gb[:, k]), base=2) for k in range(8)])
    assert gaas(ga, gb) == pytest.approx(expected, abs=1e-12)
    assert gaas_shares(a[0]).shape == (1, 8)
    with pytest.raises(ValueError, match="12 columns"):
        gaas_shares(ga)


# -- the tier-4 gate -------------------------------------------------------------------------------

PASSING = {"sky": 0.2, "building": 0.3, "road": 0.25, "sidewalk": 0.1, "vehicle": 0.05, "vegetation": 0.1}


@pytest.mark.parametrize(
    "group, at_bound, beyond",
    [
        ("sky", 0.01, 0.01 - 1e-9), ("sky", 0.55, 0.55 + 1e-9),
        ("building", 0.03, 0.03 - 1e-9), ("building", 0.70, 0.70 + 1e-9),
        ("road", 0.01, 0.01 - 1e-9), ("road", 0.55, 0.55 + 1e-9),
        ("vehicle", 0.40, 0.40 + 1e-9), ("vegetation", 0.80, 0.80 + 1e-9),
    ],
)
def test_tier4_bounds_are_inclusive(group, at_bound, beyond):
    shares = dict(PASSING, **{group: at_bound})
    if group == "vehicle":  # keep urbanness positive: 0.3 + 0.03 - 0.30 = 0.03 would fail it
        shares["building"] = 0.6
    passed, measured = tier4_gate(shares)
    assert passed and measured[group] == at_bound and measured["failed"] == []
    passed, measured = tier4_gate(dict(shares, **{group: beyond}))
    assert not passed and measured["failed"] == [group]


def test_tier4_urbanness():
    # building + 0.3 sidewalk - max(0, vehicle - 0.1) - max(0, road - 0.3), exactly at 0.05, and just below
    at = {"sky": 0.2, "building": 0.26, "road": 0.45, "sidewalk": 0.1, "vehicle": 0.19, "vegetation": 0.0}
    passed, measured = tier4_gate(at)
    assert measured["urbanness"] == pytest.approx(0.26 + 0.03 - 0.09 - 0.15) == pytest.approx(0.05)
    assert passed, measured
    below = dict(at, building=0.26 - 1e-9)
    passed, measured = tier4_gate(below)
    assert not passed and measured["failed"] == ["urbanness"]
    # vehicle at most 0.10 and road at most 0.30 cost nothing
    assert tier4_gate(dict(PASSING, building=0.05, sidewalk=0.0, vehicle=0.10, road=0.30))[0]
    assert not tier4_gate(dict(PASSING, building=0.05, sidewalk=0.0, vehicle=0.10 + 1e-9, road=0.30))[0]


def test_tier4_takes_a_vector_or_a_mapping():
    vec = np.zeros(12)
    for g, v in PASSING.items():
        vec[SPEC_ORDER.index(g)] = v
    assert tier4_gate(vec) == tier4_gate(PASSING) == tier4_gate(dict(PASSING, water=0.0, unlabeled=0.2))
    with pytest.raises(ValueError, match="missing sidewalk"):
        tier4_gate({k: v for k, v in PASSING.items() if k != "sidewalk"})
    with pytest.raises(ValueError, match="12-vector"):
        tier4_gate(np.zeros(8))
    with pytest.raises(ValueError, match="sky"):
        tier4_gate(dict(PASSING, sky=float("nan")))


# -- the segment command ---------------------------------------------------------------------------


def test_segment_command_writes_the_table(tiny_m2f_dir, tiny_benchmark, tmp_path, capsys):
    import pandas as pd

    from geofidelity_bench.benchmark import load_benchmark, save_benchmark
    from geofidelity_bench.cli import main

    folder = save_benchmark(tiny_benchmark, tmp_path / "bench")
    out = tmp_path / "out" / "shares.parquet"
    argv = ["segment", "--benchmark", str(folder), "--segmenter-weights", str(tiny_m2f_dir), "--device", "cpu",
            "--cache-dir", str(tmp_path / "cache"), "--batch-size", "16", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    bench = load_benchmark(folder)
    n = len(bench.references)
    assert f"{n} images: 0 from cache, {n} computed" in capsys.readouterr().out
    table = pd.read_parquet(out)
    assert len(table) == n and list(table["reference_id"]) == [r.reference_id for r in bench.references]
    shares = table[[f"share_{g}" for g in SPEC_ORDER]].to_numpy()
    assert (shares >= 0).all() and (shares.sum(axis=1) <= 1 + 1e-6).all()
    np.testing.assert_allclose(shares.sum(axis=1) + table["share_unlabeled"], 1.0, atol=1e-6)
    assert set(table["role"]) == {"heldout", "gallery"} and table["tier4_pass"].dtype == bool
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["segmenter"]["config_hash"] == table["segmenter_config_hash"].iloc[0]
    assert meta["segmenter"]["config"]["weights"] == str(tiny_m2f_dir.resolve())

    csv = tmp_path / "shares.csv"
    assert main(argv[:-1] + [str(csv)]) == 0
    assert f"{n} images: {n} from cache, 0 computed" in capsys.readouterr().out
    np.testing.assert_allclose(pd.read_csv(csv)[[f"share_{g}" for g in SPEC_ORDER]].to_numpy(), shares, atol=1e-7)


def test_segment_command_offline_without_weights(monkeypatch, tmp_path, capsys):
    from huggingface_hub import constants

    from geofidelity_bench.cli import main

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    assert main(["segment", "--device", "cpu", "--cache-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "facebook/mask2former-swin-large-mapillary-vistas-semantic" in err and "--segmenter-weights PATH" in err
    assert main(["segment", "--out", str(tmp_path / "x.txt")]) == 2
    assert "--out must end in .parquet or .csv" in capsys.readouterr().err
