"""A throwaway PostgreSQL cluster and a simulated worker fleet: the demo and the tests' truth."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace

from exporter.demo.cluster import Cluster, ClusterError
from exporter.demo.fleet import DEMO_JOB_TYPES, Fleet, FleetConfig
from exporter.demo.queue import JobQueue, prepare_database
from exporter.demo.tally import Tally
from exporter.service import serve
from exporter.settings import QueueSettings, Settings

__all__ = [
    "DEMO_JOB_TYPES",
    "Cluster",
    "ClusterError",
    "Fleet",
    "FleetConfig",
    "JobQueue",
    "Tally",
    "demo_environment",
    "prepare_database",
    "run_demo",
]

DEMO_DATABASE = "jobqueue"


@contextlib.asynccontextmanager
async def demo_environment(
    config: FleetConfig | None = None, *, dbname: str = DEMO_DATABASE
) -> AsyncIterator[str]:
    """Run a cluster, a prepared queue database and a busy fleet; yield the DSN; tear all down."""
    cluster = Cluster()
    try:
        await asyncio.to_thread(cluster.start)
        await asyncio.to_thread(cluster.create_database, dbname)
        dsn = cluster.dsn(dbname)
        await prepare_database(dsn)
        # Not detailed: the demo may run for days and nobody reads its transition log.
        fleet = Fleet(dsn, config or FleetConfig(), Tally(detailed=False))
        await fleet.start()
        try:
            yield dsn
        finally:
            await fleet.stop()
    finally:
        # Synchronous on purpose: a second Ctrl-C or a cancellation during clean-up must
        # not leave a postgres process and its directory behind.
        cluster.destroy()


def demo_queue(settings: Settings, dsn: str) -> QueueSettings:
    """The demo's queue: the first configured one (or the defaults) pointed at the demo database.

    Job types the settings leave unnamed get the fleet's names (send_email, render_pdf, ...).
    """
    queue = settings.queues[0] if settings.queues else QueueSettings(name=DEMO_DATABASE)
    name = queue.name if queue.database.dsn is None and queue.name != "default" else DEMO_DATABASE
    collect = replace(queue.collect, job_types=queue.collect.job_types or DEMO_JOB_TYPES)
    database = replace(queue.database, dsn=dsn, password_file=None)
    return replace(queue, name=name, database=database, collect=collect)


def run_demo(settings: Settings) -> int:
    """Entry point of ``jobqueue-exporter demo``: throwaway database, simulated fleet, exporter.

    The demo starts the exporter's service like any user would, with one queue whose DSN
    points at the throwaway cluster; every other setting and flag applies as given.
    """

    async def main() -> None:
        async with demo_environment() as dsn:
            demo_settings = replace(settings, queues=(demo_queue(settings, dsn),))
            await serve(
                demo_settings,
                banner="jobqueue-exporter demo: metrics at http://127.0.0.1:{port}"
                + settings.web.telemetry_path
                + "  (Ctrl-C stops and removes the demo database)",
            )

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    return 0
