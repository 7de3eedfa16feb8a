"""What a queue's change stream reads, and what its table must send for the count to be exact.

The profile that streams a queue answers (exporter/profiles); the start-up checks and the
``logical-setup`` SQL (exporter/db/slot_checks.py, exporter/db/slot_setup.py) read the answer,
so the set-up printed and the set-up accepted come from one description.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IdentityIndex:
    """A unique index that, as the table's replica identity, carries the old values the count
    reads; ``exact``: the count stays exact under it for this table (logical-setup then prints
    it, else FULL and this as an option with its condition)."""

    name: str
    columns: tuple[str, ...]
    exact: bool


@dataclass(frozen=True)
class LogicalTarget:
    """The table a queue's change stream reads and what its replica identity must carry.

    ``key_column``: the status column, whose old value an identity index must carry (None: only
    REPLICA IDENTITY FULL gives the old row the counting needs). ``attempts_column``: where a
    worker's release (attempts - 1) must be told from a failure, the identity carries it too.
    ``columns``: every column the count reads from the stream, the least a publication's column
    list may hold (empty: the whole row). ``done_value``: the status of a finished row, whose
    deletes a filtered delete publication may leave out (None: no such filter is safe).
    """

    table: str
    key_column: str | None
    attempts_column: str | None = None
    columns: tuple[str, ...] = ()
    index: IdentityIndex | None = None
    done_value: int | str | None = None

    @property
    def identity_needs(self) -> tuple[str, ...]:
        """The columns whose old values a replica identity other than FULL must carry."""
        return tuple(c for c in (self.key_column, self.attempts_column) if c is not None)
