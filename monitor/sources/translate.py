"""Every pyarrow / OS failure becomes a ``SourceError`` subclass that names the file."""

from __future__ import annotations

import errno
import re

import pyarrow as pa

from monitor.errors import (
    CorruptFileError,
    SourceError,
    SourceNotFoundError,
    SourcePermissionError,
)

# pyarrow reports undecodable pages as a bare OSError (no errno); these words tell them from I/O.
_CORRUPT = re.compile(
    r"deserializ|thrift|corrupt|magic|truncat|unexpected end|page header|decompress|invalid|"
    r"out of bounds|exceeds|premature|snappy|zstd|lz4|gzip|brotli|checksum",
    re.IGNORECASE,
)


def _translate(exc: BaseException, path: str, doing: str) -> SourceError:
    """Map an exception raised by pyarrow or the OS while ``doing`` something to ``path``."""
    text = str(exc)
    if (
        isinstance(exc, PermissionError)
        or (isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM))
        or "Permission denied" in text
        or "[errno 13]" in text
    ):
        return SourcePermissionError(
            f"permission denied while {doing}: {text}",
            path=path,
            hint="grant the monitor's user read access to the file and its directories",
        )
    if isinstance(exc, FileNotFoundError):
        return SourceNotFoundError(
            f"disappeared while {doing}: {text}",
            path=path,
            hint="the file was removed or renamed during the read; retry, or check the producer",
        )
    decoding = isinstance(exc, OSError) and exc.errno is None and _CORRUPT.search(text) is not None
    if decoding or isinstance(exc, pa.ArrowException | ValueError | EOFError):
        return CorruptFileError(
            f"cannot be read as parquet while {doing}: {text}",
            path=path,
            hint="the file is corrupt or truncated; rewrite it, or move it out of the source "
            "(a name starting with '_' or '.' is skipped)",
        )
    return SourceError(
        f"I/O error while {doing}: {type(exc).__name__}: {text}",
        path=path,
        hint="check that the storage is reachable and retry",
    )
