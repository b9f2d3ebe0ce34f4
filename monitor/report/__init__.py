"""HTML pages for the person on call: one monitor's check and the landing page.

Modules: ``svg`` (a small SVG emitter), ``charts`` (the page's charts, from binned summaries),
``page`` (the HTML documents), ``history`` (the bounded per-monitor check history under
``state_dir``). Pages are self-contained (inline CSS and SVG, no script, no network); what each
section shows is in ``docs/report.md``.
"""

from monitor.report.history import HistoryStore, MemoryHistory, history_entry
from monitor.report.page import (
    PAGE_CSP,
    LandingRow,
    PageContext,
    page_file_name,
    render_landing,
    render_monitor_page,
    render_pending_page,
    runbook_anchor,
)

__all__ = [
    "PAGE_CSP",
    "HistoryStore",
    "LandingRow",
    "MemoryHistory",
    "PageContext",
    "history_entry",
    "page_file_name",
    "render_landing",
    "render_monitor_page",
    "render_pending_page",
    "runbook_anchor",
]
