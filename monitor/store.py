"""The monitors' sequential state on disk: one JSON file per monitor in ``state_dir``.

Written atomically (temp file, fsync, rename, fsync of the directory); a file that cannot be
trusted (unreadable, too large, not JSON, the wrong shape, non-finite numbers, a time in the
future, or saved under other settings: ``state_fingerprint``) is set aside with one of
``RESET_REASONS`` and the monitor starts fresh.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from monitor.config import MonitorConfig
from monitor.files import NotRegularFile, atomic_write, read_regular_stat
from monitor.verdict import (
    DecayTrack,
    MonitorState,
)

log = logging.getLogger("monitor")

#: what rebuilding an object from parsed JSON of the wrong shape raises (a list for a dict,
#: a missing key, a string for a number, nesting past the parser's depth, a huge integer)
SHAPE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, RecursionError, OverflowError)


def utc_now() -> datetime:
    """The wall clock, UTC (injected everywhere so tests and the demo can replace it)."""
    return datetime.now(UTC)


RESET_REASONS = (
    "unreadable",
    "not_a_file",
    "too_large",
    "encoding",
    "syntax",
    "shape",
    "non_finite",
    "future",
    "config_changed",
)
"""Why a monitor's sequential state was reset (the ``reason`` label of
``retrieval_monitor_state_resets_total``; a fixed set, so the label stays bounded)."""

FUTURE_SKEW = timedelta(minutes=5)
"""A state time later than the clock by more than this means the file cannot be trusted (a
``last_at`` in the future would switch the sequential alarms off until that date)."""

MAX_STATE_BYTES = 16 * 1024 * 1024
_TMP_NAME = re.compile(r"^\..+\.[A-Za-z0-9_]+\.tmp$")


class _NonFinite(ValueError):
    pass


def _no_constant(text: str) -> float:
    raise _NonFinite(f"non-finite number {text} in the state file")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NonFinite(f"number {text[:40]} overflows to {value}")
    return value


def state_fingerprint(monitor: MonitorConfig) -> str:
    """A short hash of the settings a monitor's sequential state depends on: schedule, windows,
    drift, decay and budget settings and the segment columns. A state file written under another
    fingerprint is set aside instead of resumed (reason ``config_changed``)."""
    return _settings_hash(
        {
            "schedule": monitor.schedule.text,
            "drift": asdict(monitor.drift),
            **_decay_settings(monitor),
        }
    )


def decay_fingerprint(monitor: MonitorConfig) -> str:
    """A short hash of the settings a monitor's decay track depends on: windows, decay and
    budget settings and the segment columns (not the schedule: looks are spent by elapsed time;
    nor the drift settings). A ``config_changed`` reset keeps the decay track when this is
    unchanged, so editing the schedule or a drift setting does not resolve a raised decay."""
    return _settings_hash(_decay_settings(monitor))


def _decay_settings(monitor: MonitorConfig) -> dict[str, object]:
    return {
        "windows": asdict(monitor.windows),
        "decay": asdict(monitor.decay),
        "budget": asdict(monitor.budget),
        "segments": [monitor.scores.segment_column, monitor.outcomes.segment_column],
    }


def _settings_hash(doc: dict[str, object]) -> str:
    """16 hex digits of SHA-256 over the settings as sorted JSON (a state file's fingerprints:
    the same settings give the same digest in every version)."""
    text = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def decay_kept(state: MonitorState, decay_print: str | None) -> DecayTrack | None:
    """``state``'s decay track, when it was saved under the decay settings ``decay_print``
    (a ``config_changed`` reset then starts everything else fresh); else None."""
    if decay_print is None or state.decay_fingerprint != decay_print:
        return None
    return state.decay


def state_is_finite(state: MonitorState) -> bool:
    """False when a sequential statistic is NaN or infinite (it could never recover)."""
    return all(
        math.isfinite(t.cusum) and t.cusum >= 0
        for seg in state.drift.values()
        for t in (seg.reference, seg.anchor)
    )


def _state_times(state: MonitorState, prefix: str = "") -> Iterator[tuple[str, datetime | None]]:
    """Every time a state holds (its copy from before the last slot's too), by its key: one
    in the future would stop what it times (a ``decay.runs_end`` ahead of now makes every
    later decay look wait for runs after it)."""
    decay = state.decay
    yield from (
        (f"{prefix}last_at", state.last_at),
        (f"{prefix}first_at", state.first_at),
        (f"{prefix}last_run", state.last_run),
        (f"{prefix}last_success", state.last_success),
        (f"{prefix}state_since", state.state_since),
        (f"{prefix}decay.runs_end", decay.runs_end),
        (f"{prefix}decay.reference_start", decay.reference_start),
        (f"{prefix}decay.reference_end", decay.reference_end),
        (f"{prefix}decay.hold_until", decay.hold_until),
        (f"{prefix}decay.runs_start", decay.runs_start),
    )
    for i, look in enumerate(decay.looks):
        yield f"{prefix}decay.looks[{i}]", look
    for segment, since in decay.active.items():
        yield f"{prefix}decay.active[{segment!r}]", since
    for segment, report in decay.reports.items():
        for key in ("looked_at", "runs_start", "runs_end", "reference_start", "reference_end"):
            # a look's runs ahead of now failed every check that rebuilt its pairs
            text = getattr(report, key)
            yield (
                f"{prefix}decay.reports[{segment!r}].{key}",
                None if text is None else datetime.fromisoformat(text.replace("Z", "+00:00")),
            )
    for segment, seg in state.drift.items():
        yield f"{prefix}drift[{segment!r}].evidence_end", seg.evidence_end
        yield f"{prefix}drift[{segment!r}].reference.active_since", seg.reference.active_since
        yield f"{prefix}drift[{segment!r}].anchor.active_since", seg.anchor.active_since
    if state.before_last is not None:
        yield from _state_times(state.before_last, "before_last.")


@dataclass(frozen=True, slots=True)
class StateLoad:
    """What reading one state file gave: the state to start from and, when the file could not be
    used, the reset ``reason`` (one of ``RESET_REASONS``), a ``detail`` message and where the file
    was set aside (None when it was left in place: read-only store, or the rename failed)."""

    state: MonitorState
    reason: str | None = None
    detail: str | None = None
    aside: Path | None = None
    saved_at: datetime | None = None


class StateStore:
    """One JSON file per monitor in ``directory``, written atomically (temp file, fsync, rename,
    fsync of the directory).

    A file that cannot be trusted (see ``RESET_REASONS``) is never resumed and never crashes the
    caller: it is renamed ``<name>.json.corrupt-<UTC time>`` beside itself and logged with its
    reason, and the monitor starts from a fresh state. When even the rename fails (a read-only
    directory, a mount point), that is logged too and the file stays; the monitor runs on fresh
    in-memory state and every later save fails visibly until an operator moves it.

    ``readonly`` (``monitor check``): never writes, renames or creates anything; an unreadable
    file is logged and treated as empty state. ``fingerprints`` (monitor name -> fingerprint)
    and ``clock`` are the defaults ``load`` checks a file against.
    """

    #: its saves reach the disk (a replay's in-memory store: not, so no log line says saved)
    durable = True

    def __init__(
        self,
        directory: Path,
        *,
        readonly: bool = False,
        clock: Callable[[], datetime] = utc_now,
        fingerprints: Mapping[str, str] | None = None,
        decay_prints: Mapping[str, str] | None = None,
    ) -> None:
        self.directory = directory
        self.readonly = readonly
        self._told: set[tuple[str, str]] = set()  # read-only: (monitor, reason) logged once
        self.clock = clock
        self.fingerprints = dict(fingerprints or {})
        self.decay_prints = dict(decay_prints or {})  # monitor -> ``decay_fingerprint``

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.json"

    def load(self, name: str) -> MonitorState:
        """The state to start ``name`` from (see ``read``)."""
        return self.read(name).state

    def read(
        self, name: str, *, fingerprint: str | None = None, now: datetime | None = None
    ) -> StateLoad:
        """Read and check ``name``'s file: a regular file of at most ``MAX_STATE_BYTES``, UTF-8,
        JSON without non-finite numbers, the version 1 shape, no time later than ``now`` +
        ``FUTURE_SKEW``, written under ``fingerprint`` (a file without one, from an older
        version, is adopted). Anything else is set aside (see the class docstring)."""
        fingerprint = fingerprint or self.fingerprints.get(name)
        now = now or self.clock()
        path = self.path(name)
        try:
            raw, st = read_regular_stat(path, MAX_STATE_BYTES)
        except FileNotFoundError:
            return StateLoad(MonitorState(fingerprint=fingerprint))
        except NotRegularFile as exc:
            return self._reject(name, fingerprint, exc.reason, str(exc))
        except OSError as exc:
            return self._reject(name, fingerprint, "unreadable", _os_error(exc))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return self._reject(name, fingerprint, "encoding", f"not UTF-8: {exc}")
        try:
            doc = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
        except _NonFinite as exc:
            return self._reject(name, fingerprint, "non_finite", str(exc))
        except (ValueError, RecursionError) as exc:
            detail = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            return self._reject(name, fingerprint, "syntax", f"not JSON: {detail}")
        try:
            state = MonitorState.from_dict(doc)
        except SHAPE_ERRORS as exc:
            return self._reject(name, fingerprint, "shape", f"{type(exc).__name__}: {exc}")
        if not state_is_finite(state):
            return self._reject(name, fingerprint, "non_finite", "a CUSUM is not finite")
        limit = now + FUTURE_SKEW
        for key, t in _state_times(state):
            if t is not None and t > limit:
                detail = f"{key} {t.isoformat()} is after now ({now.isoformat()})"
                return self._reject(name, fingerprint, "future", detail)
        if fingerprint and state.fingerprint and state.fingerprint != fingerprint:
            detail = (
                f"written for settings {state.fingerprint}, the monitor now has {fingerprint} "
                f"(schedule, windows, drift, decay, budget or segments changed)"
            )
            kept = decay_kept(state, self.decay_prints.get(name))
            if kept is not None:
                detail += "; the decay track is kept (its own settings did not change)"
            return self._reject(name, fingerprint, "config_changed", detail, kept, state)
        saved_at = datetime.fromtimestamp(st.st_mtime, UTC)
        adopted = replace(state, fingerprint=fingerprint or state.fingerprint)
        return StateLoad(adopted, saved_at=saved_at)

    def _reject(
        self,
        name: str,
        fingerprint: str | None,
        reason: str,
        detail: str,
        decay: DecayTrack | None = None,
        prior: MonitorState | None = None,
    ) -> StateLoad:
        """Start ``name`` fresh (the file set aside unless read-only). ``prior``: a state
        written under other settings (config_changed), whose state and its start, last run
        and last success are kept, as a reload keeps them (a restart dropped the last success,
        and the stale alert's clock started at the restart)."""
        path = self.path(name)
        fresh = MonitorState(fingerprint=fingerprint)
        if prior is not None:
            fresh = replace(fresh, **prior.times())  # type: ignore[arg-type]
        if decay is not None:  # config_changed with the decay settings unchanged
            fresh = replace(
                fresh,
                decay=decay,
                decay_fingerprint=self.decay_prints.get(name),
                origin_decay=decay,  # where a replay from this state's first slot starts
            )
        fields = {"monitor": name, "path": str(path), "reason": reason, "error": detail}
        if self.readonly:
            # once a process: a command reads a state more than once (the runner's start,
            # then the check), and the same line twice read as two problems
            if (name, reason) not in self._told:
                self._told.add((name, reason))
                log.error("state file unreadable; checking without sequential state", extra=fields)
            return StateLoad(fresh, reason, detail)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        aside = path.with_name(f"{path.name}.corrupt-{stamp}")
        n = 1
        while aside.exists() or aside.is_symlink():
            n += 1
            aside = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        try:
            path.rename(aside)
        except OSError as exc:
            log.error(
                "state file unreadable and could not be set aside; starting fresh without it "
                "(saves fail until it is moved)",
                extra={**fields, "rename_error": _os_error(exc)},
            )
            return StateLoad(fresh, reason, detail)
        log.error(
            "state file unreadable, kept aside and starting fresh",
            extra={**fields, "aside": str(aside)},
        )
        return StateLoad(fresh, reason, detail, aside)

    def sweep(self) -> int:
        """Remove temp files (``.<name>.<pid>_<thread>.tmp``) that interrupted saves left behind;
        returns how many. Never in a read-only store."""
        if self.readonly:
            return 0
        removed = 0
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return 0
        for entry in entries:
            if not _TMP_NAME.match(entry.name):
                continue
            try:
                if entry.is_file(follow_symlinks=False):
                    os.unlink(entry.path)
                    removed += 1
            except OSError as exc:
                log.warning(
                    "stale temporary state file not removed",
                    extra={"path": entry.path, "error": _os_error(exc)},
                )
        if removed:
            log.info(
                "removed stale temporary state files",
                extra={"count": removed, "directory": str(self.directory)},
            )
        return removed

    def save(self, name: str, state: MonitorState) -> None:
        """Write ``state`` atomically; raises ``OSError`` (read-only or full disk, a directory
        in the way) or ``ValueError`` (a non-finite number, or a state larger than the
        ``MAX_STATE_BYTES`` a start reads: written, it would be set aside as ``too_large`` at
        the next start, every alarm with it) and leaves no temp file behind."""
        if self.readonly:
            raise PermissionError(f"state store {self.directory} is read-only (monitor check)")
        text = encode_state(state)
        if len(text) > MAX_STATE_BYTES:  # ASCII JSON: a character a byte
            raise ValueError(
                f"the state is {len(text)} bytes, more than the {MAX_STATE_BYTES} a start reads "
                "(fewer segments, drift bins or seasonal phases make it smaller); the last "
                "saved state is kept"
            )
        atomic_write(self.directory, self.path(name), text, stem=name)


_SLOT = f"\0anchor-{secrets.token_hex(8)}-"  # a placeholder no state string holds
_SLOTS = re.compile(re.escape(json.dumps(_SLOT)[:-1]) + r'\d+"')


def encode_state(state: MonitorState) -> str:
    """The state file's text: ``json.dumps(state.to_dict())``, compact, keys sorted, no NaN
    (an anchor holds a few thousand counts, and a save needs room for two copies). Each
    anchor's JSON and the decay track's are made once (``Anchor.to_json``,
    ``DecayTrack.to_json``) and set in place of a placeholder, not encoded again at every
    check: the same bytes, 0.45 ms less a save at 168 phases, 0.1 ms less for the decay
    track's reports."""
    doc = state.to_dict(decay=False)  # each "decay" is set from its track's kept JSON below
    held: dict[str, str] = {}
    for d, s in ((doc, state), (doc.get("before_last"), state.before_last)):
        if d is None or s is None:
            continue
        slot = f"{_SLOT}{len(held)}"
        d["decay"] = slot
        held[json.dumps(slot)] = s.decay.to_json()
        for segment, drift in s.drift.items():
            if drift.anchor_ref is not None:
                slot = f"{_SLOT}{len(held)}"
                d["drift"][segment] = {**d["drift"][segment], "anchor_ref": slot}
                held[json.dumps(slot)] = drift.anchor_ref.to_json()
    text = json.dumps(doc, separators=(",", ":"), sort_keys=True, allow_nan=False)
    if not held:
        return text
    # one pass over the text (a replace per slot scanned it once each: seconds a save with a
    # thousand segments' anchors)
    return _SLOTS.sub(lambda m: held[m.group(0)], text)


DAEMON_LOCK = ".daemon.lock"


class StateDirBusy(OSError):
    """Another live process holds ``state_dir``'s daemon lock: ``holder``, its pid (as the
    lock file says it, or ``"unknown"``)."""

    def __init__(self, message: str, holder: str = "unknown") -> None:
        super().__init__(message)
        self.holder = holder


def lock_state_dir(directory: Path) -> int | None:
    """Take ``<directory>/.daemon.lock`` for this process's life: an exclusive ``flock``,
    not waited for, with this process's pid written in the file. Returns the descriptor,
    kept open (the kernel lets go when the process ends, a ``kill -9`` included; it is not
    inherited across ``exec``). ``StateDirBusy`` naming the holder's pid when another process
    holds it: two daemons on one state_dir would run every check twice and overwrite each
    other's states, and one would sweep the other's temp files at its start. None, with a
    warning, when no lock can be taken (a read-only state_dir, where no state can be saved
    either and the daemon says so; a filesystem without ``flock``)."""
    import fcntl

    path = directory / DAEMON_LOCK
    writable = True
    # never waited on: a FIFO in the file's place once blocked the start for good
    flags = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o644)
    except OSError as exc:
        # another user's lock file, or a read-only state_dir that has one: flock works on a
        # descriptor opened for reading too (once no lock was taken, and two daemons ran)
        try:
            fd = os.open(path, os.O_RDONLY | flags)
        except OSError:
            log.warning(
                "state_dir not locked: a second daemon on it would not be refused",
                extra={"path": str(path), "error": _os_error(exc)},
            )
            return None
        writable = False
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        regular = False
    if not regular:
        os.close(fd)
        log.warning(
            "state_dir not locked: a second daemon on it would not be refused",
            extra={"path": str(path), "error": "not a regular file"},
        )
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        except OSError:
            holder = "unknown"
        finally:
            os.close(fd)
        raise StateDirBusy(
            f"state_dir {directory} is in use by another daemon (pid {holder}, lock file "
            f"{path}): one daemon per state_dir; stop it, or give this one its own state_dir",
            holder,
        ) from None
    except OSError as exc:
        os.close(fd)
        log.warning(
            "state_dir not locked: a second daemon on it would not be refused",
            extra={"path": str(path), "error": _os_error(exc)},
        )
        return None
    if not writable:
        return fd  # locked; the file keeps the pid it had (a refusal may name an old one)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    except OSError as exc:  # locked all the same; only the pid a refusal names is missing
        log.warning(
            "pid not written to the state_dir lock",
            extra={"path": str(path), "error": _os_error(exc)},
        )
    return fd


def _os_error(exc: BaseException) -> str:
    """An OS error's text with the paths it names: both of a rename (the temp file and the
    state file in the way: naming the temp file alone sent on-call to a file that does not
    exist)."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        if exc.filename2:
            where += f" -> {exc.filename2}"
        return f"{type(exc).__name__}: [Errno {exc.errno}] {exc.strerror}{where}"
    return f"{type(exc).__name__}: {exc}"


__all__ = [
    "DAEMON_LOCK",
    "FUTURE_SKEW",
    "MAX_STATE_BYTES",
    "RESET_REASONS",
    "SHAPE_ERRORS",
    "StateDirBusy",
    "StateLoad",
    "StateStore",
    "decay_fingerprint",
    "decay_kept",
    "encode_state",
    "lock_state_dir",
    "state_fingerprint",
    "state_is_finite",
    "utc_now",
]
