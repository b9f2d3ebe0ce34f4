"""The ``monitor`` console script: numpy's kernels chosen (``monitor.cpu``), then the CLI.

It imports nothing that imports numpy before ``prefer_avx2`` has run: numpy reads
``NPY_DISABLE_CPU_FEATURES`` once, when it is first imported.
"""

from __future__ import annotations

from monitor.cpu import prefer_avx2


def main(argv: list[str] | None = None) -> int:
    """Choose numpy's kernels, then run ``monitor.cli.main``; returns the exit code."""
    prefer_avx2()
    from monitor.cli import main as cli_main

    return cli_main(argv)
