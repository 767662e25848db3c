"""The generated-folder convention ``{method}/{condition}/{block_id}/NN.ext`` (docs/benchmark.md section 11, File formats).

What :func:`geofidelity_bench.evaluation.read_generated_folder` checks beyond the layout, as small
functions that return problems (strings naming the folder or file) instead of raising, so that
every problem of a folder is reported at once:

* names are matched with full-string patterns (``\\A...\\Z``, ASCII digits only), so a trailing
  newline or a non-ASCII digit never passes;
* a condition folder must be a prompt condition of the benchmark (docs/benchmark.md section 2,
  Prompts) or one the caller declared (``extra_conditions``); anything else is refused with the
  known ones and a did-you-mean (a lowercase ``l1`` would otherwise be scored and then left out
  of every report table);
* two files with the same index in one panel (``00.jpg`` + ``00.png``, ``00.jpg`` + ``000.jpg``)
  are refused, naming both;
* when the folder holds a generation ``manifest.parquet``, every panel image must be listed in it
  (same path, same sha256) and made for the benchmark being scored (its fingerprint), the
  images of a method must share one set of generation settings
  (:data:`SETTINGS_COLUMNS`), and images made by ``generate`` must carry the seed of their unit
  (docs/benchmark.md section 3, Generation).
"""

from __future__ import annotations

import difflib
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .benchmark import is_safe_id
from .manifest_format import (
    MANIFEST_FILE,
    SETTINGS_COLUMNS,
    file_sha256,
    index_rows,
    matching_row,
    read_all_rows,
)
from .prompts import CONDITIONS

#: A panel image: two or more ASCII digits, then one of the image extensions (any case).
PANEL_FILE = re.compile(r"\A([0-9]{2,})\.(jpe?g|png|webp)\Z", re.IGNORECASE)
#: Conditions the evaluation itself gives to real-image anchors and sanity methods.
RESERVED_CONDITIONS = ("anchor", "sanity")


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'L1'?)"`` for the closest choice (case-insensitive), or ``""``.

    >>> did_you_mean("l1", ["L0", "L1", "L2"]), did_you_mean("zzz", ["L0"])
    (" (did you mean 'L1'?)", '')
    """
    choices = list(choices)
    by_lower = {c.lower(): c for c in choices}
    if name.lower() in by_lower:
        return f" (did you mean {by_lower[name.lower()]!r}?)"
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


def known_conditions(extra_conditions: Iterable[str] | None = None) -> tuple[str, ...]:
    """The benchmark's prompt conditions followed by the declared extra ones (checked to be usable names).

    Raises:
        ValueError: an extra condition that is not a safe id or is reserved (``anchor``, ``sanity``).
    """
    extra = list(dict.fromkeys(extra_conditions or ()))
    for name in extra:
        if not is_safe_id(name):
            raise ValueError(f"extra condition {name!r} is not a usable folder name (letters, digits, '.', '_', '-')")
        if name in RESERVED_CONDITIONS:
            raise ValueError(f"extra condition {name!r} is reserved for the real-image anchors and sanity methods")
    return tuple(CONDITIONS) + tuple(c for c in extra if c not in CONDITIONS)


def unknown_condition_problem(folder: Path, known: Sequence[str]) -> str:
    """The message for a condition folder whose name is not a known condition.

    The suggestion also knows the level names of the published release (``L3`` was its name for
    ``L2``, :data:`geofidelity_bench.release_import.LEVEL_ALIASES`).
    """
    from .release_import.names import map_level

    alias = map_level(folder.name)
    hint = f" (did you mean {alias!r}?)" if alias in known else did_you_mean(folder.name, known)
    return (
        f"{folder}: unknown condition {folder.name!r}{hint}; known conditions: "
        f"{', '.join(known)}. Rename the folder, or declare your own condition with --extra-conditions "
        f"{folder.name} (extra_conditions= in Python)"
    )


def unknown_block_problem(folder: Path, block_ids: Sequence[str], benchmark_name: str) -> str:
    return (f"{folder}: unknown block id {folder.name!r}{did_you_mean(folder.name, block_ids)} "
            f"(not in benchmark {benchmark_name!r})")


def panel_index(path: Path) -> int:
    """The index ``k`` of a panel file (``07.jpg`` -> 7); the name must match :data:`PANEL_FILE`."""
    match = PANEL_FILE.match(path.name)
    if match is None:
        raise ValueError(f"{path} is not a panel image name")
    return int(match.group(1))


def duplicate_index_problems(folder: Path, files: Sequence[Path]) -> list[str]:
    """One problem per index that two or more files of a panel share, naming all of them."""
    by_index: dict[int, list[str]] = {}
    for f in files:
        by_index.setdefault(panel_index(f), []).append(f.name)
    return [
        f"{folder}: {' and '.join(names)} have the same index {k}; keep one image per index"
        for k, names in sorted(by_index.items())
        if len(names) > 1
    ]


# -- the generation manifest ------------------------------------------------------------------------


@dataclass
class ManifestCheck:
    """What checking a generated folder against its generation manifest found."""

    manifest: str | None  # the manifest file, None when the folder has none (nothing to check)
    images_checked: int = 0
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _norm(value: Any) -> Any:
    """Settings as comparable values: missing (None, NaN, "") -> None, numbers as float."""
    if value is None or value == "" or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value


def _settings_text(settings: tuple, other: tuple) -> str:
    """``steps=10, guidance=2.0`` for the columns where ``settings`` differs from ``other``."""
    parts = [f"{col}={_show(a)}" for col, a, b in zip(SETTINGS_COLUMNS, settings, other) if a != b]
    return ", ".join(parts)


def _show(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value) if isinstance(value, str) else str(value)


def check_generation_manifest(root: str | os.PathLike, panels: Mapping[tuple, Sequence[Path]], *,
                              benchmark_fingerprint: str | Callable[[], str] | None = None) -> ManifestCheck:
    """Checks the panels read from ``root`` against ``root/manifest.parquet`` (and any journals).

    A panel is refused (one problem naming it) when one of its files is not listed in the
    manifest with its path and sha256 (added or changed after generation), when its rows name
    another benchmark fingerprint than ``benchmark_fingerprint`` (the benchmark it is scored
    against; a callable is called only when there is a manifest; rows without a fingerprint are
    not checked), when its images were
    made with settings that differ from each other or from the other panels of the same method
    (:data:`SETTINGS_COLUMNS`: weights, revision, pipeline, call arguments, steps, guidance, dtype,
    size, negative prompt), or when an image made by ``generate`` does not carry the seed of its
    unit (docs/benchmark.md section 3, Generation). Rows without ``created_at`` (e.g. written by
    ``import-release``, which keeps the release's own seeds) are not checked for the seed rule.
    """
    from .generation.seeds import image_seed

    root = Path(root)
    path = root / MANIFEST_FILE
    if not path.is_file():
        return ManifestCheck(None)
    check = ManifestCheck(str(path))
    try:
        index = index_rows(read_all_rows(root))
    except Exception as err:  # noqa: BLE001 - a damaged manifest is named, whatever pyarrow raised
        check.problems.append(f"{path}: cannot be read ({type(err).__name__}: {err})")
        return check
    expected = benchmark_fingerprint() if callable(benchmark_fingerprint) else benchmark_fingerprint
    panel_settings: dict[tuple, tuple] = {}
    for key in sorted(panels):
        method, condition, block_id = key
        unlisted, bad_seed, settings, other_bench = [], [], set(), {}
        for f in panels[key]:
            k = panel_index(f)
            check.images_checked += 1
            candidates = [r for r in index.get((method, condition, block_id, k), [])
                          if r.get("path") == f.relative_to(root).as_posix()]
            row = matching_row(candidates, file_sha256(f)) if candidates else None
            if row is None:
                unlisted.append(f.name)
                continue
            if row.get("created_at") and _norm(row.get("seed")) != float(image_seed(method, block_id, condition, k)):
                bad_seed.append(f"{f.name} (seed {row.get('seed')})")
            made_for = _norm(row.get("benchmark_fingerprint"))
            if expected and made_for is not None and str(made_for) != expected:
                other_bench.setdefault(str(made_for), []).append(f.name)
            settings.add(tuple(_norm(row.get(col)) for col in SETTINGS_COLUMNS))
        where = f"panel {method}/{condition}/{block_id}"
        for fingerprint, names in sorted(other_bench.items()):
            check.problems.append(
                f"{where}: {', '.join(names)} made for another benchmark (fingerprint {fingerprint} in {MANIFEST_FILE}; "
                f"the benchmark scored has fingerprint {expected}): generate the panels for this benchmark, or "
                "evaluate against the benchmark they were made for")
        if unlisted:
            check.problems.append(f"{where}: {', '.join(unlisted)} not listed in {MANIFEST_FILE} (added or changed "
                                  "after generation)")
        if bad_seed:
            check.problems.append(f"{where}: {', '.join(bad_seed)} not made with the seed of its unit "
                                  "(docs/benchmark.md section 3, Generation)")
        if len(settings) > 1:
            first, *others = sorted(settings, key=repr)
            diffs = "; ".join(_settings_text(o, first) + " vs " + _settings_text(first, o) for o in others)
            check.problems.append(f"{where}: its images were made with different settings ({diffs})")
        elif settings:
            panel_settings[key] = next(iter(settings))
    for method in sorted({k[0] for k in panel_settings}):
        keys = [k for k in panel_settings if k[0] == method]
        counts = Counter(panel_settings[k] for k in keys)
        if len(counts) < 2:
            continue
        usual = max(counts, key=lambda s: (counts[s], -min(keys.index(k) for k in keys if panel_settings[k] == s)))
        for k in keys:
            if panel_settings[k] != usual:
                check.problems.append(
                    f"panel {'/'.join(k)}: made with {_settings_text(panel_settings[k], usual)}, while "
                    f"{counts[usual]} other panel(s) of {method} were made with {_settings_text(usual, panel_settings[k])}"
                )
    return check


__all__ = [
    "PANEL_FILE",
    "RESERVED_CONDITIONS",
    "SETTINGS_COLUMNS",
    "ManifestCheck",
    "check_generation_manifest",
    "did_you_mean",
    "duplicate_index_problems",
    "known_conditions",
    "panel_index",
]
