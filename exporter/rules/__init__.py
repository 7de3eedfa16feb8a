"""Render the shipped Prometheus recording and alerting rules from the configured thresholds.

The rules are built as plain data and dumped with PyYAML, so the committed
``alerts/jobqueue.rules.yml`` is exactly ``render_rules(AlertSettings())`` and a test can
prove it. Every fact that comes from the database is deduplicated across exporter replicas
with ``max without(instance, pod)``: replicas read the same table, so they report the
same gauges and count the same transitions (counters of a younger replica are only smaller).

``promql`` holds the building blocks, ``recording`` and ``alerting`` the two rule groups,
``render`` the YAML documents.
"""

from exporter.rules.alerting import alerting_rules
from exporter.rules.promql import (
    BLINDING_ALERTS,
    HEALTH_ALERTS,
    format_duration,
    runbook_url,
    selector_labels,
)
from exporter.rules.recording import recording_rules
from exporter.rules.render import (
    DEFAULT_RULE_LABELS,
    parse_rule_labels,
    render_prometheus_rule,
    render_rules,
    rule_groups,
)

__all__ = [
    "BLINDING_ALERTS",
    "DEFAULT_RULE_LABELS",
    "HEALTH_ALERTS",
    "alerting_rules",
    "format_duration",
    "parse_rule_labels",
    "recording_rules",
    "render_prometheus_rule",
    "render_rules",
    "rule_groups",
    "runbook_url",
    "selector_labels",
]
