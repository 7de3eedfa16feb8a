-- The two indexes the graphile-worker preset adds. graphile-worker indexes only its available
-- jobs (jobs_main_index), so counting the locked and the dead jobs per task would scan the
-- whole table each cycle. Both are partial: the locked set is what runs now, the dead set
-- what failed for good and was not deleted yet.
--
-- Run it once, outside a transaction (CONCURRENTLY does not block the queue's writes):
--   psql "$DSN" -f graphile_worker_indexes.sql
CREATE INDEX CONCURRENTLY IF NOT EXISTS graphile_worker_exporter_locked_idx
    ON graphile_worker._private_jobs (task_id, locked_at) INCLUDE (id)
    WHERE locked_at IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS graphile_worker_exporter_dead_idx
    ON graphile_worker._private_jobs (task_id, run_at)
    WHERE locked_at IS NULL AND attempts >= max_attempts;
