"""Alerting rules: every shipped alert, its thresholds and for: taken from the settings."""

from __future__ import annotations

from typing import Any

from exporter.rules.promql import (
    COMPONENT,
    DEDUP,
    HEALTH_ALERTS,
    NOT_REAPED,
    Builder,
    format_duration,
    number,
    runbook_url,
    selector_labels,
)
from exporter.settings import AlertSettings

# Go-template fragments of the descriptions (Prometheus expands them per alert).
JOB_TYPE = "{{ $labels.job_type }}"
JOB = "{{ $labels.job }}"
VALUE_COUNT = '{{ $value | printf "%.0f" }}'
VALUE_RATE = '{{ $value | printf "%.1f" }}'
VALUE_USD = '{{ $value | printf "%.2f" }}'
VALUE_DURATION = "{{ $value | humanizeDuration }}"
VALUE_RATIO = "{{ $value | humanizePercentage }}"


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
            expr="sum without(reason) (job_type:jobqueue_stuck_jobs:max) > 0",
            for_=a.stuck_for,
            severity="critical",
            summary="Running jobs hold an expired lease or overran the stuck threshold.",
            description=f"{VALUE_COUNT} running jobs of type {JOB_TYPE} in {JOB} have an expired "
            f"lease or have run past the stuck threshold for at least {d(a.stuck_for)}.",
        ),
        _alert(
            a,
            "JobQueueReaperNotRunning",
            expr="job_type:jobqueue_lease_expired_oldest_seconds:max"
            f" > {n(a.reaper_not_running_after)}",
            for_=a.reaper_not_running_for,
            severity="critical",
            summary="Expired leases stay unreclaimed: the reaper is not running.",
            description=f"The oldest expired lease of job type {JOB_TYPE} in {JOB} ran out "
            f"{VALUE_DURATION} ago and has not been reaped "
            f"(threshold {d(a.reaper_not_running_after)}).",
        ),
    ]
    deadline = b.per_hour(
        "jobqueue_job_failures_total", a.deadline_kills_window, 'reason="deadline"'
    )
    for severity, limit in (
        ("warning", a.deadline_kills_warning_per_hour),
        ("critical", a.deadline_kills_critical_per_hour),
    ):
        rules.append(
            _alert(
                a,
                "JobQueueDeadlineKills",
                expr=f"{deadline} > {n(limit)}",
                for_=a.deadline_kills_for,
                severity=severity,
                summary="Jobs are being killed by their deadline.",
                description=f"Jobs of type {JOB_TYPE} in {JOB} are killed by their deadline at "
                f"{VALUE_RATE} per hour over the last {d(a.deadline_kills_window)} "
                f"(threshold {n(limit)} per hour).",
            )
        )
    days = a.cost_spike_baseline_days
    rules.append(
        _alert(
            a,
            "JobQueueCostSpike",
            # offset 1h keeps the spike itself out of its baseline; no history means no alert.
            expr="job_type:jobqueue_cost_usd:increase1h\n"
            f"  > {n(a.cost_spike_factor)}"
            f" * avg_over_time(job_type:jobqueue_cost_usd:increase1h[{days}d] offset 1h)\n"
            "and\n"
            f"job_type:jobqueue_cost_usd:increase1h > {n(a.cost_spike_floor_usd)}",
            for_=a.cost_spike_for,
            severity="warning",
            summary="Spend in the last hour is far above the usual hourly spend.",
            description=f"Job type {JOB_TYPE} in {JOB} cost {VALUE_USD} USD in the last hour, "
            f"more than {n(a.cost_spike_factor)} times its average hourly cost over the past "
            f"{days} days (and above the {n(a.cost_spike_floor_usd)} USD floor).",
        )
    )
    if a.cost_budget_usd_per_hour is not None:
        rules.append(
            _alert(
                a,
                "JobQueueCostBudgetExceeded",
                expr=f"job:jobqueue_cost_usd:increase1h > {n(a.cost_budget_usd_per_hour)}",
                for_=a.cost_budget_for,
                severity="critical",
                summary="Spend in the last hour is above the configured hourly budget.",
                description=f"Jobs in {JOB} cost {VALUE_USD} USD in the last hour; "
                f"the budget is {n(a.cost_budget_usd_per_hour)} USD per hour.",
            )
        )
    rules.append(
        _alert(
            a,
            "JobQueueBacklogStale",
            expr=f"job_type:jobqueue_oldest_ready_wait_seconds:max > {n(a.backlog_stale_after)}",
            for_=a.backlog_stale_for,
            severity="critical",
            summary="The oldest runnable job has waited too long for a worker.",
            description=f"The oldest runnable job of type {JOB_TYPE} in {JOB} has waited "
            f"{VALUE_DURATION} for a worker (threshold {d(a.backlog_stale_after)}).",
        )
    )
    pw = a.no_progress_window
    # Reaper reclaims (lease_expired) prove nothing about live workers, so they are no progress.
    progress_failures = b.increase("jobqueue_job_failures_total", pw, NOT_REAPED, drop="reason")
    rules.append(
        _alert(
            a,
            "JobQueueNoProgress",
            expr="job_type:jobqueue_jobs_ready:max > 0\n"
            "unless\n"
            f"{b.increase('jobqueue_jobs_completed_total', pw)} > 0\n"
            "unless\n"
            f"{progress_failures} > 0",
            for_=a.no_progress_for,
            severity="critical",
            summary="Runnable jobs are waiting and nothing completes or fails: workers are gone.",
            description=f"{VALUE_COUNT} runnable jobs of type {JOB_TYPE} in {JOB} are waiting and "
            f"no job of that type completed or failed in the last {d(pw)}.",
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
            description=f"{VALUE_RATIO} of the finished attempts of job type {JOB_TYPE} in {JOB} "
            f"failed over the last {d(fw)} (threshold {n(a.failure_ratio_threshold * 100)}%, "
            f"at least {n(a.failure_ratio_min_attempts)} attempts).",
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
            description=f"Jobs of type {JOB_TYPE} in {JOB} reach DEAD at {VALUE_RATE} per hour "
            f"over the last {d(a.dead_letter_window)} "
            f"(threshold {n(a.dead_letter_per_hour)} per hour).",
        )
    )
    hold = a.effective_keep_firing_for
    held = (
        f"queue alerts are inhibited, and held firing for {d(hold)} "
        "rather than resolved while the exporter withdraws the queue's gauges."
        if hold > 0
        else "queue alerts are inhibited."
    )
    rules.append(
        _alert(
            a,
            "JobQueueDatabaseUnreachable",
            expr="job:jobqueue_up:max == 0",
            for_=a.database_unreachable_for,
            severity="critical",
            summary="The exporter cannot reach the queue's database.",
            description=f"No exporter replica of {JOB} could collect from the queue's database "
            f"for {d(a.database_unreachable_for)} (jobqueue_up = {{{{ $value }}}}); {held}",
        )
    )
    up = b.sel("up")
    rules.append(
        _alert(
            a,
            "JobQueueExporterDown",
            expr=f"{DEDUP} ({up}) == 0\nor\nabsent({up})",
            for_=a.exporter_down_for,
            severity="critical",
            summary="The jobqueue exporter is down or not scraped.",
            description=f"No scrape target of job {JOB} ({{{a.selector}}}) has been up for "
            f"{d(a.exporter_down_for)}; every queue alert is blind.",
            # absent() keeps only equality matchers (none under a comparison): inhibition
            # matches on job, so the selector's equality matchers are also static labels.
            labels=selector_labels(a.selector),
        )
    )
    duration = b.sel("jobqueue_exporter_collection_duration_seconds")
    timeout = b.sel("jobqueue_exporter_collection_timeout_seconds")
    rules.append(
        _alert(
            a,
            "JobQueueCollectionSlow",
            expr=f"{DEDUP} (\n  {duration}\n  /\n  {timeout}\n) > {n(a.collection_slow_ratio)}",
            for_=a.collection_slow_for,
            severity="warning",
            summary="Collections from the queue's database are close to their timeout.",
            description=f"Collections of {JOB} take {VALUE_RATIO} of their timeout "
            f"(threshold {n(a.collection_slow_ratio * 100)}%); "
            "metrics go stale when they time out.",
        )
    )
    rules.append(
        _alert(
            a,
            "JobQueueMissingIndex",
            expr=f"{DEDUP} ({b.sel('jobqueue_exporter_missing_index')}) > 0",
            for_=a.missing_index_for,
            severity="info",
            summary="An index the exporter's queries need is missing.",
            description="Index {{ $labels.index }} is missing on the queue's table watched by "
            f"{JOB} (missing_index = {{{{ $value }}}}); see exporter/sql/indexes.sql.",
        )
    )
    return rules
