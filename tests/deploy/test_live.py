"""The real daemon (``monitor run``) on generated worlds, scraped by a real Prometheus with the
shipped rules (``for:`` shortened) and routed by a real Alertmanager to an in-test webhook.

Two worlds end now: ``abrupt_decay`` (decay starts two days before the end: ``model_decay`` on the
first run) and ``covariate_shift`` (the score distribution moves; outcomes stay flat:
``data_drift``, never ``model_decay``). Every wait polls with a deadline; all processes stop at
the end.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest

from tests.deploy.contract import (
    ALERTS,
    JOB,
    METRICS,
    PENDING_METRICS,
    RUNBOOK_BASE,
    dashboard_exprs,
    grafana_query,
    load_dashboards,
    load_grafana_rules,
    metric_names,
    substitute,
)
from tests.deploy.stack import Process, Stack, free_port, http_get, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DECAY, DRIFT = "decay-world", "drift-world"


@dataclass
class Live:
    stack: Stack
    daemons: dict[str, Process]
    addresses: dict[str, str]


def _healthy(address: str) -> bool:
    return http_get(f"http://{address}/healthz")[0] == 200


def _start_daemon(
    root: Path, scenario: str, name: str, *, torn_state: bool = False
) -> tuple[Process, str]:
    """A daemon on a simulated world; ``torn_state``: its state file torn (a crash of the host
    mid-write), so that it starts with a reset (``syntax``)."""
    from monitor.simulate import SCENARIOS, write_world

    end = datetime.now(UTC).replace(microsecond=0)
    address = f"127.0.0.1:{free_port()}"
    world = write_world(
        root / name,
        SCENARIOS[scenario],
        start=end - timedelta(days=17),
        end=end,
        seed=11,
        monitor_name=name,
        schedule="1h",
        listen=address,
    )
    if torn_state:
        (world.directory / "state").mkdir(exist_ok=True)
        (world.directory / "state" / f"{name}.json").write_text('{"version": 2, "last_a')
    argv = [sys.executable, "-m", "monitor", "run", "--config", str(world.config_path)]
    proc = Process(name, argv, root / f"{name}.log", cwd=world.directory)
    return proc, address


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("live")
    daemons: dict[str, Process] = {}
    addresses: dict[str, str] = {}
    try:
        for scenario, name in (("abrupt_decay", DECAY), ("covariate_shift", DRIFT)):
            daemons[name], addresses[name] = _start_daemon(
                root, scenario, name, torn_state=name == DRIFT
            )
        for name, proc in daemons.items():
            wait_for(
                partial(_healthy, addresses[name]),
                timeout=60,
                what=f"{name} /healthz",
                log=proc.log,
            )
        with Stack(root / "stack", targets=list(addresses.values()), rules=ALERTS) as stack:
            stack.wait_for_targets_up(2, timeout=30)
            # First check done on both, and three scrapes for range queries.
            for name in daemons:
                stack.wait_for_query(
                    f'retrieval_monitor_last_run_timestamp_seconds{{monitor="{name}"}}', timeout=60
                )
            stack.wait_for_query(f'count_over_time(up{{job="{JOB}"}}[1m]) >= 3', timeout=30)
            yield Live(stack, daemons, addresses)
    finally:
        for proc in daemons.values():
            proc.stop()


def test_targets_up(live: Live) -> None:
    health = live.stack.target_health()
    assert sorted(health.values()) == ["up", "up"]


def test_daemon_exports_every_contract_metric(live: Live) -> None:
    """Between them (a reset's time only where one happened: the drift daemon's)."""
    names: set[str] = set()
    for address in live.addresses.values():
        status, body = http_get(f"http://{address}/metrics")
        assert status == 200
        names |= {
            line.split("{")[0].split(" ")[0]
            for line in body.decode().splitlines()
            if line and not line.startswith("#")
        }
    assert set(METRICS) - PENDING_METRICS <= names, sorted(set(METRICS) - PENDING_METRICS - names)
    arrived = PENDING_METRICS & names
    assert not arrived, f"exported now: remove {sorted(arrived)} from contract.PENDING_METRICS"


def test_states(live: Live) -> None:
    for name, state in ((DECAY, "model_decay"), (DRIFT, "data_drift")):
        got = live.stack.query(f'retrieval_monitor_state{{monitor="{name}"}} == 1')
        assert [s["metric"]["state"] for s in got] == [state], name


@pytest.mark.parametrize("name", sorted(load_dashboards()))
def test_every_dashboard_expression_returns_data(live: Live, name: str) -> None:
    empty = [
        (monitor, where)
        for monitor in (DECAY, DRIFT)
        for where, expr in dashboard_exprs(load_dashboards()[name])
        if not live.stack.query(substitute(expr, monitor=monitor))
    ]
    assert not empty


def test_the_verdict_flags_show_drift_and_decay(live: Live) -> None:
    """The drill-down's flag panel shows both flags of every segment. Its `a or b` once
    dropped every decay flag: `or` matches on all labels but the name, which both share."""
    (expr,) = [
        e
        for where, e in dashboard_exprs(load_dashboards()["drilldown.json"])
        if "Verdict flags" in where
    ]
    for monitor in (DECAY, DRIFT):
        got = live.stack.query(substitute(expr, monitor=monitor))
        flags = sorted((s["metric"].get("segment", ""), s["metric"]["flag"]) for s in got)
        segments = sorted(
            s["metric"].get("segment", "")
            for s in live.stack.query(f'retrieval_monitor_model_decay{{monitor="{monitor}"}}')
        )
        want = sorted((seg, f) for seg in segments for f in ("input drift", "model decay"))
        assert flags == want, monitor
        decayed = [s for s in got if s["metric"]["flag"] == "model decay"]
        assert any(float(s["value"][1]) == 1.0 for s in decayed) == (monitor == DECAY)


@pytest.mark.parametrize("title", sorted(r["title"] for r in load_grafana_rules()))
def test_every_grafana_rule_query_evaluates(live: Live, title: str) -> None:
    """Query A of each Grafana-managed rule runs on the real Prometheus without error, and every
    metric it reads has data, so an empty answer means "not firing", never a wrong name. The
    verdict rules answer for exactly the world that should fire them."""
    (rule,) = [r for r in load_grafana_rules() if r["title"] == title]
    expr = grafana_query(rule)
    result = live.stack.query(expr)  # raises with Prometheus's error text
    absent = [
        name
        for name in sorted(metric_names(expr) - PENDING_METRICS)
        if not live.stack.query(f'{name}{{job="{JOB}"}}')
    ]
    assert not absent
    firing = {"RetrievalModelDecay": {DECAY}, "RetrievalDataDrift": {DRIFT}}
    if title in firing:
        assert {s["metric"]["monitor"] for s in result} == firing[title]


def test_a_state_reset_at_start_up_fires(live: Live) -> None:
    """The drift daemon set its torn state file aside before its first scrape: its reset
    counter was 1 from the start, and only the reset's time shows it to the rule."""
    fired = live.stack.wait_for_alert(
        "RetrievalMonitorStateReset", timeout=30, monitor=DRIFT, reason="syntax"
    )
    assert fired["labels"]["severity"] == "warning"
    assert not live.stack.query(
        f'ALERTS{{alertname="RetrievalMonitorStateReset",monitor="{DECAY}"}}'
    )


def test_decay_fires_and_reaches_the_webhook(live: Live) -> None:
    fired = live.stack.wait_for_alert("RetrievalModelDecay", timeout=30, monitor=DECAY)
    assert fired["labels"]["severity"] == "critical"
    note = live.stack.wait_for_notification("RetrievalModelDecay", timeout=30, monitor=DECAY)
    assert note["status"] == "firing"
    assert note["labels"]["severity"] == "critical"
    assert note["labels"]["job"] == JOB
    assert note["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}#retrievalmodeldecay"
    assert "pairs" in note["annotations"]["description"]
    assert "?" not in note["annotations"]["description"]


def test_drift_world_raises_drift_and_never_decay(live: Live) -> None:
    live.stack.wait_for_alert("RetrievalDataDrift", timeout=30, monitor=DRIFT)
    never = (
        f'count_over_time(ALERTS{{alertname="RetrievalModelDecay",monitor="{DRIFT}"}}[10m])',
        f'count_over_time(ALERTS{{alertname="RetrievalDataDrift",monitor="{DECAY}"}}[10m])',
    )
    for expr in never:
        assert not live.stack.query(expr), expr
    assert not [
        n
        for n in live.stack.webhook.alerts()
        if n["labels"].get("monitor") == DRIFT and n["labels"]["alertname"] == "RetrievalModelDecay"
    ]


def test_daemons_stop_cleanly_on_sigterm(live: Live) -> None:
    """Last in the module: SIGTERM stops each daemon with exit status 0."""
    for proc in live.daemons.values():
        assert proc.alive(), proc.log()
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.popen.wait(timeout=30) == 0, proc.log()
