"""One exporter process watches the django-tasks, Oban and graphile-worker presets at once.

The sibling of test_exporter.py (the default queue, procrastinate, pgqueuer and pg-boss): the
ground-truth workloads of test_django_tasks.py, test_oban.py and test_graphile.py run at the
same time, each in its own database, while the exporter service (the one `jobqueue-exporter
run` starts) collects all three. Every counter on /metrics must equal the library's own record
and, once the workloads are quiet, every gauge series the table (graphile's dead gauge, kept
between recounts, included). The django-tasks and graphile-worker workloads run in threads of
their own: their harnesses start processes and wait for them, which would stall the loop that
serves the exporter and the Oban node.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Coroutine
from dataclasses import replace
from typing import Any, TypeVar

import pytest

from exporter.counting.reader import LedgerReader
from exporter.service import Service
from exporter.settings import Settings, WebSettings
from tests.conftest import PgServer
from tests.helpers import fast_queue, get, parse, wait_until
from tests.system.presets.processes import require
from tests.system.presets.test_exporter import (
    Samples,
    counters_of,
    counters_wanted,
    library_database,
)

pytestmark = [pytest.mark.slow, pytest.mark.library]
T = TypeVar("T")

QUEUES = ("django", "media", "graphile")
STUCK_AFTER = 1.0  # graphile: locked for longer than this is stuck (its own takeover: 4 h)
GAUGES = {"pending": "pending", "running": "running", "dead": "held"}


@pytest.fixture
async def django_db(pg_cluster: PgServer) -> AsyncIterator[str]:
    """A database migrated by the throwaway Django project, with the preset's indexes."""
    require("django_tasks_db")
    from tests.system.presets.django_harness import create_indexes, install

    async with library_database(pg_cluster, install) as dsn:
        await create_indexes(dsn)
        yield dsn


@pytest.fixture
async def oban_db(pg_cluster: PgServer) -> AsyncIterator[str]:
    """Oban's schema, made by the library's own install.sql."""
    from tests.system.presets.oban_client import ObanClient, require_oban

    require_oban()
    async with library_database(pg_cluster, lambda dsn: None) as dsn:
        async with ObanClient(dsn) as oban:
            await oban.install()
        yield dsn


@pytest.fixture
async def graphile_db(pg_cluster: PgServer) -> AsyncIterator[str]:
    """graphile-worker's schema (its own CLI), the preset's indexes, and some history."""
    require("graphile-worker")
    from tests.system.presets.graphile_harness import history, install

    async with library_database(pg_cluster, install) as dsn:
        history(dsn)
        yield dsn


def in_thread(work: Coroutine[Any, Any, T]) -> Awaitable[T]:
    """Run a coroutine in an event loop of its own, on a thread of its own."""
    return asyncio.to_thread(asyncio.run, work)


async def test_one_exporter_counts_django_tasks_oban_and_graphile_exactly(
    django_db: str, oban_db: str, graphile_db: str
) -> None:
    from tests.system.presets import django_harness as dj
    from tests.system.presets import graphile_harness as gw
    from tests.system.presets import oban_harness as ob
    from tests.system.presets.oban_client import ObanClient

    before = await dj.history(django_db)  # finished and waiting tasks the exporter never saw
    queues = (
        replace(fast_queue(django_db, name="django", interval=0.3), profile="django-tasks"),
        replace(fast_queue(oban_db, name="media", interval=0.3,
                           heartbeat_timeout=ob.RESCUE_AFTER), profile="oban"),
        replace(fast_queue(graphile_db, name="graphile", interval=0.3,
                           heartbeat_timeout=STUCK_AFTER), profile="graphile-worker"),
    )  # fmt: skip
    service = Service(Settings(queues=queues, web=WebSettings(listen_address=("127.0.0.1:0",))))

    async def scrape() -> Samples:
        status, body, _ = await get(service.port, "/metrics")
        assert status == 200
        return parse(body)

    async def until_stuck(queue: str, job_type: str, n: int) -> None:
        key = ("jobqueue_stuck_jobs",
               (("job_type", job_type), ("queue", queue), ("reason", "lease_expired")))  # fmt: skip
        deadline = time.monotonic() + 30
        while (await scrape()).get(key) != n:
            assert time.monotonic() < deadline, f"{queue} {job_type}: stuck never {n}"
            await asyncio.sleep(0.1)

    async with ObanClient(oban_db) as oban:
        ids = await ob.history(oban)
        start = await ob.snapshot_rows(oban_db)
        await service.start()
        try:
            modes = {name: service.queue(name).poller.mode for name in QUEUES}
            readers = {name: m for name, m in modes.items() if isinstance(m, LedgerReader)}
            assert set(readers) == set(QUEUES), "profile: selects the preset's counting mode"
            await wait_until(
                lambda: all(getattr(r, "counting", False) for r in readers.values()),
                within=60, what="every preset reader counting",
            )  # fmt: skip
            oban_reader: Any = readers["media"]

            async def oban_workload() -> dict[int, int]:
                async def until_forgotten(job_id: int) -> None:
                    await wait_until(lambda: job_id not in oban_reader.known, within=30)

                return await ob.run_workload(
                    oban_db, oban, ids, lambda n: until_stuck("media", ob.W + "Fragile", n),
                    until_forgotten,
                )  # fmt: skip

            async def graphile_workload() -> gw.GroundTruth:
                return await gw.run_workload(
                    graphile_db, lambda n: until_stuck("graphile", "slow", n)
                )

            by_hand, _, graphile = await asyncio.gather(
                oban_workload(),
                in_thread(dj.run_workload(django_db)),
                in_thread(graphile_workload()),
            )
            django = await dj.ground_truth(django_db, before)
            oban_truth = ob.truth(start, await ob.snapshot_rows(oban_db), by_hand)
            wanted = {
                "django": counters_wanted(django.counters),
                # Oban's reasons are bounded already (deadline, lease_expired, error).
                "media": {name: {k: float(v) for k, v in found.items()}
                          for name, found in oban_truth.counters.items() if found},
                "graphile": {"dead": {(task, "error"): float(n)
                                      for task, n in graphile.dead_by_rows.items()}},
            }  # fmt: skip
            gauges = {
                "django": django.gauges,
                "media": oban_truth.gauges,
                "graphile": graphile.gauges,
            }
            last: dict[str, Any] = {}

            async def agree() -> bool:
                samples = await scrape()
                for name in QUEUES:
                    got = {k: v for k, v in counters_of(samples, name).items() if v}
                    last[name] = (got, shown_gauges(samples, name))
                return all(last[n] == (wanted[n], gauges_wanted(gauges[n])) for n in QUEUES)

            deadline = time.monotonic() + 60
            while not await agree():
                assert time.monotonic() < deadline, f"/metrics {last} != truth {wanted} {gauges}"
                for name in QUEUES:
                    poller = service.queue(name).poller
                    await poller.wait_for_collections(poller.generation + 1, limit=30)
            samples = await scrape()
        finally:
            await service.stop()

    # Not vacuous: each library recorded deaths, and the shapes each test file proves.
    assert wanted["django"]["dead"]
    assert wanted["media"]["dead"]
    assert wanted["graphile"]["dead"] == {("bad", "error"): 5.0, ("slow", "error"): 2.0}
    assert gauges["graphile"]["bad"]["held"] == 2 + 5  # the history's deaths, and the workload's
    assert {reason for _, reason in wanted["media"]["failures"]} == {
        "error", "deadline", "lease_expired"}  # fmt: skip
    for name in QUEUES:
        assert samples[("jobqueue_up", (("queue", name),))] == 1
    # What a preset cannot tell is absent, not zero.
    names = {(name, dict(labels).get("queue")) for name, labels in samples}
    assert ("jobqueue_jobs_completed_total", "graphile") not in names
    assert ("jobqueue_job_failures_total", "graphile") not in names
    assert ("jobqueue_jobs_requeued_total", "django") not in names
    assert ("jobqueue_stuck_jobs", "django") not in names
    statuses = {name: {dict(labels)["status"] for metric, labels in samples
                       if metric == "jobqueue_jobs" and ("queue", name) in labels}
                for name in QUEUES}  # fmt: skip
    assert statuses == {"django": {"pending", "running"}, "media": {"pending", "running"},
                        "graphile": {"pending", "running", "dead"}}  # fmt: skip


def shown_gauges(samples: Samples, queue: str) -> dict[tuple[str, str], float]:
    """The queue's non-zero jobqueue_jobs and jobqueue_jobs_scheduled series on /metrics."""
    out: dict[tuple[str, str], float] = {}
    for (name, labels), value in samples.items():
        found = dict(labels)
        if found.get("queue") != queue or not value:
            continue
        if name == "jobqueue_jobs":
            out[(found["job_type"], found["status"])] = value
        elif name == "jobqueue_jobs_scheduled":
            out[(found["job_type"], "scheduled")] = value
    return out


def gauges_wanted(truth: dict[str, dict[str, int]]) -> dict[tuple[str, str], float]:
    """A library's gauges per job type, in the shape of :func:`shown_gauges`."""
    out: dict[tuple[str, str], float] = {}
    for job_type, found in truth.items():
        for status, key in (*GAUGES.items(), ("scheduled", "scheduled")):
            if found.get(key):
                out[(job_type, status)] = float(found[key])
    return out
