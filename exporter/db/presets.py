"""One collection of a preset queue: the horizon in autocommit, then one read-only snapshot.

A preset's reader (exporter/profiles) does no I/O: it hands out named statements and takes
their rows back. This runs them as docs/presets.md ("Interface") requires, on the queue's pool,
whose sessions carry the statement and lock timeouts and are read-only by default.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from exporter.db.pool import Database, DatabaseError, translate


class Statement(Protocol):
    """One named statement and its positional arguments (a preset reader's Query)."""

    @property
    def name(self) -> str:
        """The key its rows are returned under."""
        ...

    @property
    def sql(self) -> str:
        """The statement."""
        ...

    @property
    def args(self) -> tuple[Any, ...]:
        """The values of $1, $2, ..."""
        ...


async def read_cycle(
    database: Database, horizon: Statement, plan: Callable[[Any], Sequence[Statement]]
) -> tuple[dict[str, list[Any]], dict[str, float]]:
    """Run ``horizon`` in autocommit, then the statements ``plan`` makes of its row, in order,
    in one REPEATABLE READ, READ ONLY transaction; the rows by name, and each one's wall time.

    The horizon must run before the snapshot is taken, outside the transaction (the proof of
    exactness rests on it). What ``plan`` raises (a PresetError) passes through as it is; the
    database's errors become DatabaseError.
    """
    durations: dict[str, float] = {}
    results: dict[str, list[Any]] = {}
    async with database.session() as conn:

        async def timed(statement: Statement) -> list[Any]:
            started = time.perf_counter()
            try:
                rows: list[Any] = await conn.fetch(statement.sql, *statement.args)
            except Exception as exc:
                raise translate(exc) from None
            durations[statement.name] = time.perf_counter() - started
            return rows

        row = (await timed(horizon))[0]
        statements = plan(row)
        try:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                for statement in statements:
                    results[statement.name] = await timed(statement)
        except DatabaseError:
            raise
        except Exception as exc:
            raise translate(exc) from None
    return results, durations
