"""What the change stream hands the logical counting mode: committed transactions of the queue's
table, each change with its old and new row as PostgreSQL's text output (docs/logical.md).

The database layer decodes them (db/change_stream.py), the counting mode counts them
(counting/stream_counter.py); this module is what the two share, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

INSERT, UPDATE, DELETE, TRUNCATE = "insert", "update", "delete", "truncate"

TextRow = Mapping[str, str | None]  # column name -> text output (a column may be missing: unknown)


@dataclass(frozen=True)
class RowChange:
    """One change of one row: ``old`` is None for an INSERT (and for an UPDATE whose identity
    columns did not change, when the identity is an index), ``new`` is None for a DELETE."""

    kind: str
    old: TextRow | None = None
    new: TextRow | None = None


@dataclass(frozen=True)
class Transaction:
    """The changes of the job table that one transaction committed, with where its commit is."""

    commit_lsn: int  # where the commit record starts
    end_lsn: int  # where it ends: the position a slot is confirmed at once this is counted
    commit_time: float  # Unix seconds, the database's clock
    changes: tuple[RowChange, ...]


class StreamCounting(Protocol):
    """The side of a counting mode that the change stream's follower feeds (db/slot_follower.py)."""

    def take(self, transactions: Iterable[Transaction]) -> None:
        """Count committed transactions in commit order."""
        ...

    @property
    def position(self) -> int:
        """The end of the last counted commit (0: none yet): a /metrics response carries the
        counts up to it, and the slot is confirmed there."""
        ...
