"""Helpers of the real-process fault tests (``tests/test_faults.py``): worlds with several
monitors, a daemon child process, scrapes, a silent loopback endpoint and confined state dirs.

Everything is bounded: waits poll for their event with a deadline (``tests.deploy.stack.wait_for``)
and every child is stopped (SIGTERM, then SIGKILL) by the fixture that started it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from monitor.simulate import SCENARIOS, write_world
from tests.deploy.stack import free_port, http_get

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def make_data(directory: Path, *, days: int = 9, seed: int = 5) -> tuple[Path, Path]:
    """A stationary world ending now: (scores dir, outcomes dir)."""
    end = datetime.now(UTC).replace(microsecond=0)
    w = write_world(
        directory, SCENARIOS["stationary"], start=end - timedelta(days=days), end=end, seed=seed
    )
    return w.scores_path, w.outcomes_path


def monitor_toml(
    name: str, scores: str | Path, outcomes: str | Path, *, schedule: str = "1h", extra: str = ""
) -> str:
    """One ``[[monitors]]`` table reading the simulated columns."""
    return (
        f"[[monitors]]\nname = {json.dumps(name)}\nschedule = {json.dumps(schedule)}\n"
        f"scores.path = {json.dumps(str(scores))}\nscores.timestamp_column = 'timestamp'\n"
        f"scores.score_column = 'score'\noutcomes.path = {json.dumps(str(outcomes))}\n"
        f"outcomes.timestamp_column = 'timestamp'\noutcomes.query_column = 'query_id'\n"
        f"outcomes.outcome_column = 'outcome'\nwindows.current = '1d'\nwindows.reference = '7d'\n"
        f"{extra}"
    )


def config_text(address: str, state_dir: Path, monitors: Sequence[str]) -> str:
    server = (
        f"[server]\nlisten = {json.dumps(address)}\nstate_dir = {json.dumps(str(state_dir))}\n"
        f"shutdown_timeout = '5s'\n\n"
    )
    return server + "\n".join(monitors)


def child_env() -> dict[str, str]:
    """The environment of a daemon child: no real cloud credentials or metadata lookups."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_EC2_METADATA_DISABLED="true",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


class Daemon:
    """``python -m monitor run`` as a child, its output in a log file; ``wrapper`` is an argv
    prefix (e.g. ``mount_wrapper``), ``env`` variables added to its environment."""

    def __init__(
        self,
        config: Path,
        log_path: Path,
        *,
        wrapper: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.address = ""
        for line in config.read_text().splitlines():
            if line.startswith("listen = "):
                self.address = json.loads(line.split("=", 1)[1])
        self.log_path = log_path
        self._log = log_path.open("ab")
        argv = [sys.executable, "-m", "monitor", "run", "--config", str(config)]
        self.popen = subprocess.Popen(
            [*wrapper, *argv],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=config.parent,
            env={**child_env(), **(env or {})},
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def records(self) -> list[dict[str, Any]]:
        """The JSON log records so far (non-JSON lines, such as a traceback, are skipped)."""
        out = []
        for line in self.log().splitlines():
            with contextlib.suppress(ValueError):
                doc = json.loads(line)
                if isinstance(doc, dict):
                    out.append(doc)
        return out

    def signal(self, signum: int) -> None:
        self.popen.send_signal(signum)

    def wait(self, timeout: float) -> int:
        code = self.popen.wait(timeout=timeout)
        self._log.close()
        return code

    def kill(self) -> int:
        self.popen.send_signal(signal.SIGKILL)
        return self.wait(10)

    def stop(self, *, grace: float = 15.0) -> int:
        """SIGTERM, wait up to ``grace`` s, then SIGKILL; returns the exit code."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=grace)
        if not self._log.closed:
            self._log.close()
        return self.popen.returncode

    def threads(self) -> int:
        """The child's thread count (``/proc/<pid>/status``)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        raise AssertionError("no Threads line")

    def samples(self) -> Samples:
        status, body = http_get(f"http://{self.address}/metrics")
        assert status == 200
        out: Samples = {}
        for family in text_string_to_metric_families(body.decode()):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def status(self) -> dict[str, Any]:
        code, body = http_get(f"http://{self.address}/status")
        assert code == 200
        doc: dict[str, Any] = json.loads(body)
        return doc

    def monitors(self) -> dict[str, dict[str, Any]]:
        """``/status`` monitors by name."""
        return {m["name"]: m for m in self.status()["monitors"]}


def value(snap: Samples, name: str, **labels: str) -> float | None:
    return snap.get((name, tuple(sorted(labels.items()))))


def tracebacks(text: str) -> list[str]:
    """Lines of ``text`` that start a Python traceback (in plain output or a JSON field)."""
    return [line for line in text.splitlines() if "Traceback (most recent call last)" in line]


@dataclass
class SilentEndpoint:
    """A loopback TCP server that accepts every connection and never answers a byte."""

    port: int
    _sock: socket.socket
    _conns: list[socket.socket]
    _thread: threading.Thread

    @classmethod
    @contextlib.contextmanager
    def running(cls) -> Iterator[SilentEndpoint]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        conns: list[socket.socket] = []

        def accept() -> None:
            while True:
                try:
                    conn, _ = sock.accept()
                except OSError:
                    return
                conns.append(conn)

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        endpoint = cls(sock.getsockname()[1], sock, conns, thread)
        try:
            yield endpoint
        finally:
            sock.close()
            for c in conns:
                c.close()

    @property
    def connections(self) -> int:
        return len(self._conns)

    def s3_uri(self, key: str) -> str:
        """An S3 URI that pyarrow resolves against this endpoint."""
        return (
            f"s3://bucket/{key}?endpoint_override=127.0.0.1:{self.port}"
            f"&scheme=http&region=us-east-1"
        )


def namespace_mounts_work() -> str | None:
    """None when ``unshare --mount`` may mount a tmpfs here (root or a user namespace), else
    the reason the mount tests are skipped."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return "unshare(1) is not installed"
    probe = subprocess.run(
        [*_unshare(), "sh", "-c",
         "d=$(mktemp -d) && mount -t tmpfs -o size=16k tmpfs \"$d\" && umount \"$d\"; "
         "r=$?; rmdir \"$d\"; exit $r"],
        capture_output=True,
        check=False,
        timeout=30,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"cannot mount in a private mount namespace: {probe.stderr.decode().strip()}"
    return None


def mount_wrapper(script: str) -> list[str]:
    """argv prefix: run ``script`` (shell, mounting things) in a private mount namespace, then
    exec the daemon argv that follows it (the mounts vanish with the process)."""
    return [*_unshare(), "sh", "-c", script + ' && exec "$@"', "sh"]


def _unshare() -> list[str]:
    """``unshare`` into a private mount namespace: as root directly; as another user inside a
    user namespace that maps it to root (a plain ``--mount`` is refused to a non-root user, so
    the mount tests were skipped on a CI that does not run as root)."""
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *user, "--mount", "--propagation", "private"]


def free_address() -> str:
    return f"127.0.0.1:{free_port()}"
