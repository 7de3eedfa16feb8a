"""A preset counted from its table's change stream (collect.counting: logical, docs/logical.md).

The preset's own reader still reads the gauges every cycle, as under polling, but whatever it
counts goes to a ledger of its own that nothing exports: every counter and histogram comes from
the preset's change rules (:class:`ChangeRules`, one per preset, e.g.
:mod:`exporter.profiles.graphile_stream`), fed the committed transactions the follower hands
over. Each is counted as it is handed over when the rules can name what it needs; from the
first one they cannot (a task new since the last cycle), in the next cycle, after the rules'
lookups (graphile's task names) were read in a snapshot that sees every transaction handed over
before it. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Self

from exporter.counting.reader import LedgerReader
from exporter.counting.stream_mode import TRUNCATE_MESSAGE
from exporter.model import Collected, Coverage, Cycle, Notice, PresetJobTypes, Query, Row
from exporter.model.row_changes import TRUNCATE, Transaction
from exporter.profiles.base import ChangeRules
from exporter.profiles.mapping import snapshot_of


@dataclass
class StreamedMode:
    """A preset's gauges from its reader, its counts from its change rules."""

    reader: LedgerReader  # counts into a ledger nothing exports: only its gauges are used
    rules: ChangeRules
    labels: PresetJobTypes
    coverage: Coverage
    table: str  # named in the TRUNCATE notice
    position: int = 0  # the end of the last counted commit (0: none yet)
    changes: int = 0  # changes counted since start
    truncates: int = 0
    _pending: list[Transaction] = field(default_factory=list)
    _truncates_seen: int = 0
    _taken: int = 0  # changes counted since the last cycle's report

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
        """Count committed transactions now, in commit order, or keep them for the next cycle
        from the first one the rules cannot name yet (one sent again is skipped)."""
        for transaction in transactions:
            last = self._pending[-1].end_lsn if self._pending else self.position
            if transaction.end_lsn <= last:
                continue
            self._pending.append(transaction)
            # Counted at once when the rules know every name it needs, so a mode replaced
            # before its next cycle (a rebaseline) drops nothing the follower has passed.
            if len(self._pending) == 1 and all(map(self.rules.ready, transaction.changes)):
                self._count()

    def horizon_query(self) -> Query:
        """The reader's horizon statement (its gauges' cycle needs it)."""
        return self.reader.horizon_query()

    def cycle(self, horizon: Row) -> Cycle:
        """The rules' lookups, the handed-over changes counted, then the reader's gauges."""
        looked: dict[str, list[Row]] = {}
        for name, sql in self.rules.lookups.items():
            looked[name] = list((yield Query(name, sql)) or ())
        self.rules.look(looked)
        self._count()
        read, self._taken = self._taken, 0
        results: dict[str, list[Row]] = {}
        for query in self.reader.queries(horizon):
            results[query.name] = list((yield query) or ())
        reading = self.reader.apply(results)
        notices: tuple[Notice, ...] = ()
        if self.truncates > self._truncates_seen:
            self._truncates_seen = self.truncates
            notices = (Notice(TRUNCATE_MESSAGE, {"table": self.table}),)
        return Collected(
            snapshot=snapshot_of(reading, self.labels, self.coverage),
            counting=True,
            rows_read=read,
            warnings=tuple(reading.warnings),
            notices=notices,
        )

    def _count(self) -> None:
        """Count every kept transaction."""
        read = 0
        for transaction in self._pending:
            for change in transaction.changes:
                if change.kind == TRUNCATE:
                    self.truncates += 1
                else:
                    self.rules.count(change, transaction.commit_time)
                read += 1
            self.position = transaction.end_lsn
        self.changes += read
        self._pending.clear()
        self._taken += read
