-- The reference job table: the contract a queue table must meet for the default profile.
--
-- The exporter only reads it. The demo and the tests create it from this file; a queue of
-- your own already has its table. A table with other names (tasks, state, kind, tries, ...)
-- fits when each column below has a counterpart with the same meaning: name them in the
-- queue's table: mapping (README, "Does my queue fit?"; docs/configuration.md, "table").
-- The exporter's own indexes are in indexes.sql (CREATE INDEX CONCURRENTLY, run apart).
--
-- The state machine the exporter counts, each transition one conditional UPDATE that sets
-- updated_at = now() (exporter/demo/queue.py runs them, after the queue's own SQL):
--   enqueue   INSERT, status pending
--   claim     pending -> running   attempts + 1, worker_id, lease_until, run_started_at = now()
--   renew     running -> running   lease_until pushed forward (the heartbeat)
--   complete  running -> done      result stored
--   fail      running -> pending   attempts < max_attempts: run_after = now() + backoff,
--                                  last_error set
--             running -> dead      attempts >= max_attempts: last_error set
--   reap      running -> pending/dead  lease_until < now(): last_error gets the lease marker
--                                  (' [lease-expired reclaim]') appended, run_after = now()
--   requeue   dead -> pending      attempts = 0, last_error and run_started_at NULL,
--                                  run_after = now()
-- What the exporter needs of it: every transition stamps updated_at = now() (the start of
-- its transaction), and a row is changed only by these transitions (or deleted).
-- gen_random_uuid() is built in since PostgreSQL 13.

CREATE TABLE IF NOT EXISTS job (
    -- Unique, never reused: the exporter remembers jobs by it. uuid, bigint or text.
    job_id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    -- The job_type label: an integer (named with collect.job_types) or text (the label
    -- itself, cut to 128 characters); at most collect.max_job_types labels, the rest "other".
    job_type        integer     NOT NULL,
    -- 1 pending, 2 running, 3 done, 4 dead here; any four integers or texts (or enum labels)
    -- with a table: mapping's status_values. done is final; dead only leaves by a requeue.
    status          smallint    NOT NULL DEFAULT 1,
    -- Claim order. Not read by the exporter.
    priority        integer     NOT NULL DEFAULT 100,
    -- The job's input. Not read by the exporter.
    payload         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- At most one active job per key (the queue's own index below). Not read by the exporter.
    dedupe_key      text,
    -- Attempts started: a claim adds one, a requeue resets it to 0. How many attempts ended
    -- between two collections is read from it, so it must never go down otherwise.
    attempts        integer     NOT NULL DEFAULT 0,
    -- A failure with attempts >= max_attempts is a death.
    max_attempts    integer     NOT NULL DEFAULT 3,
    -- The worker holding the job. Not read by the exporter.
    worker_id       text,
    -- End of the running attempt's lease: a running job past it is stuck (lease_expired).
    lease_until     timestamptz,
    -- Earliest claim time (backoff, scheduling): wait = run_started_at - run_after. Only a
    -- retried failure, a reap and a requeue move it: a move no failure explains is a requeue.
    run_after       timestamptz NOT NULL DEFAULT now(),
    -- Start of the latest attempt: a running job older than collect.stuck_threshold is stuck.
    run_started_at  timestamptz,
    -- A done job's result; duration and costs are read at collect.duration_path and
    -- collect.cost_*_path (malformed values are counted, never guessed; a missing key is
    -- absent, and the run time then comes from updated_at - run_started_at).
    result          jsonb,
    -- The latest failure: collect.deadline_error_prefix marks a deadline, the reaper's
    -- collect.lease_expired_marker suffix a lease expiry, anything else is an error.
    last_error      text,
    -- Insert time: latency = updated_at - created_at of a done job.
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- now() of every transition and heartbeat: the change cursor reads by it.
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- The queue's own indexes: claim order, and at most one active job per dedupe_key.
CREATE INDEX IF NOT EXISTS job_claim_idx
    ON job (priority, created_at)
    WHERE status = 1;
CREATE UNIQUE INDEX IF NOT EXISTS job_dedupe_active_uq
    ON job (dedupe_key)
    WHERE status IN (1, 2) AND dedupe_key IS NOT NULL;
