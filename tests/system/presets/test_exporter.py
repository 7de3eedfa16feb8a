"""One exporter process watches the default queue and three presets, each in its own database.

Real libraries, real workers: the procrastinate, pgqueuer and pg-boss workloads of the
ground-truth tests run while the exporter service (the one `jobqueue-exporter run` starts)
collects all four queues. Every counter on /metrics must equal what the library's own tables
say, mapped the documented way (docs/presets.md, "In the exporter"); then stopping the pgqueuer database's
server must take down only that queue's jobqueue_up.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import asyncpg
import pytest

from exporter.counting.reader import LedgerReader
from exporter.db import Database
from exporter.demo.cluster import Cluster
from exporter.metrics import render
from exporter.poller import Poller
from exporter.runtime import connect_options
from exporter.service import Service
from exporter.settings import Settings, WebSettings
from tests.conftest import PgServer, dsn_with_database, execute
from tests.helpers import cursor, fast_queue, get, parse, wait_until
from tests.system.presets.exported import as_counted
from tests.system.presets.processes import require

pytestmark = [pytest.mark.slow, pytest.mark.library, pytest.mark.cluster]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
DEFAULT_JOBS = 5


@contextlib.asynccontextmanager
async def library_database(
    pg_cluster: PgServer, install: Callable[[str], None]
) -> AsyncIterator[str]:
    """A database of its own with a library's schema, installed by the library."""
    name = f"jqe_preset_{uuid.uuid4().hex[:12]}"
    await execute(pg_cluster.admin_dsn, f'CREATE DATABASE "{name}"')
    try:
        install(pg_cluster.dsn(name))
        yield pg_cluster.dsn(name)
    finally:
        await execute(pg_cluster.admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def procrastinate_db(pg_cluster: PgServer) -> AsyncIterator[str]:
    """procrastinate's schema, installed by procrastinate."""
    require("procrastinate")
    from tests.system.presets.procrastinate_harness import install

    async with library_database(pg_cluster, install) as dsn:
        yield dsn


@pytest.fixture
async def pgboss_db(pg_cluster: PgServer) -> AsyncIterator[str]:
    """pg-boss's schema, installed by pg-boss (Node)."""
    require("pg-boss")
    from tests.system.presets.pgboss_harness import install

    async with library_database(pg_cluster, install) as dsn:
        yield dsn


@pytest.fixture
def pgqueuer_db(fresh_cluster: Cluster) -> str:
    """pgqueuer's schema in a server of its own, so the test can stop that server alone."""
    require("pgqueuer")
    from tests.system.presets.pgqueuer_harness import install

    fresh_cluster.create_database("pgq")
    install(fresh_cluster.dsn("pgq"))
    fresh_cluster.psql(
        "CREATE INDEX pgqueuer_exporter_held_idx ON pgqueuer (entrypoint) WHERE status = 'failed'",
        dbname="pgq",
    )
    return fresh_cluster.dsn("pgq")


def exported(samples: Samples, queue: str, metric: str, *keys: str) -> dict[Any, float]:
    """Non-zero samples of one metric of one queue, keyed by the given labels."""
    out: dict[Any, float] = {}
    for (name, labels), value in samples.items():
        found = dict(labels)
        if name == metric and found.get("queue") == queue and value:
            key = tuple(found[k] for k in keys)
            out[key[0] if len(key) == 1 else key] = value
    return out


def counters_of(samples: Samples, queue: str) -> dict[str, dict[Any, float]]:
    """The queue's counters on /metrics, as the model's Tallies would hold them."""
    return {
        "enqueued": exported(samples, queue, "jobqueue_jobs_enqueued_total", "job_type"),
        "completed": exported(samples, queue, "jobqueue_jobs_completed_total", "job_type"),
        "requeued": exported(samples, queue, "jobqueue_jobs_requeued_total", "job_type"),
        "failures": exported(samples, queue, "jobqueue_job_failures_total", "job_type", "reason"),
        "dead": exported(samples, queue, "jobqueue_jobs_dead_total", "job_type", "reason"),
        "cancelled": exported(samples, queue, "jobqueue_jobs_cancelled_total", "job_type"),
    }


def counters_wanted(counters: dict[str, dict[Any, int]]) -> dict[str, dict[Any, float]]:
    """The same shape, from a library's record as the exporter counts it."""
    out = {
        name: {key: float(n) for key, n in found.items() if n}
        for name, found in as_counted(counters).items()
    }
    return {name: values for name, values in out.items() if values}


PRESET_QUEUES = ("tasks", "pgq", "boss")


async def presets_collected(service: Service) -> None:
    """Wait for one more collection of each preset queue (what a scrape could change)."""
    for name in PRESET_QUEUES:
        poller = service.queue(name).poller
        await poller.wait_for_collections(poller.generation + 1, limit=30)


async def test_one_exporter_counts_three_presets_and_the_default_queue_exactly(
    db_dsn: str, procrastinate_db: str, pgqueuer_db: str, pgboss_db: str, fresh_cluster: Cluster
) -> None:
    from tests.system.presets.pgboss_harness import run_workload as run_pgboss
    from tests.system.presets.pgqueuer_harness import run_workload as run_pgqueuer
    from tests.system.presets.procrastinate_harness import run_workload as run_procrastinate

    queues = (
        fast_queue(db_dsn, name="own", interval=0.3),
        replace(fast_queue(procrastinate_db, name="tasks", interval=0.3), profile="procrastinate"),
        replace(fast_queue(pgqueuer_db, name="pgq", interval=0.3), profile="pgqueuer"),
        replace(fast_queue(pgboss_db, name="boss", interval=0.3), profile="pgboss"),
    )
    service = Service(Settings(queues=queues, web=WebSettings(listen_address=("127.0.0.1:0",))))
    await service.start()

    async def scrape() -> Samples:
        status, body, _ = await get(service.port, "/metrics")
        assert status == 200
        return parse(body)

    try:
        pollers = [service.queue(name).poller for name in PRESET_QUEUES]
        presets = [p.mode for p in pollers if isinstance(p.mode, LedgerReader)]
        assert len(presets) == 3, "profile: selects the preset's counting mode"
        # Counting starts at each queue's baseline: the workloads begin after it.
        await wait_until(
            lambda: all(mode.counting for mode in presets),
            within=60,
            what="every preset reader counting",
        )
        own = service.queue("own").poller
        await wait_until(lambda: cursor(own).tracker.started and own.health.up, within=60)
        for _ in range(DEFAULT_JOBS):
            await execute(db_dsn, "INSERT INTO job (job_type) VALUES (7)")

        truths = {
            "tasks": (await run_procrastinate(procrastinate_db)).counters,
            "pgq": (await run_pgqueuer(pgqueuer_db)).counters,
            "boss": (await run_pgboss(pgboss_db)).counters,
        }
        wanted = {name: counters_wanted(counters) for name, counters in truths.items()}
        wanted["own"] = {"enqueued": {"7": float(DEFAULT_JOBS)}}

        last: dict[str, dict[str, dict[Any, float]]] = {}

        async def agree() -> bool:
            samples = await scrape()
            for name in wanted:
                got = counters_of(samples, name)
                last[name] = {k: v for k, v in got.items() if v}
            return all(last[name] == wanted[name] for name in wanted)

        deadline = time.monotonic() + 60
        while not await agree():
            assert time.monotonic() < deadline, f"counters on /metrics {last} != truth {wanted}"
            await presets_collected(service)
        samples = await scrape()
        # Not vacuous: each library recorded failures, deaths and retries.
        assert wanted["tasks"]["dead"]
        assert wanted["pgq"]["dead"]
        assert ("slow", "lease_expired") in wanted["pgq"]["failures"]  # the SIGKILLed worker
        pending = ("jobqueue_jobs", (("job_type", "7"), ("queue", "own"), ("status", "pending")))
        assert samples[pending] == DEFAULT_JOBS
        # What a preset cannot tell is absent, not zero: pgqueuer has no wait, procrastinate
        # no held (dead status) gauge.
        names = {(name, dict(labels).get("queue")) for name, labels in samples}
        assert ("jobqueue_job_wait_seconds_count", "pgq") not in names
        assert ("jobqueue_job_wait_seconds_count", "tasks") in names
        statuses = {dict(labels).get("status") for name, labels in samples
                    if name == "jobqueue_jobs" and ("queue", "tasks") in labels}  # fmt: skip
        assert statuses == {"pending", "running"}
        for name in ("own", *PRESET_QUEUES):
            assert samples[("jobqueue_up", (("queue", name),))] == 1

        # Stopping pgqueuer's server takes down its queue only.
        pgq = service.queue("pgq")
        fresh_cluster.stop("fast")
        await wait_until(lambda: not pgq.poller.health.up, within=60, what="pgq down")
        for name in ("own", "tasks", "boss"):
            await service.queue(name).poller.wait_for_success(limit=30)
        samples = await scrape()
        assert samples[("jobqueue_up", (("queue", "pgq"),))] == 0
        for name in ("own", "tasks", "boss"):
            assert samples[("jobqueue_up", (("queue", name),))] == 1
        # The counters already shown for the stopped queue stay; the others' are unchanged.
        for name in PRESET_QUEUES:
            assert {k: v for k, v in counters_of(samples, name).items() if v} == wanted[name]

        # The server back: the queue is up again and its reader goes on from its cursor.
        fresh_cluster.start()
        await pgq.poller.wait_for_success(limit=60)
        from pgqueuer import AsyncpgDriver, Queries

        conn = await asyncpg.connect(pgqueuer_db)
        try:
            await Queries(AsyncpgDriver(conn)).enqueue("after_restart", None)
        finally:
            await conn.close()
        wanted["pgq"]["enqueued"]["after_restart"] = 1.0
        deadline = time.monotonic() + 60
        while not await agree():
            assert time.monotonic() < deadline, f"counters on /metrics {last} != truth {wanted}"
            await presets_collected(service)
        assert (await scrape())[("jobqueue_up", (("queue", "pgq"),))] == 1
    finally:
        await service.stop()


async def test_a_preset_that_cannot_count_marks_its_queue_down_and_recovers(
    pg_cluster: PgServer, procrastinate_db: str
) -> None:
    role = f"blind_{uuid.uuid4().hex[:8]}"
    admin = pg_cluster.admin_dsn
    await execute(admin, f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
    dbname = procrastinate_db.rsplit("/", 1)[1]
    await execute(procrastinate_db, f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    blind_dsn = dsn_with_database(admin.replace("postgres@", f"{role}:pw@", 1), dbname)
    other = await asyncpg.connect(procrastinate_db)  # a session the role cannot see
    settings = replace(fast_queue(blind_dsn, name="tasks"), profile="procrastinate")
    poller = Poller(settings, Database(connect_options(settings)))
    try:
        assert not await poller.collect_once()
        assert poller.health.errors == {"permission": 1}
        assert "pg_read_all_stats" in (poller.health.last_error or "")
        text = render([poller.view()], process_metrics=False).decode()
        samples = parse(text)
        assert samples[("jobqueue_up", (("queue", "tasks"),))] == 0
        errors = (
            "jobqueue_exporter_collection_errors_total",
            (("queue", "tasks"), ("reason", "permission")),
        )
        assert samples[errors] == 1
        # Granted the role, the next collections succeed and count from a new baseline.
        await execute(admin, f"GRANT pg_read_all_stats TO {role}")
        assert await poller.collect_once()
        assert poller.view().up
    finally:
        await poller.database.close()
        await other.close()
        await execute(procrastinate_db, f"DROP OWNED BY {role}")
        await execute(admin, f"DROP ROLE {role}")
