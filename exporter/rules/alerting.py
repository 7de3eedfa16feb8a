"""Alerting rules: every shipped alert, its thresholds and for: taken from the settings.

Queue alerts keep every label of their series (job, namespace, queue, job_type): nothing is
aggregated across queues. Gauge alerts read ``max_over_time`` over ``gap_window`` so that a
failed scrape or a withdrawn gauge does not restart ``for:``.
"""

from __future__ import annotations

from typing import Any

from exporter.rules.cost import cost_alert_specs
from exporter.rules.health import health_alert_specs
from exporter.rules.promql import (
    COMPONENT,
    HEALTH_ALERTS,
    NOT_REAPED,
    Builder,
    format_duration,
    number,
    per_type,
    runbook_url,
)
from exporter.rules.slo import slo_alert_specs
from exporter.settings import AlertSettings

# Go-template fragments of the descriptions (Prometheus expands them per alert).
JOB_TYPE = "{{ $labels.job_type }}"
JOB = "{{ $labels.job }}"
QUEUE = "{{ $labels.queue }}"
VALUE_COUNT = '{{ $value | printf "%.0f" }}'
VALUE_RATE = '{{ $value | printf "%.1f" }}'
VALUE_USD = '{{ $value | printf "%.2f" }}'
VALUE_DURATION = "{{ $value | humanizeDuration }}"
VALUE_RATIO = "{{ $value | humanizePercentage }}"
# Alerts with a queue label but no job_type.
QUEUE_LEVEL_ALERTS = ("JobQueueMalformedRows", "JobQueueCostBudgetExceeded")
EXPIRED_STUCK = 'job_type:jobqueue_stuck_jobs:max{reason="lease_expired"}'
DEAD_JOBS = 'job_type:jobqueue_jobs:max{status="dead"}'


def dashboard_url(alerts: AlertSettings, name: str) -> str:
    """The dashboard with the alert's own labels filled in as its variables."""
    if name == "JobQueueExporterDown":
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


def alerting_rules(alerts: AlertSettings) -> list[dict[str, Any]]:
    """Every shipped alert, thresholds and ``for:`` taken from ``alerts``."""
    a = alerts
    b = Builder(a)
    n = number
    d = format_duration
    rules = [
        _alert(
            a,
            "JobQueueJobsStuck",
            expr=f"{b.gap(EXPIRED_STUCK, 'min_over_time')} > 0",
            for_=a.stuck_for,
            severity="critical",
            summary="Running jobs hold an expired lease that nobody reclaims.",
            description=f"{VALUE_COUNT} running jobs of type {JOB_TYPE} of queue {QUEUE} "
            f"have held an expired lease for at least {d(a.stuck_for)}; their workers died.",
        ),
        _alert(
            a,
            "JobQueueJobOverrun",
            expr=per_type(
                lambda m: b.gap(f"job_type:jobqueue_running_oldest_seconds:max{{{m}}}"),
                ">",
                a.overrun_after,
                a.overrun_after_by_job_type,
            ),
            for_=a.overrun_for,
            severity="critical",
            summary="A job has run far longer than its job type should.",
            description=f"A job of type {JOB_TYPE} of queue {QUEUE} has been running for "
            f"{VALUE_DURATION} (threshold {d(a.overrun_after)} unless the type has its own).",
        ),
        _alert(
            a,
            "JobQueueReaperNotRunning",
            expr=f"{b.gap('job_type:jobqueue_lease_expired_oldest_seconds:max')}"
            f" > {n(a.reaper_not_running_after)}",
            for_=a.reaper_not_running_for,
            severity="critical",
            summary="Expired leases stay unreclaimed: the reaper is not running.",
            description=f"The oldest expired lease of job type {JOB_TYPE} of queue {QUEUE} ran "
            f"out {VALUE_DURATION} ago and has not been reaped "
            f"(threshold {d(a.reaper_not_running_after)}).",
        ),
    ]
    window = d(a.deadline_kills_window)
    for severity, limit, overrides in (
        (
            "warning",
            a.deadline_kills_warning_per_hour,
            a.deadline_kills_warning_per_hour_by_job_type,
        ),
        (
            "critical",
            a.deadline_kills_critical_per_hour,
            a.deadline_kills_critical_per_hour_by_job_type,
        ),
    ):
        rules.append(
            _alert(
                a,
                "JobQueueDeadlineKills",
                expr=per_type(
                    lambda m: b.per_hour(
                        "jobqueue_job_failures_total",
                        a.deadline_kills_window,
                        *[x for x in ('reason="deadline"', m) if x],
                    ),
                    ">",
                    limit,
                    overrides,
                ),
                for_=a.deadline_kills_for,
                severity=severity,
                summary="Jobs are being killed by their deadline.",
                description=f"Jobs of type {JOB_TYPE} of queue {QUEUE} are killed by their "
                f"deadline at {VALUE_RATE} per hour over the last {window} "
                f"(threshold {n(limit)} per hour unless the type has its own).",
            )
        )
    rules += [_alert(a, **spec) for spec in slo_alert_specs(a)]
    rules += [_alert(a, **spec) for spec in cost_alert_specs(a)]
    if a.cost_budget_usd_per_hour is not None:
        rules.append(
            _alert(
                a,
                "JobQueueCostBudgetExceeded",
                expr=f"job:jobqueue_cost_usd:increase1h > {n(a.cost_budget_usd_per_hour)}",
                for_=a.cost_budget_for,
                severity="critical",
                summary="Spend in the last hour is above the configured hourly budget.",
                description=f"Jobs of queue {QUEUE} in {JOB} cost {VALUE_USD} USD in the last "
                f"hour; the budget is {n(a.cost_budget_usd_per_hour)} USD per hour.",
            )
        )
    rules.append(
        _alert(
            a,
            "JobQueueBacklogStale",
            expr=per_type(
                lambda m: b.gap(f"job_type:jobqueue_oldest_ready_wait_seconds:max{{{m}}}"),
                ">",
                a.backlog_stale_after,
                a.backlog_stale_after_by_job_type,
            ),
            for_=a.backlog_stale_for,
            severity="critical",
            summary="The oldest runnable job has waited too long for a worker.",
            description=f"The oldest runnable job of type {JOB_TYPE} of queue {QUEUE} has "
            f"waited {VALUE_DURATION} for a worker (threshold {d(a.backlog_stale_after)} "
            "unless the type has its own).",
        )
    )
    pw = a.no_progress_window
    # Reaper reclaims (lease_expired) prove nothing about live workers, so they are no progress.
    progress_failures = b.increase("jobqueue_job_failures_total", pw, NOT_REAPED, drop="reason")
    rules.append(
        _alert(
            a,
            "JobQueueNoProgress",
            expr=f"{b.gap('job_type:jobqueue_jobs_ready:max')} > 0\n"
            "unless\n"
            f"{b.increase('jobqueue_jobs_completed_total', pw)} > 0\n"
            "unless\n"
            f"{progress_failures} > 0\n"
            "unless\n"
            # A job running under a valid lease has a live worker: long jobs are progress.
            f"{b.gap('job_type:jobqueue_jobs_running_leased:max')} > 0",
            for_=a.no_progress_for,
            severity="critical",
            summary="Runnable jobs are waiting and no worker is alive: workers are gone.",
            description=f"{VALUE_COUNT} runnable jobs of type {JOB_TYPE} of queue {QUEUE} are "
            f"waiting, no job of that type completed or failed in the last {d(pw)}, and none "
            "runs under a valid lease.",
        )
    )
    rules.append(
        _alert(
            a,
            "JobQueueSlowDrain",
            expr=f"job_type:jobqueue_drain_time_seconds:rate30m > {n(a.drain_time_limit)}\n"
            "and\n"
            "deriv(job_type:jobqueue_jobs_ready:max[30m]) > 0",
            for_=a.drain_time_for,
            severity="warning",
            summary="The backlog grows and would take too long to drain at the current rate.",
            description=f"The backlog of job type {JOB_TYPE} of queue {QUEUE} grows and would "
            f"take {VALUE_DURATION} to drain at the last 30 minutes' completion rate "
            f"(threshold {d(a.drain_time_limit)}).",
        )
    )
    sw = d(a.producers_stopped_window)
    rules.append(
        _alert(
            a,
            "JobQueueProducersStopped",
            expr=f"{b.increase('jobqueue_jobs_enqueued_total', a.producers_stopped_window)} == 0\n"
            "and\n"
            f"job_type:jobqueue_jobs_enqueued:increase1h_offset1w"
            f" > {n(a.producers_stopped_min_per_hour)}",
            for_=a.producers_stopped_for,
            severity="warning",
            summary="Nothing is enqueued any more, though the same hour last week was busy.",
            description=f"No job of type {JOB_TYPE} of queue {QUEUE} was enqueued in the last "
            f"{sw}, though more than {n(a.producers_stopped_min_per_hour)} were enqueued in the "
            "same hour a week ago.",
        )
    )
    cw = a.crash_storm_window
    reaped = b.increase("jobqueue_job_failures_total", cw, 'reason="lease_expired"', drop="reason")
    failed = b.increase("jobqueue_job_failures_total", cw, drop="reason")
    completed = b.increase("jobqueue_jobs_completed_total", cw)
    rules.append(
        _alert(
            a,
            "JobQueueWorkerCrashStorm",
            expr=f"{reaped}\n/\n(\n  {failed}\n  +\n  ({completed} or {failed} * 0)\n)"
            f"\n> {n(a.crash_storm_ratio)}\n"
            f"and\n{reaped}\n>= {n(a.crash_storm_min_reaped)}",
            for_=a.crash_storm_for,
            severity="warning",
            summary="Many attempts end with the reaper reclaiming them: workers crash.",
            description=f"{VALUE_RATIO} of the attempts of job type {JOB_TYPE} of queue {QUEUE} "
            f"over the last {d(cw)} ended with an expired lease "
            f"(threshold {n(a.crash_storm_ratio * 100)}%, at least "
            f"{n(a.crash_storm_min_reaped)} reclaims).",
        )
    )
    fw = a.failure_ratio_window
    failed = b.increase("jobqueue_job_failures_total", fw, drop="reason")
    completed = b.increase("jobqueue_jobs_completed_total", fw)
    # A type whose every attempt failed has no completion series: count it as 0 completions.
    finished = f"(\n  {failed}\n  +\n  ({completed} or {failed} * 0)\n)"
    rules.append(
        _alert(
            a,
            "JobQueueHighFailureRatio",
            expr=f"{failed}\n/\n{finished}\n> {n(a.failure_ratio_threshold)}\n"
            f"and\n{finished}\n>= {n(a.failure_ratio_min_attempts)}",
            for_=a.failure_ratio_for,
            severity="warning",
            summary="A large share of finished attempts fail.",
            description=f"{VALUE_RATIO} of the finished attempts of job type {JOB_TYPE} of "
            f"queue {QUEUE} failed over the last {d(fw)} (threshold "
            f"{n(a.failure_ratio_threshold * 100)}%, at least "
            f"{n(a.failure_ratio_min_attempts)} attempts).",
        )
    )
    dead = b.per_hour("jobqueue_jobs_dead_total", a.dead_letter_window, drop="reason")
    rules.append(
        _alert(
            a,
            "JobQueueDeadLetterGrowing",
            expr=f"{dead} > {n(a.dead_letter_per_hour)}",
            for_=a.dead_letter_for,
            severity="warning",
            summary="Jobs are reaching the dead letter at a sustained rate.",
            description=f"Jobs of type {JOB_TYPE} of queue {QUEUE} reach DEAD at {VALUE_RATE} "
            f"per hour over the last {d(a.dead_letter_window)} "
            f"(threshold {n(a.dead_letter_per_hour)} per hour).",
        )
    )
    rules.append(
        _alert(
            a,
            "JobQueueDeadLetterSize",
            expr=f"{b.gap(DEAD_JOBS, 'min_over_time')} > {n(a.dead_letter_size)}",
            for_=a.dead_letter_size_for,
            severity="warning",
            summary="Many dead jobs stand in the dead letter.",
            description=f"{VALUE_COUNT} dead jobs of type {JOB_TYPE} of queue {QUEUE} wait in "
            f"the dead letter (threshold {n(a.dead_letter_size)}).",
        )
    )
    mw = a.malformed_window
    malformed = b.increase("jobqueue_exporter_malformed_rows_total", mw, drop="field")
    done = b.increase("jobqueue_jobs_completed_total", mw, drop="job_type")
    rules.append(
        _alert(
            a,
            "JobQueueMalformedRows",
            expr=f"{malformed}\n/\n{done}\n> {n(a.malformed_ratio)}",
            for_=a.malformed_for,
            severity="warning",
            summary="Completed rows carry malformed results: cost extraction is blind.",
            description=f"Malformed result fields amount to {VALUE_RATIO} of the completions of "
            f"queue {QUEUE} over the last {d(mw)} (threshold {n(a.malformed_ratio * 100)}%); "
            "cost counters and every cost alert miss them.",
        )
    )
    rules += [_alert(a, **spec) for spec in health_alert_specs(a)]
    return rules
