"""The rule groups as YAML: a Prometheus rule file or a Prometheus Operator PrometheusRule."""

from __future__ import annotations

from typing import Any

import yaml

from exporter.rules.alerting import alerting_rules
from exporter.rules.cost import baseline_rules
from exporter.rules.promql import (
    ALERTING_GROUP,
    BASELINE_GROUP,
    HEADER,
    RECORDING_GROUP,
    format_duration,
)
from exporter.rules.recording import recording_rules
from exporter.rules.slo import slo_recording_rules
from exporter.settings import AlertSettings


def rule_groups(alerts: AlertSettings) -> list[dict[str, Any]]:
    """The recording group, the slow baseline group and the alerting group.

    The week-old baselines change slowly and read long windows, so their group runs at the
    longer ``baseline_evaluation_interval``.
    """
    interval = format_duration(alerts.evaluation_interval)
    slow = format_duration(alerts.baseline_evaluation_interval)
    recording = recording_rules(alerts) + slo_recording_rules(alerts)
    return [
        {"name": RECORDING_GROUP, "interval": interval, "rules": recording},
        {"name": BASELINE_GROUP, "interval": slow, "rules": baseline_rules(alerts)},
        {"name": ALERTING_GROUP, "interval": interval, "rules": alerting_rules(alerts)},
    ]


class _Dumper(yaml.SafeDumper):
    """A YAML dumper that writes multi-line strings as ``|`` blocks and indents lists."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def _dump(document: dict[str, Any]) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True)


def render_rules(alerts: AlertSettings) -> str:
    """YAML text of a Prometheus rule file with the recording and alerting groups."""
    return HEADER + _dump({"groups": rule_groups(alerts)})


def render_prometheus_rule(
    alerts: AlertSettings, name: str = "jobqueue-exporter", namespace: str | None = None
) -> str:
    """The same rule groups wrapped in a Prometheus Operator ``PrometheusRule`` resource."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = {
        "app.kubernetes.io/name": "jobqueue-exporter",
        "app.kubernetes.io/component": "alerting-rules",
        "app.kubernetes.io/part-of": "jobqueue",
        # kube-prometheus-stack's default ruleSelector matches the Helm release label.
        "release": "kube-prometheus-stack",
    }
    document = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata,
        "spec": {"groups": rule_groups(alerts)},
    }
    return HEADER + _dump(document)
