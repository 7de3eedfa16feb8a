"""Ground-truth workload for graphile-worker 0.18: its own schema, real run() workers, and a
side table the task handlers write."""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from tests.system.presets.processes import (
    NODE,
    NODE_ENV,
    PRESETS_DIR,
    ROOT,
    Worker,
    run_node,
    shown_on_failure,
    wait_for,
)

DRIVER = Path(__file__).with_name("graphile_driver.mjs")
CLI = PRESETS_DIR / "node_modules" / "graphile-worker" / "dist" / "cli.js"
INDEXES = ROOT / "exporter" / "profiles" / "sql" / "graphile_worker_indexes.sql"
TRUTH_TABLE = (
    "CREATE TABLE gw_truth (task text NOT NULL, job_id bigint NOT NULL, attempt int NOT NULL, "
    "outcome text NOT NULL)"
)
# The library's own state of each row (its view graphile_worker.jobs derives no status).
STATES = """
SELECT t.identifier AS task,
       count(j.id) FILTER (WHERE j.is_available) AS pending,
       count(j.id) FILTER (WHERE j.is_available AND j.run_at > now()) AS scheduled,
       count(j.id) FILTER (WHERE j.locked_at IS NOT NULL) AS running,
       count(j.id) FILTER (WHERE j.locked_at IS NULL AND j.attempts >= j.max_attempts) AS held
FROM graphile_worker._private_tasks t
LEFT JOIN graphile_worker._private_jobs j ON j.task_id = t.id
GROUP BY 1
"""


@dataclass
class GroundTruth:
    """Deaths since the exporter's baseline and the end-of-run gauges, as the rows and the
    handlers' side table tell them."""

    dead_by_rows: Counter[str]  # dead rows that were not dead before the exporter started
    dead_by_handlers: Counter[str]  # jobs whose every allowed attempt wrote 'failed'
    gauges: dict[str, dict[str, int]]
    outcomes: Counter[tuple[str, str]]


def install(dsn: str) -> None:
    """graphile-worker installs its schema itself; then the side table and the preset's indexes."""
    run_node([str(CLI), "--connection", dsn, "--schema-only"], "graphile-worker --schema-only")
    _psql(dsn, "-c", TRUTH_TABLE)
    _psql(dsn, "-f", str(INDEXES))


def history(dsn: str) -> None:
    """Jobs that ran (and died) before the exporter starts: the baseline must not count them."""
    run_node([str(DRIVER), "history", dsn], "the graphile-worker history script")


def _psql(dsn: str, *args: str) -> None:
    subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", dsn, *args],
                   check=True, capture_output=True)  # fmt: skip


async def dead_ids(conn: asyncpg.Connection) -> set[int]:
    """Ids of the permanently failed rows now."""
    rows = await conn.fetch(
        "SELECT id FROM graphile_worker._private_jobs "
        "WHERE locked_at IS NULL AND attempts >= max_attempts"
    )
    return {int(r["id"]) for r in rows}


async def run_workload(
    dsn: str, before_kill: Callable[[int], Awaitable[None]] | None = None
) -> GroundTruth:
    """Enqueue the workload, run it through a real worker, SIGKILL it in the two slow jobs,
    let a second worker take them over; then SIGKILL that one in a third slow job and
    force-unlock it by hand. Return what the library and the handlers recorded.
    ``before_kill(n)`` is awaited before each SIGKILL, while n slow jobs run and nothing else
    but the parked jobs is left."""
    conn = await asyncpg.connect(dsn)
    workers: list[Worker] = []
    try:
        with shown_on_failure(workers):
            dead_before = await dead_ids(conn)
            run_node([str(DRIVER), "enqueue", dsn], "the graphile-worker enqueue script")
            first = Worker([str(NODE), str(DRIVER), "work", dsn], NODE_ENV, "graphile-a")
            workers.append(first)

            async def only_slow_left() -> bool:
                where = "t.identifier NOT IN ('parked', 'slow') AND j.attempts < j.max_attempts"
                return await _jobs(conn, where) == 0 and await _locked(conn) == 2

            await _kill_when(first, only_slow_left, "every job but the parked and slow ones",
                             before_kill, slow_running=2, within=60)  # fmt: skip
            # graphile takes a job over once its lock is 4 h old; moving the lock back 5 h stands
            # in for the wait. The second worker's resetLockedAt then frees both: the job on its
            # last attempt dies, the other is retried and succeeds.
            await conn.execute(
                "UPDATE graphile_worker._private_jobs SET locked_at = locked_at - interval '5 hours' "
                "WHERE locked_at IS NOT NULL"
            )
            second = Worker(
                [str(NODE), str(DRIVER), "work", dsn, "takeover"], NODE_ENV, "graphile-b"
            )
            workers.append(second)

            async def taken_over() -> bool:
                return await _jobs(conn, "t.identifier = 'slow'") == 1 and await _locked(conn) == 0

            await wait_for(taken_over, "the second worker to take the slow jobs over", within=60)
            run_node([str(DRIVER), "slow", dsn], "the graphile-worker slow-job script")

            async def third_runs() -> bool:
                return await _locked(conn) == 1

            await _kill_when(second, third_runs, "the second worker to start the third slow job",
                             before_kill, slow_running=1, within=30)  # fmt: skip
            # What an operator does for a crashed worker instead of waiting 4 h: the job was on
            # its last attempt, so it is dead where it stands, run_at untouched.
            await conn.execute(
                "SELECT graphile_worker.force_unlock_workers(array_agg(DISTINCT locked_by)) "
                "FROM graphile_worker._private_jobs WHERE locked_by IS NOT NULL"
            )
            return await ground_truth(conn, dead_before)
    finally:
        await conn.close()


async def _kill_when(
    worker: Worker,
    ready: Callable[[], Awaitable[bool]],
    what: str,
    before_kill: Callable[[int], Awaitable[None]] | None,
    *,
    slow_running: int,
    within: float,
) -> None:
    """Wait until ``ready``, let ``before_kill`` look, then SIGKILL the worker."""
    await wait_for(ready, what, within=within)
    if before_kill is not None:
        await before_kill(slow_running)
    worker.kill()


async def _jobs(conn: asyncpg.Connection, where: str) -> int:
    """How many rows of _private_jobs (j, with its task t) match ``where``."""
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM graphile_worker._private_jobs j "
            f"JOIN graphile_worker._private_tasks t ON t.id = j.task_id WHERE {where}"
        )
    )


async def _locked(conn: asyncpg.Connection) -> int:
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM graphile_worker._private_jobs WHERE locked_at IS NOT NULL"
        )
    )


async def ground_truth(conn: asyncpg.Connection, dead_before: set[int]) -> GroundTruth:
    """Deaths since the baseline by the rows and by the handlers' side table; the gauges."""
    rows = await conn.fetch("SELECT task, job_id, attempt, outcome FROM gw_truth")
    outcomes = Counter((r["task"], r["outcome"]) for r in rows)
    # A job died when every attempt it was allowed started and none completed: a handler that
    # threw, or one whose worker was killed ('started-long') and whose lock graphile took over.
    started: Counter[int] = Counter()
    completed: set[int] = set()
    task_of: dict[int, str] = {}
    for r in rows:
        task_of[r["job_id"]] = r["task"]
        if r["outcome"] == "completed":
            completed.add(r["job_id"])
        else:
            started[r["job_id"]] += 1
    limits = {
        int(r["id"]): int(r["max_attempts"])
        for r in await conn.fetch("SELECT id, max_attempts FROM graphile_worker._private_jobs")
    }
    dead_by_handlers = Counter(
        task_of[job_id]
        for job_id, n in started.items()
        if job_id not in dead_before and job_id not in completed and n >= limits.get(job_id, n + 1)
    )
    dead_now = await dead_ids(conn)
    names = {
        int(r["id"]): r["identifier"]
        for r in await conn.fetch(
            "SELECT j.id, t.identifier FROM graphile_worker._private_jobs j "
            "JOIN graphile_worker._private_tasks t ON t.id = j.task_id"
        )
    }
    gauges = {
        r["task"]: {k: int(r[k]) for k in ("pending", "scheduled", "running", "held")}
        for r in await conn.fetch(STATES)
    }
    return GroundTruth(
        dead_by_rows=Counter(names[i] for i in dead_now - dead_before),
        dead_by_handlers=dead_by_handlers,
        gauges=gauges,
        outcomes=outcomes,
    )
