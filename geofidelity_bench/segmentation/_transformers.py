"""Loading a transformers segmentation model (local folder or Hub id, offline-aware, label check)
and running it in batches: what the Mask2Former and SegFormer backends share."""

from __future__ import annotations

import abc
import json
import os
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from geofidelity_bench.encoders._hf import local_weights_sha256, looks_like_path
from geofidelity_bench.encoders.base import resolve_device
from geofidelity_bench.images import load_image
from geofidelity_bench.segmentation.base import (
    MAX_LABEL_MAP_PIXELS,
    Segmenter,
    SegmenterUnavailableError,
    _offline_hint,
    label_map_size,
)
from geofidelity_bench.segmentation.labels import GROUP_NAMES, check_id2label

def _processor_class(*names: str):
    """The first image processor class transformers has among ``names`` (the PIL one first: it
    needs no torchvision and gives the same numbers whichever extras are installed)."""
    import transformers

    for n in names:
        try:
            return getattr(transformers, n)
        except (AttributeError, ImportError, RuntimeError):  # absent, or its backend is missing
            continue
    raise SegmenterUnavailableError(f"this transformers version has none of {', '.join(names)}")


class _TransformersSegmenter(Segmenter):
    """Common construction, loading (local folder or Hub id, offline-aware) and batching of the HF
    backends. A backend sets the class attributes below (and ``class_to_group``, ``unsupported_groups``)
    and implements :meth:`_processor_overrides`, :meth:`_input_config` and :meth:`_post_process`."""

    default_id: str
    model_class: str
    model_type: str
    label_set: str
    #: per class id, the accepted spellings of its label (:func:`~.labels.check_id2label`)
    expected_labels: Sequence[Sequence[str]]
    #: group name -> class ids, as recorded in the config (``label_mapping``)
    groups: Mapping[str, Sequence[int]]
    #: the transformers image processor classes to use, the first one present
    processor_classes: tuple[str, ...]
    #: the processor settings for weights without a preprocessor_config.json
    default_processor: Mapping[str, Any]
    #: the config's ``post_processing`` text
    post_processing: str
    #: the config's ``mapping_notes`` text, if any
    mapping_notes: str | None = None

    def __init__(
        self,
        name: str,
        *,
        weights: str | os.PathLike | None,
        revision: str | None,
        device: Any | None,
        options: Mapping[str, Any],
    ) -> None:
        """Resolves the device, checks the backend's ``options`` (:meth:`_processor_overrides`), loads
        and checks the weights, builds the image processor and records the config."""
        super().__init__()
        self.name = name
        self.device = resolve_device(device)
        overrides = self._processor_overrides(**options)
        model, labels, record = self._load(weights, revision, self.expected_labels)
        self.model = model.to(self.device).eval()
        self.class_names = tuple(labels)
        cls = _processor_class(*self.processor_classes)
        self.processor, origin, settings = self._checkpoint_processor(cls, self.default_processor, overrides)
        input_config = self._input_config(dict(self.processor.size))
        self._config = {
            "kind": "semantic-segmenter",
            "segmenter": name,
            "backend": f"transformers.{self.model_class}",
            **record,
            "model_type": self.model_type,
            "input": {
                "processor": f"transformers.{cls.__name__}",
                "settings_from": origin,
                "settings": settings,
                **input_config,
            },
            "post_processing": self.post_processing,
            **({"mapping_notes": self.mapping_notes} if self.mapping_notes is not None else {}),
            **self._mapping_config(self.groups),
        }

    @abc.abstractmethod
    def _processor_overrides(self, **options: Any) -> dict[str, Any]:
        """Checks the backend's constructor options (raising ``ValueError``) before any weights are
        loaded; returns the image processor settings they override ({} for none)."""

    @abc.abstractmethod
    def _input_config(self, size: dict[str, Any]) -> dict[str, Any]:
        """The config's ``input`` entries after the processor's (``resize``, ``input_size``, ...),
        from the effective processor ``size``; may reject it (``ValueError``)."""

    def _load(self, weights: str | os.PathLike | None, revision: str | None, expected: Sequence[Sequence[str]]):
        import torch
        import transformers

        source, local = self.default_id, False
        if weights is not None:
            text = os.fspath(weights)
            path = Path(text).expanduser()
            if path.is_dir():
                source, local = str(path.resolve()), True
            elif path.exists() or isinstance(weights, os.PathLike) or looks_like_path(text):
                raise SegmenterUnavailableError(
                    f"segmenter weights {text!r} is not a directory saved with save_pretrained(). "
                    + _offline_hint(self.default_id)
                )
            else:
                source = text
        kwargs: dict[str, Any] = {"revision": revision}
        if local:
            kwargs["local_files_only"] = True

        self._source, self._local, self._revision = source, local, revision
        unavailable = self._unavailable

        try:
            cfg = transformers.AutoConfig.from_pretrained(source, **kwargs)
        except (OSError, ValueError) as err:
            raise unavailable(err) from err
        if cfg.model_type != self.model_type:
            raise SegmenterUnavailableError(
                f"weights {source!r} hold a {cfg.model_type!r} model, but segmenter {self.name!r} needs a "
                f"{self.model_type!r} model ({self.default_id})"
            )
        labels = check_id2label(cfg.id2label, expected, segmenter=self.name, weights=source, label_set=self.label_set)
        try:
            model = getattr(transformers, self.model_class).from_pretrained(
                source, config=cfg, dtype=torch.float32, **kwargs
            )
        except (OSError, ValueError) as err:
            raise unavailable(err) from err
        record: dict[str, Any] = {"weights": source, "revision": revision}
        if local:
            record["weights_sha256"] = local_weights_sha256(Path(source))
        else:
            record["commit"] = getattr(model.config, "_commit_hash", None) or getattr(cfg, "_commit_hash", None)
        return model, labels, record

    def _unavailable(self, err: BaseException, what: str = "weights") -> SegmenterUnavailableError:
        from ..errors import load_failure_reason

        source, revision, local = self._source, self._revision, self._local
        rev = f" (revision {revision!r})" if revision else ""
        reason = load_failure_reason(err, f"its {what}" if what != "weights" else "the weights")
        return SegmenterUnavailableError(
            f"cannot load {what} {source!r}{rev} for segmenter {self.name!r}: {reason}. "
            + _offline_hint(source if not local else self.default_id)
        )

    def _checkpoint_processor(self, cls, defaults: Mapping[str, Any], overrides: Mapping[str, Any]):
        """The image processor the checkpoint ships (``preprocessor_config.json``, as the release's
        ``from_pretrained(checkpoint)``), or ``defaults`` for a local folder without one (tiny test
        models); ``overrides`` (the options a caller gave) win either way. Call after :meth:`_load`.

        Returns:
            (processor, where its settings came from, its effective settings as JSON-clean dict).
        """
        if self._local and not (Path(self._source) / "preprocessor_config.json").is_file():
            processor = cls(**{**defaults, **overrides})
            origin = "defaults of this backend (the weights folder has no preprocessor_config.json)"
        else:
            kwargs: dict[str, Any] = {"revision": self._revision}
            if self._local:
                kwargs["local_files_only"] = True
            try:
                processor = cls.from_pretrained(self._source, **kwargs, **overrides)
            except (OSError, ValueError) as err:
                raise self._unavailable(err, "the image processor (preprocessor_config.json) of") from err
            origin = "the checkpoint's preprocessor_config.json"
        if overrides:
            origin += f", overridden by {', '.join(sorted(overrides))}"
        settings = json.loads(json.dumps(processor.to_dict(), sort_keys=True, default=str))
        settings.pop("processor_class", None)
        return processor, origin, settings

    def _mapping_config(self, groups: Mapping[str, Sequence[int]]) -> dict[str, Any]:
        return {
            "groups": list(GROUP_NAMES),
            "label_set": self.label_set,
            "id2label": list(self.class_names),
            "label_check": "id2label must have exactly these ids, names compared after lower-casing and mapping "
            "every run of non-alphanumerics to one space",
            "label_mapping": {g: [[int(c), self.class_names[c]] for c in groups.get(g, ())] for g in GROUP_NAMES},
            "unlabeled_classes": [[int(c), self.class_names[c]] for c in np.flatnonzero(self.class_to_group < 0)],
            "unsupported_groups": list(self.unsupported_groups),
            "shares": "per image: pixels whose class is in the group / all pixels of the label map; the 12 groups "
            "plus 'unlabeled' (classes in no group) sum to 1",
            "label_map_size": f"the decoded image's own size (EXIF orientation applied), or the largest size with "
            f"the same aspect ratio and at most {MAX_LABEL_MAP_PIXELS} pixels",
            "decode": "geofidelity_bench.images.load_image (RGB, EXIF orientation applied, alpha on white)",
            "dtype": "float32",
        }

    def _pixel_values(self, image) -> Any:
        return self.processor(images=[image], input_data_format="channels_last", return_tensors="pt")["pixel_values"]

    def prepare(self, image: Any, name: str | None = None) -> "PreparedImage":
        """(A worker thread of :func:`~geofidelity_bench.segmentation.runner.segment_images`.) Decodes
        one image and runs the image processor on it; the pixels go to page-locked host memory for a
        CUDA model (:meth:`~geofidelity_bench.encoders.base.DeviceTransfers.host_tensor`)."""
        return self._prepared(load_image(image, name=name))

    def _prepared(self, image) -> "PreparedImage":
        from geofidelity_bench.encoders.base import DeviceTransfers

        pixels = self._pixel_values(image)[0]  # (3, H, W): the processor's output for this one image
        return PreparedImage(DeviceTransfers(self.device).host_tensor(pixels), label_map_size(*image.size))

    @abc.abstractmethod
    def _post_process(self, outputs, index: int, size: tuple[int, int]):
        """Batch outputs, the index of one image and its label map (H, W) -> (H, W) class ids."""

    def label_maps(self, images: Sequence[Any]) -> list[Any]:
        """Label maps of decoded RGB PIL images (preprocessed here, in this thread) or of
        :class:`PreparedImage` (preprocessed by :meth:`prepare` in a worker thread); the same numbers."""
        import torch

        from geofidelity_bench.encoders.base import DeviceTransfers, EncoderOptionError

        dtype = next(self.model.parameters()).dtype
        if dtype != torch.float32:  # the config (and the cache key) says float32: never record another dtype
            raise EncoderOptionError(
                f"segmenter {self.name!r}: its model's parameters are {str(dtype).replace('torch.', '')}, but "
                "segmenters run in float32 (their config and cache key say so); do not convert the model")

        prepared = [im if isinstance(im, PreparedImage) else self._prepared(im) for im in images]
        # One forward per group of images that preprocess to the same size, so nothing is padded
        # and the post-processing (which resizes the whole padded mask) sees only the image.
        by_shape: dict[tuple[int, int], list[int]] = {}
        for i, p in enumerate(prepared):
            by_shape.setdefault(tuple(p.pixels.shape[-2:]), []).append(i)
        transfers = DeviceTransfers(self.device)
        maps: list[Any] = [None] * len(images)
        for idx in by_shape.values():
            batch = transfers.send([prepared[i].pixels for i in idx])
            with torch.inference_mode(), self._forward_context(float32=True):  # float32 weights
                outputs = self.model(pixel_values=batch)
                self.forward_calls += 1
                for j, i in enumerate(idx):
                    maps[i] = self._post_process(outputs, j, prepared[i].label_map_size)
        return maps


class PreparedImage(NamedTuple):
    """One image as :meth:`_TransformersSegmenter.prepare` leaves it for the model."""

    pixels: Any  #: (3, H, W) float32 CPU tensor: the image processor's output (page-locked for CUDA)
    label_map_size: tuple[int, int]  #: (H, W) of its label map (:func:`~.base.label_map_size`)
