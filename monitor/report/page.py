"""The HTML pages: one monitor's check (``monitor report``, ``/monitors/<name>``) and the landing
page (``/``). Self-contained: inline CSS and SVG, no script, no network.

Numbers come from the ``Verdict`` (the ``check --json`` contract) and are only rounded here; each
rounded cell carries the exact value in ``data-value`` and its JSON path in ``data-key`` (e.g.
``input.psi``, ``outcome.ci_low``), which is how a test checks that the page and ``check --json``
agree. Arrays (bins, ECDFs, pairs) come from the ``CheckDetail``; timelines from the history.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from monitor import __version__
from monitor.config import MonitorConfig, ReportConfig
from monitor.redact import redact
from monitor.report import charts
from monitor.report.history import HISTORY_FULL_RESOLUTION
from monitor.report.svg import esc
from monitor.stats import difference_signs, round_differences
from monitor.verdict import (
    CheckDetail,
    InputReport,
    OutcomeDetail,
    OutcomeReport,
    Verdict,
    percent,
    too_few_pairs,
)

__all__ = ["LandingRow", "PageContext", "render_landing", "render_monitor_page", "runbook_anchor"]

WORST = 10
"""Rows in the worst-queries and best-queries tables."""

_ALERTS = {
    "model_decay": "RetrievalModelDecay",
    "data_drift": "RetrievalDataDrift",
    "insufficient_data": "RetrievalMonitorInsufficientData",
    "error": "RetrievalMonitorRunFailures",
    "ok": "Drift versus decay",
}
_OVERVIEW = "retrieval-monitor-overview"
_DRILLDOWN = "retrieval-monitor-drilldown"
# drill-down dashboard panel ids (grafana/dashboards/drilldown.json)
_PANELS = {"psi": 6, "cusum": 8, "ks": 10, "zero": 11, "decay": 14, "pairs": 18, "age": 20}

_CSS = """
:root{--ref:#0072B2;--cur:#C77700;--alarm:#D55E00;--ok:#009E73;--sky:#56B4E9;--ink:#1b1b1b;
--mute:#5f5f5f;--rule:#d8d8d8;--band:rgba(86,180,233,.25)}
*{box-sizing:border-box}
body{font:16px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--ink);
margin:0 auto;padding:12px 16px 48px;max-width:1120px;background:#fff}
h1{font-size:1.5rem;margin:.4rem 0;overflow-wrap:anywhere}
h2{font-size:1.25rem;margin:1.6rem 0 .4rem;
border-bottom:2px solid var(--rule)}h3{font-size:1.05rem;margin:1rem 0 .3rem}
a{color:#005a8c}.mute{color:var(--mute)}
.state{display:inline-block;padding:.1rem .55rem;border-radius:4px;font-weight:700;
border:2px solid currentColor}
.state-ok{color:#00664a}.state-data_drift{color:#8a4a00}.state-model_decay{color:#a63a00}
.state-insufficient_data,.state-error{color:#333}
.state-model_decay,.state-data_drift{background:#fff3e6}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:12px 24px}
figure{margin:.4rem 0 1rem}figcaption{font-size:.9rem;color:var(--mute)}
svg{display:block;width:100%;max-width:100%;height:auto}
.tw{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.3rem 0 .8rem;font-variant-numeric:tabular-nums}
th,td{padding:.2rem .6rem;border-bottom:1px solid var(--rule);text-align:left;vertical-align:top}
td.n,th.n{text-align:right;white-space:nowrap}
figure.wide{max-width:780px}
pre{background:#f6f6f6;padding:.6rem;overflow-x:auto;font-size:.85rem}
ul.reasons li{margin:.2rem 0;overflow-wrap:anywhere}
.note-box{border-left:4px solid var(--sky);padding:.3rem .7rem;background:#f2f8fc}
svg .axis{stroke:#333;stroke-width:1}svg .grid{stroke:#e4e4e4;stroke-width:1}
svg .tick{font-size:12px;fill:#333}svg .label,svg .legend{font-size:13px;fill:#222}
svg .note{font-size:12px;fill:#222}
svg .bar-ref,svg .key-ref{fill:var(--ref)}svg .bar-cur,svg .key-cur{fill:var(--cur)}
svg .line-ref{fill:none;stroke:var(--ref);stroke-width:2}
svg .line-cur{fill:none;stroke:var(--cur);stroke-width:2}
svg .line-anchor{fill:none;stroke:#CC79A7;stroke-width:2;stroke-dasharray:5 2}
svg .key-anchor{fill:#CC79A7}
svg .ks-gap{stroke:var(--alarm);stroke-width:3}svg .key-ks{fill:var(--alarm)}
svg .pair circle,svg .key-pair{fill:var(--ref)}svg .pair circle{fill-opacity:.8}
svg .look circle{fill:var(--ref)}svg .ci{stroke:var(--ref);stroke-width:1.5}
svg .key-ci{fill:var(--ref)}
svg .mean{stroke:var(--alarm);stroke-width:2}svg .key-mean{fill:var(--alarm)}
svg .band,svg .key-band{fill:var(--band)}
svg .margin{stroke:#333;stroke-width:1.5;stroke-dasharray:6 4}svg .key-margin{fill:#333}
svg .zero{stroke:#999;stroke-width:1}
svg .block circle,svg .key-block{fill:var(--cur)}
svg .threshold{fill:none;stroke:#222;stroke-width:2;stroke-dasharray:6 4}
svg .key-threshold{fill:#222}
svg .z-threshold{fill:none;stroke:var(--cur);stroke-width:1.5;stroke-dasharray:3 3}
svg .alarm circle{fill:none;stroke:var(--alarm);stroke-width:2}svg .key-alarm{fill:var(--alarm)}
svg .state-change{stroke:#777;stroke-width:1.5;stroke-dasharray:2 3}svg .key-change{fill:#777}
@media (max-width:600px){body{font-size:15px;padding:8px}th,td{padding:.15rem .35rem}
table{font-size:.9rem}td.n{white-space:normal}}
"""


@dataclass(frozen=True, slots=True)
class PageContext:
    """What a monitor page shows besides the check: where it came from and its links.

    ``state_since``: when the monitor entered its state (the daemon's record; None: from the
    verdict's own ``drift_since`` / ``decay_since``). ``command``: the command that reproduces
    the page. ``config_path`` / ``config_sha256``: the configuration file it was made with.
    """

    report: ReportConfig
    state_since: datetime | None = None
    command: str | None = None
    config_path: str | None = None
    config_sha256: str | None = None
    generated_at: datetime | None = None
    newest_data: Mapping[str, datetime | None] | None = None
    # ``state_since`` is the first check of the page's history: the state may be older
    since_at_least: bool = False
    home: str | None = None  # the daemon's landing page (a file written by report has none)


def _too_few_pairs(monitor: MonitorConfig, o: OutcomeReport) -> str:
    """Why a look with no other reason is undecidable, from its numbers (a report saved
    before the verdict said so itself): ``monitor.verdict.too_few_pairs``."""
    alpha = o.alpha if o.alpha is not None else 0.0
    return too_few_pairs(
        o.n_pairs, o.only_reference, o.only_current, monitor.decay.min_pairs, alpha
    )


def runbook_anchor(state: str) -> str:
    """The runbook section of a state's alert, as a GitHub-style anchor."""
    return _ALERTS.get(state, "Drift versus decay").lower().replace(" ", "-")


def _runbook(report: ReportConfig, state: str) -> str | None:
    if report.runbook_url is None:
        return None
    return f"{report.runbook_url}#{runbook_anchor(state)}"


def _grafana(
    report: ReportConfig, monitor: str, *, panel: str | None = None, segment: str | None = None
) -> str | None:
    if report.grafana_url is None:
        return None
    # the base's own query (Grafana's ?orgId=2) goes in each link's query, before its own
    base = urlsplit(report.grafana_url)
    params: list[tuple[str, str]] = parse_qsl(base.query, keep_blank_values=True)
    params.append(("var-monitor", monitor))
    if segment:
        params.append(("var-segment", segment))
    if panel is not None:
        params.append(("viewPanel", str(_PANELS[panel])))
    uid = _OVERVIEW if panel is None else _DRILLDOWN
    root = urlunsplit(base._replace(query="", fragment=""))
    return f"{root}/d/{uid}/?{urlencode(params)}"


# --------------------------------------------------------------------------- formatting


def _when(value: object) -> str:
    """A time the verdict holds as RFC 3339 text, as ``_iso`` writes times (one format on a
    page: its raw form, microseconds and all, once sat beside the others); other values as
    they are, "–" for none."""
    if value is None or value == "":
        return "–"
    if isinstance(value, str):
        try:
            return _iso(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            return value
    return str(value)


def _iso(t: datetime | None) -> str:
    """``YYYY-MM-DD HH:MM UTC``, with seconds where the time has them (a sub-minute schedule's
    slots, as ``page_file_name`` names them)."""
    if t is None:
        return "–"
    t = t.astimezone(UTC)
    seconds = t.second or t.microsecond
    return t.strftime("%Y-%m-%d %H:%M:%S UTC" if seconds else "%Y-%m-%d %H:%M UTC")


def _ago(t: datetime | None, now: datetime) -> str:
    if t is None:
        return ""
    s = (now - t).total_seconds()
    if s < 0:
        return "in the future"
    if s < 90:
        return f"{s:.0f} s ago"
    if s < 5400:
        return f"{s / 60:.0f} min ago"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h ago"
    return f"{s / 86400:.1f} days ago"


def _g(x: float | None, digits: int = 4) -> str:
    if x is None:
        return "–"
    if not math.isfinite(x):
        return "∞" if x > 0 else "-∞"
    return f"{x:.{digits}g}"


def _apart(bound: float | None, *values: float | None, digits: int = 3) -> int:
    """The significant digits (``digits`` or more, up to 12) that print each of ``values``
    unlike ``bound`` where they differ: a CUSUM S of 15.906 against h 15.890 is not "15.9,
    alarm above 15.9", and S just above h is what an alarm looks like."""
    for d in range(digits, 13):
        if all(
            v is None or bound is None or v == bound or _g(v, d) != _g(bound, d) for v in values
        ):
            return d
    return 12


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _signed(x: float | None) -> str:
    return "–" if x is None else f"{x:+.4f}"


def _pct(x: float | None) -> str:
    if x is None:
        return "–"
    v = 100 * x
    return f"{v:.2f} %" if abs(v) < 1 else f"{v:.1f} %"


def _p(x: float | None) -> str:
    """A p-value to 3 significant digits below 0.01, as the page shows a look's alpha (an
    hourly look's is 6.7e-05, a daily one's 0.00161: cut at "< 0.0001", or at 4 decimals,
    a raising and a quiet look read alike), to 4 decimals above; below 1e-300, so."""
    if x is None:
        return "–"
    if x < 1e-300:
        return "< 1e-300"
    return f"{x:.3g}" if x < 1e-2 else f"{x:.4f}"


def _cell(key: str, value: Any, text: str, *, numeric: bool = True) -> str:
    """A table cell with the rounded ``text`` and the exact ``value`` of JSON path ``key``."""
    if isinstance(value, float) and not math.isfinite(value):
        value = None  # as in the JSON contract
    data = "null" if value is None else json.dumps(value)
    cls = ' class="n"' if numeric else ""
    return f'<td{cls} data-key="{esc(key)}" data-value="{esc(data)}">{esc(text)}</td>'


def _psi_p_row(
    label: str, track: str, psi: float | None, p: float | None, adjusted: float | None
) -> tuple[str, str]:
    """A track's block row: its PSI, p-value and adjusted p-value (``input.<track>_psi``...)."""
    return (
        label,
        _cell(f"input.{track}_psi", psi, _g(psi))
        + _cell(f"input.{track}_pvalue", p, _p(p))
        + _cell(f"input.{track}_pvalue_adjusted", adjusted, _p(adjusted)),
    )


def _against_row(
    label: str, key: str, value: float | None, bound_key: str | None, bound: float | None
) -> tuple[str, str]:
    """``value`` beside the threshold it is held against, each printed to the digits that
    tell them apart; the threshold's cell carries its JSON key once (``bound_key``)."""
    d = _apart(bound, value)
    bound_cell = (
        _cell(bound_key, bound, _g(bound, d)) if bound_key else _td(_g(bound, d), numeric=True)
    )
    return (label, _cell(key, value, _g(value, d)) + bound_cell)


def _rows(rows: Sequence[tuple[str, str]]) -> str:
    body = "".join(f'<tr><th scope="row">{esc(k)}</th>{v}</tr>' for k, v in rows)
    return f'<div class="tw"><table>{body}</table></div>'


def _link(url: str | None, text: str) -> str:
    return f'<a href="{esc(url)}">{esc(text)}</a>' if url else ""


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], *, numeric: Sequence[bool]) -> str:
    th = "".join(
        f'<th scope="col"{" class=n" if n else ""}>{esc(h)}</th>'
        for h, n in zip(head, numeric, strict=True)
    )
    body = "".join("<tr>" + "".join(r) + "</tr>" for r in rows)
    return f'<div class="tw"><table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>'


def _td(text: str, numeric: bool = False) -> str:
    return f"<td{' class=n' if numeric else ''}>{esc(text)}</td>"


# --------------------------------------------------------------------------- sections


def _since(verdict: Verdict, ctx: PageContext) -> datetime | None:
    """The verdict's own slot time of a raised alarm (``decay_since`` / ``drift_since``), else
    the daemon's record of when the state began."""
    times = (
        [r.decay_since for r in verdict.outcomes.values() if r.decay_since]
        if verdict.state == "model_decay"
        else [r.drift_since for r in verdict.inputs.values() if r.drift_since]
        if verdict.state == "data_drift"
        else []
    )
    parsed = [datetime.fromisoformat(t.replace("Z", "+00:00")) for t in times if t]
    return min(parsed) if parsed else ctx.state_since


def _header(monitor: MonitorConfig, verdict: Verdict, ctx: PageContext, now: datetime) -> str:
    since = _since(verdict, ctx)
    state = verdict.state
    reasons = (
        "".join(f"<li>{esc(redact(r))}</li>" for r in verdict.reasons) or "<li>none given</li>"
    )
    links = [
        _link(_runbook(ctx.report, state), f"runbook: {_ALERTS.get(state, state)}"),
        _link(_grafana(ctx.report, monitor.name), "Grafana overview"),
        _link(_grafana(ctx.report, monitor.name, panel="cusum"), "Grafana: drift CUSUM"),
        _link(_grafana(ctx.report, monitor.name, panel="decay"), "Grafana: outcome difference"),
    ]
    links_html = " · ".join(x for x in links if x) or (
        '<span class="mute">no runbook or Grafana links: set [report] runbook_url and '
        "grafana_url in the configuration</span>"
    )
    before = _ago(since, verdict.at).replace(" ago", "")
    at_least = ctx.since_at_least and since is not None and since == ctx.state_since
    since_text = (
        ("since at least " if at_least else "since ")
        + f"{_iso(since)}"
        + (f" ({before} before this check)" if before[:1].isdigit() else "")
        + (": the first check of the history this page holds" if at_least else "")
        if since
        else "since: this check (no earlier record of this state)"
    )
    return (
        f'<header><p class="mute">{_home(ctx)}retrieval-monitor {esc(__version__)} · check of slot '
        f"{esc(_iso(verdict.at))}</p>"
        f'<h1>{esc(monitor.name)} <span class="state state-{esc(state)}" data-key="state" '
        f'data-value="{esc(json.dumps(state))}">{esc(state)}</span></h1>'
        f'<p>{esc(since_text)}</p><h2 id="reasons">Why</h2><ul class="reasons">{reasons}</ul>'
        f"<p>{links_html}</p></header>"
    )


def _home(ctx: PageContext) -> str:
    return f'<a href="{esc(ctx.home)}">all monitors</a> · ' if ctx.home else ""


def _segment_of(reports: Mapping[str, Any], chosen: Any) -> str:
    return next((k for k, v in reports.items() if v is chosen), "")


def _input_section(
    monitor: MonitorConfig,
    verdict: Verdict,
    detail: CheckDetail | None,
    history: Sequence[Mapping[str, Any]],
    ctx: PageContext,
) -> str:
    inp = verdict.input
    out = ['<section id="input"><h2>Input: top-1 score drift</h2>']
    if inp is None:
        out.append(
            _FAILED.format(what="score", where="below")
            if verdict.state == "error"
            else "<p>No score data in this check.</p>"
        )
        # the timeline matters most when it fails
        out.append(_evidence_over_time(history, monitor))
        out.append("</section>")
        return "".join(out)
    seg = _segment_of(verdict.inputs, inp)
    if seg:
        out.append(
            f"<p>Segment <strong>{esc(seg)}</strong> (the one that decides the drift state; "
            f"every segment is in the table below).</p>"
        )
    rows = [
        (
            "scores (reference / current)",
            _cell("input.n_reference", inp.n_reference, f"{inp.n_reference:,}")
            + _cell("input.n_current", inp.n_current, f"{inp.n_current:,}"),
        ),
        (
            "PSI (tolerance)",
            _cell("input.psi", inp.psi, _g(inp.psi))
            + _cell("input.psi_tolerance", inp.psi_tolerance, _g(inp.psi_tolerance)),
        ),
        (
            "PSI noise floor / p-value",
            _cell("input.psi_noise_floor", inp.psi_noise_floor, _g(inp.psi_noise_floor))
            + _cell("input.psi_pvalue", inp.psi_pvalue, _p(inp.psi_pvalue)),
        ),
        (
            "KS D at score / p-value",
            _cell("input.ks_statistic", inp.ks_statistic, _g(inp.ks_statistic, 3))
            + _cell("input.ks_location", inp.ks_location, _g(inp.ks_location))
            + _cell("input.ks_pvalue", inp.ks_pvalue, _p(inp.ks_pvalue)),
        )
        if inp.ks_statistic_high is None
        else (  # through summaries on a grid: D is bracketed, its p-value a range
            "KS D between / at grid point / p-value between",
            _cell("input.ks_statistic", inp.ks_statistic, _g(inp.ks_statistic, 3))
            + _cell("input.ks_statistic_high", inp.ks_statistic_high, _g(inp.ks_statistic_high, 3))
            + _cell("input.ks_location", inp.ks_location, _g(inp.ks_location))
            + _cell("input.ks_pvalue_low", inp.ks_pvalue_low, _p(inp.ks_pvalue_low))
            + _cell("input.ks_pvalue", inp.ks_pvalue, _p(inp.ks_pvalue)),
        ),
        (
            "zero-score rate (reference / current)",
            _cell(
                "input.zero_rate_reference", inp.zero_rate_reference, _pct(inp.zero_rate_reference)
            )
            + _cell("input.zero_rate_current", inp.zero_rate_current, _pct(inp.zero_rate_current))
            + _cell(
                "input.zero_rate_pvalue", inp.zero_rate_pvalue, "p " + _p(inp.zero_rate_pvalue)
            ),
        ),
        (
            "out of the reference's range",
            _cell("input.out_of_range_rate", inp.out_of_range_rate, _pct(inp.out_of_range_rate)),
        ),
        (
            "volume vs reference",
            _cell("input.volume_ratio", inp.volume_ratio, _g(inp.volume_ratio, 3) + " x"),
        ),
        (
            "evidence block",
            _td(f"{_when(inp.block_start)} to {_when(inp.block_end)}")
            + _cell("input.block_samples", inp.block_samples, f"{inp.block_samples:,} scores"),
        ),
        _psi_p_row(
            "block PSI / p / adjusted p",
            "block",
            inp.block_psi,
            inp.block_pvalue,
            inp.block_pvalue_adjusted,
        ),
        _against_row(
            "evidence z (immediate alarm above)",
            "input.z",
            inp.z,
            "input.z_threshold",
            inp.z_threshold,
        ),
        _against_row(
            "CUSUM S this check, reference track (alarm above h: the value that crossed it, "
            "then reset to 0)",
            "input.cusum",
            inp.cusum,
            "input.cusum_threshold",
            inp.cusum_threshold,
        ),
    ]
    if inp.anchor_cusum is not None or inp.anchor_z is not None:
        # the anchor track (a gradual drift): its own block, z and S against the same
        # thresholds (shown again, without their JSON keys); an alarm on it was shown beside
        # the reference track's numbers only
        rows += [
            _psi_p_row(
                "anchor block PSI / p / adjusted p",
                "anchor",
                inp.anchor_psi,
                inp.anchor_pvalue,
                inp.anchor_pvalue_adjusted,
            ),
            _against_row(
                "anchor evidence z (immediate alarm above)",
                "input.anchor_z",
                inp.anchor_z,
                None,
                inp.z_threshold,
            ),
            _against_row(
                "CUSUM S this check, anchor track (alarm above h: the value that crossed it, "
                "then reset to 0)",
                "input.anchor_cusum",
                inp.anchor_cusum,
                None,
                inp.cusum_threshold,
            ),
        ]
    rows += [
        (
            "alarm",
            _td(
                f"{inp.alarm or 'none this check'}"
                + (f" on track {inp.alarm_track}" if inp.alarm_track else "")
            ),
        ),
    ]
    if inp.clear_threshold is not None:  # a track is raised: how close it is to clearing
        raised = [
            (track, key, now)
            for track, key, now in (
                ("reference", "input.clear_cusum", inp.clear_cusum),
                ("anchor", "input.anchor_clear_cusum", inp.anchor_clear_cusum),
            )
            if now is not None
        ]
        cd = _apart(inp.clear_threshold, *(now for _, _, now in raised))
        rows.append(
            (
                f"clearing CUSUM, {' / '.join(t for t, _, _ in raised)} (clears above the "
                f"threshold once {monitor.drift.clear_after} blocks in a row are in the band)",
                "".join(_cell(key, now, _g(now, cd)) for _, key, now in raised)
                + _cell("input.clear_threshold", inp.clear_threshold, _g(inp.clear_threshold, cd)),
            )
        )
    out.append(_rows(rows))
    d = detail.inputs.get(seg) if detail is not None else None
    if d is None:
        out.append("<p>Not enough scores in this check to draw the distributions.</p>")
    else:
        out.append('<div class="grid2">')
        out.append(
            f"<figure>{charts.bins_chart(d, seg)}<figcaption>Share of each window in the "
            f"{d.edges.size + 1} frozen PSI bins (right-closed, from reference quantiles). "
            f"{_link(_grafana(ctx.report, monitor.name, panel='psi', segment=seg), 'Grafana: PSI')}"
            "</figcaption></figure>"
        )
        out.append(
            f"<figure>{charts.ecdf_chart(d, seg, inp.ks_statistic, inp.ks_statistic_high)}"
            f"<figcaption>Empirical CDFs on {d.grid.size} grid points (exact there), the KS "
            + (
                "gap drawn at its exact location. "
                if inp.ks_statistic_high is None
                else "gap drawn at the grid point where it was bounded (checked through "
                "summaries: D lies in a bracket, between grid points unseen). "
            )
            + f"{_link(_grafana(ctx.report, monitor.name, panel='ks', segment=seg), 'KS')}"
            "</figcaption></figure></div>"
        )
        out.append(_bins_table(d, inp))
    out.append(_evidence_over_time(history, monitor))
    out.append("</section>")
    return "".join(out)


# a failed check has no numbers: said so, not "no data" or "no segments" (which are not so)
_FAILED = (
    "<p><strong>This check failed</strong> (see Why above): it has no {what} numbers. The "
    "timeline {where} shows the checks before it.</p>"
)


def _evidence_over_time(history: Sequence[Mapping[str, Any]], monitor: MonitorConfig) -> str:
    out = ["<h3>Evidence over time</h3>"]
    if len(history) >= 2:
        thinned = _thinned(history, monitor)
        out.append(
            f'<figure class="wide">{charts.cusum_chart(history, thinned=thinned)}'
            "<figcaption>From the check history "
            f"({len(history)} checks"
            + (
                " kept: every check of the last 48 h, the last of each hour before"
                if thinned
                else ""
            )
            + f", {_iso(_at(history[0]))} to {_iso(_at(history[-1]))}); "
            f"state changes marked.</figcaption></figure>"
        )
        out.append(_history_table(history))
    else:
        out.append(
            '<p class="note-box">No check history yet: the timeline of evidence blocks and the '
            "CUSUM appears once the daemon (or <code>backtest --report</code>) has recorded two "
            "checks or more.</p>"
        )
    return "".join(out)


def _at(entry: Mapping[str, Any]) -> datetime:
    return datetime.fromisoformat(str(entry["at"]).replace("Z", "+00:00"))


def _bins_table(d: Any, inp: InputReport) -> str:
    edges = [-math.inf, *d.edges.tolist(), math.inf]
    ref, cur = d.reference_shares, d.current_shares
    rows = []
    for b in range(d.edges.size + 1):
        lo, hi = edges[b], edges[b + 1]
        rng = f"({_g(lo)}, {_g(hi)}]" if math.isfinite(hi) else f"({_g(lo)}, ∞)"
        rows.append(
            [
                _td(str(b + 1), True),
                _td(rng),
                _td(f"{int(d.reference_counts[b]):,}", True),
                _td(_pct(float(ref[b])), True),
                _td(f"{int(d.current_counts[b]):,}", True),
                _td(_pct(float(cur[b])), True),
                f'<td class="n" data-bin-contribution="{float(d.contributions[b])!r}">'
                f"{esc(_g(float(d.contributions[b]), 3))}</td>",
            ]
        )
    total = float(d.contributions.sum())
    rows.append(
        [
            _td("all"),
            _td(""),
            _td(f"{int(d.reference_counts.sum()):,}", True),
            _td("100 %", True),
            _td(f"{int(d.current_counts.sum()):,}", True),
            _td("100 %", True),
            _td(f"{_g(total, 4)} = PSI", True),
        ]
    )
    return (
        "<h3>Bins</h3>"
        + _table(
            ["bin", "scores in", "reference", "share", "current", "share", "PSI contribution"],
            rows,
            numeric=[True, False, True, True, True, True, True],
        )
        + f'<p class="mute">Contribution (p - q) ln(p / q) with additive smoothing '
        f"{d.smoothing:g} on both windows; they add up to the PSI {_g(inp.psi)}.</p>"
    )


def _thinned(history: Sequence[Mapping[str, Any]], monitor: MonitorConfig) -> bool:
    """Whether the history holds fewer entries than the checks it spans: the store keeps every
    check of its newest ``HISTORY_FULL_RESOLUTION`` (48 h) and the last of each hour before, so
    with a schedule of two slots in some hour and entries older than that. From the schedule,
    not the entries' gaps: after a weekend or an outage the newest 48 h held one check."""
    schedule = monitor.schedule
    if schedule.interval is not None:
        sub_hourly = schedule.interval < timedelta(hours=1)
    else:  # a cron fires each minute of its minute field in every hour it fires
        sub_hourly = schedule.cron_fields is not None and len(schedule.cron_fields[0]) > 1
    cutoff = _at(history[-1]) - HISTORY_FULL_RESOLUTION
    return sub_hourly and _at(history[0]) < cutoff


def _history_table(history: Sequence[Mapping[str, Any]]) -> str:
    changes = [
        (history[k - 1], history[k])
        for k in range(1, len(history))
        if history[k]["state"] != history[k - 1]["state"]
    ]
    if not changes:
        return f"<p>No change of state in these {len(history)} checks.</p>"
    rows = [
        [
            _td(_iso(_at(b))),
            _td(str(a["state"])),
            _td(str(b["state"])),
            _td(_g(b.get("cusum"), 3), True),
            _td(_g(b.get("psi")), True),
        ]
        for a, b in changes[-20:]
    ]
    shown = f" (the last 20 of {len(changes):,})" if len(changes) > 20 else ""
    return f"<h3>State changes{shown}</h3>" + _table(
        ["check", "from", "to", "CUSUM S", "PSI"],
        rows,
        numeric=[False, False, False, True, True],
    )


_TESTS = {  # outcome.test, as a person reads it (docs/statistics.md, "Decay")
    "sign-flip": "sign flips of the pairs' differences",
    "run-label": "run labels permuted within each query (several runs a window)",
}


def _outcome_section(
    monitor: MonitorConfig,
    verdict: Verdict,
    detail: CheckDetail | None,
    history: Sequence[Mapping[str, Any]],
    ctx: PageContext,
) -> str:
    o = verdict.outcome
    out = ['<section id="outcome"><h2>Outcome: model decay on the golden set</h2>']
    if o is None:
        if verdict.state == "error":
            out.append(_FAILED.format(what="outcome", where="above"))
        else:
            out.append("<p>No evaluation run looked at yet.</p>")
        out.append("</section>")
        return "".join(out)
    seg = _segment_of(verdict.outcomes, o)
    if seg:
        out.append(f"<p>Segment <strong>{esc(seg)}</strong> (the one that decides decay).</p>")
    level = f"{percent(o.confidence_level)} %" if o.confidence_level else "–"
    adjusted, alpha = _p(o.pvalue_adjusted), _g(o.alpha, 3)
    if (
        o.pvalue_adjusted is not None
        and o.alpha is not None
        and _number(adjusted) == _number(alpha)
    ):
        digits = _apart(o.alpha, o.pvalue_adjusted)  # 0.05004 is not "0.0500, alpha 0.05"
        adjusted, alpha = _g(o.pvalue_adjusted, digits), _g(o.alpha, digits)
    rows = [
        (
            "look",
            _td(
                f"{_when(o.looked_at)} "
                f"({'this check' if o.new_look else 'carried: no new run since'}), "
                f"{o.runs} run(s) {_when(o.runs_start)} to {_when(o.runs_end)}"
            ),
        ),
        ("pairs", _cell("outcome.n_pairs", o.n_pairs, f"{o.n_pairs:,}")),
        (
            "pairing coverage (only reference / only current)",
            _cell("outcome.coverage", o.coverage, _pct(o.coverage))
            + _cell("outcome.only_reference", o.only_reference, f"{o.only_reference:,}")
            + _cell("outcome.only_current", o.only_current, f"{o.only_current:,}"),
        ),
        (
            "mean difference (current - reference)",
            _cell("outcome.mean_difference", o.mean_difference, _signed(o.mean_difference)),
        ),
        (
            f"{level} interval",
            _cell("outcome.ci_low", o.ci_low, _signed(o.ci_low))
            + _cell("outcome.ci_high", o.ci_high, _signed(o.ci_high)),
        ),
        ("tolerated decay (margin)", _cell("outcome.margin", o.margin, "±" + _g(o.margin, 3))),
        (
            "p-value / adjusted / alpha",
            _cell("outcome.pvalue", o.pvalue, _p(o.pvalue))
            + _cell("outcome.pvalue_adjusted", o.pvalue_adjusted, adjusted)
            + _cell("outcome.alpha", o.alpha, alpha),
        ),
        (
            "wins / losses / ties",
            _cell("outcome.wins", o.wins, f"{o.wins:,}")
            + _cell("outcome.losses", o.losses, f"{o.losses:,}")
            + _cell("outcome.ties", o.ties, f"{o.ties:,}"),
        ),
        (
            "deciding test",
            _cell("outcome.test", o.test, _TESTS.get(o.test or "", "–"), numeric=False),
        ),
        ("minimum detectable effect", _cell("outcome.mde", o.mde, _g(o.mde, 3))),
        (
            "effect size (mean / sd)",
            _cell("outcome.effect_size", o.effect_size, _g(o.effect_size, 3)),
        ),
        (
            "decay raised",
            _cell(
                "outcome.decay",
                o.decay,
                f"{'yes since ' + _when(o.decay_since) if o.decay else 'no'}",
                numeric=False,
            ),
        ),
    ]
    out.append(_rows(rows))
    found = _g(o.mde + (o.margin or 0.0), 3) if o.mde is not None else "unknown"
    if o.decidable:
        out.append(
            f'<p class="note-box">p above alpha means no evidence of a difference, not no '
            f"difference: with these {o.n_pairs:,} pairs this look could only reliably detect a "
            f"mean decay of about {found} or more (the tolerated margin plus the minimum "
            f"detectable effect); a smaller decay may be present and unseen.</p>"
        )
    else:  # it can raise nothing: its power says nothing of what it would have detected
        out.append(
            '<p class="note-box">This look cannot raise a decay, whatever its numbers: they are '
            "descriptive only.</p>"
        )
    if not o.decidable:
        out.append(
            f"<p><strong>Undecidable look:</strong> "
            f"{esc(o.undecidable_reason or _too_few_pairs(monitor, o))}.</p>"
        )
    d = detail.outcomes.get(seg) if detail is not None else None
    if o.n_pairs == 0:
        out.append("<p>No pairs to draw: no query is in both windows.</p>")
    elif d is None or d.n == 0:
        out.append("<p>The pairs of this look are not available to draw.</p>")
    else:
        out.append(
            '<figure class="wide">'
            + charts.strip_chart(
                d, seg, mean=o.mean_difference, ci=(o.ci_low, o.ci_high), margin=o.margin
            )
            + f"<figcaption>Every pair, sorted by its difference; band = {level} interval of "
            "the mean, dashed = ±margin. "
            + _link(_grafana(ctx.report, monitor.name, panel="decay", segment=seg), "Grafana")
            + "</figcaption></figure>"
        )
        losses, gains = largest_changes(d)
        worst = [(i, "worst") for i in losses]
        best = [(i, "best") for i in gains]

        def qrows(items: Sequence[tuple[int, str]]) -> list[list[str]]:
            return [
                [
                    _td(str(d.query_ids[i])),
                    _td(_g(float(d.reference[i])), True),
                    _td(_g(float(d.current[i])), True),
                    _td(_signed(float(d.difference[i])), True),
                ]
                for i, _ in items
            ]

        head = ["query", "reference", "current", "difference"]
        num = [False, True, True, True]

        def listed(items: Sequence[tuple[int, str]], none: str) -> str:
            return _table(head, qrows(items), numeric=num) if items else f"<p>{none}</p>"

        out.append(
            '<div class="grid2"><div><h3>Largest losses</h3>'
            + listed(worst, "No query did worse.")
            + "</div><div><h3>Largest gains</h3>"
            + listed(best, "No query did better.")
            + "</div></div>"
        )
    looks = [e for e in history if e.get("mean") is not None and e.get("new_look")]
    if len(looks) >= 2:
        out.append(
            '<h3>Looks over time</h3><figure class="wide">'
            + charts.decay_chart(history)
            + "<figcaption>Mean difference and interval of each new look in the history (a "
            "check that made no new look carries the previous look's numbers)."
            "</figcaption></figure>"
        )
    out.append("</section>")
    return "".join(out)


def largest_changes(d: OutcomeDetail, most: int = WORST) -> tuple[list[int], list[int]]:
    """The rows of the largest losses (most negative first) and gains (most positive first)
    of ``d`` (sorted by difference), at most ``most`` each and each only of its sign: 9 pairs
    all worse once listed the same 9 under "Largest gains", and ties under "losses"; signs as
    ``wins``, ``losses`` and ``ties`` count them."""
    k = min(most, d.n)
    # signs as the verdict counts wins, losses and ties (float noise, 8 equal values averaged
    # against the same value, is a tie, not a loss)
    signs = difference_signs(round_differences(d.difference))
    losses = [i for i in range(k) if signs[i] < 0]
    gains = [d.n - 1 - i for i in range(k) if signs[d.n - 1 - i] > 0]
    return losses, gains


def _evidence_key(name: str, verdict: Verdict) -> tuple[bool, float, float, str]:
    """Raised segments first, then the smallest adjusted p-value (drift block, anchor block or
    decay look), then the largest PSI."""
    inp, out = verdict.inputs.get(name), verdict.outcomes.get(name)
    raised = bool((inp and inp.drift) or (out and out.decay))
    ps = [
        p
        for p in (
            inp and inp.block_pvalue_adjusted,
            inp and inp.anchor_pvalue_adjusted,
            out and out.pvalue_adjusted,
        )
        if isinstance(p, float)
    ]
    psi = inp.psi if inp is not None and inp.psi is not None else 0.0
    return (not raised, min(ps, default=2.0), -psi, name)


def _segments_section(monitor: MonitorConfig, verdict: Verdict) -> str:
    names = sorted(set(verdict.inputs) | set(verdict.outcomes))
    segmented = monitor.scores.segment_column or monitor.outcomes.segment_column
    if verdict.state == "error" and not names and segmented:
        return (
            '<section id="segments"><h2>Segments</h2><p>This check failed: it has no '
            "per-segment numbers.</p></section>"
        )
    if names == [""] or not names:
        return (
            '<section id="segments"><h2>Segments</h2><p>This monitor has no segments.</p></section>'
        )
    names.sort(key=lambda n: _evidence_key(n, verdict))
    # the anchor track's S and adjusted p beside the reference's (the order above counts it)
    anchored = any(i.anchor_cusum is not None for i in verdict.inputs.values())
    rows = []
    for name in names:
        i: InputReport | None = verdict.inputs.get(name)
        o: OutcomeReport | None = verdict.outcomes.get(name)
        key = f"segments[{name}]"
        rows.append(
            [
                _td(name),
                _td(
                    ", ".join(
                        f for f, on in (("drift", i and i.drift), ("decay", o and o.decay)) if on
                    )
                    or "–"
                ),
                _cell(f"{key}.input.psi", i and i.psi, _g(i.psi) if i else "–"),
                _cell(
                    f"{key}.input.ks_statistic",
                    i and i.ks_statistic,
                    _g(i.ks_statistic, 3) if i else "–",
                ),
                _cell(f"{key}.input.cusum", i and i.cusum, _g(i.cusum, 3) if i else "–"),
                _cell(
                    f"{key}.input.block_pvalue_adjusted",
                    i and i.block_pvalue_adjusted,
                    _p(i.block_pvalue_adjusted) if i else "–",
                ),
                *(
                    [
                        _cell(
                            f"{key}.input.anchor_cusum",
                            i and i.anchor_cusum,
                            _g(i.anchor_cusum, 3) if i else "–",
                        ),
                        _cell(
                            f"{key}.input.anchor_pvalue_adjusted",
                            i and i.anchor_pvalue_adjusted,
                            _p(i.anchor_pvalue_adjusted) if i else "–",
                        ),
                    ]
                    if anchored
                    else []
                ),
                _cell(f"{key}.outcome.n_pairs", o and o.n_pairs, f"{o.n_pairs:,}" if o else "–"),
                _cell(
                    f"{key}.outcome.mean_difference",
                    o and o.mean_difference,
                    _signed(o.mean_difference) if o else "–",
                ),
                _cell(
                    f"{key}.outcome.pvalue_adjusted",
                    o and o.pvalue_adjusted,
                    _p(o.pvalue_adjusted) if o else "–",
                ),
            ]
        )
    return (
        '<section id="segments"><h2>Segments</h2><p>Sorted by evidence: raised segments '
        "first, then the smallest Holm-adjusted p-value (drift block"
        + (", anchor block" if anchored else "")
        + " or decay look), then the largest PSI.</p>"
        + _table(
            [
                "segment",
                "raised",
                "PSI",
                "KS D",
                "CUSUM S",
                "drift adj. p",
                *(["anchor S", "anchor adj. p"] if anchored else []),
                "pairs",
                "mean diff",
                "decay adj. p",
            ],
            rows,
            numeric=[False, False, *[True] * (9 if anchored else 7)],
        )
        + "</section>"
    )


def _config_section(monitor: MonitorConfig, verdict: Verdict, ctx: PageContext) -> str:
    windows = [[_td(k), _td(_when(v))] for k, v in verdict.windows.items()]
    doc = json.dumps(_redacted(_plain(asdict(monitor))), indent=1, sort_keys=True)
    parts = ['<section id="configuration"><h2>Configuration and data windows</h2>']
    if ctx.command:
        parts.append(f"<p>Reproduce this page: <code>{esc(ctx.command)}</code></p>")
    if ctx.config_path:
        parts.append(
            f"<p>Configuration file <code>{esc(ctx.config_path)}</code>"
            + (f", SHA-256 <code>{esc(ctx.config_sha256)}</code>" if ctx.config_sha256 else "")
            + "</p>"
        )
    freshness = [
        ["newest score", _iso(verdict.newest_score)],
        ["newest outcome", _iso(verdict.newest_outcome)],
    ]
    parts.append(_table(["window", "bound"], windows, numeric=[False, False]))
    parts.append(
        _table(
            ["source", "newest row"],
            [[_td(a), _td(b)] for a, b in freshness],
            numeric=[False, False],
        )
    )
    parts.append(f"<details><summary>Monitor settings</summary><pre>{esc(doc)}</pre></details>")
    parts.append("</section>")
    return "".join(parts)


_CATALOG_SHOWN = {"name", "type", "uri", "warehouse"}


def _redacted(x: Any, key: str = "") -> Any:
    """The settings a page shows, without secrets: an Iceberg catalog's properties but its name,
    type, uri and warehouse (tokens, keys and credentials go to pyiceberg, and the pages need no
    login by default), and any password in a URL (``scheme://user:secret@host``)."""
    if isinstance(x, dict):
        return {k: _redacted(v, k) for k, v in x.items()}
    if key == "catalog" and isinstance(x, list):
        return [
            [k, _redacted(v) if k in _CATALOG_SHOWN else "<redacted>"]
            for k, v in (p for p in x if isinstance(p, list) and len(p) == 2)
        ]
    if isinstance(x, list):
        return [_redacted(v) for v in x]
    if isinstance(x, str):
        return redact(x)
    return x


def _plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, timedelta):
        return f"{x.total_seconds():g}s"
    if isinstance(x, datetime):
        return x.isoformat()
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return str(x)


# every page's policy: no script, no request anywhere; inline styles and data: images only.
# In a <meta> of each page (a saved file has no response headers) and, served, a header too
PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _document(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{PAGE_CSP}">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>{body}</body></html>"
    )


def render_pending_page(monitor: str) -> str:
    """The daemon's page of a monitor before its first check has finished."""
    return _document(
        monitor,
        f"<h1>{esc(monitor)}</h1><p>No check has finished yet since the daemon started; this "
        'page shows the latest check once there is one.</p><p><a href="/">all monitors</a></p>',
    )


def page_file_name(monitor: str, at: datetime) -> str:
    """``<monitor>-<slot>.html`` of a slot's page: the slot to the minute
    (``20260302T0000Z``), to the second when it falls inside a minute (a "30s" schedule's
    two slots a minute once shared one file, the later page overwriting the earlier)."""
    at = at.astimezone(UTC)
    stamp = "%Y%m%dT%H%MZ" if at.second == 0 and at.microsecond == 0 else "%Y%m%dT%H%M%SZ"
    return f"{monitor}-{at.strftime(stamp)}.html"


def render_monitor_page(
    monitor: MonitorConfig,
    verdict: Verdict,
    detail: CheckDetail | None,
    history: Sequence[Mapping[str, Any]],
    ctx: PageContext,
) -> str:
    """One monitor's page for one check (see the module docstring)."""
    now = ctx.generated_at or datetime.now(UTC)
    if ctx.state_since is None:  # a replay: the daemon's record is not this state's
        since, whole = _since_in_history(verdict, history)
        ctx = replace(ctx, state_since=since, since_at_least=whole)
    body = (
        _header(monitor, verdict, ctx, now)
        + "<main>"
        + _input_section(monitor, verdict, detail, history, ctx)
        + _outcome_section(monitor, verdict, detail, history, ctx)
        + _segments_section(monitor, verdict)
        + _config_section(monitor, verdict, ctx)
        + "</main>"
        + f'<footer class="mute"><p>Generated {esc(_iso(now))}.</p></footer>'
    )
    return _document(f"{verdict.state}: {monitor.name} · retrieval-monitor", body)


def _since_in_history(
    verdict: Verdict, history: Sequence[Mapping[str, Any]]
) -> tuple[datetime | None, bool]:
    """The first check of the run of checks in ``verdict``'s state that ends with it, by the
    page's history (None: the history holds no earlier check in that state), and whether that
    run reaches the history's first check (then the state may be older: a replay's history
    starts where the replay did, and its page once dated the state from there). A replay's
    page once said 'no earlier record of this state' above a history of checks in that state."""
    since, whole = None, True
    for e in sorted((e for e in history if e.get("at")), key=_at, reverse=True):
        if _at(e) > verdict.at:
            continue
        if e.get("state") != verdict.state:
            whole = False
            break
        since = _at(e)
    if since is None or since >= verdict.at:
        return None, False
    return since, whole


@dataclass(frozen=True, slots=True)
class LandingRow:
    """One monitor on the landing page."""

    name: str
    state: str
    since: datetime | None
    reason: str | None
    data_age: Mapping[str, datetime | None]
    last_check: datetime | None = None


def render_landing(
    rows: Sequence[LandingRow], report: ReportConfig, *, now: datetime | None = None
) -> str:
    """The landing page: every monitor with its state, since, first reason, data age per source
    and links to its page, its runbook section and Grafana."""
    now = now or datetime.now(UTC)
    body_rows = []
    for r in rows:
        if r.last_check is None:
            # no check has finished since start-up: the data's age is not known yet ("none"
            # read as feeds that are empty or dead, beside the alarm the state file kept)
            ages = "not checked since start-up"
        else:
            ages = "; ".join(
                f"newest {src}: {_ago(t, now) if t else 'none'}" for src, t in r.data_age.items()
            )
            ages += f"; last check: slot {_iso(r.last_check)}"
        links = " · ".join(
            x
            for x in (
                f'<a href="/monitors/{quote(r.name, safe="")}">page</a>',
                _link(_runbook(report, r.state), "runbook"),
                _link(_grafana(report, r.name), "Grafana"),
            )
            if x
        )
        body_rows.append(
            "<tr>"
            f'<td><a href="/monitors/{quote(r.name, safe="")}">{esc(r.name)}</a></td>'
            f'<td><span class="state state-{esc(r.state)}">{esc(r.state)}</span></td>'
            f'<td>{esc(_iso(r.since))}<br><span class="mute">{esc(_ago(r.since, now))}</span></td>'
            f"<td>{esc(redact(r.reason or '–'))}</td><td>{esc(ages)}</td><td>{links}</td></tr>"
        )
    table = (
        '<div class="tw"><table id="monitors"><thead><tr><th>monitor</th><th>state</th>'
        "<th>since</th><th>first reason</th><th>data age</th><th>links</th></tr></thead>"
        f"<tbody>{''.join(body_rows)}</tbody></table></div>"
    )
    body = (
        f"<h1>retrieval-monitor {esc(__version__)}</h1>"
        f'<p class="mute">{len(rows)} monitor(s) · {esc(_iso(now))}</p>{table}'
        '<p><a href="/metrics">/metrics</a> · <a href="/status">/status</a> · '
        '<a href="/healthz">/healthz</a></p>'
    )
    return _document("retrieval-monitor", body)
