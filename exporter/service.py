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
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace

from exporter.db import ConnectOptions, Database, LockSession
from exporter.election import Election
from exporter.model import Health, QueueView
from exporter.poller import Poller
from exporter.settings import QueueSettings, Settings
from exporter.web.server import WebServer

log = logging.getLogger(__name__)

# A standby tries for the lock every half interval, and at least this often.
MAX_ELECTION_RETRY = 5.0


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
    """One watched queue: its pool, its collection loop and, unless turned off, its election."""

    def __init__(self, settings: QueueSettings, on_change: Callable[[], None]) -> None:
        self.settings = settings
        options = connect_options(settings)
        elect = settings.collect.leader_election
        # The lock's session is one of the queue's database.max_connections.
        pool = replace(options, max_connections=options.max_connections - 1) if elect else options
        self.database = Database(pool)
        self.poller = Poller(settings, self.database)
        self.poller.listeners.append(on_change)
        self._on_change = on_change
        self.election: Election | None = None
        if elect:
            interval = settings.collect.interval
            retry = min(interval / 2, MAX_ELECTION_RETRY)
            self.election = Election(
                settings.name, LockSession(options), retry, interval, self._leadership
            )
            self.poller.guard = self.election.guard
        self._poller_task: asyncio.Task[None] | None = None
        self._election_task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        """The queue label."""
        return self.settings.name

    @property
    def leader(self) -> bool:
        """True when this exporter collects the queue (always, without an election)."""
        return self.election is None or self.election.collector

    def start(self) -> None:
        """Start collecting (each collection first checks the lock) and standing for election."""
        self._start_poller()
        if self.election is not None:
            self._election_task = asyncio.create_task(
                self.election.run(), name=f"election {self.name}"
            )

    def _leadership(self, leader: bool, rebaseline: bool) -> None:
        if leader:
            if rebaseline:
                self.poller.rebaseline()
            self._start_poller()
        elif self._poller_task is not None:
            # Withdraw at once: a standby must not export a counter it no longer keeps.
            self._poller_task.cancel()
            self._poller_task = None
        self._on_change()

    def _start_poller(self) -> None:
        self._poller_task = asyncio.create_task(self.poller.run(), name=f"poller {self.name}")

    def verdict(self) -> Hashable:
        """What /metrics must never show late: leadership, and the leader's (up, fresh)."""
        if self.leader:
            return (True, *self.poller.verdict())
        assert self.election is not None
        return (False, self.election.reachable)

    def view(self) -> QueueView:
        """The queue's part of /metrics: everything on the leader, up and leader on a standby."""
        if self.leader:
            return self.poller.view()
        assert self.election is not None
        return QueueView(
            queue=self.name,
            leader=False,
            snapshot=None,
            label_of={},
            labels=(),
            folded=0,
            tallies=None,
            health=Health(up=self.election.reachable),
            up=self.election.reachable,
            collection_timeout=self.settings.collect.timeout,
            tracked=0,
        )

    def readiness(self) -> str | None:
        """None when the queue is served as it should be, else why not."""
        if not self.leader:
            assert self.election is not None
            # A standby is ready while it can reach the database to take over.
            return None if self.election.reachable else self.election.last_error or "starting"
        if self.poller.health.up and self.poller.fresh():
            return None
        return self.poller.health.last_error or "no successful collection yet"

    async def stop(self) -> None:
        """Stop collecting, give up the lock, close every connection of this queue."""
        tasks = [t for t in (self._election_task, self._poller_task) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.election is not None:
            await self.election.lock.close()
        await self.database.close()


class Service:
    """Owns the queues and the web server; started and stopped together."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Render as soon as a collection ends (or leadership changes), so scrapes rarely see
        # the previous rendering and never a stale verdict.
        self.queues = [QueueRuntime(queue, self._changed) for queue in settings.queues]
        self.web = WebServer(settings.web, self)

    def _changed(self) -> None:
        self.web.refresh()

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
        """Each queue's leadership, up and freshness: the part of /metrics that may never lag."""
        return tuple(queue.verdict() for queue in self.queues)

    def views(self) -> Sequence[QueueView]:
        """A copy of every queue's state, for rendering off the event loop."""
        return [queue.view() for queue in self.queues]

    def readiness(self) -> Sequence[tuple[str, str | None]]:
        """(queue, None) for each ready queue, (queue, why not) for the others."""
        return [(queue.name, queue.readiness()) for queue in self.queues]

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
