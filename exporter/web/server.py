"""The HTTP server: one aiohttp application on every listen address, TLS and auth from the
web-config file, and the addresses it really bound (port 0 asks the kernel for one)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from exporter.board import Board
from exporter.settings import WebSettings, parse_listen_address
from exporter.web.exposition import Exposition
from exporter.web.middleware import middlewares, server_limits
from exporter.web.routes import add_routes
from exporter.web.watcher import WebConfigWatcher

log = logging.getLogger(__name__)

# Requests carry no body (the method middleware refuses one); this bounds what aiohttp reads.
CLIENT_MAX_SIZE = 1024


class WebServer:
    """Serves /metrics and friends for one exporter process."""

    def __init__(
        self,
        settings: WebSettings,
        board: Board,
        reload: Callable[[], Awaitable[str | None]],
        sockets: Sequence[int] = (),
    ) -> None:
        """``board``: what every page shows; ``reload``: re-reads the configuration (None, or
        why the running one stays); ``sockets``: listening file descriptors systemd passed,
        for --web.systemd-socket."""
        self.settings = settings
        self._sockets = tuple(sockets)
        self.watcher = WebConfigWatcher(settings.config_file)
        self.exposition = Exposition(board)
        # Render as soon as a queue publishes, so scrapes rarely see the previous rendering.
        board.listeners.append(self.exposition.refresh)
        self.app = web.Application(
            middlewares=middlewares(self.watcher), client_max_size=CLIENT_MAX_SIZE
        )
        add_routes(
            self.app,
            board,
            reload,
            self.exposition,
            settings.telemetry_path,
            lifecycle=lambda: self.settings.enable_lifecycle,
        )
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Bind every listen address; OSError when one is taken or not ours to bind."""
        self._runner = web.AppRunner(
            self.app, handle_signals=False, access_log=None, **server_limits()
        )
        await self._runner.setup()
        ssl_context = self.watcher.ssl_context()
        sites: list[web.BaseSite] = []
        if self.settings.systemd_socket:
            if not self._sockets:
                raise OSError("--web.systemd-socket: systemd passed no socket (LISTEN_FDS)")
            for fd in self._sockets:
                sock = socket.socket(fileno=fd)
                sites.append(web.SockSite(self._runner, sock, ssl_context=ssl_context))
            where = f"systemd sockets {','.join(map(str, self._sockets))}"
        else:
            for address in self.settings.listen_address:
                host, port = parse_listen_address(address)
                sites.append(
                    web.TCPSite(self._runner, host=host or None, port=port, ssl_context=ssl_context)
                )
            where = ",".join(self.settings.listen_address)
        try:
            for each in sites:
                await each.start()
        except BaseException:
            await self._runner.cleanup()
            self._runner = None
            raise
        log.info("listening", extra={"fields": {"address": where, "ports": self.ports}})

    @property
    def ports(self) -> list[int]:
        """The TCP ports bound, in listen-address order (several for a host name or ``:port``)."""
        if self._runner is None:
            return []
        ports: list[int] = []
        for address in self._runner.addresses:
            if not isinstance(address, tuple):
                continue  # a Unix socket systemd passed
            port = int(address[1])
            if port not in ports:
                ports.append(port)
        return ports

    @property
    def port(self) -> int | None:
        """The first bound port (the one to tell a user about)."""
        return self.ports[0] if self.ports else None

    @property
    def scheme(self) -> str:
        """``https`` when the web-config file turns TLS on, else ``http``."""
        return "http" if self.watcher.ssl_context() is None else "https"

    def check_config(self) -> None:
        """Raise WebConfigError, naming the key, when the web-config file would not load now."""
        self.watcher.check()

    def apply(self, settings: WebSettings) -> None:
        """Take on reloaded web settings (listen addresses and path only change on restart)."""
        self.settings = settings
        self.watcher.refresh(force=True)

    def refresh(self) -> None:
        """Start rendering a new /metrics body (a collection just finished)."""
        self.exposition.refresh()

    async def stop(self) -> None:
        """Stop serving and close every connection."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
