"""``monitor report``: the page's numbers are the ``check --json`` numbers, its arrays are right,
it is self-contained and small, and the configuration and history behave."""

from __future__ import annotations

import html
import itertools
import json
import logging
import math
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats

from monitor.cli import main
from monitor.config import ReportConfig, parse_config
from monitor.errors import ConfigError
from monitor.report import HistoryStore, PageContext, render_monitor_page
from monitor.report.charts import bins_chart, ecdf_chart
from monitor.report.history import MemoryHistory, _parse_iso, _thin, history_entry
from monitor.report.svg import Svg, esc, num
from monitor.simulate import SCENARIOS, World, write_world
from monitor.stats import build_baseline, drift_tests
from monitor.verdict import MonitorState, Pairs, Verdict
from monitor.verdict.detail import input_detail, outcome_detail

START = datetime(2026, 10, 1, tzinfo=UTC)
AT = START + timedelta(days=17)
REPLAY = (AT - timedelta(days=2)).isoformat()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("report")
    scenario = replace(SCENARIOS["drift_and_decay"], scores_per_hour=400.0)
    return write_world(root / "w", scenario, start=START, end=START + timedelta(days=18), seed=11)


class _Cells(HTMLParser):
    """Collects ``data-key`` / ``data-value`` pairs, contributions and element counts."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, Any] = {}
        self.contributions: list[float] = []
        self.tags: dict[str, int] = {}
        self.classes: dict[str, int] = {}
        self.text: dict[str, str] = {}
        self._key: str | None = None
        self._g_class: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        cls = a.get("class") or ""
        for c in cls.split():
            self.classes[c] = self.classes.get(c, 0) + 1
        if tag == "g":
            self._g_class.append(cls)
        if tag == "circle" and self._g_class:
            key = f"{self._g_class[-1]} circle"
            self.classes[key] = self.classes.get(key, 0) + 1
        if "data-key" in a:
            key = str(a["data-key"])
            assert key not in self.values, f"{key} twice on the page"
            self.values[key] = json.loads(str(a["data-value"]))
            self._key = key
        if "data-bin-contribution" in a:
            self.contributions.append(float(str(a["data-bin-contribution"])))

    def handle_endtag(self, tag: str) -> None:
        if tag == "g" and self._g_class:
            self._g_class.pop()
        if tag in ("td", "span"):
            self._key = None

    def handle_data(self, data: str) -> None:
        if self._key is not None:
            self.text[self._key] = self.text.get(self._key, "") + data


def parse(page: str) -> _Cells:
    p = _Cells()
    p.feed(page)
    return p


def _json_value(doc: dict[str, Any], key: str) -> Any:
    if key == "state":
        return doc["state"]
    m = re.fullmatch(r"segments\[(.*)\]\.(input|outcome)\.(\w+)", key)
    if m:
        seg = next(s for s in doc["segments"] if s["segment"] == m.group(1))
        part = seg[m.group(2)]
        return None if part is None else part[m.group(3)]
    part, field = key.split(".")
    return doc[part][field]


def _report_and_check(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[str, dict[str, Any]]:
    at = ["--at", AT.isoformat(), "--replay-from", REPLAY]
    code = main(["check", "--config", str(world.config_path), "--json", *at])
    doc = json.loads(capsys.readouterr().out)["monitors"][0]
    out = tmp_path / "page.html"
    assert main(["report", "--config", str(world.config_path), "--out", str(out), *at]) == code
    capsys.readouterr()
    return out.read_text(encoding="utf-8"), doc


def test_page_numbers_equal_check_json(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page, doc = _report_and_check(world, tmp_path, capsys)
    cells = parse(page)
    assert doc["state"] == "model_decay"
    # every number the page prints is tagged, and there are many of them
    assert len(cells.values) >= 35
    for key, value in cells.values.items():
        assert value == _json_value(doc, key), key
    # the rounded text is the rounding of the exact value
    assert cells.text["input.psi"] == f"{doc['input']['psi']:.4g}"
    assert cells.text["outcome.mean_difference"] == f"{doc['outcome']['mean_difference']:+.4f}"
    assert cells.text["outcome.ci_low"] == f"{doc['outcome']['ci_low']:+.4f}"
    assert cells.text["outcome.n_pairs"] == f"{doc['outcome']['n_pairs']:,}"
    for key in ("input.psi", "input.ks_statistic", "outcome.pvalue_adjusted", "outcome.mde"):
        assert key in cells.values
    # the world's reference holds 7 daily runs of each query: the run labels decide
    assert cells.values["outcome.test"] == "run-label"
    assert cells.text["outcome.test"].startswith("run labels permuted within each query")


def test_page_draws_every_bin_and_pair(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page, doc = _report_and_check(world, tmp_path, capsys)
    cells = parse(page)
    bins = doc["input"]["psi_bins"]
    assert cells.classes["bar-ref"] == bins
    assert cells.classes["bar-cur"] == bins
    assert cells.classes["pair circle"] == doc["outcome"]["n_pairs"]
    assert cells.classes["ks-gap"] == 1
    assert len(cells.contributions) == bins
    assert math.isclose(sum(cells.contributions), doc["input"]["psi"], rel_tol=1e-9)
    # a text alternative for every chart
    assert cells.tags["svg"] >= 4
    assert page.count('role="img"') == cells.tags["svg"]
    assert page.count("<desc>") == cells.tags["svg"]
    assert "p above alpha means no evidence of a difference, not no difference" in page
    assert "Largest losses" in page
    assert "Largest gains" in page
    # the replayed history draws the CUSUM timeline with the change to model_decay
    assert cells.classes["state-change"] >= 1
    assert 'data-state="model_decay"' in page


def test_page_is_self_contained_and_small(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page, _ = _report_and_check(world, tmp_path, capsys)
    assert len(page.encode()) < 1_000_000
    assert "<script" not in page
    assert not re.search(r"\b(src|href)=\"(https?:)?//", page)  # no configured links here
    urls = set(re.findall(r"https?://[^\"' <)]+", page))
    assert urls == {"http://www.w3.org/2000/svg"}
    assert "no runbook or Grafana links" in page


def test_page_links_from_the_configuration(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = world.config_path.read_text()
    config = world.config_path.with_name("linked.toml")
    config.write_text(
        text.replace(
            "[[monitors]]",
            '[report]\nrunbook_url = "https://git.example.com/rm/docs/runbook.md"\n'
            'grafana_url = "https://grafana.example.com/"\n\n[[monitors]]',
            1,
        )
    )
    out = tmp_path / "p.html"
    main(
        [
            "report",
            "--config",
            str(config),
            "--out",
            str(out),
            "--at",
            AT.isoformat(),
            "--replay-from",
            REPLAY,
        ]
    )
    capsys.readouterr()
    page = out.read_text()
    assert 'href="https://git.example.com/rm/docs/runbook.md#retrievalmodeldecay"' in page
    assert (
        'href="https://grafana.example.com/d/retrieval-monitor-drilldown/?var-monitor=demo'
        '&amp;viewPanel=8"' in page
    )


def test_report_refuses_one_file_for_many_monitors(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = world.config_path.read_text()
    two = world.config_path.with_name("two.toml")
    second = text[text.index("[[monitors]]") :].replace('name = "demo"', 'name = "other"')
    two.write_text(text + "\n" + second)
    code = main(["report", "--config", str(two), "--out", str(tmp_path / "x.html")])
    assert code == 3
    assert "needs --monitor (2 monitors)" in capsys.readouterr().err
    assert main(["report", "--config", str(two), "--monitor", "nope"]) == 3
    assert "no monitor named 'nope'" in capsys.readouterr().err


def _detail(ref: np.ndarray, cur: np.ndarray) -> tuple[Any, Any]:
    """The drift tests of ``cur`` against ``ref`` (10 bins, smoothing 0.5) and their detail."""
    base = build_baseline(ref, bins=10)
    both = drift_tests(base, cur, smoothing=0.5)
    d = input_detail(
        base.sorted_reference,
        cur,
        base.edges,
        smoothing=0.5,
        ks_location=both.ks.statistic_location,
    )
    return d, both


def test_input_detail_against_numpy_and_scipy() -> None:
    rng = np.random.default_rng(3)
    ref = rng.lognormal(size=20_000)
    cur = np.concatenate((rng.lognormal(0.2, size=15_000), np.zeros(500)))
    d, both = _detail(ref, cur)
    np.testing.assert_array_equal(d.reference_counts, both.psi.reference_counts)
    np.testing.assert_array_equal(d.current_counts, both.psi.current_counts)
    assert math.isclose(float(d.contributions.sum()), both.psi.statistic, rel_tol=1e-12)
    # the ECDFs at the grid points are exact
    for sample, ecdf in ((ref, d.reference_ecdf), (cur, d.current_ecdf)):
        expected = np.array([np.mean(sample <= g) for g in d.grid[::37]])
        np.testing.assert_allclose(ecdf[::37], expected, rtol=0, atol=1e-15)
    # the marked gap is scipy's KS statistic
    assert d.ks_reference is not None
    assert d.ks_current is not None
    gap = abs(d.ks_reference - d.ks_current)
    assert math.isclose(gap, stats.ks_2samp(ref, cur).statistic, rel_tol=1e-12)
    assert 300 <= d.grid.size <= 420


def test_charts_do_not_grow_with_the_window() -> None:
    rng = np.random.default_rng(5)
    sizes = []
    for n in (10_000, 1_000_000):
        ref, cur = rng.normal(size=n), rng.normal(0.1, size=n)
        base = build_baseline(ref, bins=10)
        d = input_detail(base.sorted_reference, cur, base.edges, smoothing=0.5, ks_location=0.0)
        sizes.append(len(bins_chart(d, "")) + len(ecdf_chart(d, "", 0.04)))
    assert sizes[1] < 1.1 * sizes[0]
    assert sizes[1] < 60_000


def test_outcome_detail_sorts_by_difference_then_id() -> None:
    pairs = Pairs(
        reference=np.array([0.5, 0.2, 0.9, 0.4]),
        current=np.array([0.4, 0.3, 0.8, 0.4]),
        query_ids=np.array(["q3", "q1", "q2", "q0"]),
        only_reference=2,
    )
    d = outcome_detail(pairs)
    assert d.query_ids.tolist() == ["q2", "q3", "q0", "q1"]
    np.testing.assert_allclose(d.difference, [-0.1, -0.1, 0.0, 0.1], atol=1e-12)
    assert d.only_reference == 2
    assert d.n == 4


def test_svg_and_page_escape_text(world: World) -> None:
    svg = Svg(10, 10, label='<script>alert("x")</script>')
    svg.text(1, 1, "a < b & c")
    out = svg.render()
    assert "<script>" not in out
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in out
    assert "a &lt; b &amp; c" in out
    assert esc("'") == "&#x27;"
    assert num(1.005) in ("1", "1.01")
    assert num(float("nan")) == "0"
    assert num(-0.001) == "0"
    from monitor.config import load_config

    monitor = load_config(world.config_path).monitors[0]
    verdict = Verdict(
        monitor="demo", at=AT, state="error", reasons=("<img src=x onerror=alert(1)>",)
    )
    page = render_monitor_page(monitor, verdict, None, (), PageContext(report=ReportConfig()))
    assert "<img" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "This check failed" in page  # an error has no numbers (not "no score data")


def test_report_config_iv(tmp_path: Path) -> None:
    base = {
        "monitors": [{"name": "m", "scores": {"path": "s"}, "outcomes": {"path": "o"}}],
    }
    good = parse_config(
        {
            **base,
            "report": {
                # a runbook's trailing slash is its page's (pages link <url>#<alert>); a
                # Grafana base's is cut (paths are appended to it)
                "runbook_url": "https://x.example/runbook/",
                "grafana_url": "http://g:3000/",
                "history_max_entries": 500,
                "history_max_age": "40d",
            },
        },
        base=tmp_path,
    )
    assert good.report.grafana_url == "http://g:3000"
    assert good.report.runbook_url == "https://x.example/runbook/"
    assert good.report.history_max_entries == 500
    assert good.report.history_max_age == timedelta(days=40)
    assert parse_config(base, base=tmp_path).report == ReportConfig()
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                **base,
                "report": {
                    "runbook_url": "ftp://x",
                    "grafana_url": "grafana",
                    "history_max_entries": 3,
                    "history_max_age": "1h",
                    "colour": "red",
                },
            },
            base=tmp_path,
        )
    text = str(err.value)
    assert "report.runbook_url: must be an http:// or https:// URL" in text
    assert "report.grafana_url: must be an http:// or https:// URL" in text
    assert "report.history_max_entries: must be an integer in [10, 30000]; got 3" in text
    assert "report.history_max_age: must be at least 1d; got '1h'" in text
    assert "report.colour: unknown key" in text
    with pytest.raises(ConfigError, match=r"report\.runbook_url: must not hold a #fragment"):
        parse_config({**base, "report": {"runbook_url": "https://x/r.md#top"}}, base=tmp_path)
    with pytest.raises(ConfigError, match="report: must be a table"):
        parse_config({**base, "report": "yes"}, base=tmp_path)
    # a path appended after a fragment is no path: every Grafana link was broken
    with pytest.raises(ConfigError, match=r"report\.grafana_url: must be a URL without a #"):
        parse_config({**base, "report": {"grafana_url": "https://g/grafana/#/"}}, base=tmp_path)


def test_a_grafana_url_with_an_org_links_each_dashboard_in_that_org() -> None:
    """``grafana_url = "https://grafana.example.com/?orgId=2"`` (Grafana's multi-org URL)
    made links like ``.../?orgId=2/d/retrieval-monitor-overview/?var-monitor=m``: the path was
    appended after the query. The base's query now goes in each link's own."""
    docs = [{"name": "m", "scores": {"path": "s"}, "outcomes": {"path": "o"}}]
    config = parse_config(
        {"monitors": docs, "report": {"grafana_url": "https://grafana.example.com/g/?orgId=2"}},
        base=Path("/tmp"),
    )
    assert config.report.grafana_url == "https://grafana.example.com/g?orgId=2"
    (m,) = config.monitors
    page = render_monitor_page(m, _verdict(AT), None, [], PageContext(config.report))
    links = re.findall(r'href="(https://grafana\.example\.com[^"]*)"', page)
    assert links
    for link in links:
        assert link.startswith("https://grafana.example.com/g/d/retrieval-monitor-"), link
        assert html.unescape(link).split("?", 1)[1].startswith("orgId=2&var-monitor=m"), link


def _verdict(at: datetime, state: str = "ok") -> Verdict:
    return Verdict(monitor="m", at=at, state=state, reasons=())


def test_history_is_bounded_atomic_and_reloads(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "h", max_entries=50, max_age=timedelta(days=2))
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for k in range(100):
        store.append("m", _verdict(t0 + timedelta(hours=k), "ok" if k < 90 else "data_drift"))
    entries = store.entries("m")
    assert len(entries) == 49  # 2 days of hourly checks, inclusive: the age bound is tighter
    assert entries[-1]["at"] == "2026-01-05T03:00:00Z"
    assert entries[-1]["state"] == "data_drift"
    # the same slot checked again replaces its entry
    store.append("m", _verdict(t0 + timedelta(hours=99), "model_decay"))
    assert len(store.entries("m")) == 49
    again = HistoryStore(tmp_path / "h", max_entries=50, max_age=timedelta(days=2))
    assert again.entries("m") == store.entries("m")
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == ["m.json.history"]  # no temp
    count = HistoryStore(tmp_path / "c", max_entries=10)
    for k in range(30):
        count.append("m", _verdict(t0 + timedelta(hours=k)))
    assert len(count.entries("m")) == 10
    # reading applies the bound: a file written under a larger one reads bounded (it once
    # came back whole until the next append), and the next append writes it so
    assert len(HistoryStore(tmp_path / "h", max_entries=5, readonly=True).entries("m")) == 5
    smaller = HistoryStore(tmp_path / "h", max_entries=5)
    assert len(smaller.entries("m")) == 5
    smaller.append("m", _verdict(t0 + timedelta(hours=100)))
    assert len(HistoryStore(tmp_path / "h", max_entries=50).entries("m")) == 5


def test_history_appends_a_line_a_check_and_reads_back_what_it_holds(tmp_path: Path) -> None:
    """A check appends its entry's line (the file is not rewritten: same inode); the file is
    rewritten whole, as JSON lines, once it holds more than twice the bounded entries plus 64
    lines. After appends, replaced slots, thinning, both bounds and restarts, a fresh reader
    sees exactly the entries the writer holds."""
    import json

    g = np.random.default_rng(3)
    kwargs = {
        "max_entries": 60,
        "max_age": timedelta(days=2),
        "full_resolution": timedelta(hours=6),
    }
    store = HistoryStore(tmp_path, **kwargs)  # type: ignore[arg-type]
    path = tmp_path / "m.json.history"
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    states = ["ok", "data_drift", "model_decay"]
    inodes, rewrites = [], 0
    for k in range(400):
        at = t0 + timedelta(minutes=20 * int(g.integers(max(0, k - 6), k + 1)))  # slots again
        store.append("m", _verdict(at, states[int(g.integers(0, 3))]))
        inodes.append(path.stat().st_ino)
        rewrites += k > 0 and inodes[-1] != inodes[-2]
        if k % 97 == 0:  # a restart: entries read back from the file
            store = HistoryStore(tmp_path, **kwargs)  # type: ignore[arg-type]
        fresh = HistoryStore(tmp_path, readonly=True, **kwargs)  # type: ignore[arg-type]
        assert fresh.entries("m") == store.entries("m"), k
        lines = path.read_text().splitlines()
        assert json.loads(lines[0]) == {"version": 2, "monitor": "m"}
        assert len(lines) - 1 <= 2 * len(store.entries("m")) + 64 + 1
    assert 0 < rewrites < 40  # whole rewrites are rare; a check appends a line
    # a file written whole is the header and each entry's line, compact
    store._lines["m"] = -1
    at = t0 + timedelta(days=30)
    store.append("m", _verdict(at))
    text = path.read_text()
    head = json.dumps({"version": 2, "monitor": "m"}, separators=(",", ":"))
    body = "".join(
        json.dumps(e, separators=(",", ":"), allow_nan=False) + "\n" for e in store.entries("m")
    )
    assert text == head + "\n" + body


def test_history_leaves_out_a_line_cut_short_and_reads_version_1(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A kill during an append leaves a last line without its end: a reader leaves it out
    with one line logged, and the next append rewrites the file whole (an appended line would
    run into it). A version-1 file (one JSON document) is read, and rewritten as version 2."""
    import json

    path = tmp_path / "m.json.history"
    store = HistoryStore(tmp_path)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for k in range(3):
        store.append("m", _verdict(t0 + timedelta(hours=k)))
    with path.open("a") as fh:
        fh.write('{"at":"2026-01-01T03:00:00Z","sta')
    with caplog.at_level(logging.WARNING, logger="monitor"):
        again = HistoryStore(tmp_path)
        assert [e["at"] for e in again.entries("m")] == [
            "2026-01-01T00:00:00Z",
            "2026-01-01T01:00:00Z",
            "2026-01-01T02:00:00Z",
        ]
    assert "last line cut short" in caplog.text
    again.append("m", _verdict(t0 + timedelta(hours=4), "data_drift"))
    assert len(HistoryStore(tmp_path).entries("m")) == 4
    assert path.read_text().endswith("\n")
    assert not list(tmp_path.glob("*.corrupt-*"))
    # version 1: one document
    old = {
        "version": 1,
        "monitor": "v",
        "entries": [{"at": "2026-01-01T00:00:00Z", "state": "ok"}],
    }
    (tmp_path / "v.json.history").write_text(json.dumps(old))
    v1 = HistoryStore(tmp_path)
    assert v1.entries("v") == ({"at": "2026-01-01T00:00:00Z", "state": "ok"},)
    v1.append("v", _verdict(t0 + timedelta(hours=1)))
    lines = (tmp_path / "v.json.history").read_text().splitlines()
    assert json.loads(lines[0])["version"] == 2
    assert [json.loads(x)["at"] for x in lines[1:]] == [
        "2026-01-01T00:00:00Z",
        "2026-01-01T01:00:00Z",
    ]


def test_history_thins_a_fast_schedule_to_hourly_beyond_full_resolution() -> None:
    """Older than ``full_resolution``, a fast schedule's history keeps one entry an hour, so the
    age bound (not the entry count) decides how far back it reaches; changes of state stay
    whatever their age, and thinning a thinned history changes nothing."""
    store = MemoryHistory(max_age=timedelta(days=5), full_resolution=timedelta(hours=6))
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    drift_from, drift_to = t0 + timedelta(days=2, minutes=20), t0 + timedelta(days=2, minutes=45)
    for k in range(0, 6 * 24 * 60, 10):  # every 10 minutes for 6 days
        at = t0 + timedelta(minutes=k)
        store.append("m", _verdict(at, "data_drift" if drift_from <= at < drift_to else "ok"))
    entries = store.entries("m")
    times = [datetime.fromisoformat(e["at"].replace("Z", "+00:00")) for e in entries]
    newest = times[-1]
    assert timedelta(days=4, hours=23) <= newest - times[0] <= timedelta(days=5)
    assert sum(1 for t in times if newest - t < timedelta(hours=6)) == 36  # full resolution
    per_hour: dict[datetime, int] = {}
    for t in times:
        if newest - t > timedelta(hours=7):
            hour = t.replace(minute=0, second=0, microsecond=0)
            per_hour[hour] = per_hour.get(hour, 0) + 1
    busy = {h for h, n in per_hour.items() if n > 1}
    assert busy == {drift_from.replace(minute=0)}  # only the hour whose state changed
    drifted = [e["at"] for e in entries if e["state"] == "data_drift"]
    assert drifted[0] == "2026-01-03T00:20:00Z"  # the change itself is kept, 4 days on
    assert len(entries) <= 36 + 5 * 24 + 4
    assert _thin(list(entries), newest - timedelta(hours=6)) == list(entries)


@settings(max_examples=1500, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.integers(-90, 400),  # minutes after the previous check (<= 0: out of order)
            st.sampled_from(["ok", "ok", "ok", "data_drift", "model_decay"]),
            st.booleans(),  # a new outcome look
        ),
        min_size=1,
        max_size=120,
    ),
    max_entries=st.integers(3, 80),
    max_age_h=st.integers(2, 30),
    full_h=st.integers(1, 8),
)
@example(  # the first entry the age bound leaves is one the thinning had kept: it stays
    steps=[(m, "ok", False) for m in (5, 5, 40, 50, 27)],
    max_entries=10,
    max_age_h=2,
    full_h=1,
)
def test_history_bound_of_an_append_equals_the_whole_bound(
    steps: list[tuple[int, str, bool]], max_entries: int, max_age_h: int, full_h: int
) -> None:
    """A check's append (an entry newer than all) bounds only the entries the thinning
    boundary passed over (``HistoryStore._after``); on any sequence of checks, it gives what
    sorting, bounding and thinning the whole history gives, and drops exactly the rest."""
    store = MemoryHistory(
        max_entries=max_entries,
        max_age=timedelta(hours=max_age_h),
        full_resolution=timedelta(hours=full_h),
    )
    t = datetime(2026, 1, 1, tzinfo=UTC)
    held: list[dict[str, Any]] = []
    for k, (minutes, state, look) in enumerate(steps):
        t += timedelta(minutes=minutes)
        entry: dict[str, Any] = {"at": t.isoformat().replace("+00:00", "Z"), "state": state}
        if look:
            entry["new_look"] = True
        whole = store._bound([*(e for e in held if e["at"] != entry["at"]), entry])
        after = store._after(held, entry)
        if held and t > datetime.fromisoformat(held[-1]["at"].replace("Z", "+00:00")):
            assert after is not None, k
            entries, dropped = after
            assert entries == whole, k
            assert all(a is b for a, b in zip(entries, whole, strict=True)), k
            kept = {id(e) for e in whole}
            assert sorted(id(e) for e in dropped) == sorted(
                id(e) for e in held if id(e) not in kept
            ), k
        else:
            assert after is None, k
        held = whole


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"{not json", "JSONDecodeError"),
        (b'{"version": 1, "entries": [{"at": "x", "state": "ok"}]}', "Invalid isoformat"),
        (b'{"version": 7, "entries": []}', "not a version 1 or 2 history file"),
        (b'{"version": 2, "monitor": "r"}\nnot json\n', "JSONDecodeError"),
        (b'{"version": 2, "monitor": "r"}\n[1]\n', "not an object"),
        (b'{"version": 1, "entries": [{"at": "2026-01-01T00:00:00Z", "x": NaN}]}', "non-finite"),
        (b"\xff\xfe", "UnicodeDecodeError"),
        # a string where a number belongs: every page request for the monitor failed
        (
            b'{"version": 2, "monitor": "r"}\n{"at": "2026-01-01T00:00:00Z", "state": "ok", '
            b'"cusum": "13.1"}\n',
            "`cusum` is not a number",
        ),
        (
            b'{"version": 2, "monitor": "r"}\n{"at": "2026-01-01T00:00:00Z", "state": "ok", '
            b'"drift": 1}\n',
            "`drift` is not true or false",
        ),
        # a literal past the float range parses as inf (only NaN and Infinity were caught):
        # the CUSUM chart was drawn flat at 0 and every whole rewrite of the file failed
        (
            b'{"version": 2, "monitor": "r"}\n{"at": "2026-01-01T00:00:00Z", "state": "ok", '
            b'"z": 1e999}\n',
            "`z` is not a number",
        ),
        # an integer past the float range where a number belongs: the OverflowError was not
        # caught, so every append raised and the monitor published nothing, ever
        (
            b'{"version": 2, "monitor": "r"}\n{"at": "2026-01-01T00:00:00Z", "state": "ok", '
            b'"n_pairs": 1' + b"0" * 400 + b"}\n",
            "OverflowError",
        ),
    ],
)
def test_history_sets_a_corrupt_file_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes, reason: str
) -> None:
    (tmp_path / "m.json.history").write_bytes(content)
    store = HistoryStore(tmp_path)
    with caplog.at_level(logging.ERROR, logger="monitor"):
        assert store.entries("m") == ()
    record = next(r for r in caplog.records if "history file unreadable" in r.getMessage())
    assert reason in record.__dict__["error"]
    asides = list(tmp_path.glob("m.json.history.corrupt-*"))
    assert len(asides) == 1
    assert asides[0].read_bytes() == content
    store.append("m", _verdict(datetime(2026, 1, 1, tzinfo=UTC)))
    assert HistoryStore(tmp_path).entries("m")[0]["state"] == "ok"  # a new file, read back
    # read-only (monitor report): logged, left in place
    (tmp_path / "r.json.history").write_bytes(content)
    assert HistoryStore(tmp_path, readonly=True).entries("r") == ()
    assert (tmp_path / "r.json.history").read_bytes() == content


def test_history_entries_after_now_are_left_out_and_later_checks_kept(tmp_path: Path) -> None:
    """One entry written while the clock ran a year ahead, then the clock fixed and the
    daemon restarted (its state file is set aside as `future`): the age bound counted from
    that entry, so every later check was dropped as it was appended and the page said "no
    check history yet" for a year."""
    now = datetime.now(UTC).replace(microsecond=0)
    first = HistoryStore(tmp_path)
    first.append("m", _verdict(now - timedelta(hours=2)))
    first.append("m", _verdict(now + timedelta(days=365)))
    store = HistoryStore(tmp_path)
    times = [now - timedelta(hours=1), now]
    for t in times:
        store.append("m", _verdict(t))
    want = times  # the entry before the one ahead was dropped when that was appended
    assert [_parse_iso(e["at"]) for e in store.entries("m")] == want
    assert [_parse_iso(e["at"]) for e in HistoryStore(tmp_path).entries("m")] == want


def test_history_entries_after_now_use_the_stores_clock(tmp_path: Path) -> None:
    """The "now" is the clock the daemon runs on (its tests' and the demo's may be another), not
    the wall clock: entries of a simulated 2030 read back by a store on that clock are kept,
    and those after it left out."""
    at = datetime(2030, 1, 1, tzinfo=UTC)
    writer = HistoryStore(tmp_path, clock=lambda: at)
    for h in (-2, -1, 0, 48):
        writer.append("m", _verdict(at + timedelta(hours=h)))
    got = HistoryStore(tmp_path, clock=lambda: at).entries("m")
    assert [_parse_iso(e["at"]) for e in got] == [at + timedelta(hours=h) for h in (-2, -1, 0)]


def test_a_fifo_in_a_historys_place_is_set_aside_not_waited_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A FIFO where a history file belongs: its read waited for a writer forever, holding the
    store's lock, so every monitor's runs stopped behind it, silently. It is set aside as a
    corrupt file is; one made after the history was read fails the append (logged, kept in
    memory) instead of waiting for a reader. Each call runs in a thread the test joins, so a
    regression fails here instead of hanging the suite."""
    import os
    import threading

    def within(call: Callable[[], object]) -> object:
        out: list[object] = []
        t = threading.Thread(target=lambda: out.append(call()), daemon=True)
        t.start()
        t.join(30)
        assert not t.is_alive(), "blocked on the FIFO"
        return out[0]

    os.mkfifo(tmp_path / "m.json.history")
    (tmp_path / "d.json.history").mkdir()
    store = HistoryStore(tmp_path)
    with caplog.at_level(logging.ERROR, logger="monitor"):
        assert within(lambda: store.entries("m")) == ()
        assert within(lambda: store.entries("d")) == ()
    errors = [r.__dict__["error"] for r in caplog.records if "unreadable" in r.getMessage()]
    assert any("m.json.history is not a regular file" in e for e in errors), errors
    assert len(list(tmp_path.glob("m.json.history.corrupt-*"))) == 1
    at = datetime(2026, 1, 1, tzinfo=UTC)
    within(lambda: store.append("m", _verdict(at)))
    assert HistoryStore(tmp_path).entries("m")[0]["state"] == "ok"
    (tmp_path / "m.json.history").unlink()
    os.mkfifo(tmp_path / "m.json.history")  # after the read: the next append meets it
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="monitor"):
        held = within(lambda: store.append("m", _verdict(at + timedelta(hours=1))))
    assert isinstance(held, tuple)
    assert len(held) == 2  # kept in memory
    assert any("history not saved" in r.getMessage() for r in caplog.records)


def test_report_package_needs_no_plotting_library() -> None:
    import subprocess
    import sys

    code = (
        "import sys, monitor.report\n"
        "print(','.join(m for m in ('matplotlib', 'PIL') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


# --------------------------------------------------------------------------- daemon pages


@pytest.fixture(scope="module")
def served(world: World, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A runner that ran six hourly slots up to AT, and an HTTP server on its board."""
    from monitor.config import ServerConfig, load_config
    from monitor.jobs import Runner, StateStore
    from monitor.server import HttpServer

    state_dir = tmp_path_factory.mktemp("state")
    config = load_config(world.config_path)
    report = ReportConfig(runbook_url="https://rb.example/runbook.md")
    config = replace(config, server=replace(config.server, state_dir=state_dir), report=report)
    history = HistoryStore(state_dir)
    runner = Runner(config, store=StateStore(state_dir), detail=True, history=history)
    for k in range(5, -1, -1):
        runner.run("demo", AT - timedelta(hours=k))
    server = HttpServer(ServerConfig(port=0), runner.board, lambda: True, report=report)
    server.start()
    yield server, state_dir
    server.stop()


def _http(server: Any, path: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_daemon_page_equals_status_json(served: Any) -> None:
    server, state_dir = served
    code, status = _http(server, "/status")
    assert code == 200
    doc = json.loads(status)["monitors"][0]["verdict"]
    code, page = _http(server, "/monitors/demo")
    assert code == 200
    cells = parse(page)
    assert len(cells.values) >= 35
    for key, value in cells.values.items():
        assert value == _json_value(doc, key), key
    assert cells.classes["bar-ref"] == doc["input"]["psi_bins"]
    # the carried look: the runner read the look's pairs again, so the strip is drawn
    assert cells.classes["pair circle"] == doc["outcome"]["n_pairs"]
    # six checks in the history, on disk too
    saved = HistoryStore(state_dir, readonly=True).entries("demo")  # read back from its file
    assert [e["at"] for e in saved][-1] == doc["at"]
    assert len(saved) == 6
    blocks = [e for e in saved if e.get("evidence") and e.get("z") is not None]
    assert cells.classes.get("block circle", 0) == len(blocks)
    assert blocks  # the timeline has evidence blocks to draw
    # rendered once per run record, then served from memory
    snap = server.board.snapshot()[0]
    assert server.page(snap) is server.page(snap)
    assert "CUSUM S (blue" in page  # the timeline drawn from the history
    assert '<a href="/">all monitors</a>' in page  # back to the landing page


def test_landing_page_lists_every_monitor(served: Any) -> None:
    server, _ = served
    code, page = _http(server, "/")
    assert code == 200
    _, status = _http(server, "/status")
    mon = json.loads(status)["monitors"][0]
    assert '<a href="/monitors/demo">demo</a>' in page
    assert f'<span class="state state-{mon["state"]}">{mon["state"]}</span>' in page
    assert 'href="https://rb.example/runbook.md#retrievalmodeldecay"' in page
    assert "scores: " in page
    assert "outcomes: " in page
    first_reason = mon["verdict"]["reasons"][0]
    assert esc(first_reason) in page


@pytest.mark.parametrize("path", ["/monitors/nope", "/monitors/%3Cscript%3E", "/monitors/"])
def test_unknown_monitor_page_is_404(served: Any, path: str) -> None:
    server, _ = served
    code, body = _http(server, path)
    assert code == 404
    assert "<script>" not in body


def test_bench_report_runs_and_both_sides_agree(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.bench_modules import load_bench

    bench = load_bench("bench_report")
    code = bench.main(["--scores", "20000", "--pairs", "300", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "same verdict from both (state, PSI, KS D, mean difference exactly): True" in out
    assert re.search(r"report / check: fastest runs \d+\.\d\d wall", out)
    assert code == 0  # the page agrees with the check; a timing miss alone does not fail


def test_backtest_report_writes_a_page_per_state_change_and_the_last(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pages"
    start = AT - timedelta(days=3)
    code = main(
        [
            "backtest",
            "--config",
            str(world.config_path),
            "--from",
            start.isoformat(),
            "--to",
            AT.isoformat(),
            "--json",
            "--report",
            str(out),
        ]
    )
    assert code == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    changes = doc["changes"]  # the first entry is the first check (from no state)
    last_at = AT.strftime("%Y%m%dT%H%MZ")
    assert doc["checks"][-1]["at"].startswith(AT.strftime("%Y-%m-%dT%H:%M"))
    last_is_change = changes[-1]["at"] == doc["checks"][-1]["at"]
    pages = sorted(p.name for p in out.iterdir())
    assert len(changes) >= 2
    # every change has its page, the first check's too (a replay that starts mid-incident
    # once had no page for its first alarm), and the last slot
    assert len(pages) == len(changes) + (0 if last_is_change else 1)
    first_at = datetime.fromisoformat(changes[0]["at"].replace("Z", "+00:00"))
    assert f"demo-{first_at:%Y%m%dT%H%MZ}.html" in pages
    assert f"{len(pages)} page(s) written to {out}" in captured.err
    assert f"demo-{last_at}.html" in pages
    last = parse((out / f"demo-{last_at}.html").read_text())
    assert last.values["state"] == doc["checks"][-1]["state"]
    assert last.classes["bar-ref"] == last.classes["bar-cur"] > 0
    # the replayed history draws the timeline: one mark per change of state in the range
    assert last.classes["state-change"] == len(changes) - 1
    # the first page's command reproduces it (it once said to backtest from the slot to
    # itself, which is refused), and its footer says when it was made, not its slot's time
    first_page = (out / f"demo-{first_at:%Y%m%dT%H%MZ}.html").read_text()
    found = re.search(r"Reproduce this page: <code>(.*?)</code>", first_page)
    assert found is not None
    command = html.unescape(found[1])
    assert command.startswith("monitor report ")
    again = tmp_path / "again.html"
    assert main([*shlex.split(command)[1:], "--out", str(again)]) == 0
    assert parse(again.read_text()).values == parse(first_page).values
    assert f"Generated {first_at:%Y-%m-%d %H:%M} UTC" not in first_page
    # a later page's is the backtest to its slot: a report replayed from the start would read
    # the daemon's state (its skipped spans, its origin), which the backtest never does
    later = (out / f"demo-{last_at}.html").read_text()
    found = re.search(r"Reproduce this page: <code>(.*?)</code>", later)
    assert found is not None
    assert html.unescape(found[1]).startswith(f"monitor backtest --config {world.config_path} ")


def test_backtest_report_into_a_file_keeps_the_timeline(
    world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--report DIR under a plain file: each page is named on stderr as not written, the
    timeline is still printed, exit 3 (once a traceback, 'unexpected error', and no output)."""
    blocker = tmp_path / "afile"
    blocker.write_text("")
    argv = ["backtest", "--config", str(world.config_path), "--from"]
    argv += [(AT - timedelta(hours=6)).isoformat(), "--to", AT.isoformat(), "--json"]
    code = main([*argv, "--report", str(blocker / "sub")])
    captured = capsys.readouterr()
    assert code == 3
    assert json.loads(captured.out)["checks"]
    assert "cannot write the page: Not a directory" in captured.err
    assert "Traceback" not in captured.err


def test_every_state_links_a_runbook_section_that_exists() -> None:
    from monitor.report import runbook_anchor
    from monitor.verdict import STATES

    runbook = Path(__file__).resolve().parent.parent / "docs" / "runbook.md"
    anchors = {
        line.lstrip("#").strip().lower().replace(" ", "-")
        for line in runbook.read_text().splitlines()
        if line.startswith("## ")
    }
    for state in STATES:
        assert runbook_anchor(state) in anchors, state


def test_carried_look_pairs_are_read_again_once(world: World, tmp_path: Path) -> None:
    """Checks that make no new look draw the last look's pairs; they are read once, not at
    every check."""
    from monitor.config import load_config
    from monitor.jobs import ParquetReader, Runner, StateStore
    from monitor.sources import OutcomeSpec, OutcomeWindow, Window

    class Counting(ParquetReader):
        def __init__(self) -> None:
            self.windows: list[Window] = []

        def outcomes(self, spec: OutcomeSpec, window: Window) -> OutcomeWindow:
            self.windows.append(window)
            return super().outcomes(spec, window)

    config = load_config(world.config_path)
    first = Runner(config, store=StateStore(tmp_path), reader=Counting(), detail=True)
    assert first.run("demo", AT - timedelta(hours=3)).verdict.outcome.new_look  # type: ignore[union-attr]
    # a restart: the state is on disk, the look's pairs are not in memory
    reader = Counting()
    runner = Runner(config, store=StateStore(tmp_path), reader=reader, detail=True)
    reads = []
    for k in range(1, 4):
        record = runner.run("demo", AT - timedelta(hours=3 - k))
        assert record.detail is not None
        outcome = record.verdict.outcome
        assert outcome is not None
        assert not outcome.new_look
        assert record.detail.outcomes[""].n == outcome.n_pairs == 300
        reads.append(len(reader.windows))
    # each check reads the reference outcomes; the first after the restart also re-reads the
    # look's two windows, the later ones draw the kept pairs
    assert [b - a for a, b in zip([0, *reads], reads, strict=False)] == [3, 1, 1]


def test_segmented_page_lists_every_segment_by_evidence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = replace(SCENARIOS["segment_drift"], scores_per_hour=600.0)
    seg_world = write_world(
        tmp_path / "seg", scenario, start=START, end=START + timedelta(days=18), seed=5
    )
    at = ["--at", AT.isoformat(), "--replay-from", REPLAY]
    main(["check", "--config", str(seg_world.config_path), "--json", *at])
    doc = json.loads(capsys.readouterr().out)["monitors"][0]
    out = tmp_path / "seg.html"
    main(["report", "--config", str(seg_world.config_path), "--out", str(out), *at])
    capsys.readouterr()
    page = out.read_text()
    cells = parse(page)
    for key, value in cells.values.items():
        assert value == _json_value(doc, key), key
    names = [s["segment"] for s in doc["segments"]]
    assert sorted(names) == ["de", "en", "fr"]
    order = re.findall(r"segments\[(\w+)\]\.input\.psi", page)
    assert sorted(order) == sorted(names)
    assert order[0] == "fr"  # the drifting segment has the strongest evidence
    assert "Segment <strong>fr</strong>" in page  # and it is the one drawn


def test_state_store_sweeps_a_history_temp_file_a_kill_left(tmp_path: Path) -> None:
    from monitor.jobs import StateStore

    (tmp_path / ".m.abc123.tmp").write_text("{half a history")
    HistoryStore(tmp_path).append("m", _verdict(datetime(2026, 1, 1, tzinfo=UTC)))
    assert StateStore(tmp_path).sweep() == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json.history"]


@settings(max_examples=300, deadline=None)
@given(
    counts=st.lists(st.integers(0, 3), min_size=1, max_size=40).map(
        lambda c: c + [0] * (len(c) % 2 == 0)  # cells: gap, point, gap, ..., gap (odd count)
    ),
    cuts=st.lists(st.integers(0, 19), max_size=6),
)
def test_page_bins_and_ranges_read_off_cumulative_counts(
    counts: list[int], cuts: list[int]
) -> None:
    """The page's bins and each window's range, read off the cumulative cell counts, are
    ``cells_to_bins``'s bins and the extreme held cells' points (None when empty or when an
    extreme value lies in an open gap)."""
    from monitor.stats import cells_to_bins
    from monitor.verdict.detail import _bins_from_cumulative, _summary_range

    c = np.asarray(counts, dtype=np.int64)
    points = (c.size - 1) // 2
    pts = np.arange(points, dtype=np.float64) * 0.5
    inner = sorted({k for k in cuts if k < points})
    ends = np.array([2 * k + 2 for k in inner] + [c.size], dtype=np.intp)
    cum = np.cumsum(c)
    assert np.array_equal(_bins_from_cumulative(cum, ends), cells_to_bins(c, ends))
    held = np.flatnonzero(c)
    if held.size == 0 or held[0] % 2 == 0 or held[-1] % 2 == 0:
        assert _summary_range(cum, pts) is None
    else:
        assert _summary_range(cum, pts) == (pts[held[0] // 2], pts[held[-1] // 2])


def test_a_check_with_its_page_sorts_the_current_window_once(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page's ECDFs and the verdict's KS share one sort of the current window: a check
    drawn with its page decides exactly what the plain check decides, and its page's counts
    are those of the window sorted afresh."""
    from monitor.config import load_config
    from monitor.jobs import Runner, StateStore

    config = load_config(world.config_path)
    plain = Runner(config, store=StateStore(tmp_path / "a")).run("demo", AT)
    sizes: list[int] = []
    real_sort = np.sort

    def counting(a: Any, *args: Any, **kwargs: Any) -> Any:
        sizes.append(int(np.size(a)))
        return real_sort(a, *args, **kwargs)

    monkeypatch.setattr(np, "sort", counting)
    drawn = Runner(config, store=StateStore(tmp_path / "b"), detail=True).run("demo", AT)
    monkeypatch.undo()
    assert drawn.verdict.to_dict() == plain.verdict.to_dict()
    assert drawn.detail is not None
    report = drawn.verdict.inputs[""]
    assert report.n_current > 1000
    assert sizes.count(report.n_current) == 1  # the current window: once, not twice
    d = drawn.detail.inputs[""]
    assert int(d.current_counts.sum()) == report.n_current
    assert d.current_range is not None


def test_largest_losses_and_gains_are_each_of_their_sign() -> None:
    """Sorted by difference, the first rows are the losses and the last the gains, but only
    of their sign: 9 pairs all worse once showed the same 9 under "Largest gains", and 300
    ties under "Largest losses"."""
    from monitor.report.page import largest_changes

    def pairs(current: list[float]) -> Pairs:
        n = len(current)
        ids = np.array([f"q{i}" for i in range(n)])
        return Pairs(np.zeros(n), np.array(current), query_ids=ids)

    worse = outcome_detail(pairs([-1.0 - i for i in range(9)]))
    assert largest_changes(worse) == (list(range(9)), [])
    ties = outcome_detail(pairs([0.0, 0.0, 0.0]))
    assert largest_changes(ties) == ([], [])
    mixed = outcome_detail(pairs([-0.2, 0.0, 0.1, 0.3]))
    losses, gains = largest_changes(mixed, most=3)
    assert [mixed.difference[i] for i in losses] == [-0.2]
    assert [mixed.difference[i] for i in gains] == [0.3, 0.1]
    # float noise is a tie, as the verdict counts it (0.1 * 3 - 0.3: 5.6e-17 once listed
    # under "Largest gains" beside "wins 0")
    noise = outcome_detail(pairs([0.1 * 3 - 0.3, -(0.1 * 3 - 0.3), 0.0]))
    assert largest_changes(noise) == ([], [])


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7])
def test_the_strip_chart_counts_pairs_in_whole_numbers(n: int) -> None:
    """With 3 pairs the axis once read 0, 0, 1, 2, 2 (ticks at 0.5 and 1.5 rounded)."""
    from monitor.report.charts import strip_chart

    ids = np.array([f"q{i}" for i in range(n)])
    d = outcome_detail(Pairs(np.zeros(n), np.linspace(-1, 1, n), query_ids=ids))
    svg = strip_chart(d, "", mean=0.0, ci=(-0.1, 0.1), margin=0.01)
    labels = re.findall(r'<text[^>]*class="tick" text-anchor="middle">([^<]*)</text>', svg)
    assert labels, svg[:400]
    assert labels == sorted(set(labels), key=int)  # no label twice, in order
    assert all(0 <= int(t) <= max(n - 1, 1) for t in labels)


def test_the_landing_page_says_pending_before_a_monitors_first_check() -> None:
    """Before the first check of a monitor finishes, its state is none yet: the landing page
    once showed 'None' (and a state-None class)."""
    from monitor.jobs import Board
    from monitor.report import render_landing
    from monitor.server import _landing_row

    docs = [{"name": "fresh", "scores": {"path": "s"}, "outcomes": {"path": "o"}}]
    (m,) = parse_config({"monitors": docs}, base=Path("/tmp")).monitors
    (snap,) = Board([m], {}).snapshot()
    row = _landing_row(snap)
    assert row.state == "pending"
    page = render_landing([row], ReportConfig())
    assert '<span class="state state-pending">pending</span>' in page
    assert "None" not in page
    # nor that its feeds hold nothing (after a restart, beside the alarm its state file kept)
    assert "not checked since start-up" in page
    assert "newest scores: none" not in page


def test_a_replayed_page_dates_its_state_from_its_history() -> None:
    """Without the daemon's record (a replay, backtest --report), the header once said 'no
    earlier record of this state' above a history of checks in that state. The state began
    at the first check of the run of checks in it that ends with this one."""
    docs = [{"name": "m", "scores": {"path": "s"}, "outcomes": {"path": "o"}}]
    (m,) = parse_config({"monitors": docs}, base=Path("/tmp")).monitors
    at = AT
    states = ["error", "ok", "ok", "ok"]  # oldest first
    history = [
        {"at": (at - timedelta(hours=len(states) - i)).isoformat(), "state": s}
        for i, s in enumerate(states)
    ]
    page = render_monitor_page(m, _verdict(at), None, history, PageContext(ReportConfig()))
    began = at - timedelta(hours=3)
    assert f"since {began:%Y-%m-%d %H:%M} UTC (3.0 h before this check)" in page
    assert "no earlier record" not in page
    first = render_monitor_page(m, _verdict(at), None, [], PageContext(ReportConfig()))
    assert "no earlier record of this state" in first


def _segmented() -> Any:
    docs = [
        {
            "name": "m",
            "scores": {"path": "s", "segment_column": "locale"},
            "outcomes": {"path": "o", "segment_column": "locale"},
        }
    ]
    (m,) = parse_config({"monitors": docs}, base=Path("/tmp")).monitors
    return m


def _hourly(states: list[str], end: datetime) -> list[dict[str, Any]]:
    return [
        {"at": (end - timedelta(hours=len(states) - i)).isoformat(), "state": s, "cusum": 0.0}
        for i, s in enumerate(states)
    ]


def test_a_failed_checks_page_says_it_failed_and_keeps_its_timeline() -> None:
    """An error verdict has no numbers: its page once said "No score data", "No evaluation
    run looked at yet" and "This monitor has no segments" (none of them so for a segmented
    monitor that had looked at runs) and dropped the history chart on-call needed."""
    failed = Verdict(monitor="m", at=AT, state="error", reasons=("x.parquet: not parquet",))
    page = render_monitor_page(
        _segmented(), failed, None, _hourly(["ok"] * 5, AT), PageContext(ReportConfig())
    )
    assert page.count("This check failed") == 3
    for wrong in ("No score data", "No evaluation run looked at yet", "has no segments"):
        assert wrong not in page
    assert "Evidence over time" in page
    assert 'data-chart="cusum"' in page.split("Evidence over time")[1]


def test_the_segments_table_names_every_raised_flag_and_an_undecidable_look_claims_no_power() -> (
    None
):
    from monitor.verdict.reports import InputReport, OutcomeReport

    both = InputReport(n_reference=100, n_current=10, decidable=True, drift=True)
    small = OutcomeReport(
        n_pairs=10,
        only_reference=0,
        only_current=0,
        coverage=1.0,
        decidable=False,
        mean_difference=-0.036,
        mde=0.03,
        margin=0.005,
    )
    decayed = replace(small, decidable=True, decay=True, n_pairs=300, mde=0.01)
    v = Verdict(
        monitor="m",
        at=AT,
        state="model_decay",
        reasons=(),
        inputs={"de": both, "en": both},
        outcomes={"de": small, "en": decayed},
    )
    page = render_monitor_page(_segmented(), v, None, [], PageContext(ReportConfig()))
    segments = page.split('id="segments"')[1]
    assert "<td>drift, decay</td>" in segments  # en: the decay once hidden by the drift
    assert "<td>drift</td>" in segments
    alone = render_monitor_page(
        _segmented(), replace(v, outcomes={"de": small}), None, [], PageContext(ReportConfig())
    )
    assert "could only reliably detect" not in alone  # a look that can raise nothing
    assert "This look cannot raise a decay" in alone


def test_a_number_beside_its_threshold_is_printed_apart_from_it() -> None:
    """S just above h is what a CUSUM alarm looks like: 15.906 against 15.890 once read
    "15.9, alarm above 15.9" (and an adjusted p-value of 0.05004 "0.0500" beside alpha 0.05)."""
    from monitor.verdict.reports import InputReport, OutcomeReport

    inp = InputReport(
        n_reference=100,
        n_current=10,
        decidable=True,
        drift=True,
        cusum=15.906,
        cusum_threshold=15.890,
        z=4.3401,
        z_threshold=4.3399,
    )
    out = OutcomeReport(
        n_pairs=300,
        only_reference=0,
        only_current=0,
        coverage=1.0,
        decidable=True,
        pvalue=0.02,
        pvalue_adjusted=0.05004,
        alpha=0.05,
    )
    v = Verdict(monitor="m", at=AT, state="data_drift", reasons=(), inputs={"": inp})
    v = replace(v, outcomes={"": out})
    cells = parse(render_monitor_page(_segmented(), v, None, [], PageContext(ReportConfig())))
    for a, b in (
        ("input.cusum", "input.cusum_threshold"),
        ("input.z", "input.z_threshold"),
        ("outcome.pvalue_adjusted", "outcome.alpha"),
    ):
        assert cells.values[a] != cells.values[b]
        assert float(cells.text[a]) != float(cells.text[b]), (cells.text[a], cells.text[b])
    assert cells.text["input.cusum"] == "15.91"  # no more digits than tell them apart


def test_a_replayed_history_in_one_state_throughout_dates_it_at_least_from_its_start() -> None:
    """The history of a replay starts where the replay did: a state it holds throughout may be
    older (the page once dated it from the replay's start, moving with --replay-from)."""
    m = _segmented()
    page = render_monitor_page(
        m, _verdict(AT), None, _hourly(["ok"] * 4, AT), PageContext(ReportConfig())
    )
    began = AT - timedelta(hours=4)
    assert f"since at least {began:%Y-%m-%d %H:%M} UTC" in page
    changes = ["ok", "data_drift"] * 30 + ["ok"]
    many = render_monitor_page(
        m, _verdict(AT), None, _hourly(changes, AT), PageContext(ReportConfig())
    )
    assert "State changes (the last 20 of 60)" in many


def test_the_cusum_chart_rings_each_alarm_where_s_was_reset() -> None:
    """S is recorded after its check, 0 after an alarm's reset: the chart once showed S under
    h throughout a raised drift. Each alarm is ringed (a CUSUM one on h), and the immediate
    rule's z threshold is drawn."""
    from monitor.report.charts import cusum_chart

    base = {"cusum_threshold": 12.8, "z_threshold": 4.34, "evidence": True}
    history = [
        {**base, "at": f"2026-10-17T0{k}:00:00Z", "state": st, "cusum": c, "z": z, "alarm": a}
        for k, (st, c, z, a) in enumerate(
            [
                ("ok", 9.0, 1.0, None),
                ("ok", 10.5, 2.0, None),
                ("data_drift", 0.0, 3.6, "cusum"),
                ("data_drift", 0.0, 6.5, "immediate"),
            ]
        )
    ]
    svg = cusum_chart(history)
    rings = re.search(r'<g class="alarm">(.*?)</g>', svg)
    assert rings is not None
    ys = [float(y) for y in re.findall(r'cy="([-0-9.]+)"', rings.group(1))]
    assert len(ys) == 2
    h_line = re.search(r'<polyline points="[-0-9.]+,([-0-9.]+) [^"]*" class="threshold"', svg)
    assert h_line is not None
    assert ys[0] == pytest.approx(float(h_line.group(1)), abs=0.01)  # the CUSUM alarm, on h
    assert ys[1] > ys[0]  # the immediate one at its z of 6.5, below h (12.8) on the chart
    assert 'class="z-threshold"' in svg
    assert "2 alarm(s) ringed" in svg


def test_an_alarm_on_the_anchor_track_is_drawn_on_the_anchor_track() -> None:
    """A gradual drift raises on the anchor track: the chart drew the reference track's S
    alone (5.8 against h 12.7 at the alarm), rang an immediate alarm round the reference
    block's z, and the page showed no anchor number. The anchor's S is drawn, the alarm is
    ringed on the z of the track that fired, the history keeps that track and its z, and the
    page and the segments table show the anchor's block, z and S."""
    from monitor.report.charts import cusum_chart
    from monitor.verdict import InputReport

    base = {"cusum_threshold": 12.8, "z_threshold": 4.34, "evidence": True}
    rows = [
        ("ok", 3.0, 9.0, 1.0, 2.0, None, None),
        ("ok", 4.0, 11.5, 1.2, 2.2, None, None),
        ("data_drift", 4.5, 13.1, 0.9, 5.2, "immediate", "anchor"),
    ]
    history = [
        {**base, "at": f"2026-10-17T0{k}:00:00Z", "state": state, "cusum": c}
        | {"anchor_cusum": ac, "z": z, "anchor_z": az, "alarm": a, "alarm_track": track}
        for k, (state, c, ac, z, az, a, track) in enumerate(rows)
    ]
    svg = cusum_chart(history)
    assert svg.count('class="line-anchor"') == 1
    assert "anchor track" in svg
    rings = re.search(r'<g class="alarm">(.*?)</g>', svg)
    assert rings is not None
    (ring,) = [float(y) for y in re.findall(r'cy="([-0-9.]+)"', rings.group(1))]
    dots = [float(y) for y in re.findall(r'<circle cx="[-0-9.]+" cy="([-0-9.]+)"', svg)]
    # ringed at the anchor's z of 5.2, above the threshold's 4.34: higher up than every
    # reference block's dot (z at most 1.2)
    assert ring < min(dots[:3]), (ring, dots)

    inp = InputReport(
        n_reference=100,
        n_current=100,
        decidable=True,
        drift=True,
        cusum=5.8,
        anchor_cusum=13.5,
        anchor_z=2.0,
        anchor_psi=0.04,
        anchor_pvalue=0.001,
        anchor_pvalue_adjusted=0.002,
        cusum_threshold=12.7,
        z_threshold=4.3,
        alarm="cusum",
        alarm_track="anchor",
    )
    verdict = Verdict(
        monitor="m",
        at=AT,
        state="data_drift",
        reasons=(),
        inputs={"en": inp, "fr": replace(inp, drift=False, anchor_cusum=1.0, alarm=None)},
    )
    entry = history_entry(verdict)
    assert (entry["alarm_track"], entry["anchor_z"], entry["anchor_cusum"]) == ("anchor", 2.0, 13.5)
    docs = [
        {
            "name": "m",
            "scores": {"path": "s", "segment_column": "lang"},
            "outcomes": {"path": "o", "segment_column": "lang"},
        }
    ]
    (m,) = parse_config({"monitors": docs}, base=Path("/tmp")).monitors
    page = render_monitor_page(m, verdict, None, [entry], PageContext(ReportConfig()))
    for key in ("input.anchor_cusum", "input.anchor_z", "input.anchor_pvalue_adjusted"):
        assert f'data-key="{key}"' in page, key
    assert 'data-key="segments[fr].input.anchor_cusum"' in page
    assert ">anchor S</th>" in page


@pytest.mark.parametrize(
    ("every", "outage", "thinned"),
    [
        (timedelta(minutes=5), False, True),
        (timedelta(minutes=5), True, True),  # the newest 48 h hold one check
        (timedelta(hours=1), False, False),
    ],
)
def test_a_thinned_history_is_not_called_the_last_n_checks(
    every: timedelta, outage: bool, thinned: bool
) -> None:
    """Four days of 5-minute checks: the history keeps each check of the last 48 h and the
    last of each hour before; the chart and its caption said "the last 626 checks" of 1,152.
    They say the checks are kept so, also after an outage of 3 days (the newest 48 h then hold
    one check: told from the entries' gaps, it read as unthinned); an hourly schedule's
    history is every check."""
    history = MemoryHistory()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    times = [t0 + k * every for k in range(int(timedelta(days=4) / every))]
    if outage:
        times = [*times[: len(times) // 2], times[-1] + timedelta(days=3)]
    for t in times:
        history.append("m", _verdict(t))
    entries = history.entries("m")
    assert (len(entries) < len(times)) == thinned
    docs = [
        {
            "name": "m",
            "schedule": f"{int(every.total_seconds() // 60)}m",
            "scores": {"path": "s"},
            "outcomes": {"path": "o"},
        }
    ]
    (m,) = parse_config({"monitors": docs}, base=Path("/tmp")).monitors
    page = render_monitor_page(m, _verdict(times[-1]), None, entries, PageContext(ReportConfig()))
    kept = "every check of the last 48 h, the last of each hour before"
    assert (f"({len(entries)} checks kept: {kept}" in page) == thinned
    assert (f"last {len(entries)} checks kept ({kept})" in page) == thinned
    assert (f"last {len(entries)} checks:" in page) == (not thinned)


def test_a_page_of_an_earlier_run_of_the_same_state_does_not_take_the_daemons_date() -> None:
    """monitor report --at T took the daemon's state_since whenever the states matched: a page
    of an earlier data_drift said it began after the check it heads."""
    from monitor.cli import _recorded_since

    began = AT - timedelta(hours=5)
    daemon = MonitorState(state="data_drift", state_since=began, last_at=AT)
    assert _recorded_since(daemon, _verdict(AT, "data_drift")) == began
    assert _recorded_since(daemon, _verdict(began, "data_drift")) == began
    assert _recorded_since(daemon, _verdict(AT - timedelta(days=2), "data_drift")) is None
    assert _recorded_since(daemon, _verdict(AT, "ok")) is None
    assert _recorded_since(MonitorState(), _verdict(AT, "ok")) is None


def test_the_cusum_line_breaks_where_the_deciding_segment_changes() -> None:
    """The history keeps the deciding segment's S at each check. Drawn as one line, a switch
    from a segment at S 7.7 to another at 0 read as a reset of the first. The line now breaks
    at each change of the deciding segment, and the chart's text says so."""
    from monitor.report.charts import cusum_chart

    segments = ["en", "en", "fr", "fr", "fr", "en"]
    history = [
        {
            "at": (AT + timedelta(hours=k)).isoformat(),
            "state": "ok",
            "input_segment": seg,
            "cusum": float(k),
            "cusum_threshold": 12.8,
        }
        for k, seg in enumerate(segments)
    ]
    svg = cusum_chart(history)
    assert svg.count('class="line-ref"') == 3  # en, fr, en
    assert svg.count('class="threshold"') == 1
    assert "breaks at each of 2 change(s) of that segment" in svg
    one = cusum_chart([{**e, "input_segment": "en"} for e in history])
    assert one.count('class="line-ref"') == 1


@settings(max_examples=300)
@given(
    lo=st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False),
    width=st.floats(0.0, 1e12, allow_nan=False, allow_infinity=False),
)
@example(lo=0.3, width=0.0)  # made hi = 0.1 + 0.2 below: a range a float step wide
@example(lo=0.0, width=5e-324)  # a subnormal span: log10 of its fifth (0) once raised
def test_nice_ticks_are_few_round_and_inside_the_range(lo: float, width: float) -> None:
    """Ticks rise strictly, lie in the range and are at most count + 1; a range a few float
    steps wide (0.3 to 0.1 + 0.2: one score summed in two orders) once looped forever, and
    took the page's request thread with it."""
    from monitor.report.svg import nice_ticks

    hi = 0.1 + 0.2 if (lo, width) == (0.3, 0.0) else lo + width
    ticks = nice_ticks(lo, hi)
    assert 1 <= len(ticks) <= 6
    assert all(a < b for a, b in itertools.pairwise(ticks))
    slack = 1e-9 * max(abs(lo), abs(hi), 1e-300)
    assert all(lo - slack <= t <= hi + slack for t in ticks), ticks


@settings(max_examples=300)
@given(
    a=st.floats(allow_nan=False, allow_infinity=False),
    b=st.floats(allow_nan=False, allow_infinity=False),
)
@example(a=-sys.float_info.max, b=sys.float_info.max)  # sentinel scores at both ends
def test_nice_ticks_over_the_whole_float_range(a: float, b: float) -> None:
    """A range wider than the largest float (hi - lo = inf) raised OverflowError in
    log10, and with it every page of the monitor (a 500) and `monitor report`."""
    from monitor.report.svg import nice_ticks

    lo, hi = min(a, b), max(a, b)
    ticks = nice_ticks(lo, hi)
    assert 1 <= len(ticks) <= 6
    assert all(math.isfinite(t) for t in ticks)
    assert all(x < y for x, y in itertools.pairwise(ticks))


def test_page_file_names_tell_apart_the_slots_of_one_minute() -> None:
    """A slot's page is named to the minute, to the second inside a minute: a "30s"
    schedule's two slots a minute once wrote one file, the later over the earlier."""
    from monitor.report import page_file_name

    at = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
    names = [page_file_name("web", at + timedelta(seconds=s)) for s in (0, 30, 60, 90)]
    assert names == [
        "web-20260302T0000Z.html",
        "web-20260302T000030Z.html",
        "web-20260302T0001Z.html",
        "web-20260302T000130Z.html",
    ]


_SHOWN = "postgresql://monitor:&lt;redacted&gt;@db.internal/catalog"


# SQLAlchemy (pyiceberg's SQL catalog) takes a password up to the last '@': one with a '/'
# was once shown whole, one with an '@' in part
@pytest.mark.parametrize(
    ("secret", "uri", "shown"),
    [
        (s, f"postgresql://monitor:{s}@db.internal/catalog", _SHOWN)
        for s in ("pg-SECRET-1", "pg/SECRET/1", "p@g-SECRET@1", "pg:SECRET/@1")
    ]
    + [
        # Azure's user@server login, and a password as a query parameter
        (
            "pg-SECRET-1",
            "postgresql://monitor@srv:pg-SECRET-1@srv.postgres.example/catalog",
            "postgresql://monitor@srv:&lt;redacted&gt;@srv.postgres.example/catalog",
        ),
        (
            "pg-SECRET-1",
            "postgresql://db.internal/catalog?user=monitor&amp;Password=pg-SECRET-1",
            "postgresql://db.internal/catalog?user=monitor&amp;Password=&lt;redacted&gt;",
        ),
    ],
)
def test_the_settings_a_page_shows_hold_no_catalog_secret(
    secret: str, uri: str, shown: str
) -> None:
    """The page's 'Monitor settings' (served without a login by default) once printed every
    Iceberg catalog property, tokens and keys included, and a database URI's password."""
    docs = [
        {
            "name": "m",
            "scores": {"path": "s"},
            "outcomes": {
                "format": "iceberg",
                "table": "db.outcomes",
                "catalog": {
                    "name": "prod",
                    "type": "sql",
                    "uri": uri.replace("&amp;", "&"),
                    "token": "bearer-SECRET-2",
                    "s3.secret-access-key": "s3-SECRET-3",
                },
            },
        }
    ]
    (m,) = parse_config({"monitors": docs}, base=Path("/tmp")).monitors
    page = render_monitor_page(m, _verdict(AT), None, [], PageContext(ReportConfig()))
    assert "SECRET" not in page
    assert shown in page
    assert "db.outcomes" in page  # the rest of the settings is still shown
    assert page.count("&lt;redacted&gt;") == 3


def test_the_largest_history_allowed_is_read_back_not_set_aside() -> None:
    """history_max_entries allowed 1,000,000: a 1 s schedule's file grew to 77.6 MB, which the
    reader (64 MiB at most) set aside as corrupt at the next start, losing the history. The
    largest allowed, with every field at its longest and the file at twice its entries'
    lines (its size between compactions), fits the reader's bound."""
    import json

    from monitor.config.parse import parse_config as parse
    from monitor.report import history

    longest = -1.2345678901234567e-100
    entry = {
        "at": "2026-10-01T12:01:30.123456Z",
        "state": "insufficient_data",
        "input_segment": history._segment("界" * 200),
        "evidence": True,
        "drift": False,
        **dict.fromkeys(history._INPUT_KEYS, longest),
        "alarm": "immediate",
        "outcome_segment": history._segment("😀" * 200),
        "new_look": True,
        "decay": False,
        **dict.fromkeys(history._OUTCOME_KEYS, longest),
    }
    line = len(json.dumps(entry, separators=(",", ":"))) + 1
    most = 30_000
    assert 2 * most * line + 1024 <= history._MAX_BYTES
    monitors = [{"name": "a", "scores": {"path": "s"}, "outcomes": {"path": "o"}}]
    for entries, ok in ((most, True), (most + 1, False)):
        doc = {"monitors": monitors, "report": {"history_max_entries": entries}}
        if ok:
            assert parse(doc, base=Path(".")).report.history_max_entries == most
        else:
            with pytest.raises(ConfigError, match=r"history_max_entries: must be an integer"):
                parse(doc, base=Path("."))


def test_a_long_segment_name_is_cut_in_the_history() -> None:
    """Segment values are the data's, of any length; an entry holds at most SEGMENT_CHARS of
    one, so the entries' bytes, and the file's, stay bounded."""
    import json

    from monitor.report import history

    for char in ("x", "界", "😀", "\n"):
        cut = history._segment(char * 1000) or ""
        assert cut.endswith("…")
        assert len(json.dumps(cut)) - 2 <= history.SEGMENT_BYTES  # JSON's bytes, not chars
        assert len(json.dumps(cut)) - 2 > history.SEGMENT_BYTES - 12
    assert history._segment("界" * 21) == "界" * 21  # 126 bytes: kept whole
    assert history._segment("web") == "web"
    assert history._segment(None) is None


def test_p_values_and_slot_times_keep_what_tells_them_apart() -> None:
    """A look one hour after the last has alpha 6.7e-05: p-values cut at "< 0.0001" showed a
    raising look (3.4e-05) and a quiet one (9.4e-05) alike. A 30 s schedule's slots 12:01:00
    and 12:01:30 were both "12:01"."""
    from monitor.report.page import _iso, _p

    assert _p(3.36e-05) != _p(9.41e-05)
    assert _p(0.00157) != _p(0.00164)  # either side of a daily look's alpha, 0.00161
    assert (_p(3.36e-05), _p(9.41e-05), _p(0.04321), _p(0.0)) == (
        "3.36e-05",
        "9.41e-05",
        "0.0432",
        "< 1e-300",
    )
    t = datetime(2026, 10, 1, 12, 1, tzinfo=UTC)
    assert _iso(t) == "2026-10-01 12:01 UTC"
    assert _iso(t + timedelta(seconds=30)) == "2026-10-01 12:01:30 UTC"


def test_the_ecdf_of_one_value_rises_at_that_value() -> None:
    """Both windows all one score v: the display range is widened to v +- 0.5 and the only
    grid point is v; the curves started at F(v) = 1, drawing every score at or below v - 0.5."""
    d, both = _detail(np.full(100, 0.5), np.full(100, 0.5))
    svg = ecdf_chart(d, "", both.ks.statistic)
    lines = re.findall(r'<polyline points="([^"]*)"[^>]*class="line-(?:ref|cur)"', svg)
    lines = lines or re.findall(r'class="line-(?:ref|cur)"[^>]*points="([^"]*)"', svg)
    assert len(lines) == 2, svg[:400]
    for points in lines:
        ys = [float(p.split(",")[1]) for p in points.split()]
        assert ys[0] > ys[-1]  # starts at F = 0 (the bottom) and ends at F = 1 (the top)


def test_an_undecidable_look_says_which_bound_it_missed(tmp_path: Path) -> None:
    """The page's "Undecidable look" line once always blamed the look's alpha: for 10 pairs
    under ``decay.min_pairs`` 20 (2^-10 reaches the alpha), and for a look with no pair at all
    (a replaced golden set), whose strip it also called "not available to draw"."""
    from dataclasses import replace as swap

    from monitor.config import load_config
    from monitor.report.page import _too_few_pairs
    from monitor.simulate import SCENARIOS, write_world
    from monitor.verdict import OutcomeReport

    scenario = swap(SCENARIOS["small_golden_set"], scores_per_hour=400.0)
    small = write_world(
        tmp_path / "small", scenario, start=START, end=AT + timedelta(days=1), seed=11
    )
    out = tmp_path / "small.html"
    assert (
        main(
            [
                "report",
                "--config",
                str(small.config_path),
                "--at",
                AT.isoformat(),
                "--out",
                str(out),
            ]
        )
        == 3  # insufficient_data
    )
    said = re.findall(r"Undecidable look:</strong> ([^<]*)", out.read_text())
    assert len(said) == 1
    assert re.fullmatch(
        r"\d+ pairs, fewer than the 20 a look needs \(decay\.min_pairs\)\.", said[0]
    )
    monitor = load_config(small.config_path).monitors[0]
    none = OutcomeReport(
        n_pairs=0, only_reference=300, only_current=280, coverage=0.0, decidable=False
    )
    assert _too_few_pairs(monitor, none).startswith("no pairs: no query is in both windows")
    alpha = swap(none, n_pairs=25, alpha=0.05 / 721)
    assert _too_few_pairs(monitor, alpha) == (
        "25 pairs: a sign-flip test on them cannot reach this look's alpha 6.93e-05 (it needs "
        "2^-n <= alpha: 14 pairs)"
    )
    # min_pairs under the alpha's bound: the bound a look needs is the larger (it once said
    # "fewer than the 5 a look needs" of 3 pairs that needed 10)
    few = swap(monitor, decay=swap(monitor.decay, min_pairs=5))
    three = swap(none, n_pairs=3, alpha=0.001)
    assert _too_few_pairs(few, three) == (
        "3 pairs: a sign-flip test on them cannot reach this look's alpha 0.001 (it needs "
        "2^-n <= alpha: 10 pairs, and decay.min_pairs 5)"
    )


def test_a_reproduce_command_quotes_a_config_path_with_a_space_or_a_quote(
    world: World, tmp_path: Path
) -> None:
    """The page's command pasted the path as it was: a directory named "it's here" gave a
    command no shell (nor shlex) can split."""
    odd = tmp_path / "it's here"
    odd.symlink_to(world.config_path.parent, target_is_directory=True)
    out = tmp_path / "page.html"
    config = odd / world.config_path.name
    main(["report", "--config", str(config), "--at", AT.isoformat(), "--out", str(out)])
    found = re.search(r"Reproduce this page: <code>(.*?)</code>", out.read_text())
    assert found is not None
    argv = shlex.split(html.unescape(found[1]))
    assert argv[argv.index("--config") + 1] == str(config)


def test_a_bracketed_d_is_labelled_as_a_bracket_on_the_chart() -> None:
    """Through summaries D is only bracketed: the chart's label once read "D = 0.139" while
    the table beside it said D lies between 0.139 and 0.141."""
    rng = np.random.default_rng(2)
    d, both = _detail(rng.normal(0, 1, 2000), rng.normal(0.4, 1, 2000))
    lo = both.ks.statistic
    exact = ecdf_chart(d, "", lo)
    assert f"D = {lo:.3f}" in exact
    bracketed = ecdf_chart(d, "", lo, ks_high=lo + 0.002)
    assert f"D = {lo:.3f}" not in bracketed
    assert f"{lo:.3f} ≤ D ≤ {lo + 0.002:.3f}" in bracketed


def test_a_source_password_is_in_no_reason_page_or_status(
    world: World, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A score source at an S3 URI with a password (``user:secret@``) that cannot be reached:
    the page's settings redacted it, but the failed check's reason (the page's "Why", the
    landing page's first reason, ``/status``, the log) printed it whole."""
    from monitor.config import ServerConfig, load_config
    from monitor.errors import SourceNotFoundError
    from monitor.jobs import Runner, StateStore
    from monitor.server import HttpServer

    uri = "s3://svc:Sup3r-SECRET@bucket/scores?endpoint_override=127.0.0.1:9&scheme=http"
    path = tmp_path / "secret.toml"
    path.write_text(
        world.config_path.read_text()
        .replace('scores.path = "scores"', f'scores.path = "{uri}"')
        .replace('state_dir = "state"', f'state_dir = "{tmp_path / "state"}"')
    )
    config = load_config(path)
    runner = Runner(config, store=StateStore(tmp_path / "state"), detail=True)
    with caplog.at_level(logging.INFO, logger="monitor"):
        verdict = runner.run("demo", AT).verdict
    assert verdict.state == "error"
    assert "svc:<redacted>@bucket" in verdict.reasons[0]
    assert all("SECRET" not in r.getMessage() + str(r.__dict__) for r in caplog.records)
    server = HttpServer(ServerConfig(port=0), runner.board, lambda: True, report=ReportConfig())
    server.start()
    try:
        for route in ("/monitors/demo", "/", "/status"):
            code, body = _http(server, route)
            assert code == 200
            assert "SECRET" not in body, route
    finally:
        server.stop()
    # at the origin, for whatever shows an error's text; a password as a query parameter too
    err = SourceNotFoundError("no such key", path="postgresql://db/x?user=u&password=p-SECRET")
    assert "SECRET" not in str(err)
    assert "password=<redacted>" in str(err)


def test_an_interval_level_is_labelled_as_set(world: World, tmp_path: Path) -> None:
    """``decay.confidence_level = 0.995`` was labelled "100 % interval" on the page and "100%
    CI" in the reasons (0.975: "98 %"): the level is printed as set."""
    from monitor.config import load_config
    from monitor.jobs import Runner, StateStore

    path = world.config_path.parent / "level.toml"  # the world's relative paths hold
    path.write_text(
        world.config_path.read_text()
        .replace('state_dir = "state"', f'state_dir = "{tmp_path / "state"}"')
        .replace('windows.current = "1d"', 'windows.current = "1d"\ndecay.confidence_level = 0.995')
    )
    config = load_config(path)
    assert config.monitors[0].decay.confidence_level == 0.995
    runner = Runner(config, store=StateStore(tmp_path / "state"), detail=True)
    record = runner.run("demo", AT)
    assert record.verdict.outcome is not None
    assert any("99.5% CI" in r for r in record.verdict.reasons), record.verdict.reasons
    page = render_monitor_page(
        config.monitors[0], record.verdict, record.detail, [], PageContext(ReportConfig())
    )
    assert "99.5 % interval" in page
    assert "100 % interval" not in page


@settings(max_examples=300)
@given(digits=st.integers(1, 999_999_999), scale=st.integers(1, 9))
def test_a_level_is_printed_as_its_decimal_spelling(digits: int, scale: int) -> None:
    """``percent`` prints a level as the configuration spelled it: rounded to six significant
    digits, 0.9999999 read "100"."""
    from decimal import Decimal

    from monitor.verdict import percent

    text = f"0.{digits:0{scale}d}" if digits < 10**scale else "0.5"
    want = format((Decimal(text) * 100).normalize(), "f")
    assert percent(float(text)) == want
    assert percent(0.9999999) == "99.99999"


def test_no_token_or_password_in_a_log_line_an_engine_error_or_validate_sources(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Spark Connect token (``sc://host:15002/;token=``) was printed whole in the engine's
    error (check --json, /status, the pages) and its "engine started" log line; a source's
    path with a password in the replay's log line and in ``validate --sources``' summary."""
    from monitor.errors import EngineUnavailableError
    from monitor.logs import JsonFormatter, LogfmtFormatter

    err = EngineUnavailableError("spark", "sc://spark.example:15002/;token=Sp-SECRET", "refused")
    assert "SECRET" not in str(err)
    assert ";token=<redacted>" in str(err)
    record = logging.makeLogRecord(
        {
            "msg": "could not read s3://u:Pw-SECRET@bucket/x",
            "address": "sc://spark.example:15002/;token=Sp-SECRET",
            "path": "https://acct.blob.core.windows.net/c/x?sv=2020&sig=Sig-SECRET",
        }
    )
    for formatter in (JsonFormatter(), LogfmtFormatter()):
        line = formatter.format(record)
        assert "SECRET" not in line, line
        assert "<redacted>" in line
    path = world.config_path.parent / "secret-sources.toml"
    uri = "s3://svc:Src-SECRET@bucket/scores?endpoint_override=127.0.0.1:9&scheme=http"
    path.write_text(
        world.config_path.read_text().replace('scores.path = "scores"', f'scores.path = "{uri}"')
    )
    assert main(["validate", "--config", str(path), "--sources"]) == 3
    captured = capsys.readouterr()
    assert "SECRET" not in captured.out + captured.err
    assert "svc:<redacted>@bucket" in captured.out
