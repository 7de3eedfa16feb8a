"""Render a PNG preview of the dashboard's main panels from a real Prometheus.

    python dashboards/render_preview.py --prometheus http://127.0.0.1:9090 \
        --start 2024-05-01T10:00:00Z --end 2024-05-01T12:00:00Z --output docs/dashboard.png

The queries are the dashboard JSON's own (read through tests/dashboard_checks.py), run
through the HTTP API's query_range (a table's instant targets through query), so the picture
shows what Grafana would show; dashboards/preview_panels.py draws each kind of panel.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

# Run as a script, so the repository root is not on sys.path; the query extraction lives
# beside the tests that share it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dashboards.preview_panels import (
    Series,
    draw_bargauge,
    draw_stat,
    draw_table,
    draw_timeseries,
    utc,
)
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


def parse_time(text: str) -> float:
    """Unix seconds from a number or an ISO 8601 / RFC 3339 timestamp."""
    try:
        return float(text)
    except ValueError:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


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
