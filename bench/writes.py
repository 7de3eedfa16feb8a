"""The price of the exporter's indexes on the queue's own writes: throughput, WAL, HOT updates."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg

from bench.data import create_exporter_indexes, drop_exporter_indexes
from bench.stats import median
from exporter.demo.queue import JobQueue

EXPORTER_INDEXES = (
    "job_exporter_active_idx",
    "job_exporter_updated_at_idx",
    "job_exporter_dead_idx",
)


async def _write_loop(dsn: str, seconds: float, clients: int) -> int:
    """Enqueue -> claim -> renew -> complete as fast as ``clients`` connections can; jobs done."""
    deadline = time.monotonic() + seconds
    done = 0

    async def client(n: int) -> None:
        nonlocal done
        conn = await asyncpg.connect(dsn)
        try:
            queue = JobQueue(conn)
            worker = f"bench-writer-{n}"
            while time.monotonic() < deadline:
                job = await queue.enqueue(1 + n % 8, {"bench": True})
                assert job is not None
                # Claim this very job, so the table's own pending rows stay as generated.
                await queue.claim(worker, 30.0, job_id=job.job_id)
                await queue.renew(job.job_id, worker, 30.0)
                result = {
                    "outcome": "ok",
                    "metrics": {"duration_ms": 5, "cost": {"total_usd": 0.01}},
                }
                await queue.complete(job.job_id, worker, result)
                done += 1
        finally:
            await conn.close()

    await asyncio.gather(*(client(n) for n in range(clients)))
    return done


async def _table_stats(conn: asyncpg.Connection) -> tuple[int, int, int]:
    row = await conn.fetchrow(
        "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn AS wal, n_tup_upd, n_tup_hot_upd "
        "FROM pg_stat_user_tables WHERE relname = 'job'"
    )
    return int(row["wal"]), int(row["n_tup_upd"]), int(row["n_tup_hot_upd"])


async def write_overhead(dsn: str, runs: int, seconds: float, clients: int) -> dict[str, Any]:
    """Throughput, WAL per job and HOT ratio of the queue's write path without and with indexes."""
    conn = await asyncpg.connect(dsn)
    results: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
    try:
        sizes = {
            name: int(await conn.fetchval("SELECT pg_relation_size($1::regclass)", name))
            for name in EXPORTER_INDEXES
        }
        started = time.perf_counter()
        await drop_exporter_indexes(conn)
        await create_exporter_indexes(conn)
        build_seconds = time.perf_counter() - started
        # Alternate, so drift (table growth, autovacuum, cache) hits both sides alike.
        for _ in range(runs):
            for variant in ("without", "with"):
                if variant == "without":
                    await drop_exporter_indexes(conn)
                else:
                    await create_exporter_indexes(conn)
                await conn.execute("CHECKPOINT")
                wal0, upd0, hot0 = await _table_stats(conn)
                began = time.perf_counter()
                jobs = await _write_loop(dsn, seconds, clients)
                elapsed = time.perf_counter() - began
                # Backends flush their table statistics up to a second after they go idle.
                await asyncio.sleep(1.2)
                wal1, upd1, hot1 = await _table_stats(conn)
                updates = upd1 - upd0
                results[variant].append(
                    {
                        "jobs_per_s": jobs / elapsed,
                        "wal_bytes_per_job": (wal1 - wal0) / max(jobs, 1),
                        "hot_ratio": (hot1 - hot0) / updates if updates else 0.0,
                    }
                )
    finally:
        await create_exporter_indexes(conn)
        await conn.close()

    def summary(rows: list[dict[str, float]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("jobs_per_s", "wal_bytes_per_job", "hot_ratio"):
            values = [r[key] for r in rows]
            out[key] = median(values)
            out[key + "_range"] = [min(values), max(values)] if values else []
        return out

    without, with_ = summary(results["without"]), summary(results["with"])
    base = without["jobs_per_s"] or 1.0
    return {
        "runs": runs,
        "seconds_per_run": seconds,
        "clients": clients,
        "without": without,
        "with": with_,
        "throughput_overhead_pct": (base - with_["jobs_per_s"]) / base * 100,
        "wal_overhead_pct": (with_["wal_bytes_per_job"] / (without["wal_bytes_per_job"] or 1) - 1)
        * 100,
        "index_bytes": sizes,
        "index_build_seconds": build_seconds,
    }
