"""The collection loop: one collection at a time, capped jittered backoff, staleness.

The poller owns the latest snapshot, the tracker and the exporter's own health figures; the
HTTP side only reads them. Every collection is bounded by ``collect.timeout`` on the client
side too, so a silent network cannot hold it for the operating system's TCP timeout.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import replace

from exporter.counting.changefeed import ChangeFeed
from exporter.counting.results import ResultPaths
from exporter.counting.tracker import Tracker, TrackerOptions
from exporter.db import Database, DatabaseError
from exporter.model import Health, JobTypeLabels, QueueView, Snapshot, Tallies
from exporter.settings import QueueSettings
from exporter.vocabulary import INDEX_FILE, REQUIRED_INDEXES

log = logging.getLogger(__name__)

# Purged active rows are looked for every this many cycles (a primary-key lookup per job).
PURGE_CHECK_EVERY = 20
# Indexes are looked for again every this many cycles, so creating them later is noticed.
INDEX_CHECK_EVERY = 40
# Counting the dead letter costs O(dead rows) (9 ms for 50,000 at 10M rows in the benchmark);
# in between recounts the gauge follows the deaths and requeues the tracker sees. A recount
# also absorbs what the tracker cannot see (dead rows purged, deaths stamped before start).
DEAD_RECOUNT_EVERY = 20
BACKOFF_FIRST = 1.0
# Share of collect.timeout a cycle may spend reading changes; the rest wait for the next cycle,
# which starts at once while the cursor is behind (catch-up in bounded steps, never a cliff).
READ_BUDGET_SHARE = 0.5


class Poller:
    """Runs collections in the background and keeps what the last successful one read."""

    def __init__(
        self,
        settings: QueueSettings,
        database: Database,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.database = database
        self._monotonic = monotonic
        self._rng = rng or random.Random()
        collect = settings.collect
        self.labels = JobTypeLabels(collect.job_types, collect.max_job_types)
        self.tallies = Tallies(
            collect.duration_buckets, collect.wait_buckets, collect.latency_buckets
        )
        self.tracker = self._new_tracker()
        self.feed = self._new_feed()
        self._hidden_warned = False
        self.health = Health()
        self.snapshot: Snapshot | None = None
        self.generation = 0  # bumped after every collection, for render caches
        self._cycle = 0
        self._indexes_checked_at: int | None = None
        self._dead: dict[int, int] = {}
        self._dead_counted_at: int | None = None
        self._finished = asyncio.Condition()
        # Called (synchronously, on the event loop) after every collection.
        self.listeners: list[Callable[[], None]] = []
        # Awaited before every collection: False means this exporter may not collect now (it
        # no longer holds the queue's advisory lock), and nothing is read or counted.
        self.guard: Callable[[], Awaitable[bool]] | None = None

    def _new_tracker(self) -> Tracker:
        collect = self.settings.collect
        options = TrackerOptions(
            commit_lag_tolerance=collect.commit_lag_tolerance,
            deadline_prefix=collect.deadline_error_prefix,
            lease_marker=collect.lease_expired_marker,
            paths=ResultPaths(
                collect.duration_path,
                collect.cost_ai_path,
                collect.cost_proxy_path,
                collect.cost_total_path,
            ),
        )
        return Tracker(options, self.labels, self.tallies)

    def _new_feed(self) -> ChangeFeed:
        collect = self.settings.collect
        return ChangeFeed(
            tolerance=collect.commit_lag_tolerance, max_rows=collect.max_rows_per_query
        )

    @property
    def behind(self) -> bool:
        """True when the last cycle stopped reading before the cursor reached its bound."""
        return not self.feed.caught_up

    def rebaseline(self) -> None:
        """Count from a new baseline at the next collection; what was counted stays counted.

        After a gap in which another exporter collected (or nobody did), the rows this one
        remembers are out of date: comparing with them would count the gap's transitions,
        which are not ours to count. Counters keep their values, so a series that comes back
        after a leadership gap never goes down.
        """
        self.tracker = self._new_tracker()
        self.feed = self._new_feed()
        self.snapshot = None
        self._dead_counted_at = None
        self._indexes_checked_at = None

    def fresh(self) -> bool:
        """True when the last success is recent enough to serve the queue gauges."""
        at = self.health.last_success_monotonic
        if at is None:
            return False
        return self._monotonic() - at <= self.settings.collect.effective_staleness_limit

    def verdict(self) -> tuple[bool, bool]:
        """(up, fresh) as /metrics must show them now: the part of it that may never lag."""
        fresh = self.fresh()
        return (self.health.up and fresh, fresh)

    def view(self) -> QueueView:
        """Copy what /metrics shows, so rendering can run off the event loop."""
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
            leader=True,
            snapshot=snapshot,
            label_of={job_type: self.labels.label(job_type) for job_type in job_types},
            labels=tuple(self.labels.labels),
            folded=len(self.labels.folded),
            tallies=self.tallies.copy(),
            health=health,
            up=self.health.up and fresh,
            collection_timeout=self.settings.collect.timeout,
            tracked=self.tracker.tracked,
        )

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
                wake_at = started + self._backoff(failures)
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
        if self.guard is not None:
            try:
                async with asyncio.timeout_at(deadline):
                    allowed = await self.guard()
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
            self._failed(exc.reason, str(exc))
        except TimeoutError:
            self._failed(
                "timeout", f"collection exceeded collect.timeout={self.settings.collect.timeout}s"
            )
        except Exception as exc:
            log.exception("collection failed unexpectedly")
            self._failed("internal", f"{type(exc).__name__}: {exc}")
        else:
            if not health.up:
                log.info(
                    "collection succeeded", extra={"fields": {"tracked_jobs": self.tracker.tracked}}
                )
            health.up = True
            health.last_error = None
            health.last_success_monotonic = self._monotonic()
        finally:
            health.collection_duration = self._monotonic() - started
            self.generation += 1
            for listener in self.listeners:
                listener()
            async with self._finished:
                self._finished.notify_all()
        return health.up

    async def _collect(self) -> None:
        collect = self.settings.collect
        if (
            self._indexes_checked_at is None
            or self._cycle - self._indexes_checked_at >= INDEX_CHECK_EVERY
        ):
            await self._check_indexes()
        baseline = not self.tracker.started
        if baseline and self.feed.started:
            self.feed = self._new_feed()  # an earlier baseline failed after planning the cursor
        recount_dead = (
            baseline
            or self._dead_counted_at is None
            or self._cycle - self._dead_counted_at >= DEAD_RECOUNT_EVERY
        )
        check_ids = None
        if not baseline:
            self.tracker.begin()
            if self._cycle % PURGE_CHECK_EVERY == 0:
                check_ids = self.tracker.active_ids_not_in_window() or None
        paths = self.tracker.options.paths
        reading = await self.database.read(
            since=None,
            stuck_threshold=collect.stuck_threshold,
            done_count=collect.done_count,
            count_dead=recount_dead,
            check_ids=check_ids,
            feed=self.feed,
            consume=self.tracker.feed,
            budget=collect.timeout * READ_BUDGET_SHARE,
            paths=(paths.duration_ms, paths.ai_usd, paths.proxy_usd, paths.total_usd),
        )
        self._note_horizon()
        now = reading.snapshot.taken_at
        if baseline:
            origin = self.feed.origin.timestamp() if self.feed.origin is not None else None
            self.tracker.baseline(now, reading.active or [], [], origin=origin)
            log.info(
                "baseline taken; counting transitions from now on",
                extra={"fields": {"active_jobs": len(reading.active or [])}},
            )
        else:
            if check_ids and reading.existing is not None:
                # Rows read this cycle exist; anything else missing from the answer was purged.
                purged = [i for i in check_ids if i not in reading.existing]
                self.tracker.forget(purged)
            self.tracker.finish(now, floor=self.feed.floor())
        if reading.snapshot.dead is not None:
            self._dead = dict(reading.snapshot.dead)
            self._dead_counted_at = self._cycle
        else:
            for job_type, change in self.tracker.dead_delta.items():
                self._dead[job_type] = max(0, self._dead.get(job_type, 0) + change)
        self.tracker.dead_delta.clear()
        snapshot = replace(reading.snapshot, dead=dict(self._dead))
        for job_type in [*snapshot.active, *self._dead]:
            self.labels.label(job_type)
        self.snapshot = snapshot
        # The last run of each query: the dead count does not run every cycle.
        self.health.query_durations = {**self.health.query_durations, **reading.durations}
        self.health.last_success_at = now
        self.health.lag_seconds = self.feed.lag()
        self.health.rows_read = self.feed.rows_read

    def _note_horizon(self) -> None:
        horizon = self.feed.horizon
        hidden = bool(horizon is not None and horizon.hidden)
        if hidden and not self._hidden_warned:
            log.warning(
                "other sessions are hidden in pg_stat_activity: late commits are counted only "
                "within collect.commit_lag_tolerance; grant pg_read_all_stats to remove the limit",
                extra={"fields": {"hidden_sessions": horizon.hidden if horizon else 0}},
            )
        self._hidden_warned = hidden

    async def _check_indexes(self) -> None:
        missing = await self.database.missing_indexes()
        self.health.missing_indexes = {name: int(name in missing) for name in REQUIRED_INDEXES}
        self._indexes_checked_at = self._cycle
        for name in missing:
            log.warning(
                "index missing: per-cycle queries will scan the table; "
                "create it from the shipped file",
                extra={"fields": {"index": name, "file": INDEX_FILE}},
            )

    def _failed(self, reason: str, message: str) -> None:
        health = self.health
        if health.up or health.last_error != message:
            log.warning("collection failed", extra={"fields": {"reason": reason, "error": message}})
        health.up = False
        health.errors[reason] += 1
        health.last_error = message

    async def wait_for_collections(self, count: int, limit: float = 30.0) -> None:
        """Wait until at least ``count`` collections have finished (tests use this)."""
        async with asyncio.timeout(limit), self._finished:
            await self._finished.wait_for(lambda: self.generation >= count)

    async def wait_for_success(self, limit: float = 30.0) -> None:
        """Wait for the next successful collection."""
        target = self.generation
        async with asyncio.timeout(limit), self._finished:
            await self._finished.wait_for(lambda: self.generation > target and self.health.up)
