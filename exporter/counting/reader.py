"""What every library reader shares: its statements by name, its ledger, and the horizon first.

A reader is one counting mode driven cycle by cycle (docs/presets.md, "Interface"): the
horizon in autocommit, then its queries in one REPEATABLE READ, READ ONLY transaction, then
``apply`` on their rows. Only the middle and the end differ between libraries. No I/O.
"""

from __future__ import annotations

from exporter.counting.ledger import Ledger
from exporter.model import Query, Tallies


class LedgerReader:
    """The part of a library reader that is the same for every library."""

    def __init__(self, sql: dict[str, str], ledger: Ledger | None) -> None:
        """``sql``: the library's statements by name (``horizon`` among them)."""
        self.sql = sql
        self.ledger = ledger or Ledger()
        self.counting = False  # from the baseline on

    @property
    def tallies(self) -> Tallies:
        """What the ledger counted, by job-type label."""
        return self.ledger.tallies

    def horizon_query(self) -> Query:
        """The statement to run in autocommit before the cycle's transaction."""
        return Query("horizon", self.sql["horizon"])
