"""Secrets out of text a person or a log sees: a URL's password (``scheme://user:secret@``)
and a password given as a URL query parameter (``?password=``). Error messages, verdict
reasons and the pages' settings pass through ``redact``: the pages need no login by default,
and a source that cannot be reached names its URI in every reason, log line and report."""

from __future__ import annotations

import re

__all__ = ["redact"]

# ``scheme://user:password@``: the password up to the last '@' of the token (it may hold
# '/', ':' and '@'), the user possibly with an '@' of its own (Azure's ``user@server``); a
# host:port/path with an '@' is redacted too
_URL_PASSWORD = re.compile(r"(?<=://)([^/:\s]*):\S*@")
# a password as a URL's query parameter (libpq and SQLAlchemy read ?password=)
_QUERY_PASSWORD = re.compile(r"([?&;](?:password|passwd|pwd)=)[^&;\s]*", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every URL password and password query parameter set to ``<redacted>``."""
    if "://" not in text and "=" not in text:  # the common case: nothing to look for
        return text
    return _QUERY_PASSWORD.sub(r"\1<redacted>", _URL_PASSWORD.sub(r"\1:<redacted>@", text))
