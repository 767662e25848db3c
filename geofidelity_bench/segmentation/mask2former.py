"""The benchmark's segmenter (docs/benchmark.md section 5): Mask2Former (Swin-L) trained on Mapillary Vistas v1.2 (65 classes)."""

from __future__ import annotations

import os
import types
from typing import Any

from geofidelity_bench.encoders.base import resolve_device
from geofidelity_bench.segmentation._transformers import _processor_class, _TransformersSegmenter
from geofidelity_bench.segmentation.labels import VISTAS_CLASS_TO_GROUP, VISTAS_GROUPS, VISTAS_V12_CLASSES

class Mask2FormerVistasSegmenter(_TransformersSegmenter):
    """Mask2Former (Swin-L) trained on Mapillary Vistas v1.2: docs/benchmark.md section 5, Metrics's segmenter.

    Input: ``Mask2FormerImageProcessor`` settings given here, not read from the checkpoint:
    bilinear resize of the shorter side to ``input_size`` (384, as the Hub checkpoint's processor
    config sets it) with the longer side at most ``max_input_size`` (1333), both rounded up to a
    multiple of 32; rescale 1/255; ImageNet mean/std. Post-processing:
    ``post_process_semantic_segmentation(outputs, target_sizes=[(h, w)])`` per image, i.e.
    per class ``sum_q softmax(class logits)[q, c] * sigmoid(mask logits)[q]`` (masks resized to
    384 x 384 first, as transformers does), resized bilinearly to the image's own size, argmax.
    """

    default_id = "facebook/mask2former-swin-large-mapillary-vistas-semantic"
    model_class = "Mask2FormerForUniversalSegmentation"
    model_type = "mask2former"
    label_set = "Mapillary Vistas v1.2 (65 classes, ids 0-64)"

    def __init__(
        self,
        name: str = "mask2former-vistas",
        *,
        weights: str | os.PathLike | None = None,
        revision: str | None = None,
        device: Any | None = None,
        input_size: int = 384,
        max_input_size: int = 1333,
    ) -> None:
        super().__init__()
        self.name = name
        self.device = resolve_device(device)
        if not (isinstance(input_size, int) and isinstance(max_input_size, int) and 0 < input_size <= max_input_size):
            raise ValueError(f"need 0 < input_size <= max_input_size, got {input_size}, {max_input_size}")
        model, labels, record = self._load(weights, revision, VISTAS_V12_CLASSES)
        self.model = model.to(self.device).eval()
        self.class_names = tuple(labels)
        self.class_to_group = VISTAS_CLASS_TO_GROUP
        self.unsupported_groups = ()
        cls = _processor_class("Mask2FormerImageProcessorPil", "Mask2FormerImageProcessor")
        mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
        self.processor = cls(
            size={"shortest_edge": input_size, "longest_edge": max_input_size}, size_divisor=32, resample=2,
            do_resize=True, do_rescale=True, rescale_factor=1 / 255, do_normalize=True, image_mean=mean,
            image_std=std, do_reduce_labels=False,
        )
        self._config = {
            "kind": "semantic-segmenter",
            "segmenter": name,
            "backend": f"transformers.{self.model_class}",
            **record,
            "model_type": self.model_type,
            "input": {
                "processor": f"transformers.{cls.__name__}",
                "resize": "shorter side to input_size, longer side at most max_input_size (aspect kept), "
                "both rounded up to a multiple of 32; images of one batch that preprocess to different sizes run "
                "as separate forward calls (no padding)",
                "input_size": input_size,
                "max_input_size": max_input_size,
                "size_divisor": 32,
                "interpolation": "bilinear",
                "rescale": "1/255",
                "mean": list(mean),
                "std": list(std),
            },
            "post_processing": "Mask2FormerImageProcessor.post_process_semantic_segmentation per image: "
            "softmax(class logits)[:, :-1] x sigmoid(mask logits resized to 384x384), resized bilinearly "
            "(align_corners=False) to the label map size, argmax over the 65 classes",
            **self._mapping_config(VISTAS_GROUPS),
        }

    def _post_process(self, outputs, index: int, size: tuple[int, int]):
        one = types.SimpleNamespace(
            class_queries_logits=outputs.class_queries_logits[index : index + 1],
            masks_queries_logits=outputs.masks_queries_logits[index : index + 1],
        )
        return self.processor.post_process_semantic_segmentation(one, target_sizes=[size])[0]
