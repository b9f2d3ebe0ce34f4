"""Constants and time helpers shared by the verdict modules."""

from __future__ import annotations

import math
import zlib
from datetime import UTC, datetime
from decimal import Decimal

import numpy as np

from monitor.epoch import rfc3339

STATES = ("ok", "data_drift", "model_decay", "insufficient_data", "error")
TRACKS = ("reference", "anchor")
STATE_VERSION = 2
_NS = 1_000_000_000
_HOUR_NS = 3600 * _NS
_MAX_LOOKS_KEPT = 10_000


def _iso(t: datetime | None) -> str | None:
    return None if t is None else rfc3339(t)


def _parse_iso(text: str | None) -> datetime | None:
    if text is None:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def percent(level: float) -> str:
    """A level as a percentage, as exact as it was set (from the float's shortest repr, in
    decimal): 0.95 -> ``95``, 0.995 -> ``99.5``, 0.9999999 -> ``99.99999`` (rounded to whole
    percent, or to six significant digits, they read "100 %")."""
    return format((Decimal(repr(float(level))) * 100).normalize(), "f")


def _finite(x: float) -> float | None:
    """JSON has no NaN/inf: non-finite numbers become null."""
    return float(x) if math.isfinite(x) else None


def _rng_seed(seed: int, segment: str) -> np.random.SeedSequence:
    """The seed of a segment's resampling: (monitor seed, CRC-32 of the segment name)."""
    return np.random.SeedSequence([seed, zlib.crc32(segment.encode("utf-8"))])
