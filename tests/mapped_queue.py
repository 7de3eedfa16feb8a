"""A home-grown queue table, ``app.tasks``: the reference queue's SQL translated statement for
statement, and the table: mapping that describes it (the one issue 20 gives).

Every column is renamed, ``state`` holds text (queued, active, finished, failed), ``kind`` holds
text job types and ``id`` is a bigint. The fleet drives it through :class:`TasksQueue` exactly as
it drives the job table, so its tally is the ground truth of this table too.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import asyncpg

from exporter.counting.sqltext import index_statements
from exporter.demo.queue import LEASE_EXPIRED_MARKER, JobQueue
from exporter.settings import QueueSettings, load_settings
from exporter.settings.table import TableMapping

MAPPING_YAML = """\
queues:
  - name: tasks
    database: {dsn: "postgresql://app@db.invalid/app"}
    table:
      name: app.tasks                      # schema-qualified or not
      columns: {job_id: id, job_type: kind, status: state, priority: prio, attempts: tries,
                max_attempts: max_tries, worker_id: locked_by, lease_until: locked_until,
                run_after: not_before, run_started_at: started_at, result: output,
                last_error: error, created_at: inserted_at, updated_at: changed_at}
      status_values: {pending: queued, running: active, done: finished, dead: failed}
"""

TASKS_DDL = """
CREATE SCHEMA IF NOT EXISTS app;
CREATE TABLE app.tasks (
    id           bigserial   PRIMARY KEY,
    kind         text        NOT NULL,
    state        text        NOT NULL DEFAULT 'queued',
    prio         integer     NOT NULL DEFAULT 100,
    payload      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    dedupe_key   text,
    tries        integer     NOT NULL DEFAULT 0,
    max_tries    integer     NOT NULL DEFAULT 3,
    locked_by    text,
    locked_until timestamptz,
    not_before   timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    output       jsonb,
    error        text,
    inserted_at  timestamptz NOT NULL DEFAULT now(),
    changed_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tasks_claim_idx ON app.tasks (prio, inserted_at) WHERE state = 'queued';
CREATE UNIQUE INDEX tasks_dedupe_active_uq
    ON app.tasks (dedupe_key) WHERE state IN ('queued', 'active') AND dedupe_key IS NOT NULL;
"""

# Each RETURNING row in the reference's names, so the fleet's Transition reads it as it is; the
# status number is only the tally's reading of the text (DEAD = 4), the table never holds one.
_ROW = """id AS job_id, kind AS job_type,
    CASE state WHEN 'queued' THEN 1 WHEN 'active' THEN 2 WHEN 'finished' THEN 3
               WHEN 'failed' THEN 4 END AS status,
    tries AS attempts, max_tries AS max_attempts, locked_by AS worker_id,
    inserted_at AS created_at, not_before AS run_after, started_at AS run_started_at,
    changed_at AS updated_at, locked_until AS lease_until, error AS last_error, output AS result"""


class TasksQueue(JobQueue):
    """The reference queue's statements (exporter/demo/queue.py), translated to app.tasks."""

    ENQUEUE = f"""
INSERT INTO app.tasks (id, kind, prio, payload, dedupe_key, max_tries)
VALUES (coalesce($1::bigint, nextval('app.tasks_id_seq')), $2, $3, $4::jsonb, $5, $6)
ON CONFLICT (dedupe_key) WHERE state IN ('queued', 'active') AND dedupe_key IS NOT NULL
DO NOTHING
RETURNING {_ROW}
"""
    CLAIM = f"""
UPDATE app.tasks SET state = 'active', locked_by = $1,
    locked_until = now() + make_interval(secs => $2),
    started_at = now(), tries = tries + 1, changed_at = now()
WHERE id = (
    SELECT id FROM app.tasks
    WHERE state = 'queued' AND not_before <= now()
      AND ($3::bigint IS NULL OR id = $3) AND NOT (id = ANY($4::bigint[]))
    ORDER BY prio, inserted_at
    FOR UPDATE SKIP LOCKED
    LIMIT 1
)
RETURNING {_ROW}
"""
    RENEW = f"""
UPDATE app.tasks SET locked_until = now() + make_interval(secs => $3), changed_at = now()
WHERE id = $1 AND locked_by = $2 AND state = 'active'
RETURNING {_ROW}
"""
    COMPLETE = f"""
UPDATE app.tasks SET state = 'finished', output = $3::jsonb, locked_until = NULL,
    locked_by = NULL, changed_at = now()
WHERE id = $1 AND state = 'active' AND locked_by = $2
RETURNING {_ROW}
"""
    FAIL = f"""
UPDATE app.tasks SET
    state = CASE WHEN tries >= max_tries THEN 'failed' ELSE 'queued' END,
    not_before = CASE WHEN tries >= max_tries THEN not_before
        ELSE now() + make_interval(secs => least(600, $4 * power(2, greatest(tries - 1, 0))))
        END,
    error = $3, locked_until = NULL, locked_by = NULL, changed_at = now()
WHERE id = $1 AND state = 'active' AND locked_by = $2
RETURNING {_ROW}
"""
    REAP = f"""
UPDATE app.tasks SET
    state = CASE WHEN tries >= max_tries THEN 'failed' ELSE 'queued' END,
    not_before = now(),
    error = coalesce(error, '') || '{LEASE_EXPIRED_MARKER}',
    locked_until = NULL, locked_by = NULL, changed_at = now()
WHERE state = 'active' AND locked_until IS NOT NULL AND locked_until < now()
  AND ($1::bigint IS NULL OR id = $1) AND NOT (id = ANY($2::bigint[]))
RETURNING {_ROW}
"""
    REQUEUE = f"""
UPDATE app.tasks SET state = 'queued', tries = 0, not_before = now(), locked_until = NULL,
    locked_by = NULL, started_at = NULL, error = NULL, changed_at = now()
WHERE id = $1 AND state = 'failed'
RETURNING {_ROW}
"""
    DEAD_LETTERS = """
SELECT id AS job_id, changed_at AS updated_at FROM app.tasks
WHERE state = 'failed' AND changed_at < now() - make_interval(secs => $2)
  AND NOT (id = ANY($1::bigint[]))
ORDER BY changed_at DESC LIMIT 50
"""
    # The dead letters by job type, as the exporter's gauge must show them.
    DEAD_COUNT = (
        "SELECT kind AS job_type, count(*) AS n FROM app.tasks WHERE state = 'failed' GROUP BY 1"
    )

    @classmethod
    def job_type_of(cls, number: int) -> int | str:
        """Text job types, as a task library names them."""
        return f"app.jobs.kind_{number}"

    @classmethod
    def new_id(cls) -> Any:
        """A bigint no bigserial value of a test reaches."""
        return random.randint(2**40, 2**62)


def tasks_queue(path: Path, dsn: str) -> QueueSettings:
    """The queue as the configuration loader reads MAPPING_YAML, pointed at ``dsn``."""
    path.write_text(MAPPING_YAML.replace("postgresql://app@db.invalid/app", dsn))
    (queue,) = load_settings(str(path), {}, {}).queues
    return queue


async def prepare_tasks(dsn: str, mapping: TableMapping, *, indexes: bool = True) -> None:
    """Create app.tasks with the queue's own indexes and (by default) the exporter's."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(TASKS_DDL)
        if indexes:
            for statement in index_statements(mapping):
                await conn.execute(statement.sql)
    finally:
        await conn.close()
