r"""Map Feature Perception (MFP): DINO-ViT global and spatial similarity of paired map tiles (docs/benchmark.md section 10, Map Feature Perception (MFP)).

For a generated map tile :math:`I_o` and its target :math:`I_t`, a feature extractor gives two
descriptors per image (:class:`MFPFeatures`): a global **CLS token** and the **keys** of all
:math:`n + 1` tokens (CLS + patches) of the last self-attention layer. The benchmark's extractor is
the DINO ViT of :class:`geofidelity_bench.encoders.dino_vit_keys.DinoViTFeatureExtractor`
(``facebook/dino-vitb8``, CLS token :math:`z_L^0` of the last block); this module holds only the
math on those descriptors.

The per-pair terms are

.. math::

    G = 1 - \frac{1}{d}\sum_{c=1}^{d} (\mathrm{CLS}_o - \mathrm{CLS}_t)_c^2
    \qquad \text{(global score, 1 for identical images, higher is better, unbounded below)}

    S_{ij}(I) = \cos(K_i^L(I), K_j^L(I)), \quad S \in \mathbb{R}^{(n+1)\times(n+1)}

    \text{spatial\_distance} = \lVert S(I_o) - S(I_t) \rVert_F, \qquad
    \text{spatial\_mse} = \frac{1}{(n+1)^2} \lVert S(I_o) - S(I_t) \rVert_F^2
    \qquad \text{(0 for identical images, lower is better)}

    \mathcal{L} = \lambda_G (1 - G) + \lambda_S \, \text{spatial\_mse} \; [+ \lambda_{1} \lVert I_o - I_t \rVert_1]

with :math:`\lambda_G = 10`, :math:`\lambda_S = 1` (docs/benchmark.md section 10; the paper's :math:`\lambda_1, \lambda_2`).
The paper's tables (e.g. C2GM 0.7351 vs TSIT 0.5910 on MLMG-US) are reference points only; they
do not say how their single MFP number combines the two terms, so none is invented here.

Scoring image files (a DataFrame per pair, with SSIM and PSNR of
:mod:`geofidelity_bench.metrics.image_quality`) lives in :mod:`geofidelity_bench.mfp`.

Example (runnable with a local checkpoint; the default id needs the Hub or its cache)::

    >>> from geofidelity_bench.mfp import mfp_scores                                    # doctest: +SKIP
    >>> df = mfp_scores(["gen/a.png"], ["gt/a.png"], model="/models/dino-vitb8")        # doctest: +SKIP
    >>> df[["global_score", "spatial_distance", "spatial_mse", "loss"]]                 # doctest: +SKIP
    >>> from geofidelity_bench.mfp import mfp_loss                                       # doctest: +SKIP
    >>> loss_fn = mfp_loss(model="/models/dino-vitb8", input_range="symmetric")          # doctest: +SKIP
    >>> loss = loss_fn(generator(x), y)          # y, generator(x) in [-1, 1], (B, 3, H, W)  # doctest: +SKIP
    >>> loss.backward()                                                                   # doctest: +SKIP

The terms on plain tensors (a hand-worked case: identical images give G = 1 and no spatial term)::

    >>> import torch
    >>> f = MFPFeatures(cls=torch.ones(1, 4), keys=torch.eye(3, 4).unsqueeze(0))
    >>> {k: float(v) for k, v in pair_terms(f, f).items()}
    {'global_score': 1.0, 'spatial_distance': 0.0, 'spatial_mse': 0.0}

Importing this module loads no torch, and it imports no model (nothing from
``geofidelity_bench.encoders``, ever): the functions import torch and the precision context
(:mod:`geofidelity_bench.float32`) when called, and :class:`MapFeaturePerceptionLoss`, a
``torch.nn.Module``, is defined on first access and is *given* its extractor
(:func:`geofidelity_bench.mfp.mfp_loss` builds it with the benchmark's DINO-ViT extractor).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

if TYPE_CHECKING:
    import torch

#: docs/benchmark.md section 10, Map Feature Perception (MFP) (the paper's lambda_1, lambda_2).
GLOBAL_WEIGHT = 10.0
SPATIAL_WEIGHT = 1.0

#: Square input side the terms are computed at by default (dino-vitb8's own).
DEFAULT_IMAGE_SIZE = 224
INPUT_RANGES = ("unit", "symmetric", "normalized")
#: Per-pair columns of :func:`geofidelity_bench.mfp.mfp_scores` (``ssim``/``psnr`` only with ``pixel_metrics=True``).
TERM_COLUMNS = ("global_score", "spatial_distance", "spatial_mse", "loss")
PIXEL_COLUMNS = ("ssim", "psnr")


class MFPFeatures(NamedTuple):
    """The descriptors of a batch of images that the MFP terms compare (what an extractor returns).

    Attributes:
        cls: (B, d) CLS token (see ``DinoViTFeatureExtractor.cls_source``).
        keys: (B, n + 1, d) last-layer keys of all tokens (CLS first), heads concatenated.
    """

    cls: torch.Tensor
    keys: torch.Tensor


# -- the terms ---------------------------------------------------------------------------------


def _float32_math(tensor: torch.Tensor):
    """A context in which ``tensor``'s device computes IEEE float32: no autocast (a bf16 ``k @ k.T``
    moves self-similarities by ~1e-3) and no reduced float32 math (cuBLAS TF32, oneDNN bf16; a
    caller's TF32 moves the ``spatial_mse`` of a close pair by ~1e-3 relative), the same context as
    every float32 model forward (:func:`geofidelity_bench.float32.model_forward`, safe
    when several run at once)."""
    from geofidelity_bench.float32 import model_forward

    return model_forward(tensor.device, True)


def self_similarity(keys: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Cosine self-similarity of token keys: (B, N, d) -> (B, N, N), in IEEE float32 (autocast,
    TF32 and oneDNN's bf16 off), its gradient too when it is differentiated later
    (:func:`geofidelity_bench.float32.call_in_context`)."""
    import torch.nn.functional as F

    from geofidelity_bench.float32 import call_in_context

    def cosine(k: torch.Tensor) -> tuple[torch.Tensor]:
        k = F.normalize(k.float(), dim=-1, eps=eps)
        return (k @ k.transpose(-1, -2),)

    return call_in_context(lambda: _float32_math(keys), cosine, (keys,))[0]


def pair_terms(generated: MFPFeatures, target: MFPFeatures) -> dict[str, torch.Tensor]:
    """Per-pair MFP terms of two feature batches: ``global_score``, ``spatial_distance``, ``spatial_mse`` (each (B,)).

    Computed in IEEE float32 (autocast, TF32 and oneDNN's bf16 off; the self-similarities' gradient
    too), whatever the features' dtype or the caller's autocast and precision settings."""
    if generated.cls.shape != target.cls.shape or generated.keys.shape != target.keys.shape:
        raise ValueError(
            f"feature shapes differ: generated {tuple(generated.keys.shape)}, target {tuple(target.keys.shape)}"
        )
    with _float32_math(generated.keys):
        global_score = 1.0 - (generated.cls.float() - target.cls.float()).pow(2).mean(dim=-1)
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


# -- the loss ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _loss_class() -> type:
    """Defines :class:`MapFeaturePerceptionLoss` on first use, so that importing this module loads no torch."""
    import torch

    class MapFeaturePerceptionLoss(torch.nn.Module):
        r"""MFP as a training loss: :math:`\lambda_G (1 - G) + \lambda_S\,\text{spatial\_mse} + \lambda_1 L_1`, batch mean.

        Differentiable with respect to ``generated``; the target goes through the extractor under
        ``torch.no_grad``. The extractor is frozen and stays in eval mode whatever ``train()`` calls
        reach it. It is a submodule, so ``.to(device)`` moves it; its parameters never need an optimizer.

        Args:
            extractor: the feature extractor, a ``torch.nn.Module`` whose ``extract(images, input_range)``
                returns :class:`MFPFeatures` (the benchmark's is
                :class:`~geofidelity_bench.encoders.dino_vit_keys.DinoViTFeatureExtractor`, which
                :func:`geofidelity_bench.mfp.mfp_loss` builds). When None,
                ``extractor_factory(model, revision=, image_size=, device=, cls_source=)`` builds one.
            model, revision, image_size, device, cls_source: passed to the factory when the extractor
                is built here.
            extractor_factory: builds the extractor when ``extractor`` is None (one of the two is
                required: metrics import no model).
            global_weight, spatial_weight: :math:`\lambda_G` (10) and :math:`\lambda_S` (1), docs/benchmark.md section 10, Map Feature Perception (MFP).
            l1_weight: weight of the optional L1 pixel term, the mean absolute difference of
                ``generated`` and ``target`` *as given* (in ``input_range`` units, before resizing). 0 = off.
            input_range: how ``generated``/``target`` are scaled: ``"unit"`` [0, 1] (default),
                ``"symmetric"`` [-1, 1], or ``"normalized"`` (ImageNet mean/std already applied).

        Shapes: ``generated`` and ``target`` are (B, 3, H, W) (or (3, H, W)); any H, W (resized to
        ``image_size`` with antialiased bicubic interpolation).
        """

        def __init__(
            self,
            extractor: Any | None = None,
            *,
            model: Any | None = None,
            revision: str | None = None,
            image_size: int = DEFAULT_IMAGE_SIZE,
            device: Any | None = None,
            cls_source: str = "last_block",
            global_weight: float = GLOBAL_WEIGHT,
            spatial_weight: float = SPATIAL_WEIGHT,
            l1_weight: float = 0.0,
            input_range: str = "unit",
            extractor_factory: Callable[..., Any] | None = None,
        ) -> None:
            super().__init__()
            if input_range not in INPUT_RANGES:
                raise ValueError(f"unknown input_range {input_range!r}; one of {list(INPUT_RANGES)}")
            if extractor is None:
                if extractor_factory is None:
                    raise TypeError(
                        "MapFeaturePerceptionLoss is given its extractor (extractor= or extractor_factory=): "
                        "metrics import no model; geofidelity_bench.mfp.mfp_loss(model=...) builds the "
                        "loss with the benchmark's DINO-ViT extractor")
                extractor = extractor_factory(model, revision=revision, image_size=image_size, device=device,
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

    MapFeaturePerceptionLoss.__module__ = __name__
    MapFeaturePerceptionLoss.__qualname__ = "MapFeaturePerceptionLoss"  # pickles by name, through __getattr__
    return MapFeaturePerceptionLoss


def __getattr__(name: str) -> Any:
    # PEP 562: ``MapFeaturePerceptionLoss`` is a torch.nn.Module, so it is defined when first asked for.
    if name == "MapFeaturePerceptionLoss":
        return _loss_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_IMAGE_SIZE",
    "GLOBAL_WEIGHT",
    "INPUT_RANGES",
    "PIXEL_COLUMNS",
    "SPATIAL_WEIGHT",
    "TERM_COLUMNS",
    "MFPFeatures",
    "MapFeaturePerceptionLoss",
    "combine_loss",
    "pair_terms",
    "self_similarity",
]
