-- The Solid Queue preset's per-cycle queries, one named block each (exporter/profiles/solid_queue.py).
-- Solid Queue 1.5 on PostgreSQL: solid_queue_jobs (one row per enqueue, kept until
-- clear_finished_jobs deletes finished ones) and the side tables whose row says where a job is:
-- solid_queue_ready_executions, _scheduled_executions, _blocked_executions (waiting),
-- _claimed_executions (running, with its process) and _failed_executions (failed, kept).
-- Rails writes `timestamp(6) without time zone` holding UTC: compared with
-- timezone('UTC', now()), whatever this session's TimeZone. Every side table's job_id has a
-- unique index, so each lookup by job id is one index probe.

-- name: gauges
-- The side tables are the live state: small (the backlog, the busy threads, the failed jobs),
-- each read whole, joined to the job by primary key for its class. Stuck is Solid Queue's own
-- test for a dead process: claimed by a process whose last heartbeat is older than the alive
-- threshold ($1 seconds), or by one whose row is gone (an orphan). Ready = runnable now: in
-- ready, or scheduled and due (the dispatcher moves it within its polling interval). The
-- failed jobs are the dead status gauge. running_ids tells the reader which jobs run.
WITH n AS MATERIALIZED (SELECT timezone('UTC', now()) AS now_utc),
live AS (
    SELECT r.job_id, 'ready' AS kind, r.created_at AS since, false AS stuck
    FROM solid_queue_ready_executions r
    UNION ALL
    SELECT s.job_id, 'scheduled', s.scheduled_at, false FROM solid_queue_scheduled_executions s
    UNION ALL
    SELECT b.job_id, 'blocked', b.created_at, false FROM solid_queue_blocked_executions b
    UNION ALL
    SELECT c.job_id, 'claimed', c.created_at,
           p.id IS NULL OR p.last_heartbeat_at < n.now_utc - make_interval(secs => $1::float8)
    FROM n
    CROSS JOIN solid_queue_claimed_executions c
    LEFT JOIN solid_queue_processes p ON p.id = c.process_id
)
SELECT j.class_name AS job_type,
       count(*) FILTER (WHERE l.kind <> 'claimed') AS pending,
       count(*) FILTER (WHERE l.kind = 'claimed') AS running,
       count(*) FILTER (WHERE l.kind = 'scheduled' AND l.since > n.now_utc) AS scheduled,
       coalesce(extract(epoch FROM n.now_utc - min(j.created_at)
                FILTER (WHERE l.kind <> 'claimed')), 0)::float8 AS oldest_pending_age,
       coalesce(extract(epoch FROM n.now_utc - min(l.since)
                FILTER (WHERE l.kind = 'ready'
                        OR (l.kind = 'scheduled' AND l.since <= n.now_utc))), 0)::float8
           AS oldest_ready_wait,
       coalesce(extract(epoch FROM n.now_utc - min(l.since)
                FILTER (WHERE l.kind = 'claimed')), 0)::float8 AS running_oldest,
       count(*) FILTER (WHERE l.stuck) AS stuck,
       0::bigint AS held,
       coalesce(array_agg(l.job_id) FILTER (WHERE l.kind = 'claimed'), '{}') AS running_ids
FROM n
CROSS JOIN live l
JOIN solid_queue_jobs j ON j.id = l.job_id
GROUP BY j.class_name, n.now_utc
UNION ALL
SELECT j.class_name, 0, 0, 0, 0::float8, 0::float8, 0::float8, 0, count(*), '{}'::bigint[]
FROM solid_queue_failed_executions f
JOIN solid_queue_jobs j ON j.id = f.job_id
GROUP BY j.class_name;

-- name: members
-- At the baseline only: every job a side table holds, with where it is. Later cycles follow
-- these jobs by id (changes) instead of reading the tables again.
SELECT m.job_id AS id, j.class_name AS job_type, m.state, m.mark
FROM (
    SELECT job_id, 'waiting' AS state, NULL::bigint AS mark FROM solid_queue_ready_executions
    UNION ALL
    SELECT job_id, 'waiting', NULL FROM solid_queue_scheduled_executions
    UNION ALL
    SELECT job_id, 'waiting', NULL FROM solid_queue_blocked_executions
    UNION ALL
    SELECT job_id, 'running', NULL FROM solid_queue_claimed_executions
    UNION ALL
    SELECT job_id, 'held', id FROM solid_queue_failed_executions
) m
JOIN solid_queue_jobs j ON j.id = m.job_id;

-- name: changes
-- The jobs whose place may have changed since the previous snapshot, with where they are now:
-- every job above the settled id watermark ($1: the primary key's range; new rows, whatever
-- their state), and by id the jobs the reader follows that left where that snapshot held them:
-- the live ones ($2) now in no waiting or claimed table, the failed ones ($3: their failed
-- execution ids; $4: their job ids) whose failed execution is gone. A failed execution that
-- is gone and a new one for the same job (retried by hand, failed again) is a new mark.
-- executions is Active Job's attempt count in `arguments`, which Solid Queue writes with
-- JSON.dump and parses itself to run the job (read for new rows only); superseded says a
-- retry_on re-enqueued the job as a later row (same active_job_id, indexed); latency runs from
-- the job's first row to its end (0 when the finishing worker's clock is behind the
-- enqueuer's by more than that). ProcessPrunedError, ProcessMissingError and
-- ProcessExitError (a worker lost, found dead, or exited) are lease_expired, anything else
-- error: exception_class is the first key of the error JSON, read without parsing it.
WITH moved AS (
    SELECT p.id FROM unnest($2::bigint[]) p(id)
    WHERE NOT EXISTS (SELECT FROM solid_queue_claimed_executions c WHERE c.job_id = p.id)
      AND NOT EXISTS (SELECT FROM solid_queue_ready_executions r WHERE r.job_id = p.id)
      AND NOT EXISTS (SELECT FROM solid_queue_scheduled_executions s WHERE s.job_id = p.id)
      AND NOT EXISTS (SELECT FROM solid_queue_blocked_executions b WHERE b.job_id = p.id)
    UNION
    SELECT h.id FROM unnest($3::bigint[], $4::bigint[]) h(mark, id)
    WHERE NOT EXISTS (SELECT FROM solid_queue_failed_executions f WHERE f.id = h.mark)
),
found AS (
    SELECT j.id FROM solid_queue_jobs j WHERE j.id > $1::bigint
    UNION
    SELECT m.id FROM moved m
)
SELECT x.id, j.class_name AS job_type,
       CASE WHEN j.id IS NULL THEN 'gone'
            WHEN j.finished_at IS NOT NULL THEN 'finished'
            WHEN f.id IS NOT NULL THEN 'held'
            WHEN EXISTS (SELECT FROM solid_queue_claimed_executions c WHERE c.job_id = j.id)
                THEN 'running'
            WHEN (SELECT 1 FROM solid_queue_ready_executions r
                  WHERE r.job_id = j.id LIMIT 1) IS NOT NULL
              OR EXISTS (SELECT FROM solid_queue_scheduled_executions s WHERE s.job_id = j.id)
              OR EXISTS (SELECT FROM solid_queue_blocked_executions b WHERE b.job_id = j.id)
                THEN 'waiting'
            ELSE 'none' END AS state,
       f.id AS mark,
       CASE WHEN f.id IS NULL THEN NULL
            WHEN substring(f.error FROM '"exception_class":\s*"([^"]*)"') IN (
                'SolidQueue::Processes::ProcessPrunedError',
                'SolidQueue::Processes::ProcessMissingError',
                'SolidQueue::Processes::ProcessExitError') THEN 'lease_expired'
            ELSE 'error' END AS reason,
       CASE WHEN x.id > $1::bigint THEN (j.arguments::jsonb ->> 'executions')::int END
           AS executions,
       CASE WHEN j.finished_at IS NOT NULL
            THEN (SELECT 1 FROM solid_queue_jobs k
                  WHERE k.active_job_id = j.active_job_id AND k.id > j.id LIMIT 1) IS NOT NULL
       END AS superseded,
       CASE WHEN j.finished_at IS NOT NULL
            THEN greatest(extract(epoch FROM j.finished_at
                                  - coalesce((SELECT min(k.created_at) FROM solid_queue_jobs k
                                              WHERE k.active_job_id = j.active_job_id),
                                             j.created_at)), 0)::float8 END
           AS latency
FROM found x
LEFT JOIN solid_queue_jobs j ON j.id = x.id
-- LIMIT 1 keeps the lookups in the big side tables (the backlog in ready, the failed jobs) a
-- probe of their job_id index: as a join or an EXISTS, the planner hashes the whole table for
-- a few hundred rows. The claimed, scheduled and blocked tables stay EXISTS: a hash of a few
-- rows is cheaper than a probe per row.
LEFT JOIN LATERAL (SELECT f.id, f.error FROM solid_queue_failed_executions f
                   WHERE f.job_id = x.id LIMIT 1) f ON true;
