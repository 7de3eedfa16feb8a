-- The one index the pgqueuer preset adds: pgqueuer has no index that covers held jobs
-- (status 'failed', kept with on_failure="hold"), so counting them per entrypoint would scan
-- the whole live table each cycle. It holds only the held jobs, so it stays tiny.
--
-- Run it once, outside a transaction (CONCURRENTLY does not block the queue's writes):
--   psql "$DSN" -f pgqueuer_indexes.sql
CREATE INDEX CONCURRENTLY IF NOT EXISTS pgqueuer_exporter_held_idx
    ON pgqueuer (entrypoint)
    WHERE status = 'failed';
