"""GoodJob 4 (its statements replayed, good_job_client.py): the preset's counters equal what the
harness did, its gauges equal the table at a quiet moment, late commits are counted once, and a
worker clock behind the windows' margin is refused.

The exporter's sessions run in Pacific/Chatham (UTC+12:45 or +13:45): Rails' timestamps are UTC
without a zone, and a reading that took them for local times would be hours off.
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest

from exporter.profiles.good_job import CLOCK_MARGIN, GoodJobReader
from tests.conftest import execute
from tests.system.presets import good_job_harness as h
from tests.system.presets.exported import RecordedPoller, nonzero
from tests.system.presets.good_job_client import (
    END_EXECUTION,
    END_JOB,
    Clock,
    GoodJobProcess,
    Log,
    Performer,
    connect,
    enqueue,
    insert,
    install,
)
from tests.system.presets.statediff_contract import assert_keeps_the_contract

pytestmark = [pytest.mark.library, pytest.mark.slow]


@pytest.fixture
async def good_job_dsn(empty_dsn: str) -> str:
    """A database with GoodJob's schema, whose sessions default to a zone far from UTC."""
    await install(empty_dsn)
    name = urlsplit(empty_dsn).path.lstrip("/")
    await execute(empty_dsn, f"ALTER DATABASE \"{name}\" SET timezone TO 'Pacific/Chatham'")
    return empty_dsn


async def test_the_good_job_statements_keep_the_state_diff_row_contract(good_job_dsn: str) -> None:
    await assert_keeps_the_contract(good_job_dsn, GoodJobReader())


async def test_counters_and_gauges_equal_the_harness_log(good_job_dsn: str) -> None:
    log = Log()
    ids = await h.history(good_job_dsn, log)
    poller = RecordedPoller(good_job_dsn, "good-job", heartbeat_timeout=h.STUCK_AFTER)
    stuck_seen: list[float] = []

    async def while_stuck(n: int) -> None:
        await poller.until(lambda: poller.stuck("FragileJob") == n, within=30)
        stuck_seen.append(poller.stuck("FragileJob"))

    async with poller.running():
        await h.run_workload(good_job_dsn, log, ids, poller.cycles, while_stuck)
        await poller.cycles(3)
    counters, histograms = h.truth(log)
    gauges = await h.agree(good_job_dsn, log)  # the log, the table and GoodJob's design

    assert len([e for e in poller.exports if e.counting]) >= 10, "too few cycles to prove much"
    # The log holds what the workload was made of (so the truth is not vacuous) ...
    assert counters["enqueued"]["OkJob"] >= 150
    assert counters["enqueued"]["LateJob"] == 2  # the held transaction's, once committed
    assert "GoneJob" not in counters["enqueued"]  # rolled back
    assert counters["failures"][("FlakyJob", "error")] > counters["enqueued"]["FlakyJob"]
    assert counters["failures"][("FragileJob", "lease_expired")] == 1  # the interrupted one
    assert {c for c, _ in counters["dead"]} == {"BadJob", "DoomedJob", "StubbornJob"}
    assert counters["requeued"] == {"RetryMeJob": 1, "NeverRunJob": 1}
    assert counters["cancelled"] == {"ParkedJob": 1, "FragileJob": 1}
    assert counters["completed"]["RetryMeJob"] == 1
    cleaned = {e.job_id for e in log.since_mark() if e.kind == "cleaned"}
    assert len(cleaned & {e.job_id for e in log.since_mark() if e.kind == "enqueued"}) > h.CLEANED
    # ... and the exporter, polling all along, agrees with it exactly, per job class.
    assert poller.tallies.counters() == counters
    for job_class, (n, duration, wait) in histograms.items():
        assert poller.tallies.duration[job_class].count == n, job_class
        assert poller.tallies.duration[job_class].total == pytest.approx(duration, abs=1e-6)
        assert poller.tallies.wait[job_class].total == pytest.approx(wait, abs=1e-6), job_class
    assert set(poller.tallies.duration) == set(histograms)
    assert not poller.tallies.latency  # not exported: a retry rewrites created_at
    assert stuck_seen == [2]
    # The gauges at the quiet end equal the table's, by GoodJob's own scopes.
    last = poller.last.gauges
    got = {c: {"pending": g.pending, "running": g.running, "scheduled": g.scheduled}
           for c, g in last.items()}  # fmt: skip
    assert nonzero(got) == nonzero(gauges)
    assert gauges == {"ParkedJob": {"pending": 2, "running": 0, "scheduled": 0},
                      "NeverRunJob": {"pending": 1, "running": 0, "scheduled": 0},
                      "HeldJob": {"pending": 1, "running": 0, "scheduled": 1}}  # fmt: skip
    assert 0 < last["ParkedJob"].oldest_ready_wait < 600  # hours off if read in local time
    assert last["HeldJob"].oldest_ready_wait == 0  # due in an hour
    assert all(g.stuck == 0 and g.running_oldest == 0 for g in last.values())


async def test_late_enqueue_and_late_completion_are_counted_once(good_job_dsn: str) -> None:
    poller = RecordedPoller(good_job_dsn, "good-job", interval=0.2)
    tallies, log = poller.tallies, Log()
    app, slow = await connect(good_job_dsn), await connect(good_job_dsn)
    process = GoodJobProcess(good_job_dsn, Clock(), advisory=True)
    thread = Performer(process, ["default"], h.decide, log)
    try:
        await process.start()
        await thread.open()
        async with poller.running():
            await enqueue(app, Clock(), log, "OkJob")
            await poller.until(lambda: tallies.enqueued["OkJob"] == 1)
            # An app's transaction enqueues twice (once in a savepoint) and stays open; a
            # worker's last transaction of a job (its end) stays open too, while a later
            # enqueue commits at once.
            held = app.transaction()
            await held.start()
            await insert(app, Clock(), "LateJob")
            async with app.transaction():
                await insert(app, Clock(), "LateJob")
            row = await thread.claim()
            assert row is not None
            assert row["job_class"] == "OkJob"
            ending = await _perform_held(thread, row)
            await enqueue(slow, Clock(), log, "OkJob")
            await poller.until(lambda: tallies.enqueued["OkJob"] == 2)
            await poller.cycles(5)
            assert tallies.enqueued["LateJob"] == 0
            assert tallies.completed["OkJob"] == 0
            await held.commit()
            await ending.commit()
            await poller.until(lambda: tallies.completed["OkJob"] == 1)
            await poller.until(lambda: tallies.enqueued["LateJob"] == 2)
            # A write rolled back is never counted.
            dropped = app.transaction()
            await dropped.start()
            await insert(app, Clock(), "GoneJob")
            await poller.cycles(3)
            await dropped.rollback()
            await poller.cycles(5)
    finally:
        await thread.close()
        await process.stop()
        await app.close()
        await slow.close()
    assert tallies.counters()["enqueued"] == {"OkJob": 2, "LateJob": 2}
    assert tallies.counters()["completed"] == {"OkJob": 1}


async def _perform_held(thread: Performer, row: Any) -> Any:
    """Perform a claimed job, its end's transaction left open: the caller commits it."""
    assert thread.conn is not None
    execution, performed, _ = await thread.start(row)
    finished = thread.process.clock.now()
    ending = thread.conn.transaction()
    await ending.start()
    await thread.conn.execute(END_EXECUTION, finished, finished - performed, None, None, None,
                              uuid.UUID(execution))  # fmt: skip
    await thread.conn.execute(END_JOB, None, None, finished, finished, row["id"])
    return ending


async def test_an_end_stamped_by_a_clock_behind_the_margin_fails_the_collection(
    good_job_dsn: str,
) -> None:
    poller = RecordedPoller(good_job_dsn, "good-job", interval=0.2)
    log = Log()
    behind = GoodJobProcess(good_job_dsn, Clock(-(CLOCK_MARGIN + 30.0)), advisory=True)
    thread = Performer(behind, ["default"], h.decide, log)
    conn = await connect(good_job_dsn)
    try:
        await behind.start()
        await thread.open()
        async with poller.running():
            await enqueue(conn, Clock(-(CLOCK_MARGIN + 30.0)), log, "OkJob")
            await poller.until(lambda: poller.tallies.enqueued["OkJob"] == 1)
            assert await thread.perform_next()
            inner = poller.poller
            for _ in range(20):
                if inner.health.errors["schema"]:
                    break
                await inner.wait_for_collections(inner.generation + 1, limit=30)
            poller.exports.clear()  # the refusal is what this test waits for
    finally:
        await thread.close()
        await behind.stop()
        await conn.close()
    assert inner.health.errors["schema"] == 1, inner.health.errors
    assert "clock is more than 60 s behind the database's" in str(inner.last_error)
    assert poller.tallies.completed["OkJob"] == 0  # nothing of the refused cycle is counted


async def test_per_cycle_queries_use_indexes_on_a_million_rows(empty_dsn: str) -> None:
    from tests.system.presets.good_job_explain import measure_good_job

    result = await measure_good_job(empty_dsn)
    assert result.plans, "no plan was captured"
    assert result.seq_scans() == [], result.report()
    assert max(result.rows_read) < 1_000_000 // 50, result.report()
    print(result.report())
