"""The Solid Queue preset's per-cycle plans, timings and rows read on about 1,000,000 jobs.

Run the measurement that docs/presets.md quotes (from the work tree):
    .venv/bin/python -m tests.system.presets.explain solid-queue
"""

from __future__ import annotations

from tests.system.presets.explain import Measurement, measure
from tests.system.presets.solid_queue_client import install

CLASSES = "(ARRAY['OkJob', 'MailJob', 'ReportJob', 'SyncJob', 'FlakyJob', 'BadJob'])"
_JOB = """INSERT INTO solid_queue_jobs (queue_name, class_name, arguments, active_job_id,
                                     scheduled_at, finished_at, created_at, updated_at)
           SELECT 'default', CLASSES[g % 6 + 1], '{"executions":0}', md5(g::text || 'TAG'),
                  t, FINISHED, t, t
           FROM (SELECT g, timezone('UTC', now()) - AGE + g * interval '0.5 s' AS t
                 FROM generate_series(1, ROWS) g) s"""


def _jobs(rows: str, tag: str, age: str, finished: str) -> str:
    """Jobs made as Solid Queue makes them, in bulk: ``finished`` NULL leaves them unfinished."""
    out = _JOB
    for key, value in (("CLASSES", CLASSES), ("FINISHED", finished), ("ROWS", rows),
                       ("TAG", tag), ("AGE", age)):  # fmt: skip
        out = out.replace(key, value)
    return out


# A week of finished jobs, 500 failed ones kept for a human, then the live state of a busy
# queue: 2,000 ready, 100 scheduled, 50 claimed by 5 live processes.
SOLID_QUEUE_HISTORY = [
    _jobs("$1::int", "done", "interval '7 days'", "t + interval '2 s'"),
    _jobs("500", "failed", "interval '3 days'", "NULL"),
    """INSERT INTO solid_queue_failed_executions (job_id, error, created_at)
       SELECT id, '{"exception_class":"RuntimeError","message":"boom","backtrace":[]}', created_at
       FROM solid_queue_jobs WHERE finished_at IS NULL""",
    """INSERT INTO solid_queue_processes (kind, last_heartbeat_at, pid, hostname, metadata,
                                         created_at, name)
       SELECT 'Worker', timezone('UTC', now()), g, 'host', '{}', timezone('UTC', now()),
              'worker-' || g FROM generate_series(1, 5) g""",
    _jobs("2150", "live", "interval '2 hours'", "NULL"),
    """WITH live AS (SELECT id, created_at, row_number() OVER (ORDER BY id) AS n
                     FROM solid_queue_jobs j WHERE finished_at IS NULL AND NOT EXISTS (
                         SELECT FROM solid_queue_failed_executions f WHERE f.job_id = j.id)),
            ready AS (INSERT INTO solid_queue_ready_executions (job_id, queue_name, priority,
                                                                created_at)
                      SELECT id, 'default', 0, created_at FROM live WHERE n <= 2000),
            sched AS (INSERT INTO solid_queue_scheduled_executions (job_id, queue_name,
                                                                    priority, scheduled_at,
                                                                    created_at)
                      SELECT id, 'default', 0, timezone('UTC', now()) + interval '1 hour',
                             created_at FROM live WHERE n > 2000 AND n <= 2100)
       INSERT INTO solid_queue_claimed_executions (job_id, process_id, created_at)
       SELECT l.id, p.id, timezone('UTC', now()) FROM live l
       JOIN solid_queue_processes p ON p.pid = l.n % 5 + 1 WHERE l.n > 2100""",
]
# Between two cycles: 200 jobs enqueued and finished, and 200 more waiting.
SOLID_QUEUE_BATCH = [
    _jobs(
        "200", "batch' || clock_timestamp() || '", "interval '1 minute'", "timezone('UTC', now())"
    ),
    _jobs("200", "wait' || clock_timestamp() || '", "interval '1 minute'", "NULL"),
    """INSERT INTO solid_queue_ready_executions (job_id, queue_name, priority, created_at)
       SELECT id, 'default', 0, created_at FROM solid_queue_jobs j
       WHERE id > (SELECT max(id) - 200 FROM solid_queue_jobs)""",
]


async def measure_solid_queue(dsn: str) -> Measurement:
    """The Solid Queue figures, on the schema as the Rails schema loader makes it."""
    await install(dsn)
    return await measure(dsn, "solid-queue", SOLID_QUEUE_HISTORY, SOLID_QUEUE_BATCH,
                         ("solid_queue_jobs",))  # fmt: skip
