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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# Run as a script, so the repository root is not on sys.path; the query extraction lives
# beside the tests that share it.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests import dashboard_checks

# The panels in the preview, in reading order (3 x 3).
PREVIEW_PANELS = (
    "Database reachable",
    "Jobs stuck",
    "Oldest runnable wait",
    "Cost (1h)",
    "Enqueued / completed / failed per second",
    "Queue depth by status",
    "Wait time p50 / p95 / p99",
    "Failed attempts by reason",
    "Hourly cost by component",
)
POINTS = 200  # about what Grafana asks for in a panel this wide


class PreviewError(Exception):
    """Prometheus could not be queried, or answered with an error."""


@dataclass(frozen=True)
class Series:
    """One result series of one target: its legend and its points."""

    legend: str
    times: list[float]
    values: list[float]


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
    params = urllib.parse.urlencode(
        {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    )
    url = f"{base_url.rstrip('/')}/api/v1/query_range?{params}"
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


def panel_series(
    panel: dict[str, Any], base_url: str, start: float, end: float, scrape_interval: float
) -> list[Series]:
    """Run every target of a panel the way Grafana would over [start, end]."""
    min_step = parse_duration(panel["interval"]) if panel.get("interval") else scrape_interval
    step = max(min_step, (end - start) / POINTS)
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


def draw_timeseries(ax: Any, panel: dict[str, Any], series: list[Series]) -> None:
    """Lines, or stacked bars when the panel stacks bars (the hourly cost chart)."""
    unit = panel["fieldConfig"]["defaults"]["unit"]
    custom = panel["fieldConfig"]["defaults"].get("custom", {})
    if not series:
        ax.text(
            0.5,
            0.5,
            "no data",
            ha="center",
            va="center",
            fontsize=16,
            color="grey",
            transform=ax.transAxes,
        )
        ax.set_xticks([])
        ax.set_yticks([])
        return
    if custom.get("drawStyle") == "bars":
        times = sorted({t for s in series for t in s.times})
        bottom = [0.0] * len(times)
        width = (times[1] - times[0]) * 0.8 if len(times) > 1 else 1.0
        for s in series:
            by_time = dict(zip(s.times, s.values, strict=True))
            heights = [by_time.get(t, 0.0) for t in times]
            ax.bar(
                [utc(t) for t in times],
                heights,
                bottom=bottom,
                width=width / 86400,
                label=s.legend,
                align="center",
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
    ax.yaxis.set_major_formatter(lambda v, _pos: format_value(v, unit))
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6, loc="upper left", ncol=2)
    ax.grid(alpha=0.3)


def render_preview(
    base_url: str, start: float, end: float, output: Path, scrape_interval: float = 15.0
) -> dict[str, int]:
    """Draw the preview grid to output; returns the number of series each panel got."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    board = dashboard_checks.load_dashboard()
    by_title = {p["title"]: p for p in dashboard_checks.iter_panels(board)}
    fig, axes = plt.subplots(3, 3, figsize=(16, 10))
    counts = {}
    for ax, title in zip(axes.flat, PREVIEW_PANELS, strict=True):
        panel = by_title[title]
        series = panel_series(panel, base_url, start, end, scrape_interval)
        counts[title] = len(series)
        ax.set_title(title, fontsize=10, loc="left")
        if panel["type"] == "stat":
            draw_stat(ax, panel, series)
        else:
            draw_timeseries(ax, panel, series)
            ax.xaxis.set_major_formatter(
                mdates.DateFormatter(  # type: ignore[no-untyped-call]
                    "%H:%M" if end - start > 900 else "%H:%M:%S"
                )
            )
    span = f"{utc(start):%Y-%m-%d %H:%M} - {utc(end):%H:%M} UTC"
    fig.suptitle(f"{board['title']}  ({span})", fontsize=14)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=90)
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
    args = parser.parse_args(argv)
    start, end = parse_time(args.start), parse_time(args.end)
    if end <= start:
        parser.error("--end must be after --start")
    try:
        counts = render_preview(args.prometheus, start, end, args.output, args.scrape_interval)
    except PreviewError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for title, count in counts.items():
        print(f"{count}\t{title}")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
