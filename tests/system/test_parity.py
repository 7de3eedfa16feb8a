"""Seed parity: the recording rules rebuild the queue's own ops() / cost_buckets() figures.

A real Prometheus scrapes the real exporter while the fleet works; the recorded rules are then
compared with the same figures computed by the queue's own SQL on the same database, over the
window since the exporter's first collection (shorter than the rules' hour, so both count the
same transitions).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest

from exporter.demo.fleet import Fleet, FleetConfig
from exporter.rules import render_rules
from exporter.service import Service
from exporter.settings import AlertSettings
from tests.conftest import execute, fetch
from tests.e2e_stack import processes, prometheus_query, start_prometheus, wait_ready
from tests.helpers import cursor, fast_settings, wait_for_completions

pytestmark = [pytest.mark.e2e, pytest.mark.daemon]

# The queue's own reports, restricted to the rows changed since the exporter's baseline.
QUEUE_SQL = """
SELECT count(*) FILTER (WHERE status = 4 AND updated_at > to_timestamp($1)) AS dead_1h,
       count(*) FILTER (WHERE last_error LIKE 'JobDeadlineExceeded%'
                        AND updated_at > to_timestamp($1)) AS deadline_1h,
       count(*) FILTER (WHERE status = 3 AND updated_at > to_timestamp($1)) AS jobs,
       coalesce(sum((result #>> '{metrics,cost,total_usd}')::float8)
                FILTER (WHERE status = 3 AND updated_at > to_timestamp($1)), 0) AS cost_usd,
       coalesce(sum((result #>> '{metrics,cost,ai_usd}')::float8)
                FILTER (WHERE status = 3 AND updated_at > to_timestamp($1)), 0) AS ai_usd,
       coalesce(sum((result #>> '{metrics,cost,proxy_usd}')::float8)
                FILTER (WHERE status = 3 AND updated_at > to_timestamp($1)), 0) AS proxy_usd,
       coalesce(avg((result #>> '{metrics,duration_ms}')::float8)
                FILTER (WHERE status = 3 AND updated_at > to_timestamp($1)), 0) AS avg_ms
FROM job
"""


async def scalar(http: aiohttp.ClientSession, url: str, expr: str) -> float:
    result = await prometheus_query(http, url, expr)
    assert len(result) == 1, (expr, result)
    return float(result[0]["value"][1])


async def test_recording_rules_match_the_queues_own_reports(db_dsn: str, tmp_path: Path) -> None:
    # Every job type has a job before the exporter starts, so every counter series exists
    # (at 0) before its first increment: increase() cannot miss a first sample.
    await execute(
        db_dsn,
        "INSERT INTO job (job_type, max_attempts) SELECT g, 1 FROM generate_series(1, 4) AS g",
    )
    exporter = Service(fast_settings(db_dsn, interval=0.5))
    # One attempt per job, no reaping, no requeues, well-formed results: the queue's looser
    # row-based figures then count the same events as the exporter's transition counters.
    fleet = Fleet(
        db_dsn,
        FleetConfig.fast(
            job_types=4, max_attempts=(1, 1), p_worker_death=0.0, p_requeue=0.0,
            p_malformed=0.0, p_deadline=0.15, enqueue_rate=30.0,
        ),
    )  # fmt: skip
    rules = render_rules(replace(AlertSettings(), evaluation_interval=1))
    async with aiohttp.ClientSession() as http:
        with processes() as started:
            await exporter.start()
            try:
                assert exporter.port is not None
                prometheus = start_prometheus(tmp_path / "prometheus", exporter.port, 1, rules)
                started.append(prometheus)
                await wait_ready(prometheus, http)
                await exporter.queues[0].poller.wait_for_success()
                since = cursor(exporter.queues[0].poller).tracker._started_at
                assert since is not None
                for _ in range(60):  # until Prometheus has scraped the exporter
                    if await prometheus_query(
                        http, prometheus.url, "jobqueue_jobs_completed_total"
                    ):
                        break
                    await asyncio.sleep(0.5)
                else:
                    pytest.fail("Prometheus never scraped the exporter")
                # A few samples at zero first, so increase() sees every counter start.
                for _ in range(120):
                    seen = await prometheus_query(
                        http, prometheus.url, "count_over_time(jobqueue_jobs_completed_total[5m])"
                    )
                    if seen and min(float(r["value"][1]) for r in seen) >= 3:
                        break
                    await asyncio.sleep(0.5)
                else:
                    pytest.fail("Prometheus never took three samples of the counters")
                await fleet.start()
                await wait_for_completions(fleet, 400)  # about 20 s on an idle machine
                await fleet.pause()
                await exporter.queues[0].poller.wait_for_success()
                await exporter.queues[0].poller.wait_for_success()
                queue = dict((await fetch(db_dsn, QUEUE_SQL, since))[0])
                url = prometheus.url
                # The counters the rules are built on equal the queue's figures exactly, once
                # Prometheus has scraped the final state (waited for: CI machines are loaded).
                exact = {
                    "dead_1h": "sum(max without(instance) (jobqueue_jobs_dead_total))",
                    "deadline_1h": 'sum(max without(instance) (jobqueue_job_failures_total{reason="deadline"}))',
                    "jobs": "sum(max without(instance) (jobqueue_jobs_completed_total))",
                }
                for field, expr in exact.items():
                    for _ in range(120):
                        got = await scalar(http, url, expr)
                        if got == queue[field]:
                            break
                        await asyncio.sleep(0.5)
                    assert got == queue[field], (field, got, queue[field])
                cost = await scalar(http, url, "sum(jobqueue_cost_usd_total)")
                assert math.isclose(cost, queue["cost_usd"], rel_tol=1e-9, abs_tol=1e-9)
                # The recording rules: increase() extrapolates a little past the last sample,
                # so allow a few percent; the ratio (mean duration) is not affected. Rules are
                # evaluated every second: wait until an evaluation has seen the final state.
                recorded = {
                    "dead_1h": "job:jobqueue_jobs_dead:increase1h",
                    "deadline_1h": "job:jobqueue_job_failures_deadline:increase1h",
                    "jobs": "job:jobqueue_jobs_completed:increase1h",
                    "cost_usd": "job:jobqueue_cost_usd:increase1h",
                    "ai_usd": 'component:jobqueue_cost_usd:increase1h{component="ai"}',
                    "proxy_usd": 'component:jobqueue_cost_usd:increase1h{component="proxy"}',
                }
                for field, expr in recorded.items():
                    assert queue[field] > 0, field
                    for _ in range(120):
                        got = await scalar(http, url, expr)
                        if math.isclose(got, queue[field], rel_tol=0.1):
                            break
                        await asyncio.sleep(0.5)
                    print(f"parity {field}: queue's SQL {queue[field]:.6g}, rule {got:.6g}")
                    assert math.isclose(got, queue[field], rel_tol=0.1), (field, got, queue[field])
                for _ in range(120):
                    mean = await scalar(http, url, "job:jobqueue_job_duration_seconds:mean1h")
                    if math.isclose(mean, queue["avg_ms"] / 1000, rel_tol=1e-6):
                        break
                    await asyncio.sleep(0.5)
                mean = await scalar(http, url, "job:jobqueue_job_duration_seconds:mean1h")
                assert math.isclose(mean, queue["avg_ms"] / 1000, rel_tol=1e-6), (
                    mean,
                    queue["avg_ms"],
                )
            finally:
                await fleet.stop()
                await exporter.stop()
