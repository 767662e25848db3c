"""The ``geofidelity-bench`` command.

One module per command family (``evaluate`` with ``demo``, ``audit``, ``info``, ``embed``, ``segment``, ``report``, ``compare``,
``generate``, ``app``, ``mfp``, ``geodiv``, ``curate``, ``dataset``, ``leaderboard``), each exposing
``register(subparsers)``; a command parses its arguments, calls the library and prints. Heavy
imports happen inside the commands so that ``geofidelity-bench --help`` is instant. Also runs as
``python -m geofidelity_bench.cli`` (hence ``accelerate launch -m geofidelity_bench.cli ...`` and
``torchrun -m ...``).

Errors: every error a user can cause is a :class:`~geofidelity_bench.errors.GeoFidelityError`
(library errors and :class:`~geofidelity_bench.cli._common.CLIError` alike); :func:`main` prints
its message on one line and exits with status 2, and so does an optional package that is not
installed (the line names the extra to install: :func:`~geofidelity_bench.extras.missing_extra`).
Any other exception is a bug and keeps its traceback. While a command runs, every log record (the
Hub client's retry lines name the URL it requests; its traceback too), every warning, the traceback of
an exception in a thread, the final error line and (from the ``geofidelity-bench`` entry point) the
traceback of a bug are passed through :func:`~geofidelity_bench.errors.redact_url`
(:func:`redacted_output`), so credentials inside an ``--endpoint`` URL, plain, percent-encoded or
nested in another URL, are never printed.

A closed standard output (``geofidelity-bench prompts | head -1``, ``info --json | head -c 100``):
the reader has all it wanted, so :func:`main` stops quietly, without a traceback, and exits with
status :data:`BROKEN_PIPE_STATUS` (141, what a shell reports for a Unix tool ended by SIGPIPE, as in
``yes | head -1``): a plain pipeline ignores it, ``set -o pipefail`` sees the output was cut short.
Files a command writes are written atomically, so one cut short leaves none half-written.

A process of a multi-process launch (``torchrun``/``accelerate launch``, ``WORLD_SIZE`` above 1)
leaves through :func:`run` without the interpreter's finalization: every command has by then written
its files, closed the process group and flushed its output, and finalization is where gloo can
abort a finished process (``terminate called without an active exception``, SIGABRT, seen after a
complete ``generate`` on a loaded machine), which the launcher reports as a failed run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Callable, Iterator, Sequence

from ..errors import GeoFidelityError, redact_url
from ..extras import missing_extra
from ._common import ArgumentParser
from . import app, audit, compare, curate, dataset, embed, evaluate, generate, geodiv, info, leaderboard, mfp, report, segment

# Each entry adds one or more subparsers, in the order of ``geofidelity-bench --help``.
REGISTRARS: list[Callable] = [
    evaluate.register,  # demo (the main job), evaluate
    audit.register,  # audit (the copy audit inside a benchmark)
    info.register,  # info, prompts
    embed.register,
    segment.register,
    report.register,  # clip-alignment, report
    compare.register,  # compare (two results folders, row by row)
    generate.register,  # generate, push-generations
    app.register,
    mfp.register,
    geodiv.register,
    curate.register,  # carve, curate
    dataset.register,  # build-dataset, push-dataset, import-release
    leaderboard.register,  # push-results
]


def build_parser() -> ArgumentParser:
    from .. import __version__

    parser = ArgumentParser(
        prog="geofidelity-bench",
        description="GeoFidelity-Bench: does a text-to-image model draw the named street block, or a generic city?",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for register in REGISTRARS:
        register(sub)
    return parser


def _redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """``record`` with its message, and the traceback or stack it carries, passed through
    :func:`~geofidelity_bench.errors.redact_url` (changed in place only where something was redacted)."""
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a malformed record is logging's business, not ours
        return record
    redacted = redact_url(message)
    if redacted != message:
        record.msg, record.args = redacted, None
    if record.exc_info and not record.exc_text:  # a formatter would print the traceback as it is
        with contextlib.suppress(Exception):
            record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact_url(record.exc_text)
    if record.stack_info:
        record.stack_info = redact_url(record.stack_info)
    return record


def _redacted_warning(message):
    """``message`` (a warning or its text) with URL credentials redacted, of the same type where it can be."""
    text = str(message)
    redacted = redact_url(text)
    if redacted == text:
        return message
    if isinstance(message, Warning):
        try:
            return type(message)(redacted)
        except Exception:  # noqa: BLE001 - a warning class with another signature: its text is what shows
            return redacted
    return redacted


@contextlib.contextmanager
def redacted_log_records() -> Iterator[None]:
    """Log records made meanwhile, by any library and through any handler, carry no URL credentials.

    A record factory (not a handler filter) because the Hub client's logger and its handler are
    created when a command first imports it.
    """
    previous = logging.getLogRecordFactory()

    def factory(*args, **kwargs) -> logging.LogRecord:
        return _redact_record(previous(*args, **kwargs))

    logging.setLogRecordFactory(factory)
    try:
        yield
    finally:
        logging.setLogRecordFactory(previous)


@contextlib.contextmanager
def redacted_warnings() -> Iterator[None]:
    """Warnings shown meanwhile (``warnings.warn`` by this package or any library, from any thread) carry no
    URL credentials: ``warnings.showwarning`` is wrapped to pass the text through
    :func:`~geofidelity_bench.errors.redact_url` (also where ``logging.captureWarnings`` routes warnings to
    a logger, and where a caller records them with ``warnings.catch_warnings(record=True)``)."""
    import warnings

    previous = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        return previous(_redacted_warning(message), category, filename, lineno, file,
                        None if line is None else redact_url(line))

    warnings.showwarning = showwarning
    try:
        yield
    finally:
        if warnings.showwarning is showwarning:  # not if someone replaced it meanwhile
            warnings.showwarning = previous


@contextlib.contextmanager
def redacted_output() -> Iterator[None]:
    """Every route by which text of a running command reaches the user, besides its own messages (which
    each pass through :func:`~geofidelity_bench.errors.redact_url`): log records of any library, warnings,
    and the traceback of an uncaught exception in a thread (a server thread of ``app``)."""
    import threading

    previous_hook = threading.excepthook

    def thread_hook(args) -> None:
        import traceback

        if args.exc_type is SystemExit:
            return
        name = getattr(args.thread, "name", "?")
        text = "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
        print(redact_url(f"Exception in thread {name}:\n{text}"), file=sys.stderr, end="")

    threading.excepthook = thread_hook
    try:
        with redacted_log_records(), redacted_warnings():
            yield
    finally:
        threading.excepthook = previous_hook


def _redacting_excepthook(exc_type, exc, tb) -> None:
    """The traceback of a bug (any exception that is not a user's error), with URL credentials redacted."""
    import traceback

    print(redact_url("".join(traceback.format_exception(exc_type, exc, tb))), file=sys.stderr, end="")


#: Exit status when standard output is closed by its reader (128 + SIGPIPE, as a shell reports ``yes | head -1``).
BROKEN_PIPE_STATUS = 141


def _quiet_broken_pipe() -> int:
    """Standard output was closed by its reader: point it at devnull (so the flush at exit cannot raise
    again) and return :data:`BROKEN_PIPE_STATUS`. The standard recipe of the Python docs (signal, SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout replaced by an object without a file descriptor
        pass
    return BROKEN_PIPE_STATUS


def main(argv: Sequence[str] | None = None) -> int:
    try:
        status = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here when the output fitted in the buffer
    except BrokenPipeError:
        return _quiet_broken_pipe()
    return status


def launched_with_peers() -> bool:
    """Whether this process is one of several started by ``torchrun``/``accelerate launch``."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def run() -> None:
    """The program's entry point (the ``geofidelity-bench`` script and ``python -m``): :func:`main`,
    then exit with its status. In a multi-process launch the exit skips interpreter finalization
    (``os._exit`` after flushing the output and the log handlers), so the status the command
    returned is the status the launcher sees: finalization could otherwise let a torch.distributed
    (gloo) thread abort a process whose work is done and recorded (pytorch/pytorch#179291 describes
    the mechanism)."""
    sys.excepthook = _redacting_excepthook  # a bug's traceback may quote a URL with its credentials
    if not launched_with_peers():
        raise SystemExit(main())
    try:
        status = main()
    except SystemExit as stop:
        code = stop.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
        status = code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException:  # noqa: BLE001 - a bug: its traceback, then the same fast exit
        sys.excepthook(*sys.exc_info())
        status = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more can be said
            stream.flush()
    logging.shutdown()
    os._exit(status)


def _main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv
    try:
        with redacted_output():
            return int(args.func(args) or 0)
    except GeoFidelityError as err:
        print(redact_url(f"geofidelity-bench {args.command}: error: {err}"), file=sys.stderr)
        return 2
    except ImportError as err:
        # an optional package reached without extras.require (e.g. accelerate inside a library helper)
        missing = missing_extra(err, feature=args.command)
        if missing is None:
            raise
        print(f"geofidelity-bench {args.command}: error: {missing}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


__all__ = ["BROKEN_PIPE_STATUS", "build_parser", "launched_with_peers", "main", "redacted_log_records",
           "redacted_output", "redacted_warnings", "run"]
