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
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace

from exporter.db import ConnectOptions, Database, LockSession
from exporter.election import Election
from exporter.logs import log_fields, reconfigure_logging
from exporter.model import ConfigStatus, Health, QueueView
from exporter.poller import Poller
from exporter.settings import (
    Change,
    ConfigError,
    QueueSettings,
    ReloadPlan,
    Settings,
    plan_reload,
    redact_dsn,
)
from exporter.web.server import WebServer
from exporter.web.status import QueueStatus
from exporter.web.validate import WebConfigError

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
        self.poller = Poller(settings, self.database)
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


class Service:
    """Owns the queues and the web server; started and stopped together, reloaded in place."""

    def __init__(
        self,
        settings: Settings,
        load: Callable[[], Settings] | None = None,
        sockets: Sequence[int] = (),
    ) -> None:
        """``load`` re-reads the configuration's sources for a reload (None: no reload);
        ``sockets`` are the listening descriptors systemd passed (--web.systemd-socket)."""
        self.settings = settings
        self._load = load
        self._reloading = asyncio.Lock()
        self._reloads = 0
        self._reload_tasks: set[asyncio.Task[str | None]] = set()
        self.config_status = ConfigStatus(last_success_at=time.time())
        # Render as soon as a collection ends (or leadership changes), so scrapes rarely see
        # the previous rendering and never a stale verdict.
        self.queues = [QueueRuntime(queue, self._changed) for queue in settings.queues]
        self.web = WebServer(settings.web, self, sockets)

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
        """Changes whenever a collection of any queue finished, and at every reload."""
        return (self._reloads, tuple(queue.poller.generation for queue in self.queues))

    def verdict(self) -> Hashable:
        """Each queue's leadership, up and freshness, and whether the last reload worked: the
        part of /metrics that may never lag."""
        queues = tuple((queue.name, queue.verdict()) for queue in self.queues)
        return (self.config_status.successful, queues)

    def views(self) -> Sequence[QueueView]:
        """A copy of every queue's state, for rendering off the event loop."""
        return [queue.view() for queue in self.queues]

    def readiness(self) -> Sequence[tuple[str, str | None]]:
        """(queue, None) for each ready queue, (queue, why not) for the others."""
        return [(queue.name, queue.readiness()) for queue in self.queues]

    def config(self) -> ConfigStatus:
        """How the last load of the configuration went."""
        return self.config_status

    def queue_status(self) -> Sequence[QueueStatus]:
        """Each queue as the status page shows it."""
        return [queue.status() for queue in self.queues]

    async def reload(self) -> str | None:
        """Re-read the configuration and apply it whole; None, or why the old one still runs."""
        async with self._reloading:
            if self._load is None:
                why = "this exporter was started without a configuration to re-read"
                log.warning("reload ignored", extra={"fields": {"reason": why}})
                return why
            try:
                settings = await asyncio.to_thread(self._load)
                plan = plan_reload(self.settings, settings)
                if plan.restart_needed:
                    keys = ", ".join(plan.restart_needed)
                    raise ConfigError(f"{keys}: changing it needs a restart")
                self.web.check_config()
                fresh = {
                    q.name: QueueRuntime(q, self._changed)
                    for q in settings.queues
                    if plan.changes.get(q.name, Change.REPLACE) is Change.REPLACE
                }
            except (ConfigError, WebConfigError, ValueError) as exc:
                return self._reload_failed(str(exc))
            await self._apply(settings, plan, fresh)
            return None

    def request_reload(self) -> None:
        """Reload in the background (the SIGHUP handler)."""
        task = asyncio.create_task(self.reload(), name="reload")
        self._reload_tasks.add(task)
        task.add_done_callback(self._reload_tasks.discard)

    def _reload_failed(self, error: str) -> str:
        error = redact_dsn(error)
        self.config_status = replace(
            self.config_status, successful=False, last_error=error, last_failure_at=time.time()
        )
        log.error(
            "configuration reload failed; the running configuration stays",
            extra={"fields": {"error": error}},
        )
        self._reloads += 1
        self.web.refresh()
        return error

    async def _apply(
        self, settings: Settings, plan: ReloadPlan, fresh: dict[str, QueueRuntime]
    ) -> None:
        reconfigure_logging(settings.log.level, settings.log.format, settings.passwords)
        current = {queue.name: queue for queue in self.queues}
        gone = [current[n] for n in (*plan.removed, *plan.names(Change.REPLACE))]
        await asyncio.gather(*(queue.stop() for queue in gone))
        for queue in settings.queues:
            change = plan.changes.get(queue.name)
            if change in (Change.LIVE, Change.RECONNECT):
                await current[queue.name].reconfigure(queue, change)
        self.queues = [fresh.get(q.name) or current[q.name] for q in settings.queues]
        self.settings = settings
        self.web.apply(settings.web)
        for runtime in fresh.values():
            runtime.start()
        self.config_status = ConfigStatus(last_success_at=time.time())
        self._reloads += 1
        self.web.refresh()
        changed = {c.name.lower(): ",".join(plan.names(c)) for c in Change if c is not Change.SAME}
        fields = {"added": ",".join(plan.added), "removed": ",".join(plan.removed), **changed}
        log.info("configuration reloaded", extra={"fields": {k: v for k, v in fields.items() if v}})

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


async def serve(
    settings: Settings,
    *,
    banner: str | None = None,
    load: Callable[[], Settings] | None = None,
    sockets: Sequence[int] = (),
) -> None:
    """Run until SIGTERM or SIGINT; reload on SIGHUP (and POST /-/reload) with ``load``."""
    # /metrics is rendered in a worker thread; with the default 5 ms GIL switch interval a
    # scrape arriving meanwhile can wait that long for the event loop. 0.5 ms keeps it short.
    sys.setswitchinterval(0.0005)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    service = Service(settings, load, sockets)
    loop.add_signal_handler(signal.SIGHUP, service.request_reload)
    await service.start()
    if banner:
        print(banner.format(port=service.port), flush=True)
    try:
        await stop.wait()
    finally:
        await service.stop()


def run(
    settings: Settings, load: Callable[[], Settings] | None = None, sockets: Sequence[int] = ()
) -> int:
    """Entry point of ``jobqueue-exporter run``; ``load`` re-reads the settings on a reload."""
    asyncio.run(serve(settings, load=load, sockets=sockets))
    return 0
