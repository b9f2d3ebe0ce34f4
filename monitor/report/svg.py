"""A small SVG emitter: pure string building with escaping, no dependency.

Coordinates are user units of the ``viewBox`` (the chart scales to its container: the page sets
``max-width: 100%``). Every chart carries a ``<title>`` and ``<desc>`` and ``role="img"`` with an
``aria-label``, so a screen reader (or a person with a text browser) gets a sentence; the page puts
a data table beside each chart. Styling is by CSS class (the page's stylesheet holds the
colour-blind-safe Okabe-Ito palette), which keeps each mark short: a 10,000-pair strip is about
400 kB.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence

__all__ = ["Scale", "Svg", "attr", "esc", "nice_ticks", "num"]


def esc(text: object) -> str:
    """``text`` escaped for HTML/SVG text and attribute values (quotes included)."""
    return html.escape(str(text), quote=True)


def num(x: float) -> str:
    """A coordinate: two decimals, trailing zeros dropped (``12.5``, ``3``); non-finite is 0."""
    if not math.isfinite(x):
        return "0"
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def attr(**attrs: object) -> str:
    """` key="value"` pairs, escaped; ``None`` values are left out; ``_`` in a key becomes ``-``
    and a trailing ``_`` is dropped (``class_`` -> ``class``, ``data_n`` -> ``data-n``)."""
    out = []
    for key, value in attrs.items():
        if value is None:
            continue
        name = key.rstrip("_").replace("_", "-")
        text = num(value) if isinstance(value, float) else str(value)
        out.append(f' {name}="{esc(text)}"')
    return "".join(out)


class Scale:
    """A linear map from ``[d0, d1]`` to ``[r0, r1]`` (a degenerate domain maps to the middle)."""

    def __init__(self, d0: float, d1: float, r0: float, r1: float) -> None:
        self.d0, self.d1, self.r0, self.r1 = d0, d1, r0, r1

    def __call__(self, x: float) -> float:
        if self.d1 == self.d0:
            return (self.r0 + self.r1) / 2
        return self.r0 + (x - self.d0) * (self.r1 - self.r0) / (self.d1 - self.d0)

    def clamp(self, x: float) -> float:
        """``self(x)`` clipped to the range."""
        lo, hi = min(self.r0, self.r1), max(self.r0, self.r1)
        return min(max(self(x), lo), hi)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering ``[lo, hi]`` (steps of 1, 2 or 5 x 10^k)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    # a span of a few subnormals, or one past the float range (-1.8e308 to 1.8e308: sentinel
    # scores at both ends): no round step to take
    if not 1e-300 <= raw < math.inf:
        return [lo, hi]
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    # by index, not by adding the step: a range a few float steps wide has a step below the
    # rounding gap of its values, and ``t += step`` then never moved (an endless loop)
    n = math.floor((hi - first) / step * (1 + 1e-9)) + 1
    digits = 2 - math.floor(math.log10(step))  # the step's precision: 0.6000000000000001 -> 0.6
    ticks: list[float] = []
    for i in range(max(n, 0)):
        t = round(first + i * step, digits)
        if not ticks or t > ticks[-1]:
            ticks.append(t)
    return ticks or [lo]


class Svg:
    """One chart: add marks, then ``render()``. ``label`` is the text alternative (the
    ``aria-label`` and ``<title>``); ``desc`` a longer description (the ``<desc>``)."""

    def __init__(
        self, width: float, height: float, *, label: str, desc: str = "", chart: str = ""
    ) -> None:
        self.width, self.height = width, height
        self.label, self.desc, self.chart = label, desc, chart
        self._parts: list[str] = []

    def add(self, raw: str) -> None:
        """Append raw SVG (already escaped)."""
        self._parts.append(raw)

    def rect(
        self,
        x: float,
        y: float,
        w: float,
        h: float,
        *,
        cls: str,
        title: str | None = None,
        **a: object,
    ) -> None:
        body = f"<title>{esc(title)}</title>" if title else ""
        size = attr(width=float(max(w, 0.0)), height=float(max(h, 0.0)))
        tag = f"<rect{attr(x=float(x), y=float(y))}{size}{attr(class_=cls, **a)}"
        self._parts.append(f"{tag}>{body}</rect>" if body else f"{tag}/>")

    def line(self, x1: float, y1: float, x2: float, y2: float, *, cls: str, **a: object) -> None:
        self._parts.append(
            f"<line{attr(x1=float(x1), y1=float(y1), x2=float(x2), y2=float(y2))}"
            f"{attr(class_=cls, **a)}/>"
        )

    def polyline(self, points: Iterable[tuple[float, float]], *, cls: str, **a: object) -> None:
        pts = " ".join(f"{num(x)},{num(y)}" for x, y in points)
        self._parts.append(f"<polyline{attr(points=pts, class_=cls, **a)}/>")

    def circles(self, points: Sequence[tuple[float, float]], *, r: float, cls: str) -> None:
        """One ``<circle>`` per point inside a ``<g class=cls>`` (short marks for large n)."""
        marks = "".join(f'<circle cx="{num(x)}" cy="{num(y)}" r="{num(r)}"/>' for x, y in points)
        self._parts.append(f'<g class="{esc(cls)}">{marks}</g>')

    def text(
        self, x: float, y: float, text: str, *, cls: str = "", anchor: str = "start", **a: object
    ) -> None:
        self._parts.append(
            f"<text{attr(x=float(x), y=float(y), class_=cls or None, text_anchor=anchor, **a)}>"
            f"{esc(text)}</text>"
        )

    def render(self) -> str:
        """The ``<svg>`` element (no XML prolog: it is inlined in HTML)."""
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {num(self.width)} '
            f'{num(self.height)}" role="img"'
            f"{attr(aria_label=self.label, data_chart=self.chart or None)}"
            f' preserveAspectRatio="xMidYMid meet">'
            f"<title>{esc(self.label)}</title><desc>{esc(self.desc or self.label)}</desc>"
        )
        return head + "".join(self._parts) + "</svg>"
