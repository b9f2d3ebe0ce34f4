"""Argument checks shared by the statistics modules: one message style, two exception kinds.

Misuse (wrong shape, NaN, bad option) raises :class:`~monitor.errors.StatsInputError`; a sample
that is valid but too small to decide raises :class:`~monitor.errors.InsufficientDataError`.
Messages name the parameter in backticks, state the constraint and echo the bad value.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection

import numpy as np
from numpy.typing import ArrayLike, NDArray

from monitor.errors import InsufficientDataError, StatsInputError

ALTERNATIVES = ("two-sided", "less", "greater")

RngLike = np.random.Generator | int | None


def refuse_masked(x: object, name: str) -> None:
    """``StatsInputError`` when ``x`` is a masked array that hides a value: ``np.asarray``
    drops the mask, so a masked (missing) value was used as the value under it."""
    if np.ma.isMaskedArray(x) and np.ma.getmaskarray(x).any():
        raise StatsInputError(
            f"`{name}` must not hold masked values; got "
            f"{int(np.count_nonzero(np.ma.getmaskarray(x)))} masked."
        )


def sample(x: ArrayLike, name: str, *, min_size: int = 1) -> NDArray[np.float64]:
    """``x`` as a 1-D float64 array of finite values with at least ``min_size`` elements.

    Returns the input itself (no copy) when it already is a float64 array.
    """
    refuse_masked(x, name)
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise StatsInputError(f"`{name}` must be a 1-D array of numbers; got {_short(x)}.") from exc
    if arr.ndim != 1:
        raise StatsInputError(f"`{name}` must be 1-D; got an array of shape {arr.shape}.")
    if arr.size < min_size:
        raise InsufficientDataError(
            f"`{name}` needs at least {min_size} value(s); got {arr.size}.",
            needed=min_size,
            got=int(arr.size),
        )
    if not np.isfinite(arr).all():
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        raise StatsInputError(
            f"`{name}` must not contain NaN or infinite values; got {bad} of {arr.size}."
        )
    return arr


def alternative(value: object, *, allowed: Collection[str] = ALTERNATIVES) -> str:
    """``value`` if it is one of ``allowed``."""
    if not isinstance(value, str) or value not in allowed:
        choices = ", ".join(repr(a) for a in allowed)
        raise StatsInputError(f"`alternative` must be one of {{{choices}}}; got {value!r}.")
    return value


def choice(value: object, name: str, allowed: Collection[str]) -> str:
    """``value`` if it is one of ``allowed`` (an enumeration option)."""
    if not isinstance(value, str) or value not in allowed:
        choices = ", ".join(repr(a) for a in allowed)
        raise StatsInputError(f"`{name}` must be one of {{{choices}}}; got {value!r}.")
    return value


def integer(value: object, name: str, *, minimum: int) -> int:
    """``value`` if it is an integer (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise StatsInputError(f"`{name}` must be an integer >= {minimum}; got {value!r}.")
    return int(value)


def real(
    value: object,
    name: str,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a finite float in the interval ``low .. high`` (ends open or closed)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    v = float(value) if ok else math.nan  # type: ignore[arg-type]
    if ok and math.isfinite(v):
        ok = (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
    else:
        ok = False
    if not ok:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        raise StatsInputError(
            f"`{name}` must be a finite number in {left}{_fmt(low)}, {_fmt(high)}{right}; "
            f"got {value!r}."
        )
    return v


def generator(rng: object) -> np.random.Generator:
    """A ``numpy.random.Generator`` from a Generator, an integer seed or None (fresh entropy)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or (isinstance(rng, numbers.Integral) and not isinstance(rng, bool)):
        if rng is not None and int(rng) < 0:
            raise StatsInputError(f"`rng` seed must be a non-negative integer; got {rng!r}.")
        return np.random.default_rng(None if rng is None else int(rng))
    raise StatsInputError(
        f"`rng` must be a numpy.random.Generator, a non-negative integer seed or None; "
        f"got {type(rng).__name__}."
    )


def _fmt(x: float) -> str:
    if x == math.inf:
        return "inf"
    if x == -math.inf:
        return "-inf"
    return f"{x:g}"


def _short(x: object) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."
