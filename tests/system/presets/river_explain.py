"""The River preset's per-cycle plans, timings and rows read on about 1,000,000 rows.

Run the measurement that docs/presets.md quotes (from the work tree, with the presets extra):
    .venv/bin/python -m tests.system.presets.river_explain
"""

from __future__ import annotations

import asyncio

from tests.system.presets.explain import ROWS, Measurement, measure, on_a_cluster
from tests.system.presets.river_client import RiverSQL

KINDS = "(ARRAY['email', 'report', 'sync', 'export', 'webhook', 'resize'])"
# A week of finished jobs (2 % discarded, 1 % cancelled, with their errors) kept by the
# JobCleaner's defaults, then the active set of a busy queue.
RIVER_HISTORY = [
    f"""INSERT INTO river_job (state, queue, kind, args, attempt, max_attempts, errors,
                               created_at, scheduled_at, attempted_at, finalized_at)
        SELECT s.state::river_job_state, 'default', {KINDS}[g % 6 + 1], '{{}}', 1, 25,
               CASE WHEN s.state = 'discarded'
                    THEN ARRAY['{{"at": "2026-01-01T00:00:00Z", "attempt": 1, "error": "boom",
                                 "trace": ""}}'::jsonb] END,
               t, t, t + interval '1 s', t + interval '2 s'
        FROM (SELECT g, now() - interval '7 days' + g * interval '0.5 s' AS t,
                     CASE WHEN g % 50 = 0 THEN 'discarded' WHEN g % 100 = 1 THEN 'cancelled'
                          ELSE 'completed' END AS state
              FROM generate_series(1, $1::int) g) s""",
    f"""INSERT INTO river_job (state, queue, kind, args)
        SELECT 'available', 'default', {KINDS}[g % 6 + 1], '{{}}' FROM generate_series(1, 2000) g""",
    f"""INSERT INTO river_job (state, queue, kind, args, attempt, attempted_at, attempted_by)
        SELECT 'running', 'default', {KINDS}[g % 6 + 1], '{{}}', 1, now(), ARRAY['w1']
        FROM generate_series(1, 50) g""",
    f"""INSERT INTO river_job (state, queue, kind, args, attempt, scheduled_at, errors)
        SELECT (CASE WHEN g % 2 = 0 THEN 'scheduled' ELSE 'retryable' END)::river_job_state,
               'default', {KINDS}[g % 6 + 1], '{{}}', g % 2, now() + interval '1 hour',
               CASE WHEN g % 2 = 1 THEN ARRAY['{{"attempt": 1, "error": "e"}}'::jsonb] END
        FROM generate_series(1, 100) g""",
]
# Between two cycles: 200 jobs that ran and completed (stamped by workers up to 30 s behind),
# 20 of the running jobs completed, and 20 available jobs fetched in their place.
RIVER_BATCH = [
    f"""INSERT INTO river_job (state, queue, kind, args, attempt, attempted_at, finalized_at)
        SELECT 'completed', 'default', {KINDS}[g % 6 + 1], '{{}}', 1, now(),
               now() - (g % 30) * interval '1 s'
        FROM generate_series(1, 200) g""",
    """UPDATE river_job SET state = 'completed', finalized_at = now()
       WHERE id IN (SELECT id FROM river_job WHERE state = 'running' ORDER BY id LIMIT 20)""",
    """UPDATE river_job SET state = 'running', attempt = attempt + 1, attempted_at = now()
       WHERE id IN (SELECT id FROM river_job WHERE state = 'available'
                    ORDER BY priority, scheduled_at, id LIMIT 20)""",
]


async def measure_river(dsn: str) -> Measurement:
    """The River figures, on a database River's own migrations (001-007) have made."""
    return await measure(dsn, "river", RIVER_HISTORY, RIVER_BATCH, ("river_job",))


async def _migrated_and_measured(dsn: str) -> Measurement:
    async with RiverSQL(dsn) as river:
        await river.migrate()
    return await measure_river(dsn)


if __name__ == "__main__":
    result = asyncio.run(on_a_cluster("river", _migrated_and_measured))
    print(f"{ROWS:,} rows; {result.report()}")
