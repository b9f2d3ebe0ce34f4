"""A world on disk: the score and outcome logs in daily parquet partitions and a monitor
configuration that reads them (the only part of the simulator that writes files)."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt

from monitor.errors import StatsInputError
from monitor.simulate.generate import _span, generate_outcomes, generate_scores
from monitor.simulate.scenario import Scenario, TimeLike, World

# --------------------------------------------------------------------------------------------
# files


def _toml_string(value: str) -> str:
    # JSON string escapes (\", \\, \n, \uXXXX) are valid TOML basic-string escapes.
    return json.dumps(value, ensure_ascii=False)


def config_text(
    scenario: Scenario, *, monitor_name: str, schedule: str, listen: str, seed: int, extra: str
) -> str:
    """The TOML configuration of a world written by ``write_world`` (``extra`` appended)."""
    lines = [
        "[server]",
        f"listen = {_toml_string(listen)}",
        'state_dir = "state"',
        "",
        "[[monitors]]",
        f"name = {_toml_string(monitor_name)}",
        f"schedule = {_toml_string(schedule)}",
        f"seed = {seed}",
        'scores.path = "scores"',
        'scores.timestamp_column = "timestamp"',
        'scores.score_column = "score"',
    ]
    if scenario.has_segments:
        lines.append('scores.segment_column = "segment"')
    lines += [
        'outcomes.path = "outcomes"',
        'outcomes.timestamp_column = "timestamp"',
        'outcomes.query_column = "query_id"',
        'outcomes.outcome_column = "outcome"',
    ]
    if scenario.has_segments:
        lines.append('outcomes.segment_column = "segment"')
    lines += ['windows.current = "1d"', 'windows.reference = "7d"']
    text = "\n".join(lines) + "\n"
    if extra:
        text += extra if extra.endswith("\n") else extra + "\n"
    return text


def split_by_day(
    timestamps: npt.NDArray[np.datetime64], columns: dict[str, np.ndarray]
) -> Sequence[tuple[str, dict[str, np.ndarray]]]:
    """Rows (sorted by time) cut into one piece per UTC day, as (``YYYY-MM-DD``, columns)."""
    days = timestamps.astype("datetime64[D]")
    if days.size == 0:
        return []
    cuts = np.flatnonzero(days[1:] != days[:-1]) + 1
    bounds = np.concatenate([[0], cuts, [days.size]])
    return [
        (str(days[a]), {k: v[a:b] for k, v in columns.items()})
        for a, b in itertools.pairwise(bounds.tolist())
    ]


def write_world(
    directory: str | Path,
    scenario: Scenario,
    *,
    start: TimeLike,
    end: TimeLike,
    seed: int,
    monitor_name: str = "demo",
    schedule: str = "1h",
    listen: str = "127.0.0.1:9464",
    extra_monitor_toml: str = "",
) -> World:
    """Write the world ``(scenario, origin=start, seed)`` over ``[start, end)`` under ``directory``.

    Layout: ``scores/date=YYYY-MM-DD/part-0.parquet`` (timestamp, score[, segment]),
    ``outcomes/date=YYYY-MM-DD/part-0.parquet`` (timestamp, query_id, outcome[, segment]), one file
    per UTC day that has rows, and ``monitor.toml`` (paths relative to it; ``seed`` is the world's
    seed; ``extra_monitor_toml`` is appended verbatim inside the ``[[monitors]]`` table).
    Existing files at those paths are replaced atomically (write, then rename), so a demo may
    call this again with a later ``end`` to let its world grow under a running daemon: the
    world is deterministic, so earlier days are rewritten identically.
    """
    if not (isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):
        raise StatsInputError(f"`seed` must be a non-negative integer; got {seed!r}.")
    # Imported here so that generating worlds in memory (the benchmark) never loads pyarrow.
    from monitor.sources import write_parquet

    root = Path(directory)
    t0, t1, _ = _span(start, end, None)
    scores = generate_scores(scenario, t0, t1, rng=seed)
    outcomes = generate_outcomes(scenario, t0, t1, rng=seed)
    for name, log in (("scores", scores), ("outcomes", outcomes)):
        # made even when the log has no row in the span (a dead feed, a span before the first
        # evaluation run): the config names it, and a missing directory read as a broken
        # config (error), not as a feed with nothing new (insufficient_data)
        (root / name).mkdir(parents=True, exist_ok=True)
        for date, cols in split_by_day(log.timestamps, log.columns()):
            target = root / name / f"date={date}" / "part-0.parquet"
            # Write beside and rename, so a daemon reading while a demo rewrites its world never
            # sees half a file (readers skip names that start with a dot, as pyarrow does).
            hidden = target.with_name(f".{target.name}.tmp")
            write_parquet(hidden, cols)
            os.replace(hidden, target)
    config_path = root / "monitor.toml"
    config_path.write_text(
        config_text(
            scenario,
            monitor_name=monitor_name,
            schedule=schedule,
            listen=listen,
            seed=seed,
            extra=extra_monitor_toml,
        )
    )
    return World(
        directory=root,
        config_path=config_path,
        scores_path=root / "scores",
        outcomes_path=root / "outcomes",
        scenario=scenario,
        start=t0.astype(datetime).replace(tzinfo=UTC),
        end=t1.astype(datetime).replace(tzinfo=UTC),
        seed=seed,
    )
