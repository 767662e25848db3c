"""Pieces shared by the CLI's subcommand modules (kept apart from cli.py to avoid import cycles)."""

from __future__ import annotations

BENCHMARK_HELP = "benchmark: 'demo' (the embedded demo), a canonical benchmark folder, or a Hub dataset id (user/name)"


class CLIError(Exception):
    """A user-facing error: printed without a traceback, exit status 2."""
