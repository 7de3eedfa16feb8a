"""collect.counting: logical on the session's wal_level=logical cluster, against the reference
queue's own record of what it did (docs/logical.md). The exporter connects as its documented
role plus REPLICATION; the tables are set up by logical-setup's own SQL, run by an admin: the
reference table with its identity index and column list, the mapped one with FULL.

Each history here is one that polling gets wrong or cannot see (issue 29): jobs deleted right
after completion, completions that leave updated_at alone, two failures or two requeues of one
job inside one interval, jobs handed back with attempts - 1. The ground truth is a Tally of the
transitions the reference SQL returned; the stream's counts must equal it exactly.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import asyncpg
import pytest

from exporter.demo.queue import JobQueue, Transition
from exporter.demo.tally import Tally
from exporter.model import ConfigStatus
from exporter.runtime import QueueRuntime
from exporter.settings import QueueSettings, Settings
from exporter.web.status import StatusPage, status_page
from tests.conftest import execute, fetchval
from tests.helpers import fast_queue
from tests.logical_cluster import (
    PUBLICATION,
    LogicalDatabase,
    LogicalServer,
    drop_slots,
    empty_database,
    role_grants,
    run_as_admin,
    setup_statements,
)
from tests.mapped_queue import TasksQueue, prepare_tasks, tasks_queue
from tests.pages import RenderedPage
from tests.truth import assert_exact, expected

pytestmark = [pytest.mark.logical, pytest.mark.slow]

RESULT = {"metrics": {"duration_ms": 250, "cost": {"ai_usd": 0.01, "total_usd": 0.015}}}
_names = itertools.count()


def logical_queue(dsn: str, base: QueueSettings | None = None) -> QueueSettings:
    """The queue counted from the stream, with a slot of its own (slots are cluster-wide)."""
    queue = base or fast_queue(dsn)
    collect = replace(
        queue.collect,
        counting="logical",
        logical_slot=f"slot_{next(_names)}",
        logical_publication=PUBLICATION,
        leader_election=False,
    )
    return replace(queue, collect=collect)


@asynccontextmanager
async def streaming(queue: QueueSettings) -> AsyncIterator[QueueRuntime]:
    """A queue runtime whose stream has started (its slot exists and is read) before the
    workload begins; its slot is dropped afterwards."""
    runtime = QueueRuntime(queue)
    dsn, slot = queue.database.dsn, queue.collect.logical_slot
    assert dsn is not None
    try:
        deadline = time.monotonic() + 30
        while not await fetchval(
            dsn, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active", slot
        ):
            assert time.monotonic() < deadline, runtime.poller.health.last_error
            await runtime.poller.collect_once()
            await asyncio.sleep(0.05)
        yield runtime
    finally:
        await runtime.stop()
        await runtime.database.close()
        await drop_when_released(dsn, slot)


async def drop_when_released(dsn: str, slot: str | None) -> None:
    """Drop the slot once its walsender has exited."""
    assert slot is not None
    await drop_slots(dsn, "slot_name", slot)


async def counted(runtime: QueueRuntime, done: Callable[[], bool], limit: float = 30.0) -> None:
    """Collect until ``done``, then twice more: whatever came late would show as a surplus."""
    poller = runtime.poller
    deadline = time.monotonic() + limit
    while not done() and time.monotonic() < deadline:
        assert await poller.collect_once() or time.monotonic() < deadline
        await asyncio.sleep(0.05)
    for _ in range(2):
        await asyncio.sleep(0.2)
        await poller.collect_once()
    assert poller.health.up, poller.health.last_error


def caught_up(runtime: QueueRuntime, truth: Tally) -> Callable[[], bool]:
    """True once every counter has reached the truth (then assert_exact proves no surplus)."""
    poller = runtime.poller

    def done() -> bool:
        exp = expected(truth, poller)
        got = poller.tallies
        return all(
            sum(getattr(got, name).values()) >= sum(exp[name].values())  # type: ignore[attr-defined]
            for name in ("enqueued", "completed", "failures", "dead", "requeued")
        )

    return done


def record(truth: Tally, *steps: Transition | None) -> None:
    for step in steps:
        assert step is not None
        truth.record(step)


async def test_jobs_deleted_right_after_completion_are_all_counted(
    logical_db: LogicalDatabase,
) -> None:
    truth = Tally()
    async with streaming(logical_queue(logical_db.dsn)) as runtime:
        conn = await asyncpg.connect(logical_db.admin)
        try:
            queue = JobQueue(conn, backoff_base=0.0)
            for n in range(40):
                job = await queue.enqueue(1 + n % 3)
                assert job is not None
                claim = await queue.claim("w", 60.0, job_id=job.job_id)
                done = await queue.complete(job.job_id, "w", RESULT)
                record(truth, job, claim, done)
                await conn.execute("DELETE FROM job WHERE job_id = $1", job.job_id)
        finally:
            await conn.close()
        await counted(runtime, caught_up(runtime, truth))
        assert_exact(runtime.poller, truth)
        assert sum(truth.completed.values()) == 40
        assert not runtime.poller.tallies.vanished  # finished rows deleted: nothing more


async def test_completions_that_leave_updated_at_alone_are_counted(
    logical_db: LogicalDatabase,
) -> None:
    truth = Tally()
    async with streaming(logical_queue(logical_db.dsn)) as runtime:
        conn = await asyncpg.connect(logical_db.admin)
        try:
            queue = JobQueue(conn, backoff_base=0.0)
            for _ in range(30):
                job = await queue.enqueue(2)
                assert job is not None
                claim = await queue.claim("w", 60.0, job_id=job.job_id)
                record(truth, job, claim)
                # An application's own completion: status and result, nothing else.
                row = await conn.fetchrow(
                    "UPDATE job SET status = 3, result = $2::jsonb WHERE job_id = $1 "
                    "RETURNING job_id, job_type, status, attempts, max_attempts, worker_id, "
                    "created_at, run_after, run_started_at, updated_at, lease_until, "
                    "last_error, result",
                    job.job_id, '{"metrics": {"cost": {"total_usd": 0.5}}}',
                )  # fmt: skip
                truth.completed[2] += 1
                truth.cost[2, "other"] += 0.5
                assert row is not None
        finally:
            await conn.close()
        await counted(runtime, caught_up(runtime, truth))
        tallies = runtime.poller.tallies
        assert +tallies.enqueued == +expected(truth, runtime.poller)["enqueued"]  # type: ignore[operator]
        assert tallies.completed == {"2": 30}
        assert tallies.cost == pytest.approx({("2", "other"): 15.0})
        assert tallies.latency["2"].count == 30  # from the commit, updated_at never moved


async def test_two_failures_and_two_requeues_inside_one_interval_keep_their_reasons(
    logical_db: LogicalDatabase,
) -> None:
    truth = Tally()
    async with streaming(logical_queue(logical_db.dsn)) as runtime:
        conn = await asyncpg.connect(logical_db.admin)
        try:
            queue = JobQueue(conn, backoff_base=0.0)
            for _ in range(10):  # two attempts, two reasons, no collection in between
                job = await queue.enqueue(1, max_attempts=3)
                assert job is not None
                record(truth, job)
                for error in ("JobDeadlineExceeded: 30s", "boom"):
                    claim = await queue.claim("w", 60.0, job_id=job.job_id)
                    record(truth, claim, await queue.fail(job.job_id, "w", error))
            for _ in range(10):  # dies, requeued, dies again, requeued again
                job = await queue.enqueue(2, max_attempts=1)
                assert job is not None
                record(truth, job)
                for _ in range(2):
                    claim = await queue.claim("w", 60.0, job_id=job.job_id)
                    dead = await queue.fail(job.job_id, "w", "boom")
                    record(truth, claim, dead, await queue.requeue(job.job_id))
        finally:
            await conn.close()
        await counted(runtime, caught_up(runtime, truth))
        assert_exact(runtime.poller, truth)
        tallies = runtime.poller.tallies
        assert tallies.failures[("1", "deadline")] == 10
        assert tallies.failures[("1", "error")] == 10
        assert tallies.requeued["2"] == 20
        assert tallies.dead[("2", "error")] == 20


async def test_a_job_handed_back_with_attempts_minus_one_is_no_failure(
    logical_db: LogicalDatabase,
) -> None:
    truth = Tally()
    async with streaming(logical_queue(logical_db.dsn)) as runtime:
        conn = await asyncpg.connect(logical_db.admin)
        try:
            queue = JobQueue(conn, backoff_base=0.0)
            for _ in range(30):
                job = await queue.enqueue(1, max_attempts=1)
                assert job is not None
                record(truth, job, await queue.claim("w", 60.0, job_id=job.job_id))
                # A graceful-shutdown release: back to pending, the attempt given back.
                await conn.execute(
                    "UPDATE job SET status = 1, attempts = attempts - 1, worker_id = NULL, "
                    "lease_until = NULL, updated_at = now() WHERE job_id = $1",
                    job.job_id,
                )
                claim = await queue.claim("w", 60.0, job_id=job.job_id)
                record(truth, claim, await queue.complete(job.job_id, "w", RESULT))
        finally:
            await conn.close()
        await counted(runtime, caught_up(runtime, truth))
        assert_exact(runtime.poller, truth)
        tallies = runtime.poller.tallies
        assert not tallies.failures
        assert not tallies.dead
        assert not tallies.requeued
        assert tallies.completed["1"] == 30


async def test_a_mapped_table_counts_exactly_from_its_stream(
    logical_server: LogicalServer, tmp_path: Path
) -> None:
    async with empty_database(logical_server) as db:
        base = tasks_queue(tmp_path / "tasks.yml", db.dsn)
        await prepare_tasks(db.admin, base.mapping)
        queue = logical_queue(db.dsn, replace(base, collect=fast_queue(db.dsn).collect))
        # logical-setup gives a mapped table FULL: its application may leave a value alone.
        statements = setup_statements(Settings(queues=(queue,)))
        assert 'ALTER TABLE "app"."tasks" REPLICA IDENTITY FULL' in statements
        await run_as_admin(db.admin, [*statements, *role_grants(db.name, "app", "app.tasks")])
        await _count_mapped(queue, db.admin)


async def _count_mapped(queue: QueueSettings, dsn: str) -> None:
    truth = Tally()
    async with streaming(queue) as runtime:
        conn = await asyncpg.connect(dsn)
        try:
            tasks = TasksQueue(conn, backoff_base=0.0)
            for n in range(20):
                job = await tasks.enqueue(n % 2)
                assert job is not None
                record(truth, job)
                claim = await tasks.claim("w", 60.0, job_id=job.job_id)
                if n % 4 == 0:
                    record(truth, claim, await tasks.fail(job.job_id, "w", "boom"))
                    claim = await tasks.claim("w", 60.0, job_id=job.job_id)
                record(truth, claim, await tasks.complete(job.job_id, "w", RESULT))
                if n % 5 == 0:
                    await conn.execute("DELETE FROM app.tasks WHERE id = $1", job.job_id)
        finally:
            await conn.close()
        await counted(runtime, caught_up(runtime, truth))
        assert_exact(runtime.poller, truth)
        assert sum(runtime.poller.tallies.completed.values()) == 20


async def test_a_prepared_transaction_is_counted_once_at_its_commit_prepared(
    logical_db: LogicalDatabase,
) -> None:
    truth = Tally()
    async with streaming(logical_queue(logical_db.dsn)) as runtime:
        conn = await asyncpg.connect(logical_db.admin)
        try:
            queue = JobQueue(conn, backoff_base=0.0)
            await conn.execute("BEGIN")
            row = await conn.fetchrow(JobQueue.ENQUEUE, None, 3, 100, "{}", None, 3)
            assert row is not None
            prepared = Transition.from_row("enqueue", row)
            await conn.execute("PREPARE TRANSACTION 'jobqueue_2pc'")
            record(truth, await queue.enqueue(1))
            await counted(runtime, caught_up(runtime, truth))
            assert runtime.poller.tallies.enqueued == {"1": 1}  # not before its commit
            await conn.execute("COMMIT PREPARED 'jobqueue_2pc'")
            record(truth, prepared)
        finally:
            await conn.close()
        await counted(runtime, caught_up(runtime, truth))
        assert_exact(runtime.poller, truth)


async def test_counts_arrive_while_a_long_transaction_stays_open(
    logical_db: LogicalDatabase,
) -> None:
    truth = Tally()
    async with streaming(logical_queue(logical_db.dsn)) as runtime:
        holder = await asyncpg.connect(logical_db.admin)
        conn = await asyncpg.connect(logical_db.admin)
        try:
            # A writing transaction (it holds an xid, so the slot's restart_lsn cannot pass it)
            # and a read-only one: neither holds back the commits that come after them.
            await holder.execute("CREATE TABLE IF NOT EXISTS held (n int)")
            await holder.execute("BEGIN; INSERT INTO held VALUES (1)")
            queue = JobQueue(conn, backoff_base=0.0)
            started = time.monotonic()
            for _ in range(20):
                job = await queue.enqueue(1)
                assert job is not None
                claim = await queue.claim("w", 60.0, job_id=job.job_id)
                record(truth, job, claim, await queue.complete(job.job_id, "w", RESULT))
            await counted(runtime, caught_up(runtime, truth), limit=10.0)
            assert_exact(runtime.poller, truth)
            assert time.monotonic() - started < 15.0
            assert await holder.fetchval("SELECT count(*) FROM held") == 1  # still open
        finally:
            await holder.close()
            await conn.close()


# --- where the slot is confirmed ----------------------------------------------------------


async def _confirmed(dsn: str, slot: str | None) -> int:
    return int(
        await fetchval(
            dsn,
            "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots "
            "WHERE slot_name = $1",
            slot,
        )
    )


async def _until(
    check: Callable[[], Awaitable[bool]], runtime: QueueRuntime, limit: float = 20.0
) -> None:
    deadline = time.monotonic() + limit
    while not await check():
        assert time.monotonic() < deadline
        await runtime.poller.collect_once()
        await asyncio.sleep(0.1)


async def test_the_slot_is_confirmed_where_a_scrape_carries_the_counts_before_it_is_served(
    logical_db: LogicalDatabase,
) -> None:
    from exporter.web.exposition import Exposition

    queue = logical_queue(logical_db.dsn, fast_queue(logical_db.dsn, interval=60.0))
    slot = queue.collect.logical_slot
    truth = Tally()
    async with streaming(queue) as runtime:
        follower = runtime.follower
        assert follower is not None
        conn = await asyncpg.connect(logical_db.admin)
        try:
            queue_ops = JobQueue(conn, backoff_base=0.0)
            for _ in range(5):
                record(truth, await queue_ops.enqueue(1))
            await counted(runtime, caught_up(runtime, truth))
            counted_at = follower.position
            before = await _confirmed(logical_db.dsn, slot)
            # Counted, not scraped, not three intervals old: a successor would get them again.
            assert before < counted_at
            # A scrape carries them: its response leaves once the stream sent that position,
            # with no cycle in between (the interval is a minute).
            await Exposition(runtime.board).body()
            assert follower.stream.confirmed_lsn >= counted_at
            deadline = time.monotonic() + 5  # the walsender reads the feedback it was sent
            while await _confirmed(logical_db.dsn, slot) < counted_at:
                assert time.monotonic() < deadline, "the served position never reached the slot"
                await asyncio.sleep(0.02)
            # Other tables' WAL (the job table quiet): the slot follows the server's position,
            # so a quiet queue never pins the WAL of busy tables.
            await conn.execute("CREATE TABLE elsewhere (n int); INSERT INTO elsewhere VALUES (1)")
            target = int(await conn.fetchval("SELECT (pg_current_wal_flush_lsn() - '0/0')::bigint"))

            async def past_other_tables() -> bool:
                return await _confirmed(logical_db.dsn, slot) >= target

            await _until(past_other_tables, runtime)
        finally:
            await conn.close()


async def test_a_standby_resumes_at_what_the_leaders_scrapes_carried(
    logical_db: LogicalDatabase,
) -> None:
    """Two exporters, one slot: only the leader streams; after it stops, the standby counts
    its unscraped tail once, so the leader's scraped counts plus the standby's equal the truth."""
    from exporter.web.exposition import Exposition
    from tests.helpers import parse, value

    queue = logical_queue(logical_db.dsn, fast_queue(logical_db.dsn, interval=3.0))
    queue = replace(queue, collect=replace(queue.collect, leader_election=True))
    leader, standby = QueueRuntime(queue), QueueRuntime(queue)
    conn = await asyncpg.connect(logical_db.admin)
    ops = JobQueue(conn, backoff_base=0.0)

    async def until(check: Callable[[], bool], limit: float = 30.0) -> None:
        deadline = time.monotonic() + limit
        while not check():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)

    async def enqueue(n: int) -> None:
        for _ in range(n):
            assert await ops.enqueue(1) is not None

    def enqueued(runtime: QueueRuntime) -> int:
        return sum(runtime.poller.tallies.enqueued.values())

    try:
        leader.start()
        await until(lambda: leader.leader and leader.follower is not None
                    and leader.follower.stream.running)  # fmt: skip
        standby.start()
        await asyncio.sleep(1.0)
        assert standby.follower is not None
        assert not standby.leader
        assert not standby.follower.stream.running  # a standby never streams
        slot = queue.collect.logical_slot
        await until(lambda: leader.poller.health.up)
        deadline = time.monotonic() + 30
        while not await fetchval(
            logical_db.dsn, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot
        ):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        await enqueue(5)
        await until(lambda: enqueued(leader) == 5)
        # The tally is counted before the cycle publishes it: scrape until the scrape has it.
        deadline = time.monotonic() + 30
        while True:
            scraped = parse((await Exposition(leader.board).body())["identity"].decode())
            if (
                scraped.get(
                    ("jobqueue_jobs_enqueued_total", (("job_type", "1"), ("queue", queue.name)))
                )
                == 5
            ):
                break
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await enqueue(3)  # counted by the leader, never scraped from it
        await until(lambda: enqueued(leader) == 8)
        await leader.stop()
        await enqueue(2)
        await until(lambda: standby.leader and enqueued(standby) == 5)
        await asyncio.sleep(1.0)  # nothing more arrives
        assert value(scraped, "jobqueue_jobs_enqueued_total", job_type="1") == 5
        assert enqueued(standby) == 5  # the leader's unscraped 3, then 2: 5 + 5 = 10
    finally:
        await conn.close()
        await standby.stop()
        await leader.stop()
        for runtime in (leader, standby):
            await runtime.database.close()
        await execute(
            logical_db.dsn,
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = $1",
            queue.collect.logical_slot,
        )


async def test_the_status_page_shows_a_logical_queues_mode_and_its_slot_lag(
    logical_db: LogicalDatabase,
) -> None:
    truth = Tally()
    async with streaming(logical_queue(logical_db.dsn)) as runtime:
        conn = await asyncpg.connect(logical_db.admin)
        try:
            record(truth, *[await JobQueue(conn, backoff_base=0.0).enqueue(1) for _ in range(3)])
        finally:
            await conn.close()
        await counted(runtime, caught_up(runtime, truth))
        status = runtime.poller.status()
    slot = status.view.slot
    assert slot is not None, "the leader reports its slot every cycle"
    polled = replace(status, view=replace(status.view, queue="polled", slot=None))
    polled = replace(polled, counting="polling")
    text = status_page(StatusPage("/metrics", 1.0, time.time(), ConfigStatus(), (status, polled)))
    cells = RenderedPage(text).cells
    assert status.counting == "logical"  # from collect.counting, through the poller
    assert cells[status.view.queue]["counting"].startswith("logical slot lag ")
    assert f"{slot.lag_bytes:,} bytes of WAL not yet confirmed" in text
    assert cells["polled"]["counting"] == "polling"
