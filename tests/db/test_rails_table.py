"""A Rails-style table on a real PostgreSQL (tests/mapped_queue.py: ``timestamp(6) without time
zone`` written in UTC, no result column), read while every session's TimeZone is Asia/Kathmandu
(+05:45): the real state machine's transitions counted exactly against its own record, and the
gauges' ages and scheduled jobs in instants, not shifted by the session's zone."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import asyncpg
import pytest

from exporter.demo.fleet import Fleet, FleetConfig
from exporter.demo.queue import Transition
from exporter.demo.tally import Tally
from exporter.poller import Poller
from tests.helpers import (
    QUEUE,
    fast_queue,
    make_poller,
    poller_running,
    scrape,
    settle,
    value,
    wait_for_completions,
)
from tests.mapped_queue import RailsQueue, prepare_rails, rails_queue
from tests.truth import assert_dead_gauge_matches_table, assert_exact

FAST = ("interval", "timeout", "statement_timeout", "lock_timeout", "commit_lag_tolerance")
ZONE = "Asia/Kathmandu"  # +05:45: any part of the code that leans on the session's zone shows


async def rails(tmp_path: Path, dsn: str, **collect: object) -> Poller:
    """The Rails-style queue on ``dsn``, its table created, collected fast."""
    queue = rails_queue(tmp_path / "rails.yml", dsn)
    await prepare_rails(dsn, queue.mapping, time_zone=ZONE)
    # Fast, and as loaded otherwise: no path into the result the table lacks.
    fast = fast_queue(dsn, **collect).collect
    timing = {k: getattr(fast, k) for k in (*FAST, *collect)}
    return make_poller(replace(queue, name=QUEUE, collect=replace(queue.collect, **timing)))


def _must(found: Transition | None) -> Transition:
    assert found is not None
    return found


async def test_a_rails_style_table_is_counted_exactly_with_the_session_zone_not_utc(
    db_dsn: str, tmp_path: Path
) -> None:
    poller = await rails(tmp_path, db_dsn)
    conn = await asyncpg.connect(db_dsn)
    queue = RailsQueue(conn, backoff_base=0.0)
    truth = Tally()
    try:
        assert await conn.fetchval("SHOW TimeZone") == ZONE
        assert await poller.collect_once()  # the baseline (its catalog check read the zone)
        jobs = [_must(await queue.enqueue(1 + i % 2, max_attempts=2)) for i in range(6)]
        for job in jobs:
            truth.record(job)
        assert await poller.collect_once()
        claimed = [_must(await queue.claim("w1", 60.0)) for _ in range(4)]
        for job in claimed:
            truth.record(job)
        assert await poller.collect_once()
        truth.record(_must(await queue.complete(claimed[0].job_id, "w1", {"ignored": True})))
        truth.record(_must(await queue.fail(claimed[1].job_id, "w1", "boom")))  # retried
        truth.record(_must(await queue.fail(claimed[2].job_id, "w1", "JobDeadlineExceeded: x")))
        assert await poller.collect_once()
        # The retried ones again: one completes, one dies (attempts 2 of 2) and is requeued.
        again = [_must(await queue.claim("w2", 60.0, job_id=j.job_id)) for j in claimed[1:3]]
        for job in again:
            truth.record(job)
        truth.record(_must(await queue.complete(again[0].job_id, "w2", None)))
        dead = _must(await queue.fail(again[1].job_id, "w2", "boom again"))
        truth.record(dead)
        assert await poller.collect_once()
        truth.record(_must(await queue.requeue(dead.job_id)))
        # A worker dies: its lease (zero) runs out and the reaper takes the job back.
        waiting = [j for j in jobs if j.job_id not in {c.job_id for c in claimed}]
        lost = _must(await queue.claim("w3", 0.0, job_id=waiting[0].job_id))
        truth.record(lost)
        for reaped in await queue.reap(job_id=lost.job_id):
            truth.record(reaped)
        # A job in backoff, in the future by the UTC clock the writers use.
        await conn.execute(
            "UPDATE jobs SET run_at = timezone('UTC', now()) + interval '1 hour', "
            "updated_at = timezone('UTC', now()) WHERE id = $1",
            waiting[1].job_id,
        )
        assert await poller.collect_once()
        assert await poller.collect_once()
        assert_exact(poller, truth)
        assert sum(truth.completed.values()) == 2
        assert sum(truth.dead.values()) == 1
        assert sum(truth.requeued.values()) == 1
        assert poller.tallies.duration[poller.labels.label("Kind1Job")].count == 1
        samples = scrape(poller)
        scheduled = sum(n for (name, _), n in samples.items() if name == "jobqueue_jobs_scheduled")
        assert scheduled == 1
        # Ages in seconds of database time: without the declared zone they would be off by
        # the session's 20,700 s.
        ages = [n for (name, _), n in samples.items() if name.endswith("_age_seconds")]
        assert ages
        assert max(ages) < 600
        assert value(samples, "jobqueue_exporter_unmapped_status_rows_total") == 0
        assert not [name for (name, _) in samples if name == "jobqueue_cost_usd_total"]
    finally:
        await conn.close()
        await poller.database.close()


@pytest.mark.slow
async def test_a_rails_style_table_is_counted_exactly_through_a_fleet_with_late_commits(
    db_dsn: str, tmp_path: Path
) -> None:
    poller = await rails(tmp_path, db_dsn, interval=0.1)
    config = FleetConfig.fast(
        job_types=6, duration=(0.3, 0.6), backoff_base=1.0, lease_seconds=1.0,
        enqueue_rate=30.0, workers=8, operator_interval=0.5, requeue_after=1.0,
    )  # fmt: skip
    fleet = Fleet(db_dsn, config, queue=RailsQueue)
    try:
        await fleet.start()
        await wait_for_completions(fleet, 10)
        await fleet.pause()
        async with poller_running(poller):
            await poller.wait_for_success()
            before = fleet.tally.snapshot()
            fleet.resume()
            late = [fleet.commit_late(3.0, job_type=2, action=a) for a in ("complete", "fail")]
            for task in late:
                await task
            await wait_for_completions(fleet, 40)
            await fleet.pause()
            await settle(poller)
            await assert_dead_gauge_matches_table(poller, db_dsn, RailsQueue)
        truth = fleet.tally.since(before)
        assert fleet.errors == 0
        assert sum(truth.completed.values()) > 30
        assert_exact(poller, truth)
        assert poller.tallies.unstamped == {}  # every change was stamped, late ones too
    finally:
        await fleet.stop()
        await poller.database.close()
