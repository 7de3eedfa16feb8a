"""Scenario tests: an incident on queue q1 next to a healthy queue q2 that must stay silent.

Each scenario checks its alert on q1 and that no alert at all (the ALERTS series) carries
queue="q2" at checkpoints over at least three hours.
"""

from __future__ import annotations

from tests.rulegen import Case, s
from tests.rulegen.cases import lab

HOUR_30S = 120  # 30-second samples in an hour
DAY_5M = 288  # 5-minute samples in a day


def counter(*parts: tuple[float, int]) -> str:
    """A counter rising by ``inc`` per sample for ``n`` samples, for each (inc, n) in turn."""
    out: list[str] = []
    last = 0.0
    first = True
    for inc, n in parts:
        if first:
            out.append(f"0+{inc!r}x{n - 1}")
            last = inc * (n - 1)
            first = False
        else:
            start = last + inc
            out.append(f"{start!r}+{inc!r}x{n - 1}")
            last = start + inc * (n - 1)
    return " ".join(out)


def healthy(steps: int, per_step: float = 1.0, queue: str = "q2") -> list[tuple[str, str]]:
    """A steady, healthy queue: work flows, 0.5 % fails, nothing waits or sticks."""
    q = {"queue": queue}
    t = {"queue": queue, "job_type": "mail"}
    n = steps
    return [
        ('up{job="jobqueue-exporter", instance="a"}', f"1x{n}"),
        s("jobqueue_up", f"1x{n}", **q),
        s("jobqueue_exporter_collections_total", f"0+{per_step!r}x{n}", **q),
        s("jobqueue_exporter_collection_errors_total", f"0x{n}", reason="timeout", **q),
        s("jobqueue_exporter_collection_duration_seconds", f"0.5x{n}", **q),
        s("jobqueue_exporter_collection_timeout_seconds", f"10x{n}", **q),
        s("jobqueue_exporter_malformed_rows_total", f"0x{n}", field="cost", **q),
        s("jobqueue_exporter_job_types_folded", f"0x{n}", **q),
        s("jobqueue_jobs", f"5x{n}", status="pending", **t),
        s("jobqueue_jobs", f"2x{n}", status="running", **t),
        s("jobqueue_jobs", f"3x{n}", status="dead", **t),
        s("jobqueue_stuck_jobs", f"0x{n}", reason="lease_expired", **t),
        s("jobqueue_oldest_ready_wait_seconds", f"10x{n}", **t),
        s("jobqueue_lease_expired_oldest_seconds", f"0x{n}", **t),
        s("jobqueue_running_oldest_seconds", f"60x{n}", **t),
        s("jobqueue_jobs_enqueued_total", f"0+{2 * per_step!r}x{n}", **t),
        s("jobqueue_jobs_completed_total", f"0+{2 * per_step!r}x{n}", **t),
        s("jobqueue_job_failures_total", f"0+{0.01 * per_step!r}x{n}", reason="error", **t),
        s("jobqueue_job_wait_seconds_bucket", f"0+{2 * per_step!r}x{n}", le="300.0", **t),
        s("jobqueue_job_wait_seconds_count", f"0+{2 * per_step!r}x{n}", **t),
        s("jobqueue_cost_usd_total", f"0+{0.01 * per_step!r}x{n}", component="ai", **t),
    ]


def scenarios() -> list[Case]:
    """Scenarios at a 30-second evaluation interval."""
    n = 4 * HOUR_30S  # four hours
    fail = "jobqueue_job_failures_total"
    done = "jobqueue_jobs_completed_total"
    return [
        Case(
            "scenario scrape gaps: the oldest wait climbs through one failed scrape in nine",
            "JobQueueBacklogStale",
            [
                *healthy(n),
                s(
                    "jobqueue_oldest_ready_wait_seconds",
                    " ".join(f"{1000 + 270 * k}+30x7 stale" for k in range(40)),
                    job_type="crawl",
                ),
            ],
            fire_at="5m",
            value=1300,
            labels=lab(job_type="crawl"),
            silent_at=("4m30s",),
            quiet_at=("1h", "2h", "3h", "3h30m"),
        ),
        Case(
            "scenario flaky database: down 2.5 min, up 30 s, repeating, pages within 20 minutes",
            "JobQueueCollectionErrors",
            [
                *healthy(n),
                s("jobqueue_up", " ".join(["0x4 1"] * 80)),
                s("jobqueue_exporter_collections_total", f"0+1x{n}"),
                s(
                    "jobqueue_exporter_collection_errors_total",
                    counter(*[(1.0, 5), (0.0, 1)] * 80),
                    reason="connection",
                ),
            ],
            fire_at="20m",
            value=0.85,
            labels=lab(),
            quiet_at=("1h", "2h", "3h", "3h30m"),
        ),
        Case(
            "scenario total failure: every attempt fails from 1h, a page within 20 minutes",
            "JobQueueErrorBudgetBurn",
            [
                *healthy(n),
                s(done, counter((0.5, HOUR_30S), (0.0, n)), job_type="crawl"),
                s(fail, counter((0.0, HOUR_30S), (0.5, n)), job_type="crawl", reason="error"),
            ],
            fire_at="1h20m",
            values={"critical": 34.2, "warning": 25.6},
            labels=lab(job_type="crawl"),
            silent_at=("1h5m",),
            quiet_at=("1h", "2h", "3h", "3h30m"),
        ),
        Case(
            "scenario rollout: deadline kills at 7.5/h stay firing while pod a hands over to b",
            "JobQueueDeadlineKills",
            [
                *healthy(n),
                s(fail, f"0+0.0625x{3 * HOUR_30S // 2} _x{n}", job_type="crawl", reason="deadline"),
                s(
                    fail,
                    f"_x{3 * HOUR_30S // 2} 0+0.0625x{n}",
                    job_type="crawl",
                    reason="deadline",
                    instance="b",
                    pod="b",
                ),
            ],
            fire_at="2h15m",
            value=7.5,
            labels=lab(job_type="crawl", reason="deadline"),
            severities=("warning",),
            quiet_at=("1h", "2h", "3h", "3h30m"),
        ),
        Case(
            "scenario crash storm: half the attempts end with the reaper",
            "JobQueueWorkerCrashStorm",
            [
                *healthy(n),
                s(done, f"0+1x{n}", job_type="crawl"),
                s(
                    fail,
                    counter((0.0, HOUR_30S), (1.0, n)),
                    job_type="crawl",
                    reason="lease_expired",
                ),
            ],
            fire_at="1h10m",
            value=7 / 17,
            labels=lab(job_type="crawl"),
            silent_at=("1h",),
            quiet_at=("1h", "2h", "3h", "3h30m"),
        ),
    ]


def _diurnal(days: int, spike_day: int | None = None) -> str:
    """Cost of 12 USD/h from 12:00 to 16:00 and 1.5 USD/h otherwise, per 5-minute sample;
    with ``spike_day``, 7.5 USD/h (5x) from 02:00 to 04:00 that day."""
    parts: list[tuple[float, int]] = []
    quiet, busy, spike = 0.125, 1.0, 0.625
    for day in range(days):
        if day == spike_day:
            parts += [(quiet, 24), (spike, 24), (quiet, 96)]
        else:
            parts += [(quiet, 144)]
        parts += [(busy, 48), (quiet, 96)]
    return counter(*parts)


def weekly_scenarios() -> list[Case]:
    """Scenarios at a 5-minute evaluation interval with a week and more of history."""
    cost = "jobqueue_cost_usd_total"
    week = 7 * DAY_5M
    checks = tuple(f"{h}h" for h in range(170, 336, 7))
    return [
        Case(
            "scenario diurnal week: ordinary busy afternoons never raise a cost alert",
            "JobQueueCostSpike",
            [*healthy(14 * DAY_5M, 10.0), s(cost, _diurnal(14), job_type="crawl", component="ai")],
            silent_at=checks,
            quiet_at=("300h", "303h", "306h"),
            interval="5m",
        ),
        Case(
            "scenario night spike: 5x the usual night spend fires within 45 minutes",
            "JobQueueCostSpike",
            [
                *healthy(9 * DAY_5M, 10.0),
                s(cost, _diurnal(9, spike_day=8), job_type="crawl", component="ai"),
            ],
            fire_at="194h45m",
            value=7.5,
            labels=lab(job_type="crawl"),
            silent_at=("170h", "188h"),
            quiet_at=("194h", "196h", "198h"),
            interval="5m",
        ),
        Case(
            "scenario new type: 50 USD/h from its first hour fires within 90 minutes",
            "JobQueueCostNewJobType",
            [
                *healthy(week + 60, 10.0),
                s(cost, f"_x{week} 0+{50 / 12!r}x60", job_type="new", component="ai"),
            ],
            fire_at="169h30m",
            value=50,
            labels=lab(job_type="new"),
            quiet_at=("165h", "168h", "170h", "172h"),
            interval="5m",
        ),
        Case(
            "scenario producers stopped: nothing enqueued at an hour that was busy last week",
            "JobQueueProducersStopped",
            [
                *healthy(week + 60, 10.0),
                s(
                    "jobqueue_jobs_enqueued_total",
                    counter((10.0, week + 24), (0.0, 40)),
                    job_type="crawl",
                ),
            ],
            fire_at="171h",
            value=0,
            labels=lab(job_type="crawl"),
            quiet_at=("169h", "171h", "172h"),
            interval="5m",
        ),
    ]
