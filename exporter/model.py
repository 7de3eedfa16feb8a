"""Plain data shared by the layers: rows read from the queue, the snapshot, the tallies.

No I/O here. Times are Unix seconds taken from the database's clock.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TypeVar

from exporter.vocabulary import CUT_MARK, FAILURE_REASONS, MAX_JOB_TYPE_LABEL, STUCK_REASONS, Status
from exporter.vocabulary import OTHER as OTHER_LABEL

PENDING, RUNNING, DONE, DEAD = Status.PENDING, Status.RUNNING, Status.DONE, Status.DEAD
_K = TypeVar("_K")
JobType = int | str  # the job_type column: a number, or the text of a mapped table


def job_type_label(text: str) -> str:
    """A text job type (untrusted) as a label value: itself, or cut to MAX_JOB_TYPE_LABEL."""
    return text if len(text) <= MAX_JOB_TYPE_LABEL else text[: MAX_JOB_TYPE_LABEL - 1] + CUT_MARK


@dataclass(frozen=True)
class Figures:
    """The numbers the change query pulled out of ``result`` in SQL, as JSON number text.

    ``kind`` is ``jsonb_typeof(result)``; a value is None when missing or not a JSON number.
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
    figures: Figures | None = None  # numbers pulled out of result in SQL (then result is None)


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


class JobTypeLabels:
    """Maps job types to bounded label values: configured names, else the number (or the text,
    cut to MAX_JOB_TYPE_LABEL), else other.

    A job type keeps the label it was first given for the life of the process, so a counter never
    moves between label sets; once ``cap`` distinct labels exist, new job types fold into "other".
    """

    def __init__(self, names: dict[int, str], cap: int) -> None:
        self._names = dict(names)
        self._cap = cap
        self._assigned: dict[JobType, str] = {}
        self._labels: list[str] = []
        self.folded: set[JobType] = set()
        for job_type in sorted(names):
            self.label(job_type)

    def label(self, job_type: JobType) -> str:
        """Return the label of ``job_type``, assigning one on first sight."""
        found = self._assigned.get(job_type)
        if found is not None:
            return found
        label = self._name(job_type, self._names)  # texts cut alike share a label and a slot
        if label not in self._labels and len(self._labels) >= self._cap:
            label = OTHER_LABEL
            self.folded.add(job_type)
        if label not in self._labels:
            self._labels.append(label)
        self._assigned[job_type] = label
        return label

    @staticmethod
    def _name(job_type: JobType, names: dict[int, str]) -> str:
        if isinstance(job_type, str):
            return job_type_label(job_type)
        return names.get(job_type, str(job_type))

    @property
    def labels(self) -> list[str]:
        """Every label value handed out so far, in order of first sight."""
        return list(self._labels)

    def rename(self, names: dict[int, str], cap: int) -> dict[str, str]:
        """Adopt reloaded names and cap; return old label -> new label for each one that moved.

        A job type with a label of its own takes its new name (two that now share a name share
        a label); one folded into "other" stays there, since its past counts cannot be split
        out. A new cap applies to job types first seen from now on.
        """
        self._names, self._cap = dict(names), cap
        moved: dict[str, str] = {}
        for job_type, old in self._assigned.items():
            new = old if job_type in self.folded else self._name(job_type, names)
            if new != old:
                moved.setdefault(old, new)
                self._assigned[job_type] = new
        self._labels = list(dict.fromkeys(moved.get(label, label) for label in self._labels))
        for job_type in sorted(names):  # configured names are exported before first sight
            self.label(job_type)
        return moved


class PresetJobTypes(JobTypeLabels):
    """Job types a library names by string (task, entrypoint, queue), under the label cap.

    Each name gets a number on first sight, so the snapshot and the view stay keyed as for the
    default schema; its label is the name itself, or "other" beyond the cap.
    """

    def __init__(self, cap: int) -> None:
        super().__init__({}, cap)
        self.numbers: dict[str, int] = {}

    def number(self, name: str) -> int:
        """The number of a job type name, given on first sight (with its label)."""
        found = self.numbers.get(name)
        if found is None:
            found = self.numbers[name] = len(self.numbers) + 1
            self._names[found] = name
            self.label(found)
        return found

    def label_of_name(self, name: str) -> str:
        """The label of a job type name."""
        return self.label(self.number(name))

    def rename(self, names: dict[int, str], cap: int) -> dict[str, str]:
        """Adopt a reloaded cap; collect.job_types names numbers, which a preset has none of."""
        self._cap = cap
        return {}


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
    # Counted by the presets, not exported yet.
    cancelled: Counter[str] = field(default_factory=Counter)
    # Tracked active jobs deleted before a read saw them end, by the status last seen.
    vanished: Counter[str] = field(default_factory=Counter)

    def copy(self) -> Tallies:
        """An independent copy (the HTTP side renders from copies, never from live state)."""
        return Tallies(
            self.duration_bounds, self.wait_bounds, self.latency_bounds,
            Counter(self.enqueued), Counter(self.completed), Counter(self.failures),
            Counter(self.dead), Counter(self.requeued), dict(self.cost), Counter(self.malformed),
            {k: replace(v, counts=list(v.counts)) for k, v in self.duration.items()},
            {k: replace(v, counts=list(v.counts)) for k, v in self.wait.items()},
            {k: replace(v, counts=list(v.counts)) for k, v in self.latency.items()},
            Counter(self.cancelled), Counter(self.vanished),
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
    withheld: frozenset[str] = frozenset()


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
    coverage: Coverage = Coverage()
    collector: bool = True  # False on a standby: it exports up and leader only
    # Monotonic time after which the snapshot is stale (withdrawn, and up reads 0); None: never
    # fresh, or a view not published through the board.
    fresh_until: float | None = None


@dataclass(frozen=True)
class QueueStatus:
    """One queue as the status page shows it."""

    view: QueueView
    ready: str | None  # None when ready, else why not
    last_error: str | None  # the last failure, kept after recovery (the view's clears)
    last_error_at: float | None  # Unix time, exporter clock


@dataclass(frozen=True)
class ConfigStatus:
    """How the last load of the configuration went: at start-up, then at each reload."""

    successful: bool = True  # False while a reload has failed and the previous settings run
    last_success_at: float = 0.0  # Unix time (exporter clock: no database is involved)
    last_error: str | None = None  # why the last reload failed, naming the field
    last_failure_at: float | None = None
