"""Outcomes from ranked runs and judgments (issue 12), through the real parquet / TREC readers.

Worlds come from ``monitor.simulate_runs``: a golden set evaluated daily at 02:00, optionally
with a real decay, judgment holes (new unjudged documents at the top) or a second judgment
version. Each test runs the monitor's own ``Runner`` (or ``check``) on files on disk.
"""

from __future__ import annotations

import json
import math
import shutil
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from monitor.config import load_config
from monitor.errors import ConfigError, SchemaError
from monitor.exporter import make_registry
from monitor.jobs import Runner
from monitor.judged import judged_outcomes
from monitor.simulate_runs import RunsWorld, write_runs_world
from monitor.sources import ScoreSpec, Window, read_run_times, read_scores
from monitor.sources.model import JudgedSpec, OutcomeSpec
from tests.outcome_windows import assert_same_window

START = datetime(2026, 3, 2, tzinfo=UTC)  # a Monday
END = START + timedelta(days=12)
AT = START + timedelta(days=11, hours=6)  # four hours after the day-11 run landed


def _world(tmp_path: Path, world: RunsWorld, **kwargs: object) -> Path:
    return write_runs_world(tmp_path, world, start=START, end=END, seed=7, **kwargs)  # type: ignore[arg-type]


def _run(config_path: Path, at: datetime = AT) -> dict[str, Any]:
    """Replay the daemon hourly over the last two days up to ``at``; return the last verdict."""
    config = load_config(config_path)
    runner = Runner(config, clock=lambda: at)
    name = config.monitors[0].name
    slots = config.monitors[0].schedule.slots(at - timedelta(days=2), at + timedelta(seconds=1))
    verdict = None
    for slot in slots:
        verdict = runner.run(name, slot).verdict
    assert verdict is not None
    return verdict.to_dict()


def _window(config_path: Path, start: datetime, end: datetime):  # type: ignore[no-untyped-def]
    spec = load_config(config_path).monitors[0].outcomes
    return judged_outcomes(spec, Window(start=start, end=end))


def test_a_window_holding_the_same_runs_is_scored_once(tmp_path: Path) -> None:
    """An hourly check's reference window holds the same runs until one enters or leaves it:
    its outcomes are kept by the rows it holds and the judgments' version, equal scoring
    afresh, and are scored again when a run, a cut through a file or the judgments change."""
    from monitor import judged
    from monitor.sources import clear_cache

    config = _world(tmp_path, RunsWorld(n_queries=60, evaluations_per_day=2))
    # each day's two runs (02:00, 14:00) in one file and one row group: windows that start
    # between them cut the group, and only its timestamps tell which rows they hold
    run_times = []
    for day in sorted((tmp_path / "runs").glob("date=*")):
        parts = sorted(day.glob("*.parquet"))
        table = pa.concat_tables([pq.read_table(p) for p in parts])
        for p in parts:
            p.unlink()
        pq.write_table(table, day / "runs.parquet", row_group_size=table.num_rows)
        run_times += sorted(set(table.column("timestamp").to_pylist()))
    run_times = [t.replace(tzinfo=UTC) for t in run_times]
    spec = load_config(config).monitors[0].outcomes
    windows = [
        Window(start=s, end=s + timedelta(days=7, hours=5))  # ends cross runs at other hours
        for s in [START + timedelta(days=1, hours=h) for h in range(0, 48, 1)]
    ]
    before = judged.SCORED
    kept = [judged_outcomes(spec, w) for w in windows]
    contents = {tuple(t for t in run_times if w.start <= t < w.end) for w in windows}
    assert judged.SCORED - before == len(contents) < len(windows) // 4
    for w, got in zip(windows, kept, strict=True):
        clear_cache()  # every kept window forgotten: scored afresh
        assert_same_window(got, judged_outcomes(spec, w))
    # a run after the window: the kept outcomes, with the newest run's time of now
    w = windows[0]
    judged_outcomes(spec, w)
    late = pq.read_table(tmp_path / "runs" / f"date={run_times[-1].date()}" / "runs.parquet")
    t_new = run_times[-1] + timedelta(days=1)
    late = late.set_column(
        0, "timestamp", pa.array([t_new.replace(tzinfo=None)] * late.num_rows, pa.timestamp("us"))
    )
    (tmp_path / "runs" / f"date={t_new.date()}").mkdir()
    pq.write_table(late, tmp_path / "runs" / f"date={t_new.date()}" / "runs.parquet")
    scored = judged.SCORED
    again = judged_outcomes(spec, w)
    assert scored == judged.SCORED
    assert again.newest_timestamp == t_new
    # the judgments rewritten in place (the same version): scored again, as afresh
    path = tmp_path / "qrels" / "version=v1" / "qrels.parquet"
    qrels = pq.read_table(path)
    grades = qrels.column("grade").to_numpy()
    pq.write_table(qrels.set_column(2, "grade", pa.array(grades[::-1].copy())), path)
    rejudged = judged_outcomes(spec, w)
    assert scored + 1 == judged.SCORED
    assert rejudged.judged is not None
    assert again.judged is not None
    assert rejudged.judged.judgments_version != again.judged.judgments_version
    assert not np.array_equal(rejudged.outcomes, again.outcomes)
    clear_cache()
    assert_same_window(rejudged, judged_outcomes(spec, w))


def test_kept_judged_windows_decide_what_scoring_afresh_decides(tmp_path: Path) -> None:
    """Hourly checks over two days into a decay: with windows kept while they hold the same
    runs, every slot's verdict equals that of a daemon that scores every window afresh."""
    from monitor.sources import clear_cache
    from monitor.store import StateStore

    config_path = _world(tmp_path, RunsWorld(decay_start=timedelta(days=10, hours=1)))
    config = load_config(config_path)
    name = config.monitors[0].name
    slots = config.monitors[0].schedule.slots(AT - timedelta(days=2), AT + timedelta(seconds=1))
    verdicts: list[list[dict[str, Any]]] = [[], []]
    for fresh in (False, True):
        clear_cache()
        runner = Runner(config, clock=lambda: AT, store=StateStore(tmp_path / f"state-{fresh}"))
        for slot in slots:
            if fresh:
                clear_cache()  # nothing kept: every window scored afresh
            verdicts[fresh].append(runner.run(name, slot).verdict.to_dict())
    assert verdicts[0] == verdicts[1]
    assert verdicts[0][-1]["state"] == "model_decay"


def test_healthy_world_is_ok_and_reports_every_metric(tmp_path: Path) -> None:
    d = _run(_world(tmp_path, RunsWorld()))
    assert d["state"] == "ok", d["reasons"]
    out = d["outcome"]
    assert isinstance(out, dict)
    assert out["metric"] == "ndcg@10"
    assert set(out["metrics"]) == {"ndcg@10", "ap", "rr", "p@10", "r@100", "judged@10"}
    ndcg = out["metrics"]["ndcg@10"]
    assert 0.2 < ndcg["reference"] < 1.0
    assert math.isclose(ndcg["mean_difference"], out["mean_difference"], abs_tol=1e-12)
    assert out["judged_reference"] is not None
    assert out["judgment_holes"] is False
    judgments = d["judgments"]
    assert isinstance(judgments, dict)
    assert judgments["version"].startswith("v1 (")
    assert judgments["runs_format"] == "parquet"
    cal = judgments["reference"]["calibration"]
    assert cal["probabilities"] is True
    assert 0.5 < cal["auc"] <= 1.0
    assert cal["binning"] == "equal_mass"
    assert cal["n_bins"] == 10


def test_real_decay_is_model_decay(tmp_path: Path) -> None:
    world = RunsWorld(decay_start=timedelta(days=10, hours=1))
    d = _run(_world(tmp_path, world))
    assert d["state"] == "model_decay", d["reasons"]
    assert "mean ndcg@10 difference" in d["reasons"][0]


@pytest.mark.parametrize(
    ("holes", "metric"), [(3, "ndcg@10"), (1, "ndcg@10"), (1, "ndcg@20"), (1, "ndcg@100")]
)
def test_judgment_holes_make_the_look_undecidable_not_decay(
    tmp_path: Path, holes: int, metric: str
) -> None:
    """New unjudged documents take the top ``holes`` ranks: nDCG falls with no loss of
    quality. One such document lowers judged@10 by at most 1/10, which the default
    tolerance of 0.1 (a strict ">") never flagged: the largest nDCG effect one document has
    was paged as model decay. judged@k followed the metric's k: judged@20 falls by 1/20 at
    most, never more than 0.05, and judged@100 of 20-result lists not at all."""
    world = RunsWorld(holes=holes, holes_start=timedelta(days=10, hours=1))
    config = _world(tmp_path, world, extra_outcomes_toml=f'outcomes.metric = "{metric}"\n')
    d = _run(config)
    out = d["outcome"]
    assert isinstance(out, dict)
    assert out["judgment_holes"] is True
    assert out["mean_difference"] < -0.05  # what a naive monitor would page for
    assert out["judged_reference"] - out["judged_current"] > 0.25 * holes / 3
    assert d["state"] == "insufficient_data", d["reasons"]
    assert any("judged@10 fell from" in r and "ndcg'" in r for r in d["reasons"])


def test_condensed_ndcg_sees_through_judgment_holes(tmp_path: Path) -> None:
    world = RunsWorld(holes_start=timedelta(days=10, hours=1))
    config = _world(tmp_path, world, extra_outcomes_toml='outcomes.metric = "ndcg\'@10"\n')
    d = _run(config)
    out = d["outcome"]
    assert isinstance(out, dict)
    assert out["metric"] == "ndcg'@10"
    assert out["judgment_holes"] is True
    assert d["state"] == "ok", d["reasons"]


def test_a_judgment_update_never_looks_like_decay(tmp_path: Path) -> None:
    """Both windows are scored with the latest version (v2); pinning v1 also works."""
    world = RunsWorld(rejudge_at=timedelta(days=11))
    config = _world(tmp_path, world)
    d = _run(config)
    assert d["state"] == "ok", d["reasons"]
    assert d["judgments"]["version"].startswith("v2 (")
    ref_v2 = _window(config, START + timedelta(days=3), START + timedelta(days=10))
    cur_v2 = _window(config, START + timedelta(days=11), START + timedelta(days=11, hours=3))
    assert ref_v2.judged.judgments_version == cur_v2.judged.judgments_version
    pinned = _world(
        tmp_path / "pinned", world, extra_outcomes_toml='outcomes.judgments_version = "v1"\n'
    )
    ref_v1 = _window(pinned, START + timedelta(days=3), START + timedelta(days=10))
    assert ref_v1.judged.judgments_version.startswith("v1 (")
    assert not np.allclose(ref_v1.outcomes, ref_v2.outcomes)  # the grades did change


def test_judgments_that_land_during_a_check_never_score_its_windows_apart(
    tmp_path: Path,
) -> None:
    """A new judgment set landing between the reference's read and the runs' once scored the
    runs with it and the reference with the old: a false decay (every grade 2 made 0 here).
    The windows are read again with one version; a set that keeps changing is an error."""
    import pyarrow.compute as pc

    from monitor.jobs import ParquetReader

    config_path = _world(tmp_path, RunsWorld(n_queries=60))
    qrels = tmp_path / "qrels"
    table = pq.read_table(qrels / "version=v1" / "qrels.parquet")
    graded = pc.if_else(pc.equal(table["grade"], 2), 0, table["grade"]).cast(table["grade"].type)
    changed = table.set_column(table.schema.get_field_index("grade"), "grade", graded)

    class Landing(ParquetReader):
        def __init__(self, every: bool) -> None:
            self.calls, self.every = 0, every
            self.seen: list[str] = []

        def outcomes(self, spec, window):  # type: ignore[no-untyped-def]
            out = super().outcomes(spec, window)
            self.seen.append(out.judged.judgments_version)
            self.calls += 1
            if self.calls == 1 or self.every:  # a new version after this read
                version = qrels / f"version=v{self.calls + 1}"
                version.mkdir()
                pq.write_table(changed if self.calls % 2 else table, version / "qrels.parquet")
            return out

    config = load_config(config_path)
    name = config.monitors[0].name
    once = Landing(every=False)
    verdict = Runner(config, clock=lambda: AT, reader=once).run(name, AT).verdict
    assert verdict.state != "model_decay", verdict.reasons
    assert once.seen[0] != once.seen[1], once.seen
    assert once.seen[2] == once.seen[3], once.seen
    assert verdict.to_dict()["judgments"]["version"] == once.seen[3]
    for v in qrels.glob("version=v[2-9]"):
        shutil.rmtree(v)
    shutil.rmtree(config.server.state_dir)  # the same runs are new to it again
    churning = Landing(every=True)
    verdict = Runner(config, clock=lambda: AT, reader=churning).run(name, AT).verdict
    assert verdict.state == "error"
    assert "the judgments changed while this check read them" in verdict.reasons[0]


def test_trec_files_give_the_same_outcomes_as_parquet(tmp_path: Path) -> None:
    world = RunsWorld(n_queries=40)
    par = _world(tmp_path / "p", world)
    trec = _world(tmp_path / "t", world, fmt="trec")
    w = (START + timedelta(days=3), START + timedelta(days=10))
    a, b = _window(par, *w), _window(trec, *w)
    assert b.judged.runs_format == "trec"
    assert b.judged.judgments_format == "trec"
    assert a.judged.runs == b.judged.runs == 7
    np.testing.assert_array_equal(a.query_ids, b.query_ids)
    np.testing.assert_allclose(a.outcomes, b.outcomes, rtol=0, atol=1e-12)
    for name in a.extras:
        np.testing.assert_allclose(a.extras[name], b.extras[name], rtol=0, atol=1e-12)
    window = Window(start=w[0], end=w[1])
    times = read_run_times(load_config(trec).monitors[0].outcomes, window)
    assert int(np.unique(times).size) == 7
    # a TREC file's time once per line: the rows a parquet run holds
    rows = read_run_times(load_config(par).monitors[0].outcomes, window)
    np.testing.assert_array_equal(times, rows)


@pytest.mark.parametrize("fmt", ["parquet", "trec"])
def test_a_run_completed_after_a_look_is_looked_at_again(tmp_path: Path, fmt: str) -> None:
    """Half a run's lines land before the 03:00 check, the rest before 04:00: the 04:00
    check looks at the run again, whole. A TREC file's lines were counted as one row per
    file, so the completed run was never looked at (its missing half entered the rolling
    reference untested), while parquet rows landing late were."""
    config_path = _world(
        tmp_path, RunsWorld(n_queries=80, judged=15, results=20, scores_per_hour=60), fmt=fmt
    )
    day = START + timedelta(days=10)
    if fmt == "trec":
        files = [tmp_path / "runs" / f"run-{day:%Y-%m-%d}T020000Z.trec"]
    else:
        files = sorted((tmp_path / "runs").glob(f"date={day:%Y-%m-%d}/*.parquet"))
    assert len(files) == 1, files
    run = files[0]
    whole = run.read_bytes()
    if fmt == "trec":
        lines = whole.splitlines(keepends=True)
        run.write_bytes(b"".join(lines[: len(lines) // 2]))
    else:
        table = pq.read_table(run)
        pq.write_table(table.slice(0, table.num_rows // 2), run)
    config = load_config(config_path)
    runner = Runner(config)
    name = config.monitors[0].name
    runner.run(name, day - timedelta(hours=20))
    half = runner.run(name, day + timedelta(hours=3)).verdict.outcome
    assert half is not None
    assert half.new_look
    run.write_bytes(whole)
    whole_look = runner.run(name, day + timedelta(hours=4)).verdict.outcome
    assert whole_look is not None
    assert whole_look.new_look, "the completed run was not looked at again"
    assert whole_look.n_pairs > half.n_pairs
    later = runner.run(name, day + timedelta(hours=5)).verdict.outcome
    assert later is not None
    assert not later.new_look


def test_a_state_saved_before_trec_lines_counted_makes_no_look_again(tmp_path: Path) -> None:
    """A state saved before a TREC file's lines counted as rows holds the last look's rows
    as its file count (1): compared with the lines, the whole run read as landing late, and
    the first check after the upgrade looked at it again (alpha spent on the same runs)."""
    import json

    config_path = _world(
        tmp_path, RunsWorld(n_queries=40, judged=15, results=20, scores_per_hour=60), fmt="trec"
    )
    config = load_config(config_path)
    name = config.monitors[0].name
    day = START + timedelta(days=10)
    runner = Runner(config)
    runner.run(name, day - timedelta(hours=20))
    look = runner.run(name, day + timedelta(hours=3)).verdict.outcome
    assert look is not None
    assert look.new_look
    path = config.server.state_dir / f"{name}.json"
    doc = json.loads(path.read_text())

    def as_before(d: dict[str, Any]) -> None:  # the file count, no marker
        for key, value in list(d.items()):
            if key == "decay" and isinstance(value, dict) and value.get("runs_rows"):
                value["runs_rows"] = 1
                value.pop("runs_rows_lines", None)
            elif isinstance(value, dict):
                as_before(value)

    as_before(doc)
    path.write_text(json.dumps(doc))
    after = Runner(load_config(config_path)).run(name, day + timedelta(hours=4)).verdict.outcome
    assert after is not None
    assert not after.new_look, "the last look was made again"


def test_judgment_versions_under_a_config_directory_named_like_a_glob(tmp_path: Path) -> None:
    """The version directory was joined to the judgments' display path, the literal one:
    under 'br[1]/' it was read as a glob, matched nothing, and every check was an error."""
    from monitor.sources import judgments_version

    config = load_config(_world(tmp_path / "br[1]", RunsWorld(n_queries=20)))
    judged = config.monitors[0].outcomes.judged
    assert judged is not None
    assert judgments_version(judged).startswith("v")
    assert _run(_world(tmp_path / "br[2]", RunsWorld(n_queries=20)))["state"] != "error"


@pytest.mark.parametrize("kind", ["device", "fifo", "dangling"])
def test_a_newest_version_that_cannot_be_read_is_an_error_not_skipped(
    tmp_path: Path, kind: str
) -> None:
    """The newest judgments version a link to /dev/null, a FIFO or a dangling link: only
    directories were taken as versions, so it was left out without a word and the outcomes
    were graded with the older version's judgments."""
    import os

    from monitor.errors import SourceError
    from monitor.sources import clear_cache, judgments_version
    from monitor.sources.model import JudgedSpec

    base = tmp_path / "judgments"
    (base / "version=2026-10").mkdir(parents=True)
    (base / "version=2026-10" / "qrels.txt").write_text("q1 0 d1 1\n")
    spec = JudgedSpec(judgments=str(base))
    clear_cache()
    assert judgments_version(spec).startswith("2026-10")
    newest = base / "version=2026-11"
    if kind == "device":
        newest.symlink_to("/dev/null")
    elif kind == "fifo":
        os.mkfifo(newest)
    else:
        newest.symlink_to(tmp_path / "unmounted" / "version=2026-11")
    clear_cache()
    with pytest.raises(SourceError) as caught:
        judgments_version(spec)
    assert caught.value.path == str(newest)
    # never read, it fails nothing: pinned to another version, or older than the newest
    pinned = JudgedSpec(judgments=str(base), judgments_version="2026-10")
    assert judgments_version(pinned).startswith("2026-10")
    newest.rename(base / "version=2025-01")
    clear_cache()
    assert judgments_version(spec).startswith("2026-10")


@pytest.mark.parametrize("fmt", ["parquet", "trec"])
def test_a_window_without_runs_is_empty_and_the_first_checks_insufficient(
    tmp_path: Path, fmt: str
) -> None:
    """A window holding no run rows (a new deployment's reference, a week without golden runs)
    is an empty window, as the data contract says, not 'rows need a rank or a score to be
    placed': the first checks of a world are insufficient_data, not error."""
    config = _world(tmp_path, RunsWorld(n_queries=30), fmt=fmt)
    empty = _window(config, START - timedelta(days=7), START)
    assert empty.outcomes.size == 0
    assert empty.judged is not None
    assert empty.judged.runs == 0
    at = START + timedelta(hours=1)
    verdict = Runner(load_config(config), clock=lambda: at).run("golden", at).verdict
    assert verdict.state == "insufficient_data", verdict.reasons


def test_conflicting_judgments_name_the_query_and_document(tmp_path: Path) -> None:
    config = _world(tmp_path, RunsWorld(n_queries=5))
    qrels = tmp_path / "qrels" / "version=v1" / "qrels.parquet"
    table = pq.read_table(qrels)
    extra = pa.table(
        {
            "query_id": ["q3"],
            "doc_id": ["q3-j4"],
            "grade": [float(table["grade"][3 * 30 + 4].as_py() + 1)],
        }
    )
    pq.write_table(pa.concat_tables([table, extra]), qrels)
    with pytest.raises(SchemaError, match=r"query 'q3': document 'q3-j4' is judged twice"):
        _window(config, START, END)
    d = _run(config)
    assert d["state"] == "error"
    assert "q3-j4" in str(d["error"])


def test_bad_trec_line_names_file_and_line(tmp_path: Path) -> None:
    config = _world(tmp_path, RunsWorld(n_queries=5), fmt="trec")
    run = sorted((tmp_path / "runs").iterdir())[0]
    good = run.read_text()
    # blank lines count: the line named is the file's (they were once left out of the count)
    body = "\n\n" + good.rstrip("\n") + "\n\n"
    bad_line = body.count("\n") + 1
    run.write_text(body + "q1 Q0 only-four 3\n")
    with pytest.raises(SchemaError, match=rf"line {bad_line} has 4 fields") as info:
        _window(config, START, END)
    assert run.name in str(info.value)
    run.write_text(body + "q1 Q0 d9 x 1.0 tag\n")
    from monitor.sources import clear_cache

    clear_cache()
    with pytest.raises(SchemaError, match=rf"line {bad_line}: the rank 'x' is not a number"):
        _window(config, START, END)


def test_config_keys_are_validated_with_their_paths(tmp_path: Path) -> None:
    config = _world(
        tmp_path,
        RunsWorld(n_queries=5),
        extra_outcomes_toml='outcomes.metric = "ndcg@ten"\noutcomes.gain = "cubic"\n'
        'outcomes.path = "x"\n',
    )
    with pytest.raises(ConfigError) as info:
        load_config(config)
    text = str(info.value)
    assert "monitors[0].outcomes.metric" in text
    assert "monitors[0].outcomes.gain" in text
    assert "outcomes.path" in text  # judged runs are read from outcomes.runs
    for name, toml, refused in (
        # a grade of 0 would count every unjudged document relevant: refused here, not at
        # every check (it once passed validate and then failed each check without naming it)
        ("zero", "outcomes.relevant_grade = 0.0\n", r"monitors\[0\]\.outcomes\.relevant_grade"),
        # judged@k measures the judgments' coverage: decided on, unjudged documents paged as
        # model decay (it once loaded; it is reported beside any metric)
        (
            "coverage",
            'outcomes.metric = "judged@10"\n',
            r"monitors\[0\]\.outcomes\.metric.*coverage",
        ),
    ):
        config = _world(tmp_path / name, RunsWorld(n_queries=5), extra_outcomes_toml=toml)
        with pytest.raises(ConfigError, match=refused):
            load_config(config)


def test_exporter_shows_metrics_calibration_and_version(tmp_path: Path) -> None:
    config = load_config(_world(tmp_path, RunsWorld(n_queries=60)))
    runner = Runner(config, clock=lambda: AT)
    runner.run("golden", AT - timedelta(hours=1))
    record = runner.run("golden", AT)
    registry = make_registry(runner.board)
    value = registry.get_sample_value
    labels = {"monitor": "golden", "segment": "", "metric": "ndcg@10", "window": "current"}
    assert value("retrieval_monitor_outcome_metric", labels) is not None
    auc = value("retrieval_monitor_calibration_auc", {"monitor": "golden", "window": "reference"})
    assert auc is not None
    assert 0.5 < auc <= 1.0
    # pooled over the window's lists: one series a window, no segment label (every segment
    # once carried the same pooled value under its own label)
    (family,) = [m for m in registry.collect() if m.name == "retrieval_monitor_calibration_auc"]
    assert sorted(s.labels["window"] for s in family.samples) == ["current", "reference"]
    assert all(set(s.labels) == {"monitor", "window"} for s in family.samples)
    assert value("retrieval_monitor_judgment_holes", {"monitor": "golden", "segment": ""}) == 0.0
    versions = [
        s.labels["version"]
        for m in registry.collect()
        if m.name == "retrieval_monitor_judgments_info"
        for s in m.samples
    ]
    assert len(versions) == 1
    assert versions[0].startswith("v1 (")
    json.dumps(record.verdict.to_dict(), allow_nan=False)  # the check --json contract: finite


def test_top1_scores_from_a_full_result_log(tmp_path: Path) -> None:
    """``scores.rank_column``: the rank-1 row of each served query is its top-1 score."""
    path = tmp_path / "results.parquet"
    ts = np.datetime64("2026-03-02T10:00:00", "us") + np.arange(30).astype("timedelta64[s]") // 3
    rank = np.tile([1, 2, 3], 10)
    score = np.arange(30, dtype=np.float64)
    pq.write_table(
        pa.table(
            {"timestamp": pa.array(ts, pa.timestamp("us", tz="UTC")), "rank": rank, "score": score}
        ),
        path,
    )
    spec = ScoreSpec(path=str(path), rank_column="rank")
    w = read_scores(spec, Window(start=START, end=END))
    np.testing.assert_array_equal(w.values, score[rank == 1])
    assert w.rows == 10


def _desc_key(doc: str) -> tuple[int, ...]:
    """Sort key for document id descending (byte order), as trec_eval breaks score ties."""
    return (*tuple(-b for b in doc.encode()), 1)


@pytest.mark.slow
def test_real_bm25_collection_matches_trec_eval_through_the_trec_reader(tmp_path: Path) -> None:
    """A real TREC-style collection: BM25 over the standard library's docstrings (bench/
    realworld.py), 200 results per golden query with real score ties; graded judgments: the
    query's own document 2, up to 5 other members of its module 1. Written as TREC run and qrels
    files, read by the monitor, every metric compared with trec_eval per query."""
    import pytrec_eval

    from monitor.sources import JudgedSpec, OutcomeSpec
    from tests.bench_modules import load_bench

    realworld = load_bench("realworld")
    system = realworld.build_system()
    corpus = system.corpus
    ids = corpus.ids
    index = realworld.BM25Index(realworld.index_documents(corpus, "titles_only"))
    queries = [corpus.documents[i].query for i in system.golden]
    by_module: dict[str, list[int]] = {}
    for i, doc in enumerate(corpus.documents):
        by_module.setdefault(doc.module, []).append(i)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    lines: list[str] = []
    k = 0
    for block in index.scores(queries):
        for row in block:
            own = int(system.golden[k])
            qid = f"q{k}"
            siblings = [j for j in by_module[corpus.documents[own].module] if j != own][:5]
            qrels[qid] = {ids[own]: 2, **{ids[j]: 1 for j in siblings}}
            top = np.flatnonzero(row > 0)
            order = sorted(top.tolist(), key=lambda j: (-row[j], _desc_key(ids[j])))[:200]
            run[qid] = {ids[j]: float(row[j]) for j in order}
            lines += [
                f"{qid} Q0 {ids[j]} {r} {float(row[j])!r} bm25" for r, j in enumerate(order, 1)
            ]
            k += 1
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "run-2026-03-02T020000Z.trec").write_text("\n".join(lines) + "\n")
    (tmp_path / "qrels.txt").write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items())
    )
    metrics = ("ndcg@10", "ndcg", "ap", "rprec", "rr", "p@10", "r@100")
    spec = OutcomeSpec(
        path=str(tmp_path / "runs"),
        judged=JudgedSpec(judgments=str(tmp_path / "qrels.txt"), report=metrics[1:]),
    )
    w = judged_outcomes(spec, Window(start=START, end=END))
    run = {q: docs for q, docs in run.items() if docs}  # a query nothing matched has no rows
    trec = pytrec_eval.RelevanceEvaluator(
        qrels, {"ndcg_cut.10", "ndcg", "map", "Rprec", "recip_rank", "P.10", "recall.100"}
    ).evaluate(run)
    names = {
        "ndcg@10": "ndcg_cut_10",
        "ndcg": "ndcg",
        "ap": "map",
        "rprec": "Rprec",
        "rr": "recip_rank",
        "p@10": "P_10",
        "r@100": "recall_100",
    }
    assert w.judged.lists == len(run) > 0.9 * system.golden.size
    ours = {"ndcg@10": w.outcomes, **w.extras}
    for metric, trec_name in names.items():
        expected = np.array([trec[q][trec_name] for q in w.query_ids])
        np.testing.assert_allclose(ours[metric], expected, rtol=0, atol=1e-12, err_msg=metric)
    assert 0.0 < float(np.mean(w.outcomes)) < 1.0


def test_the_worked_example_of_docs_outcomes() -> None:
    """docs/outcomes.md: query A, judgments d1=3, d2=2, d3=0, d4=1; list d3, d1, x, d4."""
    from monitor.stats import ranking_metrics

    names = ["ndcg@3", "ndcg'@3", "ap", "rr", "p@3", "r@3", "rprec", "judged@3"]
    r = ranking_metrics(
        [0, 0, 0, 0],
        [2, 0, 4, 3],
        [0, 0, 0, 0],
        [0, 1, 2, 3],
        [3, 2, 0, 1],
        n_queries=1,
        metrics=names,
        rank=[1, 2, 3, 4],
    )
    dcg = 3 / math.log2(3)
    idcg = 3 + 2 / math.log2(3) + 1 / 2
    expected = {
        "ndcg@3": dcg / idcg,
        "ndcg'@3": (dcg + 1 / 2) / idcg,
        "ap": (1 / 2 + 2 / 4) / 3,
        "rr": 1 / 2,
        "p@3": 1 / 3,
        "r@3": 1 / 3,
        "rprec": 1 / 3,
        "judged@3": 2 / 3,
    }
    for name, value in expected.items():
        assert r.metrics[name][0] == pytest.approx(value, abs=1e-15), name
    assert round(expected["ndcg@3"], 5) == 0.39749
    assert round(expected["ndcg'@3"], 5) == 0.50249


@pytest.mark.parametrize("fmt", ["parquet", "trec"])
def test_validate_sources_opens_runs_and_judgments(
    tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from monitor.cli import main

    config = _world(tmp_path, RunsWorld(n_queries=5), fmt=fmt)
    assert main(["validate", "--config", str(config), "--sources"]) == 0
    for qrels in (tmp_path / "qrels" / "version=v1").iterdir():
        qrels.write_text("q1 0 only-three\n")  # a broken judgment file, in either format
    assert main(["validate", "--config", str(config), "--sources"]) == 3
    err = capsys.readouterr().err
    assert "monitors[0].outcomes" in err
    assert "line 1 has 3 fields" in err


def test_segments_decay_alone_and_backtest_agrees(tmp_path: Path) -> None:
    """A segmented judged golden set (60 queries a segment) decays in both segments; the
    backtest replays the same state through its cached reader."""
    from monitor.backtest import backtest

    world = RunsWorld(n_queries=120, segments=("en", "de"), decay_start=timedelta(days=10, hours=1))
    config_path = _world(tmp_path, world)
    d = _run(config_path)
    assert d["state"] == "model_decay", d["reasons"]
    assert {s["segment"] for s in d["segments"]} == {"en", "de"}
    for seg in d["segments"]:
        assert seg["outcome"]["metric"] == "ndcg@10"
        assert seg["outcome"]["n_pairs"] == 60
    config = load_config(config_path)
    (result,) = backtest(config, AT - timedelta(days=2), AT)
    assert result.checks[-1].state == "model_decay"


def test_a_runs_world_names_every_bad_field_and_writes_nothing_for_a_bad_span(
    tmp_path: Path,
) -> None:
    """0 evaluations a day was a ZeroDivisionError, -1 an OverflowError after walking back
    from the start, and an end before the start left the judgments on disk before failing."""
    with pytest.raises(ConfigError) as err:
        RunsWorld(evaluations_per_day=0, rejudged_share=2.0, quality=math.nan, holes=-1)
    text = str(err.value)
    for name in ("evaluations_per_day", "rejudged_share", "quality", "holes"):
        assert name in text, text
    assert len(err.value.problems) == 4, err.value.problems
    for bad in (-1, 25, 1.5, True):
        with pytest.raises(ConfigError, match="evaluations_per_day"):
            RunsWorld(evaluations_per_day=bad)  # type: ignore[arg-type]
    start = datetime(2026, 11, 1, tzinfo=UTC)
    with pytest.raises(ValueError, match="before"):
        write_runs_world(tmp_path / "w", RunsWorld(), start=start, end=start, seed=1)
    assert not (tmp_path / "w").exists()


def test_a_runs_world_started_in_another_zone_is_the_same_world(tmp_path: Path) -> None:
    """Runs are at first_run_hour UTC: a start given at +02:00 once put them at that hour local
    time (2 h early), stamped them as UTC (file names and rows), and lost the first day's run."""
    world = RunsWorld(n_queries=5)
    zone = timezone(timedelta(hours=2))
    start, end = START + timedelta(hours=2), START + timedelta(days=2, hours=2)  # 04:00 at +02:00
    utc = write_runs_world(tmp_path / "utc", world, start=start, end=end, seed=3)
    local = write_runs_world(
        tmp_path / "local",
        world,
        start=start.astimezone(zone),
        end=end.astimezone(zone),
        seed=3,
    )
    runs = [sorted((c.parent / "runs").rglob("*.parquet")) for c in (utc, local)]
    names = [[p.relative_to(c.parent) for p in r] for c, r in zip((utc, local), runs, strict=True)]
    assert names[0] == names[1], names
    assert str(names[0][0]) == "runs/date=2026-03-02/run-2026-03-02T020000Z.parquet"
    for a, b in zip(*runs, strict=True):
        assert pq.read_table(a).equals(pq.read_table(b)), a


def test_a_judged_runs_segment_with_a_nul_character_is_refused(tmp_path: Path) -> None:
    """Segments of judged runs became fixed-width numpy strings, which drop a trailing NUL:
    "de" and "de\\0" were one outcome segment. Refused as a query id with a NUL is, naming
    the segment column."""
    config = _world(tmp_path, RunsWorld(n_queries=20, segments=("de", "fr")))
    spec = load_config(config).monitors[0].outcomes
    assert spec.segment_column is not None
    run = sorted((tmp_path / "runs").rglob("*.parquet"))[-1]  # numpy's writer would drop it
    table = pq.read_table(run)
    column = table.schema.get_field_index(spec.segment_column)
    values = [("de\x00" if v == "fr" else v) for v in table.column(column).to_pylist()]
    pq.write_table(table.set_column(column, spec.segment_column, pa.array(values)), run)
    with pytest.raises(SchemaError, match="segment with a NUL") as err:
        judged_outcomes(spec, Window(start=START, end=END))
    assert err.value.column == spec.segment_column
    # a hive partition value is URL-decoded: locale=de%00 is "de\0"
    root = tmp_path / "hive"
    at = np.datetime64((START + timedelta(hours=2)).replace(tzinfo=None), "us")
    (root / "qrels.txt").parent.mkdir(parents=True)
    (root / "qrels.txt").write_text(
        "".join(f"q{i} 0 d{j} {j % 3}\n" for i in range(4) for j in range(3))
    )
    for locale in ("de", "de%00"):
        run = root / "runs" / f"locale={locale}" / "run.parquet"
        run.parent.mkdir(parents=True)
        pq.write_table(
            pa.table(
                {
                    "timestamp": pa.array([at] * 12),
                    "query_id": [f"q{i}" for i in range(4) for _ in range(3)],
                    "doc_id": [f"d{j}" for _ in range(4) for j in range(3)],
                    "rank": pa.array([j + 1 for _ in range(4) for j in range(3)], pa.int32()),
                }
            ),
            run,
        )
    hive = OutcomeSpec(
        path=str(root / "runs"),
        segment_column="locale",
        judged=JudgedSpec(judgments=str(root / "qrels.txt")),
    )
    with pytest.raises(SchemaError, match="segment with a NUL") as err:
        judged_outcomes(hive, Window(start=START, end=END))
    assert err.value.column == "locale"


def test_a_pinned_version_of_judgments_in_one_file_is_refused(tmp_path: Path) -> None:
    """``outcomes.judgments_version`` with judgments in one file: the pin was ignored without
    a word, and whatever the file held graded both windows (a directory without versions
    refuses the same pin)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from monitor.errors import SourceNotFoundError
    from monitor.sources import clear_cache, judgments_version

    path = tmp_path / "qrels.parquet"
    pq.write_table(pa.table({"query_id": ["A"], "doc_id": ["d1"], "grade": [1.0]}), path)
    clear_cache()
    assert judgments_version(JudgedSpec(judgments=str(path)))  # unpinned: the file is read
    with pytest.raises(SourceNotFoundError, match=r"one file.*version=2026-11"):
        judgments_version(JudgedSpec(judgments=str(path), judgments_version="2026-11"))


def test_a_judgments_version_published_during_a_backtest_is_read_at_the_next_look(
    tmp_path: Path,
) -> None:
    """A judgments version published while ``backtest`` replays a fixed reference: the
    replay's outcome memo (by spec and window) kept handing back the reference scored with
    the old version, so the runner's second read found the versions still differing, and
    every later look was an error. The daemon reads the new version at the next check."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from monitor.backtest import backtest

    path = write_runs_world(
        tmp_path,
        RunsWorld(n_queries=60, judged=20, results=30, scores_per_hour=60),
        start=START,
        end=START + timedelta(days=14),
        seed=3,
        extra_monitor_toml='windows.reference_start = "2026-03-03T00:00:00Z"\n'
        'windows.reference_end = "2026-03-10T00:00:00Z"\n',
    )
    config = load_config(path)

    def publish(name: str, done: int, total: int) -> None:
        if done != 3:
            return
        table = pq.read_table(tmp_path / "qrels" / "version=v1" / "qrels.parquet")
        grades = table.column("grade").to_pylist()
        grades[0] = 3.0 if grades[0] != 3.0 else 2.0
        (tmp_path / "qrels" / "version=v2").mkdir()
        pq.write_table(
            table.set_column(2, "grade", pa.array(grades)),
            tmp_path / "qrels" / "version=v2" / "qrels.parquet",
        )

    start = START + timedelta(days=10)
    (result,) = backtest(config, start, start + timedelta(days=1), progress=publish)
    assert (tmp_path / "qrels" / "version=v2").is_dir()
    errors = [v.reasons for v in result.verdicts if v.state == "error"]
    assert errors == []


def test_a_replayed_gap_in_the_outcome_feed_says_since_when(tmp_path: Path) -> None:
    """A replay inside a gap of the golden runs: the source's newest outcome is after the slot
    (the runs resumed later), so the outcome feed's freshness read "stale since before the
    windows read" and ``newest_outcome`` was null, where the daemon at that instant had said
    when the feed stopped."""
    import shutil

    from monitor.backtest import backtest

    path = write_runs_world(
        tmp_path,
        RunsWorld(n_queries=40, judged=10, results=20, scores_per_hour=60),
        start=START,
        end=START + timedelta(days=14),
        seed=3,
    )
    for k in (7, 8, 9):
        shutil.rmtree(tmp_path / "runs" / f"date={(START + timedelta(days=k)).date()}")
    config = load_config(path)
    start = START + timedelta(days=9, hours=12)
    (result,) = backtest(config, start, start + timedelta(hours=2))
    last = result.verdicts[-1]
    stopped = START + timedelta(days=6, hours=2)  # the last run before the gap
    assert last.newest_outcome == stopped
    assert any("outcome feed stale since 2026-03-08T02:00:00Z" in r for r in last.reasons)
