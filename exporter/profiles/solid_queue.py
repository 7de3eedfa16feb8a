"""The Solid Queue preset (Solid Queue 1.5, Rails): a profile of the membership diff.

Solid Queue keeps one row per enqueue in ``solid_queue_jobs`` and says where a job is by which
side table holds its id; the side rows are deleted as the job moves on, so the reader follows
jobs by id (exporter/counting/membership.py) and this module says what each move means.
``solid-queue`` needs ``preserve_finished_jobs`` on (Solid Queue's default): a finished job
keeps its row. ``solid-queue-unpreserved`` is for the queues that turned it off, where a
finished job's row is deleted and only the failures kept for a human are countable.
docs/presets.md ("Solid Queue") has the semantics and the argument.
"""

from __future__ import annotations

from exporter.counting import membership as where
from exporter.counting.membership import Member, MemberRow, MembershipReader
from exporter.model import CountingError
from exporter.profiles.base import EXACT_GAUGES, Exactness, RetentionHint, preset_queries
from exporter.vocabulary import ERROR, SCHEMA

PRESET = "solid_queue"  # the SQL file's name; the profiles are spelled "solid-queue..."
TABLE = "solid_queue_jobs"
# SolidQueue.process_alive_threshold: a process whose heartbeat is older is pruned as dead.
ALIVE_THRESHOLD = 300.0

CAPABILITIES: dict[str, Exactness] = {
    **EXACT_GAUGES,
    "held": "exact",  # failed executions, kept until retried or discarded by hand
    "enqueued": "exact",  # new rows whose Active Job executions is 0
    "completed": "exact",  # finished rows no later row of the same job follows
    "failures": "exact",  # a retry_on row, or a failed execution
    "failure_reason": "exact",  # lease_expired (a lost process), error
    "failure_deadline": "not exported",  # Solid Queue has no job timeout of its own
    "dead": "exact",  # failed executions
    "requeued": "exact",  # a failed job retried by hand (Mission Control)
    "cancelled": "exact",  # a waiting job discarded (Mission Control)
    "wait": "not exported",  # a job's start is its claimed row, deleted when it ends
    "duration": "not exported",  # the same
    "latency": "exact",  # from the job's first row to its finished_at
}
# With preserve_finished_jobs off a finished job's row is deleted: a job enqueued, or retried
# by hand, and finished between two cycles leaves nothing; only the failed executions stay.
UNPRESERVED: dict[str, Exactness] = {
    **CAPABILITIES,
    **dict.fromkeys(
        ("enqueued", "completed", "failures", "requeued", "cancelled", "latency"), "not exported"
    ),
}

RETENTION = RetentionHint(
    rows_deleted_on_success=False,
    history_kept=(
        "finished jobs until clear_finished_jobs deletes them (clear_finished_jobs_after, "
        "1 day by default); failed jobs until retried or discarded by hand"
    ),
    warning=(
        "a job that finishes and is cleared between two cycles is never counted: keep "
        "clear_finished_jobs_after far above the collection interval. solid-queue needs "
        "preserve_finished_jobs on; with it off use solid-queue-unpreserved"
    ),
)


class SolidQueueReader(MembershipReader):
    """Reads Solid Queue's tables into gauges and exact counts, one cycle at a time."""

    preset = PRESET
    library = "Solid Queue"
    event_log = TABLE  # not a log: the table whose ids the horizon's watermark reads
    default_stuck_after = ALIVE_THRESHOLD
    preserved = True  # preserve_finished_jobs: a finished job keeps its row

    def statements(self) -> dict[str, str]:
        """profiles/sql/solid_queue.sql, with the id horizon over solid_queue_jobs."""
        return preset_queries(PRESET, event_log=self.event_log)

    def moved(self, before: Member | None, row: MemberRow) -> None:
        """What one move means: Solid Queue's semantics (docs/presets.md, "Solid Queue")."""
        ledger, now, kept = self.ledger, row["state"], self.preserved
        job_type = row["job_type"] or (before.job_type if before else "")
        if before is None:  # a new row: a new job, or a retry_on re-enqueue of one
            if kept and (row["executions"] or 0) > 0:
                ledger.failed(job_type, ERROR)
                ledger.retried(job_type)  # automatic: keeps the requeue balance at zero
            elif kept:
                ledger.enqueued(job_type)
            before = Member(job_type, where.WAITING)
        was, reason = before.state, row["reason"] or ERROR
        failed = now == where.HELD and (was != where.HELD or row["mark"] != before.mark)
        if kept and was == where.HELD and now != where.GONE and (now != where.HELD or failed):
            ledger.requeued(job_type)  # a failed job retried by hand
        if failed:  # (unpreserved: the failure balances the death; it is not exported)
            ledger.failed(job_type, reason)
            ledger.dead(job_type, reason)
        elif not kept or now == was:
            return
        elif now == where.FINISHED and not row["superseded"]:
            ledger.completed(job_type, None, None, row["latency"])
        elif now == where.GONE and was == where.WAITING:
            ledger.cancelled(job_type)  # discarded before it ran
        elif now == where.GONE and was == where.RUNNING:
            raise CountingError(
                f"a running {job_type} job was deleted without finishing or failing: Solid "
                "Queue's preserve_finished_jobs is off (use the solid-queue-unpreserved "
                "profile), or clear_finished_jobs_after is shorter than the interval",
                reason=SCHEMA,
            )


class SolidQueueUnpreservedReader(SolidQueueReader):
    """Solid Queue with preserve_finished_jobs off: the gauges and the failed executions."""

    preserved = False
