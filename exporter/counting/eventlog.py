"""The event-log counting mode: an id cursor over an append-only log, exact under late commits.

A library that appends one row per job event (procrastinate_events, pgqueuer_log) is read
through an id range past a watermark that the horizon moves (:mod:`exporter.counting.horizon`);
each event is counted once, by a subclass that knows the library's event words, into the
queue's Tallies through a :class:`~exporter.counting.ledger.Ledger`. No I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from exporter.counting.gauges import Reading, first, gauges_from
from exporter.counting.horizon import Horizon, IdWatermark
from exporter.counting.ledger import Ledger
from exporter.counting.reader import LedgerReader
from exporter.model import Query, Results, Row


class EventLogReader(LedgerReader, ABC):
    """Counts a library's events exactly once and reads its live gauges, one cycle at a time.

    A cycle is: run :meth:`horizon_query` in autocommit and pass its row to :meth:`queries`;
    run the returned queries in order in one REPEATABLE READ, READ ONLY transaction; pass
    their rows, by query name, to :meth:`apply`. Counts go to ``ledger`` from the baseline on.
    """

    def __init__(self, sql: dict[str, str], stuck_after: float, ledger: Ledger | None) -> None:
        """``sql``: the statements horizon, snapshot, gauges and events; ``stuck_after``: the
        heartbeat age past which a running job counts as stuck."""
        super().__init__(sql, ledger)
        self.stuck_after = stuck_after
        self.cursor = IdWatermark()
        self._reading_events = False

    def queries(self, horizon: Row) -> list[Query]:
        """The cycle's statements, in order, for one REPEATABLE READ, READ ONLY transaction."""
        self.cursor.note(Horizon.from_row(horizon))
        out = [
            Query("snapshot", self.sql["snapshot"]),
            Query("gauges", self.sql["gauges"], (self.stuck_after,)),
        ]
        lower = self.cursor.lower_id()
        self._reading_events = lower is not None
        if lower is not None:
            out.append(Query("events", self.sql["events"], (lower,)))
        return out

    def apply(self, results: Results) -> Reading:
        """Fold one cycle's rows into the tallies and return its gauges."""
        snapshot = first(results["snapshot"])
        events = results.get("events", ())
        reading = Reading(
            taken_at=float(snapshot["now"]),
            gauges=gauges_from(results["gauges"]),
            counting=self.counting,
            rows_read={name: len(rows) for name, rows in results.items()},
        )
        if self._reading_events:
            if self.counting:
                for event in events:
                    if self.cursor.fresh(int(event["id"])):
                        self.count(event)
            else:
                # The baseline: what this snapshot shows above the first settled point
                # happened before the exporter started counting.
                self.cursor.watermark = self.cursor.lower_id()
                self.cursor.absorb(int(event["id"]) for event in events)
                self.counting = reading.counting = True
            self.cursor.advance()
        elif self.cursor.horizon is not None and self.cursor.horizon.prepared:
            reading.warnings.append("prepared transactions hold the event cursor back")
        return reading

    @abstractmethod
    def count(self, event: Row) -> None:
        """Add one event, seen for the first time, to the ledger."""


def last_index(values: Sequence[str], wanted: set[str], before: int | None = None) -> int | None:
    """Index of the last element in ``wanted`` (strictly before ``before`` when given)."""
    end = len(values) if before is None else before
    for index in range(end - 1, -1, -1):
        if values[index] in wanted:
            return index
    return None
