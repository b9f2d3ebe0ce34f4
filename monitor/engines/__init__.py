"""Where a window's score summaries are computed: in process, or on a Dask cluster.

Every engine returns the same ``monitor.sources.SummaryPart`` for the same files and window,
bit for bit (integer counts added up: the order and the partitioning do not matter); tests
check that with ``np.array_equal`` across engines. The files are planned on the caller's side
by ``monitor.sources`` (hive and statistics pruning, half-open windows, timestamp units), and
each task reads its files with the same reader, so every engine filters, counts invalid
scores and names segments identically::

    Engine        the protocol: summaries(spec, window, grid, bucket=) -> SummaryPart
    local         LocalEngine: in process, one row group at a time
    dask          DaskEngine: one task per file on a distributed scheduler or a LocalCluster
                  (the only importer of dask and distributed: the optional extra .[dask])
    spark         SparkEngine: one task per file through mapInArrow, in a SparkSession or over
                  Spark Connect (the only importer of pyspark: the optional extra .[spark])
"""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

from monitor.engines.local import LocalEngine
from monitor.sources import ScoreSpec, SummaryPart, Window
from monitor.stats import Grid

__all__ = ["Engine", "LocalEngine", "engine_alive", "make_engine"]


class Engine(Protocol):
    """Computes the summaries of a window's scores (see the package docstring)."""

    kind: str

    def summaries(
        self,
        spec: ScoreSpec,
        window: Window,
        grid: Grid,
        *,
        bucket: timedelta | None = None,
        check: bool = True,
    ) -> SummaryPart: ...

    def close(self) -> None: ...


def engine_alive(engine: Engine) -> bool:
    """Whether ``engine`` can still run a task: a Dask client whose scheduler went away is
    closed for good (``DaskEngine.alive``); an engine without that notion always can."""
    return bool(getattr(engine, "alive", True))


def make_engine(
    kind: str,
    *,
    dask_address: str = "local",
    spark_master: str = "local[2]",
    spark_remote: str | None = None,
) -> Engine:
    """An engine by kind: ``"local"``, ``"dask"`` (``dask_address``: a scheduler address, or
    ``"local"`` to start a LocalCluster of two worker processes on 127.0.0.1) or ``"spark"``
    (``spark_master``, or ``spark_remote`` = ``"sc://host:15002"`` for Spark Connect)."""
    if kind == "local":
        return LocalEngine()
    if kind == "dask":
        from monitor.engines.dask import DaskEngine

        return DaskEngine(dask_address)
    if kind == "spark":
        from monitor.engines.spark import SparkEngine

        return SparkEngine(spark_master, remote=spark_remote)
    raise ValueError(f"`kind` must be 'local', 'dask' or 'spark'; got {kind!r}.")
