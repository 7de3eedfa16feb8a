"""The Oban preset's per-cycle plans, timings and rows read on about 1,000,000 rows.

Run the measurement that docs/presets.md quotes (from the work tree, after scripts/presets-install):
    .venv/bin/python -m tests.system.presets.oban_explain
"""

from __future__ import annotations

import asyncio
import uuid

from tests.system.presets.explain import ROWS, Measurement, measure
from tests.system.presets.oban_client import ObanClient

WORKERS = "(ARRAY['app.Ok', 'app.Flaky', 'app.Bad', 'app.Mail', 'app.Report', 'app.Sync'])"
# A week of finished jobs (2 % discarded, 1 % cancelled, with their errors), then the active
# set of a busy queue: available, executing, scheduled and retryable jobs.
OBAN_HISTORY = [
    f"""INSERT INTO oban_jobs (state, queue, worker, attempt, errors, inserted_at, scheduled_at,
                               attempted_at, completed_at, discarded_at, cancelled_at)
        SELECT s.state::oban_job_state, 'default', {WORKERS}[g % 6 + 1], 1,
               CASE WHEN s.state = 'discarded'
                    THEN '[{{"attempt": 1, "at": "2026-01-01", "error": "boom"}}]'::jsonb
                    ELSE '[]'::jsonb END,
               t, t, t + interval '1 s',
               CASE WHEN s.state = 'completed' THEN t + interval '2 s' END,
               CASE WHEN s.state = 'discarded' THEN t + interval '2 s' END,
               CASE WHEN s.state = 'cancelled' THEN t + interval '2 s' END
        FROM (SELECT g, timezone('UTC', now()) - interval '7 days' + g * interval '0.5 s' AS t,
                     CASE WHEN g % 50 = 0 THEN 'discarded' WHEN g % 100 = 1 THEN 'cancelled'
                          ELSE 'completed' END AS state
              FROM generate_series(1, $1::int) g) s""",
    f"""INSERT INTO oban_jobs (state, queue, worker)
        SELECT 'available', 'default', {WORKERS}[g % 6 + 1] FROM generate_series(1, 2000) g""",
    f"""INSERT INTO oban_jobs (state, queue, worker, attempt, attempted_at)
        SELECT 'executing', 'default', {WORKERS}[g % 6 + 1], 1, timezone('UTC', now())
        FROM generate_series(1, 50) g""",
    f"""INSERT INTO oban_jobs (state, queue, worker, attempt, scheduled_at, errors)
        SELECT (CASE WHEN g % 2 = 0 THEN 'scheduled' ELSE 'retryable' END)::oban_job_state,
               'default', {WORKERS}[g % 6 + 1], g % 2,
               timezone('UTC', now()) + interval '1 hour',
               CASE WHEN g % 2 = 1 THEN '[{{"attempt": 1, "at": "x", "error": "e"}}]'::jsonb
                    ELSE '[]'::jsonb END
        FROM generate_series(1, 100) g""",
]
# 200 jobs that ran and completed since the previous cycle.
OBAN_BATCH = [
    f"""INSERT INTO oban_jobs (state, queue, worker, attempt, attempted_at, completed_at)
        SELECT 'completed', 'default', {WORKERS}[g % 6 + 1], 1, timezone('UTC', now()),
               timezone('UTC', now())
        FROM generate_series(1, 200) g""",
]


async def measure_oban(dsn: str) -> Measurement:
    """The Oban figures, on the schema of Oban Python's own install.sql."""
    async with ObanClient(dsn) as oban:
        await oban.install()
    return await measure(dsn, "oban", OBAN_HISTORY, OBAN_BATCH, ("oban_jobs",))


async def _main() -> None:
    from exporter.demo.cluster import Cluster

    cluster = Cluster()
    cluster.start()
    try:
        dbname = f"explain_oban_{uuid.uuid4().hex[:6]}"
        cluster.create_database(dbname)
        result = await measure_oban(cluster.dsn(dbname))
        print(f"{ROWS:,} rows; {result.report()}")
    finally:
        cluster.destroy()


if __name__ == "__main__":
    asyncio.run(_main())
