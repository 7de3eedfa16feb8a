"""Generate dashboards/jobqueue.json, the Grafana dashboard "Job queue / Overview".

The JSON is committed; this script is its source, and tests/test_dashboard.py fails when
the two differ. Run ``python dashboards/build_dashboard.py`` after editing a panel.

Two exporter replicas may watch the same database and report the same gauges, so every
queue gauge is deduplicated with ``max without(instance, pod)`` before it is summed over job
types or reasons. Counters come from the queue's elected exporter only; over a rollout the
old and the new pod each hold part of a window, so counter rates and increases are summed
(a max would keep only one pod's part).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from exporter.rules.slo import ATTEMPT_TARGET

OUTPUT = Path(__file__).with_name("jobqueue.json")
UID = "jobqueue-exporter"
TITLE = "Job queue / Overview"
# Same base as AlertSettings.runbook_base_url in exporter/config.py (a test checks it).
RUNBOOK_BASE_URL = (
    "https://github.com/jobqueue-exporter/jobqueue-exporter/blob/main/docs/runbooks.md"
)
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# Queue metrics carry job_type, exporter metrics do not; both carry job and queue.
Q = 'job=~"$job", queue=~"$queue", instance=~"$instance", job_type=~"$job_type"'
E = 'job=~"$job", queue=~"$queue", instance=~"$instance"'
# Recorded series have no instance label: the empty value matches too.
R = 'job=~"$job", queue=~"$queue", instance=~"$instance|", job_type=~"$job_type"'
# Each job type's success target, recorded by the rules from the same settings as the burn
# rates (alerts.slo_success_target and its per-type overrides), so panel and alert agree.
SUCCESS_TARGET = f"max by (job_type) ({ATTEMPT_TARGET}{{{R}}})"
ERROR_BUDGET = f"(1 - {SUCCESS_TARGET})"


def dedup(expr: str) -> str:
    """Collapse exporter replicas that report the same database facts."""
    return f"max without(instance, pod) ({expr})"


def rate(selector: str) -> str:
    """A per-second rate over Grafana's safe rate window."""
    return f"rate({selector}[$__rate_interval])"


def sum_by(labels: str, expr: str) -> str:
    """Sum over everything but the given labels ("" sums to one series)."""
    return f"sum by ({labels}) ({expr})" if labels else f"sum({expr})"


def counter_rate(metric: str, by: str, selector: str = Q) -> str:
    """Per-second rate of a counter, summed over pods by the given labels."""
    return sum_by(by, rate(f"{metric}{{{selector}}}"))


def quantile(q: float, histogram: str, by: str = "") -> str:
    """A quantile of a histogram over the rate window, replicas deduplicated."""
    labels = f"{by}, le" if by else "le"
    return f"histogram_quantile({q}, {counter_rate(histogram + '_bucket', labels)})"


def target(expr: str, legend: str = "__auto", *, instant: bool = False) -> dict[str, Any]:
    """One Prometheus query of a panel (refId is filled in by panel())."""
    return {
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": expr,
        "instant": instant,
        "legendFormat": legend,
        "range": not instant,
    }


def runbook(*alerts: str) -> list[dict[str, Any]]:
    """Panel links to the runbook section of each alert the panel explains."""
    return [
        {"title": f"Runbook: {a}", "url": f"{RUNBOOK_BASE_URL}#{a.lower()}", "targetBlank": True}
        for a in alerts
    ]


def steps(*pairs: tuple[str, float | None]) -> dict[str, Any]:
    """Absolute thresholds, the first one with value None as Grafana wants."""
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in pairs]}


GREEN_ONLY = steps(("green", None))


def panel(
    kind: str,
    title: str,
    description: str,
    unit: str,
    targets: list[dict[str, Any]],
    *,
    width: int,
    links: list[dict[str, Any]] | None = None,
    thresholds: dict[str, Any] | None = None,
    mappings: list[dict[str, Any]] | None = None,
    no_value: str | None = None,
    stacked: bool = False,
    bars: bool = False,
    interval: str | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
) -> dict[str, Any]:
    """A stat, timeseries or bargauge panel; id and gridPos are set by build_dashboard()."""
    defaults: dict[str, Any] = {
        "unit": unit,
        "thresholds": thresholds or GREEN_ONLY,
        "mappings": mappings or [],
        "color": {"mode": "thresholds" if kind != "timeseries" else "palette-classic"},
    }
    if no_value is not None:
        # A count with no series means nothing to count, so show 0 rather than "No data".
        defaults["noValue"] = no_value
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    reduce = {"calcs": ["lastNotNull"], "fields": "", "values": False}
    options: dict[str, Any]
    if kind == "stat":
        options = {
            "reduceOptions": reduce,
            "colorMode": "background",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "textMode": "auto",
        }
    elif kind == "table":
        options = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}}
    elif kind == "bargauge":
        options = {
            "reduceOptions": reduce,
            "displayMode": "gradient",
            "orientation": "horizontal",
            "showUnfilled": True,
        }
    else:
        defaults["custom"] = {
            "drawStyle": "bars" if bars else "line",
            "fillOpacity": 80 if bars else (30 if stacked else 10),
            "lineWidth": 1,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"group": "A", "mode": "normal" if stacked else "none"},
        }
        options = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    result: dict[str, Any] = {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options,
        "links": links or [],
        "targets": [dict(t, refId=chr(ord("A") + i)) for i, t in enumerate(targets)],
    }
    if interval is not None:
        result["interval"] = interval
    if kind == "table":
        # One row per job type: the instant queries joined on job_type, one column each.
        result["transformations"] = [
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {"excludeByName": {"Time": True}}},
        ]
        for t in result["targets"]:
            t["format"] = "table"
    result["_width"] = width
    return result


def health_row() -> list[dict[str, Any]]:
    """Row 1: the questions an operator asks first, as single numbers."""
    count = steps(("green", None), ("red", 1))
    return [
        panel(
            "stat",
            "Database reachable",
            "Whether each exporter replica's last collection from the queue's database "
            "succeeded (jobqueue_up). Down means every queue number below is stale or missing; "
            "no value at all for a queue means its exporter is gone (JobQueueMetricsAbsent).",
            "none",
            [target(f"jobqueue_up{{{E}}}", "{{instance}}")],
            width=4,
            mappings=[
                {
                    "type": "value",
                    "options": {
                        "0": {"text": "Down", "color": "red", "index": 0},
                        "1": {"text": "Up", "color": "green", "index": 1},
                    },
                }
            ],
            thresholds=steps(("red", None), ("green", 1)),
            links=runbook("JobQueueDatabaseUnreachable", "JobQueueMetricsAbsent"),
        ),
        panel(
            "stat",
            "Jobs stuck",
            "Running jobs that need a human now: lease expired and not reaped, or running "
            "longer than the stuck threshold. Should be 0.",
            "short",
            [target(sum_by("", dedup(f"jobqueue_stuck_jobs{{{Q}}}")))],
            width=3,
            thresholds=count,
            no_value="0",
            links=runbook("JobQueueJobsStuck", "JobQueueReaperNotRunning"),
        ),
        panel(
            "stat",
            "Oldest runnable wait",
            "How long the oldest claimable pending job has waited for a worker since its "
            "run_after. Grows when workers are missing or saturated.",
            "s",
            [target(f"max(jobqueue_oldest_ready_wait_seconds{{{Q}}})")],
            width=4,
            thresholds=steps(("green", None), ("orange", 300), ("red", 900)),
            links=runbook("JobQueueBacklogStale", "JobQueueNoProgress"),
        ),
        panel(
            "stat",
            "Dead letters (1h)",
            "Jobs that exhausted their retries and reached DEAD in the last hour.",
            "short",
            [target(sum_by("", (f"increase(jobqueue_jobs_dead_total{{{Q}}}[1h])")))],
            width=3,
            thresholds=steps(("green", None), ("orange", 1), ("red", 10)),
            no_value="0",
            links=runbook("JobQueueDeadLetterGrowing"),
        ),
        panel(
            "stat",
            "Deadline kills (1h)",
            "Attempts killed by their deadline in the last hour (failures with "
            "reason=deadline), retried or dead-lettered.",
            "short",
            [
                target(
                    sum_by(
                        "",
                        f'increase(jobqueue_job_failures_total{{{Q}, reason="deadline"}}[1h])',
                    )
                )
            ],
            width=3,
            thresholds=steps(("green", None), ("orange", 5), ("red", 30)),
            no_value="0",
            links=runbook("JobQueueDeadlineKills"),
        ),
        panel(
            "stat",
            "Cost (1h)",
            "USD spent by jobs that completed in the last hour, all components (ai, proxy, other).",
            "currencyUSD",
            [target(sum_by("", (f"increase(jobqueue_cost_usd_total{{{Q}}}[1h])")))],
            width=4,
            no_value="0",
            links=runbook("JobQueueCostSpike", "JobQueueCostBudgetExceeded"),
        ),
        panel(
            "stat",
            "Active alerts",
            "JobQueue alerts firing now in Prometheus (ALERTS). 0 is healthy; see the "
            "runbook for each alert.",
            "short",
            # Aggregated alerts carry no instance label, and an alert on a whole scrape job no
            # queue label, hence the empty alternatives.
            [
                target(
                    'count(ALERTS{alertname=~"JobQueue.*", alertstate="firing", '
                    'job=~"$job", queue=~"$queue|", instance=~"$instance|"})'
                )
            ],
            width=3,
            thresholds=count,
            no_value="0",
            links=[{"title": "Runbooks", "url": RUNBOOK_BASE_URL, "targetBlank": True}],
        ),
    ]


def flow_row() -> list[dict[str, Any]]:
    """Row 2: what goes in, what comes out, what waits."""
    pending = sum_by("", dedup(f'jobqueue_jobs{{{Q}, status="pending"}}'))
    scheduled = sum_by("", dedup(f"jobqueue_jobs_scheduled{{{Q}}}"))
    return [
        panel(
            "timeseries",
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
            width=8,
            links=runbook("JobQueueNoProgress"),
        ),
        panel(
            "timeseries",
            "Queue depth by status",
            "Jobs pending, running and dead (DONE is left out: it only grows and would "
            "flatten the rest).",
            "short",
            [
                target(
                    sum_by("status", dedup(f'jobqueue_jobs{{{Q}, status!="done"}}')), "{{status}}"
                )
            ],
            width=8,
        ),
        panel(
            "timeseries",
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
            width=8,
            stacked=True,
            links=runbook("JobQueueBacklogStale"),
        ),
    ]


def latency_row() -> list[dict[str, Any]]:
    """Row 3: how long jobs wait, run and take end to end."""

    def three(histogram: str, by: str = "") -> list[dict[str, Any]]:
        suffix = " {{job_type}}" if by else ""
        return [
            target(quantile(q, histogram, by), f"p{round(q * 100)}{suffix}")
            for q in (0.5, 0.95, 0.99)
        ]

    return [
        panel(
            "timeseries",
            "Wait time p50 / p95 / p99",
            "Time the completing attempt of a job waited for a worker (run start - "
            "run_after), from the jobqueue_job_wait_seconds histogram.",
            "s",
            three("jobqueue_job_wait_seconds"),
            width=6,
            links=runbook("JobQueueBacklogStale"),
        ),
        panel(
            "timeseries",
            "End-to-end latency p50 / p95 / p99",
            "Enqueue to DONE, retries and backoff included, from the "
            "jobqueue_job_latency_seconds histogram.",
            "s",
            three("jobqueue_job_latency_seconds"),
            width=6,
        ),
        panel(
            "timeseries",
            "Job duration p50 / p95 / p99 by job type",
            "Run time of completed jobs as reported in result.metrics.duration_ms, by job type.",
            "s",
            three("jobqueue_job_duration_seconds", "job_type"),
            width=6,
        ),
        panel(
            "timeseries",
            "Longest current run",
            "Seconds the longest running job of each type has been running; 0 when none "
            "runs. A line that keeps climbing past the deadline is a stuck job.",
            "s",
            [target(f"max by (job_type) (jobqueue_running_oldest_seconds{{{Q}}})", "{{job_type}}")],
            width=6,
            links=runbook("JobQueueJobsStuck"),
        ),
    ]


def failures_row() -> list[dict[str, Any]]:
    """Row 4: what fails, how often, and where it ends."""
    failed = counter_rate("jobqueue_job_failures_total", "job_type")
    completed = counter_rate("jobqueue_jobs_completed_total", "job_type")
    # A job type with completions but no failure series yet shows 0, and one with
    # failures but no completions shows 1, instead of vanishing from the graph.
    ratio = f"({failed} / ({failed} + ({completed} or {failed} * 0))) or {completed} * 0"
    return [
        panel(
            "timeseries",
            "Failed attempts by reason",
            "Failed attempts per minute by reason: deadline (killed by its deadline), "
            "lease_expired (worker vanished, reaped), error (the job raised).",
            "opm",
            [target(f"60 * {counter_rate('jobqueue_job_failures_total', 'reason')}", "{{reason}}")],
            width=6,
            links=runbook("JobQueueDeadlineKills"),
        ),
        panel(
            "timeseries",
            "Failure ratio by job type",
            "Failed attempts / (failed attempts + completions) per job type over the rate "
            "window. 1 means nothing of that type succeeds.",
            "percentunit",
            [target(ratio, "{{job_type}}")],
            width=6,
            minimum=0,
            maximum=1,
            links=runbook("JobQueueHighFailureRatio"),
        ),
        panel(
            "timeseries",
            "Dead letters by reason",
            "Jobs reaching DEAD per minute, by the reason of their last failure.",
            "opm",
            [target(f"60 * {counter_rate('jobqueue_jobs_dead_total', 'reason')}", "{{reason}}")],
            width=6,
            links=runbook("JobQueueDeadLetterGrowing"),
        ),
        panel(
            "timeseries",
            "Requeues",
            "Dead jobs put back to pending by an operator, per minute by job type.",
            "opm",
            [
                target(
                    f"60 * {counter_rate('jobqueue_jobs_requeued_total', 'job_type')}",
                    "{{job_type}}",
                )
            ],
            width=6,
        ),
    ]


def cost_row() -> list[dict[str, Any]]:
    """Row 5: what the queue costs, the queue's own hourly cost chart first."""
    cost_rate = counter_rate("jobqueue_cost_usd_total", "job_type")
    done_rate = counter_rate("jobqueue_jobs_completed_total", "job_type")
    return [
        panel(
            "timeseries",
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
            width=8,
            stacked=True,
            bars=True,
            interval="1h",
            links=runbook("JobQueueCostSpike", "JobQueueCostBudgetExceeded"),
        ),
        panel(
            "timeseries",
            "Cost per completed job by job type",
            "Average USD per completed job over the rate window: cost rate / completion rate.",
            "currencyUSD",
            [target(f"{cost_rate} / {done_rate}", "{{job_type}}")],
            width=8,
        ),
        panel(
            "bargauge",
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
            width=8,
        ),
    ]


def exporter_row() -> list[dict[str, Any]]:
    """Row 6: the exporter's own health, per replica (no deduplication here)."""
    return [
        panel(
            "timeseries",
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
            width=6,
            links=runbook("JobQueueCollectionSlow"),
        ),
        panel(
            "timeseries",
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
            width=6,
            links=runbook("JobQueueDatabaseUnreachable"),
        ),
        panel(
            "timeseries",
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
            width=4,
            links=runbook("JobQueueCollectionSlow"),
        ),
        panel(
            "stat",
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
            width=4,
            thresholds=steps(("green", None), ("orange", 60), ("red", 180)),
            links=runbook("JobQueueExporterDown", "JobQueueDatabaseUnreachable"),
        ),
        panel(
            "stat",
            "Missing indexes",
            "Indexes the exporter's queries need that do not exist (see "
            "exporter/sql/indexes.sql). Should be 0.",
            "short",
            [target(sum_by("", dedup(f"jobqueue_exporter_missing_index{{{E}}}")))],
            width=4,
            thresholds=steps(("green", None), ("orange", 1)),
            no_value="0",
            links=runbook("JobQueueMissingIndex"),
        ),
    ]


def failure_ratio(window: str) -> str:
    """Failed attempts / finished attempts per job type over ``window``."""
    failed = sum_by("job_type", f"increase(jobqueue_job_failures_total{{{Q}}}[{window}])")
    done = sum_by("job_type", f"increase(jobqueue_jobs_completed_total{{{Q}}}[{window}])")
    return f"{failed} / ({failed} + {done})"


def types_row() -> list[dict[str, Any]]:
    """Row 2: one line per job type, and the success SLO's burn and budget."""
    ready = sum_by("job_type", dedup(f'jobqueue_jobs{{{Q}, status="pending"}}'))
    columns = [
        (ready, "ready"),
        (f"max by (job_type) (jobqueue_oldest_ready_wait_seconds{{{Q}}})", "oldest wait s"),
        (failure_ratio("1h"), "failure ratio 1h"),
        (SUCCESS_TARGET, "SLO target"),
        (f"{failure_ratio('1h')} / {ERROR_BUDGET}", "SLO burn 1h"),
        (sum_by("job_type", f"increase(jobqueue_cost_usd_total{{{Q}}}[1h])"), "USD 1h"),
        (quantile(0.95, "jobqueue_job_wait_seconds", "job_type"), "p95 wait s"),
    ]
    return [
        panel(
            "table",
            "Job types",
            "One row per job type: runnable pending jobs, the oldest runnable wait, the share "
            "of failed attempts over the last hour, the type's success target (recorded by the "
            "rules, overrides included) and the burn rate of its budget (1 = exactly on "
            "target), the last hour's cost and the p95 wait.",
            "short",
            [target(expr, legend, instant=True) for expr, legend in columns],
            width=12,
            links=runbook("JobQueueErrorBudgetBurn", "JobQueueBacklogStale"),
        ),
        panel(
            "timeseries",
            "SLO burn rate by job type (1h)",
            "Failed share of attempts over the last hour divided by the job type's error budget "
            "(1 - its recorded success target): above 14.4 with the 5m burn also high, "
            "JobQueueErrorBudgetBurn pages.",
            "short",
            [target(f"{failure_ratio('1h')} / {ERROR_BUDGET}", "{{job_type}}")],
            width=6,
            thresholds=steps(("green", None), ("orange", 6), ("red", 14.4)),
            links=runbook("JobQueueErrorBudgetBurn", "JobQueueWaitBudgetBurn"),
        ),
        panel(
            "bargauge",
            "Error budget left (1d)",
            "Share of the last day's error budget (1 - the type's recorded success target) "
            "not spent yet, "
            "per job type; 0 means the day's budget is gone.",
            "percentunit",
            [
                target(
                    f"clamp_min(1 - ({failure_ratio('1d')}) / {ERROR_BUDGET}, 0)",
                    "{{job_type}}",
                    instant=True,
                )
            ],
            width=6,
            thresholds=steps(("red", None), ("orange", 0.25), ("green", 0.5)),
            minimum=0,
            maximum=1,
        ),
    ]


def capacity_row() -> list[dict[str, Any]]:
    """Row: draining, leases, collections, malformed rows and the running build."""
    ready = sum_by("job_type", dedup(f'jobqueue_jobs{{{Q}, status="pending"}}'))
    done = counter_rate("jobqueue_jobs_completed_total", "job_type")
    errors = sum_by("queue", rate(f"jobqueue_exporter_collection_errors_total{{{E}}}"))
    collections = sum_by("queue", rate(f"jobqueue_exporter_collections_total{{{E}}}"))
    return [
        panel(
            "timeseries",
            "Time to drain",
            "Pending jobs divided by the completion rate: how long the backlog takes to drain "
            "at the current pace (infinite when nothing completes).",
            "s",
            [target(f"{ready} / {done}", "{{job_type}}")],
            width=4,
            links=runbook("JobQueueSlowDrain", "JobQueueNoProgress"),
        ),
        panel(
            "timeseries",
            "Lease-expired age",
            "Seconds since the oldest expired lease ran out, per job type; 0 when none. "
            "Above 10 minutes the reaper is not running.",
            "s",
            [target(f"max by (job_type) (jobqueue_lease_expired_oldest_seconds{{{Q}}})")],
            width=4,
            links=runbook("JobQueueReaperNotRunning", "JobQueueJobsStuck"),
        ),
        panel(
            "timeseries",
            "Collection duration",
            "Wall time of the last collection per exporter, and the collection timeout.",
            "s",
            [
                target(f"jobqueue_exporter_collection_duration_seconds{{{E}}}", "{{instance}}"),
                target(f"max(jobqueue_exporter_collection_timeout_seconds{{{E}}})", "timeout"),
            ],
            width=4,
            links=runbook("JobQueueCollectionSlow"),
        ),
        panel(
            "timeseries",
            "Collection error ratio",
            "Failed collections / all collections per queue over the rate window; a flaky "
            "database shows here long before jobqueue_up stays at 0.",
            "percentunit",
            [target(f"{errors} / {collections}", "{{queue}}")],
            width=4,
            links=runbook("JobQueueCollectionErrors", "JobQueueDatabaseUnreachable"),
        ),
        panel(
            "timeseries",
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
            width=4,
            links=runbook("JobQueueMalformedRows"),
        ),
        panel(
            "table",
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
            width=4,
        ),
    ]


ROWS: tuple[tuple[str, int, Any], ...] = (
    ("Health at a glance", 5, health_row),
    ("Job types and SLO", 8, types_row),
    ("Flow", 8, flow_row),
    ("Latency", 8, latency_row),
    ("Failures", 8, failures_row),
    ("Cost", 8, cost_row),
    ("Exporter", 7, exporter_row),
    ("Capacity, leases and collections", 7, capacity_row),
)


def variables() -> list[dict[str, Any]]:
    """The datasource picker and the instance / job_type filters."""

    def query_var(name: str, label: str, query: str) -> dict[str, Any]:
        return {
            "type": "query",
            "name": name,
            "label": label,
            "datasource": DATASOURCE,
            "definition": query,
            "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
            "refresh": 2,
            "multi": True,
            "includeAll": True,
            "allValue": ".+",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "options": [],
            "regex": "",
            "sort": 1,
            "hide": 0,
        }

    return [
        {
            "type": "datasource",
            "name": "datasource",
            "label": "Data source",
            "query": "prometheus",
            "current": {},
            "options": [],
            "refresh": 1,
            "regex": "",
            "hide": 0,
        },
        query_var("job", "Job", "label_values(jobqueue_up, job)"),
        query_var("queue", "Queue", 'label_values(jobqueue_up{job=~"$job"}, queue)'),
        query_var("instance", "Instance", "label_values(jobqueue_up, instance)"),
        query_var("job_type", "Job type", "label_values(jobqueue_jobs, job_type)"),
    ]


def build_dashboard() -> dict[str, Any]:
    """The whole dashboard as a JSON-ready dict, ids and positions assigned in order."""
    panels: list[dict[str, Any]] = []
    y = 0
    for row_title, height, make in ROWS:
        panels.append(
            {
                "type": "row",
                "title": row_title,
                "id": len(panels) + 1,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        x = 0
        for p in make():
            width = p.pop("_width")
            panels.append(
                {"id": len(panels) + 1, "gridPos": {"h": height, "w": width, "x": x, "y": y}, **p}
            )
            x += width
        if x != 24:
            raise ValueError(f"row {row_title!r} is {x} columns wide, not 24")
        y += height
    return {
        "id": None,
        "uid": UID,
        "title": TITLE,
        "description": "Is the job queue healthy, and what is it costing? Metrics from "
        "jobqueue-exporter.",
        "tags": ["jobqueue", "jobqueue-exporter", "postgresql"],
        "timezone": "utc",
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "weekStart": "",
        # Firing jobqueue alerts of the selected queues, as annotations on every panel.
        "annotations": {
            "list": [
                {
                    "datasource": DATASOURCE,
                    "enable": True,
                    "expr": (
                        'ALERTS{alertstate="firing", component="jobqueue", job=~"$job", '
                        'queue=~"$queue|"}'
                    ),
                    "iconColor": "red",
                    "name": "JobQueue alerts",
                    "step": "60s",
                    "tagKeys": "severity,job_type",
                    "titleFormat": "{{alertname}}",
                    "textFormat": "{{queue}} {{job_type}}",
                    "useValueForTime": False,
                }
            ]
        },
        "links": [
            {
                "title": "Runbooks",
                "type": "link",
                "url": RUNBOOK_BASE_URL,
                "icon": "doc",
                "targetBlank": True,
                "tooltip": "What to do for each alert",
                "asDropdown": False,
                "includeVars": False,
                "keepTime": False,
                "tags": [],
            },
        ],
        "templating": {"list": variables()},
        "panels": panels,
    }


def render() -> str:
    """The dashboard as the exact text committed in jobqueue.json."""
    return json.dumps(build_dashboard(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Write jobqueue.json, or with --check exit 1 when it is out of date."""
    text = render()
    if "--check" in argv:
        return 0 if OUTPUT.read_text() == text else 1
    OUTPUT.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
