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

The stream's thread folds each change by ``task_id`` (:class:`GraphileFold`); the mode reads
``_private_tasks`` every cycle (:meth:`GraphileChanges.look`) and names the tasks when it
counts what was handed over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from exporter.counting.stream_counter import Buckets, parse_time
from exporter.model import JobType, Row
from exporter.model.change_tally import ChangeTally
from exporter.model.row_changes import DELETE, INSERT, UPDATE, RowChange, TextRow
from exporter.vocabulary import ERROR, LEASE_EXPIRED

# The label of a job whose task row was gone before the mode could read it (graphile's
# cleanup GC_TASK_IDENTIFIERS removes tasks no job uses): rare, and never a silent drop.
UNKNOWN_TASK = "unknown task"
PENDING_LABEL = "pending"  # jobs_vanished_total{last_status}: an available row deleted
COLUMNS = frozenset(
    ("task_id", "locked_at", "attempts", "max_attempts", "last_error", "run_at", "created_at")
)


class GraphileChanges:
    """graphile-worker's change rules: the fold the stream's thread runs, and the task names."""

    def __init__(self, tasks_sql: str) -> None:
        self.lookups: Mapping[str, str] = {"tasks": tasks_sql}
        # task_id (text) -> identifier; kept across cycles, so a task deleted after its last
        # job still names changes that arrive later.
        self.tasks: dict[str, str] = {}

    def look(self, results: Mapping[str, Sequence[Row]]) -> None:
        """Take the cycle's read of ``_private_tasks``."""
        for row in results.get("tasks", ()):
            self.tasks[str(row["id"])] = str(row["identifier"])

    def fold(self, buckets: Buckets) -> GraphileFold:
        """The rules the stream's thread folds each change with."""
        return GraphileFold(buckets)

    def known(self, key: JobType) -> bool:
        """Whether a fold key (a task_id) is named already."""
        return key in self.tasks

    def name(self, key: JobType) -> str:
        """The task a fold key names (UNKNOWN_TASK when its row was gone before a read)."""
        return self.tasks.get(str(key), UNKNOWN_TASK)


class GraphileFold:
    """Counts committed changes of ``_private_jobs`` into a tally, by task_id; pure."""

    columns = old_columns = COLUMNS
    status = "locked_at"  # a row locked after an UPDATE counts nothing (a claim, a change)

    def __init__(self, buckets: Buckets) -> None:
        self._buckets = buckets

    def tally(self) -> ChangeTally:
        """A new tally with the queue's buckets."""
        return ChangeTally(*self._buckets)

    def quiet(self, old: str | None, new: str | None) -> bool:
        """Locked by a worker (a claim), or changed while locked: nothing to count."""
        return new is not None

    def count(self, change: RowChange, commit_time: float, tally: ChangeTally) -> None:
        """Count one committed change (``commit_time``: Unix seconds, the database's clock)."""
        tally.changes += 1
        new, old = change.new, change.old
        if change.kind == INSERT and new is not None:
            tally.enqueued[_task(new, tally)] += 1
        elif change.kind == UPDATE and old is not None and new is not None:
            self._update(old, new, commit_time, tally)
        elif change.kind == DELETE and old is not None:
            locked_at = _time(old, "locked_at")
            if locked_at is not None:
                self._completed(old, locked_at, commit_time, tally)
            elif not _dead(old):
                tally.vanished[PENDING_LABEL] += 1

    def _update(self, old: TextRow, new: TextRow, commit_time: float, tally: ChangeTally) -> None:
        task = _task(new, tally)
        was_locked, locked = old.get("locked_at") is not None, new.get("locked_at") is not None
        if was_locked and not locked:
            before, after = _int(old, "attempts"), _int(new, "attempts")
            if before is not None and after is not None and after < before:
                return  # handed back (returnJobs): no attempt failed
            reason = self._reason(old, new, commit_time)
            tally.failures[(task, reason)] += 1
            if _dead(new):
                tally.dead[(task, reason)] += 1
        elif not was_locked and not locked:
            if not _dead(old) and _dead(new):
                tally.dead[(task, ERROR)] += 1  # failed by hand, or removed by key
            elif _dead(old) and not _dead(new):
                tally.requeued[task] += 1  # rescheduled by hand
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

    def _completed(
        self, old: TextRow, locked_at: datetime, commit_time: float, tally: ChangeTally
    ) -> None:
        started = locked_at.timestamp()
        run_at, created = _time(old, "run_at"), _time(old, "created_at")
        task = _task(old, tally)
        tally.completed[task] += 1
        tally.observe(
            task,
            max(0.0, commit_time - started),
            max(0.0, started - run_at.timestamp()) if run_at is not None else None,
            max(0.0, commit_time - created.timestamp()) if created is not None else None,
        )


def _task(row: TextRow, tally: ChangeTally) -> JobType:
    return tally.key(row.get("task_id") or "")


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
