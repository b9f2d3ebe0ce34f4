"""Every Grafana provisioning file read the way Grafana reads it: environment variables expanded.

Grafana's rules (``pkg/services/provisioning/values/values.go``, ``interpolateValue``): the value
is split on ``$$`` (an escaped ``$``); in each part the ``$__env{NAME}`` / ``$__file{...}`` /
``$__vault{...}`` expanders run, then Go's ``os.ExpandEnv``; the parts are joined with ``$``.
``os.ExpandEnv`` replaces ``$NAME`` and ``${NAME}`` by the variable's value, *empty when unset*,
and knows no shell operators: ``${PROMETHEUS_URL:-http://x}`` looks up a variable literally named
``PROMETHEUS_URL:-http://x`` and yields an empty string. Which values are expanded: everything in
datasource and dashboard provisioning; in alerting provisioning everything except a rule's
annotations (raw; recent Grafana expands only braced ``${NAME}`` there) and its query models
(raw, so ``$A`` in a math expression survives) - ``provisioning/alerting/rules_types.go``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.contract import GRAFANA_PROVISIONING, REPO

COMPOSE = REPO / "deploy" / "docker" / "compose.yml"
FILES = sorted(p for p in GRAFANA_PROVISIONING.rglob("*") if p.suffix in {".yml", ".yaml"})
_EXPANDER = re.compile(r"\$__(\w+)\{([^}]*)\}")
_SPECIAL = set("*#$@!?-0123456789")


def _is_alnum(c: str) -> bool:
    return c == "_" or (c.isascii() and c.isalnum())


def _shell_name(s: str) -> tuple[str, int]:
    """Go's ``os.getShellName``: the variable name after a ``$`` and the bytes it spans."""
    if s[0] == "{":
        if len(s) > 2 and s[1] in _SPECIAL and s[2] == "}":
            return s[1:2], 3
        for i in range(1, len(s)):
            if s[i] == "}":
                return ("", 2) if i == 1 else (s[1:i], i + 1)
        return "", 1  # bad syntax: "${" is eaten
    if s[0] in _SPECIAL:
        return s[0:1], 1
    i = 0
    while i < len(s) and _is_alnum(s[i]):
        i += 1
    return s[:i], i


def go_expand(s: str, mapping: Callable[[str], str]) -> str:
    """Go's ``os.Expand``."""
    out: list[str] = []
    i = j = 0
    while j < len(s):
        if s[j] == "$" and j + 1 < len(s):
            out.append(s[i:j])
            name, w = _shell_name(s[j + 1 :])
            if name:
                out.append(mapping(name))
            elif w == 0:
                out.append("$")  # "$" not followed by a name stays
            j += w
            i = j + 1
        j += 1
    return "".join(out) + s[i:]


def grafana_interpolate(value: str, env: Mapping[str, str], seen: set[str] | None = None) -> str:
    """Grafana's ``interpolateValue`` for ``value``; names it looks up are added to ``seen``."""

    def lookup(name: str) -> str:
        if seen is not None:
            seen.add(name)
        return env.get(name, "")

    def expander(m: re.Match[str]) -> str:
        if m.group(1) != "env":
            raise AssertionError(f"$__{m.group(1)}{{...}} needs a file or vault: {value!r}")
        return lookup(m.group(2))

    return "$".join(go_expand(_EXPANDER.sub(expander, part), lookup) for part in value.split("$$"))


@pytest.mark.parametrize(
    ("raw", "expanded"),
    [
        ("http://prometheus:9090", "http://prometheus:9090"),
        ("http://$HOST:$PORT/x", "http://prom:9090/x"),
        ("${HOST}9090", "prom9090"),
        ("$__env{HOST}", "prom"),
        ("Pa$$w0rd", "Pa$w0rd"),  # $$ escapes a dollar
        ("$$HOST", "$HOST"),
        ("$UNSET", ""),  # unset is empty, silently
        ("${PROMETHEUS_URL:-http://prometheus:9090}", ""),  # no shell defaults
        ("cost: 5$", "cost: 5$"),  # a trailing $ stays
        ("a${}b", "ab"),  # bad syntax is eaten
        ("{{ $labels.name }}", "{{ .name }}"),  # why templates must not be interpolated
    ],
)
def test_interpolation_follows_grafana(raw: str, expanded: str) -> None:
    assert grafana_interpolate(raw, {"HOST": "prom", "PORT": "9090"}) == expanded


def _compose_grafana_env() -> dict[str, str]:
    """Grafana's environment in the compose stack; compose's ``${VAR:-default}`` taken as default
    (compose, unlike Grafana, does support it)."""
    env = yaml.safe_load(COMPOSE.read_text())["services"]["grafana"].get("environment", {})
    resolved = {}
    for name, value in env.items():
        text = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(value))
        assert "$" not in text, f"compose grafana.environment.{name}: {value!r}"
        resolved[name] = text
    return resolved


ENVIRONMENTS = {"bare Grafana": {}, "compose": _compose_grafana_env()}


def _interpolated_strings(path: Path, doc: Any) -> Iterator[tuple[str, str, bool]]:
    """``(where, value, interpolated)`` for every string value of a provisioning document."""
    alerting = path.parent.name == "alerting"

    def walk(node: Any, where: str, raw: bool) -> Iterator[tuple[str, str, bool]]:
        if isinstance(node, dict):
            for key, value in node.items():
                skip = alerting and key in {"annotations", "model"} and where.endswith("]")
                yield from walk(value, f"{where}.{key}", raw or skip)
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from walk(value, f"{where}[{i}]", raw)
        elif isinstance(node, str):
            yield where, node, not raw

    yield from walk(doc, path.name, False)


def test_every_provisioning_kind_is_covered() -> None:
    assert {p.parent.name for p in FILES} == {"alerting", "dashboards", "datasources"}


@pytest.mark.parametrize("env_name", sorted(ENVIRONMENTS))
@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_value_is_emptied_or_keeps_shell_syntax(path: Path, env_name: str) -> None:
    env = ENVIRONMENTS[env_name]
    problems = []
    for where, raw, interpolated in _interpolated_strings(path, yaml.safe_load(path.read_text())):
        if not interpolated:
            # Raw in Grafana 11.6; newer Grafana expands braced variables in annotations.
            if "${" in raw:
                problems.append(f"{where}: braced variable in a raw field: {raw!r}")
            continue
        seen: set[str] = set()
        value = grafana_interpolate(raw, env, seen)
        if raw and not value:
            problems.append(f"{where}: {raw!r} becomes empty")
        if ":-" in value or "${" in value:
            problems.append(f"{where}: shell syntax left in {value!r}")
        missing = sorted(n for n in seen if not env.get(n))
        if missing:
            problems.append(f"{where}: {raw!r} reads unset {missing} -> {value!r}")
    assert not problems


def test_the_old_datasource_url_is_caught() -> None:
    """The check above can fail: the shell-default URL this file used to have becomes empty."""
    doc = {"datasources": [{"url": "${PROMETHEUS_URL:-http://prometheus:9090}"}]}
    path = GRAFANA_PROVISIONING / "datasources" / "old.yml"
    (_where, raw, interpolated), *_ = list(_interpolated_strings(path, doc))
    assert interpolated
    assert grafana_interpolate(raw, {"PROMETHEUS_URL": "http://p:9090"}) == ""


def test_compose_mounts_datasources_and_dashboards_and_alerts_once() -> None:
    """datasources/ and dashboards/ reach /etc/grafana/provisioning in compose; alerting/ does
    not, since the stack's Prometheus evaluates the same rules (mounted both, every alert
    notified twice)."""
    grafana = yaml.safe_load(COMPOSE.read_text())["services"]["grafana"]
    mounts = {
        v.split(":")[1]: (COMPOSE.parent / v.split(":")[0]).resolve() for v in grafana["volumes"]
    }
    for part in ("datasources", "dashboards"):
        assert (
            mounts[f"/etc/grafana/provisioning/{part}"] == (GRAFANA_PROVISIONING / part).resolve()
        )
    assert not [m for m in mounts if m.startswith("/etc/grafana/provisioning/alerting")]
    assert "/etc/grafana/provisioning" not in mounts
