"""The Spark engine: the window's files spread over a few tasks a core, in a SparkSession
(``local[2]``, a cluster master) or over Spark Connect (``sc://host:15002``).

As on Dask, the caller plans the window's files with ``monitor.sources``; the files become a
one-column DataFrame of paths, and ``mapInArrow`` runs the monitor's own ``read_summary_part``
for each path on an executor (``monitor.sources.summary_part_batches``: the executors need
the monitor installed), which adds up its task's parts. A task's part, or the
``MonitorError`` its reader raised, comes back pickled, so a bad file is the same
``SourceError`` with the same message as on the local engine. The driver collects a part a
task (not one a file), adds them and checks the window's invalid share. A
session that cannot start is an ``EngineUnavailableError`` naming the master or remote. In
``local`` masters the driver binds 127.0.0.1, the UI is off and the executors' Python is this
interpreter (a cluster's executors keep the Python its configuration names); the session time
zone is UTC. This module is the only importer of pyspark (the
optional extra ``.[spark]``, with Java 17: Debian's ``openjdk-17-jre-headless``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import operator
import os
import pickle
import sys
from datetime import timedelta
from typing import Any

from monitor.errors import EngineUnavailableError
from monitor.sources import (
    ScoreSpec,
    SegmentBound,
    SummaryPart,
    Window,
    merge_summary_parts,
    pin_snapshot,
    summary_part_batches,
    window_tasks,
)
from monitor.stats import Grid

__all__ = ["SparkEngine"]

log = logging.getLogger(__name__)

_SET_ENV: dict[str, str] = {}  # the environment a local engine set (not the operator's)


class SparkEngine:
    """Summaries computed by Spark executors, a few tasks a core, each task's files' parts
    added up on its executor."""

    kind = "spark"

    def __init__(self, master: str = "local[2]", *, remote: str | None = None) -> None:
        self.address = remote if remote is not None else master
        self._remote = remote
        self._spark: Any = None
        try:
            from pyspark.sql import SparkSession
        except ImportError as exc:
            raise EngineUnavailableError(
                "spark", self.address, "pyspark is not installed: pip install '.[spark]'"
            ) from exc
        local = remote is None and master.startswith("local")
        # a local master's executors run this interpreter (PATH's python3 lacks the monitor's
        # packages) and bind the loopback address only; a cluster's executors keep the Python
        # its own configuration names (this path need not exist there): what a local engine
        # set is taken back for any other (a reload from local[2] to a cluster once kept it)
        for name, value in (("PYSPARK_PYTHON", sys.executable), ("SPARK_LOCAL_IP", "127.0.0.1")):
            if local and name not in os.environ:
                os.environ[name] = _SET_ENV[name] = value
            elif not local and name in _SET_ENV and os.environ.get(name) == _SET_ENV.pop(name):
                del os.environ[name]
        if remote is not None:
            self._spark = self._connect(SparkSession, remote)
            return
        builder: Any = SparkSession.builder.appName("retrieval-monitor").master(master)
        if local:
            builder = (
                builder.config("spark.pyspark.python", sys.executable)
                .config("spark.driver.bindAddress", "127.0.0.1")
                .config("spark.driver.host", "127.0.0.1")
                .config("spark.ui.enabled", "false")
            )
        builder = builder.config("spark.sql.session.timeZone", "UTC")
        builder = builder.config("spark.ui.showConsoleProgress", "false")
        before = _active_context()
        try:
            self._spark = builder.getOrCreate()
        except Exception as exc:  # py4j / JVM start-up errors have no common base class
            _drop_failed_start(before)
            raise EngineUnavailableError(
                "spark", self.address, f"{type(exc).__name__}: {exc}"
            ) from exc
        try:
            running = str(self._spark.sparkContext.master)
        except Exception:  # pyspark's Connect API mode (SPARK_API_MODE): a session, no context
            running = master
        if running != master:
            # one SparkContext a process: a check still holds the session of the master a
            # reload moved off, and getOrCreate hands that back (its close would then stop
            # this engine's session under the next check); not stopped here, it is in use
            self._spark = None
            raise EngineUnavailableError(
                "spark",
                self.address,
                f"this process's Spark session runs on {running}, still in use by a check in "
                "flight (one SparkContext a process); the new master is used once that ends",
            )

    def _connect(self, session_cls: Any, remote: str) -> Any:
        """A Spark Connect session on ``remote``. pyspark retries each RPC for about ten
        minutes, the options a builder sends at ``getOrCreate`` included: an address nothing
        answers on held the check past its run_timeout, an error naming no address, and every
        Spark monitor behind it. So the session is made with no option (no RPC), given retries
        of seconds, and only then told its time zone: an unreachable server is this check's
        ``EngineUnavailableError`` within seconds, and so is one gone after the start (the next
        check starts a new session). Its console is the server's own (it refuses the UI keys)."""
        try:
            session = session_cls.builder.remote(remote).getOrCreate()
        except Exception as exc:
            raise EngineUnavailableError("spark", remote, f"{type(exc).__name__}: {exc}") from exc
        try:
            _short_retries(session)
            session.conf.set("spark.sql.session.timeZone", "UTC")
        except Exception as exc:  # grpc's, pyspark's own exception classes
            with contextlib.suppress(Exception):
                session.stop()
            raise EngineUnavailableError("spark", remote, f"{type(exc).__name__}: {exc}") from exc
        return session

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
        tasks = window_tasks(spec, window)  # planned here: the executors list nothing
        if not tasks:
            return merge_summary_parts(spec, window, grid, [], bucket=bucket, check=check)
        files = [t.path for t in tasks]
        payload = pickle.dumps((spec, window, grid, bucket, {t.path: t for t in tasks}))
        try:
            frame = self._spark.createDataFrame([(f,) for f in files], "path string")
            # a few tasks a core, each adding up its files' parts: the driver collects a part
            # a task, not one a file (Spark Connect has no context to ask: a task a file there)
            frame = frame.repartition(min(len(files), 4 * self._cores()))
            task = functools.partial(summary_part_batches, payload)
            rows = frame.mapInArrow(task, "index long, part binary").collect()
        except Exception as exc:  # the session's (py4j, a dead JVM, Spark Connect): a file's
            # or column's problem comes back as a row, raised below as the reader raised it
            raise EngineUnavailableError(
                "spark", self.address, f"{type(exc).__name__}: {exc}"
            ) from exc
        # rows come in Spark's partition order: taken in planned order, the bad file named is
        # the first a local read meets, and the per-file invalid counts are listed as it lists
        # them (their ties' order in a BadValuesError's message)
        parts: list[SummaryPart] = []
        names: dict[str, list[str]] = {}
        failed: tuple[int, BaseException] | None = None
        for row in sorted(rows, key=lambda r: int(r["index"])):  # r.index: a tuple method
            got, read = pickle.loads(row["part"])
            names.update(read)
            if isinstance(got, BaseException):
                failed = failed or (int(row["index"]), got)
            else:
                parts.append(got)
        # the window's max_segments, file by file in planned order as a local read meets it,
        # up to the first bad file: what a local read raises there, bound included
        bound = SegmentBound(spec)
        for ahead in tasks[: None if failed is None else failed[0]]:
            bound.admit(names.get(ahead.path, ()), window, grid, bucket, ahead)
        if failed is not None:
            bound.refuse(window, grid, bucket, tasks[failed[0]], failed[1])
        if parts:
            total = functools.reduce(operator.add, parts)
            planned = {path: i for i, path in enumerate(files)}
            per_file = sorted(total.per_file.items(), key=lambda kv: planned.get(kv[0], len(files)))
            parts = [dataclasses.replace(total, per_file=dict(per_file))]
        return merge_summary_parts(spec, window, grid, parts, bucket=bucket, check=check)

    def _cores(self) -> int:
        """The executors' cores (``defaultParallelism``); a session of Spark Connect, which
        exposes no context, is taken as having as many as the window has files."""
        try:
            return max(1, int(self._spark.sparkContext.defaultParallelism))
        except Exception:  # Spark Connect: no sparkContext (its own error class)
            return 1 << 30

    @property
    def alive(self) -> bool:
        """Whether the session's JVM still runs (a local or cluster driver's gateway process:
        once it is killed, an out-of-memory kill, every call fails); Spark Connect's session
        has no such process and counts as alive (a failed call replaces it)."""
        return self._remote is not None or not _gateway_dead()

    def close(self) -> None:
        try:
            self._spark.stop()
        except Exception as exc:  # a dead JVM cannot be asked to stop
            log.debug("spark session not stopped", extra={"error": str(exc)})
        if self._remote is None and _gateway_dead():
            _forget_gateway()


def _short_retries(session: Any) -> None:
    """Later calls of a Spark Connect session retry for seconds, not pyspark's ten minutes: a
    server gone after the start is this check's error (the next check starts a new session)."""
    try:
        from pyspark.sql.connect.client.retries import DefaultPolicy

        # 50 ms, then x4 up to 2 s: about 3.5 s in all, where pyspark's default waits 10 min
        session.client.set_retry_policies([DefaultPolicy(max_retries=4, max_backoff=2000)])
    except (ImportError, AttributeError, TypeError) as exc:  # a pyspark without the API
        log.warning(
            "spark connect retries left as pyspark sets them (about ten minutes an RPC)",
            extra={"error": str(exc)},
        )


def _gateway_dead() -> bool:
    """Whether pyspark's JVM gateway process (started by this process) has exited."""
    try:
        from pyspark import SparkContext
    except ImportError:  # pragma: no cover - the engine was made, so pyspark imports
        return False
    proc = getattr(SparkContext._gateway, "proc", None)
    return proc is not None and proc.poll() is not None


def _active_context() -> Any:
    """pyspark's active SparkContext of this process (None: none)."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context


def _drop_failed_start(before: Any) -> None:
    """Stop and forget the SparkContext a failed ``getOrCreate`` left behind (one whose
    cluster master never answered is stopped by the JVM, yet kept as the process's active
    context): every later ``getOrCreate`` of the process, a master come back or a reload to
    ``local[2]`` alike, handed it back and failed on "a stopped SparkContext" until a
    restart. ``before``: the context active before the call, left alone."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    left = SparkContext._active_spark_context
    if left is None or left is before:
        return
    with contextlib.suppress(Exception):  # stopped already, or its JVM gone
        left.stop()
    SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None


def _forget_gateway() -> None:
    """Forget a dead JVM gateway and the session and context that used it, so the next
    ``getOrCreate`` starts a new JVM instead of handing back the dead session (pyspark keeps
    them in class attributes, and reuses a gateway for every later context)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
