"""``monitor run`` as a real process: exporter-style flags, log formats, and SIGTERM with hostile
clients attached (issue 10 #2 and #8)."""

from __future__ import annotations

import base64
import json
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import bcrypt
import pytest

from monitor.simulate import SCENARIOS, write_world
from tests.certs import self_signed
from tests.deploy.stack import Process, free_port, wait_for

SHUTDOWN = 3.0  # the shutdown_timeout these daemons run with


def _world(tmp_path: Path, server_toml: str = "") -> tuple[Path, int]:
    end = datetime.now(UTC).replace(microsecond=0)
    port = free_port()
    w = write_world(
        tmp_path / "world",
        SCENARIOS["stationary"],
        start=end - timedelta(days=9),
        end=end,
        seed=1,
        listen=f"127.0.0.1:{port}",
    )
    text = w.config_path.read_text()
    extra = f'shutdown_timeout = "{SHUTDOWN:g}s"\n{server_toml}'
    w.config_path.write_text(text.replace('state_dir = "state"\n', f'state_dir = "state"\n{extra}'))
    return w.config_path, port


def _get(port: int, path: str, cafile: Path, headers: dict[str, str] | None) -> tuple[int, bytes]:
    context = ssl.create_default_context(cafile=str(cafile))
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, context=context, timeout=2) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


def _healthz(port: int, cafile: Path, headers: dict[str, str] | None = None) -> bool:
    return _get(port, "/healthz", cafile, headers)[0] == 200


def _first_check_done(port: int, cafile: Path, headers: dict[str, str] | None = None) -> bool:
    """The first check has finished, so SIGTERM measures the server, not a running check."""
    status, body = _get(port, "/metrics", cafile, headers)
    return status == 200 and b'retrieval_monitor_runs_total{monitor="demo"} 1.0' in body


def _stop_with_clients_attached(proc: Process, port: int) -> float:
    """SIGTERM with a silent client and a half-done handshake attached; seconds until exit."""
    silent = socket.create_connection(("127.0.0.1", port), timeout=2)
    half = socket.create_connection(("127.0.0.1", port), timeout=2)
    half.sendall(b"\x16\x03\x01\x00")
    try:
        started = time.monotonic()
        proc.popen.send_signal(signal.SIGTERM)
        try:
            proc.popen.wait(timeout=SHUTDOWN + 5)
        except subprocess.TimeoutExpired:
            pytest.fail(f"no exit {SHUTDOWN + 5:g}s after SIGTERM\n{proc.log()}")
        return time.monotonic() - started
    finally:
        silent.close()
        half.close()


@pytest.mark.integration
def test_run_tls_logfmt_debug_and_sigterm_with_silent_client(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path / "tls")
    config, port = _world(tmp_path, f'tls_cert_file = "{cert}"\ntls_key_file = "{key}"\n')
    argv = [sys.executable, "-m", "monitor", "run", "--config", str(config)]
    argv += ["--log.level", "DEBUG", "--log.format", "logfmt"]
    proc = Process("monitor", argv, tmp_path / "run.log", cwd=config.parent)
    try:
        wait_for(lambda: _first_check_done(port, cert), timeout=60, what="check", log=proc.log)
        elapsed = _stop_with_clients_attached(proc, port)
    finally:
        code = proc.stop()
    output = proc.log_path.read_text()
    assert code == 0, output
    assert elapsed < SHUTDOWN, output
    lines = [line for line in output.splitlines() if line.strip()]
    pattern = re.compile(r'^time=\S+ level=(debug|info|warning|error) logger=\S+ msg=("[^"]*"|\S+)')
    assert all(pattern.match(line) for line in lines), lines
    assert any(line.startswith("time=") and " level=debug " in line for line in lines)
    assert any(" msg=started " in line for line in lines)
    assert any(" msg=stopped" in line for line in lines)


@pytest.mark.integration
def test_run_web_config_flags_override_the_toml_json_logs(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path / "tls")
    config, toml_port = _world(tmp_path)
    hashed = bcrypt.hashpw(b"scrape", bcrypt.gensalt(4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    port = free_port()
    argv = [sys.executable, "-m", "monitor", "run", "--config", str(config)]
    argv += ["--web.listen-address", f"127.0.0.1:{port}", "--web.config.file", str(web)]
    argv += ["--log-level", "debug"]  # the old spelling still works, in lower case too
    proc = Process("monitor", argv, tmp_path / "run.log", cwd=config.parent)
    creds = {"Authorization": "Basic " + base64.b64encode(b"prometheus:scrape").decode()}
    try:
        wait_for(
            lambda: _first_check_done(port, cert, creds), timeout=60, what="check", log=proc.log
        )
        assert not _healthz(port, cert)  # 401 without credentials
        with pytest.raises(OSError, match="refused"):
            socket.create_connection(("127.0.0.1", toml_port), timeout=2).close()
        elapsed = _stop_with_clients_attached(proc, port)
    finally:
        code = proc.stop()
    output = proc.log_path.read_text()
    assert code == 0, output
    assert elapsed < SHUTDOWN, output
    docs = [json.loads(line) for line in output.splitlines() if line.strip()]
    assert {"debug", "info"} <= {d["level"] for d in docs}
    started = next(d for d in docs if d["message"] == "started")
    assert started["listen"].endswith(f":{port}")


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--web.listen-address", "::1:9464"], "put an IPv6 address in brackets"),
        (["--web.listen-address", "127.0.0.1:99999"], "--web.listen-address: must be"),
        (["--web.config.file", "no-such.yml"], "--web.config.file: no-such.yml: cannot read"),
        # repeatable in exporter-toolkit; argparse kept the last silently, dropping the first
        (
            ["--web.listen-address", "127.0.0.1:19140", "--web.listen-address", "127.0.0.1:19141"],
            "--web.listen-address given more than once",
        ),
    ],
)
def test_run_rejects_bad_flags_with_exit_3(tmp_path: Path, flags: list[str], expected: str) -> None:
    config, _ = _world(tmp_path)
    argv = [sys.executable, "-m", "monitor", "run", "--config", str(config), *flags]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert expected in done.stderr


def test_run_rejects_an_unknown_log_level(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "monitor", "run", "--config", "x.toml", "--log.level", "loud"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 3  # a usage error, as every bad flag (argparse's own 2 no more)
    assert "debug, info, warn, warning, error" in done.stderr
