"""Parity with the paper's release code (docs/benchmark.md section 12): the image pipeline, pixel for
pixel (sections 1-5 below), and the metric and statistics code, difference by difference (section 6).

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
* the release's evaluator (its metric and statistics functions), each reimplemented in a few lines
  from what it computes (section 6).
"""

from __future__ import annotations

import math
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from scipy.spatial.distance import cdist
from scipy.stats import wilcoxon

from conftest import make_block
from geofidelity_bench import metrics, stats
from geofidelity_bench.encoders import get_encoder
from geofidelity_bench.encoders.base import IMAGENET_MEAN, IMAGENET_STD, Preprocessing, hash_config
from geofidelity_bench.encoders.clip import CLIP_MEAN, CLIP_STD, clip_preprocessing
from geofidelity_bench.encoders.dinov2 import DINOV2_PREPROCESSING
from geofidelity_bench.encoders.efficientnet_lite import EFFICIENTNET_PREPROCESSING
from geofidelity_bench.encoders.siglip import siglip_preprocessing
from geofidelity_bench.evaluation import EvaluationError, score_embeddings
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
    old.pop("pillow")  # recorded (not hashed) since issue 31
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


# -- 6. metric and statistics code against the release's -------------------------------------------
#
# docs/benchmark.md section 12, "Differences in the metric and statistics code": each row there is
# backed by a test here that computes both versions on the same inputs, ours through the library and
# the release's by a few-line reimplementation of what its evaluation code (eval/run_eval_v3.py,
# metrics/set_fidelity.py, eval/reviewer_analysis_v3.py) computes, written out below, and shows where
# they agree and where they differ. Should the library change on one of these inputs, a test fails and
# the table has to be revisited.

def _release_mmd(x, y):
    """MMD^2 as the release: cdist squared distances, gamma = 1 / median of the positive entries of the
    pooled n x n matrix, unbiased estimator, then Python ``max(mmd2, 0.0)`` (which keeps a NaN)."""
    pooled = np.vstack([x, y])
    d = cdist(pooled, pooled, "sqeuclidean")
    gamma = 1.0 / np.median(d[d > 0])
    kxx, kyy, kxy = (np.exp(-gamma * cdist(a, b, "sqeuclidean")) for a, b in ((x, x), (y, y), (x, y)))
    n, m = len(x), len(y)
    with np.errstate(invalid="ignore", divide="ignore"):
        within_x = (kxx.sum() - np.trace(kxx)) / np.float64(n * (n - 1))  # 0/0 = NaN for one row
        within_y = (kyy.sum() - np.trace(kyy)) / np.float64(m * (m - 1))
        value = within_x + within_y - 2 * kxy.sum() / (n * m)
    return float(max(value, 0.0)), float(gamma)


def _release_div(e):
    """Mean cosine distance over the pairs i < j (scipy's cdist "cosine"); 0.0 for fewer than 2 rows."""
    if len(e) < 2:
        return 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        d = cdist(e, e, "cosine")
    return float(d[np.triu_indices(len(e), k=1)].mean())


def _release_row(gen, ref, negatives):
    """One result row as the release's evaluator computes it (``score`` + ``diversity_calibrated_set_fidelity``)."""
    mmd, _ = _release_mmd(gen, ref)
    gap = max(0.0, _release_div(ref) - _release_div(gen))  # the column "diversity_gap"
    gm, rm = gen.mean(axis=0), ref.mean(axis=0)
    panels = np.stack([p.mean(axis=0) for p in [ref, *negatives]])
    panels = panels / (np.linalg.norm(panels, axis=1, keepdims=True) + 1e-8)
    g = gen / (np.linalg.norm(gen, axis=1, keepdims=True) + 1e-8)
    sims = g @ panels.T
    target_rank = ((-sims).argsort(axis=1) == 0).argmax(axis=1)
    return {"cos_sim": float(gm @ rm / (np.linalg.norm(gm) * np.linalg.norm(rm) + 1e-8)), "mmd": mmd,
            "dcsf": mmd + 0.5 * gap, "diversity_gap": gap, "retrieval_acc": float((target_rank == 0).mean()),
            "mrr": float((1.0 / (target_rank + 1)).mean()), "ranks": target_rank}


_ROLES = ("same_neighborhood", "same_city", "same_driving_side", "random_city")


def _our_row(gen, ref, negatives):
    """One result row through the library (score_embeddings), the target with one negative per role."""
    negs = {f"neg_{role}": f"n{i}" for i, role in enumerate(_ROLES[: len(negatives)])}
    blocks = [make_block("t", **negs)] + [make_block(f"n{i}") for i in range(len(negatives))]
    galleries = {"t": ref, **{f"n{i}": n for i, n in enumerate(negatives)}}
    df = score_embeddings(blocks, galleries, {("m", "L1", "t"): gen}, encoder_name="test")
    return df.iloc[0]


def _panel_case(seed, n=4, m=6, d=16):
    rng = np.random.default_rng(seed)
    center = rng.normal(size=d)
    ref = center + rng.normal(size=(m, d))
    gen = center + rng.normal(scale=1.5, size=(n, d))
    negatives = [rng.normal(size=d) + rng.normal(size=(m, d)) for _ in range(3)]
    return gen, ref, negatives


@pytest.mark.parametrize("seed", range(6))
def test_ordinary_panels_score_as_the_release_scores_them(seed):
    """Distinct, non-zero rows and no tie: every shared column agrees to float rounding, except that our
    diversity_gap keeps its sign (the release's is our value clipped at 0)."""
    gen, ref, negatives = _panel_case(seed)
    ours, rel = _our_row(gen, ref, negatives), _release_row(gen, ref, negatives)
    for col in ("cos_sim", "mmd", "dcsf", "retrieval_acc", "mrr"):
        assert ours[col] == pytest.approx(rel[col], abs=1e-12), col
    assert max(0.0, ours["diversity_gap"]) == pytest.approx(rel["diversity_gap"], abs=1e-12)


def test_diversity_gap_is_signed_here_and_clipped_at_zero_in_the_release():
    """A generator MORE diverse than the gallery: our diversity_gap is negative, the release's column of
    the same name is 0; DCSF (which clips the gap in both) agrees."""
    rng = np.random.default_rng(3)
    center = rng.normal(size=16)
    ref = center * 3 + rng.normal(scale=0.3, size=(6, 16))  # a tight gallery
    gen = rng.normal(size=(4, 16))  # scattered images
    negatives = [rng.normal(size=(6, 16)) for _ in range(2)]
    ours, rel = _our_row(gen, ref, negatives), _release_row(gen, ref, negatives)
    signed = _release_div(ref) - _release_div(gen)
    assert signed < -0.5
    assert ours["diversity_gap"] == pytest.approx(signed, abs=1e-12)
    assert rel["diversity_gap"] == 0.0
    assert ours["dcsf"] == pytest.approx(rel["dcsf"], abs=1e-12) == pytest.approx(ours["mmd"], abs=1e-12)


def test_a_zero_embedding_row_keeps_its_diversity_here_and_drops_the_penalty_and_wins_retrieval_in_the_release():
    """An all-zero generated row: scipy's cosine distance to it is NaN, so the release's Div is NaN and
    ``max(0.0, nan)`` gives a diversity_gap of 0 (no diversity penalty in DCSF); its similarities are all 0
    and the release's argsort puts the target first (a retrieval hit). Here the zero row has cosine 0 with
    every row (section 5) and a tie counts against the target (rank last). CosSim and MMD agree."""
    rng = np.random.default_rng(5)
    center = rng.normal(size=16)
    ref = rng.normal(size=(6, 16))  # a varied gallery (Div about 1)
    gen = np.vstack([center + rng.normal(scale=0.05, size=(3, 16)), np.zeros((1, 16))])  # collapsed + a zero row
    negatives = [rng.normal(size=(6, 16)) for _ in range(3)]
    ours, rel = _our_row(gen, ref, negatives), _release_row(gen, ref, negatives)
    for col in ("cos_sim", "mmd"):
        assert ours[col] == pytest.approx(rel[col], abs=1e-12), col
    assert math.isnan(_release_div(gen)) and rel["diversity_gap"] == 0.0 and rel["dcsf"] == rel["mmd"]
    # ours: the zero row is at cosine distance 1 from each of the 3 others (3 of the 6 pairs)
    unit = gen[:3] / np.linalg.norm(gen[:3], axis=1, keepdims=True)
    div_gen = ((1 - unit @ unit.T)[np.triu_indices(3, k=1)].sum() + 3 * 1.0) / 6
    assert metrics.diversity(gen) == pytest.approx(div_gen, abs=1e-12)
    assert ours["diversity_gap"] == pytest.approx(_release_div(ref) - div_gen, abs=1e-12) and ours["diversity_gap"] > 0
    assert ours["dcsf"] == pytest.approx(ours["mmd"] + 0.5 * ours["diversity_gap"], abs=1e-12)
    assert ours["dcsf"] > rel["dcsf"]
    # retrieval: the three real rows rank the same in both; the zero row is a hit there, last here
    assert rel["ranks"][3] == 0
    ours_ranks = metrics.retrieval(gen, {"target": ref, **dict(zip(_ROLES, negatives))})
    assert ours["retrieval_acc"] == pytest.approx(float((rel["ranks"][:3] == 0).sum()) / 4)
    assert rel["retrieval_acc"] == pytest.approx(ours["retrieval_acc"] + 0.25)
    assert ours_ranks.accuracy == ours["retrieval_acc"]


def test_near_duplicate_rows_are_zeroed_here_and_enter_the_median_in_the_release():
    """Exact duplicates (the held-out anchor's cycled photo) have distance 0 in both and never enter the
    bandwidth's median. Rows that differ only by float noise (the same photo embedded twice, relative
    difference 1e-8) are duplicates here (distance <= 1e-12 (|x|^2 + |y|^2) counts as 0, section 5) but
    tiny positive distances in the release, which pull its median, hence gamma and MMD^2, away."""
    rng = np.random.default_rng(8)
    photo = rng.normal(size=16)
    ref = rng.normal(size=(2, 16)) + photo  # a gallery of 2, as in the demo
    exact = np.tile(photo, (6, 1))
    noisy = photo * (1 + 1e-8 * rng.normal(size=(6, 16)))  # 15 of the 28 pooled pairs are float noise
    assert 0 < cdist(noisy, noisy, "sqeuclidean")[0, 1] <= 1e-12 * 2 * photo @ photo
    for gen, agree in ((exact, True), (noisy, False)):
        rel_mmd, rel_gamma = _release_mmd(gen, ref)
        gamma = metrics.median_heuristic_gamma(gen, ref)
        if agree:
            assert gamma == pytest.approx(rel_gamma, rel=1e-12)
            assert metrics.mmd2(gen, ref) == pytest.approx(rel_mmd, abs=1e-12)
        else:
            # ours is the release's formula on the exact duplicates, up to the 1e-8 noise itself
            assert gamma == pytest.approx(_release_mmd(exact, ref)[1], rel=1e-6)
            assert metrics.mmd2(gen, ref) == pytest.approx(_release_mmd(exact, ref)[0], abs=1e-6)
            # the release's median is a noise distance: its gamma explodes and the kernel sees every
            # distinct pair as unrelated (k = 0), the near-duplicates as partly related
            assert rel_gamma > 1e6 * gamma
            assert abs(metrics.mmd2(gen, ref) - rel_mmd) > 0.1


def test_one_image_panels_are_refused_here_and_half_scored_in_the_release():
    """A 1-image panel: the release writes CosSim and retrieval, MMD^2 and DCSF NaN (0/0 in the unbiased
    estimator) and a diversity_gap of Div(gallery) (a 1-image Div is 0.0 there). Here the panel is refused
    with an error naming it (Div of one image is undefined), and MMD^2 alone is NaN with a reason."""
    gen, ref, negatives = _panel_case(2, n=1)
    rel = _release_row(gen, ref, negatives)
    assert math.isnan(rel["mmd"]) and math.isnan(rel["dcsf"])
    assert rel["diversity_gap"] == pytest.approx(_release_div(ref)) and rel["diversity_gap"] > 0
    assert np.isfinite(rel["cos_sim"]) and rel["retrieval_acc"] in (0.0, 1.0)
    with pytest.raises(EvaluationError, match=r"m/L1/t: .*1 row"):
        _our_row(gen, ref, negatives)
    value, reason = metrics.mmd2_with_reason(gen, ref)
    assert math.isnan(value) and "2" in reason
    # CosSim and retrieval themselves are the same numbers in both
    assert metrics.cos_sim(gen, ref) == pytest.approx(rel["cos_sim"], abs=1e-12)
    assert metrics.retrieval(gen, {"target": ref, **dict(zip(_ROLES, negatives))}).accuracy == rel["retrieval_acc"]


# -- statistics ------------------------------------------------------------------------------------


def _results(seed=0, n_cities=5, blocks=3, methods=("m1", "m2", "m3")):
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(n_cities):
        for b in range(blocks):
            base = rng.normal(0.5, 0.05)
            for m in methods:
                for level, lift in (("L0", 0.0), ("L1", 0.03), ("L2", 0.035)):
                    rows.append({"method": m, "condition": level, "level": level, "block_id": f"c{c}_b{b}",
                                 "city": f"c{c}", "cos_sim": base + lift + rng.normal(0, 0.02)})
    return pd.DataFrame(rows)


def _release_bootstrap(values, rng, n_boot=5000):
    means = rng.choice(np.asarray(values, dtype=float), size=(n_boot, len(values)), replace=True).mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(lo), float(hi)


def _release_city_delta(df, low, high):
    """City-balanced as the release: the mean of every row of (city, level), unpaired, then high - low."""
    city_level = df.groupby(["city", "level"])["cos_sim"].mean().unstack("level")
    return (city_level[high] - city_level[low]).dropna()


def test_city_balanced_deltas_pair_units_first_here_and_average_unpaired_rows_in_the_release():
    df = _results(seed=1)
    ours = stats.city_balanced(df, "cos_sim", "L1", "L0")
    rel = _release_city_delta(df, "L0", "L1")
    # complete data: the same city deltas, estimate and (fresh default_rng(42)) interval
    assert ours.per_city.set_index("city")["delta"].to_numpy() == pytest.approx(rel.to_numpy(), abs=1e-12)
    assert ours.mean == pytest.approx(rel.mean(), abs=1e-12)
    lo, hi = _release_bootstrap(rel.to_numpy(), np.random.default_rng(42))
    assert (ours.ci_low, ours.ci_high) == pytest.approx((lo, hi), abs=1e-12)
    # a missing panel (m1's L0 panel of c0_b0): the release's c0 L0 mean loses one row, its L1 mean keeps
    # all; ours drops the unit from both sides
    missing = df.drop(df[(df["method"] == "m1") & (df["condition"] == "L0") & (df["block_id"] == "c0_b0")].index)
    ours = stats.city_balanced(missing, "cos_sim", "L1", "L0")
    rel = _release_city_delta(missing, "L0", "L1")
    per_city = ours.per_city.set_index("city")["delta"]
    assert per_city.drop("c0").to_numpy() == pytest.approx(rel.drop("c0").to_numpy(), abs=1e-12)
    assert abs(per_city["c0"] - rel["c0"]) > 1e-3
    paired = missing[~((missing["method"] == "m1") & (missing["block_id"] == "c0_b0"))]
    assert per_city["c0"] == pytest.approx(_release_city_delta(paired, "L0", "L1")["c0"], abs=1e-12)
    assert ours.n_pairs == 3 * 5 * 3 - 1


def _release_rank_stability(df, models, rng, n_boot):
    city_method = df.groupby(["city", "method"])["cos_sim"].mean().unstack("method").reindex(columns=models)
    cities = city_method.index.to_numpy()
    ranks = {m: [] for m in models}
    rank1 = {m: 0 for m in models}
    for _ in range(n_boot):
        means = city_method.loc[rng.choice(cities, size=len(cities), replace=True)].mean(axis=0)
        ranking = means.rank(ascending=False, method="min")
        rank1[means.idxmax()] += 1
        for m in models:
            ranks[m].append(float(ranking[m]))
    out = {}
    for m in models:
        r = np.asarray(ranks[m])
        lo, hi = np.percentile(r, [2.5, 97.5])
        out[m] = {"mean_rank": r.mean(), "rank_ci_low": lo, "rank_ci_high": hi, "rank1_prob": rank1[m] / n_boot}
    return pd.DataFrame(out).T


def test_rank_stability_of_a_method_absent_from_drawn_cities():
    """z has blocks in city c0 only. In a resample without c0 the release's mean for z is NaN, its rank NaN,
    and one NaN makes z's rank interval and mean rank NaN; here z ranks last there. The methods present
    in every city get the same numbers in both (the same city draws as the release's first analysis)."""
    df = _results(seed=4, methods=("m1", "m2", "m3"))
    df = df[df["condition"] == "L1"]
    z = df[(df["method"] == "m1") & (df["city"] == "c0")].assign(method="z", cos_sim=lambda d: d["cos_sim"] + 0.2)
    df = pd.concat([df, z], ignore_index=True)
    models = ["m1", "m2", "m3", "z"]
    ours = stats.rank_stability(df, "cos_sim", "L1", n_resamples=400, seed=42).table.set_index("method")
    rel = _release_rank_stability(df, models, np.random.default_rng(42), 400)
    for m in ("m1", "m2", "m3"):
        for col in ("mean_rank", "rank_ci_low", "rank_ci_high", "rank1_prob"):
            assert ours.loc[m, col] == pytest.approx(rel.loc[m, col]), (m, col)
    assert math.isnan(rel.loc["z", "mean_rank"]) and math.isnan(rel.loc["z", "rank_ci_high"])
    assert ours.loc["z", "rank_ci_high"] == 4 and ours.loc["z", "rank_ci_low"] == 1
    assert ours.loc["z", "rank1_prob"] == pytest.approx(rel.loc["z", "rank1_prob"]) and rel.loc["z", "rank1_prob"] > 0


def test_rank_stability_credits_every_method_tied_for_first_the_release_only_the_first_column():
    """Two methods with the same score in every city: both have rank 1 in every resample, in both codes
    (pandas ``rank(method="min")``); the release counts "rank 1" with ``idxmax``, which credits only the
    first of them, so its rank-1 probabilities are 1 and 0 where ours are 1 and 1."""
    df = _results(seed=6, methods=("a", "c"))
    df = df[df["condition"] == "L1"]
    df = pd.concat([df, df[df["method"] == "a"].assign(method="b")], ignore_index=True)  # b == a everywhere
    df.loc[df["method"] == "c", "cos_sim"] -= 0.5
    ours = stats.rank_stability(df, "cos_sim", "L1", n_resamples=200, seed=42).table.set_index("method")
    rel = _release_rank_stability(df, ["a", "b", "c"], np.random.default_rng(42), 200)
    for m in "abc":
        for col in ("rank_ci_low", "rank_ci_high", "mean_rank"):
            assert ours.loc[m, col] == rel.loc[m, col], (m, col)
    assert list(ours.loc[["a", "b", "c"], "rank1_prob"]) == [1.0, 1.0, 0.0]
    assert list(rel.loc[["a", "b", "c"], "rank1_prob"]) == [1.0, 0.0, 0.0]


def _release_wilcoxon(delta):
    try:
        return float(wilcoxon(delta).pvalue)
    except ValueError:
        return float("nan")


def test_wilcoxon_on_all_zero_differences():
    """Non-zero differences (zeros among them dropped by both): the same p-value. All differences zero:
    ours is NaN with the reason "all differences are zero"; the release's is whatever scipy returns (1.0
    from scipy 1.17, with a RuntimeWarning; NaN from versions that raise ValueError, which it catches)."""
    d = np.array([0.02, -0.01, 0.0, 0.03, 0.015, 0.0, 0.04, -0.005])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert stats.wilcoxon_p(d)[0] == pytest.approx(_release_wilcoxon(d), rel=1e-12)
        rel = _release_wilcoxon(np.zeros(8))
    assert rel == 1.0 or math.isnan(rel)
    p, reason = stats.wilcoxon_p(np.zeros(8))
    assert math.isnan(p) and reason == "all differences are zero"
    same = pd.DataFrame({"method": "m", "condition": ["L0"] * 4 + ["L1"] * 4, "city": "c",
                         "block_id": [f"b{i}" for i in range(4)] * 2, "cos_sim": [0.5, 0.6, 0.7, 0.8] * 2})
    r = stats.paired_deltas(same, "cos_sim", "L1", "L0", n_resamples=100)
    assert math.isnan(r.result.wilcoxon_p) and r.result.wilcoxon_reason == "all differences are zero"


def test_bootstrap_streams_start_at_the_seed_for_every_analysis_here_and_run_on_in_the_release():
    """The release draws every analysis of one run from one ``default_rng(42)``, in order (L1-L0, L2-L1,
    L2-L0, ...); here each analysis starts from ``default_rng(seed)``. The first analysis has the same
    resamples (``rng.choice`` and ``rng.integers`` draw the same indices), the later ones do not."""
    df = _results(seed=2)
    shared = np.random.default_rng(42)
    for k, (low, high) in enumerate([("L0", "L1"), ("L1", "L2")]):
        pivot = df.pivot_table(index=["method", "block_id", "city"], columns="level", values="cos_sim")
        delta = (pivot[high] - pivot[low]).dropna().to_numpy()
        rel = _release_bootstrap(delta, shared)
        ours = stats.paired_deltas(df, "cos_sim", high, low)
        assert ours.mean == pytest.approx(delta.mean(), abs=1e-12)
        fresh = _release_bootstrap(delta, np.random.default_rng(42))
        assert (ours.ci_low, ours.ci_high) == pytest.approx(fresh, abs=1e-12)
        if k == 0:
            assert (ours.ci_low, ours.ci_high) == pytest.approx(rel, abs=1e-12)
        else:
            assert (ours.ci_low, ours.ci_high) != pytest.approx(rel, abs=1e-6)
