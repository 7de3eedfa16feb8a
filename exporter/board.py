"""The board: the latest immutable view of every queue, published by its poller, read by the web.

Pollers publish after every collection and whenever leadership changes; the service publishes
the configuration's status. The HTTP side (/metrics, /readyz, the status page) reads only this,
never a poller. What depends on the clock is decided when read: a view whose snapshot has gone
stale since it was published is served without its gauges and with ``up`` 0, so no scrape ever
shows a stale verdict.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import replace

from exporter.model import ConfigStatus, QueueStatus, QueueView


class Board:
    """Holds each queue's latest published status and tells listeners when one changes."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._queues: dict[str, QueueStatus] = {}
        self._order: list[str] = []
        self._generation = 0
        self.config = ConfigStatus(last_success_at=time.time())
        # Per queue counted from a change stream: what confirms the stream's slot at a position
        # whose counts a /metrics response is about to carry (db/slot_follower.py, Follower.served).
        self.confirmers: dict[str, Callable[[int], Awaitable[None]]] = {}
        # Called (synchronously, on the event loop) after every publication.
        self.listeners: list[Callable[[], None]] = []

    def publish(self, status: QueueStatus) -> None:
        """Replace one queue's status (a queue not arranged yet is added at the end)."""
        name = status.view.queue
        if name not in self._queues and name not in self._order:
            self._order.append(name)
        self._queues[name] = status
        self._changed()

    def publish_config(self, config: ConfigStatus) -> None:
        """Replace the configuration's status (after start-up and every reload)."""
        self.config = config
        self._changed()

    def arrange(self, names: Sequence[str]) -> None:
        """The queues served, in order; the statuses of other queues are dropped."""
        self._order = list(names)
        self._queues = {n: s for n, s in self._queues.items() if n in self._order}
        self.confirmers = {n: c for n, c in self.confirmers.items() if n in self._order}
        self._changed()

    def _changed(self) -> None:
        self._generation += 1
        for listener in self.listeners:
            listener()

    async def carry(self, positions: Mapping[str, int]) -> None:
        """A /metrics response is about to carry the counts up to these stream positions (by
        queue): returns once each queue's slot is confirmed there (each waits a bounded time),
        so a leader killed right after the response leaves its successor none of them."""
        waits = [
            confirm(position)
            for name, position in positions.items()
            if (confirm := self.confirmers.get(name)) is not None
        ]
        if waits:
            await asyncio.gather(*waits)

    def generation(self) -> Hashable:
        """Changes at every publication."""
        return self._generation

    def statuses(self) -> list[QueueStatus]:
        """Each queue's status as of now: stale snapshots withdrawn, readiness re-judged."""
        now = self._monotonic()
        return [self._now(self._queues[n], now) for n in self._order if n in self._queues]

    def views(self) -> list[QueueView]:
        """Each queue's part of /metrics as of now."""
        return [status.view for status in self.statuses()]

    def readiness(self) -> list[tuple[str, str | None]]:
        """(queue, None) for each ready queue, (queue, why not) for the others."""
        return [(status.view.queue, status.ready) for status in self.statuses()]

    def verdict(self) -> Hashable:
        """What /metrics may never show late: the last reload's success, and each queue's
        role, leadership, up and freshness."""
        views = [status.view for status in self.statuses()]
        queues = tuple(
            (view.queue, view.collector, view.leader, view.up, view.snapshot is not None)
            for view in views
        )
        return (self.config.successful, queues)

    @staticmethod
    def _now(status: QueueStatus, now: float) -> QueueStatus:
        view = status.view
        if not view.collector:
            return status
        if view.fresh_until is not None and now <= view.fresh_until:
            return status
        why = view.health.last_error or "no successful collection yet"
        stale = replace(view, snapshot=None, up=False)
        return replace(status, view=stale, ready=status.ready or why)
