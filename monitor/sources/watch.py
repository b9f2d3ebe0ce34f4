"""Change notification for local source directories: Linux inotify, through ctypes.

A daemon walks the same partitions at every check. Without notification a walk looks each kept
directory and each of its files up again (a ``stat`` each) only to learn that nothing changed: a
cost of every partition of the windows at every check. With a watch on a directory the kernel
queues an event for every change to the directory or to a name in it, during the system call
that makes the change (``IN_CREATE``, ``IN_DELETE``, ``IN_MOVED_FROM``/``TO``, ``IN_MODIFY``,
``IN_ATTRIB``, ``IN_CLOSE_WRITE``, ``IN_DELETE_SELF``, ``IN_MOVE_SELF``). A walk drains the
queue first; a directory whose watch has seen no event since its listing was last checked is
reused with no system call at all (``paths._children``).

A directory's *token* is ``(epoch, watch descriptor, events seen)``: any event for it, a watch
that went away (the directory was deleted, moved or unmounted) or a queue overflow
(``IN_Q_OVERFLOW``: every token of the epoch is void) changes it. A listing is trusted only
under the token taken *before* it was checked, so a change racing the check shows at the next
walk.

Trusted only where inotify sees every change: local filesystems (ext2/3/4, xfs, btrfs, tmpfs,
overlayfs, zfs, f2fs, bcachefs, by ``statfs``'s ``f_type``). On NFS, SMB, FUSE and other
network or userspace filesystems a change made elsewhere raises no event, so no watch is added
there and the walk keeps looking names up. Not seen anywhere: writes through a memory mapping
(parquet writers do not write so) and writes through a hard link in another directory (the walk
trusts no directory holding a file with more than one link). A watch that cannot be added (the
``fs.inotify.max_user_watches`` limit, a name that is no directory) is logged once and its
directory looked up as before. A watch no walk asked for in two days is released (a partition
that left every window), and at the process's bound (65,536) or the kernel's limit the watch
unused longest gives way to a new one. Nothing here is required: off Linux, or with
``MONITOR_INOTIFY=0`` in the environment, ``watcher()`` is None and every walk looks up.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import struct
import sys
import threading
import time
from collections import OrderedDict
from typing import TypeAlias

_LOG = logging.getLogger(__name__)

# <sys/inotify.h>
_IN_MODIFY = 0x00000002
_IN_ATTRIB = 0x00000004
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_FROM = 0x00000040
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_DELETE = 0x00000200
_IN_DELETE_SELF = 0x00000400
_IN_MOVE_SELF = 0x00000800
_IN_UNMOUNT = 0x00002000
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_IN_ONLYDIR = 0x01000000
_IN_DONT_FOLLOW = 0x02000000
_MASK = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
    | _IN_DONT_FOLLOW
)
_GONE = _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_UNMOUNT | _IN_IGNORED
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name

# statfs f_type of filesystems whose changes all pass through this kernel (linux/magic.h)
LOCAL_FILESYSTEMS = frozenset(
    {
        0xEF53,  # ext2, ext3, ext4
        0x58465342,  # xfs
        0x9123683E,  # btrfs
        0x01021994,  # tmpfs
        0x794C7630,  # overlayfs
        0x2FC12FC1,  # zfs
        0xF2F52010,  # f2fs
        0xCA451A4E,  # bcachefs
    }
)

_MAX_WATCHES = 1 << 16  # a process's own bound, below the kernel's per-user limit
# a watch no walk has asked for in this long is removed (a partition that left every window:
# kept, the watches of every partition ever walked used up the per-user limit, and then no new
# partition was watched); at the bound, the one unused longest gives way to a new one
_IDLE_SECONDS = 2 * 86400.0
_SWEEP_SECONDS = 3600.0
_clock = time.monotonic

Token: TypeAlias = tuple[int, int, int]  # (epoch, watch descriptor, events seen)


def _identity(directory: str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of what ``directory`` leads to now (None: nothing)."""
    try:
        st = os.stat(directory)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


class Watcher:
    """One inotify instance for the process's source directories (thread-safe)."""

    def __init__(self, libc: ctypes.CDLL, fd: int) -> None:
        self._libc = libc
        self._fd = fd
        self._lock = threading.Lock()
        self._epoch = 0
        # each registration's counts start at a base of their own: a path watched again under
        # the same descriptor (the same directory) never hands out a token it handed before
        self._registrations = 0
        # directory -> [wd, events seen for it, events seen for it or below it, st_dev, st_ino]
        self._by_dir: dict[str, list[int]] = {}
        self._by_wd: dict[int, str] = {}
        self._untrusted: set[str] = set()  # not watchable: looked up at every walk
        self._fs: dict[int, bool] = {}  # st_dev -> a local filesystem
        self._full = False  # the kernel's watch limit was reached (logged once)
        self._used: OrderedDict[str, float] = OrderedDict()  # watched directory -> last asked
        self._handed: dict[str, float] = {}  # a subtree handed out whole -> when (``touch``)
        self._swept = _clock()

    def drain(self) -> None:
        """Read every queued event (non-blocking): each changes its directory's token."""
        with self._lock:
            self._drain()

    def _drain(self) -> None:
        while True:
            try:
                buf = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            off = 0
            while off + _EVENT.size <= len(buf):
                wd, mask, _cookie, length = _EVENT.unpack_from(buf, off)
                off += _EVENT.size + length
                if mask & _IN_Q_OVERFLOW:
                    self._epoch += 1  # events were lost: no listing is trusted any more
                    continue
                directory = self._by_wd.get(wd)
                if directory is None:
                    continue
                held = self._by_dir.get(directory)
                if held is None or held[0] != wd:
                    # the maps disagree (never expected): no token is trusted any more, and
                    # the rest of the buffer is still read
                    self._by_wd.pop(wd, None)
                    self._epoch += 1
                    continue
                self._below(directory)
                if mask & _GONE:  # deleted, moved or unmounted: the path is no longer this
                    self._forget(wd, directory, remove=not mask & _IN_IGNORED)
                else:
                    held[1] += 1

    def _below(self, directory: str) -> None:
        """Count a change below each watched directory above ``directory`` (and in it)."""
        path = directory
        while True:
            held = self._by_dir.get(path)
            if held is not None:
                held[2] += 1
            parent = os.path.dirname(path)
            if parent == path:
                return
            path = parent

    def _forget(self, wd: int, directory: str, *, remove: bool) -> None:
        self._by_wd.pop(wd, None)
        held = self._by_dir.get(directory)
        if held is not None and held[0] == wd:
            del self._by_dir[directory]
            self._used.pop(directory, None)
        if remove:
            self._libc.inotify_rm_watch(self._fd, wd)  # IN_IGNORED follows; nothing to learn

    def _release(self, directory: str) -> None:
        """Stop watching ``directory`` (idle, or giving way at the bound): a subtree above it
        is no longer wholly watched, so its token changes."""
        held = self._by_dir.get(directory)
        if held is None:
            self._used.pop(directory, None)
            return
        self._forget(held[0], directory, remove=True)
        self._below(os.path.dirname(directory))

    def touch(self, directory: str, *, subtree: bool = False) -> None:
        """A walk used the watch of ``directory`` without asking ``watch`` (its listing, or with
        ``subtree`` everything below it, unchanged): it is in use, not idle."""
        now = _clock()
        with self._lock:
            if subtree:
                self._handed[directory] = now
            elif directory in self._used:
                self._used[directory] = now
                self._used.move_to_end(directory)

    def _sweep(self, now: float) -> None:
        """Release the watches no walk asked for within ``_IDLE_SECONDS`` (hourly); one below a
        subtree handed out whole within it is in use."""
        self._swept = now
        self._handed = {d: t for d, t in self._handed.items() if now - t <= _IDLE_SECONDS}
        while self._used:
            directory, used = next(iter(self._used.items()))
            if now - used <= _IDLE_SECONDS:
                return
            if self._handed and self._in_handed(directory):
                self._used[directory] = now
                self._used.move_to_end(directory)
                continue
            self._release(directory)

    def _in_handed(self, directory: str) -> bool:
        path = directory
        while True:
            if path in self._handed:
                return True
            parent = os.path.dirname(path)
            if parent == path:
                return False
            path = parent

    def current(self, directory: str) -> Token | None:
        """The directory's token as of the last ``drain`` (None: not watched)."""
        held = self._by_dir.get(directory)
        return None if held is None else (self._epoch, held[0], held[1])

    def subtree(self, directory: str) -> Token | None:
        """The token of everything at or below the directory as of the last ``drain``: any
        event for a watched directory below it changes it too (None: not watched). It vouches
        for a subtree only if every directory in it was watched when it was looked at."""
        held = self._by_dir.get(directory)
        return None if held is None else (self._epoch, held[0], held[2])

    def watch(self, directory: str, identity: tuple[int, int]) -> Token | None:
        """Watch ``directory`` (the directory ``identity`` = ``(st_dev, st_ino)``) if it is not
        watched yet, and return its token (None: it cannot be watched). Call it *before*
        checking the listing the token vouches for: a change after this call raises an event.

        A watch belongs to a directory, not to its path: when the path now leads to another
        directory (its parent renamed over, a symlink above it flipped, a file system mounted
        on it: none raises an event for the watched one) the old watch is dropped and the new
        directory watched."""
        with self._lock:
            self._drain()
            now = _clock()
            if now - self._swept > _SWEEP_SECONDS:
                self._sweep(now)
            held = self._by_dir.get(directory)
            if held is not None and (held[3], held[4]) != identity:
                self._forget(held[0], directory, remove=True)
            token = self.current(directory)
            if token is not None:
                self._used[directory] = now
                self._used.move_to_end(directory)
                return token
            if directory in self._untrusted:
                return None
            dev = identity[0]
            if not self._local(directory, dev):
                self._distrust(directory)
                return None
            if len(self._by_dir) >= _MAX_WATCHES and self._used:
                self._release(next(iter(self._used)))  # the one unused longest gives way
            wd = self._libc.inotify_add_watch(self._fd, os.fsencode(directory), _MASK)
            if wd < 0 and ctypes.get_errno() == errno.ENOSPC and self._used:
                # the per-user limit (other processes hold watches too): give one up, once
                self._release(next(iter(self._used)))
                wd = self._libc.inotify_add_watch(self._fd, os.fsencode(directory), _MASK)
            if wd < 0:
                err = ctypes.get_errno()
                if err == errno.ENOSPC and not self._full:
                    self._full = True  # said once: every later directory would say it again
                    _LOG.warning(
                        "inotify watch limit reached (fs.inotify.max_user_watches): %s and "
                        "further directories are looked up at every walk",
                        directory,
                    )
                self._distrust(directory)
                return None
            stale = self._by_wd.get(wd)  # the same directory, watched under another path
            if stale is not None and stale != directory:
                if _identity(stale) == identity:
                    # a link (or a bind mount): both paths lead to it; the first keeps the
                    # watch, this one is looked up at every walk. Taken over, the first's
                    # entry was dropped while its descriptor still named it: the next event
                    # in it raised KeyError, and the events after it were lost
                    self._distrust(directory)
                    return None
                # renamed (its parent moved, no event for it): the watch is this path's now
                self._by_dir.pop(stale, None)
                self._used.pop(stale, None)
                self._below(os.path.dirname(stale))
            self._registrations += 1
            base = self._registrations << 32
            self._by_wd[wd] = directory
            self._by_dir[directory] = [wd, base, base, identity[0], identity[1]]
            self._used[directory] = now
            self._below(os.path.dirname(directory))  # a subtree above gains a watch
            return (self._epoch, wd, base)

    def _distrust(self, directory: str) -> None:
        """Look ``directory`` up at every walk from now on (bounded: on a network file system
        every directory ever walked is one; past the bound they are forgotten and tried
        again)."""
        if len(self._untrusted) >= _MAX_WATCHES:
            self._untrusted.clear()
        self._untrusted.add(directory)

    def _local(self, directory: str, dev: int) -> bool:
        local = self._fs.get(dev)
        if local is None:
            local = self._fs[dev] = _fs_type(self._libc, directory) in LOCAL_FILESYSTEMS
        return local

    @property
    def watched(self) -> int:
        """Directories watched now."""
        return len(self._by_dir)

    def close(self) -> None:
        with self._lock:
            os.close(self._fd)
            self._by_dir.clear()
            self._by_wd.clear()
            self._used.clear()


def _fs_type(libc: ctypes.CDLL, path: str) -> int | None:
    """``statfs(path).f_type`` (the first field, a C long), or None when it fails."""
    buf = ctypes.create_string_buffer(256)  # struct statfs is 120 bytes on 64-bit Linux
    if libc.statfs(os.fsencode(path), buf) != 0:
        return None
    (f_type,) = struct.unpack_from("l", buf.raw)
    return int(f_type) & 0xFFFFFFFF


_WATCHER: Watcher | None = None
_STARTED = False
_START_LOCK = threading.Lock()


def watcher() -> Watcher | None:
    """The process's watcher, started on first use; None off Linux, where inotify cannot be
    started, or with ``MONITOR_INOTIFY=0``."""
    global _WATCHER, _STARTED
    if _STARTED:
        return _WATCHER
    with _START_LOCK:
        if not _STARTED:
            _WATCHER = _start()
            _STARTED = True
    return _WATCHER


def drain_events() -> None:
    """Drain the process's watcher, if one was started (a walk does this first)."""
    if _WATCHER is not None:
        _WATCHER.drain()


def _start() -> Watcher | None:
    if not sys.platform.startswith("linux") or os.environ.get("MONITOR_INOTIFY", "1") == "0":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        why = None if fd >= 0 else os.strerror(ctypes.get_errno())
    except (OSError, AttributeError) as exc:
        why = str(exc)
    if why is not None:
        _LOG.warning(
            "inotify unavailable (%s): source directories are looked up at every walk", why
        )
        return None
    return Watcher(libc, fd)
