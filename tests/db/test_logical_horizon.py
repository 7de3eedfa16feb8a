"""collect.counting: logical around long and prepared transactions (issue 29's done-when): a
read-only transaction held open for 30 s does not delay the counts, and a transaction prepared
before the slot exists is history, as a change before polling's baseline is.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from exporter.demo.queue import JobQueue
from exporter.demo.tally import Tally
from exporter.runtime import QueueRuntime
from tests.conftest import fetchval
from tests.db.test_logical import (
    RESULT,
    caught_up,
    counted,
    drop_when_released,
    logical_queue,
    record,
    streaming,
)
from tests.truth import assert_exact

pytestmark = [pytest.mark.slow, pytest.mark.logical]

RATE = 40.0  # jobs a second, each enqueued, claimed and completed
HELD = 30.0  # seconds the read-only transaction stays open
ON_TIME = 2.0  # seconds within which every job finished so far is counted


async def test_a_30_s_read_only_transaction_does_not_delay_the_counts(logical_dsn: str) -> None:
    dsn = logical_dsn
    truth = Tally()
    async with streaming(logical_queue(dsn)) as runtime:
        holder = await asyncpg.connect(dsn)
        conn = await asyncpg.connect(dsn)
        try:
            # A snapshot held open: polling's horizon would stop at it for its whole life.
            await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            await holder.fetchval("SELECT count(*) FROM job")
            queue = JobQueue(conn, backoff_base=0.0)
            started = time.monotonic()
            checks: list[float] = []
            while time.monotonic() - started < HELD:
                tick = time.monotonic()
                for _ in range(int(RATE)):
                    job = await queue.enqueue(1)
                    assert job is not None
                    claim = await queue.claim("w", 60.0, job_id=job.job_id)
                    record(truth, job, claim, await queue.complete(job.job_id, "w", RESULT))
                # Every job finished so far is counted within ON_TIME seconds.
                asked = time.monotonic()
                done = caught_up(runtime, truth)
                while not done():
                    assert time.monotonic() - asked < ON_TIME, "counts fell behind"
                    await runtime.poller.collect_once()
                    await asyncio.sleep(0.02)
                checks.append(time.monotonic() - asked)
                await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
            assert await holder.fetchval("SELECT 1") == 1  # the snapshot is still held
            await counted(runtime, caught_up(runtime, truth))
            assert_exact(runtime.poller, truth)
            assert sum(truth.completed.values()) >= RATE * HELD * 0.5
            assert len(checks) >= HELD * 0.5
        finally:
            await holder.close()
            await conn.close()


async def test_a_transaction_prepared_before_the_slot_is_history(logical_dsn: str) -> None:
    dsn = logical_dsn
    queue_settings = logical_queue(dsn)
    slot = queue_settings.collect.logical_slot
    conn = await asyncpg.connect(dsn)
    runtime = QueueRuntime(queue_settings)
    truth = Tally()
    try:
        queue = JobQueue(conn, backoff_base=0.0)
        await conn.execute("BEGIN")
        assert await conn.fetchrow(JobQueue.ENQUEUE, None, 2, 100, "{}", None, 3) is not None
        await conn.execute("PREPARE TRANSACTION 'before_the_slot'")
        # The new slot cannot be consistent before the prepared transaction ends; meanwhile the
        # gauges are served and nothing is counted.
        for _ in range(20):
            await runtime.poller.collect_once()
            await asyncio.sleep(0.05)
        assert runtime.poller.health.up, runtime.poller.health.last_error
        assert not runtime.poller.tallies.enqueued
        await conn.execute("COMMIT PREPARED 'before_the_slot'")
        deadline = time.monotonic() + 30
        while not await fetchval(
            dsn, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active", slot
        ):
            assert time.monotonic() < deadline, runtime.poller.health.last_error
            await runtime.poller.collect_once()
            await asyncio.sleep(0.05)
        for _ in range(10):
            job = await queue.enqueue(1)
            assert job is not None
            claim = await queue.claim("w", 60.0, job_id=job.job_id)
            record(truth, job, claim, await queue.complete(job.job_id, "w", RESULT))
        await counted(runtime, caught_up(runtime, truth))
        # The prepared job is history: in the gauges (pending), in no counter.
        assert_exact(runtime.poller, truth)
        snapshot = runtime.poller.snapshot
        assert snapshot is not None
        assert sum(stats.pending for stats in snapshot.active.values()) == 1
    finally:
        # A prepared transaction outlives its session: end it, or the slot never gets going.
        if await conn.fetchval(
            "SELECT count(*) FROM pg_prepared_xacts WHERE gid = 'before_the_slot'"
        ):
            await conn.execute("ROLLBACK PREPARED 'before_the_slot'")
        await conn.close()
        await runtime.stop()
        await runtime.database.close()
        await drop_when_released(dsn, slot)
