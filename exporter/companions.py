"""What runs beside a queue's poller, as the poller sees it: the queue's election and a logical
queue's change stream. The runtime hands them to the poller when it builds it
(exporter/runtime.py); these protocols are all the poller knows of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from exporter.model import CountingMode, SlotHealth, Standing, StreamHealth


class Seat(Protocol):
    """The queue's election as its poller sees it (exporter/election.py)."""

    async def guard(self) -> bool:
        """Before each collection: False when another exporter collects the queue now."""
        ...

    def standing(self) -> Standing:
        """Where this exporter stands now."""
        ...


class Companion(Protocol):
    """What runs beside the poller of a queue counted from its change stream: the slot's
    follower (exporter/db/slot_follower.py), fed before each cycle."""

    async def feed(self, mode: CountingMode, rebaseline: Callable[[], CountingMode]) -> None:
        """Hand the mode what committed since, after a lost slot to ``rebaseline()``'s."""
        ...

    def slot(self) -> SlotHealth | None:
        """The slot as the server reported it at the last feed."""
        ...

    def stream_health(self) -> StreamHealth:
        """The stream's own figures since start (restarts, confirmation waits cut short)."""
        ...
