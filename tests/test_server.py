"""The HTTP endpoint on its own, on real loopback sockets: routes, health, TLS with real
certificates, and the hostile clients of issue 10 (silent, slowloris, too many), each attack
bounded in count and time."""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import bcrypt
import pytest

from monitor.config import ServerConfig, parse_config
from monitor.jobs import Board
from monitor.server import HttpServer
from monitor.verdict import MonitorState
from monitor.webconfig import load_web_config
from tests.certs import self_signed
from tests.deploy.stack import http_get, wait_for

BOUND = 3.0  # seconds any one well-behaved request may take while an attack runs


def _board() -> Board:
    doc = {"monitors": [{"name": "a", "scores": {"path": "s"}, "outcomes": {"path": "o"}}]}
    config = parse_config(doc, base=Path("/tmp"))
    return Board(config.monitors, {"a": MonitorState(state="ok")})


def _ipv6() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.fixture
def serve() -> Iterator[list[HttpServer]]:
    """Servers started by a test; each stopped at the end."""
    servers: list[HttpServer] = []
    yield servers
    for server in servers:
        server.stop()


def _start(servers: list[HttpServer], config: ServerConfig) -> HttpServer:
    server = HttpServer(config, _board(), lambda: True)
    servers.append(server)
    server.start()
    return server


def _tls_config(tmp_path: Path, **kwargs: object) -> tuple[ServerConfig, Path]:
    cert, key = self_signed(tmp_path)
    config = ServerConfig(port=0, tls_cert_file=cert, tls_key_file=key)
    return replace(config, **kwargs), cert  # type: ignore[arg-type]


def _get(
    url: str,
    cafile: Path | None = None,
    headers: dict[str, str] | None = None,
    method: str = "GET",
) -> tuple[int, dict[str, str], bytes]:
    """``(status, headers, body)``; HTTP errors are returned; bounded by ``BOUND``."""
    context = ssl.create_default_context(cafile=str(cafile)) if cafile else None
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, context=context, timeout=BOUND) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def _peer_cert(port: int) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=BOUND) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def _closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """True when the server closes ``sock`` within ``timeout`` s (EOF or reset)."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_routes_and_health() -> None:
    healthy = [True]
    server = HttpServer(ServerConfig(port=0), _board(), lambda: healthy[0])
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        status, body = http_get(f"{base}/metrics")
        assert status == 200
        assert b'retrieval_monitor_state{monitor="a",state="ok"} 1.0' in body
        assert http_get(f"{base}/healthz") == (200, b"ok\n")
        healthy[0] = False
        assert http_get(f"{base}/healthz")[0] == 503
        doc = json.loads(http_get(f"{base}/status")[1])
        assert doc["monitors"][0]["name"] == "a"
        assert doc["monitors"][0]["state"] == "ok"
        assert doc["monitors"][0]["verdict"] is None
        assert b"retrieval-monitor" in http_get(f"{base}/")[1]
        assert http_get(f"{base}/nope")[0] == 404
    finally:
        server.stop()


def test_tls(tmp_path: Path, serve: list[HttpServer]) -> None:
    config, cert = _tls_config(tmp_path)
    server = _start(serve, config)
    url = f"https://127.0.0.1:{server.port}/healthz"
    assert _get(url, cert)[0] == 200
    with pytest.raises(OSError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify"):
        urllib.request.urlopen(url, context=ssl.create_default_context(), timeout=BOUND)


def test_metrics_negotiation_gzip_and_standard_collectors(serve: list[HttpServer]) -> None:
    server = _start(serve, ServerConfig(port=0))
    url = f"http://127.0.0.1:{server.port}/metrics"
    status, headers, body = _get(url)
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "Content-Encoding" not in headers
    text = body.decode()
    for name in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "python_info",
        "python_gc_objects_collected_total",
        "retrieval_monitor_http_connections_active",
        "retrieval_monitor_http_connections_rejected_total",
    ):
        assert f"\n{name}" in text, name
    status, headers, body = _get(url, headers={"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip"
    assert b"retrieval_monitor_state{" in gzip.decompress(body)
    status, headers, body = _get(
        url, headers={"Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"}
    )
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert body.endswith(b"# EOF\n")
    status, headers, body = _get(url + "?name[]=retrieval_monitor_state")
    assert b"retrieval_monitor_state{" in body
    assert b"process_cpu_seconds_total" not in body
    # an Accept it cannot parse gets the text format (client_golang's negotiation): it was a
    # 500 and a logged traceback per request; and gzip;q=0 refuses gzip (RFC 9110 12.5.3)
    for accept in ("application/openmetrics-text; version=abc", "text/plain; version=x.y"):
        status, headers, body = _get(url, headers={"Accept": accept})
        assert status == 200, accept
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert b"retrieval_monitor_state{" in body
    status, headers, body = _get(url, headers={"Accept-Encoding": "identity, gzip;q=0"})
    assert "Content-Encoding" not in headers
    assert b"retrieval_monitor_state{" in body


def test_keep_alive_serves_several_requests_on_one_connection(serve: list[HttpServer]) -> None:
    server = _start(serve, ServerConfig(port=0))
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=BOUND)
    try:
        for _ in range(3):
            conn.request("GET", "/healthz")
            resp = conn.getresponse()
            assert (resp.status, resp.read()) == (200, b"ok\n")
        assert server.counts().connections_accepted == 1
    finally:
        conn.close()


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS"])
def test_a_method_no_resource_takes_is_405_with_allow(serve: list[HttpServer], method: str) -> None:
    """405 and ``Allow: GET, HEAD`` (RFC 9110), not the 501 of an unknown method; the body is
    never read, so the connection closes."""
    server = _start(serve, ServerConfig(port=0))
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=BOUND)
    try:
        conn.request(method, "/metrics", body=b"x" * 100)
        resp = conn.getresponse()
        assert (resp.status, resp.getheader("Allow")) == (405, "GET, HEAD")
        assert resp.getheader("Connection") == "close"
        resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_silent_client_does_not_stall_others(
    tls: bool, tmp_path: Path, serve: list[HttpServer]
) -> None:
    """Issue 10 #2: a client that connects and sends nothing stalled every HTTPS request."""
    config, cert = _tls_config(tmp_path) if tls else (ServerConfig(port=0), None)
    server = _start(serve, replace(config, request_timeout=timedelta(seconds=60)))
    url = f"{'https' if tls else 'http'}://127.0.0.1:{server.port}/healthz"
    with socket.create_connection(("127.0.0.1", server.port), timeout=BOUND) as silent:
        wait_for(lambda: server.counts().connections_active == 1, timeout=BOUND, what="admitted")
        for _ in range(20):
            started = time.monotonic()
            assert _get(url, cert)[0] == 200
            assert time.monotonic() - started < BOUND
        assert server.counts().connections_active >= 1  # the silent client is still attached
        silent.settimeout(0.05)
        with pytest.raises(TimeoutError):
            silent.recv(1)


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_slowloris_is_cut_at_request_timeout_and_blocks_nobody(
    tls: bool, tmp_path: Path, serve: list[HttpServer]
) -> None:
    config, cert = _tls_config(tmp_path) if tls else (ServerConfig(port=0), None)
    server = _start(serve, replace(config, request_timeout=timedelta(seconds=1)))
    scheme = "https" if tls else "http"
    result: dict[str, float | bool] = {}

    def slowloris() -> None:
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=BOUND)
        sock: socket.socket = raw
        if tls:
            context = ssl.create_default_context(cafile=str(cert))
            sock = context.wrap_socket(raw, server_hostname="127.0.0.1")
        started = time.monotonic()
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
        try:
            for byte in head[:80]:  # 80 bytes at 50 ms: 4 s, far past request_timeout
                sock.sendall(bytes([byte]))
                time.sleep(0.05)
            result["cut"] = _closed_by_peer(sock, BOUND)
        except OSError:  # the server shut the connection down under us
            result["cut"] = True
        result["after"] = time.monotonic() - started
        sock.close()

    attacker = threading.Thread(target=slowloris)
    attacker.start()
    try:
        for _ in range(20):
            started = time.monotonic()
            assert _get(f"{scheme}://127.0.0.1:{server.port}/healthz", cert)[0] == 200
            assert time.monotonic() - started < BOUND
    finally:
        attacker.join(timeout=15)
    assert result["cut"] is True
    assert float(result["after"]) < 4.0  # cut before the attacker finished trickling
    assert server.counts().connections_timed_out >= 1


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_silent_connections_at_the_cap_give_way_and_only_busy_ones_refuse(
    tls: bool, tmp_path: Path, serve: list[HttpServer]
) -> None:
    """At the cap the connection waiting longest for a request head gives way: 64 sockets that
    never sent a byte, opened again as they were reaped, held every slot and /healthz answered
    503. A new client is refused only while every slot is answering a request."""
    config, cert = _tls_config(tmp_path) if tls else (ServerConfig(port=0), None)
    gate, entered = threading.Event(), []

    def healthy() -> bool:  # /healthz answers once the gate opens
        entered.append(1)
        return gate.wait(timeout=4 * BOUND)

    server = HttpServer(replace(config, max_connections=4), _board(), healthy)
    serve.append(server)
    server.start()
    scheme = "https" if tls else "http"
    url = f"{scheme}://127.0.0.1:{server.port}"
    opened = time.monotonic()
    silent = [socket.create_connection(("127.0.0.1", server.port), timeout=BOUND) for _ in range(4)]
    try:
        wait_for(lambda: server.counts().connections_active == 4, timeout=BOUND, what="4 held")
        _waited_to_give_way(opened)
        for _ in range(2):
            assert _get(f"{url}/metrics", cert)[0] == 200
        assert server.counts().connections_rejected == 0
        assert _closed_by_peer(silent[0], BOUND)  # the oldest silent one gave way
    finally:
        for sock in silent:
            sock.close()
    wait_for(lambda: server.counts().connections_active == 0, timeout=BOUND, what="released")
    answers: list[int] = []
    busy = [
        threading.Thread(target=lambda: answers.append(_get(f"{url}/healthz", cert)[0]))
        for _ in range(4)
    ]
    for t in busy:
        t.start()
    try:
        wait_for(lambda: len(entered) == 4, timeout=BOUND, what="4 answering")
        for _ in range(2):
            with socket.create_connection(("127.0.0.1", server.port), timeout=BOUND) as sock:
                try:
                    answer = sock.recv(4096)
                except ConnectionResetError:
                    answer = b""
            assert answer == b"" if tls else answer.startswith(b"HTTP/1.1 503 ")
        assert server.counts().connections_rejected == 2
    finally:
        gate.set()
        for t in busy:
            t.join(timeout=BOUND)
    assert answers == [200] * 4


def _waited_to_give_way(since: float) -> None:
    """Until connections waiting since ``since`` may give way at the cap."""
    from monitor.server import _GIVE_WAY_AFTER

    wait_for(
        lambda: time.monotonic() - since > _GIVE_WAY_AFTER,
        timeout=BOUND,
        what="connections old enough to give way",
        interval=0.05,
    )


def test_a_body_sent_a_byte_at_a_time_gives_way_at_the_cap(serve: list[HttpServer]) -> None:
    """A whole head with ``Content-Length`` and then its body a byte at a time counted as a
    request being answered, which never gives way: such clients held every slot and /healthz
    answered 503 for as long as they went on. Until its body is read a connection waits."""
    server = _start(serve, ServerConfig(port=0, max_connections=2))
    opened = time.monotonic()
    slow = [socket.create_connection(("127.0.0.1", server.port), timeout=BOUND) for _ in range(2)]
    try:
        for sock in slow:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nx")
        wait_for(lambda: server.counts().connections_active == 2, timeout=BOUND, what="2 held")
        _waited_to_give_way(opened)
        for sock in slow:
            sock.sendall(b"x")  # still sending
        for _ in range(2):
            assert _get(f"http://127.0.0.1:{server.port}/healthz")[0] == 200
        assert server.counts().connections_rejected == 0
    finally:
        for sock in slow:
            sock.close()


def test_a_request_not_yet_parsed_is_not_dropped_at_the_cap(
    serve: list[HttpServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection that just sent a whole request, not yet parsed (its thread slow to get
    the web config, as under load or in a handshake), was evicted by the next connection at
    the cap and got no answer at all; it is answered, and the newcomer gets a 503 to retry."""
    import monitor.server

    server = _start(serve, ServerConfig(port=0, max_connections=1))
    real, entered, release = monitor.server._WebState.current, threading.Event(), threading.Event()

    def slow(self: object) -> object:
        if not entered.is_set():
            entered.set()
            release.wait(timeout=BOUND)
        return real(self)  # type: ignore[arg-type]

    monkeypatch.setattr(monitor.server._WebState, "current", slow)
    with socket.create_connection(("127.0.0.1", server.port), timeout=BOUND) as first:
        first.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert entered.wait(timeout=BOUND)
        second = _raw_exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        release.set()
        assert second.startswith(b"HTTP/1.1 503 "), second[:40]
        assert _response(first)[1] == b"ok\n"


def test_stop_is_bounded_with_clients_attached(tmp_path: Path) -> None:
    config, _ = _tls_config(
        tmp_path,
        shutdown_timeout=timedelta(seconds=2),
        request_timeout=timedelta(seconds=60),
        idle_timeout=timedelta(seconds=60),
    )
    server = HttpServer(config, _board(), lambda: True)
    server.start()
    clients = [
        socket.create_connection(("127.0.0.1", server.port), timeout=BOUND) for _ in range(3)
    ]
    half = ssl.create_default_context()
    half.check_hostname, half.verify_mode = False, ssl.CERT_NONE
    try:
        clients[1].sendall(b"\x16\x03\x01")  # a handshake that never finishes
        wait_for(lambda: server.counts().connections_active == 3, timeout=BOUND, what="attached")
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 2.0
        for sock in clients:
            assert _closed_by_peer(sock, BOUND)
    finally:
        for sock in clients:
            sock.close()


def _blocked(native_id: int) -> set[int]:
    """The signals a thread of this process blocks, from the kernel's own account of it."""
    for line in Path(f"/proc/self/task/{native_id}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            mask = int(line.split()[1], 16)
            return {n for n in range(1, 65) if mask >> (n - 1) & 1}
    raise AssertionError("no SigBlk line")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux /proc only")
def test_server_threads_leave_process_signals_to_the_main_thread(
    serve: list[HttpServer],
) -> None:
    """The accept loop and every connection thread block SIGTERM, SIGINT and SIGHUP, so the
    kernel hands them to the main thread, whose handlers run at once; SIGHUP (reload) was
    not blocked, and a reload could wait behind a main thread asleep until the next slot."""
    before = {t.ident for t in threading.enumerate()}
    server = _start(serve, ServerConfig(port=0))
    want = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}

    def blocking() -> bool:
        # this server's threads only (other tests' may still be ending), once each has started
        # (a thread is counted before it runs its first line, which blocks the signals)
        ours = [t for t in threading.enumerate() if t.ident not in before]
        ours = [t for t in ours if t.name.startswith("http") and t.native_id is not None]
        return len(ours) >= 2 and all(want <= _blocked(t.native_id or 0) for t in ours)

    with socket.create_connection(("127.0.0.1", server.port), timeout=BOUND):
        # the accept loop and the silent client's thread
        wait_for(blocking, timeout=BOUND, what="server threads blocking the signals")


def test_reaper_closes_a_client_that_sends_nothing(serve: list[HttpServer]) -> None:
    server = _start(serve, ServerConfig(port=0, request_timeout=timedelta(seconds=0.5)))
    with socket.create_connection(("127.0.0.1", server.port), timeout=BOUND) as silent:
        assert _closed_by_peer(silent, BOUND)
    assert server.counts().connections_timed_out == 1


def test_idle_keep_alive_connection_is_closed_after_idle_timeout(serve: list[HttpServer]) -> None:
    server = _start(serve, ServerConfig(port=0, idle_timeout=timedelta(seconds=0.5)))
    with socket.create_connection(("127.0.0.1", server.port), timeout=BOUND) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while not data.endswith(b"ok\n"):
            chunk = sock.recv(4096)
            assert chunk
            data += chunk
        assert data.startswith(b"HTTP/1.1 200 ")
        assert _closed_by_peer(sock, BOUND)


def test_ipv6_loopback(serve: list[HttpServer]) -> None:
    if not _ipv6():
        pytest.skip("this kernel has no IPv6 loopback (::1)")
    server = _start(serve, ServerConfig(host="::1", port=0))
    assert server.counts().connections_accepted == 0
    assert _get(f"http://[::1]:{server.port}/healthz")[0] == 200


def test_hostname(serve: list[HttpServer]) -> None:
    server = _start(serve, ServerConfig(host="localhost", port=0))
    assert _get(f"http://127.0.0.1:{server.port}/healthz")[0] == 200


def test_certificate_rotated_on_disk_is_served_to_new_connections(
    tmp_path: Path, serve: list[HttpServer]
) -> None:
    config, cert = _tls_config(tmp_path)
    server = _start(serve, config)
    first = _peer_cert(server.port)
    assert first == ssl.PEM_cert_to_DER_cert(cert.read_text())
    new_cert, new_key = self_signed(tmp_path / "next", "server")
    # a rotation caught half-way (new cert, old key) keeps the old certificate
    os.replace(new_cert, cert)
    assert _peer_cert(server.port) == first
    os.replace(new_key, config.tls_key_file)  # type: ignore[arg-type]
    second = _peer_cert(server.port)
    assert second != first
    assert second == ssl.PEM_cert_to_DER_cert(cert.read_text())
    assert _get(f"https://127.0.0.1:{server.port}/healthz", cert)[0] == 200


def _web_config(tmp_path: Path, text: str) -> ServerConfig:
    path = tmp_path / "web.yml"
    path.write_text(text)
    web, problems = load_web_config(path)
    assert web is not None, problems
    return ServerConfig(port=0, web_config_file=path, web=web)


def _basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def test_basic_auth_against_bcrypt_hashes(tmp_path: Path, serve: list[HttpServer]) -> None:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    # htpasswd writes $2y$; exporter-toolkit files carry it
    config = _web_config(
        tmp_path,
        f"basic_auth_users:\n  alice: '$2y${hashed[4:]}'\n"
        "http_server_config:\n  headers:\n    X-Frame-Options: deny\n",
    )
    server = _start(serve, config)
    url = f"http://127.0.0.1:{server.port}/metrics"
    status, headers, _ = _get(url)
    assert status == 401
    assert headers["WWW-Authenticate"].startswith("Basic realm=")
    assert _get(url, headers=_basic("alice", "wrong"))[0] == 401
    assert _get(url, headers=_basic("mallory", "s3cret"))[0] == 401
    assert _get(url, headers={"Authorization": "Basic !!notbase64"})[0] == 401
    for _ in range(2):  # the second one is answered from the cache
        status, headers, body = _get(url, headers=_basic("alice", "s3cret"))
        assert status == 200
        assert b"retrieval_monitor_state{" in body
        assert headers["X-Frame-Options"] == "deny"
        assert headers["X-Content-Type-Options"] == "nosniff"  # sent unless configured
    assert server.counts().auth_failures == 4
    # and on every answer: a 401, a 405, and the errors the request parser sends itself
    assert _get(url)[1]["X-Frame-Options"] == "deny"
    for request in (b"FOO / HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /healthz\r\n\r\n"):
        head = _raw_exchange(server.port, request).partition(b"\r\n\r\n")[0]
        assert b"\r\nX-Frame-Options: deny" in head, head
    status, headers, _ = _get(url, headers=_basic("alice", "s3cret"), method="POST")
    assert (status, headers["X-Frame-Options"]) == (405, "deny")


def test_a_flood_of_wrong_passwords_never_locks_out_cached_credentials(
    tmp_path: Path, serve: list[HttpServer]
) -> None:
    """Wrong passwords each need a bcrypt check, and the checks run a few at a time. Queued
    for one, a flood's connections counted as answering, so they never gave way at
    max_connections: every new connection (a probe with cached credentials included) was
    refused while the flood lasted. A check that would wait is answered 503 at once."""
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(12)).decode()  # about 0.2 s a check
    config = _web_config(tmp_path, f"basic_auth_users:\n  bob: '{hashed}'\n")
    config = replace(config, max_connections=4)
    server = _start(serve, config)
    url = f"http://127.0.0.1:{server.port}/healthz"
    assert _get(url, headers=_basic("bob", "pw"))[0] == 200  # now cached
    stop = threading.Event()
    flood: list[int] = []

    def wrong() -> None:
        while not stop.is_set():
            try:
                flood.append(_get(url, headers=_basic("bob", "guess"))[0])
            except OSError:
                flood.append(0)

    threads = [threading.Thread(target=wrong, daemon=True) for _ in range(6)]
    for t in threads:
        t.start()
    legit: list[int] = []
    try:
        for _ in range(15):
            time.sleep(0.2)  # a probe's period, shortened
            try:
                legit.append(_get(url, headers=_basic("bob", "pw"))[0])
            except OSError:
                legit.append(0)
    finally:
        stop.set()
        for t in threads:
            t.join(BOUND)
    assert legit.count(200) >= 8, legit  # none got in before (queued, the flood held every slot)
    assert 401 not in legit
    assert set(flood) <= {401, 503, 0}  # 0: gave way to a newcomer at the cap, unanswered


def test_clients_starting_together_with_the_right_password_all_get_in(
    tmp_path: Path, serve: list[HttpServer]
) -> None:
    """Uncached checks run a slot at a time; clients arriving together (Prometheus, Grafana,
    a probe at start-up) wait for one briefly, never a 503 (once answered at once when a
    slot was taken, a failed scrape for a right password)."""
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(10)).decode()
    users = "".join(f"  u{i}: '{hashed}'\n" for i in range(3))
    server = _start(serve, _web_config(tmp_path, f"basic_auth_users:\n{users}"))
    url = f"http://127.0.0.1:{server.port}/healthz"
    codes: list[int] = []
    threads = [
        threading.Thread(
            target=lambda i=i: codes.append(_get(url, headers=_basic(f"u{i}", "pw"))[0])
        )
        for i in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND)
    assert codes == [200, 200, 200]
    assert server.counts().auth_failures == 0


def test_the_images_healthcheck_speaks_tls_and_basic_auth_from_its_environment(
    tmp_path: Path, serve: list[HttpServer]
) -> None:
    """``deploy/docker/healthcheck.py``, the image's HEALTHCHECK, run as Docker runs it: its
    URL, CA and Authorization from the environment (once a fixed http://127.0.0.1:9464 that
    marked every container with another port, TLS or basic auth unhealthy)."""
    script = Path(__file__).resolve().parent.parent / "deploy" / "docker" / "healthcheck.py"
    cert, key = self_signed(tmp_path)
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
    config = _web_config(
        tmp_path,
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        f"basic_auth_users:\n  probe: '{hashed}'\n",
    )
    server = _start(serve, config)
    url = f"https://127.0.0.1:{server.port}/healthz"

    def probe(**env: str) -> int:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_HEALTHZ")}
        done = subprocess.run(
            [sys.executable, str(script)], env={**clean, **env}, timeout=30, capture_output=True
        )
        return done.returncode

    good = {
        "MONITOR_HEALTHZ_URL": url,
        "MONITOR_HEALTHZ_CAFILE": str(cert),
        "MONITOR_HEALTHZ_AUTHORIZATION": _basic("probe", "pw")["Authorization"],
    }
    assert probe(**good) == 0
    assert (
        probe(**{**good, "MONITOR_HEALTHZ_AUTHORIZATION": _basic("probe", "no")["Authorization"]})
        == 1
    )
    assert probe(**{k: v for k, v in good.items() if k != "MONITOR_HEALTHZ_CAFILE"}) == 1
    assert probe(MONITOR_HEALTHZ_URL=url.replace("https:", "http:")) == 1  # plain against TLS


def test_web_config_reload_adds_a_user(tmp_path: Path, serve: list[HttpServer]) -> None:
    config = _web_config(tmp_path, "basic_auth_users: {}\n")
    server = _start(serve, config)
    url = f"http://127.0.0.1:{server.port}/healthz"
    assert _get(url)[0] == 200
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
    path = config.web_config_file
    assert path is not None
    path.write_text("basic_auth_users:\n  bob: 'not-a-hash'\n")  # invalid: old one kept
    assert _get(url)[0] == 200
    path.write_text(f"basic_auth_users:\n  bob: '{hashed}'\n")
    assert _get(url)[0] == 401
    assert _get(url, headers=_basic("bob", "pw"))[0] == 200


def test_a_rotated_configmap_web_config_is_seen(tmp_path: Path, serve: list[HttpServer]) -> None:
    """A Kubernetes ConfigMap or Secret mount: each file a link through ``..data`` into a
    versioned directory that the kubelet swaps and deletes at an update. The config's
    directory was resolved through the links, so ``web_config_file = "web.yml"`` bound to
    the old version: a rotated password was never seen, and the revoked one kept working."""
    from monitor.config import load_config

    mount = tmp_path / "etc"
    (mount / "..v1").mkdir(parents=True)

    def users(password: bytes) -> str:
        return (
            f"basic_auth_users:\n  bob: '{bcrypt.hashpw(password, bcrypt.gensalt(4)).decode()}'\n"
        )

    (mount / "..v1" / "web.yml").write_text(users(b"old"))
    (mount / "..v1" / "monitor.toml").write_text(
        '[server]\nlisten = "127.0.0.1:0"\nweb_config_file = "web.yml"\n'
        '[[monitors]]\nname = "m"\nscores.path = "s"\noutcomes.path = "o"\n'
    )
    (mount / "..data").symlink_to("..v1")
    for name in ("monitor.toml", "web.yml"):
        (mount / name).symlink_to(f"..data/{name}")
    config = load_config(mount / "monitor.toml")
    assert config.server.web_config_file == mount / "web.yml"
    server = _start(serve, config.server)
    url = f"http://127.0.0.1:{server.port}/healthz"
    assert _get(url, headers=_basic("bob", "old"))[0] == 200
    (mount / "..v2").mkdir()
    (mount / "..v2" / "web.yml").write_text(users(b"new"))
    (mount / "..v2" / "monitor.toml").write_bytes((mount / "..v1" / "monitor.toml").read_bytes())
    (mount / "..tmp").symlink_to("..v2")
    (mount / "..tmp").replace(mount / "..data")  # as the kubelet swaps it: a rename
    shutil.rmtree(mount / "..v1")
    assert _get(url, headers=_basic("bob", "new"))[0] == 200
    assert _get(url, headers=_basic("bob", "old"))[0] == 401


def test_client_certificates_required(tmp_path: Path, serve: list[HttpServer]) -> None:
    cert, key = self_signed(tmp_path)
    client_cert, client_key = self_signed(tmp_path, "client", cn="scraper")
    config = _web_config(
        tmp_path,
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {client_cert}\n",
    )
    server = _start(serve, config)
    url = f"https://127.0.0.1:{server.port}/healthz"
    with pytest.raises(OSError, match=r"(?i)certificate required|reset|EOF"):
        _get(url, cert)
    context = ssl.create_default_context(cafile=str(cert))
    context.load_cert_chain(str(client_cert), str(client_key))
    with urllib.request.urlopen(url, context=context, timeout=BOUND) as resp:
        assert resp.status == 200


def _raw_exchange(port: int, request: bytes, wait: float = BOUND) -> bytes:
    """Send ``request`` on a new connection and read until the server closes or stays quiet
    for ``wait`` s."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(request)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return out


def _response(sock: socket.socket) -> tuple[bytes, bytes]:
    """One response off a kept-alive connection: (head, body) by its Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        chunk = sock.recv(4096)
        assert chunk
        body += chunk
    assert len(body) == length  # nothing more was sent ahead of the next request
    return head, body


def test_a_get_body_is_dropped_not_read_as_the_next_request(serve: list[HttpServer]) -> None:
    """A GET with a Content-Length body: the body was left unread and answered as the next
    request on the kept-alive connection (a request-smuggling shape behind a proxy)."""
    server = _start(serve, ServerConfig(port=0))
    smuggled = b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n"
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(smuggled)
    with socket.create_connection(("127.0.0.1", server.port), timeout=BOUND) as s:
        s.sendall(head + smuggled)
        first = _response(s)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        second = _response(s)
    for status, body in (first, second):
        assert status.startswith(b"HTTP/1.1 200")
        assert body == b"ok\n"  # /healthz, never the smuggled /status


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET /healthz\r\n\r\n", b"HTTP/1.1 400"),  # HTTP/0.9 was answered with no status line
        # ... and one with no blank line after it (no headers follow HTTP/0.9) was answered
        # nothing, cut at request_timeout
        (b"GET /healthz\r\n", b"HTTP/1.1 400"),
        # a version the standard library refuses, and the HTTP/2 preface: a bare HTML body
        # with no status line and no headers (nosniff, the web config's)
        (b"GET /healthz HTTP/9.9\r\n\r\n", b"HTTP/1.1 505"),
        (b"GET /healthz HTTP/x.y\r\n\r\n", b"HTTP/1.1 400"),
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"HTTP/1.1 505"),
        (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"HTTP/1.1 400",
        ),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 999999\r\n\r\n", b"HTTP/1.1 413"),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", b"HTTP/1.1 400"),
        # "\xb2" is "²", and "²".isdigit(): int() raised, the client got nothing and the log a
        # traceback
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: \xb2\r\n\r\n", b"HTTP/1.1 400"),
        # two lengths (RFC 9112 6.3): the first was taken and the body answered as a request
        (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
            b"Content-Length: 32\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\n",
            b"HTTP/1.1 400",
        ),
        # a long request line (its own 64 KiB limit) does not count against the headers
        (
            b"GET /healthz?"
            + b"a" * 60_000
            + b" HTTP/1.1\r\nHost: x\r\n"
            + b"".join(b"X-%d: %s\r\n" % (i, b"a" * 8000) for i in range(6))
            + b"\r\n",
            b"HTTP/1.1 200",
        ),
        # a head past 64 KiB in lines each under the standard library's 64 KiB: 431, not
        # 6.4 MB held a connection
        (
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
            + b"".join(b"X-%d: %s\r\n" % (i, b"a" * 8000) for i in range(9))
            + b"\r\n",
            b"HTTP/1.1 431",
        ),
    ],
)
def test_requests_the_server_cannot_frame_are_refused(
    serve: list[HttpServer], request_bytes: bytes, status: bytes
) -> None:
    server = _start(serve, ServerConfig(port=0))
    began = time.monotonic()
    out = _raw_exchange(server.port, request_bytes)
    assert out.startswith(status), out[:80]
    assert out.count(b"HTTP/1.") == 1  # one answer, and the connection closed
    assert b"\r\nX-Content-Type-Options: nosniff\r\n" in out.partition(b"\r\n\r\n")[0] + b"\r\n"
    if not status.endswith(b"200"):  # a refusal closes at once (a 200 is kept alive)
        assert time.monotonic() - began < BOUND  # answered, not cut at a timeout


def test_idle_keep_alive_connections_give_way_at_the_cap(serve: list[HttpServer]) -> None:
    """Clients that each sent one request and keep their connections open held every slot for
    idle_timeout and refused every new client, /healthz probes included; at the cap the one
    idle longest now gives way."""
    config = ServerConfig(port=0, max_connections=3, idle_timeout=timedelta(seconds=60))
    server = _start(serve, config)
    idle = []
    try:
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=BOUND)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert _response(s)[1] == b"ok\n"
            idle.append(s)
        idle_from = time.monotonic()
        wait_for(lambda: server.counts().connections_active == 3, timeout=BOUND, what="idle")
        _waited_to_give_way(idle_from)
        url = f"http://127.0.0.1:{server.port}/healthz"
        for _ in range(3):
            assert _get(url)[0] == 200
        assert server.counts().connections_rejected == 0
        assert _closed_by_peer(idle[0], BOUND)  # the oldest idle one gave way
    finally:
        for s in idle:
            s.close()


def test_a_reload_never_turns_tls_off(tmp_path: Path, serve: list[HttpServer]) -> None:
    """A web config rewritten without tls_server_config once served the same port as plain
    HTTP (credentials in the clear); the previous one is kept, as a restart would decide."""
    cert, key = self_signed(tmp_path / "tls")
    config = _web_config(tmp_path, f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    server = _start(serve, config)
    url = f"https://127.0.0.1:{server.port}/healthz"
    assert _get(url, cert)[0] == 200
    assert config.web_config_file is not None
    config.web_config_file.write_text("basic_auth_users: {}\n")
    assert _get(url, cert)[0] == 200
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # still a TLS port
        _get(f"http://127.0.0.1:{server.port}/healthz")


def test_a_certificate_named_before_it_is_written_is_loaded_when_it_is(
    tmp_path: Path, serve: list[HttpServer]
) -> None:
    """A web config pointed at new certificate files before they exist fails to reload; the
    files written after it were never loaded (only the old names were watched), and the old
    certificate was served until the config was touched."""
    cert, key = self_signed(tmp_path / "a")
    config = _web_config(tmp_path, f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    server = _start(serve, config)
    first = _peer_cert(server.port)
    assert config.web_config_file is not None
    new = tmp_path / "b"
    config.web_config_file.write_text(
        f"tls_server_config:\n  cert_file: {new / 'server.crt'}\n  key_file: {new / 'server.key'}\n"
    )
    assert _peer_cert(server.port) == first  # the reload failed: the files are not there
    new_cert, _ = self_signed(new)
    second = _peer_cert(server.port)
    assert second == ssl.PEM_cert_to_DER_cert(new_cert.read_text())
    assert _get(f"https://127.0.0.1:{server.port}/healthz", new_cert)[0] == 200


def test_an_unknown_user_costs_what_a_known_one_does() -> None:
    """An unknown user name is checked against a hash of the users' highest cost: at the fixed
    cost 10, a cost-12 user answered five times slower than a name that does not exist."""
    from monitor.server import _BCRYPT_SLOTS, _BasicAuth, _cost

    users = {
        "a": bcrypt.hashpw(b"x", bcrypt.gensalt(4)),
        "b": bcrypt.hashpw(b"y", bcrypt.gensalt(11)),
    }
    auth = _BasicAuth(users)
    assert _cost(auth._dummy) == 11
    assert not auth.check(_basic("nobody", "y")["Authorization"], _BCRYPT_SLOTS.acquire)
    assert auth.check(_basic("b", "y")["Authorization"], _BCRYPT_SLOTS.acquire)
    assert _cost(_BasicAuth({})._dummy) == 10


def test_a_removed_user_is_refused_on_a_connection_kept_alive(
    tmp_path: Path, serve: list[HttpServer]
) -> None:
    """The web config is the one in force at each request: a user removed from it was let in
    for as long as a connection opened before the change was kept alive (Prometheus keeps
    its scrape connection for hours)."""
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
    other = bcrypt.hashpw(b"pw2", bcrypt.gensalt(4)).decode()
    config = _web_config(tmp_path, f"basic_auth_users:\n  alice: '{hashed}'\n  bob: '{other}'\n")
    server = _start(serve, config)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=BOUND)
    try:
        conn.request("GET", "/healthz", headers=_basic("alice", "pw"))
        first = conn.getresponse()
        assert (first.status, first.read()) == (200, b"ok\n")
        sock = conn.sock
        assert config.web_config_file is not None
        config.web_config_file.write_text(f"basic_auth_users:\n  bob: '{other}'\n")
        conn.request("GET", "/healthz", headers=_basic("alice", "pw"))
        second = conn.getresponse()
        second.read()
        assert conn.sock is sock  # the same connection
        assert second.status == 401
    finally:
        conn.close()


def test_a_web_config_written_during_its_reload_is_loaded_next(
    tmp_path: Path, serve: list[HttpServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stamps of the files recorded at a reload are those read before the files: the ones
    after it recorded a write that landed between the read and the stat as loaded, and the
    file that now required a user was never applied."""
    import monitor.server

    config = _web_config(tmp_path, "basic_auth_users: {}\n")
    server = _start(serve, config)
    url = f"http://127.0.0.1:{server.port}/healthz"
    path = config.web_config_file
    assert path is not None
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode()
    real = load_web_config
    writes = [f"basic_auth_users:\n  bob: '{hashed}'\n"]

    def load_then_write(file: Path) -> tuple[object, list[str]]:
        loaded = real(file)
        if writes:  # the operator's next write lands right after this read
            file.write_text(writes.pop())
        return loaded

    monkeypatch.setattr(monitor.server, "load_web_config", load_then_write)
    path.write_text("basic_auth_users: {}\n# touched\n")
    assert _get(url)[0] == 401  # read the touched file; the write after it is in force
    assert not writes
    assert _get(url)[0] == 401
    assert _get(url, headers=_basic("bob", "pw"))[0] == 200


def test_a_slow_reload_holds_up_no_other_request(
    tmp_path: Path, serve: list[HttpServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One request rebuilds a changed web config, outside the lock: a user table of a high
    bcrypt cost (its unknown-user hash takes seconds to make) held every other connection
    behind it. The others are answered with the config in force meanwhile."""
    import monitor.server

    config = _web_config(tmp_path, "basic_auth_users: {}\n")
    server = _start(serve, config)
    url = f"http://127.0.0.1:{server.port}/healthz"
    real, entered, release = load_web_config, threading.Event(), threading.Event()

    def slow(file: Path) -> tuple[object, list[str]]:
        entered.set()
        release.wait(timeout=4 * BOUND)
        return real(file)

    monkeypatch.setattr(monitor.server, "load_web_config", slow)
    assert config.web_config_file is not None
    config.web_config_file.write_text("basic_auth_users: {}\n# changed\n")
    first: list[int] = []
    rebuilding = threading.Thread(target=lambda: first.append(_get(url)[0]))
    rebuilding.start()
    try:
        assert entered.wait(timeout=BOUND)
        for _ in range(3):  # served while the rebuild waits
            assert _get(url)[0] == 200
    finally:
        release.set()
        rebuilding.join(timeout=BOUND)
    assert first == [200]


def test_pages_carry_their_policy_as_a_header_and_before_the_first_check(
    serve: list[HttpServer],
) -> None:
    """HTML answers send the pages' Content-Security-Policy as a header (a <meta> cannot hold
    every directive) and nosniff; the page of a monitor with no check yet is a document of
    the same policy (it had none)."""
    from monitor.report import PAGE_CSP

    server = _start(serve, ServerConfig(port=0))
    for path in ("/", "/monitors/a"):
        status, headers, body = _get(f"http://127.0.0.1:{server.port}{path}")
        assert status == 200
        assert headers["Content-Security-Policy"] == PAGE_CSP
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert f'http-equiv="Content-Security-Policy" content="{PAGE_CSP}"'.encode() in body
    assert b"No check has finished yet" in body
    assert "Content-Security-Policy" not in _get(f"http://127.0.0.1:{server.port}/metrics")[1]


def test_a_page_that_fails_to_render_is_a_500_and_the_server_serves_on(
    serve: list[HttpServer], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A render error ended every request for the page with no status line (the client saw
    the connection drop); it is a 500 naming the log, and other routes are unaffected."""
    server = _start(serve, ServerConfig(port=0))

    def broken(snap: object) -> bytes:
        raise TypeError("must be real number, not str")

    monkeypatch.setattr(server, "page", broken)
    base = f"http://127.0.0.1:{server.port}"
    status, _, body = _get(f"{base}/monitors/a")
    assert status == 500
    assert body == b"internal error: see the monitor's log\n"
    assert any(r.getMessage() == "http request failed" for r in caplog.records)
    assert _get(f"{base}/status")[0] == 200


def test_a_web_config_fifo_is_a_failed_reload_not_a_hang(
    tmp_path: Path, serve: list[HttpServer]
) -> None:
    """A FIFO in place of the web config: the request that noticed the change read it and
    waited for ever, and with it marked "building", no later change (a user removed, a
    certificate rotated) was ever applied. It is now a failed reload, and a valid file
    written after it is applied."""
    config = _web_config(tmp_path, "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    server = _start(serve, config)
    url = f"http://127.0.0.1:{server.port}/healthz"
    path = config.web_config_file
    assert path is not None
    path.unlink()
    os.mkfifo(path)
    status, headers, _ = _get(url)
    assert (status, headers["X-Frame-Options"]) == (200, "deny")  # the config in force
    path.unlink()
    path.write_text("http_server_config:\n  headers:\n    X-Frame-Options: sameorigin\n")
    status, headers, _ = _get(url)
    assert (status, headers["X-Frame-Options"]) == (200, "sameorigin")


def test_a_certificate_fifo_is_an_error_not_a_hang(tmp_path: Path) -> None:
    from monitor.webconfig import TlsConfig, build_ssl_context

    cert, key = self_signed(tmp_path)
    fifo = tmp_path / "cert.fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        build_ssl_context(TlsConfig(cert_file=fifo, key_file=key))
    build_ssl_context(TlsConfig(cert_file=cert, key_file=key))  # a regular pair loads


def test_a_web_config_nested_too_deeply_is_a_failed_reload(
    tmp_path: Path, serve: list[HttpServer]
) -> None:
    """YAML nested hundreds deep raised RecursionError out of the reload (the files it names
    were read first, unguarded): every request failed until the file was fixed."""
    config = _web_config(tmp_path, "http_server_config:\n  headers:\n    X-Frame-Options: deny\n")
    server = _start(serve, config)
    url = f"http://127.0.0.1:{server.port}/healthz"
    path = config.web_config_file
    assert path is not None
    path.write_text("x: " + "[" * 600 + "]" * 600 + "\n")
    for _ in range(2):
        status, headers, _ = _get(url)
        assert (status, headers["X-Frame-Options"]) == (200, "deny")
