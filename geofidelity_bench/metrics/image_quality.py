r"""Pixel-level image similarity: PSNR and SSIM (Wang et al. 2004), the references reported beside MFP.

Pure numpy/scipy on RGB images in [0, 255] given as arrays (HxWx3 or HxW; uint8, or float taken as
already in [0, ``data_range``]; anything ``numpy.asarray`` turns into such an array, a decoded RGB
PIL image included), so that no extra dependency is needed. Like every module of
:mod:`geofidelity_bench.metrics` it loads no image: decode files first
(:func:`geofidelity_bench.images.load_image`, as :func:`geofidelity_bench.mfp.mfp_scores` does).

    >>> import numpy as np
    >>> a = np.zeros((16, 16, 3), dtype=np.uint8)
    >>> b = a.copy(); b[..., 0] = 10
    >>> round(psnr(a, b), 3)  # MSE = 100 / 3 over all RGB values: 10 log10(255^2 * 3 / 100)
    32.902
    >>> psnr(a, a), ssim(a, a)
    (inf, 1.0)
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

# SSIM constants of Wang, Bovik, Sheikh & Simoncelli (2004).
SSIM_K1 = 0.01
SSIM_K2 = 0.03
SSIM_WINDOW = 11
SSIM_SIGMA = 1.5



def _as_float_image(image: Any, name: str) -> np.ndarray:
    if isinstance(image, (str, bytes, bytearray, memoryview, os.PathLike)):
        raise ValueError(f"{name} is a file or encoded bytes; metrics take decoded images (arrays): "
                        "decode it with geofidelity_bench.images.load_image first")
    arr = np.asarray(image)
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] != 3):
        raise ValueError(f"{name} must be HxW or HxWx3, got shape {arr.shape}")
    return arr.astype(np.float64)


def _gray(arr: np.ndarray) -> np.ndarray:
    # ITU-R BT.601 luma, as MATLAB's rgb2gray used by Wang et al.'s reference code (no rounding).
    if arr.ndim == 2:
        return arr
    return arr[..., 0] * 0.299 + arr[..., 1] * 0.587 + arr[..., 2] * 0.114


def psnr(image_a: Any, image_b: Any, *, data_range: float = 255.0) -> float:
    r"""Peak signal-to-noise ratio in dB, over all RGB values: :math:`10 \log_{10}(R^2 / \mathrm{MSE})`.

    Images are RGB arrays in [0, 255] (uint8, or float taken as already in [0, ``data_range``];
    a decoded RGB PIL image is read as its array); they must have the same size. Identical images
    give ``inf``.
    """
    a, b = _as_float_image(image_a, "image_a"), _as_float_image(image_b, "image_b")
    if a.shape != b.shape:
        raise ValueError(f"psnr needs images of the same shape, got {a.shape} and {b.shape}")
    mse = float(np.mean((a - b) ** 2))
    if mse == 0.0:
        return math.inf
    return 10.0 * math.log10(data_range**2 / mse)


def ssim(image_a: Any, image_b: Any, *, data_range: float = 255.0) -> float:
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


__all__ = ["PSNR_CONFIG", "SSIM_CONFIG", "psnr", "ssim"]
