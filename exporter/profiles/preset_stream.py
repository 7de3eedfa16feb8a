"""A preset counted from its table's change stream (collect.counting: logical, docs/logical.md).

The preset's own reader still reads the gauges every cycle, as under polling, but whatever it
counts goes to a ledger of its own that nothing exports: every counter and histogram comes from
the preset's change rules (:class:`ChangeRules`, one per preset, e.g.
:mod:`exporter.profiles.graphile_stream`), folded in the stream's thread by the keys the rules
choose (graphile's task ids). A batch handed over is counted at once when the rules can name
every key in it; from the first one they cannot (a task new since the last cycle), in the next
cycle, after the rules' lookups (graphile's task names) were read in a snapshot that sees every
transaction handed over before it. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.counting.reader import LedgerReader
from exporter.counting.stream_counter import credit
from exporter.counting.stream_mode import TRUNCATE_MESSAGE
from exporter.model import (
    Collected,
    Coverage,
    Cycle,
    JobType,
    Notice,
    PresetJobTypes,
    Query,
    Row,
    Tallies,
)
from exporter.model.row_changes import Batch, ChangeFold, FedByStream
from exporter.profiles.base import ChangeRules
from exporter.profiles.mapping import snapshot_of


@dataclass
class StreamedMode(FedByStream):
    """A preset's gauges from its reader, its counts from its change rules."""

    reader: LedgerReader  # counts into a ledger nothing exports: only its gauges are used
    rules: ChangeRules
    labels: PresetJobTypes
    tallies: Tallies  # the queue's
    coverage: Coverage
    table: str  # named in the TRUNCATE notice
    position: int = 0  # the end of the last counted commit (0: none yet)
    changes: int = 0  # changes counted since start
    truncates: int = 0
    _pending: list[Batch] = field(default_factory=list)
    _truncates_seen: int = 0
    _taken: int = 0  # changes counted since the last cycle's report
    _unmapped: list[tuple[str, str | None]] = field(default_factory=list)  # no status: unused

    def fold(self) -> ChangeFold:
        """The rules the stream's thread folds each change with."""
        tallies = self.tallies
        return self.rules.fold((tallies.duration_bounds, tallies.wait_bounds,
                                tallies.latency_bounds))  # fmt: skip

    def take(self, batch: Batch) -> None:
        """Count a batch now, or keep it for the next cycle from the first one the rules
        cannot name yet."""
        self._pending.append(batch)
        # Counted at once when the rules know every key it needs, so a mode replaced before
        # its next cycle (a rebaseline) drops nothing the follower has passed.
        if len(self._pending) == 1 and all(map(self.rules.known, _keys(batch))):
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
        """Count every kept batch, each key under the name the rules give it."""
        for batch in self._pending:
            tally = batch.tally
            credit(tally, self.tallies, self._label, self._unmapped)
            self.changes += tally.changes
            self._taken += tally.changes
            self.truncates += tally.truncates
            self.position = batch.position
        self._pending.clear()

    def _label(self, key: JobType) -> str:
        return self.labels.label_of_name(self.rules.name(key))


def _keys(batch: Batch) -> set[JobType]:
    """Every key a batch counts under."""
    tally = batch.tally
    keys: set[JobType] = {*tally.enqueued, *tally.completed, *tally.requeued, *tally.cancelled}
    keys.update(key for key, _ in tally.failures)
    keys.update(key for key, _ in tally.dead)
    return keys
