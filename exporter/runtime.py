"""One watched queue at run time: its collection loop and its leader election.

Each queue has its own loop, so a slow, locked or unreachable database never delays, hides or
fails another database's queues. Queues kept in the same database share its pool and its lock
session (:class:`~exporter.db.Connections`). The service owns one of these per configured queue.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from exporter.board import Board
from exporter.db import Connections, ConnectOptions, Database
from exporter.db.slot_follower import Follower
from exporter.db.slot_setup import is_logical, stream_options
from exporter.election import Election
from exporter.logs import log_fields
from exporter.poller import Poller
from exporter.profiles import profile_of
from exporter.settings import Change, QueueSettings

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
        # A preset's main table: the election's lock is keyed by its OID, so exporters watching
        # the same library's tables elect one collector, as for the default job table.
        table=profile_of(queue).watched_table(queue),
        max_connections=db.max_connections,
        connect_timeout=db.connect_timeout,
        statement_timeout=collect.statement_timeout,
        lock_timeout=collect.lock_timeout,
    )


def _pool_options(settings: QueueSettings) -> ConnectOptions:
    """The collection pool's options: with an election, the lock's session is one of the
    queue's database.max_connections."""
    options = connect_options(settings)
    if not settings.collect.leader_election:
        return options
    return replace(options, max_connections=options.max_connections - 1)


class QueueRuntime:
    """One watched queue: its collection loop and, unless turned off, its election."""

    def __init__(
        self,
        settings: QueueSettings,
        board: Board | None = None,
        connections: Connections | None = None,
    ) -> None:
        self.settings = settings
        self.board = board or Board()
        self.connections = connections or Connections()
        self.database = self._database(settings)
        self.election: Election | None = None
        if settings.collect.leader_election:
            interval = settings.collect.interval
            retry = min(interval / 2, MAX_ELECTION_RETRY)
            options = connect_options(settings)
            self.election = Election(
                settings.name, self.connections.lock(options, options.table), retry, interval,
                self._leadership,
            )  # fmt: skip
        # collect.counting: logical: the change stream, run while this exporter collects.
        self.follower: Follower | None = None
        self._stopping: set[asyncio.Task[None]] = set()
        target = profile_of(settings).logical_target
        if target is not None and is_logical(settings, lambda q: target(q)):
            self.follower = Follower(
                stream_options(settings, target(settings).table), settings.collect.interval,
                database=self.database,
            )  # fmt: skip
            self.board.confirmers[settings.name] = self.follower.served
        self.poller = Poller(
            settings, self.database, board=self.board, seat=self.election,
            companion=self.follower,
        )  # fmt: skip
        self._poller_task: asyncio.Task[None] | None = None
        self._election_task: asyncio.Task[None] | None = None

    def _database(self, settings: QueueSettings) -> Database:
        # Alone, the pool has what database.max_connections leaves beside the lock session;
        # shared by several queues, all of it.
        return self.connections.database(
            _pool_options(settings), shared_size=settings.database.max_connections
        )

    @property
    def name(self) -> str:
        """The queue label."""
        return self.settings.name

    @property
    def leader(self) -> bool:
        """True when this exporter collects the queue (always, without an election)."""
        return self.election is None or self.election.collector

    def start(self) -> None:
        """Publish the queue, start collecting (each collection first checks the lock) and
        standing for election; every line these tasks log carries ``queue=``."""
        self.poller.publish()
        self._start_poller()
        if self.election is not None:
            with log_fields(queue=self.name):
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
            if self.follower is not None:  # and leave the slot to the new leader
                task = asyncio.create_task(self.follower.stop())
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)
        self.poller.publish()

    def _start_poller(self) -> None:
        if self._poller_task is not None and not self._poller_task.done():
            return  # one collection loop per queue, whoever asks
        with log_fields(queue=self.name):
            self._poller_task = asyncio.create_task(self.poller.run(), name=f"poller {self.name}")

    async def _stop_collecting(self) -> bool:
        """Cancel the collection loop (an unfinished collection is dropped); True if it ran."""
        task, self._poller_task = self._poller_task, None
        if task is None:
            return False
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return True

    async def stop(self) -> None:
        """Stop collecting, give up the lock, let go of the database's shared sessions."""
        tasks = [t for t in (self._election_task, self._poller_task) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.follower is not None:
            await self.follower.stop()
        if self.election is not None:
            await self.election.lock.close()
        await self.connections.release(self.database)

    async def reconfigure(self, settings: QueueSettings, change: Change) -> None:
        """Take on reloaded settings of the same queue, keeping its counters, tracked jobs and
        (with an election) its lock, so leadership does not move."""
        collect = settings.collect
        # The loop reads its interval when it starts; a new pool wants no collection in flight.
        restart = change is Change.RECONNECT or self.settings.collect.interval != collect.interval
        running = await self._stop_collecting() if restart else False
        self.poller.tallies.relabel(
            self.poller.labels.rename(collect.job_types, collect.max_job_types)
        )
        self.settings = self.poller.settings = settings
        self.poller.retune()
        if change is Change.RECONNECT:
            previous, self.database = self.database, self._database(settings)
            self.poller.database = self.database
            if self.follower is not None:
                self.follower.database = self.database
            await self.connections.release(previous)
        if self.election is not None:
            # The held lock's session stays; when it reconnects it uses the new settings.
            self.election.lock.session.options = connect_options(settings)
            self.election.retry = min(collect.interval / 2, MAX_ELECTION_RETRY)
            self.election.grace = collect.interval
        if running and self.leader:
            self._start_poller()
        self.poller.publish()
