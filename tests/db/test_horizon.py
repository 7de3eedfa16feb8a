"""The change cursor on a real PostgreSQL: late commits, subtransactions, ties, catch-up, memory.

The exporter reads each changed row about once, past a cursor that the transaction horizon
(pg_stat_activity) moves; these tests hold transactions open across collections, stamp many
rows with one ``now()``, and let a backlog pile up while the exporter is stopped.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import asyncpg
import pytest

from exporter import poller as poller_module
from exporter.demo.cluster import TRUSTED_ROLE
from exporter.demo.fleet import Fleet, FleetConfig
from exporter.poller import Poller
from tests.conftest import execute, fetchval
from tests.helpers import (
    collect_until,
    cursor,
    fast_settings,
    make_poller,
    poller_running,
    scrape,
    settle,
    value,
    wait_for_completions,
    wait_until,
)
from tests.truth import assert_dead_gauge_matches_table, assert_exact

pytestmark = pytest.mark.slow

# Three times the commit-lag tolerance this test configures (5 s): a cursor that trusted the
# tolerance would have passed the transition 10 s before it commits. The property needs the hold
# to outlast the configured tolerance, not the default one (30 s), which this poller never uses.
LATE = 15.0


async def test_a_transition_committed_past_the_commit_lag_tolerance_is_counted_exactly_once(
    db_dsn: str,
) -> None:
    # Other work goes on meanwhile, and is counted as it happens.
    fleet = Fleet(db_dsn, FleetConfig.fast(job_types=3, enqueue_rate=30.0, p_requeue=0.0))
    poller = make_poller(fast_settings(db_dsn, interval=0.2, commit_lag_tolerance=5.0))
    conn = await asyncpg.connect(db_dsn)
    try:
        async with poller_running(poller):
            await poller.wait_for_success()
            await execute(db_dsn, "INSERT INTO job (job_type, status) VALUES (9, 1)")
            await execute(
                db_dsn,
                "UPDATE job SET status = 2, attempts = 1, run_started_at = now(), "
                "worker_id = 'late', updated_at = now() WHERE job_type = 9",
            )
            await fleet.start()
            late = conn.transaction()
            await late.start()
            await conn.execute(
                "UPDATE job SET status = 3, worker_id = NULL, updated_at = now(), "
                'result = \'{"metrics": {"duration_ms": 500}}\' WHERE job_type = 9'
            )
            # Scheduled far ahead: the fleet's workers claim any ready job, and this one must
            # stay a plain late insert (enqueued, never run) for the counts below to be fixed.
            await conn.execute(
                "INSERT INTO job (job_type, status, run_after) "
                "VALUES (9, 1, now() + interval '1 day')"
            )
            # Hold the transaction open for LATE seconds of the database's clock, collecting.
            open_for = "SELECT extract(epoch FROM clock_timestamp() - now())::float8"
            while await conn.fetchval(open_for) < LATE:
                await poller.wait_for_collections(poller.generation + 1)
            assert poller.tallies.completed["9"] == 0  # not visible yet: nothing counted
            assert poller.tallies.enqueued["9"] == 1
            assert poller.health.lag_seconds >= LATE - 5.0  # the horizon waits for it
            assert sum(poller.tallies.completed.values()) > 0  # the rest is counted meanwhile
            await late.commit()
            await wait_for_completions(fleet, 10)
            await fleet.pause()
            await settle(poller, 5)
        assert poller.tallies.completed["9"] == 1
        assert poller.tallies.enqueued["9"] == 2
        assert poller.tallies.duration["9"].count == 1
        assert poller.health.lag_seconds < 5.0  # caught up once the transaction ended
        await assert_dead_gauge_matches_table(poller, db_dsn)
        assert fleet.errors == 0
    finally:
        await conn.close()
        await fleet.stop()
        await poller.database.close()


async def test_rolled_back_savepoints_count_nothing_and_released_ones_count_once(
    db_dsn: str,
) -> None:
    poller = make_poller(fast_settings(db_dsn))
    conn = await asyncpg.connect(db_dsn)
    try:
        await execute(db_dsn, "INSERT INTO job (job_type, status) VALUES (4, 1)")
        assert await poller.collect_once()
        tx = conn.transaction()
        await tx.start()
        await conn.execute(
            "UPDATE job SET status = 2, attempts = 1, run_started_at = now(), updated_at = now()"
        )
        await conn.execute("SAVEPOINT a")
        await conn.execute("UPDATE job SET status = 3, result = '{}', updated_at = now()")
        await conn.execute("ROLLBACK TO SAVEPOINT a")
        await conn.execute("SAVEPOINT b")
        await conn.execute("INSERT INTO job (job_type, status) VALUES (4, 1)")
        await conn.execute("RELEASE SAVEPOINT b")
        for _ in range(3):  # collections while the subtransactions are open: nothing visible
            assert await poller.collect_once()
        assert poller.tallies.enqueued["4"] == 0
        await tx.commit()
        await collect_until(poller, lambda: poller.tallies.enqueued["4"] == 1)
        for _ in range(3):  # recognised when read again
            assert await poller.collect_once()
        samples = scrape(poller)
        assert value(samples, "jobqueue_jobs_enqueued_total", job_type="4") == 1
        assert value(samples, "jobqueue_jobs_completed_total", job_type="4") == 0
        assert value(samples, "jobqueue_jobs", job_type="4", status="running") == 1
    finally:
        await conn.close()
        await poller.database.close()


async def test_rows_tied_on_updated_at_across_chunks_are_each_counted_once(db_dsn: str) -> None:
    poller = make_poller(fast_settings(db_dsn, max_rows_per_query=7))
    try:
        assert await poller.collect_once()
        # One statement: 100 rows stamped with the same now(), read 7 at a time.
        await execute(
            db_dsn,
            "INSERT INTO job (job_type, status, attempts, run_started_at, result) "
            'SELECT 5, 3, 1, now(), \'{"metrics": {"duration_ms": 1000}}\' '
            "FROM generate_series(1, 100)",
        )
        # Read 7 at a time, above the horizon's bound as soon as visible and again (across the
        # tie) when the bound passes them: counted once however often they are read.
        await collect_until(poller, lambda: poller.tallies.enqueued["5"] == 100)
        await collect_until(poller, lambda: cursor(poller).tracker.tracked == 0)
        assert await poller.collect_once()
        assert poller.tallies.enqueued["5"] == 100
        assert poller.tallies.completed["5"] == 100
        assert poller.tallies.duration["5"].count == 100
        assert cursor(poller).tracker.tracked == 0  # finished rows behind the cursor: forgotten
    finally:
        await poller.database.close()


async def test_a_backlog_is_read_in_chunks_over_several_cycles_with_exact_counters(
    db_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One chunk per cycle: the backlog takes many back-to-back cycles to absorb.
    monkeypatch.setattr(poller_module, "READ_BUDGET_SHARE", 0.0)
    # No requeues: one that happens, with its death, while nobody reads is the documented
    # blind spot (docs/exactness.md), whatever the cursor.
    config = FleetConfig.fast(job_types=4, enqueue_rate=80.0, workers=12, p_requeue=0.0)
    fleet = Fleet(db_dsn, config)
    settings = fast_settings(db_dsn, interval=5.0, max_rows_per_query=40)
    poller = make_poller(settings)
    behind: list[float] = []
    poller.listeners.append(
        lambda: behind.append(poller.health.lag_seconds) if poller.behind else None
    )
    try:
        await fleet.start()
        await fleet.pause()
        assert await poller.collect_once()  # baseline, then the exporter is "down"
        before = fleet.tally.snapshot()
        fleet.resume()
        await wait_for_completions(fleet, 300)
        await fleet.pause()
        changed = await fetchval(
            db_dsn, "SELECT count(*) FROM job WHERE updated_at > to_timestamp($1)",
            cursor(poller).tracker.since(),
        )  # fmt: skip
        assert changed > 5 * 40
        cycles = poller.generation
        async with poller_running(poller):
            # The interval is 5 s, yet the backlog is read at once: cycles run back to back.
            await asyncio.wait_for(_until_caught_up(poller, changed // 40), 60.0)
            await settle(poller)
        assert poller.generation - cycles >= changed // 40
        assert behind, "the exporter never reported being behind"
        assert poller.health.errors.total() == 0
        await assert_dead_gauge_matches_table(poller, db_dsn)
        assert fleet.errors == 0
        truth = fleet.tally.since(before)
        # Several failures of one job while nobody read: their number is exact, the messages
        # that were overwritten take the survivor's reason (docs/exactness.md).
        got: Counter[str] = Counter()
        for (label, _), n in poller.tallies.failures.items():
            got[label] += n
        want: Counter[str] = Counter()
        for (job_type, _), n in truth.failures.items():
            want[poller.labels.label(job_type)] += n
        assert +got == +want
        assert sum(want.values()) > 0
        poller.tallies.failures.clear()
        truth.failures.clear()
        assert_exact(poller, truth)
        # Each changed row read about once (rows above the bound are read again once).
        assert poller.health.rows_read <= changed * 1.5
    finally:
        await fleet.stop()
        await poller.database.close()


async def _until_caught_up(poller: Poller, cycles: int) -> None:
    target = poller.generation + cycles
    await poller.wait_for_collections(target, limit=60.0)
    while poller.behind:
        await poller.wait_for_collections(poller.generation + 1, limit=60.0)


async def test_tracked_jobs_stay_bounded_by_the_active_ones(db_dsn: str) -> None:
    config = FleetConfig.fast(job_types=3, enqueue_rate=120.0, workers=12, p_requeue=0.0)
    fleet = Fleet(db_dsn, config)
    poller = make_poller(fast_settings(db_dsn, interval=0.1))
    peak = 0

    def note() -> None:
        nonlocal peak
        peak = max(peak, cursor(poller).tracker.tracked)

    poller.listeners.append(note)
    try:
        await fleet.start()
        async with poller_running(poller):
            await poller.wait_for_success()
            await wait_for_completions(fleet, 600)
            await fleet.pause()
            await settle(poller)
        finished = await fetchval(db_dsn, "SELECT count(*) FROM job WHERE status IN (3, 4)")
        assert finished >= 600
        # Active jobs (a dozen workers, a short queue) and the rows of the last fraction of a
        # second: never the history, which a tolerance window of 30 s would have kept.
        assert peak < 300, peak
        # What can still change (active, and dead: a requeue must be recognised), plus the
        # finished rows of the last fraction of a second.
        can_change = await fetchval(db_dsn, "SELECT count(*) FROM job WHERE status <> 3")
        assert cursor(poller).tracker.tracked <= can_change + 20
    finally:
        await fleet.stop()
        await poller.database.close()


async def test_without_pg_read_all_stats_the_tolerance_applies_and_a_warning_says_so(
    db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    role = f"limited_{abs(hash(db_dsn)) % 10**8}"
    # A member of the cluster's trusted role logs in without a password (exporter/demo/cluster.py).
    await execute(db_dsn, f"CREATE ROLE {role} LOGIN IN ROLE {TRUSTED_ROLE}")
    await execute(db_dsn, f"GRANT SELECT ON job TO {role}")
    limited_dsn = db_dsn.replace("postgres@", f"{role}@", 1)
    other = await asyncpg.connect(db_dsn)  # another role's session, inside a transaction
    poller = make_poller(fast_settings(limited_dsn, commit_lag_tolerance=5.0))
    try:
        tx = other.transaction()
        await tx.start()
        await other.execute("SELECT 1")
        assert await poller.collect_once()
        assert cursor(poller).feed.horizon is not None
        assert cursor(poller).feed.horizon.hidden >= 1
        assert "pg_read_all_stats" in caplog.text
        await execute(db_dsn, "INSERT INTO job (job_type, status) VALUES (3, 1)")
        await collect_until(poller, lambda: poller.tallies.enqueued["3"] == 1)
        assert 5.0 <= poller.health.lag_seconds < 30.0  # the tolerance window, not the horizon
        await tx.rollback()
    finally:
        await other.close()
        await poller.database.close()
        await execute(db_dsn, f"REVOKE ALL ON job FROM {role}")
        await execute(db_dsn, f"DROP ROLE {role}")


async def test_a_long_read_only_transaction_delays_no_count_and_loses_none(db_dsn: str) -> None:
    # A pg_dump-like REPEATABLE READ transaction holds the horizon while the fleet works,
    # with requeues, reaping and deadline kills; chunks of 20 rows, so that reading one chunk
    # past the held bound per cycle (the old cursor) would fall far behind.
    config = FleetConfig.fast(
        job_types=3, duration=(0.3, 0.6), backoff_base=1.0, lease_seconds=1.0,
        enqueue_rate=40.0, workers=12, operator_interval=0.5, requeue_after=1.0,
    )  # fmt: skip
    fleet = Fleet(db_dsn, config)
    poller = make_poller(fast_settings(db_dsn, interval=0.1, max_rows_per_query=20))
    dump = await asyncpg.connect(db_dsn)
    try:
        async with poller_running(poller):
            await poller.wait_for_success()
            before = fleet.tally.snapshot()
            await dump.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            await dump.fetchval("SELECT count(*) FROM job")
            await fleet.start()
            await wait_for_completions(fleet, 150)
            # The held stretch must contain a requeue and last the 5 s checked below: both are
            # waited for, since on a quiet machine 150 completions can take less than that.
            requeued = sum(before.requeued.values())
            await wait_until(
                lambda: sum(fleet.tally.requeued.values()) > requeued,
                within=60, what="a dead job requeued by the fleet's operator",
            )  # fmt: skip
            await wait_until(
                lambda: poller.health.lag_seconds >= 5.0,
                within=60, what="the cursor 5 s behind the held horizon",
            )  # fmt: skip
            await fleet.pause()
            # Still held: everything committed is visible, and a few cycles read all of it.
            await poller.wait_for_collections(poller.generation + 3)
            truth = fleet.tally.since(before)
            assert sum(truth.requeued.values()) > 0
            assert poller.health.lag_seconds >= 5.0  # the cursor itself waits for the horizon
            assert_exact(poller, truth)
            assert cursor(poller).tracker.tracked > 150  # the stall's rows, kept until swept
            await dump.execute("COMMIT")
            # The held region is swept once: read again, recognised, nothing counted twice.
            await poller.wait_for_collections(poller.generation + 3)
            await settle(poller)
        assert poller.health.lag_seconds < 5.0
        assert_exact(poller, truth)
        await assert_dead_gauge_matches_table(poller, db_dsn)
        assert cursor(poller).tracker.tracked < 150
        assert fleet.errors == 0
    finally:
        await dump.close()
        await fleet.stop()
        await poller.database.close()
