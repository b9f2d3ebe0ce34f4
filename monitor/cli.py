"""Command line: ``monitor validate [--sources] | check | report | run | demo | backtest``.

``check`` exit codes follow the Nagios plugin convention: 0 all ``ok``; 1 any
``data_drift``; 2 any ``model_decay`` (2 wins over 1); 3 when the worst is
``insufficient_data`` or ``error``, or the configuration or the arguments are invalid (every
command exits 3 on a usage error, never argparse's 2).

``check`` and ``report`` read the alarm thresholds the daemon cached
(``<state_dir>/cache/thresholds.json``, ``monitor.thresholds``), so that a one-shot process does
not search them again; they write no state, history or thresholds (with an ``[engine]``, the
bucket summaries they compute go to the daemon's cache, ``<state_dir>/summaries/``: a cache
entry is no state, docs/engines.md).

``run`` exits 0 after SIGTERM/SIGINT when every monitor's state was saved, 1 when one could not be
(one log line names them) or the daemon could not start (e.g. its listen address is taken), 3 when
the configuration is invalid. Neither ``run`` nor ``check`` crashes on a damaged state file: it is
set aside (``run``) or ignored (``check``) with its reason logged.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shlex
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from monitor import __version__
from monitor.epoch import rfc3339
from monitor.errors import ConfigError, ReplayRangeError
from monitor.schedule import parse_rfc3339

if TYPE_CHECKING:
    from monitor.config import Config
    from monitor.verdict import MonitorState, Verdict

__all__ = ["EXIT_CODES", "exit_code", "main"]

EXIT_CODES = {"ok": 0, "data_drift": 1, "model_decay": 2, "insufficient_data": 3, "error": 3}
# Worst first: decay beats drift beats "cannot tell" beats ok.
_SEVERITY = {"ok": 0, "insufficient_data": 1, "error": 1, "data_drift": 2, "model_decay": 3}


def exit_code(states: Sequence[str]) -> int:
    """Nagios-style exit code of a set of monitor states (see the module docstring)."""
    if not states:
        return 3
    worst = max(states, key=lambda s: _SEVERITY[s])
    return EXIT_CODES[worst]


def _parse_at(text: str) -> datetime:
    """An RFC 3339 time (``Z`` or ``z`` for UTC; without an offset, UTC) as an aware UTC time."""
    try:
        t = parse_rfc3339(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be an RFC 3339 time like 2026-11-30T00:00:00Z; got {text!r}"
        ) from None
    t = (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)
    if not _EARLIEST <= t <= _LATEST:  # once a traceback (OverflowError) from a window's start
        raise argparse.ArgumentTypeError(
            f"{text!r} is outside the times a check can place its windows at "
            f"({_EARLIEST.year} to {_LATEST.year}: nanoseconds since 1970 in 64 bits, less "
            "the windows and the budget period before it)"
        )
    return t


# timestamps are int64 nanoseconds since 1970 (1677-09-21 to 2262-04-11); a slot's windows and
# its replay reach back from it by the windows and a budget period (years at most)
_EARLIEST = datetime(1700, 1, 1, tzinfo=UTC)
_LATEST = datetime(2262, 1, 1, tzinfo=UTC)


def _log_level(text: str) -> str:
    from monitor.logs import LOG_LEVELS

    if text.lower() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"must be one of {', '.join(LOG_LEVELS)} (any case); got {text!r}"
        )
    return text.lower()


def _listen_address(text: str) -> str:
    """``text`` when it is a listen address ``parse_listen`` takes (a usage error, not a
    traceback, otherwise)."""
    from monitor.config import parse_listen

    try:
        parse_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _checked(
    text: str, convert: Callable[[str], Any], noun: str, ok: Callable[[Any], bool], rule: str
) -> Any:
    """``convert(text)`` when it is ``noun`` and ``ok`` (a usage error naming ``rule``
    otherwise)."""
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {noun}: {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"must be {rule}; got {text}")
    return value


def _positive_seconds(text: str) -> float:
    """``text`` as a finite number of seconds above zero."""
    rule = "a finite number of seconds above 0"
    return float(_checked(text, float, "a number of seconds", lambda x: 0 < x < math.inf, rule))


def _seed(text: str) -> int:
    """``text`` as a non-negative integer seed."""
    return int(_checked(text, int, "an integer", lambda x: x >= 0, "a non-negative integer"))


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error (an unknown flag, a bad value) exits 3, not 2: ``check``'s
    callers read exit codes as Nagios states, where 2 is CRITICAL (here: model decay) and a
    plugin that could not run is UNKNOWN (3). Subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(3, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="monitor",
        description="Tells data drift from model decay in search and retrieval systems.",
    )
    p.add_argument("--version", action="version", version=f"retrieval-monitor {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    v = sub.add_parser("validate", help="validate a configuration file (exit 3 when invalid)")
    v.add_argument("--config", required=True, type=Path)
    v.add_argument(
        "--sources",
        action="store_true",
        help="also open every source: list its files, read their parquet footers and check the "
        "configured columns and types (no data is read); every problem is reported",
    )
    v.add_argument(
        "--plans",
        action="store_true",
        help="also make each monitor's alarm plan (one segment, and max_segments with a segment "
        "column): settings no CUSUM threshold holds are refused; seconds a monitor the first "
        "time (the daemon's cached thresholds are used)",
    )

    c = sub.add_parser("check", help="run every (or one) monitor once; read-only")
    c.add_argument("--config", required=True, type=Path)
    c.add_argument("--monitor", help="only this monitor")
    c.add_argument(
        "--at", type=_parse_at, help="evaluate the slot at or before this time (default the latest)"
    )
    c.add_argument("--json", action="store_true", help="print the JSON contract")
    c.add_argument(
        "--replay-from",
        type=_parse_at,
        help="for an --at before the daemon's latest slot, rebuild the sequential state by "
        "replaying the slots from this time (default: the daemon's first slot, or one budget "
        "period before --at)",
    )

    rp = sub.add_parser(
        "report",
        help="write one self-contained HTML page per monitor for one slot (read-only, like check)",
    )
    rp.add_argument("--config", required=True, type=Path)
    rp.add_argument("--monitor", help="only this monitor")
    rp.add_argument(
        "--at", type=_parse_at, help="the slot at or before this time (default the latest)"
    )
    rp.add_argument(
        "--out",
        type=Path,
        help="the page (a path ending in .html, one monitor) or a directory for one page per "
        "monitor, named <monitor>-<slot>.html (default: the current directory)",
    )
    rp.add_argument(
        "--replay-from",
        type=_parse_at,
        help="as for check: rebuild the sequential state by replaying the slots from this time",
    )

    r = sub.add_parser("run", help="run the daemon (scheduler + /metrics)")
    r.add_argument("--config", required=True, type=Path)
    r.add_argument(
        "--web.listen-address",
        dest="listen",
        action=_Once,
        metavar="HOST:PORT",
        help="address to listen on ('[::1]:9464' for IPv6; ':9464' is loopback only, unlike "
        "node_exporter: give '0.0.0.0:9464' for every interface); overrides [server] listen",
    )
    r.add_argument(
        "--web.config.file",
        dest="web_config_file",
        type=Path,
        metavar="PATH",
        help="exporter-toolkit web config (TLS, basic auth); overrides [server] web_config_file",
    )
    r.add_argument(
        "--log.level",
        "--log-level",
        dest="log_level",
        type=_log_level,
        default="info",
        metavar="LEVEL",
        help="debug, info, warn, error (any case; default info)",
    )
    r.add_argument(
        "--log.format",
        dest="log_format",
        choices=("json", "logfmt"),
        default="json",
        help="log line format (default json)",
    )

    d = sub.add_parser("demo", help="write a synthetic world and run the daemon on it, fast")
    d.add_argument(
        "--dir",
        type=Path,
        default=Path("demo-world"),
        help="where to write it (a new or empty directory, or an earlier demo world, which is "
        "replaced; any other directory is refused)",
    )
    d.add_argument(
        "--web.listen-address",
        "--listen",
        dest="listen",
        type=_listen_address,
        default="127.0.0.1:9464",
        metavar="HOST:PORT",
        help="address to listen on (default 127.0.0.1:9464)",
    )
    d.add_argument(
        "--tick", type=_positive_seconds, default=0.3, help="real seconds per simulated check"
    )
    d.add_argument("--seed", type=_seed, default=7)
    d.add_argument(
        "--log.level", "--log-level", dest="log_level", type=_log_level, default="warning"
    )

    b = sub.add_parser("backtest", help="replay scheduled checks over historical logs")
    b.add_argument("--config", required=True, type=Path)
    b.add_argument("--from", dest="start", required=True, type=_parse_at)
    b.add_argument("--to", dest="end", required=True, type=_parse_at)
    b.add_argument("--monitor", help="only this monitor")
    b.add_argument(
        "--report",
        type=Path,
        metavar="DIR",
        help="also write each monitor's HTML page for the last replayed slot and for every slot "
        "whose state changed, into DIR",
    )
    fmt = b.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true")
    return p


def _load(path: Path) -> Config | None:
    """The validated config, or None after printing every problem to stderr (exit code 3)."""
    from monitor.config import load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return None


def _cmd_validate(args: argparse.Namespace) -> int:
    config = _load(args.config)
    if config is None:
        return 3
    names = ", ".join(m.name for m in config.monitors)
    if args.plans and not _validate_plans(config):
        return 3
    if args.sources and not _validate_sources(config):
        return 3
    print(f"{args.config}: valid ({len(config.monitors)} monitor(s): {names})")
    return 0


def _validate_plans(config: Config) -> bool:
    """Make each monitor's alarm plan, for one segment and, with a segment column, for
    ``max_segments`` (``validate --plans``): settings no plan holds (a budget too small for any
    CUSUM threshold, a reference of one schedule interval at a small budget) made every check
    an ``error`` after ``validate`` said valid. Each problem printed (stderr). Opt-in: a plan's
    threshold search costs seconds (``validate`` is a systemd ExecStartPre)."""
    from monitor.errors import StatsInputError
    from monitor.thresholds import load_thresholds
    from monitor.verdict import alarm_plan

    load_thresholds(config.server.state_dir)  # the daemon's: a plan it made costs nothing
    problems: list[str] = []
    for i, m in enumerate(config.monitors):
        counts = [1] + ([m.max_segments] if m.scores.segment_column is not None else [])
        for segments in sorted(set(counts)):
            try:
                alarm_plan(m, segments)
            except (StatsInputError, ValueError, ArithmeticError) as exc:
                problems.append(
                    f"monitors[{i}].budget ({m.name}): no alarm plan holds these settings with "
                    f"{segments} segment(s): {exc} (budget.drift, drift.cusum_share, "
                    "drift.cusum_k and the windows against the schedule set it)"
                )
                break
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        print(f"{config.path}: {len(problems)} problem(s):\n{lines}", file=sys.stderr)
    return not problems


def _validate_sources(config: Config) -> bool:
    """Open every source of every monitor; print each problem (stderr) and a line per source."""
    from monitor.redact import redact
    from monitor.sources import display_path, inspect_source

    problems: list[str] = []
    for i, m in enumerate(config.monitors):
        for role, spec in (("scores", m.scores), ("outcomes", m.outcomes)):
            report = inspect_source(spec)
            where = f"monitors[{i}].{role}"
            problems.extend(f"{where}: {p}" for p in report.problems)
            state = "ok" if report.ok else f"{len(report.problems)} problem(s)"
            shown = redact(display_path(spec.path))  # a URI's password is no output
            print(f"{where} ({m.name}): {report.files} file(s), {state}: {shown}")
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        print(f"{config.path}: {len(problems)} source problem(s):\n{lines}", file=sys.stderr)
    return not problems


def _fmt(x: Any, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _config_and_names(args: argparse.Namespace) -> tuple[Config, list[str]] | None:
    """The configuration and the monitors ``--monitor`` names (all by default); None (exit 3,
    the problem printed) when the file is invalid or names no such monitor."""
    config = _load(args.config)
    if config is None:
        return None
    try:
        names = (
            [config.monitor(args.monitor).name]
            if args.monitor is not None
            else [m.name for m in config.monitors]
        )
    except KeyError as exc:
        print(f"{args.config}: {exc.args[0]}", file=sys.stderr)
        return None
    return config, names


def _cmd_check(args: argparse.Namespace) -> int:
    from monitor.jobs import Runner, StateStore, state_fingerprint
    from monitor.logs import configure_logging
    from monitor.thresholds import load_thresholds

    configure_logging("WARNING")  # problems (e.g. an ignored state file) as JSON lines on stderr
    chosen = _config_and_names(args)
    if chosen is None:
        return 3
    config, names = chosen
    # Read-only: an untrustworthy state file (bad encoding or shape, non-finite numbers, times
    # in the future, written for other settings) is logged and ignored, never set aside here.
    fingerprints = {m.name: state_fingerprint(m) for m in config.monitors}
    store = StateStore(config.server.state_dir, readonly=True, fingerprints=fingerprints)
    load_thresholds(config.server.state_dir)  # before anything computes an alarm plan
    runner = Runner(config, store=store)
    verdicts, hung = [], False
    # the time asked about, whatever the monitors' slots (it was the first monitor's slot:
    # another order of the same monitors gave another time)
    asked = args.at or datetime.now(UTC)
    for name in names:
        monitor = config.monitor(name)
        at_, start = _check_plan(monitor, store, args.at, args.replay_from, asked)
        # each check within its run_timeout, as the daemon's runs: a replay (many checks) is
        # abandoned when its read or one of its slots takes longer
        seconds = monitor.run_timeout.total_seconds()
        verdict = _within(
            seconds,
            lambda beat, name=name, at_=at_, start=start: (
                runner.check(name, at_)
                if start is None
                else _replay_check(config, name, at_, start, beat, store.load(name))
            ),
        )
        if verdict is None:  # a hung source: this monitor's error, the others still checked
            verdict = _abandoned(name, at_, seconds)
            hung = True
        verdicts.append(verdict)
    if args.json:
        doc = {
            "at": rfc3339(asked),
            "monitors": [v.to_dict() for v in verdicts],
        }
        print(json.dumps(doc, indent=1))
    else:
        header = f"{'monitor':<20} {'state':<18} {'PSI':>7} {'KS D':>6} {'pairs':>6} "
        header += f"{'mean d':>8} {'p':>9} {'CI':>19}"
        print(header)
        for v in verdicts:
            i, o = v.input, v.outcome
            ci = "-" if o is None or o.ci_low is None else f"[{o.ci_low:+.4f},{o.ci_high:+.4f}]"
            print(
                f"{v.monitor:<20} {v.state:<18} {_fmt(i and i.psi, '7.4f'):>7} "
                f"{_fmt(i and i.ks_statistic, '6.3f'):>6} {_fmt(o and o.n_pairs, 'd'):>6} "
                f"{_fmt(o and o.mean_difference, '+8.4f'):>8} "
                f"{_fmt(o and o.pvalue_adjusted, '9.3g'):>9} {ci:>19}"
            )
            for reason in v.reasons:
                print(f"    - {reason}")
    code = exit_code([v.state for v in verdicts])
    # only when a check was abandoned: its thread may sit in a native call that would hold
    # the exit. Never otherwise (an in-process caller's own threads are none of its business:
    # os._exit once ended a test run that had one, with this check's exit code)
    return _exit_hard_if_stuck(code, stuck=True) if hung else code


def _abandoned(name: str, at: datetime, seconds: float) -> Verdict:
    """The ``error`` verdict of a check ``_within`` abandoned after ``seconds``."""
    from monitor.verdict import error_verdict

    return error_verdict(
        name, at, f"check exceeded run_timeout={seconds:g}s and was abandoned (a source may hang)"
    )


def _within(seconds: float, work: Any) -> Any:
    """``work(beat)`` in a thread of its own, waited for while it makes progress: its result,
    or None when ``seconds`` (a monitor's run_timeout, as the daemon bounds its runs) pass
    without a call of ``beat`` (a replay calls it after each slot) or without its end (a hung
    source; the thread is left behind and the process exits without waiting for it). Its
    exception, if it raised one, is raised here."""
    box: dict[str, Any] = {}
    last = [time.monotonic()]

    def beat() -> None:
        last[0] = time.monotonic()

    def target() -> None:
        try:
            box["value"] = work(beat)
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=target, name="check", daemon=True)
    thread.start()
    while True:
        thread.join(max(0.0, last[0] + seconds - time.monotonic()))
        if not thread.is_alive():
            break
        if time.monotonic() - last[0] >= seconds:
            return None
    if "error" in box:
        raise box["error"]
    return box["value"]


def _check_plan(
    monitor: Any,
    store: Any,
    at: datetime | None,
    replay_from: datetime | None,
    now: datetime | None = None,
) -> tuple[datetime, datetime | None]:
    """The slot ``check`` decides for ``monitor``, and where its replay starts (None: none).

    ``at`` at or after the daemon's latest slot: the persisted state (read-only), no replay. An
    earlier ``at`` (or any ``at`` without daemon state, or with ``replay_from``): the sequential
    state is rebuilt by replaying the slots from ``replay_from`` (default: the daemon's first
    slot, else one budget period before ``at``). No ``at``: the latest slot, by the same rule
    (without daemon state it once skipped the replay and decided from nothing: ``ok`` on a
    days-old decay). An ``at`` between slots decides the slot before it, as the daemon would
    (a warning names both): the exact time once placed the windows where no daemon check ever
    does, and an alert's time pasted from Grafana got another verdict than the daemon's.
    ``now``: the clock as the command read it once (every monitor's latest slot from one
    reading: a slot boundary passing between monitors put one after the time asked about).
    """
    state = store.load(monitor.name)
    if at is None:
        at = monitor.schedule.latest_slot(now or datetime.now(UTC))
    elif (slot := monitor.schedule.latest_slot(at)) != at:
        logging.getLogger("monitor").warning(
            "--at is not a slot of the monitor's schedule; checking the slot before it",
            extra={"monitor": monitor.name, "at": rfc3339(at), "slot": rfc3339(slot)},
        )
        at = slot
    if replay_from is None and state.last_at is not None and at >= state.last_at:
        return at, None
    start = replay_from
    if start is None:
        first = state.first_at
        start = first if first is not None and first <= at else at - monitor.budget.period
    return at, start


def _replay_check(
    config: Config,
    name: str,
    at: datetime,
    start: datetime,
    beat: Any = None,
    daemon: MonitorState | None = None,
) -> Any:
    """``monitor check`` of an earlier slot: a replay from ``start``, skipping the slots the
    ``daemon``'s state never saw and starting from the decay track it began with."""
    from monitor.backtest import replay_check  # only here: it imports the report pages

    skipped, origin = _replay_seed(daemon, start)
    return replay_check(config, name, at, start, progress=beat, skipped=skipped, origin=origin)


def _replay_seed(
    daemon: MonitorState | None, start: datetime
) -> tuple[Sequence[tuple[datetime, datetime]], Any]:
    """The daemon's skipped spans, and the decay track its state began with when the replay
    starts where that state did (its ``first_at``)."""
    if daemon is None:
        return (), None
    origin = daemon.origin_decay if daemon.first_at == start else None
    return daemon.skipped, origin


def _recorded_since(state: MonitorState, verdict: Verdict) -> datetime | None:
    """The daemon's record of when the page's state began, where it is this state's: the same
    state, begun at or before the page's check. A page of an earlier run of the same state
    (``--at`` before the record began) gets None and dates the state from its history; the
    record's date would be after the check it heads."""
    since = state.state_since
    if state.state != verdict.state or state.last_at is None or since is None:
        return None
    return since if since <= verdict.at else None


def _cmd_report(args: argparse.Namespace) -> int:
    import hashlib

    from monitor.jobs import Runner, StateStore, state_fingerprint
    from monitor.logs import configure_logging
    from monitor.report import HistoryStore, PageContext, page_file_name, render_monitor_page
    from monitor.thresholds import load_thresholds

    configure_logging("WARNING")
    chosen = _config_and_names(args)
    if chosen is None:
        return 3
    config, names = chosen
    out: Path = args.out or Path(".")
    single = out.suffix.lower() == ".html"
    if single and len(names) > 1:
        print(
            f"--out {out}: a single .html file needs --monitor ({len(names)} monitors); "
            "give a directory for one page per monitor",
            file=sys.stderr,
        )
        return 3
    fingerprints = {m.name: state_fingerprint(m) for m in config.monitors}
    store = StateStore(config.server.state_dir, readonly=True, fingerprints=fingerprints)
    load_thresholds(config.server.state_dir)  # before anything computes an alarm plan
    runner = Runner(config, store=store)
    history = HistoryStore(
        config.server.state_dir,
        readonly=True,
        max_entries=config.report.history_max_entries,
        max_age=config.report.history_max_age,
    )
    digest = hashlib.sha256(args.config.read_bytes()).hexdigest()
    states, hung = [], False
    now = datetime.now(UTC)  # one reading for every monitor's latest slot
    for name in names:
        at, start = _check_plan(config.monitor(name), store, args.at, args.replay_from, now)
        # within the monitor's run_timeout, as check: a hung source once held report forever
        seconds = config.monitor(name).run_timeout.total_seconds()
        got = _within(
            seconds,
            lambda beat, name=name, at=at, start=start: _report_one(
                config, runner, store, history, name, at, start, beat
            ),
        )
        if got is None:  # a hung source: an error page, the other monitors' pages still drawn
            got = (_abandoned(name, at, seconds), None, _entries_to(history, name, at))
            hung = True
        verdict, detail, entries = got
        since = _recorded_since(store.load(name), verdict)
        at_text = rfc3339(verdict.at)
        config_arg = shlex.quote(str(args.config))  # a path with a space or a quote
        command = f"monitor report --config {config_arg} --monitor {name} --at {at_text}"
        if verdict.replay_from is not None:
            command += " --replay-from " + rfc3339(verdict.replay_from)
        page = render_monitor_page(
            config.monitor(name),
            verdict,
            detail,
            entries,
            PageContext(
                report=config.report,
                state_since=since,
                command=command,
                config_path=str(args.config),
                config_sha256=digest,
            ),
        )
        target = out if single else out / page_file_name(name, verdict.at)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(page, encoding="utf-8")
        except OSError as exc:
            print(f"{target}: cannot write the page: {exc.strerror or exc}", file=sys.stderr)
            return 3
        print(f"{target} ({verdict.state}, {len(page.encode()) / 1024:.0f} KiB)")
        states.append(verdict.state)
    code = exit_code(states)
    return _exit_hard_if_stuck(code, stuck=True) if hung else code


def _report_one(
    config: Config,
    runner: Any,
    store: Any,
    history: Any,
    name: str,
    at: datetime,
    start: datetime | None,
    beat: Any,
) -> tuple[Any, Any, tuple[Any, ...]]:
    """The verdict, detail and history of one page: as ``check`` decides the verdict (``at``
    and ``start`` from ``_check_plan``), the daemon's history up to the slot (or the replay's
    own)."""
    if start is None:
        verdict, detail = runner.check_detail(name, at)
    else:
        from monitor.backtest import replay_record  # only a replay needs it

        skipped, origin = _replay_seed(store.load(name), start)
        record = replay_record(
            config,
            name,
            at,
            start,
            detail=True,
            skipped=skipped,
            origin=origin,
            progress=beat,
        )
        return record.verdict, record.detail, record.history
    return verdict, detail, _entries_to(history, name, verdict.at)


def _entries_to(history: Any, name: str, at: datetime) -> tuple[Any, ...]:
    """The daemon's history of ``name`` up to the slot ``at``."""
    return tuple(e for e in history.entries(name) if _parse_at(str(e["at"])) <= at)


def _exit_hard_if_stuck(code: int, *, stuck: bool = False) -> int:
    """Abandoned runs may still hold a worker thread (``stuck``: the daemon knows one still runs,
    e.g. inside a native S3 call whose library would wait for it at exit); do not let them
    delay the exit."""
    if stuck or any(
        t.is_alive() and not t.daemon
        for t in threading.enumerate()
        if t is not threading.main_thread()
    ):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _log_numpy_kernels() -> None:
    """Log numpy's kernels where ``monitor.entry`` chose them (``monitor.cpu``)."""
    from monitor import cpu

    if cpu.chosen is not None:
        logging.getLogger("monitor").info(
            "numpy's AVX-512 kernels off",
            extra={"reason": cpu.REASON, cpu.VARIABLE: cpu.chosen},
        )
    if cpu.problem is not None:
        logging.getLogger("monitor").warning(
            "numpy's kernels left as numpy chose them: could not decide",
            extra={"error": cpu.problem},
        )


def _cmd_run(args: argparse.Namespace) -> int:
    import signal

    # a SIGHUP (systemctl reload) during start-up once ended the process, silently and for
    # good under Restart=on-failure: until serve() handles it, it is noted, then applied
    hup = threading.Event()
    signal.signal(signal.SIGHUP, lambda signum, frame: hup.set())
    from monitor.config import with_server_flags
    from monitor.daemon import Daemon
    from monitor.logs import configure_logging

    configure_logging(args.log_level, args.log_format)
    _log_numpy_kernels()
    config = _load(args.config)
    if config is None:
        return 3
    try:
        config = with_server_flags(config, listen=args.listen, web_config_file=args.web_config_file)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 3
    from monitor.store import StateDirBusy, lock_state_dir

    try:
        # held until the process ends (the descriptor is never closed): one daemon per
        # state_dir, taken before the start-up sweep of temp files, which are any writer's
        lock_state_dir(config.server.state_dir)
    except StateDirBusy as exc:
        logging.getLogger("monitor").error("cannot start", extra={"error": str(exc)})
        return 1
    try:
        daemon = Daemon(config)
    except OSError as exc:  # e.g. the listen address is taken: one line, no traceback
        logging.getLogger("monitor").error(
            "cannot start", extra={"error": f"{type(exc).__name__}: {exc}"}
        )
        return 1
    code = daemon.serve(reload_pending=hup.is_set)
    return _exit_hard_if_stuck(code, stuck=bool(daemon.wait_idle(0)))


class _Once(argparse.Action):
    """A flag given at most once: exporter-toolkit's --web.listen-address is repeatable (one
    listener each), and argparse kept the last of several silently; one listener is served
    here, so a second is a usage error, not an address quietly dropped."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(
                f"{option_string} given more than once: one address is served (put a proxy "
                "in front for more)"
            )
        setattr(namespace, self.dest, values)


def _cmd_demo(args: argparse.Namespace) -> int:
    from monitor.demo import DemoDirError, run_demo

    try:
        code = run_demo(
            args.dir, listen=args.listen, tick=args.tick, seed=args.seed, log_level=args.log_level
        )
    except DemoDirError as exc:
        print(f"monitor demo: error: {exc}", file=sys.stderr)
        return 3
    return _exit_hard_if_stuck(code)


def _cmd_backtest(args: argparse.Namespace) -> int:
    from monitor.backtest import run_backtest_cli
    from monitor.logs import configure_logging

    # problems as JSON lines on stderr, as check writes them: unset, Python's last-resort
    # handler printed each errored slot's warning as the bare word "check"
    configure_logging("WARNING")
    config = _load(args.config)
    if config is None:
        return 3
    code: int = run_backtest_cli(
        config,
        args.start,
        args.end,
        monitor=args.monitor,
        as_json=args.json,
        as_csv=args.csv,
        report_dir=args.report,
    )
    return code


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``monitor`` console script; returns the process exit code."""
    args = _parser().parse_args(argv)
    commands = {
        "validate": _cmd_validate,
        "check": _cmd_check,
        "report": _cmd_report,
        "run": _cmd_run,
        "demo": _cmd_demo,
        "backtest": _cmd_backtest,
    }
    try:
        return commands[args.command](args)
    except ReplayRangeError as exc:  # a usage error, raised before any slot is replayed
        print(f"monitor {args.command}: error: {exc}", file=sys.stderr)
        return 3
    except Exception:  # a bug: UNKNOWN (3) to a Nagios caller, not 1 (WARNING)
        traceback.print_exc()
        print(f"monitor {args.command}: unexpected error (the traceback above)", file=sys.stderr)
        return 3
