"""Grafana alerting provisioning (``grafana/provisioning/alerting/*.yaml``) against Grafana's
file-provisioning schema, and against the Prometheus rules it mirrors.

Two layers. Grafana's *file envelope* (``apiVersion``, ``groups`` with ``orgId``/``name``/
``folder``/``interval``, ``contactPoints`` with ``receivers``, ``policies`` with ``orgId``) is not
modelled by grafana-foundation-sdk, whose alerting models are the HTTP provisioning API's objects
(``orgID``/``folderUID``/``ruleGroup`` on each rule, one receiver per contact point); so the
envelope is checked here by hand, strictly, with the keys and requirements of Grafana's reader
(``pkg/services/provisioning/alerting/*_types.go``). Every object inside it - rule, query, query
model (Prometheus query, math and threshold expressions), receiver, policy tree - is decoded with
the SDK's typed models (``grafana_foundation_sdk.models.alerting``, ``.prometheus``, ``.expr``)
and encoded back: a key the SDK does not know is dropped on the way and the round trip differs.
Enumerations (noDataState, execErrState, evaluator and receiver types) are checked against the
SDK's ``Literal`` types.
"""

from __future__ import annotations

import copy
import json
import re
import typing
from collections.abc import Mapping
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models import alerting as sdk
from grafana_foundation_sdk.models import expr as sdk_expr
from grafana_foundation_sdk.models import prometheus as sdk_prometheus

from tests.deploy.contract import (
    GRAFANA_PROVISIONING,
    GRAFANA_RULES,
    RUNBOOK_BASE,
    grafana_query,
    load_grafana_rules,
    load_rules,
)

register_default_plugins()  # lets Query.from_json decode models by their datasource type

ALERTING = GRAFANA_PROVISIONING / "alerting"
NOTIFICATIONS = ALERTING / "notifications.yaml"
EXPR = "__expr__"
DURATION = re.compile(r"(?:[0-9]+(?:ms|s|m|h|d|w|y))+")
UID = re.compile(r"[a-zA-Z0-9_-]{1,40}")

# The keys Grafana's file reader knows (rules_types.go, contact_point_types.go,
# notification_policy_types.go); the SDK covers what is inside a rule, receiver and policy.
TOP_LEVEL = {
    "apiVersion",
    "groups",
    "deleteRules",
    "contactPoints",
    "deleteContactPoints",
    "policies",
    "resetPolicies",
    "templates",
    "deleteTemplates",
    "muteTimes",
    "deleteMuteTimes",
}
GROUP = {"orgId", "name", "folder", "interval", "rules"}
RULE_REQUIRED = {
    "uid",
    "title",
    "condition",
    "data",
    "noDataState",
    "execErrState",
    "for",
    "annotations",
    "labels",
}
QUERY_KEYS = {"refId", "relativeTimeRange", "datasourceUid", "model"}
CONTACT_POINT = {"orgId", "name", "receivers"}
# Fields a file rule does not carry because its group does (the API object has them per rule).
API_ONLY = {"folderUID": "folder-uid", "orgID": 1, "ruleGroup": "group"}


def _literal(cls: type, attribute: str) -> set[str]:
    """The values allowed by an SDK field typed ``Literal[...]`` (or ``Optional[Literal[...]]``)."""
    hint = typing.get_type_hints(cls)[attribute]
    args = typing.get_args(hint)
    if typing.get_origin(hint) is typing.Union:
        (hint,) = [a for a in args if a is not type(None)]
        args = typing.get_args(hint)
    return set(args)


NO_DATA_STATES = _literal(sdk.Rule, "no_data_state")
EXEC_ERR_STATES = _literal(sdk.Rule, "exec_err_state")
EVALUATOR_TYPES = _literal(sdk_expr.ExprTypeThresholdConditionsEvaluator, "type_val")
RECEIVER_TYPES = _literal(sdk.ContactPoint, "type_val")


def _plain(obj: Any) -> Any:
    """An SDK object (or a tree of them) as plain JSON data."""
    return json.loads(json.dumps(obj, cls=JSONEncoder))


def _round_trip(cls: Any, data: Mapping[str, Any]) -> Any:
    return _plain(cls.from_json(dict(data)))


def _query_problems(where: str, query: Mapping[str, Any], refs: set[str]) -> list[str]:
    problems = []
    if set(query) != QUERY_KEYS:
        problems.append(f"{where}: keys {sorted(query)}; expected {sorted(QUERY_KEYS)}")
        return problems
    if _round_trip(sdk.Query, query) != query:
        problems.append(f"{where}: does not survive the SDK's Query model (unknown key?)")
    rtr = query["relativeTimeRange"]
    if set(rtr) != {"from", "to"} or not all(isinstance(v, int) and v >= 0 for v in rtr.values()):
        problems.append(f"{where}.relativeTimeRange: must be {{from, to}} seconds; got {rtr!r}")
    model = query["model"]
    if model.get("refId") != query["refId"]:
        problems.append(f"{where}.model.refId: {model.get('refId')!r} != {query['refId']!r}")
    decoded = sdk.Query.from_json(dict(query)).model
    if query["datasourceUid"] == EXPR:
        if not isinstance(decoded, sdk_expr.TypeMath | sdk_expr.TypeThreshold):
            problems.append(f"{where}.model: not a math or threshold expression: {model!r}")
        elif isinstance(decoded, sdk_expr.TypeThreshold):
            for cond in decoded.conditions:
                if cond.evaluator.type_val not in EVALUATOR_TYPES:
                    problems.append(f"{where}: evaluator {cond.evaluator.type_val!r}")
            if decoded.expression not in refs:
                problems.append(f"{where}: threshold on unknown ref {decoded.expression!r}")
        else:
            used = set(re.findall(r"\$\{?([A-Za-z0-9_]+)\}?", decoded.expression))
            if not used or not used <= refs:
                problems.append(f"{where}: math uses {sorted(used)}; refs are {sorted(refs)}")
    elif not isinstance(decoded, sdk_prometheus.Dataquery):
        problems.append(f"{where}.model: not a Prometheus query: {model!r}")
    elif model.get("instant") is not True or not decoded.expr:
        problems.append(f"{where}.model: must be an instant query with an expr")
    elif model["datasource"] != {"type": "prometheus", "uid": query["datasourceUid"]}:
        problems.append(f"{where}.model.datasource: {model['datasource']!r}")
    return problems


def _rule_problems(where: str, rule: Mapping[str, Any]) -> list[str]:
    problems = []
    missing = RULE_REQUIRED - set(rule)
    if missing:
        return [f"{where}: missing {sorted(missing)}"]
    api = {**rule, **API_ONLY}
    if _round_trip(sdk.Rule, api) != _plain(api):
        extra = set(rule) - set(_round_trip(sdk.Rule, api))
        problems.append(f"{where}: does not survive the SDK's Rule model; unknown {sorted(extra)}")
    if not UID.fullmatch(rule["uid"]):
        problems.append(f"{where}.uid: 1-40 of [a-zA-Z0-9_-]; got {rule['uid']!r}")
    if rule["noDataState"] not in NO_DATA_STATES:
        problems.append(f"{where}.noDataState: one of {sorted(NO_DATA_STATES)}")
    if rule["execErrState"] not in EXEC_ERR_STATES:
        problems.append(f"{where}.execErrState: one of {sorted(EXEC_ERR_STATES)}")
    if not DURATION.fullmatch(rule["for"]):
        problems.append(f"{where}.for: a duration; got {rule['for']!r}")
    refs = [q.get("refId") for q in rule["data"]]
    if len(refs) != len(set(refs)) or rule["condition"] not in refs:
        problems.append(f"{where}: refIds {refs}, condition {rule['condition']!r}")
    for i, query in enumerate(rule["data"]):
        problems += _query_problems(f"{where}.data[{i}]", query, set(refs))
    for kind in ("annotations", "labels"):
        if not all(isinstance(v, str) for v in rule[kind].values()):
            problems.append(f"{where}.{kind}: values must be strings")
    return problems


def rules_problems(doc: Mapping[str, Any]) -> list[str]:
    """Every schema problem of an alert-rules provisioning document."""
    problems = []
    if doc.get("apiVersion") != 1:
        problems.append(f"apiVersion: must be 1; got {doc.get('apiVersion')!r}")
    problems += [f"{k}: unknown top-level key" for k in sorted(set(doc) - TOP_LEVEL)]
    uids: list[str] = []
    for g, group in enumerate(doc.get("groups", [])):
        where = f"groups[{g}]"
        if set(group) != GROUP:
            problems.append(f"{where}: keys {sorted(group)}; expected {sorted(GROUP)}")
            continue
        if not (isinstance(group["orgId"], int) and group["orgId"] >= 1):
            problems.append(f"{where}.orgId: an integer >= 1")
        if not (group["name"] and group["folder"]):
            problems.append(f"{where}: name and folder are required")
        if not DURATION.fullmatch(str(group["interval"])):
            problems.append(f"{where}.interval: a duration; got {group['interval']!r}")
        titles = [r.get("title") for r in group["rules"]]
        if len(titles) != len(set(titles)):
            problems.append(f"{where}: duplicate titles {titles}")
        for r, rule in enumerate(group["rules"]):
            problems += _rule_problems(f"{where}.rules[{r}]", rule)
            uids.append(rule.get("uid", ""))
    if len(uids) != len(set(uids)):
        problems.append(f"duplicate rule uids: {uids}")
    return problems


def _policy_receivers(policy: Mapping[str, Any]) -> set[str]:
    found = {policy["receiver"]} if "receiver" in policy else set()
    for route in policy.get("routes", []):
        found |= _policy_receivers(route)
    return found


def _matchers_ok(policy: Mapping[str, Any]) -> bool:
    ok = all(
        len(m) == 3 and m[1] in {"=", "!=", "=~", "!~"} for m in policy.get("object_matchers", [])
    )
    return ok and all(_matchers_ok(r) for r in policy.get("routes", []))


def notifications_problems(doc: Mapping[str, Any]) -> list[str]:
    """Every schema problem of a contact point / notification policy provisioning document."""
    problems = []
    if doc.get("apiVersion") != 1:
        problems.append("apiVersion: must be 1")
    problems += [f"{k}: unknown top-level key" for k in sorted(set(doc) - TOP_LEVEL)]
    names = set()
    for c, cp in enumerate(doc.get("contactPoints", [])):
        where = f"contactPoints[{c}]"
        if set(cp) != CONTACT_POINT or not cp["receivers"]:
            problems.append(f"{where}: keys {sorted(cp)}; expected {sorted(CONTACT_POINT)}")
            continue
        names.add(cp["name"])
        for r, receiver in enumerate(cp["receivers"]):
            api = {**receiver, "name": cp["name"]}
            if _round_trip(sdk.ContactPoint, api) != api:
                problems.append(f"{where}.receivers[{r}]: not the SDK's ContactPoint shape")
            if receiver.get("type") not in RECEIVER_TYPES:
                problems.append(f"{where}.receivers[{r}].type: {receiver.get('type')!r}")
            if not UID.fullmatch(str(receiver.get("uid"))):
                problems.append(f"{where}.receivers[{r}].uid: {receiver.get('uid')!r}")
    for p, policy in enumerate(doc.get("policies", [])):
        where = f"policies[{p}]"
        tree = {k: v for k, v in policy.items() if k != "orgId"}
        if policy.get("orgId") != 1 or not policy.get("receiver"):
            problems.append(f"{where}: orgId 1 and a root receiver are required")
        if _round_trip(sdk.NotificationPolicy, tree) != tree:
            problems.append(f"{where}: does not survive the SDK's NotificationPolicy model")
        if not _matchers_ok(policy):
            problems.append(f"{where}: object_matchers must be [label, op, value]")
        unknown = _policy_receivers(policy) - names
        if unknown:
            problems.append(f"{where}: receivers without a contact point: {sorted(unknown)}")
    return problems


RULES_DOC = yaml.safe_load(GRAFANA_RULES.read_text())
NOTIFICATIONS_DOC = yaml.safe_load(NOTIFICATIONS.read_text())
PROMETHEUS = {r["alert"]: r for r in load_rules()}
GRAFANA = {r["title"]: r for r in load_grafana_rules()}


def test_the_alerting_folder_holds_rules_and_notifications() -> None:
    assert sorted(p.name for p in ALERTING.iterdir()) == ["notifications.yaml", "rules.yaml"]


def test_rules_match_grafanas_file_provisioning_schema() -> None:
    assert rules_problems(RULES_DOC) == []


def test_notifications_match_grafanas_file_provisioning_schema() -> None:
    assert notifications_problems(NOTIFICATIONS_DOC) == []
    assert NOTIFICATIONS_DOC["contactPoints"]
    assert NOTIFICATIONS_DOC["policies"]


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("groups", 0, "rules", 0, "noDataStat"), "OK", "does not survive the SDK's Rule model"),
        (("groups", 0, "rules", 0, "execErrState"), "Broken", "execErrState"),
        (("groups", 0, "rules", 0, "uid"), "x" * 41, ".uid"),
        (("groups", 0, "rules", 0, "condition"), "Z", "condition 'Z'"),
        (("groups", 0, "rules", 0, "data", 0, "model", "exemplars"), True, "Query model"),
        (("groups", 0, "rules", 0, "data", 2, "model", "expression"), "Q", "unknown ref 'Q'"),
        (("groups", 0, "rules", 0, "data", 1, "model", "expression"), "$Q > 0", "math uses"),
        (("groups", 0, "interval"), "1 minute", "interval"),
        (("groups", 0, "folderUid"), "x", "keys"),
        (("apiVersion",), 2, "apiVersion"),
    ],
)
def test_the_rules_schema_check_can_fail(
    path: tuple[str | int, ...], value: object, expected: str
) -> None:
    doc = copy.deepcopy(RULES_DOC)
    target: Any = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    problems = rules_problems(doc)
    assert any(expected in p for p in problems), problems


def test_the_notifications_schema_check_can_fail() -> None:
    doc = copy.deepcopy(NOTIFICATIONS_DOC)
    doc["contactPoints"][0]["receivers"][0]["type"] = "carrier-pigeon"
    doc["policies"][0]["routes"][0]["receiver"] = "nobody"
    doc["policies"][0]["routes"][1]["object_matchers"] = [["severity", "==", "warning"]]
    problems = notifications_problems(doc)
    assert any("type: 'carrier-pigeon'" in p for p in problems), problems
    assert any("without a contact point: ['nobody']" in p for p in problems), problems
    assert any("object_matchers" in p for p in problems), problems


def test_every_prometheus_alert_has_a_grafana_twin() -> None:
    assert sorted(GRAFANA) == sorted(PROMETHEUS)


@pytest.mark.parametrize("name", sorted(PROMETHEUS))
def test_grafana_rule_mirrors_the_prometheus_rule(name: str) -> None:
    prom, graf = PROMETHEUS[name], GRAFANA[name]
    assert grafana_query(graf) == prom["expr"]
    assert graf["for"] == prom["for"]
    assert graf["labels"] == prom["labels"]
    assert graf["annotations"]["runbook_url"] == f"{RUNBOOK_BASE}#{name.lower()}"
    assert set(graf["annotations"]) == {"summary", "description", "runbook_url"}
    # Fires for every series the expression returns, as Prometheus does; no series is OK.
    math = next(q for q in graf["data"] if q["model"].get("type") == "math")
    assert math["model"]["expression"] == "is_number($A) || is_nan($A) || is_inf($A)"
    assert graf["noDataState"] == "OK"


@pytest.mark.parametrize("name", sorted(GRAFANA))
def test_grafana_annotations_use_only_grafana_template_data(name: str) -> None:
    """Grafana's templates have ``$labels`` and ``$values``, no ``query`` and no numeric
    ``$value``; every ``$values.X`` names one of the rule's refIds."""
    rule = GRAFANA[name]
    refs = {q["refId"] for q in rule["data"]}
    for key, text in rule["annotations"].items():
        assert not re.search(r"\{\{[^}]*\bquery\b", text), (key, text)
        assert not re.search(r"\$value\b", text), (key, text)
        assert set(re.findall(r"\$values\.([A-Za-z0-9_]+)", text)) <= refs, (key, text)
        assert text.count("{{") == text.count("}}"), (key, text)


def test_rules_query_the_provisioned_datasource() -> None:
    datasources = yaml.safe_load(
        (GRAFANA_PROVISIONING / "datasources" / "prometheus.yml").read_text()
    )
    (uid,) = [d["uid"] for d in datasources["datasources"] if d["type"] == "prometheus"]
    for rule in GRAFANA.values():
        queries = [q for q in rule["data"] if q["datasourceUid"] != EXPR]
        assert [q["datasourceUid"] for q in queries] == [uid], rule["title"]


def test_rules_live_in_the_dashboards_folder() -> None:
    provider = yaml.safe_load(
        (GRAFANA_PROVISIONING / "dashboards" / "retrieval-monitor.yml").read_text()
    )["providers"][0]
    assert {g["folder"] for g in RULES_DOC["groups"]} == {provider["folder"]}


def test_policies_route_severities_like_alertmanager() -> None:
    (policy,) = NOTIFICATIONS_DOC["policies"]
    routes = {tuple(r["object_matchers"][0]): r["receiver"] for r in policy["routes"]}
    assert set(routes) == {("severity", "=", "critical"), ("severity", "=", "warning")}
    assert routes[("severity", "=", "critical")] != routes[("severity", "=", "warning")]
