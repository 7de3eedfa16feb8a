"""A change stream that cannot run is loud, and loses nothing (issue 34): on a throwaway
wal_level=logical cluster, another consumer holds the exporter's slot.

Measured on 5b548ac: with the slot held for 30 s the server refused the exporter once a second,
while jobqueue_up stayed 1, collection errors stayed at +0 and no WARN line appeared (the
thread's error was cleared by the next start before anyone read it). Now the first collection
after the refusal fails with reason ``stream``, the restart is counted by its SQLSTATE's reason
(``in_use``), and once the slot is free the stream reads from where the slot was confirmed, so
the jobs enqueued and completed meanwhile are counted exactly once.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from exporter.demo.queue import JobQueue
from exporter.demo.tally import Tally
from exporter.runtime import QueueRuntime
from tests.conftest import execute
from tests.db.test_logical import (
    RESULT,
    caught_up,
    counted,
    drop_when_released,
    logical_queue,
    record,
)
from tests.logical_cluster import PUBLICATION, LogicalDatabase
from tests.truth import assert_exact

pytestmark = [pytest.mark.slow, pytest.mark.logical]


def hold_slot(dsn: str, slot: str) -> object:
    """Another consumer reading the slot (it confirms nothing): a psycopg2 replication
    connection, as the old leader's walsender would be."""
    import psycopg2
    import psycopg2.extras

    conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    cur = conn.cursor()
    cur.start_replication(slot_name=slot, decode=False,
                          options={"proto_version": "1", "publication_names": PUBLICATION})  # fmt: skip
    return conn


async def test_a_slot_held_by_another_consumer_fails_the_collection_and_then_loses_nothing(
    logical_db: LogicalDatabase,
) -> None:
    queue = logical_queue(logical_db.dsn)
    slot = queue.collect.logical_slot
    assert slot is not None
    # The slot exists (a previous leader made it); its positions are where counting starts.
    await execute(logical_db.dsn, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot)
    truth = Tally()
    holder = hold_slot(logical_db.dsn, slot)
    runtime = QueueRuntime(queue)
    poller, follower = runtime.poller, runtime.follower
    assert follower is not None
    try:
        conn = await asyncpg.connect(logical_db.admin)  # the application
        try:
            jobs = JobQueue(conn, backoff_base=0.0)
            for n in range(20):
                job = await jobs.enqueue(1 + n % 2)
                assert job is not None
                claim = await jobs.claim("w", 60.0, job_id=job.job_id)
                record(truth, job, claim, await jobs.complete(job.job_id, "w", RESULT))
        finally:
            await conn.close()
        # The first collection starts the stream; the server refuses it (the slot is active
        # for the holder's walsender), and the next collection says so.
        deadline = time.monotonic() + 10
        while not follower.restarts and time.monotonic() < deadline:
            await poller.collect_once()
            await asyncio.sleep(0.1)
        assert follower.restarts == {"in_use": 1}
        assert not poller.health.up
        assert poller.health.errors["stream"] == 1
        assert poller.health.last_error is not None
        assert "in_use" in poller.health.last_error
        assert "is active for PID" in poller.health.last_error  # the server's own words
        assert not any(poller.tallies.counters().values())
        holder.close()  # type: ignore[attr-defined]
        # Free again (once the holder's walsender has gone): the stream reads from the slot's
        # confirmed position, and nothing was lost meanwhile.
        await counted(runtime, caught_up(runtime, truth))
        assert_exact(poller, truth)
        assert sum(truth.completed.values()) == 20
    finally:
        await runtime.stop()
        await runtime.database.close()
        await drop_when_released(logical_db.dsn, slot)
