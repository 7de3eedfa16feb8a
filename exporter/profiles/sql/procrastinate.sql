-- The procrastinate preset's per-cycle queries, one named block each (exporter/profiles/procrastinate.py).
-- Every statement is a SELECT; times are Unix seconds from the database's clock.

-- name: gauges
-- Active jobs only, through procrastinate_jobs_id_lock_idx_v1 (partial on todo/doing); each
-- one's few events come through procrastinate_events_job_id_fkey_v1. Cost follows the backlog,
-- never the history. $1: seconds without a worker heartbeat before a running job is stuck
-- (procrastinate's own stalled-job test: no worker, or a worker whose beat is older).
SELECT j.task_name AS job_type,
       count(*) FILTER (WHERE j.status = 'todo') AS pending,
       count(*) FILTER (WHERE j.status = 'doing') AS running,
       count(*) FILTER (WHERE j.status = 'todo' AND j.scheduled_at > now()) AS scheduled,
       coalesce(extract(epoch FROM now() - min(ev.created) FILTER (WHERE j.status = 'todo')),
                0)::float8 AS oldest_pending_age,
       coalesce(extract(epoch FROM now() - min(greatest(ev.enqueued, j.scheduled_at))
                FILTER (WHERE j.status = 'todo'
                        AND (j.scheduled_at IS NULL OR j.scheduled_at <= now()))), 0)::float8
           AS oldest_ready_wait,
       coalesce(extract(epoch FROM now() - min(ev.started) FILTER (WHERE j.status = 'doing')),
                0)::float8 AS running_oldest,
       count(*) FILTER (WHERE j.status = 'doing'
                        AND (j.worker_id IS NULL OR w.last_heartbeat
                             < now() - make_interval(secs => $1::float8))) AS stuck
FROM procrastinate_jobs j
LEFT JOIN procrastinate_workers w ON w.id = j.worker_id
CROSS JOIN LATERAL (
    SELECT min(e.at) FILTER (WHERE e.type = 'deferred') AS created,
           max(e.at) FILTER (WHERE e.type IN ('deferred', 'deferred_for_retry', 'retried'))
               AS enqueued,
           max(e.at) FILTER (WHERE e.type = 'started') AS started
    FROM procrastinate_events e
    WHERE e.job_id = j.id
) ev
WHERE j.status IN ('todo', 'doing')
GROUP BY j.task_name;

-- name: events
-- The event cursor: a range scan of procrastinate_events_pkey above the settled watermark.
-- For a success, the job's earlier events (a handful, by job_id) give exact wait, duration
-- and latency. $1: the watermark (exclusive).
SELECT e.id, e.job_id, e.type::text AS type, extract(epoch FROM e.at)::float8 AS at,
       j.task_name AS job_type, h.types, h.ats
FROM procrastinate_events e
JOIN procrastinate_jobs j ON j.id = e.job_id
LEFT JOIN LATERAL (
    SELECT array_agg(p.type::text ORDER BY p.id) AS types,
           array_agg(extract(epoch FROM p.at)::float8 ORDER BY p.id) AS ats
    FROM procrastinate_events p
    WHERE e.type = 'succeeded' AND p.job_id = e.job_id AND p.id < e.id
) h ON true
WHERE e.id > $1::bigint
ORDER BY e.id;
