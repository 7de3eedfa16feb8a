"""Rows 1 and 2: the numbers an operator asks first, and one line per job type with its SLO."""

from __future__ import annotations

from dashboards.grafana import (
    COUNT,
    Json,
    Look,
    bargauge,
    runbook,
    stat,
    steps,
    table,
    target,
    timeseries,
)
from dashboards.queries import (
    ERROR_BUDGET,
    SUCCESS_TARGET,
    E,
    Q,
    dedup,
    failure_ratio,
    quantile,
    sum_by,
)
from exporter.vocabulary import RUNBOOK_BASE_URL


def health_row() -> list[Json]:
    """Row 1: the questions an operator asks first, as single numbers."""
    return [
        stat(
            "Database reachable",
            "Whether each exporter replica's last collection from the queue's database "
            "succeeded (jobqueue_up). Down means every queue number below is stale or missing; "
            "no value at all for a queue means its exporter is gone (JobQueueMetricsAbsent).",
            "none",
            [target(f"jobqueue_up{{{E}}}", "{{instance}}")],
            Look(
                width=4,
                mappings=(
                    {
                        "type": "value",
                        "options": {
                            "0": {"text": "Down", "color": "red", "index": 0},
                            "1": {"text": "Up", "color": "green", "index": 1},
                        },
                    },
                ),
                thresholds=steps(("red", None), ("green", 1)),
                links=runbook("JobQueueDatabaseUnreachable", "JobQueueMetricsAbsent"),
            ),
        ),
        stat(
            "Jobs stuck",
            "Running jobs that need a human now: lease expired and not reaped, or running "
            "longer than the stuck threshold. Should be 0.",
            "short",
            [target(sum_by("", dedup(f"jobqueue_stuck_jobs{{{Q}}}")))],
            Look(
                width=3,
                thresholds=COUNT,
                no_value="0",
                links=runbook("JobQueueJobsStuck", "JobQueueReaperNotRunning"),
            ),
        ),
        stat(
            "Oldest runnable wait",
            "How long the oldest claimable pending job has waited for a worker since its "
            "run_after. Grows when workers are missing or saturated.",
            "s",
            [target(f"max(jobqueue_oldest_ready_wait_seconds{{{Q}}})")],
            Look(
                width=4,
                thresholds=steps(("green", None), ("orange", 300), ("red", 900)),
                links=runbook("JobQueueBacklogStale", "JobQueueNoProgress"),
            ),
        ),
        stat(
            "Dead letters (1h)",
            "Jobs that exhausted their retries and reached DEAD in the last hour.",
            "short",
            [target(sum_by("", (f"increase(jobqueue_jobs_dead_total{{{Q}}}[1h])")))],
            Look(
                width=3,
                thresholds=steps(("green", None), ("orange", 1), ("red", 10)),
                no_value="0",
                links=runbook("JobQueueDeadLetterGrowing"),
            ),
        ),
        stat(
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
            Look(
                width=3,
                thresholds=steps(("green", None), ("orange", 5), ("red", 30)),
                no_value="0",
                links=runbook("JobQueueDeadlineKills"),
            ),
        ),
        stat(
            "Cost (1h)",
            "USD spent by jobs that completed in the last hour, all components (ai, proxy, other).",
            "currencyUSD",
            [target(sum_by("", (f"increase(jobqueue_cost_usd_total{{{Q}}}[1h])")))],
            Look(
                width=4,
                no_value="0",
                links=runbook("JobQueueCostSpike", "JobQueueCostBudgetExceeded"),
            ),
        ),
        stat(
            "Active alerts",
            "JobQueue alerts firing now in Prometheus (ALERTS). 0 is healthy; see the "
            "runbook for each alert.",
            "short",
            [
                target(
                    'count(ALERTS{alertname=~"JobQueue.*", alertstate="firing", '
                    'job=~"$job", queue=~"$queue|", instance=~"$instance|"})'
                )
            ],
            Look(
                width=3,
                thresholds=COUNT,
                no_value="0",
                links=({"title": "Runbooks", "url": RUNBOOK_BASE_URL, "targetBlank": True},),
            ),
        ),
    ]


def types_row() -> list[Json]:
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
        table(
            "Job types",
            "One row per job type: runnable pending jobs, the oldest runnable wait, the share "
            "of failed attempts over the last hour, the type's success target (recorded by the "
            "rules, overrides included) and the burn rate of its budget (1 = exactly on "
            "target), the last hour's cost and the p95 wait.",
            "short",
            [target(expr, legend, instant=True) for expr, legend in columns],
            Look(width=12, links=runbook("JobQueueErrorBudgetBurn", "JobQueueBacklogStale")),
        ),
        timeseries(
            "SLO burn rate by job type (1h)",
            "Failed share of attempts over the last hour divided by the job type's error budget "
            "(1 - its recorded success target): above 14.4 with the 5m burn also high, "
            "JobQueueErrorBudgetBurn pages.",
            "short",
            [target(f"{failure_ratio('1h')} / {ERROR_BUDGET}", "{{job_type}}")],
            Look(
                width=6,
                thresholds=steps(("green", None), ("orange", 6), ("red", 14.4)),
                links=runbook("JobQueueErrorBudgetBurn", "JobQueueWaitBudgetBurn"),
            ),
        ),
        bargauge(
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
            Look(
                width=6,
                thresholds=steps(("red", None), ("orange", 0.25), ("green", 0.5)),
                minimum=0,
                maximum=1,
            ),
        ),
    ]
