"""The exporter's own poller of a bench queue, and its counting mode's cycles timed statement by
statement.

The poller is built from the queue's settings exactly as `jobqueue-exporter run` builds it (the
profile's mode, labels and tallies, the pooled read-only session), and its first collection
runs as the service runs it: the index check, the table check that renders the SQL for the
table's real types, the baseline. The timed cycles are then :func:`exporter.db.run_cycle` on
that mode and pool with the poller's read budget, because the bench reports each statement's
time, which the poller keeps only for the last run of each.
"""

from __future__ import annotations

from dataclasses import replace

from exporter.db import Database, run_cycle
from exporter.poller import READ_BUDGET_SHARE, Poller
from exporter.runtime import connect_options
from exporter.settings import CollectSettings, DatabaseSettings, QueueSettings
from exporter.settings.table import TableMapping


def bench_queue(dsn: str, mapping: TableMapping | None = None) -> QueueSettings:
    """A queue on ``dsn`` with the default settings: the reference job table, or ``mapping``."""
    table = mapping or TableMapping()
    return QueueSettings(
        name="bench",
        database=DatabaseSettings(dsn=dsn, table=table.name),
        # No election: the bench's poller reads alongside the exporter process it measures.
        collect=replace(CollectSettings(), leader_election=False),
        table=table,
    )


async def started_poller(settings: QueueSettings) -> Poller:
    """The queue's poller after its first collection (the baseline); close its database."""
    poller = Poller(settings, Database(connect_options(settings)))
    if not await poller.collect_once():
        await poller.database.close()
        raise RuntimeError(f"the baseline collection failed: {poller.health.last_error}")
    return poller


async def timed_cycle(poller: Poller) -> dict[str, float]:
    """One cycle of the poller's mode; each statement's wall time in seconds."""
    budget = poller.settings.collect.timeout * READ_BUDGET_SHARE
    _, durations = await run_cycle(poller.database, poller.mode, budget)
    return durations
