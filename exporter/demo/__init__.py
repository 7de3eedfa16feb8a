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
from exporter.redaction import redact
from exporter.service import Service, serve
from exporter.settings import QueueSettings, Settings, WebSettings, parse_listen_address

__all__ = [
    "DEMO_JOB_TYPES",
    "Cluster",
    "ClusterError",
    "Fleet",
    "FleetConfig",
    "JobQueue",
    "Tally",
    "demo_banner",
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


def demo_banner(dsn: str, web: WebSettings, port: int, scheme: str = "http") -> str:
    """What the demo prints once it serves: the status page, /metrics and the database.

    The DSN is the throwaway cluster's (postgres over loopback, trusted: it carries no
    password); it goes through the redactor all the same, so a DSN that ever did carry one
    would show it masked.
    """
    host, _ = parse_listen_address(web.listen_address[0]) if web.listen_address else ("", 0)
    if host in ("", "0.0.0.0", "::") or web.systemd_socket:
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    base = f"{scheme}://{host}:{port}"
    return (
        f"jobqueue-exporter demo: status page {base}/\n"
        f"  metrics   {base}{web.telemetry_path}\n"
        f"  database  {redact(dsn)}  (throwaway: psql it, it goes with the demo)\n"
        "Ctrl-C stops the demo and removes its database."
    )


def run_demo(settings: Settings) -> int:
    """Entry point of ``jobqueue-exporter demo``: throwaway database, simulated fleet, exporter.

    The demo starts the exporter's service like any user would, with one queue whose DSN
    points at the throwaway cluster; every other setting and flag applies as given.
    """

    async def main() -> None:
        async with demo_environment() as dsn:
            demo_settings = replace(settings, queues=(demo_queue(settings, dsn),))

            def banner(service: Service) -> str:
                assert service.port is not None  # serve() prints once the server is bound
                return demo_banner(dsn, settings.web, service.port, service.web.scheme)

            await serve(demo_settings, banner=banner)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    return 0
