"""Reading the scores of a window."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from monitor.epoch import from_ns as _from_ns
from monitor.sources.columns import (
    _compact_codes,
    _floats,
    _in_window,
    _Labels,
    _raise_bad_values,
    _read_group,
    _require_numeric,
    _segment,
    _segment_source,
    _select,
    _shrink,
)
from monitor.sources.footers import _opened, _ts_to_ns
from monitor.sources.model import ScoreSpec, ScoreWindow, Window
from monitor.sources.partitions import _newest_checked, _plan
from monitor.sources.paths import _resolve


def read_scores(spec: ScoreSpec, window: Window, *, with_timestamps: bool = False) -> ScoreWindow:
    """Read the finite scores whose timestamp is in ``window`` (half-open, UTC).

    Only the row groups whose timestamp statistics overlap the window are read, and only the
    timestamp, score and segment columns; rows are copied straight into a preallocated float64
    array (no pandas). ``with_timestamps`` also returns the aligned timestamps (int64 ns, UTC), so
    a caller can read a long span once and slice it. Raises ``BadValuesError`` when
    ``dropped / rows > spec.max_invalid_share``. With ``spec.rank_column`` (a full result log)
    only the rows ranked ``spec.top_rank`` are scores, and only they count as rows.
    """
    if not isinstance(window, Window):
        raise TypeError(f"`window` must be a Window; got {type(window).__name__}.")
    source = _resolve(spec.path, spec.prune_partitions)
    newest, _ = _newest_checked(source, spec.timestamp_column, spec.timestamp_unit)
    plans = _plan(source, window, spec.timestamp_column, spec.timestamp_unit)

    seg_col = spec.segment_column
    seg_sources = []
    for plan in plans:
        _require_numeric(plan.footer, plan.file, spec.score_column, "score", "score_column")
        if spec.rank_column is not None:
            _require_numeric(plan.footer, plan.file, spec.rank_column, "rank", "rank_column")
        seg_sources.append(_segment_source(plan.footer, plan.file, seg_col))

    capacity = sum(p.capacity for p in plans)
    values = np.empty(capacity, dtype=np.float64)
    stamps = np.empty(capacity if with_timestamps else 0, dtype=np.int64)
    codes = np.empty(capacity if seg_col is not None else 0, dtype=np.int32)
    labels = _Labels()
    n = rows = n_null = n_nan = n_inf = 0
    per_file: dict[str, int] = {}

    for plan, seg_in_file in zip(plans, seg_sources, strict=True):
        dropped_before = n_null + n_nan + n_inf
        with _opened(source, plan.file, plan.footer) as pf:
            for g, inside in zip(plan.groups, plan.inside, strict=True):
                need_ts = with_timestamps or not inside
                columns = [spec.score_column]
                if need_ts:
                    columns.append(spec.timestamp_column)
                if seg_in_file is not None:
                    columns.append(seg_in_file)
                if spec.rank_column is not None:
                    columns.append(spec.rank_column)
                table = _read_group(pf, plan, g, columns)
                score, valid = _floats(table.column(spec.score_column))
                mask = (
                    None if inside else _in_window(table, spec.timestamp_column, plan.unit, window)
                )
                if spec.rank_column is not None:
                    rank, rank_valid = _floats(table.column(spec.rank_column))
                    top = rank == spec.top_rank
                    if rank_valid is not None:
                        top &= rank_valid
                    mask = top if mask is None else mask & top
                seg, seg_valid = _segment(table, plan.file, seg_col, labels, table.num_rows)
                in_rows = table.num_rows if mask is None else int(mask.sum())
                rows += in_rows
                keep = mask
                for extra in (valid, seg_valid):
                    if extra is not None:
                        keep = extra if keep is None else keep & extra
                if keep is not None:
                    n_null += in_rows - int(keep.sum())
                    score = score[keep]
                finite = np.isfinite(score)
                if finite.all():
                    take = None
                    kept = score
                else:
                    bad = score[~finite]
                    nan = int(np.isnan(bad).sum())
                    n_nan += nan
                    n_inf += bad.size - nan
                    take = finite
                    kept = score[finite]
                m = kept.size
                values[n : n + m] = kept
                if with_timestamps:
                    ns = _ts_to_ns(table.column(spec.timestamp_column), plan.unit)
                    ns = _select(ns, keep, take)
                    stamps[n : n + m] = ns
                if seg is not None:
                    codes[n : n + m] = _select(seg, keep, take)
                n += m
        if n_null + n_nan + n_inf > dropped_before:
            per_file[plan.file.path] = n_null + n_nan + n_inf - dropped_before

    if rows and (n_null + n_nan + n_inf) / rows > spec.max_invalid_share:
        _raise_bad_values(
            "score",
            spec.score_column,
            window,
            rows,
            {"null": n_null, "NaN": n_nan, "inf": n_inf},
            spec.max_invalid_share,
            per_file,
        )
    values = _shrink(values, n)
    seg_codes: npt.NDArray[np.int32] | None = None
    seg_names: tuple[str, ...] = ()
    if seg_col is not None:
        seg_codes, seg_names = _compact_codes(_shrink(codes, n), labels.names())
    return ScoreWindow(
        window=window,
        values=values,
        timestamps=_shrink(stamps, n) if with_timestamps else None,
        segment_codes=seg_codes,
        segment_names=seg_names,
        rows=rows,
        dropped_nan=n_nan,
        dropped_inf=n_inf,
        dropped_null=n_null,
        newest_timestamp=None if newest is None else _from_ns(newest),
        files_read=len(plans),
    )
