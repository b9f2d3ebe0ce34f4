"""Engines (issue 13): the same summaries in process and on a real Dask ``LocalCluster`` (two
worker processes on 127.0.0.1, no dashboard), compared with ``np.array_equal``."""

from __future__ import annotations

import dataclasses
import os
import socket
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from monitor.engines import LocalEngine, engine_alive, make_engine
from monitor.errors import EngineUnavailableError, SourceError
from monitor.sources import ScoreSpec, Window, clear_cache, write_parquet
from monitor.stats import Grid, build_baseline, summary_grid
from tests.test_summaries_reader import HOUR, T0, _tree, same_parts

if TYPE_CHECKING:
    from monitor.engines.spark import SparkEngine

pytestmark = [pytest.mark.engines, pytest.mark.integration]


@pytest.fixture(scope="module")
def dask_engine():  # type: ignore[no-untyped-def]
    pytest.importorskip("distributed", reason="the optional extra .[dask] is not installed")
    # Dask's default HTTP port held while the cluster starts (as another cluster or dashboard on
    # the machine would hold it): the engine must start without it, and without a warning
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", 8787))
        held.listen()
    except OSError:  # something else holds it already: the same case
        pass
    try:
        engine = make_engine("dask", dask_address="local")
    finally:
        held.close()
    yield engine
    engine.close()


def test_a_local_cluster_serves_http_on_a_free_loopback_port(dask_engine) -> None:  # type: ignore[no-untyped-def]
    """The LocalCluster's scheduler binds its HTTP routes to 127.0.0.1 on a port of its own,
    not 8787 (held while it started), so two clusters on one machine do not collide."""
    http = dask_engine._cluster.scheduler.http_server
    assert http.address == "127.0.0.1"
    assert http.port not in (0, 8787)


def test_dask_summaries_equal_local_ones(tmp_path: Path, dask_engine) -> None:  # type: ignore[no-untyped-def]
    clear_cache()
    root = tmp_path / "scores"
    _tree(root)
    spec = ScoreSpec(path=str(root), segment_column="segment", max_invalid_share=0.1)
    everything = Window(start=T0, end=T0 + 30 * HOUR)
    from monitor.sources import read_scores

    ref = read_scores(spec, everything).values
    b = build_baseline(ref)
    grid = summary_grid(b.sorted_reference, b.edges, n_current=ref.size)
    local = LocalEngine()
    for window, bucket in (
        (Window(start=T0 + 3 * HOUR + timedelta(minutes=17), end=T0 + 27 * HOUR), None),
        (Window(start=T0 + 20 * HOUR, end=T0 + 30 * HOUR), HOUR),  # across the day partitions
        (Window(start=T0 + 40 * HOUR, end=T0 + 41 * HOUR), None),  # pruned: no file at all
    ):
        same_parts(
            local.summaries(spec, window, grid, bucket=bucket),
            dask_engine.summaries(spec, window, grid, bucket=bucket),
        )
    # a late file: both engines see it
    late = np.datetime64((T0 + 4 * HOUR).replace(tzinfo=None), "us") + np.arange(50).astype(
        "timedelta64[s]"
    )
    write_parquet(
        root / "date=2026-11-23" / "late.parquet",
        {"timestamp": late, "score": np.full(50, np.nan), "segment": np.full(50, "en")},
    )
    clear_cache()
    window = Window(start=T0, end=T0 + 6 * HOUR)
    ours, theirs = (
        local.summaries(spec, window, grid, bucket=HOUR),
        dask_engine.summaries(spec, window, grid, bucket=HOUR),
    )
    same_parts(ours, theirs)
    assert ours.per_file[str(root / "date=2026-11-23" / "late.parquet")] == 50


def test_an_unreachable_scheduler_is_an_error_naming_it() -> None:
    pytest.importorskip("distributed", reason="the optional extra .[dask] is not installed")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    from monitor.engines.dask import DaskEngine

    with pytest.raises(EngineUnavailableError) as info:
        DaskEngine(address, timeout=2.0)
    assert address in str(info.value)


def test_an_engine_that_is_starting_does_not_hold_back_other_kinds(tmp_path: Path) -> None:
    """A Dask connect waiting out its timeout on an unreachable scheduler holds only the Dask
    monitors: a local-engine monitor's engine is handed out meanwhile, where one lock over
    every kind once made it wait the whole connect timeout."""
    pytest.importorskip("distributed", reason="the optional extra .[dask] is not installed")
    import threading

    from monitor.config import EngineConfig
    from monitor.incremental import SummaryChecks

    # a scheduler that accepts the connection and never answers: the connect waits its timeout
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    silent.settimeout(30)
    port = silent.getsockname()[1]
    settings = EngineConfig(kind="auto", dask_address=f"tcp://127.0.0.1:{port}")
    checks = SummaryChecks(tmp_path)
    outcome: list[BaseException] = []

    def connect() -> None:
        try:
            checks.engine(settings, "dask")
        except EngineUnavailableError as exc:
            outcome.append(exc)

    dask = threading.Thread(target=connect, daemon=True)
    dask.start()
    accepted: list[socket.socket] = []
    try:
        accepted.append(silent.accept()[0])  # the Dask engine is starting now
        local = checks.engine(settings, "local")
        assert isinstance(local, LocalEngine)
        assert dask.is_alive()  # the local engine came while the connect still waited
    finally:
        for s in [*accepted, silent]:
            s.close()  # the connect fails at once
        dask.join(60)
        checks.close()
    assert not dask.is_alive()
    assert len(outcome) == 1
    assert f"127.0.0.1:{port}" in str(outcome[0])


def test_a_scheduler_that_never_answers_is_an_error_naming_it() -> None:
    """An address that accepts the connection and never answers (a paused scheduler, a proxy
    with no backend) is an engine error after twice the connect timeout, where distributed's
    unbounded handshake read once hung the check and, in flight for ever, every later check of
    the monitor. While that connect still waits, the next attempt fails at once instead of
    leaving another thread behind; once it ends, connects are tried again."""
    pytest.importorskip("distributed", reason="the optional extra .[dask] is not installed")
    import time

    from monitor.engines.dask import DaskEngine

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
    try:
        began = time.monotonic()
        with pytest.raises(EngineUnavailableError, match="no answer within 2 s") as info:
            DaskEngine(address, timeout=1.0)
        assert 1.5 < time.monotonic() - began < 30
        assert address in str(info.value)
        with pytest.raises(EngineUnavailableError, match="still waits for an answer"):
            DaskEngine(address, timeout=1.0)
    finally:
        silent.close()  # the waiting connect is refused now, and ends
    with pytest.raises(EngineUnavailableError, match=r"Timed out|refused|still waits"):
        DaskEngine(address, timeout=1.0)


def test_an_address_of_no_known_scheme_is_an_error_naming_it() -> None:
    """A dashboard URL or a typo is an engine error naming the address, not a bare ValueError
    naming neither the engine nor the address."""
    pytest.importorskip("distributed", reason="the optional extra .[dask] is not installed")
    from monitor.engines.dask import DaskEngine

    with pytest.raises(EngineUnavailableError, match=r"dask engine at 'foo://127.0.0.1:1'"):
        DaskEngine("foo://127.0.0.1:1", timeout=2.0)


def test_a_lost_cluster_is_replaced_not_failed_for_good(tmp_path: Path) -> None:
    """A Dask client whose scheduler went away is closed for good (as after a scheduler
    restart): the next check starts a new engine, where every later check was once an error
    ('unexpected ClosedClientError') until the daemon restarted. An engine of a kind at
    another address replaces the first (a reload that moved it), which is closed."""
    pytest.importorskip("distributed", reason="the optional extra .[dask] is not installed")
    from monitor.config import load_config
    from monitor.jobs import Runner
    from tests.test_incremental import AT, _world

    root = _world(tmp_path, engine='kind = "dask"\ndask.address = "local"\n')
    config = load_config(root / "summaries.toml")
    assert config.engine is not None
    runner = Runner(config)
    try:
        assert runner.check("demo", AT).state != "error"
        first = runner.summaries.engine(config.engine, "dask")
        first._client.close()  # type: ignore[attr-defined]  # what a lost scheduler leaves
        assert not engine_alive(first)
        later = runner.check("demo", AT + HOUR)
        assert later.state != "error", later.reasons
        second = runner.summaries.engine(config.engine, "dask")
        assert second is not first
        assert engine_alive(second)
        moved = dataclasses.replace(config.engine, dask_address="foo://nowhere:1")
        with pytest.raises(EngineUnavailableError, match="foo://nowhere:1"):
            runner.summaries.engine(moved, "dask")
        assert not engine_alive(second)  # one engine of a kind: the moved-from is closed
    finally:
        runner.summaries.close()


@pytest.fixture(scope="module")
def spark_engine():  # type: ignore[no-untyped-def]
    pytest.importorskip("pyspark", reason="the optional extra .[spark] is not installed")
    engine = make_engine("spark", spark_master="local[2]")
    yield engine
    engine.close()


def test_spark_summaries_equal_local_ones(tmp_path: Path, spark_engine) -> None:  # type: ignore[no-untyped-def]
    clear_cache()
    root = tmp_path / "scores"
    _tree(root)
    spec = ScoreSpec(path=str(root), segment_column="segment", max_invalid_share=0.1)
    from monitor.sources import read_scores

    ref = read_scores(spec, Window(start=T0, end=T0 + 30 * HOUR)).values
    b = build_baseline(ref)
    grid = summary_grid(b.sorted_reference, b.edges, n_current=ref.size)
    local = LocalEngine()
    for window, bucket in (
        (Window(start=T0 + 3 * HOUR + timedelta(minutes=17), end=T0 + 27 * HOUR), None),
        (Window(start=T0 + 20 * HOUR, end=T0 + 30 * HOUR), HOUR),
    ):
        same_parts(
            local.summaries(spec, window, grid, bucket=bucket),
            spark_engine.summaries(spec, window, grid, bucket=bucket),
        )
    # a bad file is the same SourceError, with the same message, on both engines
    (root / "date=2026-11-23" / "broken.parquet").write_bytes(b"PAR1 not really")
    clear_cache()
    window = Window(start=T0, end=T0 + 6 * HOUR)
    with pytest.raises(SourceError) as ours:
        local.summaries(spec, window, grid)
    with pytest.raises(SourceError) as theirs:
        spark_engine.summaries(spec, window, grid)
    assert str(theirs.value) == str(ours.value)


def test_spark_names_the_bad_file_a_local_read_names(tmp_path: Path, spark_engine) -> None:  # type: ignore[no-untyped-def]
    """Spark's rows come in its partitions' order: the first bad file (in planned order) is
    the one named, and a BadValuesError lists tied files as a local read does."""
    import itertools

    import pyarrow.parquet as pq

    grid = Grid(np.linspace(0.0, 1.0, 11))
    window = Window(start=T0, end=T0 + 24 * HOUR)
    local = LocalEngine()
    for i, j in itertools.combinations(range(6), 2):
        root = tmp_path / f"bad{i}{j}"
        for k in range(6):
            path = root / "date=2026-11-23" / f"part-{k:02d}.parquet"
            ts = np.datetime64(T0.replace(tzinfo=None) + k * HOUR, "us")
            write_parquet(
                path,
                {
                    "timestamp": ts + np.arange(20).astype("timedelta64[m]"),
                    "score": np.full(20, 0.5),
                },
            )
            if k in (i, j):  # a footer that reads, a score page that does not
                at = pq.ParquetFile(path).metadata.row_group(0).column(1).data_page_offset
                data = bytearray(path.read_bytes())
                data[at : at + 12] = b"\xff" * 12
                path.write_bytes(bytes(data))
        spec = ScoreSpec(path=str(root))
        clear_cache()
        with pytest.raises(SourceError) as ours:
            local.summaries(spec, window, grid)
        with pytest.raises(SourceError) as theirs:
            spark_engine.summaries(spec, window, grid)
        assert f"part-{i:02d}" in str(ours.value), ours.value
        assert str(theirs.value) == str(ours.value), (i, j)
    root = tmp_path / "ties"
    for k in range(6):  # ten NaN scores in each file: every file ties in "most in:"
        score = np.full(40, 0.5)
        score[:10] = np.nan
        ts = np.datetime64(T0.replace(tzinfo=None) + k * HOUR, "us")
        write_parquet(
            root / "date=2026-11-23" / f"part-{k:02d}.parquet",
            {"timestamp": ts + np.arange(40).astype("timedelta64[m]"), "score": score},
        )
    spec = ScoreSpec(path=str(root), max_invalid_share=0.01)
    clear_cache()
    with pytest.raises(SourceError) as ours:
        local.summaries(spec, window, grid)
    with pytest.raises(SourceError) as theirs:
        spark_engine.summaries(spec, window, grid)
    assert "part-00.parquet (10), " in str(ours.value), ours.value
    assert str(theirs.value) == str(ours.value)


def _segment_tree(root: Path) -> None:
    """Six files of one row group each, 30 segments in all, 6 to 10 in each file."""
    g = np.random.default_rng(3)
    for k in range(6):
        names = np.array([f"s{(k * 4 + j) % 30:02d}" for j in range(6 + (k % 3) * 2)])
        ts = np.datetime64(T0.replace(tzinfo=None) + k * HOUR, "us")
        write_parquet(
            root / "date=2026-11-23" / f"part-{k}.parquet",
            {
                "timestamp": ts + np.arange(100).astype("timedelta64[s]"),
                "score": g.random(100),
                "segment": names[np.arange(100) % names.size],
            },
        )


@pytest.mark.parametrize("kind", ["dask", "spark"])
def test_max_segments_bounds_the_window_on_every_engine(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """Each task bounded only its own file's segments: a window of 30 segments, no file
    holding more than 10, with max_segments=20 was refused by a local read at the file that
    passed the bound and summarised whole on Dask and Spark (the check then failed later,
    with another message). Every engine refuses it with the local read's error."""
    engine = request.getfixturevalue(f"{kind}_engine")
    root = tmp_path / "scores"
    _segment_tree(root)
    spec = ScoreSpec(path=str(root), segment_column="segment", max_segments=20)
    window = Window(start=T0, end=T0 + 6 * HOUR)
    grid = Grid(np.linspace(0.0, 1.0, 11))
    clear_cache()
    with pytest.raises(SourceError) as ours:
        LocalEngine().summaries(spec, window, grid)
    assert "exceed max_segments=20" in str(ours.value)
    with pytest.raises(SourceError) as theirs:
        engine.summaries(spec, window, grid)
    assert str(theirs.value) == str(ours.value)
    wide = ScoreSpec(path=str(root), segment_column="segment", max_segments=30)
    assert len({name for name, _ in engine.summaries(wide, window, grid).summaries}) == 30
    # the bound passed inside a file (row group by row group, as a local read counts), by a
    # file over it alone, and before a bad row group of the same file: the local read's error
    import pyarrow as pa
    import pyarrow.parquet as pq

    for case, second in enumerate((["d", "e"], ["d", "e", "f", "g"], ["d", "x\x00y"])):
        root = tmp_path / f"case{case}"
        for k, names in enumerate((["a", "b", "c"], second)):
            path = root / "date=2026-11-23" / f"p{k}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            ts = np.datetime64(T0.replace(tzinfo=None) + k * HOUR, "us")
            table = {
                "timestamp": pa.array(ts + np.arange(len(names)).astype("timedelta64[s]")),
                "score": pa.array(np.linspace(0.1, 0.9, len(names))),
                "segment": pa.array(names, type=pa.string()),
            }
            pq.write_table(pa.table(table), path, row_group_size=1 if k else None)
        spec = ScoreSpec(path=str(root), segment_column="segment", max_segments=3)
        clear_cache()
        with pytest.raises(SourceError) as ours:
            LocalEngine().summaries(spec, window, grid)
        with pytest.raises(SourceError) as theirs:
            engine.summaries(spec, window, grid)
        assert (type(theirs.value), str(theirs.value)) == (type(ours.value), str(ours.value))


def test_a_new_master_while_a_check_holds_the_session_is_an_error_naming_both(
    tmp_path: Path,
    spark_engine: SparkEngine,
) -> None:
    """One SparkContext a process: a reload that moved spark.master while a check still held
    the old engine got that engine's session back from getOrCreate, ran on the old master,
    and the old engine's close then stopped the session under the next check. The new engine
    is refused, naming both masters; the session in use is left running."""
    with pytest.raises(EngineUnavailableError) as refused:
        make_engine("spark", spark_master="local[1]")
    assert "local[1]" in str(refused.value)
    assert "runs on local[2]" in str(refused.value)
    root = tmp_path / "scores"
    _tree(root)
    window = Window(start=T0, end=T0 + 6 * HOUR)
    spec = ScoreSpec(path=str(root), max_invalid_share=0.1)
    part = spark_engine.summaries(spec, window, Grid(np.linspace(0, 1, 11)))
    assert part.rows > 0  # the held session still runs


def test_a_cluster_master_keeps_its_executors_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """This interpreter's path is the executors' Python on a local master only: set for a
    cluster master, it overrode the cluster's own configuration and every task failed where
    that path does not exist. The session's start is stopped where it would reach the master
    (there is no cluster here); what the engine asked for is what it set on the builder."""
    pytest.importorskip("pyspark", reason="the optional extra .[spark] is not installed")
    import sys

    from pyspark.sql import SparkSession

    asked: dict[str, dict[str, str]] = {}

    def stop_here(builder: SparkSession.Builder) -> None:
        asked[builder._options["spark.master"]] = dict(builder._options)
        raise RuntimeError("no master reached in this test")

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", stop_here)
    for master in ("spark://cluster.example:7077", "yarn", "local[2]"):
        monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
        with pytest.raises(EngineUnavailableError, match="no master reached"):
            make_engine("spark", spark_master=master)
        local = master.startswith("local")
        assert ("spark.pyspark.python" in asked[master]) is local, asked[master]
        assert (os.environ.get("PYSPARK_PYTHON") == sys.executable) is local
        assert (asked[master].get("spark.driver.bindAddress") == "127.0.0.1") is local


def test_a_session_with_no_context_is_taken_on_its_word(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under pyspark's Connect API mode (SPARK_API_MODE=connect) getOrCreate hands a local
    master a Connect session, which has no sparkContext: the master check once refused every
    engine start there. A session whose context cannot be asked for is the one asked for."""
    pytest.importorskip("pyspark", reason="the optional extra .[spark] is not installed")
    from pyspark.sql import SparkSession

    class ConnectLike:
        @property
        def sparkContext(self) -> None:
            raise AttributeError("[JVM_ATTRIBUTE_NOT_SUPPORTED] sparkContext")

        def stop(self) -> None:
            return None

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", lambda builder: ConnectLike())
    engine = make_engine("spark", spark_master="local[2]")
    engine.close()


def test_a_cluster_master_after_a_local_one_keeps_its_executors_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The interpreter and loopback address a local engine put in the environment stayed
    there: a reload from local[2] to a cluster sent the driver's Python path to the cluster's
    executors. They are taken back; the operator's own are left alone."""
    pytest.importorskip("pyspark", reason="the optional extra .[spark] is not installed")
    import sys

    from pyspark.sql import SparkSession

    def stop_here(builder: SparkSession.Builder) -> None:
        raise RuntimeError("no master reached in this test")

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", stop_here)
    for name in ("PYSPARK_PYTHON", "SPARK_LOCAL_IP"):
        monkeypatch.delenv(name, raising=False)
    for master, python in (("local[2]", sys.executable), ("spark://c.example:7077", None)):
        with pytest.raises(EngineUnavailableError, match="no master reached"):
            make_engine("spark", spark_master=master)
        assert os.environ.get("PYSPARK_PYTHON") == python, master
        assert os.environ.get("SPARK_LOCAL_IP") == (python and "127.0.0.1"), master
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python3")  # the operator's
    for master in ("local[2]", "yarn"):
        with pytest.raises(EngineUnavailableError, match="no master reached"):
            make_engine("spark", spark_master=master)
        assert os.environ["PYSPARK_PYTHON"] == "/opt/py/bin/python3", master


def test_a_failed_start_leaves_no_stopped_context_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster master that never answers: pyspark made a SparkContext, the JVM stopped it,
    and it stayed the process's active context, so every later start (the master back, or a
    reload to local[2]) was handed the stopped context and failed until a restart. The
    context a failed start leaves is stopped and forgotten; one active before it is kept."""
    pytest.importorskip("pyspark", reason="the optional extra .[spark] is not installed")
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    class Left:
        stopped = 0

        def stop(self) -> None:
            self.stopped += 1

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    monkeypatch.setattr(SparkSession, "_instantiatedSession", None)
    monkeypatch.setattr(SparkSession, "_activeSession", None)
    left = Left()

    def unresponsive(builder: SparkSession.Builder) -> None:
        setattr(SparkContext, "_active_spark_context", left)  # as pyspark leaves it  # noqa: B010
        raise RuntimeError("Cannot call methods on a stopped SparkContext")

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", unresponsive)
    with pytest.raises(EngineUnavailableError, match=r"spark://127\.0\.0\.1:7077"):
        make_engine("spark", spark_master="spark://127.0.0.1:7077")
    assert left.stopped == 1
    assert SparkContext._active_spark_context is None
    kept = Left()  # active before the call (another engine's): left alone
    monkeypatch.setattr(SparkContext, "_active_spark_context", kept)

    def refused(builder: SparkSession.Builder) -> None:
        raise RuntimeError("no master reached")

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", refused)
    with pytest.raises(EngineUnavailableError):
        make_engine("spark", spark_master="spark://127.0.0.1:7077")
    assert kept.stopped == 0
    assert getattr(SparkContext, "_active_spark_context") is kept  # noqa: B009


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A real Spark Connect server (pyspark's own jar, local[2] behind it) on a free loopback
    port; its address once it says it listens."""
    pytest.importorskip("pyspark", reason="the optional extra .[spark] is not installed")
    pytest.importorskip("grpc", reason="Spark Connect's client (pyspark[connect]) is missing")
    import signal
    import subprocess
    import sys
    import time

    import pyspark

    home = Path(pyspark.__file__).parent
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path_factory.mktemp("connect") / "server.log"
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    confs = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.ui.enabled": "false",
    }
    args = [str(home / "bin" / "spark-submit"), "--master", "local[2]"]
    args += ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
    for key, value in confs.items():
        args += ["--conf", f"{key}={value}"]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [*args, "spark-internal"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while "Spark Connect server started" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.2)  # polling a log file: there is no event to wait on
        yield f"sc://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


#: the start of a script a Spark test runs in a process of its own (argv: the scores' root,
#: then this repository): a world of scores, its window and a grid on its reference
_SPARK_WORLD = """
import os, signal, sys, time, warnings
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from monitor.engines import LocalEngine, make_engine
from monitor.errors import EngineUnavailableError, SourceError
from monitor.sources import ScoreSpec, Window, clear_cache, read_scores
from monitor.stats import build_baseline, summary_grid
from tests.test_summaries_reader import HOUR, T0, _tree, same_parts
root = Path(sys.argv[1])
_tree(root)
spec = ScoreSpec(path=str(root), segment_column="segment", max_invalid_share=0.1)
window = Window(start=T0, end=T0 + 30 * HOUR)
b = build_baseline(read_scores(spec, window).values)
grid = summary_grid(b.sorted_reference, b.edges, n_current=100)
"""

_CONNECT = (
    _SPARK_WORLD
    + """
with warnings.catch_warnings():
    warnings.simplefilter("error")
    engine = make_engine("spark", spark_remote=sys.argv[3])
try:
    same_parts(
        LocalEngine().summaries(spec, window, grid, bucket=HOUR),
        engine.summaries(spec, window, grid, bucket=HOUR),
    )
    (root / "date=2026-11-23" / "broken.parquet").write_bytes(b"PAR1 not really")
    messages = []
    for e in (LocalEngine(), engine):
        clear_cache()
        try:
            e.summaries(spec, window, grid)
        except SourceError as exc:
            messages.append(str(exc))
    assert len(messages) == 2 and messages[0] == messages[1], messages
finally:
    engine.close()
print("same")
"""
)


def test_spark_connect_summaries_equal_local_ones(tmp_path: Path, connect_server: str) -> None:
    """Over Spark Connect (``spark_remote``, the session on a server): the same summaries as
    the local engine, and a bad file the same SourceError; the remote session starts with
    the documented install (it needs pyspark's connect extra) and without a warning. In a
    process of its own: pyspark refuses a remote session beside the module's local one."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-c", _CONNECT, str(tmp_path / "scores"), str(root), connect_server],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert proc.stdout.strip().endswith("same"), proc.stdout[-2000:]


_CONNECT_UNREACHABLE = """
import socket, sys, time
sys.path.insert(0, sys.argv[1])
from monitor.engines import make_engine
from monitor.errors import EngineUnavailableError
with socket.socket() as s:  # a port nothing listens on
    s.bind(("127.0.0.1", 0))
    address = f"sc://127.0.0.1:{s.getsockname()[1]}"
t0 = time.monotonic()
try:
    make_engine("spark", spark_remote=address)
except EngineUnavailableError as exc:
    print(f"{time.monotonic() - t0:.1f}", exc)
"""


def test_an_unreachable_spark_connect_server_is_an_error_naming_it(tmp_path: Path) -> None:
    """pyspark retries each Connect RPC for about ten minutes, the start's options included:
    an address nothing answers on held the check past its run_timeout (an 'abandoned' error
    naming no address), and every other Spark monitor behind it. Now an error naming it within
    seconds, and the process exits (pyspark's exit hook retried as long)."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-c", _CONNECT_UNREACHABLE, str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seconds, _, message = proc.stdout.strip().partition(" ")
    assert float(seconds) < 30, proc.stdout
    assert "spark engine at 'sc://127.0.0.1:" in message, message
    assert "UNAVAILABLE" in message or "Failed to connect" in message, message


_DEAD_JVM = (
    _SPARK_WORLD
    + """
engine = make_engine("spark", spark_master="local[1]")
first = engine.summaries(spec, window, grid)
assert engine.alive
proc = engine._spark.sparkContext._gateway.proc
os.kill(proc.pid, signal.SIGKILL)
proc.wait(timeout=30)
assert not engine.alive
try:
    engine.summaries(spec, window, grid)
except EngineUnavailableError as exc:
    assert "local[1]" in str(exc), exc
else:
    raise AssertionError("a dead JVM's call succeeded")
engine.close()
again = make_engine("spark", spark_master="local[1]")
same_parts(first, again.summaries(spec, window, grid))
again.close()
print("replaced")
"""
)


def test_a_spark_engine_whose_jvm_died_is_replaced_not_kept(tmp_path: Path) -> None:
    """The driver's JVM killed (an out-of-memory kill): the engine said it was alive, every
    later check failed with a raw ConnectionRefusedError naming no address, and a new engine
    got the dead session back from getOrCreate. Now the call is an EngineUnavailableError
    naming the master, ``alive`` is false (so the checks replace it), and a new engine
    starts a new JVM. In a process of its own: the module's session shares this one's JVM."""
    pytest.importorskip("pyspark", reason="the optional extra .[spark] is not installed")
    import subprocess
    import sys

    repo = str(Path(__file__).resolve().parent.parent)
    done = subprocess.run(
        [sys.executable, "-c", _DEAD_JVM, str(tmp_path / "scores"), repo],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=repo,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("replaced")


def test_an_unknown_engine_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="'local', 'dask' or 'spark'"):
        make_engine("ray")
    assert isinstance(Grid(np.array([0.0])), Grid)


def test_check_json_is_identical_across_engines(  # type: ignore[no-untyped-def]
    tmp_path: Path, dask_engine, spark_engine
) -> None:
    """``monitor check --json``'s document for one slot, through summaries on the full grid of a
    fixed reference (480k rows, two segments): the same text from every engine."""
    import json
    from dataclasses import replace

    from monitor.config import load_config
    from monitor.incremental import SummaryChecks
    from monitor.jobs import Runner
    from tests.test_incremental import AT, _world

    clear_cache()
    root = _world(tmp_path, engine='kind = "local"\nsummary.grid = "full"\n', fixed=True)
    config = load_config(root / "summaries.toml")
    assert config.engine is not None
    docs = {}
    for kind, engine in (("local", LocalEngine()), ("dask", dask_engine), ("spark", spark_engine)):
        chosen = replace(config, engine=replace(config.engine, kind=kind))
        checks = SummaryChecks(None, engines={kind: engine})
        verdict = Runner(chosen, summaries=checks).check("demo", AT)
        assert checks.last_engine["demo"] == kind
        docs[kind] = json.dumps(verdict.to_dict(), sort_keys=True)
    assert docs["dask"] == docs["local"]
    assert docs["spark"] == docs["local"]
    doc = json.loads(docs["local"])
    assert doc["state"] != "error", doc["reasons"]
    assert doc["input"]["ks_statistic_high"] is None  # the full grid: exact KS


def test_an_unreachable_engine_makes_the_check_an_error_naming_it(tmp_path: Path) -> None:
    pytest.importorskip("distributed", reason="the optional extra .[dask] is not installed")
    from monitor.config import load_config
    from monitor.jobs import Runner
    from tests.test_incremental import AT, _world

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    root = _world(tmp_path, engine=f'kind = "dask"\ndask.address = "{address}"\n')
    runner = Runner(load_config(root / "summaries.toml"))
    verdict = runner.check("demo", AT)
    assert verdict.state == "error"
    assert any(address in r for r in verdict.reasons), verdict.reasons
    assert "demo" not in runner.summaries.last_engine  # nothing fell back to another engine


def test_a_reload_that_moves_every_monitor_off_an_engine_closes_it(tmp_path: Path) -> None:
    """A SIGHUP from ``kind = "dask"`` to the local engine once left the LocalCluster (its
    scheduler and worker processes) running, unused, until the daemon exited. An engine some
    monitor can still use (``auto`` can use its cluster kind) is kept."""
    pytest.importorskip("distributed", reason="the optional extra .[dask] is not installed")
    from dataclasses import replace

    from monitor.config import load_config
    from monitor.jobs import Runner
    from tests.test_incremental import _world

    root = _world(tmp_path, engine='kind = "dask"\ndask.address = "local"\n')
    config = load_config(root / "summaries.toml")
    assert config.engine is not None
    runner = Runner(config)
    cluster = runner.summaries.engine(config.engine, "dask")
    try:
        runner.reconfigure(replace(config, engine=replace(config.engine, kind="auto")))
        assert engine_alive(cluster)  # auto can still reach for it
        local = replace(config.engine, kind="local", dask_address=None)
        runner.reconfigure(replace(config, engine=local))
        assert not engine_alive(cluster)
        assert runner.summaries.engine(local, "local").kind == "local"
    finally:
        runner.summaries.close()


def test_a_reload_during_a_check_closes_the_engine_once_the_check_is_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reload off the Dask engine while a check reads through it: closing it under the check
    made the check's retry start a new LocalCluster with the old settings, held for good. The
    check finishes on the engine it had, which is closed when it is done, and none is left."""
    pytest.importorskip("distributed", reason="the optional extra .[dask] is not installed")
    import threading
    from dataclasses import replace

    from monitor.config import load_config
    from monitor.engines.dask import DaskEngine
    from monitor.jobs import Runner
    from tests.test_incremental import AT, _world

    inside, go = threading.Event(), threading.Event()
    used: list[DaskEngine] = []
    real = DaskEngine.summaries

    def gated(self: DaskEngine, *args: object, **kwargs: object) -> object:
        used.append(self)
        if len(used) == 1:  # the first read waits, inside the engine, for the reload
            inside.set()
            assert go.wait(120)
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(DaskEngine, "summaries", gated)
    root = _world(tmp_path, engine='kind = "dask"\ndask.address = "local"\n')
    config = load_config(root / "summaries.toml")
    assert config.engine is not None
    runner = Runner(config)
    got: list[object] = []
    check = threading.Thread(target=lambda: got.append(runner.check("demo", AT)), daemon=True)
    check.start()
    try:
        assert inside.wait(120)
        local = replace(config.engine, kind="local", dask_address=None)
        runner.reconfigure(replace(config, engine=local))
        assert engine_alive(used[0])  # in use: not closed under the check
        go.set()
        check.join(120)
        assert not check.is_alive()
        (verdict,) = got
        assert verdict.state != "error", verdict.reasons  # type: ignore[attr-defined]
        assert len({id(e) for e in used}) == 1  # no second cluster started for the old settings
        assert not engine_alive(used[0])  # closed once the check was done with it
        assert all(k[0] == "local" for k in runner.summaries._engines)
    finally:
        go.set()
        runner.summaries.close()
