"""The exporter-toolkit web config file (``--web.config.file``); the only module importing yaml.

The format is the one every exporter-toolkit exporter (node_exporter, Prometheus itself) reads::

    tls_server_config:
      cert_file: server.crt            # PEM; both or neither
      key_file: server.key
      client_auth_type: NoClientCert   # | VerifyClientCertIfGiven | RequireAndVerifyClientCert
      client_ca_file: ca.crt           # required by the two verifying policies
      min_version: TLS12               # TLS10 | TLS11 | TLS12 | TLS13
      max_version: TLS13
    http_server_config:
      headers: {X-Content-Type-Options: nosniff}
    basic_auth_users:
      alice: $2y$10$...                # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\\n')

Relative file names resolve against the web config file's directory. Parsing gathers every problem,
each prefixed with its path in the file (``tls_server_config.cert_file: ...``), and also loads the
certificate and key into an ``ssl.SSLContext`` so that a file ``validate`` accepts is one that
``run`` can serve. ``RequestClientCert`` and ``RequireAnyClientCert`` (request or require a client
certificate *without verifying it*) cannot be expressed with Python's ``ssl`` module and are
rejected with that reason, as are the settings this server does not implement (inline PEM,
cipher suites, curves, ``client_allowed_sans``, ``rate_limit``): silently ignoring a security
setting would be worse than refusing it.
"""

from __future__ import annotations

import os
import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from monitor.files import MAX_CONFIG_BYTES, read_config_text, read_regular

__all__ = [
    "CLIENT_AUTH_TYPES",
    "TLS_VERSIONS",
    "TlsConfig",
    "WebConfig",
    "build_ssl_context",
    "check_tls_files",
    "directory_of",
    "load_web_config",
    "named_files",
    "unreadable",
]

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# exporter-toolkit policy -> (verify mode, needs a client CA); None: cannot be served in Python
CLIENT_AUTH_TYPES: dict[str, tuple[ssl.VerifyMode, bool] | None] = {
    "NoClientCert": (ssl.CERT_NONE, False),
    "RequestClientCert": None,
    "RequireAnyClientCert": None,
    "VerifyClientCertIfGiven": (ssl.CERT_OPTIONAL, True),
    "RequireAndVerifyClientCert": (ssl.CERT_REQUIRED, True),
}
# the response headers exporter-toolkit lets a web config set
_HEADERS = (
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
)
# the prefixes bcrypt checks ($2a$, $2b$, $2y$ from htpasswd); '$2$' and '$2x$' passed
# validation and could never match, locking that user out without a word
# and the costs bcrypt takes (4-31, as exporter-toolkit's bcrypt.Cost): "$2b$99$" passed, then
# its check never ended (the unknown-user hash was made at cost 31); "$2b$03$" never matched
_BCRYPT = re.compile(r"^\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}$")
_COST = re.compile(r"^\$2[aby]\$([0-9]{2})\$[./A-Za-z0-9]{53}$")  # a hash but for its cost
# the values exporter-toolkit allows for two of them (any value for the others; browsers read
# them case-insensitively, and DENY is the usual spelling)
_HEADER_VALUES = {"X-Content-Type-Options": ("nosniff",), "X-Frame-Options": ("deny", "sameorigin")}
_UNSUPPORTED = {
    "cert": "inline PEM is not supported; use cert_file",
    "key": "inline PEM is not supported; use key_file",
    "client_ca": "inline PEM is not supported; use client_ca_file",
    "cipher_suites": "not supported (Go cipher suite names have no OpenSSL equivalent here)",
    "curve_preferences": "not supported",
    "client_allowed_sans": "not supported",
    "rate_limit": "not supported",
}


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """The TLS settings of the endpoint (from the web config or ``[server] tls_*_file``)."""

    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    min_version: str = "TLS12"
    max_version: str = "TLS13"

    def files(self) -> tuple[Path, ...]:
        """The files the SSL context is built from (their mtimes trigger a reload)."""
        return (self.cert_file, self.key_file) + (
            (self.client_ca_file,) if self.client_ca_file is not None else ()
        )


@dataclass(frozen=True, slots=True)
class WebConfig:
    """A parsed web configuration file; an empty one means plain HTTP without authentication."""

    path: Path | None = None
    tls: TlsConfig | None = None
    headers: dict[str, str] = field(default_factory=dict)
    basic_auth_users: dict[str, bytes] = field(default_factory=dict)


def build_ssl_context(tls: TlsConfig) -> ssl.SSLContext:
    """A server ``SSLContext`` for ``tls``; ``OSError`` (``ssl.SSLError``) if a file fails."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = TLS_VERSIONS[tls.min_version]
    context.maximum_version = TLS_VERSIONS[tls.max_version]
    for name in tls.files():  # a FIFO there: an error, not a load that waits for ever
        read_regular(name, MAX_CONFIG_BYTES)
    context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    policy = CLIENT_AUTH_TYPES[tls.client_auth_type]
    if policy is None:  # rejected by validation; kept for a caller building one by hand
        raise ValueError(f"client_auth_type {tls.client_auth_type!r} is not supported")
    mode, _ = policy
    if tls.client_ca_file is not None:
        context.load_verify_locations(cafile=str(tls.client_ca_file))
    context.verify_mode = mode
    return context


def _file_problem(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"file not found: {exc.filename}"
    if isinstance(exc, PermissionError):
        return f"permission denied: {exc.filename}"
    if isinstance(exc, ssl.SSLError):
        return f"cannot load the certificate or key: {exc.reason or exc}"
    return f"cannot load the certificate or key: {exc}"


def check_tls_files(tls: TlsConfig) -> str | None:
    """``None`` when an SSL context can be built from ``tls``, else why not (one line)."""
    for path in tls.files():
        if not path.is_file():
            return f"file not found: {path}"
        if not os.access(path, os.R_OK):
            return f"permission denied: {path}"
    try:
        build_ssl_context(tls)
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        return _file_problem(exc)
    return None


class _Problems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(f"{where}: {message}")

    def mapping(self, value: Any, where: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            self.add(where, f"must be a mapping with string keys; got {type(value).__name__}")
            return {}
        return value

    def unknown(self, data: dict[str, Any], where: str, known: set[str]) -> None:
        for key in sorted(set(data) - known):
            reason = _UNSUPPORTED.get(key, f"unknown key (known: {', '.join(sorted(known))})")
            self.add(f"{where}.{key}" if where else key, reason)


def _string(p: _Problems, data: dict[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        p.add(f"{where}.{key}", f"must be a non-empty string; got {value!r}")
        return None
    return value


def _choice(
    p: _Problems, data: dict[str, Any], key: str, where: str, allowed: list[str], default: str
) -> str:
    value = data.get(key, default)
    if value not in allowed:
        p.add(f"{where}.{key}", f"must be one of {', '.join(allowed)}; got {value!r}")
        return default
    return str(value)


def _parse_tls(p: _Problems, data: Any, base: Path) -> TlsConfig | None:
    where = "tls_server_config"
    t = p.mapping(data, where)
    if not t:
        return None
    known = {
        "cert_file",
        "key_file",
        "client_auth_type",
        "client_ca_file",
        "min_version",
        "max_version",
        "prefer_server_cipher_suites",
    }
    p.unknown(t, where, known)
    if "prefer_server_cipher_suites" in t and not isinstance(
        t["prefer_server_cipher_suites"], bool
    ):
        p.add(f"{where}.prefer_server_cipher_suites", "must be true or false")
    cert = _string(p, t, "cert_file", where)
    key = _string(p, t, "key_file", where)
    ca = _string(p, t, "client_ca_file", where)
    auth = _choice(p, t, "client_auth_type", where, list(CLIENT_AUTH_TYPES), "NoClientCert")
    versions = list(TLS_VERSIONS)
    low = _choice(p, t, "min_version", where, versions, "TLS12")
    high = _choice(p, t, "max_version", where, versions, "TLS13")
    ok = True
    if cert is None or key is None:
        p.add(where, "cert_file and key_file are both required")
        ok = False
    policy = CLIENT_AUTH_TYPES.get(auth)
    if policy is None:
        p.add(
            f"{where}.client_auth_type",
            f"{auth} (accept a client certificate without verifying it) cannot be served by "
            f"Python's ssl module; use VerifyClientCertIfGiven or RequireAndVerifyClientCert",
        )
        ok = False
    elif policy[1] and ca is None:
        p.add(f"{where}.client_ca_file", f"is required with client_auth_type {auth}")
        ok = False
    elif not policy[1] and ca is not None:
        p.add(
            f"{where}.client_ca_file",
            "is set but client_auth_type is NoClientCert (set VerifyClientCertIfGiven or "
            "RequireAndVerifyClientCert)",
        )
        ok = False
    if versions.index(low) > versions.index(high):
        p.add(where, f"min_version {low} is above max_version {high}")
        ok = False
    if not ok or cert is None or key is None:
        return None
    tls = TlsConfig(
        cert_file=base / cert,
        key_file=base / key,
        client_auth_type=auth,
        client_ca_file=base / ca if ca else None,
        min_version=low,
        max_version=high,
    )
    problem = check_tls_files(tls)
    if problem is not None:
        p.add(where, problem)
        return None
    return tls


def _parse_headers(p: _Problems, data: Any) -> dict[str, str]:
    where = "http_server_config"
    t = p.mapping(data, where)
    p.unknown(t, where, {"headers", "http2"})
    if "http2" in t and not isinstance(t["http2"], bool):
        p.add(f"{where}.http2", "must be true or false")
    headers = p.mapping(t.get("headers"), f"{where}.headers")
    out: dict[str, str] = {}
    allowed = {h.lower(): h for h in _HEADERS}
    for name, value in headers.items():
        if name.lower() not in allowed:
            p.add(f"{where}.headers.{name}", f"not settable (allowed: {', '.join(_HEADERS)})")
        elif not isinstance(value, str) or "\n" in value or "\r" in value:
            p.add(f"{where}.headers.{name}", f"must be a one-line string; got {value!r}")
        elif any(not (" " <= c <= "~" or c == "\t") for c in value):
            # a value http.server cannot send (it encodes Latin-1, strictly) failed every
            # answer, /healthz's and the 500's included: an empty reply, no error at start
            bad = next(c for c in value if not (" " <= c <= "~" or c == "\t"))
            p.add(
                f"{where}.headers.{name}",
                f"must be printable ASCII (RFC 9110 field values); got {bad!r} in {value!r}",
            )
        elif allowed[name.lower()] in _HEADER_VALUES and (
            value.lower() not in _HEADER_VALUES[allowed[name.lower()]]
        ):
            choices = ", ".join(repr(v) for v in _HEADER_VALUES[allowed[name.lower()]])
            p.add(f"{where}.headers.{name}", f"must be one of {choices}; got {value!r}")
        elif value:
            out[allowed[name.lower()]] = value
    return out


def _parse_users(p: _Problems, data: Any) -> dict[str, bytes]:
    where = "basic_auth_users"
    users = p.mapping(data, where)
    out: dict[str, bytes] = {}
    for user, hashed in users.items():
        if ":" in user or not user:
            p.add(f"{where}.{user}", "a user name must be non-empty and contain no ':'")
        elif (
            isinstance(hashed, str) and (cost := _COST.match(hashed)) and not _BCRYPT.match(hashed)
        ):
            p.add(f"{where}.{user}", f"a bcrypt cost must be 04 to 31; got {cost.group(1)}")
        elif not isinstance(hashed, str) or not _BCRYPT.match(hashed):
            p.add(
                f"{where}.{user}",
                "must be a bcrypt hash like '$2y$10$' followed by 53 characters "
                "(htpasswd -nBC 10 \"\" | tr -d ':\\n')",
            )
        else:
            out[user] = hashed.encode("ascii")
    return out


def unreadable(exc: OSError | UnicodeDecodeError) -> str:
    """The problem line for a configuration file that cannot be read (its OS reason or the
    decoding error): "cannot read the file: No such file or directory"."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return f"cannot read the file: {reason}"


def directory_of(path: Path) -> Path:
    """The directory relative paths in the file at ``path`` resolve against: its absolute
    path's, symlinks not followed and ``..`` left to the kernel (which opened the file
    through them: collapsed lexically, '../web/web.yml' under a linked directory named
    another directory than the one the file was read from). A Kubernetes ConfigMap or Secret mount
    links each file through ``..data`` into a versioned directory that the kubelet deletes
    at the next update: resolved, a relative ``web_config_file`` or certificate bound to that
    version, so a rotated password or certificate was never seen (not even after SIGHUP)."""
    return Path(path).absolute().parent


def named_files(path: Path) -> tuple[Path, ...]:
    """The certificate, key and client CA files the web config at ``path`` names, as far as
    it can be read (none when it cannot): a reload that failed on them watches them."""
    try:
        data = yaml.safe_load(read_config_text(path))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return ()
    tls = data.get("tls_server_config") if isinstance(data, dict) else None
    if not isinstance(tls, dict):
        return ()
    base = directory_of(path)
    names = (tls.get(key) for key in ("cert_file", "key_file", "client_ca_file"))
    return tuple(base / name for name in names if isinstance(name, str) and name)


def load_web_config(path: Path) -> tuple[WebConfig | None, list[str]]:
    """Parse and check a web config file: ``(config, [])`` or ``(None, problems)``.

    Each problem is prefixed with its key path in the file; the caller adds the file's name.
    """
    try:
        text = read_config_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        return None, [unreadable(exc)]
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return None, [f"not valid YAML: {exc}"]
    except RecursionError:  # sequences or mappings nested hundreds deep
        return None, ["not valid YAML: nested too deeply"]
    p = _Problems()
    doc = p.mapping(data, "(document)")
    p.unknown(doc, "", {"tls_server_config", "http_server_config", "basic_auth_users"})
    base = directory_of(path)
    tls = _parse_tls(p, doc.get("tls_server_config"), base)
    headers = _parse_headers(p, doc.get("http_server_config"))
    users = _parse_users(p, doc.get("basic_auth_users"))
    if p.items:
        return None, p.items
    return WebConfig(path=path, tls=tls, headers=headers, basic_auth_users=users), []
