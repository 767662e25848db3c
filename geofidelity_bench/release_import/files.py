"""Reading the release's files (CSV tables by column spelling, image paths, decode check) and writing the import's."""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from .layout import GENERATION_DIR, PUBLISHED_DIR, REPORT_FILE
from .report import ReleaseImportError


@dataclass
class _Table:
    file: str
    header: list[str]
    rows: list[tuple[int, dict[str, str]]]
    columns: dict[str, str | None]  # our name -> the file's column (None when absent)
    #: CSV lines whose number of fields differs from the header's (their values cannot be trusted by position)
    ragged: dict[int, int] = field(default_factory=dict)  # line -> number of fields

    def get(self, row: Mapping[str, str], name: str) -> str | None:
        col = self.columns.get(name)
        return row.get(col) if col else None


def _read_table(
    root: Path, rel: str, required: Mapping[str, tuple[str, ...]], optional: Mapping[str, tuple[str, ...]]
) -> _Table:
    """Reads a CSV (strings kept as written); each name maps to accepted column spellings."""
    path = root / rel
    try:
        return _parse_table(path, rel, required, optional)
    except UnicodeDecodeError as err:
        raise ReleaseImportError(
            f"{rel}: not UTF-8 text (byte {err.object[err.start:err.start + 1]!r} at offset {err.start}); "
            "save it as UTF-8 (e.g. `iconv -f cp1252 -t utf-8`) and import again"
        ) from None


def _parse_table(
    path: Path, rel: str, required: Mapping[str, tuple[str, ...]], optional: Mapping[str, tuple[str, ...]]
) -> _Table:
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        reader.fieldnames = header
        lower = {h.lower(): h for h in header}
        columns: dict[str, str | None] = {}
        for name, spellings in {**required, **optional}.items():
            columns[name] = next((lower[s.lower()] for s in spellings if s.lower() in lower), None)
        for name, spellings in required.items():
            if columns[name] is None:
                alts = f" (or {', '.join(repr(s) for s in spellings[1:])})" if len(spellings) > 1 else ""
                raise ReleaseImportError(
                    f"{rel}: missing required column {spellings[0]!r}{alts}; the file has columns {header}"
                )
        rows, ragged = [], {}
        try:
            for row in reader:
                extra, short = row.get(None), [k for k, v in row.items() if k is not None and v is None]
                if extra or short:
                    ragged[reader.line_num] = len(header) + len(extra or ()) - len(short)
                rows.append((reader.line_num, {k: v for k, v in row.items() if k is not None}))
        except csv.Error as err:  # e.g. a field over the csv module's limit (csv.field_size_limit())
            raise ReleaseImportError(
                f"{rel}: the row after line {reader.line_num} cannot be read as CSV ({err}; the limit is "
                f"{csv.field_size_limit():,} characters per field): fix or remove that row and import again"
            ) from None
    return _Table(rel, header, rows, columns, ragged)


def _escapes(norm: str) -> bool:
    """True for an absolute path (POSIX, UNC or a Windows drive) or one that climbs with ``..``."""
    return norm.startswith("/") or bool(re.match(r"\A[A-Za-z]:", norm)) or ".." in norm.split("/")


def _relocate(root: Path, text: str | None, fallbacks: Iterable[str]) -> tuple[Path | None, str | None]:
    """The file inside the release that an image path points to (or None), and why the path as written was not read.

    Every candidate must resolve (symbolic links followed) inside the release folder; one that escapes it (an
    absolute path, ``../``, a link out) is never opened. An absolute path of the authors' machine is still found
    through the release folder names in it (``.../data/raw/...``, ``.../generations_v3/...``); without one, such a
    row gets no stand-in from the conventional places (``fallbacks``).
    """
    candidates: list[str] = []
    outside: str | None = None
    if text:
        norm = text.replace("\\", "/")
        if _escapes(norm):
            outside = f"image path {text!r} points outside the release folder; it was not read"
        else:
            candidates.append(norm)
        for marker in ("data/raw/", f"{GENERATION_DIR}/"):
            if marker in norm:
                candidates.append(norm[norm.index(marker) :])
    base = root.resolve()
    for group in (candidates, list(fallbacks)):
        for cand in group:
            path = root / cand
            try:
                inside = path.resolve().is_relative_to(base)
            except (OSError, RuntimeError):  # a link loop
                inside = False
            if not inside:
                outside = outside or f"image path {cand!r} resolves outside the release folder; it was not read"
                continue
            if path.is_file():
                return path, None
        if outside:  # the conventional places stand in only for a row that names no outside file
            break
    return None, outside


def _decode_check(data: bytes) -> str | None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
    except Exception as err:  # noqa: BLE001 - any decoder failure is a bad image
        return f"{type(err).__name__}: {err}"
    return None


def _copy(src: Path, dst: Path, hardlink: bool) -> None:
    if dst.exists():
        dst.unlink()
    if hardlink:
        try:
            os.link(src, dst)
            return
        except OSError:
            pass
    shutil.copyfile(src, dst)


def _to_jpeg(data: bytes) -> bytes:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        buf = io.BytesIO()
        img.convert("RGB").save(buf, format="JPEG", quality=95)
        return buf.getvalue()


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    fields = list(rows[0]) if rows else ["path"]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _prepare_out(out: Path, overwrite: bool) -> None:
    managed = ("benchmark", "generations", PUBLISHED_DIR, REPORT_FILE)
    present = [name for name in managed if (out / name).exists()]
    if present and not overwrite:
        raise ReleaseImportError(f"{out} already holds {', '.join(present)}; pass --overwrite to replace them")
    for name in present:
        target = out / name
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
    out.mkdir(parents=True, exist_ok=True)
