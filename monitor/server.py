"""The HTTP endpoint: ``/metrics``, ``/healthz``, ``/status`` and a small landing page.

A ``ThreadingHTTPServer`` in a daemon thread; loopback by default; TLS when a certificate and key
are configured. Scrapes only render what the board holds: nothing is computed on the scrape path.
"""

from __future__ import annotations

import html
import json
import logging
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from monitor import __version__
from monitor.config import ServerConfig
from monitor.exporter import CONTENT_TYPE, make_registry, render
from monitor.jobs import Board

__all__ = ["HttpServer", "status_document"]

log = logging.getLogger("monitor.http")


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
                "last_run_duration_seconds": run.duration_seconds if run else None,
                "verdict": run.verdict.to_dict() if run else None,
            }
        )
    return {"version": __version__, "monitors": monitors}


class HttpServer:
    """Serves the board over HTTP(S) until ``stop()``."""

    def __init__(self, config: ServerConfig, board: Board, healthy: Callable[[], bool]) -> None:
        registry = make_registry(board)

        class Handler(BaseHTTPRequestHandler):
            server_version = f"retrieval-monitor/{__version__}"

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("http " + format, *args)

            def _send(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_HEAD(self) -> None:
                self.do_GET()

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, render(registry), CONTENT_TYPE)
                elif path == "/healthz":
                    ok = healthy()
                    self._send(
                        200 if ok else 503,
                        b"ok\n" if ok else b"scheduler not running\n",
                        "text/plain; charset=utf-8",
                    )
                elif path == "/status":
                    body = json.dumps(status_document(board), indent=1).encode()
                    self._send(200, body, "application/json")
                elif path == "/":
                    rows = "".join(
                        f"<tr><td>{html.escape(s.monitor.name)}</td>"
                        f"<td>{html.escape(str(s.state.state))}</td></tr>"
                        for s in board.snapshot()
                    )
                    page = (
                        f"<!doctype html><title>retrieval-monitor</title>"
                        f"<h1>retrieval-monitor {__version__}</h1>"
                        f"<table><tr><th>monitor</th><th>state</th></tr>{rows}</table>"
                        f'<p><a href="/metrics">/metrics</a> · <a href="/status">/status</a> · '
                        f'<a href="/healthz">/healthz</a></p>'
                    )
                    self._send(200, page.encode(), "text/html; charset=utf-8")
                else:
                    self._send(404, b"not found\n", "text/plain; charset=utf-8")

        self._httpd = ThreadingHTTPServer((config.host, config.port), Handler)
        self._httpd.daemon_threads = True
        if config.tls_cert_file is not None and config.tls_key_file is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(config.tls_cert_file), str(config.tls_key_file))
            self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="http", daemon=True)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket (also when ``start`` was never called)."""
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.server_close()
