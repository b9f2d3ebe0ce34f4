"""The frozen grid and the bucket cache: their files (npz, atomic) and the memory LRU."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import logging
import os
import re
import threading
import time
import tokenize
import zipfile
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from monitor.epoch import from_ns, to_ns
from monitor.files import NotRegularFile, atomic_write, read_regular
from monitor.stats import (
    Cells,
    Grid,
    bin_ends,
)

log = logging.getLogger("monitor.incremental")

_FORMAT = 1  # the grid file's
# a bucket entry's (1: .npz files, removed when a cache opens; 2: without the checksum; 3: a
# row group's invalid scores in its first bucket, not each in its own; 2 and 3 are dropped
# without a warning when met, as an entry of another grid would be)
_BUCKET_FORMAT = 4
_OLD_BUCKET_FORMATS = (2, 3)
_MAGIC = b"RMBUCKET"
_SUFFIX = ".bucket"
# free bytes the cache leaves on its volume (at most a tenth of the volume): the state files
# share it, and a cache grown into a full volume left every state save failing
_RESERVE = 64 << 20
_INODES = 1024  # inodes the cache leaves free on its volume (at most a tenth of them)
# what numpy (a grid file) or a bucket entry's reader raises on a damaged or foreign file
_CORRUPT = (
    ValueError,
    KeyError,
    IndexError,
    TypeError,
    OSError,
    EOFError,
    zipfile.BadZipFile,
    RecursionError,  # a JSON header nested past the parser's depth (it failed every check)
    OverflowError,
    # numpy parses a .npy header, and a bucket header's dtype string (np.dtype(",u4")), as a
    # Python literal: a flipped bit there
    SyntaxError,
    tokenize.TokenError,
)
_READ_ERRORS = 8  # cache entries in a row that cannot be read before the disk is left alone
# the most a grid file or a bucket entry is read of (a grid of every distinct value of a
# large reference is tens of MB); past it the file is damaged, as a FIFO in its place is
MAX_GRID_BYTES = MAX_ENTRY_BYTES = 1 << 32


@dataclass(frozen=True, slots=True, eq=False)
class FrozenGrid:
    """A monitor's frozen grid: points, each segment's PSI edges (grid points), when and from
    which reference window and how many sampled rows it was built, and ``key``, the identity
    its bucket summaries are cached under (points, score settings, bucket length).
    ``reference_print``: the digest of a fixed reference's files a full grid was built from
    ("" otherwise): a file rewritten with as many rows changes it, and the grid is rebuilt."""

    grid: Grid
    edges: Mapping[str, NDArray[np.float64]]
    built_at: datetime
    reference_start: datetime
    reference_end: datetime
    sample_rows: int
    key: str
    reference_rows: int = 0
    reference_print: str = ""

    def to_bytes(self) -> bytes:
        names = sorted(self.edges)
        meta = {
            "format": _FORMAT,
            "built_at": to_ns(self.built_at),
            "reference": [to_ns(self.reference_start), to_ns(self.reference_end)],
            "sample_rows": self.sample_rows,
            "reference_rows": self.reference_rows,
            "reference_print": self.reference_print,
            "key": self.key,
            "segments": names,
        }
        arrays = {f"edges_{i}": self.edges[n] for i, n in enumerate(names)}
        buf = io.BytesIO()
        np.savez(buf, points=self.grid.points, meta=np.array(json.dumps(meta)), **arrays)  # type: ignore[arg-type]
        return buf.getvalue()

    @staticmethod
    def from_bytes(data: bytes) -> FrozenGrid:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            if meta.get("format") != _FORMAT:
                raise ValueError(f"format {meta.get('format')!r}, expected {_FORMAT}")
            grid = Grid(np.asarray(z["points"], dtype=np.float64))
            edges = {
                n: np.asarray(z[f"edges_{i}"], dtype=np.float64)
                for i, n in enumerate(meta["segments"])
            }
        bin_check = [bin_ends(grid, e) for e in edges.values()]  # every edge a grid point
        del bin_check
        return FrozenGrid(
            grid=grid,
            edges=edges,
            built_at=from_ns(int(meta["built_at"])),
            reference_start=from_ns(int(meta["reference"][0])),
            reference_end=from_ns(int(meta["reference"][1])),
            sample_rows=int(meta["sample_rows"]),
            key=str(meta["key"]),
            reference_rows=int(meta["reference_rows"]),
            reference_print=str(meta.get("reference_print", "")),
        )


@dataclass(frozen=True, slots=True, eq=False)
class Bucket:
    """One bucket's non-zero cells per segment (none: no valid score in it) and its invalid
    rows that no summary holds (row groups without one valid score)."""

    start_ns: int
    summaries: Mapping[str, Cells]
    unplaced: int = 0
    bins: dict[bytes, dict[str, NDArray[np.int64]]] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Its memory as the cache counts it: the cells' arrays, about 512 bytes of Python and
        numpy objects a segment and a bucket, and its bins memo at the most it holds (2 S + 2
        edge sets, a row of about 300 bytes each). The arrays alone, as counted before, were
        a third of what tracemalloc measured for minute buckets."""
        k = len(self.summaries)
        return sum(c.nbytes for c in self.summaries.values()) + 512 * (k + 1) + 300 * (2 * k + 2)

    def to_bytes(self, key: str, fingerprint: str) -> bytes:
        """The cache entry: ``_MAGIC``, the JSON header's length (uint32, little-endian), the
        header (with ``sum``, ``_checksum`` of the rest of the header and the cells), then each
        segment's index steps and counts, raw, in the header's dtypes (the narrowest unsigned
        type that holds them). Raw bytes, not ``np.savez``: the zip
        container cost half of writing an hour's bucket (0.25 of 0.45 ms at 18k points)."""
        names = sorted(self.summaries)
        cells = [self.summaries[n] for n in names]
        arrays: list[NDArray[np.integer]] = []
        for c in cells:  # index_i holds each index less the one before (the first: + 1)
            arrays.append(_narrow(np.diff(c.index, prepend=-1)))
            arrays.append(_narrow(c.count))
        meta = {
            "format": _BUCKET_FORMAT,
            "grid": key,
            "fingerprint": fingerprint,
            "start_ns": self.start_ns,
            "unplaced": self.unplaced,
            "segments": names,
            "rows": [c.rows for c in cells],
            "invalid": [c.invalid for c in cells],
            "zeros": [c.zeros for c in cells],
            "newest": [c.newest_ns for c in cells],
            "arrays": [[a.dtype.str, int(a.size)] for a in arrays],
        }
        cells_bytes = b"".join(a.tobytes() for a in arrays)
        meta["sum"] = _checksum(meta, cells_bytes)
        head = json.dumps(meta, separators=(",", ":")).encode()
        return b"".join([_MAGIC, len(head).to_bytes(4, "little"), head, cells_bytes])

    @staticmethod
    def from_bytes(data: bytes, grid: Grid, key: str) -> tuple[Bucket, str]:
        """The bucket and its files' fingerprint; ``ValueError`` if it is not this grid's or
        not whole (a torn or foreign file)."""
        if data[: len(_MAGIC)] != _MAGIC or len(data) < len(_MAGIC) + 4:
            raise ValueError("not a bucket entry")
        at = len(_MAGIC) + 4
        size = int.from_bytes(data[len(_MAGIC) : at], "little")
        meta = json.loads(data[at : at + size])
        at += size
        if not isinstance(meta, dict):
            raise ValueError("a header that is not an object")
        if meta.get("format") in _OLD_BUCKET_FORMATS and meta.get("grid") == key:
            raise _OldEntry(f"an entry of format {meta.get('format')}")
        if meta.get("format") != _BUCKET_FORMAT or meta.get("grid") != key:
            raise ValueError("not an entry of this grid")
        cells_at = at
        arrays = []
        for dtype, n in meta["arrays"]:
            dt = np.dtype(dtype)
            if dt not in _CELL_DTYPES:
                raise ValueError(f"cells of dtype {dt}")
            if not isinstance(n, int) or n < 0 or at + n * dt.itemsize > len(data):
                raise ValueError("cells past the end of the entry")
            arrays.append(np.frombuffer(data, dt, n, at).astype(np.int64))
            at += n * dt.itemsize
        if at != len(data) or len(arrays) != 2 * len(meta["segments"]):
            raise ValueError("an entry whose cells do not fill it")
        if meta.pop("sum", None) != _checksum(meta, data[cells_at:]):
            raise ValueError("its checksum does not match (a damaged entry)")
        out: dict[str, Cells] = {}
        for i, name in enumerate(meta["segments"]):
            index, count = np.cumsum(arrays[2 * i]) - 1, arrays[2 * i + 1]
            if index.shape != count.shape:
                raise ValueError(f"cells of shapes {index.shape}, {count.shape}")
            if index.size and (
                index[0] < 0
                or index[-1] >= grid.n_cells
                or not bool(np.all(np.diff(index) > 0))
                or count.min() <= 0
            ):
                raise ValueError("cells out of range, unsorted or not positive")
            newest = meta["newest"][i]
            out[str(name)] = Cells(
                index,
                count,
                rows=int(meta["rows"][i]),
                invalid=int(meta["invalid"][i]),
                zeros=int(meta["zeros"][i]),
                newest_ns=None if newest is None else int(newest),
            )
        return (
            Bucket(int(meta["start_ns"]), out, int(meta["unplaced"])),
            str(meta["fingerprint"]),
        )


class _OldEntry(ValueError):
    """A whole bucket entry of an earlier format (``_OLD_BUCKET_FORMATS``): not damage, an
    upgrade."""


def _checksum(meta: Mapping[str, object], cells: bytes) -> str:
    """blake2b-64 of a bucket entry's header (without its checksum) and its cells: a flipped
    bit in a count, which the header's shapes and bounds let through, is a damaged entry."""
    h = hashlib.blake2b(digest_size=8)
    h.update(json.dumps(meta, separators=(",", ":"), sort_keys=True).encode())
    h.update(cells)
    return h.hexdigest()


_BUCKET_STEM = re.compile(r"-?\d+")  # an entry's file name: its start, ns since the epoch
_RELIST_SECONDS = 86_400.0  # how often the cache's files are listed again (other writers)
_RELIST_SHARE = 0.1  # the share of the bound written between two listings for an eviction
_TMP_WRITER = re.compile(r"^\..+\.(\d+)_\d+\.tmp$")  # atomic_write's .<stem>.<pid>_<thread>.tmp


def _writer_alive(name: str) -> bool:
    """Whether the process that is writing temp file ``name`` (its pid in the name) still
    runs: the daemon, a backtest and ``monitor check`` share a cache, and a reader starting up
    once removed the daemon's write in flight (its rename then failed, and the daemon wrote no
    bucket to disk for ten minutes). A name without a pid is a leftover."""
    m = _TMP_WRITER.match(name)
    if m is None:
        return False
    pid = int(m.group(1))
    if pid == os.getpid():
        return True  # another cache of this process may be writing it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, another user's
        return True
    return True


class BucketCache:
    """Bucket summaries in memory (LRU) and, with a ``directory``, on disk, each bounded by
    ``max_bytes`` (the oldest buckets go first on disk). Thread-safe."""

    def __init__(self, directory: Path | None, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self._memory: OrderedDict[tuple[str, str, int], tuple[str, Bucket]] = OrderedDict()
        self._memory_bytes = 0
        self._disk: dict[Path, int] | None = None
        self._disk_total = 0  # the bytes of ``_disk``
        self._written = 0  # bytes this process wrote since the last listing
        self._order: deque[Path] | None = None  # ``_disk``'s entries, oldest first, as evicted
        self._listed_at = 0.0
        self._lock = threading.Lock()
        self.hits = self.misses = self.corrupt = 0
        self.writable = directory is not None
        self._retry_at = 0.0
        self._read_retry_at = 0.0  # disk reads paused till then (see ``get``)
        self._read_errors = 0  # entries in a row that could not be read
        self._read_warned_at = -600.0
        self._stuck: set[Path] = set()  # entries it could not remove: never counted again
        self._block = 4096  # the volume's block: an entry takes whole blocks on disk
        try:
            present = directory is not None and directory.is_dir()
        except OSError as exc:
            # a directory it cannot enter (``monitor check`` as another user than the
            # daemon's, whose state_dir is 0700): the check runs on buckets in memory
            log.warning(
                "cannot open the summary cache; checking with buckets in memory",
                extra={"path": str(directory), "error": str(exc)},
            )
            self.directory, self.writable, present = None, False, False
        if present and directory is not None:
            with contextlib.suppress(OSError):  # unknown: 4 KiB, ext4's
                self._block = max(512, os.statvfs(directory).f_bsize)
            # a write a kill interrupted: an entry's, or a grid's (summaries/<monitor>/)
            for tmp in [*directory.glob("*/*/.*.tmp"), *directory.glob("*/.*.tmp")]:
                if not _writer_alive(tmp.name):  # never another process's write under way
                    _remove(tmp, "a cache write left by a killed process")
            for old in directory.glob("*/*/*.npz"):  # entries of the first format
                _remove(old, "a cached bucket of the first format")

    def _path(self, monitor: str, key: str, start_ns: int) -> Path:
        assert self.directory is not None
        return self.directory / monitor / key / f"{start_ns}{_SUFFIX}"

    def get_many(
        self, monitor: str, key: str, grid: Grid, wanted: list[tuple[int, str]]
    ) -> dict[int, Bucket]:
        """``get`` of each (start, fingerprint): those held in memory under one lock, the
        others from disk. Missing buckets are absent from the result."""
        out: dict[int, Bucket] = {}
        rest = []
        with self._lock:
            memory = self._memory
            for start_ns, fingerprint in wanted:
                k = (monitor, key, start_ns)
                held = memory.get(k)
                if held is not None and held[0] == fingerprint:
                    memory.move_to_end(k)
                    out[start_ns] = held[1]
                else:
                    rest.append((start_ns, fingerprint))
            self.hits += len(out)
        for start_ns, fingerprint in rest:
            got = self.get(monitor, key, grid, start_ns, fingerprint)
            if got is not None:
                out[start_ns] = got
        return out

    def get(
        self, monitor: str, key: str, grid: Grid, start_ns: int, fingerprint: str
    ) -> Bucket | None:
        with self._lock:
            held = self._memory.get((monitor, key, start_ns))
            if held is not None and held[0] == fingerprint:
                self._memory.move_to_end((monitor, key, start_ns))
                self.hits += 1
                return held[1]
        if self.directory is None:
            self.misses += 1
            return None
        if self._read_retry_at and time.monotonic() < self._read_retry_at:
            self.misses += 1
            return None
        path = self._path(monitor, key, start_ns)
        damaged: NotRegularFile | None = None
        try:
            # a regular file of bounded size: a FIFO in an entry's place once hung every check
            data = read_regular(path, MAX_ENTRY_BYTES)
        except FileNotFoundError:
            self.misses += 1
            return None
        except NotRegularFile as exc:
            data, damaged = b"", exc
        except OSError as exc:
            # recomputed; warned at most every 10 minutes, not once a bucket (a cache directory
            # made a file: 192 lines a check). Past _READ_ERRORS entries in a row the disk is
            # left alone for 10 minutes; one unreadable entry (another user's) costs its bucket
            # only, not every bucket of every monitor
            now = time.monotonic()
            self._read_errors += 1
            paused = self._read_errors >= _READ_ERRORS
            if paused:
                self._read_retry_at, self._read_errors = now + 600.0, 0
            if paused or now - self._read_warned_at >= 600.0:
                self._read_warned_at = now
                log.warning(
                    "cannot read cached buckets; recomputing them"
                    + (", the disk read again in 10 minutes" if paused else ""),
                    extra={"monitor": monitor, "path": str(path), "error": str(exc)},
                )
            self.misses += 1
            return None
        self._read_errors = 0
        try:
            if damaged is not None:
                raise damaged
            bucket, stored = Bucket.from_bytes(data, grid, key)
        except _OldEntry:  # written by the version before: recomputed, nothing to warn of
            self.misses += 1
            _remove(path, "a cached bucket of an older format")
            return None
        except _CORRUPT as exc:
            # a read-only process (monitor check as another user) cannot remove it: the
            # check goes on with the bucket recomputed (it was an error)
            removed = _remove(path, "a corrupt cached bucket")
            log.warning(
                f"corrupt cached bucket {'removed' if removed else 'kept'}; recomputing it",
                extra={"monitor": monitor, "path": str(path), "error": str(exc)},
            )
            self.corrupt += 1
            self.misses += 1
            return None
        if stored != fingerprint or bucket.start_ns != start_ns:
            self.misses += 1
            return None  # the bucket's files changed: recompute (and overwrite)
        self._remember(monitor, key, fingerprint, bucket)
        self.hits += 1
        return bucket

    def put(self, monitor: str, key: str, fingerprint: str, bucket: Bucket) -> None:
        self._remember(monitor, key, fingerprint, bucket)
        if self.directory is None:
            return
        if not self.writable:
            if time.monotonic() < self._retry_at:
                return
            self.writable = True  # try the disk again (space may have been freed)
        path = self._path(monitor, key, bucket.start_ns)
        data = bucket.to_bytes(key, fingerprint)
        try:
            try:
                atomic_write(path.parent, path, data, stem="bucket", durable=False)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not self._make_room(path):
                    raise
                # the volume filled past the reserve (other files grew): once more, with
                # the oldest entries gone to leave the reserve free
                atomic_write(path.parent, path, data, stem="bucket", durable=False)
        except OSError as exc:  # a full or read-only disk costs the cache, not the check
            log.warning(
                "cannot write a cached bucket; buckets are kept in memory only for 10 minutes",
                extra={"monitor": monitor, "path": str(path), "error": str(exc)},
            )
            self.writable = False  # warned once, not once a bucket; retried in 10 minutes
            self._retry_at = time.monotonic() + 600.0
            return
        # the blocks it takes, not its length: an entry of a few hundred bytes takes 4 KiB,
        # and the bound counted by length held 5-14 times its bytes on disk
        self._account(path, -(-len(data) // self._block) * self._block)

    def _remember(self, monitor: str, key: str, fingerprint: str, bucket: Bucket) -> None:
        with self._lock:
            k = (monitor, key, bucket.start_ns)
            old = self._memory.pop(k, None)
            if old is not None:
                self._memory_bytes -= old[1].nbytes
            self._memory[k] = (fingerprint, bucket)
            self._memory_bytes += bucket.nbytes
            while self._memory_bytes > self.max_bytes and len(self._memory) > 1:
                _, (_, gone) = self._memory.popitem(last=False)
                self._memory_bytes -= gone.nbytes

    def _make_room(self, path: Path) -> bool:
        """After a write failed for space (bytes, inodes or a quota, which ``statvfs`` may
        not show): list the entries again and evict the oldest until the volume's reserve is
        free, and at least a tenth of the entries; whether any was removed."""
        assert self.directory is not None
        with self._lock:
            self._relist(time.monotonic())
            before = len(self._disk or ())
            size, entries = self._limit()
            self._evict(path, size, min(entries, before - max(before // 10, 1)))
            return len(self._disk or ()) < before

    def _limit(self) -> tuple[int, int]:
        """The bytes and the entries the cache may hold: ``max_bytes``, less what would leave
        its volume with under ``_RESERVE`` bytes (a tenth of a smaller volume) or ``_INODES``
        inodes (a tenth of a smaller count) free: small entries run out of inodes first, and
        a state save needs one."""
        assert self.directory is not None
        assert self._disk is not None
        try:
            st = os.statvfs(self.directory)
        except OSError:
            return self.max_bytes, len(self._disk) + 1
        reserve = min(_RESERVE, st.f_blocks * st.f_frsize // 10)
        size = min(self.max_bytes, max(0, self._disk_total + st.f_bavail * st.f_frsize - reserve))
        if st.f_files <= 0:  # a filesystem without an inode count (btrfs)
            return size, len(self._disk) + 1
        return size, max(0, len(self._disk) + st.f_favail - min(st.f_files // 10, _INODES))

    def _account(self, path: Path, size: int) -> None:
        """Count a bucket written, and past ``max_bytes`` (or past what leaves its volume
        ``_RESERVE`` free) evict the oldest (by start) on disk until the rest fit.

        Several processes write one cache (the daemon, a backtest): the files are listed again
        before an eviction, so what the others wrote or removed is counted (a process once
        counted only its own writes, and the cache grew past its bound), but at most once a
        tenth of the bound's bytes written by this process (or a day): at the bound every
        put once listed and stat-ed every entry (17,000 entries: 0.2-0.5 s a put). Between
        listings the count is this process's view. Only files named as buckets
        (``<start_ns>.bucket``) are counted or evicted."""
        assert self.directory is not None
        with self._lock:
            now = time.monotonic()
            stale = now - self._listed_at > _RELIST_SECONDS
            if self._disk is None or stale:
                self._relist(now)
            assert self._disk is not None
            self._disk_total += size - self._disk.get(path, 0)
            self._disk[path] = size
            self._written += size
            limit, entries = self._limit()
            if self._disk_total <= limit and len(self._disk) <= entries:
                return
            if self._written >= self.max_bytes * _RELIST_SHARE:
                self._relist(now)
                self._disk_total += size - self._disk.get(path, 0)
                self._disk[path] = size
                # the limits of the entries now known (those of before would evict what the
                # other writers added since the last listing, not what the volume needs)
                limit, entries = self._limit()
            self._evict(path, limit, entries)

    def _evict(self, path: Path, limit: int, entries: int) -> None:
        """Remove the oldest entries but ``path`` until the rest hold at most ``limit`` bytes
        in at most ``entries`` files (under the lock). One the process cannot remove (another
        user's) is left and no longer counted: its failure once made every check an error,
        and counting it would evict the live entries in its place."""
        assert self._disk is not None
        stuck: list[Path] = []
        # the oldest first, in the order of the entries known when it was made (made again
        # when they are used up: those written since are in it then)
        while self._disk_total > limit or len(self._disk) > max(entries, 1):
            if not self._order:
                self._order = deque(
                    sorted((p for p in self._disk if p != path), key=lambda p: int(p.stem))
                )
                if not self._order:
                    break  # only the entry just written: it stays
            victim = self._order.popleft()
            if victim == path or victim not in self._disk:
                continue
            self._disk_total -= self._disk.pop(victim)
            if not _remove(victim, None):
                self._stuck.add(victim)
                stuck.append(victim)
            elif victim.parent != path.parent:
                # its grid's folder, once emptied, goes too (each replay's grids left one
                # behind, and every relist globbed through them); one still in use is not empty
                with contextlib.suppress(OSError):
                    victim.parent.rmdir()
        if stuck:
            log.warning(
                "cannot evict cached buckets; they are left and no longer counted against "
                "the cache's bound (remove them, or give the monitor's user write access)",
                extra={"count": len(stuck), "path": str(stuck[0])},
            )

    def drop_grid(self, monitor: str, key: str) -> None:
        """Remove ``monitor``'s cached buckets of grid ``key`` (a grid the daemon replaced:
        its entries, never read again, outlived the live grid's at the bound, and a fresh
        process read half its windows again every hour for days). Other grids' (a backtest's,
        a replay's) are left to eviction."""
        if self.directory is None:
            return
        folder = self.directory / monitor / key
        if folder.is_dir():
            for entry in folder.glob(f"*{_SUFFIX}"):
                if _BUCKET_STEM.fullmatch(entry.stem) and _remove(entry, None):
                    with self._lock:
                        if self._disk is not None and entry in self._disk:
                            self._disk_total -= self._disk.pop(entry)
            try:
                folder.rmdir()
            except OSError as exc:  # not empty: a write under way, or files not its own
                log.log(
                    logging.INFO if exc.errno == errno.ENOTEMPTY else logging.WARNING,
                    "an old grid's cache folder is left",
                    extra={"monitor": monitor, "path": str(folder), "error": str(exc)},
                )

    def _relist(self, now: float) -> None:
        self._disk, self._listed_at = self._listing(), now
        self._disk_total = sum(self._disk.values())
        self._written = 0
        self._order = None

    def _listing(self) -> dict[Path, int]:
        assert self.directory is not None
        out: dict[Path, int] = {}
        for p in self.directory.glob(f"*/*/*{_SUFFIX}"):
            if not _BUCKET_STEM.fullmatch(p.stem) or p in self._stuck:
                continue  # not an entry (a copy, a stray file): never counted or removed
            try:
                st = p.stat()
            except OSError:  # removed meanwhile (another process evicted it)
                continue
            # allocated, as the disk holds it (st_size counted a 300-byte entry's 4 KiB as 300)
            out[p] = st.st_blocks * 512 if st.st_blocks else st.st_size
        return out

    def holds(self, monitor: str) -> bool:
        """Whether a bucket of ``monitor`` is held in memory."""
        with self._lock:
            return any(k[0] == monitor for k in self._memory)

    def forget(self, monitor: str) -> None:
        """Drop a monitor's buckets from memory (its grid or settings changed, or it was
        removed)."""
        with self._lock:
            for k in [k for k in self._memory if k[0] == monitor]:
                _, gone = self._memory.pop(k)
                self._memory_bytes -= gone.nbytes


def _remove(path: Path, what: str | None) -> bool:
    """Unlink ``path`` (gone already counts as removed); on any other error, warn naming
    ``what`` (None: the caller reports it) and return False: a cache entry that cannot be
    removed costs the cache, never the check."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        if what is not None:
            log.warning(
                f"cannot remove {what}; it is left",
                extra={"path": str(path), "error": exc.strerror or str(exc)},
            )
        return False
    return True


_CELL_DTYPES = tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.int32, np.int64))


def _narrow(a: NDArray[np.int64]) -> NDArray[np.integer]:
    """Non-negative ``a`` in the narrowest of uint8, uint16, uint32 that holds it, else int64:
    an hour's cells are dense (index steps of 1 or 2) with small counts, so a third or less of
    the bytes of int32 to write (a fresh page-cache write costs CPU on this VM)."""
    top = int(a.max()) if a.size else 0
    for t in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(t).max:
            return a.astype(t)
    return a


def _grid_key(grid: Grid, want: str) -> str:
    """The identity buckets are cached under: the points and the settings they depend on."""
    digest = hashlib.blake2b(grid.points.tobytes(), digest_size=8)
    digest.update(want.encode())
    return digest.hexdigest()
