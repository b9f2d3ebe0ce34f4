"""Reading single TOML values: ``_Collector`` gathers problems with their paths, and each
converter turns one value into its Python type or raises ``ValueError`` naming the constraint
and the bad value (``parse_listen`` is also the ``--web.listen-address`` parser).
"""

from __future__ import annotations

import glob
import ipaddress
import math
import os
import re
import socket
import urllib.parse
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from monitor.config.model import ENGINE_KINDS
from monitor.errors import StatsInputError
from monitor.schedule import Schedule, parse_duration, parse_rfc3339, parse_schedule
from monitor.sources.model import GainKind
from monitor.stats import parse_metric

T = TypeVar("T")


class _Collector:
    """Gathers problems while reading a TOML table, each prefixed with its path."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self._unknown: set[int] = set()  # the problems that are unknown keys (by position)

    def add(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def failed(self, *paths: str, since: int = 0) -> bool:
        """Whether a problem was recorded (after the first ``since``) for one of ``paths`` or
        a key under it: a check across settings runs only on values that parsed (one bad
        value once added errors about defaults the user never wrote)."""
        # an unknown key (a typo beside the values) leaves every value that parsed in force:
        # counted, one typo hid every check across settings until it was fixed
        return any(
            p.startswith((f"{path}:", f"{path}."))
            for i, p in enumerate(self.problems[since:], since)
            if i not in self._unknown
            for path in paths
        )

    def table(self, data: Any, path: str) -> dict[str, Any]:
        if data is None:
            return {}
        if not isinstance(data, dict):
            self.add(path, f"must be a table; got {type(data).__name__}")
            return {}
        return data

    def unknown(self, data: dict[str, Any], path: str, known: set[str]) -> None:
        for key in sorted(set(data) - known):
            where = f"{path}.{key}" if path else key
            self._unknown.add(len(self.problems))
            self.add(where, f"unknown key (known: {', '.join(sorted(known))})")

    def get(
        self,
        data: dict[str, Any],
        key: str,
        path: str,
        default: T,
        convert: Callable[[Any], T],
    ) -> T:
        if key not in data:
            return default
        where = f"{path}.{key}" if path else key
        try:
            return convert(data[key])
        except (ValueError, TypeError) as exc:
            self.add(where, str(exc))
            return default


def _string(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"must be a non-empty string; got {value!r}")
    return value


def _optional_string(value: Any) -> str | None:
    return _string(value)


def _int(low: int, high: int | None = None) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < low
            or (high is not None and value > high)
        ):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise ValueError(f"must be an integer {bound}; got {value!r}")
        return value

    return convert


def _float(
    low: float, high: float, *, open_low: bool = False, open_high: bool = False
) -> Callable[[Any], float]:
    def convert(value: Any) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok:
            try:
                v = float(value)
            except OverflowError:  # an integer of hundreds of digits (TOML has no limit)
                v = math.inf
            ok = math.isfinite(v) and (v > low if open_low else v >= low)
            ok = ok and (v < high if open_high else v <= high)
        if not ok:
            lo = "(" if open_low else "["
            hi = ")" if open_high else "]"
            raise ValueError(f"must be a number in {lo}{low}, {high}{hi}; got {value!r}")
        return v

    return convert


def _gain(value: Any) -> GainKind:
    if value == "linear":
        return "linear"
    if value == "exponential":
        return "exponential"
    raise ValueError(f"must be 'linear' or 'exponential'; got {value!r}")


def _duration(value: Any) -> timedelta:
    if not isinstance(value, str):
        raise ValueError(f"must be a duration string like '1h'; got {value!r}")
    return parse_duration(value)


def _nonneg_duration(value: Any) -> timedelta:
    """A duration that may be zero: ``0``, or zero of any unit (``"0s"``, ``"0m"``, ``"0.0h"``)."""
    if not isinstance(value, bool) and (value == 0 or value == "0"):  # False == 0 was read as 0
        return timedelta(0)
    if not isinstance(value, str):
        raise ValueError(f"must be a duration string like '1h'; got {value!r}")
    return parse_duration(value, zero=True)


def _timestamp(value: Any) -> datetime:
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = parse_rfc3339(value)
        except ValueError:
            raise ValueError(f"must be an RFC 3339 timestamp; got {value!r}") from None
    else:
        raise ValueError(f"must be an RFC 3339 timestamp; got {value!r}")
    if parsed.tzinfo is None:
        raise ValueError(f"must carry a timezone (e.g. 'Z'); got {value!r}")
    try:
        utc = parsed.astimezone(UTC)
    except OverflowError:
        utc = None
    # the data's timestamps are int64 ns: a bound past them passed validate and failed
    # every check (or crashed validate itself at year 1 or 9999)
    if utc is None or not _TIMESTAMPS[0] <= utc <= _TIMESTAMPS[1]:
        raise ValueError(
            f"must be an RFC 3339 timestamp within 1677-09-22..2262-04-11 (the timestamps "
            f"data can hold); got {value!r}"
        )
    return utc


_TIMESTAMPS = (datetime(1677, 9, 22, 1, tzinfo=UTC), datetime(2262, 4, 11, tzinfo=UTC))


def _unit(value: Any) -> Any:
    if value not in ("s", "ms", "us", "ns"):
        raise ValueError(f"must be one of 's', 'ms', 'us', 'ns'; got {value!r}")
    return str(value)


def _resolve(base: Path, text: str) -> str:
    if "://" in text or Path(text).is_absolute():
        return text
    return str(base / text)


def _resolve_pattern(base: Path, text: str) -> str:
    """``_resolve`` for a parquet or TREC source, where ``*``, ``?`` and ``[`` are globs: a
    relative ``text`` joins the config's directory with its glob characters escaped
    (``glob.escape``), so only what the user wrote is a pattern (a config in ``runs[1]/``
    once read ``runs1/``'s files, ``[1]`` taken for a character class)."""
    if "://" in text or Path(text).is_absolute():
        return text
    return os.path.join(glob.escape(str(base)), text)


_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*\.?$")


def parse_listen(text: Any) -> tuple[str, int]:
    """``(host, port)`` of ``host:port``, ``[IPv6]:port`` or ``:port`` (loopback); ``ValueError``.

    A hostname must resolve (``getaddrinfo``), since binding it would fail at start-up otherwise.
    """
    shape = "must be 'host:port', '[IPv6]:port' or ':port' with a port in [0, 65535]"
    if not isinstance(text, str):
        raise ValueError(f"{shape}; got {text!r}")
    match = re.fullmatch(r"(?:\[([^\]]+)\]|([^\[\]:]*)):(\d{1,5})", text)
    if match is None:
        if text.count(":") > 1 and not text.startswith("["):
            raise ValueError(f"{shape} (put an IPv6 address in brackets); got {text!r}")
        raise ValueError(f"{shape}; got {text!r}")
    v6, host, port_text = match.groups()
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"{shape}; got {text!r}")
    if v6 is not None:
        try:
            if ipaddress.ip_address(v6.split("%", 1)[0]).version != 6:
                raise ValueError
        except ValueError:
            raise ValueError(f"'[{v6}]' is not an IPv6 address; got {text!r}") from None
        return v6, port
    if not host:
        return "127.0.0.1", port
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        pass
    else:
        return host, port
    if re.fullmatch(r"[0-9.]+", host) or not _HOSTNAME.match(host):
        raise ValueError(f"{host!r} is neither an IPv4 address nor a hostname; got {text!r}")
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise ValueError(f"hostname {host!r} does not resolve ({exc}); got {text!r}") from None
    return host, port


def _url(value: Any) -> str:
    """An http(s) URL, as given (a runbook's ``.../runbook/`` is another page than
    ``.../runbook``: its slash was cut, and the pages' links missed it)."""
    text = _string(value)
    if not re.fullmatch(r"https?://[^\s/?#]+[^\s]*", text):  # "$" let a final newline in
        raise ValueError(f"must be an http:// or https:// URL without spaces; got {text!r}")
    return text


def _base_url(value: Any) -> str:
    """An http(s) URL that paths are appended to: without its path's trailing slashes, its
    query kept (Grafana's ``?orgId=2``: the pages put it in each link's own query), no
    ``#fragment`` (a path appended after one is no path: every link was broken)."""
    text = _url(value)
    parts = urllib.parse.urlsplit(text)
    if parts.fragment or text.endswith("#"):
        raise ValueError(f"must be a URL without a #fragment; got {text!r}")
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/")))


def _engine_kind(value: Any) -> str:
    if value not in ENGINE_KINDS:
        raise ValueError(f"must be one of {', '.join(map(repr, ENGINE_KINDS))}; got {value!r}")
    return str(value)


def _grid_kind(value: Any) -> str:
    if value not in ("auto", "full"):
        raise ValueError(f"must be 'auto' or 'full'; got {value!r}")
    return str(value)


def _format(value: Any) -> str:
    if value not in ("parquet", "delta", "iceberg"):
        raise ValueError(f"must be 'parquet', 'delta' or 'iceberg'; got {value!r}")
    return str(value)


def _catalog(value: Any) -> tuple[tuple[str, str], ...]:
    """``catalog.*``: pyiceberg ``load_catalog`` properties (strings), ``name`` among them."""
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"must be a table of strings (catalog properties); got {value!r}")
    return tuple(sorted(value.items()))


def _metric(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a metric name such as 'ndcg@10'; got {value!r}")
    try:
        return parse_metric(value).name
    except StatsInputError as exc:
        raise ValueError(str(exc)) from None


def _decision_metric(value: Any) -> str:
    """A metric that measures quality: judged@k (the share of the top k that has a
    judgment) measures the judgments' coverage, and deciding decay on it would page
    unjudged documents as model decay (it is always computed and reported, and its fall
    makes a look undecidable: ``judged_tolerance``)."""
    name = _metric(value)
    if parse_metric(name).kind == "judged":
        raise ValueError(
            f"{name} measures judgment coverage, not quality; decide on ndcg@k, ndcg, "
            "ndcg'@k, ap, rprec, rr, p@k or r@k (judged@k is always reported)"
        )
    return name


def _metrics(value: Any) -> tuple[str, ...]:
    """A list of metric names; every bad one named with its index (one problem line)."""
    if not isinstance(value, list):
        raise ValueError(f"must be a list of metric names; got {value!r}")
    names: list[str] = []
    bad: list[tuple[int, Any, ValueError]] = []
    for i, v in enumerate(value):
        try:
            names.append(_metric(v))
        except ValueError as exc:
            bad.append((i, v, exc))
    if bad:
        (i, _, first), rest = bad[0], bad[1:]
        also = ", ".join(f"[{j}] {v!r}" for j, v, _ in rest)
        raise ValueError(f"[{i}]: {first}" + (f" Also not metric names: {also}." if also else ""))
    return tuple(names)


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false; got {value!r}")
    return value


def _schedule(value: Any) -> Schedule:
    if not isinstance(value, str):
        raise ValueError(f"must be an interval like '1h' or a 5-field cron string; got {value!r}")
    return parse_schedule(value)


def _seasonality(value: Any) -> str:
    if value not in ("auto", "none", "daily", "weekly"):
        raise ValueError(f"must be one of 'auto', 'none', 'daily', 'weekly'; got {value!r}")
    return str(value)
