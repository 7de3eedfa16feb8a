"""What every library reader shares: its statements, its ledger, the horizon first, and the cycle.

A reader is a counting mode (docs/presets.md, "Interface"): the horizon in autocommit, then
its queries in one REPEATABLE READ, READ ONLY transaction, then ``apply`` on their rows. Only
the middle and the end differ between libraries, so a library's reader writes ``statements``,
``queries`` and ``apply``, and this class runs them as :meth:`cycle`. Every reader is built
the same way, ``Reader(stuck_after, ledger, coverage)``, so the registry needs no adapters.
No I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TypeVar

from exporter.counting.gauges import Reading, snapshot_of
from exporter.counting.ledger import Ledger
from exporter.model import Collected, CountingError, Coverage, Cycle, Query, Results, Row, Tallies

T = TypeVar("T")


class LedgerReader(ABC):
    """The part of a library reader that is the same for every library."""

    # The library's name in warnings ("... delays the <library> baseline").
    library = "library"
    # The library's own notion of a lost worker, when the queue sets no heartbeat_timeout.
    default_stuck_after: float | None = None

    def __init__(
        self,
        stuck_after: float | None = None,
        ledger: Ledger | None = None,
        coverage: Coverage | None = None,
    ) -> None:
        """``stuck_after``: the heartbeat age past which a running job is stuck (None: the
        library's default); ``ledger``: where it counts (None: a ledger of its own, as in
        tests); ``coverage``: the series its profile fills (None: every one)."""
        self.sql = self.statements()
        self.stuck_after = stuck_after if stuck_after is not None else self.default_stuck_after
        self.ledger = ledger or Ledger()
        self.coverage = coverage or Coverage()
        self.counting = False  # from the baseline on
        self.start()

    @abstractmethod
    def start(self) -> None:
        """Set up what the library's counting keeps (its cursors), once, when built."""

    @abstractmethod
    def statements(self) -> dict[str, str]:
        """The library's statements by name (``horizon`` among them), rendered for it."""

    @property
    def tallies(self) -> Tallies:
        """What the ledger counted, by job-type label."""
        return self.ledger.tallies

    @property
    def tracked(self) -> int | None:
        """Jobs (or event ids) whose last state the reader keeps to count exactly."""
        return None

    @property
    def held(self) -> int | None:
        """Of them, what waits for the horizon: it grows while a long transaction holds it."""
        return None

    @property
    def stream(self) -> None:
        """Polling: nothing is fed from a change stream."""
        return None

    def horizon_query(self) -> Query:
        """The statement to run in autocommit before the cycle's transaction."""
        return Query("horizon", self.sql["horizon"])

    @abstractmethod
    def queries(self, horizon: Row) -> list[Query]:
        """The cycle's statements, in order, for one REPEATABLE READ, READ ONLY transaction."""

    @abstractmethod
    def apply(self, results: Results) -> Reading:
        """Count the rows of one cycle (by query name) into the ledger; return the gauges."""

    def bind(self, query: Query, results: Results) -> Query:
        """A statement about to run, given the rows of those before it in the same snapshot
        (none of a reader's arguments depend on them unless it says so here)."""
        return query

    def cycle(self, horizon: Row) -> Cycle:
        """The reader's statements in order, then its reading as the queue's snapshot."""
        results: dict[str, list[Row]] = {}
        for query in self.queries(horizon):
            query = self.bind(query, results)
            results[query.name] = list((yield query) or ())
        reading = self.apply(results)
        return Collected(
            snapshot=snapshot_of(reading, self.ledger.labels, self.coverage),
            counting=reading.counting,
            rows_read=sum(reading.rows_read.values()),
            warnings=tuple(reading.warnings),
        )

    def delayed(self, reading: Reading) -> Reading:
        """The reading, saying why the baseline waits: no horizon yet bounds what it missed."""
        why = "a prepared or long transaction delays the"
        reading.warnings.append(f"{why} {self.library} baseline")
        return reading


def planned(*values: T | None) -> tuple[T, ...]:
    """The bounds :meth:`LedgerReader.queries` planned; apply() without them is a bug."""
    if any(value is None for value in values):
        raise CountingError("apply() before queries()")
    return tuple(value for value in values if value is not None)
