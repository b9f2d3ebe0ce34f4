"""Static checks of the container, compose, systemd and Kubernetes artefacts."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ci import missing
from tests.deploy import seccomp
from tests.deploy.contract import ALERTS, REPO

DEPLOY = REPO / "deploy"


def _instructions(text: str) -> list[tuple[str, str]]:
    """Dockerfile instructions (continuation lines joined), as ``(KEYWORD, rest)``."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def test_dockerfile() -> None:
    ins = _instructions((DEPLOY / "docker" / "Dockerfile").read_text())
    args = dict(rest.split("=", 1) for kw, rest in ins if kw == "ARG" and "=" in rest)
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", base), base
    users = [rest for kw, rest in ins if kw == "USER"]
    assert users, "no USER"
    assert users[-1].split(":")[0] not in {"root", "0"}
    entry = [rest for kw, rest in ins if kw == "ENTRYPOINT"]
    assert len(entry) == 1
    assert isinstance(json.loads(entry[0]), list), "ENTRYPOINT must be exec form"
    (health,) = [rest for kw, rest in ins if kw == "HEALTHCHECK"]
    assert 'CMD ["python", "/opt/retrieval-monitor/healthcheck.py"]' in health
    copies = [rest for kw, rest in ins if kw == "COPY"]
    assert "deploy/docker/healthcheck.py /opt/retrieval-monitor/healthcheck.py" in copies
    assert "/healthz" in (DEPLOY / "docker" / "healthcheck.py").read_text()


def test_compose_services_and_mounts() -> None:
    path = DEPLOY / "docker" / "compose.yml"
    compose: dict[str, Any] = yaml.safe_load(path.read_text())
    services = compose["services"]
    assert set(services) == {"monitor", "prometheus", "alertmanager", "grafana"}
    for name, svc in services.items():
        if "image" in svc and name != "monitor":
            assert re.search(r":v?\d+\.\d+\.\d+$", svc["image"]), f"{name} image not pinned"
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (path.parent / source).resolve().exists(), f"{name}: {source} missing"
    assert services["monitor"]["build"]["dockerfile"] == "deploy/docker/Dockerfile"
    assert (path.parent / services["monitor"]["build"]["context"]).resolve() == REPO
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = [
        t for job in prom["scrape_configs"] for c in job["static_configs"] for t in c["targets"]
    ]
    assert "monitor:9464" in targets
    assert services["monitor"]["environment"]["LISTEN"].endswith(":9464")


def test_demo_world_script_names_a_real_scenario() -> None:
    spec = importlib.util.find_spec("monitor.simulate")
    if spec is None:  # pragma: no cover - the simulator is part of the package
        pytest.fail("monitor.simulate is missing")
    from monitor.simulate import SCENARIOS

    text = (DEPLOY / "docker" / "demo_world.py").read_text()
    default = re.search(r'"SCENARIO", "(\w+)"', text)
    assert default is not None
    assert default.group(1) in SCENARIOS
    compose = yaml.safe_load((DEPLOY / "docker" / "compose.yml").read_text())
    env = compose["services"]["monitor"]["environment"]["SCENARIO"]
    assert env.split(":-")[1].rstrip("}") in SCENARIOS


def test_demo_world_starts_each_world_with_a_fresh_state(tmp_path: Path) -> None:
    """The compose volume outlives the container: a second `up` with another SCENARIO wrote a
    new world under the same monitor name and adopted the earlier world's state (its raised
    model_decay shown for a covariate_shift world). The script drops that state first, and
    only the world's own ``state`` directory."""
    from monitor.config import load_config
    from monitor.simulate import SCENARIOS, write_world

    spec = importlib.util.spec_from_file_location("demo_world", DEPLOY / "docker" / "demo_world.py")
    assert spec is not None
    assert spec.loader is not None
    demo_world = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo_world)
    world = write_world(
        tmp_path,
        SCENARIOS["abrupt_decay"],
        start=datetime(2026, 11, 1, tzinfo=UTC),
        end=datetime(2026, 11, 3, tzinfo=UTC),
        seed=7,
    )
    state = load_config(world.config_path).server.state_dir
    assert state == tmp_path / "state"
    state.mkdir()
    (state / "demo.json").write_text("{}")
    demo_world.drop_old_state(tmp_path)
    assert not state.exists()
    assert (tmp_path / "monitor.toml").exists()
    assert (tmp_path / "scores").is_dir()


def _unit() -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    current = ""
    for line in (DEPLOY / "systemd" / "retrieval-monitor.service").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            sections[current] = {}
        else:
            key, _, value = line.partition("=")
            sections[current].setdefault(key, []).append(value)
    return sections


def _seconds(value: str) -> int:
    units = {"min": 60, "s": 1, "h": 3600}
    m = re.fullmatch(r"(\d+)(min|s|h)?", value)
    assert m, value
    return int(m.group(1)) * units[m.group(2) or "s"]


def test_systemd_unit_is_hardened() -> None:
    service = _unit()["Service"]
    for key, value in {
        "DynamicUser": "yes",
        "ProtectSystem": "strict",
        "StateDirectory": "retrieval-monitor",
        "NoNewPrivileges": "yes",
        "Restart": "on-failure",
    }.items():
        assert service[key] == [value], key
    assert service["CapabilityBoundingSet"] == [""]
    # Longer than the daemon's default shutdown timeout (30 s) that lets a running check finish.
    assert _seconds(service["TimeoutStopSec"][0]) > 30
    assert service["ExecStart"][0].endswith(
        "monitor run --config /etc/retrieval-monitor/config.toml"
    )
    # systemctl reload sends the daemon's reload signal (it had no ExecReload: reload failed)
    assert service["ExecReload"] == ["/bin/kill -HUP $MAINPID"]
    # notify: a reload is held until the daemon's READY=1 (under exec a SIGHUP in its first
    # 0.1 s ended it, a clean exit to systemd, never restarted)
    assert service["Type"] == ["notify"]
    # ProcSubset=pid hid /proc/stat (every process_* metric vanished: the collector reads the
    # boot time there) and /proc/meminfo (`import distributed` failed: no Dask engine)
    assert service.get("ProcSubset", ["all"]) == ["all"]
    assert service["ProtectProc"] == ["invisible"]


def test_systemd_analyze_verify() -> None:
    if shutil.which("systemd-analyze") is None:
        missing("systemd-analyze is not installed: run .ci/install-debian-packages.sh")
    proc = subprocess.run(
        ["systemd-analyze", "verify", str(DEPLOY / "systemd" / "retrieval-monitor.service")],
        capture_output=True,
        text=True,
        check=False,
    )
    problems = [
        line
        for line in proc.stderr.splitlines()
        if line.strip() and "is not executable" not in line  # /opt/... is not installed here
    ]
    assert not problems, problems


def test_the_units_syscall_filter_lets_the_daemon_run(tmp_path: Path) -> None:
    """``monitor validate`` and a check (numpy, scipy, pyarrow: what ExecStartPre and ExecStart
    load) under the unit's SystemCallFilter, emulated with seccomp (``tests/deploy/seccomp``):
    the OpenBLAS of the numpy and scipy wheels calls ``mbind`` (in ``@resources``, which the unit
    denies) as it loads, and without ``SystemCallErrorNumber=`` systemd kills the caller with
    SIGSYS, so the unit never started; with EPERM the call fails and OpenBLAS goes on."""
    if platform.machine() != "x86_64" or sys.platform != "linux":
        pytest.skip("the emulation maps syscall names to x86_64 numbers")
    if shutil.which("systemd-analyze") is None:
        missing("systemd-analyze is not installed: run .ci/install-debian-packages.sh")
    if not seccomp.UNISTD.exists():
        missing(f"{seccomp.UNISTD} is missing (linux-libc-dev): run .ci/install-debian-packages.sh")
    from monitor.simulate import SCENARIOS, write_world

    service = _unit()["Service"]
    allowed = seccomp.unit_filter(service["SystemCallFilter"])
    assert seccomp.numbers()["mbind"] not in allowed  # what the filter is about
    action = service.get("SystemCallErrorNumber", ["kill"])[0]
    start = datetime(2026, 3, 2, tzinfo=UTC)
    world = write_world(
        tmp_path / "w", SCENARIOS["stationary"], start=start, end=start + timedelta(days=9), seed=1
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "2"}
    at = (start + timedelta(days=9)).isoformat()
    launcher = [sys.executable, "-m", "tests.deploy.seccomp", ",".join(map(str, allowed)), action]
    for command in (
        ["validate", "--sources", "--config", str(world.config_path)],
        [
            "check",
            "--json",
            "--config",
            str(world.config_path),
            "--at",
            at,
            "--replay-from",
            (start + timedelta(days=8)).isoformat(),
        ],
    ):
        proc = subprocess.run(
            [*launcher, sys.executable, "-m", "monitor", *command],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=300,
            check=False,
        )
        assert proc.returncode >= 0, (command, proc.returncode, proc.stderr[-2000:])
        # validate: 0 or 3; check: 0, 1 or 2 by the state (an exit 1 of validate is a crash)
        allowed_codes = (0,) if command[0] == "validate" else (0, 1, 2)
        assert proc.returncode in allowed_codes, (command, proc.returncode, proc.stderr[-2000:])
    (checked,) = json.loads(proc.stdout)["monitors"]
    assert checked["state"] != "error", checked


def _manifests() -> dict[str, dict[str, Any]]:
    docs: dict[str, dict[str, Any]] = {}
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") != "Kustomization":
                docs[doc["kind"]] = doc
    return docs


def test_kubernetes_deployment() -> None:
    docs = _manifests()
    assert {"Deployment", "Service", "ServiceMonitor", "PrometheusRule"} <= set(docs)
    dep = docs["Deployment"]["spec"]
    assert dep["replicas"] == 1
    assert dep["strategy"]["type"] == "Recreate"
    pod = dep["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"
    assert pod["terminationGracePeriodSeconds"] > 30
    assert docs["Service"]["metadata"]["name"] == "retrieval-monitor"  # the alerts' job label
    sm = docs["ServiceMonitor"]["spec"]
    assert sm["selector"]["matchLabels"] == docs["Service"]["metadata"]["labels"]
    assert sm["endpoints"][0]["port"] == docs["Service"]["spec"]["ports"][0]["name"]
    # one identity across pod restarts: with the pod IP as instance, a restart resolved a
    # raised page and paged again (a new series for every alert)
    relabel = sm["endpoints"][0]["relabelings"]
    assert {
        "sourceLabels": ["__meta_kubernetes_namespace", "__meta_kubernetes_service_name"],
        "separator": "/",
        "targetLabel": "instance",
    } in relabel  # unique per deployment: a fixed name collided across namespaces
    assert {"action": "labeldrop", "regex": "pod|container"} in relabel


def test_prometheusrule_carries_the_alerts_file() -> None:
    """Kubernetes and plain Prometheus alert on the same groups (both generated; see test_mixin)."""
    rule = yaml.safe_load((DEPLOY / "kubernetes" / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]
