"""Alerting rules: every shipped alert, its thresholds and for: taken from the settings.

Each alert family is one small function returning the keyword arguments of :func:`_alert`
(``gauges`` here, the counter families in ``flow``, the SLO, cost and health families in their
own modules). Queue alerts keep every label of their series (job, namespace, queue, job_type):
nothing is aggregated across queues. Gauge alerts read ``max_over_time`` over ``gap_window`` so
that a failed scrape or a withdrawn gauge does not restart ``for:``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from exporter.rules.cost import budget_alert_specs, cost_alert_specs
from exporter.rules.flow import (
    crash_storm_specs,
    dead_letter_growing_specs,
    deadline_kill_specs,
    failure_ratio_specs,
    malformed_specs,
    no_progress_specs,
    producers_stopped_specs,
    slow_drain_specs,
    vanished_specs,
)
from exporter.rules.health import health_alert_specs
from exporter.rules.promql import (
    COMPONENT,
    DEAD,
    HEALTH_ALERTS,
    JOB_TYPE,
    QUEUE,
    REAPED,
    VALUE_COUNT,
    VALUE_DURATION,
    Builder,
    format_duration,
    number,
    per_type,
    runbook_url,
)
from exporter.rules.slo import slo_alert_specs
from exporter.rules.slot_alerts import logical_alert_specs
from exporter.settings import AlertSettings

Specs = list[dict[str, Any]]
# Alerts with a queue label but no job_type.
QUEUE_LEVEL_ALERTS = ("JobQueueMalformedRows", "JobQueueCostBudgetExceeded", "JobQueueJobsVanished")
# The alerts that name the job label only (every queue of the job is blind).
JOB_LEVEL_ALERTS = ("JobQueueExporterDown",)
EXPIRED_STUCK = f"job_type:jobqueue_stuck_jobs:max{{{REAPED}}}"
DEAD_JOBS = f"job_type:jobqueue_jobs:max{{{DEAD}}}"


def dashboard_url(alerts: AlertSettings, name: str) -> str:
    """The dashboard with the alert's own labels filled in as its variables."""
    if name in JOB_LEVEL_ALERTS:
        variables = ["job"]
    elif name in HEALTH_ALERTS or name in QUEUE_LEVEL_ALERTS:
        variables = ["job", "queue"]
    else:
        variables = ["job", "queue", "job_type"]
    query = "&".join(f"var-{v}={{{{ $labels.{v} }}}}" for v in variables)
    return f"{alerts.dashboard_url}?{query}"


def _alert(
    alerts: AlertSettings,
    name: str,
    *,
    expr: str,
    for_: float,
    severity: str,
    summary: str,
    description: str,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One alerting rule with the shared labels and annotations."""
    rule: dict[str, Any] = {"alert": name, "expr": expr, "for": format_duration(for_)}
    hold = alerts.effective_keep_firing_for
    # Zero leaves the field out, so the rules also load on Prometheus older than 2.42.
    if name not in HEALTH_ALERTS and hold > 0:
        rule["keep_firing_for"] = format_duration(hold)
    return {
        **rule,
        "labels": {"severity": severity, "component": COMPONENT, **(labels or {})},
        "annotations": {
            "summary": summary,
            "description": description,
            "runbook_url": runbook_url(alerts, name),
            "dashboard_url": dashboard_url(alerts, name),
        },
    }


def _gauge_above(a: AlertSettings, gauge: str, default: float, overrides: dict[str, float]) -> str:
    """A gauge over the gap window above the job type's threshold (default or override)."""
    b = Builder(a)
    return per_type(lambda m: b.gap(f"{gauge}{{{m}}}"), ">", default, overrides)


def stuck_specs(a: AlertSettings) -> Specs:
    """JobQueueJobsStuck: running jobs hold an expired lease that nobody reclaims."""
    gap = Builder(a).gap(EXPIRED_STUCK, "min_over_time")
    return [
        {
            "name": "JobQueueJobsStuck",
            "expr": f"{gap} > 0",
            "for_": a.stuck_for,
            "severity": "critical",
            "summary": "Running jobs hold an expired lease that nobody reclaims.",
            "description": f"{VALUE_COUNT} running jobs of type {JOB_TYPE} of queue {QUEUE} "
            f"have held an expired lease for at least {format_duration(a.stuck_for)}; their "
            "workers died.",
        }
    ]


def overrun_specs(a: AlertSettings) -> Specs:
    """JobQueueJobOverrun: a run far longer than its job type's threshold."""
    expr = _gauge_above(
        a,
        "job_type:jobqueue_running_oldest_seconds:max",
        a.overrun_after,
        a.overrun_after_by_job_type,
    )
    return [
        {
            "name": "JobQueueJobOverrun",
            "expr": expr,
            "for_": a.overrun_for,
            "severity": "critical",
            "summary": "A job has run far longer than its job type should.",
            "description": f"A job of type {JOB_TYPE} of queue {QUEUE} has been running for "
            f"{VALUE_DURATION} (threshold {format_duration(a.overrun_after)} unless the type "
            "has its own).",
        }
    ]


def reaper_specs(a: AlertSettings) -> Specs:
    """JobQueueReaperNotRunning: expired leases stay unreclaimed past a threshold."""
    gap = Builder(a).gap("job_type:jobqueue_lease_expired_oldest_seconds:max")
    after = a.reaper_not_running_after
    return [
        {
            "name": "JobQueueReaperNotRunning",
            "expr": f"{gap} > {number(after)}",
            "for_": a.reaper_not_running_for,
            "severity": "critical",
            "summary": "Expired leases stay unreclaimed: the reaper is not running.",
            "description": f"The oldest expired lease of job type {JOB_TYPE} of queue {QUEUE} "
            f"ran out {VALUE_DURATION} ago and has not been reaped "
            f"(threshold {format_duration(after)}).",
        }
    ]


def backlog_stale_specs(a: AlertSettings) -> Specs:
    """JobQueueBacklogStale: the oldest runnable job has waited too long for a worker."""
    expr = _gauge_above(
        a,
        "job_type:jobqueue_oldest_ready_wait_seconds:max",
        a.backlog_stale_after,
        a.backlog_stale_after_by_job_type,
    )
    return [
        {
            "name": "JobQueueBacklogStale",
            "expr": expr,
            "for_": a.backlog_stale_for,
            "severity": "critical",
            "summary": "The oldest runnable job has waited too long for a worker.",
            "description": f"The oldest runnable job of type {JOB_TYPE} of queue {QUEUE} has "
            f"waited {VALUE_DURATION} for a worker (threshold "
            f"{format_duration(a.backlog_stale_after)} unless the type has its own).",
        }
    ]


def dead_letter_size_specs(a: AlertSettings) -> Specs:
    """JobQueueDeadLetterSize: many dead jobs of one type stand in the dead letter."""
    gap = Builder(a).gap(DEAD_JOBS, "min_over_time")
    return [
        {
            "name": "JobQueueDeadLetterSize",
            "expr": f"{gap} > {number(a.dead_letter_size)}",
            "for_": a.dead_letter_size_for,
            "severity": "warning",
            "summary": "Many dead jobs stand in the dead letter.",
            "description": f"{VALUE_COUNT} dead jobs of type {JOB_TYPE} of queue {QUEUE} wait "
            f"in the dead letter (threshold {number(a.dead_letter_size)}).",
        }
    ]


# In the order of the rendered file: the gauges of running work, the counter families, the
# SLO and cost families, then the exporter's own health.
FAMILIES: tuple[Callable[[AlertSettings], Specs], ...] = (
    stuck_specs,
    overrun_specs,
    reaper_specs,
    deadline_kill_specs,
    slo_alert_specs,
    cost_alert_specs,
    budget_alert_specs,
    backlog_stale_specs,
    no_progress_specs,
    slow_drain_specs,
    producers_stopped_specs,
    crash_storm_specs,
    failure_ratio_specs,
    dead_letter_growing_specs,
    dead_letter_size_specs,
    malformed_specs,
    vanished_specs,
    health_alert_specs,
    logical_alert_specs,
)


def alerting_rules(alerts: AlertSettings) -> list[dict[str, Any]]:
    """Every shipped alert, thresholds and ``for:`` taken from ``alerts``."""
    return [_alert(alerts, **spec) for family in FAMILIES for spec in family(alerts)]
