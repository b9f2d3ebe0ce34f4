"""Simulated golden-set evaluation runs and graded judgments (``outcomes.kind = "judged_runs"``).

A world of ``n_queries`` golden queries, each with ``judged`` judged documents (grades 0-3 drawn
once) and a pool of unjudged ones. Every evaluation run (``evaluations_per_day`` a day, the
first at ``first_run_hour`` UTC) ranks, per query, the documents by a noisy score
``quality * grade + N(0, 1)`` (unjudged: ``N(0, 1) - 2``, as in a pooled golden set whose top
results were judged) and logs the top ``results``; the logged score is ``sigmoid(score - 2)``,
so calibration has probabilities to read. Effects, each from an offset after ``start``:

* ``decay_start``: ``quality`` becomes ``decayed_quality`` (a real loss of quality);
* ``holes_start``: ``holes`` fresh, never judged documents take the top ranks of every list
  (nDCG falls although the ranking of judged documents is unchanged: a judgment hole);
* ``rejudge_at``: a second judgment version ``version=v2`` changes ``rejudged_share`` of the
  grades (written beside ``version=v1``; both windows are scored with the latest).

The drift side gets the stationary world's top-1 score log (``monitor.simulate``,
``scores_per_hour``), so a monitor on this world decides both sides. Used by the tests, the
benchmark and the docs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import numpy as np

from monitor.errors import ConfigError

__all__ = ["RunsWorld", "write_runs_world"]

_GRADE_P = (0.5, 0.25, 0.15, 0.1)


@dataclass(frozen=True, slots=True)
class RunsWorld:
    """The parameters of a judged-runs world (see the module docstring)."""

    n_queries: int = 200
    judged: int = 30
    results: int = 100
    evaluations_per_day: int = 1
    first_run_hour: int = 2
    quality: float = 1.5
    decayed_quality: float = 0.9
    decay_start: timedelta | None = None
    holes: int = 3
    holes_start: timedelta | None = None
    rejudge_at: timedelta | None = None
    rejudged_share: float = 0.3
    scores_per_hour: int = 300
    segments: tuple[str, ...] = ()  # query q in segments[q % len]; scores spread evenly

    def __post_init__(self) -> None:
        """Every bad field at once (``ConfigError``), as ``Scenario`` does: 0 evaluations a day
        was a ZeroDivisionError, -1 walked back from ``start`` until an OverflowError."""
        problems = [
            f"{name} must be an integer {what}; got {value!r}"
            for name, lo, hi, what in (
                ("n_queries", 1, None, ">= 1"),
                ("judged", 1, None, ">= 1"),
                ("results", 1, None, ">= 1"),
                ("evaluations_per_day", 1, 24, "from 1 to 24"),
                ("first_run_hour", 0, 23, "from 0 to 23"),
                ("holes", 0, None, ">= 0"),
                ("scores_per_hour", 1, None, ">= 1"),
            )
            if not _int_within(value := getattr(self, name), lo, hi)
        ]
        for name in ("quality", "decayed_quality"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
            ):
                problems.append(f"{name} must be a finite number; got {value!r}")
        share = self.rejudged_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1:
            problems.append(f"rejudged_share must be a number from 0 to 1; got {share!r}")
        for name in ("decay_start", "holes_start", "rejudge_at"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, timedelta) or value < timedelta(0)):
                problems.append(f"{name} must be a non-negative timedelta or None; got {value!r}")
        if not isinstance(self.segments, tuple) or not all(
            isinstance(x, str) and x for x in self.segments
        ):
            problems.append(f"segments must be a tuple of names; got {self.segments!r}")
        if problems:
            raise ConfigError(problems, source="RunsWorld")


def _int_within(value: object, lo: int, hi: int | None) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= lo
        and (hi is None or value <= hi)
    )


def _run_times(world: RunsWorld, start: datetime, end: datetime) -> list[datetime]:
    step = timedelta(days=1) / world.evaluations_per_day
    t = start.replace(hour=world.first_run_hour, minute=0, second=0, microsecond=0)
    out = []
    while t < end:
        if t >= start:
            out.append(t)
        t += step
    return out


def _grades(world: RunsWorld, g: np.random.Generator) -> np.ndarray:
    return g.choice(4, size=(world.n_queries, world.judged), p=_GRADE_P).astype(np.float64)


def write_runs_world(
    directory: str | Path,
    world: RunsWorld,
    *,
    start: datetime,
    end: datetime,
    seed: int,
    fmt: Literal["parquet", "trec"] = "parquet",
    name: str = "golden",
    extra_outcomes_toml: str = "",
    extra_monitor_toml: str = "",
) -> Path:
    """Write runs, judgments, a score log and ``monitor.toml`` under ``directory``; returns the
    configuration's path. ``fmt = "trec"`` writes TREC run files (one per run, named by its UTC
    time) and TREC qrels instead of parquet."""
    from monitor.sources import write_parquet  # the only pyarrow user, imported on use

    if not start < end:  # before anything is written: no half world on disk
        raise ValueError(f"`start` must be before `end`; got {start} and {end}.")
    # the runs are at first_run_hour UTC and their files and rows are stamped in UTC: a start
    # in another zone once put them at that hour local time, stamped as UTC
    start, end = (t if t.tzinfo is None else t.astimezone(UTC) for t in (start, end))
    root = Path(directory)
    g = np.random.default_rng(seed)
    grades = _grades(world, g)
    changed = g.random(grades.shape) < world.rejudged_share
    regraded = np.where(changed, _grades(world, g), grades)
    versions = [("v1", grades)] + ([("v2", regraded)] if world.rejudge_at is not None else [])
    for version, table in versions:
        q = np.repeat(np.arange(world.n_queries), world.judged)
        d = np.tile(np.arange(world.judged), world.n_queries)
        qid = np.char.add("q", q.astype(str))
        did = np.char.add(np.char.add(qid, "-j"), d.astype(str))
        target = root / "qrels" / f"version={version}"
        target.mkdir(parents=True, exist_ok=True)
        if fmt == "trec":
            lines = [f"{a} 0 {b} {int(c)}" for a, b, c in zip(qid, did, table.ravel(), strict=True)]
            (target / "qrels.txt").write_text("\n".join(lines) + "\n")
        else:
            write_parquet(
                target / "qrels.parquet", {"query_id": qid, "doc_id": did, "grade": table.ravel()}
            )
    pool = world.results
    for i, t in enumerate(_run_times(world, start, end)):
        offset = t - start
        quality = world.quality
        if world.decay_start is not None and offset >= world.decay_start:
            quality = world.decayed_quality
        judged_score = quality * grades + g.standard_normal(grades.shape)
        unjudged_score = g.standard_normal((world.n_queries, pool)) - 2.0
        scores = np.concatenate([judged_score, unjudged_score], axis=1)
        names = [f"-j{k}" for k in range(world.judged)] + [f"-u{k}" for k in range(pool)]
        holes = world.holes_start is not None and offset >= world.holes_start
        if holes:
            top = scores.max(axis=1, keepdims=True) + 1.0 + g.random((world.n_queries, world.holes))
            scores = np.concatenate([scores, top], axis=1)
            names += [f"-new{i}-{k}" for k in range(world.holes)]
        order = np.argsort(-scores, axis=1, kind="stable")[:, : world.results]
        top_scores = np.take_along_axis(scores, order, axis=1)
        prob = 1.0 / (1.0 + np.exp(-(top_scores - 2.0)))
        suffix = np.asarray(names)[order]
        qid = np.char.add("q", np.arange(world.n_queries).astype(str))[:, None]
        did = np.char.add(np.broadcast_to(qid, suffix.shape), suffix)
        rank = np.broadcast_to(np.arange(1, world.results + 1), suffix.shape)
        stamp = t.strftime("%Y-%m-%dT%H%M%SZ")
        if fmt == "trec":
            target = root / "runs" / f"run-{stamp}.trec"
            target.parent.mkdir(parents=True, exist_ok=True)
            lines = [
                f"{q} Q0 {d} {r} {s:.17g} sim"
                for q, d, r, s in zip(
                    np.broadcast_to(qid, suffix.shape).ravel(),
                    did.ravel(),
                    rank.ravel(),
                    prob.ravel(),
                    strict=True,
                )
            ]
            target.write_text("\n".join(lines) + "\n")
        else:
            target = root / "runs" / f"date={t.date().isoformat()}" / f"run-{stamp}.parquet"
            n = did.size
            write_parquet(
                target,
                {
                    "timestamp": np.full(n, np.datetime64(t.replace(tzinfo=None), "us")),
                    "query_id": np.broadcast_to(qid, suffix.shape).ravel(),
                    "doc_id": did.ravel(),
                    "rank": rank.ravel().astype(np.int64),
                    "score": prob.ravel(),
                    **_segment_column(world, np.repeat(np.arange(world.n_queries), world.results)),
                },
            )
    _write_scores(root, world, start, end, seed)
    judgments_dir = "qrels"
    segments = (
        'scores.segment_column = "segment"\noutcomes.segment_column = "segment"\n'
        if world.segments
        else ""
    )
    config = root / "monitor.toml"
    config.write_text(
        f"""[server]
listen = "127.0.0.1:0"
state_dir = "state"

[[monitors]]
name = "{name}"
schedule = "1h"
seed = {seed}
scores.path = "scores"
outcomes.kind = "judged_runs"
outcomes.runs = "runs"
outcomes.judgments = "{judgments_dir}"
{segments}{extra_outcomes_toml}{extra_monitor_toml}"""
    )
    return config


def _write_scores(root: Path, world: RunsWorld, start: datetime, end: datetime, seed: int) -> None:
    """The stationary world's top-1 score log (``monitor.simulate``), one file per UTC day."""
    from monitor.simulate import SCENARIOS, generate_scores, split_by_day
    from monitor.sources import write_parquet

    scenario = dataclasses.replace(SCENARIOS["stationary"], scores_per_hour=world.scores_per_hour)
    log = generate_scores(scenario, start, end, rng=seed)
    for date, cols in split_by_day(log.timestamps, log.columns()):
        index = np.arange(cols["score"].size)
        write_parquet(
            root / "scores" / f"date={date}" / "part-0.parquet",
            {**cols, **_segment_column(world, index)},
        )


def _segment_column(world: RunsWorld, index: np.ndarray) -> dict[str, np.ndarray]:
    if not world.segments:
        return {}
    names = np.asarray(world.segments)
    return {"segment": names[index % names.size]}
