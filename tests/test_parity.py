"""Pixel parity with the paper's image pipeline (docs/benchmark.md section 12, the parity table).

Every expected value here is computed independently of the package, from the documented
behaviour of the library the paper ran:

* torchvision ``Resize(256, bicubic)`` on a PIL image: shorter side to 256, longer side
  ``int(256 * long / short)``, ``PIL.Image.resize`` (no call when the size already matches);
  ``CenterCrop(224)``: top-left ``int(round((size - 224) / 2.0))`` (Python round, half to even);
  ``ToTensor``: float32 ``/ 255``; ``Normalize``: ``(x - mean) / std`` in float32;
* torch.hub DINOv2 (facebookresearch/dinov2 ``interpolate_pos_encoding``): the M x M position grid
  resized by ``F.interpolate(scale_factor=((h0 + 0.1) / M, (w0 + 0.1) / M), mode="bicubic",
  antialias=False)``;
* the Hugging Face image processors themselves (CLIP, SigLIP, Mask2Former), built offline.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from geofidelity_bench.encoders import get_encoder
from geofidelity_bench.encoders.base import IMAGENET_MEAN, IMAGENET_STD, Preprocessing, hash_config
from geofidelity_bench.encoders.clip import CLIP_MEAN, CLIP_STD, clip_preprocessing
from geofidelity_bench.encoders.dinov2 import DINOV2_PREPROCESSING
from geofidelity_bench.encoders.efficientnet_lite import EFFICIENTNET_PREPROCESSING
from geofidelity_bench.encoders.siglip import siglip_preprocessing
from geofidelity_bench.segmentation import get_segmenter

PHOTO = Path(__file__).parent / "data" / "photos" / "lund_01.jpg"
#: 16:9 phone and action-camera sizes and the 910x512 of the real photos, plus portrait and 4:3.
SIZES = [(910, 512), (1920, 1080), (2048, 1152), (512, 910), (1024, 768), (341, 256), (300, 301)]


def _photo(size: tuple[int, int]) -> Image.Image:
    """A real street photo brought to ``size`` (so the content is a photo's, not noise)."""
    return Image.open(PHOTO).convert("RGB").resize(size, Image.Resampling.LANCZOS)


def _torchvision_reference(img: Image.Image, resize: int = 256, crop: int = 224, mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """Resize(resize, BICUBIC) + CenterCrop(crop) + ToTensor + Normalize, as torchvision does them on PIL."""
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = resize, int(resize * long / short)
    new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    if (new_w, new_h) != (w, h):
        img = img.resize((new_w, new_h), Image.Resampling.BICUBIC)
    top = int(round((new_h - crop) / 2.0))
    left = int(round((new_w - crop) / 2.0))
    img = img.crop((left, top, left + crop, top + crop))
    t = torch.from_numpy(np.array(img, dtype=np.uint8)).permute(2, 0, 1).to(torch.float32).div(255)
    m = torch.as_tensor(mean, dtype=torch.float32)[:, None, None]
    s = torch.as_tensor(std, dtype=torch.float32)[:, None, None]
    return t.sub(m).div(s).numpy()


# -- 1. resize + center crop ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "resized, torchvision_offsets, floor_offsets",
    [
        ((455, 256), (116, 16), (115, 16)),  # 910x512, 1920x1080, 2048x1152: 115.5 rounds to 116
        ((256, 455), (16, 116), (16, 115)),  # the same in portrait
        ((453, 256), (114, 16), (114, 16)),  # 114.5 rounds (half to even) to 114: floor agrees
        ((341, 256), (58, 16), (58, 16)),
        ((257, 256), (16, 16), (16, 16)),  # 16.5 -> 16
        ((259, 256), (18, 16), (17, 16)),  # 17.5 -> 18
    ],
)
def test_crop_offsets_are_torchvisions(resized, torchvision_offsets, floor_offsets):
    assert DINOV2_PREPROCESSING.crop_offsets(*resized) == torchvision_offsets
    assert EFFICIENTNET_PREPROCESSING.crop_offsets(*resized) == torchvision_offsets
    assert clip_preprocessing(224).crop_offsets(*resized) == floor_offsets  # Hugging Face's center_crop


@pytest.mark.parametrize("size", SIZES)
def test_dinov2_preprocessing_is_torchvision_pixel_for_pixel(size):
    img = _photo(size)
    expected = _torchvision_reference(img)
    got = DINOV2_PREPROCESSING(img)
    assert got.dtype == np.float32 and got.shape == expected.shape == (3, 224, 224)
    assert np.abs(got - expected).max() == 0.0
    np.testing.assert_array_equal(EFFICIENTNET_PREPROCESSING(img), expected)


def test_the_one_pixel_shift_is_real_for_16_9_photos():
    img = _photo((1920, 1080))
    floor = Preprocessing(resize=256, crop=224)  # the crop before issue 22
    assert np.abs(floor(img) - DINOV2_PREPROCESSING(img)).max() > 0.1


def test_resized_size_is_torchvisions_truncation():
    for w, h in [(910, 512), (1920, 1080), (2048, 1152), (1000, 3), (3, 1000), (777, 555), (555, 777)]:
        short, long = min(w, h), max(w, h)
        new_long = int(256 * long / short)
        assert DINOV2_PREPROCESSING.resized_size(w, h) == ((new_long, 256) if w > h else (256, new_long))


def test_crop_rounding_is_recorded_and_checked():
    assert DINOV2_PREPROCESSING.to_config()["crop_rounding"] == "round"
    assert "int(round(" in DINOV2_PREPROCESSING.to_config()["crop_position"]
    assert "crop_rounding" not in clip_preprocessing(224).to_config()  # unchanged configs of floor croppers
    with pytest.raises(ValueError, match="crop_rounding"):
        Preprocessing(resize=256, crop=224, crop_rounding="ceil")


# -- 2. CLIP and SigLIP equal their Hugging Face processors --------------------------------------


def _hf_processor(*names: str, **settings):
    import transformers

    for n in names:
        cls = getattr(transformers, n, None)
        if cls is not None:
            return cls(**settings)
    raise AssertionError(f"transformers has none of {names}")


@pytest.mark.parametrize("size", SIZES + [(1086, 512)])
def test_clip_and_siglip_preprocessing_equal_their_processors(size):
    img = _photo(size)
    # openai/clip-vit-base-patch32 preprocessor_config.json
    clip = _hf_processor(
        "CLIPImageProcessorPil", "CLIPImageProcessor", size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224},
        do_resize=True, resample=3, do_center_crop=True, do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
        image_mean=list(CLIP_MEAN), image_std=list(CLIP_STD), do_convert_rgb=True,
    )
    # google/siglip-so400m-patch14-384 preprocessor_config.json
    siglip = _hf_processor(
        "SiglipImageProcessorPil", "SiglipImageProcessor", size={"height": 384, "width": 384}, do_resize=True, resample=3,
        do_rescale=True, rescale_factor=1 / 255, do_normalize=True, image_mean=[0.5] * 3, image_std=[0.5] * 3,
    )
    for processor, ours in ((clip, clip_preprocessing(224)), (siglip, siglip_preprocessing(384))):
        expected = processor(images=[img], return_tensors="np")["pixel_values"][0]
        got = ours(img)
        assert got.shape == expected.shape
        assert np.abs(got - expected).max() <= 1e-6


def test_clip_encoder_uses_the_processor_equivalent_preprocessing(tiny_clip_dir):
    enc = get_encoder("clip-vit-b32", weights=tiny_clip_dir, device="cpu")
    assert enc.preprocessing == clip_preprocessing(32)


# -- 3. DINOv2 position embeddings as torch.hub interpolates them ---------------------------------


def _tiny_dinov2(grid: int):
    from transformers import Dinov2Config, Dinov2Model

    torch.manual_seed(3)
    cfg = Dinov2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=14 * grid, patch_size=14
    )
    return Dinov2Model(cfg).eval()


def _hub_pos_embed(pos: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """facebookresearch/dinov2 interpolate_pos_encoding, written out from its source."""
    m = int(round((pos.shape[1] - 1) ** 0.5))
    dim = pos.shape[-1]
    patch = torch.nn.functional.interpolate(
        pos[:, 1:].float().reshape(1, m, m, dim).permute(0, 3, 1, 2),
        scale_factor=((rows + 0.1) / m, (cols + 0.1) / m),
        mode="bicubic",
        antialias=False,
    )
    assert patch.shape[-2:] == (rows, cols)
    return torch.cat((pos[:, :1].float(), patch.permute(0, 2, 3, 1).reshape(1, -1, dim)), dim=1)


@pytest.fixture(scope="module")
def dinov2_grid20_dir(tmp_path_factory) -> Path:
    """A tiny DINOv2 whose position grid (20x20) is not the 16x16 of a 224 input, like the real 37x37."""
    path = tmp_path_factory.mktemp("tiny-dinov2-grid20")
    _tiny_dinov2(20).save_pretrained(path)
    return path


@pytest.mark.parametrize("height, width", [(224, 224), (168, 224), (224, 126)])
def test_interpolated_position_embeddings_are_torch_hubs(dinov2_grid20_dir, height, width):
    enc = get_encoder("dinov2-base", weights=dinov2_grid20_dir, device="cpu")
    emb = enc.model.embeddings
    rows, cols = height // 14, width // 14
    tokens = torch.zeros(1, rows * cols + 1, 32)
    with torch.no_grad():
        got = emb.interpolate_pos_encoding(tokens, height, width)
        expected = _hub_pos_embed(emb.position_embeddings, rows, cols)
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() < 1e-6


def test_dinov2_features_equal_a_model_with_torch_hub_position_embeddings(dinov2_grid20_dir):
    from transformers import Dinov2Model

    enc = get_encoder("dinov2-base", weights=dinov2_grid20_dir, device="cpu")
    images = [_photo(s) for s in [(910, 512), (1920, 1080), (2048, 1152)]]
    got = enc.embed(images, progress=False)

    # Reference: the same weights in a model whose own grid is 16x16, its position embeddings set
    # to torch.hub's interpolation, so transformers uses them as they are; fed torchvision's pixels.
    source = Dinov2Model.from_pretrained(dinov2_grid20_dir).eval()
    ref = _tiny_dinov2(16)
    state = source.state_dict()
    state["embeddings.position_embeddings"] = _hub_pos_embed(state["embeddings.position_embeddings"], 16, 16)
    ref.load_state_dict(state)
    pixels = torch.from_numpy(np.stack([_torchvision_reference(img) for img in images]))
    with torch.no_grad():
        expected = ref(pixel_values=pixels).last_hidden_state[:, 0].numpy()
        stock = source(pixel_values=pixels).last_hidden_state[:, 0].numpy()
    assert np.abs(got - expected).max() < 1e-5
    # transformers' own size=(16, 16) interpolation gives other features: the test can tell them apart
    assert np.abs(stock - expected).max() > 1e-4


# -- 4. the config hash changes, so old cache entries are not reused ------------------------------


def test_dinov2_config_records_the_parity_and_its_hash_changed(dinov2_grid20_dir):
    enc = get_encoder("dinov2-base", weights=dinov2_grid20_dir, device="cpu")
    cfg = enc.config
    assert "interpolate_offset" not in cfg["position_embeddings"] and "+ 0.1" in cfg["position_embeddings"]
    assert cfg["preprocessing"]["crop_rounding"] == "round"
    old = {k: v for k, v in cfg.items() if k not in ("device", "position_embeddings")}
    old["preprocessing"] = Preprocessing(resize=256, crop=224).to_config()  # the config before issue 22
    assert hash_config(old) != enc.config_hash


def test_efficientnet_config_hash_is_not_the_one_before_issue_22():
    enc = get_encoder("efficientnet-lite0", device="cpu")
    # config_hash of efficientnet-lite0 recorded in the demo's run.json before issue 22 (floor crop):
    # a cache filled then is keyed by it and must not serve the new, torchvision-cropped embeddings.
    assert enc.config_hash != "5f66125e37ed4c8405e804630ee1b08aad96053ab7aea02c94f8d38dfee5611d"
    old = enc.config
    old.pop("device")
    old["preprocessing"] = Preprocessing(resize=256, crop=224).to_config()
    assert hash_config(old) == "5f66125e37ed4c8405e804630ee1b08aad96053ab7aea02c94f8d38dfee5611d"


# -- 5. segmenters take the checkpoint's processor -------------------------------------------------


def test_mask2former_is_preprocessed_at_the_checkpoints_saved_size(tiny_m2f_dir, tmp_path):
    import transformers

    folder = tmp_path / "m2f-with-processor"
    shutil.copytree(tiny_m2f_dir, folder)
    cls = getattr(transformers, "Mask2FormerImageProcessorPil", None) or transformers.Mask2FormerImageProcessor
    cls(size={"shortest_edge": 96, "longest_edge": 200}, size_divisor=32, resample=2).save_pretrained(folder)

    seg = get_segmenter("mask2former-vistas", weights=folder, device="cpu")
    img = _photo((910, 512))
    # shorter side 512 -> 96, longer int(910 * 96 / 512) = 170 (<= 200); both up to a multiple of 32
    assert tuple(seg._pixel_values(img).shape[-2:]) == (96, 192)
    cfg = seg.config["input"]
    assert cfg["input_size"] == 96 and cfg["max_input_size"] == 200
    assert "preprocessor_config.json" in cfg["settings_from"] and "defaults" not in cfg["settings_from"]
    assert cfg["settings"]["size"] == {"shortest_edge": 96, "longest_edge": 200}
    assert seg.segment([img], progress=False).shape[0] == 1

    default = get_segmenter("mask2former-vistas", weights=tiny_m2f_dir, device="cpu")  # no processor config
    assert tuple(default._pixel_values(img).shape[-2:]) == (384, 704)  # 384 x int(682.5) = 682 -> 704
    assert "no preprocessor_config.json" in default.config["input"]["settings_from"]
    assert default.config["input"]["input_size"] == 384 and default.config_hash != seg.config_hash

    override = get_segmenter("mask2former-vistas", weights=folder, device="cpu", input_size=64, max_input_size=128)
    assert tuple(override._pixel_values(img).shape[-2:]) == (64, 128)
    assert "overridden by size" in override.config["input"]["settings_from"]
