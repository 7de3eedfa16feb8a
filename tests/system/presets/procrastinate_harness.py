"""Ground-truth workload for procrastinate: real schema, real worker, truth from its tables."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import procrastinate

from exporter.profiles.base import UNKNOWN_REASON
from tests.system.presets import procrastinate_tasks as tasks
from tests.system.presets.processes import ROOT, Worker, shown_on_failure, wait_for

# What the workload runs, per task: how many jobs.
PLAN = {"ok": 20, "flaky": 5, "bad": 3, "slow": 1, "later": 2, "cancel": 1, "parked": 3}
LATER_SECONDS = 3
PARKED_FUTURE_SECONDS = 3600


@dataclass
class GroundTruth:
    """Counters and end-of-run gauges as procrastinate's own tables tell them."""

    counters: dict[str, dict[Any, int]]
    gauges: dict[str, dict[str, int]]
    histogram_counts: dict[str, int]
    stalled_jobs_found: int = 0
    notes: list[str] = field(default_factory=list)


def install(dsn: str) -> None:
    """Let procrastinate create its schema with its own installer (the CLI)."""
    done = subprocess.run(
        [sys.executable, "-m", "procrastinate", "--app", "tests.system.presets.procrastinate_tasks.app",
         "schema", "--apply"],
        cwd=ROOT, env={**_env(dsn)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"procrastinate schema --apply failed: {done.stderr}")


def _env(dsn: str) -> dict[str, str]:
    return {**os.environ, tasks.DSN_VARIABLE: dsn}


def start_worker(dsn: str, name: str) -> Worker:
    """A real procrastinate worker process on the work queue."""
    return Worker(
        [sys.executable, "-m", "tests.system.presets.procrastinate_tasks", "worker"],
        {tasks.DSN_VARIABLE: dsn},
        name,
    )


async def _status_counts(conn: asyncpg.Connection) -> Counter[tuple[str, str]]:
    rows = await conn.fetch(
        "SELECT task_name, status::text AS status, count(*) AS n FROM procrastinate_jobs "
        "GROUP BY 1, 2"
    )
    return Counter({(r["task_name"], r["status"]): r["n"] for r in rows})


async def run_workload(
    dsn: str, while_stalled: Callable[[int], Awaitable[None]] | None = None
) -> GroundTruth:
    """Run the whole workload through real workers and return what the library recorded.

    ``while_stalled(n)`` is awaited once procrastinate itself reports n stalled jobs, before
    they are retried, so a test can check the stuck gauge against the library's own notion.
    """
    app = tasks.app
    conn = await asyncpg.connect(dsn)
    workers: list[Worker] = []
    stalled_found = 0
    try:
        with shown_on_failure(workers):
            with app.replace_connector(procrastinate.PsycopgConnector(conninfo=dsn)):
                async with app.open_async():
                    for name, count in PLAN.items():
                        for n in range(count):
                            if name == "later":
                                await app.configure_task(
                                    "later", schedule_in={"seconds": LATER_SECONDS}
                                ).defer_async(n=n)
                            elif name == "parked" and n == 0:
                                await app.configure_task(
                                    "parked", schedule_in={"seconds": PARKED_FUTURE_SECONDS}
                                ).defer_async(n=n)
                            elif name == "cancel":
                                job_id = await app.configure_task(
                                    "ok", queue=tasks.PARKED_QUEUE
                                ).defer_async(n=-1)
                                await app.job_manager.cancel_job_by_id_async(job_id)
                            else:
                                await app.configure_task(name).defer_async(n=n)

                    first = start_worker(dsn, "procrastinate-a")
                    workers.append(first)

                    async def slow_running() -> bool:
                        return bool(
                            await conn.fetchval(
                                "SELECT count(*) FROM procrastinate_jobs "
                                "WHERE task_name = 'slow' AND status = 'doing'"
                            )
                        )

                    await wait_for(slow_running, "the slow job to start")
                    # Let the quick jobs drain so the kill lands mid-job for 'slow' alone.
                    await wait_for(
                        lambda: _quiet(conn), "everything but the slow job to settle", within=60
                    )
                    first.kill()

                    async def stalled() -> list[Any]:
                        found = await app.job_manager.get_stalled_jobs(
                            seconds_since_heartbeat=tasks.STALLED_AFTER
                        )
                        return list(found)

                    # Recovery is manual in procrastinate: find the stalled jobs, retry them.
                    stalled_jobs = await wait_for(
                        stalled, "the killed worker's job to look stalled"
                    )
                    stalled_found = len(stalled_jobs)
                    if while_stalled is not None:
                        await while_stalled(stalled_found)
                    for job in stalled_jobs:
                        await app.job_manager.retry_job(job)

                    second = start_worker(dsn, "procrastinate-b")
                    workers.append(second)

                    async def drained() -> bool:
                        counts = await _status_counts(conn)
                        active = sum(
                            n for (task, status), n in counts.items()
                            if status in ("todo", "doing") and task != "parked"
                        )  # fmt: skip
                        return active == 0

                    await wait_for(drained, "the work queue to drain", within=90)
                    second.stop()
            return await ground_truth(conn, stalled_found)
    finally:
        await conn.close()


async def _quiet(conn: asyncpg.Connection) -> bool:
    counts = await _status_counts(conn)
    busy = sum(
        n for (task, status), n in counts.items()
        if status in ("todo", "doing") and task not in ("slow", "parked", "later")
    )  # fmt: skip
    return busy == 0


async def ground_truth(conn: asyncpg.Connection, stalled_found: int = 0) -> GroundTruth:
    """Counters from procrastinate_events and gauges from procrastinate_jobs."""
    events = await conn.fetch(
        "SELECT j.task_name, e.type::text AS type, count(*) AS n FROM procrastinate_events e "
        "JOIN procrastinate_jobs j ON j.id = e.job_id GROUP BY 1, 2"
    )
    by: Counter[tuple[str, str]] = Counter({(r["task_name"], r["type"]): r["n"] for r in events})
    tasks_seen = {task for task, _ in by}
    counters: dict[str, dict[Any, int]] = {
        "enqueued": {t: by[(t, "deferred")] for t in tasks_seen},
        "completed": {t: by[(t, "succeeded")] for t in tasks_seen},
        "failures": {
            (t, UNKNOWN_REASON): by[(t, "deferred_for_retry")] + by[(t, "failed")]
            for t in tasks_seen
        },
        "dead": {(t, UNKNOWN_REASON): by[(t, "failed")] for t in tasks_seen},
        "requeued": {t: by[(t, "deferred_for_retry")] + by[(t, "retried")] for t in tasks_seen},
        "cancelled": {t: by[(t, "cancelled")] + by[(t, "aborted")] for t in tasks_seen},
    }
    counters = {k: {key: n for key, n in v.items() if n} for k, v in counters.items()}
    status = await _status_counts(conn)
    # Terminal statuses must agree with the event counts: the events are not the only witness.
    for task in tasks_seen:
        assert status[(task, "succeeded")] == by[(task, "succeeded")], task
        assert status[(task, "failed")] == by[(task, "failed")], task
    gauge_rows = await conn.fetch(
        "SELECT task_name, count(*) FILTER (WHERE status = 'todo') AS pending, "
        "count(*) FILTER (WHERE status = 'doing') AS running, "
        "count(*) FILTER (WHERE status = 'todo' AND scheduled_at > now()) AS scheduled "
        "FROM procrastinate_jobs WHERE status IN ('todo', 'doing') GROUP BY 1"
    )
    gauges = {
        r["task_name"]: {
            "pending": r["pending"],
            "running": r["running"],
            "scheduled": r["scheduled"],
        }
        for r in gauge_rows
    }
    return GroundTruth(
        counters=counters,
        gauges=gauges,
        histogram_counts={t: by[(t, "succeeded")] for t in tasks_seen if by[(t, "succeeded")]},
        stalled_jobs_found=stalled_found,
    )
