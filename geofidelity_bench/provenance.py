"""What every written result records about how it was made: versions, time, command line."""

from __future__ import annotations

import datetime as _dt
import platform
from importlib import metadata
from typing import Any, Iterable

#: Distributions whose versions are written next to every number by default.
DEFAULT_DISTRIBUTIONS = (
    "geofidelity-bench",
    "numpy",
    "scipy",
    "pandas",
    "torch",
    "transformers",
    "datasets",
    "huggingface_hub",
    "pillow",
    "matplotlib",
    "efficientnet-lite-pytorch",
)


def installed_version(dist: str) -> str | None:
    """The installed version of a distribution, or None when it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def library_versions(dists: Iterable[str] = DEFAULT_DISTRIBUTIONS) -> dict[str, str]:
    """``{"python": ..., dist: version}`` for the installed ones among ``dists``."""
    out = {"python": platform.python_version()}
    for dist in dists:
        version = installed_version(dist)
        if version is not None:
            out[dist] = version
    return out


def utc_timestamp(timespec: str = "seconds") -> str:
    """The current UTC time in ISO 8601."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec=timespec)


def command_line(args: Any) -> str:
    """The ``geofidelity-bench ...`` command a parsed CLI invocation came from (credentials inside a URL
    argument, ``--endpoint http://user:pw@host``, redacted: the line is written into result files)."""
    from .errors import redact_url

    return redact_url("geofidelity-bench " + " ".join(getattr(args, "argv", [])))
