"""Loading transformers weights from a local save_pretrained folder or the Hub, with a clear
error (and a way to run offline) when they cannot be had."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from geofidelity_bench.encoders.base import OFFLINE_HINT, EncoderUnavailableError, file_sha256

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def looks_like_path(weights: str) -> bool:
    # Hub ids look like "org/name"; anything anchored like a filesystem path is a path.
    return weights.startswith((".", "/", "~", "\\")) or (len(weights) > 1 and weights[1] == ":")


def local_weights_sha256(folder: Path) -> str:
    """One digest over the config and weight files of a save_pretrained folder."""
    h = hashlib.sha256()
    files = sorted(
        p for p in folder.iterdir() if p.is_file() and (p.suffix in _WEIGHT_SUFFIXES or p.name == "config.json")
    )
    for p in files:
        h.update(p.name.encode("utf-8") + b"\0" + file_sha256(p).encode("ascii") + b"\n")
    return h.hexdigest()


def resolve_source(
    weights: str | os.PathLike | None,
    default_id: str,
    *,
    error: type[Exception] = EncoderUnavailableError,
    hint: str = OFFLINE_HINT,
) -> tuple[str, bool]:
    """(source to pass to from_pretrained, is_local_dir); ``error(... hint)`` for a path that is no folder."""
    if weights is None:
        return default_id, False
    text = os.fspath(weights)
    path = Path(text).expanduser()
    if path.is_dir():
        return str(path.resolve()), True
    if path.exists() or isinstance(weights, os.PathLike) or looks_like_path(text):
        raise error(f"encoder weights {text!r} is not a directory saved with save_pretrained(). {hint}")
    return text, False


def _unavailable(
    encoder: str,
    source: str,
    revision: str | None,
    err: BaseException,
    error: type[Exception] = EncoderUnavailableError,
    hint: str = OFFLINE_HINT,
) -> Exception:
    from ..errors import load_failure_reason

    rev = f" (revision {revision!r})" if revision else ""
    return error(f"cannot load weights {source!r}{rev} for encoder {encoder!r}: {load_failure_reason(err)}. {hint}")


def load_pretrained(
    model_cls: Any,
    *,
    encoder: str,
    expected_model_type: str,
    default_id: str,
    weights: str | os.PathLike | None,
    revision: str | None,
    torch_dtype: Any,
    error: type[Exception] = EncoderUnavailableError,
    hint: str = OFFLINE_HINT,
) -> tuple[Any, dict[str, Any], str, bool]:
    """Loads ``model_cls`` weights; returns (model, weights record for the config, source, is_local).

    Weights that cannot be had raise ``error`` (a :class:`~geofidelity_bench.errors.ModelUnavailableError`
    subclass) whose message ends with ``hint``, how to run offline.
    """
    from transformers import AutoConfig

    source, local = resolve_source(weights, default_id, error=error, hint=hint)
    kwargs: dict[str, Any] = {"revision": revision}
    if local:
        kwargs["local_files_only"] = True
    try:
        cfg = AutoConfig.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as err:
        raise _unavailable(encoder, source, revision, err, error, hint) from err
    if cfg.model_type != expected_model_type:
        raise error(
            f"weights {source!r} hold a {cfg.model_type!r} model, but encoder {encoder!r} needs "
            f"a {expected_model_type!r} model"
        )
    try:
        model = model_cls.from_pretrained(source, config=cfg, dtype=torch_dtype, **kwargs)
    except (OSError, ValueError) as err:
        raise _unavailable(encoder, source, revision, err, error, hint) from err
    record: dict[str, Any] = {"weights": source, "revision": revision}
    if local:
        record["weights_sha256"] = local_weights_sha256(Path(source))
    else:
        # The commit actually loaded, so a moving "main" never silently reuses stale embeddings.
        record["commit"] = getattr(model.config, "_commit_hash", None) or getattr(cfg, "_commit_hash", None)
    return model, record, source, local


def load_tokenizer(encoder: str, source: str, local: bool, revision: str | None) -> Any:
    from transformers import AutoTokenizer

    kwargs: dict[str, Any] = {"revision": revision}
    if local:
        kwargs["local_files_only"] = True
    try:
        return AutoTokenizer.from_pretrained(source, **kwargs)
    except (OSError, ValueError, ImportError) as err:
        raise _unavailable(encoder, f"{source} (tokenizer)", revision, err) from err


def load_transformers_encoder(
    encoder: Any,
    model_cls: Any,
    ids: dict[str, str],
    name: str,
    model_type: str,
    *,
    weights: str | os.PathLike | None,
    revision: str | None,
    device: Any | None,
    dtype: Any,
) -> tuple[Any, str, dict[str, Any], str, bool]:
    """The shared start of every transformers-backed encoder.

    Checks ``name`` against ``ids`` (name -> default Hub id), sets ``encoder.name``,
    ``encoder.device`` and ``encoder.model`` (loaded, on its device, in eval mode).

    Returns:
        (model, dtype name, weights record for the config, source, whether it is a local folder).
    """
    from geofidelity_bench.encoders.base import resolve_device, resolve_dtype

    if name not in ids:
        raise ValueError(f"unknown {model_type} encoder {name!r}; one of {sorted(ids)}")
    encoder.name = name
    encoder.device = resolve_device(device)
    dtype_name, torch_dtype = resolve_dtype(dtype, encoder.device)
    model, record, source, local = load_pretrained(
        model_cls,
        encoder=name,
        expected_model_type=model_type,
        default_id=ids[name],
        weights=weights,
        revision=revision,
        torch_dtype=torch_dtype,
    )
    encoder.model = model.to(encoder.device).eval()
    return model, dtype_name, record, source, local
