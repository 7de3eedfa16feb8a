"""Rows 3 to 5: what goes in and out, how long it takes, what fails."""

from __future__ import annotations

from dashboards.grafana import Json, Look, runbook, target, timeseries
from dashboards.queries import (
    Q,
    counter_rate,
    dedup,
    quantile,
    sum_by,
)


def flow_row() -> list[Json]:
    """Row 2: what goes in, what comes out, what waits."""
    pending = sum_by("", dedup(f'jobqueue_jobs{{{Q}, status="pending"}}'))
    scheduled = sum_by("", dedup(f"jobqueue_jobs_scheduled{{{Q}}}"))
    return [
        timeseries(
            "Enqueued / completed / failed per second",
            "Jobs inserted, jobs reaching DONE and failed attempts, per second by job type. "
            "Completed far below enqueued for long means the backlog grows.",
            "ops",
            [
                target(
                    counter_rate("jobqueue_jobs_enqueued_total", "job_type"),
                    "enqueued {{job_type}}",
                ),
                target(
                    counter_rate("jobqueue_jobs_completed_total", "job_type"),
                    "completed {{job_type}}",
                ),
                target(
                    counter_rate("jobqueue_job_failures_total", "job_type"), "failed {{job_type}}"
                ),
            ],
            Look(width=8, links=runbook("JobQueueNoProgress")),
        ),
        timeseries(
            "Queue depth by status",
            "Jobs pending, running and dead (DONE is left out: it only grows and would "
            "flatten the rest).",
            "short",
            [
                target(
                    sum_by("status", dedup(f'jobqueue_jobs{{{Q}, status!="done"}}')), "{{status}}"
                )
            ],
            Look(width=8),
        ),
        timeseries(
            "Ready vs scheduled pending",
            "Pending jobs a worker could claim now (ready) and pending jobs whose run_after "
            "is in the future (backoff or delay). Ready that keeps growing means too few "
            "workers.",
            "short",
            [
                # A queue with nothing scheduled may have no scheduled series at all.
                target(f"{pending} - ({scheduled} or vector(0))", "ready"),
                target(scheduled, "scheduled"),
            ],
            Look(width=8, stacked=True, links=runbook("JobQueueBacklogStale")),
        ),
    ]


def latency_row() -> list[Json]:
    """Row 3: how long jobs wait, run and take end to end."""

    def three(histogram: str, by: str = "") -> list[Json]:
        suffix = " {{job_type}}" if by else ""
        return [
            target(quantile(q, histogram, by), f"p{round(q * 100)}{suffix}")
            for q in (0.5, 0.95, 0.99)
        ]

    return [
        timeseries(
            "Wait time p50 / p95 / p99",
            "Time the completing attempt of a job waited for a worker (run start - "
            "run_after), from the jobqueue_job_wait_seconds histogram.",
            "s",
            three("jobqueue_job_wait_seconds"),
            Look(width=6, links=runbook("JobQueueBacklogStale")),
        ),
        timeseries(
            "End-to-end latency p50 / p95 / p99",
            "Enqueue to DONE, retries and backoff included, from the "
            "jobqueue_job_latency_seconds histogram.",
            "s",
            three("jobqueue_job_latency_seconds"),
            Look(width=6),
        ),
        timeseries(
            "Job duration p50 / p95 / p99 by job type",
            "Run time of completed jobs as reported in result.metrics.duration_ms, by job type.",
            "s",
            three("jobqueue_job_duration_seconds", "job_type"),
            Look(width=6),
        ),
        timeseries(
            "Longest current run",
            "Seconds the longest running job of each type has been running; 0 when none "
            "runs. A line that keeps climbing past the deadline is a stuck job.",
            "s",
            [target(f"max by (job_type) (jobqueue_running_oldest_seconds{{{Q}}})", "{{job_type}}")],
            Look(width=6, links=runbook("JobQueueJobsStuck")),
        ),
    ]


def failures_row() -> list[Json]:
    """Row 4: what fails, how often, and where it ends."""
    failed = counter_rate("jobqueue_job_failures_total", "job_type")
    completed = counter_rate("jobqueue_jobs_completed_total", "job_type")
    # A job type with completions but no failure series yet shows 0, and one with
    # failures but no completions shows 1, instead of vanishing from the graph.
    ratio = f"({failed} / ({failed} + ({completed} or {failed} * 0))) or {completed} * 0"
    return [
        timeseries(
            "Failed attempts by reason",
            "Failed attempts per minute by reason: deadline (killed by its deadline), "
            "lease_expired (worker vanished, reaped), error (the job raised).",
            "opm",
            [target(f"60 * {counter_rate('jobqueue_job_failures_total', 'reason')}", "{{reason}}")],
            Look(width=6, links=runbook("JobQueueDeadlineKills")),
        ),
        timeseries(
            "Failure ratio by job type",
            "Failed attempts / (failed attempts + completions) per job type over the rate "
            "window. 1 means nothing of that type succeeds.",
            "percentunit",
            [target(ratio, "{{job_type}}")],
            Look(width=6, minimum=0, maximum=1, links=runbook("JobQueueHighFailureRatio")),
        ),
        timeseries(
            "Dead letters by reason",
            "Jobs reaching DEAD per minute, by the reason of their last failure.",
            "opm",
            [target(f"60 * {counter_rate('jobqueue_jobs_dead_total', 'reason')}", "{{reason}}")],
            Look(width=6, links=runbook("JobQueueDeadLetterGrowing")),
        ),
        timeseries(
            "Requeues",
            "Dead jobs put back to pending by an operator, per minute by job type.",
            "opm",
            [
                target(
                    f"60 * {counter_rate('jobqueue_jobs_requeued_total', 'job_type')}",
                    "{{job_type}}",
                )
            ],
            Look(width=6),
        ),
    ]
