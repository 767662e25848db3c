r"""Map Feature Perception (MFP): DINO-ViT global and spatial similarity of paired map tiles (SPEC section 10).

For a generated map tile :math:`I_o` and its target :math:`I_t`, a self-supervised DINO ViT
(``facebook/dino-vitb8`` by default) gives two descriptors per image:

* the **CLS token** of the last transformer block, :math:`z_L^0` in the paper's notation, i.e. the
  output of the last ``ViTLayer`` *before* the model's final layer norm (``cls_source="last_block"``,
  the default). This follows the paper's definition ("the [CLS] token after passing through the
  L layers, :math:`z_L^0`") and the reference implementation it builds on (Splice, Tumanyan et al.
  2022), which hooks the last block's output. ``cls_source="final_layernorm"`` takes
  ``last_hidden_state[:, 0]`` (after the final layer norm) instead; the choice is recorded in the config.
* the **keys** :math:`K^L = \mathrm{LN}(X^L) W_K^L + b_K^L` of the last self-attention layer for all
  :math:`n + 1` tokens (CLS + patches), heads concatenated: exactly the output of that layer's key
  projection (``model.layers[-1].attention.k_proj`` in transformers 5,
  ``model.encoder.layer[-1].attention.attention.key`` in transformers 4), captured with a forward
  hook that is removed after every forward pass, even one that fails.

The per-pair terms are

.. math::

    G = 1 - \frac{1}{d}\sum_{c=1}^{d} (\mathrm{CLS}_o - \mathrm{CLS}_t)_c^2
    \qquad \text{(global score, 1 for identical images, higher is better, unbounded below)}

    S_{ij}(I) = \cos(K_i^L(I), K_j^L(I)), \quad S \in \mathbb{R}^{(n+1)\times(n+1)}

    \text{spatial\_distance} = \lVert S(I_o) - S(I_t) \rVert_F, \qquad
    \text{spatial\_mse} = \frac{1}{(n+1)^2} \lVert S(I_o) - S(I_t) \rVert_F^2
    \qquad \text{(0 for identical images, lower is better)}

    \mathcal{L} = \lambda_G (1 - G) + \lambda_S \, \text{spatial\_mse} \; [+ \lambda_{1} \lVert I_o - I_t \rVert_1]

with :math:`\lambda_G = 10`, :math:`\lambda_S = 1` (SPEC; the paper's :math:`\lambda_1, \lambda_2`).
The paper's tables (e.g. C2GM 0.7351 vs TSIT 0.5910 on MLMG-US) are reference points only; they
do not say how their single MFP number combines the two terms, so none is invented here.

Preprocessing of image files (recorded in ``extractor.config``): decode to RGB
(:func:`~geofidelity_bench.images.load_image`), resize to ``image_size x image_size`` (bicubic,
PIL, aspect ratio not kept: map tiles are square), scale to [0, 1], ImageNet mean/std. When
``image_size`` differs from the checkpoint's (224 for dino-vitb8) the position embeddings are
interpolated (``interpolate_pos_encoding=True``).

The module also holds the pixel-level references the paper reports beside MFP, implemented
here so that no extra dependency is needed: :func:`psnr` and :func:`ssim` (Wang et al. 2004).

Example (runnable with a local checkpoint; the default id needs the Hub or its cache)::

    >>> from geofidelity_bench.metrics.mfp import mfp_scores, MapFeaturePerceptionLoss  # doctest: +SKIP
    >>> df = mfp_scores(["gen/a.png"], ["gt/a.png"], model="/models/dino-vitb8")        # doctest: +SKIP
    >>> df[["global_score", "spatial_distance", "spatial_mse", "loss"]]                 # doctest: +SKIP
    >>> loss_fn = MapFeaturePerceptionLoss(model="/models/dino-vitb8", input_range="symmetric")  # doctest: +SKIP
    >>> loss = loss_fn(generator(x), y)          # y, generator(x) in [-1, 1], (B, 3, H, W)  # doctest: +SKIP
    >>> loss.backward()                                                                   # doctest: +SKIP

Importing this module loads torch (it defines a ``torch.nn.Module``); ``geofidelity_bench.metrics``
does not import it, so the rest of the metrics stay torch-free.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, NamedTuple, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from geofidelity_bench.encoders.base import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    EncoderUnavailableError,
    Preprocessing,
    canonical_json,
    hash_config,
    offline_hint,
    resolve_device,
)
from geofidelity_bench.images import ImageSource, load_image

DEFAULT_MFP_MODEL = "facebook/dino-vitb8"
DEFAULT_IMAGE_SIZE = 224
#: SPEC section 10 (the paper's lambda_1, lambda_2).
GLOBAL_WEIGHT = 10.0
SPATIAL_WEIGHT = 1.0

CLS_SOURCES = ("last_block", "final_layernorm")
INPUT_RANGES = ("unit", "symmetric", "normalized")
#: Per-pair columns of :func:`mfp_scores` (``ssim``/``psnr`` only with ``pixel_metrics=True``).
TERM_COLUMNS = ("global_score", "spatial_distance", "spatial_mse", "loss")
PIXEL_COLUMNS = ("ssim", "psnr")

# SSIM constants of Wang, Bovik, Sheikh & Simoncelli (2004).
SSIM_K1 = 0.01
SSIM_K2 = 0.03
SSIM_WINDOW = 11
SSIM_SIGMA = 1.5


class MFPModelUnavailableError(EncoderUnavailableError):
    """The MFP backbone's weights cannot be had; the message says how to run offline."""


def mfp_offline_hint() -> str:
    return (
        "To run offline, pass a local directory saved with ViTModel.save_pretrained() (for example a copy "
        f"of {DEFAULT_MFP_MODEL}) as model= (--model on the command line)."
    )


class MFPFeatures(NamedTuple):
    """DINO-ViT descriptors of a batch of images.

    Attributes:
        cls: (B, d) CLS token (see ``DinoViTFeatureExtractor.cls_source``).
        keys: (B, n + 1, d) last-layer keys of all tokens (CLS first), heads concatenated.
    """

    cls: torch.Tensor
    keys: torch.Tensor


# -- the backbone ------------------------------------------------------------------------------


def _last_layer(model: torch.nn.Module) -> torch.nn.Module:
    layers = getattr(model, "layers", None)  # transformers >= 5
    if layers is None:
        layers = model.encoder.layer  # transformers 4.x
    return layers[-1]


def _key_projection(layer: torch.nn.Module) -> torch.nn.Module:
    attention = layer.attention
    if hasattr(attention, "k_proj"):  # transformers >= 5
        return attention.k_proj
    return attention.attention.key  # transformers 4.x


class DinoViTFeatureExtractor(torch.nn.Module):
    """A frozen DINO ViT returning the final CLS token and the last layer's keys.

    The model is frozen (``requires_grad=False``) and always in eval mode: ``train()`` is a no-op,
    so a parent module's ``train()`` cannot turn dropout on. Gradients still flow to the *input*.

    Args:
        model: Hub id or local ``save_pretrained`` folder of a ``ViTModel`` checkpoint
            (default ``facebook/dino-vitb8``).
        revision: Hub revision.
        image_size: side of the square input (default 224); must be a multiple of the patch size.
        mean, std: per-channel normalization after scaling to [0, 1] (default ImageNet).
        interpolation: PIL filter used to resize image files.
        cls_source: ``"last_block"`` (paper, default) or ``"final_layernorm"``.
        device: torch device (default: cuda if available, else cpu).

    Raises:
        MFPModelUnavailableError: the weights cannot be loaded (offline, unknown id, not a ViT).
    """

    def __init__(
        self,
        model: str | os.PathLike | None = None,
        *,
        revision: str | None = None,
        image_size: int = DEFAULT_IMAGE_SIZE,
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        interpolation: str = "bicubic",
        cls_source: str = "last_block",
        device: Any | None = None,
    ) -> None:
        super().__init__()
        from transformers import ViTModel

        from geofidelity_bench.encoders._hf import load_pretrained

        if cls_source not in CLS_SOURCES:
            raise ValueError(f"unknown cls_source {cls_source!r}; one of {list(CLS_SOURCES)}")
        image_size = int(image_size)
        if len(mean) != 3 or len(std) != 3 or any(s <= 0 for s in std):
            raise ValueError(f"mean and std must have 3 values each (std > 0), got {mean} and {std}")
        try:
            vit, record, _, _ = load_pretrained(
                _ViTNoPooler(ViTModel),
                encoder="mfp",
                expected_model_type="vit",
                default_id=DEFAULT_MFP_MODEL,
                weights=model,
                revision=revision,
                torch_dtype=torch.float32,
            )
        except EncoderUnavailableError as err:
            # The shared message advises encoder flags that do not apply to MFP; give MFP's own advice.
            raise MFPModelUnavailableError(str(err).replace(offline_hint(), mfp_offline_hint())) from None
        patch = vit.config.patch_size
        patch = int(patch[0] if isinstance(patch, (tuple, list)) else patch)
        if image_size < patch or image_size % patch:
            raise ValueError(f"image_size {image_size} must be a positive multiple of the patch size {patch}")
        native = vit.config.image_size
        native = int(native[0] if isinstance(native, (tuple, list)) else native)
        vit.requires_grad_(False)
        self.model = vit.eval()
        self.cls_source = cls_source
        self.image_size = image_size
        self.patch_size = patch
        self.n_tokens = (image_size // patch) ** 2 + 1
        self.dim = int(vit.config.hidden_size)
        self._interpolate_pos = image_size != native
        self.preprocessing = Preprocessing(
            resize=(image_size, image_size), crop=None, resize_mode="exact", interpolation=interpolation,
            mean=tuple(float(v) for v in mean), std=tuple(float(v) for v in std),
        )
        self.register_buffer("_mean", torch.tensor(self.preprocessing.mean).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("_std", torch.tensor(self.preprocessing.std).view(1, 3, 1, 1), persistent=False)
        self._config = {
            "metric": "mfp",
            "backbone": "transformers.ViTModel",
            **record,
            "image_size": image_size,
            "native_image_size": native,
            "interpolate_pos_encoding": self._interpolate_pos,
            "patch_size": patch,
            "n_tokens": self.n_tokens,
            "hidden_size": self.dim,
            "preprocessing": self.preprocessing.to_config(),
            "dtype": "float32",
            "cls": (
                "CLS token of the last transformer block, before the final layer norm (z_L^0)"
                if cls_source == "last_block"
                else "CLS token after the final layer norm (last_hidden_state[:, 0])"
            ),
            "cls_source": cls_source,
            "keys": "output of the last layer's key projection, all tokens (CLS + patches), heads concatenated",
            "self_similarity": "cosine similarity of key vectors, (n+1)x(n+1) per image",
            "attn_implementation": getattr(vit.config, "_attn_implementation", None),
        }
        self.to(resolve_device(device))

    # -- identity ---------------------------------------------------------------------------------
    @property
    def device(self) -> str:
        return str(self._mean.device)

    @property
    def config(self) -> dict[str, Any]:
        out = json.loads(canonical_json(self._config))  # a deep, JSON-clean copy
        out["device"] = self.device
        return out

    @property
    def config_hash(self) -> str:
        return hash_config(self._config)

    @property
    def last_layer(self) -> torch.nn.Module:
        """The last ``ViTLayer`` (its output is the ``last_block`` CLS source)."""
        return _last_layer(self.model)

    @property
    def key_projection(self) -> torch.nn.Module:
        """The last layer's key ``Linear``, where the keys are captured."""
        return _key_projection(self.last_layer)

    def train(self, mode: bool = True) -> "DinoViTFeatureExtractor":
        """Always eval: the extractor is a fixed measuring instrument (no dropout, ever)."""
        return super().train(False)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(weights={self._config.get('weights')!r}, image_size={self.image_size}, "
            f"cls_source={self.cls_source!r}, device={self.device!r})"
        )

    # -- preprocessing ----------------------------------------------------------------------------
    def preprocess(self, image: ImageSource, name: str | None = None) -> np.ndarray:
        """Decodes one image file/PIL/array into the normalized float32 (3, S, S) array fed to the model."""
        return self.preprocessing(load_image(image, name=name))

    def prepare(self, images: torch.Tensor, input_range: str = "unit") -> torch.Tensor:
        """Differentiable tensor preprocessing: range -> [0, 1], resize to S x S, normalize.

        Args:
            images: (B, 3, H, W) or (3, H, W) float tensor.
            input_range: ``"unit"`` ([0, 1]), ``"symmetric"`` ([-1, 1], e.g. a tanh generator) or
                ``"normalized"`` (already ``(x - mean) / std`` with this extractor's mean/std).
                Resizing (bicubic, antialiased, ``torch.nn.functional.interpolate``) only happens
                when H or W differ from ``image_size``; it is not bit-identical to the PIL resize
                used for image files.
        """
        if input_range not in INPUT_RANGES:
            raise ValueError(f"unknown input_range {input_range!r}; one of {list(INPUT_RANGES)}")
        if not torch.is_tensor(images):
            raise TypeError(f"expected a torch tensor, got {type(images).__name__}")
        x = images.unsqueeze(0) if images.dim() == 3 else images
        if x.dim() != 4 or x.shape[1] != 3:
            raise ValueError(f"expected a (B, 3, H, W) or (3, H, W) tensor, got shape {tuple(images.shape)}")
        x = x.to(device=self._mean.device, dtype=torch.float32)
        if input_range == "symmetric":
            x = (x + 1.0) / 2.0
        if x.shape[-2:] != (self.image_size, self.image_size):
            x = F.interpolate(x, size=(self.image_size, self.image_size), mode="bicubic", align_corners=False,
                              antialias=True)
        if input_range != "normalized":
            x = (x - self._mean) / self._std
        return x

    # -- features ---------------------------------------------------------------------------------
    def forward(self, pixel_values: torch.Tensor) -> MFPFeatures:
        """(B, 3, S, S) normalized tensor -> :class:`MFPFeatures` (differentiable w.r.t. the input)."""
        if pixel_values.dim() != 4 or tuple(pixel_values.shape[1:]) != (3, self.image_size, self.image_size):
            raise ValueError(
                f"expected normalized pixel values of shape (B, 3, {self.image_size}, {self.image_size}), "
                f"got {tuple(pixel_values.shape)}; use prepare() for other sizes or ranges"
            )
        captured: dict[str, torch.Tensor] = {}

        def keep_keys(module, inputs, output):
            captured["keys"] = output

        def keep_block(module, inputs, output):
            captured["block"] = output[0] if isinstance(output, (tuple, list)) else output

        handles = []
        try:
            handles.append(self.key_projection.register_forward_hook(keep_keys))
            if self.cls_source == "last_block":
                handles.append(self.last_layer.register_forward_hook(keep_block))
            out = self.model(pixel_values=pixel_values, interpolate_pos_encoding=self._interpolate_pos)
        finally:
            for handle in handles:
                handle.remove()
        if "keys" not in captured:
            raise RuntimeError("the key projection of the last attention layer was not called; unsupported ViT variant")
        cls = captured["block"][:, 0] if self.cls_source == "last_block" else out.last_hidden_state[:, 0]
        return MFPFeatures(cls=cls.float(), keys=captured["keys"].float())

    def extract(self, images: torch.Tensor, input_range: str = "unit") -> MFPFeatures:
        """:meth:`prepare` then :meth:`forward`."""
        return self(self.prepare(images, input_range))


class _ViTNoPooler:
    """``ViTModel.from_pretrained`` without the pooler (MFP never uses it; DINO ships none)."""

    def __init__(self, cls: Any) -> None:
        self._cls = cls

    def from_pretrained(self, *args: Any, **kwargs: Any) -> Any:
        return self._cls.from_pretrained(*args, add_pooling_layer=False, **kwargs)


# -- the terms ---------------------------------------------------------------------------------


def self_similarity(keys: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Cosine self-similarity of token keys: (B, N, d) -> (B, N, N)."""
    k = F.normalize(keys, dim=-1, eps=eps)
    return k @ k.transpose(-1, -2)


def pair_terms(generated: MFPFeatures, target: MFPFeatures) -> dict[str, torch.Tensor]:
    """Per-pair MFP terms of two feature batches: ``global_score``, ``spatial_distance``, ``spatial_mse`` (each (B,))."""
    if generated.cls.shape != target.cls.shape or generated.keys.shape != target.keys.shape:
        raise ValueError(
            f"feature shapes differ: generated {tuple(generated.keys.shape)}, target {tuple(target.keys.shape)}"
        )
    global_score = 1.0 - (generated.cls - target.cls).pow(2).mean(dim=-1)
    diff = (self_similarity(generated.keys) - self_similarity(target.keys)).flatten(1)
    squared = diff.pow(2)
    return {
        "global_score": global_score,
        "spatial_distance": squared.sum(dim=1).sqrt(),
        "spatial_mse": squared.mean(dim=1),
    }


def combine_loss(global_score, spatial_mse, *, global_weight: float = GLOBAL_WEIGHT,
                 spatial_weight: float = SPATIAL_WEIGHT):
    """``global_weight * (1 - G) + spatial_weight * spatial_mse`` (tensors or floats)."""
    return global_weight * (1.0 - global_score) + spatial_weight * spatial_mse


class MapFeaturePerceptionLoss(torch.nn.Module):
    r"""MFP as a training loss: :math:`\lambda_G (1 - G) + \lambda_S\,\text{spatial\_mse} + \lambda_1 L_1`, batch mean.

    Differentiable with respect to ``generated``; the target goes through the extractor under
    ``torch.no_grad``. The extractor is frozen and stays in eval mode whatever ``train()`` calls
    reach it. It is a submodule, so ``.to(device)`` moves it; its parameters never need an optimizer.

    Args:
        extractor: a :class:`DinoViTFeatureExtractor` (built from ``model``/``image_size``/... when None).
        model, revision, image_size, device, cls_source: passed to the extractor when it is built here.
        global_weight, spatial_weight: :math:`\lambda_G` (10) and :math:`\lambda_S` (1), SPEC section 10.
        l1_weight: weight of the optional L1 pixel term, the mean absolute difference of
            ``generated`` and ``target`` *as given* (in ``input_range`` units, before resizing). 0 = off.
        input_range: how ``generated``/``target`` are scaled: ``"unit"`` [0, 1] (default),
            ``"symmetric"`` [-1, 1], or ``"normalized"`` (ImageNet mean/std already applied).

    Shapes: ``generated`` and ``target`` are (B, 3, H, W) (or (3, H, W)); any H, W (resized to
    ``image_size`` with antialiased bicubic interpolation).
    """

    def __init__(
        self,
        extractor: DinoViTFeatureExtractor | None = None,
        *,
        model: str | os.PathLike | None = None,
        revision: str | None = None,
        image_size: int = DEFAULT_IMAGE_SIZE,
        device: Any | None = None,
        cls_source: str = "last_block",
        global_weight: float = GLOBAL_WEIGHT,
        spatial_weight: float = SPATIAL_WEIGHT,
        l1_weight: float = 0.0,
        input_range: str = "unit",
    ) -> None:
        super().__init__()
        if input_range not in INPUT_RANGES:
            raise ValueError(f"unknown input_range {input_range!r}; one of {list(INPUT_RANGES)}")
        if extractor is None:
            extractor = DinoViTFeatureExtractor(model, revision=revision, image_size=image_size, device=device,
                                                cls_source=cls_source)
        elif model is not None:
            raise ValueError("pass either extractor= or model=, not both")
        self.extractor = extractor
        self.global_weight = float(global_weight)
        self.spatial_weight = float(spatial_weight)
        self.l1_weight = float(l1_weight)
        self.input_range = input_range

    def terms(self, generated: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-pair terms (each (B,)): ``global_score``, ``spatial_distance``, ``spatial_mse``, ``l1``, ``loss``."""
        gen = generated.unsqueeze(0) if generated.dim() == 3 else generated
        tgt = target.unsqueeze(0) if target.dim() == 3 else target
        if gen.shape[0] != tgt.shape[0]:
            raise ValueError(f"generated has {gen.shape[0]} images, target has {tgt.shape[0]}")
        with torch.no_grad():
            tgt_features = self.extractor.extract(tgt, self.input_range)
        gen_features = self.extractor.extract(gen, self.input_range)
        out = pair_terms(gen_features, tgt_features)
        loss = combine_loss(out["global_score"], out["spatial_mse"], global_weight=self.global_weight,
                            spatial_weight=self.spatial_weight)
        if self.l1_weight:
            if gen.shape != tgt.shape:
                raise ValueError(f"the L1 term needs equal shapes, got {tuple(gen.shape)} and {tuple(tgt.shape)}")
            out["l1"] = (gen - tgt.to(gen.device, gen.dtype)).abs().flatten(1).mean(dim=1)
            loss = loss + self.l1_weight * out["l1"].to(loss.device)
        out["loss"] = loss
        return out

    def forward(self, generated: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Scalar loss, the mean over the batch."""
        return self.terms(generated, target)["loss"].mean()

    def extra_repr(self) -> str:
        return (f"global_weight={self.global_weight}, spatial_weight={self.spatial_weight}, "
                f"l1_weight={self.l1_weight}, input_range={self.input_range!r}")


# -- pixel-level references: PSNR and SSIM -----------------------------------------------------


def _as_float_image(image: ImageSource | np.ndarray, name: str) -> np.ndarray:
    if isinstance(image, np.ndarray) and image.dtype != np.uint8:
        arr = np.asarray(image, dtype=np.float64)
        if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] != 3):
            raise ValueError(f"{name} must be HxW or HxWx3, got shape {arr.shape}")
        return arr
    return np.asarray(load_image(image, name=name), dtype=np.float64)


def _gray(arr: np.ndarray) -> np.ndarray:
    # ITU-R BT.601 luma, as MATLAB's rgb2gray used by Wang et al.'s reference code (no rounding).
    if arr.ndim == 2:
        return arr
    return arr[..., 0] * 0.299 + arr[..., 1] * 0.587 + arr[..., 2] * 0.114


def psnr(image_a: ImageSource | np.ndarray, image_b: ImageSource | np.ndarray, *, data_range: float = 255.0) -> float:
    r"""Peak signal-to-noise ratio in dB, over all RGB values: :math:`10 \log_{10}(R^2 / \mathrm{MSE})`.

    Images are RGB in [0, 255] (uint8 arrays, PIL images or paths; float arrays are taken as
    already in [0, ``data_range``]); they must have the same size. Identical images give ``inf``.
    """
    a, b = _as_float_image(image_a, "image_a"), _as_float_image(image_b, "image_b")
    if a.shape != b.shape:
        raise ValueError(f"psnr needs images of the same shape, got {a.shape} and {b.shape}")
    mse = float(np.mean((a - b) ** 2))
    if mse == 0.0:
        return math.inf
    return 10.0 * math.log10(data_range**2 / mse)


def ssim(image_a: ImageSource | np.ndarray, image_b: ImageSource | np.ndarray, *, data_range: float = 255.0) -> float:
    r"""Mean structural similarity (Wang, Bovik, Sheikh & Simoncelli 2004) on grayscale images.

    .. math::

        \mathrm{SSIM}(x, y) = \frac{(2\mu_x\mu_y + C_1)(2\sigma_{xy} + C_2)}
                                   {(\mu_x^2 + \mu_y^2 + C_1)(\sigma_x^2 + \sigma_y^2 + C_2)},
        \quad C_1 = (K_1 R)^2,\ C_2 = (K_2 R)^2,\ K_1 = 0.01,\ K_2 = 0.03,\ R = 255

    Local statistics use an 11x11 Gaussian window with sigma 1.5 (normalized to sum 1), biased
    (population) variances, and the map is averaged over the "valid" region only (windows fully
    inside the image), as in the authors' ``ssim_index.m``; no automatic downsampling. RGB images
    are converted to gray with BT.601 weights (0.299, 0.587, 0.114), unrounded. Range [-1, 1],
    1 for identical images. Vectorized with :func:`scipy.ndimage.gaussian_filter` (the 1-D kernel
    radius is 5, so each output pixel away from the border sees exactly the 11x11 window).

    Raises:
        ValueError: different sizes, or a side shorter than 11 pixels.
    """
    from scipy.ndimage import gaussian_filter

    a = _gray(_as_float_image(image_a, "image_a"))
    b = _gray(_as_float_image(image_b, "image_b"))
    if a.shape != b.shape:
        raise ValueError(f"ssim needs images of the same size, got {a.shape} and {b.shape}")
    if min(a.shape) < SSIM_WINDOW:
        raise ValueError(f"ssim needs images of at least {SSIM_WINDOW}x{SSIM_WINDOW} pixels, got {a.shape}")
    radius = SSIM_WINDOW // 2
    truncate = radius / SSIM_SIGMA  # scipy's radius = int(truncate * sigma + 0.5) = 5

    def blur(x: np.ndarray) -> np.ndarray:
        return gaussian_filter(x, sigma=SSIM_SIGMA, truncate=truncate, mode="reflect")[radius:-radius, radius:-radius]

    c1 = (SSIM_K1 * data_range) ** 2
    c2 = (SSIM_K2 * data_range) ** 2
    mu_a, mu_b = blur(a), blur(b)
    var_a = blur(a * a) - mu_a**2
    var_b = blur(b * b) - mu_b**2
    cov = blur(a * b) - mu_a * mu_b
    num = (2 * mu_a * mu_b + c1) * (2 * cov + c2)
    den = (mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2)
    return float(np.mean(num / den))


SSIM_CONFIG = {
    "reference": "Wang, Bovik, Sheikh & Simoncelli 2004 (ssim_index.m)",
    "K1": SSIM_K1, "K2": SSIM_K2, "window": f"{SSIM_WINDOW}x{SSIM_WINDOW} gaussian, sigma {SSIM_SIGMA}",
    "data_range": 255, "color": "grayscale, BT.601 luma (0.299, 0.587, 0.114)", "region": "valid (no border windows)",
    "covariance": "biased (population)", "downsampling": "none",
}
PSNR_CONFIG = {"formula": "10 * log10(255^2 / MSE) over all RGB values", "identical_images": "inf"}


# -- scoring image files -----------------------------------------------------------------------


def _image_list(images: Any, what: str) -> list:
    if isinstance(images, (str, bytes, bytearray, os.PathLike, Image.Image)):
        return [images]
    if isinstance(images, np.ndarray):
        return [images] if images.ndim in (2, 3) else list(images)
    try:
        return list(images)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of images, got {type(images).__name__}") from None


def _labels(items: Sequence, given: Sequence[str] | None, what: str) -> list[str]:
    if given is not None:
        labels = [str(n) for n in given]
        if len(labels) != len(items):
            raise ValueError(f"got {len(labels)} names for {len(items)} {what} images")
        return labels
    return [str(s) if isinstance(s, (str, os.PathLike)) else f"{what}[{i}]" for i, s in enumerate(items)]


def mfp_scores(
    generated: Any,
    targets: Any,
    extractor: DinoViTFeatureExtractor | None = None,
    *,
    model: str | os.PathLike | None = None,
    revision: str | None = None,
    image_size: int = DEFAULT_IMAGE_SIZE,
    device: Any | None = None,
    batch_size: int = 8,
    global_weight: float = GLOBAL_WEIGHT,
    spatial_weight: float = SPATIAL_WEIGHT,
    names: Sequence[str] | None = None,
    target_names: Sequence[str] | None = None,
    pixel_metrics: bool = True,
    progress: bool | None = None,
):
    """MFP terms (and SSIM/PSNR) for paired images; one row per pair.

    Args:
        generated, targets: equally long sequences of images (paths, PIL images, encoded bytes or
            uint8 arrays), paired by position.
        extractor: a ready :class:`DinoViTFeatureExtractor`; built from ``model``/``revision``/
            ``image_size``/``device`` when None (passing both ``extractor`` and ``model`` is an error).
        batch_size: pairs per forward call (it does not change the result beyond float noise).
        global_weight, spatial_weight: weights of the ``loss`` column.
        names: the ``pair`` column and how generated images are called in errors (default: the
            path, or ``generated[i]``); ``target_names`` likewise for targets.
        pixel_metrics: also compute ``ssim`` and ``psnr`` at the target's resolution (a generated
            image of another size is first resized to it, bicubic; counted in ``attrs``).

    Returns:
        ``pandas.DataFrame`` with columns ``pair, global_score, spatial_distance, spatial_mse, loss``
        (+ ``ssim, psnr``); ``attrs`` holds ``config`` (extractor), ``parameters`` and
        ``n_pixel_resized``.

    Raises:
        ValueError: unequal counts, empty input, bad arguments.
        ImageDecodeError: an image cannot be decoded; the message names it.
    """
    import pandas as pd
    from tqdm.auto import tqdm

    gen_items, tgt_items = _image_list(generated, "generated"), _image_list(targets, "targets")
    if len(gen_items) != len(tgt_items):
        raise ValueError(f"got {len(gen_items)} generated images but {len(tgt_items)} targets; MFP needs pairs")
    if not gen_items:
        raise ValueError("no image pairs to score")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    gen_labels = _labels(gen_items, names, "generated")
    tgt_labels = _labels(tgt_items, target_names, "target")
    if extractor is None:
        extractor = DinoViTFeatureExtractor(model, revision=revision, image_size=image_size, device=device)
    elif model is not None:
        raise ValueError("pass either extractor= or model=, not both")
    if progress is None:
        progress = len(gen_items) > 4 * batch_size

    columns: dict[str, list[float]] = {c: [] for c in TERM_COLUMNS + (PIXEL_COLUMNS if pixel_metrics else ())}
    n_resized = 0
    with tqdm(total=len(gen_items), desc="MFP", unit="pair", disable=not progress) as bar:
        for start in range(0, len(gen_items), batch_size):
            stop = min(start + batch_size, len(gen_items))
            gen_imgs = [load_image(gen_items[i], name=gen_labels[i]) for i in range(start, stop)]
            tgt_imgs = [load_image(tgt_items[i], name=tgt_labels[i]) for i in range(start, stop)]
            gen_x = torch.from_numpy(np.stack([extractor.preprocessing(im) for im in gen_imgs]))
            tgt_x = torch.from_numpy(np.stack([extractor.preprocessing(im) for im in tgt_imgs]))
            with torch.inference_mode():
                dev = extractor._mean.device
                terms = pair_terms(extractor(gen_x.to(dev)), extractor(tgt_x.to(dev)))
            terms = {k: v.double().cpu().numpy() for k, v in terms.items()}
            loss = combine_loss(terms["global_score"], terms["spatial_mse"], global_weight=global_weight,
                                spatial_weight=spatial_weight)
            for key in ("global_score", "spatial_distance", "spatial_mse"):
                columns[key].extend(float(v) for v in terms[key])
            columns["loss"].extend(float(v) for v in loss)
            if pixel_metrics:
                for g, t in zip(gen_imgs, tgt_imgs):
                    if g.size != t.size:
                        g = g.resize(t.size, resample=Image.Resampling.BICUBIC)
                        n_resized += 1
                    columns["ssim"].append(ssim(g, t))
                    columns["psnr"].append(psnr(g, t))
            bar.update(stop - start)

    df = pd.DataFrame({"pair": gen_labels, **columns})
    df.attrs["config"] = extractor.config
    df.attrs["parameters"] = {
        "global_weight": float(global_weight), "spatial_weight": float(spatial_weight), "batch_size": int(batch_size),
        "loss": "global_weight * (1 - global_score) + spatial_weight * spatial_mse",
    }
    if pixel_metrics:
        df.attrs["n_pixel_resized"] = n_resized
        df.attrs["ssim"] = dict(SSIM_CONFIG)
        df.attrs["psnr"] = dict(PSNR_CONFIG)
    return df


def summarize_scores(df) -> dict[str, Any]:
    """Dataset means of the per-pair columns. PSNR's mean is over pairs with a finite PSNR
    (identical pairs have ``inf``); ``psnr_infinite_pairs`` counts the others."""
    means: dict[str, Any] = {}
    for col in TERM_COLUMNS + PIXEL_COLUMNS:
        if col not in df.columns:
            continue
        values = np.asarray(df[col], dtype=np.float64)
        finite = values[np.isfinite(values)]
        means[col] = float(finite.mean()) if finite.size else None
    out: dict[str, Any] = {"n_pairs": int(len(df)), "means": means}
    if "psnr" in df.columns:
        out["psnr_infinite_pairs"] = int(np.isinf(np.asarray(df["psnr"], dtype=np.float64)).sum())
    return out


def mfp_compute(
    predictions: Any,
    references: Any,
    model: str | os.PathLike | DinoViTFeatureExtractor | None = None,
    image_size: int = DEFAULT_IMAGE_SIZE,
    device: Any | None = None,
    batch_size: int = 8,
    *,
    revision: str | None = None,
    global_weight: float = GLOBAL_WEIGHT,
    spatial_weight: float = SPATIAL_WEIGHT,
    pixel_metrics: bool = True,
) -> dict[str, Any]:
    """Entry point for the ``mfp`` config of the evaluate module: paired images in, plain dict out.

    Args:
        predictions: generated images; references: their targets (same length, paired by position).
        model: Hub id, local ``save_pretrained`` folder, or a ready :class:`DinoViTFeatureExtractor`
            (default ``facebook/dino-vitb8``).

    Returns:
        ``{"global_score", "spatial_distance", "spatial_mse", "loss", "ssim", "psnr"}`` (dataset
        means; PSNR over finite pairs) plus ``n_pairs``, ``psnr_infinite_pairs``, ``per_pair``
        (a list per column, in input order) and ``config`` (extractor config, image size, weights).
        All values are JSON-serializable except that per-pair PSNR may be ``inf``.
    """
    extractor = model if isinstance(model, DinoViTFeatureExtractor) else None
    df = mfp_scores(
        predictions, references, extractor,
        model=None if extractor is not None else model, revision=revision, image_size=image_size, device=device,
        batch_size=batch_size, global_weight=global_weight, spatial_weight=spatial_weight,
        pixel_metrics=pixel_metrics, progress=False,
    )
    summary = summarize_scores(df)
    out: dict[str, Any] = dict(summary["means"])
    out["n_pairs"] = summary["n_pairs"]
    if "psnr_infinite_pairs" in summary:
        out["psnr_infinite_pairs"] = summary["psnr_infinite_pairs"]
    out["per_pair"] = {c: [float(v) for v in df[c]] for c in df.columns if c != "pair"}
    cfg = df.attrs["config"]
    out["config"] = {
        "model": cfg,
        "image_size": cfg["image_size"],
        **df.attrs["parameters"],
        **({"ssim": df.attrs["ssim"], "psnr": df.attrs["psnr"], "n_pixel_resized": df.attrs["n_pixel_resized"]}
           if pixel_metrics else {}),
    }
    return out


__all__ = [
    "CLS_SOURCES",
    "DEFAULT_IMAGE_SIZE",
    "DEFAULT_MFP_MODEL",
    "GLOBAL_WEIGHT",
    "INPUT_RANGES",
    "SPATIAL_WEIGHT",
    "DinoViTFeatureExtractor",
    "MFPFeatures",
    "MFPModelUnavailableError",
    "MapFeaturePerceptionLoss",
    "combine_loss",
    "mfp_compute",
    "mfp_scores",
    "pair_terms",
    "psnr",
    "self_similarity",
    "ssim",
    "summarize_scores",
]
