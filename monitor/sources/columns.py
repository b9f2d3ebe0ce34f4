"""Column checks and conversions shared by the score and outcome readers."""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import replace
from typing import Any, Generic, TypeVar, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from monitor.errors import (
    BadValuesError,
    MonitorError,
    SchemaError,
    SourceError,
)
from monitor.sources.footers import (
    _GROUPS,
    ALSO_CLEARED,
    _column_type,
    _Footer,
    _Memo,
    _native_bounds,
    _numbers,
    _opened,
    _ts_native,
    _valid,
    footprint,
)
from monitor.sources.model import FloatArray, Window
from monitor.sources.partitions import _Plan
from monitor.sources.paths import HIVE_NULL, _File, _Source
from monitor.sources.translate import _translate

_T = TypeVar("_T")

log = logging.getLogger(__name__)


def _check_numeric(dtype: pa.DataType, f: _File, column: str, role: str, key: str) -> None:
    if not (pa.types.is_floating(dtype) or pa.types.is_integer(dtype) or pa.types.is_null(dtype)):
        raise SchemaError(
            f"has type {dtype}; the {role} column must be a float (or integer) column",
            path=f.path,
            column=column,
            hint=f"write {role}s as float32/float64, or point `{key}` at the right column",
        )


# string_view (pyarrow >= 16): what arrow-rs writers such as delta-rs store for strings
_is_string_view: Callable[[pa.DataType], bool] = getattr(
    pa.types, "is_string_view", lambda _dtype: False
)


def _check_label(dtype: pa.DataType, f: _File, column: str, role: str, key: str) -> None:
    if pa.types.is_dictionary(dtype):
        dtype = dtype.value_type
    if not (
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or _is_string_view(dtype)
        or pa.types.is_integer(dtype)
        or pa.types.is_boolean(dtype)
        or pa.types.is_null(dtype)
    ):
        raise SchemaError(
            f"has type {dtype}; the {role} column must hold strings or integers",
            path=f.path,
            column=column,
            hint=f"point `{key}` at a string or integer column",
        )


def _require_numeric(footer: _Footer, f: _File, column: str, role: str, key: str) -> None:
    """The ``column`` of ``f`` exists and is numeric (``SchemaError`` naming file and column)."""
    if column in footer.numeric:
        return
    _check_numeric(_column_type(footer, f, column, role, key), f, column, role, key)
    footer.numeric.add(column)


def _require_label(footer: _Footer, f: _File, column: str, role: str, key: str) -> None:
    """The ``column`` of ``f`` exists and holds labels (strings, integers, booleans)."""
    _check_label(_column_type(footer, f, column, role, key), f, column, role, key)


def _floats(chunked: pa.ChunkedArray) -> tuple[FloatArray, npt.NDArray[np.bool_] | None]:
    """Values as float64 and the validity mask (None when there is no null)."""
    arr = chunked.combine_chunks()
    if pa.types.is_null(arr.type):
        return np.full(len(arr), np.nan), np.zeros(len(arr), dtype=bool)
    valid = None
    if arr.null_count:
        valid = _valid(arr)
    values = np.asarray(_numbers(arr), dtype=np.float64)
    return values, valid


class _Labels:
    """Maps label values (strings, or integers written as strings) to stable integer codes;
    ``limit``: the most distinct values a read may meet (``ScoreSpec.max_segments``)."""

    def __init__(self, limit: int | None = None) -> None:
        self.codes: dict[str, int] = {}
        self.limit = limit
        # which codes kept rows have had (``refuse_many_segments``; counted only past the limit)
        self.used = np.zeros(0, dtype=np.bool_)

    def code(self, name: str) -> int:
        return self.codes.setdefault(name, len(self.codes))

    def encode(
        self, chunked: pa.ChunkedArray
    ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.bool_]]:
        """Codes (-1 for null) and the validity mask."""
        arr = chunked.combine_chunks()
        if pa.types.is_null(arr.type):
            return np.full(len(arr), -1, dtype=np.int32), np.zeros(len(arr), dtype=bool)
        if not pa.types.is_dictionary(arr.type):
            arr = pc.dictionary_encode(arr)
        # booleans as Hive, Spark and Delta spell them in partition values (str(): "True")
        names = [
            ("true" if v else "false") if isinstance(v, bool) else str(v)
            for v in arr.dictionary.to_pylist()
        ]
        lut = np.array([self.code(n) for n in names] + [-1], dtype=np.int32)
        idx = arr.indices
        if idx.null_count:
            idx = pc.fill_null(idx, len(names))
        codes = lut[np.asarray(_numbers(idx), dtype=np.int64)]
        return codes, codes >= 0

    def names(self) -> list[str]:
        return list(self.codes)


def _segment(
    table: pa.Table, f: _File, column: str | None, labels: _Labels, n: int
) -> tuple[npt.NDArray[np.int32] | None, npt.NDArray[np.bool_] | None]:
    if column is None:
        return None, None
    if column in table.column_names:
        before = len(labels.codes)
        out: tuple[npt.NDArray[np.int32], npt.NDArray[np.bool_] | None] = labels.encode(
            table.column(column)
        )
        if any("\x00" in name for name in itertools.islice(labels.codes, before, None)):
            # numpy's fixed-width strings drop a trailing NUL: "de" and "de\0" became one
            # segment of the outcomes (pairs misaligned, an IndexError) and two of the scores
            raise _nul_segment(f.path, column)
    else:
        value = dict(f.partitions)[column]
        if value == HIVE_NULL:  # counted as null segments are (invalid rows), never a segment
            return np.full(n, -1, dtype=np.int32), np.zeros(n, dtype=np.bool_)
        if "\x00" in value:  # a partition value is URL-decoded: "de%00" is "de\0"
            raise _nul_segment(f.path, column)
        out = np.full(n, labels.code(value), dtype=np.int32), None
    return out


def _nul_segment(path: str, column: str) -> SchemaError:
    return SchemaError(
        "holds a segment with a NUL character",
        path=path,
        column=column,
        hint="segment values must be text without NUL characters",
    )


def refuse_many_segments(
    labels: _Labels, codes: npt.NDArray[np.int32], path: str, column: str
) -> None:
    """``SourceError`` once the rows kept so far (``codes``: a row group's kept rows) hold more
    than ``labels.limit`` distinct segments: refused as the read meets them, before any
    per-segment work (a request or user id as the segment once ran for minutes, or out of
    memory, before the check counted its segments). Only kept rows count: a dictionary's
    unused categories, rows outside the window or dropped as invalid are no segment."""
    if labels.limit is None:
        return
    # every row group's kept segments are recorded (those met before the names passed the
    # bound count too); counted only once more names than the bound were met
    used = np.bincount(codes, minlength=len(labels.codes)) > 0
    if labels.used.size:
        used[: labels.used.size] |= labels.used
    labels.used = used
    if len(labels.codes) > labels.limit and (n := int(used.sum())) > labels.limit:
        raise too_many_segments(f"{n} distinct segments", labels.limit, path, column)


def too_many_segments(count: str, limit: int | None, path: str, column: str | None) -> SourceError:
    """The error of a window read past ``max_segments`` (``limit``) at ``path``; ``count``
    says how many distinct segments it met ("40 distinct segments")."""
    return SourceError(
        f"{count} in the window read so far exceed max_segments={limit} (metric label "
        "cardinality is bounded)",
        path=path,
        column=column,
        hint="raise max_segments or map rare segments to 'other' upstream",
    )


def _segment_source(footer: _Footer, f: _File, column: str | None) -> str | None:
    """Validate the segment column of a file: ``None`` if it comes from a hive partition."""
    if column is None:
        return None
    if footer.schema.get_field_index(column) < 0 and column in dict(f.partitions):
        return None
    _require_label(footer, f, column, "segment", "segment_column")
    return column


def _live(f: _File, start: int, n: int) -> npt.NDArray[np.bool_] | None:
    """Which of the ``n`` rows from position ``start`` of ``f`` its table has not deleted
    (Delta deletion vectors, Iceberg position deletes); None when none of them is deleted."""
    if f.deleted is None:
        return None
    lo, hi = np.searchsorted(f.deleted, [start, start + n])
    if lo == hi:
        return None
    mask = np.ones(n, dtype=bool)
    mask[f.deleted[lo:hi] - start] = False
    return mask


def _read_group(pf: pq.ParquetFile, plan: _Plan, g: int, columns: list[str]) -> pa.Table:
    try:
        return pf.read_row_group(g, columns=columns, use_threads=True)
    except (OSError, pa.ArrowException, ValueError, EOFError) as exc:
        raise _translate(exc, plan.file.path, f"reading row group {g}") from exc


def _read_groups(
    source: _Source, plan: _Plan, columns: list[str]
) -> Iterator[tuple[pa.Table, dict[object, Any]]]:
    """The planned row groups' ``columns``, in ``plan.groups`` order, each with its memo (for
    values derived from the group alone): those read before from ``_GROUPS`` (by the file's
    identity), the rest from the file, opened once, at the first group not kept, and read one
    group at a time. For small windows read again at every check (outcomes), not for score
    windows."""
    with ExitStack() as stack:
        pf: pq.ParquetFile | None = None
        for g in plan.groups:
            key = _GROUPS.key(source, plan.file, g, columns)
            entry = _GROUPS.get(key)
            if entry is None:
                if pf is None:
                    pf = stack.enter_context(_opened(source, plan.file, plan.footer))
                entry = _GROUPS.put(key, _read_group(pf, plan, g, columns))
            yield entry


def _rows_key(
    source: _Source, plans: list[_Plan], window: Window, column: str
) -> tuple[object, ...]:
    """Which rows of which files ``window`` holds, as a key: each planned file by identity
    (path, size, mtime, a table's deleted rows) with its row groups wholly inside the window
    (by the footer statistics: ``_Plan.inside``) by index, and those the window cuts by a
    digest of their in-window mask (the timestamp ``column`` read, and kept, through
    ``_read_groups``). Two windows with equal keys hold the same rows."""
    parts: list[object] = []
    for plan in plans:
        f = plan.file
        deleted = None if f.deleted is None else _digest(f.deleted.tobytes())
        if False not in plan.inside:  # every planned group wholly inside: by index
            parts.append((*f.identity, deleted, plan.unit, plan.groups))
            continue
        cut = [g for g, inside in zip(plan.groups, plan.inside, strict=True) if not inside]
        tables = {}
        if cut:
            one = replace(plan, groups=tuple(cut))
            tables = dict(zip(cut, _read_groups(source, one, [column]), strict=True))
        lo, hi = _native_bounds(window, plan.unit)
        rows: list[object] = []
        for g in plan.groups:
            if g not in tables:
                rows.append(g)
                continue
            table, memo = tables[g]
            stamps = _memo(memo, ("stamps", plan.unit), _ts_native, table.column(column), plan.unit)
            mask = (stamps >= lo) & (stamps < hi)
            rows.append((g, mask.size, _digest(np.packbits(mask).tobytes())))
        parts.append((*f.identity, deleted, plan.unit, tuple(rows)))
    return tuple(parts)


class KeptByRows(Generic[_T]):
    """What was read from a window, kept by the key of the rows it holds (``_rows_key``; an
    LRU of at most ``most`` values and ``max_bytes`` of their ``footprint``; a value over half
    of that is not kept): an hourly check's windows hold the same evaluation runs until one
    enters or leaves them. ``freeze`` makes a value safe to hand out again (its arrays
    read-only). Thread-safe."""

    def __init__(
        self, most: int, freeze: Callable[[_T], _T], what: str, *, max_bytes: int = 64 << 20
    ) -> None:
        self.most = most
        self.max_bytes = max_bytes
        self._freeze = freeze
        self._what = what
        self._held: OrderedDict[tuple[object, ...], tuple[_T, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        ALSO_CLEARED.append(self.clear)  # ``clear_cache`` forgets them too

    def lookup(self, key: tuple[object, ...]) -> _T | None:
        with self._lock:
            hit = self._held.get(key)
            if hit is None:
                return None
            self._held.move_to_end(key)
        return hit[0]

    @property
    def held_bytes(self) -> int:
        """The ``footprint`` of the values kept (at most ``max_bytes``)."""
        return self._bytes

    def keep(
        self,
        key: tuple[object, ...],
        out: _T,
        again: Callable[[], tuple[object, ...]],
        path: str,
    ) -> None:
        """Keep ``out`` (frozen) under ``key`` if the key made ``again`` after the read is
        the same: else a file changed under the read, and the result stands for this call
        only. A key that cannot be made again (a file half-written since) keeps nothing
        either; it never fails the read."""
        try:
            same = again() == key
        except (MonitorError, OSError) as exc:
            log.debug(f"{self._what} not kept", extra={"path": path, "error": str(exc)})
            same = False
        if not same:
            return
        frozen = self._freeze(out)
        size = footprint(frozen)
        if size > self.max_bytes // 2:
            log.debug(f"{self._what} not kept: {size} bytes", extra={"path": path})
            return
        with self._lock:
            old = self._held.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._held[key] = (frozen, size)
            self._bytes += size
            while len(self._held) > self.most or self._bytes > self.max_bytes:
                _, (_, gone) = self._held.popitem(last=False)
                self._bytes -= gone

    def clear(self) -> None:
        with self._lock:
            self._held.clear()
            self._bytes = 0

    def holds(self, out: object) -> bool:
        """Whether ``out`` itself is kept (tests)."""
        with self._lock:
            return any(kept is out for kept, _ in self._held.values())


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _memo(memo: dict[object, Any], key: object, make: Callable[..., _T], *args: Any) -> _T:
    """``memo[key]``, made once as ``make(*args)`` (values derived from one row group alone),
    its memory charged to the cache that holds the group (``_Memo.charge``)."""
    got = memo.get(key)
    if got is None:
        got = memo[key] = make(*args)
        if isinstance(memo, _Memo):
            memo.charge(footprint(got))
    return cast(_T, got)


def _in_window(table: pa.Table, column: str, unit: str, window: Window) -> npt.NDArray[np.bool_]:
    native = _ts_native(table.column(column), unit)
    lo, hi = _native_bounds(window, unit)
    mask: npt.NDArray[np.bool_] = (native >= lo) & (native < hi)
    return mask


def _null_label(segment_column: str | None) -> str:
    """The name of the null count in a ``BadValuesError``: a row is dropped for a null value,
    or, with a segment column, for a null segment (counted together: an operator looking for
    nulls in the value column alone found none)."""
    if segment_column is None:
        return "null"
    return f"null value or null segment ({segment_column!r})"


def _raise_bad_values(
    what: str,
    column: str | None,
    window: Window,
    rows: int,
    counts: Mapping[str, int],
    share: float,
    per_file: Mapping[str, int],
    *,
    dropped: int | None = None,
) -> None:
    """``BadValuesError``: ``dropped`` rows (default: the sum of ``counts``, by cause) of
    ``rows`` invalid, naming ``column`` and the files with most of them."""
    if dropped is None:
        dropped = sum(counts.values())
    worst = sorted(per_file.items(), key=lambda kv: -kv[1])[:3]
    files = ", ".join(f"{p} ({n})" for p, n in worst)
    detail = ", ".join(f"{k}: {v}" for k, v in counts.items())
    raise BadValuesError(
        f"{dropped} of {rows} {what} rows in window {window} are invalid ({detail}), "
        f"{dropped / rows:.2%} > max_invalid_share {share:.2%}; most in: {files}",
        path=worst[0][0] if len(worst) == 1 else files,
        column=column,
        hint="fix the producer of these rows, or raise max_invalid_share if they are expected",
    )


def _select(
    arr: npt.NDArray[Any], keep: npt.NDArray[np.bool_] | None, take: npt.NDArray[np.bool_] | None
) -> npt.NDArray[Any]:
    if keep is not None:
        arr = arr[keep]
    if take is not None:
        arr = arr[take]
    return arr


def _shrink(arr: npt.NDArray[Any], n: int) -> npt.NDArray[Any]:
    """``arr[:n]`` without keeping a much larger buffer alive."""
    if n == arr.size:
        return arr
    if n >= 0.9 * arr.size:
        return arr[:n]
    return arr[:n].copy()


def _compact_codes(
    codes: npt.NDArray[np.int32], names: list[str]
) -> tuple[npt.NDArray[np.int32], tuple[str, ...]]:
    """Keep the names that occur, sorted, and renumber ``codes`` to match (in place when owned)."""
    counts = np.bincount(codes, minlength=len(names)) if codes.size else np.zeros(len(names))
    present = sorted((names[i], i) for i in range(len(names)) if counts[i] > 0)
    lut = np.full(max(len(names), 1), -1, dtype=np.int32)
    for new, (_, old) in enumerate(present):
        lut[old] = new
    out: npt.NDArray[np.int32] = lut[codes] if codes.size else codes
    return out, tuple(name for name, _ in present)
