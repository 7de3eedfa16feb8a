"""graphile-worker 0.18's committed job-row changes as the exporter's transitions; no I/O.

graphile_worker._private_jobs has no status column: a row is locked (running) while
``locked_at`` is set, available while unlocked with ``attempts < max_attempts``, and dead
(permanently failed, kept until deleted) when unlocked with ``attempts >= max_attempts``. A
success DELETEs the row. So under polling a job that came and went between two reads leaves no
trace, but the stream carries each change with its whole old row (REPLICA IDENTITY FULL):

- INSERT: enqueued (add_job, add_jobs; a job_key replace that UPDATEs the row is no new job);
- an UPDATE that locks the row (getJobs: ``locked_at`` set, ``attempts + 1``): a claim, nothing;
- an UPDATE that unlocks it with ``attempts`` lowered (returnJobs, a graceful shutdown's
  hand-back): a release, nothing;
- one that unlocks it otherwise: a failed attempt, and a death when ``attempts >=
  max_attempts``. failJobs writes ``last_error`` and pushes ``run_at`` seconds past its
  ``now()``; a lost worker's lock freed by resetLockedAt (after 4 h) or force_unlock_workers
  writes no error and leaves ``run_at`` at or before the commit: reason ``lease_expired``;
- an unlocked row that becomes dead (permanently_fail_jobs, remove_job): a death with no
  failed attempt; a dead row made available again (reschedule_jobs): a requeue;
- a DELETE of a locked row: a completion (completeJobs; complete_jobs of a stale lock). The
  DELETE carries no time of its own, so its commit is the completion's moment: duration =
  commit - ``locked_at``, wait = ``locked_at`` - ``run_at``, latency = commit - ``created_at``;
- a DELETE of an available row (remove_job, complete_jobs by hand, a cleanup): a job gone
  before it ran, ``jobs_vanished_total{last_status="pending"}``; of a dead row: nothing (it
  was counted when it died; the dead gauge follows at its recount).

Tasks are named by ``task_id``; the mode reads ``_private_tasks`` every cycle
(:meth:`GraphileChanges.look`) before it counts what was handed over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from exporter.counting.ledger import Ledger
from exporter.counting.stream_counter import parse_time
from exporter.model import Row
from exporter.model.row_changes import DELETE, INSERT, UPDATE, RowChange, TextRow
from exporter.vocabulary import ERROR, LEASE_EXPIRED

# The label of a job whose task row was gone before the mode could read it (graphile's
# cleanup GC_TASK_IDENTIFIERS removes tasks no job uses): rare, and never a silent drop.
UNKNOWN_TASK = "unknown task"
PENDING_LABEL = "pending"  # jobs_vanished_total{last_status}: an available row deleted


class GraphileChanges:
    """Counts graphile-worker's job-row changes into the queue's ledger, task by name."""

    def __init__(self, ledger: Ledger, tasks_sql: str) -> None:
        self.ledger = ledger
        self.lookups: Mapping[str, str] = {"tasks": tasks_sql}
        # task_id (text) -> identifier; kept across cycles, so a task deleted after its last
        # job still names changes that arrive later.
        self.tasks: dict[str, str] = {}

    def look(self, results: Mapping[str, Sequence[Row]]) -> None:
        """Take the cycle's read of ``_private_tasks``."""
        for row in results.get("tasks", ()):
            self.tasks[str(row["id"])] = str(row["identifier"])

    def ready(self, change: RowChange) -> bool:
        """Whether the change's task is named already (else the next cycle's lookup names it)."""
        row = change.new if change.new is not None else change.old
        return row is None or row.get("task_id") in self.tasks

    def count(self, change: RowChange, commit_time: float) -> None:
        """Count one committed change (``commit_time``: Unix seconds, the database's clock)."""
        ledger = self.ledger
        if change.kind == INSERT and change.new is not None:
            ledger.enqueued(self._task(change.new))
        elif change.kind == UPDATE and change.old is not None and change.new is not None:
            self._update(change.old, change.new, commit_time)
        elif change.kind == DELETE and change.old is not None:
            old = change.old
            locked_at = _time(old, "locked_at")
            if locked_at is not None:
                self._completed(old, locked_at, commit_time)
            elif not _dead(old):
                ledger.tallies.vanished[PENDING_LABEL] += 1

    def _update(self, old: TextRow, new: TextRow, commit_time: float) -> None:
        ledger, task = self.ledger, self._task(new)
        was_locked, locked = old.get("locked_at") is not None, new.get("locked_at") is not None
        if was_locked and not locked:
            before, after = _int(old, "attempts"), _int(new, "attempts")
            if before is not None and after is not None and after < before:
                return  # handed back (returnJobs): no attempt failed
            reason = self._reason(old, new, commit_time)
            ledger.failed(task, reason)
            if _dead(new):
                ledger.dead(task, reason)
        elif not was_locked and not locked:
            if not _dead(old) and _dead(new):
                ledger.dead(task, ERROR)  # failed by hand, or removed by key
            elif _dead(old) and not _dead(new):
                ledger.requeued(task)  # rescheduled by hand
        # Locked by a worker (a claim), or changed while locked: nothing to count.

    def _reason(self, old: TextRow, new: TextRow, commit_time: float) -> str:
        # failJobs always writes last_error and moves run_at exp(attempts) >= 2.7 s past its
        # now(); a freed lock keeps the error and leaves run_at at or before now().
        if new.get("last_error") != old.get("last_error"):
            return ERROR
        run_at = _time(new, "run_at")
        if run_at is not None and run_at.timestamp() > commit_time:
            return ERROR
        return LEASE_EXPIRED

    def _completed(self, old: TextRow, locked_at: datetime, commit_time: float) -> None:
        started = locked_at.timestamp()
        run_at, created = _time(old, "run_at"), _time(old, "created_at")
        self.ledger.completed(
            self._task(old),
            duration=max(0.0, commit_time - started),
            wait=max(0.0, started - run_at.timestamp()) if run_at is not None else None,
            latency=max(0.0, commit_time - created.timestamp()) if created is not None else None,
        )

    def _task(self, row: TextRow) -> str:
        task_id = row.get("task_id")
        return self.tasks.get(task_id, UNKNOWN_TASK) if task_id is not None else UNKNOWN_TASK


def _dead(row: TextRow) -> bool:
    attempts, limit = _int(row, "attempts"), _int(row, "max_attempts")
    return attempts is not None and limit is not None and attempts >= limit


def _int(row: TextRow, column: str) -> int | None:
    text = row.get(column)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _time(row: TextRow, column: str) -> datetime | None:
    text = row.get(column)
    return parse_time(text) if text is not None else None
