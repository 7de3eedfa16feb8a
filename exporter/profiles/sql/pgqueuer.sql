-- The pgqueuer preset's per-cycle queries, one named block each (exporter/profiles/pgqueuer.py).
-- Every statement is a SELECT; times are Unix seconds from the database's clock.

-- name: gauges
-- The live table holds only queued, picked and held (failed) rows: finished jobs are deleted.
-- One branch per status so each is served by its partial index: pgqueuer_ep_ea_idx (queued),
-- pgqueuer_picked_heartbeat_idx (picked), pgqueuer_exporter_held_idx (failed; the one index
-- this preset adds, pgqueuer_indexes.sql). $1: pgqueuer's heartbeat_timeout in seconds; a
-- picked job whose heartbeat is older is exactly what pgqueuer itself re-picks.
SELECT entrypoint AS job_type, count(*) AS pending,
       count(*) FILTER (WHERE execute_after > now()) AS scheduled,
       extract(epoch FROM now() - min(created))::float8 AS oldest_pending_age,
       coalesce(extract(epoch FROM now() - min(execute_after)
                FILTER (WHERE execute_after <= now())), 0)::float8 AS oldest_ready_wait,
       0 AS running, 0 AS stuck, 0::float8 AS running_oldest, 0 AS held
FROM pgqueuer WHERE status = 'queued' GROUP BY entrypoint
UNION ALL
SELECT entrypoint, 0, 0, 0, 0, count(*),
       count(*) FILTER (WHERE heartbeat < now() - make_interval(secs => $1::float8)),
       extract(epoch FROM now() - min(updated))::float8, 0
FROM pgqueuer WHERE status = 'picked' GROUP BY entrypoint
UNION ALL
SELECT entrypoint, 0, 0, 0, 0, 0, 0, 0, count(*)
FROM pgqueuer WHERE status = 'failed' GROUP BY entrypoint;

-- name: events
-- The log cursor: a range scan of pgqueuer_log_pkey above the settled watermark. Some events
-- need the job's earlier log rows (a handful, by pgqueuer_log_job_id_status): a success for
-- duration and latency, a pick to tell a stale-heartbeat re-pick, a plain "queued" to tell a
-- manual requeue from a new job. $1: the watermark (exclusive).
SELECT l.id, l.job_id, l.status::text AS status, l.entrypoint AS job_type,
       extract(epoch FROM l.created)::float8 AS at,
       l.traceback IS NOT NULL AS has_traceback,
       l.traceback ->> 'exception_type' AS reason,
       h.statuses, h.ats
FROM pgqueuer_log l
LEFT JOIN LATERAL (
    SELECT array_agg(p.status::text ORDER BY p.id) AS statuses,
           array_agg(extract(epoch FROM p.created)::float8 ORDER BY p.id) AS ats
    FROM pgqueuer_log p
    WHERE (l.status IN ('successful', 'picked')
           OR (l.status = 'queued' AND l.traceback IS NULL))
      AND p.job_id = l.job_id AND p.id < l.id
) h ON true
WHERE l.id > $1::bigint
ORDER BY l.id;
