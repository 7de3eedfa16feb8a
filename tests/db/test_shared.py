"""Queues kept in one database share its pool and its lock session: the connections a process
holds grow with the databases, not with the queues. And leadership is claimed only once the
advisory lock is really held."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

import pytest

from exporter.demo.cluster import free_port
from exporter.metrics import render
from exporter.service import Service
from exporter.settings import Settings, WebSettings
from tests.conftest import execute, fetchval
from tests.helpers import fast_queue, parse

QUEUES = 20
OURS = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'jobqueue-exporter'"


async def test_twenty_queues_in_one_database_hold_at_most_three_connections(db_dsn: str) -> None:
    tables = [f"job_q{i}" for i in range(QUEUES)]
    for table in tables:
        await execute(db_dsn, f"CREATE TABLE {table} (LIKE job INCLUDING ALL)")
    queues = tuple(
        replace(
            fast_queue(db_dsn, name=f"q{i}", interval=0.5),
            database=replace(fast_queue(db_dsn).database, table=table),
        )
        for i, table in enumerate(tables)
    )
    service = Service(Settings(queues=queues, web=WebSettings(listen_address=("127.0.0.1:0",))))
    await service.start()
    try:
        peak = 0
        for _ in range(3):  # three rounds of every queue collecting at once
            await asyncio.gather(*(q.poller.wait_for_success(limit=60) for q in service.queues))
            peak = max(peak, int(await fetchval(db_dsn, OURS)))
        # Every queue collects and leads (its own lock, on the one lock session).
        down = [q.name for q in service.queues if not (q.poller.health.up and q.poller.fresh())]
        assert not down
        assert all(view.leader for view in service.board.views())
        elections = [q.election for q in service.queues]
        assert all(e is not None and e.holding for e in elections)
    finally:
        await service.stop()
    print(f"FIGURE connections held for {QUEUES} queues in one database: {peak}")
    assert 2 <= peak <= 3  # the lock session, and the pool's sessions
    assert int(await fetchval(db_dsn, OURS)) == 0  # every session closed at stop


async def test_leader_is_0_until_the_advisory_lock_is_really_held(
    db_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="exporter")
    unreachable = fast_queue(f"postgresql://nobody@127.0.0.1:{free_port()}/none", name="gone")
    reachable = fast_queue(db_dsn, name="here")
    service = Service(
        Settings(queues=(unreachable, reachable), web=WebSettings(listen_address=("127.0.0.1:0",)))
    )
    await service.start()
    try:
        gone, here = (service.queue(name).poller for name in ("gone", "here"))
        await gone.wait_for_collections(1)
        await here.wait_for_success()
        samples = parse(render(service.board.views(), process_metrics=False).decode())

        def leader(queue: str) -> float:
            return samples[("jobqueue_exporter_leader", (("queue", queue),))]

        # Never reached: it collects (to count the outage) but leads nothing.
        assert leader("gone") == 0
        assert samples[("jobqueue_up", (("queue", "gone"),))] == 0
        assert samples[("jobqueue_exporter_collections_total", (("queue", "gone"),))] >= 1
        assert leader("here") == 1
    finally:
        await service.stop()
    records = [(r.getMessage(), getattr(r, "fields", {})) for r in caplog.records]
    # The failure's text under err, as Go's slog-based exporters key it.
    failed = [fields for message, fields in records if message == "collection failed"]
    assert failed
    assert "err" in failed[0]
    assert "error" not in failed[0]
    assert failed[0]["reason"] == "connection"
    # DEBUG: each collection's cost, and the lock taken.
    collected = [fields for message, fields in records if message == "collected"]
    assert collected
    assert {"duration_seconds", "rows_read", "lag_seconds", "tracked_jobs"} <= collected[-1].keys()
    assert collected[-1]["duration_seconds"] > 0
    taken = [fields for message, fields in records if message == "advisory lock taken"]
    assert [fields["queue"] for fields in taken] == ["here"]


async def test_a_mixed_case_schema_qualified_table_is_elected_and_collected(db_dsn: str) -> None:
    # The names are case-sensitive, as written in the configuration: the advisory lock is keyed
    # on the table the quoted name resolves to, never on the case-folded app.tasks.
    await execute(
        db_dsn, 'CREATE SCHEMA "App"; CREATE TABLE "App"."Tasks" (LIKE job INCLUDING ALL)'
    )
    queue = fast_queue(db_dsn, name="tasks")
    queue = replace(queue, database=replace(queue.database, table="App.Tasks"))
    service = Service(Settings(queues=(queue,), web=WebSettings(listen_address=("127.0.0.1:0",))))
    await service.start()
    try:
        (running,) = service.queues
        await running.poller.wait_for_success(limit=30)
        assert running.election is not None
        assert running.election.holding
        assert all(view.leader for view in service.board.views())
    finally:
        await service.stop()
