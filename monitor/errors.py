"""Every error this package raises on purpose.

::

    MonitorError
    ├── ConfigError            the configuration is invalid (all problems, each with its path)
    ├── StatsInputError        a statistics function was misused (bad shape, NaN, bad option)
    │   └── ConflictingJudgmentsError  one (query, document) judged twice with different grades
    ├── InsufficientDataError  too little data to decide: a state (`insufficient_data`), not a bug
    ├── EngineUnavailableError an engine (Dask, Spark) cannot be reached or is not installed
    ├── ReplayRangeError       a replay asked to start after the slot it checks
    └── SourceError            a log could not be read as the data contract says (state `error`)
        ├── SourceNotFoundError    path, glob or URI matches nothing
        ├── SourcePermissionError  a file exists but may not be read
        ├── CorruptFileError       not a parquet file, or a truncated one
        ├── SchemaError            a column is missing, has the wrong type, or schemas clash
        └── BadValuesError         too many NaN/inf/null values in a window

``StatsInputError`` and ``ReplayRangeError`` are also ``ValueError``s, so that callers treating
them as one keep working.
Each class builds its message from the data it carries.
"""

from __future__ import annotations

from monitor.redact import redact

__all__ = [
    "BadValuesError",
    "ConfigError",
    "ConflictingJudgmentsError",
    "CorruptFileError",
    "EngineUnavailableError",
    "InsufficientDataError",
    "MonitorError",
    "ReplayRangeError",
    "SchemaError",
    "SourceError",
    "SourceNotFoundError",
    "SourcePermissionError",
    "StatsInputError",
]


class MonitorError(Exception):
    """Base class of every error raised on purpose by ``monitor``."""


class ConfigError(MonitorError):
    """The configuration is invalid; ``problems`` lists every one, each prefixed with its path."""

    def __init__(self, problems: list[str], *, source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        where = f"{source}: " if source else ""
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{where}{len(self.problems)} configuration problem(s):\n{lines}")


class StatsInputError(MonitorError, ValueError):
    """A statistics function was called with invalid arguments (misuse, not lack of data)."""


class ConflictingJudgmentsError(StatsInputError):
    """A (query, document) pair is judged twice with different grades.

    ``query`` and ``doc`` are the integer codes the statistics function was given (the caller
    translates them back to ids); ``grades`` the two different grades found, smaller first.
    """

    def __init__(self, query: int, doc: int, grades: tuple[float, float]) -> None:
        self.query = query
        self.doc = doc
        self.grades = grades
        super().__init__(
            f"query {query}, document {doc} is judged twice with different grades "
            f"({grades[0]:g} and {grades[1]:g})."
        )


class InsufficientDataError(MonitorError):
    """Too little data to decide; the monitor's state becomes ``insufficient_data``."""

    def __init__(self, message: str, *, needed: int | None = None, got: int | None = None) -> None:
        self.needed = needed
        self.got = got
        super().__init__(message)


class EngineUnavailableError(MonitorError):
    """An engine cannot be used: its scheduler is unreachable, or its library is missing. The
    monitor's state becomes ``error``, naming the engine and its address (never a silent fall
    back to another engine)."""

    def __init__(self, kind: str, address: str, reason: str) -> None:
        self.kind = kind
        self.address = address
        self.reason = reason
        # an address may carry a password (``sc://host:15002/;token=``, ``user:secret@``)
        super().__init__(redact(f"{kind} engine at {address!r} is unavailable: {reason}"))


class ReplayRangeError(MonitorError, ValueError):
    """A replay (``check --at``, ``report --at``) whose ``--replay-from`` is after the slot it
    checks: a usage error (``monitor`` exits 3)."""

    def __init__(self, start: str, at: str) -> None:
        self.start, self.at = start, at
        super().__init__(f"--replay-from {start} must not be after the slot checked, {at}")


class SourceError(MonitorError):
    """A log could not be read as the data contract says; the monitor's state becomes ``error``.

    ``path`` is the file, directory or URI concerned, ``column`` the column (if any), and
    ``hint`` what to do about it.
    """

    def __init__(
        self,
        problem: str,
        *,
        path: str | None = None,
        column: str | None = None,
        hint: str | None = None,
    ) -> None:
        self.problem = problem
        self.path = path
        self.column = column
        self.hint = hint
        parts = []
        if path is not None:
            parts.append(f"{path}")
        if column is not None:
            parts.append(f"column {column!r}")
        prefix = ": ".join(parts)
        message = f"{prefix}: {problem}" if prefix else problem
        if hint:
            message += f" ({hint})"
        # the path may be a URI with a password in it (``s3://user:secret@bucket/``)
        super().__init__(redact(message))


class SourceNotFoundError(SourceError):
    """The path, glob or URI matches no file."""


class SourcePermissionError(SourceError):
    """A file exists but this process may not read it."""


class CorruptFileError(SourceError):
    """A file is not parquet, or is truncated."""


class SchemaError(SourceError):
    """A column is missing, has the wrong type, or files have incompatible schemas."""


class BadValuesError(SourceError):
    """More NaN, infinite or null values in a window than the configured share allows."""
