"""Opening a source without reading its data: what ``monitor validate --sources`` checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from monitor.errors import SchemaError, SourceError, SourceNotFoundError
from monitor.sources.columns import _check_label, _check_numeric, _segment_source
from monitor.sources.footers import _FOOTERS, _column_type, _Footer, _ts_unit
from monitor.sources.judged import _is_parquet, judgments_version
from monitor.sources.model import JudgedSpec, OutcomeSpec, ScoreSpec
from monitor.sources.paths import _File, _resolve, _walk


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
        source = _resolve(spec.path, False)
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
    for f in files:
        if judged:
            try:
                if not _is_parquet(source, f):
                    continue  # a TREC run file: read (and checked line by line) at check time
            except SourceError as exc:
                problems.append(exc)
                continue
        try:
            footer = _FOOTERS.get(source, f)
        except SourceError as exc:
            problems.append(exc)
            continue
        for check in _column_checks(spec):
            try:
                check(footer, f)
            except SourceError as exc:
                problems.append(exc)
    if isinstance(spec, OutcomeSpec) and spec.judged is not None:
        try:
            judgments_version(spec.judged)  # reads the (small) judgment set whole
        except SourceError as exc:
            problems.append(exc)
    return SourceReport(spec.path, len(files), _summarise(problems))


def _column_checks(spec: ScoreSpec | OutcomeSpec) -> list[Callable[[_Footer, _File], object]]:
    """One check per configured column; each raises a ``SchemaError`` naming file and column."""
    checks: list[Callable[[_Footer, _File], object]] = [
        lambda footer, f: _ts_unit(footer, f, spec.timestamp_column, spec.timestamp_unit)
    ]
    if isinstance(spec, ScoreSpec):
        checks.append(
            lambda footer, f: _check_numeric(
                _column_type(footer, f, spec.score_column, "score", "score_column"),
                f,
                spec.score_column,
                "score",
                "score_column",
            )
        )
        if spec.rank_column is not None:
            rank = spec.rank_column
            checks.append(
                lambda footer, f: _check_numeric(
                    _column_type(footer, f, rank, "rank", "rank_column"),
                    f,
                    rank,
                    "rank",
                    "rank_column",
                )
            )
    elif spec.judged is not None:
        checks.extend(_run_checks(spec.judged))
    else:
        checks.append(
            lambda footer, f: _check_numeric(
                _column_type(footer, f, spec.outcome_column, "outcome", "outcome_column"),
                f,
                spec.outcome_column,
                "outcome",
                "outcome_column",
            )
        )
    if isinstance(spec, OutcomeSpec):
        checks.append(
            lambda footer, f: _check_label(
                _column_type(footer, f, spec.query_column, "query id", "query_column"),
                f,
                spec.query_column,
                "query id",
                "query_column",
            )
        )
    checks.append(lambda footer, f: _segment_source(footer, f, spec.segment_column))
    return checks


def _run_checks(judged: JudgedSpec) -> list[Callable[[_Footer, _File], object]]:
    """Parquet runs: a document id column, and a rank or a score column that is numeric."""

    def ordered(footer: _Footer, f: _File) -> None:
        names = set(footer.schema.names)
        present = [c for c in (judged.rank_column, judged.score_column) if c in names]
        if not present:
            raise SchemaError(
                f"has neither a rank column ({judged.rank_column!r}) nor a score column "
                f"({judged.score_column!r})",
                path=f.path,
                hint="set `rank_column` or `score_column` to the column that orders the results",
            )
        for c in present:
            _check_numeric(footer.schema.field(c).type, f, c, "rank or score", c)

    return [
        lambda footer, f: _check_label(
            _column_type(footer, f, judged.doc_column, "document id", "doc_column"),
            f,
            judged.doc_column,
            "document id",
            "doc_column",
        ),
        ordered,
    ]


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
