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


class SparkEngine:
    """Summaries computed by Spark executors, a few tasks a core, each task's files' parts
    added up on its executor."""

    kind = "spark"

    def __init__(self, master: str = "local[2]", *, remote: str | None = None) -> None:
        self.address = remote if remote is not None else master
        self._remote = remote
        try:
            from pyspark.sql import SparkSession
        except ImportError as exc:
            raise EngineUnavailableError(
                "spark", self.address, "pyspark is not installed: pip install '.[spark]'"
            ) from exc
        local = remote is None and master.startswith("local")
        if local:
            # a local master's executors run this interpreter (PATH's python3 lacks the
            # monitor's packages) and bind the loopback address only; a cluster's executors
            # keep the Python its own configuration names (this path need not exist there)
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder: Any = SparkSession.builder.appName("retrieval-monitor")
        if remote is not None:
            builder = builder.remote(remote)
        else:
            builder = builder.master(master)
            if local:
                builder = (
                    builder.config("spark.pyspark.python", sys.executable)
                    .config("spark.driver.bindAddress", "127.0.0.1")
                    .config("spark.driver.host", "127.0.0.1")
                    .config("spark.ui.enabled", "false")
                )
        builder = builder.config("spark.sql.session.timeZone", "UTC")
        if remote is None:  # a Spark Connect server's console is its own (it refuses the key)
            builder = builder.config("spark.ui.showConsoleProgress", "false")
        try:
            self._spark: Any = builder.getOrCreate()
        except Exception as exc:  # py4j / JVM start-up errors have no common base class
            raise EngineUnavailableError(
                "spark", self.address, f"{type(exc).__name__}: {exc}"
            ) from exc

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
        for row in sorted(rows, key=lambda r: int(r["index"])):  # r.index: a tuple method
            got = pickle.loads(row["part"])
            if isinstance(got, BaseException):
                raise got
            parts.append(got)
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


def _gateway_dead() -> bool:
    """Whether pyspark's JVM gateway process (started by this process) has exited."""
    try:
        from pyspark import SparkContext
    except ImportError:  # pragma: no cover - the engine was made, so pyspark imports
        return False
    proc = getattr(SparkContext._gateway, "proc", None)
    return proc is not None and proc.poll() is not None


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
