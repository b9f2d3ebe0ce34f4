"""Every key ``monitor check --json`` emits is documented in ``docs/check-json.md``, and back.

Real worlds from the repository's generators (drift, decay, too few pairs, a missing source,
segments, judged runs with segments) are checked through ``monitor.cli.main``; every key path of
the output is collected (list items as ``[]``) and must be the first cell of a row of the field
reference, whose type column must admit every value seen. A field added to the output without
a row fails here, and so does a row for a field the output no longer has.

Paths are canonical: keys that are data (metric names) read ``<metric>``, the ``reference`` and
``current`` objects of ``judgments`` and ``outcome.calibration`` read ``<window>``, and objects
that repeat another block's fields (a segment's ``input`` and ``outcome``, the outcome's
calibration objects) have a row of their own and are checked against that block's rows.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from monitor.cli import main
from monitor.simulate import SCENARIOS, write_world
from monitor.simulate_runs import RunsWorld, write_runs_world

DOC = Path(__file__).resolve().parent.parent / "docs" / "check-json.md"

START = datetime(2026, 10, 1, tzinfo=UTC)
END = START + timedelta(days=18)
AT = START + timedelta(days=17)  # effects start on day 15 in the presets
RUNS_START = datetime(2026, 3, 2, tzinfo=UTC)  # a Monday
RUNS_AT = RUNS_START + timedelta(days=11, hours=3)  # the first check after the day-11 run
REPLAY = timedelta(hours=48)  # --replay-from: two days of slots, not a budget period's 720

#: objects keyed by data (metric names): their keys read ``<metric>``
KEYED_BY_METRIC = {"monitors[].outcome.metrics", "monitors[].judgments.<window>.means"}
#: objects whose ``reference`` and ``current`` keys read ``<window>``
BY_WINDOW = {"monitors[].judgments", "monitors[].outcome.calibration"}
#: objects with another block's fields: checked against that block's rows
ALIASES = {
    "monitors[].segments[].input": "monitors[].input",
    "monitors[].segments[].outcome": "monitors[].outcome",
    "monitors[].outcome.calibration.<window>": "monitors[].judgments.<window>.calibration",
}

_ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+?) \|")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": _is_int,
    "number": lambda v: _is_int(v) or isinstance(v, float),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array of strings": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "array of objects": lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
}


def documented(text: str) -> dict[str, str]:
    """The field reference's rows: path -> type cell."""
    rows: dict[str, str] = {}
    for line in text.splitlines():
        m = _ROW.match(line)
        if m:
            assert m[1] not in rows, f"{m[1]} has two rows in {DOC.name}"
            rows[m[1]] = m[2].strip()
    return rows


def _child(path: str, key: str) -> str:
    if path in KEYED_BY_METRIC:
        return f"{path}.<metric>"
    if path in BY_WINDOW and key in ("reference", "current"):
        return f"{path}.<window>"
    return f"{path}.{key}" if path else key


def collect(
    value: Any, path: str = "", seen: dict[str, list[Any]] | None = None
) -> dict[str, list[Any]]:
    """Every key path under ``value`` (canonical, see the module docstring) with its values."""
    seen = {} if seen is None else seen
    if isinstance(value, dict):
        for key, child in value.items():
            sub = _child(path, key)
            seen.setdefault(sub, []).append(child)
            collect(child, ALIASES.get(sub, sub), seen)
    elif isinstance(value, list):
        for item in value:
            collect(item, f"{path}[]", seen)
    return seen


def _refuse_non_finite(token: str) -> float:
    raise AssertionError(f"check --json printed {token}: non-finite numbers must be null")


def _check(config: Path, at: datetime) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(
            [
                "check",
                "--config",
                str(config),
                "--json",
                "--at",
                at.isoformat(),
                "--replay-from",
                (at - REPLAY).isoformat(),
            ]
        )
    doc: dict[str, Any] = json.loads(out.getvalue(), parse_constant=_refuse_non_finite)
    return doc


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """``check --json`` of each world, by the case it covers."""
    root = tmp_path_factory.mktemp("json-contract")

    def world(name: str, scenario: str, **changes: Any) -> Path:
        s = replace(SCENARIOS[scenario], scores_per_hour=400.0, **changes)
        return write_world(root / name, s, start=START, end=END, seed=11).config_path

    configs = {
        "drift": world("drift", "covariate_shift"),
        "decay": world("decay", "abrupt_decay"),
        "insufficient": world("insufficient", "small_golden_set"),
        # the score feed dies 20 minutes into the current window: too few scores to decide
        "few_scores": world(
            "few_scores", "covariate_shift", scores_stop=timedelta(days=16, minutes=20)
        ),
        "segments": world("segments", "segment_drift"),
        "error": world("error", "stationary"),
    }
    shutil.rmtree(configs["error"].parent / "scores")  # a missing source
    out = {name: _check(config, AT) for name, config in configs.items()}
    judged = write_runs_world(
        root / "judged",
        RunsWorld(n_queries=60, decay_start=timedelta(days=10, hours=1), segments=("a", "b")),
        start=RUNS_START,
        end=RUNS_START + timedelta(days=12),
        seed=7,
    )
    out["judged"] = _check(judged, RUNS_AT)
    return out


@pytest.fixture(scope="module")
def emitted(outputs: dict[str, dict[str, Any]]) -> dict[str, list[Any]]:
    seen: dict[str, list[Any]] = {}
    for doc in outputs.values():
        collect(doc, "", seen)
    return seen


@pytest.fixture(scope="module")
def rows() -> dict[str, str]:
    return documented(DOC.read_text(encoding="utf-8"))


def test_the_worlds_cover_every_state_and_block(outputs: dict[str, dict[str, Any]]) -> None:
    state = {name: doc["monitors"][0]["state"] for name, doc in outputs.items()}
    assert state == {
        "drift": "data_drift",
        "decay": "model_decay",
        "insufficient": "insufficient_data",
        "few_scores": "insufficient_data",
        "segments": state["segments"],  # whatever it decides: it is here for its segments
        "error": "error",
        "judged": "model_decay",
    }
    assert "scores" in outputs["error"]["monitors"][0]["error"]
    assert outputs["insufficient"]["monitors"][0]["outcome"]["decidable"] is False
    few = outputs["few_scores"]["monitors"][0]["input"]
    assert (few["decidable"], few["psi"]) == (False, None)
    assert len(outputs["segments"]["monitors"][0]["segments"]) == 3
    judged = outputs["judged"]["monitors"][0]
    assert judged["outcome"]["new_look"] is True
    assert judged["judgments"]["current"]["calibration"] is not None
    assert [s["segment"] for s in judged["segments"]] == ["a", "b"]
    for doc in outputs.values():
        (m,) = doc["monitors"]
        assert doc["at"] == m["at"]  # slots of an hourly schedule: the time asked is a slot


def test_every_emitted_key_is_documented(
    emitted: dict[str, list[Any]], rows: dict[str, str]
) -> None:
    missing = sorted(set(emitted) - set(rows))
    assert not missing, f"keys check --json emits without a row in docs/{DOC.name}: {missing}"


def test_every_documented_key_is_emitted(
    emitted: dict[str, list[Any]], rows: dict[str, str]
) -> None:
    """A row for a key no world emits is a stale row (or a world this test lacks)."""
    stale = sorted(set(rows) - set(emitted))
    assert not stale, f"rows of docs/{DOC.name} that no checked world emitted: {stale}"


def test_every_value_has_its_documented_type(
    emitted: dict[str, list[Any]], rows: dict[str, str]
) -> None:
    wrong = []
    for path, values in sorted(emitted.items()):
        cell = rows.get(path)
        if cell is None:
            continue  # test_every_emitted_key_is_documented says so
        nullable = cell.endswith(" or null")
        base = cell.removesuffix(" or null")
        assert base in TYPES, f"{path}: unknown type {cell!r} in docs/{DOC.name}"
        for v in values:
            if not ((v is None and nullable) or (v is not None and TYPES[base](v))):
                wrong.append(f"{path}: {v!r} is not {cell}")
                break
    assert not wrong, wrong
