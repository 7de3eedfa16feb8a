-- The sessions part of every horizon statement, written once: each profile's horizon is
-- "SELECT <its columns> {sessions}" (the "horizon" block of exporter/sql/queries.sql, and
-- exporter/profiles/sql/*.sql), the fragment put in by exporter/counting/sqltext.py. The proof
-- that the bound is safe is in exporter/counting/horizon.py and docs/exactness.md. The nesting
-- fixes the order of the reads, which that proof needs: sessions first, then prepared
-- transactions (a prepared transaction is gone from pg_stat_activity).
--
-- Columns: now; lower_bound, least(now(), xact_start of every other open transaction that may
-- still write); writers_bound, the same over those that have written (hold an xid) or are young
-- (may not have written yet): the default profile re-reads past its held bound from there
-- (exporter/counting/change_cursor.py); a transaction older than 5 s that has not written yet is
-- taken for a reader (pg_dump), and if it writes after all the cursor's sweep finds its rows.
-- hidden, the sessions this role may not see (pg_read_all_stats shows them); prepared.
--
-- Which sessions are left out, and why no more: a session may be left out only if no row it
-- has yet to commit can carry a stamp older than now(). Autovacuum workers (backend_type
-- 'autovacuum worker', anti-wraparound ones too) run no client SQL: they prune and freeze row
-- versions, never make one, so a long autovacuum of any table must not hold back counting.
-- A VACUUM, ANALYZE or CREATE INDEX CONCURRENTLY sent by a client stays in, though the command
-- itself writes no queue row: ANALYZE may run inside any transaction, and a client may
-- pipeline "VACUUM ...; INSERT ..." (extended protocol, no Sync between), when the INSERT runs
-- in a transaction stamped with the VACUUM's start (PostgreSQL 15: its now() was the VACUUM's
-- start, 6 s before it committed). pg_stat_activity shows nothing that tells that session from
-- a plain VACUUM, and leaving it out would let the bound pass a row that commits later. Such a
-- session holds the bound as any long transaction (pg_dump) does.

-- name: sessions
FROM (SELECT now() AS now,
             least(now(), min(xact_start) FILTER (
                 WHERE pid <> pg_backend_pid()
                   AND backend_type IS DISTINCT FROM 'autovacuum worker')) AS lower_bound,
             least(now(), min(xact_start) FILTER (
                 WHERE pid <> pg_backend_pid()
                   AND (backend_xid IS NOT NULL OR xact_start > now() - interval '5 seconds')
                   AND backend_type IS DISTINCT FROM 'autovacuum worker')) AS writers_bound,
             count(*) FILTER (WHERE backend_type IS NULL) AS hidden  -- rows this role may not read
      FROM pg_stat_activity
      WHERE datname = current_database()
      OFFSET 0) a
CROSS JOIN LATERAL (SELECT count(*) AS prepared FROM pg_prepared_xacts
                    WHERE database = current_database() AND a.hidden >= 0 OFFSET 0) p
