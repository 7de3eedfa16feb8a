"""The pg-boss 12 preset: terminal-state cursor plus active-set diff, exact under late commits.

pg-boss keeps no event log, and a fail or retry is a DELETE + re-INSERT of the same id, so the
reader follows jobs, not rows: each cycle it reads the row versions written since the previous
snapshot (xmin at or above that snapshot's xmin) within three index ranges per queue, and
compares each with what it last knew of that job id. The attempt history lives in
``retry_count`` (pg-boss increments it when it claims a job that already started once).
"""

from __future__ import annotations

from exporter.counting.gauges import Reading, first, reading_of, seconds
from exporter.counting.horizon import Horizon
from exporter.counting.reader import LedgerReader, planned
from exporter.counting.terminal import ActiveSet, KnownJob, TerminalCursor
from exporter.model import Query, Results, Row
from exporter.profiles.base import EXACT_GAUGES, Exactness, RetentionHint, preset_queries
from exporter.vocabulary import ERROR

PRESET = "pgboss"
ACTIVE_STATES = frozenset({"created", "retry", "active"})

CAPABILITIES: dict[str, Exactness] = {
    **EXACT_GAUGES,
    "held": "not exported",  # failed jobs are kept for deletion_seconds: that is history
    "enqueued": "exact",
    "completed": "exact",
    "failures": "exact",  # the count; reason is "unknown": output keeps the last error only
    "failure_reason": "not exported",
    "failure_deadline": "not exported",  # no timeout error of its own is told apart
    "dead": "exact",
    "requeued": "exact",
    "cancelled": "exact",
    "wait": "exact",  # of the last attempt: start_after -> started_on
    "duration": "exact",  # of the last attempt: started_on -> completed_on
    "latency": "exact",
}

RETENTION = RetentionHint(
    rows_deleted_on_success=False,
    history_kept="completed, failed and cancelled jobs for deletion_seconds (7 days by default)",
    warning=(
        "nothing is lost while the poll interval is far below deletion_seconds; a queue "
        "configured with deletion_seconds near the poll interval can delete a job that "
        "finished between two cycles before it is read, and it would not be counted"
    ),
)


def attempts(state: str, retry_count: int, before: KnownJob | None) -> tuple[int, int]:
    """(failed attempts, retries) that a job in this state has behind it.

    retry_count counts the claims after the first, so an active or completed job has that many
    failed attempts, each followed by a retry; a job waiting in 'retry' or dead in 'failed'
    has one more failure. Cancelling adds neither, so a cancelled job keeps its last figures.
    """
    if state == "retry":
        return retry_count + 1, retry_count + 1
    if state == "failed":
        return retry_count + 1, retry_count
    if state == "created":
        return 0, 0
    if state == "cancelled":
        if before is not None:
            return attempts(before.state, before.retry_count, None)
        return retry_count, retry_count
    return retry_count, retry_count  # active, completed


class PgbossReader(LedgerReader):
    """Reads pgboss.job / pgboss.queue into gauges and exact counts, one cycle at a time.

    pg-boss stores each job's own expiry and heartbeat interval: ``stuck_after`` is unused.
    """

    preset = PRESET
    library = "pg-boss"

    def start(self) -> None:
        """The known jobs and the windows' cursor."""
        self.jobs = ActiveSet(ACTIVE_STATES)
        self.cursor = TerminalCursor()

    def statements(self) -> dict[str, str]:
        """profiles/sql/pgboss.sql."""
        return preset_queries(PRESET)

    @property
    def known(self) -> dict[str, KnownJob]:
        """What the reader last knew of each job a window can still return."""
        return self.jobs.known

    @property
    def tracked(self) -> int:
        """Jobs whose last state the reader keeps."""
        return len(self.jobs.known)

    @property
    def held(self) -> int:
        """Of them, the finished ones kept until the cursor passes them."""
        return self.jobs.finished()

    def queries(self, horizon: Row) -> list[Query]:
        """The cycle's statements, in order, for one REPEATABLE READ, READ ONLY transaction."""
        window = self.cursor.plan(Horizon.from_row(horizon))
        out = [Query("snapshot", self.sql["snapshot"]), Query("gauges", self.sql["gauges"])]
        if window is not None:
            out.append(Query("changes", self.sql["changes"], window))
        return out

    def apply(self, results: Results) -> Reading:
        """Fold one cycle's rows into the ledger and return its gauges."""
        reading = reading_of(results, self.counting)
        if "changes" not in results:
            return self.delayed(reading)
        bound, next_bound = planned(self.cursor.bound, self.cursor.next_bound)
        seen: set[str] = set()
        for row in results["changes"]:
            job_id = str(row["id"])
            seen.add(job_id)
            if self.counting:
                self._count(job_id, row, bound)
            else:
                self.known[job_id] = _state_of(row)
        self.ledger.settle()
        self.counting = reading.counting = True
        active = {str(i) for row in results["gauges"] for i in row["active_ids"]}
        self.jobs.forget(active, seen, next_bound)
        self.cursor.advance(str(first(results["snapshot"])["snapshot"]))
        return reading

    def _count(self, job_id: str, row: Row, bound: float) -> None:
        """Compare one new row version with what was known of its job. pg-boss keeps only the
        last error in ``output``, so every failure counts as an error."""
        queue = str(row["job_type"])
        state = str(row["state"])
        retry_count = int(row["retry_count"])
        before = self.known.get(job_id)
        ledger = self.ledger
        if before is None:
            if float(row["created_on"]) >= bound:
                ledger.enqueued(queue)  # created after the previous snapshot
            elif state in ("created", "retry"):
                # An old job we had forgotten, back in the queue: retried or resumed by hand.
                ledger.retried(queue)
                self.known[job_id] = _state_of(row)
                return
        failed_before, retried_before = (
            attempts(before.state, before.retry_count, None) if before else (0, 0)
        )
        failed_now, retried_now = attempts(state, retry_count, before)
        if failed_now > failed_before:
            ledger.failed(queue, ERROR, failed_now - failed_before)
        if retried_now > retried_before:
            ledger.retried(queue, retried_now - retried_before)
        if before is None or before.state != state:
            if state == "completed":
                ledger.completed(queue, seconds(row["duration"]), seconds(row["wait"]),
                                 seconds(row["latency"]))  # fmt: skip
            elif state == "failed":
                ledger.dead(queue, ERROR)
            elif state == "cancelled":
                ledger.cancelled(queue)
        self.known[job_id] = _state_of(row)


def _state_of(row: Row) -> KnownJob:
    completed_on = row["completed_on"]
    return KnownJob(
        state=str(row["state"]),
        retry_count=int(row["retry_count"]),
        created_on=float(row["created_on"]),
        completed_on=float(completed_on) if completed_on is not None else None,
    )
