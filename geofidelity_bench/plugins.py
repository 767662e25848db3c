"""User code named on the command line: ``pkg.module:attr`` or ``path/to/file.py:attr``.

Used by ``generate --model NAME=module:callable`` (generators) and ``geodiv --vqa-model
module:factory`` (VQA backends). A file is imported once under a private module name.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any


def load_object(target: str, *, what: str, error: type[Exception]) -> Any:
    """``pkg.module:attr`` or ``path/to/file.py:attr`` -> the object (``attr`` may be dotted).

    Args:
        target: the text given by the user.
        what: what the object is, for messages (``"generator"``, ``"VQA model"``).
        error: the exception class raised when the target cannot be loaded.
    """
    module_part, _, attr = target.rpartition(":")
    if not module_part or not attr:
        raise error(f"{target!r} is not of the form 'module:attribute' or 'file.py:attribute'")
    if module_part.endswith(".py"):
        path = Path(module_part).expanduser().resolve()
        if not path.is_file():
            raise error(f"{what} file {module_part!r} does not exist")
        name = f"_geofidelity_user_{re.sub(r'[^A-Za-z0-9_]', '_', path.stem)}"
        module = sys.modules.get(name)
        if module is None or getattr(module, "__file__", None) != str(path):
            loader_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(loader_spec)  # type: ignore[arg-type]
            sys.modules[name] = module
            loader_spec.loader.exec_module(module)  # type: ignore[union-attr]
    else:
        try:
            module = importlib.import_module(module_part)
        except ImportError as err:
            raise error(f"cannot import {module_part!r} for {what} {target!r}: {err}") from err
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise error(f"{module_part!r} has no attribute {attr!r}") from None
    return obj
