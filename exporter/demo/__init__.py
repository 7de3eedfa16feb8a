"""A throwaway PostgreSQL cluster and a simulated worker fleet: the demo and the tests' truth."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from exporter.demo.cluster import Cluster, ClusterError
from exporter.demo.fleet import Fleet, FleetConfig
from exporter.demo.queue import JobQueue, prepare_database
from exporter.demo.tally import Tally

__all__ = [
    "Cluster",
    "ClusterError",
    "Fleet",
    "FleetConfig",
    "JobQueue",
    "Tally",
    "demo_environment",
    "prepare_database",
]


@contextlib.asynccontextmanager
async def demo_environment(
    config: FleetConfig | None = None, *, dbname: str = "jobqueue"
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
