"""Writing and reading curation tables (Parquet or CSV by suffix), atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from ..atomic import atomic_write
from .errors import CurationError

TABLE_SUFFIXES = (".parquet", ".csv")


def write_table(df, path: str | os.PathLike, *, json_columns: Sequence[str] = ()) -> Path:
    """Writes a DataFrame to ``path`` (``.parquet`` or ``.csv``) through a temporary file.

    In CSV, the ``json_columns`` (lists) are written as JSON text.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise CurationError(f"table {str(path)!r} must end in .parquet or .csv")

    def write(tmp: Path) -> None:
        if suffix == ".parquet":
            df.to_parquet(tmp, index=False)
        else:
            out = df.copy()
            for col in json_columns:
                if col in out.columns:
                    out[col] = [json.dumps(v) if v is not None else None for v in out[col]]
            out.to_csv(tmp, index=False)

    atomic_write(path, write)
    return path


def read_table(path: str | os.PathLike, *, json_columns: Sequence[str] = ()):
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise CurationError(f"table not found: {str(path)!r}")
    if path.suffix.lower() == ".parquet":
        df = pd.read_parquet(path)
        for col in json_columns:
            if col in df.columns:
                df[col] = [_to_list(v) for v in df[col]]
        return df
    df = pd.read_csv(path)
    for col in json_columns:
        if col in df.columns:
            df[col] = [json.loads(v) if isinstance(v, str) else v for v in df[col]]
    return df


def _to_list(value):
    """pyarrow gives nested numpy arrays back; make them plain nested lists."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [_to_list(v) for v in value]
    return value
