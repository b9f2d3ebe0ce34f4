"""The HTTP endpoint: ``/metrics``, ``/healthz``, ``/status``, the landing page ``/`` and one
page per monitor, ``/monitors/<name>`` (``monitor.report``: the latest check, drawn).

No client can stall another. One thread runs a non-blocking accept loop and does nothing slow: it
admits a connection (or, past ``max_connections``, closes it at once and counts it) and hands it
to a thread of its own, where the TLS handshake (``do_handshake_on_connect=False``), the request
and the response happen under deadlines. The accept loop also reaps every connection past its
deadline (``request_timeout`` for a handshake or a request head and its response,
``idle_timeout`` between keep-alive requests) by shutting its socket down, which is what defeats a
client that sends nothing or a slowloris that trickles a header byte by byte: a per-``recv``
timeout alone would not. ``stop()`` is bounded by ``shutdown_timeout`` whoever is attached.

TLS and basic auth follow exporter-toolkit's web config (``monitor.webconfig``): each new
connection and each request stats the certificate, key, client CA and web config file, and one of
them rebuilds the ``SSLContext`` (and the user table) when one changed (a user removed is refused
on a connection kept alive since before), so a rotated certificate is served without a
restart; a rotation caught half-written keeps the previous context and logs once. Passwords are
checked with bcrypt and a successful check is cached under a SHA-256 of (user, hash, password),
as exporter-toolkit does, because bcrypt is slow on purpose.

Scrapes and pages only render what the board holds: nothing is computed on the request path.
``/metrics`` negotiates the format (``Accept``: Prometheus text or OpenMetrics) and gzip like
prometheus_client's own server (``monitor.exporter.render_negotiated``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import http.client
import io
import json
import logging
import os
import re
import selectors
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

import bcrypt

from monitor import __version__
from monitor.board import Board, MonitorSnapshot, RunRecord
from monitor.config import ReportConfig, ServerConfig
from monitor.epoch import rfc3339
from monitor.exporter import HttpCounts, make_registry, render_negotiated
from monitor.report import (
    PAGE_CSP,
    LandingRow,
    PageContext,
    render_landing,
    render_monitor_page,
    render_pending_page,
)
from monitor.webconfig import (
    TlsConfig,
    WebConfig,
    build_ssl_context,
    load_web_config,
    named_files,
)

__all__ = ["HttpServer", "status_document"]

log = logging.getLogger("monitor.http")

_POLL = 0.1  # seconds between reaps of the accept loop (and its reaction time to stop())
# socket timeouts are a backstop a little past each deadline: the reaper enforces (and counts) it
_BACKSTOP = 0.5
_REALM = 'Basic realm="retrieval-monitor", charset="UTF-8"'
# compared against when the user is unknown, so that an unknown user costs a bcrypt check too
_DUMMY_HASH = b"$2b$10$9Rq3ScqAzydy57cOzGDQvu1oIhyoyrCg.GNHPUJ0hnOamrptEbkyi"
_AUTH_CACHE_SIZE = 256
# bcrypt checks of uncached credentials at once: a flood of wrong passwords costs this many
# cores, not one per connection (up to max_connections), and the checks keep their CPU
_BCRYPT_SLOTS = threading.BoundedSemaphore(max(1, (os.cpu_count() or 2) // 2))
# how long a request waits for a slot before a 503: several checks at cost 10 (about 60 ms
# each), so clients starting together (Prometheus, Grafana, probes) all get in
_BCRYPT_WAIT = 0.5
_MAX_BODY = 64 * 1024  # a request body (never used) read and dropped up to this size
# a request's headers together (http.server alone allows 100 lines of 64 KiB, 6.4 MB a
# connection held until request_timeout); past it 431, as Go's MaxHeaderBytes (1 MB) does
_MAX_HEAD = 64 * 1024
# at the cap, a connection gives way only once it has waited this long for a request head: one
# that just connected may hold a whole request not yet parsed (it was dropped unanswered, where
# the newcomer once got a 503 to retry)
_GIVE_WAY_AFTER = 1.0
_DIGITS = re.compile(r"[0-9]+")
# the daemon's process signals: stop, and reload (SIGHUP), handled by the main thread
_MAIN_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
_BUSY_PLAIN = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"X-Content-Type-Options: nosniff\r\n"
    b"Content-Length: 25\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many open connections"
)


def status_document(board: Board) -> dict[str, Any]:
    """``/status``: the latest verdict of every monitor, with run counters."""
    monitors = []
    for snap in board.snapshot():
        run = snap.latest
        monitors.append(
            {
                "name": snap.monitor.name,
                "state": snap.state.state,
                "state_since": snap.state.state_since.isoformat()
                if snap.state.state_since
                else None,
                "runs_total": snap.runs_total,
                "run_failures_total": snap.failures_total,
                "state_save_failures_total": snap.save_failures_total,
                "last_state_save": snap.last_state_save.isoformat()
                if snap.last_state_save
                else None,
                "state_save_error": snap.save_error,
                "last_run_duration_seconds": run.duration_seconds if run else None,
                "verdict": run.verdict.to_dict() if run else None,
            }
        )
    return {"version": __version__, "monitors": monitors}


def _landing_row(snap: MonitorSnapshot) -> LandingRow:
    run = snap.latest
    verdict = run.verdict if run else None
    return LandingRow(
        name=snap.monitor.name,
        state=snap.state.state or "pending",  # no check has finished yet
        since=snap.state.state_since,
        reason=verdict.reasons[0] if verdict and verdict.reasons else None,
        data_age={
            "scores": verdict.newest_score if verdict else None,
            "outcomes": verdict.newest_outcome if verdict else None,
        },
        last_check=verdict.at if verdict else None,
    )


def _monitor_page(snap: MonitorSnapshot, report: ReportConfig) -> str:
    """``/monitors/<name>``: the page of the latest check (``monitor report``'s page)."""
    run = snap.latest
    if run is None:
        return render_pending_page(snap.monitor.name)
    same = snap.state.state == run.verdict.state
    return render_monitor_page(
        snap.monitor,
        run.verdict,
        run.detail,
        run.history,
        PageContext(
            report=report,
            state_since=snap.state.state_since if same else None,
            command=f"monitor report --config CONFIG --monitor {snap.monitor.name} --at "
            + rfc3339(run.verdict.at),
            home="/",
        ),
    )


class _BasicAuth:
    """Checks ``Authorization: Basic`` against bcrypt hashes, caching successful checks."""

    def __init__(self, users: dict[str, bytes]) -> None:
        self._users = users
        self._ok: set[bytes] = set()
        self._lock = threading.Lock()
        # an unknown user is checked against a hash of the users' highest cost: at the fixed
        # cost 10, a user whose hash costs 12 answered five times slower than a name that
        # does not exist, which told the names apart
        self._dummy = _dummy_hash(max((_cost(h) for h in users.values()), default=10))

    @property
    def enabled(self) -> bool:
        return bool(self._users)

    def check(self, header: str | None, slot: Callable[[], bool]) -> bool | None:
        """True when ``header`` carries a configured user and the password matching its hash;
        None when that needs a bcrypt check and ``slot()`` (which takes one of
        ``_BCRYPT_SLOTS``, released here) gave up waiting for one."""
        if not header or header[:6].lower() != "basic ":
            return False
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        user_bytes, colon, password = decoded.partition(b":")
        if not colon:
            return False
        user = user_bytes.decode("utf-8", "replace")
        hashed = self._users.get(user)
        key = hashlib.sha256(b"\0".join((user_bytes, hashed or b"", password))).digest()
        with self._lock:
            if key in self._ok:
                return True
        if not slot():
            return None
        try:
            # bcrypt only ever used the first 72 bytes; the library refuses longer input
            ok = bcrypt.checkpw(password[:72], hashed or self._dummy) and hashed is not None
        except ValueError:
            ok = False
        finally:
            _BCRYPT_SLOTS.release()
        if ok:
            with self._lock:
                if len(self._ok) >= _AUTH_CACHE_SIZE:
                    self._ok.clear()
                self._ok.add(key)
        return ok


def _cost(hashed: bytes) -> int:
    """A bcrypt hash's cost (``$2b$12$...``: 12); 10 when it cannot be read."""
    try:
        return int(hashed.split(b"$")[2])
    except (IndexError, ValueError):
        return 10


_DUMMIES: dict[int, bytes] = {10: _DUMMY_HASH}


def _dummy_hash(cost: int) -> bytes:
    """A hash of cost ``cost`` (4-31) that no password matches in practice, made once."""
    cost = min(max(cost, 4), 31)
    if cost not in _DUMMIES:
        _DUMMIES[cost] = bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(cost))
    return _DUMMIES[cost]


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class _WebState:
    """The web config, SSL context and user table in force; rebuilt when a source file changes."""

    def __init__(self, server: ServerConfig) -> None:
        self._server = server
        self._lock = threading.Lock()
        self._web = server.web
        self._tls = server.tls()
        self._context = build_ssl_context(self._tls) if self._tls is not None else None
        self._auth = _BasicAuth(self._web.basic_auth_users)
        # files a failed reload named that are not in force (a config pointed at new
        # certificate names before they were written): watched too, so that their arrival
        # retries the reload
        self._pending: tuple[Path, ...] = ()
        self._stamps = self._stamps_now()
        self._failed: tuple[object, ...] | None = None
        self._building = False

    @property
    def tls(self) -> bool:
        return self._context is not None

    def _files(self, pending: tuple[Path, ...] | None = None) -> list[Path]:
        """The files a reload follows: the TLS files in force, the web config, then ``pending``
        (default: those a failed reload named)."""
        files = list(self._tls.files()) if self._tls is not None else []
        if self._server.web_config_file is not None:
            files.append(self._server.web_config_file)
        extra = self._pending if pending is None else pending
        return files + [f for f in extra if f not in files]

    def _stamps_now(self) -> tuple[object, ...]:
        return tuple((f, _stamp(f)) for f in self._files())

    def current(self) -> tuple[ssl.SSLContext | None, WebConfig, _BasicAuth]:
        """What a request uses: reloaded first if any file changed since the last build. One
        thread rebuilds, outside the lock (a user table of a high bcrypt cost takes seconds to
        make its dummy hash); the others go on with the config in force meanwhile."""
        with self._lock:
            stamps = self._stamps_now()
            stale = stamps not in (self._stamps, self._failed) and not self._building
            self._building |= stale
            held = self._context, self._web, self._auth
        if not stale:
            return held
        try:
            self._reload(stamps)
        except Exception as exc:  # a reload must never fail the requests: the old one stays
            self._give_up(
                dict(stamps),  # type: ignore[arg-type]
                (),
                "web config reload failed unexpectedly; keeping the previous one",
                file=str(self._server.web_config_file),
                error=repr(exc),
            )
        finally:
            with self._lock:
                self._building = False
        with self._lock:
            return self._context, self._web, self._auth

    def _give_up(
        self,
        known: dict[Path, object],
        named: tuple[Path, ...],
        message: str,
        **extra: object,
    ) -> None:
        """Keep what is in force until a followed file changes: those in force and the web
        config, and ``named`` (the files the failed config names), so that a certificate
        written after the config that names it retries the reload (it was never retried).
        ``known``: stamps read before the files were."""
        with self._lock:
            self._pending = tuple(f for f in named if f not in self._files(pending=()))
            self._failed = tuple((f, known[f] if f in known else _stamp(f)) for f in self._files())
        log.error(message, extra=extra)

    def _reload(self, stamps: tuple[object, ...]) -> None:
        # the stamps read before the files are: a write between the read and now is loaded by
        # the next request (the stamps after it recorded that write as loaded)
        known: dict[Path, object] = dict(stamps)  # type: ignore[arg-type]
        web = self._web
        if self._server.web_config_file is not None:
            named = named_files(self._server.web_config_file)
            known |= {f: _stamp(f) for f in named if f not in known}
            parsed, problems = load_web_config(self._server.web_config_file)
            if parsed is None:
                self._give_up(
                    known,
                    named,
                    "web config reload failed; keeping the previous one",
                    file=str(self._server.web_config_file),
                    problems=problems,
                )
                return
            web = parsed
        tls: TlsConfig | None = web.tls or (
            None if self._server.web.tls is not None else self._server.tls()
        )
        if tls is None and self._context is not None:
            # exporter-toolkit decides on TLS once, at start: a reload that dropped the
            # certificate once served the same port as plain HTTP, credentials in the clear
            self._give_up(
                known,
                (),
                "web config reload would turn TLS off; keeping the previous one (restart to "
                "serve plain HTTP)",
                file=str(self._server.web_config_file),
            )
            return
        named = tuple(tls.files()) if tls is not None else ()
        known |= {f: _stamp(f) for f in named if f not in known}
        try:
            context = build_ssl_context(tls) if tls is not None else None
        except (OSError, ValueError) as exc:
            self._give_up(
                known, named, "TLS reload failed; keeping the previous certificate", error=str(exc)
            )
            return
        auth = _BasicAuth(web.basic_auth_users)
        with self._lock:
            self._web, self._tls, self._context, self._auth = web, tls, context, auth
            self._pending = ()
            # the stamps of the files now in force (a change of names was reloaded twice)
            self._stamps = tuple((f, known[f] if f in known else _stamp(f)) for f in self._files())
            self._failed = None
        log.info("web config and TLS reloaded", extra={"tls": context is not None})


def _keep_signals_for_the_main_thread() -> None:
    """Block SIGTERM/SIGINT/SIGHUP in this (server) thread.

    The kernel may deliver a process signal to any thread that does not block it; Python then
    only flags it, and a main thread asleep in the scheduler's wait would not run the handler
    until it wakes (an hour later). A connection thread asleep in a TLS handshake is exactly
    such a thread: ``monitor run`` ignored SIGTERM with a silent TLS client attached. SIGHUP
    (reload) likewise, as the check threads block it.
    """
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, _MAIN_SIGNALS)


def _bind(host: str, port: int) -> socket.socket:
    """A listening, non-blocking socket; IPv4 first for a hostname that has both (as Go does)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and host == "::":
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # dual stack, like Go
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class _Conn:
    """An admitted connection: its socket (plain, then TLS) and the deadline the reaper enforces."""

    __slots__ = ("address", "busy", "deadline", "expired", "sock", "thread", "waiting_since")

    def __init__(self, sock: socket.socket, address: Any) -> None:
        self.sock = sock
        self.address = address
        self.deadline: float | None = None
        self.busy = False
        self.expired = False
        # waiting since then for a request head (its TLS handshake and first request, or the
        # next keep-alive request): None while a request is being answered
        self.waiting_since: float | None = time.monotonic()
        self.thread: threading.Thread | None = None

    def expire(self) -> None:
        """Shut the socket down so that a blocked read or write in its thread returns now."""
        self.expired = True
        # socket.socket's own shutdown, also for an SSLSocket (whose override drops its state)
        with contextlib.suppress(OSError):
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)


class _HeadReader:
    """The connection's buffered reader, with a budget of bytes for a request's headers
    (``left``; None: none). A ``readline`` past the budget raises ``LineTooLong``, which
    ``parse_request`` answers with 431 (the request line has the standard library's own limit,
    64 KiB, past it 414)."""

    __slots__ = ("_raw", "left")

    def __init__(self, raw: io.BufferedReader) -> None:
        self._raw = raw
        self.left: int | None = None

    def readline(self, size: int = -1) -> bytes:
        if self.left is None:
            return self._raw.readline(size)
        cap = self.left + 1  # one byte past the budget tells a head at the limit from one past it
        line = self._raw.readline(cap if size < 0 else min(size, cap))
        self.left -= len(line)
        if self.left < 0:
            raise http.client.LineTooLong("request headers")
        return line

    def peek(self, size: int = 0) -> bytes:
        return self._raw.peek(size)

    def read(self, size: int = -1) -> bytes:
        return self._raw.read(size)

    def close(self) -> None:
        self._raw.close()


class _Handler(BaseHTTPRequestHandler):
    """Routes; one instance serves every request of one connection (HTTP/1.1 keep-alive)."""

    server: HttpServer  # type: ignore[assignment]
    raw_requestline: bytes  # set by handle_one_request before parse_request
    protocol_version = "HTTP/1.1"
    # the version of a request line the standard library refused (``HTTP/9.9``, the HTTP/2
    # preface): "HTTP/0.9" (its default) answered with a body and no status line or headers
    default_request_version = "HTTP/1.0"
    server_version = f"retrieval-monitor/{__version__}"
    disable_nagle_algorithm = True
    timeout = None  # the connection thread sets the socket timeouts and deadlines

    def __init__(self, conn: _Conn, server: HttpServer, web: WebConfig, auth: _BasicAuth) -> None:
        self._conn = conn
        self._web = web
        self._auth = auth
        self._served = 0
        self._busy = False  # see _bcrypt_slot
        super().__init__(conn.sock, conn.address, server)  # type: ignore[arg-type]

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http " + format, *args)

    def handle_one_request(self) -> None:
        limits = self.server.limits
        if self._served:
            # keep-alive: wait idle_timeout for the first byte of the next request
            self._conn.deadline = time.monotonic() + limits[1]
            self.connection.settimeout(limits[1] + _BACKSTOP)
            self._conn.waiting_since = time.monotonic()
            try:
                if not self.rfile.peek(1):
                    self.close_connection = True
                    return
            except OSError:
                self.close_connection = True
                return
            if self._conn.expired:  # gave way to a new connection at the cap
                self.close_connection = True
                return
            self.connection.settimeout(limits[0] + _BACKSTOP)
        self._conn.deadline = time.monotonic() + limits[0]
        super().handle_one_request()
        self._served += 1

    def setup(self) -> None:
        super().setup()
        raw: Any = self.rfile  # the buffered reader of the socket (rbufsize -1)
        self.rfile: _HeadReader = _HeadReader(raw)  # type: ignore[assignment]

    def end_headers(self) -> None:
        """The web config's headers on every response, errors (400, 413, 414, 431, 501, the
        framing refusals) included: they were only on the routed answers."""
        for name, value in self._web.headers.items():
            self.send_header(name, value)
        if "X-Content-Type-Options" not in self._web.headers:
            self.send_header("X-Content-Type-Options", "nosniff")
        super().end_headers()

    def parse_request(self) -> bool:
        """The request line and headers, and its framing: an HTTP/0.9 request (no version) is
        a 400, as is any ``Transfer-Encoding`` (the server reads no chunked body); a
        ``Content-Length`` body is read and dropped (up to 64 KiB; past it 413), since a body
        left unread was parsed as the next request on a kept-alive connection."""
        server = self.server
        if len(self.raw_requestline.split()) == 2:
            # HTTP/0.9 (no version): no headers follow, and the standard library waited for
            # them until the request timed out, answering nothing
            self.command, self.request_version = "", self.default_request_version
            self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
            self.close_connection = True
            self.send_error(400, "HTTP/0.9 is not supported")
            return False
        self.rfile.left = _MAX_HEAD  # the headers that parse_request reads next
        try:
            if not super().parse_request():
                return False
        finally:
            self.rfile.left = None  # the head is read: a body has its own limit
        # the web config of now, per request: a user removed from it was still let in on a
        # connection kept alive since before the change (Prometheus keeps one for hours)
        _, self._web, self._auth = server.web_state.current()
        if self.headers.get("Transfer-Encoding") is not None:
            self.send_error(400, "Transfer-Encoding is not accepted")
            return False
        lengths = {v.strip() for v in self.headers.get_all("Content-Length", [])}
        if lengths:
            # RFC 9112 6.3: differing lengths are a framing error (the body was read as the
            # next request); ASCII digits only ("²".isdigit() is True, and int() then raised)
            length = lengths.pop()
            size = int(length) if not lengths and _DIGITS.fullmatch(length) else -1
            if size < 0:
                self.send_error(400, "bad Content-Length")
                return False
            if size > _MAX_BODY:
                self.send_error(413, "request body too large")
                return False
            if size and len(self.rfile.read(size)) < size:
                self.close_connection = True
                return False
        with server.lock:  # a connection that gave way at the cap answers no more
            if self._conn.expired:
                self.close_connection = True
                return False
            # answering from here on: until the body is read too, the connection still waits
            # and gives way at the cap (a body sent a byte at a time held a slot that never did)
            self._conn.waiting_since = None
        return True

    def _send(
        self,
        code: int,
        body: bytes,
        headers: list[tuple[str, str]],
    ) -> None:
        self.send_response(code)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _text(
        self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8"
    ) -> None:
        headers = [("Content-Type", content_type)]
        if (
            content_type.startswith("text/html")
            and "Content-Security-Policy" not in self._web.headers
        ):
            # as a header too: it holds before the page is parsed. No frame-ancestors: teams
            # embed the pages (a Grafana panel); X-Frame-Options in the web config forbids it
            headers.append(("Content-Security-Policy", PAGE_CSP))
        self._send(code, body, headers)

    def do_HEAD(self) -> None:
        self.do_GET()

    def _not_allowed(self) -> None:
        """405 with ``Allow`` (RFC 9110 15.5.6) for a method the server knows but no resource
        takes, not the 501 of a method it does not know; the connection closes, since a
        request body is never read."""
        self.close_connection = True
        self._send(
            405,
            b"method not allowed\n",
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Allow", "GET, HEAD"),
                ("Connection", "close"),
            ],
        )

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

    def do_GET(self) -> None:
        self._conn.busy = True
        try:
            self._route()
        except OSError:
            raise  # the connection's: reset, timed out
        except Exception:  # a page or document that failed to render: a 500, not a dropped
            # connection (every request for that page ended with no status line)
            log.exception("http request failed", extra={"path": self.path.partition("?")[0]})
            self.close_connection = True
            self._text(500, b"internal error: see the monitor's log\n")
        finally:
            self._conn.busy = False

    def _bcrypt_slot(self) -> bool:
        """One of ``_BCRYPT_SLOTS``, waited for at most ``_BCRYPT_WAIT`` s, and waited for as
        a connection waits for a request head: it gives way (at once) to a new connection at
        ``max_connections``. Queued as answering, a flood of wrong passwords once held every
        slot and locked every new connection out, /healthz probes with cached credentials
        included. True when taken (the caller releases it); False when the connection gave
        way or timed out meanwhile, or the wait ran out (``_busy`` then says so)."""
        if _BCRYPT_SLOTS.acquire(blocking=False):
            return True
        server, conn = self.server, self._conn
        with server.lock:
            if conn.expired:
                return False
            # eligible to give way at once (not after _GIVE_WAY_AFTER, as a slow handshake):
            # a flood's waits are shorter than that, and held every slot
            conn.waiting_since = time.monotonic() - _GIVE_WAY_AFTER
        until = time.monotonic() + _BCRYPT_WAIT
        taken = False
        while not conn.expired and time.monotonic() < until:
            if _BCRYPT_SLOTS.acquire(timeout=0.02):
                taken = True
                break
        with server.lock:
            if conn.expired:  # gave way at the cap, or cut at request_timeout
                if taken:
                    _BCRYPT_SLOTS.release()
                return False
            conn.waiting_since = None
        self._busy = not taken
        return taken

    def _route(self) -> None:
        self._busy = False
        allowed = (
            self._auth.check(self.headers.get("Authorization"), self._bcrypt_slot)
            if self._auth.enabled
            else True
        )
        if allowed is None:
            if not self._busy:  # the connection gave way or timed out: no answer
                self.close_connection = True
                return
            # every password check slot taken for _BCRYPT_WAIT s (a flood of uncached
            # credentials): retry; not an auth failure, the credentials were never checked
            self.server.warn_busy()
            self._send(
                503,
                b"busy checking passwords; retry\n",
                [("Content-Type", "text/plain; charset=utf-8"), ("Retry-After", "1")],
            )
            return
        if not allowed:
            self.server.count("auth_failures")
            self._send(
                401,
                b"Unauthorized\n",
                [("Content-Type", "text/plain; charset=utf-8"), ("WWW-Authenticate", _REALM)],
            )
            return
        path, _, query = self.path.partition("?")
        server = self.server
        if path == "/metrics":
            body, headers = render_negotiated(
                server.registry,
                accept=self.headers.get("Accept"),
                accept_encoding=self.headers.get("Accept-Encoding"),
                names=parse_qs(query).get("name[]", []),
            )
            self._send(200, body, headers)
        elif path == "/healthz":
            # 503 while the scheduler is not running; 200 "degraded: ..." naming each monitor
            # whose state could not be saved (a restart would not fix its disk); else 200 "ok"
            health = server.board.health(bool(server.healthy()))
            self._text(health.http_status, health.body.encode())
        elif path == "/status":
            body = json.dumps(status_document(server.board), indent=1).encode()
            self._text(200, body, "application/json")
        elif path == "/":
            rows = [_landing_row(s) for s in server.board.snapshot()]
            page = render_landing(rows, server.report)
            self._text(200, page.encode(), "text/html; charset=utf-8")
        elif path.startswith("/monitors/"):
            name = unquote(path[len("/monitors/") :])
            snap = next((s for s in server.board.snapshot() if s.monitor.name == name), None)
            if snap is None:
                self._text(404, b"no such monitor\n")
                return
            self._text(200, server.page(snap), "text/html; charset=utf-8")
        else:
            self._text(404, b"not found\n")


class HttpServer:
    """Serves the board over HTTP(S) until ``stop()``; see the module docstring for the design."""

    def __init__(
        self,
        config: ServerConfig,
        board: Board,
        healthy: Callable[[], bool],
        *,
        report: ReportConfig | None = None,
    ) -> None:
        self.config = config
        self.report = report or ReportConfig()
        self.board = board
        self.healthy = healthy
        self.limits = (config.request_timeout.total_seconds(), config.idle_timeout.total_seconds())
        self.web_state = _WebState(config)
        self.lock = threading.Lock()
        self._conns: set[_Conn] = set()
        self._counts: dict[str, int] = dict.fromkeys(
            (
                "connections_accepted",
                "connections_rejected",
                "connections_timed_out",
                "tls_handshake_failures",
                "auth_failures",
            ),
            0,
        )
        self._last_warning = 0.0
        self._pages: dict[str, tuple[RunRecord | None, datetime | None, bytes]] = {}
        self._stopping = threading.Event()
        self.registry = make_registry(board, http_counts=self.counts)
        self._listener = _bind(config.host, config.port)
        self._thread = threading.Thread(target=self._serve, name="http", daemon=True)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._listener.getsockname()[1])

    def counts(self) -> HttpCounts:
        """The connection counters (for ``/metrics``)."""
        with self.lock:
            return HttpCounts(connections_active=len(self._conns), **self._counts)

    def page(self, snap: MonitorSnapshot) -> bytes:
        """``/monitors/<name>``, rendered once per run record and kept until the next run (a
        client that reloads it costs a dictionary lookup, not a render)."""
        name = snap.monitor.name
        with self.lock:
            cached = self._pages.get(name)
        if cached is not None and cached[0] is snap.latest and cached[1] == snap.state.state_since:
            return cached[2]
        body = _monitor_page(snap, self.report).encode()
        with self.lock:
            self._pages[name] = (snap.latest, snap.state.state_since, body)
            for gone in set(self._pages) - {s.monitor.name for s in self.board.snapshot()}:
                del self._pages[gone]
        return body

    def count(self, what: str) -> None:
        """Add one to a counter of :class:`HttpCounts`."""
        with self.lock:
            self._counts[what] += 1

    def start(self) -> None:
        """Start the accept loop in a daemon thread."""
        self._thread.start()

    def _serve(self) -> None:
        _keep_signals_for_the_main_thread()
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            while not self._stopping.is_set():
                if selector.select(timeout=_POLL):
                    self._accept()
                self._reap()

    def _accept(self) -> None:
        for _ in range(64):  # drain the backlog, but come back to reap
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: do not spin
                self._warn("accept failed", error=str(exc))
                self._stopping.wait(_POLL)
                return
            self._admit(sock, address)

    def warn_busy(self) -> None:
        """Say (at most every 10 s) that password checks were refused for want of a slot."""
        self._warn(
            "password checks busy: requests answered 503 (a flood of uncached credentials?)",
            wait_seconds=_BCRYPT_WAIT,
        )

    def _warn(self, message: str, **extra: Any) -> None:
        now = time.monotonic()
        if now - self._last_warning >= 10.0:
            self._last_warning = now
            log.warning(message, extra=extra)

    def _admit(self, sock: socket.socket, address: Any) -> None:
        with self.lock:
            full = len(self._conns) >= self.config.max_connections
            # at the cap, the connection waiting longest for a request head (a handshake, a
            # first request, the next keep-alive one) gives way; one answering never does.
            # Only the keep-alive ones once gave way: 64 sockets that never sent a byte, opened
            # again as they were reaped, held every slot and /healthz answered 503
            since = time.monotonic() - _GIVE_WAY_AFTER
            waiting = [
                c
                for c in self._conns
                if c.waiting_since is not None and c.waiting_since <= since and not c.expired
            ]
            oldest = (
                min(waiting, key=lambda c: c.waiting_since or 0.0) if full and waiting else None
            )
            if oldest is not None:
                oldest.expired = True  # under the lock: parse_request then answers no more
                self._conns.discard(oldest)
                self._counts["connections_timed_out"] += 1
                full = False
            if full:
                self._counts["connections_rejected"] += 1
            else:
                self._counts["connections_accepted"] += 1
                conn = _Conn(sock, address)
                self._conns.add(conn)
        if oldest is not None:
            oldest.expire()
        if full:
            self._warn("connection limit reached", max_connections=self.config.max_connections)
            if not self.web_state.tls:  # a TLS client could not read a plain answer
                try:
                    sock.setblocking(False)
                    sock.send(_BUSY_PLAIN)
                except OSError:
                    pass
            sock.close()
            return
        conn.thread = threading.Thread(
            target=self._connection, args=(conn,), name="http-conn", daemon=True
        )
        conn.thread.start()

    def _reap(self) -> None:
        now = time.monotonic()
        with self.lock:
            late = [c for c in self._conns if not c.expired and c.deadline and now > c.deadline]
            self._counts["connections_timed_out"] += len(late)
        for conn in late:
            conn.expire()

    def _connection(self, conn: _Conn) -> None:
        _keep_signals_for_the_main_thread()
        request_timeout = self.limits[0]
        try:
            # the deadline first: a reload in current() (a web config's bcrypt cost) is reaped
            conn.deadline = time.monotonic() + request_timeout
            context, web, auth = self.web_state.current()
            conn.sock.settimeout(request_timeout + _BACKSTOP)
            if context is not None:
                try:
                    tls = context.wrap_socket(
                        conn.sock, server_side=True, do_handshake_on_connect=False
                    )
                    with self.lock:
                        conn.sock = tls
                    tls.do_handshake()
                except (OSError, ValueError) as exc:  # ssl.SSLError and timeouts are OSErrors
                    self.count("tls_handshake_failures")
                    log.debug("tls handshake failed", extra={"error": str(exc)})
                    return
            _Handler(conn, self, web, auth)
        except OSError as exc:  # reset, reaped, or stopped
            log.debug("http connection ended", extra={"error": str(exc)})
        except Exception:
            log.exception("http connection failed")
        finally:
            with contextlib.suppress(OSError):
                conn.sock.close()
            with self.lock:
                self._conns.discard(conn)

    def stop(self) -> None:
        """Stop within ``shutdown_timeout`` whoever is attached (also when never started).

        The accept loop ends and the listening socket closes first; connections waiting for a
        handshake, a request or a keep-alive are cut at once; a response being written gets the
        rest of the timeout, then is cut too.
        """
        deadline = time.monotonic() + self.config.shutdown_timeout.total_seconds()
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._listener.close()
        with self.lock:
            conns = list(self._conns)
        for conn in conns:
            if not conn.busy:
                conn.expire()
        for conn in conns:
            if conn.thread is not None:
                conn.thread.join(timeout=max(0.0, deadline - time.monotonic()))
            if conn.thread is None or conn.thread.is_alive():
                conn.expire()
