"""What the change stream and the counting modes share: row changes, the rules that fold them,
and the batches handed from the stream's thread to the event loop (docs/logical.md).

The database layer decodes each committed change of the queue's table (db/change_stream.py) and
folds it at once, in its thread, with the profile's rules (:class:`ChangeFold`, pure: e.g.
counting/stream_counter.py) into a :class:`~exporter.model.change_tally.ChangeTally`; the counting
mode takes the tallies (:class:`StreamCounting`). This module is what the two sides share, so
neither imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, Protocol, Self

from exporter.model.change_tally import ChangeTally

INSERT, UPDATE, DELETE, TRUNCATE = "insert", "update", "delete", "truncate"

# Column name -> PostgreSQL's text output of the value. A column the change did not carry (the
# old row of an identity index holds only its key; an unchanged TOASTed value whose old row is
# not sent) is missing: unknown, which is not NULL.
TextRow = Mapping[str, str | None]


class RowChange(NamedTuple):
    """One change of one row: ``old`` is None for an INSERT (and for an UPDATE whose identity
    columns did not change, when the identity is an index), ``new`` is None for a DELETE.
    A tuple rather than a frozen dataclass: the stream's thread makes one per change, and a
    tuple is made in half the time."""

    kind: str
    old: TextRow | None = None
    new: TextRow | None = None


class ChangeFold(Protocol):
    """A profile's transition rules, run in the stream's thread: each committed change of the
    table into a tally. Pure; one thread uses it at a time."""

    @property
    def columns(self) -> frozenset[str]:
        """The table's columns the rules read: the decoder keeps these and steps over the rest."""
        ...

    @property
    def old_columns(self) -> frozenset[str]:
        """Of them, those the rules read from the old row of an UPDATE (a DELETE's is read
        whole): fewer values decoded for the most frequent change."""
        ...

    @property
    def status(self) -> str:
        """The column whose old and new values tell an UPDATE that counts nothing."""
        ...

    def quiet(self, old: str | None, new: str | None) -> bool:
        """True when an UPDATE from ``old`` to ``new`` in :attr:`status` (text) counts nothing
        (a claim, a heartbeat): the decoder then drops it before it builds the rows."""
        ...

    def tally(self) -> ChangeTally:
        """A new, empty tally with the queue's histogram buckets."""
        ...

    def count(self, change: RowChange, commit_time: float, tally: ChangeTally) -> None:
        """Count one committed change (``commit_time``: Unix seconds, the database's clock)."""
        ...


@dataclass
class Batch:
    """What the stream's thread folded since the last hand-over: whole transactions only."""

    tally: ChangeTally
    position: int  # the end of the last commit folded in: the slot may be confirmed here
    commits: int = 0  # transactions folded in


class StreamCounting(Protocol):
    """The side of a counting mode that the change stream's follower feeds (db/slot_follower.py)."""

    def fold(self) -> ChangeFold:
        """The rules the stream's thread folds each change with."""
        ...

    def take(self, batch: Batch) -> None:
        """Count a batch (batches come in commit order, none twice)."""
        ...

    @property
    def position(self) -> int:
        """The end of the last counted commit (0: none yet): a /metrics response carries the
        counts up to it, and the slot is confirmed there."""
        ...


class FedByStream:
    """What a counting mode fed by the change stream says of itself to the poller: it keeps no
    job's state and holds no finished job, and it is its own stream side."""

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
