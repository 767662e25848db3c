"""Map Feature Perception (docs/benchmark.md section 10, Map Feature Perception (MFP)): extractor, terms, loss, SSIM/PSNR and the ``mfp`` command.

Everything runs offline on a tiny random ViT saved with save_pretrained (no Hub access).
"""

from __future__ import annotations

import csv
import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image, ImageDraw

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from geofidelity_bench import mfp as R  # noqa: E402  (the runner: pairs of image files)
from geofidelity_bench.encoders import dino_vit_keys as E  # noqa: E402  (the DINO-ViT extractor)
from geofidelity_bench.metrics import image_quality as Q  # noqa: E402  (SSIM, PSNR)
from geofidelity_bench.metrics import mfp as M  # noqa: E402  (the terms and the loss)

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32,
            patch_size=8)


@pytest.fixture(scope="module")
def tiny_vit_dir(tmp_path_factory):
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    model = ViTModel(ViTConfig(**TINY), add_pooling_layer=False)
    path = tmp_path_factory.mktemp("tiny_vit")
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def extractor(tiny_vit_dir):
    return E.DinoViTFeatureExtractor(tiny_vit_dir, image_size=32, device="cpu")


def rand(*shape: int, seed: int) -> torch.Tensor:
    """Uniform [0, 1) images from a per-call generator, so that a failing test reproduces."""
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def synthetic_map(seed: int, size: int = 64) -> Image.Image:
    """A map-like tile: land background, a river, road lines and building polygons."""
    rng = np.random.default_rng(seed)
    img = Image.new("RGB", (size, size), (242, 239, 233))
    draw = ImageDraw.Draw(img)
    y0 = int(rng.integers(0, size))
    draw.polygon([(0, y0), (size, y0 + 6), (size, y0 + 14), (0, y0 + 8)], fill=(170, 211, 223))
    for _ in range(3):
        pts = [tuple(int(v) for v in rng.integers(0, size, 2)) for _ in range(2)]
        draw.line(pts, fill=(255, 255, 255), width=4)
        draw.line(pts, fill=(250, 178, 102), width=2)
    for _ in range(4):
        x, y = (int(v) for v in rng.integers(0, size - 10, 2))
        w, h = (int(v) for v in rng.integers(4, 10, 2))
        draw.polygon([(x, y), (x + w, y), (x + w, y + h), (x, y + h)], fill=(217, 208, 201), outline=(190, 180, 170))
    return img


# -- terms -------------------------------------------------------------------------------------


# The formulas on a hand-worked case (docs/benchmark.md section 10, Map Feature Perception (MFP)).
#
# Pair 0. CLS_o = (1, 0), CLS_t = (0.5, 1): difference (0.5, -1), squares (0.25, 1), their mean
#   0.625, so G = 1 - 0.625 = 0.375. (A sum over dimensions would give 1 - 1.25 = -0.25, a mean of
#   absolute differences 1 - 0.75 = 0.25: both mutations change the number.)
#   Keys, 3 tokens x 2 dims: K_o = [(1, 0), (0, 1), (1, 1)], K_t = [(1, 0), (1, 0), (0, 2)].
#   Unit rows (r = 1/sqrt(2)): o = [(1, 0), (0, 1), (r, r)], t = [(1, 0), (1, 0), (0, 1)], so
#     S_o = [[1, 0, r], [0, 1, r], [r, r, 1]]      S_t = [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
#     S_o - S_t = [[0, -1, r], [-1, 0, r], [r, r, 0]]: squares 1, 1 and four times 1/2, sum 4;
#   spatial_distance = sqrt(4) = 2, spatial_mse = 4 / 3^2 = 4/9.
#   loss = 10 (1 - 0.375) + 1 * 4/9 = 6.25 + 4/9.
# Pair 1. CLS_o = (2, 2), CLS_t = (0, 2): difference (2, 0), mean square 2, G = -1 (G is unbounded
#   below). K_t = 3 K_o: the cosines do not see the scale, S_o = S_t, both spatial terms are 0;
#   loss = 10 * 2 = 20.
R2 = 1 / math.sqrt(2)
HAND_CLS_O = [[1.0, 0.0], [2.0, 2.0]]
HAND_CLS_T = [[0.5, 1.0], [0.0, 2.0]]
HAND_KEYS_O = [[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [[1.0, 2.0], [-1.0, 0.0], [0.0, 3.0]]]
HAND_KEYS_T = [[[1.0, 0.0], [1.0, 0.0], [0.0, 2.0]], [[3.0, 6.0], [-3.0, 0.0], [0.0, 9.0]]]
HAND_G = [0.375, -1.0]
HAND_DISTANCE = [2.0, 0.0]
HAND_MSE = [4 / 9, 0.0]


# The MFP terms are always computed in float32 (also under autocast), so the hand-worked values are
# compared at float32 precision; the mutations these tests guard against change them by >= 0.1.
def _hand_features(cls, keys) -> M.MFPFeatures:
    return M.MFPFeatures(cls=torch.tensor(cls, dtype=torch.float32), keys=torch.tensor(keys, dtype=torch.float32))


def test_terms_equal_the_hand_worked_formulas():
    gen, tgt = _hand_features(HAND_CLS_O, HAND_KEYS_O), _hand_features(HAND_CLS_T, HAND_KEYS_T)
    s_o = torch.tensor([[1, 0, R2], [0, 1, R2], [R2, R2, 1]], dtype=torch.float32)
    s_t = torch.tensor([[1, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=torch.float32)
    torch.testing.assert_close(M.self_similarity(gen.keys)[0], s_o)
    torch.testing.assert_close(M.self_similarity(tgt.keys)[0], s_t)
    terms = M.pair_terms(gen, tgt)
    assert set(terms) == {"global_score", "spatial_distance", "spatial_mse"}
    np.testing.assert_allclose(terms["global_score"].numpy(), HAND_G, rtol=0, atol=1e-6)
    np.testing.assert_allclose(terms["spatial_distance"].numpy(), HAND_DISTANCE, rtol=0, atol=1e-7)
    np.testing.assert_allclose(terms["spatial_mse"].numpy(), HAND_MSE, rtol=0, atol=1e-6)
    # The loss: lambda_G = 10 on (1 - G), lambda_S = 1 on spatial_mse by default; other weights as given.
    loss = M.combine_loss(terms["global_score"], terms["spatial_mse"])
    np.testing.assert_allclose(loss.numpy(), [6.25 + 4 / 9, 20.0], rtol=1e-6)
    weighted = M.combine_loss(terms["global_score"], terms["spatial_mse"], global_weight=3.0, spatial_weight=2.0)
    np.testing.assert_allclose(weighted.numpy(), [3 * 0.625 + 2 * 4 / 9, 3 * 2.0], rtol=1e-6)
    assert M.combine_loss(0.375, 4 / 9) == pytest.approx(6.25 + 4 / 9, rel=1e-6)
    assert (M.GLOBAL_WEIGHT, M.SPATIAL_WEIGHT) == (10.0, 1.0)


class _FeaturesInPixels(torch.nn.Module):
    """An extractor for the hand-worked case: an image (3, 3, 2) carries its own features, the CLS
    vector in channel 0 row 0 and the 3 x 2 keys in channel 1 (channel 2 and the rest are zeros)."""

    def __init__(self):
        super().__init__()
        self.ranges: list[str] = []

    def extract(self, images, input_range="unit"):
        self.ranges.append(input_range)
        return M.MFPFeatures(cls=images[:, 0, 0, :], keys=images[:, 1])


def _images_holding(cls, keys) -> torch.Tensor:
    images = torch.zeros(2, 3, 3, 2, dtype=torch.float32)
    images[:, 0, 0, :] = torch.tensor(cls, dtype=torch.float32)
    images[:, 1] = torch.tensor(keys, dtype=torch.float32)
    return images


def test_loss_module_combines_the_hand_worked_terms():
    gen, tgt = _images_holding(HAND_CLS_O, HAND_KEYS_O), _images_holding(HAND_CLS_T, HAND_KEYS_T)
    extractor = _FeaturesInPixels()
    terms = M.MapFeaturePerceptionLoss(extractor).terms(gen, tgt)
    np.testing.assert_allclose(terms["global_score"].numpy(), HAND_G, rtol=0, atol=1e-6)
    np.testing.assert_allclose(terms["spatial_distance"].numpy(), HAND_DISTANCE, rtol=0, atol=1e-7)
    np.testing.assert_allclose(terms["spatial_mse"].numpy(), HAND_MSE, rtol=0, atol=1e-6)
    np.testing.assert_allclose(terms["loss"].numpy(), [6.25 + 4 / 9, 20.0], rtol=1e-6)
    assert "l1" not in terms and extractor.ranges == ["unit", "unit"]
    # With weights 3, 2 and an L1 term of weight 0.5 (mean absolute pixel difference of 18 values):
    #   pair 0: CLS |0.5| + |-1| = 1.5, keys |K_o - K_t| = 0 + 0 + 1 + 1 + 1 + 1 = 4, L1 = 5.5 / 18 = 11/36;
    #   pair 1: CLS |2| + |0| = 2, keys |K_t - K_o| = 2 (1 + 2 + 1 + 0 + 0 + 3) = 14, L1 = 16 / 18 = 8/9.
    loss_fn = M.MapFeaturePerceptionLoss(extractor, global_weight=3.0, spatial_weight=2.0, l1_weight=0.5,
                                         input_range="symmetric")
    terms = loss_fn.terms(gen, tgt)
    np.testing.assert_allclose(terms["l1"].numpy(), [11 / 36, 8 / 9], rtol=1e-6)
    expected = [3 * 0.625 + 2 * 4 / 9 + 0.5 * 11 / 36, 3 * 2.0 + 0.5 * 8 / 9]
    np.testing.assert_allclose(terms["loss"].numpy(), expected, rtol=1e-6)
    assert float(loss_fn(gen, tgt)) == pytest.approx(sum(expected) / 2, rel=1e-6)  # the batch mean
    assert extractor.ranges[-2:] == ["symmetric", "symmetric"]


def test_scores_equal_an_independent_recomputation_from_the_extracted_features(extractor):
    gen = [synthetic_map(i) for i in range(3)]
    tgt = [synthetic_map(40 + i) for i in range(3)]
    df = R.mfp_scores(gen, tgt, extractor, global_weight=3.0, spatial_weight=2.0, pixel_metrics=False)
    with torch.no_grad():
        f_o = extractor(torch.from_numpy(np.stack([extractor.preprocessing(im) for im in gen])))
        f_t = extractor(torch.from_numpy(np.stack([extractor.preprocessing(im) for im in tgt])))
    cls_o, cls_t = f_o.cls.double().numpy(), f_t.cls.double().numpy()
    d = cls_o.shape[1]
    global_score = np.array([1 - sum((cls_o[p, c] - cls_t[p, c]) ** 2 for c in range(d)) / d for p in range(3)])

    def cosines(keys):  # one image's (N, d) keys -> (N, N) cosine matrix, one entry at a time
        norms = np.sqrt((keys**2).sum(axis=1))
        n = keys.shape[0]
        return np.array([[keys[i] @ keys[j] / (norms[i] * norms[j]) for j in range(n)] for i in range(n)])

    sq = np.array([((cosines(f_o.keys[p].double().numpy()) - cosines(f_t.keys[p].double().numpy())) ** 2).sum()
                   for p in range(3)])
    n_tokens = extractor.n_tokens
    np.testing.assert_allclose(df["global_score"], global_score, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(df["spatial_distance"], np.sqrt(sq), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(df["spatial_mse"], sq / n_tokens**2, rtol=1e-4, atol=1e-8)
    np.testing.assert_allclose(df["loss"], 3 * (1 - global_score) + 2 * sq / n_tokens**2, rtol=1e-4, atol=1e-6)
    assert (global_score < 1).all() and (sq > 0).all()


def test_identical_images_give_ideal_terms(extractor):
    maps = [synthetic_map(i) for i in range(3)]
    df = R.mfp_scores(maps, [m.copy() for m in maps], extractor)
    assert list(df.columns) == ["pair", "global_score", "spatial_distance", "spatial_mse", "loss", "ssim", "psnr",
                                "pixel_resized"]
    np.testing.assert_allclose(df["global_score"], 1.0, atol=1e-6)
    np.testing.assert_allclose(df["spatial_distance"], 0.0, atol=1e-5)
    np.testing.assert_allclose(df["spatial_mse"], 0.0, atol=1e-10)
    np.testing.assert_allclose(df["loss"], 0.0, atol=1e-5)
    np.testing.assert_allclose(df["ssim"], 1.0)
    assert np.isinf(df["psnr"]).all()
    summary = R.summarize_scores(df)
    assert summary["psnr_infinite_pairs"] == 3 and summary["means"]["psnr"] is None


def test_different_maps_score_worse_and_terms_are_consistent(extractor):
    gen = [synthetic_map(i) for i in range(3)]
    tgt = [synthetic_map(100 + i) for i in range(3)]
    df = R.mfp_scores(gen, tgt, extractor)
    assert (df["global_score"] < 1).all() and (df["spatial_distance"] > 0).all()
    n = extractor.n_tokens
    np.testing.assert_allclose(df["spatial_mse"], df["spatial_distance"] ** 2 / n**2, rtol=1e-5)
    np.testing.assert_allclose(df["loss"], 10 * (1 - df["global_score"]) + df["spatial_mse"], rtol=1e-6)
    assert (df["ssim"] < 1).all() and np.isfinite(df["psnr"]).all()


def test_swapping_generated_and_target_gives_same_terms(extractor):
    gen = [synthetic_map(i) for i in range(3)]
    tgt = [synthetic_map(50 + i) for i in range(3)]
    a = R.mfp_scores(gen, tgt, extractor)
    b = R.mfp_scores(tgt, gen, extractor)
    for col in ("global_score", "spatial_distance", "spatial_mse", "loss", "ssim", "psnr"):
        np.testing.assert_allclose(a[col], b[col], rtol=1e-6, atol=1e-7, err_msg=col)


def test_batch_size_does_not_change_results(extractor):
    gen = [synthetic_map(i) for i in range(3)]
    tgt = [synthetic_map(20 + i) for i in range(3)]
    one = R.mfp_scores(gen, tgt, extractor, batch_size=1, pixel_metrics=False)
    three = R.mfp_scores(gen, tgt, extractor, batch_size=3, pixel_metrics=False)
    for col in M.TERM_COLUMNS:
        np.testing.assert_allclose(one[col], three[col], atol=1e-5, err_msg=col)


def test_key_capture_matches_independent_recomputation(extractor):
    x = extractor.prepare(rand(2, 3, 32, 32, seed=1))
    with torch.no_grad():
        feats = extractor(x)
        out = extractor.model(pixel_values=x, output_hidden_states=True)
        layer = extractor.model.layers[-1] if hasattr(extractor.model, "layers") else extractor.model.encoder.layer[-1]
        key = layer.attention.k_proj if hasattr(layer.attention, "k_proj") else layer.attention.attention.key
        last_input = out.hidden_states[-2]  # embeddings + one entry per layer: the last layer's input
        expected_keys = torch.nn.functional.linear(layer.layernorm_before(last_input), key.weight, key.bias)
    assert feats.keys.shape == (2, extractor.n_tokens, TINY["hidden_size"])
    torch.testing.assert_close(feats.keys, expected_keys, rtol=1e-5, atol=1e-6)
    # last_block CLS = the last layer's output before the final layer norm (paper's z_L^0).
    torch.testing.assert_close(feats.cls, out.hidden_states[-1][:, 0], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(feats.cls, out.last_hidden_state[:, 0])
    # Self-similarity is the cosine of key vectors.
    k = expected_keys[0] / expected_keys[0].norm(dim=-1, keepdim=True)
    torch.testing.assert_close(M.self_similarity(feats.keys)[0], k @ k.T, rtol=1e-5, atol=1e-6)


def test_final_layernorm_cls_source(tiny_vit_dir):
    ext = E.DinoViTFeatureExtractor(tiny_vit_dir, image_size=32, device="cpu", cls_source="final_layernorm")
    x = ext.prepare(rand(1, 3, 32, 32, seed=2))
    with torch.no_grad():
        torch.testing.assert_close(ext(x).cls, ext.model(pixel_values=x).last_hidden_state[:, 0])
    assert ext.config["cls_source"] == "final_layernorm"
    with pytest.raises(ValueError, match="cls_source"):
        E.DinoViTFeatureExtractor(tiny_vit_dir, image_size=32, cls_source="pooler")


def test_hooks_are_removed_after_use_and_after_an_error(tiny_vit_dir):
    # A fresh model: transformers 5 itself leaves output-capturing hooks on the layers once a
    # forward pass asks for output_hidden_states (as another test does), so only here is "empty" exact.
    extractor = E.DinoViTFeatureExtractor(tiny_vit_dir, image_size=32, device="cpu")
    modules = [extractor.key_projection, extractor.last_layer]
    assert all(len(m._forward_hooks) == 0 for m in modules)
    extractor.extract(rand(1, 3, 32, 32, seed=3))
    assert all(len(m._forward_hooks) == 0 for m in modules)

    def boom(module, inputs, output):
        raise RuntimeError("mid-forward failure")

    # The MLP runs after the key projection inside the last layer, so our hooks are live when it fails.
    handle = extractor.last_layer.mlp.register_forward_hook(boom)
    try:
        with pytest.raises(RuntimeError, match="mid-forward failure"):
            extractor.extract(rand(1, 3, 32, 32, seed=4))
    finally:
        handle.remove()
    assert all(len(m._forward_hooks) == 0 for m in modules)
    assert len(extractor.last_layer.mlp._forward_hooks) == 0


def test_other_image_size_interpolates_positions(tiny_vit_dir):
    ext = E.DinoViTFeatureExtractor(tiny_vit_dir, image_size=48, device="cpu")
    assert ext.n_tokens == 37 and ext.config["interpolate_pos_encoding"] is True
    feats = ext.extract(rand(2, 3, 64, 64, seed=5))
    assert feats.keys.shape == (2, 37, 32)
    with pytest.raises(ValueError, match="multiple of the patch size"):
        E.DinoViTFeatureExtractor(tiny_vit_dir, image_size=36)


# -- the loss ----------------------------------------------------------------------------------


def test_loss_gradients_reach_the_input_not_the_weights(extractor):
    loss_fn = M.MapFeaturePerceptionLoss(extractor, l1_weight=1.0)
    gen = rand(2, 3, 40, 40, seed=99).requires_grad_()
    target = rand(2, 3, 40, 40, seed=6)
    loss = loss_fn(gen, target)
    assert loss.dim() == 0 and loss.item() > 0
    loss.backward()
    assert gen.grad is not None and torch.isfinite(gen.grad).all() and gen.grad.abs().sum() > 0
    params = list(extractor.parameters())
    assert params and all(not p.requires_grad for p in params)
    assert all(p.grad is None for p in params)


def test_loss_matches_weighted_terms_and_is_zero_for_identical_inputs(extractor):
    loss_fn = M.MapFeaturePerceptionLoss(extractor, global_weight=3.0, spatial_weight=2.0, l1_weight=0.5)
    gen, target = rand(2, 3, 32, 32, seed=7), rand(2, 3, 32, 32, seed=8)
    terms = loss_fn.terms(gen, target)
    expected = 3.0 * (1 - terms["global_score"]) + 2.0 * terms["spatial_mse"] + 0.5 * (gen - target).abs().mean((1, 2, 3))
    torch.testing.assert_close(terms["loss"], expected)
    torch.testing.assert_close(loss_fn(gen, target), expected.mean())
    assert loss_fn(target, target.clone()).item() == pytest.approx(0.0, abs=1e-5)


def test_loss_input_ranges_agree(extractor):
    x, y = rand(2, 3, 32, 32, seed=9), rand(2, 3, 32, 32, seed=10)
    unit = M.MapFeaturePerceptionLoss(extractor, input_range="unit")(x, y)
    sym = M.MapFeaturePerceptionLoss(extractor, input_range="symmetric")(2 * x - 1, 2 * y - 1)
    mean, std = extractor._mean, extractor._std
    norm = M.MapFeaturePerceptionLoss(extractor, input_range="normalized")((x - mean) / std, (y - mean) / std)
    torch.testing.assert_close(unit, sym, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(unit, norm, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="input_range"):
        M.MapFeaturePerceptionLoss(extractor, input_range="0-255")


def test_loss_is_given_its_extractor_or_builds_it_with_a_factory(extractor, tiny_vit_dir):
    calls = []

    def factory(model, **options):
        calls.append((model, options))
        return extractor

    x, y = rand(2, 3, 32, 32, seed=11), rand(2, 3, 32, 32, seed=12)
    given = M.MapFeaturePerceptionLoss(extractor)(x, y)
    built = M.MapFeaturePerceptionLoss(model="some/vit", image_size=32, extractor_factory=factory)
    assert built.extractor is extractor
    assert calls == [("some/vit", {"revision": None, "image_size": 32, "device": None, "cls_source": "last_block"})]
    torch.testing.assert_close(built(x, y), given)
    # metrics import no model: no extractor and no factory is an error naming mfp_loss, which builds
    # the DINO-ViT extractor (loaded from the same local folder, it gives the same loss)
    with pytest.raises(TypeError, match="mfp_loss"):
        M.MapFeaturePerceptionLoss(model=tiny_vit_dir, image_size=32, device="cpu")
    default = R.mfp_loss(tiny_vit_dir, image_size=32, device="cpu")
    assert isinstance(default, M.MapFeaturePerceptionLoss) and isinstance(default.extractor, E.DinoViTFeatureExtractor)
    torch.testing.assert_close(default(x, y), given)
    with pytest.raises(ValueError, match="not both"):
        M.MapFeaturePerceptionLoss(extractor, model="some/vit")


def test_loss_class_is_one_class_that_pickles_by_name(extractor):
    import pickle

    from geofidelity_bench.metrics.mfp import MapFeaturePerceptionLoss

    assert MapFeaturePerceptionLoss is M.MapFeaturePerceptionLoss and issubclass(MapFeaturePerceptionLoss, torch.nn.Module)
    assert MapFeaturePerceptionLoss.__module__ == "geofidelity_bench.metrics.mfp"
    # Defined on first access, yet found by its name (what pickling a loss module relies on).
    assert pickle.loads(pickle.dumps(MapFeaturePerceptionLoss)) is MapFeaturePerceptionLoss
    assert isinstance(MapFeaturePerceptionLoss(extractor), M.MapFeaturePerceptionLoss)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        M.NoSuchThing


def test_extractor_stays_in_eval_mode(extractor):
    loss_fn = M.MapFeaturePerceptionLoss(extractor)
    parent = torch.nn.Sequential(torch.nn.Conv2d(3, 3, 1), loss_fn)
    parent.train()
    assert parent[0].training and loss_fn.training
    assert not extractor.training and not extractor.model.training
    assert not any(m.training for m in extractor.model.modules())
    loss_fn.train(True)
    assert not any(m.training for m in extractor.modules())


# -- loading -----------------------------------------------------------------------------------


def test_local_checkpoint_loads_offline_and_is_recorded(tiny_vit_dir, extractor):
    from huggingface_hub import constants

    assert constants.HF_HUB_OFFLINE  # conftest sets HF_HUB_OFFLINE=1
    cfg = extractor.config
    assert cfg["weights"] == str(tiny_vit_dir.resolve()) and len(cfg["weights_sha256"]) == 64
    assert cfg["image_size"] == 32 and cfg["n_tokens"] == 17 and cfg["preprocessing"]["mean"] == [0.485, 0.456, 0.406]
    json.dumps(cfg)


def test_unavailable_hub_id_gives_a_clear_error():
    with pytest.raises(E.MFPModelUnavailableError) as info:
        E.DinoViTFeatureExtractor("no-such-org/no-such-mfp-model", device="cpu")
    msg = str(info.value)
    assert "no-such-org/no-such-mfp-model" in msg and "save_pretrained" in msg and "efficientnet" not in msg


def test_missing_local_path_gives_a_clear_error(tmp_path):
    with pytest.raises(E.MFPModelUnavailableError, match="not a directory"):
        E.DinoViTFeatureExtractor(tmp_path / "nope", device="cpu")


def test_pixel_metrics_refuse_pairs_of_different_sizes_by_default(extractor, tmp_path):
    big, small = tmp_path / "big.png", tmp_path / "small.png"
    synthetic_map(0, 96).save(big)
    synthetic_map(0, 64).save(small)
    with pytest.raises(R.PixelSizeError, match=r"1 of 2 pair\(s\) differ: tile_b 96x96 vs target 64x64.*"
                                               r"--resize-pixel-metrics.*bicubic.*--no-pixel-metrics"):
        R.mfp_scores([small, big], [small, small], extractor, names=["tile_a", "tile_b"])
    # EXIF orientation counts: a 64x48 file stored rotated is a 48x64 image, as load_image decodes it
    rotated = tmp_path / "rotated.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6
    synthetic_map(1, 64).crop((0, 0, 64, 48)).save(rotated, exif=exif)
    upright = tmp_path / "upright.png"
    synthetic_map(1, 64).crop((0, 0, 48, 64)).save(upright)
    assert R.check_pixel_sizes([rotated], [upright]) == []
    # pixel_metrics=False needs no equal sizes
    df = R.mfp_scores([big], [small], extractor, pixel_metrics=False)
    assert "ssim" not in df.columns and "pixel_resized" not in df.columns


def test_resized_pixel_metrics_are_marked_per_row_and_equal_a_bicubic_resize(extractor):
    gen = [synthetic_map(0, 96), synthetic_map(1, 64), synthetic_map(2, 80)]
    tgt = [synthetic_map(5, 64), synthetic_map(6, 64), synthetic_map(7, 64)]
    df = R.mfp_scores(gen, tgt, extractor, resize_pixel_metrics=True, names=["a", "b", "c"])
    assert df["pixel_resized"].tolist() == [True, False, True]
    assert df.attrs["n_pixel_resized"] == 2 and df.attrs["parameters"]["resize_pixel_metrics"] is True
    for i in range(3):  # independently: the generated image resized to the target's size, bicubic
        g = gen[i].resize((64, 64), Image.Resampling.BICUBIC) if gen[i].size != (64, 64) else gen[i]
        assert df["ssim"][i] == pytest.approx(Q.ssim(g, tgt[i]), abs=1e-12)
        assert df["psnr"][i] == pytest.approx(_independent_psnr(g, tgt[i]), abs=1e-9)
    out = R.mfp_compute(gen, tgt, model=extractor, resize_pixel_metrics=True)
    assert out["per_pair"]["pixel_resized"] == [True, False, True] and out["config"]["n_pixel_resized"] == 2
    json.dumps(out)


def test_mfp_scores_rejects_unequal_counts(extractor):
    with pytest.raises(ValueError, match="2 generated images but 1 targets"):
        R.mfp_scores([synthetic_map(0), synthetic_map(1)], [synthetic_map(2)], extractor)


def test_mfp_compute_returns_means_lists_and_config(extractor, tiny_vit_dir):
    gen = [synthetic_map(i) for i in range(2)]
    tgt = [synthetic_map(30 + i) for i in range(2)]
    out = R.mfp_compute(gen, tgt, model=extractor, batch_size=2)
    assert out["n_pairs"] == 2
    for key in ("global_score", "spatial_distance", "spatial_mse", "loss", "ssim", "psnr"):
        assert out[key] == pytest.approx(float(np.mean(out["per_pair"][key])))
    assert out["config"]["image_size"] == 32 and out["config"]["global_weight"] == 10.0
    json.dumps(out)
    by_path = R.mfp_compute(gen, tgt, model=str(tiny_vit_dir), image_size=32, device="cpu")
    assert by_path["global_score"] == pytest.approx(out["global_score"], abs=1e-6)


# -- SSIM and PSNR -----------------------------------------------------------------------------


def _gaussian_window() -> np.ndarray:
    ax = np.arange(11) - 5
    g = np.exp(-(ax[:, None] ** 2 + ax[None, :] ** 2) / (2 * 1.5**2))
    return g / g.sum()


def test_ssim_identical_and_symmetric():
    a = np.asarray(synthetic_map(1))
    b = np.asarray(synthetic_map(2))
    assert Q.ssim(a, a) == pytest.approx(1.0)
    assert Q.ssim(a, b) == pytest.approx(Q.ssim(b, a))
    assert -1.0 <= Q.ssim(a, b) < 1.0


def test_ssim_constant_offset_known_value():
    # Constant images: sigma = 0, so SSIM = (2 a b + C1) / (a^2 + b^2 + C1) exactly.
    a = np.full((32, 32, 3), 100, np.uint8)
    b = np.full((32, 32, 3), 120, np.uint8)
    c1 = (0.01 * 255) ** 2
    expected = (2 * 100 * 120 + c1) / (100**2 + 120**2 + c1)
    assert Q.ssim(a, b) == pytest.approx(expected, rel=1e-12)


def test_ssim_textured_offset_matches_direct_valid_convolution():
    from scipy.signal import convolve2d

    rng = np.random.default_rng(0)
    x = rng.uniform(40, 160, size=(24, 30))
    y = x + 25.0  # same variance and covariance: only the luminance term differs from 1
    w = _gaussian_window()
    mu_x = convolve2d(x, w, mode="valid")
    mu_y = mu_x + 25.0
    c1 = (0.01 * 255) ** 2
    expected = np.mean((2 * mu_x * mu_y + c1) / (mu_x**2 + mu_y**2 + c1))
    assert Q.ssim(x, y) == pytest.approx(expected, rel=1e-9)


def test_ssim_general_case_matches_direct_valid_convolution():
    from scipy.signal import convolve2d

    rng = np.random.default_rng(1)
    x = rng.uniform(0, 255, size=(20, 23))
    y = np.clip(0.6 * x + rng.normal(0, 30, size=x.shape) + 20, 0, 255)
    w = _gaussian_window()

    def f(z):
        return convolve2d(z, w, mode="valid")

    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    mx, my = f(x), f(y)
    vx, vy, cxy = f(x * x) - mx**2, f(y * y) - my**2, f(x * y) - mx * my
    expected = np.mean((2 * mx * my + c1) * (2 * cxy + c2) / ((mx**2 + my**2 + c1) * (vx + vy + c2)))
    assert Q.ssim(x, y) == pytest.approx(expected, rel=1e-9)
    with pytest.raises(ValueError, match="at least 11x11"):
        Q.ssim(x[:10], y[:10])
    with pytest.raises(ValueError, match="same size"):
        Q.ssim(x, y[:, :20])


def test_psnr_known_value():
    a = np.full((16, 16, 3), 100, np.uint8)
    b = np.full((16, 16, 3), 110, np.uint8)
    assert Q.psnr(a, b) == pytest.approx(10 * math.log10(255**2 / 100.0))
    assert Q.psnr(a, a) == math.inf


def _independent_psnr(a, b) -> float:
    mse = np.mean((np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)) ** 2)
    return 10 * math.log10(255**2 / mse)


def test_psnr_of_uint8_pil_and_integer_images_is_computed_in_float():
    # Random values in both directions: computed in uint8 or int16, a - b and its square wrap.
    rng = np.random.default_rng(23)
    a = rng.integers(0, 256, (16, 16, 3)).astype(np.uint8)
    b = rng.integers(0, 256, (16, 16, 3)).astype(np.uint8)
    expected = _independent_psnr(a, b)
    for x, y in [(a, b), (Image.fromarray(a), Image.fromarray(b)), (a.astype(np.int16), b.astype(np.int16))]:
        assert Q.psnr(x, y) == pytest.approx(expected, rel=1e-12)


def test_ssim_of_rgb_is_ssim_of_bt601_luma():
    rng = np.random.default_rng(29)
    a = rng.integers(0, 256, (24, 20, 3)).astype(np.uint8)
    b = np.clip(a.astype(np.int16) + rng.integers(-60, 60, a.shape), 0, 255).astype(np.uint8)
    b[..., 0] = 255 - b[..., 0]  # channels that differ, so that any other channel weighting shows

    def luma(z):
        z = z.astype(np.float64)
        return 0.299 * z[..., 0] + 0.587 * z[..., 1] + 0.114 * z[..., 2]

    assert Q.ssim(a, b) == pytest.approx(Q.ssim(luma(a), luma(b)), rel=1e-12)
    assert Q.ssim(a.astype(np.float64), b.astype(np.float64)) == pytest.approx(Q.ssim(a, b), rel=1e-12)


def test_ssim_of_the_smallest_image_is_its_one_window():
    # 11x11: the valid region is one pixel, the whole Gaussian window.
    rng = np.random.default_rng(31)
    x, y = rng.uniform(0, 255, (11, 11)), rng.uniform(0, 255, (11, 11))
    w = _gaussian_window()
    mx, my = (w * x).sum(), (w * y).sum()
    vx, vy, cxy = (w * x * x).sum() - mx**2, (w * y * y).sum() - my**2, (w * x * y).sum() - mx * my
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    expected = (2 * mx * my + c1) * (2 * cxy + c2) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    assert Q.ssim(x, y) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("fn", [Q.psnr, Q.ssim])
def test_image_quality_errors_name_the_image_and_the_problem(fn):
    good = np.zeros((16, 16, 3))
    for bad in (np.zeros((16, 16, 4)), np.zeros((16, 16, 3, 1)), np.zeros(16)):
        with pytest.raises(ValueError, match="^" + re.escape(f"image_a must be HxW or HxWx3, got shape {bad.shape}") + "$"):
            fn(bad, good)
        with pytest.raises(ValueError, match="^" + re.escape(f"image_b must be HxW or HxWx3, got shape {bad.shape}") + "$"):
            fn(good, bad)
    with pytest.raises(ValueError, match="image_b"):
        fn(np.zeros((16, 16, 3), np.uint8), b"not an image")
    with pytest.raises(ValueError, match="image_a"):
        fn(b"not an image", np.zeros((16, 16, 3), np.uint8))
    if fn is Q.psnr:
        with pytest.raises(ValueError, match=r"^psnr needs images of the same shape, got \(16, 16, 3\) and \(16, 12, 3\)$"):
            fn(good, np.zeros((16, 12, 3)))


# -- the command -------------------------------------------------------------------------------


def _write_maps(folder, names, seed0):
    for i, name in enumerate(names):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        synthetic_map(seed0 + i).save(path)


def _run_cli(argv):
    from geofidelity_bench.cli import main

    return main(argv)


def test_cli_writes_csv_summary_and_plot(tmp_path, tiny_vit_dir):
    gen, tgt, out = tmp_path / "gen", tmp_path / "gt", tmp_path / "out"
    names = ["r1/t00.png", "r1/t01.png", "r2/t02.png"]
    _write_maps(gen, names, 0)
    _write_maps(tgt, names, 10)
    synthetic_map(0).save(tgt / "r1" / "t00.png")  # one identical pair (PSNR inf)
    code = _run_cli(["mfp", "--generated", str(gen), "--targets", str(tgt), "--model", str(tiny_vit_dir),
                     "--image-size", "32", "--device", "cpu", "--batch-size", "2", "--out", str(out)])
    assert code == 0
    with open(out / "mfp.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["pair"] for r in rows] == names
    for col in ("global_score", "spatial_distance", "spatial_mse", "loss", "ssim", "psnr", "generated", "target"):
        assert col in rows[0]
    assert float(rows[0]["global_score"]) == pytest.approx(1.0) and rows[0]["psnr"] == "inf"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_pairs"] == 3 and summary["psnr_infinite_pairs"] == 1
    assert set(summary["means"]) == {"global_score", "spatial_distance", "spatial_mse", "loss", "ssim", "psnr"}
    assert summary["image_size"] == 32 and summary["model"]["weights_sha256"]
    assert summary["parameters"]["global_weight"] == 10.0 and summary["parameters"]["spatial_weight"] == 1.0
    assert "torch" in summary["versions"] and "transformers" in summary["versions"]
    assert (out / "mfp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(out.glob("*.tmp"))


#: The directions docs/benchmark.md section 10 gives each score.
DOC_DIRECTIONS = {"global_score": "higher is better", "spatial_distance": "lower is better",
                  "spatial_mse": "lower is better", "loss": "lower is better", "ssim": "higher is better",
                  "psnr": "higher is better"}


def test_cli_summary_gives_each_score_its_direction_and_enough_digits(tmp_path, tiny_vit_dir, capsys):
    gen, tgt, out = tmp_path / "gen", tmp_path / "gt", tmp_path / "out"
    names = ["a.png", "b.png", "c.png"]
    _write_maps(gen, names, 0)
    _write_maps(tgt, names, 10)
    synthetic_map(0).save(tgt / "a.png")  # one identical pair: PSNR inf, left out of its mean
    code = _run_cli(["mfp", "--generated", str(gen), "--targets", str(tgt), "--model", str(tiny_vit_dir),
                     "--image-size", "32", "--device", "cpu", "--out", str(out)])
    assert code == 0
    printed = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines() if line.strip()}
    with open(out / "mfp.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for key, direction in DOC_DIRECTIONS.items():
        value, *words = printed[key]
        assert " ".join(words) == direction, (key, words)
        values = np.array([float(r[key]) for r in rows])
        mean = values[np.isfinite(values)].mean()
        assert float(value) == pytest.approx(mean, rel=1e-5), (key, value, mean)  # 6 significant digits


def test_cli_refuses_pairs_of_different_sizes_before_loading_the_model(tmp_path, tiny_vit_dir, capsys):
    gen, tgt, out = tmp_path / "gen", tmp_path / "gt", tmp_path / "out"
    _write_maps(gen, ["a.png", "b.png"], 0)
    _write_maps(tgt, ["a.png", "b.png"], 5)
    synthetic_map(9, 96).save(gen / "b.png")
    # a model that cannot load: the size error comes first, so no model is touched
    code = _run_cli(["mfp", "--generated", str(gen), "--targets", str(tgt), "--model", str(tmp_path / "no-model"),
                     "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert "b.png 96x96 vs target 64x64" in err and "--resize-pixel-metrics" in err and "a.png" not in err
    assert not out.exists()


def test_cli_resize_flag_marks_rows_prints_the_count_and_keeps_it(tmp_path, tiny_vit_dir, capsys):
    gen, tgt, out = tmp_path / "gen", tmp_path / "gt", tmp_path / "out"
    _write_maps(gen, ["a.png", "b.png", "c.png"], 0)
    _write_maps(tgt, ["a.png", "b.png", "c.png"], 5)
    synthetic_map(9, 96).save(gen / "b.png")
    code = _run_cli(["mfp", "--generated", str(gen), "--targets", str(tgt), "--model", str(tiny_vit_dir),
                     "--image-size", "32", "--device", "cpu", "--resize-pixel-metrics", "--out", str(out)])
    assert code == 0
    assert re.search(r"resized +1 of 3 pair\(s\) for SSIM/PSNR .*pixel_resized.*bicubic", capsys.readouterr().out)
    with open(out / "mfp.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["pair"], r["pixel_resized"]) for r in rows] == [("a.png", "False"), ("b.png", "True"), ("c.png", "False")]
    expected = Q.ssim(synthetic_map(9, 96).resize((64, 64), Image.Resampling.BICUBIC), Image.open(tgt / "b.png"))
    assert float(rows[1]["ssim"]) == pytest.approx(expected, abs=1e-9)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_pixel_resized"] == 1 and summary["parameters"]["resize_pixel_metrics"] is True
    assert "bicubic" in summary["pixel_resize"]


def test_histograms_count_pairs_in_integers_and_say_what_psnr_leaves_out(extractor):
    import matplotlib.pyplot as plt

    maps = [synthetic_map(i) for i in range(3)]
    df = R.mfp_scores(maps, [maps[0].copy(), maps[1].copy(), synthetic_map(20)], extractor)
    assert np.isinf(df["psnr"]).sum() == 2
    fig = R.mfp_figure(df)
    try:
        count_axes = [ax for ax in fig.axes if ax.get_ylabel() == "pairs"]
        assert len(count_axes) == 6
        for ax in count_axes:
            low, high = ax.get_ylim()
            ticks = [t for t in ax.get_yticks() if low <= t <= high]
            assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), (ax.get_title(), ticks)
        psnr_title = next(ax.get_title() for ax in count_axes if ax.get_title().startswith("PSNR"))
        assert "1 finite pair(s); 2 identical pair(s) (PSNR = inf) left out" in psnr_title
    finally:
        plt.close(fig)


def test_cli_pairs_csv_overrides_names(tmp_path, tiny_vit_dir):
    gen, tgt, out = tmp_path / "gen", tmp_path / "gt", tmp_path / "out"
    _write_maps(gen, ["a.png", "b.png"], 0)
    _write_maps(tgt, ["x.png", "y.png"], 5)
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("generated,target\na.png,x.png\nb.png,y.png\n")
    code = _run_cli(["mfp", "--pairs", str(pairs), "--generated", str(gen), "--targets", str(tgt),
                     "--model", str(tiny_vit_dir), "--image-size", "32", "--device", "cpu", "--out", str(out)])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_pairs"] == 2 and summary["parameters"]["pairing"] == "csv"


def test_cli_errors_name_the_files(tmp_path, tiny_vit_dir, capsys):
    gen, tgt = tmp_path / "gen", tmp_path / "gt"
    _write_maps(gen, ["a.png", "b.png", "c.png"], 0)
    _write_maps(tgt, ["a.png", "b.png"], 5)
    base = ["--model", str(tiny_vit_dir), "--image-size", "32", "--out", str(tmp_path / "out")]

    assert _run_cli(["mfp", "--generated", str(gen), "--targets", str(tgt), *base]) == 2
    err = capsys.readouterr().err
    assert "3 images" in err and "has 2" in err and "c.png" in err

    (tgt / "d.png").write_bytes((tgt / "a.png").read_bytes())
    assert _run_cli(["mfp", "--generated", str(gen), "--targets", str(tgt), *base]) == 2
    err = capsys.readouterr().err
    assert "do not match" in err and "c.png" in err and "d.png" in err

    assert _run_cli(["mfp", "--generated", str(tmp_path / "missing"), "--targets", str(tgt), *base]) == 2
    assert "--generated folder not found" in capsys.readouterr().err

    pairs = tmp_path / "pairs.csv"
    pairs.write_text("gen,tgt\na.png,a.png\n")
    assert _run_cli(["mfp", "--pairs", str(pairs), *base]) == 2
    assert "columns 'generated' and 'target'" in capsys.readouterr().err
    pairs.write_text("generated,target\na.png,zzz.png\n")
    assert _run_cli(["mfp", "--pairs", str(pairs), "--generated", str(gen), "--targets", str(tgt), *base]) == 2
    assert "zzz.png" in capsys.readouterr().err

    (gen / "c.png").write_bytes(b"not a png")
    (tgt / "c.png").write_bytes((tgt / "a.png").read_bytes())
    (tgt / "d.png").unlink()
    assert _run_cli(["mfp", "--generated", str(gen), "--targets", str(tgt), *base]) == 2
    assert "c.png" in capsys.readouterr().err


def test_cli_unavailable_model_is_a_clear_error(tmp_path, capsys):
    gen, tgt = tmp_path / "gen", tmp_path / "gt"
    _write_maps(gen, ["a.png"], 0)
    _write_maps(tgt, ["a.png"], 1)
    code = _run_cli(["mfp", "--generated", str(gen), "--targets", str(tgt), "--model", "no-such-org/no-such-mfp-model",
                     "--out", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err
    assert "no-such-org/no-such-mfp-model" in err and "--model" in err
    assert not (tmp_path / "out" / "mfp.csv").exists()


def test_cli_module_does_not_import_torch():
    code = ("import sys; import geofidelity_bench.cli.mfp, geofidelity_bench.metrics; "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "assert 'geofidelity_bench.encoders.dino_vit_keys' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_self_similarity_uses_its_documented_epsilon():
    """Keys shorter than eps = 1e-8 are divided by eps, not by their own norm (F.normalize semantics):
    keys of norm about 1e-10 give self-similarities 1e-4 times those of the unit keys."""
    torch.manual_seed(0)
    keys = torch.randn(1, 5, 6, dtype=torch.float64)
    unit = keys / keys.norm(dim=-1, keepdim=True)
    tiny = unit * 1e-10
    expected = (tiny / 1e-8) @ (tiny / 1e-8).transpose(-1, -2)  # max(norm, eps) = eps
    torch.testing.assert_close(M.self_similarity(tiny).double(), expected, rtol=1e-5, atol=1e-12)
    torch.testing.assert_close(M.self_similarity(unit), (unit @ unit.transpose(-1, -2)).float(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("which", ["cls", "keys"])
def test_pair_terms_rejects_features_of_different_shapes(which):
    f = M.MFPFeatures(cls=torch.ones(1, 4), keys=torch.ones(1, 3, 4))
    other = f._replace(cls=torch.ones(1, 5)) if which == "cls" else f._replace(keys=torch.ones(1, 5, 4))
    with pytest.raises(ValueError, match=r"^feature shapes differ: generated \(1, 3, 4\), target \((1, 3, 4|1, 5, 4)\)$"):
        M.pair_terms(f, other)
