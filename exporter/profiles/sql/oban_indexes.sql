-- The one index the Oban preset needs that Elixir Oban's migrations do not create: completed
-- jobs by completed_at, so the per-cycle window on completions is a range scan instead of a
-- walk over every retained completed job. Oban Python's install.sql creates the same index
-- under the same name, so on a Python schema this does nothing. It holds completed jobs only
-- until the Pruner deletes them.
--
-- Run it once, outside a transaction (CONCURRENTLY does not block the queue's writes):
--   psql "$DSN" -f oban_indexes.sql
CREATE INDEX CONCURRENTLY IF NOT EXISTS oban_jobs_completed_at_index
    ON oban_jobs (completed_at)
    WHERE state = 'completed';
