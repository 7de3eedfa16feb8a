"""The leader's side of a logical queue: the change stream's thread, fed to the counting mode.

Before each cycle the poller awaits :meth:`Follower.feed`: it starts the stream when it does not
run (the first cycle of a leader, or after an error), hands the counting mode every transaction
committed since, and tells the stream how far it may confirm the slot (the last position a
/metrics response carried, or one counted a few intervals ago). Only the elected collector
runs cycles, so only it streams; :meth:`Follower.stop` ends the thread when it steps down.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from exporter.db.stream import ChangeStream, StreamOptions
from exporter.model.changes import Transaction

# While nothing scrapes, counts this many intervals old are confirmed anyway, so a missing
# Prometheus cannot pin WAL; a scrape confirms them at once.
CONFIRM_AFTER_INTERVALS = 3


class Counting(Protocol):
    """What the follower needs of the logical counting mode."""

    def take(self, transactions: list[Transaction]) -> None:
        """Count committed transactions in commit order."""
        ...

    @property
    def position(self) -> int:
        """The end of the last counted commit."""
        ...


class Follower:
    """Runs one queue's change stream while this exporter collects it."""

    def __init__(
        self,
        options: StreamOptions,
        interval: float,
        carried: Callable[[], int | None],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = ChangeStream(options)
        self.confirmation = Confirmation(CONFIRM_AFTER_INTERVALS * interval)
        self._carried = carried
        self._monotonic = monotonic
        # The end of the last commit handed to a mode: after a reconnect the server sends
        # again what was not confirmed, and a mode rebuilt meanwhile must not count it twice.
        self.position = 0

    async def feed(self, mode: Counting) -> None:
        """Hand ``mode`` what committed since the last feed; DatabaseError when the stream
        failed (it starts again at the next feed)."""
        stream = self.stream
        if not stream.running:
            stream.start()
        fresh = [t for t in stream.drain() if t.end_lsn > self.position]
        if fresh:
            mode.take(fresh)
            self.position = fresh[-1].end_lsn
        now = self._monotonic()
        self.confirmation.counted(self.position, now)
        carried = self._carried()
        if carried is not None:
            self.confirmation.carried(min(carried, self.position))
        stream.confirm(self.confirmation.position(now))

    async def stop(self) -> None:
        """End the stream's thread (a standby must leave the slot to the new leader)."""
        await asyncio.to_thread(self.stream.stop)


class Confirmation:
    """Where the slot may be confirmed: the last position a /metrics response carried, or,
    so that a missing Prometheus cannot pin WAL, one counted ``max_age`` seconds ago."""

    def __init__(self, max_age: float) -> None:
        self.max_age = max_age
        self._carried = 0
        self._aged = 0
        self._counted: deque[tuple[float, int]] = deque()  # (monotonic time, position)

    def counted(self, position: int, at: float) -> None:
        """The counts up to ``position`` were published at ``at`` (monotonic seconds)."""
        if position and (not self._counted or position > self._counted[-1][1]):
            self._counted.append((at, position))

    def carried(self, position: int) -> None:
        """A /metrics response carried the counts up to ``position``."""
        self._carried = max(self._carried, position)

    def position(self, now: float) -> int:
        """The position to confirm now: carried, or counted at least ``max_age`` ago."""
        counted = self._counted
        while counted and counted[0][0] <= now - self.max_age:
            self._aged = max(self._aged, counted.popleft()[1])
        while counted and counted[0][1] <= self._carried:
            counted.popleft()
        return max(self._carried, self._aged)
