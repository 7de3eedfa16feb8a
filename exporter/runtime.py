"""One watched queue at run time: its pool, its collection loop and its leader election.

Each queue has its own, so a slow, locked or unreachable database never delays, hides or fails
another queue. The service owns one of these per configured queue.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import replace

from exporter.db import ConnectOptions, Database, LockSession
from exporter.election import Election
from exporter.logs import log_fields
from exporter.model import Health, QueueStatus, QueueView
from exporter.preset_poller import make_poller, watched_table
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
        table=watched_table(queue),
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
    """One watched queue: its pool, its collection loop and, unless turned off, its election."""

    def __init__(self, settings: QueueSettings, on_change: Callable[[], None]) -> None:
        self.settings = settings
        self.database = Database(_pool_options(settings))
        self.poller = make_poller(settings, self.database)
        self.poller.listeners.append(on_change)
        self._on_change = on_change
        self.election: Election | None = None
        if settings.collect.leader_election:
            interval = settings.collect.interval
            retry = min(interval / 2, MAX_ELECTION_RETRY)
            self.election = Election(
                settings.name, LockSession(connect_options(settings)), retry, interval,
                self._leadership,
            )  # fmt: skip
            self.poller.guard = self.election.guard
        self._poller_task: asyncio.Task[None] | None = None
        self._election_task: asyncio.Task[None] | None = None
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

    @property
    def leader(self) -> bool:
        """True when this exporter collects the queue (always, without an election)."""
        return self.election is None or self.election.collector

    def start(self) -> None:
        """Start collecting (each collection first checks the lock) and standing for election;
        every line these tasks log carries ``queue=``."""
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
        self._on_change()

    def _start_poller(self) -> None:
        if self._poller_task is not None and not self._poller_task.done():
            return  # one collection loop per queue, whoever asks
        with log_fields(queue=self.name):
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

    def status(self) -> QueueStatus:
        """The queue as the status page shows it."""
        return QueueStatus(self.view(), self.readiness(), self.last_error, self.last_error_at)

    async def _stop_collecting(self) -> bool:
        """Cancel the collection loop (an unfinished collection is dropped); True if it ran."""
        task, self._poller_task = self._poller_task, None
        if task is None:
            return False
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return True

    async def stop(self) -> None:
        """Stop collecting, give up the lock, close every connection of this queue."""
        tasks = [t for t in (self._election_task, self._poller_task) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.election is not None:
            await self.election.lock.close()
        await self.database.close()

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
        if change is Change.RECONNECT:
            previous, self.database = self.database, Database(_pool_options(settings))
            self.poller.database = self.database
            await previous.close()
        if self.election is not None:
            # The held lock's session stays; when it reconnects it uses the new settings.
            self.election.lock.options = connect_options(settings)
            self.election.retry = min(collect.interval / 2, MAX_ELECTION_RETRY)
            self.election.grace = collect.interval
        if running and self.leader:
            self._start_poller()
