"""Cases that need last week's history: seasonal cost, unit cost, producers stopped, budget.

They run at a 5-minute evaluation interval (the baseline group's own) so that a week and more
of history stays quick to evaluate; inputs are sampled every 5 minutes too.
"""

from __future__ import annotations

from tests.rulegen import Case, s
from tests.rulegen.cases import lab

WEEK = 2016  # 5-minute samples in a week
COST = "jobqueue_cost_usd_total"
DONE = "jobqueue_jobs_completed_total"


def steady(per_step: float, steps: int, then: float | None = None, more: int = 0) -> str:
    """A counter rising by ``per_step`` each 5m for ``steps``, then by ``then`` for ``more``."""
    text = f"0+{per_step!r}x{steps}"
    if then is not None:
        text += f" {per_step * steps + then!r}+{then!r}x{more}"
    return text


def weekly_cases() -> list[Case]:
    return [
        *slow_burn_cases(),
        Case(
            "JobQueueCostSpike fires when a type steps from 3 to 12 USD per hour",
            "JobQueueCostSpike",
            [s(COST, steady(0.25, WEEK + 24, 1.0, 48), job_type="crawl", component="ai")],
            fire_at="170h35m",
            value=12,
            labels=lab(job_type="crawl"),
            silent_at=("170h",),
            interval="5m",
        ),
        Case(
            "JobQueueCostSpike stays silent at exactly 3 times and below the excess floor",
            "JobQueueCostSpike",
            [
                s(COST, steady(0.25, WEEK + 24, 0.75, 48), job_type="three", component="ai"),
                s(COST, steady(1 / 12, WEEK + 24, 5.5 / 12, 48), job_type="cheap", component="ai"),
            ],
            silent_at=("170h30m", "172h"),
            interval="5m",
        ),
        Case(
            "JobQueueUnitCostAnomaly fires when a job costs 2.5 times last week's",
            "JobQueueUnitCostAnomaly",
            [
                s(COST, steady(5.0, WEEK + 12, 12.5, 60), job_type="crawl", component="ai"),
                s(DONE, "0+10x2100", job_type="crawl"),
            ],
            fire_at="170h30m",
            value=1.25,
            labels=lab(job_type="crawl"),
            silent_at=("169h",),
            interval="5m",
        ),
        Case(
            "JobQueueUnitCostAnomaly stays silent at exactly twice and on few jobs",
            "JobQueueUnitCostAnomaly",
            [
                s(COST, steady(5.0, WEEK + 12, 10.0, 60), job_type="twice", component="ai"),
                s(DONE, "0+10x2100", job_type="twice"),
                s(COST, steady(0.5, WEEK + 12, 5.0, 60), job_type="few", component="ai"),
                s(DONE, "0+1x2100", job_type="few"),
            ],
            silent_at=("170h30m", "172h"),
            interval="5m",
        ),
        Case(
            "JobQueueProducersStopped fires when enqueues stop and last week was busy",
            "JobQueueProducersStopped",
            [
                s(
                    "jobqueue_jobs_enqueued_total",
                    f"0+10x{WEEK + 24} {10 * WEEK + 240}x40",
                    job_type="crawl",
                )
            ],
            fire_at="170h45m",
            value=0,
            labels=lab(job_type="crawl"),
            silent_at=("170h40m",),
            interval="5m",
        ),
        Case(
            "JobQueueProducersStopped stays silent on a quiet type and while enqueues go on",
            "JobQueueProducersStopped",
            [
                s(
                    "jobqueue_jobs_enqueued_total",
                    f"0+5x{WEEK + 24} {5 * WEEK + 120}x40",
                    job_type="quiet",
                ),
                s("jobqueue_jobs_enqueued_total", f"0+10x{WEEK + 60}", job_type="busy"),
            ],
            silent_at=("171h", "172h"),
            interval="5m",
        ),
        Case(
            "JobQueueCostNewJobType stays silent for a type that spent a little a week ago",
            "JobQueueCostNewJobType",
            [s(COST, steady(0.5 / 12, WEEK + 12, 2.5, 36), job_type="old", component="ai")],
            silent_at=("169h", "171h"),
            interval="5m",
        ),
    ]


def creep(per_step: float, ratios: list[float]) -> tuple[str, str]:
    """Failure and completion counters of ``per_step`` attempts, failing at ``ratios`` in turn."""
    failed = completed = 0.0
    fails, dones = ["0"], ["0"]
    for ratio in ratios:
        failed += per_step * ratio
        completed += per_step * (1 - ratio)
        fails.append(repr(round(failed, 6)))
        dones.append(repr(round(completed, 6)))
    return " ".join(fails), " ".join(dones)


def slow_burn_cases() -> list[Case]:
    """A day at 0.5 % failures, then a creep to 8 % over 12 hours (a 99 % SLO).

    The page (6x over 6h and 30m) fires at 35h55m; before the 3d/6h window, the ticket
    (3x over 1d and 2h) opened only at 38h15m, after the page. 1x over 3d and 6h opens it at
    31h20m, four and a half hours before the page.
    """
    day, half_day = 288, 144  # 5-minute samples
    ratios = [0.005] * day + [0.005 + 0.075 * (k + 1) / half_day for k in range(half_day)]
    fails, dones = creep(100.0, ratios + [0.08] * 12)
    return [
        Case(
            "JobQueueErrorBudgetBurn opens its ticket on a slow creep hours before the page",
            "JobQueueErrorBudgetBurn",
            [
                s("jobqueue_job_failures_total", fails, job_type="crawl", reason="error"),
                s(DONE, dones, job_type="crawl"),
            ],
            fire_at="31h20m",
            value=1.0,
            labels=lab(job_type="crawl"),
            severities=("warning",),
            silent_at=("31h15m",),
            interval="5m",
        ),
    ]


def budget_cases() -> list[Case]:
    return [
        Case(
            "JobQueueCostBudgetExceeded fires when the queue spends 60 USD in an hour",
            "JobQueueCostBudgetExceeded",
            [
                s(COST, "0x139 40x40", job_type="crawl", component="ai"),
                s(COST, "0x139 20x40", job_type="mail", component="proxy"),
            ],
            fire_at="75m",
            value=60,
            labels=lab(),
            silent_at=("74m30s",),
        ),
        Case(
            "JobQueueCostBudgetExceeded stays silent at exactly the budget",
            "JobQueueCostBudgetExceeded",
            [s(COST, "0x139 50x60", job_type="crawl", component="ai")],
            silent_at=("75m", "90m"),
        ),
    ]
