"""Writes every generated file of the monitoring stack from ``deploy/mixin/config.toml``.

    python -m deploy.generate            # (re)write the files in this checkout (make generate)
    python -m deploy.generate --check    # exit 1 and name each file that is stale
    python -m deploy.generate --out DIR  # write the tree under DIR instead

Generated: the Grafana dashboards, the Prometheus rule file, the Kubernetes PrometheusRule and the
Grafana alerting provisioning (rules, contact points, notification policy). See
docs/operations.md, "One configuration for the stack".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from deploy.mixin import dashboards, grafana_alerting, render
from deploy.mixin.alerts import alert_groups
from deploy.mixin.config import CONFIG_PATH, MixinConfig, MixinConfigError, load

REPO = Path(__file__).resolve().parents[1]

_RULES_HEADER = (
    "#\n"
    "# Grafana-managed twins of deploy/prometheus/alerts.yml, for teams that alert from Grafana:\n"
    "# same expressions (query A), severities, `for` and runbook links. Not mounted by\n"
    "# deploy/docker/compose.yml by default (Alertmanager notifies there; see its comment to\n"
    "# switch), at /etc/grafana/provisioning/alerting. Grafana does not expand\n"
    "# environment variables in annotations or query models, so their `$labels`/`$A` are safe.\n"
)
_NOTIFICATIONS_HEADER = (
    "#\n"
    "# EXAMPLE. Provisioned policies replace the organisation's whole notification policy tree:\n"
    "# drop this file if you route Grafana alerts elsewhere, and replace the example webhook URLs\n"
    "# with your pager and ticket integrations (the same split as deploy/alertmanager).\n"
)


def outputs(config: MixinConfig) -> dict[str, str]:
    """Repository-relative path -> file text, for every generated file."""
    groups = alert_groups(config)
    files = {
        f"grafana/dashboards/{name}": dashboards.render(config, build)
        for name, build in dashboards.DASHBOARDS.items()
    }
    files["deploy/prometheus/alerts.yml"] = render.prometheus_rules_file(config, groups)
    files["deploy/kubernetes/prometheusrule.yaml"] = render.prometheus_rule_manifest(groups)
    files["grafana/provisioning/alerting/rules.yaml"] = (
        render.GENERATED
        + _RULES_HEADER
        + render.dump(grafana_alerting.rules_document(config, groups))
    )
    files["grafana/provisioning/alerting/notifications.yaml"] = (
        render.GENERATED
        + _NOTIFICATIONS_HEADER
        + render.dump(grafana_alerting.notifications_document())
    )
    return files


def stale(config: MixinConfig, root: Path = REPO) -> list[str]:
    """The generated files under ``root`` that are missing or differ from what would be written."""
    return [
        path
        for path, text in outputs(config).items()
        if not (root / path).is_file() or (root / path).read_text() != text
    ]


def write(config: MixinConfig, root: Path = REPO) -> list[Path]:
    """Write every generated file under ``root``; returns the paths written."""
    written = []
    for path, text in outputs(config).items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        written.append(target)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m deploy.generate", description=__doc__)
    parser.add_argument("--config", type=Path, default=CONFIG_PATH, help="mixin configuration")
    parser.add_argument("--out", type=Path, default=REPO, help="root of the tree to write")
    parser.add_argument("--check", action="store_true", help="only report stale files")
    args = parser.parse_args(argv)
    try:
        config = load(args.config)
    except MixinConfigError as err:
        print(err, file=sys.stderr)
        return 2
    if args.check:
        bad = stale(config, args.out)
        for path in bad:
            print(f"stale: {path} (run `make generate`)", file=sys.stderr)
        return 1 if bad else 0
    for target in write(config, args.out):
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
