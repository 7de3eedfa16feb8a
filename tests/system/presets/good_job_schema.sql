-- GoodJob 4.19.2's schema (its install migration, create_good_jobs.rb.erb, as the Rails 7.1+
-- PostgreSQL adapter creates it), for the preset's harness; from the research notes
-- (../shared/research/queues-ddl/good_job.sql), unchanged below this header.

-- GoodJob 4.19.2 (bensheldon/good_job, tag v4.19.2 @ 81db22b, 2026-07-19) - current schema as
-- PostgreSQL DDL, translated from the install migration
-- lib/generators/good_job/templates/install/migrations/create_good_jobs.rb.erb
-- (the monolithic migration new installs get; the 14 files under templates/update/migrations/
-- bring older installs to the same end state; 06 removes index_good_jobs_jobs_on_finished_at,
-- which the install migration no longer creates).
--
-- Translation rules (Rails 7.1+ PostgreSQL adapter; derived, column types match public
-- structure.sql dumps of GoodJob 4.x installs):
--   id: :uuid                    -> id uuid DEFAULT gen_random_uuid() PRIMARY KEY (PG >= 13 built-in;
--                                   the template's commented enable_extension 'pgcrypto' is for PG <= 12)
--   t.timestamps                 -> created_at, updated_at timestamp(6) without time zone NOT NULL
--                                   (no DB default; Rails writes them)
--   t.datetime                   -> timestamp(6) without time zone (UTC values). Apps that set
--                                   ActiveRecord datetime_type = :timestamptz get timestamptz instead.
--   t.integer limit: 2           -> smallint;  t.text array: true -> text[];  t.interval -> interval
--   add_index order: {col: "ASC NULLS LAST"} -> (col NULLS LAST); unnamed indexes get
--   index_<table>_on_<cols>.
-- GoodJob enqueues with id = active_job_id (Job.enqueue_args sets id: active_job.job_id), so
-- good_jobs.id is the ActiveJob UUID, not the column default.
--
-- Enum-like smallint columns (app/models/concerns/good_job/error_events.rb, job.rb lock_type):
--   error_event: 0 interrupted, 1 unhandled, 2 handled, 3 retried, 4 retry_stopped, 5 discarded
--   lock_type:   0 advisory, 1 skiplocked, 2 hybrid   (see note at the end)
-- is_discrete and retried_good_job_id are legacy columns the model ignores (job.rb ignored_columns);
-- GoodJob 4 never writes them.
-- There are no foreign keys: good_job_executions.active_job_id -> good_jobs.id and
-- good_jobs.locked_by_id / good_job_executions.process_id -> good_job_processes.id are
-- application-level references only.

CREATE TABLE good_jobs (
    id uuid DEFAULT gen_random_uuid() NOT NULL PRIMARY KEY,
    queue_name text,
    priority integer,
    serialized_params jsonb,
    scheduled_at timestamp(6) without time zone,
    performed_at timestamp(6) without time zone,
    finished_at timestamp(6) without time zone,
    error text,
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL,
    active_job_id uuid,
    concurrency_key text,
    cron_key text,
    retried_good_job_id uuid,
    cron_at timestamp(6) without time zone,
    batch_id uuid,
    batch_callback_id uuid,
    is_discrete boolean,
    executions_count integer,
    job_class text,
    error_event smallint,
    labels text[],
    locked_by_id uuid,
    locked_at timestamp(6) without time zone,
    lock_type smallint
);

CREATE TABLE good_job_batches (
    id uuid DEFAULT gen_random_uuid() NOT NULL PRIMARY KEY,
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL,
    description text,
    serialized_properties jsonb,
    on_finish text,
    on_success text,
    on_discard text,
    callback_queue_name text,
    callback_priority integer,
    enqueued_at timestamp(6) without time zone,
    discarded_at timestamp(6) without time zone,
    finished_at timestamp(6) without time zone,
    jobs_finished_at timestamp(6) without time zone
);

CREATE TABLE good_job_executions (
    id uuid DEFAULT gen_random_uuid() NOT NULL PRIMARY KEY,
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL,
    active_job_id uuid NOT NULL,
    job_class text,
    queue_name text,
    serialized_params jsonb,
    scheduled_at timestamp(6) without time zone,
    finished_at timestamp(6) without time zone,
    error text,
    error_event smallint,
    error_backtrace text[],
    process_id uuid,
    duration interval
);

CREATE TABLE good_job_processes (
    id uuid DEFAULT gen_random_uuid() NOT NULL PRIMARY KEY,
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL,
    state jsonb,
    lock_type smallint
);

CREATE TABLE good_job_settings (
    id uuid DEFAULT gen_random_uuid() NOT NULL PRIMARY KEY,
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL,
    key text,
    value jsonb
);
CREATE UNIQUE INDEX index_good_job_settings_on_key ON good_job_settings USING btree (key);

-- Indexes, in the template's order
CREATE INDEX index_good_jobs_on_scheduled_at ON good_jobs USING btree (scheduled_at) WHERE (finished_at IS NULL);
CREATE INDEX index_good_jobs_on_queue_name_and_scheduled_at ON good_jobs USING btree (queue_name, scheduled_at) WHERE (finished_at IS NULL);
CREATE INDEX index_good_jobs_on_active_job_id_and_created_at ON good_jobs USING btree (active_job_id, created_at);
CREATE INDEX index_good_jobs_on_concurrency_key_when_unfinished ON good_jobs USING btree (concurrency_key) WHERE (finished_at IS NULL);
CREATE INDEX index_good_jobs_on_concurrency_key_and_created_at ON good_jobs USING btree (concurrency_key, created_at);
CREATE INDEX index_good_jobs_on_cron_key_and_created_at_cond ON good_jobs USING btree (cron_key, created_at) WHERE (cron_key IS NOT NULL);
CREATE UNIQUE INDEX index_good_jobs_on_cron_key_and_cron_at_cond ON good_jobs USING btree (cron_key, cron_at) WHERE (cron_key IS NOT NULL);
CREATE INDEX index_good_jobs_jobs_on_finished_at_only ON good_jobs USING btree (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX index_good_jobs_jobs_on_priority_created_at_when_unfinished ON good_jobs USING btree (priority DESC NULLS LAST, created_at) WHERE finished_at IS NULL;
CREATE INDEX index_good_job_jobs_for_candidate_lookup ON good_jobs USING btree (priority NULLS LAST, created_at) WHERE finished_at IS NULL;
CREATE INDEX index_good_jobs_on_batch_id ON good_jobs USING btree (batch_id) WHERE batch_id IS NOT NULL;
CREATE INDEX index_good_jobs_on_batch_callback_id ON good_jobs USING btree (batch_callback_id) WHERE batch_callback_id IS NOT NULL;
CREATE INDEX index_good_jobs_on_job_class ON good_jobs USING btree (job_class);
CREATE INDEX index_good_jobs_on_labels ON good_jobs USING gin (labels) WHERE (labels IS NOT NULL);
CREATE INDEX index_good_job_executions_on_active_job_id_and_created_at ON good_job_executions USING btree (active_job_id, created_at);
CREATE INDEX index_good_jobs_on_priority_scheduled_at_unfinished_unlocked ON good_jobs USING btree (priority NULLS LAST, scheduled_at) WHERE finished_at IS NULL AND locked_by_id IS NULL;
CREATE INDEX index_good_jobs_on_priority_scheduled_at_unfinished ON good_jobs USING btree (priority, scheduled_at, id) WHERE finished_at IS NULL;
-- (name says "priority" but the columns are queue_name, scheduled_at, id - as in the template)
CREATE INDEX index_good_jobs_on_queue_name_priority_scheduled_at_unfinished ON good_jobs USING btree (queue_name, scheduled_at, id) WHERE finished_at IS NULL;
CREATE INDEX index_good_jobs_on_locked_by_id ON good_jobs USING btree (locked_by_id) WHERE locked_by_id IS NOT NULL;
CREATE INDEX index_good_job_executions_on_process_id_and_created_at ON good_job_executions USING btree (process_id, created_at);
CREATE INDEX index_good_jobs_for_candidate_dequeue_unlocked ON good_jobs USING btree (priority NULLS LAST, scheduled_at, id) WHERE finished_at IS NULL AND locked_by_id IS NULL;
CREATE INDEX index_good_jobs_on_queue_name ON good_jobs USING btree (queue_name);
CREATE INDEX index_good_jobs_on_created_at ON good_jobs USING btree (created_at);
CREATE INDEX index_good_jobs_on_discarded ON good_jobs USING btree (finished_at DESC) WHERE finished_at IS NOT NULL AND error IS NOT NULL;
CREATE INDEX index_good_jobs_on_scheduled_at_and_queue_name ON good_jobs USING btree (scheduled_at, queue_name);
CREATE INDEX index_good_jobs_on_unfinished_or_errored ON good_jobs USING btree (id) WHERE finished_at IS NULL OR error IS NOT NULL;

-- Rails bookkeeping (the migration version is the timestamp the generator gives the file):
CREATE TABLE IF NOT EXISTS schema_migrations (version character varying NOT NULL PRIMARY KEY);

-- Derived state (scopes in app/models/good_job/job.rb; there is no status column):
--   scheduled : finished_at IS NULL AND scheduled_at > now AND executions_count(serialized_params) < 2
--   retried   : finished_at IS NULL AND scheduled_at > now AND executions > 1
--   queued    : performed_at IS NULL AND finished_at IS NULL AND scheduled_at <= now
--   running   : performed_at IS NOT NULL AND finished_at IS NULL
--   succeeded : finished_at IS NOT NULL AND error IS NULL
--   discarded : finished_at IS NOT NULL AND error IS NOT NULL
-- lock_type values come from the enum declared in job.rb (advisory/skiplocked/hybrid); the
-- default lock strategy is :advisory (lib/good_job/configuration.rb lock_strategy), in which
-- case perform writes locked_by_id/locked_at/lock_type = advisory on the job row and holds a
-- session advisory lock visible in pg_locks.
