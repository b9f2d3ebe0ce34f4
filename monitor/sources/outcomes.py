"""Reading the outcomes of a window and pairing two windows by query."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from monitor.epoch import from_ns as _from_ns
from monitor.sources import footers
from monitor.sources.columns import (
    KeptByRows,
    _floats,
    _Labels,
    _live,
    _memo,
    _null_label,
    _raise_bad_values,
    _read_groups,
    _require_label,
    _require_numeric,
    _rows_key,
    _segment,
    _segment_source,
)
from monitor.sources.footers import _native_bounds, _strings, _ts_native, _valid, refuse_nul
from monitor.sources.model import (
    FloatArray,
    IntArray,
    OutcomeSpec,
    OutcomeWindow,
    PairedOutcomes,
    Window,
)
from monitor.sources.partitions import _newest_checked, _Plan, _plan
from monitor.sources.paths import _open_source, _Source
from monitor.stats import Runs

log = logging.getLogger(__name__)


def read_outcomes(spec: OutcomeSpec, window: Window) -> OutcomeWindow:
    """Read the outcomes in ``window`` and average the repeated evaluations of each key.

    A key is ``query_id`` (as a string), or ``(segment, query_id)`` when ``segment_column`` is set.
    ``outcomes[k] = mean of the counts[k] finite outcomes of key k``; keys are sorted.

    A window holding the same rows of the same files as one read before (``_rows_key``; 16
    kept a process) is handed back as read then, with this window and the newest timestamp
    of now: a daemon's reference window holds the same runs for many checks in a row.
    """
    if not isinstance(window, Window):
        raise TypeError(f"`window` must be a Window; got {type(window).__name__}.")
    source = _open_source(spec)
    newest, _ = _newest_checked(source, spec.timestamp_column, spec.timestamp_unit)
    plans = _plan(source, window, spec.timestamp_column, spec.timestamp_unit)
    key = _kept_key(spec, source, plans, window)
    hit = KEPT.get(key, window, newest)
    if hit is not None:
        return hit
    out = _read_outcomes(spec, window, source, newest, plans)
    KEPT.keep(
        key,
        out,
        lambda: _kept_key(
            spec, source, _plan(source, window, spec.timestamp_column, spec.timestamp_unit), window
        ),
        spec.path,
    )
    return out


class KeptWindows(KeptByRows[OutcomeWindow]):
    """Outcome windows kept by the key of the rows they hold (LRU of ``most``), for the plain
    and the judged readers: an hourly check's reference window holds the same evaluation runs
    until one enters or leaves it. Thread-safe."""

    def __init__(self, most: int) -> None:
        super().__init__(most, OutcomeWindow.frozen, "outcome window")

    def get(
        self, key: tuple[object, ...], window: Window, newest_ns: int | None
    ) -> OutcomeWindow | None:
        """The window kept under ``key``, with ``window`` and the newest time of now."""
        hit = self.lookup(key)
        if hit is None:
            return None
        newest = None if newest_ns is None else _from_ns(newest_ns)
        return replace(hit, window=window, newest_timestamp=newest)


KEPT = KeptWindows(16)  # the plain reader's windows


def _kept_key(
    spec: OutcomeSpec, source: _Source, plans: list[_Plan], window: Window
) -> tuple[object, ...]:
    return (spec, footers.CLEARED, _rows_key(source, plans, window, spec.timestamp_column))


def _read_outcomes(
    spec: OutcomeSpec, window: Window, source: _Source, newest: int | None, plans: list[_Plan]
) -> OutcomeWindow:
    seg_col = spec.segment_column
    seg_sources = []
    for plan in plans:
        _require_numeric(plan.footer, plan.file, spec.outcome_column, "outcome", "outcome_column")
        _require_label(plan.footer, plan.file, spec.query_column, "query id", "query_column")
        seg_sources.append(_segment_source(plan.footer, plan.file, seg_col))

    labels = _Labels()
    qids: list[npt.NDArray[np.object_]] = []
    outs: list[FloatArray] = []
    segs: list[npt.NDArray[np.int32]] = []
    rows = n_nullq = n_null = n_nan = n_inf = 0
    per_file: dict[str, int] = {}
    for plan, seg_in_file in zip(plans, seg_sources, strict=True):
        dropped_before = n_nullq + n_null + n_nan + n_inf
        columns = [spec.timestamp_column, spec.query_column, spec.outcome_column]
        if seg_in_file is not None:
            columns.append(seg_in_file)
        groups = _read_groups(source, plan, columns)
        lo, hi = _native_bounds(window, plan.unit)
        for (table, memo), first in zip(groups, plan.starts, strict=True):
            # the group's columns decoded once while its file is unchanged (a reference window
            # reads the same evaluation runs at every check); the window's mask each time
            stamps, q, q_valid, value, valid = _memo(
                memo,
                (
                    "outcome",
                    spec.timestamp_column,
                    plan.unit,
                    spec.query_column,
                    spec.outcome_column,
                ),
                _decoded,
                table,
                spec,
                plan.unit,
                plan.file.path,
            )
            mask = (stamps >= lo) & (stamps < hi)
            live = _live(plan.file, first, table.num_rows)  # a table's deleted rows: no rows
            if live is not None:
                mask &= live
            in_rows = int(mask.sum())
            rows += in_rows
            mask_q = mask & q_valid
            n_nullq += in_rows - int(mask_q.sum())
            seg, seg_valid = _segment(table, plan.file, seg_col, labels, table.num_rows)
            keep = mask_q
            for extra in (valid, seg_valid):
                if extra is not None:
                    keep = keep & extra
            n_null += int(mask_q.sum()) - int(keep.sum())
            value = value[keep]
            finite = np.isfinite(value)
            bad = value[~finite]
            nan = int(np.isnan(bad).sum())
            n_nan += nan
            n_inf += bad.size - nan
            outs.append(value[finite])
            qids.append(q[keep][finite])
            if seg is not None:
                segs.append(seg[keep][finite])
        dropped = n_nullq + n_null + n_nan + n_inf - dropped_before
        if dropped:
            per_file[plan.file.path] = dropped

    if rows and (n_nullq + n_null + n_nan + n_inf) / rows > spec.max_invalid_share:
        # the column that holds most of them: null query ids once named the outcome column
        column = spec.query_column if n_nullq > n_null + n_nan + n_inf else spec.outcome_column
        _raise_bad_values(
            "outcome",
            column,
            window,
            rows,
            {f"null query id ({spec.query_column!r})": n_nullq}
            | {_null_label(spec.segment_column): n_null, "NaN": n_nan, "inf": n_inf},
            spec.max_invalid_share,
            per_file,
        )
    all_q = np.concatenate(qids) if qids else np.empty(0, dtype=object)
    all_v = np.concatenate(outs) if outs else np.empty(0, dtype=np.float64)
    q_names, q_code = np.unique(all_q.astype(str), return_inverse=True)
    if seg_col is not None:
        names = labels.names()
        all_s = np.concatenate(segs) if segs else np.empty(0, dtype=np.int32)
        order = np.argsort(np.array(names, dtype=str)) if names else np.empty(0, dtype=np.intp)
        rank = np.empty(len(names), dtype=np.int64)
        rank[order] = np.arange(len(names))
        key = rank[all_s] * max(len(q_names), 1) + q_code if all_s.size else q_code
    else:
        key = q_code
    uniq, inv = np.unique(key, return_inverse=True)
    counts = np.bincount(inv, minlength=uniq.size).astype(np.int64)
    sums = np.bincount(inv, weights=all_v, minlength=uniq.size)
    means = sums / np.maximum(counts, 1)
    width = max(len(q_names), 1)
    query_ids = q_names[uniq % width] if uniq.size else np.empty(0, dtype=np.str_)
    segments = None
    if seg_col is not None:
        sorted_names = np.array(sorted(labels.names()), dtype=str)
        segments = sorted_names[uniq // width] if uniq.size else np.empty(0, dtype=np.str_)
    return OutcomeWindow(
        window=window,
        query_ids=np.asarray(query_ids, dtype=np.str_),
        segments=segments,
        outcomes=np.asarray(means, dtype=np.float64),
        counts=counts,
        rows=rows,
        dropped_nan=n_nan,
        dropped_inf=n_inf,
        dropped_null_query=n_nullq,
        newest_timestamp=None if newest is None else _from_ns(newest),
        files_read=len(plans),
        dropped_null=n_null,
        runs=all_v[np.argsort(inv, kind="stable")],  # key by key, in read order
    )


def _decoded(
    table: pa.Table, spec: OutcomeSpec, unit: str, path: str
) -> tuple[
    IntArray,
    npt.NDArray[np.object_],
    npt.NDArray[np.bool_],
    FloatArray,
    npt.NDArray[np.bool_] | None,
]:
    """A row group's timestamps (int64 in ``unit``, nulls INT64_MIN), query ids (numpy
    objects) and their validity, outcomes (float64) and their validity (None: no null), each
    read-only (a memo shares them across checks)."""
    stamps = _ts_native(table.column(spec.timestamp_column), unit)
    qarr = table.column(spec.query_column).combine_chunks()
    if pa.types.is_dictionary(qarr.type):
        qarr = qarr.dictionary_decode()
    if not (pa.types.is_string(qarr.type) or pa.types.is_large_string(qarr.type)):
        qarr = qarr.cast(pa.string())
    refuse_nul(qarr, path, spec.query_column)
    q, q_valid = _strings(qarr), _valid(qarr)
    value, valid = _floats(table.column(spec.outcome_column))
    for a in (stamps, q, q_valid, value, valid):
        if a is not None:
            a.flags.writeable = False
    return stamps, q, q_valid, value, valid


def pair_outcomes(reference: OutcomeWindow, current: OutcomeWindow) -> PairedOutcomes:
    """Pair two outcome windows by key (``(segment, query_id)`` when both have segments).

    The result is sorted by key; ``coverage = pairs / keys in the reference`` (0.0 if it has none).
    ``extras`` both windows have (judged runs' reported metrics) are paired the same way, and
    the windows' runs (``OutcomeWindow.runs``) when both have them.
    Raises ``ValueError`` if one window has segments and the other does not.
    """
    if (reference.segments is None) != (current.segments is None):
        raise ValueError(
            "`reference` and `current` must both have segments or both have none; "
            f"got {'segments' if reference.segments is not None else 'none'} and "
            f"{'segments' if current.segments is not None else 'none'}."
        )
    vocab_q = np.unique(np.concatenate([reference.query_ids, current.query_ids]).astype(str))
    width = max(vocab_q.size, 1)

    def keys(w: OutcomeWindow, vocab_s: npt.NDArray[np.str_] | None) -> IntArray:
        k: IntArray = np.searchsorted(vocab_q, w.query_ids.astype(str)).astype(np.int64)
        if vocab_s is not None and w.segments is not None:
            k = k + np.searchsorted(vocab_s, w.segments.astype(str)).astype(np.int64) * width
        return k

    vocab_s = None
    if reference.segments is not None and current.segments is not None:
        vocab_s = np.unique(np.concatenate([reference.segments, current.segments]).astype(str))
    k_ref, k_cur = keys(reference, vocab_s), keys(current, vocab_s)
    common, i_ref, i_cur = np.intersect1d(k_ref, k_cur, assume_unique=True, return_indices=True)
    only_ref = np.setdiff1d(np.arange(k_ref.size), i_ref, assume_unique=True)
    only_cur = np.setdiff1d(np.arange(k_cur.size), i_cur, assume_unique=True)
    del common
    n_ref = k_ref.size

    runs = None
    if reference.runs is not None and current.runs is not None:
        runs = (Runs(reference.runs, reference.counts), Runs(current.runs, current.counts))

    def seg(w: OutcomeWindow, idx: npt.NDArray[np.intp]) -> npt.NDArray[np.str_] | None:
        return None if w.segments is None else w.segments[idx]

    return PairedOutcomes(
        query_ids=reference.query_ids[i_ref],
        segments=seg(reference, i_ref),
        reference=reference.outcomes[i_ref],
        current=current.outcomes[i_cur],
        reference_counts=reference.counts[i_ref],
        current_counts=current.counts[i_cur],
        only_reference=int(only_ref.size),
        only_current=int(only_cur.size),
        coverage=i_ref.size / n_ref if n_ref else 0.0,
        only_reference_ids=reference.query_ids[only_ref],
        only_current_ids=current.query_ids[only_cur],
        only_reference_segments=seg(reference, only_ref),
        only_current_segments=seg(current, only_cur),
        reference_extras={k: v[i_ref] for k, v in reference.extras.items() if k in current.extras},
        current_extras={k: v[i_cur] for k, v in current.extras.items() if k in reference.extras},
        reference_runs=None if runs is None else runs[0].take(i_ref),
        current_runs=None if runs is None else runs[1].take(i_cur),
    )
