"""The GoodJob preset's per-cycle plans, timings and rows read on about 1,000,000 rows.

Run the measurement that docs/presets.md quotes (from the work tree):
    .venv/bin/python -m tests.system.presets.good_job_explain
"""

from __future__ import annotations

import asyncio

from tests.system.presets.explain import Measurement, measure, measure_alone
from tests.system.presets.good_job_client import install

CLASSES = "(ARRAY['MailJob', 'ReportJob', 'SyncJob', 'BillJob', 'ImportJob', 'PushJob'])"
# A week of finished jobs (2 % discarded), one execution each; then the active set of a busy
# queue: queued jobs, jobs running on five processes (their executions open), scheduled ones.
GOOD_JOB_HISTORY = [
    f"""INSERT INTO good_jobs (id, active_job_id, queue_name, priority, serialized_params,
                               job_class, scheduled_at, performed_at, finished_at, error,
                               error_event, executions_count, created_at, updated_at)
        SELECT u, u, 'default', 0, '{{}}'::jsonb, {CLASSES}[g % 6 + 1], t, t + interval '1 s',
               t + interval '2 s', CASE WHEN g % 50 = 0 THEN 'RuntimeError: boom' END,
               CASE WHEN g % 50 = 0 THEN 1 END, 1, t, t + interval '2 s'
        FROM (SELECT g, gen_random_uuid() AS u,
                     timezone('UTC', now()) - interval '7 days' + g * interval '0.5 s' AS t
              FROM generate_series(1, $1::int) g) s""",
    """INSERT INTO good_job_executions (active_job_id, job_class, queue_name, serialized_params,
                                       scheduled_at, created_at, updated_at, finished_at,
                                       duration, error, error_event)
       SELECT id, job_class, queue_name, '{}', scheduled_at, performed_at, finished_at,
              finished_at, interval '1 s', error, error_event FROM good_jobs""",
    f"""INSERT INTO good_jobs (id, active_job_id, queue_name, serialized_params, job_class,
                               scheduled_at, created_at, updated_at)
        SELECT u, u, 'default', '{{}}', {CLASSES}[g % 6 + 1], now_utc, now_utc, now_utc
        FROM (SELECT g, gen_random_uuid() AS u, timezone('UTC', now()) AS now_utc
              FROM generate_series(1, 2000) g) s""",
    """INSERT INTO good_job_processes (id, state, created_at, updated_at)
       SELECT ('00000000-0000-4000-8000-00000000000' || g)::uuid, '{}',
              timezone('UTC', now()), timezone('UTC', now())
       FROM generate_series(1, 5) g""",
    f"""INSERT INTO good_jobs (id, active_job_id, queue_name, serialized_params, job_class,
                               scheduled_at, performed_at, locked_by_id, locked_at,
                               executions_count, created_at, updated_at)
        SELECT u, u, 'default', '{{}}', {CLASSES}[g % 6 + 1], now_utc, now_utc,
               ('00000000-0000-4000-8000-00000000000' || (g % 5 + 1))::uuid, now_utc, 1,
               now_utc, now_utc
        FROM (SELECT g, gen_random_uuid() AS u, timezone('UTC', now()) AS now_utc
              FROM generate_series(1, 50) g) s""",
    """INSERT INTO good_job_executions (active_job_id, job_class, queue_name, serialized_params,
                                       scheduled_at, created_at, updated_at)
       SELECT id, job_class, queue_name, '{}', scheduled_at, performed_at, performed_at
       FROM good_jobs WHERE finished_at IS NULL AND performed_at IS NOT NULL""",
    f"""INSERT INTO good_jobs (id, active_job_id, queue_name, serialized_params, job_class,
                               scheduled_at, created_at, updated_at)
        SELECT u, u, 'default', '{{}}', {CLASSES}[g % 6 + 1],
               timezone('UTC', now()) + interval '1 hour', timezone('UTC', now()),
               timezone('UTC', now())
        FROM (SELECT g, gen_random_uuid() AS u FROM generate_series(1, 100) g) s""",
]
# 200 jobs that ran and finished since the previous cycle, each with its execution.
GOOD_JOB_BATCH = [
    f"""WITH j AS (
            INSERT INTO good_jobs (id, active_job_id, queue_name, serialized_params, job_class,
                                   scheduled_at, performed_at, finished_at, executions_count,
                                   created_at, updated_at)
            SELECT u, u, 'default', '{{}}', {CLASSES}[g % 6 + 1], now_utc, now_utc, now_utc,
                   1, now_utc, now_utc
            FROM (SELECT g, gen_random_uuid() AS u, timezone('UTC', now()) AS now_utc
                  FROM generate_series(1, 200) g) s
            RETURNING id, job_class, performed_at, finished_at)
        INSERT INTO good_job_executions (active_job_id, job_class, queue_name, serialized_params,
                                         scheduled_at, created_at, updated_at, finished_at,
                                         duration)
        SELECT id, job_class, 'default', '{{}}', performed_at, performed_at, finished_at,
               finished_at, interval '0 s' FROM j""",
]


async def measure_good_job(dsn: str) -> Measurement:
    """The GoodJob figures, on the schema of its install migration."""
    await install(dsn)
    return await measure(dsn, "good-job", GOOD_JOB_HISTORY, GOOD_JOB_BATCH,
                         ("good_jobs", "good_job_executions"))  # fmt: skip


if __name__ == "__main__":
    asyncio.run(measure_alone("good_job", measure_good_job))
