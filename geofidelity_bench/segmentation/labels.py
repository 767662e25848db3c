"""Label sets of the segmenters and their mapping to the 12 semantic groups (docs/benchmark.md section 5, Metrics).

The group table of Mapillary Vistas v1.2 is docs/benchmark.md section 5, Metrics itself (it lives in
:data:`geofidelity_bench.metrics.composition.SEMANTIC_GROUPS`); the Cityscapes table follows it
class by class. :func:`check_id2label` checks a checkpoint's labels against the label set a
mapping was written for, by id and by name.
"""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np

from geofidelity_bench.errors import GeoFidelityError
from geofidelity_bench.metrics.composition import SEMANTIC_GROUPS

#: The 12 groups, in the column order of every share vector of this package.
GROUP_NAMES: tuple[str, ...] = tuple(SEMANTIC_GROUPS)
#: What the pixels of classes outside every group are called (1 - sum of the 12 shares).
UNLABELED = "unlabeled"


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

#: Vistas groups: exactly docs/benchmark.md section 5, Metrics (the table lives in metrics.composition).
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


class LabelMismatchError(GeoFidelityError, ValueError):
    """The weights' label set is not the one the segmenter's group mapping was written for."""


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



__all__ = [
    "CITYSCAPES_CLASSES",
    "CITYSCAPES_CLASS_TO_GROUP",
    "CITYSCAPES_GROUPS",
    "CITYSCAPES_UNSUPPORTED",
    "GROUP_NAMES",
    "LabelMismatchError",
    "UNLABELED",
    "VISTAS_CLASS_TO_GROUP",
    "VISTAS_GROUPS",
    "VISTAS_UNGROUPED",
    "VISTAS_V12_CLASSES",
    "check_id2label",
    "class_to_group_array",
    "normalize_label",
]
