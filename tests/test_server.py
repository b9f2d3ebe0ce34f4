"""The HTTP endpoint on its own: routes, health, and TLS with a real certificate."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import urllib.request
from pathlib import Path

import pytest

from monitor.config import ServerConfig, parse_config
from monitor.jobs import Board
from monitor.server import HttpServer
from monitor.verdict import MonitorState
from tests.deploy.stack import http_get


def _board() -> Board:
    doc = {"monitors": [{"name": "a", "scores": {"path": "s"}, "outcomes": {"path": "o"}}]}
    config = parse_config(doc, base=Path("/tmp"))
    return Board(config.monitors, {"a": MonitorState(state="ok")})


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


def test_tls(tmp_path: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    config = ServerConfig(port=0, tls_cert_file=cert, tls_key_file=key)
    server = HttpServer(config, _board(), lambda: True)
    server.start()
    try:
        context = ssl.create_default_context(cafile=str(cert))
        url = f"https://127.0.0.1:{server.port}/healthz"
        with urllib.request.urlopen(url, context=context, timeout=5) as resp:
            assert resp.status == 200
        with pytest.raises(OSError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify"):
            urllib.request.urlopen(url, context=ssl.create_default_context(), timeout=5)
    finally:
        server.stop()
