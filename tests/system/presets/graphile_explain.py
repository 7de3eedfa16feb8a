"""Plans, timings and rows read of the graphile-worker preset's cycle on 1,000,000 rows.

graphile-worker deletes a job when it succeeds, so its table holds only what is not done: the
backlog, the running jobs, and every permanently failed job nobody deleted. The big table here
is 990,000 dead jobs that failed over a week, plus 8,000 scheduled, 2,000 ready and 50 locked;
before each measured cycle 200 jobs are added and 20 running jobs die, as graphile's own
failJobs statement leaves them. Seven quiet cycles are measured, then three of the cycles that
recount the dead set (every DEAD_RECOUNT_EVERY-th), apart.

Run the measurement that docs/presets.md quotes (from the work tree, with .venv set up and
scripts/presets-install run):
    .venv/bin/python -m tests.system.presets.graphile_explain
"""

from __future__ import annotations

import asyncio
import uuid

import asyncpg

from tests.system.presets.explain import (
    ROWS,
    Measurement,
    explained_cycle,
    explaining_poller,
    measure,
)

PROFILE = "graphile-worker"
BIG_TABLES = ("_private_jobs",)
DEAD = ROWS - 10_000
RECOUNTS = 3  # cycles that recount the dead set (every DEAD_RECOUNT_EVERY-th), measured apart
# 20 tasks, made first, so their ids are consecutive.
TASKS = "(SELECT min(id) FROM graphile_worker._private_tasks) + g % 20"
HISTORY = [
    """INSERT INTO graphile_worker._private_tasks (identifier)
       SELECT 'task_' || g FROM generate_series(0, 19) g""",
    # Permanently failed over the last week: attempts = max_attempts, unlocked, run_at pushed
    # past the last failure (failJobs), all long in the past now.
    f"""INSERT INTO graphile_worker._private_jobs
            (task_id, run_at, attempts, max_attempts, last_error, created_at)
       SELECT {TASKS}, now() - interval '7 days' + g * interval '0.6 s', 3, 3, 'boom',
              now() - interval '8 days'
       FROM generate_series(1, {DEAD}) g""",
    f"""INSERT INTO graphile_worker._private_jobs (task_id, run_at)
       SELECT {TASKS}, now() + g * interval '1 s' FROM generate_series(1, 8000) g""",
    f"""INSERT INTO graphile_worker._private_jobs (task_id, run_at)
       SELECT {TASKS}, now() - g * interval '1 ms' FROM generate_series(1, 2000) g""",
    f"""INSERT INTO graphile_worker._private_jobs (task_id, attempts, max_attempts, locked_at,
                                                  locked_by)
       SELECT {TASKS}, 1, 1, now(), 'worker-x' FROM generate_series(1, 50) g""",
]
BATCH = [
    f"""INSERT INTO graphile_worker._private_jobs (task_id, attempts, max_attempts, locked_at,
                                                  locked_by)
       SELECT {TASKS}, 1, 1, now(), 'worker-y' FROM generate_series(1, 20) g""",
    # graphile's failJobs statement, on the 20 jobs just locked on their last attempt.
    """UPDATE graphile_worker._private_jobs
       SET last_error = 'boom',
           run_at = greatest(now(), run_at) + (exp(least(attempts, 10)) * interval '1 second'),
           locked_by = NULL, locked_at = NULL
       WHERE locked_by = 'worker-y'""",
    f"""INSERT INTO graphile_worker._private_jobs (task_id)
       SELECT {TASKS} FROM generate_series(1, 200) g""",
]


async def measure_graphile(dsn: str) -> tuple[Measurement, Measurement]:
    """The graphile-worker figures: its schema by its own installer, the preset's indexes.
    Returns the quiet cycles (the dead set followed, not counted) and the recount cycles."""
    from exporter.profiles.graphile_worker import GraphileWorkerReader
    from tests.system.presets import graphile_harness

    graphile_harness.install(dsn)  # schema, the side table, and the preset's two indexes
    poller = explaining_poller(dsn, PROFILE)
    mode = poller.mode
    assert isinstance(mode, GraphileWorkerReader)
    reader = mode
    recount = Measurement(f"{PROFILE} recount", BIG_TABLES)
    conn = await asyncpg.connect(dsn)
    try:
        quiet = await measure(dsn, PROFILE, HISTORY, BATCH, BIG_TABLES, poller=poller)
        for _ in range(RECOUNTS):
            while not reader.recount_due:
                await explained_cycle(poller, None)
            for statement in BATCH:
                await conn.execute(statement)
            await explained_cycle(poller, recount)
        assert poller.mode is mode, "the poller started over: the cycles measured another mode"
    finally:
        await conn.close()
        await poller.database.close()
    return quiet, recount


async def _main() -> None:
    from exporter.demo.cluster import Cluster

    cluster = Cluster()
    cluster.start()
    try:
        dbname = f"explain_graphile_{uuid.uuid4().hex[:6]}"
        cluster.create_database(dbname)
        for result in await measure_graphile(cluster.dsn(dbname)):
            print(result.report())
    finally:
        cluster.destroy()


if __name__ == "__main__":
    asyncio.run(_main())
