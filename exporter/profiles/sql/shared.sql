-- What every preset's cycle shares (exporter/profiles/base.py:load_queries puts it in).
-- {sessions} is a fragment: the FROM clause of a horizon statement. The nesting fixes the order
-- of the reads, which the proof in horizon.py needs: sessions first, then prepared transactions.

-- name: sessions
FROM (SELECT least(now(), min(xact_start) FILTER (WHERE pid <> pg_backend_pid())) AS lower_bound,
             count(*) FILTER (WHERE backend_type IS NULL) AS hidden  -- rows this role may not read
      FROM pg_stat_activity
      WHERE datname = current_database()
      OFFSET 0) a
CROSS JOIN LATERAL (SELECT count(*) AS prepared FROM pg_prepared_xacts
                    WHERE database = current_database() AND a.hidden >= 0 OFFSET 0) p

-- name: snapshot
-- First statement of the REPEATABLE READ transaction: it fixes the snapshot the rest reads.
SELECT extract(epoch FROM now())::float8 AS now, pg_current_snapshot()::text AS snapshot;

-- name: eventlog_horizon
-- The horizon of an event-log preset, its log table put in by load_queries; autocommit, before
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
