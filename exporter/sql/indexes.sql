-- Indexes that keep the exporter's per-cycle queries cheap at any table size.
--
-- Create them once, outside a transaction (CONCURRENTLY does not block the queue's writes):
--   psql "$DSN" -f indexes.sql
-- They are written for the reference table "job" (schema.sql). For a table described by a
-- table: mapping, print them with its names instead (same statements, same index names):
--   jobqueue-exporter indexes --config.file exporter.yml | psql "$DSN"
-- The exporter checks at start-up that they exist; when one is missing it logs a warning
-- naming this file and exports jobqueue_exporter_missing_index{index="..."} = 1.

-- Active rows only (PENDING, RUNNING): counts, oldest ages and stuck jobs without touching
-- history. Holds a few hundred entries whatever the table size (about 40 KiB), and the
-- INCLUDE columns let the snapshot query run as an index-only scan.
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_exporter_active_idx
    ON job (status, job_type)
    INCLUDE (created_at, run_after, lease_until, run_started_at)
    WHERE status IN (1, 2);

-- Rows changed since the last cycle: every transition (and heartbeat) sets updated_at, so
-- this is how the exporter turns row changes into exact counters without an event log.
-- Price: on PostgreSQL 15 an index on updated_at makes the queue's heartbeat (renew_lease)
-- a non-HOT update and adds WAL per job; see the README's "What the indexes cost".
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_exporter_updated_at_idx
    ON job (updated_at);

-- Dead letters by job type, counted from a small partial index instead of the heap.
CREATE INDEX CONCURRENTLY IF NOT EXISTS job_exporter_dead_idx
    ON job (job_type)
    WHERE status = 4;
