"""The event-log counting mode: an id cursor over an append-only log, exact under late commits.

A library that appends one row per job event (procrastinate_events, pgqueuer_log) is read
through an id range past a watermark that the horizon moves (:mod:`exporter.counting.horizon`);
each event is counted once, by a subclass that knows the library's event words, into the
queue's Tallies through a :class:`~exporter.counting.ledger.Ledger`. No I/O.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

from exporter.counting.gauges import Reading, reading_of
from exporter.counting.horizon import Horizon, IdWatermark
from exporter.counting.reader import LedgerReader
from exporter.model import Query, Results, Row


class EventLogReader(LedgerReader):
    """Counts a library's events exactly once and reads its live gauges, one cycle at a time.

    Its statements are horizon, snapshot, gauges (given ``stuck_after``) and events (given the
    id the range starts above). Counts go to ``ledger`` from the baseline on.
    """

    def start(self) -> None:
        """The id watermark over the log."""
        self.cursor = IdWatermark()
        self._reading_events = False

    @property
    def tracked(self) -> int:
        """The event ids above the watermark already counted."""
        return len(self.cursor.consumed)

    @property
    def held(self) -> int:
        """The same ids: the watermark waits for the horizon, so they pile up while it is held."""
        return len(self.cursor.consumed)

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
        events = results.get("events", ())
        reading = reading_of(results, self.counting)
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
            self.delayed(reading)
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
