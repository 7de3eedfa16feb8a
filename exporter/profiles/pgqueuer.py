"""The pgqueuer 1.x preset: counts from pgqueuer_log, gauges from the live pgqueuer table."""

from __future__ import annotations

from exporter.profiles.base import EXACT_GAUGES, UNKNOWN_REASON, Exactness, RetentionHint, Row
from exporter.profiles.eventlog import EventLogReader, last_index

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
    event_log = "pgqueuer_log"
    default_stuck_after = HEARTBEAT_TIMEOUT

    def count(self, event: Row) -> None:
        """Add one pgqueuer_log row (see the statuses in docs/presets.md)."""
        status = str(event["status"])
        entrypoint = str(event["job_type"])
        reason = str(event["reason"] or UNKNOWN_REASON)
        history: list[str] = list(event["statuses"] or [])
        tallies = self.tallies
        if status == "queued":
            if event["has_traceback"]:
                # A database-level retry (RetryRequested): one failed attempt, put back.
                tallies.failures[(entrypoint, reason)] += 1
                tallies.requeued[entrypoint] += 1
            elif history:
                tallies.requeued[entrypoint] += 1  # a held job re-queued by hand (pgq requeue)
            else:
                tallies.enqueued[entrypoint] += 1
        elif status == "picked":
            if history and history[-1] == "picked":
                # Picked again without being re-queued: the previous worker's heartbeat went
                # stale, which is the only way pgqueuer re-picks a job.
                tallies.failures[(entrypoint, HEARTBEAT_REASON)] += 1
                tallies.requeued[entrypoint] += 1
        elif status == "successful":
            tallies.completed[entrypoint] += 1
            self._observe(entrypoint, event, history)
        elif status in ("exception", "failed"):
            tallies.failures[(entrypoint, reason)] += 1
            tallies.dead[(entrypoint, reason)] += 1
        elif status in ("canceled", "deleted"):
            tallies.cancelled[entrypoint] += 1

    def _observe(self, entrypoint: str, event: Row, history: list[str]) -> None:
        """Duration and latency of one success, from the job's earlier log rows."""
        ats: list[float] = list(event["ats"] or [])
        at = float(event["at"])
        picked = last_index(history, {"picked"})
        queued = history.index("queued") if "queued" in history else None
        self.tallies.observe(
            entrypoint,
            duration=at - ats[picked] if picked is not None else None,
            wait=None,
            latency=at - ats[queued] if queued is not None else None,
        )
