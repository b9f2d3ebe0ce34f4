"""Discovery: a source path (file, directory, glob or URI) listed with hive-partition pruning,
or a table's data files (``monitor.sources.tables``) pruned by the table's own statistics."""

from __future__ import annotations

import errno
import fnmatch
import functools
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias
from urllib.parse import unquote

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.fs as pafs

from monitor.epoch import to_ns as _to_ns
from monitor.errors import SourceError, SourceNotFoundError
from monitor.sources.translate import _translate
from monitor.sources.watch import Token, Watcher, drain_events, watcher

if TYPE_CHECKING:
    from monitor.sources.model import OutcomeSpec, ScoreSpec

_LOG = logging.getLogger(__name__)
_GLOB_CHARS = re.compile(r"[*?\[]")
_ESCAPED = re.compile(r"\[([*?\[])\]")  # glob.escape's form of a literal glob character


_DATE_VALUE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


_Interval: TypeAlias = tuple[int, int] | None  # [lo, hi) in ns, None = unknown


@dataclass(frozen=True, slots=True)
class _File:
    path: str
    size: int
    mtime_ns: int
    partitions: tuple[tuple[str, str], ...]
    interval: _Interval  # the period its hive partitions spell (checked against its footer)
    bounds: _Interval = None  # a table's statistics of its timestamps (prune only, not checked)
    problem: SourceError | None = None  # a table file that must not be read (raised if planned)
    # a table's row-level deletes: the file's deleted row positions, sorted (None: none)
    deleted: npt.NDArray[np.int64] | None = field(default=None, compare=False)
    # a local file's status change time (0 elsewhere): with size and mtime, what says the file
    # is the one read before; a rewrite of the same size whose mtime was set back (os.utime,
    # cp -p) still moves it, and nothing can set it back
    ctime_ns: int = 0

    @property
    def identity(self) -> tuple[str, int, int, int]:
        """``(path, size, mtime_ns, ctime_ns)``: what every cache of a file's contents keys on
        (footers, row groups, planned files, kept windows); any rewrite changes it."""
        return (self.path, self.size, self.mtime_ns, self.ctime_ns)


@dataclass(frozen=True, slots=True)
class _Source:
    display: str
    fs: pafs.FileSystem
    root: str  # a file, or the directory that is walked
    is_file: bool
    pattern: str | None  # glob over full paths, for glob sources
    prune: bool
    files: tuple[_File, ...] | None = None  # a table's data files: listed, not walked


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


def _first_glob(inner: str) -> int | None:
    """Where the first glob character of ``inner`` is, or None; ``[*]``, ``[?]`` and ``[[]``
    (``glob.escape``'s) are literal characters, not globs."""
    at = 0
    while (match := _GLOB_CHARS.search(inner, at)) is not None:
        if _ESCAPED.match(inner, match.start()) is None:
            return match.start()
        at = match.start() + 3
    return None


def display_path(path: str) -> str:
    """``path`` as messages show it: a literal path without the escapes that keep a config
    directory named like a glob literal (``br[[]1]`` is ``br[1]``); a glob as written."""
    return _ESCAPED.sub(r"\1", path) if _first_glob(path) is None else path


def _resolve(path: str, prune: bool) -> _Source:
    fs, inner = _filesystem(path)
    first = _first_glob(inner)
    if first is None:
        # a config directory named like a glob ('runs[1]/') is escaped where the relative
        # paths are joined to it (monitor.config): literal, it once read another directory
        inner = _ESCAPED.sub(r"\1", inner)
        path = display_path(path)
    else:
        root = _ESCAPED.sub(r"\1", inner[:first].rsplit("/", 1)[0]) or "/"
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
        if isinstance(fs, pafs.LocalFileSystem) and os.path.islink(inner):
            raise _unresolvable(inner, FileNotFoundError(errno.ENOENT, "dangling", inner))
        raise SourceNotFoundError(
            "no such file or directory", path=path, hint="check the path in the configuration"
        )
    return _Source(path, fs, inner, info.type == pafs.FileType.File, None, prune)


# the value Hive and Spark write for a null partition key: a null segment, as a null in a column
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def _hive(name: str) -> tuple[str, str] | None:
    key, sep, value = name.partition("=")
    return (key, unquote(value)) if sep and key else None


@functools.lru_cache(maxsize=1 << 16)  # pure; a daemon walks the same partitions every check
def _partition_interval(parts: tuple[tuple[str, str], ...]) -> _Interval:
    """The UTC period a chain of hive partitions spells, or None when it spells none.

    ``<any>=YYYY-MM-DD`` sets year, month and day, unless an earlier key of the chain set any
    of them (a second date below the first, such as an ingest date, says nothing of the rows'
    times: below ``year=/month=/day=`` it once moved their files to another day, where no
    window read them); ``year=``, ``month=``, ``day=``, ``hour=`` set one field each
    (integers), unless an earlier key set it. The interval is
    the finest valid period whose coarser fields are all known: a level that is no period
    (``hour=24``, ``month=13``) leaves the coarser one, so its files are still checked
    against a period that holds them, never read as from no period at all.
    """
    fields: dict[str, int] = {}
    for key, value in parts:
        m = _DATE_VALUE.match(value)
        if m:
            if not fields.keys() & {"year", "month", "day"}:
                fields.update(year=int(m[1]), month=int(m[2]), day=int(m[3]))
        elif key.lower() in ("year", "month", "day", "hour") and value.isdigit():
            fields.setdefault(key.lower(), int(value))
    if "year" not in fields:
        return None
    period: tuple[datetime, datetime] | None = None
    try:
        year = fields["year"]
        period = datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
        if "month" in fields:
            month = fields["month"]
            lo = datetime(year, month, 1, tzinfo=UTC)
            period = lo, datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
            if "day" in fields:
                lo = datetime(year, month, fields["day"], tzinfo=UTC)
                period = lo, lo + timedelta(days=1)
                if "hour" in fields and fields["hour"] <= 23:
                    lo += timedelta(hours=fields["hour"])
                    period = lo, lo + timedelta(hours=1)
    except (ValueError, OverflowError):
        pass  # the finest valid period found so far
    if period is None:
        return None
    return _to_ns(period[0]), _to_ns(period[1])


@dataclass(frozen=True, slots=True)
class _Entry:
    """One listed name below a source directory, with the symlinks on it already followed.

    ``identity`` is ``(st_dev, st_ino)`` of what the name resolves to on a local filesystem (None
    elsewhere); ``problem`` is set, and nothing else is known, when the name cannot be resolved
    (a dangling symlink, a loop of symlinks, a name that vanished after the listing).
    """

    path: str
    base_name: str
    is_dir: bool
    is_file: bool
    size: int
    mtime_ns: int
    identity: tuple[int, int] | None = None
    problem: SourceError | None = None
    link: bool = False  # the name is a symlink (local filesystems)
    ctime_ns: int = 0  # local filesystems (``_File.ctime_ns``)
    special: bool = False  # a FIFO, socket or device (``problem`` says so): no directory


def _list_dir(source: _Source, directory: str) -> list[_Entry]:
    """The names in ``directory`` in path order, without those starting with ``_`` or ``.``."""
    if isinstance(source.fs, pafs.LocalFileSystem):
        return _list_local(directory)
    try:
        infos = source.fs.get_file_info(pafs.FileSelector(directory, recursive=False))
    except (OSError, pa.ArrowException) as exc:
        raise _translate(exc, directory, "listing the directory") from exc
    entries = []
    for info in sorted(infos, key=lambda i: i.path):
        if info.base_name.startswith(("_", ".")):
            continue
        problem = None
        if info.type == pafs.FileType.NotFound:
            problem = SourceNotFoundError(
                "is listed but cannot be found",
                path=info.path,
                hint="a dangling link, or a name removed during the listing; check the storage",
            )
        entries.append(
            _Entry(
                info.path,
                info.base_name,
                info.type == pafs.FileType.Directory,
                info.type == pafs.FileType.File,
                info.size or 0,
                info.mtime_ns or 0,
                problem=problem,
            )
        )
    return entries


def _list_local(directory: str) -> list[_Entry]:
    """``os.scandir`` rather than pyarrow's listing, which leaves dangling symlinks out silently."""
    try:
        with os.scandir(directory) as it:
            found = sorted(
                (e.path, e.name, e.is_symlink()) for e in it if not e.name.startswith(("_", "."))
            )
    except OSError as exc:
        raise _translate(exc, directory, "listing the directory") from exc
    return [_local_entry(path, name, link) for path, name, link in found]


def _local_entry(path: str, name: str, link: bool) -> _Entry:
    """A listed local name, looked up (symlinks followed)."""
    try:
        st = os.stat(path)  # follows symlinks
    except OSError as exc:
        return _Entry(path, name, False, False, 0, 0, problem=_unresolvable(path, exc), link=link)
    if not stat.S_ISDIR(st.st_mode) and not stat.S_ISREG(st.st_mode):
        # a FIFO, a socket or a device (or a link to one) where data should be: skipped, its
        # partition read as empty and the check said ok on part of the data
        kind = _SPECIAL.get(stat.S_IFMT(st.st_mode), "special file")
        problem = SourceError(
            f"is a {kind}{' (through a symlink)' if link else ''}, not a parquet file or a "
            "directory: the data it stands for cannot be read",
            path=path,
            hint="replace it with the partition's files, or remove it; names starting with "
            "'_' or '.' are skipped",
        )
        return _Entry(path, name, False, False, 0, 0, problem=problem, link=link, special=True)
    return _Entry(
        path,
        name,
        stat.S_ISDIR(st.st_mode),
        stat.S_ISREG(st.st_mode),
        st.st_size,
        st.st_mtime_ns,
        identity=(st.st_dev, st.st_ino),
        link=link,
        ctime_ns=st.st_ctime_ns,
    )


_SPECIAL = {
    stat.S_IFIFO: "named pipe (FIFO)",
    stat.S_IFSOCK: "socket",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
}


def _unresolvable(path: str, exc: OSError) -> SourceError:
    """The error for a listed local name that ``stat`` cannot follow."""
    try:
        target: str | None = os.readlink(path)
    except OSError:
        target = None
    if target is not None and exc.errno == errno.ELOOP:
        return SourceError(
            f"is a symlink to {target!r} that never reaches a file (a loop of symlinks)",
            path=path,
            hint="point the link at a real file or directory, or remove it",
        )
    if target is not None and isinstance(exc, FileNotFoundError):
        return SourceNotFoundError(
            f"is a dangling symlink: its target {target!r} does not exist (an unmounted volume "
            "or a removed partition?); its data cannot be read",
            path=path,
            hint="mount or restore the target, or remove the link",
        )
    return _translate(exc, path, "following the name listed in its directory")


class _Seen:
    """The real directories and files one walk has met, so that each is read once.

    On a local filesystem a symlink can make a directory or file appear under several names, or a
    directory appear inside itself (``loop -> ..``): the first name in walk order is read, later
    ones are skipped and logged. Elsewhere (object stores) there are no links and nothing is kept.
    """

    def __init__(self, source: _Source) -> None:
        self.local = isinstance(source.fs, pafs.LocalFileSystem)
        self._dirs: dict[tuple[int, int], str] = {}
        self._files: dict[tuple[int, int], str] = {}

    def first_dir(self, path: str, identity: tuple[int, int] | None) -> bool:
        """True the first time the real directory ``identity`` is entered (always when unknown)."""
        if not self.local:
            return True
        if identity is None:
            try:
                st = os.stat(path)
            except OSError as exc:
                raise _translate(exc, path, "looking the directory up") from exc
            identity = (st.st_dev, st.st_ino)
        first = self._dirs.setdefault(identity, path)
        if first == path:
            return True
        _warn_once(
            path,
            f"{path}: skipped, it is the directory {first} again (a symlink loop, or a second "
            "link to it); each real directory is read once",
        )
        return False

    def adopt(self, whole: _Subtree) -> bool:
        """Count a whole subtree's directories and files as met, unless one was met already
        (then False: the walk enters it directory by directory)."""
        if not self.local:
            return False
        if not self._dirs.keys().isdisjoint(whole.dirs.keys()):
            return False
        if not self._files.keys().isdisjoint(whole.file_ids.keys()):
            return False
        self._dirs.update(whole.dirs)
        self._files.update(whole.file_ids)
        return True

    def first_file(self, path: str, identity: tuple[int, int] | None) -> bool:
        """True the first time the real file ``identity`` (None: unknown) is met."""
        if identity is None:
            return True
        first = self._files.setdefault(identity, path)
        if first == path:
            return True
        _LOG.debug("%s: skipped, it is the file %s again (a link); read once", path, first)
        return False


_WARNED: set[str] = set()
_WARNED_LOCK = threading.Lock()


def _warn_once(key: str, message: str) -> None:
    """Log a skipped repeat once per process and path, not at every check."""
    with _WARNED_LOCK:
        if key in _WARNED or len(_WARNED) > 10_000:
            return
        _WARNED.add(key)
    _LOG.warning("%s", message)


_Pending: TypeAlias = tuple[
    str, tuple[tuple[str, str], ...], _Interval, tuple[int, int] | None, SourceError | None
]


def _walk(
    source: _Source,
    keep: Callable[[_Interval], bool],
    *,
    newest_first: bool = False,
    on_problem: Callable[[SourceError], None] | None = None,
    within: tuple[int, int] | None = None,
) -> Iterator[_File]:
    """Files of ``source`` (see ``_walk_parts``), a whole subtree's one by one."""
    for item in _walk_parts(
        source, keep, newest_first=newest_first, on_problem=on_problem, within=within
    ):
        if isinstance(item, _Subtree):
            yield from item.files
        else:
            yield item


def _single_file(source: _Source) -> _File:
    """The one file of a source that names a file. On a local filesystem its identity carries
    the ctime as a walked file's does: a rewrite of the same size whose mtime was set back is
    a new file to every cache, here too."""
    if isinstance(source.fs, pafs.LocalFileSystem):
        try:
            st = os.stat(source.root)
        except OSError as exc:
            raise _translate(exc, source.display, "looking the path up") from exc
        return _File(source.root, st.st_size, st.st_mtime_ns, (), None, ctime_ns=st.st_ctime_ns)
    info = _info(source.fs, source.root, source.display)
    return _File(info.path, info.size or 0, info.mtime_ns or 0, (), None)


def _walk_parts(
    source: _Source,
    keep: Callable[[_Interval], bool],
    *,
    newest_first: bool = False,
    on_problem: Callable[[SourceError], None] | None = None,
    within: tuple[int, int] | tuple[tuple[int, int], ...] | None = None,
) -> Iterator[_File | _Subtree]:
    """Files of ``source``, descending only into partitions that ``keep`` accepts.

    In path order, or with ``newest_first`` the partitions with the latest period first (then
    those whose period is unknown). ``keep`` is asked just before a directory is listed, so a
    caller may tighten it while it consumes the files. Each real directory and file is met once
    (see ``_Seen``). A name that cannot be resolved (a dangling link, an unreadable partition)
    raises its ``SourceError`` when the walk would enter it; a dangling link whose hive partition
    lies outside what ``keep`` accepts is pruned like any other partition. With ``on_problem``
    such errors are handed to it instead and the walk goes on (``validate --sources``).

    ``within`` = [lo, hi), or several such: the caller's ``keep`` accepts every partition
    inside one of them. A watched local partition inside one whose whole subtree is unchanged
    since the last walk is then handed out whole, as one ``_Subtree`` (the same object while
    it is unchanged), without a look at each directory below it. (Two windows with a gap are
    two spans, not their hull: a partition of the hull handed out whole once brought the
    gap's files with it.)
    """
    spans: tuple[tuple[int, int], ...] = ()
    if within is not None:
        spans = (within,) if isinstance(within[0], int) else within
    if source.files is not None:
        yield from _table_files(source.files, keep, newest_first, on_problem)
        return
    if source.is_file:
        yield _single_file(source)
        return
    seen = _Seen(source)
    notify = None
    if seen.local:
        drain_events()  # every change made before this walk shows in its directory's token
        if within is not None and not newest_first and on_problem is None:
            notify = watcher()
    root_identity = None
    if seen.local:  # the root's own, looked up at every walk: a watch below it vouches for
        # what is below it only while the path still leads to the same directory
        try:
            st = os.stat(source.root)
        except OSError as exc:
            raise _translate(exc, source.root, "looking the directory up") from exc
        root_identity = (st.st_dev, st.st_ino)
    stack: list[_Pending] = [(source.root, (), None, root_identity, None)]
    while stack:
        directory, parts, interval, identity, problem = stack.pop()
        if interval is not None and not keep(interval):
            continue
        if (
            notify is not None
            and interval is not None
            and identity is not None
            and problem is None
            and (span := _span_holding(spans, interval)) is not None
        ):
            whole = _subtree(source, directory, parts, interval, identity, notify)
            if whole is not None and _inside(whole.hull, span) and seen.adopt(whole):
                yield whole
                continue
        try:
            if problem is not None:
                raise problem
            if not seen.first_dir(directory, identity):
                continue
            children, files, _ = _children(source, directory, parts, interval, identity)
        except SourceError as exc:
            if on_problem is None:
                raise
            on_problem(exc)
            continue
        for f, file_identity in files:
            if seen.first_file(f.path, file_identity):
                yield f
        subdirs = list(children)
        if newest_first:
            # pop() takes the last: known periods sorted by end, unknown ones after them.
            subdirs.sort(key=lambda s: (s[2] is None, s[2][1] if s[2] is not None else 0))
            stack.extend(subdirs)
        else:
            stack.extend(reversed(subdirs))


_Found: TypeAlias = tuple[_File, tuple[int, int] | None]  # a file and its identity (local)


@dataclass(slots=True)
class _Walked:
    """A local directory's children as a walk found them, valid while the directory's
    ``signature`` (device, inode, mtime, ctime) is unchanged: adding, removing or renaming a
    name changes its mtime. Its files are looked up again at every walk (a file rewritten in
    place keeps its directory's mtime); its subdirectories' own listings are checked when the
    walk enters them."""

    signature: tuple[int, int, int, int]
    subdirs: tuple[_Pending, ...]
    files: list[_Found]
    # the directory's inotify token when its listing and files were last checked (see
    # ``monitor.sources.watch``): while the token is unchanged nothing in it changed
    token: Token | None = None


# A directory modified this close to its listing may change again within the same tick of the
# filesystem's clock (Linux stamps with a coarse clock; others have 1-2 s), leaving its mtime as
# it was: such a listing is not reused ("racy git"). One modified earlier gets a new mtime from
# any later change.
_RACY_NS = 3_000_000_000
_WALKED: dict[tuple[object, ...], _Walked] = {}
_WALKED_MAX = 1 << 16
_WALKED_LOCK = threading.Lock()


def clear_listings() -> None:
    """Forget every directory listing kept for the next walk."""
    with _WALKED_LOCK:
        _WALKED.clear()
        _SUBTREES.clear()


def _children(
    source: _Source,
    directory: str,
    parts: tuple[tuple[str, str], ...],
    interval: _Interval,
    identity: tuple[int, int] | None = None,
) -> tuple[tuple[_Pending, ...], list[_Found], bool]:
    """The subdirectories (to walk) and files (pattern applied) of ``directory``, and whether
    a watch vouches for them (``monitor.sources.watch``: watched before they were checked).
    ``identity``: what the path leads to now (``(st_dev, st_ino)``, from the parent's listing
    or the walk's look at its root); a listing kept for another directory at this path (a
    dataset swapped in by renames, a symlink flipped, a mount) is never reused.

    A daemon walks the same partitions at every check: on a local filesystem a directory whose
    listing is kept (``_Walked``) and unchanged is not listed again; only its files are looked
    up (one ``stat`` each), and once it is watched, while no event came for it, not even that.
    Directories holding symlinks or names that do not resolve are listed every time."""
    local = isinstance(source.fs, pafs.LocalFileSystem)
    key = (directory, parts, source.prune, source.pattern)
    signature = None
    if local:
        with _WALKED_LOCK:
            walked = _WALKED.get(key)
        if walked is not None and identity is not None and walked.signature[:2] != identity:
            walked = None  # another directory at this path now
        notify = watcher() if walked is not None else None
        token = None
        if notify is not None and walked is not None:
            if walked.token is not None and notify.current(directory) == walked.token:
                notify.touch(directory)  # in use: its watch is not released as idle
                return walked.subdirs, walked.files, True  # watched, no event since: unchanged
            # watched from before the look-ups below: a change after them raises an event
            token = notify.watch(directory, identity or walked.signature[:2])
        try:
            st = os.stat(directory)
        except OSError as exc:
            raise _translate(exc, directory, "listing the directory") from exc
        signature = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        if walked is not None and walked.signature == signature:
            looked = _restat(walked.files, parts, interval)
            if looked is not None:
                files, linked = looked
                walked.files = files
                # a file with another link may change through another directory, unseen here
                walked.token = token if notify is not None and not linked else None
                return walked.subdirs, files, walked.token is not None
    listed_ns = time.time_ns()
    subdirs: list[_Pending] = []
    found: list[_Found] = []
    reusable = local
    for entry in _list_dir(source, directory):
        if source.pattern is not None and (
            not fnmatch.fnmatchcase(entry.path, source.pattern)
            if entry.special  # it holds nothing below it: judged as a file is
            else not entry.is_file and not _may_hold(entry.path, source.pattern)
        ):
            # no match of the glob can lie below it: not entered, nor raised for (a dangling
            # link or an unreadable lost+found beside the matches failed every check)
            continue
        reusable = reusable and not entry.link and entry.problem is None
        if entry.is_dir or entry.problem is not None:
            kv = _hive(entry.base_name)
            sub_parts = (*parts, kv) if kv else parts
            sub_interval = _partition_interval(sub_parts) if source.prune else None
            subdirs.append((entry.path, sub_parts, sub_interval, entry.identity, entry.problem))
        elif entry.is_file and (
            source.pattern is None or fnmatch.fnmatchcase(entry.path, source.pattern)
        ):
            f = _File(
                entry.path, entry.size, entry.mtime_ns, parts, interval, ctime_ns=entry.ctime_ns
            )
            found.append((f, entry.identity))
    children = tuple(subdirs)
    if reusable and signature is not None and listed_ns - signature[2] > _RACY_NS:
        with _WALKED_LOCK:
            if len(_WALKED) >= _WALKED_MAX:
                _WALKED.clear()
            _WALKED[key] = _Walked(signature, children, found)
    return children, found, False


def _restat(
    files: list[_Found], parts: tuple[tuple[str, str], ...], interval: _Interval
) -> tuple[list[_Found], bool] | None:
    """``files`` looked up again (a new size, mtime or ctime: a new ``_File``), and whether one has
    more than one link; None when one is no longer a regular file (the directory is then listed
    again)."""
    out: list[_Found] = []
    linked = False
    for f, _ in files:
        try:
            st = os.stat(f.path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        if (f.path, st.st_size, st.st_mtime_ns, st.st_ctime_ns) != f.identity:
            f = _File(f.path, st.st_size, st.st_mtime_ns, parts, interval, ctime_ns=st.st_ctime_ns)
        out.append((f, (st.st_dev, st.st_ino)))
        linked = linked or st.st_nlink > 1
    return out, linked


@dataclass(frozen=True, slots=True)
class _Subtree:
    """Every file at or below a local directory, in walk order, with the identities of its
    directories and files and the hull of their partitions' periods; ``token`` (the watcher's
    ``subtree`` token taken before any of it was looked at) vouches for it while unchanged
    (None: it was not all watched, and is not kept)."""

    token: Token | None
    files: tuple[_File, ...]
    dirs: dict[tuple[int, int], str]
    file_ids: dict[tuple[int, int], str]
    hull: _Interval


_SUBTREES: dict[tuple[object, ...], _Subtree] = {}


def _subtree(
    source: _Source,
    directory: str,
    parts: tuple[tuple[str, str], ...],
    interval: _Interval,
    identity: tuple[int, int],
    notify: Watcher,
) -> _Subtree | None:
    """The subtree at ``directory`` (whose identity is ``identity``): kept whole while its
    watcher token is unchanged, else gathered again. None when it is not watched yet, or holds
    a name that does not resolve or a directory or file twice (a link): the walk then enters
    it directory by directory, pruning and raising as it always does."""
    key = (directory, parts, source.prune, source.pattern)
    token = notify.subtree(directory)
    if token is None:
        return None
    with _WALKED_LOCK:
        held = _SUBTREES.get(key)
    if held is not None and held.token == token and held.dirs.get(identity) == directory:
        notify.touch(directory, subtree=True)  # every watch below it is in use
        return held  # unchanged, and still the directory the path leads to
    files: list[_File] = []
    dirs: dict[tuple[int, int], str] = {}
    file_ids: dict[tuple[int, int], str] = {}
    hull = [interval[0], interval[1]] if interval is not None else None
    trusted = True
    pending: list[_Pending] = [(directory, parts, interval, identity, None)]
    while pending:
        d, d_parts, d_interval, d_identity, problem = pending.pop()
        if problem is not None or d_identity is None or d_identity in dirs:
            return None
        dirs[d_identity] = d
        try:
            children, found, vouched = _children(source, d, d_parts, d_interval, d_identity)
        except SourceError:
            return None
        trusted = trusted and vouched
        for f, file_identity in found:
            if file_identity is None or file_identity in file_ids:
                return None
            file_ids[file_identity] = f.path
            files.append(f)
        for child in children:
            child_interval = child[2]
            if child_interval is not None and hull is not None:
                hull = [min(hull[0], child_interval[0]), max(hull[1], child_interval[1])]
            elif child_interval is None:
                hull = None
        pending.extend(reversed(children))
    whole = _Subtree(
        token if trusted else None,
        tuple(files),
        dirs,
        file_ids,
        None if hull is None else (hull[0], hull[1]),
    )
    if trusted:
        with _WALKED_LOCK:
            if len(_SUBTREES) >= _WALKED_MAX:
                _SUBTREES.clear()
            _SUBTREES[key] = whole
    return whole


@functools.lru_cache(maxsize=256)
def _literal_prefix(pattern: str) -> str:
    """What every match of the glob ``pattern`` starts with: its text before the first glob
    character (``[*]``, ``[?]``, ``[[]`` taken literally)."""
    first = _first_glob(pattern)
    return _ESCAPED.sub(r"\1", pattern if first is None else pattern[:first])


def _may_hold(directory: str, pattern: str) -> bool:
    """Whether a match of ``pattern`` may lie below ``directory`` (``*`` matches '/' too, so
    only the literal prefix rules a directory out)."""
    below, prefix = directory.rstrip("/") + "/", _literal_prefix(pattern)
    return below.startswith(prefix) or prefix.startswith(below)


def _span_holding(
    spans: tuple[tuple[int, int], ...], interval: tuple[int, int]
) -> tuple[int, int] | None:
    """The first of ``spans`` that holds ``interval`` whole, or None."""
    for span in spans:
        if span[0] <= interval[0] and interval[1] <= span[1]:
            return span
    return None


def _inside(hull: _Interval, within: tuple[int, int]) -> bool:
    return hull is not None and within[0] <= hull[0] and hull[1] <= within[1]


def _table_files(
    files: tuple[_File, ...],
    keep: Callable[[_Interval], bool],
    newest_first: bool,
    on_problem: Callable[[SourceError], None] | None,
) -> Iterator[_File]:
    """A table's files that ``keep`` accepts by partition period and by statistics, in the
    table's order or, with ``newest_first``, by the end of their statistics or else of their
    partition period (unknown last);
    a file with a ``problem`` raises it (or hands it to ``on_problem``) when it would be read."""
    order = list(files)
    if newest_first:

        def end(f: _File) -> tuple[bool, int]:
            period = f.bounds or f.interval
            return period is None, -(period[1] if period else 0)

        order.sort(key=end)
    for f in order:
        if f.interval is not None and not keep(f.interval):
            continue
        if f.bounds is not None and not keep(f.bounds):
            continue
        if f.problem is not None:
            if on_problem is None:
                raise f.problem
            on_problem(f.problem)
            continue
        yield f


def _open_source(spec: ScoreSpec | OutcomeSpec, *, prune: bool | None = None) -> _Source:
    """The source of a spec: a parquet path resolved, or a table's snapshot listed."""
    prune = spec.prune_partitions if prune is None else prune
    if spec.format == "parquet":
        return _resolve(spec.path, prune)
    from monitor.sources.tables import _table_source  # the optional extra's only importer

    return _table_source(spec, prune)
