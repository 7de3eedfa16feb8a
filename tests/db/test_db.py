"""Snapshot gauges against hand-built table states on a real PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from exporter.poller import Poller
from tests.conftest import execute, fetchval
from tests.helpers import fast_settings, make_poller, scrape, value

INSERT = """
INSERT INTO job (job_type, status, attempts, created_at, run_after, run_started_at, lease_until,
                 updated_at, last_error)
VALUES ($1, $2, $3, now() - make_interval(secs => $4), now() + make_interval(secs => $5),
        CASE WHEN $6::float8 IS NULL THEN NULL ELSE now() - make_interval(secs => $6) END,
        CASE WHEN $7::float8 IS NULL THEN NULL ELSE now() + make_interval(secs => $7) END,
        now(), $8)
"""


async def insert(
    dsn: str,
    job_type: int,
    status: int,
    *,
    age: float = 0.0,
    run_after_in: float = -1.0,
    started_ago: float | None = None,
    lease_in: float | None = None,
    attempts: int = 0,
    error: str | None = None,
) -> None:
    await execute(
        dsn, INSERT, job_type, status, attempts, age, run_after_in, started_ago, lease_in, error
    )


@pytest.fixture
async def poller(db_dsn: str) -> AsyncIterator[Poller]:
    p = make_poller(fast_settings(db_dsn, stuck_threshold=600.0))
    yield p
    await p.database.close()


async def test_empty_table_exports_zero_and_no_job_type_series(poller: Poller) -> None:
    assert await poller.collect_once()
    samples = scrape(poller)
    assert value(samples, "jobqueue_up") == 1
    assert not [k for k in samples if k[0] == "jobqueue_jobs"]
    assert (
        value(samples, "jobqueue_exporter_missing_index", index="job_exporter_updated_at_idx") == 0
    )


async def test_one_job_per_status_is_counted_in_its_status(db_dsn: str, poller: Poller) -> None:
    for status in (1, 2, 3, 4):
        await insert(db_dsn, 7, status, started_ago=5 if status == 2 else None,
                     lease_in=60 if status == 2 else None, attempts=1 if status > 1 else 0)  # fmt: skip
    assert await poller.collect_once()
    s = scrape(poller)
    assert value(s, "jobqueue_jobs", job_type="7", status="pending") == 1
    assert value(s, "jobqueue_jobs", job_type="7", status="running") == 1
    assert value(s, "jobqueue_jobs", job_type="7", status="dead") == 1
    # done is off by default: its cost grows with history.
    assert ("jobqueue_jobs", (("job_type", "7"), ("status", "done"))) not in s
    assert value(s, "jobqueue_stuck_jobs", job_type="7", reason="lease_expired") == 0


async def test_done_count_is_exported_when_enabled(db_dsn: str) -> None:
    await insert(db_dsn, 1, 3)
    await insert(db_dsn, 1, 3)
    p = make_poller(fast_settings(db_dsn, done_count=True))
    try:
        assert await p.collect_once()
        assert value(scrape(p), "jobqueue_jobs", job_type="1", status="done") == 2
    finally:
        await p.database.close()


async def test_scheduled_and_ready_pending_jobs_are_told_apart(db_dsn: str, poller: Poller) -> None:
    await insert(db_dsn, 2, 1, age=100, run_after_in=30)  # backoff: scheduled 30 s ahead
    await insert(db_dsn, 2, 1, age=50, run_after_in=-40)  # runnable for 40 s
    await insert(db_dsn, 2, 1, age=10, run_after_in=-5)
    assert await poller.collect_once()
    s = scrape(poller)
    assert value(s, "jobqueue_jobs", job_type="2", status="pending") == 3
    assert value(s, "jobqueue_jobs_scheduled", job_type="2") == 1
    assert value(s, "jobqueue_oldest_pending_age_seconds", job_type="2") == pytest.approx(
        100, abs=2
    )
    assert value(s, "jobqueue_oldest_ready_wait_seconds", job_type="2") == pytest.approx(40, abs=2)


async def test_expired_lease_and_overrun_are_stuck_for_different_reasons(
    db_dsn: str, poller: Poller
) -> None:
    await insert(db_dsn, 3, 2, started_ago=200, lease_in=-90, attempts=1)  # worker died
    await insert(
        db_dsn, 3, 2, started_ago=700, lease_in=60, attempts=1
    )  # heartbeating, overrunning
    # Both at once: counted once, as lease_expired.
    await insert(db_dsn, 3, 2, started_ago=900, lease_in=-10, attempts=1)
    await insert(db_dsn, 3, 2, started_ago=30, lease_in=90, attempts=1)  # healthy
    assert await poller.collect_once()
    s = scrape(poller)
    assert value(s, "jobqueue_stuck_jobs", job_type="3", reason="lease_expired") == 2
    assert value(s, "jobqueue_stuck_jobs", job_type="3", reason="overrun") == 1
    assert value(s, "jobqueue_lease_expired_oldest_seconds", job_type="3") == pytest.approx(
        90, abs=2
    )
    assert value(s, "jobqueue_running_oldest_seconds", job_type="3") == pytest.approx(900, abs=2)
    assert value(s, "jobqueue_jobs", job_type="3", status="running") == 4


async def test_vanished_job_type_disappears_from_gauges_but_known_statuses_read_zero(
    db_dsn: str, poller: Poller
) -> None:
    await insert(db_dsn, 4, 1)
    assert await poller.collect_once()
    assert value(scrape(poller), "jobqueue_jobs", job_type="4", status="pending") == 1
    await execute(db_dsn, "DELETE FROM job")
    assert await poller.collect_once()
    s = scrape(poller)
    assert value(s, "jobqueue_jobs", job_type="4", status="pending") == 0
    assert value(s, "jobqueue_oldest_pending_age_seconds", job_type="4") == 0


async def test_configured_names_replace_numbers_and_cap_folds_the_rest(db_dsn: str) -> None:
    for job_type in range(1, 6):
        await insert(db_dsn, job_type, 1)
    p = make_poller(fast_settings(db_dsn, job_types={1: "search"}, max_job_types=3))
    try:
        assert await p.collect_once()
        s = scrape(p)
        pending = {dict(k[1])["job_type"]: v for k, v in s.items()
                   if k[0] == "jobqueue_jobs" and dict(k[1])["status"] == "pending"}  # fmt: skip
        assert pending == {"search": 1, "2": 1, "3": 1, "other": 2}
        assert value(s, "jobqueue_exporter_job_types_folded") == 2
    finally:
        await p.database.close()


async def test_missing_indexes_are_reported_not_fatal(schema_dsn_without_indexes: str) -> None:
    p = make_poller(fast_settings(schema_dsn_without_indexes))
    try:
        assert await p.collect_once()
        s = scrape(p)
        for index in (
            "job_exporter_active_idx",
            "job_exporter_updated_at_idx",
            "job_exporter_dead_idx",
        ):
            assert value(s, "jobqueue_exporter_missing_index", index=index) == 1
    finally:
        await p.database.close()


async def test_every_query_runs_read_only_with_timeouts_and_application_name(db_dsn: str) -> None:
    p = make_poller(fast_settings(db_dsn, statement_timeout=2.5, lock_timeout=0.75))
    try:
        assert await p.collect_once()
        pool = await p.database._get_pool()
        async with pool.acquire() as conn:
            assert await conn.fetchval("SHOW statement_timeout") == "2500ms"
            assert await conn.fetchval("SHOW lock_timeout") == "750ms"
            assert await conn.fetchval("SHOW application_name") == "jobqueue-exporter"
            assert await conn.fetchval("SHOW default_transaction_read_only") == "on"
    finally:
        await p.database.close()
    assert await fetchval(db_dsn, "SELECT count(*) FROM job") == 0


async def test_dead_letter_gauge_follows_deaths_and_requeues_between_recounts(
    db_dsn: str, poller: Poller
) -> None:
    await insert(db_dsn, 6, 4, attempts=1, error="boom")
    assert await poller.collect_once()  # baseline: an exact count
    assert value(scrape(poller), "jobqueue_jobs", job_type="6", status="dead") == 1
    # Two deaths and one requeue between recounts: followed from the transitions.
    await insert(db_dsn, 6, 2, started_ago=1, lease_in=60, attempts=1)
    await insert(db_dsn, 6, 2, started_ago=1, lease_in=60, attempts=1)
    assert await poller.collect_once()
    await execute(
        db_dsn, "UPDATE job SET status = 4, last_error = 'x', updated_at = now() WHERE status = 2"
    )
    await execute(
        db_dsn,
        "UPDATE job SET status = 1, attempts = 0, last_error = NULL, updated_at = now() "
        "WHERE job_id = (SELECT job_id FROM job WHERE status = 4 ORDER BY created_at LIMIT 1)",
    )
    assert await poller.collect_once()
    samples = scrape(poller)
    assert value(samples, "jobqueue_jobs", job_type="6", status="dead") == 2
    assert value(samples, "jobqueue_jobs_requeued_total", job_type="6") == 1
    # A purge is invisible to the tracker: the next recount corrects the gauge.
    await execute(db_dsn, "DELETE FROM job WHERE status = 4")
    assert await poller.collect_once()
    assert value(scrape(poller), "jobqueue_jobs", job_type="6", status="dead") == 2  # not recounted
    for _ in range(25):
        assert await poller.collect_once()
    assert value(scrape(poller), "jobqueue_jobs", job_type="6", status="dead") == 0
