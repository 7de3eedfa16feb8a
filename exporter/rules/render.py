"""The rule groups as YAML: a Prometheus rule file or a Prometheus Operator PrometheusRule."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
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
from exporter.vocabulary import PROJECT

# kube-prometheus-stack's default ruleSelector matches its Helm release label; other release
# names need --prometheusrule.label release=<name>.
DEFAULT_RULE_LABELS = {"release": "kube-prometheus-stack"}
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


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


def parse_rule_labels(values: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` texts as Kubernetes labels; ValueError names the first malformed one."""
    labels: dict[str, str] = {}
    for text in values:
        key, sep, value = text.partition("=")
        prefix, _, name = key.rpartition("/")
        valid = (
            sep
            and _LABEL_NAME.fullmatch(name)
            and (not prefix or _LABEL_PREFIX.fullmatch(prefix))
            and (not value or _LABEL_NAME.fullmatch(value))
        )
        if not valid:
            raise ValueError(
                f"{text!r} is not KEY=VALUE with a Kubernetes label key and value "
                "(alphanumerics, '-', '_', '.', at most 63 characters; the key may have a "
                "DNS prefix and '/')"
            )
        labels[key] = value
    return labels


def render_prometheus_rule(
    alerts: AlertSettings,
    name: str = PROJECT,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> str:
    """The same rule groups wrapped in a Prometheus Operator ``PrometheusRule`` resource.

    ``labels`` (default ``release: kube-prometheus-stack``) are added to the resource's own
    labels: the Prometheus' ruleSelector must match them.
    """
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata["labels"] = {
        "app.kubernetes.io/name": PROJECT,
        "app.kubernetes.io/component": "alerting-rules",
        "app.kubernetes.io/part-of": "jobqueue",
        **(DEFAULT_RULE_LABELS if labels is None else labels),
    }
    document = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata,
        "spec": {"groups": rule_groups(alerts)},
    }
    return HEADER + _dump(document)
