-- The exporter's per-cycle queries, one named block each (rendered by exporter/counting/sqltext.py).
-- They are written once for any table with the reference's meaning (exporter/sql/schema.sql),
-- rendered from the queue's table mapping: {table} and each {column} become quoted identifiers,
-- each {time_column_tz} that column as an instant (a timestamp without time zone read in the
-- writers' zone the mapping declares), {since} and {until} the cursor's bounds $1 and $3 in the
-- updated_at column's own type (so its index serves them), {result_value} the result column or
-- NULL for a table without one, {pending} {running} {done} {dead} the status column's literals,
-- {status_code} the status as the counting reads it (1-4 for the four, 5 cancelled, 6 ignored,
-- 0 any other value: exporter/counting/status_rule.py), {job_type_out} the job type
-- (text ones cut short in SQL, so a megabyte of text never crosses the wire), {job_id_type}
-- the job_id column's type from the catalog; {table_name} and {status_name} the table's and the
-- status column's names as string literals (for the catalog), {stats_value} a statistics value as
-- the column compares it, {status_chars} how much of an unmapped status value is sent;
-- {sessions} the horizon's sessions fragment (exporter/sql/horizon.sql).
-- Every output column keeps the reference's name.
-- Every time is the database's (now() = the start of the collection's read-only transaction),
-- returned as Unix seconds.

-- name: snapshot
-- Active rows only, served by job_exporter_active_idx: cost does not grow with history.
-- One row per job type and active status (kind: the reference's number, 1 pending, 2 running),
-- each status a range of the index with only its own aggregates, plus always one row that
-- carries the snapshot's now() (the cycle's clock: it used to cost a statement of its own);
-- its kind is NULL when no job is active. The cut-offs are computed once, not per row.
-- $1: stuck threshold in seconds.
SELECT extract(epoch FROM c.now)::float8 AS now, s.*
FROM (SELECT now() AS now, now() - make_interval(secs => $1) AS overrun_before) c
LEFT JOIN LATERAL (
    SELECT 1 AS kind, {job_type_out} AS job_type, count(*) AS jobs,
           count(*) FILTER (WHERE {run_after_tz} > c.now) AS scheduled,
           coalesce(extract(epoch FROM c.now - min({created_at_tz})), 0)::float8
               AS oldest_pending_age,
           coalesce(extract(epoch FROM c.now - min({run_after_tz})
                    FILTER (WHERE {run_after_tz} <= c.now)), 0)::float8 AS oldest_ready_wait,
           0::bigint AS stuck_lease_expired, 0::bigint AS stuck_overrun,
           0::float8 AS lease_expired_oldest, 0::float8 AS running_oldest
    FROM {table}
    WHERE {status} = {pending}
    GROUP BY 2
    UNION ALL
    SELECT 2, {job_type_out}, count(*), 0, 0, 0,
           count(*) FILTER (WHERE {lease_until_tz} < c.now),
           count(*) FILTER (WHERE ({lease_until} IS NULL OR {lease_until_tz} >= c.now)
                            AND {run_started_at_tz} < c.overrun_before),
           coalesce(extract(epoch FROM c.now - min({lease_until_tz})
                    FILTER (WHERE {lease_until_tz} < c.now)), 0)::float8,
           coalesce(extract(epoch FROM c.now - min({run_started_at_tz})), 0)::float8
    FROM {table}
    WHERE {status} = {running}
    GROUP BY 2
) s ON true;

-- name: dead
-- Served by the partial job_exporter_dead_idx (index-only).
SELECT {job_type_out} AS job_type, count(*) AS jobs FROM {table} WHERE {status} = {dead} GROUP BY 1;

-- name: status_values
-- The values the planner's statistics saw in the status column (its most common values and
-- histogram bounds, as of the last ANALYZE; no row until the table was first analyzed), run with
-- the dead-letter recount: the counting mode compares them with the four mapped values
-- (exporter/counting/statuses.py). Catalog rows only, never the table. A char(n) column's values
-- lose their padding, as its comparisons ignore it.
SELECT DISTINCT {stats_value} AS value
FROM pg_stats s
CROSS JOIN LATERAL unnest(coalesce(s.most_common_vals::text::text[], '{}')
                          || coalesce(s.histogram_bounds::text::text[], '{}')) AS v(value)
WHERE (s.schemaname, s.tablename) IN (
        SELECT n.nspname, c.relname FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = to_regclass({table_name}))
  AND s.attname = {status_name}
LIMIT 200;

-- name: done
-- Only with collect.done_count: this reads every DONE row, so its cost grows with history.
SELECT {job_type_out} AS job_type, count(*) AS jobs FROM {table} WHERE {status} = {done} GROUP BY 1;

-- name: active
-- The baseline: every job that can still change, read once at the first collection.
SELECT {job_id}::text AS job_id, {job_type_out} AS job_type, {status_code} AS status,
       {attempts} AS attempts, {max_attempts} AS max_attempts, {last_error} AS last_error,
       NULL::text AS result,
       extract(epoch FROM {run_after_tz})::float8 AS run_after,
       extract(epoch FROM {run_started_at_tz})::float8 AS run_started_at,
       extract(epoch FROM {created_at_tz})::float8 AS created_at,
       extract(epoch FROM {updated_at_tz})::float8 AS updated_at,
       NULL::float8 AS wait_seconds,
       NULL::float8 AS latency_seconds
FROM {table}
WHERE {status} IN ({pending}, {running});

-- name: dead_ids
-- The baseline: the ids of every dead job, read once, so that a requeue is told from a new job
-- (exporter/counting/deadids.py). Through job_exporter_dead_idx plus one heap visit per dead row
-- (the index does not hold the id): O(dead rows), once.
SELECT {job_id}::text AS job_id FROM {table} WHERE {status} = {dead};

-- name: existing
-- Which of the given jobs still exist (primary key lookups); the rest were purged.
-- $1: job ids as text, cast to the column's own type so that its index serves the lookup.
SELECT {job_id}::text AS job_id FROM {table} WHERE {job_id} = ANY($1::text[]::{job_id_type}[]);

-- name: recheck
-- Tracked jobs looked up by id when the table holds fewer pending or running rows than the
-- tracker, after every visible change was read (exporter/counting/tracker.py, suspects): a
-- missing one was deleted, one changed below the cursor changed without a stamp. Primary-key
-- lookups; the times computed as changes_after computes them, so an unchanged row reads equal.
-- $1: job ids as text, cast to the column's own type.
SELECT {job_id}::text AS job_id, {job_type_out} AS job_type, {status_code} AS status,
       {attempts} AS attempts, {max_attempts} AS max_attempts, {last_error} AS last_error,
       date_part('epoch', {run_after_tz}) AS run_after,
       date_part('epoch', {run_started_at_tz}) AS run_started_at,
       date_part('epoch', {created_at_tz}) AS created_at,
       date_part('epoch', {updated_at_tz}) AS updated_at,
       NULL::float8 AS wait_seconds,
       NULL::float8 AS latency_seconds
FROM {table} WHERE {job_id} = ANY($1::text[]::{job_id_type}[]);

-- name: horizon
-- Autocommit, before the cycle's snapshot (exporter/counting/horizon.py has the argument): the
-- sessions' bounds, hidden sessions and prepared transactions, read through the one fragment
-- every profile shares (exporter/sql/horizon.sql says which sessions it leaves out and why).
SELECT a.now, a.lower_bound, a.writers_bound, a.hidden, p.prepared
{sessions};

-- name: changes_after
-- The next chunk of changed rows past the cursor, in keyset order, via
-- job_exporter_updated_at_idx (exporter/counting/horizon.py says where the cursor may stop). The inner query picks the chunk (ordered by the table's
-- columns: epoch floats and job_id as text would sort differently); the outer one computes
-- the output for those rows only, not for every row the sort looked at.
-- $1, $2: the cursor (updated_at, job_id as text, cast to the column's type: the keyset order
-- is the column's own, uuid, integer or text; the nil uuid, the cursor's start, stands for the
-- type's smallest value); $3: upper bound (exclusive); $4: chunk size;
-- $5-$8: paths of duration and costs in result, pulled out here so that Python never decodes
-- the whole document: each path's value as its JSON text (a string with its quotes), NULL when
-- missing or when the path is NULL (a figure the queue does not store); Python keeps the
-- numbers (exporter/counting/results.py). Each path is extracted once:
-- testing its jsonb_typeof in SQL as well extracted it twice (the outer query is flattened),
-- the largest part of this statement's time. date_part() gives float8 directly; extract()
-- computes in numeric, several times slower per row. run_seconds is the run time when result
-- holds none: a DONE row's updated_at is the now() of its completion.
SELECT j.job_id, j.job_type, j.status, j.attempts, j.max_attempts, j.last_error,
       j.updated_at AS updated_key,
       -- The column's own value when it is unmapped (exporter/counting/statuses.py).
       CASE WHEN j.status = 0 THEN left(j.status_value::text, {status_chars}) END AS status_text,
       CASE WHEN j.status = 3 THEN jsonb_typeof(j.result) END AS result_kind,
       CASE WHEN j.status = 3 THEN (j.result #> $5::text[])::text END AS duration_ms,
       CASE WHEN j.status = 3 THEN (j.result #> $6::text[])::text END AS ai_usd,
       CASE WHEN j.status = 3 THEN (j.result #> $7::text[])::text END AS proxy_usd,
       CASE WHEN j.status = 3 THEN (j.result #> $8::text[])::text END AS total_usd,
       date_part('epoch', j.run_after) AS run_after,
       date_part('epoch', j.run_started_at) AS run_started_at,
       date_part('epoch', j.created_at) AS created_at,
       date_part('epoch', j.updated_at) AS updated_at,
       date_part('epoch', j.run_started_at - j.run_after) AS wait_seconds,
       date_part('epoch', j.updated_at - j.created_at) AS latency_seconds,
       CASE WHEN j.status = 3 THEN date_part('epoch', j.updated_at - j.run_started_at) END
           AS run_seconds
FROM (SELECT {job_id} AS job_key, {job_id}::text AS job_id, {job_type_out} AS job_type,
             {status_code} AS status, {status} AS status_value, {attempts} AS attempts,
             {max_attempts} AS max_attempts, {last_error} AS last_error, {result_value} AS result,
             {run_after_tz} AS run_after, {run_started_at_tz} AS run_started_at,
             {created_at_tz} AS created_at, {updated_at_tz} AS updated_at
      FROM {table} AS t
      WHERE t.{updated_at} >= {since}
        AND (t.{updated_at}, t.{job_id})
            > ({since}, coalesce(nullif($2::text, {cursor_nil})::{job_id_type}, {cursor_start}::{job_id_type}))
        AND t.{updated_at} < {until}
      -- Qualified: an output column of the same name would otherwise be sorted on.
      ORDER BY t.{updated_at}, t.{job_id}
      LIMIT $4) AS j
ORDER BY j.updated_at, j.job_key;
