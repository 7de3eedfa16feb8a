"""The River preset (Go, migration line main up to 007): a profile of the in-place state diff.

River keeps no event log: a job is one row of ``river_job`` whose state, ``attempt``,
``errors`` and ``metadata`` change in place, as Oban's do, so :mod:`exporter.counting.statediff`
counts it given River's state names. profiles/sql/river.sql reads the row versions written
since the previous snapshot within six index ranges (the active set, three terminal-state
windows on ``finalized_at``, the ids above a settled watermark, and the jobs last seen
running by id). docs/presets.md ("River") has the argument.
"""

from __future__ import annotations

from exporter.counting.state_change import RowState, StateNames
from exporter.counting.statediff import StateDiffReader
from exporter.profiles.base import EXACT_GAUGES, Exactness, RetentionHint, preset_queries

__all__ = ["INSERTED", "RiverReader", "RowState", "change"]

PRESET = "river"
# The JobRescuer's RescueStuckJobsAfter default: a running job older than this is stuck.
RESCUE_AFTER = 3600.0
# finalized_at is stamped with the worker's clock, not the database's: a job a worker ends
# right after a cycle's snapshot may carry a stamp as far before that cycle's horizon as the
# worker's clock lags. 60 s is the lag the preset tolerates (docs/presets.md, "River").
CLOCK_MARGIN = 60.0
# The JobCleaner's shortest default retention (completed and cancelled jobs; discarded: 7 d).
CLEANER_RETENTION = 86400.0
STATES = StateNames(
    enum="river_job_state",
    waiting=frozenset({"available", "pending", "scheduled", "retryable"}),
    running="running",
    completed="completed",
    cancelled="cancelled",
    discarded="discarded",
    optional=frozenset({"pending"}),  # added by migration 004
)
change = STATES.change
INSERTED = RowState(STATES.inserted)  # a job the reader has not seen

CAPABILITIES: dict[str, Exactness] = {
    **EXACT_GAUGES,
    "held": "not exported",  # discarded rows are history, kept until the JobCleaner runs
    "enqueued": "exact",
    "completed": "exact",
    "failures": "exact",
    "failure_reason": "exact",  # lease_expired (a JobRescuer rescue), error
    "failure_deadline": "not exported",  # a JobTimeout is a plain error: nothing tells it
    "dead": "exact",
    "requeued": "exact",  # JobRetry of a finished job
    "cancelled": "exact",
    "wait": "exact",  # of the last attempt: scheduled_at -> attempted_at
    "duration": "exact",  # of the last attempt: attempted_at -> finalized_at
    "latency": "exact",  # created_at -> finalized_at
}

RETENTION = RetentionHint(
    rows_deleted_on_success=False,
    history_kept=(
        "completed and cancelled jobs for 24 h, discarded ones for 7 days, until the "
        "JobCleaner deletes them (River's defaults)"
    ),
    warning=(
        "a job that ends and is deleted between two cycles is never counted: keep the "
        "JobCleaner's retention far above the collection interval"
    ),
    seconds=CLEANER_RETENTION,
)


class RiverReader(StateDiffReader):
    """Reads river_job into gauges and exact counts, one cycle at a time."""

    preset = PRESET
    library = "River"
    event_log = "river_job"  # not a log: the table whose ids the horizon's watermark reads
    states = STATES
    default_stuck_after = RESCUE_AFTER
    clock_margin = CLOCK_MARGIN
    follows_running = True  # the BatchCompleter may hold a finished job for seconds

    def statements(self) -> dict[str, str]:
        """profiles/sql/river.sql, with the id horizon over river_job."""
        return preset_queries(PRESET, event_log=self.event_log)
