-- What every preset's cycle shares (exporter/profiles/base.py:preset_queries puts it in).
-- {sessions} is the FROM clause of every horizon statement, the default profile's included:
-- exporter/sql/horizon.sql, the one place that says which sessions bound the horizon.

-- name: snapshot
-- First statement of the REPEATABLE READ transaction: it fixes the snapshot the rest reads.
SELECT extract(epoch FROM now())::float8 AS now, pg_current_snapshot()::text AS snapshot;

-- name: eventlog_horizon
-- The horizon of an event-log preset, its log table put in by preset_queries; autocommit, before
-- the cycle's snapshot: sessions, then prepared transactions, then the largest visible log id (one step
-- down the log's primary key), then the clock.
SELECT extract(epoch FROM a.lower_bound)::float8 AS lower_bound, a.hidden, p.prepared, v.last_id,
       extract(epoch FROM clock_timestamp())::float8 AS read_at,
       -- Ids only grow across sessions when the sequence caches one value at a time.
       (SELECT seqcache FROM pg_sequence
        WHERE seqrelid = pg_get_serial_sequence('{log}', 'id')::regclass) AS id_cache
{sessions}
CROSS JOIN LATERAL (SELECT max(id) AS last_id FROM {log}
                    WHERE p.prepared >= 0 OFFSET 0) v;
