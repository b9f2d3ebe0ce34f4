"""Telling parquet from TREC text files, and reading TREC run and qrels files.

A file is parquet when it starts with ``PAR1``, else UTF-8 text whose non-empty lines are
whitespace-separated fields (runs: ``qid Q0 docid rank score tag``; qrels: ``qid 0 docid
grade``). A TREC run file is one evaluation run; its time is the UTC timestamp in its name
(``2026-11-30T02:00:00Z``, ``2026-11-30T0200Z`` or ``20261130T020000Z``), else its
modification time.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from monitor.epoch import to_ns as _to_ns
from monitor.errors import SchemaError
from monitor.sources.model import FloatArray, Window
from monitor.sources.partitions import _overlaps
from monitor.sources.paths import _File, _Source, _walk
from monitor.sources.translate import _translate

_MAGIC = b"PAR1"
_STAMP = re.compile(
    r"(\d{4})-?(\d{2})-?(\d{2})T(\d{2}):?(\d{2})(?::?(\d{2}))?Z?", flags=re.IGNORECASE
)
_KINDS_LOCK = threading.Lock()
_KINDS: dict[tuple[str, int, int, int], bool] = {}


def _is_parquet(source: _Source, f: _File) -> bool:
    key = f.identity
    with _KINDS_LOCK:
        hit = _KINDS.get(key)
    if hit is not None:
        return hit
    try:
        with source.fs.open_input_stream(f.path) as handle:
            head = handle.read(4)
    except (OSError, pa.ArrowException) as exc:
        raise _translate(exc, f.path, "opening the file") from exc
    kind = bytes(head) == _MAGIC
    with _KINDS_LOCK:
        if len(_KINDS) > 4096:
            _KINDS.clear()
        _KINDS[key] = kind
    return kind


def _files(source: _Source, window: Window | None) -> Iterator[_File]:
    keep = (lambda interval: True) if window is None else (lambda i: _overlaps(i, window))
    yield from _walk(source, keep)


def _is_trec(source: _Source, window: Window | None) -> bool:
    kinds = {_is_parquet(source, f) for f in _files(source, window)}
    if kinds == {True, False}:
        raise SchemaError(
            "mixes parquet and text files",
            path=source.display,
            hint="keep TREC run files and parquet runs in separate directories",
        )
    return bool(kinds == {False})


def _file_time(f: _File) -> int:
    base = f.path.rsplit("/", 1)[-1]
    m = _STAMP.search(base)
    if m:
        y, mo, d, h, mi, s = (int(x) if x else 0 for x in m.groups())
        try:
            return _to_ns(datetime(y, mo, d, h, mi, s, tzinfo=UTC))
        except ValueError:
            pass
    return f.mtime_ns


def _trec_files(source: _Source, window: Window | None) -> list[tuple[_File, int]]:
    out = []
    for f in _files(source, window):
        t = _file_time(f)
        if window is None or window.start_ns <= t < window.end_ns:
            out.append((f, t))
    return out


def _tokens(source: _Source, f: _File, width: int, shape: str) -> npt.NDArray[np.object_]:
    """The whitespace-separated fields of a text file, one row per non-empty line, and in a
    last column (``width``) that line's number in the file (1-based, blank lines counted), as
    errors name it."""
    try:
        with source.fs.open_input_stream(f.path) as handle:
            raw = handle.read()
    except (OSError, pa.ArrowException) as exc:
        raise _translate(exc, f.path, "reading the file") from exc
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark is not part of the first query id
    except UnicodeDecodeError as exc:
        raise SchemaError(
            f"is neither parquet nor UTF-8 text (byte {exc.start})",
            path=f.path,
            hint=f"a TREC file holds lines `{shape}`",
        ) from exc
    rows: list[list[object]] = []
    for number, line in enumerate(text.splitlines(), 1):
        parts: list[object] = list(line.split())
        if not parts:
            continue
        if len(parts) != width:
            raise SchemaError(
                f"line {number} has {len(parts)} fields: {' '.join(map(str, parts))[:80]!r}; "
                f"a TREC line holds `{shape}`",
                path=f.path,
            )
        parts.append(number)
        rows.append(parts)
    out = np.empty((len(rows), width + 1), dtype=object)
    if rows:
        out[:] = rows
    return out


def _numbers(
    column: npt.NDArray[np.object_], f: _File, role: str, fields: npt.NDArray[np.object_]
) -> FloatArray:
    try:
        return np.asarray(column, dtype=np.float64)
    except ValueError:
        for i, value in enumerate(column):
            try:
                float(value)
            except ValueError:
                raise SchemaError(
                    f"line {fields[i, -1]}: the {role} {value!r} is not a number (query "
                    f"{fields[i, 0]!r})",
                    path=f.path,
                ) from None
        raise


__all__: list[str] = []  # private helpers of the judged-runs readers
