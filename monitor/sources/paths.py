"""Discovery: a source path (file, directory, glob or URI) listed with hive-partition pruning."""

from __future__ import annotations

import fnmatch
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeAlias
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs

from monitor.errors import (
    SourceNotFoundError,
)
from monitor.sources.model import _to_ns
from monitor.sources.translate import _translate

_GLOB_CHARS = re.compile(r"[*?\[]")


_DATE_VALUE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


_Interval: TypeAlias = tuple[int, int] | None  # [lo, hi) in ns, None = unknown


@dataclass(frozen=True, slots=True)
class _File:
    path: str
    size: int
    mtime_ns: int
    partitions: tuple[tuple[str, str], ...]
    interval: _Interval


@dataclass(frozen=True, slots=True)
class _Source:
    display: str
    fs: pafs.FileSystem
    root: str  # a file, or the directory that is walked
    is_file: bool
    pattern: str | None  # glob over full paths, for glob sources
    prune: bool


_FS_CACHE: dict[str, tuple[pafs.FileSystem, str]] = {}


_FS_LOCK = threading.Lock()


_LOCAL_FS = pafs.LocalFileSystem()


def _filesystem(path: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and the path inside it; URI filesystems are created once per path."""
    if "://" not in path:
        return _LOCAL_FS, str(Path(path).expanduser().absolute())
    with _FS_LOCK:
        cached = _FS_CACHE.get(path)
    if cached is not None:
        return cached
    try:
        resolved: tuple[pafs.FileSystem, str] = pafs.FileSystem.from_uri(path)
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise SourceNotFoundError(
            f"no filesystem understands this URI: {exc}",
            path=path,
            hint="use a local path or a file://, s3://, gs:// or hdfs:// URI that pyarrow supports",
        ) from exc
    with _FS_LOCK:
        _FS_CACHE[path] = resolved
    return resolved


def _info(fs: pafs.FileSystem, path: str, display: str) -> pafs.FileInfo:
    try:
        return fs.get_file_info(path)
    except (OSError, pa.ArrowException) as exc:
        raise _translate(exc, display, "looking the path up") from exc


def _resolve(path: str, prune: bool) -> _Source:
    fs, inner = _filesystem(path)
    match = _GLOB_CHARS.search(inner)
    if match is not None:
        root = inner[: match.start()].rsplit("/", 1)[0] or "/"
        info = _info(fs, root, path)
        if info.type != pafs.FileType.Directory:
            raise SourceNotFoundError(
                f"the glob's directory {root!r} does not exist",
                path=path,
                hint="check the path in the configuration",
            )
        return _Source(path, fs, root, False, inner, prune)
    info = _info(fs, inner, path)
    if info.type == pafs.FileType.NotFound:
        raise SourceNotFoundError(
            "no such file or directory", path=path, hint="check the path in the configuration"
        )
    return _Source(path, fs, inner, info.type == pafs.FileType.File, None, prune)


def _hive(name: str) -> tuple[str, str] | None:
    key, sep, value = name.partition("=")
    return (key, unquote(value)) if sep and key else None


def _partition_interval(parts: tuple[tuple[str, str], ...]) -> _Interval:
    """The UTC period a chain of hive partitions spells, or None when it spells none.

    ``<any>=YYYY-MM-DD`` sets year, month and day; ``year=``, ``month=``, ``day=``, ``hour=`` set
    one field each (integers). The interval is the finest period whose coarser fields are all known.
    """
    fields: dict[str, int] = {}
    for key, value in parts:
        m = _DATE_VALUE.match(value)
        if m:
            fields.update(year=int(m[1]), month=int(m[2]), day=int(m[3]))
        elif key.lower() in ("year", "month", "day", "hour") and value.isdigit():
            fields[key.lower()] = int(value)
    try:
        if "year" not in fields:
            return None
        year = fields["year"]
        if "month" not in fields:
            lo, hi = datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
        elif "day" not in fields:
            month = fields["month"]
            lo = datetime(year, month, 1, tzinfo=UTC)
            hi = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
        else:
            lo = datetime(year, fields["month"], fields["day"], tzinfo=UTC)
            if "hour" in fields:
                lo += timedelta(hours=fields["hour"])
                if fields["hour"] > 23:
                    return None
                hi = lo + timedelta(hours=1)
            else:
                hi = lo + timedelta(days=1)
    except (ValueError, OverflowError):
        return None
    return _to_ns(lo), _to_ns(hi)


def _list_dir(source: _Source, directory: str) -> list[pafs.FileInfo]:
    try:
        infos = source.fs.get_file_info(pafs.FileSelector(directory, recursive=False))
    except (OSError, pa.ArrowException) as exc:
        raise _translate(exc, directory, "listing the directory") from exc
    return sorted(infos, key=lambda i: i.path)


def _walk(
    source: _Source,
    keep: Callable[[_Interval], bool],
) -> Iterator[_File]:
    """Files of ``source`` in path order, descending only into partitions that ``keep`` accepts."""
    if source.is_file:
        info = _info(source.fs, source.root, source.display)
        yield _File(info.path, info.size or 0, info.mtime_ns or 0, (), None)
        return
    stack: list[tuple[str, tuple[tuple[str, str], ...], _Interval]] = [(source.root, (), None)]
    while stack:
        directory, parts, interval = stack.pop()
        subdirs = []
        for info in _list_dir(source, directory):
            if info.base_name.startswith(("_", ".")):
                continue
            if info.type == pafs.FileType.Directory:
                kv = _hive(info.base_name)
                sub_parts = (*parts, kv) if kv else parts
                sub_interval = _partition_interval(sub_parts) if source.prune else None
                if sub_interval is None or keep(sub_interval):
                    subdirs.append((info.path, sub_parts, sub_interval))
            elif info.type == pafs.FileType.File and (
                source.pattern is None or fnmatch.fnmatchcase(info.path, source.pattern)
            ):
                yield _File(info.path, info.size or 0, info.mtime_ns or 0, parts, interval)
        stack.extend(reversed(subdirs))
