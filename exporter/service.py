"""The running exporter: every watched queue, the board they publish to, and the web server.

Each queue is collected on a loop of its own, so a slow, locked or unreachable database never
delays, hides or fails another database's queues; queues kept in one database share its pool
and lock session. Pollers publish each queue's view to the board; the web server reads only
the board.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from exporter.board import Board
from exporter.db import Connections
from exporter.logs import reconfigure_logging
from exporter.model import ConfigStatus
from exporter.redaction import redact, remember
from exporter.runtime import QueueRuntime
from exporter.settings import (
    Change,
    ConfigError,
    QueueSettings,
    ReloadPlan,
    Settings,
    plan_reload,
)
from exporter.web.server import WebServer
from exporter.web.validate import WebConfigError

log = logging.getLogger(__name__)


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
        remember(settings.secrets)  # before any line or page can show one
        self._load = load
        self._reloading = asyncio.Lock()
        self._reload_tasks: set[asyncio.Task[str | None]] = set()
        self.board = Board()
        self.connections = Connections()
        self.queues = [self._runtime(queue) for queue in settings.queues]
        self.board.arrange([queue.name for queue in self.queues])
        self.web = WebServer(settings.web, self.board, self.reload, sockets)

    def _runtime(self, queue: QueueSettings) -> QueueRuntime:
        return QueueRuntime(queue, self.board, self.connections)

    @property
    def config_status(self) -> ConfigStatus:
        """How the last load of the configuration went."""
        return self.board.config

    def queue(self, name: str) -> QueueRuntime:
        """The runtime of the queue with this label."""
        for queue in self.queues:
            if queue.name == name:
                return queue
        raise KeyError(name)

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
                    q.name: self._runtime(q)
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
        error = redact(error)
        log.error(
            "configuration reload failed; the running configuration stays",
            extra={"fields": {"err": error}},
        )
        self.board.publish_config(
            replace(
                self.config_status, successful=False, last_error=error, last_failure_at=time.time()
            )
        )
        return error

    async def _apply(
        self, settings: Settings, plan: ReloadPlan, fresh: dict[str, QueueRuntime]
    ) -> None:
        remember(settings.secrets)
        reconfigure_logging(settings.log.level, settings.log.format, settings.secrets)
        current = {queue.name: queue for queue in self.queues}
        gone = [current[n] for n in (*plan.removed, *plan.names(Change.REPLACE))]
        await asyncio.gather(*(queue.stop() for queue in gone))
        for queue in settings.queues:
            change = plan.changes.get(queue.name)
            if change in (Change.LIVE, Change.RECONNECT):
                await current[queue.name].reconfigure(queue, change)
        self.queues = [fresh.get(q.name) or current[q.name] for q in settings.queues]
        self.board.arrange([queue.name for queue in self.queues])
        self.settings = settings
        self.web.apply(settings.web)
        for runtime in fresh.values():
            runtime.start()
        self.board.publish_config(ConfigStatus(last_success_at=time.time()))
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
    banner: Callable[[Service], str] | None = None,
    load: Callable[[], Settings] | None = None,
    sockets: Sequence[int] = (),
) -> None:
    """Run until SIGTERM or SIGINT; reload on SIGHUP (and POST /-/reload) with ``load``;
    ``banner`` says, once the port is bound, where the started service serves."""
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
    if banner is not None:
        print(banner(service), flush=True)
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
