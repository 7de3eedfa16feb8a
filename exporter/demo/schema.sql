-- The job queue's table, as the queue itself creates it (see docs: the exporter only reads it).
-- Used by the demo and the tests; a real deployment already has this table.
--
-- Status codes: 1 PENDING, 2 RUNNING, 3 DONE, 4 DEAD.
-- gen_random_uuid() is built in since PostgreSQL 13, so no pgcrypto is needed here.

CREATE TABLE IF NOT EXISTS job (
    job_id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    job_type        integer     NOT NULL,
    status          smallint    NOT NULL DEFAULT 1,
    priority        integer     NOT NULL DEFAULT 100,
    payload         jsonb       NOT NULL DEFAULT '{}'::jsonb,
    dedupe_key      text,
    attempts        integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL DEFAULT 3,
    worker_id       text,
    lease_until     timestamptz,
    run_after       timestamptz NOT NULL DEFAULT now(),
    run_started_at  timestamptz,
    result          jsonb,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

-- Claim order: workers take the oldest pending job of the best priority.
CREATE INDEX IF NOT EXISTS job_claim_idx
    ON job (priority, created_at)
    WHERE status = 1;

-- At most one active (pending or running) job per dedupe_key; enqueue relies on it.
CREATE UNIQUE INDEX IF NOT EXISTS job_dedupe_active_uq
    ON job (dedupe_key)
    WHERE status IN (1, 2) AND dedupe_key IS NOT NULL;
