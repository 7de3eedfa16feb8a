"""A long autovacuum of another table holds no preset's counting back (issue 28).

An autovacuum worker keeps a transaction open for as long as it vacuums one table, hours on a
large one, but it runs no client SQL and so writes no queue row. The horizon leaves it out
(exporter/sql/horizon.sql); with it counted, procrastinate's event cursor took no baseline
while the vacuum lasted and the exporter counted nothing.

The autovacuum is a real one, on a cluster of the test's own: one-second naptime, and a
ballast table whose own storage parameters throttle its vacuum to minutes (every page costs
more than the cost limit, so the worker sleeps after each). The poller is the shipping one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable

import asyncpg
import pytest

from exporter.demo.cluster import Cluster
from tests.system.presets.exported import RecordedPoller
from tests.system.presets.processes import Worker, require, shown_on_failure, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.library, pytest.mark.cluster]

INTERVAL = 0.5
JOBS = 10
# About 600 pages of dead rows at 100-400 ms a page: minutes of one autovacuum transaction.
BALLAST = """
CREATE TABLE ballast (id int, pad text) WITH (
    autovacuum_vacuum_cost_delay = 100, autovacuum_vacuum_cost_limit = 1,
    autovacuum_vacuum_threshold = 0, autovacuum_vacuum_scale_factor = 0);
INSERT INTO ballast SELECT i, repeat('x', 200) FROM generate_series(1, 20000) AS i;
DELETE FROM ballast WHERE id % 2 = 0;
"""
VACUUMING = """
SELECT pid, xact_start FROM pg_stat_activity
WHERE backend_type = 'autovacuum worker' AND datname = current_database()
  AND query LIKE '%ballast%' AND xact_start IS NOT NULL
"""


async def test_completions_are_counted_on_time_while_an_autovacuum_runs(
    fresh_cluster: Cluster,
) -> None:
    require("procrastinate")
    import procrastinate

    from tests.system.presets import procrastinate_tasks as tasks
    from tests.system.presets.procrastinate_harness import install, start_worker

    fresh_cluster.psql("ALTER SYSTEM SET autovacuum_naptime = 1")
    fresh_cluster.psql("SELECT pg_reload_conf()")
    fresh_cluster.create_database("queue")
    dsn = fresh_cluster.dsn("queue")
    install(dsn)
    fresh_cluster.psql(BALLAST, dbname="queue")
    conn = await asyncpg.connect(dsn)
    try:
        vacuum = await wait_for(
            lambda: conn.fetchrow(VACUUMING), "an autovacuum worker on ballast", within=60
        )
        poller = RecordedPoller(dsn, "procrastinate", interval=INTERVAL)
        collecting = asyncio.create_task(poller.poller.run())
        workers: list[Worker] = []
        try:
            with shown_on_failure(workers):
                started = time.monotonic()
                await _quietly(poller.until(lambda: poller.last.counting, within=10))
                baseline = time.monotonic() - started if poller.last.counting else None
                app = tasks.app
                with app.replace_connector(procrastinate.PsycopgConnector(conninfo=dsn)):
                    async with app.open_async():
                        for n in range(JOBS):
                            await app.configure_task("ok").defer_async(n=n)
                workers.append(start_worker(dsn, "procrastinate-maintenance"))
                await wait_for(lambda: _succeeded(conn), "the jobs to succeed", within=60)
                done = time.monotonic()
                await _quietly(poller.until(lambda: _completed(poller) == JOBS, within=10))
                late = time.monotonic() - done
        finally:
            collecting.cancel()
            await asyncio.gather(collecting, return_exceptions=True)
            await poller.poller.database.close()
        still = await conn.fetchrow(VACUUMING)
    finally:
        await conn.close()
    counted = _completed(poller)
    print(
        f"autovacuum pid {vacuum['pid']} since {vacuum['xact_start']:%H:%M:%S}; baseline after "
        f"{'never' if baseline is None else f'{baseline:.1f} s'}; {counted} of {JOBS} "
        f"completions counted {late:.1f} s after procrastinate recorded the last"
    )
    # The autovacuum held its one transaction through the whole test: the case is real.
    assert still is not None, "the autovacuum ended before the test did"
    assert tuple(still) == tuple(vacuum), "another autovacuum transaction: the first one ended"
    assert baseline is not None, "no counting baseline in 10 s while the autovacuum ran"
    assert counted == JOBS, f"{counted} of {JOBS} completions counted"
    assert late <= 3 * INTERVAL + 1.0, f"completions counted {late:.1f} s late"


async def _quietly(waiting: Awaitable[None]) -> None:
    """Wait, and let a timeout through: the assertions after the run say what was missing."""
    with contextlib.suppress(AssertionError):
        await waiting


async def _succeeded(conn: asyncpg.Connection) -> bool:
    found = await conn.fetchval(
        "SELECT count(*) FROM procrastinate_jobs WHERE task_name = 'ok' AND status = 'succeeded'"
    )
    return bool(found == JOBS)


def _completed(poller: RecordedPoller) -> int:
    return int(poller.tallies.counters()["completed"].get("ok", 0))
