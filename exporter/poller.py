"""The collection loop of every queue: one collection at a time, capped jittered backoff, staleness.

A poller runs its queue's profile (exporter/profiles: SQL plus a counting mode) once per
interval through :func:`exporter.db.run_cycle`, keeps the exporter's own health figures, and
publishes an immutable view of the queue to the board after every collection. Every collection
is bounded by ``collect.timeout`` on the client side too, so a silent network cannot hold it for
the operating system's TCP timeout.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from exporter.board import Board
from exporter.collection_log import CollectionLog
from exporter.companions import Companion, Seat
from exporter.db import Database, DatabaseError, run_cycle
from exporter.db.catalog import inspect_table
from exporter.db.slot_drop import LeftoverSlot
from exporter.model import (
    ALONE,
    Health,
    HeldJobs,
    QueueStatus,
    QueueView,
    Snapshot,
    Standing,
    Tallies,
)
from exporter.model.exchange import CountingError, CountingMode
from exporter.profiles import profile_of
from exporter.redaction import redact
from exporter.settings import QueueSettings
from exporter.vocabulary import INTERNAL, TIMEOUT

log = logging.getLogger(__name__)

# Indexes are looked for again every this many cycles, so creating them later is noticed.
INDEX_CHECK_EVERY = 40
BACKOFF_FIRST = 1.0
# Share of collect.timeout a cycle may spend reading changes; the rest wait for the next cycle,
# which starts at once while the cursor is behind (catch-up in bounded steps, never a cliff).
READ_BUDGET_SHARE = 0.5


class Poller:
    """Runs collections in the background and publishes what the last successful one read."""

    def __init__(
        self,
        settings: QueueSettings,
        database: Database,
        *,
        board: Board | None = None,
        seat: Seat | None = None,
        companion: Companion | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        """``seat``: the queue's election (None: this exporter always collects); ``companion``:
        the change stream's follower of a queue counted from it."""
        self.settings = settings
        self.database = database
        self.board = board
        self.profile = profile_of(settings)
        self._monotonic = monotonic
        self._rng = rng or random.Random()
        collect = settings.collect
        self.labels = self.profile.make_labels(settings)
        self.tallies = Tallies(
            collect.duration_buckets, collect.wait_buckets, collect.latency_buckets
        )
        self.mode: CountingMode = self.profile.make_mode(settings, self.labels, self.tallies)
        self._behind = False
        self._log = CollectionLog()
        self._leftover = LeftoverSlot()  # a slot the logical mode left behind, said once
        self.health = Health()
        self.snapshot: Snapshot | None = None
        self.generation = 0  # bumped after every collection
        self._cycle = 0
        self._indexes_checked_at: int | None = None
        self._finished = asyncio.Condition()
        self.seat = seat
        self.companion = companion
        # Called (synchronously, on the event loop) after every collection: tests watch with it.
        self.listeners: list[Callable[[], None]] = []
        # The poller clears its error on success; the status page keeps the last one, and when.
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self._reason = ""  # of the last failed collection
        CollectionLog.started(self.profile.note, self.profile.retention, collect.interval)

    @property
    def behind(self) -> bool:
        """True when the last cycle stopped reading before its cursor reached its bound."""
        return self._behind

    def rebaseline(self) -> None:
        """Count from a new baseline at the next collection; what was counted stays counted.

        After a gap in which another exporter collected (or nobody did), the rows this one
        remembers are out of date: comparing with them would count the gap's transitions, not
        ours to count. Counters keep their values: a series never goes down after a gap.
        """
        self.mode = self.profile.make_mode(self.settings, self.labels, self.tallies)
        self._behind = False
        self._log.rebaselined()
        self.snapshot = None
        self._indexes_checked_at = None

    def _rebaselined(self) -> CountingMode:
        # A lost slot: the new slot's changes go to a new mode; the counters keep their values.
        self.rebaseline()
        return self.mode

    def fresh(self) -> bool:
        """True when the last success is recent enough to serve the queue gauges."""
        until = self._fresh_until()
        return until is not None and self._monotonic() <= until

    def _fresh_until(self) -> float | None:
        at = self.health.last_success_monotonic
        if at is None:
            return None
        return at + self.settings.collect.effective_staleness_limit

    def view(self) -> QueueView:
        """A copy of what /metrics shows of the queue now, safe to render off the event loop."""
        standing = self._standing()
        collect = self.settings.collect
        reachable = standing.reachable
        if not standing.collector:
            return QueueView(
                queue=self.settings.name, leader=False, snapshot=None, label_of={}, labels=(),
                folded=0, tallies=None, health=Health(up=reachable), up=reachable,
                collection_timeout=collect.timeout, tracked=0, collector=False,
            )  # fmt: skip
        fresh = self.fresh()
        snapshot = self.snapshot if fresh else None
        job_types = (
            [*snapshot.active, *(snapshot.dead or {}), *(snapshot.done or {})] if snapshot else []
        )
        health = replace(
            self.health,
            errors=Counter(self.health.errors),
            query_durations=dict(self.health.query_durations),
            missing_indexes=dict(self.health.missing_indexes),
        )
        return QueueView(
            queue=self.settings.name,
            leader=standing.holding,
            snapshot=snapshot,
            label_of={job_type: self.labels.label(job_type) for job_type in job_types},
            labels=tuple(self.labels.labels),
            folded=len(self.labels.folded),
            tallies=self.tallies.copy(),
            health=health,
            up=self.health.up and fresh,
            collection_timeout=collect.timeout,
            tracked=self.mode.tracked,
            held=self._held(),
            coverage=self.profile.coverage_for(self.settings),
            fresh_until=self._fresh_until(),
            position=self.mode.stream.position if self.mode.stream is not None else None,
            slot=self.companion.slot() if self.companion is not None else None,
            stream=self.companion.stream_health() if self.companion is not None else None,
        )

    def _held(self) -> HeldJobs | None:
        jobs = self.mode.held
        return None if jobs is None else HeldJobs(jobs, self.settings.collect.max_held_jobs)

    def _standing(self) -> Standing:
        return self.seat.standing() if self.seat is not None else ALONE

    def status(self) -> QueueStatus:
        """The queue as the status page, /readyz and /metrics show it."""
        view = self.view()
        standing = self._standing()
        if not standing.collector:
            # A standby is ready while it can reach the database to take over.
            ready = None if standing.reachable else standing.why or "starting"
        elif view.up:
            ready = None
        else:
            ready = self.health.last_error or "no successful collection yet"
        return QueueStatus(
            view, ready, self.last_error, self.last_error_at,
            profile=self.profile.name, table=self.profile.watched_table(self.settings),
            counting=self.settings.collect.counting,
        )  # fmt: skip

    def retune(self) -> None:
        """Hand the counting mode the live settings of a reload (its counters are kept)."""
        if self.profile.retune is not None:
            self.profile.retune(self.settings, self.mode)

    def publish(self) -> None:
        """Hand the queue's current status to the board."""
        if self.board is not None:
            self.board.publish(self.status())

    async def run(self) -> None:
        """Collect forever: on the interval when healthy, with capped jittered backoff when not."""
        interval = self.settings.collect.interval
        failures = 0
        while True:
            started = self._monotonic()
            task = asyncio.create_task(self.collect_once())
            next_tick = started + interval
            try:
                while True:
                    done, _ = await asyncio.wait(
                        {task}, timeout=max(0.0, next_tick - self._monotonic())
                    )
                    if done:
                        break
                    # The tick came while the collection is still running: skip it, never overlap.
                    self.health.skipped += 1
                    next_tick += interval
            except asyncio.CancelledError:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise
            if task.result():
                failures = 0
                # Behind after a backlog: read the next bounded step now rather than a tick later.
                wake_at = self._monotonic() if self.behind else next_tick
            else:
                failures += 1
                delay = self._backoff(failures)
                wake_at = started + delay
                # Every failed collection, while the WARN line says only the first of a kind.
                log.debug(
                    f"backoff after a failed collection: next try in {delay:.1f} s",
                    extra={"fields": {"reason": self._reason, "failures": failures,
                                      "next_try_seconds": round(delay, 3)}},
                )  # fmt: skip
            await asyncio.sleep(max(0.0, wake_at - self._monotonic()))

    def _backoff(self, failures: int) -> float:
        # Doubling from 1 s, capped at the interval so recovery is noticed within one interval;
        # jitter keeps replicas from retrying in lock step.
        cap = self.settings.collect.interval
        delay: float = min(cap, BACKOFF_FIRST * 2.0 ** (failures - 1))
        return delay * self._rng.uniform(0.5, 1.0)

    async def collect_once(self) -> bool:
        """Run one collection; True on success. Never raises (except cancellation)."""
        started = self._monotonic()
        # The guard and the collection share one deadline: a silent network cannot hold the
        # guard's check for longer than a collection could take.
        deadline = asyncio.get_running_loop().time() + self.settings.collect.timeout
        if self.seat is not None:
            try:
                async with asyncio.timeout_at(deadline):
                    allowed = await self.seat.guard()
            except TimeoutError:
                allowed = True  # the collection times out at once and is counted as such
            if not allowed:
                return self.health.up
        health = self.health
        health.collections += 1
        self._cycle += 1
        try:
            async with asyncio.timeout_at(deadline):
                await self._collect()
        except DatabaseError as exc:
            # An outage or a timeout: the mode's cursor is intact, and once the database is
            # back it counts what happened meanwhile.
            self._failed(exc.reason, str(exc))
        except CountingError as exc:
            # Counting exactly is impossible with what this role sees: the collection fails,
            # visibly, and counting starts over once the cause is gone; what was counted stays.
            self.rebaseline()
            self._failed(exc.reason, f"{self.profile.name} profile: {exc}")
        except TimeoutError:
            timeout = self.settings.collect.timeout
            self._failed(TIMEOUT, f"collection exceeded collect.timeout={timeout}s")
        except Exception as exc:
            log.exception("collection failed unexpectedly")
            self.rebaseline()  # a mode that failed half-way cannot be trusted to go on
            self._failed(INTERNAL, f"{type(exc).__name__}: {exc}")
        else:
            if not health.up:
                log.info(
                    "collection succeeded", extra={"fields": {"tracked_jobs": self.mode.tracked}}
                )
            health.up = True
            health.last_error = None
            health.last_success_monotonic = self._monotonic()
        finally:
            health.collection_duration = self._monotonic() - started
            self.generation += 1
            self.publish()
            for listener in self.listeners:
                listener()
            async with self._finished:
                self._finished.notify_all()
        return health.up

    async def _collect(self) -> None:
        if (
            self._indexes_checked_at is None
            or self._cycle - self._indexes_checked_at >= INDEX_CHECK_EVERY
        ):
            await self._check_indexes()
        if self.companion is not None:
            await self.companion.feed(self.mode, self._rebaselined)
        budget = self.settings.collect.timeout * READ_BUDGET_SHARE
        collected, durations = await run_cycle(self.database, self.mode, budget)
        self._log.collected(collected, self.mode.tracked)
        self._log.held(self._held())
        self._behind = collected.behind
        for job_type in collected.snapshot.active:
            self.labels.label(job_type)
        self.snapshot = collected.snapshot
        health = self.health
        # The last run of each query: some (the dead count) do not run every cycle.
        health.query_durations = {**health.query_durations, **durations}
        health.last_success_at = collected.snapshot.taken_at
        health.lag_seconds = collected.lag
        health.rows_read += collected.rows_read
        log.debug(
            "collected",
            extra={"fields": {"duration_seconds": round(sum(durations.values()), 6),
                              "rows_read": collected.rows_read,
                              "lag_seconds": round(collected.lag, 3),
                              "tracked_jobs": self.mode.tracked}},
        )  # fmt: skip

    async def _check_indexes(self) -> None:
        profile = self.profile
        if profile.check_table is not None:
            # Before a fresh mode's first cycle too: its SQL follows the table's real types.
            await profile.check_table(
                self.settings, functools.partial(inspect_table, self.database), self.mode
            )
        table = profile.watched_table(self.settings)
        required = profile.indexes(self.settings)
        missing = await self.database.missing_indexes(table, required)
        self.health.missing_indexes = {name: int(name in missing) for name in required}
        self._indexes_checked_at = self._cycle
        for name in missing:
            self._log.missing_index(name, self.settings.index_command)
        if self.settings.collect.counting != "logical" and profile.logical_target is not None:
            await self._leftover.look(self.database, self.settings)

    def _failed(self, reason: str, message: str) -> None:
        message = redact(message)  # stored for the status page and /readyz: redacted once, here
        health = self.health
        self._reason = reason
        if health.up or health.last_error != message:
            log.warning("collection failed", extra={"fields": {"reason": reason, "err": message}})
        health.up = False
        health.errors[reason] += 1
        health.last_error = message
        self.last_error, self.last_error_at = message, time.time()

    async def wait_for_collections(self, count: int, limit: float = 30.0) -> None:
        """Wait until at least ``count`` collections have finished (tests use this)."""
        async with asyncio.timeout(limit), self._finished:
            await self._finished.wait_for(lambda: self.generation >= count)

    async def wait_for_success(self, limit: float = 30.0) -> None:
        """Wait for the next successful collection."""
        target = self.generation
        async with asyncio.timeout(limit), self._finished:
            await self._finished.wait_for(lambda: self.generation > target and self.health.up)
