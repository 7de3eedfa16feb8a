"""Read the dashboard's PromQL: shared by test_dashboard.py, the end-to-end test and the preview.

Grafana substitutes its variables before a query reaches Prometheus; these helpers do the
same with fixed stand-ins, so promtool and a real Prometheus can run every panel's query.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parents[1]
DASHBOARD_PATH = REPO / "dashboards" / "jobqueue.json"
PANELS_DOC_PATH = REPO / "dashboards" / "panels.md"
RULES_PATH = REPO / "alerts" / "jobqueue.rules.yml"

# Panels that are legitimately empty (no series) or zero in a healthy run; dashboards/panels.md
# names the scenario that makes each one non-empty, and a test keeps the two in step.
EMPTY_WHEN_HEALTHY = frozenset(
    {
        "Jobs stuck",
        "Active alerts",
        "Collection errors by reason",
        "Skipped collections",
        "Missing indexes",
        # The demo polls: no queue streams from a slot.
        "Replication slot WAL",
        "Slot gaps (1h)",
    }
)

# Stand-ins for Grafana's variables: durations Prometheus accepts, and a regex matching any
# value for the template variables (the same as their allValue).
DEFAULT_SUBSTITUTIONS: Mapping[str, str] = {
    "__rate_interval": "1m",
    "__interval": "1m",
    "__range": "1h",
}
ANY_VALUE = ".+"

_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)(?::\w+)?\]\]")


class PanelQuery(NamedTuple):
    """One target of one panel, variables substituted."""

    panel_id: int
    title: str
    expr: str
    expected_empty_when_healthy: bool


def load_dashboard(path: Path = DASHBOARD_PATH) -> dict[str, Any]:
    """The dashboard JSON as a dict."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def iter_panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows included, and the panels nested inside collapsed rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def substitute(expr: str, overrides: Mapping[str, str] | None = None) -> str:
    """Replace $var, ${var}, ${var:fmt} and [[var]] the way Grafana would, with stand-ins."""
    values = {**DEFAULT_SUBSTITUTIONS, **(overrides or {})}

    def replace(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g is not None)
        return values.get(name, ANY_VALUE)

    return _VARIABLE.sub(replace, expr)


def panel_queries(
    dashboard: Mapping[str, Any] | None = None, overrides: Mapping[str, str] | None = None
) -> list[PanelQuery]:
    """(panel id, title, expr, expected empty when healthy) for every target of every panel."""
    board = load_dashboard() if dashboard is None else dashboard
    return [
        PanelQuery(
            panel["id"],
            panel["title"],
            substitute(t["expr"], overrides),
            panel["title"] in EMPTY_WHEN_HEALTHY,
        )
        for panel in iter_panels(board)
        for t in panel.get("targets", [])
        if t.get("expr")
    ]


def variable_queries(
    dashboard: Mapping[str, Any] | None = None, overrides: Mapping[str, str] | None = None
) -> list[tuple[str, str]]:
    """(variable name, series selector) of every label_values() template variable."""
    board = load_dashboard() if dashboard is None else dashboard
    found = []
    for var in board["templating"]["list"]:
        if var.get("type") != "query":
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        match = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query)
        if match is None:
            raise ValueError(f"variable {var['name']}: not a label_values() query: {query}")
        found.append((var["name"], substitute(match.group(1), overrides)))
    return found


# Words in PromQL that look like identifiers but are not metric names.
_KEYWORDS = frozenset({
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "bool", "offset", "inf", "nan", "atan2",
})  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (label names, functions and keywords removed)."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges, subquery steps
    text = _GROUPING.sub(" ", text)  # label lists of by / on / group_left ...
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name, is_call = match.group(1), match.group(2)
        if is_call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names


def recording_rule_names(path: Path = RULES_PATH) -> set[str]:
    """Series names defined by the shipped recording rules (empty when the file is absent)."""
    if not path.exists():
        return set()
    import yaml  # only needed once the rules file exists

    data = yaml.safe_load(path.read_text()) or {}
    return {
        rule["record"]
        for group in data.get("groups", [])
        for rule in group.get("rules", [])
        if "record" in rule
    }


def known_metric_names() -> set[str]:
    """Names a dashboard may use: the exporter's series, recording rules, and ALERTS."""
    from exporter.metrics import exposed_metric_names

    return exposed_metric_names() | recording_rule_names() | {"ALERTS"}


def unknown_metric_names(exprs: list[str], known: set[str] | None = None) -> dict[str, set[str]]:
    """Expressions mapped to the metric names in them that nothing defines."""
    allowed = known_metric_names() if known is None else known
    return {e: bad for e in exprs if (bad := metric_names(e) - allowed)}


def promtool_rules_file(exprs: list[str]) -> str:
    """A rules file that records every expression, so `promtool check rules` parses them all."""
    rules = [{"record": f"dashboard:check:{i}", "expr": e} for i, e in enumerate(exprs)]
    return json.dumps({"groups": [{"name": "dashboard-check", "rules": rules}]}, indent=2)
