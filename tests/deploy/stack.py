"""A throw-away monitoring stack on loopback ports: Prometheus, Alertmanager and a webhook receiver.

Everything is bounded: each wait polls for its event with a deadline and raises ``AssertionError``
naming what it waited for (and the process log) when the deadline passes; :meth:`Stack.close`
stops every process it started (SIGTERM, then SIGKILL after a grace period).

Typical use::

    with Stack(tmp_path, targets=["127.0.0.1:9464"], rules=ALERTS) as stack:
        stack.wait_for_target_up()
        stack.wait_for_alert("RetrievalModelDecay", state="firing")
"""

from __future__ import annotations

import itertools
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.deploy.contract import JOB

T = TypeVar("T")

PROMETHEUS = "prometheus"
ALERTMANAGER_CANDIDATES = ("prometheus-alertmanager", "alertmanager")
INSTALL_HINT = "run `make debs` (.ci/install-debian-packages.sh) to install Debian's packages"


def binary(*names: str) -> str:
    """The path of the first of ``names`` on PATH; fails the test with the install hint if none."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise AssertionError(f"none of {names} is on PATH; {INSTALL_HINT}")


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.25,
    log: Callable[[], str] | None = None,
) -> T:
    """Poll ``probe`` until it returns something truthy; return it. Bounded by ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = probe()
        except (OSError, ValueError) as exc:  # not up yet (URLError is an OSError)
            last = exc
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            tail = f"\n--- log ---\n{log()}" if log else ""
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}{tail}"
            )
        time.sleep(interval)


def http_get(url: str, *, timeout: float = 5.0) -> tuple[int, bytes]:
    """``(status, body)`` of a GET; HTTP errors are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _ready(base_url: str) -> bool:
    return http_get(f"{base_url}/-/ready")[0] == 200


def shorten_rules(source: Path, dest: Path, *, for_: str = "0s") -> Path:
    """Write a test copy of ``source``: every ``for`` set to ``for_``, no ``keep_firing_for``."""
    doc = yaml.safe_load(source.read_text())
    for group in doc["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = for_
            rule.pop("keep_firing_for", None)
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


class Process:
    """A child process with its output in a log file; stopped by :meth:`stop`."""

    def __init__(
        self, name: str, argv: Sequence[str], log_path: Path, cwd: Path | None = None
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.popen = subprocess.Popen(
            list(argv), stdout=self._log, stderr=subprocess.STDOUT, cwd=cwd
        )

    def log(self) -> str:
        """The last 4 000 characters of the process's output."""
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, *, grace: float = 10.0) -> int:
        """SIGTERM, wait up to ``grace`` s, then SIGKILL; returns the exit code."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=grace)
        self._log.close()
        return self.popen.returncode


class WebhookReceiver:
    """An in-test HTTP server that records every Alertmanager webhook payload it receives."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with receiver._lock:
                    receiver.payloads.append(body)
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert of every payload received so far."""
        with self._lock:
            return [a for p in self.payloads for a in p.get("alerts", [])]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class StaticMetrics:
    """An in-test ``/metrics`` endpoint serving an exposition text (for harness tests): a fixed
    one, or ``text(n)`` at the ``n``-th scrape (0 first), for counters that must rise."""

    def __init__(self, text: str | Callable[[int], str]) -> None:
        scrapes = itertools.count()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                payload = (text if isinstance(text, str) else text(next(scrapes))).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class Stack:
    """Prometheus (scraping ``targets`` as job ``retrieval-monitor``, with ``rules``) and an
    Alertmanager whose only receiver is an in-test :class:`WebhookReceiver`; 1 s intervals."""

    def __init__(
        self, workdir: Path, *, targets: Iterable[str], rules: Path, for_: str = "0s"
    ) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._procs: list[Process] = []
        self.webhook = WebhookReceiver()
        try:
            self._start(list(targets), rules, for_)
        except BaseException:
            self.close()
            raise

    def _start(self, targets: list[str], rules: Path, for_: str) -> None:
        am_port, prom_port = free_port(), free_port()
        self.alertmanager_url = f"http://127.0.0.1:{am_port}"
        self.prometheus_url = f"http://127.0.0.1:{prom_port}"
        am_config = {
            "route": {
                "receiver": "webhook",
                "group_by": ["alertname", "monitor", "segment"],
                "group_wait": "0s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [
                {
                    "name": "webhook",
                    "webhook_configs": [{"url": self.webhook.url, "send_resolved": False}],
                }
            ],
        }
        (self.workdir / "alertmanager.yml").write_text(yaml.safe_dump(am_config))
        self.alertmanager = self._spawn(
            "alertmanager",
            [
                binary(*ALERTMANAGER_CANDIDATES),
                f"--config.file={self.workdir / 'alertmanager.yml'}",
                f"--storage.path={self.workdir / 'am-data'}",
                f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",
                "--log.level=warn",
            ],
        )
        rules_copy = shorten_rules(rules, self.workdir / "rules.yml", for_=for_)
        prom_config = {
            "global": {
                "scrape_interval": "1s",
                "evaluation_interval": "1s",
                "scrape_timeout": "1s",
            },
            "alerting": {
                "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]
            },
            "rule_files": [str(rules_copy)],
            "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": targets}]}],
        }
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(prom_config))
        self.prometheus = self._spawn(
            "prometheus",
            [
                binary(PROMETHEUS),
                f"--config.file={self.workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.workdir / 'prom-data'}",
                f"--web.listen-address=127.0.0.1:{prom_port}",
                "--log.level=warn",
            ],
        )
        for proc, url in (
            (self.alertmanager, self.alertmanager_url),
            (self.prometheus, self.prometheus_url),
        ):
            wait_for(
                partial(_ready, url),
                timeout=30,
                what=f"{proc.name} ready",
                log=proc.log,
            )

    def _spawn(self, name: str, argv: list[str]) -> Process:
        proc = Process(name, argv, self.workdir / f"{name}.log")
        self._procs.append(proc)
        return proc

    # --- Prometheus API -----------------------------------------------------------------------
    def api(self, path: str, **params: str) -> Any:
        """``data`` of a Prometheus API call; raises ``ValueError`` with Prometheus's error text."""
        url = f"{self.prometheus_url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        status, body = http_get(url)
        doc = json.loads(body)
        if doc.get("status") != "success":
            raise ValueError(
                f"{path} {params}: HTTP {status}: {doc.get('errorType')}: {doc.get('error')}"
            )
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query result (a vector, or a one-element list for a scalar)."""
        data = self.api("query", query=expr)
        result = data["result"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        assert isinstance(result, list)
        return result

    def series(self, match: str) -> list[dict[str, str]]:
        """Label sets of the series matching a selector over the last 10 minutes."""
        now = time.time()
        data = self.api("series", **{"match[]": match, "start": str(now - 600), "end": str(now)})
        assert isinstance(data, list)
        return data

    def alerts(self) -> list[dict[str, Any]]:
        """Prometheus's active alerts (pending and firing)."""
        alerts = self.api("alerts")["alerts"]
        assert isinstance(alerts, list)
        return alerts

    def target_health(self) -> dict[str, str]:
        """Scrape URL -> health ("up", "down", "unknown") of every active target."""
        return {t["scrapeUrl"]: t["health"] for t in self.api("targets")["activeTargets"]}

    # --- bounded waits ------------------------------------------------------------------------
    def wait_for_targets_up(self, count: int, *, timeout: float = 30) -> None:
        """Until ``count`` targets are up."""
        wait_for(
            lambda: sum(h == "up" for h in self.target_health().values()) >= count or None,
            timeout=timeout,
            what=f"{count} target(s) up",
            log=self.prometheus.log,
        )

    def wait_for_query(self, expr: str, *, timeout: float) -> list[dict[str, Any]]:
        """Until the instant query ``expr`` returns a non-empty result; returns it."""
        return wait_for(
            lambda: self.query(expr),
            timeout=timeout,
            what=f"data for {expr}",
            log=self.prometheus.log,
        )

    def wait_for_alert(
        self, name: str, *, timeout: float, state: str = "firing", **labels: str
    ) -> dict[str, Any]:
        """Until Prometheus has alert ``name`` in ``state`` with ``labels``; returns it."""

        def probe() -> dict[str, Any] | None:
            for alert in self.alerts():
                got = alert["labels"]
                if (
                    got.get("alertname") == name
                    and alert["state"] == state
                    and all(got.get(k) == v for k, v in labels.items())
                ):
                    return alert
            return None

        return wait_for(
            probe, timeout=timeout, what=f"{name}{labels} {state}", log=self.prometheus.log
        )

    def wait_for_notification(self, name: str, *, timeout: float, **labels: str) -> dict[str, Any]:
        """Until the webhook received alert ``name`` with ``labels``; returns it."""

        def probe() -> dict[str, Any] | None:
            for alert in self.webhook.alerts():
                got = alert["labels"]
                if got.get("alertname") == name and all(got.get(k) == v for k, v in labels.items()):
                    return alert
            return None

        return wait_for(
            probe,
            timeout=timeout,
            what=f"webhook notification {name}{labels}",
            log=self.alertmanager.log,
        )

    def close(self) -> None:
        """Stop every process (Prometheus first) and the webhook receiver."""
        for proc in reversed(self._procs):
            proc.stop()
        self.webhook.close()

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
