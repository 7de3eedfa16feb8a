"""Rows 6 to 8: what the queue costs, the exporter's own health, capacity and collections."""

from __future__ import annotations

from dashboards.grafana import Json, Look, bargauge, runbook, stat, steps, table, target, timeseries
from dashboards.queries import (
    E,
    Q,
    counter_rate,
    dedup,
    rate,
    sum_by,
)


def cost_row() -> list[Json]:
    """Row 5: what the queue costs, the queue's own hourly cost chart first."""
    cost_rate = counter_rate("jobqueue_cost_usd_total", "job_type")
    done_rate = counter_rate("jobqueue_jobs_completed_total", "job_type")
    return [
        timeseries(
            "Hourly cost by component",
            "USD of jobs completed in the interval ending at each bar (an hour, or Grafana's "
            "longer step on long ranges), stacked by component (ai, proxy, other); the bars "
            "add up to the total.",
            "currencyUSD",
            [
                target(
                    sum_by("component", f"increase(jobqueue_cost_usd_total{{{Q}}}[$__interval])"),
                    "{{component}}",
                )
            ],
            Look(
                width=8,
                stacked=True,
                bars=True,
                interval="1h",
                links=runbook("JobQueueCostSpike", "JobQueueCostBudgetExceeded"),
            ),
        ),
        timeseries(
            "Cost per completed job by job type",
            "Average USD per completed job over the rate window: cost rate / completion rate.",
            "currencyUSD",
            [target(f"{cost_rate} / {done_rate}", "{{job_type}}")],
            Look(width=8),
        ),
        bargauge(
            "Cost by job type",
            "USD spent per job type over the whole selected time range.",
            "currencyUSD",
            [
                target(
                    sum_by("job_type", (f"increase(jobqueue_cost_usd_total{{{Q}}}[$__range])")),
                    "{{job_type}}",
                    instant=True,
                )
            ],
            Look(width=8),
        ),
    ]


def exporter_row() -> list[Json]:
    """Row 6: the exporter's own health, per replica (no deduplication here)."""
    return [
        timeseries(
            "Collection duration per query",
            "Wall time of the last run of each of the exporter's queries, per replica, "
            "and the configured collection timeout. Near the timeout means slow or "
            "locked tables.",
            "s",
            [
                target(
                    f"jobqueue_exporter_query_duration_seconds{{{E}}}", "{{query}} {{instance}}"
                ),
                target(
                    f"jobqueue_exporter_collection_timeout_seconds{{{E}}}", "timeout {{instance}}"
                ),
            ],
            Look(width=6, links=runbook("JobQueueCollectionSlow")),
        ),
        timeseries(
            "Collection errors by reason",
            "Failed collections per second by reason (timeout, connection, query, schema, "
            "permission), per replica. Should be 0.",
            "ops",
            [
                target(
                    f"sum by (instance, reason) "
                    f"({rate(f'jobqueue_exporter_collection_errors_total{{{E}}}')})",
                    "{{reason}} {{instance}}",
                )
            ],
            Look(width=6, links=runbook("JobQueueDatabaseUnreachable")),
        ),
        timeseries(
            "Skipped collections",
            "Collection ticks skipped per second because the previous collection was still "
            "running. Should be 0.",
            "ops",
            [
                target(
                    f"sum by (instance) "
                    f"({rate(f'jobqueue_exporter_collections_skipped_total{{{E}}}')})",
                    "{{instance}}",
                )
            ],
            Look(width=4, links=runbook("JobQueueCollectionSlow")),
        ),
        stat(
            "Time since last success",
            "Seconds since each replica's last successful collection (Prometheus clock "
            "minus the database-clock timestamp). About one interval when healthy.",
            "s",
            [
                target(
                    f"time() - (jobqueue_exporter_last_success_timestamp_seconds{{{E}}} > 0)",
                    "{{instance}}",
                )
            ],
            Look(
                width=4,
                thresholds=steps(("green", None), ("orange", 60), ("red", 180)),
                links=runbook("JobQueueExporterDown", "JobQueueDatabaseUnreachable"),
            ),
        ),
        stat(
            "Missing indexes",
            "Indexes the exporter's queries need that do not exist (`jobqueue-exporter "
            "indexes --config.file F` prints them). Should be 0.",
            "short",
            [target(sum_by("", dedup(f"jobqueue_exporter_missing_index{{{E}}}")))],
            Look(
                width=4,
                thresholds=steps(("green", None), ("orange", 1)),
                no_value="0",
                links=runbook("JobQueueMissingIndex"),
            ),
        ),
    ]


def capacity_row() -> list[Json]:
    """Row: draining, leases, collections, malformed rows and the running build."""
    ready = sum_by("job_type", dedup(f'jobqueue_jobs{{{Q}, status="pending"}}'))
    done = counter_rate("jobqueue_jobs_completed_total", "job_type")
    errors = sum_by("queue", rate(f"jobqueue_exporter_collection_errors_total{{{E}}}"))
    collections = sum_by("queue", rate(f"jobqueue_exporter_collections_total{{{E}}}"))
    return [
        timeseries(
            "Time to drain",
            "Pending jobs divided by the completion rate: how long the backlog takes to drain "
            "at the current pace (infinite when nothing completes).",
            "s",
            [target(f"{ready} / {done}", "{{job_type}}")],
            Look(width=4, links=runbook("JobQueueSlowDrain", "JobQueueNoProgress")),
        ),
        timeseries(
            "Lease-expired age",
            "Seconds since the oldest expired lease ran out, per job type; 0 when none. "
            "Above 10 minutes the reaper is not running.",
            "s",
            [target(f"max by (job_type) (jobqueue_lease_expired_oldest_seconds{{{Q}}})")],
            Look(width=4, links=runbook("JobQueueReaperNotRunning", "JobQueueJobsStuck")),
        ),
        timeseries(
            "Collection duration",
            "Wall time of the last collection per exporter, and the collection timeout.",
            "s",
            [
                target(f"jobqueue_exporter_collection_duration_seconds{{{E}}}", "{{instance}}"),
                target(f"max(jobqueue_exporter_collection_timeout_seconds{{{E}}})", "timeout"),
            ],
            Look(width=4, links=runbook("JobQueueCollectionSlow")),
        ),
        timeseries(
            "Collection error ratio",
            "Failed collections / all collections per queue over the rate window; a flaky "
            "database shows here long before jobqueue_up stays at 0.",
            "percentunit",
            [target(f"{errors} / {collections}", "{{queue}}")],
            Look(width=4, links=runbook("JobQueueCollectionErrors", "JobQueueDatabaseUnreachable")),
        ),
        timeseries(
            "Malformed rows",
            "Completed rows whose result fields could not be read, per second by field: cost "
            "extraction misses them.",
            "ops",
            [
                target(
                    sum_by("field", rate(f"jobqueue_exporter_malformed_rows_total{{{E}}}")),
                    "{{field}}",
                )
            ],
            Look(width=4, links=runbook("JobQueueMalformedRows")),
        ),
        table(
            "Build version",
            "The exporter build each instance runs (jobqueue_exporter_build_info).",
            "short",
            [
                target(
                    # Process-level: build_info has no queue label.
                    'count by (version) (jobqueue_exporter_build_info{job=~"$job", '
                    'instance=~"$instance"})',
                    "{{version}}",
                    instant=True,
                )
            ],
            Look(width=4),
        ),
    ]
