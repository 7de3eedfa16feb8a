"""Plans, timings and rows read of each preset's per-cycle queries on about 1,000,000 rows.

The history is generated with generate_series into the schema each library installed itself,
then VACUUM ANALYZE; a few hundred new jobs land between cycles, as on a busy queue.

Run the measurement that docs/presets.md quotes (from the work tree, with .venv set up):
    .venv/bin/python -m tests.system.presets.explain [procrastinate|pgqueuer|pgboss|django-tasks|solid-queue]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from exporter.counting.reader import LedgerReader
from exporter.db import ConnectOptions, Database
from exporter.poller import Poller
from exporter.runtime import connect_options
from tests.system.presets.exported import preset_queue
from tests.system.presets.processes import run_node

ROWS = 1_000_000
INDEX_DIR = Path(__file__).resolve().parents[3] / "exporter" / "profiles" / "sql"

# History first (terminal rows, no triggers fire for them), then a realistic active set.
PROCRASTINATE_HISTORY = [
    """INSERT INTO procrastinate_jobs (queue_name, task_name, status, attempts, args)
       SELECT 'work', 'task_' || (g % 20), 'succeeded', 1, '{}'
       FROM generate_series(1, $1::int) g""",
    """INSERT INTO procrastinate_events (job_id, type, at)
       SELECT j.id, t.type, now() - interval '7 days' + j.id * interval '0.5 s' + t.shift
       FROM procrastinate_jobs j
       CROSS JOIN (VALUES ('deferred'::procrastinate_job_event_type, interval '0'),
                          ('started', interval '1 s'), ('succeeded', interval '2 s')) t(type, shift)
       WHERE j.id <= $1::int / 3""",
    # The insert trigger writes each todo job's deferred event, as in real life.
    """INSERT INTO procrastinate_jobs (queue_name, task_name, status, args)
       SELECT 'work', 'task_' || (g % 20), 'todo', '{}' FROM generate_series(1, 2000) g""",
]
PROCRASTINATE_BATCH = [
    """INSERT INTO procrastinate_jobs (queue_name, task_name, status, args)
       SELECT 'work', 'task_' || (g % 20), 'todo', '{}' FROM generate_series(1, 200) g""",
]
PGQUEUER_HISTORY = [
    """INSERT INTO pgqueuer_log (job_id, status, priority, entrypoint, created, aggregated)
       SELECT g / 3, (ARRAY['queued', 'picked', 'successful'])[g % 3 + 1]::pgqueuer_status, 0,
              'ep_' || (g / 3 % 20), now() - interval '7 days' + g * interval '0.5 s', true
       FROM generate_series(1, $1::int) g""",
    """INSERT INTO pgqueuer (priority, entrypoint, status)
       SELECT 0, 'ep_' || (g % 20), 'queued' FROM generate_series(1, 2000) g""",
    """INSERT INTO pgqueuer (priority, entrypoint, status, heartbeat)
       SELECT 0, 'ep_' || (g % 20), 'picked', now() FROM generate_series(1, 50) g""",
    """INSERT INTO pgqueuer (priority, entrypoint, status)
       SELECT 0, 'ep_' || (g % 20), 'failed' FROM generate_series(1, 100) g""",
]
PGQUEUER_BATCH = [
    """WITH j AS (INSERT INTO pgqueuer (priority, entrypoint, status)
                 SELECT 0, 'ep_' || (g % 20), 'queued' FROM generate_series(1, 200) g
                 RETURNING id, entrypoint)
       INSERT INTO pgqueuer_log (job_id, status, priority, entrypoint)
       SELECT id, 'queued', 0, entrypoint FROM j""",
]
PGBOSS_QUEUES = ("ok", "flaky", "bad", "slow", "later", "parked")
PGBOSS_HISTORY = [
    """INSERT INTO pgboss.job (name, state, created_on, start_after, started_on, completed_on)
       SELECT (ARRAY['ok', 'flaky', 'bad', 'slow', 'later', 'parked'])[g % 6 + 1],
              (CASE WHEN g % 50 = 0 THEN 'failed' ELSE 'completed' END)::pgboss.job_state,
              t, t, t + interval '1 s', t + interval '2 s'
       FROM (SELECT g, now() - interval '7 days' + g * interval '0.5 s' AS t
             FROM generate_series(1, $1::int) g) s""",
    """INSERT INTO pgboss.job (name, state)
       SELECT (ARRAY['ok', 'flaky', 'bad', 'slow', 'later', 'parked'])[g % 6 + 1], 'created'
       FROM generate_series(1, 2000) g""",
    """INSERT INTO pgboss.job (name, state, started_on)
       SELECT (ARRAY['ok', 'flaky', 'bad', 'slow', 'later', 'parked'])[g % 6 + 1], 'active', now()
       FROM generate_series(1, 50) g""",
]
PGBOSS_BATCH = [
    """INSERT INTO pgboss.job (name, state, started_on, completed_on)
       SELECT (ARRAY['ok', 'flaky', 'bad', 'slow', 'later', 'parked'])[g % 6 + 1], 'completed',
              now(), now()
       FROM generate_series(1, 200) g""",
]


@dataclass
class Measurement:
    """What the measured cycles of one preset cost."""

    preset: str
    big_tables: tuple[str, ...]
    cycle_ms: list[float] = field(default_factory=list)
    rows_read: list[int] = field(default_factory=list)
    exporter_ms: list[float] = field(default_factory=list)  # the exporter's own collections
    plans: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def seq_scans(self) -> list[str]:
        """'query: table' for every Seq Scan on a big table in any plan."""
        found = []
        for name, plan in self.plans.items():
            for node in _nodes(plan[0]["Plan"]):
                table = node.get("Relation Name")
                if node["Node Type"] == "Seq Scan" and table in self.big_tables:
                    found.append(f"{name}: {table}")
        return found

    def report(self) -> str:
        """The summary, then each statement's time and rows read, and the seq scans."""
        lines = [self.summary()]
        for query, plan in self.plans.items():
            root = plan[0]
            lines.append(f"  {query}: {root['Execution Time']:.2f} ms, "
                         f"{rows_read(root['Plan'])} rows read")  # fmt: skip
        lines.append(f"  seq scans on big tables: {self.seq_scans() or 'none'}")
        return "\n".join(lines)

    def summary(self) -> str:
        """One line for docs/presets.md."""
        return (
            f"{self.preset}: cycle median {statistics.median(self.cycle_ms):.1f} ms "
            f"(max {max(self.cycle_ms):.1f}), rows read median "
            f"{int(statistics.median(self.rows_read))} (max {max(self.rows_read)})"
            + (
                f"; exporter collection median {statistics.median(self.exporter_ms):.1f} ms "
                f"(max {max(self.exporter_ms):.1f})"
                if self.exporter_ms
                else ""
            )
        )


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out.extend(_nodes(child))
    return out


def rows_read(plan: dict[str, Any]) -> int:
    """Rows the scans of a plan produced or filtered away (what a cycle makes the server read)."""
    total = 0.0
    for node in _nodes(plan):
        # A Bitmap Index Scan's rows are read again by its Bitmap Heap Scan: count them once.
        kind = node["Node Type"]
        if "Scan" in kind and kind != "Bitmap Index Scan" and "Actual Rows" in node:
            loops = node.get("Actual Loops", 1)
            kept = node["Actual Rows"]
            removed = node.get("Rows Removed by Filter", 0) + node.get(
                "Rows Removed by Index Recheck", 0
            )
            total += (kept + removed) * loops
    return int(total)


class ExplainingDatabase(Database):
    """The exporter's pool, whose sessions EXPLAIN (ANALYZE, BUFFERS) each statement of a cycle
    on the cycle's own snapshot before running it, while ``measurement`` is set."""

    def __init__(self, options: ConnectOptions) -> None:
        super().__init__(options)
        self.measurement: Measurement | None = None
        self.names: dict[str, str] = {}  # statement text -> its name in the reader's SQL
        self.read, self.elapsed = 0, 0.0  # of the cycle under way

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Any]:
        """A pooled session whose fetch() is explained and timed."""
        async with super().session() as conn:
            yield _ExplainedSession(conn, self)


class _ExplainedSession:
    """A pooled connection; fetch() explains first, then times the statement alone."""

    def __init__(self, conn: Any, database: ExplainingDatabase) -> None:
        self._conn = conn
        self._database = database

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        database = self._database
        if database.measurement is not None:
            text = await self._conn.fetchval(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, *args
            )
            plan = json.loads(text)
            name = database.names.get(sql, f"statement {len(database.measurement.plans)}")
            database.measurement.plans[name] = plan
            database.read += rows_read(plan[0]["Plan"])
        started = time.perf_counter()
        rows: list[Any] = await self._conn.fetch(sql, *args)
        database.elapsed += time.perf_counter() - started
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def explaining_poller(dsn: str, preset: str) -> Poller:
    """The exporter's Poller of the preset's queue over an :class:`ExplainingDatabase`; long
    timeouts, since every statement runs twice on a million rows."""
    queue = preset_queue(dsn, preset, 1.0, timeout=120.0, statement_timeout=60.0)
    return Poller(queue, ExplainingDatabase(connect_options(queue)))


async def explained_cycle(poller: Poller, measurement: Measurement | None) -> None:
    """One collection of the shipping poller, each statement explained into ``measurement``."""
    database = poller.database
    assert isinstance(database, ExplainingDatabase)
    mode = poller.mode
    assert isinstance(mode, LedgerReader)
    database.names = {sql: name for name, sql in mode.sql.items()}
    database.measurement, database.read, database.elapsed = measurement, 0, 0.0
    try:
        assert await poller.collect_once(), poller.health.last_error
    finally:
        database.measurement = None
    if measurement is not None:
        measurement.cycle_ms.append(database.elapsed * 1000)
        measurement.rows_read.append(database.read)


async def measure(
    dsn: str,
    preset: str,
    history: list[str],
    batch: list[str],
    big_tables: tuple[str, ...],
    cycles: int = 7,
    poller: Poller | None = None,
) -> Measurement:
    """Fill the installed schema, analyze it, then measure ``cycles`` counting cycles of the
    exporter's poller (``poller``: one made by :func:`explaining_poller`, for more cycles)."""
    explaining = poller or explaining_poller(dsn, preset)
    conn = await asyncpg.connect(dsn)
    try:
        for statement in history:
            args = (ROWS,) if "$1" in statement else ()
            await conn.execute(statement, *args)
        index_file = INDEX_DIR / f"{preset}_indexes.sql"
        if index_file.exists():
            await conn.execute(index_file.read_text())
        await conn.execute("VACUUM ANALYZE")
        measurement = Measurement(preset, big_tables)
        for _ in range(3):  # the baseline, and the first counting cycle
            await explained_cycle(explaining, None)
        for _ in range(cycles):
            for statement in batch:
                await conn.execute(statement)
            await explained_cycle(explaining, measurement)
        measurement.exporter_ms = await exporter_collections(conn, dsn, preset, batch, cycles)
        return measurement
    finally:
        await conn.close()
        if poller is None:
            await explaining.database.close()


async def exporter_collections(
    conn: asyncpg.Connection, dsn: str, preset: str, batch: list[str], cycles: int
) -> list[float]:
    """Wall time (ms) of the exporter's own collections of the same queue, unexplained: Poller,
    its pool, db/cycle.py and the mapping onto the model, as `jobqueue-exporter run` runs them."""
    queue = preset_queue(dsn, preset, 1.0)
    poller = Poller(queue, Database(connect_options(queue)))
    out: list[float] = []
    try:
        for _ in range(3):  # the baseline, the index check, the first counting cycle
            assert await poller.collect_once(), poller.health.last_error
        for _ in range(cycles):
            for statement in batch:
                await conn.execute(statement)
            assert await poller.collect_once(), poller.health.last_error
            out.append(poller.health.collection_duration * 1000)
    finally:
        await poller.database.close()
    return out


def assert_stays_on_indexes(result: Measurement) -> None:
    """What every preset's EXPLAIN test requires: plans captured, no Seq Scan on a big table,
    and fewer than 20,000 rows read in any cycle on 1,000,000 rows."""
    assert result.plans, "no plan was captured"
    assert result.seq_scans() == [], result.summary()
    assert max(result.rows_read) < ROWS // 50, result.summary()


async def on_a_cluster(name: str, run: Callable[[str], Awaitable[Measurement]]) -> Measurement:
    """``run`` on a new database of a throwaway cluster, removed afterwards."""
    from exporter.demo.cluster import Cluster

    cluster = Cluster()
    cluster.start()
    try:
        dbname = f"explain_{name}_{uuid.uuid4().hex[:6]}"
        cluster.create_database(dbname)
        return await run(cluster.dsn(dbname))
    finally:
        cluster.destroy()


async def measure_alone(name: str, run: Callable[[str], Awaitable[Measurement]]) -> None:
    """One preset's measurement in a throwaway cluster of its own, printed (``python -m``)."""
    print(f"{ROWS:,} rows; {(await on_a_cluster(name, run)).report()}")


async def _main() -> None:
    from exporter.demo.cluster import Cluster
    from tests.system.presets import pgboss_harness, pgqueuer_harness, procrastinate_harness
    from tests.system.presets.django_explain import measure_django_tasks
    from tests.system.presets.solid_queue_explain import measure_solid_queue

    cluster = Cluster()
    cluster.start()
    try:
        cases: list[tuple[str, Callable[[str], Awaitable[Measurement]]]] = [
            (
                "procrastinate",
                lambda dsn: measure_procrastinate(dsn, procrastinate_harness.install),
            ),
            ("pgqueuer", lambda dsn: measure_pgqueuer(dsn, pgqueuer_harness.install)),
            ("pgboss", lambda dsn: measure_pgboss(dsn, pgboss_harness)),
            ("django-tasks", measure_django_tasks),
            ("solid-queue", measure_solid_queue),
        ]
        for name, run in cases:
            if len(sys.argv) > 1 and name not in sys.argv[1:]:
                continue
            dbname = f"explain_{name}_{uuid.uuid4().hex[:6]}"
            cluster.create_database(dbname)
            print((await run(cluster.dsn(dbname))).report())
    finally:
        cluster.destroy()


async def measure_procrastinate(dsn: str, install: Callable[[str], None]) -> Measurement:
    """The procrastinate figures."""
    install(dsn)
    return await measure(dsn, "procrastinate", PROCRASTINATE_HISTORY,
                         PROCRASTINATE_BATCH, ("procrastinate_jobs", "procrastinate_events"))  # fmt: skip


async def measure_pgqueuer(dsn: str, install: Callable[[str], None]) -> Measurement:
    """The pgqueuer figures."""
    install(dsn)
    return await measure(dsn, "pgqueuer", PGQUEUER_HISTORY, PGQUEUER_BATCH,
                         ("pgqueuer_log", "pgqueuer_statistics"))  # fmt: skip


async def measure_pgboss(dsn: str, harness: Any) -> Measurement:
    """The pg-boss figures (queues made by pg-boss itself, one of them partitioned)."""
    harness.install(dsn)
    run_node([str(harness.DRIVER), "queues", dsn], "the pg-boss queue script")
    partitions = ("job", "job_common")
    conn = await asyncpg.connect(dsn)
    try:
        own = await conn.fetch("SELECT table_name FROM pgboss.queue WHERE partition")
    finally:
        await conn.close()
    tables = partitions + tuple(r["table_name"] for r in own)
    return await measure(dsn, "pgboss", PGBOSS_HISTORY, PGBOSS_BATCH, tables)


if __name__ == "__main__":
    asyncio.run(_main())
