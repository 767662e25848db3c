"""``geofidelity-bench generate`` and ``geofidelity-bench push-generations``.

``generate`` runs unchanged in one process or in every process of a multi-GPU job::

    geofidelity-bench generate --model sdxl --conditions L0 L1 L2 --out gen
    accelerate launch --multi_gpu --num_processes 4 -m geofidelity_bench.cli generate \\
        --model sdxl --conditions L0 L1 L2 --out gen
    torchrun --nproc_per_node 4 -m geofidelity_bench.cli generate --model sdxl --out gen
    geofidelity-bench generate --model tiny --conditions L0 GPS_ONLY --out gen_tiny   # CPU smoke run
"""

from __future__ import annotations

import argparse
import os

from ..prompts import CONDITIONS, CONTROL_CONDITIONS
from ._common import hub_repo_id

#: The six conditions of the paper's main grid (GPS_ONLY is opt-in).
PAPER_CONDITIONS = ("L0", "L1", "L2", *CONTROL_CONDITIONS)


def _cli_error():
    from ._common import CLIError

    return CLIError


def _add_benchmark_args(p: argparse.ArgumentParser) -> None:
    from ._common import BENCHMARK_HELP

    p.add_argument("--benchmark", default="demo", help=BENCHMARK_HELP + " (default: demo)")
    p.add_argument("--revision", default=None, help="Hub revision of the benchmark dataset (default: main)")


def _models_table() -> str:
    """The registered generators, one row each; every column as wide as its longest entry (nothing cut)."""
    from ..generation.registry import REGISTRY

    header = ("key", "weights", "steps", "guid.", "dtype", "offload", "GPU memory")
    rows = [header]
    for key in REGISTRY.keys():
        s = REGISTRY.get(key)
        rows.append((key, s.source, str(s.steps), f"{s.guidance:.1f}", s.dtype, "yes" if s.cpu_offload else "no",
                     str(s.vram)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    right = {2, 3}  # numbers are right-aligned
    return "\n".join(
        " ".join(cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(r, widths))).rstrip()
        for r in rows
    )


def _cmd_generate(args: argparse.Namespace) -> int:
    from ..benchmark import load_benchmark
    from ..generation.registry import GeneratorError, load_plugin, resolve_generator
    from ..generation.runner import run_generation
    from ..record_checks import reserved_method_problem

    CLIError = _cli_error()
    if args.list_models:
        for plugin in args.plugin or []:
            load_plugin(plugin)
        print(_models_table())
        return 0
    if not args.model:
        raise CLIError("--model is required (see --list-models)")
    if not args.out:
        raise CLIError("--out is required")
    from ._common import check_out_folder

    check_out_folder(args.out)
    try:
        for plugin in args.plugin or []:
            load_plugin(plugin)
        specs = [resolve_generator(m) for m in args.model]
        changes = {}
        if args.steps is not None:
            changes["steps"] = args.steps
        if args.guidance is not None:
            changes["guidance"] = args.guidance
        if args.resolution is not None:
            changes.update(height=args.resolution, width=args.resolution)
        if changes:
            specs = [s.replace(**changes) for s in specs]
    except GeneratorError as err:
        raise CLIError(str(err)) from None
    for spec in specs:  # a generator named like an anchor would be averaged with it
        if reserved := reserved_method_problem(spec.key):
            raise CLIError(f"--model {spec.key}: {reserved}")
    if args.images_per_block < 1:
        raise CLIError("--images-per-block must be >= 1")
    if args.dist_timeout is not None and not 0 < args.dist_timeout < float("inf"):
        raise CLIError(f"--dist-timeout must be a finite number of seconds > 0, got {args.dist_timeout}")
    if args.device is not None or args.cpu_offload:  # a device this process cannot use fails before the benchmark loads
        from ..encoders.devices import this_process_device

        device = this_process_device(args.device)
        if args.cpu_offload:  # an offload that cannot be honoured is refused now, not ignored or met after other models
            from ..generation.backends import cpu_offload_refusal

            for spec in specs:
                if refusal := cpu_offload_refusal(spec, device, True):
                    raise CLIError(refusal)
    bench = load_benchmark(args.benchmark, revision=args.revision)
    try:
        summary = run_generation(
            bench,
            specs,
            args.conditions,
            args.out,
            images_per_block=args.images_per_block,
            block_ids=args.blocks,
            batch_size=args.batch_size,
            cpu_offload=args.cpu_offload,
            dtype=args.dtype,
            strict=args.strict,
            overwrite=args.overwrite,
            progress=not args.no_progress,
            device=args.device,
            **({"dist_timeout_s": args.dist_timeout} if args.dist_timeout is not None else {}),
        )
    except GeneratorError as err:
        _close_process_group()
        raise CLIError(str(err)) from None
    except OSError as err:
        _close_process_group()
        from ..atomic import is_no_space, write_error_text

        if not is_no_space(err):
            raise
        raise CLIError(f"cannot write to {args.out}: {write_error_text(err)}; every image written so far is whole "
                       "and kept: free space and run the same command again to resume") from None
    except BaseException:
        # after the failure collective a failing process re-raises its own error and the others
        # ProcessFailedError: each leaves through a clean shutdown, since a process that exits holding
        # the group can be aborted by gloo at interpreter exit (SIGABRT instead of exit status 2)
        _close_process_group()
        raise
    is_main = summary.process_index == 0
    if args.push_to_hub and is_main:
        _push(args.out, args.push_to_hub, [s.key for s in specs], args)
    _close_process_group()
    return 0


def _close_process_group() -> None:
    """Leaves a ``torchrun``/``accelerate launch`` job cleanly (no-op in a plain process)."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - shutting down must not turn success into failure
        pass


def _push(out_dir: str, repo_id: str, models, args: argparse.Namespace) -> None:
    from ..hub import HubPushError, push_generations
    from ._common import hub_retry_kwargs

    try:
        push_generations(
            out_dir,
            repo_id,
            models=models,
            endpoint=args.endpoint,
            private=True if args.private else None,
            max_shard_rows=args.max_shard_rows,
            **hub_retry_kwargs(args),
        )
    except HubPushError as err:
        raise _cli_error()(str(err)) from None


def _cmd_push(args: argparse.Namespace) -> int:
    CLIError = _cli_error()
    if not os.path.isdir(args.dir):
        raise CLIError(f"{args.dir} is not a folder")
    _push(args.dir, args.repo_id, args.models, args)
    return 0


def _add_hub_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--private", action="store_true", help="create the dataset repo as private (if it does not exist)")
    p.add_argument(
        "--endpoint",
        default=None,
        help="Hub URL (default: $HF_ENDPOINT or https://huggingface.co); the token comes from HF_TOKEN or `hf auth login`",
    )
    p.add_argument("--max-shard-rows", type=int, default=500, help="images per Parquet shard (default: 500)")
    from ._common import add_hub_retry_args

    add_hub_retry_args(p)


def register(sub) -> None:
    """Adds the ``generate`` and ``push-generations`` subcommands."""
    p = sub.add_parser(
        "generate",
        help="generate panels with a text-to-image model (runs under accelerate launch / torchrun too)",
        description=(
            "Generate the panels of a benchmark: {model}/{condition}/{block_id}/{k:02d}.jpg (512x512, JPEG 95) and "
            "manifest.parquet in --out. Resumable: re-running skips images already done (a folder made with other "
            "settings is refused unless --overwrite). Blocks without a known "
            "street/neighborhood are listed and skipped for L1/L2/control conditions (--strict makes that an error). "
            "Multi-GPU: accelerate launch --multi_gpu --num_processes N -m geofidelity_bench.cli generate ..."
        ),
    )
    p.add_argument("--model", nargs="+", metavar="KEY", help="registered key (see --list-models), ORG/REPO, "
                   "NAME=diffusers:REPO_OR_FOLDER, NAME=module:callable or NAME=file.py:callable")
    p.add_argument("--conditions", nargs="+", default=list(PAPER_CONDITIONS), choices=CONDITIONS, metavar="COND",
                   help=f"prompt conditions (default: {' '.join(PAPER_CONDITIONS)}; also GPS_ONLY)")
    _add_benchmark_args(p)
    p.add_argument("--out", help="output folder")
    p.add_argument("--images-per-block", type=int, default=4, help="images per (model, condition, block) (default: 4)")
    p.add_argument("--blocks", nargs="+", default=None, help="block ids (default: all)")
    from ._common import add_batch_size_arg

    add_batch_size_arg(p, 1, "prompts per pipeline call (bit-exact whatever the number of processes)")
    p.add_argument("--cpu-offload", action=argparse.BooleanOptionalAction, default=None,
                   help="force model CPU offload on/off (default: per model; sd35_large and FLUX offload); on needs a "
                        "CUDA device and a diffusers pipeline (Hub, folder or in-memory), else it is refused")
    p.add_argument("--dtype", choices=["fp16", "bf16", "fp32"], default=None, help="override the model's dtype")
    p.add_argument("--device", default=None,
                   help="torch device of the models (cpu, cuda, cuda:1; default: this process's GPU under a launcher, "
                        "else cuda if available, else cpu; cpu under `accelerate launch --cpu`)")
    p.add_argument("--steps", type=int, default=None, help="override the number of inference steps")
    p.add_argument("--guidance", type=float, default=None, help="override the guidance scale")
    p.add_argument("--resolution", type=int, default=None, help="override the (square) generation size in pixels")
    p.add_argument("--plugin", action="append", metavar="MODULE_OR_FILE",
                   help="import a module or .py file that registers generators (repeatable)")
    p.add_argument("--strict", action="store_true",
                   help="stop with an error when a block cannot have a prompt (instead of listing and skipping it)")
    p.add_argument("--overwrite", action="store_true",
                   help="regenerate images that --out holds from a run with other settings (model, steps, guidance, "
                        "size, prompts, seeds), and delete images beyond --images-per-block; without it such a folder "
                        "is refused before anything is generated")
    p.add_argument("--dist-timeout", type=float, default=None, metavar="SECONDS",
                   help="multi-process runs: how long a process may wait for the others at a barrier, and how "
                        "long the processes have to find each other at the start (default: 14400 = 4 h; recorded "
                        "in generation_summary.json)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--list-models", action="store_true", help="print the registered generators and exit")
    p.add_argument("--push-to-hub", metavar="REPO", default=None, type=hub_repo_id,
                   help="after generating, push this run's models to the dataset repo REPO (generations config)")
    _add_hub_args(p)
    p.set_defaults(func=_cmd_generate)

    q = sub.add_parser(
        "push-generations",
        help="upload a generation folder to a Hub dataset repo as its 'generations' config",
        description=(
            "Uploads the panels of a generated folder to a Hub dataset repo as its 'generations' config, one commit "
            "per model, so that generations made on several machines add up in one repo. A folder written by "
            "`generate` is pushed from its manifest.parquet; any other folder in the layout `evaluate` reads "
            "({model}/{condition}/{block_id}/NN.jpg|png|webp) is pushed with each file's own bytes and sha256 (what "
            "`push-results --generations` records and `leaderboard verify` checks). The Hub is --endpoint, else "
            "$HF_ENDPOINT, else huggingface.co."
        ),
    )
    q.add_argument("dir", help="a generated folder ({model}/{condition}/{block_id}/NN.jpg, as `generate` writes it)")
    q.add_argument("--repo-id", required=True, type=hub_repo_id, help="dataset repo id (user/name), created if missing")
    q.add_argument("--models", nargs="+", default=None, help="models to push (default: all in the folder)")
    _add_hub_args(q)
    q.set_defaults(func=_cmd_push)


__all__ = ["register", "PAPER_CONDITIONS"]
