"""The page's charts, each from a binned summary (``monitor.verdict.CheckDetail``) or the check
history, never from raw rows. Every function returns one ``<svg>`` string with a text alternative.

Mark classes the browser tests count: ``bar-ref`` / ``bar-cur`` (one per PSI bin per window),
``pair`` (one circle per pair, or per quantile when a strip is binned), ``ks-gap`` (the KS gap),
``state-change`` (one line per change of state in the timeline).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from monitor.report.svg import Scale, Svg, nice_ticks
from monitor.verdict import InputDetail, OutcomeDetail

__all__ = [
    "MAX_STRIP_MARKS",
    "bins_chart",
    "cusum_chart",
    "decay_chart",
    "ecdf_chart",
    "strip_chart",
]

MAX_STRIP_MARKS = 20_000
"""Above this many pairs the strip draws 2,000 evenly spaced order statistics instead."""

W, H = 640.0, 300.0
_L, _R, _T, _B = 56.0, 14.0, 16.0, 40.0


def _g(x: float) -> str:
    """A tick label: 3 significant digits."""
    if x == 0:
        return "0"
    return f"{x:.3g}"


def _axes(
    svg: Svg,
    xs: Scale,
    ys: Scale,
    xticks: Sequence[float],
    yticks: Sequence[float],
    *,
    xlabel: str,
    ylabel: str,
    xfmt: Any = _g,
    yfmt: Any = _g,
) -> None:
    svg.line(_L, H - _B, W - _R, H - _B, cls="axis")
    svg.line(_L, _T, _L, H - _B, cls="axis")
    for t in yticks:
        y = ys(t)
        svg.line(_L, y, W - _R, y, cls="grid")
        svg.text(_L - 6, y + 4, yfmt(t), anchor="end", cls="tick")
    for t in xticks:
        x = xs(t)
        svg.line(x, H - _B, x, H - _B + 4, cls="axis")
        svg.text(x, H - _B + 17, xfmt(t), anchor="middle", cls="tick")
    svg.text((_L + W - _R) / 2, H - 4, xlabel, anchor="middle", cls="label")
    svg.text(
        12,
        _T + (H - _B - _T) / 2,
        ylabel,
        anchor="middle",
        cls="label",
        transform=f"rotate(-90 12 {(_T + (H - _B - _T) / 2):.1f})",
    )


def bins_chart(d: InputDetail, segment: str) -> str:
    """Reference vs current share in each frozen PSI bin: one bar per bin per window."""
    ref, cur = d.reference_shares, d.current_shares
    bins = ref.size
    top = max(float(ref.max(initial=0.0)), float(cur.max(initial=0.0)), 1e-9) * 1.1
    label = (
        f"Score distribution{_seg(segment)} on the {bins} frozen PSI bins: share of the reference "
        f"(blue) and current (orange) window in each bin; the table below holds the numbers."
    )
    svg = Svg(W, H, label=label, chart="bins")
    xs = Scale(0, bins, _L, W - _R)
    ys = Scale(0, top, H - _B, _T)
    _axes(
        svg,
        xs,
        ys,
        [],
        nice_ticks(0, top, 4),
        xlabel="PSI bin (score quantiles of the reference)",
        ylabel="share of window",
        yfmt=lambda t: f"{t * 100:.0f} %",
    )
    slot = xs(1) - xs(0)
    bar = slot * 0.38
    for b in range(bins):
        x0 = xs(b) + slot * 0.1
        svg.rect(
            x0,
            ys(ref[b]),
            bar,
            ys(0) - ys(ref[b]),
            cls="bar-ref",
            title=f"bin {b + 1} reference {ref[b] * 100:.2f} %",
        )
        svg.rect(
            x0 + bar + 1,
            ys(cur[b]),
            bar,
            ys(0) - ys(cur[b]),
            cls="bar-cur",
            title=f"bin {b + 1} current {cur[b] * 100:.2f} %",
        )
        if bins <= 30:
            svg.text(xs(b + 0.5), H - _B + 17, str(b + 1), anchor="middle", cls="tick")
    _legend(svg, [("ref", "reference"), ("cur", "current")])
    return svg.render()


def ecdf_chart(
    d: InputDetail, segment: str, ks_statistic: float | None, ks_high: float | None = None
) -> str:
    """Both ECDFs on the grid, with the KS gap drawn where it is attained (or, for a bracket
    ``ks_statistic <= D <= ks_high`` from summaries, at the grid point that bounds it)."""
    lo, hi = d.display_range
    xs = Scale(lo, hi, _L, W - _R)
    ys = Scale(0, 1, H - _B, _T)
    where = ""
    if ks_statistic is not None and d.ks_location is not None:
        where = (
            f"; the largest gap, D = {ks_statistic:.3f}, is at score {d.ks_location:.4g} (red line)"
            if ks_high is None
            else f"; the largest gap, D between {ks_statistic:.3f} and {ks_high:.3f}, is "
            f"bounded at score {d.ks_location:.4g} (red line)"
        )
    label = (
        f"Empirical CDFs of the scores{_seg(segment)}, reference (blue) and current (orange)"
        f"{where}."
    )
    svg = Svg(W, H, label=label, chart="ecdf")
    _axes(
        svg,
        xs,
        ys,
        nice_ticks(lo, hi, 6),
        [0, 0.25, 0.5, 0.75, 1.0],
        xlabel="score",
        ylabel="share of window <= score",
    )
    inside = (d.grid >= lo) & (d.grid <= hi)
    for values, cls in ((d.reference_ecdf, "line-ref"), (d.current_ecdf, "line-cur")):
        pts: list[tuple[float, float]] = []
        # F just below the range: the grid point before it, else 0 (the exact path's grid holds
        # each window's minimum; the first point's F drew every score at or below the range's
        # start when it was widened round one value)
        first = int(np.argmax(inside)) if inside.any() else 0
        prev = float(values[first - 1]) if first > 0 else 0.0
        if not inside.any():
            prev = float(values[-1]) if values.size and d.grid[-1] < lo else 0.0
        pts.append((xs(lo), ys(prev)))
        for g, f in zip(d.grid[inside], values[inside], strict=True):
            pts.append((xs(float(g)), ys(prev)))  # a step: flat, then up at the grid point
            pts.append((xs(float(g)), ys(float(f))))
            prev = float(f)
        pts.append((xs(hi), ys(prev)))
        svg.polyline(pts, cls=cls)
    if d.ks_location is not None and d.ks_reference is not None and d.ks_current is not None:
        x = xs.clamp(d.ks_location)
        svg.line(x, ys(d.ks_reference), x, ys(d.ks_current), cls="ks-gap")
        svg.text(
            x + 5,
            (ys(d.ks_reference) + ys(d.ks_current)) / 2,
            # bracketed through summaries: D is not known to be the lower end
            "D"
            if ks_statistic is None
            else f"D = {ks_statistic:.3f}"
            if ks_high is None
            else f"{ks_statistic:.3f} ≤ D ≤ {ks_high:.3f}",
            cls="note",
        )
    _legend(svg, [("ref", "reference"), ("cur", "current"), ("ks", "KS gap")])
    return svg.render()


def strip_chart(
    d: OutcomeDetail,
    segment: str,
    *,
    mean: float | None,
    ci: tuple[float | None, float | None],
    margin: float | None,
) -> str:
    """Every pair's difference (current - reference), sorted: one mark per pair, with the mean
    (line), its interval (band) and the +-margin lines."""
    diff = d.difference
    n = diff.size
    if n > MAX_STRIP_MARKS:
        ranks = np.linspace(0, n - 1, 2000).round().astype(np.intp)
        shown, binned = diff[ranks], True
    else:
        ranks, shown, binned = np.arange(n), diff, False
    m = margin or 0.0
    lo = min(float(diff.min(initial=0.0)), -m, *(c for c in ci if c is not None))
    hi = max(float(diff.max(initial=0.0)), m, *(c for c in ci if c is not None))
    pad = (hi - lo) * 0.05 or 0.01
    xs = Scale(0, max(n - 1, 1), _L + 4, W - _R - 4)
    ys = Scale(lo - pad, hi + pad, H - _B, _T)
    what = "2,000 evenly spaced order statistics of the" if binned else "each of the"
    label = (
        f"Per-query outcome differences{_seg(segment)} (current - reference), sorted: {what} "
        f"{n} pairs as a dot; mean {_fmt(mean)} (line), interval {_fmt(ci[0])} to {_fmt(ci[1])} "
        f"(band), margin {'n/a' if margin is None else f'±{abs(margin):.4f}'} (dashed)."
    )
    svg = Svg(W, H, label=label, chart="strip")
    _axes(
        svg,
        xs,
        ys,
        [t for t in nice_ticks(0, max(n - 1, 1), 5) if t == int(t)],  # pairs are counted
        nice_ticks(lo - pad, hi + pad, 5),
        xlabel="pairs, sorted by difference",
        ylabel="current - reference",
        xfmt=lambda t: f"{t:.0f}",
    )
    if ci[0] is not None and ci[1] is not None:
        c0 = max(ci[0], lo - pad) if math.isfinite(ci[0]) else lo - pad
        c1 = min(ci[1], hi + pad) if math.isfinite(ci[1]) else hi + pad
        svg.rect(_L, ys(c1), W - _R - _L, ys(c0) - ys(c1), cls="band")
    svg.line(_L, ys(0), W - _R, ys(0), cls="zero")
    if margin:
        for v in (-margin, margin):
            svg.line(_L, ys(v), W - _R, ys(v), cls="margin")
    svg.circles(
        [(xs(float(r)), ys(float(v))) for r, v in zip(ranks, shown, strict=True)], r=1.6, cls="pair"
    )
    if mean is not None:
        svg.line(_L, ys(mean), W - _R, ys(mean), cls="mean")
    _legend(svg, [("pair", "pair"), ("mean", "mean"), ("band", "interval"), ("margin", "+-margin")])
    return svg.render()


def _times(history: Sequence[Mapping[str, Any]]) -> list[float]:
    return [
        datetime.fromisoformat(str(e["at"]).replace("Z", "+00:00")).timestamp() for e in history
    ]


def _time_axis(
    svg: Svg, xs: Scale, t0: float, t1: float, ys: Scale, ylabel: str, yticks: Sequence[float]
) -> None:
    span = max(t1 - t0, 1.0)
    day = 86400.0
    step = (
        day * max(1, math.ceil(span / day / 6))
        if span > 2 * day
        else 3600.0 * max(1, math.ceil(span / 3600 / 6))
    )
    first = math.ceil(t0 / step) * step
    ticks = [first + k * step for k in range(int((t1 - first) // step) + 1)]
    fmt = "%m-%d" if step >= day else "%H:%M"
    _axes(
        svg,
        xs,
        ys,
        ticks,
        yticks,
        xlabel="check time (UTC)",
        ylabel=ylabel,
        xfmt=lambda t: datetime.fromtimestamp(t, UTC).strftime(fmt),
    )


def _changes(svg: Svg, history: Sequence[Mapping[str, Any]], ts: Sequence[float], xs: Scale) -> int:
    count = 0
    for k in range(1, len(history)):
        if history[k]["state"] != history[k - 1]["state"]:
            x = xs(ts[k])
            svg.line(x, _T, x, H - _B, cls="state-change", data_state=str(history[k]["state"]))
            left = x > W - _R - 110  # near the right edge: label on the left of the line
            svg.text(
                x - 3 if left else x + 3,
                _T + 22 + 13 * (count % 3),
                str(history[k]["state"]),
                cls="note",
                anchor="end" if left else "start",
            )
            count += 1
    return count


def _runs_of(labels: Sequence[Any]) -> list[int]:
    """The start of each run of equal consecutive labels."""
    return [k for k in range(len(labels)) if k == 0 or labels[k] != labels[k - 1]]


def cusum_chart(history: Sequence[Mapping[str, Any]], *, thinned: bool = False) -> str:
    """The drift CUSUM S at every check against its threshold h (the reference track's, and
    the anchor track's beside it where the monitor has one), the z of every evidence block
    (one dot per check that had a new block) against the immediate rule's z threshold, with
    the checks whose state changed marked, and each alarm: S is recorded at the check (at an
    alarm the value that crossed h, which the alarm then resets to 0; 0 there in history
    written before 2026-12-06), so a CUSUM alarm is drawn as a ring on h and an immediate one
    as a ring round the z of the track that fired (``alarm_track``; the anchor's z since
    2026-12-07: an alarm on the anchor track was ringed on the reference's numbers)."""
    ts = _times(history)
    s = [e.get("cusum") for e in history]
    anchor = [e.get("anchor_cusum") for e in history]
    anchored = any(isinstance(v, (int, float)) for v in anchor)
    h = [e.get("cusum_threshold") for e in history]
    zh = [e.get("z_threshold") for e in history]
    alarms = [
        (t, float(v))
        for t, e in zip(ts, history, strict=True)
        if e.get("alarm") in ("cusum", "immediate")
        and isinstance(v := e.get(_alarm_key(e)), (int, float))
    ]
    blocks = [
        (t, float(e["z"]))
        for t, e in zip(ts, history, strict=True)
        if e.get("evidence") and isinstance(e.get("z"), (int, float))
    ]
    values = [v for v in (*s, *anchor, *h, *zh) if isinstance(v, (int, float)) and math.isfinite(v)]
    values += [z for _, z in blocks] + [v for _, v in alarms]
    top = max(values, default=1.0) * 1.1 or 1.0
    t0, t1 = ts[0], ts[-1] if ts[-1] > ts[0] else ts[0] + 3600
    xs = Scale(t0, t1, _L, W - _R)
    low = [z for _, z in blocks] + [v for _, v in alarms]
    bottom = min(0.0, *low) if low else 0.0
    ys = Scale(bottom, top, H - _B, _T)
    changes = sum(
        1 for k in range(1, len(history)) if history[k]["state"] != history[k - 1]["state"]
    )
    # S is the deciding segment's: one line a run of checks with the same deciding segment,
    # broken where it changes (joined, another segment's reset read as this one's)
    breaks = _runs_of([e.get("input_segment") for e in history])
    kept = (
        "checks kept (every check of the last 48 h, the last of each hour before)"
        if thinned
        else "checks"
    )
    label = (
        f"Drift evidence over the last {len(history)} {kept}: CUSUM S (blue, at each check; "
        "an alarm resets it to 0 after it) of the reference track"
        + (" and the anchor track's S (purple, dashed)" if anchored else "")
        + " against the alarm threshold h (black dashed), "
        f"the z of each of {len(blocks)} evidence blocks (orange dots) against the immediate "
        f"alarm's z threshold (orange dashed); {len(alarms)} alarm(s) ringed (on h for a "
        "CUSUM alarm, on the z of the track that fired for an immediate one); "
        f"{changes} change(s) of state marked by grey lines"
        + (
            f"; S is the deciding segment's, and its line breaks at each of {len(breaks) - 1} "
            "change(s) of that segment."
            if len(breaks) > 1
            else "."
        )
    )
    svg = Svg(W, H, label=label, chart="cusum")
    _time_axis(svg, xs, t0, t1, ys, "CUSUM S, block z", nice_ticks(bottom, top, 4))
    _changes(svg, history, ts, xs)
    if bottom < 0:
        svg.line(_L, ys(0), W - _R, ys(0), cls="zero")
    series_drawn: list[tuple[list[Any], str, list[int]]] = [
        (h, "threshold", [0]),
        (zh, "z-threshold", [0]),
        (s, "line-ref", breaks),
    ]
    if anchored:
        series_drawn.append((anchor, "line-anchor", breaks))
    for series, cls, runs in series_drawn:
        for lo, hi in itertools.pairwise([*runs, len(history)]):
            pts = [
                (xs(t), ys(float(v)))
                for t, v in zip(ts[lo:hi], series[lo:hi], strict=True)
                if isinstance(v, (int, float))
            ]
            if pts:
                svg.polyline(pts, cls=cls)
    svg.circles([(xs(t), ys(z)) for t, z in blocks], r=2.2, cls="block")
    svg.circles([(xs(t), ys(v)) for t, v in alarms], r=5.0, cls="alarm")
    _legend(
        svg,
        [
            ("ref", "CUSUM S"),
            *([("anchor", "anchor S")] if anchored else []),
            ("threshold", "h"),
            ("block", "block z"),
            ("alarm", "alarm"),
            ("change", "state change"),
        ],
    )
    return svg.render()


def _alarm_key(entry: Mapping[str, Any]) -> str:
    """The history key of the number an alarm is ringed on: h for a CUSUM alarm (both tracks
    cross the same h), the block z of the track that fired for an immediate one."""
    if entry.get("alarm") == "cusum":
        return "cusum_threshold"
    return "anchor_z" if entry.get("alarm_track") == "anchor" else "z"


def decay_chart(history: Sequence[Mapping[str, Any]]) -> str:
    """The outcome mean difference at every new look with its interval, against -margin (a
    check that made no new look carries the previous look's numbers and is not drawn again)."""
    looks = [e for e in history if e.get("mean") is not None and e.get("new_look")]
    ts = _times(looks) if looks else _times(history)
    vals = [
        float(v)
        for e in looks
        for v in (e.get("mean"), e.get("ci_low"), e.get("ci_high"), -(e.get("margin") or 0.0))
        if isinstance(v, (int, float)) and math.isfinite(v)
    ]
    lo, hi = min(vals, default=-0.01), max(vals, default=0.01)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    pad = (hi - lo) * 0.08 or 0.01
    t0, t1 = ts[0], ts[-1] if ts[-1] > ts[0] else ts[0] + 3600
    xs = Scale(t0, t1, _L + 6, W - _R - 6)
    ys = Scale(lo - pad, hi + pad, H - _B, _T)
    label = (
        f"Outcome mean difference at each of {len(looks)} looks (dots) with its interval "
        f"(vertical bars) against -margin (dashed)."
    )
    svg = Svg(W, H, label=label, chart="decay")
    _time_axis(svg, xs, t0, t1, ys, "current - reference", nice_ticks(lo - pad, hi + pad, 5))
    svg.line(_L, ys(0), W - _R, ys(0), cls="zero")
    margins = [float(m) for e in looks if isinstance(m := e.get("margin"), (int, float)) and m]
    if margins:
        svg.line(_L, ys(-margins[-1]), W - _R, ys(-margins[-1]), cls="margin")
    for t, e in zip(ts, looks, strict=True):
        lo_ci, hi_ci = e.get("ci_low"), e.get("ci_high")
        if isinstance(lo_ci, (int, float)) and isinstance(hi_ci, (int, float)):
            svg.line(xs(t), ys.clamp(lo_ci), xs(t), ys.clamp(hi_ci), cls="ci")
    svg.circles(
        [(xs(t), ys(float(e["mean"]))) for t, e in zip(ts, looks, strict=True)], r=2.5, cls="look"
    )
    _legend(svg, [("pair", "mean difference"), ("ci", "interval"), ("margin", "-margin")])
    return svg.render()


def _legend(svg: Svg, items: Sequence[tuple[str, str]]) -> None:
    x = W - _R - 6
    for key, text in reversed(items):
        width = 8 + 7.5 * len(text)
        x -= width + 22
        svg.rect(x, _T - 12, 10, 10, cls=f"key-{key}")
        svg.text(x + 14, _T - 3, text, cls="legend")


def _seg(segment: str) -> str:
    return f" of segment {segment}" if segment else ""


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:+.4f}"
