"""How the preview draws each kind of Grafana panel: stat, time series, table, bar gauge.

render_preview.py runs the panels' queries; this module turns their series into pictures,
with the panel's own units, value mappings and threshold colours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Series:
    """One result series of one target: its legend and its points."""

    legend: str
    times: list[float]
    values: list[float]
    labels: dict[str, str] = field(default_factory=dict)


def utc(seconds: float) -> datetime:
    """A Unix time as an aware UTC datetime (matplotlib's date axis wants datetimes)."""
    return datetime.fromtimestamp(seconds, tz=UTC)


def format_value(value: float, unit: str) -> str:
    """A number as Grafana would print it in that unit, roughly."""
    if math.isnan(value):
        return "NaN"
    if unit == "currencyUSD":
        return f"${value:,.2f}"
    if unit == "s":
        for size, suffix in ((86400, "d"), (3600, "h"), (60, "min")):
            if abs(value) >= size:
                return f"{value / size:.1f} {suffix}"
        return f"{value:.1f} s" if value >= 1 else f"{value * 1000:.0f} ms"
    if unit == "percentunit":
        return f"{value * 100:.1f}%"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.3g}"


def mapped_text(panel: dict[str, Any], value: float) -> str:
    """The value mapping's text for a value (e.g. 1 -> Up), else the formatted number."""
    for mapping in panel["fieldConfig"]["defaults"].get("mappings", []):
        option = mapping.get("options", {}).get(f"{value:g}")
        if mapping.get("type") == "value" and option:
            return str(option["text"])
    return format_value(value, panel["fieldConfig"]["defaults"]["unit"])


def threshold_color(panel: dict[str, Any], value: float) -> str:
    """The colour of the last threshold step the value reaches."""
    color = "green"
    for step in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]:
        if step["value"] is None or value >= step["value"]:
            color = step["color"]
    return {"green": "#2e7d32", "orange": "#ef6c00", "red": "#c62828"}.get(color, color)


def draw_stat(ax: Any, panel: dict[str, Any], series: list[Series]) -> None:
    """Big numbers, one per series, coloured by the panel's thresholds."""
    ax.set_axis_off()
    lasts = [
        (s.legend, next((v for v in reversed(s.values) if not math.isnan(v)), None)) for s in series
    ]
    values = [(name, v) for name, v in lasts if v is not None]
    no_value = panel["fieldConfig"]["defaults"].get("noValue")
    if not values and no_value is not None:
        values = [("", float(no_value))]
    if not values:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", fontsize=16, color="grey")
        return
    for i, (name, value) in enumerate(values[:4]):
        y = 1 - (i + 0.5) / min(len(values), 4)
        ax.text(
            0.5,
            y,
            mapped_text(panel, value),
            ha="center",
            va="center",
            fontsize=28 if len(values) == 1 else 18,
            fontweight="bold",
            color=threshold_color(panel, value),
        )
        if len(values) > 1:
            ax.text(0.5, y - 0.14, name, ha="center", va="center", fontsize=8, color="grey")


def draw_timeseries(
    ax: Any, panel: dict[str, Any], series: list[Series], start: float, end: float, step: float
) -> None:
    """Lines, or stacked bars when the panel stacks bars (the hourly cost chart).

    A bar stands for the increase over the step before its time, so it spans [t - step, t].
    """
    unit = panel["fieldConfig"]["defaults"]["unit"]
    custom = panel["fieldConfig"]["defaults"].get("custom", {})
    if not series:
        no_data(ax)
        return
    if custom.get("drawStyle") == "bars":
        times = sorted({t for s in series for t in s.times})
        bottom = [0.0] * len(times)
        for s in series:
            by_time = dict(zip(s.times, s.values, strict=True))
            heights = [by_time.get(t, 0.0) for t in times]
            ax.bar(
                [utc(t - step) for t in times],
                heights,
                bottom=bottom,
                width=step / 86400,
                label=s.legend,
                align="edge",
            )
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    else:
        for s in series[:12]:
            # A series of one or two points is invisible as a bare line.
            ax.plot(
                [utc(t) for t in s.times],
                s.values,
                label=s.legend,
                linewidth=1.2,
                marker="o" if len(s.times) < 3 else None,
                markersize=3,
            )
    ax.set_xlim(utc(start), utc(end))
    ax.yaxis.set_major_formatter(lambda v, _pos: format_value(v, unit))
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6, loc="upper left", ncol=2)
    ax.grid(alpha=0.3)


def no_data(ax: Any) -> None:
    """Grafana's "No data" in an empty panel."""
    ax.text(
        0.5, 0.5, "no data", ha="center", va="center", fontsize=16, color="grey",
        transform=ax.transAxes,
    )  # fmt: skip
    ax.set_xticks([])
    ax.set_yticks([])


def column_unit(panel: dict[str, Any], column: str) -> str:
    """A table column's unit: its byName override, else the panel's default."""
    for override in panel["fieldConfig"].get("overrides", []):
        matcher = override.get("matcher", {})
        if matcher.get("id") == "byName" and matcher.get("options") == column:
            for prop in override.get("properties", []):
                if prop.get("id") == "unit":
                    return str(prop["value"])
    return str(panel["fieldConfig"]["defaults"]["unit"])


def draw_table(ax: Any, panel: dict[str, Any], series: list[Series]) -> None:
    """The merge of the instant targets: one row per job type, one column per target."""
    ax.set_axis_off()
    columns = list(dict.fromkeys(s.legend for s in series))
    rows: dict[str, dict[str, float]] = {}
    for s in series:
        rows.setdefault(s.labels.get("job_type", ""), {})[s.legend] = s.values[-1]
    if not rows:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", fontsize=16, color="grey")
        return
    cells = [
        [job_type]
        + [format_value(values[c], column_unit(panel, c)) if c in values else "" for c in columns]
        for job_type, values in sorted(rows.items())
    ]
    table = ax.table(
        cellText=cells, colLabels=["job_type", *columns], loc="upper center", cellLoc="right"
    )
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    table.scale(1, 1.4)


def draw_bargauge(ax: Any, panel: dict[str, Any], series: list[Series]) -> None:
    """Horizontal bars between the panel's min and max, coloured by its thresholds."""
    defaults = panel["fieldConfig"]["defaults"]
    lasts = [(s.legend, s.values[-1]) for s in series if s.values and not math.isnan(s.values[-1])]
    if not lasts:
        no_data(ax)
        return
    lasts.sort()
    names = [name for name, _ in lasts]
    values = [value for _, value in lasts]
    low, high = defaults.get("min", 0), defaults.get("max", max(values))
    ax.barh(names, [high - low] * len(values), left=low, color="#eeeeee")
    ax.barh(names, [v - low for v in values], left=low,
            color=[threshold_color(panel, v) for v in values])  # fmt: skip
    for name, value in lasts:
        ax.text(high, name, " " + format_value(value, defaults["unit"]), va="center", fontsize=8)
    ax.set_xlim(low, high * 1.25)
    ax.invert_yaxis()
    ax.tick_params(labelsize=8)
    ax.set_xticks([])
