"""Ground-truth workload for pgqueuer: real schema, real worker, truth from its log and stats."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
from pgqueuer import AsyncpgDriver, Queries

from exporter.profiles.pgqueuer import HEARTBEAT_REASON
from tests.system.presets.pgqueuer_worker import PARKED
from tests.system.presets.processes import ROOT, Worker, shown_on_failure, wait_for

PLAN = {"ok": 20, "flaky": 5, "bad": 3, "held": 2, "slow": 1, "later": 2, PARKED: 3, "cancel": 1}
LATER_SECONDS = 3
PARKED_FUTURE_SECONDS = 3600


@dataclass
class GroundTruth:
    """Counters and end-of-run gauges as pgqueuer's own tables tell them."""

    counters: dict[str, dict[Any, int]]
    gauges: dict[str, dict[str, int]]
    histogram_counts: dict[str, int]
    statistics: dict[tuple[str, str], int]  # pgqueuer_statistics, the library's own aggregate
    log: dict[tuple[str, str], int]


def install(dsn: str) -> None:
    """Let pgqueuer create its schema with its own installer (pgq install)."""
    done = subprocess.run(
        [sys.executable, "-m", "pgqueuer", "--pg-dsn", dsn, "install"],
        cwd=ROOT, capture_output=True, text=True, check=False, env={**os.environ},
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"pgq install failed: {done.stdout}\n{done.stderr}")


async def run_workload(
    dsn: str, while_stale: Callable[[int], Awaitable[None]] | None = None
) -> GroundTruth:
    """Run the workload through real pgqueuer workers and return what the library recorded.

    ``while_stale(n)`` is awaited while the killed worker's n jobs are picked with a stale
    heartbeat (pgqueuer's own notion, as its ``pgq stale`` lists them), before a new worker
    re-picks them.
    """
    conn = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(conn))
    workers: list[Worker] = []
    markers = Path(tempfile.mkdtemp(prefix="pgqueuer-markers-"))
    try:
        with shown_on_failure(workers):
            for name, count in PLAN.items():
                for _ in range(count):
                    if name == "later":
                        await queries.enqueue(
                            name, None, execute_after=timedelta(seconds=LATER_SECONDS)
                        )
                    elif name == PARKED and not (await _count(conn, PARKED)):
                        await queries.enqueue(
                            name, None, execute_after=timedelta(seconds=PARKED_FUTURE_SECONDS)
                        )
                    elif name == "cancel":
                        ids = await queries.enqueue(PARKED, None)
                        await queries.mark_job_as_cancelled(list(ids))
                    else:
                        await queries.enqueue(name, None)

            first = Worker([sys.executable, "-m", "tests.system.presets.pgqueuer_worker", dsn, str(markers)],
                           {}, "pgqueuer-a")  # fmt: skip
            workers.append(first)
            await wait_for(lambda: _picked(conn, "slow"), "the slow job to be picked", within=60)
            await wait_for(lambda: _settled_but_slow(conn), "the quick jobs to settle", within=60)
            first.kill()

            async def stale() -> int:
                # pgqueuer's own test for a lost job (the dequeue query's re-pick condition).
                return int(
                    await conn.fetchval(
                        "SELECT count(*) FROM pgqueuer WHERE status = 'picked' "
                        "AND heartbeat < now() - make_interval(secs => 2)"
                    )
                )

            stale_jobs = await wait_for(stale, "the killed worker's job to go stale", within=30)
            if while_stale is not None:
                await while_stale(stale_jobs)
            second = Worker([sys.executable, "-m", "tests.system.presets.pgqueuer_worker", dsn, str(markers)],
                            {}, "pgqueuer-b")  # fmt: skip
            workers.append(second)

            async def drained() -> bool:
                busy = await conn.fetchval(
                    "SELECT count(*) FROM pgqueuer WHERE entrypoint <> $1 "
                    "AND status IN ('queued', 'picked')",
                    PARKED,
                )
                return busy == 0

            await wait_for(drained, "the queue to drain", within=90)
            second.stop()
            return await ground_truth(conn)
    finally:
        await conn.close()


async def _count(conn: asyncpg.Connection, entrypoint: str) -> int:
    return int(
        await conn.fetchval("SELECT count(*) FROM pgqueuer WHERE entrypoint = $1", entrypoint)
    )


async def _picked(conn: asyncpg.Connection, entrypoint: str) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT count(*) FROM pgqueuer WHERE entrypoint = $1 AND status = 'picked'", entrypoint
        )
    )


async def _settled_but_slow(conn: asyncpg.Connection) -> bool:
    busy = await conn.fetchval(
        "SELECT count(*) FROM pgqueuer WHERE entrypoint NOT IN ('slow', 'later', $1) "
        "AND status IN ('queued', 'picked')",
        PARKED,
    )
    return busy == 0


async def ground_truth(conn: asyncpg.Connection) -> GroundTruth:
    """Counters from pgqueuer_log (cross-checked with pgqueuer_statistics), gauges from pgqueuer."""
    rows = await conn.fetch(
        """
        SELECT entrypoint, status::text AS status, traceback IS NOT NULL AS tb,
               coalesce(traceback ->> 'exception_type', 'unknown') AS reason,
               lag(status::text) OVER (PARTITION BY job_id ORDER BY id) AS previous,
               count(*) OVER (PARTITION BY job_id ORDER BY id) AS nth
        FROM pgqueuer_log
        """
    )
    enqueued: Counter[str] = Counter()
    completed: Counter[str] = Counter()
    failures: Counter[tuple[str, str]] = Counter()
    dead: Counter[tuple[str, str]] = Counter()
    requeued: Counter[str] = Counter()
    cancelled: Counter[str] = Counter()
    log: Counter[tuple[str, str]] = Counter()
    for r in rows:
        ep, status = r["entrypoint"], r["status"]
        log[(ep, status)] += 1
        if status == "queued" and not r["tb"]:
            if r["nth"] == 1:
                enqueued[ep] += 1
            else:
                requeued[ep] += 1
        elif status == "queued":
            failures[(ep, r["reason"])] += 1
            requeued[ep] += 1
        elif status == "picked" and r["previous"] == "picked":
            failures[(ep, HEARTBEAT_REASON)] += 1
            requeued[ep] += 1
        elif status == "successful":
            completed[ep] += 1
        elif status in ("exception", "failed"):
            failures[(ep, r["reason"])] += 1
            dead[(ep, r["reason"])] += 1
        elif status in ("canceled", "deleted"):
            cancelled[ep] += 1
    # The library's own per-second aggregate must say the same (it folds the log on a timer,
    # and on demand: log_statistics() folds what is left).
    await Queries(AsyncpgDriver(conn)).log_statistics(limit=None)
    stats_rows = await conn.fetch(
        "SELECT entrypoint, status::text AS status, sum(count)::int AS n "
        "FROM pgqueuer_statistics GROUP BY 1, 2"
    )
    statistics = {(r["entrypoint"], r["status"]): r["n"] for r in stats_rows}
    gauge_rows = await conn.fetch(
        "SELECT entrypoint, count(*) FILTER (WHERE status = 'queued') AS pending, "
        "count(*) FILTER (WHERE status = 'picked') AS running, "
        "count(*) FILTER (WHERE status = 'queued' AND execute_after > now()) AS scheduled, "
        "count(*) FILTER (WHERE status = 'failed') AS held "
        "FROM pgqueuer GROUP BY 1"
    )
    gauges = {r["entrypoint"]: {k: r[k] for k in ("pending", "running", "scheduled", "held")}
              for r in gauge_rows}  # fmt: skip
    counters = {
        "enqueued": dict(enqueued), "completed": dict(completed), "failures": dict(failures),
        "dead": dict(dead), "requeued": dict(requeued), "cancelled": dict(cancelled),
    }  # fmt: skip
    return GroundTruth(counters, gauges, dict(completed), statistics, dict(log))
