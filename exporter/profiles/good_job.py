"""The GoodJob 4 preset (Rails, PostgreSQL only): a profile of the in-place state diff.

GoodJob keeps one row per job in ``good_jobs``, changed in place (a retry rewrites the same
row), and one row per attempt in ``good_job_executions``; it has no status column, so
profiles/sql/good_job.sql derives the states as GoodJob's own scopes do, and counts each job's
failed attempts from its executions. The ids are ActiveJob uuids and every timestamp is a Ruby
process's clock: new jobs are told by whether an attempt of theirs was in the previous snapshot,
and the windows allow for worker clocks behind the database's. docs/presets.md ("GoodJob") has
the argument.
"""

from __future__ import annotations

from exporter.counting.state_change import RowState, StateNames
from exporter.counting.statediff import StateDiffReader
from exporter.profiles.base import EXACT_GAUGES, Exactness, RetentionHint, preset_queries

__all__ = ["INSERTED", "GoodJobReader", "RowState", "change"]

PRESET = "good_job"  # the SQL file's name; the profile is spelled "good-job"
TABLE = "good_jobs"
# GoodJob::Process::EXPIRED_INTERVAL: a process that only heartbeats is dead past this age.
EXPIRED_INTERVAL = 300.0
# performed_at and finished_at are the worker's Time.current, not the database's now(): the
# windows start this much before the horizon (django-tasks' margin, for the same reason).
CLOCK_MARGIN = 60.0
STATES = StateNames(
    enum="text",  # no enum: the states are derived in SQL
    waiting=frozenset({"waiting"}),  # queued, scheduled, and waiting for a retry
    running="running",  # performed_at set, not finished
    completed="succeeded",
    cancelled="cancelled",  # discarded from the dashboard (DiscardJobError)
    discarded="discarded",  # finished with an error by an attempt: discard_on included
    inserted="waiting",
)
change = STATES.change
INSERTED = RowState(STATES.inserted)  # a job the reader has not seen

CAPABILITIES: dict[str, Exactness] = {
    **EXACT_GAUGES,
    "held": "not exported",  # discarded jobs are history, kept until the cleanup
    "enqueued": "exact",  # new job ids: a retry rewrites the same row
    "completed": "exact",
    "failures": "exact",  # one per execution that ended with an error
    "failure_reason": "exact",  # lease_expired (an interrupted execution), error
    "failure_deadline": "not exported",  # GoodJob has no timeout of its own
    "dead": "exact",
    "requeued": "exact",  # a retry from the dashboard
    "cancelled": "exact",  # a discard from the dashboard
    "wait": "exact",  # of the last attempt: scheduled_at -> performed_at
    "duration": "exact",  # of the last attempt: performed_at -> finished_at
    "latency": "not exported",  # a retry rewrites created_at: the first enqueue is gone
}

RETENTION = RetentionHint(
    rows_deleted_on_success=False,
    history_kept=(
        "finished jobs and their executions until cleanup_preserved_jobs deletes them "
        "(cleanup_preserved_jobs_before_seconds_ago, 14 days by default), with "
        "preserve_job_records on (the default)"
    ),
    warning=(
        "a job that ends and is cleaned up between two cycles is never counted: keep "
        "cleanup_preserved_jobs_before_seconds_ago above twice the collection interval. With "
        "preserve_job_records off, a finished job's row is deleted at once: its end is not "
        "counted"
    ),
)


class GoodJobReader(StateDiffReader):
    """Reads good_jobs and good_job_executions into gauges and exact counts, one cycle at a
    time."""

    preset = PRESET
    library = "GoodJob"
    states = STATES
    sequence_ids = False  # ActiveJob uuids
    clock_margin = CLOCK_MARGIN
    default_stuck_after = EXPIRED_INTERVAL

    def statements(self) -> dict[str, str]:
        """profiles/sql/good_job.sql."""
        return preset_queries(PRESET)
