"""Encoders, preprocessing, the embedding cache and bad input. Offline: tiny random transformers
models are saved to tmp and loaded through get_encoder(weights=...), the real loading path; the
real EfficientNet-Lite0 (weights from its pip package) runs on real street photos."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
from PIL import Image

from conftest import _TOWER, _tiny_tokenizer
from geofidelity_bench.encoders import (
    DEFAULT_ENCODER,
    OFFLINE_ENCODER,
    EmbeddingCache,
    Encoder,
    EncoderUnavailableError,
    embed_images,
    embed_named_images,
    get_encoder,
    list_encoders,
)
from geofidelity_bench.images import ImageDecodeError, content_sha256, load_image

HERE = Path(__file__).parent
PHOTOS = sorted((HERE / "data" / "photos").glob("lund_*.jpg"))
SCRIPTS = HERE / "scripts"
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406])
IMAGENET_STD = np.array([0.229, 0.224, 0.225])


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


# -- tiny models, saved the way real weights are ---------------------------------------------


@pytest.fixture(scope="session")
def tiny_dinov2_dir(tmp_path_factory) -> Path:
    import torch
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(0)
    model = Dinov2Model(
        Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=224, patch_size=14)
    ).eval()
    path = tmp_path_factory.mktemp("tiny-dinov2")
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_siglip_dir(tmp_path_factory) -> Path:
    import torch
    from transformers import SiglipConfig, SiglipModel

    root = tmp_path_factory.mktemp("tiny-siglip")
    tok = _tiny_tokenizer(root / "tok")
    torch.manual_seed(2)
    cfg = SiglipConfig(
        text_config=dict(_TOWER, vocab_size=len(tok), max_position_embeddings=16, pad_token_id=1, eos_token_id=1, bos_token_id=0),
        vision_config=dict(_TOWER, image_size=32, patch_size=8),
    )
    model = SiglipModel(cfg).eval()
    with torch.no_grad():  # non-trivial scale and bias, so zero_shot_probs must use both
        model.logit_scale.fill_(1.5)
        model.logit_bias.fill_(-3.0)
    path = root / "model"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def dino(tiny_dinov2_dir) -> Encoder:
    return get_encoder("dinov2-base", weights=tiny_dinov2_dir, device="cpu")


@pytest.fixture(scope="module")
def effnet() -> Encoder:
    return get_encoder(OFFLINE_ENCODER, device="cpu")


class ForwardCounter:
    """Counts real calls of the encoder's torch model (a hook, not a mock)."""

    def __init__(self, module) -> None:
        self.calls = 0
        self.images = 0
        self._handle = module.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        x = args[0] if args else kwargs["pixel_values"]
        self.calls += 1
        self.images += int(x.shape[0])

    def close(self) -> None:
        self._handle.remove()


@pytest.fixture
def count_forward():
    counters = []

    def make(encoder: Encoder) -> ForwardCounter:
        counters.append(ForwardCounter(encoder.model))
        return counters[-1]

    yield make
    for c in counters:
        c.close()


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# -- package surface ------------------------------------------------------------------------


def test_import_is_light():
    # What makes the import light: no heavy library loaded. Its time is in benchmarks/bench_stats.py.
    code = (
        "import sys; import geofidelity_bench, geofidelity_bench.encoders; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules and 'accelerate' not in sys.modules, "
        "sorted(m for m in ('torch', 'transformers', 'accelerate') if m in sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)


def test_registry_names_and_aliases():
    names = list_encoders()
    for name in ["dinov2-small", "dinov2-base", "dinov2-large", "dinov2-giant", "clip-vit-b32", "siglip-so400m", "efficientnet-lite0"]:
        assert name in names
    assert {"clip", "siglip"} <= set(list_encoders(include_aliases=True))
    assert DEFAULT_ENCODER == "dinov2-base" and OFFLINE_ENCODER == "efficientnet-lite0"
    with pytest.raises(ValueError, match="unknown encoder 'nope'.*dinov2-base"):
        get_encoder("nope")


def test_missing_hub_weights_say_how_to_run_offline():
    with pytest.raises(EncoderUnavailableError) as info:
        get_encoder("dinov2-base", weights="geofidelity-tests/no-such-model", device="cpu")
    msg = str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert "geofidelity-tests/no-such-model" in msg and "weights=" in msg and "efficientnet-lite0" in msg


def test_missing_default_weights_name_the_hub_id(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    with pytest.raises(EncoderUnavailableError, match="facebook/dinov2-small"):
        get_encoder("dinov2-small", device="cpu")


def test_bad_local_weights(tmp_path, tiny_clip_dir):
    with pytest.raises(EncoderUnavailableError, match="empty-dir"):
        get_encoder("dinov2-base", weights=tmp_path / "empty-dir-missing", device="cpu")
    (tmp_path / "empty-dir").mkdir()
    with pytest.raises(EncoderUnavailableError, match="empty-dir"):
        get_encoder("dinov2-base", weights=tmp_path / "empty-dir", device="cpu")
    with pytest.raises(EncoderUnavailableError, match="'clip' model"):
        get_encoder("dinov2-base", weights=tiny_clip_dir, device="cpu")


def test_half_precision_is_gpu_only(tiny_dinov2_dir):
    with pytest.raises(ValueError, match="GPU only"):
        get_encoder("dinov2-base", weights=tiny_dinov2_dir, device="cpu", dtype="bfloat16")


# -- DINOv2: the reference encoder -----------------------------------------------------------


def _reference_dinov2_input(path: Path) -> np.ndarray:
    """docs/benchmark.md section 4, Embeddings, written out independently: shorter side 256 bicubic, center 224, ImageNet."""
    img = Image.open(path).convert("RGB")
    w, h = img.size
    new = (256, int(256 * h / w)) if w <= h else (int(256 * w / h), 256)
    arr = np.array(img.resize(new, Image.BICUBIC), dtype=np.float64) / 255.0
    top, left = (arr.shape[0] - 224) // 2, (arr.shape[1] - 224) // 2
    arr = arr[top : top + 224, left : left + 224]
    arr = (arr - IMAGENET_MEAN) / IMAGENET_STD
    return arr.transpose(2, 0, 1).astype(np.float32)


def test_dinov2_is_cls_after_final_layernorm(dino, tiny_dinov2_dir):
    import torch
    from transformers import Dinov2Model

    model = Dinov2Model.from_pretrained(tiny_dinov2_dir).eval()
    x = torch.from_numpy(np.stack([_reference_dinov2_input(p) for p in PHOTOS[:2]]))
    with torch.no_grad():
        expected = model(pixel_values=x).last_hidden_state[:, 0].numpy()
    got = dino.embed(PHOTOS[:2])
    assert got.shape == (2, 32) and got.dtype == np.float32 and dino.dim == 32
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-5)


def test_dinov2_config_records_everything(dino, tiny_dinov2_dir):
    cfg = dino.config
    json.dumps(cfg)  # serializable
    assert cfg["encoder"] == "dinov2-base" and cfg["dim"] == 32 and cfg["dtype"] == "float32"
    assert cfg["weights"] == str(Path(tiny_dinov2_dir).resolve()) and cfg["revision"] is None
    assert len(cfg["weights_sha256"]) == 64
    assert "CLS" in cfg["output"] and "layer norm" in cfg["output"]
    pre = cfg["preprocessing"]
    assert (pre["resize"], pre["crop"], pre["interpolation"]) == (256, 224, "bicubic")
    np.testing.assert_allclose(pre["mean"], IMAGENET_MEAN)
    np.testing.assert_allclose(pre["std"], IMAGENET_STD)
    assert cfg["device"] == "cpu"


def test_config_hash_is_stable_and_tracks_weights(dino, tiny_dinov2_dir, tmp_path):
    import torch
    from transformers import Dinov2Config, Dinov2Model

    again = get_encoder("dinov2-base", weights=tiny_dinov2_dir, device="cpu")
    assert again.config_hash == dino.config_hash and len(dino.config_hash) == 64
    cfg = dict(dino.config, device="cuda:3")  # the device is not part of the identity
    from geofidelity_bench.encoders.base import hash_config

    assert hash_config(cfg) == dino.config_hash
    torch.manual_seed(123)
    other = Dinov2Model(Dinov2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64))
    other.save_pretrained(tmp_path / "other")
    assert get_encoder("dinov2-base", weights=tmp_path / "other", device="cpu").config_hash != dino.config_hash


def test_dinov2_deterministic_and_batch_size_invariant(dino):
    a = dino.embed(PHOTOS[:3], batch_size=1)
    b = dino.embed(PHOTOS[:3], batch_size=3)
    c = dino.embed(PHOTOS[:3], batch_size=3)
    np.testing.assert_array_equal(b, c)
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_inputs_of_every_kind_agree(dino):
    path = PHOTOS[0]
    data = path.read_bytes()
    pil = Image.open(path)
    arr = np.asarray(Image.open(path).convert("RGB"))
    out = dino.embed([path, str(path), data, pil, arr])
    for row in out[1:]:
        np.testing.assert_allclose(row, out[0], atol=1e-6)
    assert dino.embed(path).shape == (1, dino.dim)  # a single image is a list of one


# -- CLIP and SigLIP ------------------------------------------------------------------------


def test_clip_image_and_text(tiny_clip_dir):
    import torch
    from transformers import CLIPModel

    enc = get_encoder("clip", weights=tiny_clip_dir, device="cpu")
    assert enc.name == "clip-vit-b32" and enc.dim == 16 and enc.supports_text
    img = enc.embed(PHOTOS[:2])
    assert img.shape == (2, 16) and img.dtype == np.float32
    # independent: OpenAI preprocessing (shorter side to 32, bicubic, center crop, CLIP mean/std)
    model = CLIPModel.from_pretrained(tiny_clip_dir).eval()
    im = Image.open(PHOTOS[0]).convert("RGB")
    w, h = im.size
    im = im.resize((int(32 * w / h), 32), Image.BICUBIC)
    a = np.asarray(im, dtype=np.float64)[:, (im.size[0] - 32) // 2 :][:, :32] / 255.0
    a = (a - [0.48145466, 0.4578275, 0.40821073]) / [0.26862954, 0.26130258, 0.27577711]
    with torch.no_grad():
        ref = model.get_image_features(pixel_values=torch.tensor(a.transpose(2, 0, 1)[None], dtype=torch.float32)).pooler_output
    np.testing.assert_allclose(img[0], ref[0].numpy(), atol=1e-5)

    txt = enc.embed_text(["a street", "a tree"])
    assert txt.shape == (2, 16) and txt.dtype == np.float32
    np.testing.assert_array_equal(txt, enc.embed_text(["a street", "a tree"]))
    np.testing.assert_allclose(enc.embed_text("a street")[0], txt[0], atol=1e-5)  # padding does not matter

    long_text = "street " * 100
    with pytest.warns(UserWarning, match=r"text 'street street.*more than the 77-token"):
        long_emb = enc.embed_text([long_text])
    assert np.isfinite(long_emb).all()
    probs = enc.zero_shot_probs(PHOTOS[:2], ["a street", "a tree", "a dog"])
    assert probs.shape == (2, 3)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)


def test_siglip_zero_shot_matches_model_logits(tiny_siglip_dir):
    import torch
    from transformers import AutoTokenizer, SiglipModel

    enc = get_encoder("siglip", weights=tiny_siglip_dir, device="cpu")
    assert enc.name == "siglip-so400m" and enc.dim == 32
    pre = enc.config["preprocessing"]
    assert pre["resize"] == [32, 32] and pre["crop"] is None and pre["mean"] == [0.5, 0.5, 0.5]
    texts = ["a street", "a steep street", "trees"]
    probs = enc.zero_shot_probs(PHOTOS[:2], texts)

    model = SiglipModel.from_pretrained(tiny_siglip_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_siglip_dir)
    pixels = torch.from_numpy(np.stack([enc.preprocess(p) for p in PHOTOS[:2]]))
    ids = tok(texts, padding="max_length", max_length=16, truncation=True, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=ids, pixel_values=pixels).logits_per_image
    np.testing.assert_allclose(probs, torch.softmax(logits, dim=1).numpy(), atol=1e-5)
    assert enc.embed_text(texts).shape == (3, 32)
    with pytest.warns(UserWarning, match="more than the 16-token"):
        enc.embed_text(["street " * 20])


# -- the offline encoder on real photos ------------------------------------------------------


def test_efficientnet_on_real_photos(effnet):
    assert effnet.dim == 1280 and effnet.name == "efficientnet-lite0"
    cfg = effnet.config
    assert cfg["preprocessing"]["crop"] == 224 and cfg["preprocessing"]["resize"] == 256
    np.testing.assert_allclose(cfg["preprocessing"]["mean"], IMAGENET_MEAN)
    gray = np.full((256, 341, 3), 128, dtype=np.uint8)
    emb = effnet.embed([PHOTOS[0], PHOTOS[1], gray])
    assert emb.shape == (3, 1280) and np.isfinite(emb).all()
    assert _cos(emb[0], emb[1]) > _cos(emb[0], emb[2]) + 0.2
    one_by_one = effnet.embed(PHOTOS[:3], batch_size=1)
    together = effnet.embed(PHOTOS[:3], batch_size=3)
    np.testing.assert_allclose(one_by_one, together, atol=1e-5)


# -- the cache ------------------------------------------------------------------------------


def test_cache_hits_make_no_forward_calls(dino, tmp_path, count_forward):
    cache = EmbeddingCache(tmp_path / "cache")
    counter = count_forward(dino)
    first = embed_images(dino, PHOTOS[:3], cache=cache, batch_size=2, progress=False)
    assert (counter.calls, counter.images) == (2, 3)
    np.testing.assert_allclose(first, dino.embed(PHOTOS[:3]), atol=1e-6)

    counter.calls = counter.images = 0
    second = embed_images(dino, PHOTOS[:3], cache=EmbeddingCache(tmp_path / "cache"), progress=False)
    assert counter.calls == 0
    np.testing.assert_array_equal(first, second)

    # partial hits: only the new photo is computed; in-run duplicates are computed once
    names, arr, stats = embed_named_images(
        dino, [(p.name, p) for p in [PHOTOS[3], *PHOTOS[:3], PHOTOS[3]]], cache=cache, batch_size=8, progress=False
    )
    assert (counter.calls, counter.images) == (1, 1)
    assert names[0] == PHOTOS[3].name and arr.shape == (5, dino.dim)
    assert (stats.total, stats.from_cache, stats.computed, stats.forward_images) == (5, 3, 2, 1)
    assert str(stats) == "3 from cache, 2 computed"
    np.testing.assert_array_equal(arr[1:4], first)
    np.testing.assert_array_equal(arr[0], arr[4])


def test_cache_layout_and_config(dino, tmp_path):
    cache = EmbeddingCache(tmp_path)
    embed_images(dino, PHOTOS[:2], cache=cache, progress=False)
    folder = tmp_path / dino.config_hash
    stored = json.loads((folder / "encoder.json").read_text())
    assert stored["config_hash"] == dino.config_hash and "device" not in stored
    assert stored["preprocessing"] == dino.config["preprocessing"]
    assert len(list(folder.glob("shard-*.safetensors"))) == 1
    assert not list(folder.glob(".tmp-*"))
    assert EmbeddingCache(tmp_path).keys(dino) == {content_sha256(p) for p in PHOTOS[:2]}
    assert cache.config(dino)["encoder"] == "dinov2-base"
    # a different encoder config never sees these rows
    assert EmbeddingCache(tmp_path).get("0" * 64, [content_sha256(PHOTOS[0])]) == {}


def test_cache_compact_keeps_everything(dino, tmp_path):
    cache = EmbeddingCache(tmp_path)
    for p in PHOTOS:
        embed_images(dino, [p], cache=cache, progress=False)
    before = embed_images(dino, PHOTOS, cache=cache, progress=False)
    assert len(list((tmp_path / dino.config_hash).glob("shard-*"))) == len(PHOTOS)
    cache.compact(dino)
    assert len(list((tmp_path / dino.config_hash).glob("shard-*"))) == 1
    np.testing.assert_array_equal(embed_images(dino, PHOTOS, cache=EmbeddingCache(tmp_path), progress=False), before)


def test_default_cache_dir(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setenv("GEOFIDELITY_CACHE", str(tmp_path / "env-cache"))
    assert EmbeddingCache().root == tmp_path / "env-cache"
    monkeypatch.delenv("GEOFIDELITY_CACHE")
    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path / "hf-home"))
    assert EmbeddingCache().root == tmp_path / "hf-home" / "geofidelity_bench" / "embeddings"
    import geofidelity_bench

    with pytest.raises(ValueError, match="inside the package"):
        EmbeddingCache(Path(geofidelity_bench.__file__).parent / "cache")


def test_foreign_file_in_cache_is_ignored(dino, tmp_path):
    cache = EmbeddingCache(tmp_path)
    embed_images(dino, PHOTOS[:1], cache=cache, progress=False)
    (tmp_path / dino.config_hash / "shard-zzz-broken.safetensors").write_bytes(b"not a shard")
    with pytest.warns(UserWarning, match="unreadable embedding cache shard"):
        hits = EmbeddingCache(tmp_path).get(dino, [content_sha256(PHOTOS[0])])
    assert len(hits) == 1


def test_concurrent_writers(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # spawned children get the parent's sys.path
    import cache_writer

    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    n_shards, rows = 30, 4
    procs = [ctx.Process(target=cache_writer.write_shards, args=(str(tmp_path), w, n_shards, rows, barrier)) for w in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    cache = EmbeddingCache(tmp_path)
    expected = cache_writer.expected_keys(2, n_shards, rows)
    got = cache.get(cache_writer.CONFIG_HASH, expected)
    assert set(got) == expected
    for k, v in got.items():
        np.testing.assert_array_equal(v, cache_writer.value_for(k))
    assert not list((tmp_path / cache_writer.CONFIG_HASH).glob(".tmp-*"))


# -- bad and unusual input ------------------------------------------------------------------


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.fixture
def bad_files(tmp_path) -> dict[str, Path]:
    jpeg = PHOTOS[0].read_bytes()
    rng = np.random.default_rng(0)
    return {
        "zero-byte": _write(tmp_path / "empty.jpg", b""),
        "truncated": _write(tmp_path / "truncated.jpg", jpeg[: len(jpeg) // 2]),
        "random-bytes": _write(tmp_path / "noise.jpg", rng.integers(0, 256, 4096, dtype=np.uint8).tobytes()),
        "text-file": _write(tmp_path / "notes.png", b"this is not an image\n" * 20),
        "missing": tmp_path / "does-not-exist.jpg",
    }


@pytest.mark.parametrize("kind", ["zero-byte", "truncated", "random-bytes", "text-file", "missing"])
def test_bad_files_are_rejected_by_name(dino, bad_files, kind, tmp_path):
    path = bad_files[kind]
    with pytest.raises(ImageDecodeError, match=path.name):
        embed_images(dino, [PHOTOS[0], path], cache=EmbeddingCache(tmp_path / "c"), progress=False)
    with pytest.raises(ImageDecodeError, match=path.name):
        dino.embed([path])


def test_bad_bytes_are_named_by_given_name(dino):
    with pytest.raises(ImageDecodeError, match="upload-7.jpg"):
        embed_images(dino, [b"\xff\xd8 nope"], names=["upload-7.jpg"], progress=False)
    data = PHOTOS[0].read_bytes()
    lazy = Image.open(io.BytesIO(data[: len(data) // 2]))  # opens fine, fails when decoded
    with pytest.raises(ImageDecodeError, match="upload-8.jpg"):
        embed_images(dino, [lazy], names=["upload-8.jpg"], progress=False)
    with pytest.raises(ImageDecodeError, match="upload-9.jpg"):
        dino.embed([Image.open(io.BytesIO(data[: len(data) // 2]))], names=["upload-9.jpg"])


def _mode_images(tmp_path: Path) -> dict[str, Path]:
    base = Image.open(PHOTOS[0]).convert("RGB").resize((120, 90))
    out = {}
    for mode in ["L", "LA", "P", "RGBA"]:
        out[mode] = tmp_path / f"mode_{mode}.png"
        base.convert(mode).save(out[mode])
    out["P+transparency"] = tmp_path / "mode_Pt.png"
    base.convert("P").save(out["P+transparency"], transparency=0)
    out["CMYK"] = tmp_path / "mode_CMYK.jpg"
    base.convert("CMYK").save(out["CMYK"], quality=90)
    gray16 = (np.asarray(base.convert("L"), dtype=np.uint16) * 257).astype(np.uint16)
    out["I;16"] = tmp_path / "mode_I16.png"
    Image.fromarray(gray16).save(out["I;16"])
    return out


def test_every_mode_embeds(dino, tmp_path):
    files = _mode_images(tmp_path)
    assert Image.open(files["I;16"]).mode.startswith("I")
    assert Image.open(files["CMYK"]).mode == "CMYK"
    emb = embed_images(dino, list(files.values()), progress=False)
    assert emb.shape == (len(files), dino.dim) and np.isfinite(emb).all()
    # the same pictures as in-memory PIL images
    pil = [Image.open(p) for p in files.values()]
    np.testing.assert_allclose(dino.embed(pil), emb, atol=1e-5)
    # a 16-bit gray image is the 8-bit gray image, rescaled, not clipped to white
    gray8 = dino.embed([files["L"]])[0]
    np.testing.assert_allclose(emb[list(files).index("I;16")], gray8, atol=1e-3)


def test_exif_orientation_is_applied(dino, tmp_path):
    upright = Image.open(PHOTOS[0]).convert("RGB")
    stored = upright.transpose(Image.Transpose.ROTATE_90)  # sensor orientation
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 clockwise to display"
    stored.save(tmp_path / "with_exif.png", exif=exif)
    stored.save(tmp_path / "no_exif.png")
    upright.save(tmp_path / "upright.png")
    assert load_image(tmp_path / "with_exif.png").size == upright.size
    emb = dino.embed([tmp_path / "with_exif.png", tmp_path / "upright.png", tmp_path / "no_exif.png"])
    np.testing.assert_allclose(emb[0], emb[1], atol=1e-6)
    assert not np.allclose(emb[0], emb[2], atol=1e-3)


def test_image_smaller_than_crop(dino, effnet):
    tiny = np.random.default_rng(0).integers(0, 256, (7, 10, 3), dtype=np.uint8)  # 10x7
    for enc in (dino, effnet):
        assert enc.preprocess(tiny).shape == (3, 224, 224)
        out = enc.embed([tiny])
        assert out.shape == (1, enc.dim) and np.isfinite(out).all()


@pytest.mark.parametrize("side", [40, 64])  # 1600 px: PIL warns; 4096 px: PIL refuses
def test_decompression_bomb_is_rejected(dino, tmp_path, monkeypatch, side):
    path = tmp_path / f"bomb{side}.png"
    Image.new("RGB", (side, side), (90, 90, 90)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(ImageDecodeError, match=f"bomb{side}.png.*too large"):
        embed_images(dino, [path], progress=False)


@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_bad_file_keeps_earlier_embeddings(dino, bad_files, tmp_path, batch_size, count_forward):
    cache = EmbeddingCache(tmp_path / "cache")
    items = [PHOTOS[0], PHOTOS[1], bad_files["truncated"], PHOTOS[2]]
    with pytest.raises(ImageDecodeError, match="truncated.jpg"):
        embed_images(dino, items, cache=cache, batch_size=batch_size, progress=False)
    kept = EmbeddingCache(tmp_path / "cache").keys(dino)
    assert kept == {content_sha256(PHOTOS[0]), content_sha256(PHOTOS[1])}
    counter = count_forward(dino)
    again = embed_images(dino, PHOTOS[:3], cache=cache, batch_size=batch_size, progress=False)
    assert counter.images == 1
    np.testing.assert_allclose(again, dino.embed(PHOTOS[:3]), atol=1e-6)


def test_progress_bar_can_be_shown_or_hidden(dino, capsys):
    embed_images(dino, PHOTOS[:2], progress=True)
    assert "embedding (dinov2-base)" in capsys.readouterr().err
    embed_images(dino, PHOTOS[:2], progress=False)
    assert "embedding" not in capsys.readouterr().err


def test_float_arrays_hash_and_embed(dino):
    arr = np.random.default_rng(1).random((30, 40, 3))
    a = embed_images(dino, [arr], cache=None, progress=False)
    b = dino.embed([(arr * 255).round().astype(np.uint8)])
    np.testing.assert_allclose(a, b, atol=1e-6)
