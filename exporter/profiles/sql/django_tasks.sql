-- The django-tasks preset's per-cycle queries, one named block each (exporter/profiles/django_tasks.py).
-- django-tasks-db keeps one row per task in django_tasks_database_dbtaskresult: READY ->
-- RUNNING -> SUCCESSFUL | FAILED, never back. Its times are stamped by the Django processes
-- (timezone.now()), not by the database. A task without run_after stores 9999-01-01 there (in
-- the connection's time zone when USE_TZ is off, hence the day of slack below).

-- name: horizon
-- Autocommit, before the cycle's snapshot: sessions first, then prepared transactions (the
-- nesting fixes the order; see horizon.py).
SELECT extract(epoch FROM a.lower_bound)::float8 AS lower_bound, a.hidden, p.prepared
{sessions};

-- name: gauges
-- The active set, one branch per partial index: READY rows through the library's own
-- tasks_db_new_ordering_idx, RUNNING rows through the shipped django_tasks_exporter_running_idx.
-- Cost follows the backlog, never the history. The ids let the reader see which tasks left.
SELECT r.task_path AS job_type,
       count(*) FILTER (WHERE r.status = 'READY') AS pending,
       count(*) FILTER (WHERE r.status = 'RUNNING') AS running,
       count(*) FILTER (WHERE r.status = 'READY' AND r.run_after > now()
                        AND r.run_after < '9998-12-31') AS scheduled,
       coalesce(extract(epoch FROM now() - min(r.enqueued_at) FILTER (WHERE r.status = 'READY')),
                0)::float8 AS oldest_pending_age,
       coalesce(extract(epoch FROM now() - min(r.ready_at)
                FILTER (WHERE r.status = 'READY' AND r.ready_at <= now())), 0)::float8
           AS oldest_ready_wait,
       coalesce(extract(epoch FROM now() - min(r.started_at) FILTER (WHERE r.status = 'RUNNING')),
                0)::float8 AS running_oldest,
       array_agg(r.id::text) AS active_ids
FROM (
    SELECT t.id, t.task_path, t.status, t.enqueued_at, t.started_at, t.run_after,
           CASE WHEN t.run_after >= '9998-12-31' THEN t.enqueued_at
                ELSE greatest(t.enqueued_at, t.run_after) END AS ready_at
    FROM django_tasks_database_dbtaskresult t
    WHERE t.status = 'READY'
    UNION ALL
    SELECT t.id, t.task_path, t.status, t.enqueued_at, t.started_at, t.run_after, NULL
    FROM django_tasks_database_dbtaskresult t
    WHERE t.status = 'RUNNING'
) r
GROUP BY r.task_path;

-- name: changes
-- Rows enqueued since the window's lower bound (django_tasks_exporter_enqueued_idx), and the
-- tasks the previous cycle saw active that are finished now. Those are found by an anti-join
-- with the active set (the two partial indexes again, pages the gauges just read), so the
-- primary key is probed only for the few that left it, not for the whole backlog.
-- $1: lower bound of enqueued_at (Unix seconds); $2: ids active in the previous cycle.
-- Differences are taken in SQL: they keep microsecond precision (epoch floats lose some).
SELECT c.id::text AS id, c.task_path AS job_type, c.status, c.exception_class_path,
       extract(epoch FROM c.enqueued_at)::float8 AS enqueued_at,
       extract(epoch FROM c.finished_at - c.started_at)::float8 AS duration,
       extract(epoch FROM c.started_at
               - CASE WHEN c.run_after >= '9998-12-31' THEN c.enqueued_at
                      ELSE greatest(c.enqueued_at, c.run_after) END)::float8 AS wait,
       extract(epoch FROM c.finished_at - c.enqueued_at)::float8 AS latency
FROM (
    SELECT t.id, t.task_path, t.status, t.exception_class_path, t.enqueued_at, t.started_at,
           t.finished_at, t.run_after
    FROM django_tasks_database_dbtaskresult t
    WHERE t.enqueued_at >= to_timestamp($1::float8)
    UNION
    SELECT t.id, t.task_path, t.status, t.exception_class_path, t.enqueued_at, t.started_at,
           t.finished_at, t.run_after
    FROM django_tasks_database_dbtaskresult t
    WHERE t.status IN ('SUCCESSFUL', 'FAILED') AND t.id = ANY(ARRAY(
        SELECT p.id FROM unnest($2::text[]::uuid[]) AS p(id)
        WHERE NOT EXISTS (
            SELECT FROM (SELECT a.id FROM django_tasks_database_dbtaskresult a
                         WHERE a.status = 'READY'
                         UNION ALL
                         SELECT a.id FROM django_tasks_database_dbtaskresult a
                         WHERE a.status = 'RUNNING') a
            WHERE a.id = p.id)))
) c;
