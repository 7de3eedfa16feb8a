"""Plain data shared by the layers: rows read from the queue, the snapshot, the tallies, and
(in exchange.py) what a counting mode and the database layer pass each other.

No I/O here. Times are Unix seconds taken from the database's clock.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

# Label handling lives in labels.py; the names stay importable from here, where the rest is.
from exporter.labels import JobType as JobType
from exporter.labels import JobTypeLabels as JobTypeLabels
from exporter.labels import PresetJobTypes as PresetJobTypes
from exporter.labels import job_type_label as job_type_label
from exporter.model.exchange import NIL as NIL
from exporter.model.exchange import REFERENCE_SHAPE as REFERENCE_SHAPE
from exporter.model.exchange import Collected as Collected
from exporter.model.exchange import CountingError as CountingError
from exporter.model.exchange import CountingMode as CountingMode
from exporter.model.exchange import Cycle as Cycle
from exporter.model.exchange import Notice as Notice
from exporter.model.exchange import Query as Query
from exporter.model.exchange import Results as Results
from exporter.model.exchange import Row as Row
from exporter.model.exchange import TableShape as TableShape
from exporter.model.replication import WAL_STATUSES as WAL_STATUSES
from exporter.model.replication import SlotHealth as SlotHealth
from exporter.model.replication import StreamHealth as StreamHealth
from exporter.model.slot_target import IdentityIndex as IdentityIndex
from exporter.model.slot_target import LogicalTarget as LogicalTarget
from exporter.vocabulary import (
    COST_COMPONENTS,
    FAILURE_REASONS,
    MALFORMED_FIELDS,
    STUCK_REASONS,
    Status,
)

PENDING, RUNNING, DONE, DEAD = Status.PENDING, Status.RUNNING, Status.DONE, Status.DEAD
_K = TypeVar("_K")


@dataclass(frozen=True)
class Figures:
    """The values the change query pulled out of ``result`` in SQL, each as its JSON text.

    ``kind`` is ``jsonb_typeof(result)``; a value is None when missing (a string keeps its quotes).
    """

    kind: str | None
    duration_ms: str | None = None
    ai_usd: str | None = None
    proxy_usd: str | None = None
    total_usd: str | None = None


@dataclass(frozen=True)
class JobRow:
    """One row of the job table as the change query returns it."""

    job_id: str
    job_type: JobType
    status: int
    attempts: int
    max_attempts: int
    last_error: str | None
    result: str | None  # JSON text, only fetched for DONE rows
    run_after: float
    run_started_at: float | None
    created_at: float
    updated_at: float
    wait_seconds: float | None = None  # run_started_at - run_after, exact to the microsecond
    latency_seconds: float | None = None  # updated_at - created_at, likewise
    run_seconds: float | None = None  # updated_at - run_started_at of a DONE row, likewise
    figures: Figures | None = None  # numbers pulled out of result in SQL (then result is None)
    # The status column's own text when it is none of the four mapped values (cut in SQL).
    status_text: str | None = None


@dataclass(frozen=True)
class ActiveStats:
    """Aggregates over the PENDING and RUNNING rows of one job_type."""

    pending: int = 0
    running: int = 0
    scheduled: int = 0
    oldest_pending_age: float = 0.0
    oldest_ready_wait: float = 0.0
    stuck_lease_expired: int = 0
    stuck_overrun: int = 0
    lease_expired_oldest: float = 0.0
    running_oldest: float = 0.0


@dataclass(frozen=True)
class Snapshot:
    """The queue's live state at one database instant."""

    taken_at: float
    active: dict[JobType, ActiveStats]
    dead: dict[JobType, int] | None  # None when this cycle did not recount the dead letter
    done: dict[JobType, int] | None = None


@dataclass
class Histogram:
    """Cumulative histogram of observations with fixed upper bounds (+Inf implied)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * len(self.bounds)

    def observe(self, value: float) -> None:
        """Add one observation."""
        index = bisect.bisect_left(self.bounds, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += value
        self.count += 1

    def merged(self, other: Histogram) -> Histogram:
        """The sum of two histograms with the same bounds."""
        counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        return Histogram(self.bounds, counts, self.total + other.total, self.count + other.count)

    def cumulative(self) -> list[tuple[str, int]]:
        """Bucket (le, cumulative count) pairs including +Inf, as the exposition wants them."""
        out: list[tuple[str, int]] = []
        running = 0
        for bound, n in zip(self.bounds, self.counts, strict=True):
            running += n
            out.append((_format_bound(bound), running))
        out.append(("+Inf", self.count))
        return out


def _moved(counter: Counter[_K], key: Callable[[_K], _K]) -> Counter[_K]:
    """The counter with its keys mapped, values of keys that meet summed (zeros kept)."""
    out: Counter[_K] = Counter()
    for old, n in counter.items():
        out[key(old)] += n
    return out


def _format_bound(bound: float) -> str:
    return repr(float(bound)) if not math.isinf(bound) else "+Inf"


@dataclass
class Tallies:
    """Everything counted since the exporter's first successful collection, keyed by label."""

    duration_bounds: tuple[float, ...]
    wait_bounds: tuple[float, ...]
    latency_bounds: tuple[float, ...]
    enqueued: Counter[str] = field(default_factory=Counter)
    completed: Counter[str] = field(default_factory=Counter)
    failures: Counter[tuple[str, str]] = field(default_factory=Counter)
    dead: Counter[tuple[str, str]] = field(default_factory=Counter)
    requeued: Counter[str] = field(default_factory=Counter)
    cost: dict[tuple[str, str], float] = field(default_factory=dict)
    malformed: Counter[str] = field(default_factory=Counter)
    duration: dict[str, Histogram] = field(default_factory=dict)
    wait: dict[str, Histogram] = field(default_factory=dict)
    latency: dict[str, Histogram] = field(default_factory=dict)
    cancelled: Counter[str] = field(default_factory=Counter)  # presets only: no cancel here
    # Tracked active jobs deleted before a read saw them end, by the status last seen.
    vanished: Counter[str] = field(default_factory=Counter)
    # Changed rows whose status is none of the four mapped values, by the value as shown
    # (at most statuses.MAX_NAMED of them, the rest under one key).
    unmapped_status: Counter[str] = field(default_factory=Counter)
    # Tracked active jobs whose row changed without a new updated_at stamp, so no read of the
    # changes returned it (counted in nothing else), by the status it was found in.
    unstamped: Counter[str] = field(default_factory=Counter)

    def copy(self) -> Tallies:
        """An independent copy (the HTTP side renders from copies, never from live state)."""
        return Tallies(
            self.duration_bounds, self.wait_bounds, self.latency_bounds,
            Counter(self.enqueued), Counter(self.completed), Counter(self.failures),
            Counter(self.dead), Counter(self.requeued), dict(self.cost), Counter(self.malformed),
            {k: replace(v, counts=list(v.counts)) for k, v in self.duration.items()},
            {k: replace(v, counts=list(v.counts)) for k, v in self.wait.items()},
            {k: replace(v, counts=list(v.counts)) for k, v in self.latency.items()},
            Counter(self.cancelled), Counter(self.vanished), Counter(self.unmapped_status),
            Counter(self.unstamped),
        )  # fmt: skip

    def counters(self) -> dict[str, dict[object, int]]:
        """Every counter as plain dicts without zeros, for comparisons and logs."""
        return {
            name: {key: value for key, value in getattr(self, name).items() if value}
            for name in ("enqueued", "completed", "failures", "dead", "requeued", "cancelled")
        }

    def relabel(self, moved: dict[str, str]) -> None:
        """Move every count from an old job_type label to its new one (summing where they meet)."""
        if not moved:
            return

        def one(label: str) -> str:
            return moved.get(label, label)

        def pair(key: tuple[str, str]) -> tuple[str, str]:
            return (one(key[0]), key[1])

        self.enqueued = _moved(self.enqueued, one)
        self.completed = _moved(self.completed, one)
        self.requeued = _moved(self.requeued, one)
        self.cancelled = _moved(self.cancelled, one)
        self.failures = _moved(self.failures, pair)
        self.dead = _moved(self.dead, pair)
        cost: dict[tuple[str, str], float] = {}
        for key, usd in self.cost.items():
            cost[pair(key)] = cost.get(pair(key), 0.0) + usd
        self.cost = cost
        for table in (self.duration, self.wait, self.latency):
            merged: dict[str, Histogram] = {}
            for label, histogram in table.items():
                found = merged.get(one(label))
                merged[one(label)] = histogram if found is None else found.merged(histogram)
            table.clear()
            table.update(merged)

    def add_cost(self, label: str, component: str, usd: float) -> None:
        """Add spend to one (job_type, component) counter."""
        key = (label, component)
        self.cost[key] = self.cost.get(key, 0.0) + usd

    def observe(
        self, label: str, duration: float | None, wait: float | None, latency: float | None
    ) -> None:
        """Record one completed job in the histograms whose figure is known."""
        for table, bounds, value in (
            (self.duration, self.duration_bounds, duration),
            (self.wait, self.wait_bounds, wait),
            (self.latency, self.latency_bounds, latency),
        ):
            if value is not None:
                self._histogram(table, label, bounds).observe(value)

    @staticmethod
    def _histogram(table: dict[str, Histogram], label: str, bounds: tuple[float, ...]) -> Histogram:
        found = table.get(label)
        if found is None:
            found = table[label] = Histogram(bounds)
        return found


@dataclass
class Health:
    """The exporter's own figures, exported as jobqueue_up and jobqueue_exporter_*."""

    up: bool = False
    last_success_at: float = 0.0  # database clock
    last_success_monotonic: float | None = None
    collections: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    skipped: int = 0
    collection_duration: float = 0.0
    query_durations: dict[str, float] = field(default_factory=dict)
    missing_indexes: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None
    lag_seconds: float = 0.0  # database time between the snapshot and the change cursor
    rows_read: int = 0  # changed rows read since start


@dataclass(frozen=True)
class Coverage:
    """Which of a queue's series its profile can fill; the default schema fills every one.

    A figure a profile cannot tell is not exported at all for that queue, rather than exported
    as a zero that pretends to know. ``withheld`` names fields of ActiveStats and Tallies (and
    ``tracked``) whose series are left out.
    """

    statuses: tuple[Status, ...] = (PENDING, RUNNING, DEAD)
    stuck_reasons: tuple[str, ...] = STUCK_REASONS
    failure_reasons: tuple[str, ...] = FAILURE_REASONS
    # The default schema has no cancel: its cancellations series would be a zero that means
    # nothing, so only the presets whose library cancels export it.
    withheld: frozenset[str] = frozenset({"cancelled"})
    # What result is read for (collect.*_path): a figure not read has no cost component and
    # no malformed series.
    cost_components: tuple[str, ...] = COST_COMPONENTS
    malformed_fields: tuple[str, ...] = MALFORMED_FIELDS


@dataclass(frozen=True)
class HeldJobs:
    """Finished jobs kept while a long transaction holds the horizon back, and their cap.

    Past the cap (collect.max_held_jobs) the exporter keeps counting exactly and says so
    (jobqueue_exporter_held_cap_exceeded, one log line): memory grows, counts are not lost.
    """

    jobs: int
    cap: int

    @property
    def exceeded(self) -> bool:
        """True while more jobs are held than the cap allows."""
        return self.jobs > self.cap


@dataclass(frozen=True)
class Standing:
    """Where this exporter stands in a queue's election (exporter/election.py)."""

    collector: bool  # it collects the queue (until it sees another exporter hold the lock)
    holding: bool  # it holds the lock: jobqueue_exporter_leader
    reachable: bool  # the lock's session reached the database at the last try
    why: str | None = None  # why not, when it could not reach the database


# A queue without an election: this exporter always collects it.
ALONE = Standing(collector=True, holding=True, reachable=True)


@dataclass(frozen=True)
class QueueView:
    """A consistent copy of one queue's part of /metrics, taken between two collections."""

    queue: str  # the queue label
    leader: bool  # jobqueue_exporter_leader: collecting, and holding the lock if elected
    snapshot: Snapshot | None  # None while stale or on a standby: queue gauges are withdrawn
    label_of: dict[JobType, str]
    labels: tuple[str, ...]
    folded: int
    tallies: Tallies | None  # None on a standby: it counts nothing
    health: Health
    up: bool
    collection_timeout: float
    tracked: int | None  # None: the profile keeps no set of tracked jobs
    held: HeldJobs | None = None  # None: the profile's cursor is never held (no tracker)
    coverage: Coverage = Coverage()
    slot: SlotHealth | None = None  # None: the queue counts by polling, or this pod is a standby
    stream: StreamHealth | None = None  # the same
    collector: bool = True  # False on a standby: it exports up and leader only
    # Monotonic time after which the snapshot is stale (withdrawn, and up reads 0); None: never
    # fresh, or a view not published through the board.
    fresh_until: float | None = None
    # The end of the last commit the tallies count (collect.counting: logical), None otherwise:
    # once a /metrics response carried them, the slot may be confirmed there.
    position: int | None = None


@dataclass(frozen=True)
class QueueStatus:
    """One queue as the status page shows it."""

    view: QueueView
    ready: str | None  # None when ready, else why not
    last_error: str | None  # the last failure, kept after recovery (the view's clears)
    last_error_at: float | None  # Unix time, exporter clock
    profile: str = "default"  # the queue's profile (queue.profile)
    table: str = "job"  # the table it reads (a preset's main table)
    counting: str = "polling"  # collect.counting: polling, or logical (then view.slot)


@dataclass(frozen=True)
class ConfigStatus:
    """How the last load of the configuration went: at start-up, then at each reload."""

    successful: bool = True  # False while a reload has failed and the previous settings run
    last_success_at: float = 0.0  # Unix time (exporter clock: no database is involved)
    last_error: str | None = None  # why the last reload failed, naming the field
    last_failure_at: float | None = None
