"""``python -m bench.replay``: one window of max-rate load, read by two versions of changes_after.

The machine is shared and a whole ``bench throughput`` run moves by more than the change being
measured, so this keeps everything but the query fixed: pgbench (bench/throughput.py's script)
runs unthrottled for a while on 100,000 rows of history, autovacuum is then turned off, and the
exporter's chunk walk over that window (chunks of 5,000 rows past a keyset cursor, in a
``REPEATABLE READ READ ONLY`` transaction) runs with this checkout's ``changes_after`` and with
the one of ``--baseline`` (a git revision), alternating, timed by ``pg_stat_statements``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile

import asyncpg

from bench import statements
from bench.data import Shape, build_table
from bench.measure import ROOT
from bench.throughput import BACKLOG, pgbench
from exporter.counting.changefeed import NIL
from exporter.counting.results import ResultPaths
from exporter.counting.sqltext import render_queries
from exporter.demo.cluster import Cluster

CHUNK = 5000
# Run in the baseline's checkout: before render_queries took a table name, exporter.db's
# load_queries did (render_queries then wanted a mapping, so the old name is tried first).
PRINT = (
    "import json\n"
    "try:\n    from exporter.db import load_queries as render\n"
    "except ImportError:\n    from exporter.counting.sqltext import render_queries as render\n"
    "print(json.dumps(render('job')))"
)


def baseline_sql(revision: str) -> str:
    """changes_after as ``revision`` renders it for the reference table."""
    with tempfile.TemporaryDirectory() as root:
        archive = subprocess.run(["git", "archive", revision], cwd=ROOT, capture_output=True, check=True)  # fmt: skip
        subprocess.run(["tar", "-x", "-C", root], input=archive.stdout, check=True)
        out = subprocess.run([sys.executable, "-c", PRINT], cwd=root, capture_output=True, check=True)  # fmt: skip
    return str(json.loads(out.stdout)["changes_after"])


async def walk(conn: asyncpg.Connection, sql: str, since: object, until: object) -> int:
    """The exporter's chunk walk over the window; returns the rows read."""
    paths = ResultPaths().query_args()
    cursor: tuple[object, str] = (since, NIL)
    read = 0
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        while True:
            rows = await conn.fetch(sql, *cursor, until, CHUNK, *paths)
            read += len(rows)
            if len(rows) < CHUNK:
                return read
            cursor = (rows[-1]["updated_key"], rows[-1]["job_id"])


async def exec_ms(conn: asyncpg.Connection, sql: str) -> float:
    """The statement's execution time so far, as pg_stat_statements counts it."""
    rows = await conn.fetch("SELECT query, total_exec_time FROM pg_stat_statements")
    found = [
        r["total_exec_time"] for r in rows if statements.label(r["query"], {"it": sql}) == "it"
    ]
    assert found, "the statement is not in pg_stat_statements"
    return float(sum(found))


async def replay(dsn: str, variants: dict[str, str], rounds: int, seconds: float) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "INSERT INTO job (job_type, created_at, updated_at, run_after) SELECT 1 + i % 8, "
            "now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour' "
            "FROM generate_series(1, $1) i",
            BACKLOG,
        )
        await conn.execute("VACUUM ANALYZE job")
        since = await conn.fetchval("SELECT now()")
        load = pgbench(dsn, None, seconds, 8)
        out, _ = await asyncio.to_thread(load.communicate)
        if load.returncode != 0:
            raise SystemExit(out[-3000:])
        until = await conn.fetchval("SELECT now()")
        await conn.execute("ALTER TABLE job SET (autovacuum_enabled = off)")
        await conn.execute("VACUUM ANALYZE job")
        changed = await conn.fetchval("SELECT count(*) FROM job WHERE updated_at >= $1", since)
        done = await conn.fetchval(
            "SELECT count(*) FROM job WHERE updated_at >= $1 AND status = 3", since
        )
        print(f"window: {seconds:.0f} s of pgbench, {changed:,} changed rows, {done:,} DONE")
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(2):  # warm-up: caches, and each statement prepared once
            for sql in variants.values():
                await walk(conn, sql, since, until)
        for _ in range(rounds):
            for name, sql in variants.items():
                before = await exec_ms(conn, sql)
                assert await walk(conn, sql, since, until) >= changed
                times[name].append(await exec_ms(conn, sql) - before)
        first = statistics.median(next(iter(times.values())))
        print("| changes_after | median per walk | min-max | vs first |\n|---|---:|---:|---:|")
        for name, values in times.items():
            median = statistics.median(values)
            print(f"| {name} | {median:,.1f} ms | {min(values):,.1f}-{max(values):,.1f} ms | "
                  f"{(median / first - 1) * 100:+.0f} % |")  # fmt: skip
    finally:
        await conn.close()


def main(argv: list[str]) -> int:
    """Build the window, walk it with both versions, print the medians."""
    parser = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__)
    parser.add_argument("--baseline", default="main", help="git revision to compare with")
    parser.add_argument("--rounds", type=int, default=25, help="walks per version, alternating")
    parser.add_argument("--seconds", type=float, default=20.0, help="pgbench duration")
    args = parser.parse_args(argv)
    variants = {
        f"{args.baseline}": baseline_sql(args.baseline),
        "this checkout": render_queries("job")["changes_after"],
    }
    cluster = Cluster()
    try:
        cluster.start()
        statements.prepare_cluster(cluster)
        cluster.create_database("replay")
        cluster.psql("ALTER DATABASE replay SET synchronous_commit = off")
        dsn = cluster.dsn("replay")
        asyncio.run(build_table(dsn, Shape(rows=100_000)))
        statements.prepare_database(cluster, "replay")
        asyncio.run(replay(dsn, variants, args.rounds, args.seconds))
    finally:
        cluster.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
