"""The Dask engine: one task per file of the window on a ``distributed`` scheduler.

The caller plans the window's files (``window_files``: the same pruning as every reader); each
task runs ``read_summary_part`` for its file on a worker, which needs the monitor installed
(numpy and pyarrow only); the parts are added on the caller's side, one at a time as each is
taken from its worker (the caller holds the sum and one part, never every file's), and the
window's invalid-share is checked once, as the local engine does. ``address = "local"`` starts a
``LocalCluster`` of two single-threaded worker processes bound to 127.0.0.1 with no dashboard
(for trying it out and for the tests); any other address is a running scheduler, and one that
cannot be reached within ``timeout`` is an ``EngineUnavailableError`` naming it, never a
silent fall back to the local engine. One that accepts the connection and never answers (a
paused scheduler, a proxy with no backend) is such an error after ``2 * timeout``; distributed
bounds the connect but not the handshake after it, which waited forever. This module is the
only importer of dask and distributed (the optional extra ``.[dask]``).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

from monitor.errors import EngineUnavailableError, MonitorError
from monitor.sources import (
    ScoreSpec,
    SegmentBound,
    SummaryPart,
    SummaryTask,
    Window,
    merge_summary_parts,
    pin_snapshot,
    read_summary_part,
    segment_names,
    window_tasks,
)
from monitor.stats import Grid

__all__ = ["DaskEngine"]

_PENDING: dict[str, float] = {}  # address -> when a connect still waiting for its answer began
_PENDING_LOCK = threading.Lock()


def _part(
    spec: ScoreSpec, window: Window, grid: Grid, bucket: timedelta | None, task: SummaryTask
) -> SummaryPart:
    return read_summary_part(spec, window, grid, bucket=bucket, task=task)


class DaskEngine:
    """Summaries computed by Dask workers, one file per task."""

    kind = "dask"

    def __init__(self, address: str = "local", *, timeout: float = 10.0) -> None:
        try:
            import distributed
        except ImportError as exc:  # the optional extra is missing
            raise EngineUnavailableError(
                "dask", address, "dask and distributed are not installed: pip install '.[dask]'"
            ) from exc
        except OSError as exc:  # psutil reads /proc/meminfo on import (hidden by ProcSubset=pid)
            raise EngineUnavailableError(
                "dask", address, f"distributed cannot start here: {type(exc).__name__}: {exc}"
            ) from exc
        # distributed is only partly typed: its entry points are handled as Any
        client_cls: Any = distributed.Client
        cluster_cls: Any = distributed.LocalCluster
        self.address = address
        self._cluster: Any = None
        self._client: Any = None
        try:
            if address == "local":
                self._cluster = cluster_cls(
                    n_workers=2,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    # the scheduler serves its HTTP routes whatever this says; None means port
                    # 8787, taken by any other cluster or dashboard on the machine (a warning,
                    # then another port): a free loopback port from the start instead
                    dashboard_address="127.0.0.1:0",
                )
                self._client = client_cls(self._cluster, timeout=timeout)
            else:
                self._client = _connect(client_cls, address, timeout)
        except (OSError, TimeoutError, ValueError, RuntimeError) as exc:
            # refused, unresolvable, timed out; an address of no known scheme (ValueError);
            # a LocalCluster whose nanny did not start (RuntimeError)
            self.close()
            raise EngineUnavailableError("dask", address, f"{type(exc).__name__}: {exc}") from exc

    @property
    def alive(self) -> bool:
        """Whether the client still runs: once its scheduler goes away it is closed for good,
        and the caller starts a new engine (which reconnects) instead of failing every check."""
        return self._client is not None and self._client.status == "running"

    def summaries(
        self,
        spec: ScoreSpec,
        window: Window,
        grid: Grid,
        *,
        bucket: timedelta | None = None,
        check: bool = True,
    ) -> SummaryPart:
        spec = pin_snapshot(spec)  # a table: the tasks read the snapshot planned here
        tasks = window_tasks(spec, window)  # planned here: the workers list nothing
        if self._client is None:
            raise EngineUnavailableError("dask", self.address, "the engine was closed")
        try:
            futures = self._client.map(
                _part,
                [spec] * len(tasks),
                [window] * len(tasks),
                [grid] * len(tasks),
                [bucket] * len(tasks),
                tasks,
                pure=False,
            )
            # each part in turn, added up as it comes and let go: the caller holds the sum
            # and one part, not every file's part of the window (a part not yet taken stays
            # on its worker); in the planned order, so a window's first bad file is the one
            # the local engine names
            total: SummaryPart | None = None
            bound = SegmentBound(spec)  # the window's, as a local read bounds it
            for task, future in zip(tasks, futures, strict=True):
                try:
                    part = future.result()
                except MonitorError as exc:  # what a local read raises there, bound included
                    bound.refuse(window, grid, bucket, task, exc)
                future.release()
                bound.admit(segment_names(part), window, grid, bucket, task)
                total = part if total is None else total + part
        except MonitorError:
            raise  # a task's own (a file, a column): raised again as the reader raised it
        except Exception as exc:  # the cluster's: a closed client, a lost scheduler or worker
            raise EngineUnavailableError(
                "dask", self.address, f"{type(exc).__name__}: {exc}"
            ) from exc
        parts = [] if total is None else [total]
        return merge_summary_parts(spec, window, grid, parts, bucket=bucket, check=check)

    def worker_cpu_seconds(self) -> float:
        """The CPU seconds the workers' processes have used so far (summed): what a benchmark
        divides rows by for a per-core rate, whatever else loads the machine."""
        times = self._client.run(time.process_time)
        return float(sum(times.values()))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


def _connect(client_cls: Any, address: str, timeout: float) -> Any:
    """``Client(address, timeout=timeout)`` awaited at most ``2 * timeout`` s.

    distributed bounds reaching the address, but not the handshake read after it: an address
    that accepts the connection and never answers waited forever, and with it the check and
    every later one of the monitor (each found the last still in flight). The connect runs in a
    thread of its own; one past the limit is left to finish and close the client it gets, and
    no second connect to that address starts while it waits (one thread at most, not one a
    check)."""
    with _PENDING_LOCK:
        since = _PENDING.get(address)
        if since is not None:
            raise TimeoutError(
                f"a connect begun {time.monotonic() - since:.0f} s ago still waits for an answer"
            )
        _PENDING[address] = time.monotonic()
    box: dict[str, Any] = {"client": None, "error": None, "abandoned": False}
    done = threading.Event()

    def attempt() -> None:
        client, error = None, None
        try:
            client = client_cls(address, timeout=timeout)
        except BaseException as exc:  # handed to the caller, which maps it
            error = exc
        with _PENDING_LOCK:
            _PENDING.pop(address, None)
            box.update(client=client, error=error)
            late = box["abandoned"]
            done.set()
        if late and client is not None:
            client.close()

    threading.Thread(target=attempt, name=f"dask-connect:{address}", daemon=True).start()
    if not done.wait(2 * timeout):
        with _PENDING_LOCK:
            if not done.is_set():
                box["abandoned"] = True
                raise TimeoutError(
                    f"no answer within {2 * timeout:g} s: the address accepts connections but "
                    "does not answer as a Dask scheduler (a paused scheduler, a proxy with no "
                    "backend, another service's port)"
                )
    if box["error"] is not None:
        raise box["error"]
    return box["client"]
