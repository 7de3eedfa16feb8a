-- The pg-boss 12 preset's per-cycle queries, one named block each (exporter/profiles/pgboss.py).
-- Every statement is a SELECT on the partitioned parent pgboss.job (pg-boss LIST-partitions it
-- by queue name: job_common, plus one table per queue created with partition: true), one
-- queue at a time through pgboss.queue, so each lookup is a range scan of that queue's index.

-- name: horizon
-- Autocommit, before the cycle's snapshot: sessions first, then prepared transactions (the
-- nesting fixes the order; see horizon.py).
SELECT extract(epoch FROM a.lower_bound)::float8 AS lower_bound, a.hidden, p.prepared
{sessions};

-- name: gauges
-- The active set of each queue through job_i14 (partial on created/retry/active/failed; the
-- state is its second column, so the failed history is skipped). Every queue gets a row, so a
-- drained queue reads 0. The ids let the reader forget jobs that were deleted while active.
-- Stuck is pg-boss's own supervisor test: started_on + expire_seconds, or a lost heartbeat.
SELECT q.name AS job_type, g.*
FROM pgboss.queue q
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE j.state < 'active') AS pending,
           count(*) FILTER (WHERE j.state = 'active') AS running,
           count(*) FILTER (WHERE j.state < 'active' AND j.start_after > now()) AS scheduled,
           coalesce(extract(epoch FROM now() - min(j.created_on) FILTER (WHERE j.state < 'active')),
                    0)::float8 AS oldest_pending_age,
           coalesce(extract(epoch FROM now() - min(j.start_after)
                    FILTER (WHERE j.state < 'active' AND NOT j.blocked
                            AND j.start_after <= now())), 0)::float8 AS oldest_ready_wait,
           coalesce(extract(epoch FROM now() - min(j.started_on) FILTER (WHERE j.state = 'active')),
                    0)::float8 AS running_oldest,
           count(*) FILTER (WHERE j.state = 'active'
                            AND (j.started_on + j.expire_seconds * interval '1s' < now()
                                 OR (j.heartbeat_seconds IS NOT NULL
                                     AND j.heartbeat_on + j.heartbeat_seconds * interval '1s'
                                         < now()))) AS stuck,
           coalesce(array_agg(j.id::text), '{}') AS active_ids
    FROM pgboss.job j
    WHERE j.name = q.name AND j.state IN ('created', 'retry', 'active')
) g;

-- name: changes
-- Row versions written since the previous cycle's snapshot, found in three index ranges per
-- queue: created_on (job_i15) for new jobs, completed_on (job_i16) for every terminal state,
-- and the active set (job_i14) for claims and retries (a retry is a DELETE + INSERT of the same
-- id). $1: lower bound of the timestamps (Unix seconds; the previous horizon minus a margin);
-- $2: xmin of the previous snapshot as xid8 (0 at the baseline). The 32-bit xmin is widened
-- against this snapshot's xmax: a visible version's xid lies within 2^32 below it.
WITH s AS (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax8),
recent AS (
    SELECT j.*
    FROM pgboss.queue q
    CROSS JOIN LATERAL (
        SELECT j.id, j.name, j.state, j.retry_count, j.created_on, j.completed_on,
               j.started_on, j.start_after, j.xmin::text::bigint AS xid32
        FROM pgboss.job j
        WHERE j.name = q.name AND j.created_on >= to_timestamp($1::float8)
        UNION
        SELECT j.id, j.name, j.state, j.retry_count, j.created_on, j.completed_on,
               j.started_on, j.start_after, j.xmin::text::bigint
        FROM pgboss.job j
        WHERE j.name = q.name AND j.completed_on >= to_timestamp($1::float8)
        UNION
        SELECT j.id, j.name, j.state, j.retry_count, j.created_on, j.completed_on,
               j.started_on, j.start_after, j.xmin::text::bigint
        FROM pgboss.job j
        WHERE j.name = q.name AND j.state IN ('created', 'retry', 'active')
    ) j
),
widened AS (
    SELECT r.*, s.xmax8 - ((s.xmax8 - r.xid32) % 4294967296) AS xid FROM recent r, s
)
SELECT w.id::text AS id, w.name AS job_type, w.state::text AS state, w.retry_count, w.xid,
       extract(epoch FROM w.created_on)::float8 AS created_on,
       extract(epoch FROM w.completed_on)::float8 AS completed_on,
       -- Differences taken in SQL keep microsecond precision (epoch floats lose some).
       extract(epoch FROM w.completed_on - w.started_on)::float8 AS duration,
       extract(epoch FROM w.started_on - w.start_after)::float8 AS wait,
       extract(epoch FROM w.completed_on - w.created_on)::float8 AS latency
FROM widened w
WHERE w.xid >= $2::bigint;
