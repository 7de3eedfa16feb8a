"""The running exporter: every watched queue (its pool and collection loop) and the web server.

Each queue is collected on a loop of its own, with its own pool and timeouts, so a slow, locked
or unreachable database never delays, hides or fails another queue. The web server reads the
queues through the :class:`~exporter.web.exposition.StateSource` methods below.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from collections.abc import Hashable, Sequence

from exporter.db import ConnectOptions, Database
from exporter.logs import log_fields
from exporter.model import ConfigStatus, QueueView
from exporter.poller import Poller
from exporter.settings import QueueSettings, Settings
from exporter.web.server import WebServer
from exporter.web.status import QueueStatus

log = logging.getLogger(__name__)


def connect_options(queue: QueueSettings) -> ConnectOptions:
    """What the database layer needs from one queue's settings."""
    db, collect = queue.database, queue.collect
    if not db.dsn:
        raise ValueError(f"queue {queue.name}: database.dsn is not set")
    return ConnectOptions(
        dsn=db.dsn,
        table=db.table,
        max_connections=db.max_connections,
        connect_timeout=db.connect_timeout,
        statement_timeout=collect.statement_timeout,
        lock_timeout=collect.lock_timeout,
    )


class QueueRuntime:
    """One watched queue: its database pool and its collection loop."""

    def __init__(self, settings: QueueSettings) -> None:
        self.settings = settings
        self.database = Database(connect_options(settings))
        self.poller = Poller(settings, self.database)
        self._task: asyncio.Task[None] | None = None
        # The poller clears its error on success; the status page keeps the last one, and when.
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.poller.listeners.append(self._note_error)

    def _note_error(self) -> None:
        error = self.poller.health.last_error
        if error is not None and not self.poller.health.up:
            self.last_error, self.last_error_at = error, time.time()

    @property
    def name(self) -> str:
        """The queue label."""
        return self.settings.name

    def start(self) -> None:
        """Start collecting in the background; every line its tasks log carries ``queue=``."""
        with log_fields(queue=self.name):
            self._task = asyncio.create_task(self.poller.run(), name=f"poller {self.name}")

    def readiness(self) -> str | None:
        """None when the queue's last collection succeeded recently enough, else why not."""
        if self.poller.health.up and self.poller.fresh():
            return None
        return self.poller.health.last_error or "no successful collection yet"

    def status(self) -> QueueStatus:
        """The queue as the status page shows it."""
        return QueueStatus(
            self.poller.view(), self.readiness(), self.last_error, self.last_error_at
        )

    async def stop(self) -> None:
        """Stop collecting and close every connection of this queue."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self.database.close()


class Service:
    """Owns the queues and the web server; started and stopped together."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.config_status = ConfigStatus(last_success_at=time.time())
        self.queues = [QueueRuntime(queue) for queue in settings.queues]
        self.web = WebServer(settings.web, self)
        for queue in self.queues:
            # Render as soon as a collection ends, so scrapes rarely see the previous one.
            queue.poller.listeners.append(self.web.refresh)

    def queue(self, name: str) -> QueueRuntime:
        """The runtime of the queue with this label."""
        for queue in self.queues:
            if queue.name == name:
                return queue
        raise KeyError(name)

    # --- StateSource, read by the web server -----------------------------------------------

    def generation(self) -> Hashable:
        """Changes whenever a collection of any queue finished."""
        return tuple(queue.poller.generation for queue in self.queues)

    def verdict(self) -> Hashable:
        """Each queue's (up, fresh): the part of /metrics that may never lag."""
        return tuple(queue.poller.verdict() for queue in self.queues)

    def views(self) -> Sequence[QueueView]:
        """A copy of every queue's state, for rendering off the event loop."""
        return [queue.poller.view() for queue in self.queues]

    def readiness(self) -> Sequence[tuple[str, str | None]]:
        """(queue, None) for each ready queue, (queue, why not) for the others."""
        return [(queue.name, queue.readiness()) for queue in self.queues]

    def config(self) -> ConfigStatus:
        """How the last load of the configuration went."""
        return self.config_status

    def queue_status(self) -> Sequence[QueueStatus]:
        """Each queue as the status page shows it."""
        return [queue.status() for queue in self.queues]

    # --- Lifecycle ------------------------------------------------------------------------

    @property
    def port(self) -> int | None:
        """The first port the web server bound."""
        return self.web.port

    async def start(self) -> None:
        """Bind the HTTP server, then start collecting every queue in the background."""
        await self.web.start()
        for queue in self.queues:
            queue.start()

    async def stop(self) -> None:
        """Stop collecting, close every database connection, stop serving."""
        await asyncio.gather(*(queue.stop() for queue in self.queues))
        await self.web.stop()
        log.info("stopped")


async def serve(settings: Settings, *, banner: str | None = None) -> None:
    """Run until SIGTERM or SIGINT."""
    # /metrics is rendered in a worker thread; with the default 5 ms GIL switch interval a
    # scrape arriving meanwhile can wait that long for the event loop. 0.5 ms keeps it short.
    sys.setswitchinterval(0.0005)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    service = Service(settings)
    await service.start()
    if banner:
        print(banner.format(port=service.port), flush=True)
    try:
        await stop.wait()
    finally:
        await service.stop()


def run(settings: Settings) -> int:
    """Entry point of ``jobqueue-exporter run``."""
    asyncio.run(serve(settings))
    return 0
