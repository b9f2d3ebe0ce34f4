"""Nanoseconds since the Unix epoch, the one time unit the readers, the verdict and the
backtest exchange (parquet timestamps of any unit are converted to it on read)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["EPOCH", "from_ns", "rfc3339", "to_ns"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_ns(moment: datetime) -> int:
    """Nanoseconds since the epoch of a timezone-aware datetime (exact: datetimes hold
    microseconds)."""
    return (moment - EPOCH) // timedelta(microseconds=1) * 1_000


def rfc3339(moment: datetime) -> str:
    """A timezone-aware datetime as the RFC 3339 text every output uses: UTC, ``Z``."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def from_ns(ns: int) -> datetime:
    """The UTC datetime of ``ns`` nanoseconds since the epoch, floored to microseconds."""
    return EPOCH + timedelta(microseconds=ns // 1_000)
