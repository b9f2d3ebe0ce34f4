"""``monitor validate`` refuses what ``run`` would crash or stall on; ``--sources`` opens sources.

The resample cap, schedules that never fire, and ``inspect_source``: every file listed, every
footer read, every configured column checked, no data page read, every problem reported at once.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from monitor import sources
from monitor.cli import main
from monitor.config import parse_config
from monitor.config.checks import _MAX_RESAMPLES, _implied_resamples
from monitor.errors import ConfigError, CorruptFileError
from monitor.simulate import SCENARIOS, World, write_world
from monitor.sources import (
    OutcomeSpec,
    ScoreSpec,
    Window,
    inspect_source,
    read_scores,
    write_parquet,
)
from monitor.verdict import alarm_plan

T0 = datetime(2026, 11, 30, tzinfo=UTC)
DAY = timedelta(days=1)


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    sources.clear_cache()


def _monitor(**fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": "m", "scores": {"path": "s"}, "outcomes": {"path": "o"}}
    doc.update(fields)
    return doc


def _parse(*monitors: dict[str, Any]) -> Any:
    return parse_config({"monitors": list(monitors)}, base=Path("/tmp"))


def _problems(*monitors: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        _parse(*monitors)
    return caught.value.problems


# ------------------------------------------------------------------------------ resample cap


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"schedule": "1d"},
        {"schedule": "@weekly", "budget": {"decay": 0.01}},
        {"schedule": "15m", "decay": {"looks": 720}},
        {"schedule": "0 9 * * MON-FRI", "budget": {"decay": 0.002, "period": "7d"}},
        {"decay": {"n_resamples": 500_000}},
        {"schedule": "0 0 29 2 *"},
    ],
)
def test_implied_resamples_is_what_the_alarm_plan_uses(fields: dict[str, Any]) -> None:
    (m,) = _parse(_monitor(**fields)).monitors
    n = _implied_resamples(m.schedule, m.decay, m.budget)
    assert n == alarm_plan(m).n_resamples
    assert n <= _MAX_RESAMPLES


def test_budget_implying_too_many_resamples_is_refused_with_the_number() -> None:
    # The production report: budget.decay = 1e-6 was accepted and a check ran for > 45 s.
    problems = _problems(_monitor(budget={"decay": 1e-6}))
    (problem,) = problems
    # a look one cadence (1 d) after the previous spends budget * 1 / (30 + 1)
    expected = math.ceil(20 / (1e-6 * (1 / 31)))
    assert problem.startswith("monitors[0].budget.decay: implies ")
    assert f"{expected:,} permutation resamples" in problem
    assert f"cap of {_MAX_RESAMPLES:,}" in problem
    # the bound is 20 / cap * 31 = 0.00062, but at it 20 / alpha rounds to 1,000,000.0000001:
    # the smallest two-digit budget that fits is 0.00063, and the message says so
    assert "raise budget.decay to at least 0.00063 " in problem
    assert _problems(_monitor(budget={"decay": 0.00062}))
    # Just inside and just outside the cap, and looks that move it.
    _parse(_monitor(budget={"decay": 0.001}))
    assert _problems(_monitor(budget={"decay": 0.0005}))
    _parse(_monitor(budget={"decay": 0.0005}, decay={"looks": 10}))
    (many_looks,) = _problems(_monitor(decay={"looks": 5000}))
    assert "alpha = 1e-05 per look" in many_looks  # 0.05 / (5000 + 1)


@pytest.mark.parametrize(
    "fields",
    [
        {"budget": {"decay": 1e-6}},
        {"budget": {"decay": 1e-4, "period": "7d"}},
        {"budget": {"decay": 1e-4}, "decay": {"cadence": "6h"}},
        {"budget": {"decay": 1e-5}, "decay": {"looks": 40}},
        {"schedule": "15m", "budget": {"decay": 2e-7, "period": "90d"}},
    ],
)
def test_the_budget_a_refusal_suggests_fits_and_is_the_smallest_that_does(
    fields: dict[str, Any],
) -> None:
    (problem,) = _problems(_monitor(**fields))
    suggested = re.search(r"raise budget.decay to at least (\S+) ", problem)
    assert suggested is not None, problem
    value = float(suggested.group(1))
    budget = dict(fields["budget"], decay=value)
    _parse(_monitor(**dict(fields, budget=budget)))  # the suggestion is accepted
    mantissa, exponent = f"{value:.1e}".split("e")
    lower = float(f"{round(float(mantissa) * 10) - 1}e{int(exponent) - 1}")
    assert _problems(_monitor(**dict(fields, budget=dict(budget, decay=lower))))


def test_decay_looks_spells_the_cadence_everywhere_and_not_beside_it() -> None:
    """``decay.looks`` is the old spelling of the cadence (period / looks): the outcome feed's
    default max_lag follows it too (it once read decay.cadence's 1d default, so a golden set
    evaluated every 7.5 days was stale after two); given with ``cadence`` one would be lost
    silently, so both are refused; and a refusal whose budget cannot fit says what can."""
    (weekly,) = _parse(_monitor(decay={"looks": 4})).monitors
    assert weekly.decay_cadence == timedelta(days=7.5)
    assert weekly.outcome_lag_limit == timedelta(days=15) + weekly.decay.settle
    (both,) = _problems(_monitor(decay={"looks": 4, "cadence": "1h"}))
    assert both.startswith("monitors[0].decay.looks: give decay.cadence or its old spelling")
    (crowded,) = _problems(_monitor(decay={"looks": 40_000}))
    assert "lower decay.looks (no budget.decay up to 0.5 fits)" in crowded, crowded
    (often,) = _problems(_monitor(decay={"cadence": "1m"}))
    assert "lengthen decay.cadence (no budget.decay up to 0.5 fits)" in often, often


def test_explicit_n_resamples_above_the_cap_is_refused() -> None:
    (problem,) = _problems(_monitor(decay={"n_resamples": _MAX_RESAMPLES + 1}))
    assert problem == (
        f"monitors[0].decay.n_resamples: must be at most {_MAX_RESAMPLES:,} (the resample cap); "
        f"got {_MAX_RESAMPLES + 1:,}"
    )
    _parse(_monitor(decay={"n_resamples": _MAX_RESAMPLES}))


def test_explicit_n_resamples_that_cannot_reach_the_look_alpha_is_refused() -> None:
    """A sign-flip p is at least 1/(R+1): below the look alpha no decay could ever be raised,
    and the monitor would say "no evidence of decay" forever. At the defaults the look alpha
    is 0.05 * (1/31) = 0.00161: R = 500 gives 0.002."""
    (problem,) = _problems(_monitor(decay={"n_resamples": 500}))
    assert problem.startswith(
        "monitors[0].decay.n_resamples: gives a smallest p of 1/(R+1) = 0.002, above the look "
        "alpha 0.00161"
    ), problem
    assert "use at least 12,400 (20 / alpha)" in problem
    _parse(_monitor(decay={"n_resamples": 12_400}))
    _parse(_monitor(decay={"n_resamples": 620}))  # 1/621 < 1/620 = alpha: it can


def test_schedules_validate_no_longer_crashes_on_or_wrongly_rejects() -> None:
    config = _parse(
        _monitor(name="leap", schedule="0 0 29 2 *"),
        _monitor(name="mondays", schedule="0 9 * * MON"),
        _monitor(name="daily", schedule="@daily"),
    )
    leap, mondays, daily = config.monitors
    assert leap.schedule.checks_per(timedelta(days=30)) == 1
    assert mondays.schedule.next_slot(T0).isoweekday() == 1
    assert daily.schedule.nominal_interval() == DAY
    problems = _problems(_monitor(schedule="0 0 30 2 *"), _monitor(name="n", schedule="0 0 31 4 *"))
    assert [p.split(":")[0] for p in problems] == ["monitors[0].schedule", "monitors[1].schedule"]
    assert all("never fires" in p for p in problems)


def test_validate_makes_each_alarm_plan_and_refuses_settings_none_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A budget too small for any CUSUM threshold passed validate, and every check was then an
    error; a reference of seconds against a daily schedule rounded rho to 1 (no plan), and is
    now planned (rho kept below 1)."""

    path = tmp_path / "monitor.toml"
    path.write_text(
        '[[monitors]]\nname = "tiny"\nscores.path = "s"\noutcomes.path = "o"\n'
        "budget.drift = 1e-15\n"
    )
    assert main(["validate", "--config", str(path)]) == 0  # opt-in: plans cost seconds
    assert main(["validate", "--plans", "--config", str(path)]) == 3
    err = capsys.readouterr().err
    assert "monitors[0].budget (tiny): no alarm plan holds these settings" in err, err
    (seconds,) = _parse(_monitor(schedule="1d", windows={"reference": "1s"})).monitors
    plan = alarm_plan(seconds)
    assert plan.rho < 1.0
    path.write_text(
        '[[monitors]]\nname = "ok"\nscores.path = "s"\noutcomes.path = "o"\n'
        'schedule = "1d"\nwindows.reference = "1s"\n'
    )
    assert main(["validate", "--plans", "--config", str(path)]) == 0


# ------------------------------------------------------------------------------ inspect_source


def _stamps(n: int, start: datetime = T0) -> np.ndarray:
    return np.datetime64(start.replace(tzinfo=None), "us") + np.arange(n) * np.timedelta64(1, "m")


def _score_file(path: Path, n: int = 50, **columns: Any) -> None:
    data: dict[str, Any] = {"timestamp": _stamps(n), "score": np.linspace(0, 1, n)}
    data.update(columns)
    write_parquet(path, {k: v for k, v in data.items() if v is not None})


def test_inspect_source_reports_every_problem_at_once(tmp_path: Path) -> None:
    root = tmp_path / "scores"
    _score_file(root / "date=2026-11-30" / "good.parquet")
    for name in ("a", "b", "c"):
        _score_file(root / "date=2026-11-29" / f"{name}.parquet", score=None, top1=np.ones(50))
    _score_file(root / "date=2026-11-28" / "text.parquet", score=np.array(["x"] * 50))
    _score_file(root / "date=2026-11-27" / "ints.parquet", timestamp=np.arange(50))
    (root / "date=2026-11-26.parquet").write_bytes(b"PAR1 not parquet at all")
    (root / "date=2026-11-25").symlink_to(tmp_path / "unmounted")
    report = inspect_source(ScoreSpec(str(root)))
    assert report.files == 7
    assert not report.ok
    text = "\n".join(report.problems)
    assert len(report.problems) == 5, text
    assert "date=2026-11-25: is a dangling symlink" in text
    assert "date=2026-11-26.parquet: cannot be read as parquet" in text
    assert "ints.parquet: column 'timestamp': is an integer column" in text
    assert "text.parquet: column 'score': has type string" in text
    assert "date=2026-11-29/a.parquet: column 'score': the score column is missing" in text
    assert "[and 2 more file(s) with the same problem]" in text
    assert "good.parquet" not in text


def test_inspect_source_checks_each_file_against_its_partition(tmp_path: Path) -> None:
    """The check a pruning read makes: a file in the wrong partition (a day's rows written
    under the day before, a typo of the year) once passed ``validate --sources`` and then
    failed the check that read it, or was never read at all."""
    root = tmp_path / "scores"
    _score_file(root / f"date={T0:%Y-%m-%d}" / "good.parquet")
    _score_file(root / f"date={T0 - DAY:%Y-%m-%d}" / "late.parquet")
    _score_file(root / f"date={T0 + 36500 * DAY:%Y-%m-%d}" / "typo.parquet")
    report = inspect_source(ScoreSpec(str(root)))
    text = "\n".join(report.problems)
    assert len(report.problems) == 2, text
    assert f"date={T0 - DAY:%Y-%m-%d}/late.parquet: column 'timestamp': holds timestamps" in text
    assert "typo.parquet: column 'timestamp': holds timestamps" in text
    assert "outside its partition" in text
    assert "good.parquet" not in text
    assert inspect_source(ScoreSpec(str(root), prune_partitions=False)).ok  # nothing pruned


def test_inspect_source_reads_footers_only(tmp_path: Path) -> None:
    path = tmp_path / "scores" / "part.parquet"
    _score_file(path, n=5000)
    # Zero the data pages, keep the footer (the last 8 + footer-length bytes) intact.
    raw = bytearray(path.read_bytes())
    footer_len = int.from_bytes(raw[-8:-4], "little")
    end = len(raw) - 8 - footer_len
    raw[4:end] = bytes(end - 4)
    path.write_bytes(bytes(raw))
    pq.read_metadata(path)  # the footer still reads
    report = inspect_source(ScoreSpec(str(path.parent)))
    assert report.ok, report.problems
    assert report.files == 1
    with pytest.raises(CorruptFileError):
        read_scores(ScoreSpec(str(path.parent)), Window(T0, T0 + DAY))


def test_inspect_source_paths_globs_and_outcome_columns(tmp_path: Path) -> None:
    missing = inspect_source(ScoreSpec(str(tmp_path / "nope")))
    assert (missing.files, len(missing.problems)) == (0, 1)
    assert "no such file or directory" in missing.problems[0]
    glob = inspect_source(ScoreSpec(str(tmp_path / "*.parquet")))
    assert glob.problems == (
        f"{tmp_path / '*.parquet'}: the glob matches no file (check the path in the configuration)",
    )
    (tmp_path / "empty").mkdir()
    assert inspect_source(ScoreSpec(str(tmp_path / "empty"))) == sources.SourceReport(
        str(tmp_path / "empty"), 0, ()
    )
    outcomes = tmp_path / "outcomes" / "part.parquet"
    write_parquet(
        outcomes,
        {
            "timestamp": _stamps(3),
            "query_id": np.array([1.5, 2.5, 3.5]),
            "outcome": np.array(["good", "bad", "good"]),
        },
    )
    spec = OutcomeSpec(str(outcomes.parent), segment_column="market")
    problems = inspect_source(spec).problems
    assert len(problems) == 3
    assert any("column 'outcome': has type string" in p for p in problems)
    assert any("column 'query_id': has type double" in p for p in problems)
    assert any("column 'market': the segment column is missing" in p for p in problems)


# ------------------------------------------------------------------------------ the commands


def _world(tmp_path: Path) -> World:
    scenario = replace(SCENARIOS["stationary"], scores_per_hour=60.0)
    start = datetime(2026, 10, 1, tzinfo=UTC)
    return write_world(tmp_path / "world", scenario, start=start, end=start + 9 * DAY, seed=3)


def test_validate_sources_exit_codes_and_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = _world(tmp_path)
    assert main(["validate", "--config", str(world.config_path), "--sources"]) == 0
    out = capsys.readouterr().out
    assert "monitors[0].scores (demo): 9 file(s), ok" in out
    assert "valid (1 monitor(s): demo)" in out
    # A wrong column in the scores and a missing outcomes path: both reported, exit 3.
    text = world.config_path.read_text()
    assert 'scores.score_column = "score"' in text
    assert 'outcomes.path = "outcomes"' in text
    broken = world.config_path.with_name("broken.toml")
    broken.write_text(
        text.replace('scores.score_column = "score"', 'scores.score_column = "top1"').replace(
            'outcomes.path = "outcomes"', 'outcomes.path = "no-such-dir"'
        )
    )
    # Plain validate is offline: the configuration itself is fine.
    assert main(["validate", "--config", str(broken)]) == 0
    capsys.readouterr()
    assert main(["validate", "--config", str(broken), "--sources"]) == 3
    captured = capsys.readouterr()
    assert "2 source problem(s)" in captured.err, captured.err
    assert "monitors[0].scores: " in captured.err
    assert "column 'top1': the score column is missing" in captured.err
    assert "[and 8 more file(s) with the same problem]" in captured.err
    assert "monitors[0].outcomes: " in captured.err
    assert "no such file or directory" in captured.err
    assert ": valid (" not in captured.out


def test_check_is_error_on_a_dangling_partition_and_exact_through_a_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    world = _world(tmp_path)
    at = (world.start + 8 * DAY).isoformat()

    def check() -> tuple[int, dict[str, Any]]:
        sources.clear_cache()
        code = main(["check", "--config", str(world.config_path), "--json", "--at", at])
        return code, json.loads(capsys.readouterr().out)["monitors"][0]

    code, before = check()
    assert before["state"] == "ok", before["reasons"]
    (world.scores_path / "loop").symlink_to(".")
    (world.outcomes_path / "date=2026-10-05" / "up").symlink_to("..")
    code, looped = check()
    assert looped["state"] == "ok"
    assert looped["input"]["n_current"] == before["input"]["n_current"]
    assert looped["input"]["n_reference"] == before["input"]["n_reference"]
    assert looped["outcome"]["n_pairs"] == before["outcome"]["n_pairs"]
    partition = world.scores_path / "date=2026-10-08"
    moved = tmp_path / "volume" / partition.name
    moved.parent.mkdir()
    partition.rename(moved)
    partition.symlink_to(tmp_path / "unmounted" / partition.name)
    code, dangling = check()
    assert code == 3
    assert dangling["state"] == "error"
    assert f"{partition}: is a dangling symlink" in dangling["error"]


def test_every_problem_of_a_monitor_is_reported_at_once() -> None:
    """configuration.md: validate reports every problem at once. A windows problem once
    returned before seed and max_segments were read, which then surfaced one fix later."""
    problems = _problems(_monitor(seed=-1, max_segments=0, windows={"current": "5m"}))
    assert len(problems) == 3, problems
    assert {p.split(":")[0] for p in problems} == {
        "monitors[0].windows.current",
        "monitors[0].seed",
        "monitors[0].max_segments",
    }
