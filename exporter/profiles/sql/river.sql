-- The River preset's per-cycle queries, one named block each (exporter/profiles/river.py).
-- One table, river_job, as River's migration line main makes it (001-007). Its timestamps are
-- timestamptz, so the session's TimeZone changes nothing. Who stamps them: attempted_at is the
-- database's now() (JobGetAvailable); finalized_at is the worker's clock (the completer), the
-- database's (JobCancel of a waiting job) or the leader's (JobRescuer); created_at and
-- scheduled_at are the inserting client's clock (Go) or the database's (riverqueue-python).
-- {active} is the literal array of the active states that this database's enum has (see
-- "states": a literal of a missing label is an error).

-- name: gauges
-- The active set through river_job_prioritized_fetching_index (state leads), per kind; never
-- a GROUP BY over the finished history. Ready = runnable now: available, scheduled or
-- retryable with scheduled_at reached (JobSchedule promotes rows up to 5 s early, and an error
-- whose retry is at most 5 s away goes straight back to available with a future scheduled_at:
-- neither is ready yet). Stuck is the JobRescuer's own test: running with attempted_at older
-- than RescueStuckJobsAfter ($1). The ids let the reader forget jobs deleted while waiting.
SELECT j.kind AS job_type,
       count(*) FILTER (WHERE j.state <> 'running') AS pending,
       count(*) FILTER (WHERE j.state = 'running') AS running,
       count(*) FILTER (WHERE j.state <> 'running' AND j.scheduled_at > n.now) AS scheduled,
       coalesce(extract(epoch FROM n.now - min(j.created_at)
                FILTER (WHERE j.state <> 'running')), 0)::float8 AS oldest_pending_age,
       coalesce(extract(epoch FROM n.now - min(j.scheduled_at)
                FILTER (WHERE j.state IN ('available', 'scheduled', 'retryable')
                        AND j.scheduled_at <= n.now)), 0)::float8 AS oldest_ready_wait,
       coalesce(extract(epoch FROM n.now - min(j.attempted_at)
                FILTER (WHERE j.state = 'running')), 0)::float8 AS running_oldest,
       count(*) FILTER (WHERE j.state = 'running'
                        AND j.attempted_at < n.now - make_interval(secs => $1::float8))
           AS stuck,
       array_agg(j.id) AS active_ids
FROM (SELECT now() AS now) n
CROSS JOIN river_job j
WHERE j.state = ANY ({active})
GROUP BY j.kind, n.now;

-- name: changes
-- Row versions written since the previous cycle's snapshot (xmin at or above its xmin), found
-- in six index ranges: the active set (the fetching index); completed, discarded and
-- cancelled rows whose finalized_at is at or after the window's bound
-- (river_job_state_and_finalized_at_index); ids above the settled watermark and the jobs last
-- seen running (the primary key). $1: the bound (Unix seconds: the previous horizon minus
-- the worker clocks' margin); $2: xmin of the previous snapshot as xid8 (0 at the baseline);
-- $3: the id watermark; $4: the ids the reader last saw running, whose end it reads whatever
-- finalized_at says (the completer may write a finished job's stamp seconds later). A version
-- can come twice; the reader keys by id. s is MATERIALIZED so pg_current_snapshot() runs once.
WITH s AS MATERIALIZED (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax8),
recent AS (
    SELECT j.*, j.xmin::text::bigint AS xid32 FROM river_job j WHERE j.state = ANY ({active})
    UNION ALL
    SELECT j.*, j.xmin::text::bigint FROM river_job j
    WHERE j.state = 'completed' AND j.finalized_at >= to_timestamp($1::float8)
    UNION ALL
    SELECT j.*, j.xmin::text::bigint FROM river_job j
    WHERE j.state = 'discarded' AND j.finalized_at >= to_timestamp($1::float8)
    UNION ALL
    SELECT j.*, j.xmin::text::bigint FROM river_job j
    WHERE j.state = 'cancelled' AND j.finalized_at >= to_timestamp($1::float8)
    UNION ALL
    SELECT j.*, j.xmin::text::bigint FROM river_job j WHERE j.id > $3::bigint
    UNION ALL
    SELECT j.*, j.xmin::text::bigint FROM river_job j WHERE j.id = ANY ($4::bigint[])
),
widened AS (
    SELECT r.*, s.xmax8 - ((s.xmax8 - r.xid32) % 4294967296) AS xid FROM recent r, s
)
SELECT w.id, w.kind AS job_type, w.state::text AS state, w.attempt::int AS attempt,
       coalesce(array_length(w.errors, 1), 0) AS errors,
       -- What each error entry says, bounded: the JobRescuer's own entry is a lost worker
       -- (lease_expired); anything else, a JobTimeout included, is "error".
       ARRAY(SELECT CASE WHEN e.entry->>'error' = 'Stuck job rescued by JobRescuer'
                         THEN 'lease_expired' ELSE 'error' END
             FROM unnest(w.errors) WITH ORDINALITY e(entry, n)
             ORDER BY e.n) AS error_kinds,
       -- Every rescue appends an entry of its own: none is left without a trace.
       0 AS rescued,
       coalesce((w.metadata->>'snoozes')::int, 0) AS snoozed,
       -- JobCancel marks metadata.cancel_attempted_at whether the job runs or not. Only the
       -- cancel of a waiting job ends it at once, appending nothing: its scheduled_at is the
       -- time it was waiting for, past its last attempt's start (a retry's or a snooze's, or
       -- JobRetry's), or it never ran. A running job's cancel is finalised by its worker or
       -- the JobRescuer, which append that attempt's entry and keep scheduled_at (at or before
       -- attempted_at, as JobGetAvailable fetched it): that entry is the cancel's.
       CASE WHEN w.state = 'cancelled'
                 AND (w.attempted_at IS NULL OR w.scheduled_at > w.attempted_at)
            THEN w.metadata->>'cancel_attempted_at' END AS cancel_mark,
       extract(epoch FROM w.finalized_at)::float8 AS ended_at,
       -- The last attempt's figures, from River's stamps (a worker clock's offset enters
       -- them, so a difference below zero reads 0; NULL stays NULL); SQL keeps microseconds.
       CASE WHEN f.duration < 0 THEN 0 ELSE f.duration END::float8 AS duration,
       CASE WHEN f.wait < 0 THEN 0 ELSE f.wait END::float8 AS wait,
       CASE WHEN f.latency < 0 THEN 0 ELSE f.latency END::float8 AS latency
FROM widened w
CROSS JOIN LATERAL (SELECT extract(epoch FROM w.finalized_at - w.attempted_at) AS duration,
                           extract(epoch FROM w.attempted_at - w.scheduled_at) AS wait,
                           extract(epoch FROM w.finalized_at - w.created_at) AS latency) f
WHERE w.xid >= $2::bigint;

-- name: states
-- Whether this database's enum has 'pending' (migration 004 added it), read once: the active
-- states go into the other statements as a literal, which the planner matches against the
-- fetching index (a run-time array would cost a sequential scan).
SELECT EXISTS (SELECT FROM pg_enum
               WHERE enumtypid = 'river_job_state'::regtype AND enumlabel = 'pending')
       AS pending;
