"""Semantic group shares per image (SPEC section 5) and the tier-4 composition gate (SPEC section 8).

A :class:`Segmenter` labels every pixel of an image with a class of its label set and reports,
per image, the share of the pixels that fall in each of the 12 semantic groups of
:data:`~geofidelity_bench.metrics.composition.SEMANTIC_GROUPS` (road, sidewalk, building,
vehicle, person, vegetation, sky, pole, sign, water, snow, other, in that order). Pixels of a
class that belongs to no group are *unlabeled*: the 12 shares plus the unlabeled share sum to 1.
With the reference segmenter (Mask2Former Swin-L on Mapillary Vistas v1.2) these are the classes
7 "Bike Lane", 10 "Parking" and 12 "Rail Track", which SPEC section 5 puts in no group.

Backends (:func:`get_segmenter`):

- ``mask2former-vistas`` (default, the SPEC's segmenter):
  ``facebook/mask2former-swin-large-mapillary-vistas-semantic``, 65 classes, ids 0-64.
- ``segformer-cityscapes``: ``nvidia/segformer-b5-finetuned-cityscapes-1024-1024``, the 19
  Cityscapes train classes, mapped to the groups as documented in :data:`CITYSCAPES_GROUPS`;
  it cannot express water, snow and other (see ``config["unsupported_groups"]``).

Everything that changes the shares (weights id and revision or file hashes, input size, label
set and group mapping, post-processing) is in ``segmenter.config``, a JSON-serializable dict
written next to every number computed from the shares; ``segmenter.config_hash`` keys the cache.
Shares are cached in the :class:`~geofidelity_bench.encoders.EmbeddingCache` (one folder per
segmenter config hash, one 12-float row per image content sha256), like embeddings.

    >>> from geofidelity_bench.segmentation import get_segmenter, segment_images, gaas_shares  # doctest: +SKIP
    >>> seg = get_segmenter("mask2former-vistas")                                                 # doctest: +SKIP
    >>> shares = segment_images(seg, ["a.jpg", "b.jpg"], cache=EmbeddingCache())                  # doctest: +SKIP
    >>> shares.shape, gaas_shares(shares).shape                                                   # doctest: +SKIP
    ((2, 12), (2, 8))

Importing this module loads neither torch nor transformers; a backend imports them when built.
"""

from __future__ import annotations

import abc
import json
import math
import os
import re
import types
from dataclasses import asdict, dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from geofidelity_bench.cached_batches import run_cached
from geofidelity_bench.encoders._hf import local_weights_sha256, looks_like_path
from geofidelity_bench.errors import ModelUnavailableError, offline_hint
from geofidelity_bench.encoders.base import as_image_list, canonical_json, default_names, hash_config, resolve_device
from geofidelity_bench.images import ImageSource, load_image
from geofidelity_bench.metrics.composition import GAAS_GROUPS, SEMANTIC_GROUPS

#: The 12 groups, in the column order of every share vector this module returns.
GROUP_NAMES: tuple[str, ...] = tuple(SEMANTIC_GROUPS)
#: What the pixels of classes outside every group are called (1 - sum of the 12 shares).
UNLABELED = "unlabeled"

#: Registry name of the SPEC's segmenter.
DEFAULT_SEGMENTER = "mask2former-vistas"

#: Shares may stray this far outside [0, 1] (or their sum above 1) from rounding.
SHARE_TOLERANCE = 1e-6

#: Label maps are computed at the image's own (decoded, EXIF-rotated) size, unless it has more
#: pixels than this; then at the largest size with the same aspect ratio under this cap. Shares
#: are ratios, so this changes them by boundary rounding only, and it bounds the memory of the
#: full-resolution class-score map (classes x height x width floats).
MAX_LABEL_MAP_PIXELS = 4_194_304  # 2048 x 2048

# -- label sets ----------------------------------------------------------------------------------

#: Mapillary Vistas v1.2, the 65 evaluated classes (ids 0-64; 65 "Unlabeled" is not predicted),
#: as (hierarchical name, readable name). Checkpoints spell id2label either way: the Mask2Former
#: conversions on the Hub use the readable names of the Mask2Former repository's metadata
#: ("Road", "Traffic Sign (Front)"), others the dataset's hierarchical names
#: ("construction--flat--road"). Both are accepted, see :func:`normalize_label`.
VISTAS_V12_CLASSES: tuple[tuple[str, str], ...] = (
    ("animal--bird", "Bird"),  # 0
    ("animal--ground-animal", "Ground Animal"),
    ("construction--barrier--curb", "Curb"),
    ("construction--barrier--fence", "Fence"),
    ("construction--barrier--guard-rail", "Guard Rail"),
    ("construction--barrier--other-barrier", "Barrier"),  # 5
    ("construction--barrier--wall", "Wall"),
    ("construction--flat--bike-lane", "Bike Lane"),
    ("construction--flat--crosswalk-plain", "Crosswalk - Plain"),
    ("construction--flat--curb-cut", "Curb Cut"),
    ("construction--flat--parking", "Parking"),  # 10
    ("construction--flat--pedestrian-area", "Pedestrian Area"),
    ("construction--flat--rail-track", "Rail Track"),
    ("construction--flat--road", "Road"),
    ("construction--flat--service-lane", "Service Lane"),
    ("construction--flat--sidewalk", "Sidewalk"),  # 15
    ("construction--structure--bridge", "Bridge"),
    ("construction--structure--building", "Building"),
    ("construction--structure--tunnel", "Tunnel"),
    ("human--person", "Person"),
    ("human--rider--bicyclist", "Bicyclist"),  # 20
    ("human--rider--motorcyclist", "Motorcyclist"),
    ("human--rider--other-rider", "Other Rider"),
    ("marking--crosswalk-zebra", "Lane Marking - Crosswalk"),
    ("marking--general", "Lane Marking - General"),
    ("nature--mountain", "Mountain"),  # 25
    ("nature--sand", "Sand"),
    ("nature--sky", "Sky"),
    ("nature--snow", "Snow"),
    ("nature--terrain", "Terrain"),
    ("nature--vegetation", "Vegetation"),  # 30
    ("nature--water", "Water"),
    ("object--banner", "Banner"),
    ("object--bench", "Bench"),
    ("object--bike-rack", "Bike Rack"),
    ("object--billboard", "Billboard"),  # 35
    ("object--catch-basin", "Catch Basin"),
    ("object--cctv-camera", "CCTV Camera"),
    ("object--fire-hydrant", "Fire Hydrant"),
    ("object--junction-box", "Junction Box"),
    ("object--mailbox", "Mailbox"),  # 40
    ("object--manhole", "Manhole"),
    ("object--phone-booth", "Phone Booth"),
    ("object--pothole", "Pothole"),
    ("object--street-light", "Street Light"),
    ("object--support--pole", "Pole"),  # 45
    ("object--support--traffic-sign-frame", "Traffic Sign Frame"),
    ("object--support--utility-pole", "Utility Pole"),
    ("object--traffic-light", "Traffic Light"),
    ("object--traffic-sign--back", "Traffic Sign (Back)"),
    ("object--traffic-sign--front", "Traffic Sign (Front)"),  # 50
    ("object--trash-can", "Trash Can"),
    ("object--vehicle--bicycle", "Bicycle"),
    ("object--vehicle--boat", "Boat"),
    ("object--vehicle--bus", "Bus"),
    ("object--vehicle--car", "Car"),  # 55
    ("object--vehicle--caravan", "Caravan"),
    ("object--vehicle--motorcycle", "Motorcycle"),
    ("object--vehicle--on-rails", "On Rails"),
    ("object--vehicle--other-vehicle", "Other Vehicle"),
    ("object--vehicle--trailer", "Trailer"),  # 60
    ("object--vehicle--truck", "Truck"),
    ("object--vehicle--wheeled-slow", "Wheeled Slow"),
    ("void--car-mount", "Car Mount"),
    ("void--ego-vehicle", "Ego Vehicle"),  # 64
)

#: Vistas groups: exactly SPEC section 5 (the table lives in metrics.composition).
VISTAS_GROUPS: Mapping[str, tuple[int, ...]] = SEMANTIC_GROUPS
#: Vistas classes in no group (counted as unlabeled): 7 Bike Lane, 10 Parking, 12 Rail Track.
VISTAS_UNGROUPED: tuple[int, ...] = tuple(
    sorted(set(range(len(VISTAS_V12_CLASSES))) - {c for ids in SEMANTIC_GROUPS.values() for c in ids})
)

#: Cityscapes, the 19 train classes (ids 0-18) as nvidia's SegFormer checkpoints name them.
CITYSCAPES_CLASSES: tuple[str, ...] = (
    "road", "sidewalk", "building", "wall", "fence", "pole", "traffic light", "traffic sign", "vegetation",
    "terrain", "sky", "person", "rider", "car", "truck", "bus", "train", "motorcycle", "bicycle",
)

#: Cityscapes -> groups, following the Vistas table class by class: wall and fence are in the
#: building group (Vistas 6, 3); terrain in vegetation (Vistas 29); traffic light and traffic sign
#: in sign (Vistas 48-50); rider in person (Vistas 20-22); train in vehicle (Vistas 58 "On
#: Rails"). Lane markings and curbs have no class of their own in Cityscapes; its annotators
#: label them road and sidewalk, which is where the Vistas table puts them too. Every Cityscapes
#: pixel gets one of the 19 classes, so the unlabeled share is always 0; parking, bike lanes and
#: rail tracks (unlabeled under Vistas) are assigned to whatever class the model prefers.
CITYSCAPES_GROUPS: Mapping[str, tuple[int, ...]] = MappingProxyType(
    {
        "road": (0,),
        "sidewalk": (1,),
        "building": (2, 3, 4),
        "vehicle": (13, 14, 15, 16, 17, 18),
        "person": (11, 12),
        "vegetation": (8, 9),
        "sky": (10,),
        "pole": (5,),
        "sign": (6, 7),
    }
)
#: Groups Cityscapes has no class for; their share is always 0 (water, snow and the Vistas
#: "other" objects are labeled as one of the 19 classes instead). Also narrower than under Vistas:
#: sign (no billboards, banners, sign frames), building (no bridge, tunnel, barrier).
CITYSCAPES_UNSUPPORTED: tuple[str, ...] = ("water", "snow", "other")


def normalize_label(label: str) -> str:
    """How class names are compared: lower case, every run of non-alphanumerics one space.

    >>> normalize_label("construction--flat--road"), normalize_label("Traffic Sign (Front)")
    ('construction flat road', 'traffic sign front')
    """
    return " ".join(re.sub(r"[^0-9a-z]+", " ", str(label).lower()).split())


def class_to_group_array(groups: Mapping[str, Sequence[int]], num_classes: int) -> np.ndarray:
    """(num_classes,) int array: index into :data:`GROUP_NAMES` of each class, -1 if in no group."""
    out = np.full(num_classes, -1, dtype=np.int64)
    for group, ids in groups.items():
        if group not in GROUP_NAMES:
            raise ValueError(f"unknown group {group!r}; groups are {', '.join(GROUP_NAMES)}")
        for c in ids:
            if not 0 <= int(c) < num_classes:
                raise ValueError(f"group {group!r}: class id {c} outside 0..{num_classes - 1}")
            if out[c] != -1:
                raise ValueError(f"class id {c} is in two groups: {GROUP_NAMES[out[c]]!r} and {group!r}")
            out[c] = GROUP_NAMES.index(group)
    out.setflags(write=False)
    return out


VISTAS_CLASS_TO_GROUP = class_to_group_array(VISTAS_GROUPS, len(VISTAS_V12_CLASSES))
CITYSCAPES_CLASS_TO_GROUP = class_to_group_array(CITYSCAPES_GROUPS, len(CITYSCAPES_CLASSES))


# -- shares from labels ---------------------------------------------------------------------------


def shares_from_counts(counts: Sequence[float], class_to_group: np.ndarray) -> np.ndarray:
    """Pixel counts per class -> float64 (12,) shares of the groups (unlabeled = 1 - sum)."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.shape != class_to_group.shape:
        raise ValueError(f"got {counts.shape[0]} class counts for a label set of {class_to_group.shape[0]} classes")
    total = counts.sum()
    if total <= 0:
        raise ValueError("a label map with no pixels has no shares")
    grouped = class_to_group >= 0
    shares = np.bincount(class_to_group[grouped], weights=counts[grouped], minlength=len(GROUP_NAMES))
    return shares / total


def shares_from_label_map(label_map: Any, class_to_group: np.ndarray = VISTAS_CLASS_TO_GROUP) -> np.ndarray:
    """Share of the pixels of each group in a label map of class ids.

    Args:
        label_map: (H, W) integer class ids (numpy array or CPU tensor).
        class_to_group: group index per class id (default: the Vistas table of SPEC section 5).

    Returns:
        float64 (12,) in :data:`GROUP_NAMES` order; 1 minus their sum is the unlabeled share.

    Raises:
        ValueError: empty map, non-integer values, or a class id outside the label set.

    Example:
        >>> lm = np.array([[13, 13, 27, 7]])  # road, road, sky, bike lane (no group)
        >>> s = shares_from_label_map(lm)
        >>> float(s[GROUP_NAMES.index("road")]), float(s[GROUP_NAMES.index("sky")]), float(1 - s.sum())
        (0.5, 0.25, 0.25)
    """
    arr = np.asarray(label_map)
    if arr.size == 0:
        raise ValueError("a label map with no pixels has no shares")
    if arr.dtype.kind not in "iu":
        raise ValueError(f"label map must hold integer class ids, got {arr.dtype}")
    n = class_to_group.shape[0]
    low, high = int(arr.min()), int(arr.max())
    if low < 0 or high >= n:
        raise ValueError(f"label map has class ids outside 0..{n - 1} (min {low}, max {high})")
    return shares_from_counts(np.bincount(arr.ravel(), minlength=n), class_to_group)


def _as_share_matrix(shares: Any, name: str = "shares") -> np.ndarray:
    arr = np.asarray(shares, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] != len(GROUP_NAMES):
        raise ValueError(f"{name} must have {len(GROUP_NAMES)} columns ({', '.join(GROUP_NAMES)}), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} has non-finite values")
    return arr


_GAAS_COLUMNS = [GROUP_NAMES.index(g) for g in GAAS_GROUPS]


def gaas_shares(shares_12: Any) -> np.ndarray:
    """The 8 GAAS columns (``metrics.composition.GAAS_GROUPS`` order) of 12-group shares.

    Args:
        shares_12: (n, 12) or (12,) shares in :data:`GROUP_NAMES` order.

    Returns:
        float64 (n, 8), what :func:`geofidelity_bench.metrics.gaas` takes.
    """
    return np.ascontiguousarray(_as_share_matrix(shares_12, "shares_12")[:, _GAAS_COLUMNS])


def unlabeled_share(shares_12: Any) -> np.ndarray:
    """(n,) share of the pixels in no group: ``1 - sum`` of the 12 shares, clipped at 0."""
    return np.maximum(1.0 - _as_share_matrix(shares_12, "shares_12").sum(axis=1), 0.0)


# -- the tier-4 gate -------------------------------------------------------------------------------

#: SPEC section 8, tier 4: inclusive (low, high) bounds; None means unbounded on that side.
TIER4_BOUNDS: Mapping[str, tuple[float | None, float | None]] = MappingProxyType(
    {
        "sky": (0.01, 0.55),
        "building": (0.03, 0.70),
        "road": (0.01, 0.55),
        "vehicle": (None, 0.40),
        "vegetation": (None, 0.80),
        "urbanness": (0.05, None),
    }
)
#: Shares the gate reads.
TIER4_INPUTS = ("sky", "building", "road", "sidewalk", "vehicle", "vegetation")
#: Urbanness is a sum of products: this much float rounding below 0.05 still counts as 0.05.
URBANNESS_ROUNDING = 1e-12


def urbanness(building: float, sidewalk: float, vehicle: float, road: float) -> float:
    """``building + 0.3 sidewalk - max(0, vehicle - 0.10) - max(0, road - 0.30)`` (SPEC section 8)."""
    return float(building + 0.3 * sidewalk - max(0.0, vehicle - 0.10) - max(0.0, road - 0.30))


def _gate_inputs(shares: Mapping[str, float] | Sequence[float] | np.ndarray) -> dict[str, float]:
    if isinstance(shares, Mapping):
        missing = [k for k in TIER4_INPUTS if k not in shares]
        if missing:
            raise ValueError(f"tier4_gate needs the shares of {', '.join(TIER4_INPUTS)}; missing {', '.join(missing)}")
        values = {k: float(shares[k]) for k in TIER4_INPUTS}
    else:
        arr = np.asarray(shares, dtype=np.float64)
        if arr.shape != (len(GROUP_NAMES),):
            raise ValueError(
                f"tier4_gate takes a mapping or a {len(GROUP_NAMES)}-vector in the order {', '.join(GROUP_NAMES)}, "
                f"got shape {arr.shape}"
            )
        values = {k: float(arr[GROUP_NAMES.index(k)]) for k in TIER4_INPUTS}
    for k, v in values.items():
        if not math.isfinite(v) or v < -SHARE_TOLERANCE or v > 1.0 + SHARE_TOLERANCE:
            raise ValueError(f"share of {k} must be a number in [0, 1], got {v!r}")
    return values


def tier4_gate(shares: Mapping[str, float] | Sequence[float] | np.ndarray) -> tuple[bool, dict[str, Any]]:
    """The tier-4 curation filter of SPEC section 8, on one image's group shares.

    Passes when, with every bound inclusive: sky in [0.01, 0.55], building in [0.03, 0.70],
    road in [0.01, 0.55], vehicle <= 0.40, vegetation <= 0.80 and
    ``urbanness = building + 0.3 sidewalk - max(0, vehicle - 0.10) - max(0, road - 0.30) >= 0.05``.

    Args:
        shares: a mapping with at least sky, building, road, sidewalk, vehicle, vegetation, or a
            12-vector in :data:`GROUP_NAMES` order.

    Returns:
        ``(passed, measurements)``; measurements holds the six shares read, ``urbanness`` and
        ``failed``, the names of the failed checks (keys of :data:`TIER4_BOUNDS`) in order.

    Example:
        >>> tier4_gate({"sky": 0.2, "building": 0.3, "road": 0.25, "sidewalk": 0.1, "vehicle": 0.05,
        ...             "vegetation": 0.1})[0]
        True
    """
    values = _gate_inputs(shares)
    measured = dict(values)
    measured["urbanness"] = urbanness(values["building"], values["sidewalk"], values["vehicle"], values["road"])
    failed = []
    for check, (low, high) in TIER4_BOUNDS.items():
        v = measured[check]
        slack = URBANNESS_ROUNDING if check == "urbanness" else 0.0
        if (low is not None and v < low - slack) or (high is not None and v > high):
            failed.append(check)
    measured["failed"] = failed
    return not failed, measured


# -- errors ----------------------------------------------------------------------------------------


class SegmenterUnavailableError(ModelUnavailableError):
    """A segmenter's weights (or its package) cannot be had; the message says how to run offline."""


class LabelMismatchError(ValueError):
    """The weights' label set is not the one the segmenter's group mapping was written for."""


def _offline_hint(weights_id: str) -> str:
    """How to run a segmenter without the Hub (the one wording of :func:`geofidelity_bench.errors.offline_hint`)."""
    return offline_hint(flag="--segmenter-weights", python_arg="weights=", weights_id=weights_id)


def check_id2label(
    id2label: Mapping[Any, str],
    expected: Sequence[Sequence[str]],
    *,
    segmenter: str,
    weights: str,
    label_set: str,
) -> list[str]:
    """Checks a model's labels against the label set a mapping was written for, by id and name.

    Args:
        id2label: the model config's ``id2label``.
        expected: per class id, the accepted spellings (compared with :func:`normalize_label`).

    Returns:
        The model's labels as a list indexed by id.

    Raises:
        LabelMismatchError: a different number of classes, missing ids, or a name that matches
            none of the accepted spellings; the message lists the first differences.
    """
    labels = {int(k): str(v) for k, v in dict(id2label or {}).items()}
    n = len(expected)
    where = f"weights {weights!r} for segmenter {segmenter!r}"
    if sorted(labels) != list(range(n)):
        ids = sorted(labels)
        shown = f"ids {ids[0]}..{ids[-1]}" if ids else "no labels"
        raise LabelMismatchError(
            f"{where} have {len(labels)} classes ({shown}), but the group mapping is written for {label_set}: "
            f"{n} classes, ids 0..{n - 1}. Use weights trained on {label_set}, or another segmenter."
        )
    bad = []
    for i, accepted in enumerate(expected):
        if normalize_label(labels[i]) not in {normalize_label(a) for a in accepted}:
            bad.append(f"id {i} is {labels[i]!r}, expected " + " or ".join(repr(a) for a in accepted))
    if bad:
        more = f" (and {len(bad) - 8} more)" if len(bad) > 8 else ""
        raise LabelMismatchError(
            f"{where} do not have the {label_set} labels the group mapping expects: " + "; ".join(bad[:8]) + more
            + ". Names are compared case-insensitively, ignoring punctuation."
        )
    return [labels[i] for i in range(n)]


# -- the interface ---------------------------------------------------------------------------------


def label_map_size(width: int, height: int, max_pixels: int = MAX_LABEL_MAP_PIXELS) -> tuple[int, int]:
    """(height, width) at which an image's label map is computed: its own, or capped in pixels."""
    if width * height <= max_pixels:
        return (height, width)
    scale = math.sqrt(max_pixels / (width * height))
    return (max(1, int(height * scale)), max(1, int(width * scale)))


class Segmenter(abc.ABC):
    """Images in, per image the pixel share of each of the 12 semantic groups out.

    Attributes:
        name: the registry name (``"mask2former-vistas"``).
        class_names: the model's label of every class id.
        class_to_group: (num_classes,) index into :data:`GROUP_NAMES` per class id, -1 = unlabeled.
        unsupported_groups: groups the label set cannot express (their share is always 0).
        model: the ``torch.nn.Module``; ``forward_calls`` counts its calls.
        device: torch device string.
    """

    name: str
    class_names: tuple[str, ...]
    class_to_group: np.ndarray
    unsupported_groups: tuple[str, ...] = ()
    device: str
    model: Any

    def __init__(self) -> None:
        self._config: dict[str, Any] = {}
        self.forward_calls = 0

    # -- identity ---------------------------------------------------------------------------
    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def config(self) -> dict[str, Any]:
        """Everything that determines the shares, plus the device (left out of the hash)."""
        cfg = json.loads(canonical_json(self._config))
        cfg["device"] = self.device
        return cfg

    @property
    def config_hash(self) -> str:
        return hash_config(self._config)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, device={self.device!r}, config_hash={self.config_hash[:12]})"

    def to(self, device: Any) -> "Segmenter":
        self.device = resolve_device(device)
        self.model.to(self.device)
        return self

    # -- computation ------------------------------------------------------------------------
    @abc.abstractmethod
    def label_maps(self, images: Sequence[Any]) -> list[Any]:
        """RGB PIL images -> one (H, W) integer tensor of class ids per image, at
        :func:`label_map_size` of the image."""

    def label_map_shares(self, label_map: Any) -> np.ndarray:
        """float64 (12,) shares of one label map of this segmenter's class ids."""
        return shares_from_label_map(label_map, self.class_to_group)

    def shares_of(self, images: Sequence[Any]) -> np.ndarray:
        """RGB PIL images (already decoded) -> float32 (n, 12) shares; no cache."""
        import torch

        out = np.zeros((len(images), len(GROUP_NAMES)), dtype=np.float32)
        for i, lm in enumerate(self.label_maps(images)):
            counts = torch.bincount(lm.reshape(-1).long(), minlength=self.num_classes)[: self.num_classes]
            out[i] = shares_from_counts(counts.cpu().numpy(), self.class_to_group)
        return out

    def segment(
        self,
        images: Iterable[ImageSource] | ImageSource,
        *,
        batch_size: int = 8,
        progress: bool | None = None,
        names: Sequence[str] | None = None,
    ) -> np.ndarray:
        """float32 (n, 12) shares of images (PIL, paths, bytes, arrays), no cache."""
        return segment_images(self, images, names=names, batch_size=batch_size, progress=progress)


# -- transformers backends -------------------------------------------------------------------------

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
    """Common loading (local folder or Hub id, offline-aware) and batching of the HF backends."""

    default_id: str
    model_class: str
    model_type: str
    label_set: str

    def _load(self, weights: str | os.PathLike | None, revision: str | None, expected: Sequence[Sequence[str]]):
        import torch
        import transformers
        from huggingface_hub import constants

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

        def unavailable(err: BaseException) -> SegmenterUnavailableError:
            rev = f" (revision {revision!r})" if revision else ""
            offline = " HF_HUB_OFFLINE is set, so the Hub was not contacted." if constants.HF_HUB_OFFLINE else ""
            return SegmenterUnavailableError(
                f"cannot load weights {source!r}{rev} for segmenter {self.name!r}: {str(err).rstrip('. ')}.{offline} "
                + _offline_hint(source if not local else self.default_id)
            )

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

    @abc.abstractmethod
    def _post_process(self, outputs, index: int, size: tuple[int, int]):
        """Batch outputs, the index of one image and its label map (H, W) -> (H, W) class ids."""

    def label_maps(self, images: Sequence[Any]) -> list[Any]:
        import torch

        # One forward per group of images that preprocess to the same size, so nothing is padded
        # and the post-processing (which resizes the whole padded mask) sees only the image.
        pixels = [self._pixel_values(img) for img in images]
        by_shape: dict[tuple[int, int], list[int]] = {}
        for i, pv in enumerate(pixels):
            by_shape.setdefault(tuple(pv.shape[-2:]), []).append(i)
        maps: list[Any] = [None] * len(images)
        for idx in by_shape.values():
            batch = torch.cat([pixels[i] for i in idx]).to(self.device)
            with torch.inference_mode():
                outputs = self.model(pixel_values=batch)
                self.forward_calls += 1
                for j, i in enumerate(idx):
                    maps[i] = self._post_process(outputs, j, label_map_size(*images[i].size))
        return maps


class Mask2FormerVistasSegmenter(_TransformersSegmenter):
    """Mask2Former (Swin-L) trained on Mapillary Vistas v1.2: SPEC section 5's segmenter.

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


class SegformerCityscapesSegmenter(_TransformersSegmenter):
    """SegFormer-B5 fine-tuned on Cityscapes (19 classes), mapped by :data:`CITYSCAPES_GROUPS`.

    A second opinion, not the SPEC's segmenter: water, snow and other are always 0 (see
    :data:`CITYSCAPES_UNSUPPORTED`), so its GAAS is not comparable with the Vistas one.
    Input: bilinear resize to ``input_size`` x ``input_size`` (1024, the checkpoint's training
    crop; the aspect ratio is not kept, as in its processor config), rescale 1/255, ImageNet
    mean/std. Post-processing: ``post_process_semantic_segmentation`` (logits resized bilinearly
    to the image's own size, argmax).
    """

    default_id = "nvidia/segformer-b5-finetuned-cityscapes-1024-1024"
    model_class = "SegformerForSemanticSegmentation"
    model_type = "segformer"
    label_set = "Cityscapes (19 train classes, ids 0-18)"

    def __init__(
        self,
        name: str = "segformer-cityscapes",
        *,
        weights: str | os.PathLike | None = None,
        revision: str | None = None,
        device: Any | None = None,
        input_size: int = 1024,
    ) -> None:
        super().__init__()
        self.name = name
        self.device = resolve_device(device)
        if not (isinstance(input_size, int) and input_size > 0):
            raise ValueError(f"input_size must be a positive int, got {input_size!r}")
        model, labels, record = self._load(weights, revision, [(c,) for c in CITYSCAPES_CLASSES])
        self.model = model.to(self.device).eval()
        self.class_names = tuple(labels)
        self.class_to_group = CITYSCAPES_CLASS_TO_GROUP
        self.unsupported_groups = CITYSCAPES_UNSUPPORTED
        cls = _processor_class("SegformerImageProcessorPil", "SegformerImageProcessor")
        mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
        self.processor = cls(
            size={"height": input_size, "width": input_size}, resample=2, do_resize=True, do_rescale=True,
            rescale_factor=1 / 255, do_normalize=True, image_mean=mean, image_std=std, do_reduce_labels=False,
        )
        self._config = {
            "kind": "semantic-segmenter",
            "segmenter": name,
            "backend": f"transformers.{self.model_class}",
            **record,
            "model_type": self.model_type,
            "input": {
                "processor": f"transformers.{cls.__name__}",
                "resize": "exact input_size x input_size (aspect ratio not kept)",
                "input_size": input_size,
                "interpolation": "bilinear",
                "rescale": "1/255",
                "mean": list(mean),
                "std": list(std),
            },
            "post_processing": "SegformerImageProcessor.post_process_semantic_segmentation per image: logits "
            "resized bilinearly (align_corners=False) to the label map size, argmax over the 19 classes",
            "mapping_notes": "wall, fence -> building; terrain -> vegetation; traffic light, traffic sign -> sign; "
            "rider -> person; train -> vehicle; water, snow, other cannot be expressed (always 0)",
            **self._mapping_config(CITYSCAPES_GROUPS),
        }

    def _post_process(self, outputs, index: int, size: tuple[int, int]):
        one = types.SimpleNamespace(logits=outputs.logits[index : index + 1])
        return self.processor.post_process_semantic_segmentation(one, target_sizes=[size])[0]


# -- registry --------------------------------------------------------------------------------------

_BACKENDS: dict[str, type[Segmenter]] = {
    "mask2former-vistas": Mask2FormerVistasSegmenter,
    "segformer-cityscapes": SegformerCityscapesSegmenter,
}
_ALIASES = {"mask2former": "mask2former-vistas", "segformer": "segformer-cityscapes"}

#: Default weights id of each segmenter.
DEFAULT_WEIGHTS = {
    "mask2former-vistas": Mask2FormerVistasSegmenter.default_id,
    "segformer-cityscapes": SegformerCityscapesSegmenter.default_id,
}


def default_weights_id(name: str) -> str:
    """The Hub id a segmenter name loads by default (aliases accepted)."""
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in DEFAULT_WEIGHTS:
        raise ValueError(f"unknown segmenter {name!r}; known segmenters: {', '.join(list_segmenters())}")
    return DEFAULT_WEIGHTS[key]


def list_segmenters(*, include_aliases: bool = False) -> list[str]:
    """Registered segmenter names (sorted); with ``include_aliases`` also the short aliases."""
    names = sorted(_BACKENDS)
    return names + sorted(_ALIASES) if include_aliases else names


def get_segmenter(
    name: str = DEFAULT_SEGMENTER,
    weights: str | os.PathLike | None = None,
    device: Any | None = None,
    *,
    revision: str | None = None,
    **kw: Any,
) -> Segmenter:
    """Builds a registered segmenter.

    Args:
        name: ``"mask2former-vistas"`` (default; alias ``mask2former``) or
            ``"segformer-cityscapes"`` (alias ``segformer``).
        weights: a local save_pretrained folder or a Hub id; default the segmenter's own
            weights (:data:`DEFAULT_WEIGHTS`). Honors ``HF_HUB_OFFLINE``.
        device: torch device; default ``cuda`` when available, else ``cpu``.
        revision: Hub revision (branch, tag or commit) of ``weights``.
        **kw: passed to the backend (``input_size``, and ``max_input_size`` for Mask2Former).

    Raises:
        ValueError: unknown name or device.
        SegmenterUnavailableError: the weights cannot be loaded (the message names the id and
            how to pass a local folder).
        LabelMismatchError: the weights' id2label is not the label set the mapping expects.
    """
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _BACKENDS:
        known = ", ".join(list_segmenters() + [f"{a} (= {t})" for a, t in sorted(_ALIASES.items())])
        raise ValueError(f"unknown segmenter {name!r}; known segmenters: {known}")
    return _BACKENDS[key](key, weights=weights, revision=revision, device=device, **kw)


# -- running through the cache ---------------------------------------------------------------------

#: New shares are written to the cache at least this often (rows / seconds).


@dataclass(frozen=True)
class SegmentStats:
    """How a run got its shares: ``from_cache + computed == total`` (per image).

    ``forward_images`` counts the images run through the model (identical images in one run
    are computed once), ``forward_calls`` the model calls.
    """

    total: int
    from_cache: int
    computed: int
    forward_images: int
    forward_calls: int

    def __str__(self) -> str:
        return f"{self.from_cache} from cache, {self.computed} computed"

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _segment_with_stats(
    segmenter: Segmenter,
    images: Iterable[ImageSource] | ImageSource,
    *,
    names: Sequence[str] | None,
    cache,
    batch_size: int,
    progress: bool | None,
) -> tuple[np.ndarray, SegmentStats]:
    items = as_image_list(images)
    labels = [str(n) for n in names] if names is not None else default_names(items)
    calls_before = segmenter.forward_calls
    run = run_cached(segmenter, items, labels, width=len(GROUP_NAMES), prepare=lambda item, label: load_image(item, name=label),
                     compute=segmenter.shares_of, cache=cache, batch_size=batch_size, progress=progress,
                     desc=f"segmenting ({segmenter.name})")
    stats = SegmentStats(
        total=len(items),
        from_cache=run.from_cache,
        computed=len(items) - run.from_cache,
        forward_images=run.forward_images,
        forward_calls=segmenter.forward_calls - calls_before,
    )
    return run.rows, stats


def segment_images(
    segmenter: Segmenter,
    images: Iterable[ImageSource] | ImageSource,
    names: Sequence[str] | None = None,
    cache=None,
    batch_size: int = 8,
    progress: bool | None = True,
    *,
    return_stats: bool = False,
) -> np.ndarray | tuple[np.ndarray, SegmentStats]:
    """Group shares of images, served from ``cache`` when known, computed otherwise.

    Args:
        segmenter: from :func:`get_segmenter`.
        images: PIL images, paths, encoded bytes or uint8 arrays (decoded with ``load_image``).
        names: how to call each image in errors (default: the path, or ``image[i]``).
        cache: an :class:`~geofidelity_bench.encoders.EmbeddingCache` (rows keyed by
            (segmenter.config_hash, image content sha256)), or None.
        batch_size: images per batch (one forward call per preprocessed size in a batch).
        progress: tqdm bar over the images computed (``None``: only for more than 4 batches).
        return_stats: also return a :class:`SegmentStats`.

    Returns:
        float32 (n, 12) shares in :data:`GROUP_NAMES` order (``1 - row sum`` is the unlabeled
        share), and the stats if asked. A cached and a freshly computed row are identical.

    Raises:
        ImageDecodeError: an image cannot be read or decoded (named in the message); the shares
            computed before it are already in the cache.
    """
    shares, stats = _segment_with_stats(
        segmenter, images, names=names, cache=cache, batch_size=batch_size, progress=progress
    )
    return (shares, stats) if return_stats else shares


def segment_named_images(
    segmenter: Segmenter,
    items: Sequence[tuple[str, ImageSource]],
    cache=None,
    batch_size: int = 8,
    progress: bool | None = True,
) -> tuple[list[str], np.ndarray, SegmentStats]:
    """``(name, image)`` pairs -> (names, float32 (n, 12) shares, stats); ``str(stats)`` reads
    "N from cache, M computed"."""
    names = [str(name) for name, _ in items]
    shares, stats = _segment_with_stats(
        segmenter, [src for _, src in items], names=names, cache=cache, batch_size=batch_size, progress=progress
    )
    return names, shares, stats


__all__ = [
    "CITYSCAPES_CLASSES",
    "CITYSCAPES_GROUPS",
    "CITYSCAPES_UNSUPPORTED",
    "DEFAULT_SEGMENTER",
    "DEFAULT_WEIGHTS",
    "GROUP_NAMES",
    "LabelMismatchError",
    "Mask2FormerVistasSegmenter",
    "SegformerCityscapesSegmenter",
    "SegmentStats",
    "Segmenter",
    "SegmenterUnavailableError",
    "TIER4_BOUNDS",
    "UNLABELED",
    "VISTAS_CLASS_TO_GROUP",
    "VISTAS_GROUPS",
    "VISTAS_UNGROUPED",
    "VISTAS_V12_CLASSES",
    "check_id2label",
    "class_to_group_array",
    "gaas_shares",
    "get_segmenter",
    "label_map_size",
    "list_segmenters",
    "normalize_label",
    "segment_images",
    "default_weights_id",
    "segment_named_images",
    "shares_from_counts",
    "shares_from_label_map",
    "tier4_gate",
    "unlabeled_share",
    "urbanness",
]
