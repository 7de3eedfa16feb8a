"""The week-old baselines on recorded inputs: each baseline's value checked against a model.

Instead of a week of raw counters run through every recording rule, the hourly series the
baselines read are fed directly, every 30 minutes at a quarter past and a quarter to the hour
(never on a range boundary), and the rules are evaluated every 30 minutes. A fortnight then
takes seconds, so the mutation test runs these cases for every mutant of a baseline rule.
The expected values come from :func:`over_time`, a model of Prometheus 2's range selection
(both ends of the range included).
"""

from __future__ import annotations

from collections.abc import Callable

from tests.rulegen import Case
from tests.rulegen.cases import r

HOURLY = "job_type:jobqueue_cost_usd:increase1h"
UNIT = "job_type:jobqueue_cost_per_job_usd:ratio1h"
ENQUEUED = "job_type:jobqueue_jobs_enqueued:increase1h"
SLOTS = 2 * 346  # 30-minute samples: two weeks and 10 hours
LABELS = '{job="jobqueue-exporter", job_type="crawl", queue="q1"}'
Fn = Callable[[list[float]], float]


def _values(seed: int, scale: int) -> list[int]:
    # Small integers that vary from one sample to the next without a pattern the windows share.
    return [scale * ((k * seed) % 97 + 1) for k in range(SLOTS)]


def _series(values: list[int]) -> str:
    # Input interval 15m, samples on odd slots: at 0:15, 0:45, 1:15, ...
    return " ".join(f"_ {v}" for v in values)


def over_time(values: list[int], fn: Fn, t: float, window: float, offset: float) -> float | None:
    """``fn_over_time(series[window] offset offset)`` at hour ``t``, or None without samples."""
    chosen = [
        v for k, v in enumerate(values) if t - offset - window <= 0.25 + 0.5 * k <= t - offset
    ]
    return fn(chosen) if chosen else None


def _seasonal(values: list[int], t: float) -> float:
    weeks = [over_time(values, max, t, 2, 168 * n - 1) for n in (1, 2)]
    if weeks[1] is not None and weeks[0] is not None:
        return (weeks[0] + weeks[1]) / 2
    assert weeks[0] is not None
    return weeks[0]


def _check(
    record: str, t: int, value: float | None, expr: str = "{} + 0"
) -> tuple[str, str, str, float]:
    assert value is not None
    return (expr.format(record), f"{t}h", LABELS, value)


def baseline_cases() -> list[Case]:
    """One case per baseline, tagged with the alert that reads it (silent throughout)."""
    # Seeds chosen so that every single-token edit of a baseline changes a checked value.
    hourly, unit, enqueued = _values(17, 1), _values(5, 48), _values(10, 1)
    series = [r(HOURLY, _series(hourly), job_type="crawl")]
    one_week, two_weeks = (170, 200, 251, 300, 333), (338, 340, 343, 345)

    def avg(values: list[float]) -> float:
        return sum(values) / len(values)

    return [
        Case(
            "seasonal cost baseline: the same hours one week ago, averaged with two weeks ago",
            "JobQueueCostSpike",
            series,
            silent_at=("300h",),
            samples=tuple(
                _check(f"{HOURLY}_seasonal", t, _seasonal(hourly, t))
                for t in (*one_week, *two_weeks)
            ),
            interval="15m",
        ),
        Case(
            "last week's daily spend: the highest hour of the day around this moment",
            "JobQueueCostNewJobType",
            series,
            silent_at=("300h",),
            samples=tuple(
                _check(f"{HOURLY}_max1d_offset1w", t, over_time(hourly, max, t, 24, 156))
                for t in one_week
            ),
            interval="15m",
        ),
        Case(
            "last week's unit cost: the mean over the day a week ago",
            "JobQueueUnitCostAnomaly",
            [r(UNIT, _series(unit), job_type="crawl")],
            silent_at=("300h",),
            samples=tuple(
                # The sum of 48 multiples of 48 over 48: an integer, up to float error.
                _check(f"{UNIT}_avg1d_offset1w", t, over_time(unit, avg, t, 24, 168), "round({})")
                for t in one_week
            ),
            interval="15m",
        ),
        Case(
            "last week's enqueues: the highest hourly count in the hour a week ago",
            "JobQueueProducersStopped",
            [r(ENQUEUED, _series(enqueued), job_type="crawl")],
            silent_at=("300h",),
            samples=tuple(
                _check(f"{ENQUEUED}_offset1w", t, over_time(enqueued, max, t, 1, 168))
                for t in one_week
            ),
            interval="15m",
        ),
    ]
