"""The HTTP side: routes, start-up and shutdown of the database pool and the poller.

Only this module (and webconfig) imports aiohttp. No handler touches the database: /metrics
renders what the last collection left, so a scrape costs the same with the database up or down.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import signal
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime

from aiohttp import web

from exporter import __version__, webconfig
from exporter.config import Settings, parse_listen_address
from exporter.db import ConnectOptions, Database
from exporter.metrics import CONTENT_TYPE, render
from exporter.poller import Poller

log = logging.getLogger(__name__)

WATCHER_KEY = web.AppKey("web_config", webconfig.WebConfigWatcher)
# A rendered exposition is reused until the next collection, so fifty concurrent scrapers
# cost one rendering, not fifty; past this age it is renewed anyway (process_* metrics move).
RENDER_MAX_AGE = 5.0


class _Exposition:
    """Renders /metrics once per collection, in a worker thread, from a copy of the state.

    Rendering a few thousand series takes tens of milliseconds of Python; done on the event
    loop it would hold every scrape in flight behind it. A scrape that arrives while a new
    rendering is under way gets the previous one (its counters are one collection old) unless
    the health verdict changed: a body that says ``jobqueue_up 1`` after a failed collection,
    or that still carries gauges the staleness limit withdrew, is never served. Such scrapes
    wait for the rendering that says the truth.
    """

    def __init__(self, poller: Poller) -> None:
        self.poller = poller
        self._key: tuple[int, bool] | None = None
        self._body: bytes | None = None
        self._verdict: tuple[bool, bool] | None = None  # (up, fresh) the body was rendered with
        self._rendered_at = 0.0
        self._pending: asyncio.Task[bytes] | None = None

    def refresh(self) -> None:
        """Start a new rendering if the state changed (called after every collection too)."""
        key = (self.poller.generation, self.poller.fresh())
        stale = key != self._key or time.monotonic() - self._rendered_at > RENDER_MAX_AGE
        if stale and self._pending is None:
            self._key = key
            self._pending = asyncio.create_task(self._render())

    async def body(self) -> bytes:
        """The newest rendering whose health verdict matches the poller's."""
        self.refresh()
        # A rendering that started before the verdict changed is followed by one that starts
        # after it; the bound only guards against a verdict that flips on every rendering.
        for _ in range(3):
            if self._body is not None and self._verdict == self.poller.verdict():
                break
            if self._pending is None:
                self._key = None
                self.refresh()
            assert self._pending is not None
            await asyncio.shield(self._pending)
        assert self._body is not None
        return self._body

    async def _render(self) -> bytes:
        try:
            view = self.poller.view()
            body = await asyncio.to_thread(render, view)
            self._body = body
            self._verdict = (view.up, view.snapshot is not None)
            self._rendered_at = time.monotonic()
            return body
        finally:
            self._pending = None


def create_app(settings: Settings, poller: Poller) -> web.Application:
    """The aiohttp application with every route; no start-up work."""
    watcher = webconfig.WebConfigWatcher(settings.web.config_file)
    app = web.Application(middlewares=webconfig.middlewares(watcher), client_max_size=1024)
    app[WATCHER_KEY] = watcher
    exposition = _Exposition(poller)
    # Render as soon as a collection ends, so scrapes rarely see the previous one.
    poller.listeners.append(exposition.refresh)

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=await exposition.body(), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if poller.health.up and poller.fresh():
            return web.Response(text="ready\n")
        reason = poller.health.last_error or "no successful collection yet"
        return web.Response(status=503, text=f"not ready: {reason}\n")

    async def landing(_: web.Request) -> web.Response:
        return web.Response(text=_landing_page(settings, poller), content_type="text/html")

    app.router.add_get(settings.web.telemetry_path, metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/", landing)
    return app


def _landing_page(settings: Settings, poller: Poller) -> str:
    health = poller.health
    if health.last_success_at:
        when = datetime.fromtimestamp(health.last_success_at, UTC).isoformat(timespec="seconds")
    else:
        when = "never"
    error = html.escape(health.last_error) if health.last_error else "none"
    path = html.escape(settings.web.telemetry_path)
    return (
        "<!doctype html><html><head><title>jobqueue-exporter</title></head><body>"
        f"<h1>jobqueue-exporter {html.escape(__version__)}</h1>"
        f'<p><a href="{path}">Metrics</a> · <a href="/healthz">healthz</a> · '
        '<a href="/readyz">readyz</a></p>'
        f"<p>Database reachable: {'yes' if health.up else 'no'}<br>"
        f"Last successful collection (database clock): {html.escape(when)}<br>"
        f"Last error: {error}</p></body></html>\n"
    )


def connect_options(settings: Settings) -> ConnectOptions:
    """What the database layer needs from the settings."""
    db, collect = settings.database, settings.collect
    if not db.dsn:
        raise ValueError("database.dsn is not set")
    return ConnectOptions(
        dsn=db.dsn,
        table=db.table,
        max_connections=db.max_connections,
        connect_timeout=db.connect_timeout,
        statement_timeout=collect.statement_timeout,
        lock_timeout=collect.lock_timeout,
    )


class Exporter:
    """The running exporter: pool, poller and HTTP server, started and stopped together."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.database = Database(connect_options(settings))
        self.poller = Poller(settings, self.database)
        self.app = create_app(settings, self.poller)
        self._runner: web.AppRunner | None = None
        self._poll_task: asyncio.Task[None] | None = None
        self.port: int | None = None

    async def start(self) -> None:
        """Bind the HTTP server, then start collecting in the background."""
        host, port = parse_listen_address(self.settings.web.listen_address)
        self._runner = web.AppRunner(
            self.app, handle_signals=False, access_log=None, **webconfig.server_limits()
        )
        await self._runner.setup()
        site = web.TCPSite(
            self._runner,
            host=host or None,
            port=port,
            ssl_context=self.app[WATCHER_KEY].ssl_context(),
        )
        await site.start()
        # Port 0 asks the kernel for a free port; read back which one it gave.
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1]) if sockets else port
        self._poll_task = asyncio.create_task(self.poller.run())
        log.info(
            "listening",
            extra={"fields": {"address": self.settings.web.listen_address, "port": self.port}},
        )

    async def stop(self) -> None:
        """Stop collecting, close every database connection, stop serving."""
        if self._poll_task is not None:
            self._poll_task.cancel()
            await asyncio.gather(self._poll_task, return_exceptions=True)
        await self.database.close()
        if self._runner is not None:
            await self._runner.cleanup()
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
    exporter = Exporter(settings)
    await exporter.start()
    if banner:
        print(banner.format(port=exporter.port), flush=True)
    try:
        await stop.wait()
    finally:
        await exporter.stop()


def run(settings: Settings) -> int:
    """Entry point of ``jobqueue-exporter run``."""
    asyncio.run(serve(settings))
    return 0


def run_demo(settings: Settings) -> int:
    """Entry point of ``jobqueue-exporter demo``: throwaway database, simulated fleet, exporter."""
    from exporter.demo import demo_environment

    async def main() -> None:
        async with demo_environment() as dsn:
            demo_settings = replace(settings, database=replace(settings.database, dsn=dsn))
            await serve(
                demo_settings,
                banner="jobqueue-exporter demo: metrics at http://127.0.0.1:{port}"
                + settings.web.telemetry_path
                + "  (Ctrl-C stops and removes the demo database)",
            )

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    return 0
