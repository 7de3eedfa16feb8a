"""Request hygiene on every route: configured headers, allowed methods, no bodies, auth."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from exporter.web.auth import auth_middleware
from exporter.web.watcher import WebConfigWatcher

ALLOWED_METHODS = ("GET", "HEAD")
# The one route that changes anything; its handler answers 403 unless lifecycle is enabled.
RELOAD_PATH = "/-/reload"
# Our paths first, then Prometheus' own spellings, which answer the same.
HEALTHY_PATHS = ("/healthz", "/-/healthy")
READY_PATHS = ("/readyz", "/-/ready")
RELOAD_METHODS = ("POST", "PUT")

# 8 KiB matches Go's net/http per-line expectations closely enough and is far above what a
# Prometheus scrape sends; longer request lines or header fields are refused by aiohttp.
MAX_LINE_SIZE = 8192
MAX_FIELD_SIZE = 8192
MAX_HEADERS = 64


def server_limits() -> dict[str, Any]:
    """Keyword arguments for ``web.AppRunner`` that make aiohttp refuse oversized headers."""
    return {
        "max_line_size": MAX_LINE_SIZE,
        "max_field_size": MAX_FIELD_SIZE,
        "max_headers": MAX_HEADERS,
    }


def headers_middleware(watcher: WebConfigWatcher) -> Middleware:
    """Set the configured ``http_server_config.headers`` on every response, errors included."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        headers = watcher.config.headers
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            exc.headers.update(headers)
            raise
        if not response.prepared:
            response.headers.update(headers)
        return response

    return middleware


def method_middleware(watcher: WebConfigWatcher) -> Middleware:
    """Serve only GET and HEAD (and POST or PUT on /-/reload) without a body; everything else
    is refused before auth runs."""
    del watcher  # same factory signature as the others; nothing here is configurable

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        # The route the router matched, not the raw path, as the auth middleware does.
        resource = request.match_info.route.resource
        reload = resource is not None and resource.canonical == RELOAD_PATH
        allowed = ALLOWED_METHODS + RELOAD_METHODS if reload else ALLOWED_METHODS
        if request.method not in allowed:
            response = web.Response(
                status=405,
                text="Method Not Allowed\n",
                headers={"Allow": ", ".join(allowed)},
            )
            response.force_close()
            return response
        chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        if (request.content_length or 0) > 0 or chunked or request.body_exists:
            # force_close: don't spend time reading a body nobody asked for.
            response = web.Response(status=413, text="Request body not allowed\n")
            response.force_close()
            return response
        return await handler(request)

    return middleware


def middlewares(
    watcher: WebConfigWatcher, exempt: tuple[str, ...] = HEALTHY_PATHS
) -> list[Middleware]:
    """All web-config middlewares, outermost first: headers, method/body check, auth."""
    return [
        headers_middleware(watcher),
        method_middleware(watcher),
        auth_middleware(watcher, exempt),
    ]
