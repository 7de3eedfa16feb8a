"""The state-diff reader's row contract, checked against a preset's own statements on its schema.

counting/statediff.py reads the columns :class:`~exporter.counting.statediff.ChangeRow` declares
(:class:`~exporter.counting.statediff.SnapshotChangeRow` for a table whose ids come from no
sequence) from every ``changes`` row, and ``active_ids`` from every ``gauges`` row. A preset's SQL keeps
that contract; these checks prepare its statements on the library's real schema (nothing is run)
and compare the columns they would return with the declaration.
"""

from __future__ import annotations

import asyncpg

from exporter.counting.statediff import GAUGE_IDS, StateDiffReader


async def returned_columns(dsn: str, reader: StateDiffReader) -> dict[str, set[str]]:
    """The columns the reader's ``changes`` and ``gauges`` statements return, by statement."""
    conn = await asyncpg.connect(dsn)
    try:
        found = {}
        for name in ("changes", "gauges"):
            statement = await conn.prepare(reader.sql[name])
            found[name] = {attribute.name for attribute in statement.get_attributes()}
        return found
    finally:
        await conn.close()


async def assert_keeps_the_contract(dsn: str, reader: StateDiffReader) -> None:
    """The reader's statements return every declared column (and ``changes`` no other)."""
    columns = await returned_columns(dsn, reader)
    contract = reader.row_columns
    assert columns["changes"] == contract, (
        f"changes returns {sorted(columns['changes'])}, the contract is {sorted(contract)}"
    )
    assert GAUGE_IDS in columns["gauges"]
