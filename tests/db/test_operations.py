"""Real operations on a real PostgreSQL, counted against the reference SQL's own record.

Archive restores (rows inserted now with an old ``created_at``), a two-phase transaction
prepared before the exporter's baseline, retention deleting unfinished jobs, finished jobs held past collect.max_held_jobs while a
backup-like transaction holds the horizon, and the one
history that polling cannot see (docs/exactness.md, "What polling cannot see"). The ground
truth is a :class:`Tally` of the transitions the reference queue's statements returned.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime

import asyncpg
import pytest

from exporter.counting.transitions import PURGE_CHECK_EVERY
from exporter.demo.cluster import Cluster
from exporter.demo.queue import JobQueue, Transition, prepare_database
from exporter.demo.tally import Tally
from exporter.poller import Poller
from tests.helpers import collect_until, cursor, fast_settings, make_poller, scrape, value
from tests.truth import assert_dead_gauge_matches_table, assert_exact

RESULT = {"metrics": {"duration_ms": 250}}


@asynccontextmanager
async def exporter_and_queue(dsn: str, **collect: object) -> AsyncIterator[tuple[Poller, JobQueue]]:
    """A poller of the queue and the reference queue's statements on a connection of its own."""
    poller = make_poller(fast_settings(dsn, **collect))
    conn = await asyncpg.connect(dsn)
    try:
        yield poller, JobQueue(conn, backoff_base=0.0)
    finally:
        await conn.close()
        await poller.database.close()


async def collect_past(poller: Poller, stamp: datetime) -> None:
    """Collect until the cursor has passed ``stamp`` for good: every change up to it is read."""
    await collect_until(poller, lambda: cursor(poller).tracker.since() > stamp.timestamp())


async def dies(queue: JobQueue, truth: Tally | None, job_type: int) -> Transition:
    """Enqueue a job with one attempt, claim it and fail it: DEAD."""
    steps = [await queue.enqueue(job_type, max_attempts=1)]
    assert steps[0] is not None
    steps.append(await queue.claim("w", 60.0, job_id=steps[0].job_id))
    steps.append(await queue.fail(steps[0].job_id, "w", "boom"))
    for step in steps:
        assert step is not None
        if truth is not None:
            truth.record(step)
    assert steps[-1] is not None
    return steps[-1]


async def test_archive_restores_are_enqueues_and_requeues_are_told_from_them(db_dsn: str) -> None:
    truth = Tally()
    async with exporter_and_queue(db_dsn) as (poller, queue):
        conn = queue.conn
        before = [await dies(queue, None, 7) for _ in range(3)]  # history: dead at the baseline
        assert await poller.collect_once()  # the baseline reads their ids
        # Restored from an archive: inserted now, created ten days ago.
        restored = await conn.fetch(
            "INSERT INTO job (job_type, created_at, run_after) "
            "SELECT 7, now() - interval '10 days', now() - interval '10 days' "
            "FROM generate_series(1, 5) RETURNING *"
        )
        for row in restored:
            truth.record(Transition.from_row("enqueue", row))
        for dead in before[:2]:
            requeued = await queue.requeue(dead.job_id)
            assert requeued is not None
            truth.record(requeued)
        # A job that dies after the baseline, is forgotten once settled, then requeued.
        late = await dies(queue, truth, 7)
        await collect_past(poller, late.updated_at)
        assert str(late.job_id) in cursor(poller).tracker.dead_ids  # forgotten, its id kept
        again = await queue.requeue(late.job_id)
        assert again is not None
        truth.record(again)
        await collect_past(poller, again.updated_at)
        assert_exact(poller, truth)
        assert poller.tallies.enqueued["7"] == 6  # five restored, one new
        assert poller.tallies.requeued["7"] == 3
        await assert_dead_gauge_matches_table(poller, db_dsn)


@pytest.fixture
async def two_phase_dsn(fresh_cluster: Cluster) -> str:
    """A queue database on a cluster that allows prepared transactions."""
    fresh_cluster.psql("ALTER SYSTEM SET max_prepared_transactions = 4")
    fresh_cluster.restart()
    fresh_cluster.create_database("queue")
    dsn = fresh_cluster.dsn("queue")
    await prepare_database(dsn)
    return dsn


@pytest.mark.cluster
async def test_jobs_of_a_transaction_prepared_before_the_baseline_are_enqueues_not_requeues(
    two_phase_dsn: str,
) -> None:
    truth, gid = Tally(), f"early-{uuid.uuid4().hex[:8]}"
    prepared = await asyncpg.connect(two_phase_dsn)
    try:
        await prepared.execute("BEGIN")
        inserted = [
            Transition.from_row(
                "enqueue", await prepared.fetchrow(JobQueue.ENQUEUE, None, 8, 100, "{}", None, 3)
            )
            for _ in range(4)
        ]
        await prepared.execute(f"PREPARE TRANSACTION '{gid}'")  # outlives its session
    finally:
        await prepared.close()
    async with exporter_and_queue(two_phase_dsn) as (poller, queue):
        # The baseline's bound lies past the rows' stamp (by more than its margin): the
        # cursor never reads these inserts, only what happens to the jobs afterwards.
        await queue.conn.execute(
            "SELECT pg_sleep_until($1::timestamptz + interval '1 second')", inserted[0].updated_at
        )
        assert await poller.collect_once()
        for _ in range(3):
            assert await poller.collect_once()
        await queue.conn.execute(f"COMMIT PREPARED '{gid}'")
        for _ in range(3):
            assert await poller.collect_once()
        # Committed after the baseline, so enqueues; each is counted when its job next changes
        # (inserted below the cursor, an unchanged row stays unread: history, see the docs).
        for job, ends in zip(inserted[:3], ("complete", "complete", "fail"), strict=True):
            truth.record(job)
            claimed = await queue.claim("w", 60.0, job_id=job.job_id)
            assert claimed is not None
            truth.record(claimed)
            if ends == "complete":
                step = await queue.complete(job.job_id, "w", RESULT)
            else:
                step = await queue.fail(job.job_id, "w", "boom")
            assert step is not None
            truth.record(step)
        await collect_past(poller, step.updated_at)
        assert_exact(poller, truth)
        assert poller.tallies.enqueued["8"] == 3
        assert poller.tallies.requeued["8"] == 0


async def test_tracked_active_jobs_deleted_by_retention_are_counted_as_vanished(
    db_dsn: str,
) -> None:
    async with exporter_and_queue(db_dsn) as (poller, queue):
        conn = queue.conn
        assert await poller.collect_once()
        jobs = [await queue.enqueue(6) for _ in range(8)]
        claims = [await queue.claim("w", 600.0, job_id=job.job_id) for job in jobs[:3] if job]
        done = await queue.complete(jobs[0].job_id, "w", RESULT) if jobs[0] else None
        assert done is not None
        assert all(claims)
        await collect_past(poller, done.updated_at)  # every job seen in its latest state
        # Retention deletes the unfinished jobs of type 6 except one pending and one running,
        # and the finished one (not vanished: the exporter saw it end).
        deleted = await conn.fetch(
            "DELETE FROM job WHERE job_id = ANY($1::uuid[]) RETURNING status",
            [job.job_id for job in jobs[:2] + jobs[3:7] if job],
        )
        # Never seen: inserted and deleted between two reads (docs: what polling cannot see).
        await conn.execute("INSERT INTO job (job_type) VALUES (6)")
        await conn.execute("DELETE FROM job WHERE job_type = 6 AND attempts = 0 AND status = 1 "
                           "AND job_id <> ALL($1::uuid[])", [j.job_id for j in jobs if j])  # fmt: skip
        statuses = {1: "pending", 2: "running", 3: "done"}
        truth: dict[str, int] = {}
        for row in deleted:
            if row["status"] != 3:
                truth[statuses[row["status"]]] = truth.get(statuses[row["status"]], 0) + 1
        assert truth == {"pending": 4, "running": 1}
        # Deleted rows are looked for every PURGE_CHECK_EVERY cycles.
        for _ in range(2 * PURGE_CHECK_EVERY):
            assert await poller.collect_once()
        assert dict(+poller.tallies.vanished) == truth
        samples = scrape(poller)
        for status, n in truth.items():
            assert value(samples, "jobqueue_exporter_jobs_vanished_total", last_status=status) == n
        assert poller.tallies.enqueued["6"] == 8  # the job inserted and deleted unseen: not
        assert poller.tallies.completed["6"] == 1
        assert cursor(poller).tracker.tracked == 2  # the survivors only


async def test_a_requeue_inside_one_interval_of_a_job_seen_pending_is_counted_exactly(
    db_dsn: str,
) -> None:
    truth = Tally()
    async with exporter_and_queue(db_dsn) as (poller, queue):
        assert await poller.collect_once()
        jobs = [await queue.enqueue(5, max_attempts=1), await queue.enqueue(5, max_attempts=2)]
        for job in jobs:
            assert job is not None
            truth.record(job)
        await collect_past(poller, max(j.updated_at for j in jobs if j is not None))
        first, second = (j.job_id for j in jobs if j is not None)
        # Between two reads, both seen PENDING with 0 attempts: the first is claimed, fails
        # (dead), is requeued, claimed and completed; the second fails twice (retried with no
        # backoff, then dead) and is requeued, and is PENDING with 0 attempts again.
        steps = [
            await queue.claim("w", 60.0, job_id=first),
            await queue.fail(first, "w", "boom"),
            await queue.requeue(first),
            await queue.claim("w", 60.0, job_id=first),
            await queue.complete(first, "w", RESULT),
            await queue.claim("w", 60.0, job_id=second),
            await queue.fail(second, "w", "boom"),
            await queue.claim("w", 60.0, job_id=second),
            await queue.fail(second, "w", "boom"),
            await queue.requeue(second),
        ]
        for step in steps:
            assert step is not None
            truth.record(step)
        assert steps[-1] is not None
        await collect_past(poller, steps[-1].updated_at)
        # (PENDING, 0) to (DONE, 1) and (PENDING, 0) to (PENDING, 0): run_after was set by the
        # requeue after the last read, and no failure the attempts show could have set it.
        assert (truth.failures, truth.dead, truth.requeued) == (
            {(5, "error"): 3}, {(5, "error"): 2}, {5: 2},
        )  # fmt: skip
        assert_exact(poller, truth)


async def runs_to_the_end(queue: JobQueue, truth: Tally, job_type: int, fails: bool) -> Transition:
    """Enqueue a job, claim it, and complete it (or fail its only attempt: DEAD)."""
    job = await queue.enqueue(job_type, max_attempts=1)
    assert job is not None
    claimed = await queue.claim("w", 60.0, job_id=job.job_id)
    if fails:
        end = await queue.fail(job.job_id, "w", "boom")
    else:
        end = await queue.complete(job.job_id, "w", RESULT)
    for step in (job, claimed, end):
        assert step is not None
        truth.record(step)
    assert end is not None
    return end


def held_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    """The log lines about collect.max_held_jobs: (level, message)."""
    return [
        (r.levelno, r.getMessage()) for r in caplog.records if "max_held_jobs" in r.getMessage()
    ]


async def test_finished_jobs_held_past_the_cap_are_flagged_once_and_still_counted_exactly(
    db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="exporter.poller")
    truth = Tally()
    async with exporter_and_queue(db_dsn, max_held_jobs=5, max_rows_per_query=4) as (
        poller,
        queue,
    ):
        assert await poller.collect_once()  # the baseline
        dump = await asyncpg.connect(db_dsn)
        try:
            # A pg_dump-like transaction: its snapshot holds the horizon from here on.
            await dump.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            await dump.fetchval("SELECT count(*) FROM job")
            ends = [await runs_to_the_end(queue, truth, 4, fails=i % 4 == 0) for i in range(12)]
            for _ in range(4):
                assert await poller.collect_once()
            # Counted on time: every finished job is read past the held bound, and kept.
            assert_exact(poller, truth)
            assert cursor(poller).tracker.held == 12
            samples = scrape(poller)
            assert value(samples, "jobqueue_exporter_held_jobs") == 12
            assert value(samples, "jobqueue_exporter_held_cap_exceeded") == 1
            assert [level for level, _ in held_lines(caplog)] == [logging.WARNING]  # once
            await dump.execute("COMMIT")
        finally:
            await dump.close()
        # The horizon moves: the held region is swept once and forgotten.
        await collect_past(poller, ends[-1].updated_at)
        assert_exact(poller, truth)
        assert cursor(poller).tracker.held == 0
        samples = scrape(poller)
        assert value(samples, "jobqueue_exporter_held_jobs") == 0
        assert value(samples, "jobqueue_exporter_held_cap_exceeded") == 0
        assert [level for level, _ in held_lines(caplog)] == [logging.WARNING, logging.INFO]
        assert poller.tallies.completed["4"] == 9
        await assert_dead_gauge_matches_table(poller, db_dsn)


# A graceful-shutdown release, as home-grown queues write it (the reference SQL has none): the
# job goes back to PENDING with the attempt it had not finished given back; run_after stays.
RELEASE = """
UPDATE job SET status = 1, attempts = attempts - 1, lease_until = NULL, worker_id = NULL,
               run_started_at = NULL, updated_at = now()
WHERE job_id = $1 AND status = 2
RETURNING updated_at
"""


async def test_jobs_released_with_attempts_lowered_are_no_failure_death_or_requeue(
    db_dsn: str,
) -> None:
    truth = Tally()
    async with exporter_and_queue(db_dsn) as (poller, queue):
        assert await poller.collect_once()
        claims = []
        for _ in range(6):
            job = await queue.enqueue(3, max_attempts=1)
            assert job is not None
            truth.record(job)
            claimed = await queue.claim("w", 60.0, job_id=job.job_id)
            assert claimed is not None
            truth.record(claimed)
            claims.append(claimed)
        await collect_past(poller, claims[-1].updated_at)
        # Between two reads, each job read RUNNING with its one attempt is handed back. Two
        # stay pending, two are claimed again, two are claimed again and completed: with one
        # attempt each, a release taken for a hidden requeue would count deaths.
        last = claims[-1].updated_at
        for i, claimed in enumerate(claims):
            last = await queue.conn.fetchval(RELEASE, claimed.job_id)
            if i >= 2:
                again = await queue.claim("w", 60.0, job_id=claimed.job_id)
                assert again is not None
                truth.record(again)
                last = again.updated_at
            if i >= 4:
                done = await queue.complete(claimed.job_id, "w", RESULT)
                assert done is not None
                truth.record(done)
                last = done.updated_at
        await collect_past(poller, last)
        assert (truth.failures, truth.dead, truth.requeued) == ({}, {}, {})
        assert_exact(poller, truth)
        await assert_dead_gauge_matches_table(poller, db_dsn)
        assert value(scrape(poller), "jobqueue_jobs_completed_total", job_type="3") == 2
