"""Secrets out of text a person or a log sees: a URL's password (``scheme://user:secret@``)
and a password or token given as a URL parameter (``?password=``, ``;token=``). Error
messages, verdict reasons, log lines' text fields and the pages' settings pass through
``redact``: the pages need no login by default,
and a source that cannot be reached names its URI in every reason, log line and report."""

from __future__ import annotations

import re

__all__ = ["redact"]

# ``scheme://user:password@``: the password up to the last '@' of the token (it may hold
# '/', ':' and '@'), the user possibly with an '@' of its own (Azure's ``user@server``); a
# host:port/path with an '@' is redacted too
_URL_PASSWORD = re.compile(r"(?<=://)([^/:\s]*):\S*@")
# a secret as a URL's query or path parameter: libpq's and SQLAlchemy's ?password=, Spark
# Connect's ``sc://host:15002/;token=``, an OAuth ``access_token``, an Azure SAS ``sig``
_QUERY_PASSWORD = re.compile(
    r"([?&;](?:password|passwd|pwd|token|access_token|refresh_token|client_secret|secret|sig)=)"
    r"[^&;\s]*",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with every URL password and password query parameter set to ``<redacted>``."""
    if "://" not in text and "=" not in text:  # the common case: nothing to look for
        return text
    return _QUERY_PASSWORD.sub(r"\1<redacted>", _URL_PASSWORD.sub(r"\1:<redacted>@", text))
