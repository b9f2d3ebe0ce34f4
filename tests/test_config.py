"""Configuration: shape, defaults, and every problem reported at once with its path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from monitor.cli import main
from monitor.config import load_config
from monitor.errors import ConfigError

MINIMAL = """
[[monitors]]
name = "web-search"
scores.path = "data/scores"
outcomes.path = "data/outcomes"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "monitor.toml"
    path.write_text(text)
    return path


def test_minimal_config_gets_documented_defaults(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, MINIMAL))
    assert (config.server.host, config.server.port) == ("127.0.0.1", 9464)
    assert config.server.state_dir == tmp_path / "state"
    (m,) = config.monitors
    assert m.name == "web-search"
    assert m.schedule.interval == timedelta(hours=1)
    assert m.scores.path == str(tmp_path / "data/scores")
    assert m.outcomes.query_column == "query_id"
    assert m.windows.current == timedelta(days=1)
    assert m.windows.reference == timedelta(days=7)
    assert not m.windows.fixed_reference
    assert (m.drift.bins, m.drift.tolerance) == (10, 0.02)
    assert (m.decay.margin, m.budget.drift, m.budget.decay) == (0.005, 0.05, 0.05)
    assert m.budget.period == timedelta(days=30)


def test_full_config(tmp_path: Path) -> None:
    text = """
[server]
listen = "0.0.0.0:9999"
state_dir = "/var/lib/rm"

[[monitors]]
name = "a"
schedule = "0 */6 * * *"
seed = 3
scores.path = "s3://bucket/scores"
scores.score_column = "top1"
scores.segment_column = "locale"
outcomes.path = "/data/outcomes"
outcomes.segment_column = "locale"
outcomes.timestamp_unit = "ms"
windows.current = "6h"
windows.reference_start = "2026-11-01T00:00:00Z"
windows.reference_end = "2026-11-08T00:00:00+00:00"
drift.tolerance = 0.05
decay.margin = 0.0
decay.looks = 7
budget.period = "7d"
budget.decay = 0.01
max_segments = 5
"""
    config = load_config(_write(tmp_path, text))
    assert (config.server.host, config.server.port) == ("0.0.0.0", 9999)
    (m,) = config.monitors
    assert m.schedule.is_cron
    assert m.scores.path == "s3://bucket/scores"
    assert m.scores.score_column == "top1"
    assert m.outcomes.timestamp_unit == "ms"
    assert m.windows.fixed_reference
    assert m.windows.reference_start == datetime(2026, 11, 1, tzinfo=UTC)
    assert m.decay.looks == 7
    assert m.budget.period == timedelta(days=7)
    assert m.max_segments == 5
    assert m.scores.max_segments == 5  # the reader refuses more as it meets them


def test_every_problem_is_reported_with_its_path(tmp_path: Path) -> None:
    text = """
[server]
listen = "nowhere"
colour = "blue"

[[monitors]]
name = "ok-one"
scores.path = "s"
outcomes.path = "o"

[[monitors]]
name = "bad name!"
schedule = "every hour"
scores.score_column = ""
outcomes.path = "o"
windows.current = "-5m"
drift.bins = 1
decay.margin = -0.1
budget.drift = 0.9

[[monitors]]
name = "ok-one"
scores.path = "s"
outcomes.path = "o"
windows.reference = "7d"
windows.reference_start = "2026-11-01T00:00:00"
"""
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text))
    problems = info.value.problems
    expected_prefixes = [
        "server.listen:",
        "server.colour: unknown key",
        "monitors[1].name:",
        "monitors[1].schedule:",
        "monitors[1].scores.path: is required",
        "monitors[1].scores.score_column:",
        "monitors[1].windows.current:",
        "monitors[1].drift.bins:",
        "monitors[1].decay.margin:",
        "monitors[1].budget.drift:",
        "monitors[2].windows.reference_start: must carry a timezone",
        "monitors[2].windows: give either reference",
    ]
    for prefix in expected_prefixes:
        assert any(p.startswith(prefix) for p in problems), (prefix, problems)
    assert "-5m" in next(p for p in problems if p.startswith("monitors[1].windows.current"))
    assert len(problems) >= len(expected_prefixes)


def test_duplicate_names_and_missing_monitors(tmp_path: Path) -> None:
    dup = MINIMAL + MINIMAL
    with pytest.raises(ConfigError, match=r"monitors\[1\].name: duplicates monitors\[0\]"):
        load_config(_write(tmp_path, dup))
    with pytest.raises(ConfigError, match="at least one"):
        load_config(_write(tmp_path, "[server]\n"))


def test_segment_columns_go_together(tmp_path: Path) -> None:
    text = MINIMAL + 'scores.segment_column = "locale"\n'
    with pytest.raises(ConfigError, match="must be set together"):
        load_config(_write(tmp_path, text))


def test_unreadable_and_invalid_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(_write(tmp_path, "[[monitors]\nname="))
    latin = tmp_path / "latin1.toml"
    latin.write_bytes(MINIMAL.replace("web-search", "r\u00e9sum\u00e9").encode("latin-1"))
    with pytest.raises(ConfigError, match="cannot read the file: 'utf-8' codec can't decode"):
        load_config(latin)  # once a UnicodeDecodeError traceback, exit 1 (check: data_drift)


def test_validate_command_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _write(tmp_path, MINIMAL)
    assert main(["validate", "--config", str(good)]) == 0
    assert "valid" in capsys.readouterr().out
    bad = tmp_path / "bad.toml"
    bad.write_text(MINIMAL.replace('name = "web-search"', 'name = ""\nschedule = "5x"'))
    assert main(["validate", "--config", str(bad)]) == 3
    err = capsys.readouterr().err
    assert "monitors[0].name:" in err
    assert "monitors[0].schedule:" in err


@pytest.mark.parametrize("gap", ['"0s"', '"0m"', '"0h"', '"0.0d"', "0"])
def test_a_zero_gap_may_be_spelt_in_any_unit(tmp_path: Path, gap: str) -> None:
    """windows.gap defaults to "0s"; "0m" was refused as not a positive duration."""
    config = load_config(_write(tmp_path, MINIMAL + f"windows.gap = {gap}\n"))
    assert config.monitors[0].windows.gap == timedelta(0)


@pytest.mark.parametrize(
    "line",
    [
        'windows.reference = "1000000d"',
        'windows.current = "36526d"',
        'schedule = "1000000d"',
        'budget.period = "99999w"',
    ],
)
def test_durations_past_a_century_are_refused_naming_the_key(tmp_path: Path, line: str) -> None:
    """``windows.reference = "1000000d"`` passed validate, then check and backtest died on
    ``OverflowError: date value out of range`` (a traceback, exit 1)."""
    key = line.split(" = ")[0].replace(".", r"\.")
    with pytest.raises(ConfigError, match=rf"monitors\[0\]\.{key}: .*at most 36525d"):
        load_config(_write(tmp_path, MINIMAL + line + "\n"))


def test_a_fixed_reference_may_end_in_a_lowercase_z(tmp_path: Path) -> None:
    """RFC 3339 allows 'z' for UTC as well as 'Z'."""
    text = MINIMAL + (
        'windows.reference_start = "2026-03-01T00:00:00z"\n'
        'windows.reference_end = "2026-03-08T00:00:00Z"\n'
    )
    windows = load_config(_write(tmp_path, text)).monitors[0].windows
    assert windows.reference_start == datetime(2026, 3, 1, tzinfo=UTC)


@pytest.mark.parametrize("name", [".", "..", "..."])
def test_a_monitor_named_only_dots_is_refused(tmp_path: Path, name: str) -> None:
    """A name becomes file names under state_dir: "." and ".." put the monitor's grid and
    buckets in the state directory itself (or its parent), outside the cache's bound."""
    text = f'[[monitors]]\nname = "{name}"\nscores.path = "s"\noutcomes.path = "o"\n'
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text))
    assert [p for p in info.value.problems if p.startswith("monitors[0].name:")] == [
        f"monitors[0].name: must hold a character other than '.' (it names files); got {name!r}"
    ]
    ok = text.replace(f'"{name}"', '".a."')
    assert load_config(_write(tmp_path, ok)).monitors[0].name == ".a."


@pytest.mark.parametrize(
    ("extra", "engine", "only"),
    [
        # a bad cron: the window rule then ran against the default 1h interval
        ('schedule = "0 25 * * *"\nwindows.current = "30m"\n', "", "monitors[0].schedule:"),
        # a bad bucket: the bucket rules then ran against the default 1h bucket
        (
            'schedule = "30m"\nwindows.current = "90m"\n',
            '[engine]\nkind = "local"\nsummary.bucket = "2x"\n',
            "engine.summary.bucket:",
        ),
        (
            'schedule = "30m"\nwindows.current = "90m"\n',
            '[engine]\nkind = "local"\nsummary.bucket = "2d"\n',
            "engine.summary.bucket:",
        ),
    ],
)
def test_a_bad_value_is_reported_once_not_again_through_the_rules_it_feeds(
    tmp_path: Path, extra: str, engine: str, only: str
) -> None:
    """The checks across settings ran on the defaults that stood in for a value that did not
    parse, adding errors about values the user never wrote."""
    text = f'{engine}[[monitors]]\nname = "a"\nscores.path = "s"\noutcomes.path = "o"\n{extra}'
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text))
    problems = info.value.problems
    assert len(problems) == 1, problems
    assert problems[0].startswith(only)


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        # past the timestamps data can hold: validate crashed (year 1), or passed and every
        # check failed (year 1000, 9999)
        (
            'windows.reference_start = "0001-01-01T00:00:00+01:00"\n'
            'windows.reference_end = "2026-03-08T00:00:00Z"\n',
            r"windows\.reference_start: must be an RFC 3339 timestamp within 1677-09-22",
        ),
        (
            'windows.reference_start = "2026-03-01T00:00:00Z"\n'
            'windows.reference_end = "9999-01-01T00:00:00Z"\n',
            r"windows\.reference_end: must be an RFC 3339 timestamp within",
        ),
        # an integer too large for a float: a traceback
        ("budget.drift = " + "9" * 400 + "\n", r"budget\.drift: must be a number in"),
        # a look cadence that rounds to 0: a division by zero
        ("decay.looks = 10000000000000\n", r"decay\.looks: must be an integer in \[1, 1000000\]"),
        # false == 0 was a zero duration
        ("windows.gap = false\n", r"windows\.gap: must be a duration string"),
        ("decay.settle = false\n", r"decay\.settle: must be a duration string"),
        # accepted and ignored
        ("scores.top_rank = 5\n", r"scores\.top_rank: applies only with rank_column"),
    ],
)
def test_values_past_what_a_check_can_use_are_refused_naming_the_key(
    tmp_path: Path, lines: str, problem: str
) -> None:
    with pytest.raises(ConfigError, match=rf"monitors\[0\]\.{problem}"):
        load_config(_write(tmp_path, MINIMAL + lines))


def test_a_final_newline_is_no_part_of_a_name_or_a_url(tmp_path: Path) -> None:
    """``$`` matches before a final newline: ``name = "web\\n"`` became a label and a state
    file other than ``web``'s, and a runbook URL got a newline before its ``#``."""
    text = (
        '[report]\nrunbook_url = "https://x.example/runbook\\n"\n'
        '[[monitors]]\nname = "web\\n"\nscores.path = "s"\noutcomes.path = "o"\n'
    )
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, text))
    text = "\n".join(info.value.problems)
    assert "monitors[0].name: must match" in text
    assert "report.runbook_url: must be an http:// or https:// URL" in text


def _all_problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return info.value.problems


def test_every_problem_at_once_across_typos_duplicates_and_lists(tmp_path: Path) -> None:
    """A typo beside the values (an unknown key) once hid every check across settings until
    it was fixed; a duplicate of a monitor with problems of its own went unsaid; a list of
    metric names stopped at its first bad one."""
    problems = _all_problems(
        _write(
            tmp_path,
            MINIMAL.replace('name = "web-search"', 'name = "web"')
            + 'schedule = "3h"\nwindows.current = "1h"\ndecay.margn = 0.01\n'
            + MINIMAL.replace('name = "web-search"', 'name = "web"')
            + '[[monitors]]\nname = "judged"\nscores.path = "s"\noutcomes.kind = "judged_runs"\n'
            + 'outcomes.runs = "r"\noutcomes.judgments = "j"\n'
            + 'outcomes.report = ["foo", "ndcg@10", "bar@x"]\n',
        )
    )
    assert any(p.startswith("monitors[0].decay.margn: unknown key") for p in problems)
    assert any(p.startswith("monitors[0].windows.current: 1h is shorter") for p in problems)
    assert any(p.startswith("monitors[1].name: duplicates monitors[0].name") for p in problems)
    (report,) = [p for p in problems if p.startswith("monitors[2].outcomes.report")]
    for part in ("[0]:", "'foo'", "[2] 'bar@x'"):
        assert part in report, report


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # `--monitor -web` reads as a flag: the name could never be checked by it
        (MINIMAL.replace('"web-search"', '"-web"'), "monitors[0].name: must match"),
        # arrays nested hundreds deep: once a traceback, no problem line
        (MINIMAL + "x = " + "[" * 600 + "]" * 600 + "\n", "not valid TOML: nested too deeply"),
    ],
)
def test_names_and_nesting_that_would_break_later_are_refused(
    tmp_path: Path, text: str, expected: str
) -> None:
    assert any(p.startswith(expected) for p in _all_problems(_write(tmp_path, text)))


def test_a_state_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    """The daemon ran with it, and never saved a state or a history."""
    (tmp_path / "afile").write_text("")
    for state_dir in ("afile", "afile/below"):
        text = f'[server]\nstate_dir = "{state_dir}"\n' + MINIMAL
        problems = _all_problems(_write(tmp_path, text))
        assert problems == [f"server.state_dir: {tmp_path / 'afile'} exists and is not a directory"]
    load_config(_write(tmp_path, '[server]\nstate_dir = "new/state"\n' + MINIMAL))  # not yet
