"""The exporter's cycle beside the queue's own reports, each timed and EXPLAINed on one table."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import asyncpg

from bench.plans import explain
from bench.stats import median, percentile
from bench.timed import bench_queue, started_poller, timed_cycle
from exporter.counting.change_cursor import FOREVER
from exporter.counting.results import ResultPaths
from exporter.counting.snapshot import DEAD_RECOUNT_EVERY
from exporter.counting.sqltext import render_queries
from exporter.model import NIL
from exporter.settings.table import TableMapping

# The window a real cycle reads: a 15 s interval plus the 30 s commit-lag tolerance.
CHANGES_WINDOW = 45.0

# The queue's own reports, written after job_queue_reference.txt (ops() and cost_buckets()).
QUEUE_OPS = """
SELECT count(*) FILTER (WHERE status = 1) AS pending,
       count(*) FILTER (WHERE status = 2) AS running,
       count(*) FILTER (WHERE status = 3) AS done,
       count(*) FILTER (WHERE status = 4) AS dead,
       count(*) FILTER (WHERE status = 4 AND updated_at > now() - interval '1 hour') AS dead_1h,
       count(*) FILTER (WHERE status = 2 AND ((lease_until IS NOT NULL AND lease_until < now())
                        OR run_started_at < now() - interval '10 minutes')) AS stuck_running,
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 1))::int, 0)
           AS oldest_pending_sec,
       count(*) FILTER (WHERE last_error LIKE 'JobDeadlineExceeded%'
                        AND updated_at > now() - interval '1 hour') AS deadline_1h,
       coalesce(sum((result #>> '{metrics,cost,total_usd}')::float)
                FILTER (WHERE status = 3 AND updated_at > now() - interval '1 hour'), 0)
           AS cost_1h_usd
FROM job
"""
QUEUE_COST_BUCKETS = """
SELECT date_trunc('hour', updated_at) AS bucket, count(*) AS jobs,
       coalesce(sum((result #>> '{metrics,cost,ai_usd}')::float), 0) AS ai_usd,
       coalesce(sum((result #>> '{metrics,cost,proxy_usd}')::float), 0) AS proxy_usd,
       coalesce(sum((result #>> '{metrics,cost,total_usd}')::float), 0) AS total_usd,
       coalesce(avg((result #>> '{metrics,duration_ms}')::float), 0) AS avg_ms
FROM job
WHERE status = 3 AND updated_at > now() - make_interval(hours => $1)
GROUP BY 1 ORDER BY 1
"""


async def exporter_cycle(dsn: str, cycles: int, pause: float) -> dict[str, Any]:
    """Median per-query time of the exporter's own reads over many cycles, plus their plans.

    Like the poller, the dead letter is recounted every DEAD_RECOUNT_EVERY cycles only: the
    median is of ordinary cycles, the recount cycles and the mean over a period are reported
    beside it.
    """
    per_query: dict[str, list[float]] = {}
    totals: list[float] = []
    recounts: list[float] = []
    # The poller's own mode over its own pool: the horizon, then the changes past the cursor
    # in chunks, the dead letter recounted every DEAD_RECOUNT_EVERY cycles.
    poller = await started_poller(bench_queue(dsn))
    try:
        for _ in range(max(cycles, DEAD_RECOUNT_EVERY)):
            await asyncio.sleep(pause)
            durations = await timed_cycle(poller)
            for name, seconds in durations.items():
                per_query.setdefault(name, []).append(seconds * 1000)
            (recounts if "dead" in durations else totals).append(sum(durations.values()) * 1000)
    finally:
        await poller.database.close()
    paths = ResultPaths().as_tuple()
    queries = render_queries(TableMapping(name="job"))
    conn = await asyncpg.connect(dsn)
    try:
        plans = {
            "snapshot": await explain(conn, queries["snapshot"], 600.0),
            "dead": await explain(conn, queries["dead"]),
            "changes_after": await explain(
                conn,
                queries["changes_after"],
                datetime.fromtimestamp(time.time() - 1.0, UTC),
                NIL,
                FOREVER,
                5000,
                *paths,
            ),
        }
        changed = await conn.fetchval(
            "SELECT count(*) FROM job WHERE updated_at > now() - make_interval(secs => $1)",
            CHANGES_WINDOW,
        )
    finally:
        await conn.close()
    return {
        "cycles": cycles,
        "total_ms": median(totals),
        "total_ms_p90": percentile(totals, 90),
        "recount_ms": median(recounts),
        "mean_ms": (sum(totals) + sum(recounts)) / (len(totals) + len(recounts)),
        "queries_ms": {name: median(v) for name, v in per_query.items()},
        "explain": {name: plan.__dict__ for name, plan in plans.items()},
        "explain_total_ms": sum(p.ms for p in plans.values()),
        "buffers": sum(p.buffers for p in plans.values()),
        "seq_scan_on_job": any(p.seq_scan_on_job for p in plans.values()),
        "rows_in_changes_window": int(changed),
    }


async def queue_reports(dsn: str, runs: int) -> dict[str, Any]:
    """Median time of the queue's ops() and cost_buckets(48) on the same database, warm."""
    conn = await asyncpg.connect(dsn)
    try:
        times: dict[str, list[float]] = {"ops": [], "cost_buckets": []}
        await conn.fetch(QUEUE_OPS)  # warm the cache once, as a report polled every 15 s is
        for _ in range(runs):
            for name, sql, args in (
                ("ops", QUEUE_OPS, ()),
                ("cost_buckets", QUEUE_COST_BUCKETS, (48,)),
            ):
                started = time.perf_counter()
                await conn.fetch(sql, *args)
                times[name].append((time.perf_counter() - started) * 1000)
        plans = {
            "ops": await explain(conn, QUEUE_OPS),
            "cost_buckets": await explain(conn, QUEUE_COST_BUCKETS, 48),
        }
    finally:
        await conn.close()
    ops, buckets = median(times["ops"]), median(times["cost_buckets"])
    return {
        "runs": runs,
        "ops_ms": ops,
        "cost_buckets_ms": buckets,
        "total_ms": ops + buckets,
        "buffers": sum(p.buffers for p in plans.values()),
        "explain": {name: plan.__dict__ for name, plan in plans.items()},
    }
