"""The HTTP routes. No handler touches a database: each one reads what the collections left."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web

from exporter.board import Board
from exporter.metrics import CONTENT_TYPE
from exporter.redaction import redact
from exporter.web.encoding import IDENTITY, choose_encoding
from exporter.web.exposition import Exposition
from exporter.web.middleware import HEALTHY_PATHS, READY_PATHS, RELOAD_METHODS, RELOAD_PATH
from exporter.web.status import StatusPage, status_page


def not_ready(readiness: Iterable[tuple[str, str | None]]) -> str | None:
    """The /readyz body for the queues not ready and why (redacted); None when all are."""
    lines = [f"queue {queue}: not ready: {why}\n" for queue, why in readiness if why is not None]
    return redact("".join(lines)) if lines else None


def add_routes(
    app: web.Application,
    board: Board,
    reload_config: Callable[[], Awaitable[str | None]],
    exposition: Exposition,
    telemetry_path: str,
    lifecycle: Callable[[], bool],
) -> None:
    """/metrics (at its configured path), /healthz and /readyz (also spelled /-/healthy and
    /-/ready, as Prometheus spells them), the status page at / and /-/reload (POST or PUT, when
    ``lifecycle()`` says so, as Prometheus does)."""

    async def metrics(request: web.Request) -> web.Response:
        encoded = await exposition.body()
        coding = choose_encoding(request.headers.get("Accept-Encoding"), encoded)
        # Vary on every answer, so a cache between us and a scraper never mixes codings.
        headers = {"Content-Type": CONTENT_TYPE, "Vary": "Accept-Encoding"}
        if coding != IDENTITY:
            headers["Content-Encoding"] = coding
        return web.Response(body=encoded[coding], headers=headers)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        waiting = not_ready(board.readiness())
        if waiting is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=waiting)

    started = time.monotonic()

    async def landing(_: web.Request) -> web.Response:
        page = StatusPage(
            telemetry_path=telemetry_path,
            uptime=time.monotonic() - started,
            now=time.time(),
            config=board.config,
            queues=board.statuses(),
        )
        return web.Response(text=status_page(page), content_type="text/html")

    async def reload(request: web.Request) -> web.Response:
        if request.method not in RELOAD_METHODS:
            return web.Response(
                status=405,
                text="Only POST or PUT requests allowed\n",
                headers={"Allow": ", ".join(RELOAD_METHODS)},
            )
        if not lifecycle():
            return web.Response(status=403, text="Lifecycle API is not enabled.\n")
        error = await reload_config()
        if error is not None:
            return web.Response(status=500, text=f"failed to reload config: {redact(error)}\n")
        return web.Response(text="configuration reloaded\n")

    app.router.add_route("*", RELOAD_PATH, reload)
    app.router.add_get(telemetry_path, metrics)
    for path in HEALTHY_PATHS:
        app.router.add_get(path, healthz)
    for path in READY_PATHS:
        app.router.add_get(path, readyz)
    app.router.add_get("/", landing)
