"""A small asyncio TCP proxy for network-fault tests: forward, black-hole, restore, sever."""

from __future__ import annotations

import asyncio
import contextlib

CHUNK = 65536


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to an upstream port; faults are switched on and off at will.

    ``blackhole()`` stops forwarding in both directions without closing anything: bytes stay
    unread in the kernel buffers, as on a network that silently drops packets, so only a
    client-side deadline can notice. ``restore()`` lets the held bytes through again.
    ``sever()`` closes every open connection at once (new ones are still accepted).
    """

    def __init__(self, upstream_port: int, upstream_host: str = "127.0.0.1") -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.port = 0
        self.accepted = 0
        self._forwarding = asyncio.Event()
        self._forwarding.set()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Listen on an ephemeral port of 127.0.0.1 (read it from ``port``)."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    def blackhole(self) -> None:
        """Stop forwarding without closing: connections hang, new ones are accepted and hang."""
        self._forwarding.clear()

    def restore(self) -> None:
        """Forward again, including the bytes held while black-holed."""
        self._forwarding.set()

    def sever(self) -> None:
        """Close every open connection on both sides."""
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def stop(self) -> None:
        """Stop listening and close everything."""
        self.restore()
        if self._server is not None:
            self._server.close()
        self.sever()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> TcpProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.add(client_w)
        try:
            upstream_r, upstream_w = await asyncio.open_connection(
                self.upstream_host, self.upstream_port
            )
        except OSError:
            client_w.transport.abort()
            self._writers.discard(client_w)
            return
        self._writers.add(upstream_w)
        pumps = [
            asyncio.create_task(self._pump(client_r, upstream_w)),
            asyncio.create_task(self._pump(upstream_r, client_w)),
        ]
        self._tasks.update(pumps)
        try:
            # Either side closing ends the pair, so neither end is left half open.
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._tasks.difference_update(pumps)
            for writer in (client_w, upstream_w):
                writer.transport.abort()
                self._writers.discard(writer)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                # Wait before reading, so held bytes stay in the kernel and EOF is not seen
                # either: a black hole does not tell anyone that the peer went away.
                await self._forwarding.wait()
                data = await reader.read(CHUNK)
                if not data:
                    return
                await self._forwarding.wait()
                writer.write(data)
                await writer.drain()
