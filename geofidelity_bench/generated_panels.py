"""Reading and checking a generated folder and panel keys before any model work (docs/benchmark.md
section 11, File formats): :func:`read_generated_folder` (the layout, names, the generation
manifest; every problem in one :class:`EvaluationError`), :func:`load_generated_panels` (also the
images decoded and the prompts checked), :func:`check_panel_keys`, and the panels whose prompt the
benchmark refuses (:func:`unpromptable_panels`). The naming convention's small checks are
:mod:`geofidelity_bench.generated_folder`'s; :mod:`geofidelity_bench.evaluation` re-exports every
name here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence


from .benchmark import MAX_PROBLEMS_LISTED, Benchmark, is_safe_id
from .errors import GeoFidelityError
from .generated_folder import (
    PANEL_FILE,
    check_generation_manifest,
    did_you_mean,
    duplicate_index_problems,
    known_conditions,
    unknown_block_problem,
    unknown_condition_problem,
)
from .record_checks import reserved_method_problem

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")

PanelKey = tuple  # (method, condition, block_id)


class EvaluationError(GeoFidelityError, ValueError):
    """Bad panels or generated folders; the message names every offending item."""


# -- generated folders -----------------------------------------------------------------------------


def problems_text(head: str, problems: Sequence[str], hints: Sequence[str] = ()) -> str:
    """``head`` with the number of problems, the first :data:`MAX_PROBLEMS_LISTED` of them, how many
    more there are, and the hints (what to do) after them."""
    shown = "\n  ".join(problems[:MAX_PROBLEMS_LISTED])
    more = (f"\n  ... and {len(problems) - MAX_PROBLEMS_LISTED} more" if len(problems) > MAX_PROBLEMS_LISTED
            else "")
    tail = "".join(f"\n{h}" for h in dict.fromkeys(hints))
    return f"{head} has {len(problems)} problem(s):\n  {shown}{more}{tail}"


_MANIFEST_HINT = ("(to score these panels anyway, pass --ignore-manifest, ignore_manifest=True in Python; run.json "
                  "records it)")


def _scan_generated_folder(
    root: Path,
    benchmark: Benchmark,
    *,
    methods: Iterable[str] | None,
    conditions: Iterable[str] | None,
    min_images: int,
    extra_conditions: Iterable[str] | None,
    ignore_manifest: bool,
) -> tuple[dict[PanelKey, list[Path]], list[str], list[str]]:
    """The panels of ``root`` that passed every layout check, every layout and manifest problem, and hints."""
    if not root.is_dir():
        raise EvaluationError(f"generated folder {str(root)!r} does not exist or is not a folder")
    try:
        known = known_conditions(extra_conditions)
    except ValueError as err:
        raise EvaluationError(str(err)) from None
    want_m = list(methods) if methods else None
    want_c = list(conditions) if conditions else None
    problems: list[str] = []
    hints: list[str] = []
    panels: dict[PanelKey, list[Path]] = {}
    method_dirs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    found_m = {p.name for p in method_dirs}
    for m in want_m or []:
        if m not in found_m:
            problems.append(f"requested method {m!r} has no folder in {root}{did_you_mean(m, found_m)}")
    found_c: set[str] = set()
    for mdir in method_dirs:
        if want_m and mdir.name not in want_m:
            continue
        if not is_safe_id(mdir.name):
            problems.append(f"{mdir}: unsafe method folder name {mdir.name!r}")
            continue
        reserved = reserved_method_problem(mdir.name)
        if reserved:
            problems.append(f"{mdir}: {reserved}")
            continue
        for cdir in sorted(p for p in mdir.iterdir() if not p.name.startswith(".")):
            if not cdir.is_dir():
                problems.append(f"{cdir}: unexpected file where a condition folder was expected")
                continue
            if want_c and cdir.name not in want_c:
                continue
            found_c.add(cdir.name)
            if not is_safe_id(cdir.name):
                problems.append(f"{cdir}: unsafe condition folder name {cdir.name!r}")
                continue
            if cdir.name not in known:
                problems.append(unknown_condition_problem(cdir, known))
                continue
            for bdir in sorted(p for p in cdir.iterdir() if not p.name.startswith(".")):
                if not bdir.is_dir():
                    problems.append(f"{bdir}: unexpected file where a block folder was expected")
                    continue
                if bdir.name not in benchmark:
                    problems.append(unknown_block_problem(bdir, benchmark.block_ids, benchmark.name))
                    continue
                files = []
                for f in sorted(bdir.iterdir()):
                    if f.name.startswith("."):
                        continue
                    if not f.is_file() or not PANEL_FILE.match(f.name):
                        shown = f if f.name.isprintable() else f"{bdir}/{f.name!r}"
                        problems.append(f"{shown}: not a panel image (expected NN.jpg/.png/.webp, NN two or more "
                                        "ASCII digits)")
                        continue
                    files.append(f)
                duplicates = duplicate_index_problems(bdir, files)
                problems += duplicates
                if not files:
                    problems.append(f"{bdir}: empty panel (no images)")
                elif len(files) < min_images:
                    problems.append(f"{bdir}: {len(files)} image(s); a panel needs at least {min_images}")
                elif not duplicates:
                    panels[(mdir.name, cdir.name, bdir.name)] = files
    for c in want_c or []:
        if c not in found_c:
            problems.append(f"requested condition {c!r} has no folder under any method in {root}")
    if not ignore_manifest:  # the panels that passed the layout checks, whatever else is wrong
        manifest = check_generation_manifest(root, panels, benchmark_fingerprint=lambda: benchmark.fingerprint)
        problems += manifest.problems
        if manifest.problems:
            hints.append(_MANIFEST_HINT)
    return panels, problems, hints


def read_generated_folder(
    root: str | os.PathLike,
    benchmark: Benchmark,
    *,
    methods: Iterable[str] | None = None,
    conditions: Iterable[str] | None = None,
    min_images: int = 2,
    extra_conditions: Iterable[str] | None = None,
    ignore_manifest: bool = False,
) -> dict[PanelKey, list[Path]]:
    """Reads ``{method}/{condition}/{block_id}/{k:02d}.jpg`` panels under ``root``.

    Every problem (unknown block ids and conditions, with a did-you-mean; unsafe or reserved
    method names (:data:`~geofidelity_bench.record_checks.RESERVED_METHODS`: the anchors' and
    sanity methods' names); empty panels; files that are not panel images; two files with one
    index; panels with fewer than ``min_images``; with a generation ``manifest.parquet``, images it
    does not list, made with other settings or for another benchmark, see
    :func:`geofidelity_bench.generated_folder.check_generation_manifest`) is collected and
    reported in one EvaluationError (the first 50 and a count); nothing is skipped silently.
    ``methods``/``conditions`` restrict what is read (a requested one that is missing is an error
    too). Condition folders must be prompt conditions of the benchmark or declared in
    ``extra_conditions`` (the report shows those in a section of their own).
    ``ignore_manifest=True`` skips the manifest check (the caller records that).
    :func:`load_generated_panels` also decodes the images and checks the prompts, in the same error.
    """
    root = Path(root)
    panels, problems, hints = _scan_generated_folder(root, benchmark, methods=methods, conditions=conditions,
                                                     min_images=min_images, extra_conditions=extra_conditions,
                                                     ignore_manifest=ignore_manifest)
    if problems:
        raise EvaluationError(problems_text(f"generated folder {root}", problems, hints))
    if not panels:
        raise EvaluationError(f"generated folder {root} contains no panels ({{method}}/{{condition}}/{{block_id}}/NN.jpg)")
    return panels


@dataclass
class GeneratedPanels:
    """A generated folder that passed every cheap check (:func:`load_generated_panels`).

    ``panels``: the panels as read (paths); ``image_check``: their decoding check (with
    ``skip_bad_images``, the panels to score without their bad images);
    ``unpromptable``: the :func:`unpromptable_panels` records (only when they were allowed).
    """

    panels: dict
    image_check: Any
    unpromptable: list


def load_generated_panels(
    root: str | os.PathLike,
    benchmark: Benchmark,
    *,
    methods: Iterable[str] | None = None,
    conditions: Iterable[str] | None = None,
    extra_conditions: Iterable[str] | None = None,
    ignore_manifest: bool = False,
    skip_bad_images: bool = False,
    allow_unpromptable: bool = False,
    progress: bool = False,
) -> GeneratedPanels:
    """Every cheap check of a generated folder before any model is loaded, all problems in one error.

    What :func:`read_generated_folder` checks (layout, names, manifest), plus: every image file
    decodes (:func:`~geofidelity_bench.panel_images.check_panel_images`; with
    ``skip_bad_images``, bad ones are left out and recorded instead) and every panel of a prompt
    condition has a prompt (:func:`unpromptable_panels`, unless ``allow_unpromptable``). The images
    and prompts of the panels that passed the layout checks are checked even when other panels
    did not, so one run names every problem of every kind (the first 50 and a count).

    Raises:
        EvaluationError: any problem of the folder (listing them all).
        BadImagesError: undecodable images and no other problem (as :func:`check_panel_images`).
    """
    from .panel_images import SKIP_HINT, BadImagesError, bad_images_message, check_panel_images

    root = Path(root)
    panels, problems, hints = _scan_generated_folder(root, benchmark, methods=methods, conditions=conditions,
                                                     min_images=2, extra_conditions=extra_conditions,
                                                     ignore_manifest=ignore_manifest)
    unpromptable = unpromptable_panels(benchmark, panels)
    if unpromptable and not allow_unpromptable:
        lines = unpromptable_message(unpromptable).splitlines()  # a head, one line per panel, what to do
        problems += [f"no prompt could have produced panel {line.strip()}" for line in lines[1:-1]]
        hints.append(lines[-1])
    check = check_panel_images(panels, skip_bad_images=True, progress=progress)
    if check.skipped and not skip_bad_images:
        if not problems:
            raise BadImagesError(bad_images_message(check.skipped))
        problems += [r["reason"] for r in check.skipped]
        hints.append(f"Fix or remove the undecodable images, or {SKIP_HINT}.")
    if problems:
        raise EvaluationError(problems_text(f"generated folder {root}", problems, hints))
    if not panels:
        raise EvaluationError(f"generated folder {root} contains no panels ({{method}}/{{condition}}/{{block_id}}/NN.jpg)")
    return GeneratedPanels(panels, check, unpromptable)


# -- panel keys -----------------------------------------------------------------------------------


def check_panel_keys(benchmark: Benchmark, keys: Iterable[Any]) -> None:
    """Refuses panel keys that are not ``(method, condition, block_id)`` tuples of safe ids, and
    reserved method names under another condition than their own
    (:func:`~geofidelity_bench.record_checks.reserved_method_problem`).

    Names are single path components (letters, digits, ``.``, ``_``, ``-``; first a letter or
    digit; at most 128 characters), as in a generated folder, so no two keys can name the same
    panel however a front end joins them (``('m/x', 'L1', b)`` and ``('m', 'x/L1', b)`` would).
    Every bad name is listed in one EvaluationError.
    """
    problems = []
    for key in keys:
        if not (isinstance(key, tuple) and len(key) == 3):
            raise EvaluationError(f"panel key {key!r} must be a (method, condition, block_id) tuple")
        for part, value in zip(("method", "condition", "block_id"), key):
            if not is_safe_id(value):
                problems.append(f"panel {key!r}: {part} {value!r} is not a safe id")
        if is_safe_id(key[2]) and key[2] not in benchmark:
            problems.append(f"panel {key}: unknown block id {key[2]!r} (not in benchmark {benchmark.name!r})")
        reserved = reserved_method_problem(key[0], key[1]) if is_safe_id(key[0]) else None
        if reserved:
            problems.append(f"panel {key}: {reserved}")
    if problems:
        raise EvaluationError(
            f"{len(problems)} bad panel key(s):\n  " + "\n  ".join(problems[:MAX_PROBLEMS_LISTED])
            + (f"\n  ... and {len(problems) - MAX_PROBLEMS_LISTED} more" if len(problems) > MAX_PROBLEMS_LISTED else "")
            + f"\nmethod, condition and block_id must be safe ids: {SAFE_ID_RULE}"
        )


#: The rule of :func:`~geofidelity_bench.benchmark.is_safe_id`, in words.
SAFE_ID_RULE = ("1-128 characters from letters, digits, '.', '_' and '-', the first a letter or digit "
                "(one folder name: no '/', spaces or control characters)")


def unpromptable_panels(benchmark: Benchmark, keys: Iterable[PanelKey]) -> list[dict[str, Any]]:
    """The (condition, block) pairs of ``keys`` whose prompt the benchmark refuses, and why.

    Only prompt conditions of the benchmark (docs/benchmark.md section 2, Prompts) are checked:
    anchors, sanity methods and declared extra conditions have no benchmark prompt to check.
    E.g. ``L1`` needs the block's street and neighborhood names, which the benchmark may not
    know; no prompt could then have produced the panel. One record per (condition, block):
    ``condition``, ``block_id``, ``methods`` (sorted) and ``reason`` (the PromptError's message).
    """
    from .prompts import CONDITIONS, PromptError, build_prompt

    methods: dict[tuple[str, str], set[str]] = {}
    for method, condition, bid in keys:
        if condition in CONDITIONS and bid in benchmark:
            methods.setdefault((condition, bid), set()).add(method)
    out = []
    for condition, bid in sorted(methods):
        try:
            build_prompt(benchmark, bid, condition)
        except PromptError as err:
            out.append({"condition": condition, "block_id": bid, "methods": sorted(methods[(condition, bid)]),
                        "reason": str(err)})
    return out


def unpromptable_message(records: Sequence[Mapping[str, Any]]) -> str:
    """The error (or warning) text naming every refused (condition, block) and why."""
    lines = [f"{len(records)} (condition, block) panel(s) that no prompt of the benchmark could have produced:"]
    lines += [f"  {r['condition']}/{r['block_id']} (method {', '.join(r['methods'])}): {r['reason']}"
              for r in records]
    lines.append("Score only panels that have a prompt (`geofidelity-bench prompts` lists them; `generate` skips the "
                 "others), or pass --allow-unpromptable (allow_unpromptable=True in Python) to score them anyway "
                 "(run.json records it)")
    return "\n".join(lines)
