"""``python -m bench.mapped --rows N``: the exporter's cycle on a table read through a table:
mapping, next to the reference job table holding the same rows.

bench/data.py builds the reference table; ``app.tasks`` is the same rows under issue 20's names
(text states and job types, a bigint id), with the exporter's indexes rendered from the mapping.
Both are read by the exporter's own poller (bench/timed.py: its counting mode, its pool, its
table check), their cycles interleaved so that the machine's noise falls on both alike; the dead-letter recount
cycles are reported apart, as bench/cycles.py does. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import replace
from typing import Any

import asyncpg

from bench.data import Shape, build_table
from bench.plans import explain
from bench.processes import unique_name
from bench.stats import median
from bench.timed import bench_queue, started_poller, timed_cycle
from exporter.counting.change_cursor import FOREVER
from exporter.counting.results import ResultPaths
from exporter.counting.sqltext import index_statements, render_queries
from exporter.db.catalog import inspect_table
from exporter.demo.cluster import Cluster
from exporter.model import NIL
from exporter.settings.table import ROLES, TableMapping

MAPPING = TableMapping(
    name="app.tasks",
    columns={
        **{role: role for role in ROLES},
        "job_id": "id", "job_type": "kind", "status": "state", "priority": "prio",
        "attempts": "tries", "max_attempts": "max_tries", "worker_id": "locked_by",
        "lease_until": "locked_until", "run_after": "not_before", "run_started_at": "started_at",
        "result": "output", "last_error": "error", "created_at": "inserted_at",
        "updated_at": "changed_at",
    },
    status_values={"pending": "queued", "running": "active", "done": "finished", "dead": "failed"},
)  # fmt: skip

COPY = """
CREATE SCHEMA app;
CREATE TABLE app.tasks (
    id bigserial PRIMARY KEY, kind text NOT NULL, state text NOT NULL DEFAULT 'queued',
    prio integer NOT NULL DEFAULT 100, payload jsonb NOT NULL DEFAULT '{}'::jsonb,
    dedupe_key text, tries integer NOT NULL DEFAULT 0, max_tries integer NOT NULL DEFAULT 3,
    locked_by text, locked_until timestamptz, not_before timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz, output jsonb, error text,
    inserted_at timestamptz NOT NULL DEFAULT now(), changed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO app.tasks (kind, state, prio, payload, dedupe_key, tries, max_tries, locked_by,
                       locked_until, not_before, started_at, output, error, inserted_at,
                       changed_at)
SELECT 'app.jobs.kind_' || job_type,
       CASE status WHEN 1 THEN 'queued' WHEN 2 THEN 'active' WHEN 3 THEN 'finished'
                   ELSE 'failed' END,
       priority, payload, dedupe_key, attempts, max_attempts, worker_id, lease_until, run_after,
       run_started_at, result, last_error, created_at, updated_at
FROM job ORDER BY created_at;
CREATE INDEX tasks_claim_idx ON app.tasks (prio, inserted_at) WHERE state = 'queued';
"""
# The same rows as Rails keeps them: every time column a timestamp without time zone in UTC,
# and no result column (issue 35); read with table.timestamps.time_zone: UTC.
RAILS = replace(
    MAPPING,
    name="app.rails",
    columns={role: column for role, column in MAPPING.columns.items() if role != "result"},
    time_zone="UTC",
)
_NAIVE = ("locked_until", "not_before", "started_at", "inserted_at", "changed_at")
RAILS_COPY = f"""
CREATE TABLE app.rails AS
SELECT id, kind, state, prio, payload, dedupe_key, tries, max_tries, locked_by,
       {", ".join(f"{c} AT TIME ZONE 'UTC' AS {c}" for c in _NAIVE)}, error
FROM app.tasks ORDER BY id;
ALTER TABLE app.rails ADD PRIMARY KEY (id);
"""


async def prepare(dsn: str, rows: int) -> None:
    """The reference table of ``rows`` rows, and app.tasks holding the same rows."""
    await build_table(dsn, Shape(rows))
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(COPY)
        await conn.execute(RAILS_COPY)
        for statement in [*index_statements(MAPPING), *index_statements(RAILS)]:
            await conn.execute(statement.sql)
        await conn.execute("VACUUM (ANALYZE) app.tasks")
        await conn.execute("VACUUM (ANALYZE) app.rails")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


async def compare(dsn: str, cycles: int, pause: float) -> dict[str, dict[str, Any]]:
    """Median cycle time (ms) of both tables over interleaved cycles, with their plans."""
    tables = {"job (reference)": TableMapping(), "app.tasks (mapped)": MAPPING,
              "app.rails (timestamp in UTC, no result)": RAILS}  # fmt: skip
    out: dict[str, dict[str, Any]] = {n: {"cycles": [], "recounts": []} for n in tables}
    pollers = {name: await started_poller(bench_queue(dsn, mapping))
               for name, mapping in tables.items()}  # fmt: skip
    try:
        for _ in range(cycles):
            for name, poller in pollers.items():
                await asyncio.sleep(pause)
                durations = await timed_cycle(poller)
                total = sum(durations.values()) * 1000
                out[name]["recounts" if "dead" in durations else "cycles"].append(total)
        conn = await asyncpg.connect(dsn)
        try:
            for name, poller in pollers.items():
                # As the table check renders it for the table's real types.
                shape = await inspect_table(poller.database, tables[name])
                sql = render_queries(tables[name], shape)
                since = await conn.fetchval("SELECT now() - interval '1 second'")
                paths = ResultPaths().query_args()
                plans = {
                    "snapshot": await explain(conn, sql["snapshot"], 600.0),
                    "dead": await explain(conn, sql["dead"]),
                    "changes_after": await explain(
                        conn, sql["changes_after"], since, NIL, FOREVER, 5000, *paths
                    ),
                }
                out[name]["explain_ms"] = {n: plan.ms for n, plan in plans.items()}
                out[name]["scans"] = {n: [s for s in plan.nodes if "Scan" in s]
                                      for n, plan in plans.items()}  # fmt: skip
        finally:
            await conn.close()
    finally:
        for poller in pollers.values():
            await poller.database.close()
    return out


def main() -> None:
    """Build both tables on a throwaway cluster, measure, print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.mapped", description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--pause", type=float, default=0.1)
    args = parser.parse_args()
    cluster = Cluster()
    cluster.start()
    try:
        name = unique_name("mapped")
        cluster.create_database(name)
        dsn = cluster.dsn(name)
        began = time.perf_counter()
        asyncio.run(prepare(dsn, args.rows))
        built = time.perf_counter() - began
        result = asyncio.run(compare(dsn, args.cycles, args.pause))
    finally:
        cluster.destroy()
    print(f"{args.rows:,} rows each (built in {built:.0f} s), {args.cycles} cycles each\n")
    print("| table | cycle median ms | dead recount cycle ms | EXPLAIN ANALYZE ms: snapshot, "
          "dead, changes_after |")  # fmt: skip
    print("|---|---|---|---|")
    for name, figures in result.items():
        plans = ", ".join(f"{ms:.2f}" for ms in figures["explain_ms"].values())
        recount = median(figures["recounts"]) if figures["recounts"] else float("nan")
        print(f"| {name} | {median(figures['cycles']):.2f} | {recount:.2f} | {plans} |")
    print("\n| table | scans: snapshot; dead; changes_after |\n|---|---|")
    for name, figures in result.items():
        print(f"| {name} | {'; '.join(', '.join(s) for s in figures['scans'].values())} |")


if __name__ == "__main__":
    main()
