"""One cycle of any counting mode: the horizon in autocommit, then one read-only snapshot.

A counting mode (exporter/counting) does no I/O: it hands out named statements and takes their
rows back. This runs them as docs/presets.md ("Interface") requires, on a pooled session, which
carries the statement and lock timeouts and is read-only by default.
"""

from __future__ import annotations

import time
from typing import Any

from exporter.db.pool import Database, translate
from exporter.model import Collected, CountingMode, Cycle, Query


async def run_cycle(
    database: Database, mode: CountingMode, budget: float = float("inf")
) -> tuple[Collected, dict[str, float]]:
    """Run ``mode``'s horizon statement in autocommit, then the statements its cycle hands out,
    one at a time, in one REPEATABLE READ, READ ONLY transaction; what the cycle collected and
    each statement's wall time (the slowest run of a statement run several times).

    The horizon must run before the snapshot is taken, outside the transaction (the proof of
    exactness rests on it). Deferrable statements (chunks of changes) after the first are left
    unrun once ``budget`` seconds have passed since the first of them started. What the mode
    raises (a CountingError) passes through as it is; the database's errors become
    DatabaseError.
    """
    durations: dict[str, float] = {}
    async with database.session() as conn:

        async def timed(query: Query) -> list[Any]:
            started = time.perf_counter()
            try:
                rows: list[Any] = await conn.fetch(query.sql, *query.args)
            except Exception as exc:
                raise translate(exc) from None
            elapsed = time.perf_counter() - started
            durations[query.name] = max(elapsed, durations.get(query.name, 0.0))
            return rows

        horizon = (await timed(mode.horizon_query()))[0]
        cycle = mode.cycle(horizon)
        deferred_since: float | None = None
        try:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                query = _step(cycle, None)
                while isinstance(query, Query):
                    rows: list[Any] | None = None
                    run = True
                    if query.deferrable:
                        # The first one always runs: a cycle reads at least one chunk.
                        if deferred_since is None:
                            deferred_since = time.perf_counter()
                        else:
                            run = time.perf_counter() - deferred_since < budget
                    if run:
                        rows = await timed(query)
                    query = _step(cycle, rows)
        except _ModeFailed as failed:
            raise failed.error from None
        except Exception as exc:
            raise translate(exc) from None
    return query, durations


class _ModeFailed(Exception):
    """Carries what the counting mode raised past the translation of database errors."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _step(cycle: Cycle, rows: list[Any] | None) -> Query | Collected:
    """The mode's next statement, or what it collected once it has no more."""
    try:
        return cycle.send(rows)  # the first send(None) starts the generator
    except StopIteration as stop:
        collected: Collected = stop.value
        return collected
    except Exception as exc:
        raise _ModeFailed(exc) from exc
