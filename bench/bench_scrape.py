"""Scrape latency of ``/metrics`` over HTTP and HTTPS while checks run (issue 10).

Two real ``monitor run`` daemons, one plain and one with TLS (a fresh self-signed RSA-2048
certificate from ``openssl``), serve the same populated board: a ``segment_drift`` world (3
segments) watched by ``--monitors`` monitors, each checking every ``--schedule`` so that checks
run while the scrapes do. Scrapes alternate between the two daemons (so both see the same load)
and are timed from sending the request to the last byte of the body, ``--scrapes`` each:

* keep-alive: one connection per daemon reused for every scrape (what Prometheus does);
* new connection: a connection (and for HTTPS a full handshake) per scrape, ``--scrapes // 4``.

Printed: p50 / p99 / max in milliseconds, the HTTPS / HTTP ratio of each, the body size and the
sample count. Absolute times depend on the machine; the ratios are the result.
"""

from __future__ import annotations

import argparse
import http.client
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from monitor.simulate import SCENARIOS, write_world  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _cert(directory: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise SystemExit("openssl is needed for the HTTPS daemon")
    cert, key = directory / "server.crt", directory / "server.key"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def _config(world_dir: Path, port: int, monitors: int, schedule: str, tls: str) -> Path:
    lines = [
        "[server]",
        f'listen = "127.0.0.1:{port}"',
        f'state_dir = "state-{port}"',
        'shutdown_timeout = "5s"',
        tls,
    ]
    for i in range(monitors):
        lines += [
            "[[monitors]]",
            f'name = "m{i}"',
            f'schedule = "{schedule}"',
            'scores.path = "scores"',
            'scores.timestamp_column = "timestamp"',
            'scores.score_column = "score"',
            'scores.segment_column = "segment"',
            'outcomes.path = "outcomes"',
            'outcomes.timestamp_column = "timestamp"',
            'outcomes.query_column = "query_id"',
            'outcomes.outcome_column = "outcome"',
            'outcomes.segment_column = "segment"',
            'windows.current = "1d"',
            'windows.reference = "7d"',
            'run_timeout = "60s"',  # the first runs of all monitors start at once
        ]
    path = world_dir / f"monitor-{port}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _connect(port: int, context: ssl.SSLContext | None) -> http.client.HTTPConnection:
    if context is None:
        return http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    return http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)


def _scrape(conn: http.client.HTTPConnection) -> tuple[float, bytes]:
    started = time.perf_counter()
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    body = resp.read()
    elapsed = time.perf_counter() - started
    if resp.status != 200:
        raise RuntimeError(f"/metrics answered {resp.status}")
    return elapsed, body


def _ready(port: int, context: ssl.SSLContext | None, monitors: int, deadline: float) -> bytes:
    """Poll until every monitor shows a verdict's PSI (bounded by ``deadline``)."""
    while True:
        try:
            conn = _connect(port, context)
            _, body = _scrape(conn)
            conn.close()
            with_verdict = {
                line.split(b",", 1)[0]
                for line in body.splitlines()
                if line.startswith(b"retrieval_monitor_psi{")
            }
            if len(with_verdict) >= monitors:
                return body
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"daemon on port {port} not ready")
        time.sleep(0.2)


def _summary(times: list[float]) -> tuple[float, float, float]:
    ms = sorted(t * 1000.0 for t in times)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return statistics.median(ms), p99, ms[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=2000)
    parser.add_argument("--monitors", type=int, default=6)
    parser.add_argument("--schedule", default="5s")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        end = datetime.now(UTC).replace(microsecond=0)
        world = write_world(
            root / "world",
            SCENARIOS["segment_drift"],
            start=end - timedelta(days=9),
            end=end,
            seed=5,
        )
        cert, key = _cert(root)
        plain_port, tls_port = _free_port(), _free_port()
        tls_line = f'tls_cert_file = "{cert}"\ntls_key_file = "{key}"'
        configs = {
            "http": _config(world.config_path.parent, plain_port, args.monitors, args.schedule, ""),
            "https": _config(
                world.config_path.parent, tls_port, args.monitors, args.schedule, tls_line
            ),
        }
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "monitor", "run", "--config", str(path)],
                cwd=world.config_path.parent,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for path in configs.values()
        ]
        try:
            context = ssl.create_default_context(cafile=str(cert))
            ports = {"http": (plain_port, None), "https": (tls_port, context)}
            deadline = time.monotonic() + 120
            body = b""
            for port, ctx in ports.values():
                body = _ready(port, ctx, args.monitors, deadline)
            samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
            results: dict[tuple[str, str], list[float]] = {}
            conns = {name: _connect(port, ctx) for name, (port, ctx) in ports.items()}
            for _ in range(args.scrapes):
                for name, conn in conns.items():
                    elapsed, body = _scrape(conn)
                    results.setdefault((name, "keep-alive"), []).append(elapsed)
            for conn in conns.values():
                conn.close()
            for _ in range(max(1, args.scrapes // 4)):
                for name, (port, ctx) in ports.items():
                    started = time.perf_counter()
                    conn = _connect(port, ctx)
                    _scrape(conn)
                    conn.close()
                    results.setdefault((name, "new connection"), []).append(
                        time.perf_counter() - started
                    )
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                proc.wait(timeout=30)

    print(
        f"/metrics: {len(body)} bytes, {samples} samples, {args.monitors} monitors x 3 segments, "
        f"checks every {args.schedule} while scraping"
    )
    print(f"{'mode':<16}{'scheme':<8}{'n':>6}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for mode in ("keep-alive", "new connection"):
        stats = {}
        for scheme in ("http", "https"):
            times = results[(scheme, mode)]
            stats[scheme] = _summary(times)
            p50, p99, worst = stats[scheme]
            print(f"{mode:<16}{scheme:<8}{len(times):>6}{p50:>9.2f}{p99:>9.2f}{worst:>9.2f}")
        ratio50 = stats["https"][0] / stats["http"][0]
        ratio99 = stats["https"][1] / stats["http"][1]
        print(f"{mode:<16}{'ratio':<8}{'':>6}{ratio50:>8.2f}x{ratio99:>8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
