"""graphile-worker 0.18 counted from its change stream (collect.counting: logical): the counters
and histograms polling cannot export equal the real worker's record, side by side with polling.

The real worker runs the preset's ground-truth workload (graphile_harness.run_workload: jobs
that succeed, fail then succeed, fail for good, and whose worker is SIGKILLed and taken over or
force-unlocked), then the test does what an operator does by hand. The truth is the handlers'
side table (one row per attempt they started) and what the test did; polling, reading the same
database meanwhile, exports only deaths.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import asyncpg
import pytest

from exporter.db.slot_setup import check_all, setup_script
from exporter.demo.cluster import Cluster, ClusterError
from exporter.metrics import render
from exporter.runtime import QueueRuntime
from exporter.settings import QueueSettings, Settings
from exporter.slot_commands import target_of
from exporter.vocabulary import ERROR, LEASE_EXPIRED
from tests.system.presets.exported import RecordedPoller, observed, preset_queue
from tests.system.presets.processes import require

pytestmark = [pytest.mark.slow, pytest.mark.library, pytest.mark.logical]

PROFILE = "graphile-worker"
SLOT, PUBLICATION = "jobqueue_gw_test", "jobqueue_gw_test"
INTERVAL = 0.5
TABLE = '"graphile_worker"."_private_jobs"'
# What graphile_driver.mjs enqueues (and adds with its "slow" command) after the baseline.
ENQUEUED = {"ok": 20, "flaky": 5, "bad": 5, "later": 2, "parked": 2, "slow": 3}


@pytest.fixture(scope="module")
def logical_cluster() -> Iterator[Cluster]:
    """A cluster with wal_level=logical and a bounded max_slot_wal_keep_size."""
    try:
        cluster = Cluster()
    except ClusterError as exc:
        pytest.fail(str(exc))
    try:
        cluster.start()
        cluster.psql("ALTER SYSTEM SET wal_level = logical")
        cluster.psql("ALTER SYSTEM SET max_slot_wal_keep_size = '1GB'")
        with (cluster.data_dir / "pg_hba.conf").open("a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        cluster.restart()
        yield cluster
    finally:
        cluster.destroy()


def logical_settings(dsn: str) -> QueueSettings:
    """The graphile-worker queue, counted from its stream."""
    queue = preset_queue(dsn, PROFILE, INTERVAL, heartbeat_timeout=1.0)
    collect = replace(
        queue.collect, counting="logical", logical_slot=SLOT, logical_publication=PUBLICATION
    )
    return replace(queue, collect=collect)


def setup_statements(queue: QueueSettings) -> list[str]:
    """What logical-setup prints for the table's owner (the role here is a superuser)."""
    script = setup_script(Settings(queues=(queue,)), target_of)
    return [
        line for line in script.splitlines()
        if line.startswith(("ALTER TABLE", "CREATE PUBLICATION"))
    ]  # fmt: skip


@contextlib.asynccontextmanager
async def collecting(queue: QueueSettings) -> AsyncIterator[QueueRuntime]:
    """The logical queue's runtime, collecting every interval once its slot is read."""
    runtime = QueueRuntime(queue)
    dsn = queue.database.dsn
    assert dsn is not None
    stop = asyncio.Event()

    async def loop() -> None:
        while not stop.is_set():
            await runtime.poller.collect_once()
            await asyncio.sleep(INTERVAL)

    conn = await asyncpg.connect(dsn)
    task: asyncio.Task[None] | None = None
    try:
        deadline = time.monotonic() + 30
        while not await conn.fetchval(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active", SLOT
        ):
            assert time.monotonic() < deadline, runtime.poller.health.last_error
            await runtime.poller.collect_once()
            await asyncio.sleep(0.1)
        task = asyncio.create_task(loop())
        yield runtime
    finally:
        stop.set()
        if task is not None:
            await task
        await runtime.stop()
        await runtime.database.close()
        await conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = $1",
            SLOT,
        )
        await conn.close()


async def test_graphile_counters_and_histograms_from_the_stream_equal_the_worker_record(
    logical_cluster: Cluster,
) -> None:
    require(PROFILE)
    from tests.system.presets.graphile_harness import history, install, run_workload

    logical_cluster.create_database("gw_logical")
    dsn = logical_cluster.dsn("gw_logical")
    install(dsn)
    history(dsn)  # jobs run and dead before the baseline: history for both modes
    queue = logical_settings(dsn)
    statements = setup_statements(queue)
    assert statements == [
        f"ALTER TABLE {TABLE} REPLICA IDENTITY FULL;",
        f'CREATE PUBLICATION "{PUBLICATION}" FOR TABLE {TABLE};',
    ]
    conn = await asyncpg.connect(dsn)
    try:
        # Before the DBA's steps the start refuses, naming what is missing.
        problems, _ = await check_all(Settings(queues=(queue,)), target_of)
        assert len(problems) == 2
        assert "REPLICA IDENTITY DEFAULT, which does not carry the whole old row" in problems[0]
        assert f"publication {PUBLICATION} does not exist" in problems[1]
        for sql in statements:
            await conn.execute(sql)
        problems, unchecked = await check_all(Settings(queues=(queue,)), target_of)
        assert (problems, unchecked) == ([], [])
        base = int(await conn.fetchval("SELECT max(id) FROM graphile_worker._private_jobs"))
        polling = RecordedPoller(dsn, PROFILE, heartbeat_timeout=1.0)
        async with collecting(queue) as runtime, polling.running():
            truth = await run_workload(dsn)
            assert truth.dead_by_rows == {"bad": 5, "slow": 2}
            # By hand: one parked job removed before it ran, the other failed for good and
            # then rescheduled; each step seen by both modes before the next.
            parked = [r["id"] for r in await conn.fetch(
                "SELECT j.id FROM graphile_worker._private_jobs j JOIN "
                "graphile_worker._private_tasks t ON t.id = j.task_id "
                "WHERE t.identifier = 'parked' ORDER BY j.id"
            )]  # fmt: skip
            await conn.execute("SELECT graphile_worker.complete_jobs(ARRAY[$1::bigint])", parked[0])
            await conn.execute(
                "SELECT graphile_worker.permanently_fail_jobs(ARRAY[$1::bigint])", parked[1]
            )
            await polling.cycles(3)
            await conn.execute(
                "SELECT graphile_worker.reschedule_jobs(ARRAY[$1::bigint], attempts := 0)",
                parked[1],
            )
            await polling.cycles(3)
            await _settled(runtime, conn)
            tallies = runtime.poller.tallies
            exposition = render([runtime.poller.view()], process_metrics=False).decode()
            polled = render([polling.poller.view()], process_metrics=False).decode()
            rows = await conn.fetch(
                "SELECT task, job_id, outcome FROM gw_truth WHERE job_id > $1", base
            )
            sequence = await conn.fetchval(
                "SELECT pg_get_serial_sequence('graphile_worker._private_jobs', 'id')"
            )
            enqueued = int(await conn.fetchval(f"SELECT last_value FROM {sequence}")) - base
    finally:
        await conn.close()

    completed = Counter(r["task"] for r in rows if r["outcome"] == "completed")
    failures = Counter(
        (r["task"], ERROR if r["outcome"] == "failed" else LEASE_EXPIRED)
        for r in rows if r["outcome"] != "completed"
    )  # fmt: skip
    dead = {("bad", ERROR): 5, ("slow", LEASE_EXPIRED): 2, ("parked", ERROR): 1}
    assert enqueued == sum(ENQUEUED.values())
    assert completed == {"ok": 20, "flaky": 5, "later": 2, "slow": 1}
    assert failures == {("bad", ERROR): 8, ("flaky", ERROR): 5, ("slow", LEASE_EXPIRED): 3}
    assert tallies.counters() == {
        "enqueued": ENQUEUED, "completed": dict(completed), "failures": dict(failures),
        "dead": dead, "requeued": {"parked": 1}, "cancelled": {},
    }  # fmt: skip
    assert tallies.vanished == {"pending": 1}
    for histograms in (tallies.duration, tallies.wait, tallies.latency):
        assert observed(histograms) == dict(completed)
        assert all(h.total >= 0 for h in histograms.values())
    # Every handler returns at once: no duration reaches the 600 s of the slow job's sleep.
    assert all(h.total < 60 for h in tallies.duration.values())
    # /metrics carries them (the logical coverage); polling leaves the series out.
    for line in (
        'jobqueue_jobs_completed_total{job_type="ok",queue="test"} 20.0',
        'jobqueue_exporter_jobs_vanished_total{last_status="pending",queue="test"} 1.0',
        'jobqueue_job_duration_seconds_count{job_type="flaky",queue="test"} 5.0',
    ):
        assert line in exposition.splitlines(), line
        assert line.partition("{")[0] not in polled
    # Polling, over the same workload, exported nothing but the deaths.
    counted = polling.tallies.counters()
    assert {name: counted[name] for name in ("enqueued", "completed", "failures")} == {
        "enqueued": {},
        "completed": {},
        "failures": {},
    }
    # Its deaths are exact in number; every reason is "error" (it cannot see the lost lock).
    assert counted["dead"] == {
        (task, ERROR): n for task, n in {"bad": 5, "slow": 2, "parked": 1}.items()
    }
    assert not polling.tallies.duration
    assert not polling.tallies.latency
    print(f"\ntruth: enqueued {enqueued} completed {dict(completed)} failures {dict(failures)}")
    print(f"logical: {tallies.counters()} vanished {dict(tallies.vanished)}")
    print(f"polling: {counted}")


async def _settled(runtime: QueueRuntime, conn: asyncpg.Connection) -> None:
    """Until the stream has handed over and counted everything committed so far."""
    target = int(await conn.fetchval("SELECT pg_current_wal_lsn() - '0/0'"))
    deadline = time.monotonic() + 30
    follower = runtime.follower
    assert follower is not None
    while follower.stream.server_lsn < target or follower.stream.running is False:
        assert time.monotonic() < deadline, runtime.poller.health.last_error
        await asyncio.sleep(0.2)
    # Everything up to the target is in the thread's queue: the next collection feeds and
    # counts it; wait for two, each signalled by the poller.
    finished = asyncio.Event()
    runtime.poller.listeners.append(finished.set)
    for _ in range(2):
        finished.clear()
        await asyncio.wait_for(finished.wait(), 30)
    runtime.poller.listeners.remove(finished.set)
