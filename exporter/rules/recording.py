"""Recording rules: deduplicated gauges, summed hourly increases and the ops()/cost_buckets()
set. Gauges take the max over a queue's exporters, counters the sum (see promql.SUM)."""

from __future__ import annotations

from typing import Any

from exporter.rules.promql import DEADLINE_KILL, DEDUP, PENDING, REAPED, RUNNING, Builder
from exporter.settings import AlertSettings

COMPLETED = "jobqueue_jobs_completed_total"


def recording_rules(alerts: AlertSettings) -> list[dict[str, Any]]:
    """Deduplicated gauges, hourly increases and the queue's ops()/cost_buckets() parity set."""
    b = Builder(alerts)
    hour = 3600.0

    def rec(name: str, expr: str) -> dict[str, Any]:
        return {"record": name, "expr": expr}

    pending = f"max without(instance, pod, status) ({b.sel('jobqueue_jobs', PENDING)})"
    ready = (
        f"{pending}\n"
        "-\n"
        "(\n"
        f"  {DEDUP} ({b.sel('jobqueue_jobs_scheduled')})\n"
        "  or\n"
        # A job type without a scheduled series has no delayed jobs: subtract 0.
        f"  {pending} * 0\n"
        ")"
    )
    running = f"max without(instance, pod, status) ({b.sel('jobqueue_jobs', RUNNING)})"
    expired = f"max without(instance, pod, reason) ({b.sel('jobqueue_stuck_jobs', REAPED)})"
    # A job type without an expired-lease series has none: subtract 0.
    leased = f"{running}\n-\n(\n  {expired}\n  or\n  {running} * 0\n)"
    duration_mean = (
        f"sum without(job_type) ({b.increase('jobqueue_job_duration_seconds_sum', hour)})\n"
        f"/\n"
        f"sum without(job_type) ({b.increase('jobqueue_job_duration_seconds_count', hour)})"
    )
    return [
        # Per job type, deduplicated across replicas: what the alerts and dashboards read.
        rec("job:jobqueue_up:max", b.dedup(b.sel("jobqueue_up"))),
        rec("job_type:jobqueue_jobs:max", b.dedup(b.sel("jobqueue_jobs"))),
        rec("job_type:jobqueue_jobs_ready:max", ready),
        rec("job_type:jobqueue_stuck_jobs:max", b.dedup(b.sel("jobqueue_stuck_jobs"))),
        rec(
            "job_type:jobqueue_oldest_ready_wait_seconds:max",
            b.dedup(b.sel("jobqueue_oldest_ready_wait_seconds")),
        ),
        rec(
            "job_type:jobqueue_oldest_pending_age_seconds:max",
            b.dedup(b.sel("jobqueue_oldest_pending_age_seconds")),
        ),
        rec(
            "job_type:jobqueue_lease_expired_oldest_seconds:max",
            b.dedup(b.sel("jobqueue_lease_expired_oldest_seconds")),
        ),
        rec(
            "job_type:jobqueue_running_oldest_seconds:max",
            b.dedup(b.sel("jobqueue_running_oldest_seconds")),
        ),
        # Running jobs whose lease is still valid: a live worker holds each of them.
        rec("job_type:jobqueue_jobs_running_leased:max", leased),
        rec(
            "job_type:jobqueue_jobs_enqueued:increase1h",
            b.increase("jobqueue_jobs_enqueued_total", hour),
        ),
        rec(
            "job_type:jobqueue_jobs_completed:increase1h",
            b.increase("jobqueue_jobs_completed_total", hour),
        ),
        rec(
            "job_type:jobqueue_job_failures:increase1h",
            b.increase("jobqueue_job_failures_total", hour),
        ),
        rec("job_type:jobqueue_jobs_dead:increase1h", b.increase("jobqueue_jobs_dead_total", hour)),
        rec(
            "job_type:jobqueue_cost_usd:increase1h",
            b.increase("jobqueue_cost_usd_total", hour, drop="component"),
        ),
        # Spend per hour over short windows, for the cost alerts' speed.
        rec(
            "job_type:jobqueue_cost_usd_per_hour:rate30m",
            b.per_hour("jobqueue_cost_usd_total", 1800.0, drop="component"),
        ),
        rec(
            "job_type:jobqueue_cost_usd_per_hour:rate5m",
            b.per_hour("jobqueue_cost_usd_total", 300.0, drop="component"),
        ),
        rec(
            "job_type:jobqueue_cost_per_job_usd:ratio1h",
            "job_type:jobqueue_cost_usd:increase1h\n/\njob_type:jobqueue_jobs_completed:increase1h",
        ),
        # Seconds the backlog takes to drain at the last 30 minutes' completion rate
        # (+Inf when nothing completes).
        rec(
            "job_type:jobqueue_drain_time_seconds:rate30m",
            f"job_type:jobqueue_jobs_ready:max\n/\n{b.total(f'rate({b.sel(COMPLETED)}[30m])')}",
        ),
        # ops() parity: one number per queue (job), like the queue's own report.
        rec(
            "job:jobqueue_jobs_dead:increase1h",
            "sum without(job_type, reason) (job_type:jobqueue_jobs_dead:increase1h)",
        ),
        rec(
            "job:jobqueue_job_failures_deadline:increase1h",
            "sum without(job_type, reason) "
            f"(job_type:jobqueue_job_failures:increase1h{{{DEADLINE_KILL}}})",
        ),
        rec(
            "job:jobqueue_stuck_jobs:sum",
            "sum without(job_type, reason) (job_type:jobqueue_stuck_jobs:max)",
        ),
        rec(
            "job:jobqueue_oldest_pending_age_seconds:max",
            "max without(job_type) (job_type:jobqueue_oldest_pending_age_seconds:max)",
        ),
        rec(
            "job:jobqueue_cost_usd:increase1h",
            "sum without(job_type) (job_type:jobqueue_cost_usd:increase1h)",
        ),
        # cost_buckets() parity: hourly cost per component, jobs and mean duration.
        rec(
            "component:jobqueue_cost_usd:increase1h",
            f"sum without(job_type) ({b.increase('jobqueue_cost_usd_total', hour)})",
        ),
        rec(
            "job:jobqueue_jobs_completed:increase1h",
            "sum without(job_type) (job_type:jobqueue_jobs_completed:increase1h)",
        ),
        rec("job:jobqueue_job_duration_seconds:mean1h", duration_mean),
    ]
