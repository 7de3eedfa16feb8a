"""Ground-truth workload for pg-boss 12: real schema, real Node workers, truth from its tables."""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from exporter.profiles.base import UNKNOWN_REASON
from exporter.profiles.pgboss import attempts
from tests.system.presets.processes import (
    NODE,
    NODE_ENV,
    PRESETS_DIR,
    Worker,
    run_node,
    shown_on_failure,
    wait_for,
)

DRIVER = Path(__file__).with_name("pgboss_driver.mjs")
CLI = PRESETS_DIR / "node_modules" / "pg-boss" / "dist" / "cli.js"
IDLE_QUEUES = ("parked", "bad_dlq")  # nobody works them: their jobs stay for the gauges


@dataclass
class GroundTruth:
    """Counters and end-of-run gauges as pg-boss's tables tell them, and the handlers' own log."""

    counters: dict[str, dict[Any, int]]
    gauges: dict[str, dict[str, int]]
    histogram_counts: dict[str, int]
    handler_outcomes: Counter[tuple[str, str]]


def install(dsn: str) -> None:
    """Let pg-boss create its schema with its own installer (pg-boss create)."""
    run_node([str(CLI), "create", "--connection-string", dsn], "pg-boss create")


def start_worker(dsn: str, markers: Path, name: str, *, supervise: bool) -> Worker:
    """A real pg-boss worker process (Node 22), with or without pg-boss's supervisor."""
    args = [str(NODE), str(DRIVER), "work", dsn, str(markers)]
    return Worker(args + (["supervise"] if supervise else []), NODE_ENV, name)


async def _states(conn: asyncpg.Connection) -> Counter[tuple[str, str]]:
    rows = await conn.fetch(
        "SELECT name, state::text AS state, count(*) AS n FROM pgboss.job GROUP BY 1, 2"
    )
    return Counter({(r["name"], r["state"]): r["n"] for r in rows})


async def run_workload(
    dsn: str, while_stuck: Callable[[int], Awaitable[None]] | None = None
) -> GroundTruth:
    """Run the workload through real pg-boss workers and return what the library recorded.

    ``while_stuck(n)`` is awaited while n jobs of the killed worker are past their expiry by
    pg-boss's own test, before a new worker's supervisor fails and retries them.
    """
    run_node([str(DRIVER), "enqueue", dsn], "the pg-boss enqueue script")
    conn = await asyncpg.connect(dsn)
    markers = Path(tempfile.mkdtemp(prefix="pgboss-markers-"))
    workers: list[Worker] = []
    try:
        with shown_on_failure(workers):
            # The first worker does not supervise: its own supervisor would expire the slow job
            # while it still runs, before the SIGKILL this workload is about.
            first = start_worker(dsn, markers, "pgboss-a", supervise=False)
            workers.append(first)

            async def only_slow_left() -> bool:
                states = await _states(conn)
                busy = sum(
                    n for (name, state), n in states.items()
                    if state in ("created", "retry", "active") and name not in (*IDLE_QUEUES, "slow")
                )  # fmt: skip
                return busy == 0 and states[("slow", "active")] == 1

            try:
                await wait_for(only_slow_left, "every job but the slow one to finish", within=90)
            except AssertionError as exc:
                raise AssertionError(f"{exc}; jobs by state: {dict(await _states(conn))}") from None
            first.kill()

            async def expired() -> int:
                # pg-boss's own expiry test (plans.js timedOut).
                return int(
                    await conn.fetchval(
                        "SELECT count(*) FROM pgboss.job WHERE state = 'active' "
                        "AND started_on + expire_seconds * interval '1s' < now()"
                    )
                )

            stuck = await wait_for(expired, "the killed worker's job to expire", within=30)
            if while_stuck is not None:
                await while_stuck(stuck)
            second = start_worker(dsn, markers, "pgboss-b", supervise=True)
            workers.append(second)

            async def drained() -> bool:
                states = await _states(conn)
                return not any(
                    n for (name, state), n in states.items()
                    if state in ("created", "retry", "active") and name not in IDLE_QUEUES
                )  # fmt: skip

            await wait_for(drained, "the queues to drain", within=90)
            second.stop()
            outcomes: Counter[tuple[str, str]] = Counter()
            for worker in workers:
                for line in worker.log.read_text().splitlines():
                    if line.startswith("{") and '"outcome"' in line:
                        record = json.loads(line)
                        outcomes[(record["queue"], record["outcome"])] += 1
            return await ground_truth(conn, outcomes)
    finally:
        await conn.close()


async def ground_truth(conn: asyncpg.Connection, outcomes: Counter[tuple[str, str]]) -> GroundTruth:
    """Counters from pgboss.job (nothing is deleted within deletion_seconds), gauges too."""
    rows = await conn.fetch(
        "SELECT name, state::text AS state, retry_count, count(*) AS n FROM pgboss.job GROUP BY 1, 2, 3"
    )
    counters: dict[str, Counter[Any]] = {
        k: Counter() for k in ("enqueued", "completed", "failures", "dead", "requeued", "cancelled")
    }
    for r in rows:
        name, state, n = r["name"], r["state"], r["n"]
        counters["enqueued"][name] += n
        # A cancelled job's retry_count cannot say whether it was waiting to retry; the
        # workload cancels only jobs that never ran.
        failed, retried = attempts(state, r["retry_count"], None)
        counters["failures"][(name, UNKNOWN_REASON)] += failed * n
        counters["requeued"][name] += retried * n
        if state == "completed":
            counters["completed"][name] += n
        elif state == "failed":
            counters["dead"][(name, UNKNOWN_REASON)] += n
        elif state == "cancelled":
            counters["cancelled"][name] += n
    gauge_rows = await conn.fetch(
        "SELECT q.name, count(j.id) FILTER (WHERE j.state < 'active') AS pending, "
        "count(j.id) FILTER (WHERE j.state = 'active') AS running, "
        "count(j.id) FILTER (WHERE j.state < 'active' AND j.start_after > now()) AS scheduled "
        "FROM pgboss.queue q LEFT JOIN pgboss.job j ON j.name = q.name GROUP BY 1"
    )
    gauges = {r["name"]: {k: r[k] for k in ("pending", "running", "scheduled")} for r in gauge_rows}
    return GroundTruth(
        counters={k: {key: n for key, n in v.items() if n} for k, v in counters.items()},
        gauges=gauges,
        histogram_counts=dict(counters["completed"]),
        handler_outcomes=outcomes,
    )
