"""Where the rendered rules point and how often they run: selector, links, intervals.

AlertSettings (exporter/settings/alert_thresholds.py) adds every threshold to these; the split keeps
both modules short, and these fields come first in the ``alerts`` section.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.settings.declaration import setting
from exporter.settings.kinds import Kind
from exporter.vocabulary import DASHBOARD_URL, RUNBOOK_BASE_URL


@dataclass(frozen=True)
class RenderSettings:
    """The rules' job selector, their links and the evaluation intervals of their groups."""

    selector: str = setting(
        Kind.STRING,
        'job="jobqueue-exporter"',
        "Label selector added to every rule expression, matching the exporter's scrape job.",
    )
    runbook_base_url: str = setting(
        Kind.STRING,
        RUNBOOK_BASE_URL,
        "Base URL of the runbooks; each runbook_url is this plus `#` and the lowercased alert "
        "name.",
    )
    dashboard_url: str = setting(
        Kind.STRING,
        DASHBOARD_URL,
        "URL of the Grafana dashboard; each alert's dashboard_url is this plus the alert's "
        "namespace, job, queue and job_type as dashboard variables.",
    )
    evaluation_interval: float = setting(
        Kind.DURATION,
        30.0,
        "Evaluation interval of the rendered rule groups.",
    )
    baseline_evaluation_interval: float = setting(
        Kind.DURATION,
        300.0,
        "Evaluation interval of the group that records the slow week-old baselines.",
    )
    gap_window: float = setting(
        Kind.DURATION,
        300.0,
        "Gauge alerts read max_over_time/min_over_time over this window, so a failed scrape "
        "or a withdrawn gauge does not restart their `for:`.",
    )
