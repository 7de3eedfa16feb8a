-- The exporter's own role for the local compose stack: it may read the queue table and
-- nothing else, and every transaction it opens is read-only. Do the same in production
-- (with a real password), so a sidecar can never change the queue it watches.
CREATE ROLE jobqueue_exporter LOGIN PASSWORD 'exporter';
ALTER ROLE jobqueue_exporter SET default_transaction_read_only = on;
GRANT CONNECT ON DATABASE jobqueue TO jobqueue_exporter;
GRANT USAGE ON SCHEMA public TO jobqueue_exporter;
GRANT SELECT ON TABLE job TO jobqueue_exporter;
-- Read-only statistics: when other sessions' transactions began (the late-commit horizon).
GRANT pg_read_all_stats TO jobqueue_exporter;
