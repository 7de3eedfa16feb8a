-- The Oban preset's per-cycle queries, one named block each (exporter/profiles/oban.py).
-- One table, oban_jobs, as Oban Python 0.7's install.sql and Elixir Oban 2.x's migrations make
-- it. Its timestamps are `timestamp without time zone` holding UTC, written as
-- timezone('UTC', now()): compared with timezone('UTC', ...) and turned into Unix seconds with
-- AT TIME ZONE 'UTC'. `errors` is jsonb (Python) or jsonb[] (Elixir); to_jsonb() reads both.
-- {active} is the literal array of the active states that this database's enum has (see
-- "states": a literal of a missing label is an error).

-- name: gauges
-- The active set through oban_jobs_state_queue_priority_scheduled_at_id_index (state leads),
-- per worker; never a GROUP BY over the finished history. Ready = runnable now: available, or
-- scheduled / retryable whose time has come (Oban's stager moves them within a second).
-- Stuck is the Lifeline's own test: executing with attempted_at older than rescue_after ($1).
-- The ids let the reader forget jobs deleted while active (delete_job).
SELECT j.worker AS job_type,
       count(*) FILTER (WHERE j.state <> 'executing') AS pending,
       count(*) FILTER (WHERE j.state = 'executing') AS running,
       count(*) FILTER (WHERE j.state IN ('scheduled', 'retryable')
                        AND j.scheduled_at > n.now_utc) AS scheduled,
       coalesce(extract(epoch FROM n.now_utc - min(j.inserted_at)
                FILTER (WHERE j.state <> 'executing')), 0)::float8 AS oldest_pending_age,
       coalesce(extract(epoch FROM n.now_utc - min(j.scheduled_at)
                FILTER (WHERE j.state IN ('available', 'scheduled', 'retryable')
                        AND j.scheduled_at <= n.now_utc)), 0)::float8 AS oldest_ready_wait,
       coalesce(extract(epoch FROM n.now_utc - min(j.attempted_at)
                FILTER (WHERE j.state = 'executing')), 0)::float8 AS running_oldest,
       count(*) FILTER (WHERE j.state = 'executing'
                        AND j.attempted_at < n.now_utc - make_interval(secs => $1::float8))
           AS stuck,
       array_agg(j.id) AS active_ids
FROM (SELECT timezone('UTC', now()) AS now_utc) n
CROSS JOIN oban_jobs j
WHERE j.state = ANY ({active})
GROUP BY j.worker, n.now_utc;

-- name: changes
-- Row versions written since the previous cycle's snapshot (xmin at or above its xmin), found
-- in five index ranges: the active set (the state index); completed_at, discarded_at and
-- cancelled_at at or after the window's bound (Python's partial indexes, or Elixir's
-- (state, discarded_at) / (state, cancelled_at) and the completed_at index of
-- oban_indexes.sql); ids above the settled watermark (the primary key), so that every job
-- inserted since is seen at least once. $1: the bound (Unix seconds; the previous horizon
-- minus a margin); $2: xmin of the previous snapshot as xid8 (0 at the baseline); $3: the
-- id watermark. A version can come twice (id range and a state range); the reader keys by id.
-- The bound is written into each range (not a CTE) so the planner estimates it from the
-- column's statistics; s is MATERIALIZED so pg_current_snapshot() runs once, not per row.
WITH s AS MATERIALIZED (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax8),
recent AS (
    SELECT j.*, j.xmin::text::bigint AS xid32 FROM oban_jobs j WHERE j.state = ANY ({active})
    UNION ALL
    SELECT j.*, j.xmin::text::bigint FROM oban_jobs j
    WHERE j.state = 'completed' AND j.completed_at >= timezone('UTC', to_timestamp($1::float8))
    UNION ALL
    SELECT j.*, j.xmin::text::bigint FROM oban_jobs j
    WHERE j.state = 'discarded' AND j.discarded_at >= timezone('UTC', to_timestamp($1::float8))
    UNION ALL
    SELECT j.*, j.xmin::text::bigint FROM oban_jobs j
    WHERE j.state = 'cancelled' AND j.cancelled_at >= timezone('UTC', to_timestamp($1::float8))
    UNION ALL
    SELECT j.*, j.xmin::text::bigint FROM oban_jobs j WHERE j.id > $3::bigint
),
widened AS (
    SELECT r.*, s.xmax8 - ((s.xmax8 - r.xid32) % 4294967296) AS xid FROM recent r, s
)
SELECT w.id, w.worker AS job_type, w.state::text AS state, w.attempt::int AS attempt,
       jsonb_array_length(to_jsonb(w.errors)) AS errors,
       -- What each error entry says, bounded: Oban's own timeout error is "deadline" (the
       -- traceback's last line in Python, the first in Elixir), anything else "error".
       ARRAY(SELECT CASE WHEN e.value->>'error' ~ 'JobTimeoutError[^\n]*\s*$'
                           OR e.value->>'error' ~ '^\*\* \(Oban\.TimeoutError\)'
                         THEN 'deadline' ELSE 'error' END
             FROM jsonb_array_elements(to_jsonb(w.errors)) WITH ORDINALITY e
             ORDER BY e.ordinality) AS error_kinds,
       coalesce((w.meta->>'rescued')::int, 0) AS rescued,
       coalesce((w.meta->>'snoozed')::int, 0) AS snoozed,
       w.meta->>'cancel_attempted_at' AS cancel_mark,
       extract(epoch FROM CASE w.state::text WHEN 'completed' THEN w.completed_at
                                             WHEN 'discarded' THEN w.discarded_at
                                             WHEN 'cancelled' THEN w.cancelled_at
                          END AT TIME ZONE 'UTC')::float8 AS ended_at,
       -- The last attempt's figures; differences taken in SQL keep microsecond precision.
       extract(epoch FROM w.completed_at - w.attempted_at)::float8 AS duration,
       extract(epoch FROM w.attempted_at - w.scheduled_at)::float8 AS wait,
       extract(epoch FROM w.completed_at - w.inserted_at)::float8 AS latency
FROM widened w
WHERE w.xid >= $2::bigint;

-- name: states
-- Whether this database's enum has 'suspended' (Oban Pro's workflows; older Elixir schemas
-- lack it), read once: the active states go into the other statements as a literal, which the
-- planner matches against the state index (a run-time array would cost a sequential scan).
SELECT EXISTS (SELECT FROM pg_enum
               WHERE enumtypid = 'oban_job_state'::regtype AND enumlabel = 'suspended')
       AS suspended;
