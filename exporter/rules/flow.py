"""Alert families on the flow of work: counters of kills, failures, completions and enqueues.

Each function returns the keyword arguments of alerting._alert for one family. Counters are
summed over the queue's exporter pods (promql.SUM): only the elected leader counts, and over a
rollout the old and the new pod each hold part of a window.
"""

from __future__ import annotations

from typing import Any

from exporter.rules.promql import (
    DEADLINE_KILL,
    JOB,
    JOB_TYPE,
    NOT_REAPED,
    QUEUE,
    REAPED,
    VALUE_COUNT,
    VALUE_DURATION,
    VALUE_RATE,
    VALUE_RATIO,
    Builder,
    format_duration,
    number,
    per_type,
)
from exporter.settings import AlertSettings

Specs = list[dict[str, Any]]
FAILURES = "jobqueue_job_failures_total"
COMPLETED = "jobqueue_jobs_completed_total"
FIELD = "{{ $labels.field }}"
# Any vanished job is worth a look: its outcome is counted nowhere. An hour keeps one deletion
# sweep of retention visible long enough to be seen on a dashboard.
VANISHED_WINDOW = 3600.0
VANISHED_FOR = 60.0  # one evaluation is no proof; a minute is


def _finished(failed: str, completed: str) -> str:
    # A type whose every attempt failed has no completion series: count it as 0 completions.
    return f"(\n  {failed}\n  +\n  ({completed} or {failed} * 0)\n)"


def deadline_kill_specs(a: AlertSettings) -> Specs:
    """JobQueueDeadlineKills: a warning and a critical twin on deadline kills per hour."""
    b = Builder(a)
    window = format_duration(a.deadline_kills_window)
    specs = []
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
        expr = per_type(
            lambda m: b.per_hour(
                FAILURES, a.deadline_kills_window, *[x for x in (DEADLINE_KILL, m) if x]
            ),
            ">",
            limit,
            overrides,
        )
        specs.append(
            {
                "name": "JobQueueDeadlineKills",
                "expr": expr,
                "for_": a.deadline_kills_for,
                "severity": severity,
                "summary": "Jobs are being killed by their deadline.",
                "description": f"Jobs of type {JOB_TYPE} of queue {QUEUE} are killed by their "
                f"deadline at {VALUE_RATE} per hour over the last {window} "
                f"(threshold {number(limit)} per hour unless the type has its own).",
            }
        )
    return specs


def no_progress_specs(a: AlertSettings) -> Specs:
    """JobQueueNoProgress: runnable jobs wait and no worker shows a sign of life."""
    b = Builder(a)
    pw = a.no_progress_window
    # Reaper reclaims (lease_expired) prove nothing about live workers, so they are no progress.
    failures = b.increase(FAILURES, pw, NOT_REAPED, drop="reason")
    expr = (
        f"{b.gap('job_type:jobqueue_jobs_ready:max')} > 0\n"
        "unless\n"
        f"{b.increase(COMPLETED, pw)} > 0\n"
        "unless\n"
        f"{failures} > 0\n"
        "unless\n"
        # A job running under a valid lease has a live worker: long jobs are progress.
        f"{b.gap('job_type:jobqueue_jobs_running_leased:max')} > 0"
    )
    return [
        {
            "name": "JobQueueNoProgress",
            "expr": expr,
            "for_": a.no_progress_for,
            "severity": "critical",
            "summary": "Runnable jobs are waiting and no worker is alive: workers are gone.",
            "description": f"{VALUE_COUNT} runnable jobs of type {JOB_TYPE} of queue {QUEUE} "
            f"are waiting, no job of that type completed or failed in the last "
            f"{format_duration(pw)}, and none runs under a valid lease.",
        }
    ]


def slow_drain_specs(a: AlertSettings) -> Specs:
    """JobQueueSlowDrain: a growing backlog would take too long to drain."""
    limit = a.drain_time_limit
    return [
        {
            "name": "JobQueueSlowDrain",
            "expr": f"job_type:jobqueue_drain_time_seconds:rate30m > {number(limit)}\n"
            "and\n"
            "deriv(job_type:jobqueue_jobs_ready:max[30m]) > 0",
            "for_": a.drain_time_for,
            "severity": "warning",
            "summary": "The backlog grows and would take too long to drain at the current rate.",
            "description": f"The backlog of job type {JOB_TYPE} of queue {QUEUE} grows and "
            f"would take {VALUE_DURATION} to drain at the last 30 minutes' completion rate "
            f"(threshold {format_duration(limit)}).",
        }
    ]


def producers_stopped_specs(a: AlertSettings) -> Specs:
    """JobQueueProducersStopped: nothing enqueued though the same hour last week was busy."""
    enqueued = Builder(a).increase("jobqueue_jobs_enqueued_total", a.producers_stopped_window)
    busy = number(a.producers_stopped_min_per_hour)
    return [
        {
            "name": "JobQueueProducersStopped",
            "expr": f"{enqueued} == 0\n"
            "and\n"
            f"job_type:jobqueue_jobs_enqueued:increase1h_offset1w > {busy}",
            "for_": a.producers_stopped_for,
            "severity": "warning",
            "summary": "Nothing is enqueued any more, though the same hour last week was busy.",
            "description": f"No job of type {JOB_TYPE} of queue {QUEUE} was enqueued in the "
            f"last {format_duration(a.producers_stopped_window)}, though more than {busy} were "
            "enqueued in the same hour a week ago.",
        }
    ]


def crash_storm_specs(a: AlertSettings) -> Specs:
    """JobQueueWorkerCrashStorm: many attempts end with the reaper reclaiming them."""
    b = Builder(a)
    cw = a.crash_storm_window
    reaped = b.increase(FAILURES, cw, REAPED, drop="reason")
    finished = _finished(b.increase(FAILURES, cw, drop="reason"), b.increase(COMPLETED, cw))
    return [
        {
            "name": "JobQueueWorkerCrashStorm",
            "expr": f"{reaped}\n/\n{finished}\n> {number(a.crash_storm_ratio)}\n"
            f"and\n{reaped}\n>= {number(a.crash_storm_min_reaped)}",
            "for_": a.crash_storm_for,
            "severity": "warning",
            "summary": "Many attempts end with the reaper reclaiming them: workers crash.",
            "description": f"{VALUE_RATIO} of the attempts of job type {JOB_TYPE} of queue "
            f"{QUEUE} over the last {format_duration(cw)} ended with an expired lease "
            f"(threshold {number(a.crash_storm_ratio * 100)}%, at least "
            f"{number(a.crash_storm_min_reaped)} reclaims).",
        }
    ]


def failure_ratio_specs(a: AlertSettings) -> Specs:
    """JobQueueHighFailureRatio: a large share of finished attempts fail."""
    b = Builder(a)
    fw = a.failure_ratio_window
    failed = b.increase(FAILURES, fw, drop="reason")
    finished = _finished(failed, b.increase(COMPLETED, fw))
    return [
        {
            "name": "JobQueueHighFailureRatio",
            "expr": f"{failed}\n/\n{finished}\n> {number(a.failure_ratio_threshold)}\n"
            f"and\n{finished}\n>= {number(a.failure_ratio_min_attempts)}",
            "for_": a.failure_ratio_for,
            "severity": "warning",
            "summary": "A large share of finished attempts fail.",
            "description": f"{VALUE_RATIO} of the finished attempts of job type {JOB_TYPE} of "
            f"queue {QUEUE} failed over the last {format_duration(fw)} (threshold "
            f"{number(a.failure_ratio_threshold * 100)}%, at least "
            f"{number(a.failure_ratio_min_attempts)} attempts).",
        }
    ]


def dead_letter_growing_specs(a: AlertSettings) -> Specs:
    """JobQueueDeadLetterGrowing: jobs reach the dead letter at a sustained rate."""
    dead = Builder(a).per_hour("jobqueue_jobs_dead_total", a.dead_letter_window, drop="reason")
    return [
        {
            "name": "JobQueueDeadLetterGrowing",
            "expr": f"{dead} > {number(a.dead_letter_per_hour)}",
            "for_": a.dead_letter_for,
            "severity": "warning",
            "summary": "Jobs are reaching the dead letter at a sustained rate.",
            "description": f"Jobs of type {JOB_TYPE} of queue {QUEUE} reach DEAD at "
            f"{VALUE_RATE} per hour over the last {format_duration(a.dead_letter_window)} "
            f"(threshold {number(a.dead_letter_per_hour)} per hour).",
        }
    ]


def malformed_specs(a: AlertSettings) -> Specs:
    """JobQueueMalformedRows: completed rows carry results the exporter cannot read."""
    b = Builder(a)
    mw = a.malformed_window
    # Per field: each field's counter counts completed rows (one row, one count at most), so
    # its share of the completions is a share of rows, never above 1. Summed over the fields,
    # a row with two malformed fields counted twice and the ratio could pass 100 %.
    malformed = b.increase("jobqueue_exporter_malformed_rows_total", mw)
    done = b.increase(COMPLETED, mw, drop="job_type")
    return [
        {
            "name": "JobQueueMalformedRows",
            "expr": f"{malformed}\n/ ignoring(field) group_left\n{done}\n"
            f"> {number(a.malformed_ratio)}",
            "for_": a.malformed_for,
            "severity": "warning",
            "summary": "Completed rows carry malformed results: cost extraction is blind.",
            "description": f"Result field {FIELD} was malformed in {VALUE_RATIO} of the "
            f"completed rows of queue {QUEUE} over the last {format_duration(mw)} (threshold "
            f"{number(a.malformed_ratio * 100)}%); cost counters and every cost alert miss "
            "them.",
        }
    ]


def vanished_specs(a: AlertSettings) -> Specs:
    """JobQueueJobsVanished: tracked jobs were deleted before a collection saw them end."""
    vanished = Builder(a).increase("jobqueue_exporter_jobs_vanished_total", VANISHED_WINDOW)
    window = format_duration(VANISHED_WINDOW)
    return [
        {
            "name": "JobQueueJobsVanished",
            "expr": f"{vanished} > 0",
            "for_": VANISHED_FOR,
            "severity": "info",
            "summary": "Tracked jobs were deleted before the exporter saw them end.",
            "description": f"{VALUE_COUNT} jobs of queue {QUEUE} in {JOB}, last seen "
            f"{{{{ $labels.last_status }}}}, were deleted over the last {window} before a "
            "collection saw them end (retention or TRUNCATE); their outcome is counted nowhere.",
        }
    ]
