"""The in-process engine: ``read_summary_part`` over every file of the window, one row group at
a time (memory is a row group's, not the window's)."""

from __future__ import annotations

from datetime import timedelta

from monitor.sources import ScoreSpec, SummaryPart, Window, check_summary_part, read_summary_part
from monitor.stats import Grid

__all__ = ["LocalEngine"]


class LocalEngine:
    """Summaries computed in this process."""

    kind = "local"

    def summaries(
        self,
        spec: ScoreSpec,
        window: Window,
        grid: Grid,
        *,
        bucket: timedelta | None = None,
        check: bool = True,
    ) -> SummaryPart:
        part = read_summary_part(spec, window, grid, bucket=bucket)
        if check:
            check_summary_part(spec, window, part)
        return part

    def close(self) -> None:
        return None
