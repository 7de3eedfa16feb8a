-- The graphile-worker 0.18 preset's per-cycle queries, one named block each
-- (exporter/profiles/graphile_worker.py). graphile-worker has no status column: the state of a
-- row of graphile_worker._private_jobs is derived, as the library itself derives it:
--   running   locked_at IS NOT NULL                        (getJobs locks it, attempts + 1)
--   available is_available (unlocked, attempts < max_attempts): ready when run_at <= now(),
--             scheduled (new, delayed or waiting to retry) when run_at > now()
--   dead      locked_at IS NULL AND attempts >= max_attempts (kept until deleted by hand)
-- A success DELETEs the row. Every statement goes through _private_tasks (the task identifier
-- is the job type), one task at a time, so each lookup is a range scan of an index.

-- name: horizon
-- Autocommit, before the cycle's snapshot: sessions first, then prepared transactions (the
-- nesting fixes the order; see exporter/counting/horizon.py).
SELECT extract(epoch FROM a.lower_bound)::float8 AS lower_bound, a.hidden, p.prepared
{sessions};

-- name: gauges
-- Two sets, each read once and grouped by task: the available set through graphile's own
-- jobs_main_index (index-only: it includes task_id), the locked set through the preset's
-- partial index (graphile_worker_indexes.sql). Every task gets a row, so a drained task reads
-- 0. The dead set is counted by "dead", not every cycle. $1: seconds a job may stay locked
-- before it counts as stuck.
SELECT t.identifier AS job_type, coalesce(a.pending, 0) AS pending,
       coalesce(a.scheduled, 0) AS scheduled, coalesce(a.oldest_ready_wait, 0) AS oldest_ready_wait,
       coalesce(l.running, 0) AS running, coalesce(l.running_oldest, 0) AS running_oldest,
       coalesce(l.stuck, 0) AS stuck, coalesce(l.locked_ids, '{}') AS locked_ids
FROM graphile_worker._private_tasks t
LEFT JOIN (
    SELECT j.task_id, count(*) AS pending,
           count(*) FILTER (WHERE j.run_at > now()) AS scheduled,
           extract(epoch FROM now() - min(j.run_at) FILTER (WHERE j.run_at <= now()))::float8
               AS oldest_ready_wait
    FROM graphile_worker._private_jobs j
    WHERE j.is_available = true
    GROUP BY j.task_id
) a ON a.task_id = t.id
LEFT JOIN (
    SELECT j.task_id, count(*) AS running,
           extract(epoch FROM now() - min(j.locked_at))::float8 AS running_oldest,
           count(*) FILTER (WHERE j.locked_at < now() - $1::float8 * interval '1 second')
               AS stuck,
           -- The next cycle looks these up: force_unlock_workers kills a job on its last
           -- attempt without moving run_at.
           array_agg(j.id::text) AS locked_ids
    FROM graphile_worker._private_jobs j
    WHERE j.locked_at IS NOT NULL
    GROUP BY j.task_id
) l ON l.task_id = t.id;

-- name: dead
-- The recount of the dead set (graphile keeps permanently failed jobs until deleted by hand,
-- so it can hold most of the table): index-only through graphile_worker_exporter_dead_idx,
-- O(dead rows). Run at the baseline and every DEAD_RECOUNT_EVERY cycles; in between the
-- reader keeps the count from the deaths and departures it sees.
SELECT t.identifier AS job_type, d.held
FROM graphile_worker._private_tasks t
JOIN (
    SELECT j.task_id, count(*) AS held
    FROM graphile_worker._private_jobs j
    WHERE j.locked_at IS NULL AND j.attempts >= j.max_attempts
    GROUP BY j.task_id
) d ON d.task_id = t.id;

-- name: deaths
-- The death window: dead rows whose run_at is at or past $1 (Unix seconds: the previous
-- horizon's lower bound minus the margin). A job that died since the previous snapshot is in
-- it: failJobs sets run_at = greatest(now(), run_at) + exp(least(attempts, 10)) seconds, and
-- the 4 h lock takeover (resetLockedAt) sets run_at = greatest(run_at, now()), both stamped
-- by a transaction that started after that bound. One range scan of
-- graphile_worker_exporter_dead_idx per task. Plus, by primary key, the ids in $2 that are
-- dead now wherever their run_at is: the jobs the previous cycle saw locked
-- (force_unlock_workers leaves run_at alone) and the dead jobs the reader follows, so it
-- sees one that is no longer dead (deleted or revived). in_window tells the two apart.
SELECT t.identifier AS job_type, j.id::text AS id, true AS in_window
FROM graphile_worker._private_tasks t
CROSS JOIN LATERAL (
    SELECT j.id
    FROM graphile_worker._private_jobs j
    WHERE j.locked_at IS NULL AND j.attempts >= j.max_attempts AND j.task_id = t.id
      AND j.run_at >= to_timestamp($1::float8)
) j
UNION ALL
SELECT t.identifier, j.id::text, false
FROM graphile_worker._private_jobs j
JOIN graphile_worker._private_tasks t ON t.id = j.task_id
WHERE j.id = ANY($2::bigint[]) AND j.locked_at IS NULL AND j.attempts >= j.max_attempts
  AND j.run_at < to_timestamp($1::float8);

-- name: tasks
-- collect.counting: logical: the task names, read first in each cycle. The change stream names
-- a job's task by task_id only; _private_tasks holds a row per task identifier ever used.
SELECT t.id::text AS id, t.identifier
FROM graphile_worker._private_tasks t;
