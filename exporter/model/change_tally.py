"""What the change stream's thread counts between two hand-overs, keyed by the raw job type.

The replication thread folds every committed change into a :class:`ChangeTally` as it arrives, so
what crosses to the event loop is a handful of counters, not the changes: memory follows the number
of job types, never the rate, the interval or the size of one transaction. Labels are the event
loop's (their cap and a reload's renames live there), so a tally keys by the job type as the table
holds it, and the counting mode turns keys into labels when it takes the tally. No I/O.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Final

from exporter.labels import JobType
from exporter.model import Histogram

# Distinct job types one tally keeps apart; the rest share OVERFLOW, which the label cap would
# fold into "other" anyway. Whoever enqueues names job types, so this bounds the thread's memory
# against a flood of new ones between two hand-overs.
MAX_KEYS: Final = 10_000
# A key no job type can be: PostgreSQL text never holds a NUL character.
OVERFLOW: Final = "\x00overflow"


@dataclass
class ChangeTally:
    """Counts of committed changes since the last hand-over, by raw job type."""

    duration_bounds: tuple[float, ...]
    wait_bounds: tuple[float, ...]
    latency_bounds: tuple[float, ...]
    enqueued: Counter[JobType] = field(default_factory=Counter)
    completed: Counter[JobType] = field(default_factory=Counter)
    failures: Counter[tuple[JobType, str]] = field(default_factory=Counter)
    dead: Counter[tuple[JobType, str]] = field(default_factory=Counter)
    requeued: Counter[JobType] = field(default_factory=Counter)
    cancelled: Counter[JobType] = field(default_factory=Counter)
    cost: dict[tuple[JobType, str], float] = field(default_factory=dict)
    malformed: Counter[str] = field(default_factory=Counter)
    duration: dict[JobType, Histogram] = field(default_factory=dict)
    wait: dict[JobType, Histogram] = field(default_factory=dict)
    latency: dict[JobType, Histogram] = field(default_factory=dict)
    vanished: Counter[str] = field(default_factory=Counter)  # by the status last held
    # Rows whose status is none of the mapped values, by the value as shown, with the text of
    # the first row that carried each (for the one log line that names it).
    unmapped: Counter[str] = field(default_factory=Counter)
    unmapped_text: dict[str, str | None] = field(default_factory=dict)
    dead_delta: Counter[JobType] = field(default_factory=Counter)  # change in DEAD rows
    # DEAD rows deleted whose job type the change did not carry (an identity index's old row
    # holds its key alone): the dead gauge is recounted rather than guessed.
    dead_unknown: int = 0
    truncates: int = 0
    changes: int = 0  # changes of the table read, counted or not
    _keys: set[JobType] = field(default_factory=set)

    def empty(self) -> ChangeTally:
        """A new tally with the same buckets."""
        return ChangeTally(self.duration_bounds, self.wait_bounds, self.latency_bounds)

    def key(self, job_type: JobType) -> JobType:
        """The key ``job_type`` is counted under: itself, or OVERFLOW past MAX_KEYS."""
        keys = self._keys
        if job_type in keys:
            return job_type
        if len(keys) >= MAX_KEYS:
            return OVERFLOW
        keys.add(job_type)
        return job_type

    def observe(
        self, key: JobType, duration: float | None, wait: float | None, latency: float | None
    ) -> None:
        """One completion's figures in the histograms whose figure is known."""
        for table, bounds, value in (
            (self.duration, self.duration_bounds, duration),
            (self.wait, self.wait_bounds, wait),
            (self.latency, self.latency_bounds, latency),
        ):
            if value is not None:
                found = table.get(key)
                if found is None:
                    found = table[key] = Histogram(bounds)
                found.observe(value)

    def absorb(self, other: ChangeTally) -> None:
        """Add ``other`` (counted after this one) into this tally."""
        for job_type in other._keys:
            self.key(job_type)
        self.enqueued.update(other.enqueued)
        self.completed.update(other.completed)
        self.failures.update(other.failures)
        self.dead.update(other.dead)
        self.requeued.update(other.requeued)
        self.cancelled.update(other.cancelled)
        for pair, usd in other.cost.items():
            self.cost[pair] = self.cost.get(pair, 0.0) + usd
        self.malformed.update(other.malformed)
        for mine, theirs in (
            (self.duration, other.duration),
            (self.wait, other.wait),
            (self.latency, other.latency),
        ):
            for key, histogram in theirs.items():
                found = mine.get(key)
                mine[key] = histogram if found is None else found.merged(histogram)
        self.vanished.update(other.vanished)
        self.unmapped.update(other.unmapped)
        for shown, text in other.unmapped_text.items():
            self.unmapped_text.setdefault(shown, text)
        self.dead_delta.update(other.dead_delta)
        self.dead_unknown += other.dead_unknown
        self.truncates += other.truncates
        self.changes += other.changes

    @property
    def read(self) -> bool:
        """True when any change of the table was read into it."""
        return self.changes > 0 or self.truncates > 0
