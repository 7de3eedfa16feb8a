"""Generate dashboards/jobqueue.json, the Grafana dashboard "Job queue / Overview".

The JSON is committed; this script is its source, and tests/artefacts/test_dashboard.py fails
when the two differ. Run ``python dashboards/build_dashboard.py`` after editing a panel: the
panel kinds are in grafana.py, the shared PromQL in queries.py, the rows in rows/.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

# Run as a script: the repository root is not on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dashboards.grafana import DATASOURCE, Json
from dashboards.rows.health import health_row, types_row
from dashboards.rows.logical import slot_row
from dashboards.rows.operations import capacity_row, cost_row, exporter_row
from dashboards.rows.traffic import failures_row, flow_row, latency_row
from exporter.vocabulary import RUNBOOK_BASE_URL

__all__ = ["RUNBOOK_BASE_URL", "build_dashboard", "render"]

OUTPUT = Path(__file__).with_name("jobqueue.json")
UID = "jobqueue-exporter"
TITLE = "Job queue / Overview"

# Each row: its title, its panels' height and the function that makes its panels.
ROWS: tuple[tuple[str, int, Callable[[], list[Json]]], ...] = (
    ("Health at a glance", 5, health_row),
    ("Job types and SLO", 8, types_row),
    ("Flow", 8, flow_row),
    ("Latency", 8, latency_row),
    ("Failures", 8, failures_row),
    ("Cost", 8, cost_row),
    ("Exporter", 7, exporter_row),
    ("Capacity, leases and collections", 7, capacity_row),
    ("Logical counting", 7, slot_row),
)


def variables() -> list[Json]:
    """The datasource picker and the instance / job_type filters."""

    def query_var(name: str, label: str, query: str) -> Json:
        return {
            "type": "query",
            "name": name,
            "label": label,
            "datasource": DATASOURCE,
            "definition": query,
            "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
            "refresh": 2,
            "multi": True,
            "includeAll": True,
            "allValue": ".+",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "options": [],
            "regex": "",
            "sort": 1,
            "hide": 0,
        }

    return [
        {
            "type": "datasource",
            "name": "datasource",
            "label": "Data source",
            "query": "prometheus",
            "current": {},
            "options": [],
            "refresh": 1,
            "regex": "",
            "hide": 0,
        },
        query_var("job", "Job", "label_values(jobqueue_up, job)"),
        query_var("queue", "Queue", 'label_values(jobqueue_up{job=~"$job"}, queue)'),
        query_var("instance", "Instance", "label_values(jobqueue_up, instance)"),
        query_var("job_type", "Job type", "label_values(jobqueue_jobs, job_type)"),
    ]


def build_dashboard() -> Json:
    """The whole dashboard as a JSON-ready dict, ids and positions assigned in order."""
    panels: list[Json] = []
    y = 0
    for row_title, height, make in ROWS:
        panels.append(
            {
                "type": "row",
                "title": row_title,
                "id": len(panels) + 1,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        x = 0
        for p in make():
            width = p.pop("_width")
            panels.append(
                {"id": len(panels) + 1, "gridPos": {"h": height, "w": width, "x": x, "y": y}, **p}
            )
            x += width
        if x != 24:
            raise ValueError(f"row {row_title!r} is {x} columns wide, not 24")
        y += height
    return {
        "id": None,
        "uid": UID,
        "title": TITLE,
        "description": "Is the job queue healthy, and what is it costing? Metrics from "
        "jobqueue-exporter.",
        "tags": ["jobqueue", "jobqueue-exporter", "postgresql"],
        "timezone": "utc",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "weekStart": "",
        # Firing jobqueue alerts of the selected queues, as annotations on every panel.
        "annotations": {
            "list": [
                {
                    "datasource": DATASOURCE,
                    "enable": True,
                    "expr": (
                        'ALERTS{alertstate="firing", component="jobqueue", job=~"$job", '
                        'queue=~"$queue|"}'
                    ),
                    "iconColor": "red",
                    "name": "JobQueue alerts",
                    "step": "60s",
                    "tagKeys": "severity,job_type",
                    "titleFormat": "{{alertname}}",
                    "textFormat": "{{queue}} {{job_type}}",
                    "useValueForTime": False,
                }
            ]
        },
        "links": [
            {
                "title": "Runbooks",
                "type": "link",
                "url": RUNBOOK_BASE_URL,
                "icon": "doc",
                "targetBlank": True,
                "tooltip": "What to do for each alert",
                "asDropdown": False,
                "includeVars": False,
                "keepTime": False,
                "tags": [],
            },
        ],
        "templating": {"list": variables()},
        "panels": panels,
    }


def render() -> str:
    """The dashboard as the exact text committed in jobqueue.json."""
    return json.dumps(build_dashboard(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Write jobqueue.json, or with --check exit 1 when it is out of date."""
    text = render()
    if "--check" in argv:
        return 0 if OUTPUT.read_text() == text else 1
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
