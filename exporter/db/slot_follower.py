"""The leader's side of a logical queue: the change stream's thread, fed to the counting mode.

Before each cycle the poller awaits :meth:`Follower.feed`: it hands the counting mode what the
stream's thread folded since (whole transactions, in commit order), reports a stream that ended
(one WARNING per new failure, counted by reason, and the collection fails with reason
``stream``), starts a new run when none reads, and tells the stream how far it may confirm a
slot nothing scraped. A /metrics response awaits :meth:`Follower.served` before it leaves: the
slot is confirmed at what the response carries, so a leader killed right after a scrape leaves
its successor nothing a scraper saw. Counts no scrape carried are confirmed anyway once twice
the longest recent gap between scrapes has passed (:class:`Confirmation`), so a slow Prometheus
keeps its tail and a missing one cannot pin WAL for long. The follower also reads the slot's
health from pg_replication_slots, and where the stream replaced a lost slot (a gap) it has the
mode start over from a new baseline. Only the elected collector runs cycles, so only it streams;
:meth:`Follower.stop` ends the thread when it steps down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from itertools import pairwise

from exporter.db.change_stream import ChangeStream, Gap, StreamFailure, StreamOptions
from exporter.db.pool import Database, DatabaseError, translate
from exporter.model import CountingMode, SlotHealth, StreamHealth
from exporter.model.row_changes import Batch, StreamCounting
from exporter.vocabulary import INTERNAL

log = logging.getLogger(__name__)

# How long a /metrics response waits for the stream to send the position it carries: a few
# milliseconds on a live connection; past this the response leaves anyway (the stream may be
# reconnecting), the position goes with the next feedback, and the wait is counted.
SERVED_WAIT = 1.0
# Counts no scrape carried are confirmed anyway once they are this many intervals old, or twice
# the longest recent gap between scrapes if that is longer...
CONFIRM_AFTER_INTERVALS = 3
# ...but never later than this (nor, before two scrapes have shown how often they come, any
# sooner): WAL stays bounded, and a Prometheus that scrapes every few minutes still has its
# tail confirmed only once it carried it.
MAX_CONFIRM_AGE = 600.0
SCRAPES_KEPT = 16  # response times remembered to judge the gap between scrapes
# One autocommit catalog read per cycle, on the leader only (never on the scrape path).
SLOT_HEALTH = """
SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint AS lag_bytes,
       (pg_current_wal_lsn() - restart_lsn)::bigint AS retained_bytes,
       wal_status,
       safe_wal_size
  FROM pg_replication_slots
 WHERE slot_name = $1
"""


class Follower:
    """Runs one queue's change stream while this exporter collects it."""

    def __init__(
        self,
        options: StreamOptions,
        interval: float,
        monotonic: Callable[[], float] = time.monotonic,
        database: Database | None = None,
    ) -> None:
        self.stream = ChangeStream(options)
        self.confirmation = Confirmation(CONFIRM_AFTER_INTERVALS * interval)
        self._monotonic = monotonic
        self.database = database  # the pool the slot's health is read with
        # The end of the last commit handed to a mode: after a reconnect the server sends
        # again what was not confirmed, and a mode rebuilt meanwhile must not count it twice.
        self.position = 0
        self.gaps = 0  # gaps taken (a new baseline each); the stream may have counted more
        # Carried positions up to here are of a lost slot: never confirmed on its successor.
        self._carried_floor = 0
        # The slot as the server reported it at the last feed; None before the slot exists,
        # or when the database did not answer.
        self.health: SlotHealth | None = None
        self.restarts: Counter[str] = Counter()  # runs that ended on an error, by reason
        self.confirm_timeouts = 0  # responses that left before their position was sent
        self._reported: StreamFailure | None = None  # the last failure said at WARNING
        self._run_seen = 0  # the run found reading at the last feed
        # Responses waiting until the stream has sent their position: (position, future).
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._busy = asyncio.Lock()  # a feed and a stop never overlap

    async def feed(self, mode: CountingMode, rebaseline: Callable[[], CountingMode]) -> None:
        """Hand ``mode`` what the stream folded since the last feed (after a gap, to the mode
        ``rebaseline`` returns); start the stream when no run reads; DatabaseError (reason
        ``stream``) when the run ended on an error since the last feed."""
        async with self._busy:
            counting = _stream_of(mode)
            stream = self.stream
            # Before the take, so that a failed read never drops what the take would have handed
            # over; also while the stream fails, whose lag says why.
            await self._read_health()
            items = stream.take()
            ended = stream.ended()
            if ended is not None:
                items += ended.items
            counting = self._count(items, counting, rebaseline)
            now = self._monotonic()
            self.confirmation.counted(self.position, now)
            stream.confirm(self.confirmation.position(now), self.gaps)
            if ended is None and stream.running:
                if stream.runs == self._run_seen:
                    self._reported = None  # one run read a whole interval: a failure is news
                self._run_seen = stream.runs
            elif ended is not None:
                self._ended(ended.failure)
            if not stream.running:
                self._loop = asyncio.get_running_loop()
                stream.on_feedback = self._sent
                stream.start(counting.fold(), self.position)
            if ended is not None:
                raise ended.failure.error()

    def _count(
        self,
        items: list[Batch | Gap],
        counting: StreamCounting,
        rebaseline: Callable[[], CountingMode],
    ) -> StreamCounting:
        """Count ``items`` in order; the mode that counts what comes next (a new one after a
        gap)."""
        for item in items:
            if isinstance(item, Gap):
                counting = _stream_of(rebaseline())
                self._new_baseline()
            elif item.position > self.position:
                counting.take(item)
                self.position = item.position
        return counting

    def _ended(self, failure: StreamFailure) -> None:
        self.restarts[failure.reason] += 1
        fields = {"slot": self.stream.options.slot, "reason": failure.reason,
                  "err": failure.message}  # fmt: skip
        if failure != self._reported:
            log.warning("the change stream failed; it starts again", extra={"fields": fields})
            self._reported = failure
        else:
            log.debug("the change stream failed again", extra={"fields": fields})

    async def served(self, position: int) -> None:
        """A /metrics response is about to carry the counts up to ``position``: confirm the slot
        there, and return once the stream has sent that to the server (or after SERVED_WAIT).
        What remains: a response lost after it left, and a second scraper that missed it."""
        now = self._monotonic()
        self.confirmation.scraped(now)
        # A position at or below the floor is of a lost slot: never one to confirm its
        # successor at.
        if position <= self._carried_floor:
            return
        self.confirmation.carried(min(position, self.position))
        target = self.confirmation.position(now)
        if target <= self.stream.confirmed_lsn or self.stream.gaps != self.gaps:
            return  # sent already; or a gap not taken yet, whose positions are the old slot's
        if not self.stream.running:
            # Between two runs (one failed, the next starts at the next cycle): the position is
            # kept, and the next run's first feedback sends it. Nothing to wait for now.
            self.stream.confirm(target, self.gaps)
            return
        sent = asyncio.get_running_loop().create_future()
        self._waiters.append((target, sent))
        self.stream.confirm(target, self.gaps)
        try:
            if target > self.stream.confirmed_lsn:  # the thread may have been quicker
                await asyncio.wait_for(sent, SERVED_WAIT)
        except TimeoutError:
            self.confirm_timeouts += 1
            log.debug(
                "a /metrics response left before the stream confirmed what it carries",
                extra={"fields": {"slot": self.stream.options.slot, "position": target}},
            )
        finally:
            self._waiters = [(p, f) for p, f in self._waiters if f is not sent]

    def _sent(self, position: int) -> None:
        # On the stream's thread: the futures belong to the event loop.
        loop = self._loop
        if loop is not None and self._waiters:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(self._release, position)

    def _release(self, position: int) -> None:
        for waited, future in self._waiters:
            if waited <= position and not future.done():
                future.set_result(None)

    def _new_baseline(self) -> None:
        # The new slot's positions start anew (on a promoted standby they may even be lower
        # than the old slot's): nothing of the old one may filter or confirm them.
        self.gaps += 1
        self._carried_floor = max(self._carried_floor, self.position)
        self.position = 0
        self.confirmation = self.confirmation.anew()

    async def _read_health(self) -> None:
        if self.database is None:
            return
        try:
            async with self.database.session() as conn:
                row = await conn.fetchrow(SLOT_HEALTH, self.stream.options.slot)
        except Exception as exc:
            self.health = None
            raise translate(exc) from None
        if row is None:
            self.health = None
            return
        safe = row["safe_wal_size"]
        self.health = SlotHealth(
            lag_bytes=max(0, row["lag_bytes"] or 0),
            retained_bytes=max(0, row["retained_bytes"] or 0),  # NULL once lost
            wal_status=row["wal_status"] or "",
            safe_wal_bytes=None if safe is None else max(0, int(safe)),
            gaps=self.stream.gaps,
        )

    def slot(self) -> SlotHealth | None:
        """The slot as the server reported it at the last feed (None: not read, or no slot)."""
        return self.health

    def stream_health(self) -> StreamHealth:
        """The stream's own figures since start."""
        return StreamHealth(restarts=dict(self.restarts), confirm_timeouts=self.confirm_timeouts)

    async def stop(self) -> None:
        """End the stream's thread (a standby must leave the slot to the new leader)."""
        async with self._busy:
            ended = await asyncio.to_thread(self.stream.stop)
            if not ended:
                log.warning(
                    "the change stream's thread did not stop in time; no new one starts "
                    "before it has",
                    extra={"fields": {"slot": self.stream.options.slot}},
                )
            if self.stream.gaps > self.gaps:  # its Gap went with what nobody took
                self._new_baseline()
                self.gaps = self.stream.gaps


def _stream_of(mode: CountingMode) -> StreamCounting:
    counting = mode.stream
    if counting is None:  # the profile made a polling mode for a queue that streams
        raise DatabaseError(INTERNAL, "the counting mode does not count from a change stream")
    return counting


class Confirmation:
    """Where the slot may be confirmed: the last position a /metrics response carried, or one
    counted so long ago that no scrape is coming for it.

    "So long ago" follows the scrapes: ``floor`` seconds (a few collection intervals), or twice
    the longest gap between the recent scrapes if that is longer, at most MAX_CONFIRM_AGE. With
    Prometheus' default one-minute scrape and a 15 s interval, counts wait two minutes for a
    scrape to carry them, not 45 s (which would confirm, and lose with a killed leader, a tail
    no scrape saw). Before two scrapes were seen, MAX_CONFIRM_AGE.
    """

    def __init__(self, floor: float) -> None:
        self.floor = floor
        self._carried = 0
        self._aged = 0
        self._counted: deque[tuple[float, int]] = deque()  # (monotonic time, position)
        self._scrapes: deque[float] = deque(maxlen=SCRAPES_KEPT)

    def anew(self) -> Confirmation:
        """A confirmation for a new slot that keeps what was learnt of the scrapes."""
        fresh = Confirmation(self.floor)
        fresh._scrapes = self._scrapes
        return fresh

    @property
    def max_age(self) -> float:
        """How old uncarried counts get before they are confirmed anyway."""
        longest = max((b - a for a, b in pairwise(self._scrapes)), default=None)
        if longest is None:
            return max(self.floor, MAX_CONFIRM_AGE)
        return min(max(self.floor, 2 * longest), max(self.floor, MAX_CONFIRM_AGE))

    def scraped(self, at: float) -> None:
        """A /metrics response left at ``at`` (monotonic seconds)."""
        self._scrapes.append(at)

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
        max_age = self.max_age
        while counted and counted[0][0] <= now - max_age:
            self._aged = max(self._aged, counted.popleft()[1])
        while counted and counted[0][1] <= self._carried:
            counted.popleft()
        return max(self._carried, self._aged)
