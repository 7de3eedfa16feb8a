"""The logical counting mode: counters from the table's change stream, gauges from the snapshot.

The stream's thread folds each committed change with the mode's rules (:meth:`LogicalMode.fold`,
a :class:`~exporter.counting.stream_counter.StreamFold`); before each cycle the database layer
hands the mode what was folded since, whole transactions only (:meth:`LogicalMode.take`), and
the mode adds it to the queue's counters. The cycle itself reads only the gauges, with polling's
snapshot queries. No I/O (docs/logical.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.counting.snapshot import DeadLetter, gauges
from exporter.counting.statuses import stats_notices, unmapped_notices
from exporter.counting.stream_counter import StreamFold, credit
from exporter.counting.transitions import CursorOptions
from exporter.model import (
    Collected,
    Cycle,
    JobType,
    JobTypeLabels,
    Notice,
    Query,
    Row,
    Tallies,
)
from exporter.model.row_changes import Batch, FedByStream
from exporter.settings.table import TableMapping

HORIZON = "SELECT now() AS now"  # no horizon to find: the stream is ordered by commit
TRUNCATE_MESSAGE = (
    "the job table was truncated: its rows went without a change each, and nothing is counted "
    "for them (not even jobs_vanished_total)"
)


@dataclass
class LogicalMode(FedByStream):
    """Counts committed changes as they are handed over; each cycle reads the gauges."""

    sql: Mapping[str, str]
    options: CursorOptions
    mapping: TableMapping
    labels: JobTypeLabels
    tallies: Tallies
    position: int = 0  # the end of the last counted commit (0: none yet)
    changes: int = 0  # changes of the table read since the baseline
    truncates: int = 0
    _cycle: int = 0
    dead_letter: DeadLetter = field(default_factory=DeadLetter)
    # Change in DEAD rows per job type since the last cycle, for the dead gauge.
    dead_delta: Counter[JobType] = field(default_factory=Counter)
    # Unmapped status values named for the first time (shown, the row's text).
    unmapped_new: list[tuple[str, str | None]] = field(default_factory=list)
    _changes_at_cycle: int = 0
    _truncates_seen: int = 0
    _stats_values: list[str] = field(default_factory=list)
    _stats_named: set[str] = field(default_factory=set)

    def fold(self) -> StreamFold:
        """The rules the stream's thread counts each change with."""
        tallies = self.tallies
        buckets = (tallies.duration_bounds, tallies.wait_bounds, tallies.latency_bounds)
        return StreamFold(self.mapping, self.options.tracker, buckets)

    def take(self, batch: Batch) -> None:
        """Add what the stream folded (whole transactions, in commit order) to the counters."""
        tally = batch.tally
        credit(tally, self.tallies, self.labels.label, self.unmapped_new)
        self.dead_delta.update(tally.dead_delta)
        if tally.dead_unknown:
            self.dead_letter.counted_at = None  # recounted at the next cycle
        self.changes += tally.changes
        self.truncates += tally.truncates
        self.position = max(self.position, batch.position)

    def horizon_query(self) -> Query:
        """A trivial autocommit statement: the stream needs no horizon."""
        return Query("horizon", HORIZON)

    def cycle(self, horizon: Row) -> Cycle:
        """The gauges: snapshot, the dead letter now and then, DONE rows if asked."""
        self._cycle += 1
        options = self.options
        recount = self.dead_letter.due(self._cycle)
        rows = (yield Query("snapshot", self.sql["snapshot"], (options.stuck_threshold,))) or ()
        now = float(rows[0]["now"]) if rows else float(horizon["now"].timestamp())
        notices: list[Notice] = []
        statuses = options.tracker.statuses
        dead_rows = (yield Query("dead", self.sql["dead"])) if recount else None
        if recount and statuses is not None:
            stats = (yield Query("status_values", self.sql["status_values"])) or ()
            self._stats_values = [r["value"] for r in stats if r["value"] is not None]
            notices += stats_notices(statuses, self._stats_values, self._stats_named)
        done_rows = (yield Query("done", self.sql["done"])) if options.done_count else None
        # A recount sees every change committed before its snapshot, and perhaps some that are
        # not handed over yet: those adjust it until the next recount.
        dead = self.dead_letter.update(self._cycle, dead_rows, self.dead_delta)
        notices += unmapped_notices(statuses, self.unmapped_new, self._stats_values)
        if self.truncates > self._truncates_seen:
            self._truncates_seen = self.truncates
            notices.append(Notice(TRUNCATE_MESSAGE, {"table": self.mapping.name}))
        snapshot = gauges(now, rows, dead, done_rows, self.labels)
        read, self._changes_at_cycle = self.changes - self._changes_at_cycle, self.changes
        return Collected(snapshot=snapshot, counting=True, rows_read=read, notices=tuple(notices))
