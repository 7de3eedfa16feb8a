"""The words the layers share, spelled once: statuses, reasons, label values, index names, URLs.

Settings, the tracker, the metrics, the rules, the dashboard builder and the demo import these
instead of writing the strings again, so a rename is one edit and a typo is an import error.
"""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """The queue's job statuses as the ``status`` column stores them (JobStatus in the queue)."""

    PENDING = 1
    RUNNING = 2
    DONE = 3
    DEAD = 4

    @property
    def label(self) -> str:
        """The value of the ``status`` label."""
        return self.name.lower()


ACTIVE_STATUSES = (Status.PENDING, Status.RUNNING)
TERMINAL_STATUSES = (Status.DONE, Status.DEAD)

# job_type label value of the job types beyond the label cap.
OTHER = "other"
# A text job type is untrusted input (whoever may enqueue writes it): its label keeps at most
# this many characters. 128 holds the dotted task paths queue libraries use (well under 100)
# and a readable legend; with the label cap, a scrape stays small whatever was enqueued.
MAX_JOB_TYPE_LABEL = 128
CUT_MARK = "\u2026"  # ends a label that was cut, so it never passes for the whole name

# Why an attempt failed (jobqueue_job_failures_total, jobqueue_jobs_dead_total).
DEADLINE = "deadline"
LEASE_EXPIRED = "lease_expired"
ERROR = "error"
FAILURE_REASONS = (DEADLINE, LEASE_EXPIRED, ERROR)

# Why a running job is stuck (jobqueue_stuck_jobs).
OVERRUN = "overrun"
STUCK_REASONS = (LEASE_EXPIRED, OVERRUN)

# Components of the cost counter; other = total - ai - proxy, so sum() is the total.
COST_AI, COST_PROXY, COST_OTHER = "ai", "proxy", "other"
COST_COMPONENTS = (COST_AI, COST_PROXY, COST_OTHER)

# What the reference queue writes into last_error: the prefix of a job killed by its deadline,
# and the marker the reaper appends once per lease-expired reclaim (the collect.* defaults).
DEADLINE_PREFIX = "JobDeadlineExceeded"
LEASE_EXPIRED_MARKER = " [lease-expired reclaim]"

# Fields of result jsonb that can be malformed (field="result": not a JSON object).
MALFORMED_FIELDS = ("result", "duration_ms", "ai_usd", "proxy_usd", "total_usd")

# Why a collection failed (jobqueue_exporter_collection_errors_total).
TIMEOUT = "timeout"
LOCK = "lock"
CONNECTION = "connection"
QUERY = "query"
SCHEMA = "schema"
PERMISSION = "permission"
INTERNAL = "internal"
STREAM = "stream"  # collect.counting: logical: the change stream failed (reason below)
COLLECTION_ERROR_REASONS = (
    TIMEOUT, LOCK, CONNECTION, QUERY, SCHEMA, PERMISSION, INTERNAL, STREAM,
)  # fmt: skip

# Why a logical queue's change stream ended and was started again
# (jobqueue_exporter_logical_stream_restarts_total), from the SQLSTATE where there is one.
STREAM_CONNECT = "connect"  # no connection: address, pg_hba.conf, password, server down
STREAM_LOST = "lost"  # the connection broke while streaming (or its peer went silent)
STREAM_IN_USE = "in_use"  # another process reads the slot (SQLSTATE 55006)
STREAM_SETUP = "setup"  # the server refused the slot or the publication as they are
STREAM_DECODE = "decode"  # a message that is not pgoutput v1, or not UTF-8
STREAM_RESTART_REASONS = (
    STREAM_CONNECT, STREAM_LOST, STREAM_IN_USE, PERMISSION, STREAM_SETUP, STREAM_DECODE, INTERNAL,
)  # fmt: skip

# The indexes the default profile's per-cycle queries need (exporter/sql/indexes.sql).
ACTIVE_INDEX = "job_exporter_active_idx"
UPDATED_AT_INDEX = "job_exporter_updated_at_idx"
DEAD_INDEX = "job_exporter_dead_idx"
REQUIRED_INDEXES = (ACTIVE_INDEX, UPDATED_AT_INDEX, DEAD_INDEX)

# What a queue's table looks like (the queue.profile setting): the default schema
# (exporter/sql/schema.sql), or a preset for a library's own tables (exporter/profiles/PRESETS).
DEFAULT_PROFILE = "default"
PRESET_PROFILES = (
    "procrastinate", "pgqueuer", "pgboss", "django-tasks", "oban", "graphile-worker",
    "solid-queue", "solid-queue-unpreserved", "good-job", "river",
)  # fmt: skip
PROFILES = (DEFAULT_PROFILE, *PRESET_PROFILES)
# The library's own spelling is accepted too.
PROFILE_ALIASES = (
    ("pg-boss", "pgboss"), ("graphile_worker", "graphile-worker"),
    ("solid_queue", "solid-queue"),
    ("good_job", "good-job"),
)  # fmt: skip
# The queue label of a preset's queue whose entry names none (else: the DSN's database name).
PRESET_QUEUE_NAMES = {
    "solid-queue": "solid_queue",
    "solid-queue-unpreserved": "solid_queue",
    "good-job": "good_job",
    "river": "river",
}

# The project's documentation, linked from the status page.
DOCS_URL = "https://github.com/jobqueue-exporter/jobqueue-exporter/tree/main/docs"

# Where the shipped alerts' runbooks live; alerts link to <base>#<lowercased alert name>.
RUNBOOK_BASE_URL = (
    "https://github.com/jobqueue-exporter/jobqueue-exporter/blob/main/docs/runbooks.md"
)
# The shipped Grafana dashboard (dashboards/jobqueue.json, uid jobqueue-exporter) on a
# placeholder Grafana; alerts link to it with their labels as dashboard variables.
DASHBOARD_URL = "https://grafana.example.invalid/d/jobqueue-exporter/jobqueue"

PROJECT = "jobqueue-exporter"
DEFAULT_PORT = 10049

# A queue's replication slot under collect.counting: logical, unless collect.logical_slot names
# one: this and the queue name (docs/logical.md).
SLOT_PREFIX = "jobqueue_"
