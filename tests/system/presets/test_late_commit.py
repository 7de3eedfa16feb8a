"""A transaction that commits several collections after it wrote is counted exactly once."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from exporter.counting.eventlog import EventLogReader
from tests.system.presets.exported import RecordedPoller
from tests.system.presets.processes import require, run_node

pytestmark = pytest.mark.library

Enqueue = Callable[[asyncpg.Connection, str], Awaitable[None]]


async def _procrastinate_defer(conn: asyncpg.Connection, task: str) -> None:
    # procrastinate's own defer function, the one App.defer_async calls.
    await conn.execute(
        "SELECT procrastinate_defer_jobs_v1(ARRAY[ROW('work', $1, 0, NULL, NULL, '{}'::jsonb, "
        "NULL)::procrastinate_job_to_defer_v1])",
        task,
    )


async def _pgqueuer_enqueue(conn: asyncpg.Connection, entrypoint: str) -> None:
    from pgqueuer import AsyncpgDriver, Queries

    await Queries(AsyncpgDriver(conn)).enqueue(entrypoint, None)


def _procrastinate(dsn: str) -> tuple[str, Enqueue]:
    require("procrastinate")
    from tests.system.presets.procrastinate_harness import install

    install(dsn)
    return "procrastinate", _procrastinate_defer


def _pgqueuer(dsn: str) -> tuple[str, Enqueue]:
    require("pgqueuer")
    from tests.system.presets.pgqueuer_harness import install

    install(dsn)
    return "pgqueuer", _pgqueuer_enqueue


@pytest.mark.parametrize("preset", [_procrastinate, _pgqueuer], ids=["procrastinate", "pgqueuer"])
async def test_late_commit_is_counted_exactly_once(
    empty_dsn: str, preset: Callable[[str], tuple[str, Enqueue]]
) -> None:
    profile, enqueue = preset(empty_dsn)
    poller = RecordedPoller(empty_dsn, profile, interval=0.2)
    late = await asyncpg.connect(empty_dsn)
    prompt = await asyncpg.connect(empty_dsn)
    try:
        async with poller.running():
            transaction = late.transaction()
            await transaction.start()
            await enqueue(late, "late")  # takes the lower event id, commits last
            await late.execute("SAVEPOINT s")
            await enqueue(late, "late")  # written by a subtransaction
            await late.execute("RELEASE SAVEPOINT s")
            await enqueue(prompt, "prompt")  # a higher id, committed at once
            await poller.until(lambda: poller.tallies.enqueued["prompt"] == 1)
            await poller.cycles(5)
            assert poller.tallies.enqueued["late"] == 0  # not committed: not visible yet
            await transaction.commit()
            await poller.until(lambda: poller.tallies.enqueued["late"] >= 2)
            await poller.cycles(5)
        assert poller.tallies.enqueued == {"late": 2, "prompt": 1}
    finally:
        await late.close()
        await prompt.close()


@pytest.mark.parametrize("preset", [_procrastinate, _pgqueuer], ids=["procrastinate", "pgqueuer"])
async def test_rolled_back_write_is_never_counted(
    empty_dsn: str, preset: Callable[[str], tuple[str, Enqueue]]
) -> None:
    profile, enqueue = preset(empty_dsn)
    poller = RecordedPoller(empty_dsn, profile, interval=0.2)
    conn = await asyncpg.connect(empty_dsn)
    try:
        async with poller.running():
            transaction = conn.transaction()
            await transaction.start()
            await enqueue(conn, "gone")
            await poller.cycles(3)
            await transaction.rollback()
            await enqueue(conn, "kept")
            await poller.until(lambda: poller.tallies.enqueued["kept"] == 1)
            await poller.cycles(3)
        assert poller.tallies.enqueued == {"kept": 1}
        # The watermark moved past the rolled-back id: nothing is left to remember.
        assert poller.reader(EventLogReader).cursor.watermark is not None
    finally:
        await conn.close()


async def test_pgboss_late_insert_and_late_completion_are_counted_once(empty_dsn: str) -> None:
    require("pg-boss")
    from tests.system.presets import pgboss_harness

    pgboss_harness.install(empty_dsn)
    run_node([str(pgboss_harness.DRIVER), "queues", empty_dsn], "pg-boss queues")
    poller = RecordedPoller(empty_dsn, "pgboss", interval=0.2)
    late = await asyncpg.connect(empty_dsn)
    prompt = await asyncpg.connect(empty_dsn)
    insert = "INSERT INTO pgboss.job (name, data) VALUES ($1, '{}') RETURNING id"
    try:
        async with poller.running():
            done_late = await prompt.fetchval(insert, "later")
            await poller.until(lambda: poller.tallies.enqueued["later"] == 1)
            transaction = late.transaction()
            await transaction.start()
            # now() of this transaction, hence created_on and completed_on, is from here on.
            await late.fetchval(insert, "parked")
            await late.execute("SAVEPOINT s")
            await late.fetchval(insert, "parked")  # written by a subtransaction
            await late.execute("RELEASE SAVEPOINT s")
            # A completion the way pg-boss writes one (completed_on = job_now() = now()).
            await late.execute(
                "UPDATE pgboss.job SET state = 'completed', started_on = now(), "
                "completed_on = now(), output = '{}' WHERE name = 'later' AND id = $1",
                done_late,
            )
            await prompt.fetchval(insert, "later")  # a prompt one, committed at once
            await poller.until(lambda: poller.tallies.enqueued["later"] == 2)
            await poller.cycles(5)
            assert poller.tallies.enqueued["parked"] == 0
            assert poller.tallies.completed["later"] == 0
            await transaction.commit()
            await poller.until(lambda: poller.tallies.completed["later"] >= 1)
            await poller.cycles(5)
        assert poller.tallies.enqueued == {"later": 2, "parked": 2}
        assert poller.tallies.completed == {"later": 1}
    finally:
        await late.close()
        await prompt.close()
