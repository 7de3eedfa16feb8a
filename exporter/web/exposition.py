"""The /metrics body: rendered and compressed once per collection in a worker thread, served to
every scraper in the coding it asks for.

Rendering a few thousand series takes tens of milliseconds of Python; done on the event loop it
would hold every scrape in flight behind it. Compressing it in the same step costs about a
millisecond once, instead of once per scrape. A scrape that arrives while a new rendering is
under way gets the previous one (its counters are one collection old) unless the health verdict
changed: a body that says ``jobqueue_up 1`` after a failed collection, or that still carries
gauges the staleness limit withdrew, is never served. Such scrapes wait for the rendering that
says the truth.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable, Mapping, Sequence

from exporter.board import Board
from exporter.metrics import render
from exporter.model import ConfigStatus, QueueView
from exporter.web.encoding import encode_all

# A rendering is reused until the next collection, so fifty concurrent scrapers cost one
# rendering, not fifty; past this age it is renewed anyway (process_* metrics move).
RENDER_MAX_AGE = 5.0


class Exposition:
    """The current /metrics body (in every coding) and the rendering that will replace it."""

    def __init__(self, board: Board) -> None:
        self.board = board
        self._key: tuple[Hashable, Hashable] | None = None
        self._body: Mapping[str, bytes] | None = None  # coding -> bytes
        self._verdict: Hashable = None  # what the body was rendered with
        self._rendered_at = 0.0
        self._pending: asyncio.Task[None] | None = None
        # The stream positions whose counts the current body carries, by queue.
        self._positions: Mapping[str, int] = {}

    def refresh(self) -> None:
        """Start a new rendering if the state changed (called after every collection too)."""
        key = (self.board.generation(), self.board.verdict())
        stale = key != self._key or time.monotonic() - self._rendered_at > RENDER_MAX_AGE
        if stale and self._pending is None:
            self._key = key
            self._pending = asyncio.create_task(self._render())

    async def body(self) -> Mapping[str, bytes]:
        """The newest rendering whose health verdict matches the exporter's, by coding."""
        self.refresh()
        # A rendering that started before the verdict changed is followed by one that starts
        # after it; the bound only guards against a verdict that flips on every rendering.
        for _ in range(3):
            if self._body is not None and self._verdict == self.board.verdict():
                break
            if self._pending is None:
                self._key = None
                self.refresh()
            assert self._pending is not None
            await asyncio.shield(self._pending)
        body, positions = self._body, self._positions
        assert body is not None
        # Before it leaves: a scraper that gets these counts must never see them counted again
        # by a successor (docs/logical.md, "Confirming the slot").
        await self.board.carry(positions)
        return body

    async def _render(self) -> None:
        try:
            verdict = self.board.verdict()
            views, config = self.board.views(), self.board.config
            # Every logical queue's leader, position 0 (nothing counted yet) included: its
            # follower learns from each response how often Prometheus scrapes.
            positions = {v.queue: v.position for v in views if v.tallies and v.position is not None}
            self._body = await asyncio.to_thread(_render_encoded, views, config)
            self._positions = positions
            self._verdict = verdict
            self._rendered_at = time.monotonic()
        finally:
            self._pending = None


def _render_encoded(views: Sequence[QueueView], config: ConfigStatus) -> Mapping[str, bytes]:
    """Render, then compress in every coding, in one worker-thread step."""
    return encode_all(render(views, config=config))
