-- The GoodJob preset's per-cycle queries, one named block each (exporter/profiles/good_job.py).
-- GoodJob 4 keeps one row per job in good_jobs (its id is the ActiveJob uuid; a retry rewrites
-- the same row) and one row per attempt in good_job_executions. It has no status column: the
-- state is derived as its own scopes derive it (app/models/good_job/job.rb). Every timestamp is
-- Rails' `timestamp(6) without time zone` holding UTC, stamped by the Ruby process's clock:
-- compared with timezone('UTC', now()) and turned into Unix seconds with AT TIME ZONE 'UTC', so
-- the session's TimeZone never matters. Only GoodJob's own indexes are used.

-- name: horizon
-- Autocommit, before the cycle's snapshot: sessions first, then prepared transactions (the
-- nesting fixes the order; see horizon.py). No id cursor: the ids are uuids.
SELECT extract(epoch FROM a.lower_bound)::float8 AS lower_bound, a.hidden, p.prepared
{sessions};

-- name: gauges
-- The unfinished jobs, through a partial index on finished_at IS NULL (the active set; never
-- the finished history), per job_class. Pending = not performing (queued, scheduled and
-- waiting for a retry); running = performed_at set (GoodJob's running scope). Scheduled and
-- ready compare coalesce(scheduled_at, created_at) with now, as its scopes do.
-- Stuck is GoodJob's notion of a dead process (Process.inactive), for a running job's
-- locked_by_id: no such process row (Process.cleanup deleted it and cleared locked_by_id),
-- an advisory-locked process (lock_type 0) whose session lock is gone, or a process that only
-- heartbeats whose updated_at is older than $1 s (EXPIRED_INTERVAL, 5 min, by default).
-- The ids let the reader tell which jobs left the active set.
WITH n AS MATERIALIZED (SELECT timezone('UTC', now()) AS now_utc),
held AS MATERIALIZED (
    SELECT l.classid, l.objid FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
)
SELECT j.job_class AS job_type,
       count(*) FILTER (WHERE j.performed_at IS NULL) AS pending,
       count(*) FILTER (WHERE j.performed_at IS NOT NULL) AS running,
       count(*) FILTER (WHERE j.performed_at IS NULL
                        AND coalesce(j.scheduled_at, j.created_at) > n.now_utc) AS scheduled,
       coalesce(extract(epoch FROM n.now_utc - min(j.created_at)
                FILTER (WHERE j.performed_at IS NULL)), 0)::float8 AS oldest_pending_age,
       coalesce(extract(epoch FROM n.now_utc - min(coalesce(j.scheduled_at, j.created_at))
                FILTER (WHERE j.performed_at IS NULL
                        AND coalesce(j.scheduled_at, j.created_at) <= n.now_utc)), 0)::float8
           AS oldest_ready_wait,
       coalesce(extract(epoch FROM n.now_utc - min(j.performed_at)
                FILTER (WHERE j.performed_at IS NOT NULL)), 0)::float8 AS running_oldest,
       count(*) FILTER (WHERE j.performed_at IS NOT NULL AND (
           p.id IS NULL
           OR (p.lock_type = 0 AND NOT EXISTS (
               SELECT FROM held h
               WHERE h.classid = substring(('x' || substr(md5('good_job_processes-' || p.id::text),
                                                          1, 16))::bit(64) FROM 1 FOR 32)::bit(32)::int
                 AND h.objid = substring(('x' || substr(md5('good_job_processes-' || p.id::text),
                                                        1, 16))::bit(64) FROM 33 FOR 32)::bit(32)::int))
           OR (p.lock_type IS DISTINCT FROM 0
               AND p.updated_at < n.now_utc - make_interval(secs => $1::float8)))) AS stuck,
       array_agg(j.id::text) AS active_ids
FROM n
CROSS JOIN good_jobs j
LEFT JOIN good_job_processes p ON p.id = j.locked_by_id AND j.performed_at IS NOT NULL
WHERE j.finished_at IS NULL
GROUP BY j.job_class, n.now_utc;

-- name: changes
-- Job row versions written since the previous snapshot (xmin at or above its xmin), found in
-- three ranges: the active set (a partial index on finished_at IS NULL; every running job is
-- read whatever its xmin, since an interrupted attempt is closed in good_job_executions alone);
-- finished_at at or after the window's bound (index_good_jobs_jobs_on_finished_at_only); and,
-- by primary key, the jobs that left the active set since the previous snapshot (the reader
-- passes only those) with finished_at below that bound: only a worker's clock behind the
-- database's puts it there, and the reader refuses the cycle. Each job's attempts come from
-- good_job_executions (index_good_job_executions_on_active_job_id_and_created_at): the failed
-- ones in the order they were written (xid), and whether any of them was in the previous
-- snapshot, which tells a new job from one retried by hand that the reader had forgotten.
-- $1: the bound (Unix seconds); $2: xmin of the previous snapshot as xid8 (0 at the baseline);
-- $3: the previous snapshot (NULL at the baseline); $4: the ids that left the active set.
WITH s AS MATERIALIZED (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax8),
changed AS (
    SELECT j.id FROM good_jobs j, s
    WHERE j.finished_at IS NULL
      AND (j.performed_at IS NOT NULL
           OR s.xmax8 - ((s.xmax8 - j.xmin::text::bigint) % 4294967296) >= $2::bigint)
    UNION
    SELECT j.id FROM good_jobs j, s
    WHERE j.finished_at >= timezone('UTC', to_timestamp($1::float8))
      AND s.xmax8 - ((s.xmax8 - j.xmin::text::bigint) % 4294967296) >= $2::bigint
    UNION
    SELECT j.id FROM good_jobs j
    WHERE j.id = ANY($4::text[]::uuid[])
      AND j.finished_at < timezone('UTC', to_timestamp($1::float8))
)
SELECT w.id::text AS id, w.job_class AS job_type,
       CASE WHEN w.finished_at IS NULL AND w.performed_at IS NULL THEN 'waiting'
            WHEN w.finished_at IS NULL THEN 'running'
            WHEN w.error IS NULL THEN 'succeeded'
            -- Job#discard_job and #force_discard_job (the dashboard) attach this error.
            WHEN w.error LIKE 'GoodJob::Job::DiscardJobError: %' THEN 'cancelled'
            ELSE 'discarded' END AS state,
       coalesce(w.executions_count, 0) AS attempt,
       x.errors, x.error_kinds, 0 AS rescued, 0 AS snoozed,
       CASE WHEN w.error LIKE 'GoodJob::Job::DiscardJobError: %'
            THEN w.finished_at::text END AS cancel_mark,
       extract(epoch FROM w.finished_at AT TIME ZONE 'UTC')::float8 AS ended_at,
       -- The last attempt's figures; performed_at and finished_at are one worker's clock.
       extract(epoch FROM w.finished_at - w.performed_at)::float8 AS duration,
       extract(epoch FROM w.performed_at - coalesce(w.scheduled_at, w.created_at))::float8 AS wait,
       NULL::float8 AS latency,  -- a retry rewrites created_at: the first enqueue is gone
       -- A job made since the previous snapshot has no attempt that snapshot showed; a job
       -- discarded by hand before it ever ran and then retried by hand has no attempt at all.
       (x.seen OR coalesce(w.error_event = 3 AND x.executions = 0, false)) AS existed
FROM changed c
JOIN good_jobs w ON w.id = c.id
CROSS JOIN s
CROSS JOIN LATERAL (
    SELECT count(*) AS executions,
           count(*) FILTER (WHERE e.error IS NOT NULL) AS errors,
           -- An attempt its process's death interrupted (error_event 0) lost its worker.
           coalesce(array_agg(CASE WHEN e.error_event = 0 THEN 'lease_expired' ELSE 'error' END
                              ORDER BY e.xid, e.created_at) FILTER (WHERE e.error IS NOT NULL),
                    '{}') AS error_kinds,
           coalesce(bool_or(pg_visible_in_snapshot(e.xid::text::xid8, $3::text::pg_snapshot)),
                    false) AS seen
    FROM (SELECT e.error, e.error_event, e.created_at,
                 s.xmax8 - ((s.xmax8 - e.xmin::text::bigint) % 4294967296) AS xid
          FROM good_job_executions e WHERE e.active_job_id = w.id) e
) x;
