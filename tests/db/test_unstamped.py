"""A change written without an ``updated_at`` stamp, on a real PostgreSQL: the issue's five jobs
completed by ``SET status = 3`` alone are reported within two collection intervals, counted in
the unstamped counter and nothing else, and logged once; and a change that carries its stamp is
never counted there, late commits included (held back by the horizon, or by the commit-lag
tolerance when the exporter's role cannot see the other sessions)."""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import pytest

from exporter.counting.unstamped import UNSTAMPED_MESSAGE
from exporter.demo.cluster import TRUSTED_ROLE
from exporter.poller import Poller
from tests.conftest import execute, fetchval
from tests.helpers import collect_until, cursor, fast_settings, make_poller, poller_running, scrape
from tests.helpers import value as sample

METRIC = "jobqueue_exporter_unstamped_changes_total"
CLAIM = (
    "UPDATE job SET status = 2, attempts = 1, run_started_at = now(), worker_id = 'w', "
    "updated_at = now() WHERE job_type = $1 AND status = 1"
)


def logged(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [r.fields for r in caplog.records if r.getMessage() == UNSTAMPED_MESSAGE]  # type: ignore[attr-defined]


async def _read_running(poller: Poller, dsn: str, job_type: int) -> None:
    """Wait until the cursor has passed the claims of ``job_type`` for good: the tracker knows
    the jobs as running, and no read returns their rows again unless they change with a stamp
    (a change made before that is read, and counted, by the reads themselves)."""
    claimed = await fetchval(
        dsn, "SELECT extract(epoch FROM max(updated_at))::float8 FROM job WHERE job_type = $1",
        job_type,
    )  # fmt: skip
    while cursor(poller).tracker.since() <= claimed:
        await poller.wait_for_collections(poller.generation + 1)


async def test_completions_without_a_stamp_are_reported_within_two_intervals(
    db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Half a second between collections: two of them leave the claims' stamps behind the
    # cursor's floor (the horizon less its 0.25 s margin) whatever the timing.
    poller = make_poller(fast_settings(db_dsn, interval=0.5))
    caplog.set_level(logging.WARNING)
    try:
        async with poller_running(poller):
            await poller.wait_for_success()
            await execute(db_dsn, "INSERT INTO job (job_type) SELECT 7 FROM generate_series(1, 5)")
            await execute(db_dsn, CLAIM, 7)
            await _read_running(poller, db_dsn, 7)
            tracked = cursor(poller).tracker.tracked
            await execute(db_dsn, "UPDATE job SET status = 3 WHERE job_type = 7")  # no stamp
            await poller.wait_for_collections(poller.generation + 2)
            samples = scrape(poller)
            assert sample(samples, METRIC, status="done") == 5
            assert sample(samples, "jobqueue_jobs_completed_total", job_type="7") == 0
            failures = [n for (name, _), n in samples.items()
                        if name == "jobqueue_job_failures_total"]  # fmt: skip
            assert sum(failures) == 0
            assert cursor(poller).tracker.tracked < tracked  # no longer kept as running
            (fields,) = logged(caplog)
            assert fields["column"] == "job.updated_at"
            assert fields["status"] == "done"
            # Another one later is counted, and not logged again.
            await execute(db_dsn, "INSERT INTO job (job_type) VALUES (8)")
            await execute(db_dsn, CLAIM, 8)
            await _read_running(poller, db_dsn, 8)
            await execute(db_dsn, "UPDATE job SET status = 4 WHERE job_type = 8")
            await collect_until(poller, lambda: poller.tallies.unstamped["dead"] == 1)
            assert len(logged(caplog)) == 1
            assert poller.tallies.dead.total() == 0
    finally:
        await poller.database.close()


async def _claimed(poller: Poller, dsn: str, job_type: int) -> None:
    await execute(dsn, "INSERT INTO job (job_type) VALUES ($1)", job_type)
    await execute(dsn, CLAIM, job_type)
    await collect_until(poller, lambda: poller.tallies.enqueued[str(job_type)] == 1)


async def _complete_late(dsn: str, job_type: int, hold: float, poller: Poller) -> None:
    """Complete the job, stamped, in a transaction committed ``hold`` seconds later while the
    poller collects."""
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(
                "UPDATE job SET status = 3, updated_at = now() WHERE job_type = $1", job_type
            )
            deadline = asyncio.get_running_loop().time() + hold
            while asyncio.get_running_loop().time() < deadline:
                assert await poller.collect_once()
    finally:
        await conn.close()


async def test_a_stamped_completion_committed_late_is_counted_once_and_never_unstamped(
    db_dsn: str,
) -> None:
    poller = make_poller(fast_settings(db_dsn))
    try:
        assert await poller.collect_once()
        await _claimed(poller, db_dsn, 5)
        await _complete_late(db_dsn, 5, 2.0, poller)  # the horizon holds the floor back
        await collect_until(poller, lambda: poller.tallies.completed["5"] == 1)
        for _ in range(3):
            assert await poller.collect_once()
        assert poller.tallies.completed["5"] == 1
        assert poller.tallies.unstamped == {}
    finally:
        await poller.database.close()


@pytest.mark.slow
async def test_without_pg_read_all_stats_a_commit_past_the_tolerance_is_reported_not_lost(
    db_dsn: str,
) -> None:
    role = f"unstamped_{abs(hash(db_dsn)) % 10**8}"
    # A member of the cluster's trusted role logs in without a password (exporter/demo/cluster.py).
    await execute(db_dsn, f"CREATE ROLE {role} LOGIN IN ROLE {TRUSTED_ROLE}")
    await execute(db_dsn, f"GRANT SELECT ON job TO {role}")
    limited = db_dsn.replace("postgres@", f"{role}@", 1)
    poller = make_poller(fast_settings(limited, commit_lag_tolerance=3.0))
    try:
        assert await poller.collect_once()
        # Within the tolerance: read, and counted as a completion.
        await _claimed(poller, db_dsn, 5)
        await _complete_late(db_dsn, 5, 0.5, poller)
        await collect_until(poller, lambda: poller.tallies.completed["5"] == 1)
        assert poller.tallies.unstamped == {}
        # Past it: the reads have passed its stamp (the limit docs/exactness.md states); the
        # change is no longer silent, it is counted as one no read could see.
        await _claimed(poller, db_dsn, 6)
        await _complete_late(db_dsn, 6, 5.0, poller)
        await collect_until(poller, lambda: poller.tallies.unstamped["done"] == 1)
        for _ in range(3):
            assert await poller.collect_once()
        assert poller.tallies.completed["6"] == 0
        assert poller.tallies.unstamped == {"done": 1}
    finally:
        await poller.database.close()
        await execute(db_dsn, f"REVOKE ALL ON job FROM {role}")
        await execute(db_dsn, f"DROP ROLE {role}")
