"""Cost rules: seasonal baselines (recorded in a slow group) and the cost alerts.

The baseline of a job type's hourly spend is the same hours of past weeks: the highest hourly
spend within an hour either side of this moment, one week ago (averaged with two, three...
weeks ago when that history exists). A diurnal workload then compares its busy afternoon with
last week's busy afternoon, and a night spike with last week's quiet night. Reading weeks-old
windows is costly, so the baselines are recorded in a group evaluated every few minutes.
"""

from __future__ import annotations

from typing import Any

from exporter.rules.promql import JOB, JOB_TYPE, QUEUE, VALUE_USD, number
from exporter.settings import AlertSettings

HOURLY = "job_type:jobqueue_cost_usd:increase1h"
RATE30M = "job_type:jobqueue_cost_usd_per_hour:rate30m"
RATE5M = "job_type:jobqueue_cost_usd_per_hour:rate5m"
SEASONAL = "job_type:jobqueue_cost_usd:increase1h_seasonal"
LAST_WEEK_DAY = "job_type:jobqueue_cost_usd:increase1h_max1d_offset1w"
UNIT = "job_type:jobqueue_cost_per_job_usd:ratio1h"
UNIT_LAST_WEEK = "job_type:jobqueue_cost_per_job_usd:ratio1h_avg1d_offset1w"
ENQUEUED_LAST_WEEK = "job_type:jobqueue_jobs_enqueued:increase1h_offset1w"
WEEK_HOURS = 168

USD = VALUE_USD


def _week(n: int) -> str:
    # The 2h window ending an hour after this moment, n weeks ago.
    return f"max_over_time({HOURLY}[2h] offset {WEEK_HOURS * n - 1}h)"


def baseline_rules(alerts: AlertSettings) -> list[dict[str, Any]]:
    """Week-old baselines of spend, unit cost and enqueue volume (the slow group)."""
    weeks = max(1, alerts.cost_spike_baseline_weeks)
    # The mean over as many past weeks as exist: `or` falls back to fewer weeks.
    options = []
    for n in range(weeks, 0, -1):
        total = " + ".join(_week(k) for k in range(1, n + 1))
        options.append(f"({total}) / {n}" if n > 1 else total)
    return [
        {"record": SEASONAL, "expr": "\nor\n".join(options)},
        # Any spend in the day around this moment a week ago: a type without it is new.
        {"record": LAST_WEEK_DAY, "expr": f"max_over_time({HOURLY}[1d] offset 6d12h)"},
        {"record": UNIT_LAST_WEEK, "expr": f"avg_over_time({UNIT}[1d] offset 1w)"},
        {
            "record": ENQUEUED_LAST_WEEK,
            "expr": "max_over_time(job_type:jobqueue_jobs_enqueued:increase1h[1h] offset 1w)",
        },
    ]


def cost_alert_specs(alerts: AlertSettings) -> list[dict[str, Any]]:
    """CostSpike, CostNewJobType and UnitCostAnomaly as keyword arguments of alerting._alert."""
    a = alerts
    n = number
    factor = n(a.cost_spike_factor)
    excess = n(a.cost_spike_floor_usd)
    new = n(a.cost_new_type_usd_per_hour)
    return [
        {
            "name": "JobQueueCostSpike",
            # 30m for speed, the excess floor for a cheap type's noise, 5m to resolve fast.
            "expr": f"{RATE30M} > {factor} * {SEASONAL}\n"
            "and\n"
            f"{RATE30M} - {SEASONAL} > {excess}\n"
            "and\n"
            f"{RATE5M} > {factor} * {SEASONAL}",
            "for_": a.cost_spike_for,
            "severity": "warning",
            "summary": "Spend is far above the same hours of past weeks.",
            "description": f"Job type {JOB_TYPE} of queue {QUEUE} spends {USD} USD per hour "
            f"(last 30m), more than {factor} times the same hours of the past "
            f"{a.cost_spike_baseline_weeks} week(s) and more than {excess} USD per hour above "
            "them.",
        },
        {
            "name": "JobQueueCostNewJobType",
            "expr": f"{HOURLY} > {new}\nunless\n{LAST_WEEK_DAY} > 0",
            "for_": a.cost_new_type_for,
            "severity": "warning",
            "summary": "A job type that spent nothing a week ago is expensive now.",
            "description": f"Job type {JOB_TYPE} of queue {QUEUE} cost {USD} USD in the last "
            f"hour (threshold {new} USD) and had no spend a week ago.",
        },
        {
            "name": "JobQueueUnitCostAnomaly",
            "expr": f"{UNIT} > {n(a.unit_cost_factor)} * {UNIT_LAST_WEEK}\n"
            "and\n"
            f"job_type:jobqueue_jobs_completed:increase1h >= {n(a.unit_cost_min_jobs)}",
            "for_": a.unit_cost_for,
            "severity": "warning",
            "summary": "Each completed job costs far more than last week.",
            "description": f"A completed job of type {JOB_TYPE} of queue {QUEUE} costs {USD} USD "
            f"over the last hour, more than {n(a.unit_cost_factor)} times last week's daily "
            f"mean (at least {n(a.unit_cost_min_jobs)} jobs an hour).",
        },
    ]


def budget_alert_specs(alerts: AlertSettings) -> list[dict[str, Any]]:
    """JobQueueCostBudgetExceeded, only when an hourly budget is configured."""
    budget = alerts.cost_budget_usd_per_hour
    if budget is None:
        return []
    return [
        {
            "name": "JobQueueCostBudgetExceeded",
            "expr": f"job:jobqueue_cost_usd:increase1h > {number(budget)}",
            "for_": alerts.cost_budget_for,
            "severity": "critical",
            "summary": "Spend in the last hour is above the configured hourly budget.",
            "description": f"Jobs of queue {QUEUE} in {JOB} cost {USD} USD in the last "
            f"hour; the budget is {number(budget)} USD per hour.",
        }
    ]
