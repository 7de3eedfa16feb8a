"""The simulated queue: each transition's row state, and a fleet's tally against the table."""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import asyncpg
import pytest

from exporter.demo import demo_environment, prepare_database
from exporter.demo.cluster import Cluster
from exporter.demo.fleet import Fleet, FleetConfig
from exporter.demo.queue import DEAD, DEADLINE_ERROR, DONE, PENDING, RUNNING, JobQueue
from exporter.demo.tally import Tally, cost_components, result_fields
from tests.conftest import fetch, fetchval

MARK = " [lease-expired reclaim]"


@pytest.fixture
async def conn(db_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(db_dsn)
    try:
        yield connection
    finally:
        await connection.close()


async def _row(conn: asyncpg.Connection, job_id: object) -> asyncpg.Record:
    return await conn.fetchrow("SELECT * FROM job WHERE job_id = $1", job_id)


# -- the state machine, one transition at a time ----------------------------------------


async def test_enqueue_inserts_pending_row_and_dedupe_skips_active_duplicate(
    conn: asyncpg.Connection,
) -> None:
    queue = JobQueue(conn)
    first = await queue.enqueue(7, {"product_code": "A1"}, dedupe_key="k", max_attempts=2)
    assert first is not None
    row = await _row(conn, first.job_id)
    assert (row["status"], row["job_type"], row["attempts"], row["max_attempts"]) == (
        PENDING, 7, 0, 2,
    )  # fmt: skip
    assert row["created_at"] == row["updated_at"] == row["run_after"] == first.updated_at
    assert await queue.enqueue(7, {}, dedupe_key="k") is None
    assert await conn.fetchval("SELECT count(*) FROM job") == 1

    # Once the first one is done, the key is free again.
    claimed = await queue.claim("w", 30)
    assert claimed is not None
    assert await queue.complete(claimed.job_id, "w", {}) is not None
    assert await queue.enqueue(7, {}, dedupe_key="k") is not None


async def test_claim_takes_best_priority_oldest_ready_job(conn: asyncpg.Connection) -> None:
    queue = JobQueue(conn)
    later = await queue.enqueue(1, priority=100)
    urgent = await queue.enqueue(1, priority=10)
    scheduled = await queue.enqueue(1, priority=1)
    assert later is not None
    assert urgent is not None
    assert scheduled is not None
    await conn.execute(
        "UPDATE job SET run_after = now() + interval '1 hour' WHERE job_id = $1", scheduled.job_id
    )
    claimed = await queue.claim("worker-a", 30)
    assert claimed is not None
    assert claimed.job_id == urgent.job_id
    row = await _row(conn, urgent.job_id)
    assert row["status"] == RUNNING
    assert row["attempts"] == 1
    assert row["worker_id"] == "worker-a"
    assert row["run_started_at"] == row["updated_at"] == claimed.updated_at
    assert row["lease_until"] - row["run_started_at"] == timedelta(seconds=30)
    assert (await queue.claim("worker-b", 30)).job_id == later.job_id  # type: ignore[union-attr]
    assert await queue.claim("worker-c", 30) is None


async def test_fail_backs_off_exponentially_then_dead_letters(conn: asyncpg.Connection) -> None:
    queue = JobQueue(conn, backoff_base=5.0)
    job = await queue.enqueue(2, max_attempts=3)
    assert job is not None
    for attempt, backoff in ((1, 5), (2, 10)):
        await queue.claim("w", 30)
        failed = await queue.fail(job.job_id, "w", "ValueError: boom")
        assert failed is not None
        row = await _row(conn, job.job_id)
        assert (row["status"], row["attempts"], row["last_error"]) == (
            PENDING,
            attempt,
            "ValueError: boom",
        )
        assert row["worker_id"] is None
        assert row["lease_until"] is None
        assert row["run_after"] - row["updated_at"] == timedelta(seconds=backoff)
        await conn.execute("UPDATE job SET run_after = now() WHERE job_id = $1", job.job_id)
    await queue.claim("w", 30)
    before = await _row(conn, job.job_id)
    dead = await queue.fail(job.job_id, "w", DEADLINE_ERROR)
    assert dead is not None
    assert dead.status == DEAD
    row = await _row(conn, job.job_id)
    assert (row["status"], row["attempts"], row["last_error"]) == (DEAD, 3, DEADLINE_ERROR)
    assert row["run_after"] == before["run_after"]


async def test_fail_backoff_is_capped_at_600_seconds(conn: asyncpg.Connection) -> None:
    queue = JobQueue(conn, backoff_base=5.0)
    job = await queue.enqueue(2, max_attempts=50)
    assert job is not None
    await conn.execute("UPDATE job SET attempts = 9")
    await queue.claim("w", 30)
    await queue.fail(job.job_id, "w", "x")
    row = await _row(conn, job.job_id)
    assert row["run_after"] - row["updated_at"] == timedelta(seconds=600)


async def test_only_the_owner_can_renew_complete_or_fail(conn: asyncpg.Connection) -> None:
    queue = JobQueue(conn)
    job = await queue.enqueue(3)
    assert job is not None
    claimed = await queue.claim("owner", 5)
    assert claimed is not None
    assert await queue.renew(job.job_id, "intruder", 60) is None
    assert await queue.complete(job.job_id, "intruder", {}) is None
    assert await queue.fail(job.job_id, "intruder", "x") is None
    renewed = await queue.renew(job.job_id, "owner", 60)
    assert renewed is not None
    row = await _row(conn, job.job_id)
    assert row["lease_until"] - row["updated_at"] == timedelta(seconds=60)
    assert row["updated_at"] > claimed.updated_at
    done = await queue.complete(job.job_id, "owner", {"outcome": "found"})
    assert done is not None
    assert done.result == {"outcome": "found"}
    row = await _row(conn, job.job_id)
    assert (row["status"], row["worker_id"], row["lease_until"]) == (DONE, None, None)


async def test_reap_reclaims_expired_lease_appending_marker(conn: asyncpg.Connection) -> None:
    queue = JobQueue(conn, backoff_base=0.0)
    job = await queue.enqueue(4, max_attempts=2)
    assert job is not None
    await queue.claim("w", 30)
    await queue.fail(job.job_id, "w", DEADLINE_ERROR)
    await queue.claim("w2", 0)
    reaped = await queue.reap()
    assert [t.job_id for t in reaped] == [job.job_id]
    row = await _row(conn, job.job_id)
    # Attempts were used up (2 of 2): the reaper dead-letters the job.
    assert row["status"] == DEAD
    assert row["last_error"] == DEADLINE_ERROR + MARK
    assert row["run_after"] == row["updated_at"]
    tally = Tally.from_transitions(reaped)
    assert tally.dead == Counter({(4, "lease_expired"): 1})

    fresh = await queue.enqueue(4)
    assert fresh is not None
    await queue.claim("w3", 60)
    assert await queue.reap() == []  # lease still valid
    await conn.execute(
        "UPDATE job SET lease_until = now() - interval '1 s' WHERE job_id = $1", fresh.job_id
    )
    (again,) = await queue.reap()
    assert (again.status, again.last_error) == (PENDING, MARK)


async def test_requeue_resets_dead_job_unless_key_is_active(conn: asyncpg.Connection) -> None:
    queue = JobQueue(conn)
    job = await queue.enqueue(5, dedupe_key="same", max_attempts=1)
    assert job is not None
    assert await queue.requeue(job.job_id) is None  # not dead
    await queue.claim("w", 30)
    await queue.fail(job.job_id, "w", "boom")
    requeued = await queue.requeue(job.job_id)
    assert requeued is not None
    row = await _row(conn, job.job_id)
    assert (row["status"], row["attempts"], row["last_error"], row["run_started_at"]) == (
        PENDING, 0, None, None,
    )  # fmt: skip
    assert row["run_after"] == row["updated_at"]

    await queue.claim("w", 30)
    await queue.fail(job.job_id, "w", "boom")
    assert await queue.enqueue(5, dedupe_key="same") is not None
    assert await queue.requeue(job.job_id) is None  # an active job holds the key
    assert (await _row(conn, job.job_id))["status"] == DEAD


# -- result parsing, the exporter's way ----------------------------------------------------


def test_result_fields_skip_malformed_values() -> None:
    good = {
        "metrics": {
            "duration_ms": 8123,
            "cost": {"ai_usd": 0.012, "proxy_usd": 0.003, "total_usd": 0.02},
        }
    }
    fields, bad = result_fields(good)
    assert bad == set()
    assert cost_components(fields) == pytest.approx({"ai": 0.012, "proxy": 0.003, "other": 0.005})
    assert result_fields([1, 2]) == ({}, {"result"})
    # A NULL result, a missing key and a JSON null are absent, not malformed.
    assert result_fields(None) == ({}, set())
    assert result_fields({"outcome": "ok", "metrics": {"cost": {"ai_usd": None}}}) == ({}, set())
    odd = {
        "metrics": {
            "duration_ms": True,
            "cost": {"ai_usd": "0.1", "proxy_usd": -1, "total_usd": "NaN"},
        }
    }
    assert result_fields(odd) == ({}, {"duration_ms", "ai_usd", "proxy_usd", "total_usd"})
    assert result_fields({"metrics": {"duration_ms": math.inf}})[1] >= {"duration_ms"}
    assert cost_components({"ai_usd": 0.01, "total_usd": 0.01}) == {"ai": 0.01}


# -- the fleet and its ground truth ------------------------------------------------------


async def _wait_until(predicate: Callable[[], bool], limit: float = 20.0) -> None:
    """Poll a condition on the tally until it holds; fail after ``limit`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while not predicate():
        assert loop.time() < end, "the fleet did not get there in time"
        await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_fleet_tally_agrees_with_the_table(db_dsn: str) -> None:
    fleet = Fleet(db_dsn, FleetConfig.fast(seed=7, job_types=6))
    await fleet.start()
    tally = fleet.tally
    try:
        await _wait_until(
            lambda: (
                sum(tally.completed.values()) >= 150
                and sum(tally.requeued.values()) >= 2
                and any(r == "lease_expired" for _, r in tally.failures)
                and any(r == "deadline" for _, r in tally.dead)
                and sum(tally.duplicates.values()) >= 3
                and sum(tally.malformed.values()) >= 3
            )
        )
    finally:
        await fleet.stop()
    assert fleet.errors == 0
    rows = await fetch(db_dsn, "SELECT * FROM job")
    by_type = lambda status: Counter(r["job_type"] for r in rows if r["status"] == status)  # noqa: E731

    assert tally.enqueued == Counter(r["job_type"] for r in rows)
    assert tally.completed == by_type(DONE)
    dead_now = Counter[int]()
    for (job_type, _), n in tally.dead.items():
        dead_now[job_type] += n
    dead_now.subtract(tally.requeued)
    assert +dead_now == by_type(DEAD)

    # Every row looks exactly like the last transition the tally saw for it.
    last = tally.last_by_job()
    assert set(last) == {r["job_id"] for r in rows}
    for r in rows:
        t = last[r["job_id"]]
        assert (t.status, t.attempts, t.updated_at, t.last_error) == (
            r["status"], r["attempts"], r["updated_at"], r["last_error"],
        )  # fmt: skip

    sums = await fetch(
        db_dsn,
        """
        WITH f AS (
            SELECT job_type,
                CASE WHEN jsonb_typeof(result #> '{metrics,cost,ai_usd}') = 'number'
                     AND (result #>> '{metrics,cost,ai_usd}')::float >= 0
                     THEN (result #>> '{metrics,cost,ai_usd}')::float END AS ai,
                CASE WHEN jsonb_typeof(result #> '{metrics,cost,proxy_usd}') = 'number'
                     AND (result #>> '{metrics,cost,proxy_usd}')::float >= 0
                     THEN (result #>> '{metrics,cost,proxy_usd}')::float END AS proxy,
                CASE WHEN jsonb_typeof(result #> '{metrics,cost,total_usd}') = 'number'
                     AND (result #>> '{metrics,cost,total_usd}')::float >= 0
                     THEN (result #>> '{metrics,cost,total_usd}')::float END AS total,
                extract(epoch FROM run_started_at - run_after) AS wait,
                extract(epoch FROM updated_at - created_at) AS latency,
                -- Without a usable duration_ms, the run time is the row's.
                CASE WHEN jsonb_typeof(result #> '{metrics,duration_ms}') = 'number'
                     AND (result #>> '{metrics,duration_ms}')::float >= 0
                     THEN (result #>> '{metrics,duration_ms}')::float / 1000
                     ELSE extract(epoch FROM updated_at - run_started_at) END AS duration
            FROM job WHERE status = 3 AND jsonb_typeof(result) IN ('object', 'array')
        )
        SELECT job_type, coalesce(sum(ai), 0) AS ai, coalesce(sum(proxy), 0) AS proxy,
            coalesce(sum(total - coalesce(ai, 0) - coalesce(proxy, 0))
                FILTER (WHERE total - coalesce(ai, 0) - coalesce(proxy, 0) > 0), 0) AS other,
            sum(wait) AS wait, sum(latency) AS latency, sum(duration) AS duration
        FROM f GROUP BY job_type
        """,
    )
    for s in sums:
        jt = s["job_type"]
        for component in ("ai", "proxy", "other"):
            assert tally.cost.get((jt, component), 0.0) == pytest.approx(s[component], abs=1e-9)
        assert sum(tally.wait_seconds[jt]) == pytest.approx(float(s["wait"]), abs=1e-3)
        assert sum(tally.latency_seconds[jt]) == pytest.approx(float(s["latency"]), abs=1e-3)
        assert sum(tally.duration_seconds[jt]) == pytest.approx(float(s["duration"]), abs=1e-3)
    assert sum(tally.cost.values()) > 0
    malformed_rows = await fetchval(
        db_dsn, "SELECT count(*) FROM job WHERE status = 3 AND jsonb_typeof(result) <> 'object'"
    )
    assert tally.malformed["result"] == malformed_rows
    # Every completion has a run time: its duration_ms, or else the row's.
    assert sum(len(v) for v in tally.duration_seconds.values()) == sum(tally.completed.values())


async def test_pause_leaves_no_transaction_in_flight(db_dsn: str) -> None:
    fleet = Fleet(db_dsn, FleetConfig.fast(seed=3))
    await fleet.start()
    try:
        await _wait_until(lambda: sum(fleet.tally.completed.values()) >= 20)
        await fleet.pause()
        before = len(fleet.tally.transitions)
        snapshot = await fetchval(db_dsn, "SELECT max(updated_at) FROM job")
        # Workers in the middle of a job keep "working" while paused, but commit nothing.
        await asyncio.sleep(0.5)
        assert len(fleet.tally.transitions) == before
        assert await fetchval(db_dsn, "SELECT max(updated_at) FROM job") == snapshot
        active = await fetchval(
            db_dsn,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND state LIKE 'idle in transaction%'",
        )
        assert active == 0
        fleet.resume()
        await _wait_until(lambda: len(fleet.tally.transitions) > before)
    finally:
        await fleet.stop()


async def test_duplicates_are_not_enqueues(db_dsn: str) -> None:
    fleet = Fleet(
        db_dsn, FleetConfig.fast(seed=11, p_duplicate=0.5, workers=1, duration=(0.3, 0.5))
    )
    await fleet.start()
    try:
        await _wait_until(lambda: sum(fleet.tally.duplicates.values()) >= 5)
    finally:
        await fleet.stop()
    assert sum(fleet.tally.enqueued.values()) == await fetchval(db_dsn, "SELECT count(*) FROM job")


async def test_commit_late_commits_seconds_after_updated_at(db_dsn: str) -> None:
    async with Fleet(db_dsn, FleetConfig.fast()) as fleet:
        executed = asyncio.Event()
        task = asyncio.create_task(fleet.commit_late(1.0, job_type=9, executed=executed))
        await executed.wait()
        # The statement ran, but until COMMIT others still see the job running.
        assert await fetchval(db_dsn, "SELECT status FROM job WHERE job_type = 9") == RUNNING
        done = await task
        row = (await fetch(db_dsn, "SELECT status, updated_at, clock_timestamp() AS t FROM job"))[0]
        assert row["status"] == DONE
        assert row["updated_at"] == done.updated_at
        assert row["t"] - row["updated_at"] >= timedelta(seconds=1.0)
        assert fleet.tally.completed == Counter({9: 1})


async def test_commit_late_fail_dead_letters(db_dsn: str) -> None:
    async with Fleet(db_dsn, FleetConfig.fast()) as fleet:
        done = await fleet.commit_late(0.2, job_type=2, action="fail")
        assert done.status == DEAD
        assert fleet.tally.dead == Counter({(2, "error"): 1})


async def test_burst_is_four_failures_and_one_completion(db_dsn: str) -> None:
    fleet = Fleet(db_dsn, FleetConfig.fast(seed=5))
    await fleet.start()
    try:
        await _wait_until(lambda: sum(fleet.tally.completed.values()) >= 5)
        before = fleet.tally.snapshot()
        steps = await fleet.burst(42)
    finally:
        await fleet.stop()
    burst = fleet.tally.since(before)
    mine = Tally.from_transitions(t for t in burst.transitions if t.job_type == 42)
    assert mine.failures == Counter(
        {(42, "error"): 1, (42, "deadline"): 1, (42, "lease_expired"): 2}
    )
    assert mine.completed == Counter({42: 1})
    assert mine.enqueued == Counter({42: 1})
    assert mine.dead == Counter()
    assert [t.kind for t in steps].count("claim") == 5
    row = (await fetch(db_dsn, "SELECT * FROM job WHERE job_type = 42"))[0]
    assert (row["status"], row["attempts"]) == (DONE, 5)
    # The whole story fits in a blink, well inside one collection interval.
    assert steps[-1].updated_at - steps[0].created_at < timedelta(seconds=2)


def test_since_counts_only_later_transitions() -> None:
    tally = Tally()
    earlier = tally.snapshot()
    assert tally.since(earlier).enqueued == Counter()
    tally.duplicates[1] += 2
    later = tally.since(earlier)
    assert later.duplicates == Counter({1: 2})
    assert tally.snapshot() is not tally


async def test_only_the_troubled_job_type_fails_when_the_others_are_healthy(db_dsn: str) -> None:
    # A vanishing healthy_scale leaves the errors and deadline kills to the troubled type alone
    # (lease-expired reclaims are left out: a starved worker on a slow machine may cause one).
    fleet = Fleet(db_dsn, FleetConfig.fast(seed=4, troubled_type=2, healthy_scale=1e-9))
    await fleet.start()
    tally = fleet.tally

    def chosen() -> Counter[int | str]:
        """Failures by job type, lease-expired reclaims left out."""
        return Counter(
            t for (t, r), n in tally.failures.items() if r != "lease_expired" for _ in range(n)
        )

    try:
        await _wait_until(lambda: chosen()[2] >= 5 and sum(tally.completed.values()) >= 60)
    finally:
        await fleet.stop()
    assert set(chosen()) == {2}
    assert {t for t, n in tally.completed.items() if n} > {2}


@pytest.mark.cluster
async def test_workers_keep_their_jobs_through_an_outage_shorter_than_the_lease(
    fresh_cluster: Cluster,
) -> None:
    # A 9 s lease renewed every 3 s leaves at least 6 s of it at any moment: the outage below
    # (the server's stop, 1 s down, its start) fits, so no job may be reaped for it.
    fresh_cluster.create_database("queue")
    dsn = fresh_cluster.dsn("queue")
    await prepare_database(dsn)
    config = FleetConfig.fast(
        seed=13, workers=8, enqueue_rate=10.0, duration=(0.5, 4.0), lease_seconds=9.0,
        p_worker_death=0.0, p_error=0.0, p_deadline=0.0, error_pause=0.1,
    )  # fmt: skip
    fleet = Fleet(dsn, config)
    await fleet.start()
    try:
        await _wait_until(lambda: sum(fleet.tally.completed.values()) >= 10)
        # Paused, no statement is in flight when the server stops (none can commit unseen);
        # the workers hold their jobs and meet the outage when they renew or finish.
        await fleet.pause()
        held = {
            r["job_id"]
            for r in await fetch(dsn, f"SELECT job_id FROM job WHERE status = {RUNNING}")
        }
        await asyncio.to_thread(fresh_cluster.stop, "fast")
        fleet.resume()
        await asyncio.sleep(1.0)
        await asyncio.to_thread(fresh_cluster.start)

        def finished() -> set[object]:
            return {t.job_id for t in fleet.tally.transitions if t.kind == "complete"}

        await _wait_until(lambda: held <= finished(), limit=30.0)
    finally:
        await fleet.stop()
    assert held, "no job was running when the server stopped"
    assert fleet.errors > 0, "the fleet never met the outage"
    assert not [key for key in fleet.tally.failures if key[1] == "lease_expired"]
    assert (
        await fetchval(
            dsn, "SELECT count(*) FROM job WHERE last_error LIKE $1", f"%{MARK.strip()}%"
        )
        == 0
    )


@pytest.mark.cluster
async def test_demo_environment_serves_a_busy_queue_and_cleans_up_when_cancelled() -> None:
    started = asyncio.Event()
    seen: dict[str, object] = {}

    async def run_demo() -> None:
        async with demo_environment(FleetConfig.fast(seed=2)) as dsn:
            seen["dsn"] = dsn
            await _wait_until_rows(dsn)
            seen["indexes"] = await fetchval(
                dsn, "SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'job_exporter_%'"
            )
            started.set()
            await asyncio.Event().wait()  # until cancelled, like the demo until Ctrl-C

    task = asyncio.create_task(run_demo())
    await asyncio.wait_for(started.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen["indexes"] == 3
    assert "/jobqueue" in str(seen["dsn"])
    with pytest.raises(ConnectionRefusedError):  # the cluster is gone
        await asyncpg.connect(str(seen["dsn"]), timeout=5)


async def _wait_until_rows(dsn: str) -> None:
    """Wait until the demo fleet has completed a few jobs."""
    for _ in range(400):
        if await fetchval(dsn, "SELECT count(*) FROM job WHERE status = 3") >= 3:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the demo fleet completed nothing")
