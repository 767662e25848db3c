"""The benchmark's segmenter (docs/benchmark.md section 5): Mask2Former (Swin-L) trained on Mapillary Vistas v1.2 (65 classes)."""

from __future__ import annotations

import os
import types
from typing import Any

from geofidelity_bench.segmentation._transformers import _TransformersSegmenter
from geofidelity_bench.segmentation.labels import VISTAS_CLASS_TO_GROUP, VISTAS_GROUPS, VISTAS_V12_CLASSES

#: The processor settings for weights without a preprocessor_config.json (those of the Hub checkpoint's).
DEFAULT_PROCESSOR = {
    "size": {"shortest_edge": 384, "longest_edge": 1333}, "size_divisor": 32, "resample": 2, "do_resize": True,
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": (0.485, 0.456, 0.406),
    "image_std": (0.229, 0.224, 0.225), "do_reduce_labels": False,
}


class Mask2FormerVistasSegmenter(_TransformersSegmenter):
    """Mask2Former (Swin-L) trained on Mapillary Vistas v1.2: docs/benchmark.md section 5, Metrics's segmenter.

    Input: the checkpoint's own image processor, ``Mask2FormerImageProcessor.from_pretrained(weights)``
    (as the release ran it), when the weights ship a ``preprocessor_config.json``; only for a folder
    without one (tiny test models) the defaults :data:`DEFAULT_PROCESSOR`: bilinear resize of the
    shorter side to 384 with the longer side at most 1333, both rounded up to a multiple of 32;
    rescale 1/255; ImageNet mean/std. ``input_size`` / ``max_input_size``, when given, replace the
    shorter / longer side limits either way. The effective settings are recorded in the config.
    Post-processing:
    ``post_process_semantic_segmentation(outputs, target_sizes=[(h, w)])`` per image, i.e.
    per class ``sum_q softmax(class logits)[q, c] * sigmoid(mask logits)[q]`` (masks resized to
    384 x 384 first, as transformers does), resized bilinearly to the image's own size, argmax.
    """

    default_id = "facebook/mask2former-swin-large-mapillary-vistas-semantic"
    model_class = "Mask2FormerForUniversalSegmentation"
    model_type = "mask2former"
    label_set = "Mapillary Vistas v1.2 (65 classes, ids 0-64)"
    expected_labels = VISTAS_V12_CLASSES
    groups = VISTAS_GROUPS
    class_to_group = VISTAS_CLASS_TO_GROUP
    unsupported_groups = ()
    processor_classes = ("Mask2FormerImageProcessorPil", "Mask2FormerImageProcessor")
    default_processor = DEFAULT_PROCESSOR
    post_processing = (
        "Mask2FormerImageProcessor.post_process_semantic_segmentation per image: "
        "softmax(class logits)[:, :-1] x sigmoid(mask logits resized to 384x384), resized bilinearly "
        "(align_corners=False) to the label map size, argmax over the 65 classes"
    )

    def __init__(
        self,
        name: str = "mask2former-vistas",
        *,
        weights: str | os.PathLike | None = None,
        revision: str | None = None,
        device: Any | None = None,
        input_size: int | None = None,
        max_input_size: int | None = None,
    ) -> None:
        super().__init__(
            name, weights=weights, revision=revision, device=device,
            options={"input_size": input_size, "max_input_size": max_input_size},
        )

    def _processor_overrides(self, *, input_size: int | None, max_input_size: int | None) -> dict:
        _check_sizes(input_size, max_input_size)
        return _size_overrides(input_size, max_input_size)

    def _input_config(self, size: dict) -> dict:
        _check_sizes(size.get("shortest_edge"), size.get("longest_edge"))
        return {
            "resize": "shorter side to input_size, longer side at most max_input_size (aspect kept), "
            "both rounded up to a multiple of size_divisor; images of one batch that preprocess to different "
            "sizes run as separate forward calls (no padding)",
            "input_size": size.get("shortest_edge"),
            "max_input_size": size.get("longest_edge"),
        }

    def _post_process(self, outputs, index: int, size: tuple[int, int]):
        one = types.SimpleNamespace(
            class_queries_logits=outputs.class_queries_logits[index : index + 1],
            masks_queries_logits=outputs.masks_queries_logits[index : index + 1],
        )
        return self.processor.post_process_semantic_segmentation(one, target_sizes=[size])[0]


def _check_sizes(input_size: int | None, max_input_size: int | None) -> None:
    for opt, value in (("input_size", input_size), ("max_input_size", max_input_size)):
        if value is not None and not (isinstance(value, int) and value > 0):
            raise ValueError(f"{opt} must be a positive int, got {value!r}")
    if input_size is not None and max_input_size is not None and input_size > max_input_size:
        raise ValueError(f"need input_size <= max_input_size, got {input_size}, {max_input_size}")


def _size_overrides(input_size: int | None, max_input_size: int | None) -> dict:
    """The ``size`` a caller's input_size / max_input_size set, or {} to keep the processor's."""
    if input_size is None and max_input_size is None:
        return {}
    size = dict(DEFAULT_PROCESSOR["size"])
    if input_size is not None:
        size["shortest_edge"] = input_size
    if max_input_size is not None:
        size["longest_edge"] = max_input_size
    return {"size": size}
