"""Opening a source without reading its data: what ``monitor validate --sources`` checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from monitor.errors import SourceError, SourceNotFoundError
from monitor.sources.columns import _require_label, _require_numeric, _segment_source
from monitor.sources.footers import _FOOTERS, _Footer, _footer_stats, _ts_unit
from monitor.sources.judged import _check_ordering
from monitor.sources.judgments import judgments_version
from monitor.sources.model import OutcomeSpec, ScoreSpec
from monitor.sources.partitions import _check_partition
from monitor.sources.paths import _File, _open_source, _partition_interval, _Source, _walk
from monitor.sources.textfiles import _is_parquet, mixed_kinds


@dataclass(frozen=True, slots=True)
class SourceReport:
    """What ``inspect_source`` found: how many files it listed and every problem (none: usable)."""

    path: str
    files: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when the source has no problem."""
        return not self.problems


def inspect_source(spec: ScoreSpec | OutcomeSpec) -> SourceReport:
    """List every file of a source, read each parquet footer and check the configured columns.

    No data page is read. Checked, all of them before returning: the path resolves (file,
    directory, glob or URI); every name below it can be followed (no dangling link, no loop of
    links, every partition can be listed); a glob matches a file; each footer reads; in each file
    the timestamp column is a timestamp (or an integer with ``timestamp_unit``), the score or
    outcome column is numeric, the query id and segment columns hold labels (a segment may come
    from a hive partition instead). Every partition is listed, pruning or not. A problem that
    repeats in many files (the same column missing everywhere) is reported once, with the number
    of other files that have it. An existing empty directory is not a problem (no data yet).
    """
    try:
        source = _open_source(spec, prune=False)
    except SourceError as exc:
        return SourceReport(spec.path, 0, (str(exc),))
    problems: list[SourceError] = []
    files = list(_walk(source, lambda _interval: True, on_problem=problems.append))
    if not files and source.pattern is not None:
        problems.append(
            SourceNotFoundError(
                "the glob matches no file",
                path=spec.path,
                hint="check the path in the configuration",
            )
        )
    judged = isinstance(spec, OutcomeSpec) and spec.judged is not None
    kinds: set[bool] = set()  # of the judged runs: parquet or text (a check refuses both)
    for f in files:
        if judged:
            try:
                parquet = _is_parquet(source, f)
                kinds.add(parquet)
                if not parquet:
                    continue  # a TREC run file: read (and checked line by line) at check time
            except SourceError as exc:
                problems.append(exc)
                continue
        try:
            footer = _FOOTERS.get(source, f)
        except SourceError as exc:
            problems.append(exc)
            continue
        failed = len(problems)
        for check in _column_checks(spec):
            try:
                check(footer, f)
            except SourceError as exc:
                problems.append(exc)
        if len(problems) == failed:
            _partition_problem(source, spec, f, problems)
    if kinds == {True, False}:
        problems.append(mixed_kinds(source))
    if isinstance(spec, OutcomeSpec) and spec.judged is not None:
        try:
            judgments_version(spec.judged)  # reads the (small) judgment set whole
        except SourceError as exc:
            problems.append(exc)
    return SourceReport(spec.path, len(files), _summarise(problems))


def _partition_problem(
    source: _Source, spec: ScoreSpec | OutcomeSpec, f: _File, problems: list[SourceError]
) -> None:
    """The check a pruning read makes of ``f``: its timestamps (footer statistics) inside the
    period its hive partitions spell (a file written into the wrong partition, or a typo such
    as ``date=2062-11-29``, would be missed by every window, or fail the check that reads it);
    without partitions, integer epochs that no row of the file fits in ``timestamp_unit`` (its
    statistics, or the column once when they cannot place it)."""
    interval = _partition_interval(f.partitions) if spec.prune_partitions else None
    if interval is None:
        if spec.timestamp_unit is not None:  # integer epochs: a unit that places no row
            try:
                _footer_stats(source, f, spec.timestamp_column, spec.timestamp_unit)
            except SourceError as exc:
                problems.append(exc)
        return
    try:
        _, stats = _footer_stats(source, f, spec.timestamp_column, spec.timestamp_unit)
        _check_partition(replace(f, interval=interval), stats, spec.timestamp_column)
    except SourceError as exc:
        problems.append(exc)


def _column_checks(spec: ScoreSpec | OutcomeSpec) -> list[Callable[[_Footer, _File], object]]:
    """One check per configured column; each raises a ``SchemaError`` naming file and column."""
    checks: list[Callable[[_Footer, _File], object]] = [
        lambda footer, f: _ts_unit(footer, f, spec.timestamp_column, spec.timestamp_unit)
    ]
    if isinstance(spec, ScoreSpec):
        checks.append(_numeric(spec.score_column, "score", "score_column"))
        if spec.rank_column is not None:
            checks.append(_numeric(spec.rank_column, "rank", "rank_column"))
    else:
        if spec.judged is None:
            checks.append(_numeric(spec.outcome_column, "outcome", "outcome_column"))
        else:  # parquet runs: a document id, and a rank or a score that orders the results
            judged = spec.judged
            checks.append(_label(judged.doc_column, "document id", "doc_column"))
            checks.append(lambda footer, f: _check_ordering(footer, f, judged))
        checks.append(_label(spec.query_column, "query id", "query_column"))
    checks.append(lambda footer, f: _segment_source(footer, f, spec.segment_column))
    return checks


def _numeric(column: str, role: str, key: str) -> Callable[[_Footer, _File], object]:
    return lambda footer, f: _require_numeric(footer, f, column, role, key)


def _label(column: str, role: str, key: str) -> Callable[[_Footer, _File], object]:
    return lambda footer, f: _require_label(footer, f, column, role, key)


def _summarise(problems: list[SourceError]) -> tuple[str, ...]:
    """Each distinct problem once, in the order met, with how many more files have it."""
    groups: dict[tuple[str, str | None, str, str | None], list[SourceError]] = {}
    for exc in problems:
        key = (type(exc).__name__, exc.column, exc.problem, exc.hint)
        groups.setdefault(key, []).append(exc)
    out = []
    for same in groups.values():
        text = str(same[0])
        if len(same) > 1:
            text += f" [and {len(same) - 1} more file(s) with the same problem]"
        out.append(text)
    return tuple(out)
