"""Ground-truth workload for django-tasks: a real project, `migrate`, the real db_worker.

The truth is django-tasks-db's own result table: one row per task, READY -> RUNNING ->
SUCCESSFUL or FAILED, with the exception's class path. What the reader must count is what
changed after the baseline: the rows enqueued since, and the rows that became terminal since.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any

import asyncpg

from tests.system.presets.processes import ROOT, Worker, shown_on_failure, wait_for

SETTINGS = "tests.system.presets.django_project.settings"
TASKS = "tests.system.presets.django_project.tasks"
TABLE = "django_tasks_database_dbtaskresult"
DSN_VARIABLE = "JQE_DJANGO_DSN"  # read by django_project/settings.py
INDEX_FILE = ROOT / "exporter" / "profiles" / "sql" / "django_tasks_indexes.sql"
TERMINAL = ("SUCCESSFUL", "FAILED")
LATER_SECONDS = 3
PARKED_SECONDS = 3600

# Before the exporter starts: finished tasks, and tasks on the "held" queue that no worker
# serves until the workload starts one for it (they finish after the baseline, so they count
# as completed but not as enqueued).
HISTORY_DONE = [{"task": "ok", "count": 5}, {"task": "bad", "count": 2}]
HISTORY_WAITING = [
    {"task": "ok", "count": 3, "queue": "held"},
    {"task": "parked", "count": 1, "run_after": PARKED_SECONDS},
]
# While the reader polls.
WORKLOAD = [
    {"task": "ok", "count": 20},
    {"task": "bad", "count": 3},
    {"task": "boom", "count": 2},
    {"task": "later", "count": 2, "run_after": LATER_SECONDS},
    {"task": "slow", "count": 1},
    {"task": "parked", "count": 2, "run_after": PARKED_SECONDS},
]
WORKLOAD_AFTER_KILL = [{"task": "ok", "count": 5}]


@dataclass
class GroundTruth:
    """Counters since the baseline, and end-of-run gauges, as the result table tells them."""

    counters: dict[str, dict[Any, int]]
    gauges: dict[str, dict[str, int]]
    histogram_counts: dict[str, int]


def path(task: str) -> str:
    """The task path django-tasks records for one of the project's tasks (the job type)."""
    return f"{TASKS}.{task}"


def _env(dsn: str) -> dict[str, str]:
    return {DSN_VARIABLE: dsn, "DJANGO_SETTINGS_MODULE": SETTINGS}


def _run(args: list[str], dsn: str, what: str) -> None:
    done = subprocess.run(
        args, cwd=ROOT, env={**os.environ, **_env(dsn)}, capture_output=True, text=True,
        check=False, timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"{what} failed:\n{done.stdout}\n{done.stderr}")


def install(dsn: str) -> None:
    """`manage.py migrate`: django-tasks-db creates its own table."""
    _run([sys.executable, "-m", "django", "migrate", "--noinput"], dsn, "django migrate")


async def create_indexes(dsn: str) -> None:
    """Run the preset's index file, one statement at a time (CONCURRENTLY needs autocommit)."""
    conn = await asyncpg.connect(dsn)
    try:
        code = "\n".join(line for line in INDEX_FILE.read_text().splitlines()
                         if not line.startswith("--"))  # fmt: skip
        for statement in code.split(";"):
            if statement.strip():
                await conn.execute(statement)
    finally:
        await conn.close()


def enqueue(dsn: str, plan: list[dict[str, Any]]) -> None:
    """Enqueue through the library's API (Task.enqueue), in a process of the project."""
    module = "tests.system.presets.django_project.enqueue"
    _run([sys.executable, "-m", module, json.dumps(plan)], dsn, "enqueue")


def start_worker(dsn: str, worker_id: str, queues: str = "default") -> Worker:
    """django-tasks-db's own worker, `manage.py db_worker`, polling every 0.1 s."""
    return Worker(
        [sys.executable, "-m", "django", "db_worker", f"--queue-name={queues}",
         "--interval=0.1", "--no-startup-delay", "--no-reload", f"--worker-id={worker_id}"],
        _env(dsn), f"django-{worker_id}",
    )  # fmt: skip


async def statuses(conn: asyncpg.Connection) -> dict[str, str]:
    """Every task id and its status."""
    rows = await conn.fetch(f"SELECT id::text AS id, status FROM {TABLE}")
    return {r["id"]: r["status"] for r in rows}


async def history(dsn: str) -> dict[str, str]:
    """Work done before the exporter starts; returns the table's state once it is quiet."""
    enqueue(dsn, HISTORY_DONE)
    _run([sys.executable, "-m", "django", "db_worker", "--batch", "--no-startup-delay",
          "--no-reload", "--interval=0"], dsn, "db_worker --batch")  # fmt: skip
    enqueue(dsn, HISTORY_WAITING)
    conn = await asyncpg.connect(dsn)
    try:
        before = await statuses(conn)
    finally:
        await conn.close()
    assert sum(s in TERMINAL for s in before.values()) == 7, before
    return before


async def _busy(conn: asyncpg.Connection, queue: str | None = None) -> int:
    """Active tasks (on one queue, or on all), but the hanging and the parked ones."""
    return int(
        await conn.fetchval(
            f"SELECT count(*) FROM {TABLE} WHERE status IN ('READY', 'RUNNING') "
            "AND task_path <> ALL($1::text[]) AND queue_name = coalesce($2, queue_name)",
            [path("slow"), path("parked")],
            queue,
        )
    )


async def run_workload(dsn: str) -> None:
    """Real workers through successes, failures, delayed tasks and a SIGKILL mid-task."""
    conn = await asyncpg.connect(dsn)
    workers: list[Worker] = []
    try:
        with shown_on_failure(workers):
            enqueue(dsn, WORKLOAD)
            workers += [start_worker(dsn, "w1"), start_worker(dsn, "w2")]

            async def slow_owner() -> str | None:
                ids = await conn.fetchval(
                    f"SELECT worker_ids FROM {TABLE} WHERE task_path = $1 AND status = 'RUNNING'",
                    path("slow"),
                )
                return json.loads(ids)[-1] if ids else None

            owner = await wait_for(slow_owner, "the slow task to start")
            await wait_for(
                lambda: _quiet(conn, "default"), "the default queue to settle", within=90
            )
            killed = next(w for w in workers if w.name == f"django-{owner}")
            killed.kill()  # mid-task: the backend has no lease, so the task stays RUNNING
            workers.append(start_worker(dsn, "w3", queues="*"))
            enqueue(dsn, WORKLOAD_AFTER_KILL)
            await wait_for(lambda: _quiet(conn), "every queue to drain", within=90)
            for worker in workers:
                worker.stop()
    finally:
        await conn.close()


async def _quiet(conn: asyncpg.Connection, queue: str | None = None) -> bool:
    return await _busy(conn, queue) == 0


async def ground_truth(dsn: str, before: dict[str, str]) -> GroundTruth:
    """What the result table says happened since ``before`` (the baseline), per task path."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            f"SELECT id::text AS id, task_path, status, exception_class_path, "
            f"run_after > now() AND run_after < '9998-12-31' AS scheduled FROM {TABLE}"
        )
    finally:
        await conn.close()
    enqueued: Counter[str] = Counter()
    completed: Counter[str] = Counter()
    failed: Counter[tuple[str, str]] = Counter()
    gauges: dict[str, Counter[str]] = {}
    for r in rows:
        task = r["task_path"]
        if r["id"] not in before:
            enqueued[task] += 1
        newly_terminal = before.get(r["id"]) not in TERMINAL
        if r["status"] == "SUCCESSFUL" and newly_terminal:
            completed[task] += 1
        elif r["status"] == "FAILED" and newly_terminal:
            failed[(task, r["exception_class_path"])] += 1
        elif r["status"] in ("READY", "RUNNING"):
            g = gauges.setdefault(task, Counter())
            g["pending" if r["status"] == "READY" else "running"] += 1
            g["scheduled"] += int(r["scheduled"])
    return GroundTruth(
        counters={
            "enqueued": dict(enqueued),
            "completed": dict(completed),
            "failures": dict(failed),
            "dead": dict(failed),
            "requeued": {},
            "cancelled": {},
        },
        gauges={
            task: {key: g[key] for key in ("pending", "running", "scheduled")}
            for task, g in gauges.items()
        },
        histogram_counts=dict(completed),
    )
