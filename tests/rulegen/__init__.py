"""Generate promtool unit tests of the shipped alerts from compact Python cases.

Each :class:`Case` feeds input series and expects one alert either to fire at a given time
(with its value, from which the annotations are expanded like Prometheus does) or to stay
silent at every listed time. ``python -m tests.rulegen`` writes the files under
alerts/tests/; tests/artefacts/test_rules.py checks the committed files equal the output.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from exporter.rules import rule_groups
from exporter.settings import AlertSettings

JOB = "jobqueue-exporter"
GROUPS = ["jobqueue-exporter.rules", "jobqueue-exporter.baselines", "jobqueue-exporter.alerts"]


def s(metric: str, values: str, **labels: str) -> tuple[str, str]:
    """One input series of queue q1 from exporter pod a, plus ``labels``."""
    base = {"job": JOB, "instance": "a", "queue": "q1"}
    base.update(labels)
    inner = ", ".join(f'{k}="{v}"' for k, v in base.items() if v != "")
    return (f"{metric}{{{inner}}}", values)


@dataclass
class Case:
    """Input series and what one alert does with them."""

    name: str
    alert: str
    series: list[tuple[str, str]]
    fire_at: str | None = None  # eval time at which the alert fires
    value: float | None = None  # its $value then
    values: dict[str, float] = field(default_factory=dict)  # $value by severity, for twins
    labels: dict[str, str] = field(default_factory=dict)  # labels besides the rule's own
    severities: tuple[str, ...] = ()  # which twins fire (default: every rule of the alert)
    silent_at: tuple[str, ...] = ()  # eval times at which the alert must not fire
    interval: str = "30s"
    quiet_at: tuple[str, ...] = ()  # eval times at which no alert may carry queue="q2"
    # (expression, eval time, its one sample's labels and value): recorded values checked
    samples: tuple[tuple[str, str, str, float], ...] = ()


def _go_float(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e21:
        return str(int(value))
    return repr(float(value))


def _humanize_duration(v: float) -> str:
    if v == 0 or math.isnan(v) or math.isinf(v):
        return f"{v:.4g}s"
    sign = "-" if v < 0 else ""
    v = abs(v)
    if v >= 1:
        n = int(v)
        days, hours, minutes, seconds = n // 86400, n // 3600 % 24, n // 60 % 60, n % 60
        if days:
            return f"{sign}{days}d {hours}h {minutes}m {seconds}s"
        if hours:
            return f"{sign}{hours}h {minutes}m {seconds}s"
        if minutes:
            return f"{sign}{minutes}m {seconds}s"
        return f"{sign}{v:.4g}s"
    return f"{sign}{v * 1000:.4g}ms"


def _humanize(v: float) -> str:
    if v == 0 or abs(v) >= 1:
        return f"{v:.4g}"
    return f"{v * 1000:.4g}m"


def _humanize1024(v: float) -> str:
    if abs(v) <= 1:
        return f"{v:.4g}"
    prefixes = ["", "ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"]
    unit = 0
    while abs(v) >= 1024 and unit < len(prefixes) - 1:
        v /= 1024
        unit += 1
    return f"{v:.4g}{prefixes[unit]}"


def expand(template: str, labels: dict[str, str], value: float) -> str:
    """The few Go-template forms the shipped annotations use, expanded like Prometheus."""

    def one(match: re.Match[str]) -> str:
        body = match.group(1).strip()
        if body.startswith("$labels."):
            return labels.get(body.removeprefix("$labels."), "")
        if body == "$value":
            return _go_float(value)
        fmt = re.fullmatch(r'\$value \| printf "%\.(\d)f"', body)
        if fmt:
            return f"{value:.{int(fmt.group(1))}f}"
        if body == "$value | humanizeDuration":
            return _humanize_duration(value)
        if body == "$value | humanize1024":
            return _humanize1024(value)
        if body == "$value | humanizePercentage":
            return _humanize(value * 100) + "%"
        raise ValueError(f"unknown template {body!r}")

    return re.sub(r"\{\{(.*?)\}\}", one, template)


def _rules(settings: AlertSettings) -> list[dict[str, Any]]:
    return [r for g in rule_groups(settings) for r in g["rules"] if "alert" in r]


def _expected(case: Case, settings: AlertSettings) -> list[dict[str, Any]]:
    assert case.value is not None or case.values, case.name
    out = []
    for rule in _rules(settings):
        if rule["alert"] != case.alert:
            continue
        if case.severities and rule["labels"]["severity"] not in case.severities:
            continue
        labels = {**rule["labels"], **case.labels}
        full = {"alertname": case.alert, **labels}
        value = case.values.get(labels["severity"], case.value)
        assert value is not None, case.name
        annotations = {k: expand(v, full, value) for k, v in rule["annotations"].items()}
        out.append({"exp_labels": labels, "exp_annotations": annotations})
    assert out, f"{case.name}: no rule {case.alert} {case.severities}"
    return out


def render_cases(
    cases: list[Case],
    header: str,
    rules: str = "../jobqueue.rules.yml",
    settings: Any = None,
    evaluation_interval: str = "30s",
) -> str:
    """A promtool test file of ``cases``."""
    settings = settings or AlertSettings()
    tests = []
    for case in cases:
        checks: list[dict[str, Any]] = [
            {"eval_time": t, "alertname": case.alert} for t in case.silent_at
        ]
        if case.fire_at is not None:
            checks.append(
                {
                    "eval_time": case.fire_at,
                    "alertname": case.alert,
                    "exp_alerts": _expected(case, settings),
                }
            )
        test: dict[str, Any] = {
            "name": case.name,
            "interval": case.interval,
            "input_series": [{"series": sel, "values": v} for sel, v in case.series],
            "alert_rule_test": checks,
        }
        # The healthy queue next to the incident: not one alert, pending or firing.
        exprs = [
            {"expr": 'ALERTS{queue="q2"}', "eval_time": t, "exp_samples": []} for t in case.quiet_at
        ]
        exprs += [
            {"expr": e, "eval_time": t, "exp_samples": [{"labels": labels, "value": v}]}
            for e, t, labels, v in case.samples
        ]
        if exprs:
            test["promql_expr_test"] = exprs
        tests.append(test)
    document = {
        "rule_files": [rules],
        "evaluation_interval": evaluation_interval,
        "group_eval_order": GROUPS,
        "tests": tests,
    }
    body = yaml.safe_dump(document, sort_keys=False, width=1000, allow_unicode=True)
    return header + body
