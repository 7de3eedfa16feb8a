"""The terminal-state cursor and the active-set diff: counting a library that keeps no event log.

pg-boss is the example: a job's row is its whole history, and a fail or retry may delete and
re-insert it under the same id. Each cycle reads the row versions written since the previous
snapshot (xmin at or above that snapshot's xmin) whose timestamps lie past a bound the horizon
moves (the *terminal-state cursor*: finished rows are read once, in the window of the cycle
after they were written), and compares each with what was last known of the same job (the
*active-set diff*: a job is remembered while a window can still return it, and an active job
missing from the live set and from the windows was deleted). docs/exactness.md has the
argument. No I/O.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass, field

from exporter.counting.horizon import TIMESTAMP_MARGIN, Horizon, TxidSnapshot


@dataclass
class TerminalCursor:
    """The lower bounds of a cycle's windows: a timestamp and the previous snapshot's xmin."""

    previous: TxidSnapshot | None = None
    bound: float | None = None  # timestamp lower bound of this cycle's windows
    next_bound: float | None = None
    # How far before the horizon a stamp of a transaction it did not show can lie: the
    # database's own now() needs TIMESTAMP_MARGIN; a client's clock needs more (django-tasks).
    margin: float = TIMESTAMP_MARGIN

    def plan(self, horizon: Horizon[float]) -> tuple[float, int] | None:
        """(timestamp bound, xmin) of this cycle's windows; None: no baseline can be taken yet."""
        if horizon.prepared:
            # A prepared transaction is gone from pg_stat_activity, so this horizon says nothing
            # about how old its now() is; the last horizon without one still bounds it.
            if self.bound is None:
                return None  # no baseline yet: wait for a horizon without prepared transactions
            self.next_bound = self.bound
        else:
            # Whatever this cycle's snapshot does not show was written by a transaction that
            # started at or after this bound: the next cycle's windows start there.
            self.next_bound = horizon.lower_bound - self.margin
            if self.bound is not None:
                # The bound only moves forward (it can step back only by the microseconds
                # the margin covers), so a job the reader forgot never re-enters a window.
                self.next_bound = max(self.next_bound, self.bound)
        if self.bound is None:
            self.bound = self.next_bound  # the baseline reads the same windows
        return self.bound, self.previous.xmin if self.previous is not None else 0

    def advance(self, snapshot: str) -> None:
        """After a cycle: its snapshot (pg_current_snapshot() text) starts the next windows."""
        self.previous = TxidSnapshot.parse(snapshot)
        self.bound = self.next_bound


@dataclass(frozen=True)
class KnownJob:
    """What was last known of one job."""

    state: str
    retry_count: int
    created_on: float
    completed_on: float | None


@dataclass
class ActiveSet:
    """The jobs a window can still return, by id, with their last known state."""

    active_states: frozenset[str]
    known: dict[str, KnownJob] = field(default_factory=dict)

    def finished(self) -> int:
        """How many of the known jobs are finished: kept until the cursor passes them."""
        return sum(job.state not in self.active_states for job in self.known.values())

    def forget(self, active: Set[str], seen: Set[str], bound: float) -> None:
        """Drop jobs that no window of the next cycle can return again: active jobs gone from
        the live set without a new version (deleted), finished ones older than ``bound``."""
        for job_id, job in list(self.known.items()):
            if job.state in self.active_states:
                if job_id not in active and job_id not in seen:
                    del self.known[job_id]  # deleted while active
            elif job.created_on < bound and (job.completed_on is None or job.completed_on < bound):
                del self.known[job_id]
