"""Grafana's JSON for the four panel kinds the dashboard uses: stat, time series, table, bar gauge.

Each kind is a small function of a title, a description, a unit, the queries and a
:class:`Look` (width, thresholds, links and the other optional settings); ids and grid
positions are filled in by build_dashboard.py as it lays the rows out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exporter.rules.promql import runbook_url
from exporter.settings import AlertSettings

Json = dict[str, Any]
DATASOURCE: Json = {"type": "prometheus", "uid": "${datasource}"}


def steps(*pairs: tuple[str, float | None]) -> Json:
    """Absolute thresholds, the first one with value None as Grafana wants."""
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in pairs]}


GREEN_ONLY = steps(("green", None))
# A count that should be 0: anything above it is red.
COUNT = steps(("green", None), ("red", 1))


def runbook(*alerts: str) -> tuple[Json, ...]:
    """Panel links to the runbook section of each alert the panel explains."""
    return tuple(
        {"title": f"Runbook: {a}", "url": runbook_url(AlertSettings(), a), "targetBlank": True}
        for a in alerts
    )


def target(expr: str, legend: str = "__auto", *, instant: bool = False) -> Json:
    """One Prometheus query of a panel (refId is filled in by the panel)."""
    return {
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": expr,
        "instant": instant,
        "legendFormat": legend,
        "range": not instant,
    }


@dataclass(frozen=True)
class Look:
    """How a panel is drawn, beyond its texts and queries; only width is always needed."""

    width: int
    links: tuple[Json, ...] = ()
    thresholds: Json | None = None
    mappings: tuple[Json, ...] = ()
    # A count with no series means nothing to count: show this rather than "No data".
    no_value: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    stacked: bool = False
    bars: bool = False
    interval: str | None = None


_REDUCE = {"calcs": ["lastNotNull"], "fields": "", "values": False}


def _panel(
    kind: str, title: str, description: str, unit: str, queries: list[Json], look: Look
) -> Json:
    """The fields every kind shares; the kind's function adds its options."""
    defaults: Json = {
        "unit": unit,
        "thresholds": look.thresholds or GREEN_ONLY,
        "mappings": list(look.mappings),
        "color": {"mode": "thresholds" if kind != "timeseries" else "palette-classic"},
    }
    for key, value in (("noValue", look.no_value), ("min", look.minimum), ("max", look.maximum)):
        if value is not None:
            defaults[key] = value
    result: Json = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {},
        "links": list(look.links),
        "targets": [dict(t, refId=chr(ord("A") + i)) for i, t in enumerate(queries)],
    }
    if look.interval is not None:
        result["interval"] = look.interval
    result["_width"] = look.width
    return result


def stat(title: str, description: str, unit: str, queries: list[Json], look: Look) -> Json:
    """A single number per series, its background coloured by the thresholds."""
    result = _panel("stat", title, description, unit, queries, look)
    result["options"] = {
        "reduceOptions": _REDUCE,
        "colorMode": "background",
        "graphMode": "area",
        "justifyMode": "auto",
        "orientation": "auto",
        "textMode": "auto",
    }
    return result


def timeseries(title: str, description: str, unit: str, queries: list[Json], look: Look) -> Json:
    """Lines (or bars), optionally stacked, with a legend below."""
    result = _panel("timeseries", title, description, unit, queries, look)
    result["fieldConfig"]["defaults"]["custom"] = {
        "drawStyle": "bars" if look.bars else "line",
        "fillOpacity": 80 if look.bars else (30 if look.stacked else 10),
        "lineWidth": 1,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"group": "A", "mode": "normal" if look.stacked else "none"},
    }
    result["options"] = {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    return result


def table(title: str, description: str, unit: str, queries: list[Json], look: Look) -> Json:
    """One row per label set: the instant queries merged, one column each."""
    result = _panel("table", title, description, unit, queries, look)
    result["options"] = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}}
    result["transformations"] = [
        {"id": "merge", "options": {}},
        {"id": "organize", "options": {"excludeByName": {"Time": True}}},
    ]
    for query in result["targets"]:
        query["format"] = "table"
    return result


def bargauge(title: str, description: str, unit: str, queries: list[Json], look: Look) -> Json:
    """Horizontal gradient bars, one per series."""
    result = _panel("bargauge", title, description, unit, queries, look)
    result["options"] = {
        "reduceOptions": _REDUCE,
        "displayMode": "gradient",
        "orientation": "horizontal",
        "showUnfilled": True,
    }
    return result
