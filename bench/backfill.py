"""``python -m bench.backfill``: one transaction that changes 200,000 rows, read from the stream.

A backfill (or a bulk retention delete, or a mass requeue) commits one transaction of a great
many changes. The stream used to keep every change of an open transaction until its Commit, and
every column of each as text: 200,000 rows took the exporter from 54 to 543-551 MiB. This runs
the exporter (``collect.counting: logical``, set up from ``logical-setup``'s own SQL) on a
throwaway ``wal_level = logical`` cluster, inserts ``--rows`` pending jobs, then completes all of
them in one UPDATE, and prints the exporter's peak RSS before, during and after, the slowest
``/metrics`` answer while the transaction was decoded, and whether the completions counted equal
the rows. Then the same for a quiet backfill (an UPDATE that changes no status), which the
stream drops after reading each change's status alone.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import aiohttp
import asyncpg

from bench import logical
from bench.processes import ROOT, Process, wait_ready
from bench.throughput import parse, start_exporter, total
from exporter.demo.cluster import Cluster
from exporter.demo.queue import prepare_database

COMPLETE_ALL = """
UPDATE job SET status = 3, worker_id = NULL, lease_until = NULL, updated_at = now(),
       run_started_at = now(), attempts = 1,
       result = '{"metrics": {"duration_ms": 1200, "cost": {"ai_usd": 0.01, "total_usd": 0.02}}}'
 WHERE status = 1
"""
TOUCH_ALL = "UPDATE job SET priority = priority + 1"


async def watch(port: int, exporter: Process, stop: asyncio.Event) -> tuple[int, float]:
    """Peak RSS and the slowest /metrics answer until ``stop``."""
    rss, slowest = 0, 0.0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        while not stop.is_set():
            started = time.monotonic()
            async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                await resp.read()
            slowest = max(slowest, time.monotonic() - started)
            rss = max(rss, exporter.rss_bytes())
            await asyncio.sleep(0.2)
    return rss, slowest


async def completed(port: int) -> float:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as resp,
    ):
        return total(parse(await resp.text()), "jobqueue_jobs_completed_total")


async def run(cluster: Cluster, rows: int) -> None:
    cluster.create_database("backfill")
    dsn = cluster.dsn("backfill")
    await prepare_database(dsn)
    logical.setup_logical(cluster, "backfill", dsn)
    exporter, port = start_exporter(dsn, "15s", ROOT, ("--collect.counting=logical",))
    try:
        await wait_ready(port, exporter)
        await logical.wait_streaming(dsn)
        conn = await asyncpg.connect(dsn)
        try:
            for start in range(0, rows, 50_000):
                await conn.execute(
                    "INSERT INTO job (job_type, payload) "
                    "SELECT 1 + n % 8, '{\"product_code\": \"P\"}' FROM generate_series($1::int, $2::int) n",
                    start, min(rows, start + 50_000) - 1,
                )  # fmt: skip
            await asyncio.sleep(16)  # a cycle counts the inserts
            before = exporter.rss_bytes()
            for label, statement in (("completes every row", COMPLETE_ALL),
                                     ("changes no status (quiet)", TOUCH_ALL)):  # fmt: skip
                stop = asyncio.Event()
                watcher = asyncio.create_task(watch(port, exporter, stop))
                started = time.monotonic()
                await conn.execute(statement)
                # Until the stream has read it all: the completions counted, or the slot's lag
                # gone (the quiet one counts nothing).
                deadline = time.monotonic() + 300
                while time.monotonic() < deadline:
                    lag = await conn.fetchval(
                        "SELECT pg_current_wal_lsn() - confirmed_flush_lsn "
                        "FROM pg_replication_slots WHERE database = current_database()"
                    )
                    done = await completed(port)
                    if done >= rows and lag is not None and lag < 1_000_000:
                        break
                    await asyncio.sleep(1.0)
                read = time.monotonic() - started
                stop.set()
                peak, slowest = await watcher
                print(
                    f"| {rows:,} rows, one UPDATE that {label} | {before / 2**20:.0f} MiB | "
                    f"{peak / 2**20:.0f} MiB | {slowest:.2f} s | {read:.0f} s | "
                    f"{await completed(port):,.0f} |"
                )
        finally:
            await conn.close()
    finally:
        exporter.stop()
        await logical.drop_slots(dsn)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.backfill", description=__doc__)
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args(argv)
    cluster = Cluster()
    cluster.start()
    try:
        logical.prepare_cluster(cluster)
        print("| transaction | RSS before | RSS peak | slowest /metrics | read in | completed |")
        print("|---|---:|---:|---:|---:|---:|")
        asyncio.run(run(cluster, args.rows))
    finally:
        cluster.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
