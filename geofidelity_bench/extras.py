"""Optional dependencies: importing one that is missing is a one-line error naming the extra.

The package's extras (``setup.cfg``): ``gen`` (diffusers, accelerate: ``generate``), ``app``
(gradio: ``app``), ``metric`` (evaluate: the ``evaluate`` metric), ``curate`` (shapely, pyproj,
osmium: ``curate``), and ``all``.

Example:
    >>> require("json", "gen").__name__
    'json'
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import GeoFidelityError

#: The extra that installs each optional module.
EXTRA_OF = {
    "diffusers": "gen",
    "accelerate": "gen",
    "gradio": "app",
    "evaluate": "metric",
    "shapely": "curate",
    "pyproj": "curate",
    "osmium": "curate",
    "sentencepiece": "curate",
    "gradio_client": "app",
}


class MissingExtraError(GeoFidelityError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


def install_hint(extra: str) -> str:
    return f'pip install "geofidelity-bench[{extra}]" (or "geofidelity-bench[all]")'


def missing_extra(err: ImportError, feature: str | None = None) -> MissingExtraError | None:
    """The one-line error for an import of an optional module that failed because the module is not
    installed (``err.name`` is one of :data:`EXTRA_OF`'s modules), else None (a real bug keeps its traceback).

    The command line's last line of defence: wherever a command reaches an optional module without
    :func:`require` (a helper deep in a library call), it still ends in the line naming the extra.
    """
    if isinstance(err, MissingExtraError):
        return err
    top = (err.name or "").split(".")[0]
    if not isinstance(err, ModuleNotFoundError) or top not in EXTRA_OF:
        return None
    what = f"{feature} needs" if feature else "this needs"
    return MissingExtraError(f"{what} the optional package {top!r}, which is not installed: "
                             f"{install_hint(EXTRA_OF[top])}")


def require(module: str, extra: str | None = None, feature: str | None = None) -> ModuleType:
    """Imports ``module``, or raises :class:`MissingExtraError` naming the extra that installs it.

    Only the absence of ``module`` itself becomes that error; an import error inside an
    installed module (a broken dependency of it) keeps its traceback.
    """
    extra = extra or EXTRA_OF.get(module.split(".")[0], "all")
    try:
        return importlib.import_module(module)
    except ImportError as err:
        top = module.split(".")[0]
        if err.name is not None and err.name.split(".")[0] != top:
            raise
        what = f"{feature} needs" if feature else "this needs"
        raise MissingExtraError(f"{what} the optional package {top!r}, which is not installed: "
                                f"{install_hint(extra)}") from None
