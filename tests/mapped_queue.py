"""Home-grown queue tables: ``app.tasks``, the reference queue's SQL translated statement for
statement, and the table: mapping that describes it (the one issue 20 gives); and ``jobs``, a
Rails-style table (``timestamp(6) without time zone`` written in UTC, no result column).

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
from exporter.demo.queue import LEASE_EXPIRED_MARKER, JobQueue, Transition
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


# --- A Rails-style table: timestamp(6) without time zone written in UTC, no result column ------

RAILS_YAML = """\
queues:
  - name: rails
    database: {dsn: "postgresql://app@db.invalid/app"}
    table:
      name: jobs
      columns: {job_id: id, job_type: job_class, status: state, worker_id: locked_by,
                lease_until: locked_until, run_after: run_at, run_started_at: started_at,
                result: null}
      status_values: {pending: queued, running: running, done: finished, dead: failed}
      timestamps: {time_zone: UTC}
"""

RAILS_DDL = """
CREATE TABLE jobs (
    id           bigserial    PRIMARY KEY,
    job_class    varchar      NOT NULL,
    state        varchar      NOT NULL DEFAULT 'queued',
    priority     integer      NOT NULL DEFAULT 100,
    payload      jsonb        NOT NULL DEFAULT '{}'::jsonb,
    dedupe_key   varchar,
    attempts     integer      NOT NULL DEFAULT 0,
    max_attempts integer      NOT NULL DEFAULT 3,
    locked_by    varchar,
    locked_until timestamp(6) without time zone,
    run_at       timestamp(6) without time zone NOT NULL DEFAULT timezone('UTC', now()),
    started_at   timestamp(6) without time zone,
    last_error   text,
    created_at   timestamp(6) without time zone NOT NULL DEFAULT timezone('UTC', now()),
    updated_at   timestamp(6) without time zone NOT NULL DEFAULT timezone('UTC', now())
);
CREATE INDEX jobs_claim_idx ON jobs (priority, created_at) WHERE state = 'queued';
CREATE UNIQUE INDEX jobs_dedupe_active_uq
    ON jobs (dedupe_key) WHERE state IN ('queued', 'running') AND dedupe_key IS NOT NULL;
"""
# What Rails writes into a timestamp column: the UTC wall clock, here the transaction's now().
UTC_NOW = "timezone('UTC', now())"
_RAILS_ROW = """id AS job_id, job_class AS job_type,
    CASE state WHEN 'queued' THEN 1 WHEN 'running' THEN 2 WHEN 'finished' THEN 3
               WHEN 'failed' THEN 4 END AS status,
    attempts, max_attempts, locked_by AS worker_id,
    created_at AT TIME ZONE 'UTC' AS created_at, run_at AT TIME ZONE 'UTC' AS run_after,
    started_at AT TIME ZONE 'UTC' AS run_started_at, updated_at AT TIME ZONE 'UTC' AS updated_at,
    locked_until AT TIME ZONE 'UTC' AS lease_until, last_error, NULL::jsonb AS result"""


def _rails(statement: str) -> str:
    """One of TasksQueue's statements on the Rails table: its names, its UTC wall clock."""
    for old, new in (
        (_ROW, _RAILS_ROW), ("app.tasks", "jobs"), ("'active'", "'running'"),
        ("kind", "job_class"), ("prio,", "priority,"), ("tries", "attempts"),
        ("not_before", "run_at"), ("inserted_at", "created_at"), ("changed_at", "updated_at"),
        ("error = ", "last_error = "), ("coalesce(error", "coalesce(last_error"),
        ("now()", UTC_NOW),
    ):  # fmt: skip
        statement = statement.replace(old, new)
    return statement


class RailsQueue(TasksQueue):
    """The reference queue's statements on a Rails-style table (no result: a worker's is lost)."""

    ENQUEUE, CLAIM, RENEW = (_rails(s) for s in (TasksQueue.ENQUEUE, TasksQueue.CLAIM,
                                                 TasksQueue.RENEW))  # fmt: skip
    FAIL, REAP, REQUEUE = (_rails(s) for s in (TasksQueue.FAIL, TasksQueue.REAP,
                                               TasksQueue.REQUEUE))  # fmt: skip
    DEAD_LETTERS = _rails(TasksQueue.DEAD_LETTERS)
    DEAD_COUNT = (
        "SELECT job_class AS job_type, count(*) AS n FROM jobs WHERE state = 'failed' GROUP BY 1"
    )
    COMPLETE = f"""
UPDATE jobs SET state = 'finished', locked_until = NULL, locked_by = NULL, updated_at = {UTC_NOW}
WHERE id = $1 AND state = 'running' AND locked_by = $2
RETURNING {_RAILS_ROW}
"""

    @classmethod
    def job_type_of(cls, number: int) -> int | str:
        """Rails names a job by its class."""
        return f"Kind{number}Job"

    async def complete(self, job_id: Any, worker_id: str, result: Any) -> Transition | None:
        """Mark the job done; the table keeps no result, so the worker's is dropped."""
        row = await self.conn.fetchrow(self.COMPLETE, job_id, worker_id)
        return None if row is None else Transition.from_row("complete", row)


def rails_queue(path: Path, dsn: str) -> QueueSettings:
    """The Rails-style queue as the configuration loader reads RAILS_YAML, pointed at ``dsn``."""
    path.write_text(RAILS_YAML.replace("postgresql://app@db.invalid/app", dsn))
    (queue,) = load_settings(str(path), {}, {}).queues
    return queue


async def prepare_rails(dsn: str, mapping: TableMapping, *, time_zone: str) -> None:
    """Create the Rails-style table and the exporter's indexes, and make ``time_zone`` every
    later session's TimeZone in this database (the writers still write UTC, as Rails does)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(RAILS_DDL)
        for statement in index_statements(mapping):
            await conn.execute(statement.sql)
        await conn.execute(
            f"DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET timezone TO %L', "
            f"current_database(), '{time_zone}'); END $$"
        )
    finally:
        await conn.close()
