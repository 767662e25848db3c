"""Shared fixtures: small synthetic benchmarks built in memory, offline environment."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
from PIL import Image

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def jpeg_bytes(seed: int, size=(48, 32)) -> bytes:
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def make_block(block_id, city="paris", *, country="FR", side="R", stratum="residential", street=None,
               neighborhood=None, centroid=(48.86, 2.35), **negs):
    from geofidelity_bench.benchmark import Block

    lat, lon = centroid
    return Block(
        block_id=block_id, city=city, country=country, driving_side=side, stratum=stratum, way_id=None,
        street_name=street, neighborhood=neighborhood, highway_tag="residential", length_m=100.0,
        polyline=((lat, lon), (lat + 0.001, lon)), centroid=(lat + 0.0005, lon),
        bbox=(lat, lon, lat + 0.001, lon), **negs,
    )


def make_refs(block_id, n, seed=0):
    from geofidelity_bench.benchmark import ReferenceImage

    return [
        ReferenceImage(
            reference_id=f"{block_id}__{i:03d}", image_id=f"img_{block_id}_{i}", block_id=block_id, lat=1.0, lon=2.0,
            captured_at=1_600_000_000_000 + i, compass_angle=None if i % 2 else 90.0, sun_elevation_deg=30.0,
            camera_type="perspective", quality_score=0.5, source_url=f"https://example.org/{i}",
            license="CC-BY-SA-4.0", attribution="test", image_bytes=jpeg_bytes(seed * 1000 + i),
        )
        for i in range(n)
    ]


@pytest.fixture
def tiny_benchmark():
    from geofidelity_bench.benchmark import Benchmark

    blocks = [
        make_block("a1", street="Rue A", neighborhood="Marais", neg_same_neighborhood="a2", neg_same_city="a2",
                   neg_same_driving_side="b1", neg_random_city="b1"),
        make_block("a2", street="Rue B", neighborhood="Marais", neg_same_city="a1", neg_random_city="b1"),
        make_block("b1", city="berlin", country="DE", street="Unter den Linden", neighborhood="Mitte",
                   centroid=(52.52, 13.40), neg_random_city="a1"),
    ]
    refs = make_refs("a1", 6, 1) + make_refs("a2", 5, 2) + make_refs("b1", 3, 3)
    return Benchmark(blocks, refs, name="tiny")


# -- a tiny random Mask2Former with the Mapillary Vistas labels, saved like real weights -----------


def _vistas_id2label(spelling: int = 1) -> dict[int, str]:
    from geofidelity_bench.segmentation import VISTAS_V12_CLASSES

    return {i: names[spelling] for i, names in enumerate(VISTAS_V12_CLASSES)}


def _tiny_mask2former_config(id2label: dict[int, str]):
    from transformers import Mask2FormerConfig, SwinConfig

    swin = SwinConfig(
        image_size=64, patch_size=4, embed_dim=32, depths=[1, 1, 1, 1], num_heads=[1, 1, 1, 1], window_size=4,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    return Mask2FormerConfig(
        backbone_config=swin, use_pretrained_backbone=False, feature_size=32, mask_feature_size=32, hidden_dim=32,
        encoder_feedforward_dim=32, encoder_layers=1, decoder_layers=2, num_attention_heads=2, dim_feedforward=32,
        num_queries=8, id2label=id2label, label2id={v: k for k, v in id2label.items()},
    )


@pytest.fixture(scope="session")
def tiny_m2f_dir(tmp_path_factory):
    import torch
    from transformers import Mask2FormerForUniversalSegmentation

    torch.manual_seed(0)
    model = Mask2FormerForUniversalSegmentation(_tiny_mask2former_config(_vistas_id2label())).eval()
    with torch.no_grad():  # spread queries, classes and masks, so that several classes win somewhere
        model.class_predictor.weight.normal_(0.0, 2.0)
        model.model.transformer_module.queries_features.weight.normal_(0.0, 3.0)
        for name, param in model.named_parameters():
            if "mask_embedder" in name and name.endswith("weight"):
                param.mul_(5.0)
    path = tmp_path_factory.mktemp("tiny-mask2former")
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_m2f_small_dir(tiny_m2f_dir, tmp_path_factory):
    """``tiny_m2f_dir`` with a saved image processor of a small input size (shortest edge 64, longest
    128, as the README's segmenter recipe saves it): a whole-demo GAAS run at the tiny model's scale,
    used as a checkpoint's ``preprocessor_config.json`` is. ``tiny_m2f_dir`` keeps no processor (the
    backend's defaults, 384/1333)."""
    import shutil

    from transformers import Mask2FormerImageProcessor

    path = shutil.copytree(tiny_m2f_dir, tmp_path_factory.mktemp("tiny-mask2former-small") / "model")
    Mask2FormerImageProcessor(size={"shortest_edge": 64, "longest_edge": 128}, size_divisor=32).save_pretrained(path)
    return path


# -- a tiny random CLIP (with a real in-memory-built tokenizer), saved like real weights ----------


def _tiny_tokenizer(tmp):
    """A real CLIPTokenizer from a byte-level vocab and a few merges written to ``tmp``."""
    import json

    from transformers import CLIPTokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    chars = sorted(set(bytes_to_unicode().values()))
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    for c in chars:
        vocab.setdefault(c + "</w>", len(vocab))
    merges = ["s t", "st r", "e e", "e t</w>"]
    for m in merges:
        vocab.setdefault(m.replace(" ", ""), len(vocab))
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "vocab.json").write_text(json.dumps(vocab))
    (tmp / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    return CLIPTokenizer.from_pretrained(tmp)


_TOWER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2)


@pytest.fixture(scope="session")
def tiny_clip_dir(tmp_path_factory):
    import torch
    from transformers import CLIPConfig, CLIPModel

    root = tmp_path_factory.mktemp("tiny-clip")
    tok = _tiny_tokenizer(root / "tok")
    torch.manual_seed(1)
    cfg = CLIPConfig(
        text_config=dict(_TOWER, vocab_size=len(tok), max_position_embeddings=77, bos_token_id=0, eos_token_id=1, pad_token_id=1),
        vision_config=dict(_TOWER, image_size=32, patch_size=8),
        projection_dim=16,
    )
    path = root / "model"
    CLIPModel(cfg).eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


# -- the demo's efficientnet-lite0 embeddings, computed once per session ------------------------------


_DEMO_LITE0_CACHE: dict = {}


def demo_lite0_cache(tmp_path_factory):
    """An embedding cache folder holding the efficientnet-lite0 embeddings of every image an ``evaluate``
    of the demo embeds (gallery, held-out and pool photos), made once per session by such an
    ``evaluate`` (cold); also for helpers that are not fixtures. Never write to it: copy it
    (``warm_demo_cache``)."""
    if "dir" in _DEMO_LITE0_CACHE:
        return _DEMO_LITE0_CACHE["dir"]
    from geofidelity_bench.benchmark import load_benchmark
    from geofidelity_bench.cli import main

    root = tmp_path_factory.mktemp("demo-lite0-cache")
    demo = load_benchmark("demo")
    panel = root / "gen" / "m" / "L0" / demo.block_ids[0]
    panel.mkdir(parents=True)
    for k, w in enumerate(demo.world[:2]):
        (panel / f"{k:02d}.jpg").write_bytes(w.image_bytes)
    assert main(["evaluate", "--benchmark", "demo", "--generated", str(root / "gen"), "--encoder",
                 "efficientnet-lite0", "--out", str(root / "out"), "--cache-dir", str(root / "cache"),
                 "--no-progress", "--no-gaas"]) == 0
    _DEMO_LITE0_CACHE["dir"] = root / "cache"
    return _DEMO_LITE0_CACHE["dir"]


@pytest.fixture(scope="session")
def demo_lite0_cache_dir(tmp_path_factory):
    """:func:`demo_lite0_cache` as a fixture. Never write to it: use ``warm_demo_cache`` (a copy) in a test."""
    return demo_lite0_cache(tmp_path_factory)


@pytest.fixture
def warm_demo_cache(demo_lite0_cache_dir, tmp_path):
    """A fresh copy (the test's own) of ``demo_lite0_cache_dir``: an ``evaluate`` of the demo with
    efficientnet-lite0 and this ``--cache-dir`` embeds only the images that are not the demo's."""
    import shutil

    return shutil.copytree(demo_lite0_cache_dir, tmp_path / "warm-demo-cache")
