"""The alerts as Grafana-managed rules, and an example contact point and notification policy, in
Grafana's alerting file-provisioning format (``grafana/provisioning/alerting/*.yaml``).

Each rule has the layout Grafana itself produces when it imports a Prometheus rule
(``pkg/services/ngalert/prom`` in grafana/grafana): query ``A`` is the Prometheus rule's expression
unchanged, evaluated as an instant query; ``B`` is the math expression
``is_number($A) || is_nan($A) || is_inf($A)`` (1 for every series ``A`` returns); ``C``, the
condition, is ``B > 0``. So a Grafana rule fires for exactly the series its Prometheus twin fires
for, with the same ``for``, severity and runbook link; no data means no series, i.e. OK.

Not carried over: ``keep_firing_for`` (absent from Grafana 11.6's rule schema, the version the
compose stack runs) and the Prometheus descriptions' ``query`` calls (Grafana templates have no
``query``; each alert has its own Grafana description).
"""

from __future__ import annotations

from typing import Any

from deploy.mixin.alerts import Alert, AlertGroup
from deploy.mixin.config import MixinConfig

ORG_ID = 1
EXPR_UID = "__expr__"  # Grafana's server-side expressions pseudo data source
QUERY, MATH, CONDITION = "A", "B", "C"
# The look-back Grafana gives query A. Instant PromQL ignores it (range selectors inside the
# expression say how far back they read); Grafana requires one per data-source query.
QUERY_RANGE_S = 600

# Example receivers, the same split as deploy/alertmanager/alertmanager.yml.
PAGER = "retrieval-monitor-pager"
TICKETS = "retrieval-monitor-tickets"
_WEBHOOKS = {
    PAGER: "http://pager.example.invalid/retrieval-monitor",
    TICKETS: "http://tickets.example.invalid/retrieval-monitor",
}


def rule_uid(config: MixinConfig, alert: str) -> str:
    """The Grafana rule uid of ``alert``: ``<alert_uid_prefix>-<alert in lower case>``."""
    return f"{config.alert_uid_prefix}-{alert.lower()}"


def _expr_node(ref: str, model: dict[str, Any]) -> dict[str, Any]:
    return {
        "refId": ref,
        "relativeTimeRange": {"from": 0, "to": 0},
        "datasourceUid": EXPR_UID,
        "model": {"refId": ref, "datasource": {"type": EXPR_UID, "uid": EXPR_UID}, **model},
    }


def grafana_rule(config: MixinConfig, alert: Alert) -> dict[str, Any]:
    """One alert as a Grafana-managed rule (file-provisioning keys)."""
    return {
        "uid": rule_uid(config, alert.name),
        "title": alert.name,
        "condition": CONDITION,
        "data": [
            {
                "refId": QUERY,
                "relativeTimeRange": {"from": QUERY_RANGE_S, "to": 0},
                "datasourceUid": config.datasource_uid,
                "model": {
                    "refId": QUERY,
                    "datasource": {"type": "prometheus", "uid": config.datasource_uid},
                    "editorMode": "code",
                    "expr": alert.expr,
                    "instant": True,
                    "range": False,
                },
            },
            _expr_node(
                MATH,
                {
                    "type": "math",
                    "expression": f"is_number(${QUERY}) || is_nan(${QUERY}) || is_inf(${QUERY})",
                },
            ),
            _expr_node(
                CONDITION,
                {
                    "type": "threshold",
                    "expression": MATH,
                    "conditions": [{"evaluator": {"type": "gt", "params": [0]}}],
                },
            ),
        ],
        "noDataState": "OK",
        "execErrState": "Error",
        "for": alert.for_,
        "annotations": {
            "summary": alert.grafana_summary,
            "description": alert.grafana_description,
            "runbook_url": alert.runbook_url,
        },
        "labels": {"severity": alert.severity},
        "isPaused": False,
    }


def rules_document(config: MixinConfig, groups: tuple[AlertGroup, ...]) -> dict[str, Any]:
    """``grafana/provisioning/alerting/rules.yaml``: one Grafana rule group per Prometheus group."""
    return {
        "apiVersion": 1,
        "groups": [
            {
                "orgId": ORG_ID,
                "name": group.name,
                "folder": config.folder,
                "interval": config.evaluation_interval,
                "rules": [grafana_rule(config, a) for a in group.alerts],
            }
            for group in groups
        ],
    }


def notifications_document() -> dict[str, Any]:
    """``grafana/provisioning/alerting/notifications.yaml``: webhook contact points and a policy
    tree routing ``severity=critical`` to the pager and ``warning`` to tickets."""
    return {
        "apiVersion": 1,
        "contactPoints": [
            {
                "orgId": ORG_ID,
                "name": name,
                "receivers": [
                    {
                        "uid": name.replace("retrieval-monitor", "rm"),
                        "type": "webhook",
                        "settings": {"url": url, "httpMethod": "POST"},
                        "disableResolveMessage": False,
                    }
                ],
            }
            for name, url in _WEBHOOKS.items()
        ],
        "policies": [
            {
                "orgId": ORG_ID,
                "receiver": TICKETS,
                "group_by": ["grafana_folder", "alertname", "monitor", "segment"],
                "group_wait": "30s",
                "group_interval": "5m",
                "repeat_interval": "4h",
                "routes": [
                    {
                        "receiver": PAGER,
                        "object_matchers": [["severity", "=", "critical"]],
                        "repeat_interval": "1h",
                    },
                    {
                        "receiver": TICKETS,
                        "object_matchers": [["severity", "=", "warning"]],
                        "repeat_interval": "12h",
                    },
                ],
            }
        ],
    }
