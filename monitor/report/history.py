"""A bounded history of every check per monitor: the numbers the page's timelines draw.

One file per monitor beside its state file, ``<state_dir>/<name>.json.history`` (no
subdirectory: a full or read-only ``state_dir`` leaves nothing new behind, and
``StateStore.sweep`` removes a temp file that a kill left). Version 2 is JSON lines: a header
line ``{"version":2,"monitor":name}``, then one entry a line, oldest first. A check appends its
entry's line (``O_APPEND``, fsync): 0.5 KB, not the whole history (an hourly monitor's 840
entries were 400 KB rewritten at every check, a 1-minute one's 2 MB a minute). When the file
holds more than twice the bounded entries' lines plus 64 (entries since dropped by the bound,
or replaced: a slot checked again appends its new entry, and the last line of a slot wins), it
is rewritten whole, atomically (temp file, fsync, rename, fsync of the directory, as
``monitor.store.StateStore`` does). The bound: entries older than ``max_age`` before the newest are
dropped; entries older than ``full_resolution`` (48 h) before the newest are thinned to one an
hour (the last of each hour), except that an entry whose state differs from the one before it or
that carries a new outcome look is always kept; then at most ``max_entries`` are kept (defaults
35 days and 10,000 entries). So any schedule keeps the 35 days the timelines draw: an hourly one
in 840 entries (about 0.45 MB; entries are about 530 bytes), a 1-minute one in about 3,700
(2 days at full resolution, then hourly). Reading applies the same bound. A final line cut short
(a kill or a full disk during an append) is left out with one logged line, and the next append
rewrites the file; a version-1 file (one JSON document) is read and rewritten as version 2 at
the next append. A file that cannot be read otherwise (not JSON, another shape, non-finite
numbers, too large) is renamed ``<name>.json.history.corrupt-<UTC time>`` beside itself with
one logged line naming the reason, and the history starts empty; it never crashes a check. A
write that fails is logged and the history is kept in memory (and the file rewritten whole at
the next append).
"""

from __future__ import annotations

import bisect
import functools
import json
import logging
import math
import os
import stat
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from monitor.epoch import rfc3339
from monitor.files import NotRegularFile, atomic_write, read_regular
from monitor.store import FUTURE_SKEW, SHAPE_ERRORS, utc_now
from monitor.verdict import Verdict

__all__ = [
    "HISTORY_FULL_RESOLUTION",
    "HISTORY_MAX_AGE",
    "HISTORY_MAX_ENTRIES",
    "HistoryStore",
    "MemoryHistory",
    "history_entry",
]

log = logging.getLogger("monitor")

HISTORY_MAX_ENTRIES = 10_000
HISTORY_MAX_AGE = timedelta(days=35)
HISTORY_FULL_RESOLUTION = timedelta(hours=48)
_MAX_BYTES = 64 * 1024 * 1024
_VERSION = 2  # JSON lines (version 1: one JSON document, read and rewritten)

_INPUT_KEYS = {
    "psi": "psi",
    "psi_tolerance": "psi_tolerance",
    "ks": "ks_statistic",
    "block_psi": "block_psi",
    "z": "z",
    "z_threshold": "z_threshold",
    "cusum": "cusum",
    "cusum_threshold": "cusum_threshold",
    "alarm": "alarm",
    "alarm_track": "alarm_track",
    "anchor_z": "anchor_z",
    "anchor_cusum": "anchor_cusum",
}
_OUTCOME_KEYS = {
    "mean": "mean_difference",
    "ci_low": "ci_low",
    "ci_high": "ci_high",
    "p": "pvalue_adjusted",
    "alpha": "alpha",
    "margin": "margin",
    "n_pairs": "n_pairs",
}


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def history_entry(verdict: Verdict) -> dict[str, Any]:
    """The compact numbers of one check: its state, the driving input segment's PSI, KS, block
    evidence, CUSUM and threshold, and the driving outcome segment's mean difference, interval,
    adjusted p-value, alpha and margin (``Verdict.input`` / ``Verdict.outcome``)."""
    entry: dict[str, Any] = {
        "at": rfc3339(verdict.at),
        "state": verdict.state,
    }
    seg_in = next((k for k, v in verdict.inputs.items() if v is verdict.input), None)
    inp = verdict.input
    if inp is not None:
        entry["input_segment"] = _segment(seg_in)
        entry["evidence"] = inp.evidence
        entry["drift"] = inp.drift
        entry.update({k: _clean(getattr(inp, f)) for k, f in _INPUT_KEYS.items()})
    out = verdict.outcome
    if out is not None:
        seg_out = next((k for k, v in verdict.outcomes.items() if v is out), None)
        entry["outcome_segment"] = _segment(seg_out)
        entry["new_look"] = out.new_look
        entry["decay"] = out.decay
        entry.update({k: _clean(getattr(out, f)) for k, f in _OUTCOME_KEYS.items()})
    return entry


SEGMENT_BYTES = 128  # a segment's name in an entry's JSON, at most: bounds an entry's bytes


def _segment(name: str | None) -> str | None:
    """A segment's name for an entry, cut so that its JSON text (ASCII: a CJK character is 6
    bytes, an emoji 12) holds at most ``SEGMENT_BYTES`` (segment values are the data's, of
    any length; the entries only tell runs of one driving segment apart)."""
    if name is None or len(json.dumps(name)) - 2 <= SEGMENT_BYTES:
        return name
    room = SEGMENT_BYTES - (len(json.dumps("…")) - 2)
    cut = []
    for ch in name:
        room -= len(json.dumps(ch)) - 2
        if room < 0:
            break
        cut.append(ch)
    return "".join(cut) + "…"


def _parse_at(entry: Mapping[str, Any]) -> datetime:
    return _parse_iso(str(entry["at"]))


@functools.lru_cache(maxsize=1 << 16)
def _at_and_hour(text: str) -> tuple[datetime, datetime]:
    at = _parse_iso(text)
    return at, at.replace(minute=0, second=0, microsecond=0)


@functools.lru_cache(maxsize=1 << 16)
def _parse_iso(text: str) -> datetime:
    """An entry's time (parsed once: an append sorts, bounds and thins every entry, and 840
    entries of an hourly history cost 2.5 ms of parsing an append)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _no_constant(text: str) -> float:
    raise ValueError(f"non-finite number {text}")


def _thin(entries: list[dict[str, Any]], full_since: datetime) -> list[dict[str, Any]]:
    """``entries`` (oldest first) with those before ``full_since`` thinned to the last of each
    hour; an entry that changes the state or carries a new outcome look is always kept.
    Thinning a thinned history changes nothing."""
    kept: list[tuple[dict[str, Any], datetime, bool]] = []  # entry, its hour, pinned
    _thin_onto(kept, None, entries, full_since)
    return [e for e, _, _ in kept]


def _thin_onto(
    kept: list[tuple[dict[str, Any], datetime, bool]],
    previous_state: object,
    entries: list[dict[str, Any]],
    full_since: datetime,
) -> None:
    """``_thin``'s walk, continued: ``entries`` thinned onto ``kept`` (entry, its hour,
    pinned), ``previous_state`` being the state of the entry before the first of them."""
    for e in entries:
        at, hour = _at_and_hour(str(e["at"]))
        pinned = at >= full_since or e.get("state") != previous_state or bool(e.get("new_look"))
        previous_state = e.get("state")
        if not pinned and kept and not kept[-1][2] and kept[-1][1] == hour:
            kept[-1] = (e, hour, False)  # the later ordinary entry of an hour replaces the earlier
        else:
            kept.append((e, hour, pinned))


class HistoryStore:
    """Each monitor's bounded check history, in memory and (unless ``directory`` is None) on
    disk; see the module docstring. Thread-safe. ``readonly`` (``monitor report``): never
    writes or renames; an unreadable file is logged and read as an empty history."""

    def __init__(
        self,
        directory: Path | None,
        *,
        max_entries: int = HISTORY_MAX_ENTRIES,
        max_age: timedelta = HISTORY_MAX_AGE,
        full_resolution: timedelta = HISTORY_FULL_RESOLUTION,
        readonly: bool = False,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.directory = directory
        self.readonly = readonly
        self.clock = clock  # "now" for the entries after it (``_get``)
        self.max_entries = max_entries
        self.max_age = max_age
        self.full_resolution = full_resolution
        self._entries: dict[str, list[dict[str, Any]]] = {}
        self._texts: dict[str, dict[int, tuple[dict[str, Any], str]]] = {}  # see ``_entry_text``
        self._lines: dict[str, int] = {}  # see ``_read`` and ``_write``
        self._bounded: dict[str, list[dict[str, Any]]] = {}  # a list that ``_bound`` made
        self._lock = threading.Lock()

    def path(self, name: str) -> Path:
        if self.directory is None:
            raise TypeError(f"this history has no file (asked for monitor {name!r})")
        return self.directory / f"{name}.json.history"

    def forget(self, name: str) -> None:
        """Drop what is held in memory for ``name`` (a monitor removed by a reload); its file
        stays."""
        with self._lock:
            for table in (self._entries, self._texts, self._lines, self._bounded):
                table.pop(name, None)

    def entries(self, name: str) -> tuple[dict[str, Any], ...]:
        """``name``'s history, oldest first (read from its file the first time)."""
        with self._lock:
            return tuple(self._get(name))

    def append(self, name: str, verdict: Verdict) -> tuple[dict[str, Any], ...]:
        """Add the entry of ``verdict`` (replacing one for the same slot), apply the bound, write
        its line to the file (or the file whole); returns the history after it."""
        entry = history_entry(verdict)
        with self._lock:
            before = self._get(name)
            after = self._after(before, entry) if self._bounded.get(name) is before else None
            if after is not None:  # a check's append: newer than every entry
                (entries, dropped), added = after, [entry]
            else:
                entries = [e for e in before if e["at"] != entry["at"]]
                entries.append(entry)
                entries = self._bound(entries)
                kept, held = {id(e) for e in entries}, {id(e) for e in before}
                dropped = [e for e in before if id(e) not in kept]
                added = [e for e in entries if id(e) not in held]
            self._entries[name] = self._bounded[name] = entries
            self._write(name, dropped, added, entries)
            return tuple(entries)

    def _bound(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``entries`` sorted, then the age bound, the thinning and the count bound."""
        if not entries:
            return entries
        entries = sorted(entries, key=_parse_at)
        newest = _parse_at(entries[-1])
        entries = [e for e in entries if newest - _parse_at(e) <= self.max_age]
        entries = _thin(entries, newest - self.full_resolution)
        return entries[-self.max_entries :]

    def _after(
        self, before: list[dict[str, Any]], entry: dict[str, Any]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        """``_bound(before + [entry])`` and the entries of ``before`` it drops, when
        ``before`` is bounded (``_bound`` of it is itself) and ``entry`` is newer than all of
        it (a check's append; None otherwise). Only the entries that the thinning boundary
        passed over since ``before``'s newest can be thinned away: older ones were thinned
        already, newer ones are kept (a thinned prefix has no two ordinary entries of one hour
        in a row, so its entries stay and the walk's state at its end is known). An hourly
        monitor's 840 entries cost 0.8 ms sorted, bounded and thinned whole at every check."""
        if not before:
            return None
        at = _parse_at(entry)
        newest = _parse_at(before[-1])
        if at <= newest:
            return None
        old_since, since = newest - self.full_resolution, at - self.full_resolution
        first = bisect.bisect_left(before, at - self.max_age, key=_parse_at)  # the age bound
        passed = bisect.bisect_left(before, old_since, key=_parse_at)
        now = bisect.bisect_left(before, since, key=_parse_at)
        if passed - 1 < first:  # nothing thinned before survives the age bound: thin it all
            out = _thin([*before[first:], entry], since)
            ids = {id(e) for e in out}
            dropped = [*before[:first], *(e for e in before[first:] if id(e) not in ids)]
        else:
            seed = before[passed - 1]  # the last entry thinned before: one of the hour may follow
            state = before[passed - 2].get("state") if passed - 2 >= first else None
            pinned = seed.get("state") != state or bool(seed.get("new_look"))
            walk = [(seed, _at_and_hour(str(seed["at"]))[1], pinned)]
            _thin_onto(walk, seed.get("state"), before[passed:now], since)
            mid = [e for e, _, _ in walk]
            ids = {id(e) for e in mid}
            dropped = [*before[:first], *(e for e in before[passed - 1 : now] if id(e) not in ids)]
            out = [*before[first : passed - 1], *mid, *before[now:], entry]
        if len(out) > self.max_entries:
            dropped += out[: len(out) - self.max_entries]
            out = out[len(out) - self.max_entries :]
        return out, dropped

    def _get(self, name: str) -> list[dict[str, Any]]:
        if name not in self._entries:
            read = self._read(name)
            # entries after now (a clock that ran ahead, since fixed; the state file of that
            # time is set aside as `future`): the age bound counts from the newest entry, so
            # one a year ahead dropped every later check as it was appended
            limit = self.clock() + FUTURE_SKEW
            ahead = [e for e in read if _parse_at(e) > limit]
            if ahead:
                log.log(
                    logging.DEBUG if self.readonly else logging.WARNING,
                    "history entries after now left out",
                    extra={
                        "monitor": name,
                        "count": len(ahead),
                        "newest": str(max(ahead, key=_parse_at)["at"]),
                    },
                )
                read = [e for e in read if _parse_at(e) <= limit]
                self._lines[name] = -1  # the next append writes the file whole, without them
            bounded = self._bound(read)  # a file written under a larger bound reads bounded
            if len(bounded) < len(read):
                self._lines[name] = -1  # the next append writes the file whole
            self._entries[name] = bounded
        return self._entries[name]

    def _read(self, name: str) -> list[dict[str, Any]]:
        if self.directory is None:
            return []
        path = self.path(name)
        try:
            text = read_regular(path, _MAX_BYTES).decode("utf-8")
        except FileNotFoundError:
            return []
        except NotRegularFile as exc:
            return self._aside(name, str(exc))
        except (OSError, UnicodeDecodeError) as exc:
            return self._aside(name, f"{type(exc).__name__}: {exc}")
        try:
            entries, lines, torn = _parse(text)
        except SHAPE_ERRORS as exc:
            return self._aside(name, f"{type(exc).__name__}: {exc}")
        if torn:  # a kill during an append; for a reader (monitor report), maybe one under way
            log.log(
                logging.DEBUG if self.readonly else logging.WARNING,
                "history file's last line cut short; left out",
                extra={"monitor": name, "path": str(path)},
            )
        # lines in the file; -1: rewrite it whole at the next append (version 1, or a cut line
        # that an appended one would run into)
        self._lines[name] = -1 if torn or lines < 0 else lines
        return entries

    def _aside(self, name: str, reason: str) -> list[dict[str, Any]]:
        path = self.path(name)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        aside = path.with_name(f"{path.name}.corrupt-{stamp}")
        fields = {"monitor": name, "path": str(path), "error": reason}
        if self.readonly:
            log.error("history file unreadable; ignored", extra=fields)
            return []
        try:
            path.rename(aside)
        except OSError as exc:
            log.error(
                "history file unreadable and not set aside; starting an empty history",
                extra={**fields, "rename_error": str(exc)},
            )
            return []
        log.error(
            "history file unreadable, kept aside; starting an empty history",
            extra={**fields, "aside": str(aside)},
        )
        return []

    def _write(
        self,
        name: str,
        dropped: list[dict[str, Any]],
        added: list[dict[str, Any]],
        entries: list[dict[str, Any]],
    ) -> None:
        """What changed appended as lines (a drop line for each entry the bound or a new check
        of its slot removed, then each new entry's line), or the file written whole (the
        bounded ``entries``) when it would hold too many lines for them (or may lack some:
        see ``_lines``)."""
        if self.directory is None or self.readonly:
            return
        lines = self._lines.get(name, -1)
        self._lines[name] = -1  # until what is written is whole on disk
        try:
            ops = [_drop_text(e) for e in dropped]
            ops += [self._entry_text(name, e) for e in added]
            if lines >= 0 and lines + len(ops) <= 2 * len(entries) + 64:
                try:
                    _append_line(self.path(name), "".join(op + "\n" for op in ops))
                    self._lines[name] = lines + len(ops)
                    return
                except FileNotFoundError:  # removed since: written whole below
                    pass
            data = self._text(name, entries)
            atomic_write(self.directory, self.path(name), data, stem=name)
            self._lines[name] = len(entries)
        except (OSError, ValueError) as exc:
            log.error(
                "history not saved; kept in memory",
                extra={"monitor": name, "directory": str(self.directory), "error": str(exc)},
            )

    def _entry_text(self, name: str, entry: dict[str, Any]) -> str:
        """``entry``'s compact JSON, made once: entries are never changed once made, and the
        text of one is kept with the entry itself (so its ``id`` is not reused) while the
        history holds it."""
        held = self._texts.setdefault(name, {})
        got = held.get(id(entry))
        if got is None or got[0] is not entry:
            got = held[id(entry)] = (
                entry,
                json.dumps(entry, separators=(",", ":"), allow_nan=False),
            )
        return got[1]

    def _text(self, name: str, entries: list[dict[str, Any]]) -> str:
        """The whole file: the header line, then each entry's line (``_entry_text``); the
        texts of entries no longer held are dropped. Encoding 840 entries again at every
        write cost 0.6 ms."""
        lines = [self._entry_text(name, e) for e in entries]
        held = self._texts[name] if entries else {}
        self._texts[name] = {id(e): held[id(e)] for e in entries}
        head = json.dumps({"version": _VERSION, "monitor": name}, separators=(",", ":"))
        return "".join([head, "\n", *(line + "\n" for line in lines)])


def _append_line(path: Path, line: str) -> None:
    """``line`` appended to the existing regular file ``path`` in one write, then fsync
    (a FIFO there is an error, not a write that waits for a reader)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        data = line.encode("utf-8")
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(f"wrote {written} of {len(data)} bytes to {path}")
        os.fsync(fd)
    finally:
        os.close(fd)


def _parse(text: str) -> tuple[list[dict[str, Any]], int, bool]:
    """A history file's entries (oldest first; version 2: its lines applied in order), its
    lines (-1 for version 1) and whether its last line was cut short. ``ValueError`` and
    friends for anything else."""
    head, newline, rest = text.partition("\n")
    doc = json.loads(head, parse_constant=_no_constant)
    if not isinstance(doc, dict) or doc.get("version") not in (1, _VERSION):
        raise ValueError(f"not a version 1 or {_VERSION} history file")
    if doc["version"] == 1:
        if rest.strip():
            raise ValueError("text after a version 1 history document")
        entries = doc["entries"]
        if not isinstance(entries, list):
            raise ValueError("`entries` must be a list of objects")
        lines, torn = -1, False
    else:
        if not newline:
            raise ValueError("a version 2 header without its line end")
        rows = rest.split("\n")
        torn = rows[-1] != ""  # the last line lacks its line end: an append cut short
        held: dict[str, dict[str, Any]] = {}  # by slot, in the order the lines add them
        for r in rows[:-1]:
            line = json.loads(r, parse_constant=_no_constant)
            if isinstance(line, dict) and set(line) == {"drop"}:
                held.pop(str(line["drop"]), None)  # the bound or a new check of the slot
            else:
                _check_entry(line)
                held.pop(str(line["at"]), None)
                held[str(line["at"])] = line
        lines = len(rows) - 1
        return sorted(held.values(), key=_parse_at), lines, torn
    for e in entries:
        _check_entry(e)
    return sorted(entries, key=_parse_at), lines, torn


_TEXTS = ("alarm", "alarm_track", "input_segment", "outcome_segment")  # text or null
_NUMBERS = (*_INPUT_KEYS.keys() - set(_TEXTS), *_OUTCOME_KEYS)  # numbers or null in an entry
_FLAGS = ("evidence", "drift", "new_look", "decay")  # true, false or null


def _check_entry(e: object) -> None:
    """``ValueError`` for an entry of another shape than ``history_entry`` makes (a page
    drawn from a string where a number belongs failed every request for it)."""
    if not isinstance(e, dict):
        raise ValueError("an entry that is not an object")
    _parse_at(e)
    if not isinstance(e.get("state"), str):
        raise ValueError("an entry without a `state` string")
    for keys, kinds, what in (
        (_NUMBERS, (int, float), "a number"),
        (_TEXTS, (str,), "a string"),
        (_FLAGS, (bool,), "true or false"),
    ):
        for key in keys:
            value = e.get(key)
            if value is None:
                continue
            if not isinstance(value, kinds) or (
                # 1e999 parses as inf (parse_constant sees only NaN and Infinity)
                what == "a number" and (isinstance(value, bool) or not math.isfinite(float(value)))
            ):
                raise ValueError(f"an entry whose `{key}` is not {what} or null: {value!r}")


def _drop_text(entry: dict[str, Any]) -> str:
    """The line that removes ``entry`` (by its slot) from the history read back."""
    return json.dumps({"drop": entry["at"]}, separators=(",", ":"))


class MemoryHistory(HistoryStore):
    """A history that never touches the disk (the backtest's replay)."""

    def __init__(
        self,
        *,
        max_entries: int = HISTORY_MAX_ENTRIES,
        max_age: timedelta = HISTORY_MAX_AGE,
        full_resolution: timedelta = HISTORY_FULL_RESOLUTION,
    ) -> None:
        super().__init__(
            None, max_entries=max_entries, max_age=max_age, full_resolution=full_resolution
        )
