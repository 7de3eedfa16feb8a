"""A slot invalidated by max_slot_wal_keep_size is a gap: counted once, replaced, and counting
goes on exactly from the new slot's baseline while /metrics keeps serving (docs/logical.md).

While this module runs, the session's logical cluster caps the WAL a slot may keep at 1 MB
(less than one segment), so a segment switch and a checkpoint invalidate a slot that nobody
reads: wal_status becomes 'lost'. The exporter connects as its documented role.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Iterator
from dataclasses import replace

import asyncpg
import pytest

from exporter.demo.queue import JobQueue
from exporter.demo.tally import Tally
from exporter.runtime import QueueRuntime
from exporter.settings import QueueSettings
from exporter.web.exposition import Exposition
from tests.conftest import fetchval
from tests.db.test_exposition import promtool_check_metrics
from tests.db.test_logical import (
    RESULT,
    caught_up,
    counted,
    drop_when_released,
    record,
)
from tests.helpers import fast_queue, parse, value
from tests.logical_cluster import PUBLICATION, LogicalDatabase, LogicalServer
from tests.truth import assert_exact

pytestmark = [pytest.mark.logical, pytest.mark.slow]

_names = itertools.count()
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def capped_server(logical_server: LogicalServer) -> Iterator[LogicalServer]:
    """The session's cluster, where a slot may keep at most 1 MB of WAL beyond the
    checkpoint's while this module runs."""
    with logical_server.configured({"max_slot_wal_keep_size": "1MB", "wal_keep_size": "0"}):
        yield logical_server


@pytest.fixture
def capped_db(capped_server: LogicalServer, logical_db: LogicalDatabase) -> LogicalDatabase:
    """A fresh queue database on the capped server, published as logical-setup prints it."""
    return logical_db


def gap_queue(dsn: str) -> QueueSettings:
    queue = fast_queue(dsn)
    collect = replace(
        queue.collect,
        counting="logical",
        logical_slot=f"gap_slot_{next(_names)}",
        logical_publication=PUBLICATION,
        leader_election=False,
    )
    return replace(queue, collect=collect)


async def slot_status(dsn: str, slot: str) -> str | None:
    return await fetchval(  # type: ignore[no-any-return]
        dsn, "SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1", slot
    )


async def streamed(runtime: QueueRuntime) -> None:
    """Collect until the slot exists and is read."""
    dsn, slot = runtime.settings.database.dsn, runtime.settings.collect.logical_slot
    assert dsn is not None
    deadline = time.monotonic() + 30
    while not await fetchval(
        dsn, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active", slot
    ):
        assert time.monotonic() < deadline, runtime.poller.health.last_error
        await runtime.poller.collect_once()
        await asyncio.sleep(0.05)
    await runtime.poller.collect_once()  # the health read now sees the active slot


async def invalidate(dsn: str, slot: str) -> None:
    """Write WAL past the cap and checkpoint until the server has invalidated the idle slot."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS filler (n int)")
        for _ in range(10):
            await conn.execute("INSERT INTO filler SELECT generate_series(1, 1000)")
            await conn.execute("SELECT pg_switch_wal()")
            await conn.execute("INSERT INTO filler VALUES (0)")
            await conn.execute("SELECT pg_switch_wal()")
            await conn.execute("CHECKPOINT")
            if await slot_status(dsn, slot) == "lost":
                return
        pytest.fail(f"slot {slot} was not invalidated: {await slot_status(dsn, slot)}")
    finally:
        await conn.close()


async def scrape(runtime: QueueRuntime) -> Samples:
    return parse((await Exposition(runtime.board).body())["identity"].decode())


async def work(dsn: str, truth: Tally | None, jobs: int) -> None:
    """Enqueue, fail once (every third job), and complete ``jobs`` jobs."""
    conn = await asyncpg.connect(dsn)
    try:
        queue = JobQueue(conn, backoff_base=0.0)
        for n in range(jobs):
            job = await queue.enqueue(1 + n % 2, max_attempts=3)
            assert job is not None
            steps = [job]
            if n % 3 == 0:
                claim = await queue.claim("w", 60.0, job_id=job.job_id)
                steps += [claim, await queue.fail(job.job_id, "w", "boom")]
            claim = await queue.claim("w", 60.0, job_id=job.job_id)
            steps += [claim, await queue.complete(job.job_id, "w", RESULT)]
            if truth is not None:
                record(truth, *steps)
    finally:
        await conn.close()


def totals(runtime: QueueRuntime) -> dict[str, int]:
    tallies = runtime.poller.tallies
    return {
        name: sum(getattr(tallies, name).values()) for name in ("enqueued", "completed", "failures")
    }


@pytest.mark.daemon
async def test_the_slot_gauges_are_the_servers_figures(capped_db: LogicalDatabase) -> None:
    runtime = QueueRuntime(gap_queue(capped_db.dsn))
    slot = runtime.settings.collect.logical_slot
    assert slot is not None
    try:
        await streamed(runtime)
        await work(capped_db.admin, None, 3)
        await runtime.poller.collect_once()
        body = (await Exposition(runtime.board).body())["identity"]
        checked = promtool_check_metrics(body)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        found = parse(body.decode())
        status = await slot_status(capped_db.dsn, slot)
        retained = await fetchval(
            capped_db.dsn,
            "SELECT (pg_current_wal_lsn() - restart_lsn)::bigint FROM pg_replication_slots "
            "WHERE slot_name = $1",
            slot,
        )
        assert value(found, "jobqueue_exporter_logical_slot_wal_status", wal_status=status) == 1
        assert sum(v for (n, _), v in found.items() if n.endswith("slot_wal_status")) == 1
        # The server's position moves on between the cycle's read and this one.
        assert 0 < value(found, "jobqueue_exporter_logical_retained_bytes") <= retained
        assert value(found, "jobqueue_exporter_logical_lag_bytes") >= 0
        assert value(found, "jobqueue_exporter_logical_safe_wal_bytes") >= 0  # the cap is set
        assert value(found, "jobqueue_exporter_logical_gaps_total") == 0
    finally:
        await runtime.stop()
        await runtime.database.close()
        await drop_when_released(capped_db.dsn, slot)


async def test_an_invalidated_slot_is_one_gap_and_counting_goes_on_exactly(
    capped_db: LogicalDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    """The stream stops (the exporter keeps running), the slot is invalidated meanwhile; the
    next cycle counts one gap, replaces the slot, keeps the counters and counts exactly again."""
    runtime = QueueRuntime(gap_queue(capped_db.dsn))
    slot = runtime.settings.collect.logical_slot
    assert slot is not None
    before, after = Tally(), Tally()
    try:
        await streamed(runtime)
        await work(capped_db.admin, before, 6)
        await counted(runtime, caught_up(runtime, before))
        assert_exact(runtime.poller, before)
        counted_before = totals(runtime)
        assert runtime.follower is not None
        await runtime.follower.stop()  # the stream stops; the exporter serves on
        await work(capped_db.admin, None, 4)  # the gap's transitions: nobody can count them
        await invalidate(capped_db.admin, slot)
        with caplog.at_level(logging.WARNING, logger="exporter.db.change_stream"):
            await streamed(runtime)
        assert await slot_status(capped_db.dsn, slot) != "lost"  # a new slot
        lines = [r for r in caplog.records if "replication slot lost" in r.getMessage()]
        assert len(lines) == 1
        assert runtime.poller.health.up
        await work(capped_db.admin, after, 9)
        target = {k: counted_before[k] + v for k, v in totals_of(after).items()}
        await counted(runtime, lambda: totals(runtime) == target)
        assert totals(runtime) == target  # the old counts kept, the new ones exact
        found = await scrape(runtime)
        assert value(found, "jobqueue_exporter_logical_gaps_total") == 1
        assert value(found, "jobqueue_up") == 1
    finally:
        await runtime.stop()
        await runtime.database.close()
        await drop_when_released(capped_db.dsn, slot)


async def test_a_slot_found_lost_at_start_is_one_gap_and_counting_starts_exactly(
    capped_db: LogicalDatabase,
) -> None:
    """The exporter stops; its slot is invalidated; an exporter started afterwards exports one
    gap and counts exactly what happens after its new baseline."""
    queue = gap_queue(capped_db.dsn)
    slot = queue.collect.logical_slot
    assert slot is not None
    first = QueueRuntime(queue)
    try:
        await streamed(first)
        await work(capped_db.admin, None, 3)
        await counted(first, lambda: totals(first)["completed"] == 3)
    finally:
        await first.stop()
        await first.database.close()
    await work(capped_db.admin, None, 4)  # while no exporter runs
    await invalidate(capped_db.admin, slot)
    second = QueueRuntime(queue)
    truth = Tally()
    try:
        await streamed(second)
        found = await scrape(second)
        assert value(found, "jobqueue_exporter_logical_gaps_total") == 1
        await work(capped_db.admin, truth, 9)
        await counted(second, caught_up(second, truth))
        assert_exact(second.poller, truth)
        assert value(await scrape(second), "jobqueue_exporter_logical_gaps_total") == 1
    finally:
        await second.stop()
        await second.database.close()
        await drop_when_released(capped_db.dsn, slot)


def totals_of(truth: Tally) -> dict[str, int]:
    return {
        "enqueued": sum(truth.enqueued.values()),
        "completed": sum(truth.completed.values()),
        "failures": sum(truth.failures.values()),
    }
