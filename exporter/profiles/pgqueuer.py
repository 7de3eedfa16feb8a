"""The pgqueuer 1.x preset: counts from pgqueuer_log, gauges from the live pgqueuer table."""

from __future__ import annotations

from exporter.counting.eventlog import EventLogReader, last_index
from exporter.profiles.base import EXACT_GAUGES, Exactness, RetentionHint, Row, preset_queries
from exporter.vocabulary import ERROR, LEASE_EXPIRED

PRESET = "pgqueuer"
# pgqueuer's own default heartbeat_timeout (QueueManager.run).
HEARTBEAT_TIMEOUT = 30.0
# The failure reason of an attempt whose worker vanished: pgqueuer re-picks such a job once its
# heartbeat is older than heartbeat_timeout, and logs a second "picked" with no error.
HEARTBEAT_REASON = "heartbeat_timeout"

CAPABILITIES: dict[str, Exactness] = {
    **EXACT_GAUGES,
    "held": "exact",
    "enqueued": "exact",
    "completed": "exact",
    "failures": "exact",  # with reason = traceback.exception_type
    "failure_reason": "exact",
    "failure_deadline": "not exported",  # no timeout error of its own is told apart
    "dead": "exact",
    "requeued": "exact",
    "cancelled": "exact",
    "wait": "not exported",  # execute_after is not logged and the row is gone after success
    "duration": "exact",
    "latency": "exact",
}

RETENTION = RetentionHint(
    rows_deleted_on_success=True,
    history_kept="pgqueuer_log and pgqueuer_statistics forever (the library never prunes them)",
    warning=(
        "finished jobs vanish from the pgqueuer table at once; everything is counted from "
        "pgqueuer_log, so a TRUNCATE of the log (pgq has one) or a DELETE by entrypoint "
        "loses the events not yet read. The log grows without bound: the cursor stays cheap "
        "(an id range scan), but disk does not."
    ),
)


class PgqueuerReader(EventLogReader):
    """Reads pgqueuer / pgqueuer_log into gauges and exact tallies."""

    preset = PRESET
    library = "pgqueuer"
    event_log = "pgqueuer_log"
    default_stuck_after = HEARTBEAT_TIMEOUT

    def statements(self) -> dict[str, str]:
        """profiles/sql/pgqueuer.sql, with the event-log horizon over its log table."""
        return preset_queries(PRESET, event_log=self.event_log)

    def count(self, event: Row) -> None:
        """Add one pgqueuer_log row (see the statuses in docs/presets.md). Exception types are
        unbounded label values: they all count as an error."""
        status = str(event["status"])
        entrypoint = str(event["job_type"])
        history: list[str] = list(event["statuses"] or [])
        ledger = self.ledger
        if status == "queued":
            if event["has_traceback"]:
                # A database-level retry (RetryRequested): one failed attempt, put back.
                ledger.failed(entrypoint, ERROR)
            elif history:
                ledger.requeued(entrypoint)  # a held job re-queued by hand (pgq requeue)
            else:
                ledger.enqueued(entrypoint)
        elif status == "picked":
            if history and history[-1] == "picked":
                # Picked again without being re-queued: the previous worker's heartbeat went
                # stale, which is the only way pgqueuer re-picks a job.
                ledger.failed(entrypoint, LEASE_EXPIRED)
        elif status == "successful":
            self._observe(entrypoint, event, history)
        elif status in ("exception", "failed"):
            ledger.failed(entrypoint, ERROR)
            ledger.dead(entrypoint, ERROR)
        elif status in ("canceled", "deleted"):
            ledger.cancelled(entrypoint)

    def _observe(self, entrypoint: str, event: Row, history: list[str]) -> None:
        """Duration and latency of one success, from the job's earlier log rows."""
        ats: list[float] = list(event["ats"] or [])
        at = float(event["at"])
        picked = last_index(history, {"picked"})
        queued = history.index("queued") if "queued" in history else None
        self.ledger.completed(
            entrypoint,
            duration=at - ats[picked] if picked is not None else None,
            wait=None,
            latency=at - ats[queued] if queued is not None else None,
        )
