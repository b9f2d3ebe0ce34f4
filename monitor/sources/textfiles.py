"""Telling parquet from TREC text files, and reading TREC run and qrels files.

A file is parquet when it starts with ``PAR1``, else UTF-8 text whose non-empty lines are
whitespace-separated fields (runs: ``qid Q0 docid rank score tag``; qrels: ``qid 0 docid
grade``). A TREC run file is one evaluation run; its time is the UTC timestamp in its name
(``2026-11-30T02:00:00Z``, ``2026-11-30T0200Z`` or ``20261130T020000Z``), else its
modification time.
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Generic, TypeVar

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
T = TypeVar("T")
_STAMP = re.compile(
    r"(\d{4})-?(\d{2})-?(\d{2})T(\d{2}):?(\d{2})(?::?(\d{2}))?Z?", flags=re.IGNORECASE
)


class _ByIdentity(Generic[T]):
    """A fact about a file kept while the file is unchanged (by its identity: path, size,
    mtime, ctime), at most ``limit`` files (past it, all are dropped)."""

    def __init__(self, limit: int = 4096) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[str, int, int, int], T] = {}
        self._limit = limit

    def get(self, f: _File, compute: Callable[[], T]) -> T:
        key = f.identity
        with self._lock:
            if key in self._held:
                return self._held[key]
        value = compute()
        with self._lock:
            if len(self._held) > self._limit:
                self._held.clear()
            self._held[key] = value
        return value


_KINDS: _ByIdentity[bool] = _ByIdentity()  # parquet or not, by the first bytes
_LINES: _ByIdentity[int] = _ByIdentity()  # a TREC file's rows


def _read(source: _Source, f: _File, size: int | None, what: str) -> bytes:
    """The first ``size`` bytes of ``f`` (None: all of it), errors named by ``what``."""
    try:
        with source.fs.open_input_stream(f.path) as handle:
            return bytes(handle.read() if size is None else handle.read(size))
    except (OSError, pa.ArrowException) as exc:
        raise _translate(exc, f.path, what) from exc


def _is_parquet(source: _Source, f: _File) -> bool:
    return _KINDS.get(f, lambda: _read(source, f, 4, "opening the file") == _MAGIC)


def _files(source: _Source, window: Window | None) -> Iterator[_File]:
    keep = (lambda interval: True) if window is None else (lambda i: _overlaps(i, window))
    yield from _walk(source, keep)


def _is_trec(source: _Source, window: Window | None) -> bool:
    kinds = {_is_parquet(source, f) for f in _files(source, window)}
    if kinds == {True, False}:
        raise mixed_kinds(source)
    return bool(kinds == {False})


def mixed_kinds(source: _Source) -> SchemaError:
    """The error of a judged-runs directory that holds both parquet and text (TREC) runs."""
    return SchemaError(
        "mixes parquet and text files",
        path=source.display,
        hint="keep TREC run files and parquet runs in separate directories",
    )


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


def _line_count(source: _Source, f: _File) -> int:
    """A TREC file's rows: its non-empty lines (ASCII whitespace only is empty, as
    ``_tokens`` splits them), kept while the file is unchanged."""

    def count() -> int:
        raw = _read(source, f, None, "reading the file")
        return sum(1 for line in raw.splitlines() if line.strip())

    return _LINES.get(f, count)


def _trec_files(source: _Source, window: Window | None) -> list[tuple[_File, int]]:
    out = []
    for f in _files(source, window):
        t = _file_time(f)
        if window is None or window.start_ns <= t < window.end_ns:
            out.append((f, t))
    return out


_CHUNK = 16_384  # lines split into Python objects at a time (then held as Arrow and floats)
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class _Fields:
    """A TREC file's fields: text fields as Arrow strings, number fields as float64, and each
    row's line number in the file (1-based, blank lines counted), as errors name it."""

    text: dict[int, pa.Array]
    numbers: dict[int, FloatArray]
    lines: npt.NDArray[np.int64]

    @property
    def rows(self) -> int:
        return int(self.lines.size)


def _tokens(
    source: _Source,
    f: _File,
    width: int,
    shape: str,
    *,
    text: tuple[int, ...],
    numbers: dict[int, str],
) -> _Fields:
    """The whitespace-separated fields of a text file (ASCII whitespace, as trec_eval splits
    them), one row per non-empty line of ``width`` fields; those ``numbers`` names (index ->
    role) as float64 (Python's ``float`` syntax), those ``text`` names as UTF-8 strings (the
    rest are not kept). The lines are split
    ``_CHUNK`` at a time, so the Python objects held are a chunk's, not the file's (a file
    of 1M lines once held 800 MB of them). A leading UTF-8 byte-order mark is skipped."""
    try:
        with source.fs.open_input_stream(f.path) as handle:
            raw = handle.read()
    except (OSError, pa.ArrowException) as exc:
        raise _translate(exc, f.path, "reading the file") from exc
    skip = len(_BOM) if raw.startswith(_BOM) else 0  # not part of the first query id
    kept = sorted({0, *text, *numbers})  # the query id names a bad number's line
    pending: dict[int, list[bytes]] = {k: [] for k in kept}
    pending_lines: list[int] = []
    strings: dict[int, list[pa.Array]] = {k: [] for k in text}
    floats: dict[int, list[FloatArray]] = {k: [] for k in numbers}
    lines: list[npt.NDArray[np.int64]] = []

    def flush() -> None:
        if not pending_lines:
            return
        for k, chunks in strings.items():
            try:
                chunks.append(pa.array(pending[k], pa.binary()).cast(pa.string()))
            except pa.ArrowInvalid as exc:
                try:
                    raw.decode("utf-8")
                except UnicodeDecodeError as bad:
                    raise SchemaError(
                        f"is neither parquet nor UTF-8 text (byte {bad.start})",
                        path=f.path,
                        hint=f"a TREC file holds lines `{shape}`",
                    ) from exc
                raise  # pragma: no cover - Arrow refused what Python decodes
        for k, chunks in floats.items():
            chunks.append(_floats(pending[k], pending[0], pending_lines, f, numbers[k]))
        lines.append(np.asarray(pending_lines, dtype=np.int64))
        for column in pending.values():
            column.clear()
        pending_lines.clear()

    for number, line in enumerate(io.BytesIO(raw[skip:] if skip else raw), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != width:
            shown = b" ".join(parts).decode("utf-8", "replace")[:80]
            raise SchemaError(
                f"line {number} has {len(parts)} fields: {shown!r}; a TREC line holds `{shape}`",
                path=f.path,
            )
        for k in kept:
            pending[k].append(parts[k])
        pending_lines.append(number)
        if len(pending_lines) >= _CHUNK:
            flush()
    flush()
    return _Fields(
        {k: pa.concat_arrays(v) if v else pa.array([], pa.string()) for k, v in strings.items()},
        {k: np.concatenate(v) if v else np.empty(0) for k, v in floats.items()},
        np.concatenate(lines) if lines else np.empty(0, dtype=np.int64),
    )


def _floats(
    column: list[bytes], queries: list[bytes], lines: list[int], f: _File, role: str
) -> FloatArray:
    """A chunk's number field as float64 (``float`` syntax: "inf", "-inf", "1e3"); a field
    that is not a number is a ``SchemaError`` naming its line and query."""
    try:
        return np.asarray(np.array(column).astype(np.float64))
    except ValueError:
        for i, value in enumerate(column):
            try:
                float(value)
            except ValueError:
                shown = value.decode("utf-8", "replace")
                query = queries[i].decode("utf-8", "replace")
                raise SchemaError(
                    f"line {lines[i]}: the {role} {shown!r} is not a number (query {query!r})",
                    path=f.path,
                ) from None
        raise


__all__: list[str] = []  # private helpers of the judged-runs readers
