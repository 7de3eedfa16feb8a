"""The exporter's own Poller on a preset's database, and what /metrics showed after each collection.

Nothing of the pipeline is written here: the queue's settings name the preset's profile, and
:class:`exporter.poller.Poller` does the rest as `jobqueue-exporter run` does it (the pooled
read-only session, db.run_cycle with its read budget and error translation, the preset's
counting mode, snapshot_of, the label cap). After every collection the poller's view is
rendered by the metrics collector and parsed back, so a test compares the library's own record
with what a scrape would have shown at that moment.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from exporter.counting.reader import LedgerReader
from exporter.db import Database
from exporter.metrics import render
from exporter.poller import Poller
from exporter.profiles.pgqueuer import HEARTBEAT_REASON
from exporter.runtime import connect_options
from exporter.settings import CollectSettings, DatabaseSettings, QueueSettings
from exporter.vocabulary import ERROR, LEASE_EXPIRED, LOCK, TIMEOUT
from tests.helpers import QUEUE, Samples, parse

R = TypeVar("R", bound=LedgerReader)
# Failures after which the mode's cursor is intact and counting goes on exactly (a slow,
# shared machine, or a library's DDL holding a lock): the poller retries, the test goes on.
# Any other failure (a counting error, a query the database refuses) fails the test at once.
RETRIED = frozenset({TIMEOUT, LOCK})
_STATUS_FIGURES = {"pending": "pending", "running": "running", "dead": "held"}
_GAUGE_FIGURES = {
    "jobqueue_jobs_scheduled": "scheduled",
    "jobqueue_oldest_pending_age_seconds": "oldest_pending_age",
    "jobqueue_oldest_ready_wait_seconds": "oldest_ready_wait",
    "jobqueue_running_oldest_seconds": "running_oldest",
}


@dataclass(frozen=True)
class Figures:
    """One job type's gauges on /metrics (0 where the preset exports no such series)."""

    pending: float = 0
    running: float = 0
    scheduled: float = 0
    held: float = 0  # jobqueue_jobs{status="dead"}: kept failed for a human
    stuck: float = 0  # jobqueue_stuck_jobs{reason="lease_expired"}
    oldest_pending_age: float = 0.0
    oldest_ready_wait: float = 0.0
    running_oldest: float = 0.0


@dataclass(frozen=True)
class Export:
    """What one collection left: its failure reason if any, the baseline, /metrics, a probe."""

    failed: str | None
    counting: bool
    samples: Samples
    probed: Any  # what the test's probe read off the poller after it (None if it failed)

    @property
    def gauges(self) -> dict[str, Figures]:
        """Every job_type label's gauges (every label seen so far is exported, zeros too)."""
        figures: dict[str, dict[str, float]] = {}
        for (name, labels), value in self.samples.items():
            found = dict(labels)
            if found.get("queue") != QUEUE or "job_type" not in found:
                continue
            field = None
            if name == "jobqueue_jobs":
                field = _STATUS_FIGURES.get(found["status"])
            elif name == "jobqueue_stuck_jobs" and found["reason"] == LEASE_EXPIRED:
                field = "stuck"
            else:
                field = _GAUGE_FIGURES.get(name)
            if field is not None:
                figures.setdefault(found["job_type"], {})[field] = value
        return {label: Figures(**values) for label, values in figures.items()}


def preset_queue(dsn: str, profile: str, interval: float, **collect: Any) -> QueueSettings:
    """A queue of the preset ``profile`` at ``dsn``, with the default timeouts (the machine is
    shared and slow) and no leader election (the test runs one poller, no service)."""
    settings = replace(CollectSettings(), interval=interval, leader_election=False)
    return QueueSettings(
        name=QUEUE,
        database=DatabaseSettings(dsn=dsn, connect_timeout=5.0),
        collect=replace(settings, **collect),
        profile=profile,
    )


class RecordedPoller:
    """The shipping Poller of one preset queue, recording what /metrics showed after each of
    its collections; ``probe`` reads anything else off the poller at the same moment."""

    def __init__(
        self,
        dsn: str,
        profile: str,
        *,
        interval: float = 0.5,
        probe: Callable[[Poller], Any] | None = None,
        **collect: Any,
    ) -> None:
        settings = preset_queue(dsn, profile, interval, **collect)
        self.poller = Poller(settings, Database(connect_options(settings)))
        self.exports: list[Export] = []
        self._probe = probe
        self._errors: Counter[str] = Counter()
        self._recorded = asyncio.Event()
        self.poller.listeners.append(self._record)

    @property
    def tallies(self) -> Any:
        """The queue's counters and histograms: what /metrics renders, by job_type label."""
        return self.poller.tallies

    def reader(self, kind: type[R]) -> R:
        """The preset's reader inside the poller's current counting mode."""
        mode = self.poller.mode
        assert isinstance(mode, kind), f"profile {self.poller.profile.name}: {type(mode)}"
        return mode

    @property
    def last(self) -> Export:
        """What the latest collection left."""
        return self.exports[-1]

    def stuck(self, job_type: str) -> float:
        """The job type's stuck gauge after the latest collection (0 when it has no series)."""
        return self.gauge(job_type, "stuck")

    def gauge(self, job_type: str, figure: str) -> float:
        """One gauge of one job type after the latest collection (0 before it has a series)."""
        figures = self.last.gauges.get(job_type)
        return float(getattr(figures, figure)) if figures is not None else 0.0

    def _record(self) -> None:
        poller = self.poller
        errors = Counter(poller.health.errors)
        failed = next(iter(errors - self._errors), None)
        self._errors = errors
        mode = poller.mode
        counting = isinstance(mode, LedgerReader) and mode.counting
        text = render([poller.view()], process_metrics=False).decode()
        probed = self._probe(poller) if self._probe is not None and failed is None else None
        self.exports.append(Export(failed, counting, parse(text), probed))
        self._recorded.set()

    def _check(self) -> None:
        for export in self.exports:
            if export.failed is not None and export.failed not in RETRIED:
                raise AssertionError(
                    f"a collection failed ({export.failed}): {self.poller.health.last_error}"
                )

    async def cycles(self, count: int, within: float = 30.0) -> None:
        """Wait until ``count`` more collections have finished."""
        target = len(self.exports) + count
        await self.until(lambda: len(self.exports) >= target, within)

    async def until(self, condition: Callable[[], bool], within: float = 30.0) -> None:
        """Wait until ``condition()`` holds after some collection; fail on a failed one."""
        deadline = time.monotonic() + within
        while True:
            self._check()
            if self.exports and condition():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"condition not reached in {within} s")
            self._recorded.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._recorded.wait(), remaining)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[RecordedPoller]:
        """The poller's loop for the length of the block, from its counting baseline on."""
        task = asyncio.create_task(self.poller.run())
        try:
            await self.until(lambda: self.last.counting, within=60)
            yield self
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await self.poller.database.close()
        self._check()


def as_counted(counters: dict[str, dict[Any, int]]) -> dict[str, dict[Any, int]]:
    """A library's own record as the exporter counts it (docs/presets.md, "In the exporter"):
    reasons bounded (a heartbeat re-pick is a lost lease, anything else an error), requeues by
    hand only (every retry minus the failed attempts that did not die), no zeros."""

    def reason(found: str) -> str:
        return LEASE_EXPIRED if found == HEARTBEAT_REASON else ERROR

    out: dict[str, Counter[Any]] = {name: Counter() for name in counters}
    for name in ("enqueued", "completed", "cancelled"):
        out[name].update(counters.get(name, {}))
    for name in ("failures", "dead"):
        for (job_type, found), n in counters.get(name, {}).items():
            out[name][(job_type, reason(found))] += n
    by_hand: Counter[str] = Counter(counters.get("requeued", {}))
    for (job_type, _), n in counters.get("failures", {}).items():
        by_hand[job_type] -= n
    for (job_type, _), n in counters.get("dead", {}).items():
        by_hand[job_type] += n
    out["requeued"] = Counter({job_type: n for job_type, n in by_hand.items() if n > 0})
    return {name: {k: v for k, v in found.items() if v} for name, found in out.items()}


def assert_histograms(tallies: Any, truth: dict[str, Any], within: float) -> None:
    """The queue's three histograms hold, per job type, the truth's (count, duration sum,
    wait sum, latency sum), sums within ``within`` seconds; no job type more."""
    for job_type, (n, duration, wait, latency) in truth.items():
        for found, total in ((tallies.duration, duration), (tallies.wait, wait),
                             (tallies.latency, latency)):  # fmt: skip
            assert found[job_type].count == n, job_type
            assert abs(found[job_type].total - total) <= within, (
                job_type,
                found[job_type].total,
                total,
            )
    assert set(tallies.duration) == set(truth)


def observed(histograms: dict[str, Any]) -> dict[str, int]:
    """How many observations each job type's histogram holds, to compare with a library's record."""
    return {job_type: histogram.count for job_type, histogram in histograms.items()}


def nonzero(gauges: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Gauges by job type without the all-zero ones: /metrics keeps every label it has seen,
    with zeros; a library's table has no row for a job type it holds no job of."""
    return {job_type: figures for job_type, figures in gauges.items() if any(figures.values())}
