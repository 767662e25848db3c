"""The generation run: work units split across processes, resumable, crash safe.

A work unit is one image: (model, condition, block, k). All units are listed in a fixed order
(model, condition, block id, k); every process checks all of them against the output folder and
gets the same to-do list (the units not already done), waits for the others (so no file is
written while a process is still checking), and then process ``i`` of ``n`` takes to-do units
``i, i+n, i+2n, ...`` (``accelerate.PartialState`` says which process this is; under a plain
``python`` call it is process 0 of 1). Splitting the *remaining* work, not all of it, keeps every
process busy on a resumed run (a run first made with ``--images-per-block 4`` and resumed with
``8`` on 8 GPUs would otherwise leave 4 of them idle at the final barrier). Only the owner of a
unit writes its file; at the end the main process merges the manifest after
``wait_for_everyone``. The process group is created with a timeout that fits generation
(``dist_timeout_s``, ``--dist-timeout``, default :data:`DEFAULT_DIST_TIMEOUT_S`), never NCCL's
10-minute default, and the summary records it.

Failure in one process. A process whose generator raises tells the others at once (a flag in the
process group's store, checked after every batch: :class:`~geofidelity_bench.encoders.devices.FailureNotice`);
they stop after their current batch, and at the end every process learns the first failure
(:func:`~geofidelity_bench.encoders.devices.raise_if_any_process_failed`): the failing process
re-raises its own error, the others raise ``ProcessFailedError`` naming it. So the run ends with
that error right away, not when a barrier times out; the images written so far are whole and
recorded in the journals, and running the same command again resumes.

Reproducibility. Every image has its own seed (docs/benchmark.md section 3, :func:`image_seed`) and its own
``torch.Generator``, so the noise of an image does not depend on the batch it is in, on the
number of processes, or on whether the run was interrupted. With ``--batch-size 1`` (the
default) every image is computed alone, so the files are bit-identical whatever the number of
processes (on the same hardware and library versions). With larger batches the noise is still
the same, but GPU and CPU kernels may round differently for other batch shapes, which can change
a few pixel values by one; the ``tiny`` model runs its batches image by image to stay
bit-exact, and the manifest records the batch size of every image.

Resume. A unit is skipped when its file exists, its sha256 matches a manifest row (merged
manifest or any journal, including those of killed runs) and that row's generation settings
(seed, prompt, negative prompt, steps, guidance, dtype, size, weights) equal the current ones;
otherwise it is (re)generated. A killed run loses at most the images being computed. A folder
that holds images recorded with other settings, or panel images beyond ``images_per_block``
from an earlier run, is refused before anything is generated unless ``overwrite=True``
(``--overwrite``), which regenerates the former and deletes the latter.

Blocks without a known street or neighborhood cannot have L1, L2 or control prompts (docs/benchmark.md
section 2). By default those units are skipped and listed (``refused``) before anything is
generated; with ``strict=True`` (``--strict``) the run stops with an error instead.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from ..encoders.devices import (
    DEFAULT_DIST_TIMEOUT_S,
    FailureNotice,
    distributed_state,
    float32_settings_in_force,
    raise_if_any_process_failed,
    this_process_device,
)
from ..provenance import installed_version, utc_timestamp
from ..record_checks import reserved_method_problem
from ..prompts import CONDITIONS, PromptError, build_prompt
from .backends import ImageRequest, load_generator
from .manifest import (
    REUSE_COLUMNS,
    SUMMARY_FILE,
    ManifestJournal,
    atomic_write_bytes,
    encode_panel,
    file_sha256,
    index_rows,
    matching_row,
    merge_manifest,
    panel_relpath,
    read_all_rows,
    sweep_tmp_files,
)
from .registry import GeneratorError, GeneratorSpec, resolve_generator
from .seeds import image_seed

if TYPE_CHECKING:
    from ..benchmark import Benchmark
    from ..prompts import Prompt

#: Seconds to sleep after each image (tests and crash-safety demos only).
UNIT_DELAY_ENV = "GEOFIDELITY_BENCH_UNIT_DELAY_S"


@dataclass(frozen=True)
class WorkUnit:
    """One image to make."""

    model: str
    condition: str
    block_id: str
    k: int
    seed: int
    prompt: "Prompt" = field(compare=False, repr=False)

    @property
    def relpath(self) -> str:
        return panel_relpath(self.model, self.condition, self.block_id, self.k)


@dataclass(frozen=True)
class Refusal:
    """A (condition, block) with no possible prompt, and why."""

    condition: str
    block_id: str
    reason: str


@dataclass
class GenerationSummary:
    """What a run did. ``generated``/``skipped``/``seconds`` are totals over all processes on
    the main process (``per_process`` lists each); elsewhere they describe this process only."""

    models: list[str]
    conditions: list[str]
    blocks: list[str]
    images_per_block: int
    batch_size: int
    num_processes: int
    process_index: int
    planned: int
    generated: int
    skipped: int
    refused: list[dict[str, str]]
    seconds: float
    images_per_s: float
    per_process: list[dict[str, Any]]
    out_dir: str
    manifest_rows: int | None = None
    dist_timeout_s: float | None = None  # the process group's timeout when this run created it
    started_at: str = ""
    finished_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def library_versions() -> dict[str, str | None]:
    """The manifest's version columns."""
    from .. import __version__

    return {
        "python_version": platform.python_version(),
        "torch_version": installed_version("torch"),
        "diffusers_version": installed_version("diffusers"),
        "transformers_version": installed_version("transformers"),
        "accelerate_version": installed_version("accelerate"),
        "geofidelity_bench_version": __version__,
    }


def resolve_specs(models: Iterable[str | GeneratorSpec]) -> list[GeneratorSpec]:
    specs = [m if isinstance(m, GeneratorSpec) else resolve_generator(m) for m in models]
    seen: set[str] = set()
    for spec in specs:
        if spec.key in seen:
            raise GeneratorError(f"generator {spec.key!r} given twice")
        if reserved := reserved_method_problem(spec.key):  # it would be averaged with that anchor when scored
            raise GeneratorError(f"generator {spec.key!r}: {reserved}")
        seen.add(spec.key)
    if not specs:
        raise GeneratorError("no generator given")
    return specs


def plan_units(
    benchmark: "Benchmark",
    models: Sequence[GeneratorSpec | str],
    conditions: Sequence[str],
    *,
    block_ids: Sequence[str] | None = None,
    images_per_block: int = 4,
) -> tuple[list[WorkUnit], list[Refusal]]:
    """All work units of a run in their fixed order, and the refused (condition, block) pairs."""
    if images_per_block < 1:
        raise ValueError(f"images_per_block must be >= 1, got {images_per_block}")
    specs = resolve_specs(models)
    for cond in conditions:
        if cond not in CONDITIONS:
            raise PromptError(f"unknown prompt condition {cond!r}; expected one of {CONDITIONS}")
    ids = list(dict.fromkeys(block_ids)) if block_ids else benchmark.block_ids
    for block_id in ids:
        benchmark.block(block_id)  # unknown ids fail here, before any work
    conditions = list(dict.fromkeys(conditions))
    prompts: dict[tuple[str, str], "Prompt"] = {}
    refused: list[Refusal] = []
    for cond in conditions:
        for block_id in ids:
            try:
                prompts[(cond, block_id)] = build_prompt(benchmark, block_id, cond)
            except PromptError as err:
                refused.append(Refusal(cond, block_id, str(err)))
    units = [
        WorkUnit(spec.key, cond, block_id, k, image_seed(spec.key, block_id, cond, k), prompts[(cond, block_id)])
        for spec in specs
        for cond in conditions
        for block_id in ids
        if (cond, block_id) in prompts
        for k in range(images_per_block)
    ]
    return units, refused


def _short_reason(reason: str) -> str:
    if "donor" in reason:
        return "no donor block with a different known name"
    if " has no " in reason:
        return "street and/or neighborhood name unknown"
    return reason


def format_refusals(refused: Sequence[Refusal]) -> str:
    """The printed list of refused (condition, block) pairs, grouped by condition and reason."""
    groups: dict[tuple[str, str], list[str]] = {}
    for r in refused:
        groups.setdefault((r.condition, _short_reason(r.reason)), []).append(r.block_id)
    lines = [
        f"refused {len(refused)} (condition, block) pair(s), skipped: names are never invented "
        "(L0 and GPS_ONLY work for every block):"
    ]
    lines += [f"  {cond}: {', '.join(ids)} ({why})" for (cond, why), ids in groups.items()]
    return "\n".join(lines)


def _expected_row(spec: GeneratorSpec, unit: WorkUnit, dtype: str) -> dict[str, Any]:
    negative = unit.prompt.negative_prompt if spec.negative_prompt else None
    return {
        "model": unit.model,
        "block_id": unit.block_id,
        "condition": unit.condition,
        "k": unit.k,
        "seed": unit.seed,
        "prompt": unit.prompt.text,
        "negative_prompt": negative,
        "steps": int(spec.steps),
        "guidance": float(spec.guidance),
        "dtype": dtype,
        "height": int(spec.height),
        "width": int(spec.width),
        "weights": spec.source,
        "weights_revision": spec.revision,
        "pipeline": spec.pipeline_class or ("DiffusionPipeline" if spec.kind == "diffusers" else spec.kind),
        "call_kwargs": json.dumps(dict(spec.call_kwargs), sort_keys=True),
        "street_donor": unit.prompt.street_donor,
        "neighborhood_donor": unit.prompt.neighborhood_donor,
        "path": unit.relpath,
    }


def _same_settings(row: dict[str, Any], expected: dict[str, Any]) -> bool:
    for col in REUSE_COLUMNS:
        a, b = row.get(col), expected.get(col)
        if col == "guidance" and a is not None and b is not None:
            if float(a) != float(b):
                return False
        elif col in ("seed", "steps", "height", "width") and a is not None and b is not None:
            if int(a) != int(b):
                return False
        elif (a if a not in ("",) else None) != (b if b not in ("",) else None):
            return False
    return True


class GenerationFolderError(GeneratorError):
    """The output folder holds images of a run with other settings, or more images per panel than asked for."""


def settings_conflicts(out: Path, units: Sequence[WorkUnit], known: dict, specs: dict[str, GeneratorSpec]):
    """``(unit, differing columns)`` for every planned image whose file on disk is recorded (same sha256) with
    other generation settings than this run's (:data:`REUSE_COLUMNS`). Files are hashed only where a recorded
    row differs, so an unchanged re-run reads no image."""
    conflicts = []
    for unit in units:
        candidates = known.get((unit.model, unit.condition, unit.block_id, unit.k))
        if not candidates:
            continue  # no row: a new image, or one whose row a killed run never wrote (regenerated identically)
        spec = specs[unit.model]
        expected = _expected_row(spec, unit, spec.dtype)
        if all(_same_settings(r, expected) for r in candidates):
            continue
        row = matching_row(candidates, file_sha256(out / unit.relpath))
        if row is not None and not _same_settings(row, expected):
            conflicts.append((unit, [c for c in REUSE_COLUMNS if not _same_settings({**expected, c: row.get(c)}, expected)]))
    return conflicts


def stale_files(out: Path, units: Sequence[WorkUnit], images_per_block: int) -> list[Path]:
    """Panel images with an index ``k >= images_per_block`` in the panel folders of this run (an earlier run
    made more images per block; ``evaluate`` would score them with the new ones)."""
    from ..generated_folder import PANEL_FILE

    folders = sorted({out / Path(u.relpath).parent for u in units})
    return [f for folder in folders if folder.is_dir() for f in sorted(folder.iterdir())
            if (m := PANEL_FILE.match(f.name)) and int(m.group(1)) >= images_per_block]


def format_folder_conflicts(out: Path, conflicts, stale: Sequence[Path], shown: int = 10) -> str:
    lines = [f"{out} holds images of an earlier generation run that this run would not reproduce:"]
    if conflicts:
        lines.append(f"  {len(conflicts)} image(s) were made with other settings, e.g.:")
        lines += [f"    {u.relpath} (differs in {', '.join(cols)})" for u, cols in conflicts[:shown]]
    if stale:
        lines.append(f"  {len(stale)} image(s) are beyond --images-per-block and would be scored with the new ones:")
        lines += [f"    {f.relative_to(out).as_posix()}" for f in stale[:shown]]
    lines.append("Pass --overwrite (overwrite=True) to regenerate those images and delete the extra ones, or use another "
                 "--out folder, or re-run with the earlier settings.")
    return "\n".join(lines)


def remaining_units(
    units: Sequence[WorkUnit], specs: dict[str, GeneratorSpec], out: Path
) -> tuple[list[WorkUnit], list[WorkUnit]]:
    """(to do, already done) in the fixed unit order: a unit is done when its file matches a
    manifest row with the current settings. Every process computes the same lists."""
    known = index_rows(read_all_rows(out))
    todo: list[WorkUnit] = []
    done: list[WorkUnit] = []
    for unit in units:
        spec = specs[unit.model]
        row = matching_row(known.get((unit.model, unit.condition, unit.block_id, unit.k), []),
                           file_sha256(out / unit.relpath))
        ok = row is not None and _same_settings(row, _expected_row(spec, unit, spec.dtype))
        (done if ok else todo).append(unit)
    return todo, done


def _device_label(device: Any) -> str:
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return device.type


def _utcnow() -> str:
    return utc_timestamp("microseconds")


def default_state(timeout_s: float = DEFAULT_DIST_TIMEOUT_S):
    """``accelerate.PartialState`` of this process (CPU backend when no GPU is visible), its process
    group created with a ``timeout_s`` timeout (an existing state is returned unchanged)."""
    return distributed_state(timeout_s)


def run_generation(
    benchmark: "Benchmark",
    models: Sequence[str | GeneratorSpec],
    conditions: Sequence[str],
    out_dir: str | os.PathLike,
    *,
    images_per_block: int = 4,
    block_ids: Sequence[str] | None = None,
    batch_size: int = 1,
    cpu_offload: bool | None = None,
    dtype: str | None = None,
    strict: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    state: Any = None,
    log: Callable[[str], None] | None = None,
    unit_delay_s: float | None = None,
    dist_timeout_s: float = DEFAULT_DIST_TIMEOUT_S,
    device: Any = None,
) -> GenerationSummary:
    """Generates the panels of ``models`` x ``conditions`` x blocks into ``out_dir``.

    Call it in every process of an ``accelerate launch``/``torchrun`` job (or once, in a plain
    process); see the module docstring for splitting, seeds, resume and refusals.

    Args:
        benchmark: the blocks to draw.
        models: registered keys, command-line forms (see ``resolve_generator``) or specs.
        conditions: prompt conditions (``L0``, ``L1``, ``L2``, ``GPS_ONLY``, controls).
        out_dir: the output folder (``{model}/{condition}/{block_id}/{k:02d}.jpg``).
        images_per_block: images per (model, condition, block), k = 0..n-1.
        block_ids: a subset of blocks (default: all).
        batch_size: prompts per pipeline call.
        cpu_offload: force model CPU offload on (True) or off (False); default per model.
        dtype: override every model's dtype (``fp16``, ``bf16``, ``fp32``).
        strict: raise ``PromptError`` instead of skipping blocks without names.
        overwrite: regenerate images that ``out_dir`` holds from a run with other settings, and delete
            panel images beyond ``images_per_block`` left by an earlier run; without it either one is a
            :class:`GenerationFolderError` naming them, before anything is generated.
        progress: show a tqdm bar per process.
        state: an ``accelerate.PartialState`` (default: one for this process).
        dist_timeout_s: timeout of the process group when ``state`` is created here (seconds).
        device: where the models run (``cpu``, ``cuda``, ``cuda:1``; a bare ``cuda`` under a launcher is
            this process's GPU); default: the device ``state`` gives this process (its GPU, or the CPU
            when none is visible or under ``accelerate launch --cpu``).
        log: where messages go (default: print to stdout, refusals to stderr).
        unit_delay_s: sleep after each image (tests); default from ``GEOFIDELITY_BENCH_UNIT_DELAY_S``.

    Returns:
        A :class:`GenerationSummary` (totals on the main process).

    Raises:
        ProcessFailedError: another process of the launch failed (this one stopped after its batch).

    Example:
        >>> from geofidelity_bench import load_benchmark
        >>> import tempfile
        >>> bench = load_benchmark("demo")
        >>> with tempfile.TemporaryDirectory() as out:  # doctest: +SKIP
        ...     s = run_generation(bench, ["tiny"], ["L0"], out, images_per_block=1, progress=False)
        >>> s.generated  # doctest: +SKIP
        7
    """
    started = _utcnow()
    say = log or (lambda msg: print(msg, flush=True))
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    specs = resolve_specs(models)
    if dtype is not None:
        specs = [s.replace(dtype=dtype) for s in specs]
    by_key = {s.key: s for s in specs}
    units, refused = plan_units(
        benchmark, specs, conditions, block_ids=block_ids, images_per_block=images_per_block
    )
    if refused and strict:
        raise PromptError(format_refusals(refused))
    if dist_timeout_s <= 0:
        raise ValueError(f"dist_timeout_s must be > 0, got {dist_timeout_s}")
    chosen_device = this_process_device(device) if device is not None else None  # a bad one fails here
    made_state = state is None
    state = state if state is not None else default_state(dist_timeout_s)
    rank, world = int(state.process_index), int(state.num_processes)
    is_main = bool(state.is_main_process)
    if refused and is_main:
        (log or (lambda msg: print(msg, file=sys.stderr, flush=True)))(format_refusals(refused))
    delay = unit_delay_s if unit_delay_s is not None else float(os.environ.get(UNIT_DELAY_ENV, "0") or 0)

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    known = index_rows(read_all_rows(out))
    conflicts = settings_conflicts(out, units, known, by_key)
    stale = stale_files(out, units, images_per_block)
    if (conflicts or stale) and not overwrite:
        raise GenerationFolderError(format_folder_conflicts(out, conflicts, stale))
    if stale and is_main:
        for path in stale:
            path.unlink(missing_ok=True)
        say(f"--overwrite: removed {len(stale)} image(s) with k >= {images_per_block} left by an earlier run")
    remaining, done = remaining_units(units, by_key, out)
    notice = FailureNotice(state)  # before the barrier: the main process clears an earlier run's flag
    if world > 1:
        state.wait_for_everyone()  # every process has its to-do list before any file changes
    todo = remaining[rank::world]
    skipped = len(done[rank::world])  # the already-done units, shared out for the counts only

    versions = library_versions()
    device = chosen_device if chosen_device is not None else state.device
    device_label = _device_label(device)
    fingerprint = benchmark.fingerprint
    generated = 0
    failure: Exception | None = None  # this process's error, shared with the others below
    stopped_early = False  # another process failed: this one stopped after its batch
    t_start = time.perf_counter()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(
            total=len(todo) + skipped,
            initial=skipped,
            position=rank,
            desc=f"[{rank}/{world}] generate",
            unit="img",
            dynamic_ncols=True,
            mininterval=0.5,
            file=sys.stderr,
        )
    try:
        with ManifestJournal(out) as journal:
            for spec in specs:
                model_units = [u for u in todo if u.model == spec.key]
                if not model_units or stopped_early:
                    continue
                if bar is not None:
                    bar.set_description(f"[{rank}/{world}] {spec.key}")
                gen = load_generator(spec, device=device, cpu_offload=cpu_offload, benchmark=benchmark,
                                     batch_size=batch_size)
                try:
                    for i in range(0, len(model_units), batch_size):
                        if notice.is_raised():
                            stopped_early = True
                            break
                        batch = model_units[i : i + batch_size]
                        requests = [
                            ImageRequest(
                                model=u.model,
                                block_id=u.block_id,
                                condition=u.condition,
                                k=u.k,
                                seed=u.seed,
                                prompt=u.prompt.text,
                                negative_prompt=u.prompt.negative_prompt if spec.negative_prompt else None,
                                block=benchmark.block(u.block_id),
                                prompt_info=u.prompt,
                            )
                            for u in batch
                        ]
                        t0 = time.perf_counter()
                        precision = json.dumps(float32_settings_in_force(device), sort_keys=True)
                        images = gen.generate(requests)
                        share = (time.perf_counter() - t0) / len(batch)
                        for unit, image in zip(batch, images):
                            t1 = time.perf_counter()
                            data = encode_panel(image)
                            atomic_write_bytes(out / unit.relpath, data)
                            row = _expected_row(spec, unit, gen.dtype)
                            row.update(
                                sha256=_sha256(data),
                                file_size=len(data),
                                duration_s=round(share + time.perf_counter() - t1, 6),
                                created_at=_utcnow(),
                                batch_size=batch_size,
                                process_index=rank,
                                num_processes=world,
                                device=device_label,
                                float32_precision=precision,
                                benchmark=benchmark.name,
                                benchmark_fingerprint=fingerprint,
                                **versions,
                            )
                            journal.append(row)
                            generated += 1
                            if bar is not None:
                                bar.update(1)
                            if delay:
                                time.sleep(delay)
                finally:
                    gen.close()
    except Exception as err:  # noqa: BLE001 - alone: raised as it is; launched: shared with every process below
        if world == 1:
            raise
        failure = err
        notice.raise_flag(f"process {rank}: {type(err).__name__}: {err}")
    finally:
        if bar is not None:
            bar.close()
    kept = ("the images written so far are whole and recorded; run the same command again to resume "
            "(already-done images are skipped)")
    raise_if_any_process_failed(state, failure, stopped=f"process {rank} stopped too; {kept}")
    seconds = time.perf_counter() - t_start
    mine_stats = {
        "process_index": rank,
        "device": device_label,
        "planned": len(todo) + skipped,
        "generated": generated,
        "skipped": skipped,
        "seconds": round(seconds, 3),
        "images_per_s": round(generated / seconds, 4) if seconds > 0 and generated else 0.0,
    }
    say(
        f"[rank {rank}/{world}] {device_label}: generated {generated}, skipped {skipped} (already done) "
        f"of {len(todo) + skipped} in {seconds:.1f} s ({mine_stats['images_per_s']:.3f} images/s)"
    )
    per_process = [mine_stats]
    if world > 1:
        from accelerate.utils import gather_object

        per_process = sorted(gather_object([mine_stats]), key=lambda s: s["process_index"])
    summary = GenerationSummary(
        models=[s.key for s in specs],
        conditions=list(dict.fromkeys(conditions)),
        blocks=list(dict.fromkeys(block_ids)) if block_ids else benchmark.block_ids,
        images_per_block=images_per_block,
        batch_size=batch_size,
        num_processes=world,
        process_index=rank,
        planned=len(units) if is_main else len(todo) + skipped,
        generated=generated,
        skipped=skipped,
        refused=[asdict(r) for r in refused],
        seconds=round(seconds, 3),
        images_per_s=mine_stats["images_per_s"],
        per_process=per_process,
        out_dir=str(out),
        dist_timeout_s=float(dist_timeout_s) if made_state else None,
        started_at=started,
    )
    merge_failure: Exception | None = None
    if is_main:
        try:
            _finish_on_main(summary, per_process, out, units, refused, world, say)
        except Exception as err:  # noqa: BLE001 - alone: raised as it is; launched: shared below
            if world == 1:
                raise
            merge_failure = err
    if world > 1:  # the others learn at once when the main process could not merge
        raise_if_any_process_failed(state, merge_failure, stopped=f"process {rank} generated its images; {kept}")
    return summary


def _finish_on_main(summary: GenerationSummary, per_process: list[dict], out: Path, units, refused, world: int,
                    say: Callable[[str], None]) -> None:
    """The main process's totals, manifest merge, summary file and summary line."""
    total = sum(p["generated"] for p in per_process)
    wall = max(p["seconds"] for p in per_process)
    summary.generated = total
    summary.skipped = sum(p["skipped"] for p in per_process)
    summary.seconds = wall
    summary.images_per_s = round(total / wall, 4) if wall > 0 and total else 0.0
    sweep_tmp_files(out, {str(Path(u.relpath).parent) for u in units})
    report = merge_manifest(out)
    summary.manifest_rows = report.rows
    summary.finished_at = _utcnow()
    atomic_write_bytes(out / SUMMARY_FILE, json.dumps(summary.to_dict(), indent=2).encode("utf-8"))
    dropped = report.dropped_missing + report.dropped_changed
    say(
        f"generation summary: {total} image(s) generated, {summary.skipped} already done, "
        f"{len(refused)} (condition, block) pair(s) refused, {world} process(es), {wall:.1f} s, "
        f"{summary.images_per_s:.3f} images/s; manifest {report.path} has {report.rows} row(s)"
        + (f" ({dropped} stale row(s) dropped: file missing or changed)" if dropped else "")
    )


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()
