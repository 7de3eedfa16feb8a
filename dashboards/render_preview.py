"""Render a PNG preview of the dashboard's main panels from a real Prometheus.

    python dashboards/render_preview.py --prometheus http://127.0.0.1:9090 \
        --start 2024-05-01T10:00:00Z --end 2024-05-01T12:00:00Z --output docs/dashboard.png

The queries are the dashboard JSON's own (read through tests/dashboard_checks.py), run
through the HTTP API's query_range, so the picture shows what Grafana would show.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Run as a script, so the repository root is not on sys.path; the query extraction lives
# beside the tests that share it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import dashboard_checks

# The panels in the preview, in reading order, each with its grid columns (of 12) per row: the
# health stats, the per-type table with its SLO panels, then flow, latency, failures and cost.
PREVIEW_ROWS = (
    (
        ("Database reachable", 2),
        ("Jobs stuck", 2),
        ("Oldest runnable wait", 2),
        ("Dead letters (1h)", 2),
        ("Cost (1h)", 2),
        ("Active alerts", 2),
    ),
    (("Job types", 6), ("SLO burn rate by job type (1h)", 3), ("Error budget left (1d)", 3)),
    (
        ("Enqueued / completed / failed per second", 4),
        ("Queue depth by status", 4),
        ("Wait time p50 / p95 / p99", 4),
    ),
    (
        ("Failed attempts by reason", 4),
        ("Collection errors by reason", 4),
        ("Hourly cost by component", 4),
    ),
)
PREVIEW_PANELS = tuple(title for row in PREVIEW_ROWS for title, _ in row)
POINTS = 200  # about what Grafana asks for in a panel this wide


class PreviewError(Exception):
    """Prometheus could not be queried, or answered with an error."""


@dataclass(frozen=True)
class Series:
    """One result series of one target: its legend and its points."""

    legend: str
    times: list[float]
    values: list[float]
    labels: dict[str, str] = field(default_factory=dict)


def parse_time(text: str) -> float:
    """Unix seconds from a number or an ISO 8601 / RFC 3339 timestamp."""
    try:
        return float(text)
    except ValueError:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def utc(seconds: float) -> datetime:
    """A Unix time as an aware UTC datetime (matplotlib's date axis wants datetimes)."""
    return datetime.fromtimestamp(seconds, tz=UTC)


def parse_duration(text: str) -> float:
    """Seconds from a Grafana interval such as "1h", "30s" or "15"."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)?", text.strip())
    if match is None:
        raise ValueError(f"not a duration: {text!r}")
    factor = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2) or "s"]
    return float(match.group(1)) * factor


def query_range(base_url: str, expr: str, start: float, end: float, step: float) -> list[Any]:
    """The matrix Prometheus returns for one expression."""
    params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    return api(base_url, "query_range", params, expr)


def query_instant(base_url: str, expr: str, time: float) -> list[Any]:
    """The vector Prometheus returns for one expression at one time (a table's query)."""
    return api(base_url, "query", {"query": expr, "time": f"{time:.3f}"}, expr)


def api(base_url: str, endpoint: str, params: dict[str, str], expr: str) -> list[Any]:
    """The result of one query API call; PreviewError when it fails."""
    url = f"{base_url.rstrip('/')}/api/v1/{endpoint}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            body = json.load(response)
    except OSError as exc:
        raise PreviewError(f"query_range failed for {expr!r}: {exc}") from exc
    if body.get("status") != "success":
        raise PreviewError(f"Prometheus error for {expr!r}: {body.get('error')}")
    result: list[Any] = body["data"]["result"]
    return result


def legend(template: str, labels: dict[str, str]) -> str:
    """Apply a Grafana legend template ({{label}}) to a series' labels."""
    if not template or template == "__auto":
        return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "value"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


def panel_step(panel: dict[str, Any], start: float, end: float, scrape_interval: float) -> float:
    """The step Grafana would query the panel with: its min interval, or range / points."""
    min_step = parse_duration(panel["interval"]) if panel.get("interval") else scrape_interval
    return max(min_step, (end - start) / POINTS)


def panel_series(
    panel: dict[str, Any], base_url: str, start: float, end: float, scrape_interval: float
) -> list[Series]:
    """Run every target of a panel the way Grafana would over [start, end].

    A table's instant targets are evaluated once at end; their series have one point.
    """
    step = panel_step(panel, start, end, scrape_interval)
    rate_interval = max(step + scrape_interval, 4 * scrape_interval)
    overrides = {
        "__interval": f"{step:g}s",
        "__rate_interval": f"{rate_interval:g}s",
        "__range": f"{max(end - start, 1):.0f}s",
    }
    # Evaluate at end, end - step, ... so a range shorter than the step still gets a point.
    first = end - math.floor((end - start) / step) * step
    found = []
    for target in panel["targets"]:
        expr = dashboard_checks.substitute(target["expr"], overrides)
        if target.get("instant") and not target.get("range"):
            for item in query_instant(base_url, expr, end):
                name = legend(target.get("legendFormat", ""), item["metric"])
                found.append(Series(name, [end], [float(item["value"][1])], item["metric"]))
            continue
        for item in query_range(base_url, expr, first, end, step):
            points = [(float(t), float(v)) for t, v in item["values"]]
            found.append(
                Series(
                    legend(target.get("legendFormat", ""), item["metric"]),
                    [t for t, _ in points],
                    [v for _, v in points],
                )
            )
    return found


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


def render_preview(
    base_url: str,
    start: float,
    end: float,
    output: Path,
    scrape_interval: float = 15.0,
    dashboard: Path = dashboard_checks.DASHBOARD_PATH,
) -> dict[str, int]:
    """Draw the preview grid to output; returns the number of series each panel got."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    board = dashboard_checks.load_dashboard(dashboard)
    by_title = {p["title"]: p for p in dashboard_checks.iter_panels(board)}
    fig = plt.figure(figsize=(18, 15))
    grid = fig.add_gridspec(len(PREVIEW_ROWS), 12, height_ratios=[0.55, 1.2, 1, 1])
    counts = {}
    for row, panels in enumerate(PREVIEW_ROWS):
        column = 0
        for title, width in panels:
            ax = fig.add_subplot(grid[row, column : column + width])
            column += width
            panel = by_title[title]
            series = panel_series(panel, base_url, start, end, scrape_interval)
            counts[title] = len(series)
            ax.set_title(title, fontsize=10, loc="left")
            if panel["type"] == "stat":
                draw_stat(ax, panel, series)
            elif panel["type"] == "table":
                draw_table(ax, panel, series)
            elif panel["type"] == "bargauge":
                draw_bargauge(ax, panel, series)
            else:
                step = panel_step(panel, start, end, scrape_interval)
                draw_timeseries(ax, panel, series, start, end, step)
                ax.xaxis.set_major_formatter(
                    mdates.DateFormatter(  # type: ignore[no-untyped-call]
                        "%H:%M" if end - start > 900 else "%H:%M:%S"
                    )
                )
    span = f"{utc(start):%Y-%m-%d %H:%M} - {utc(end):%H:%M} UTC"
    fig.suptitle(f"{board['title']}  ({span})", fontsize=14)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=80)
    plt.close(fig)
    return counts


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; prints one line per panel with its series count."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prometheus", required=True, help="base URL, e.g. http://127.0.0.1:9090")
    parser.add_argument("--start", required=True, help="unix seconds or RFC 3339")
    parser.add_argument("--end", required=True, help="unix seconds or RFC 3339")
    parser.add_argument("--output", required=True, type=Path)
    parser.add_argument(
        "--scrape-interval",
        type=float,
        default=15.0,
        help="seconds, as set on the Grafana data source (for $__rate_interval)",
    )
    parser.add_argument(
        "--dashboard",
        type=Path,
        default=dashboard_checks.DASHBOARD_PATH,
        help="the dashboard JSON to draw (default: dashboards/jobqueue.json)",
    )
    args = parser.parse_args(argv)
    start, end = parse_time(args.start), parse_time(args.end)
    if end <= start:
        parser.error("--end must be after --start")
    try:
        counts = render_preview(
            args.prometheus, start, end, args.output, args.scrape_interval, args.dashboard
        )
    except PreviewError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for title, count in counts.items():
        print(f"{count}\t{title}")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
