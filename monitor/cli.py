"""Command line: ``monitor validate | check | run | demo | backtest``.

``check`` exit codes follow the Nagios plugin convention: 0 all ``ok``; 1 any
``data_drift``; 2 any ``model_decay`` (2 wins over 1); 3 when the worst is
``insufficient_data`` or ``error``, or the configuration is invalid.

``run`` exits 0 after SIGTERM/SIGINT when every monitor's state was saved, 1 when one could not be
(one log line names them) or the daemon could not start (e.g. its listen address is taken), 3 when
the configuration is invalid. Neither ``run`` nor ``check`` crashes on a damaged state file: it is
set aside (``run``) or ignored (``check``) with its reason logged.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monitor import __version__
from monitor.errors import ConfigError

if TYPE_CHECKING:
    from monitor.config import Config

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
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--at must be an RFC 3339 time like 2026-11-30T00:00:00Z; got {text!r}"
        ) from None
    return (t if t.tzinfo else t.replace(tzinfo=UTC)).astimezone(UTC)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="monitor",
        description="Tells data drift from model decay in search and retrieval systems.",
    )
    p.add_argument("--version", action="version", version=f"retrieval-monitor {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    v = sub.add_parser("validate", help="validate a configuration file (exit 3 when invalid)")
    v.add_argument("--config", required=True, type=Path)

    c = sub.add_parser("check", help="run every (or one) monitor once; read-only")
    c.add_argument("--config", required=True, type=Path)
    c.add_argument("--monitor", help="only this monitor")
    c.add_argument("--at", type=_parse_at, help="evaluate the slot at this time (default now)")
    c.add_argument("--json", action="store_true", help="print the JSON contract")

    r = sub.add_parser("run", help="run the daemon (scheduler + /metrics)")
    r.add_argument("--config", required=True, type=Path)
    r.add_argument("--log-level", default="INFO")

    d = sub.add_parser("demo", help="write a synthetic world and run the daemon on it, fast")
    d.add_argument("--dir", type=Path, default=Path("demo-world"), help="where to write it")
    d.add_argument("--listen", default="127.0.0.1:9464")
    d.add_argument("--tick", type=float, default=0.3, help="real seconds per simulated check")
    d.add_argument("--seed", type=int, default=7)
    d.add_argument("--log-level", default="WARNING")

    b = sub.add_parser("backtest", help="replay scheduled checks over historical logs")
    b.add_argument("--config", required=True, type=Path)
    b.add_argument("--from", dest="start", required=True, type=_parse_at)
    b.add_argument("--to", dest="end", required=True, type=_parse_at)
    b.add_argument("--monitor", help="only this monitor")
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
    print(f"{args.config}: valid ({len(config.monitors)} monitor(s): {names})")
    return 0


def _fmt(x: Any, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _cmd_check(args: argparse.Namespace) -> int:
    from monitor.jobs import Runner, StateStore, state_fingerprint
    from monitor.logs import configure_logging

    configure_logging("WARNING")  # problems (e.g. an ignored state file) as JSON lines on stderr
    config = _load(args.config)
    if config is None:
        return 3
    try:
        names = (
            [config.monitor(args.monitor).name]
            if args.monitor
            else [m.name for m in config.monitors]
        )
    except KeyError as exc:
        print(f"{args.config}: {exc.args[0]}", file=sys.stderr)
        return 3
    # Read-only: an untrustworthy state file (bad encoding or shape, non-finite numbers, times
    # in the future, written for other settings) is logged and ignored, never set aside here.
    fingerprints = {m.name: state_fingerprint(m) for m in config.monitors}
    store = StateStore(config.server.state_dir, readonly=True, fingerprints=fingerprints)
    runner = Runner(config, store=store)
    verdicts = [runner.check(name, args.at) for name in names]
    at = verdicts[0].at if verdicts else args.at or datetime.now(UTC)
    if args.json:
        doc = {
            "at": at.isoformat().replace("+00:00", "Z"),
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
    return exit_code([v.state for v in verdicts])


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


def _cmd_run(args: argparse.Namespace) -> int:
    from monitor.daemon import Daemon
    from monitor.logs import configure_logging

    configure_logging(args.log_level)
    config = _load(args.config)
    if config is None:
        return 3
    try:
        daemon = Daemon(config)
    except OSError as exc:  # e.g. the listen address is taken: one line, no traceback
        logging.getLogger("monitor").error(
            "cannot start", extra={"error": f"{type(exc).__name__}: {exc}"}
        )
        return 1
    code = daemon.serve()
    return _exit_hard_if_stuck(code, stuck=bool(daemon.wait_idle(0)))


def _cmd_demo(args: argparse.Namespace) -> int:
    from monitor.demo import run_demo

    return _exit_hard_if_stuck(
        run_demo(
            args.dir, listen=args.listen, tick=args.tick, seed=args.seed, log_level=args.log_level
        )
    )


def _cmd_backtest(args: argparse.Namespace) -> int:
    from monitor.backtest import run_backtest_cli

    config = _load(args.config)
    if config is None:
        return 3
    code: int = run_backtest_cli(
        config, args.start, args.end, monitor=args.monitor, as_json=args.json, as_csv=args.csv
    )
    return code


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``monitor`` console script; returns the process exit code."""
    args = _parser().parse_args(argv)
    commands = {
        "validate": _cmd_validate,
        "check": _cmd_check,
        "run": _cmd_run,
        "demo": _cmd_demo,
        "backtest": _cmd_backtest,
    }
    return commands[args.command](args)
