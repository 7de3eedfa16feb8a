-- The two indexes the django-tasks preset adds to django-tasks-db's result table. The library
-- indexes only READY rows (tasks_db_new_ordering_idx), queue_name and backend_name, so without
-- these a cycle would scan every result ever kept:
-- * running tasks: the gauges read them each cycle. It holds only the RUNNING rows, so it
--   stays as small as the number of busy workers;
-- * enqueued_at: the window that finds every task enqueued since the previous cycle, those
--   that finished in between included. A timestamp that only grows at the right edge, one
--   entry per row version, as the table's other full indexes already take.
--
-- Run it once, outside a transaction (CONCURRENTLY does not block the queue's writes):
--   psql "$DSN" -f django_tasks_indexes.sql
CREATE INDEX CONCURRENTLY IF NOT EXISTS django_tasks_exporter_running_idx
    ON django_tasks_database_dbtaskresult (started_at)
    WHERE status = 'RUNNING';
CREATE INDEX CONCURRENTLY IF NOT EXISTS django_tasks_exporter_enqueued_idx
    ON django_tasks_database_dbtaskresult (enqueued_at);
