"""The logical counting mode: counters from the table's change stream, gauges from the snapshot.

Before each cycle the database layer hands the mode the transactions committed since the last
one (:meth:`LogicalMode.take`); they are counted at once, in commit order, by the
:class:`~exporter.counting.stream_counter.ChangeCounter`. The cycle itself reads only the
gauges, with polling's snapshot queries. The slot is confirmed where :class:`Confirmation`
says: the end of the last commit whose counts a /metrics response carried, or, while nothing
scrapes, one counted a few intervals ago. No I/O (docs/logical.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Self

from exporter.counting.snapshot import DeadLetter, gauges
from exporter.counting.statuses import stats_notices, unmapped_notices
from exporter.counting.stream_counter import ChangeCounter
from exporter.counting.transitions import CursorOptions
from exporter.model import (
    Collected,
    Cycle,
    JobTypeLabels,
    Notice,
    Query,
    Row,
    Tallies,
)
from exporter.model.row_changes import Transaction
from exporter.settings.table import TableMapping

HORIZON = "SELECT now() AS now"  # no horizon to find: the stream is ordered by commit
TRUNCATE_MESSAGE = (
    "the job table was truncated: its rows went without a change each, and nothing is counted "
    "for them (not even jobs_vanished_total)"
)


@dataclass
class LogicalMode:
    """Counts committed changes as they are handed over; each cycle reads the gauges."""

    sql: Mapping[str, str]
    options: CursorOptions
    mapping: TableMapping
    labels: JobTypeLabels
    tallies: Tallies
    counter: ChangeCounter = field(init=False)
    _cycle: int = 0
    dead_letter: DeadLetter = field(default_factory=DeadLetter)
    _changes_at_cycle: int = 0
    _truncates_seen: int = 0
    _stats_values: list[str] = field(default_factory=list)
    _stats_named: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.counter = ChangeCounter(self.mapping, self.options.tracker, self.labels, self.tallies)

    @property
    def position(self) -> int:
        """The end of the last counted commit (0: none yet)."""
        return self.counter.position

    @property
    def tracked(self) -> None:
        """No job's state is kept: every change carries its old row."""
        return None

    @property
    def held(self) -> None:
        """No finished job is held: a long transaction arrives whole at its commit."""
        return None

    @property
    def stream(self) -> Self:
        """Fed by the change stream's follower."""
        return self

    def take(self, transactions: Iterable[Transaction]) -> None:
        """Count committed transactions, in the order they committed (re-sent ones once)."""
        for transaction in transactions:
            self.counter.apply(transaction)

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
        counter = self.counter
        # A recount sees every change committed before its snapshot, and perhaps some that are
        # not handed over yet: those adjust it until the next recount.
        dead = self.dead_letter.update(self._cycle, dead_rows, counter.dead_delta)
        notices += unmapped_notices(statuses, counter.unmapped_new, self._stats_values)
        if counter.truncates > self._truncates_seen:
            self._truncates_seen = counter.truncates
            notices.append(Notice(TRUNCATE_MESSAGE, {"table": self.mapping.name}))
        snapshot = gauges(now, rows, dead, done_rows, self.labels)
        read, self._changes_at_cycle = counter.changes - self._changes_at_cycle, counter.changes
        return Collected(snapshot=snapshot, counting=True, rows_read=read, notices=tuple(notices))
