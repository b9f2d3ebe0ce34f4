"""Command line: ``monitor check|run|validate|demo|backtest``."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``monitor`` console script; returns the process exit code."""
    args = sys.argv[1:] if argv is None else argv
    print(f"monitor {' '.join(args)}: not yet implemented")
    return 0
