"""One active collector per queue: exporters watching the same table elect one through a lock.

The holder of the queue's session-level advisory lock (see :class:`~exporter.db.LockSession`; the
queues of one database share one lock session, one lock per table)
is the queue's collector: it runs the collection queries and exports the queue's series. The
others stand by: they run no collection query, export only ``jobqueue_up`` and
``jobqueue_exporter_leader 0``, and try for the lock every ``retry`` seconds. PostgreSQL frees
the lock when the holder's session ends (process killed, connection cut, server restarted), so
a standby takes over within one retry.

An exporter is the queue's collector until it sees the lock held by another exporter. So one
that starts while the database is down, or whose lock session died because the database went
away, keeps collecting: its collections fail and are counted as failures (the outage must show),
and it takes the lock before its first successful collection, because the lock is checked (and
taken) before every collection. Only if another exporter holds the lock does it stand down,
withdraw the queue's series at once, and count from a new baseline when it leads again, so no
transition is counted by two exporters. A standby that just saw the database come back waits one
interval before trying, so after a server restart the collector that was counting usually keeps
counting, without a gap.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from exporter.db import DatabaseError, TableLock
from exporter.model import Standing

log = logging.getLogger(__name__)


class Election:
    """Stands for one queue's collector role, and notices when another exporter has it."""

    def __init__(
        self,
        queue: str,
        lock: TableLock,
        retry: float,
        grace: float,
        on_change: Callable[[bool, bool], None],
    ) -> None:
        self.queue = queue
        self.lock = lock
        self.retry = retry
        self.grace = grace  # a standby's pause after the database came back
        self.on_change = on_change  # (collector, rebaseline)
        self.collector = True  # until another exporter is seen holding the lock
        self.reachable = False  # the lock's session reached the database at the last try
        # The lock is really held (jobqueue_exporter_leader): an exporter that has not reached
        # the database yet collects, to count the outage, but leads nothing.
        self.holding = False
        self.last_error: str | None = None
        # Another exporter held the lock since this one last collected: our memory of the
        # rows is from before its term, so our next term must start from a new baseline.
        self._other_led = False

    def standing(self) -> Standing:
        """Where this exporter stands now."""
        return Standing(self.collector, self.holding, self.reachable, self.last_error)

    async def run(self) -> None:
        """Stand by until the lock is free; the collector's checks happen in :meth:`guard`."""
        outage = False  # the database was reachable once, then not
        try:
            while True:
                if not self.collector:
                    if outage and await self._reach():
                        outage = False
                        await asyncio.sleep(self.grace)  # let the old collector go first
                    was_reachable = self.reachable
                    await self._try()
                    outage = outage or (was_reachable and not self.reachable)
                await asyncio.sleep(self.retry)  # pacing between attempts
        finally:
            await self.lock.close()

    async def guard(self) -> bool:
        """Before each collection: True when this exporter may collect.

        The lock is checked (and taken back if its session ended) before every collection, so a
        collector never counts a cycle after another exporter took over.
        """
        if not self.collector:
            return False
        if await self.lock.holds():
            return True
        try:
            acquired = await self.lock.try_acquire()
        except DatabaseError as exc:
            # Unreachable: collect anyway, so the failure is counted and jobqueue_up says 0.
            log.debug(
                "leader election: lock not taken, the database cannot be reached; collecting "
                "anyway to count the outage",
                extra={"fields": {"queue": self.queue, "reason": exc.reason, "err": str(exc)}},
            )
            self.reachable = False
            self._hold(False)
            return True
        self.reachable = True
        self._hold(acquired)
        if acquired:
            return True
        self._other_led = True
        self._set(False, "another exporter holds the queue's advisory lock")
        return False

    def _hold(self, holding: bool) -> None:
        if holding != self.holding:
            log.debug(
                "advisory lock taken" if holding else "advisory lock not held",
                extra={"fields": {"queue": self.queue, "table": self.lock.table,
                                  "leader": holding}},
            )  # fmt: skip
        self.holding = holding

    async def _reach(self) -> bool:
        try:
            await self.lock.ping()
        except DatabaseError:
            return False
        return True

    async def _try(self) -> None:
        try:
            acquired = await self.lock.try_acquire()
        except DatabaseError as exc:
            log.debug(
                f"leader election: lock attempt failed; next try in {self.retry:.1f} s",
                extra={"fields": {"queue": self.queue, "reason": exc.reason, "err": str(exc)}},
            )
            if self.reachable or self.last_error != str(exc):
                log.warning(
                    "leader election: cannot reach the database",
                    extra={"fields": {"queue": self.queue, "reason": exc.reason, "err": str(exc)}},
                )
            self.reachable = False
            self.last_error = str(exc)
            return
        self.reachable = True
        self.last_error = None
        if not acquired:
            log.debug(
                f"leader election: another exporter holds the lock; next try in {self.retry:.1f} s",
                extra={"fields": {"queue": self.queue, "table": self.lock.table}},
            )
        self._hold(acquired)
        if acquired:
            self._set(True, "took the queue's advisory lock")
        else:
            self._other_led = True

    def _set(self, collector: bool, why: str) -> None:
        if collector == self.collector:
            return
        self.collector = collector
        rebaseline = collector and self._other_led
        if collector:
            self._other_led = False
        log.info(
            "collecting the queue" if collector else "standing by",
            extra={"fields": {"queue": self.queue, "why": why, "new_baseline": rebaseline}},
        )
        self.on_change(collector, rebaseline)
