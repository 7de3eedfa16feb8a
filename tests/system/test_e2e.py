"""End to end: PostgreSQL, the simulated fleet, the exporter, Prometheus and Alertmanager, all real.

Run alone with ``pytest -m e2e``. Set ``JOBQUEUE_EXPORTER_PREVIEW=docs/dashboard.png`` to
also render the dashboard preview from this run's Prometheus data.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import asyncpg
import pytest

from exporter.demo.cluster import Cluster
from exporter.demo.fleet import Fleet, FleetConfig
from exporter.demo.queue import DEADLINE_ERROR, JobQueue, prepare_database
from exporter.rules import render_rules
from exporter.service import Service
from exporter.settings import AlertSettings
from tests.dashboard_checks import panel_queries
from tests.e2e_stack import (
    JOB_NAME,
    ROOT,
    WebhookReceiver,
    processes,
    prometheus_query,
    prometheus_query_range,
    start_alertmanager,
    start_prometheus,
    wait_ready,
    webhook_receiver,
)
from tests.helpers import fast_settings

pytestmark = [pytest.mark.e2e, pytest.mark.daemon, pytest.mark.cluster]

PREVIEW_VARIABLE = "JOBQUEUE_EXPORTER_PREVIEW"
# The fleet uses job types 1..5; these two are driven by the test alone, so every alert
# that carries them was caused by the test's own hazard.
STUCK_TYPE = 7
DEADLINE_TYPE = 8
DEADLINE_BURST = 6
WAIT_LIMIT = 60.0
POLL = 0.5

ALERTS = dataclasses.replace(
    AlertSettings(),
    selector=f'job="{JOB_NAME}"',
    evaluation_interval=1,
    stuck_for=2,
    # Gauge alerts read min/max_over_time over this window; keep it short like the for:s.
    gap_window=2,
    # Six kills in 30 s is 720 per hour: above the critical threshold (30 per hour).
    deadline_kills_window=30,
    deadline_kills_for=1,
    database_unreachable_for=2,
    # The exporter withdraws the stuck gauge 3 intervals (1.5 s) into the outage: the queue
    # alerts must outlive JobQueueDatabaseUnreachable's 2 s for:, its evaluation and delivery,
    # like the default (its for: plus 2m) does with 30 s evaluations.
    keep_firing_for=30,
)


async def wait_until(
    check: Callable[[], Awaitable[bool]], what: str, explain: Callable[[], str]
) -> float:
    """Poll ``check`` every half second; fail after WAIT_LIMIT naming what was seen instead."""
    started = time.monotonic()
    while time.monotonic() - started < WAIT_LIMIT:
        if await check():
            return time.monotonic() - started
        await asyncio.sleep(POLL)
    pytest.fail(f"gave up after {WAIT_LIMIT}s waiting for {what}; seen:\n{explain()}")


def runbook_anchor(alertname: str) -> str:
    """The tail every runbook_url must end with (and the runbook must have that section)."""
    runbooks = (ROOT / "docs" / "runbooks.md").read_text()
    assert f"\n## {alertname}\n" in runbooks, f"docs/runbooks.md has no section {alertname}"
    return f"docs/runbooks.md#{alertname.lower()}"


async def test_alerts_travel_from_the_queue_to_the_webhook_and_are_inhibited(
    fresh_cluster: Cluster, tmp_path: Path
) -> None:
    began = time.monotonic()
    fresh_cluster.create_database("queue")
    dsn = fresh_cluster.dsn("queue")
    await prepare_database(dsn)
    # Default staleness (three intervals): the stuck gauge vanishes before
    # JobQueueDatabaseUnreachable fires, and keep_firing_for: must hold the stuck alert.
    exporter = Service(fast_settings(dsn, interval=0.5))
    fleet = Fleet(dsn, FleetConfig.fast(enqueue_rate=30.0, p_deadline=0.05))
    async with aiohttp.ClientSession() as http, webhook_receiver() as hook:
        with processes() as started:
            await exporter.start()
            try:
                assert exporter.port is not None
                alertmanager = start_alertmanager(tmp_path / "alertmanager", hook.url)
                started.append(alertmanager)
                am_port = urlsplit(alertmanager.url).port
                assert am_port is not None
                prometheus = start_prometheus(
                    tmp_path / "prometheus", exporter.port, am_port, render_rules(ALERTS)
                )
                started.append(prometheus)
                await wait_ready(alertmanager, http)
                await wait_ready(prometheus, http)
                await fleet.start()
                # Prometheus stamps samples with the host clock, so ranges use it too.
                run_start = time.time()
                await _panels_return_data(http, prometheus.url, run_start)
                await fleet.stop()
                await _stuck_job_and_deadline_kills_alert(http, prometheus.url, dsn, hook)
                preview = os.environ.get(PREVIEW_VARIABLE)
                if preview:
                    await _render_preview(prometheus.url, run_start, time.time(), preview)
                await _database_down_inhibits_queue_alerts(
                    http, alertmanager.url, fresh_cluster, hook
                )
            finally:
                await fleet.stop()
                await exporter.stop()
    print(f"\ntest_e2e: total run time {time.monotonic() - began:.1f}s")


async def _panels_return_data(http: aiohttp.ClientSession, prom: str, run_start: float) -> None:
    """Every dashboard query that should have data has some, now or over the run."""
    queries = panel_queries(overrides={"__range": "60s"})
    assert queries, "the dashboard has no queries"
    missing: list[str] = []

    async def all_have_data() -> bool:
        missing.clear()
        # At least ~20 s of traffic first, so rate()s over 1m have samples to work on.
        if time.time() - run_start < 20:
            return False
        for q in queries:
            if q.expected_empty_when_healthy:
                continue
            if await prometheus_query(http, prom, q.expr):
                continue
            series = await prometheus_query_range(http, prom, q.expr, run_start, time.time(), 1)
            if not series:
                missing.append(f"{q.panel_id} {q.title}: {q.expr}")
        return not missing

    waited = await wait_until(
        all_have_data, "every panel to return data", lambda: "\n".join(missing)
    )
    print(f"\ntest_e2e: every panel had data after {waited:.1f}s")


async def _stuck_job_and_deadline_kills_alert(
    http: aiohttp.ClientSession, prom: str, dsn: str, hook: WebhookReceiver
) -> None:
    """A running job with an expired lease and a burst of deadline kills page through the webhook."""
    conn = await asyncpg.connect(dsn)
    try:
        # A long backoff keeps the failed jobs waiting, so no other alert is disturbed.
        queue = JobQueue(conn, backoff_base=600.0)
        stuck = await queue.enqueue(STUCK_TYPE, {"e2e": "stuck"}, max_attempts=3)
        assert stuck is not None
        # A negative lease is one that ran out a minute ago: its worker died, nobody reaps.
        assert await queue.claim("e2e-dead-worker", -60.0, job_id=stuck.job_id) is not None
        doomed = []
        for _ in range(DEADLINE_BURST):
            job = await queue.enqueue(DEADLINE_TYPE, {"e2e": "deadline"}, max_attempts=3)
            assert job is not None
            doomed.append(job.job_id)
        # rate() needs the counter's zero before the burst, or the burst is its first sample.
        zero = (
            f'count_over_time(jobqueue_job_failures_total{{job_type="{DEADLINE_TYPE}",'
            'reason="deadline"}[1m]) >= 2'
        )

        async def counter_seen() -> bool:
            return bool(await prometheus_query(http, prom, zero))

        await wait_until(counter_seen, "the deadline counter of the burst's job type", lambda: zero)
        for job_id in doomed:
            assert await queue.claim("e2e-worker", 60.0, job_id=job_id) is not None
            assert await queue.fail(job_id, "e2e-worker", DEADLINE_ERROR) is not None
    finally:
        await conn.close()

    expected = {
        "JobQueueJobsStuck": str(STUCK_TYPE),
        "JobQueueDeadlineKills": str(DEADLINE_TYPE),
    }

    async def both_arrived() -> bool:
        return all(
            hook.find(name, job_type=job_type, severity="critical", job=JOB_NAME)
            for name, job_type in expected.items()
        )

    waited = await wait_until(both_arrived, f"{sorted(expected)} firing", hook.summary)
    print(f"test_e2e: stuck and deadline alerts reached the webhook after {waited:.1f}s")
    for name, job_type in expected.items():
        for alert in hook.find(name, job_type=job_type, severity="critical"):
            assert alert["labels"]["component"] == "jobqueue"
            assert alert["receiver"] == "pager", alert
            assert alert["annotations"]["runbook_url"].endswith(runbook_anchor(name)), alert
            assert alert["annotations"]["summary"], alert
            assert f"type {job_type}" in alert["annotations"]["description"], alert
    # The fleet was stopped mid-job, so its own running jobs are stuck too: look at our type.
    overrides = {"__range": "60s", "job_type": str(STUCK_TYPE)}
    stuck_panel = next(q for q in panel_queries(overrides=overrides) if q.title == "Jobs stuck")
    assert f'job_type=~"{STUCK_TYPE}"' in stuck_panel.expr, stuck_panel.expr
    result = await prometheus_query(http, prom, stuck_panel.expr)
    assert result, f"the Jobs stuck panel is empty: {stuck_panel.expr}"
    assert float(result[0]["value"][1]) == 1, result


async def _database_down_inhibits_queue_alerts(
    http: aiohttp.ClientSession, am: str, cluster: Cluster, hook: WebhookReceiver
) -> None:
    """With the database stopped, the cause pages and the queue alerts are inhibited."""
    cluster.stop("fast")

    async def unreachable_arrived() -> bool:
        return bool(hook.find("JobQueueDatabaseUnreachable", severity="critical", job=JOB_NAME))

    waited = await wait_until(
        unreachable_arrived, "JobQueueDatabaseUnreachable firing", hook.summary
    )
    print(f"test_e2e: JobQueueDatabaseUnreachable reached the webhook after {waited:.1f}s")
    (alert,) = hook.find("JobQueueDatabaseUnreachable")[:1]
    assert alert["annotations"]["runbook_url"].endswith(
        runbook_anchor("JobQueueDatabaseUnreachable")
    )
    listed: list[dict[str, Any]] = []

    async def stuck_inhibited() -> bool:
        async with http.get(f"{am}/api/v2/alerts") as response:
            listed[:] = await response.json()
        stuck = [
            a
            for a in listed
            if a["labels"].get("alertname") == "JobQueueJobsStuck"
            and a["labels"].get("job_type") == str(STUCK_TYPE)
        ]
        return bool(stuck) and all(
            a["status"]["state"] == "suppressed" and a["status"]["inhibitedBy"] for a in stuck
        )

    def explain() -> str:
        return "\n".join(
            f"{a['labels'].get('alertname')} {a['labels'].get('job_type')} {a['status']}"
            for a in listed
        )

    await wait_until(stuck_inhibited, "JobQueueJobsStuck to be inhibited", explain)
    # Its gauge was withdrawn before the cause fired, yet the pager heard no "resolved".
    resolved = hook.find("JobQueueJobsStuck", status="resolved", job_type=str(STUCK_TYPE))
    assert not resolved, resolved
    # The inhibiting alert itself is active, not suppressed.
    sources = [a for a in listed if a["labels"]["alertname"] == "JobQueueDatabaseUnreachable"]
    assert sources, explain()
    assert all(a["status"]["state"] == "active" for a in sources), explain()
    # ...and it is what inhibits the stuck alert (not the critical-over-warning rule).
    causes = {a["fingerprint"] for a in sources}
    for alert in listed:
        if alert["labels"].get("alertname") == "JobQueueJobsStuck":
            assert set(alert["status"]["inhibitedBy"]) <= causes, explain()


async def _render_preview(prom: str, start: float, end: float, output: str) -> None:
    """Run the preview script on this run's data (the exporter keeps serving meanwhile)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "dashboards" / "render_preview.py"),
        "--prometheus", prom,
        "--start", repr(start),
        "--end", repr(end),
        "--output", output,
        "--scrape-interval", "1",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, out.decode(errors="replace")
    png = await asyncio.to_thread(Path(output).read_bytes)
    assert png.startswith(b"\x89PNG"), f"{output} is not a PNG"
    print(f"test_e2e: dashboard preview written to {output}")
