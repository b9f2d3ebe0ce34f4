"""Structured logs on stderr, one record per line with the ``extra`` fields of each record.

``json`` (the default): one JSON object per line. ``logfmt``: ``key=value`` pairs as Prometheus
and every exporter-toolkit exporter write them (``--log.format logfmt``), values quoted when they
hold a space, ``=`` or ``"``. Levels are accepted in any case, ``warn`` included (``--log.level``).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from monitor.redact import redact

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "JsonFormatter", "LogfmtFormatter", "configure_logging"]

LOG_LEVELS = {"debug": "DEBUG", "info": "INFO", "warn": "WARNING", "warning": "WARNING"}
LOG_LEVELS |= {"error": "ERROR", "critical": "CRITICAL"}
LOG_FORMATS = ("json", "logfmt")

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", ...extra fields}`` per line."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat().replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        # every text field without secrets: a source's path, an engine's address and an
        # exception's message may hold a password or a token (``monitor.redact``)
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = redact(value) if isinstance(value, str) else value
        if record.exc_info:
            doc["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(doc, default=str)


def _logfmt_value(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text and not any(ch in text for ch in ' ="\\\n\t'):
        return text
    return json.dumps(text)


class LogfmtFormatter(JsonFormatter):
    """``time=... level=... logger=... msg="..." key=value ...`` per line."""

    def format(self, record: logging.LogRecord) -> str:
        doc = json.loads(super().format(record))
        doc["msg"] = doc.pop("message")
        order = ["time", "level", "logger", "msg"]
        keys = order + [k for k in doc if k not in order]
        return " ".join(f"{k}={_logfmt_value(doc[k])}" for k in keys)


def configure_logging(level: str = "INFO", fmt: str = "json") -> None:
    """Send the ``monitor`` loggers' records to stderr, one per line, as ``fmt`` (json|logfmt).

    ``level`` is any of :data:`LOG_LEVELS` in any case; ``ValueError`` names the allowed ones.
    """
    name = LOG_LEVELS.get(level.lower())
    if name is None:
        raise ValueError(f"`level` must be one of {', '.join(LOG_LEVELS)}; got {level!r}")
    if fmt not in LOG_FORMATS:
        raise ValueError(f"`fmt` must be one of {', '.join(LOG_FORMATS)}; got {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter() if fmt == "logfmt" else JsonFormatter())
    root = logging.getLogger("monitor")
    root.handlers[:] = [handler]
    root.setLevel(name)
    root.propagate = False
    aps = logging.getLogger("apscheduler")
    aps.handlers[:] = [handler]
    aps.setLevel("WARNING")
    aps.propagate = False
