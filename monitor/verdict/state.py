"""The sequential state a monitor carries from check to check, and its validation."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from monitor.verdict._common import STATE_VERSION, STATES, _iso, _parse_iso
from monitor.verdict.reports import OutcomeReport


def _kept_json(obj: Anchor | DecayTrack) -> str:
    """``obj.to_dict()`` as the state file's compact JSON with sorted keys, made once and kept
    on ``obj`` (its ``_json``): a part saved unchanged at every check."""
    text = obj._json
    if text is None:
        text = json.dumps(obj.to_dict(), separators=(",", ":"), sort_keys=True, allow_nan=False)
        object.__setattr__(obj, "_json", text)
    return text


@dataclass(frozen=True, slots=True)
class DriftTrack:
    """Sequential state of one drift track of one segment: CUSUM and alarm.

    ``quiet`` counts the consecutive blocks whose debiased PSI is in the clearing band;
    ``clear_cusum`` is the clearing CUSUM of a raised track, ``max(0, C - z - k)`` over the same
    block z's the alarm's CUSUM adds (0 while the track is not raised)."""

    cusum: float = 0.0
    active: bool = False
    active_since: datetime | None = None
    quiet: int = 0
    clear_cusum: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "cusum": self.cusum,
            "active": self.active,
            "active_since": _iso(self.active_since),
            "quiet": self.quiet,
            "clear_cusum": self.clear_cusum,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DriftTrack:
        def statistic(key: str, what: str) -> float:  # a CUSUM: finite, >= 0, 0 when absent
            value = float(d.get(key, 0.0))
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{what} must be a finite number >= 0; got {value!r}")
            return value

        cusum = statistic("cusum", "drift CUSUM")
        clear = statistic("clear_cusum", "clearing CUSUM")  # absent in files written before it
        return cls(
            cusum=cusum,
            active=bool(d.get("active", False)),
            active_since=_parse_iso(d.get("active_since")),
            quiet=int(d.get("quiet", 0)),
            clear_cusum=clear,
        )


@dataclass(frozen=True, slots=True)
class Anchor:
    """A frozen drift reference kept as per-phase bin counts (``counts``: phases x bins)."""

    edges: tuple[float, ...]
    counts: tuple[tuple[float, ...], ...]
    start: datetime
    end: datetime
    set_at: datetime
    # ``to_dict`` and its JSON made once: an anchor is saved with the state at every check
    # (twice: the state before the last slot holds it too), unchanged
    _saved: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)
    _json: str | None = field(default=None, init=False, repr=False, compare=False)
    # ``counts`` and ``edges`` as read-only float64 arrays, made once (the verdict and a check's
    # grid use them at every check)
    array: np.ndarray = field(init=False, repr=False, compare=False)
    edge_array: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, values in (("array", self.counts), ("edge_array", self.edges)):
            a = np.asarray(values, dtype=np.float64)
            a.flags.writeable = False
            object.__setattr__(self, name, a)

    def to_dict(self) -> dict[str, Any]:
        """The anchor as the state file holds it (the same dict each time: do not mutate)."""
        if self._saved is None:
            saved = {
                "edges": list(self.edges),
                "counts": [[int(x) if x.is_integer() else x for x in row] for row in self.counts],
                "start": _iso(self.start),
                "end": _iso(self.end),
                "set_at": _iso(self.set_at),
            }
            object.__setattr__(self, "_saved", saved)
            return saved
        return self._saved

    def to_json(self) -> str:
        """``to_dict`` as compact JSON with sorted keys (what ``json.dumps`` of the state
        writes for it), encoded once."""
        return _kept_json(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Anchor:
        edges = tuple(float(x) for x in d["edges"])
        counts = tuple(tuple(float(x) for x in row) for row in d["counts"])
        if any(len(row) != len(edges) + 1 for row in counts) or not counts:
            raise ValueError("anchor counts must have one row per phase, len(edges) + 1 each")
        if not all(math.isfinite(x) and x >= 0 for row in counts for x in row):
            raise ValueError("anchor counts must be finite and >= 0")
        start, end, set_at = (_parse_iso(d.get(k)) for k in ("start", "end", "set_at"))
        if start is None or end is None or set_at is None:
            raise ValueError("anchor needs start, end and set_at")
        return cls(edges=edges, counts=counts, start=start, end=end, set_at=set_at)


@dataclass(frozen=True, slots=True)
class CountedBlock:
    """A part of an evidence block the drift verdict tested: its span ``[start, end)`` of the
    current window, its mark (``rows``: the most scores it has been seen to hold, lowered only
    when two checks in a row saw fewer) and the latest count (``seen``; None: the mark).
    Counted again at each later check while the current window holds it whole: scores beyond
    the mark landed since (a writer later than ``drift.settle``) and are in no block."""

    start: datetime
    end: datetime
    rows: int
    seen: int | None = None

    @property
    def last(self) -> int:
        """The latest count."""
        return self.rows if self.seen is None else self.seen


TESTED_KEPT = 48  # tested parts a segment keeps to count again (the newest)
STALE_SOURCES = ("scores", "outcomes")  # the sources a state records stale


@dataclass(frozen=True, slots=True)
class SegmentDrift:
    """Drift state of one segment: end of the last evidence block, its tracks, its anchor."""

    evidence_end: datetime | None = None
    reference: DriftTrack = field(default_factory=DriftTrack)
    anchor: DriftTrack = field(default_factory=DriftTrack)
    anchor_ref: Anchor | None = None
    # oldest first, at most ``TESTED_KEPT``, each starting where the one before ended; all
    # last counted by the check at ``counted_at``
    tested: tuple[CountedBlock, ...] = ()
    counted_at: datetime | None = None

    def track(self, name: str) -> DriftTrack:
        return self.reference if name == "reference" else self.anchor

    def with_track(self, name: str, track: DriftTrack) -> SegmentDrift:
        """This state with track ``name`` (``reference`` or ``anchor``) replaced."""
        if name == "reference":
            return replace(self, reference=track)
        return replace(self, anchor=track)

    @property
    def active(self) -> bool:
        return self.reference.active or self.anchor.active

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "evidence_end": _iso(self.evidence_end),
            "reference": self.reference.to_dict(),
            "anchor": self.anchor.to_dict(),
            "anchor_ref": None if self.anchor_ref is None else self.anchor_ref.to_dict(),
        }
        if self.tested:  # absent when empty: files written before it read the same
            out["tested"] = _tested_doc(self.tested, self.counted_at)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SegmentDrift:
        anchor_ref = d.get("anchor_ref")
        return cls(
            evidence_end=_parse_iso(d.get("evidence_end")),
            reference=DriftTrack.from_dict(d.get("reference", {})),
            anchor=DriftTrack.from_dict(d.get("anchor", {})),
            anchor_ref=None if anchor_ref is None else Anchor.from_dict(anchor_ref),
            **_tested_parts(d.get("tested")),
        )


@dataclass(frozen=True, slots=True)
class DecayTrack:
    """Sequential decay state: looks spent, the runs already looked at, raised segments, the
    frozen reference while a decay is raised, and the last look's per-segment reports.

    ``hold_until``: after a decay cleared, the frozen reference is kept while the rolling one
    starts before this time (the clearing look's first run), so it never holds decayed runs.
    ``runs_start`` and ``runs_rows``: the last look's first run and the outcome rows in
    ``[runs_start - decay.run_gap, runs_end]`` at that look (0: not counted), so that rows which
    land later with times in that span (a run written in parts, a segment's own job) are seen
    and looked at, not dropped for being older than ``runs_end``."""

    looks: tuple[datetime, ...] = ()
    runs_end: datetime | None = None
    active: Mapping[str, datetime] = field(default_factory=dict)
    reference_start: datetime | None = None
    reference_end: datetime | None = None
    reports: Mapping[str, OutcomeReport] = field(default_factory=dict)
    hold_until: datetime | None = None
    runs_start: datetime | None = None
    runs_rows: int = 0
    # ``to_dict``'s JSON made once: the track changes at a look (daily for a golden set) and
    # is saved at every check, twice (the state before the last slot holds it too)
    _json: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def last_look_at(self) -> datetime | None:
        return self.looks[-1] if self.looks else None

    def holds_reference(self, rolling_start: datetime) -> bool:
        """Whether a cleared decay still keeps its frozen reference: the rolling reference
        starting at ``rolling_start`` would hold runs from before the clearing look."""
        return self.hold_until is not None and rolling_start < self.hold_until

    def to_dict(self) -> dict[str, Any]:
        return {
            "looks": [_iso(t) for t in self.looks],
            "runs_end": _iso(self.runs_end),
            "active": {k: _iso(v) for k, v in self.active.items()},
            "reference_start": _iso(self.reference_start),
            "reference_end": _iso(self.reference_end),
            "reports": {k: v.to_dict() for k, v in self.reports.items()},
            "hold_until": _iso(self.hold_until),
            "runs_start": _iso(self.runs_start),
            "runs_rows": self.runs_rows,
            "runs_rows_lines": True,
        }

    def to_json(self) -> str:
        """``to_dict`` as compact JSON with sorted keys (what ``json.dumps`` of the state
        writes for it), encoded once."""
        return _kept_json(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DecayTrack:
        looks = tuple(t for t in (_parse_iso(x) for x in d.get("looks", [])) if t is not None)
        active = {k: _parse_iso(v) for k, v in d.get("active", {}).items()}
        return cls(
            looks=looks,
            runs_end=_parse_iso(d.get("runs_end")),
            active={k: v for k, v in active.items() if v is not None},
            reference_start=_parse_iso(d.get("reference_start")),
            reference_end=_parse_iso(d.get("reference_end")),
            reports={k: OutcomeReport.from_dict(v) for k, v in d.get("reports", {}).items()},
            hold_until=_parse_iso(d.get("hold_until")),
            runs_start=_parse_iso(d.get("runs_start")),
            # a count written before TREC run files counted a row per line (one per file,
            # then): compared with lines it read as the whole run landing late, and the last
            # look was made again at the first check after an upgrade. Read as not counted
            runs_rows=int(d.get("runs_rows", 0)) if d.get("runs_rows_lines") else 0,
        )


def _tested_doc(parts: tuple[CountedBlock, ...], at: datetime | None) -> dict[str, Any]:
    """The tested parts as the state file holds them, compactly (a segment keeps up to
    ``TESTED_KEPT``, and the state before the latest slot a copy): the first part's start,
    each part's end as nanoseconds after it (``ends``), their marks (``rows``), their latest
    counts where one is below its mark (``seen``) and the check before which no score beyond
    a mark was there (``at``). The parts are contiguous (each block starts where the last
    tested one ended, and the window drops the oldest first)."""
    origin = parts[0].start
    assert all(b.start == a.end for a, b in itertools.pairwise(parts)), "contiguous parts"
    ends = [(p.end - origin) // _US * 1000 for p in parts]  # ns, as the data's timestamps
    doc: dict[str, Any] = {
        "at": _iso(at),
        "start": _iso(origin),
        "ends": ends,
        "rows": [p.rows for p in parts],
    }
    if any(p.last != p.rows for p in parts):  # a count below the mark: kept, absent otherwise
        doc["seen"] = [p.last for p in parts]
    return doc


_US = timedelta(microseconds=1)


def _tested_parts(d: Mapping[str, Any] | None) -> dict[str, Any]:
    """``SegmentDrift``'s ``tested`` and ``counted_at`` from ``_tested_doc``'s form (checked
    by ``_check_tested`` first); none when absent."""
    if not d:
        return {}
    origin = _parse_iso(d["start"])
    assert origin is not None
    cuts = [origin, *(origin + timedelta(microseconds=int(e) // 1000) for e in d["ends"])]
    seen = d.get("seen") or d["rows"]
    parts = tuple(
        CountedBlock(a, b, int(n), None if int(k) == int(n) else int(k))
        for (a, b), n, k in zip(itertools.pairwise(cuts), d["rows"], seen, strict=True)
    )
    return {"tested": parts, "counted_at": _parse_iso(d["at"])}


_TRACK_KEYS = {"cusum", "active", "active_since", "quiet", "clear_cusum"}
_SEGMENT_KEYS = {"evidence_end", "reference", "anchor", "anchor_ref", "tested"}
_DECAY_KEYS = {
    "looks",
    "runs_end",
    "active",
    "reference_start",
    "reference_end",
    "reports",
    "hold_until",
    "runs_start",
    "runs_rows",
    "runs_rows_lines",
}


def _need(ok: bool, where: str, what: str, value: Any) -> None:
    if not ok:
        raise ValueError(f"`{where}` must be {what}; got {value!r:.80}")


_OLDEST = datetime(1677, 9, 22, tzinfo=UTC)
_NEWEST = datetime(2262, 4, 11, tzinfo=UTC)


def _check_time(d: Mapping[str, Any], key: str, where: str) -> None:
    value = d.get(key)
    _need(
        value is None or isinstance(value, str), f"{where}{key}", "null or an RFC 3339 time", value
    )
    if value is not None:
        try:
            t = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(
                f"`{where}{key}` must be an RFC 3339 time; got {value!r:.80}"
            ) from None
        _need(t.tzinfo is not None, f"{where}{key}", "a time with a UTC offset", value)
        try:  # a time at the edge of the calendar (0001-01-01+14:00) has no UTC form
            utc = t.astimezone(UTC)
        except OverflowError:
            raise ValueError(
                f"`{where}{key}` is not a time in UTC's range; got {value!r:.80}"
            ) from None
        # the span of the data's nanosecond timestamps: a state time outside it (0001-01-01)
        # once passed, and every later check failed subtracting a run gap from it
        _need(
            _OLDEST <= utc <= _NEWEST,
            f"{where}{key}",
            f"a time from {_OLDEST:%Y-%m-%d} to {_NEWEST:%Y-%m-%d}",
            value,
        )


def _check_number(value: Any, where: str) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    try:
        ok = ok and math.isfinite(value)
    except OverflowError:  # an integer past float's range (JSON allows 1 followed by 400 zeros)
        ok = False
    _need(ok, where, "a finite number", value)


def _check_state_doc(d: Any) -> None:
    """Validate the shape of a persisted state document (types, finiteness, known keys of the
    sequential parts), so that a damaged file is rejected as a whole instead of loading into
    a state that silently switches an alarm off or fails every later check."""
    _need(isinstance(d, Mapping), "state", "a JSON object", type(d).__name__)
    if d.get("version") != STATE_VERSION:
        raise ValueError(
            f"unknown state version {d.get('version')!r:.40}; expected {STATE_VERSION}"
        )
    for key in ("state_since", "last_at", "first_at", "last_run", "last_success"):
        _check_time(d, key, "")
    state = d.get("state")
    _need(state is None or state in STATES, "state", f"null or one of {STATES}", state)
    for key in ("fingerprint", "decay_fingerprint"):
        fp = d.get(key)
        _need(fp is None or isinstance(fp, str), key, "null or a string", fp)
    before = d.get("before_last")
    _need(before is None or isinstance(before, Mapping), "before_last", "an object", before)
    skipped = d.get("skipped", [])
    _need(isinstance(skipped, list), "skipped", "a list of [after, resumed] times", skipped)
    for span in skipped:
        ok = isinstance(span, list) and len(span) == 2 and all(isinstance(t, str) for t in span)
        try:
            ok = ok and all(_parse_iso(t) is not None for t in span)
        except (ValueError, OverflowError):
            ok = False
        _need(ok, "skipped", "a list of [after, resumed] times", span)
    drift = d.get("drift", {})
    _need(isinstance(drift, Mapping), "drift", "an object of segments", drift)
    for segment, seg in drift.items():
        where = f"drift[{segment!r:.40}]"
        _need(isinstance(seg, Mapping), where, "an object", seg)
        unknown = set(seg) - _SEGMENT_KEYS
        _need(not unknown, where, f"an object with keys {sorted(_SEGMENT_KEYS)}", unknown)
        _check_time(seg, "evidence_end", f"{where}.")
        for name in ("reference", "anchor"):
            track = seg.get(name, {})
            tw = f"{where}.{name}."
            _need(isinstance(track, Mapping), tw[:-1], "an object", track)
            unknown = set(track) - _TRACK_KEYS
            _need(not unknown, tw[:-1], f"an object with keys {sorted(_TRACK_KEYS)}", unknown)
            _check_number(track.get("cusum", 0.0), f"{tw}cusum")
            _need(track.get("cusum", 0.0) >= 0, f"{tw}cusum", "a number >= 0", track.get("cusum"))
            clear = track.get("clear_cusum", 0.0)
            _check_number(clear, f"{tw}clear_cusum")
            _need(clear >= 0, f"{tw}clear_cusum", "a number >= 0", clear)
            quiet = track.get("quiet", 0)
            _need(
                _is_count(quiet),
                f"{tw}quiet",
                "an integer >= 0",
                quiet,
            )
            active = track.get("active", False)
            _need(isinstance(active, bool), f"{tw}active", "true or false", active)
            _check_time(track, "active_since", tw)
        _check_tested(seg.get("tested"), f"{where}.tested")
        anchor = seg.get("anchor_ref")
        _need(
            anchor is None or isinstance(anchor, Mapping),
            f"{where}.anchor_ref",
            "an object",
            anchor,
        )
    _check_decay(d.get("decay", {}), "decay")
    segments = d.get("segments")
    _need(
        segments is None
        or (isinstance(segments, list) and all(isinstance(x, str) for x in segments)),
        "segments",
        "null or a list of names",
        segments,
    )
    stale = d.get("stale")
    _need(
        stale is None or (isinstance(stale, list) and all(x in STALE_SOURCES for x in stale)),
        "stale",
        f"null or a list of {' and '.join(STALE_SOURCES)}",
        stale,
    )
    if d.get("origin_decay") is not None:
        _check_decay(d["origin_decay"], "origin_decay")


def _check_tested(tested: Any, where: str) -> None:
    """The shape of a segment's tested parts (``_tested_doc``): ``at`` and ``start`` RFC 3339
    times, ``ends`` at most ``TESTED_KEPT`` increasing positive nanoseconds (whole
    microseconds), ``rows`` a count for each."""
    if tested is None:
        return
    _need(isinstance(tested, Mapping), where, "an object", tested)
    keys = {"at", "start", "ends", "rows"}
    ok = keys <= set(tested) <= keys | {"seen"}
    _need(ok, where, f"an object with keys {sorted(keys)} (and seen)", sorted(tested))
    for key in ("at", "start"):
        _check_time(tested, key, f"{where}.")
        _need(tested[key] is not None, f"{where}.{key}", "an RFC 3339 time", None)
    ends, rows = tested["ends"], tested["rows"]
    what = f"a list of at most {TESTED_KEPT} increasing nanoseconds"
    _need(isinstance(ends, list) and 0 < len(ends) <= TESTED_KEPT, f"{where}.ends", what, ends)
    _need(
        all(_is_count(e) and e % 1000 == 0 for e in ends)
        and all(b > a for a, b in itertools.pairwise([0, *ends])),
        f"{where}.ends",
        what,
        ends,
    )
    ok = isinstance(rows, list) and len(rows) == len(ends) and all(_is_count(n) for n in rows)
    _need(ok, f"{where}.rows", "a count for each of ends", rows)
    seen = tested.get("seen", rows)
    ok = isinstance(seen, list) and len(seen) == len(ends) and all(_is_count(n) for n in seen)
    _need(ok, f"{where}.seen", "a count for each of ends", seen)
    # its last part's end inside the data's nanosecond span: one past 2262 passed, and every
    # check failed putting it among the reader's cuts (OverflowError) until the file was moved
    start = _parse_iso(tested["start"])
    assert start is not None
    last = start + timedelta(microseconds=ends[-1] // 1000)
    _need(last <= _NEWEST, f"{where}.ends", f"ends up to {_NEWEST:%Y-%m-%d}", ends[-1])


def _is_count(value: Any) -> bool:
    """A count: an integer (not a bool) in [0, 2**63). One past float's range once loaded
    and then failed every /metrics scrape (its gauge is a float) until a look replaced it."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _check_decay(decay: Any, where: str) -> None:
    """The shape of a persisted decay track (``where``: its path in the document)."""
    _need(isinstance(decay, Mapping), where, "an object", decay)
    unknown = set(decay) - _DECAY_KEYS
    _need(not unknown, where, f"an object with keys {sorted(_DECAY_KEYS)}", unknown)
    rows = decay.get("runs_rows", 0)
    _need(
        _is_count(rows),
        f"{where}.runs_rows",
        "a count",
        rows,
    )
    lines = decay.get("runs_rows_lines", False)
    _need(isinstance(lines, bool), f"{where}.runs_rows_lines", "true or false", lines)
    for key in ("runs_end", "reference_start", "reference_end", "hold_until", "runs_start"):
        _check_time(decay, key, f"{where}.")
    looks = decay.get("looks", [])
    _need(isinstance(looks, list), f"{where}.looks", "a list of times", looks)
    for i, t in enumerate(looks):
        _check_time({"t": t}, "t", f"{where}.looks[{i}].")
    raised = decay.get("active", {})
    _need(isinstance(raised, Mapping), f"{where}.active", "an object of segments", raised)
    for k in raised:
        _check_time(raised, k, f"{where}.active.")
    reports = decay.get("reports", {})
    _need(isinstance(reports, Mapping), f"{where}.reports", "an object of segments", reports)
    for segment, report in reports.items():
        at = f"{where}.reports[{segment!r:.40}]"
        _need(isinstance(report, Mapping), at, "an object", report)
        _need(
            {"n_pairs", "only_reference", "only_current", "coverage", "decidable"} <= set(report),
            at,
            "a complete outcome report",
            sorted(report),
        )
        _check_report(report, at)


#: an outcome report's fields by the type a state file must hold (the rest: numbers or null;
#: ``metrics`` and ``calibration``: objects or null)
_REPORT_COUNTS = {"n_pairs", "only_reference", "only_current", "wins", "losses", "ties", "runs"}
_REPORT_COUNTS |= {"late_rows"}
_REPORT_FLAGS = {"decidable", "decay", "significant", "recovered", "flat", "new_look"}
_REPORT_FLAGS |= {"judgment_holes"}
_REPORT_TIMES = {"decay_since", "looked_at", "runs_start", "runs_end"}
_REPORT_TIMES |= {"reference_start", "reference_end"}
_REPORT_TEXTS = {"metric", "judged_metric", "undecidable_reason", "test"}
_REPORT_OBJECTS = {"metrics", "calibration"}


def _check_report(report: Mapping[str, Any], at: str) -> None:
    """Each field of a persisted outcome report has its type (a float where a count belongs,
    a time in the future or a span that ends before it starts once loaded and then failed
    every check that rebuilt the page's pairs from it)."""
    names = set(OutcomeReport.__dataclass_fields__)
    for key, value in report.items():
        where = f"{at}.{key}"
        if key not in names:
            continue
        if key in _REPORT_COUNTS:
            _need(
                _is_count(value),
                where,
                "a count",
                value,
            )
        elif key in _REPORT_FLAGS:
            _need(isinstance(value, bool), where, "true or false", value)
        elif key == "exact":
            _need(value is None or isinstance(value, bool), where, "null, true or false", value)
        elif key == "n_resamples":
            _need(value is None or _is_count(value), where, "null or a count", value)
        elif key in _REPORT_TIMES:
            _check_time(report, key, f"{at}.")
        elif key in _REPORT_TEXTS:
            _need(value is None or isinstance(value, str), where, "null or a string", value)
        elif key in _REPORT_OBJECTS:
            _need(value is None or isinstance(value, Mapping), where, "null or an object", value)
        elif value is not None or key == "coverage":
            _check_number(value, where)
    for start, end in (("runs_start", "runs_end"), ("reference_start", "reference_end")):
        a, b = _parse_iso(report.get(start)), _parse_iso(report.get(end))
        if a is not None and b is not None:
            _need(a <= b, f"{at}.{start}", f"not after {end}", report[start])


MAX_SKIPPED = 256
"""The spans of skipped slots a state keeps (the latest; a replay runs the slots of older ones)."""


@dataclass(frozen=True, slots=True)
class MonitorState:
    """Everything a monitor carries from check to check; persisted by the job runner.

    ``fingerprint`` names the settings the sequential state was computed under (the job runner
    sets it); a state file written under other settings is not resumed. ``decay_fingerprint``
    names those its decay track depends on (not the schedule, nor the drift settings): when
    only others changed, the decay track is kept (a raised decay stays raised). ``before_last``
    is the state as it was before the slot ``last_at`` was decided, so ``monitor check`` can
    reproduce the daemon's latest verdict exactly (read-only). ``skipped`` lists the spans
    ``(after, resumed)`` of slots the state never saw (the daemon down, or checks that ended in
    error): a replay skips them too, the latest ``MAX_SKIPPED`` kept. ``origin_decay`` is the
    decay track a state that started fresh kept (a schedule or drift settings change): a replay
    from ``first_at`` starts from it, as the daemon did. ``segments`` names those the latest
    check had data for (None: not recorded): the alarms an errored check or a restart carries to
    the exporter are theirs, as the check's own were. ``stale`` names the sources ("scores",
    "outcomes") the latest decided check found stale (None: not recorded): carried with the
    alarms, so a drift a stale score feed held back stays held back through errors and restarts.
    """

    drift: Mapping[str, SegmentDrift] = field(default_factory=dict)
    decay: DecayTrack = field(default_factory=DecayTrack)
    state: str | None = None
    state_since: datetime | None = None
    last_at: datetime | None = None
    first_at: datetime | None = None
    last_run: datetime | None = None
    last_success: datetime | None = None
    fingerprint: str | None = None
    decay_fingerprint: str | None = None
    before_last: MonitorState | None = None
    skipped: tuple[tuple[datetime, datetime], ...] = ()
    origin_decay: DecayTrack | None = None
    segments: tuple[str, ...] | None = None
    stale: tuple[str, ...] | None = None

    def times(self) -> dict[str, datetime | str | None]:
        """The state and its start, the last run and the last success: what a state started
        fresh under other settings keeps (``replace(fresh, **prior.times())``)."""
        return {
            "state": self.state,
            "state_since": self.state_since,
            "last_run": self.last_run,
            "last_success": self.last_success,
        }

    def to_dict(self, *, nested: bool = True, decay: bool = True) -> dict[str, Any]:
        """The persisted JSON document (version 2); ``from_dict`` reads it back. Without
        ``decay``, each ``"decay"`` (this state's and ``before_last``'s) is None: the caller
        sets it (``encode_state`` sets each track's ``to_json``)."""
        out: dict[str, Any] = {
            "version": STATE_VERSION,
            "drift": {k: v.to_dict() for k, v in self.drift.items()},
            "decay": self.decay.to_dict() if decay else None,
            "state": self.state,
            "state_since": _iso(self.state_since),
            "last_at": _iso(self.last_at),
            "first_at": _iso(self.first_at),
            "last_run": _iso(self.last_run),
            "last_success": _iso(self.last_success),
            "fingerprint": self.fingerprint,
            "decay_fingerprint": self.decay_fingerprint,
        }
        if self.skipped:  # absent when none: the files of a daemon that never missed a slot
            out["skipped"] = [[_iso(a), _iso(b)] for a, b in self.skipped]
        if self.origin_decay is not None:
            out["origin_decay"] = self.origin_decay.to_dict()
        if self.segments is not None:
            out["segments"] = list(self.segments)
        if self.stale is not None:
            out["stale"] = list(self.stale)
        if nested and self.before_last is not None:
            out["before_last"] = self.before_last.to_dict(nested=False, decay=decay)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MonitorState:
        """Read a persisted document; ``ValueError`` naming the first bad field when its shape,
        a type or a number (non-finite, negative CUSUM) is wrong."""
        _check_state_doc(d)
        before = d.get("before_last")
        return cls(
            drift={k: SegmentDrift.from_dict(v) for k, v in d.get("drift", {}).items()},
            decay=DecayTrack.from_dict(d.get("decay", {})),
            state=d.get("state"),
            state_since=_parse_iso(d.get("state_since")),
            last_at=_parse_iso(d.get("last_at")),
            first_at=_parse_iso(d.get("first_at")),
            last_run=_parse_iso(d.get("last_run")),
            last_success=_parse_iso(d.get("last_success")),
            fingerprint=d.get("fingerprint"),
            decay_fingerprint=d.get("decay_fingerprint"),
            before_last=None if before is None else cls.from_dict(before),
            skipped=tuple(
                (a, b)
                for a, b in ((_parse_iso(x), _parse_iso(y)) for x, y in d.get("skipped", ()))
                if a is not None and b is not None
            ),
            origin_decay=(
                None if d.get("origin_decay") is None else DecayTrack.from_dict(d["origin_decay"])
            ),
            segments=None if d.get("segments") is None else tuple(d["segments"]),
            stale=None if d.get("stale") is None else tuple(d["stale"]),
        )


# --------------------------------------------------------------------------- inputs
