"""A second-opinion segmenter: SegFormer-B5 fine-tuned on Cityscapes (19 classes)."""

from __future__ import annotations

import os
import types
from typing import Any

from geofidelity_bench.segmentation._transformers import _TransformersSegmenter
from geofidelity_bench.segmentation.labels import (
    CITYSCAPES_CLASS_TO_GROUP,
    CITYSCAPES_CLASSES,
    CITYSCAPES_GROUPS,
    CITYSCAPES_UNSUPPORTED,
)

#: The processor settings for weights without a preprocessor_config.json.
DEFAULT_PROCESSOR = {
    "size": {"height": 1024, "width": 1024}, "resample": 2, "do_resize": True, "do_rescale": True,
    "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": (0.485, 0.456, 0.406),
    "image_std": (0.229, 0.224, 0.225), "do_reduce_labels": False,
}


class SegformerCityscapesSegmenter(_TransformersSegmenter):
    """SegFormer-B5 fine-tuned on Cityscapes (19 classes), mapped by :data:`CITYSCAPES_GROUPS`.

    A second opinion, not the benchmark's segmenter: water, snow and other are always 0 (see
    :data:`CITYSCAPES_UNSUPPORTED`), so its GAAS is not comparable with the Vistas one.
    Input: the checkpoint's own ``SegformerImageProcessor`` (``from_pretrained(weights)``) when the
    weights ship a ``preprocessor_config.json``; for a folder without one the defaults
    :data:`DEFAULT_PROCESSOR`: bilinear resize to 1024 x 1024 (the checkpoint's training crop; the
    aspect ratio is not kept), rescale 1/255, ImageNet mean/std. ``input_size``, when given,
    replaces the size (``input_size`` x ``input_size``) either way; the effective settings are
    recorded in the config. Post-processing: ``post_process_semantic_segmentation`` (logits resized bilinearly
    to the image's own size, argmax).
    """

    default_id = "nvidia/segformer-b5-finetuned-cityscapes-1024-1024"
    model_class = "SegformerForSemanticSegmentation"
    model_type = "segformer"
    label_set = "Cityscapes (19 train classes, ids 0-18)"
    expected_labels = tuple((c,) for c in CITYSCAPES_CLASSES)
    groups = CITYSCAPES_GROUPS
    class_to_group = CITYSCAPES_CLASS_TO_GROUP
    unsupported_groups = CITYSCAPES_UNSUPPORTED
    processor_classes = ("SegformerImageProcessorPil", "SegformerImageProcessor")
    default_processor = DEFAULT_PROCESSOR
    post_processing = (
        "SegformerImageProcessor.post_process_semantic_segmentation per image: logits "
        "resized bilinearly (align_corners=False) to the label map size, argmax over the 19 classes"
    )
    mapping_notes = (
        "wall, fence -> building; terrain -> vegetation; traffic light, traffic sign -> sign; "
        "rider -> person; train -> vehicle; water, snow, other cannot be expressed (always 0)"
    )

    def __init__(
        self,
        name: str = "segformer-cityscapes",
        *,
        weights: str | os.PathLike | None = None,
        revision: str | None = None,
        device: Any | None = None,
        input_size: int | None = None,
    ) -> None:
        super().__init__(name, weights=weights, revision=revision, device=device, options={"input_size": input_size})

    def _processor_overrides(self, *, input_size: int | None) -> dict:
        if input_size is not None and not (isinstance(input_size, int) and input_size > 0):
            raise ValueError(f"input_size must be a positive int, got {input_size!r}")
        return {} if input_size is None else {"size": {"height": input_size, "width": input_size}}

    def _input_config(self, size: dict) -> dict:
        return {
            "resize": "exact size (aspect ratio not kept)",
            "input_size": size.get("height") if size.get("height") == size.get("width") else None,
        }

    def _post_process(self, outputs, index: int, size: tuple[int, int]):
        one = types.SimpleNamespace(logits=outputs.logits[index : index + 1])
        return self.processor.post_process_semantic_segmentation(one, target_sizes=[size])[0]
