"""Pieces shared by the CLI's command modules (kept apart from ``cli/__init__.py`` to avoid import cycles)."""

from __future__ import annotations

import argparse

from ..errors import GeoFidelityError

BENCHMARK_HELP = "benchmark: 'demo' (the embedded demo), a canonical benchmark folder, or a Hub dataset id (user/name)"


class CLIError(GeoFidelityError):
    """A command-line usage error (a bad or missing option): printed without a traceback, exit status 2.

    Only commands raise it; the library raises its own :class:`~geofidelity_bench.errors.GeoFidelityError`
    subclasses, which :func:`geofidelity_bench.cli.main` prints the same way.
    """


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one line (the problem and where to read more), exit status 2.

    argparse prints the whole usage block before its error; this prints only the error, like every
    other error of the command (:func:`geofidelity_bench.cli.main`). Subparsers inherit the class.
    """

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


#: argparse ``type`` of counts that must be positive (``--batch-size``): 0 and negatives are refused.
positive_int = _at_least_one


def add_batch_size_arg(p: argparse.ArgumentParser, default: int, what: str) -> None:
    """``--batch-size`` (>= 1; 0 or a negative number is a usage error before any work)."""
    p.add_argument("--batch-size", type=positive_int, default=default, metavar="N",
                   help=f"{what} (default: {default})")


def hub_repo_id(text: str) -> str:
    """argparse ``type`` of a Hub repo id (``--repo-id``, ``--model-card``, ``--push-to-hub``...): huggingface_hub's
    validator refuses ``../../etc`` or an id over 96 characters at parse time, before any work."""
    from ..hub.requests import RepoIdError, check_repo_id

    try:
        return check_repo_id(text, "")
    except RepoIdError as err:
        raise argparse.ArgumentTypeError(str(err).strip()) from None


def _non_negative(kind):
    def parse(text: str):
        value = kind(text)
        if not value >= 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value

    return parse


def check_out_folder(path, option: str = "--out") -> None:
    """Refuses an output folder that cannot be one, before any work: an existing file (or a path under
    a file), or a folder whose nearest existing parent cannot be written."""
    import os
    from pathlib import Path

    out = Path(path)
    if out.exists() and not out.is_dir():
        raise CLIError(f"{option} {out} is a file, not a folder: give a folder path (nothing was done)")
    parent = out
    while not parent.exists():
        if parent.parent == parent:
            break
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise CLIError(f"{option} {out}: {parent} is a file, not a folder: give a folder path (nothing was done)")
    if parent.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise CLIError(f"{option} {out}: cannot write in {parent} (permission denied): give a folder you may "
                       "write (nothing was done)")


def add_hub_retry_args(p: argparse.ArgumentParser) -> None:
    """``--retries`` and ``--retry-wait``: the retry policy of Hub requests (:func:`hub_retry_kwargs`)."""
    p.add_argument("--retries", type=_non_negative(int), default=5, metavar="N",
                   help="retries of a Hub request that fails with a transient error (no connection, timeout, "
                        "HTTP 429/5xx) before the push stops (default: 5)")
    p.add_argument("--retry-wait", type=_non_negative(float), default=1.0, metavar="SECONDS",
                   help="wait before the first retry; it doubles each time, up to 60 s (default: 1)")


def hub_retry_kwargs(args: argparse.Namespace) -> dict:
    """The ``attempts``/``retry_base_delay`` keywords of the hub push functions from :func:`add_hub_retry_args`."""
    return {"attempts": args.retries + 1, "retry_base_delay": args.retry_wait}


def add_encoder_args(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--encoder", default=default, help=f"encoder name (default: {default}); see `geofidelity-bench embed --list`")
    p.add_argument("--encoder-weights", default=None, help="local weights folder (or Hub id) for the encoder")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                   help="encoder precision (default: float32; half precision on GPU only, and recorded in the config)")
    add_batch_size_arg(p, 32, "images per encoder batch")
    p.add_argument("--cache-dir", default=None, help="embedding cache folder (default: $GEOFIDELITY_CACHE or under HF_HOME)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the embedding cache")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_num_workers_arg(p)


def add_num_workers_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--num-workers", type=int, default=None, metavar="N",
                   help="threads decoding and preprocessing images ahead of the model (default: the cores this "
                   "process may use, divided among the processes of an accelerate launch; 0: no threads). "
                   "It changes no number and is recorded in run.json")


def resolve_num_workers_arg(args) -> None:
    """Replaces ``args.num_workers`` by the number of threads actually used (so run.json's parameters
    record it); a negative value is a usage error."""
    from ..prefetch import WorkerOptionError, resolve_num_workers

    try:
        args.num_workers = resolve_num_workers(args.num_workers)
    except WorkerOptionError as err:
        raise CLIError(f"--num-workers: {err}") from None


def encoder_and_cache(args):
    """The Encoder and EmbeddingCache (None with --no-cache) that the parsed arguments ask for."""
    from ..encoders import EmbeddingCache, get_encoder

    resolve_num_workers_arg(args)

    encoder = get_encoder(args.encoder, weights=args.encoder_weights, device=args.device, dtype=args.dtype)
    cache = None if args.no_cache else EmbeddingCache(args.cache_dir)
    return encoder, cache


def add_segmenter_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--segmenter", default="mask2former-vistas",
                   help="semantic segmenter for GAAS (default: mask2former-vistas; also segformer-cityscapes)")
    p.add_argument("--segmenter-weights", default=None, help="local weights folder (or Hub id) for the segmenter")
    p.add_argument("--no-gaas", action="store_true", help="do not segment images; GAAS is reported as n/a")


def segmenter_or_reason(args, *, local_only: bool = False):
    """(Segmenter, None), or (None, why GAAS is not computed) when disabled or unavailable.

    A segmenter that cannot be loaded (offline without weights, wrong label set) does not stop
    the run: GAAS is then n/a and the reason is printed and recorded. With ``local_only`` (the
    offline demo) the Hub is not even tried: default weights are used only when they are
    already in the local Hugging Face cache.
    """
    import sys

    if args.no_gaas:
        return None, "GAAS disabled with --no-gaas"
    from ..segmentation import LabelMismatchError, SegmenterUnavailableError, default_weights_id, get_segmenter

    if local_only and args.segmenter_weights is None:
        from huggingface_hub import try_to_load_from_cache

        repo = default_weights_id(args.segmenter)
        if not isinstance(try_to_load_from_cache(repo, "config.json"), str):
            return None, (
                f"GAAS needs the segmenter weights {repo}, which are not in the local Hugging Face cache and the "
                "demo runs offline; pass a local copy with --segmenter-weights PATH"
            )

    try:
        return get_segmenter(args.segmenter, weights=args.segmenter_weights, device=args.device), None
    except (SegmenterUnavailableError, LabelMismatchError) as err:
        print(f"GAAS will be n/a: {err}", file=sys.stderr)
        return None, str(err)



def add_rekey_arg(p: argparse.ArgumentParser) -> None:
    """``--rekey-mismatched-images``: ``load_benchmark(..., rekey_mismatched_images=True)``."""
    p.add_argument("--rekey-mismatched-images", action="store_true",
                   help="hash every benchmark image first and key a row whose bytes do not hash to its stored "
                        "image_sha256 by the hash of its bytes (each named on stderr and, for evaluate, in run.json) "
                        "instead of stopping at the first such row")


def warn_rekeyed(bench) -> None:
    """One stderr line per row ``--rekey-mismatched-images`` keyed by the hash of its bytes (first 50 + a count)."""
    import sys

    from ..benchmark import first_lines

    rows = [f"{r['file']} row {r['row']} ({r['image']}): stored {r['stored_sha256']}, bytes {r['actual_sha256']}"
            for r in bench.rekeyed_images]
    if rows:
        print(f"warning: --rekey-mismatched-images: {len(rows)} image(s) keyed by the hash of their bytes, not by "
              "their stored image_sha256:\n  " + "\n  ".join(first_lines(rows)), file=sys.stderr)
