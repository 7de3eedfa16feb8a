"""The procrastinate 3.x preset: counts from procrastinate_events, gauges from the active jobs."""

from __future__ import annotations

from exporter.counting.eventlog import EventLogReader, last_index
from exporter.profiles.base import EXACT_GAUGES, Exactness, RetentionHint, Row, preset_queries
from exporter.vocabulary import ERROR

PRESET = "procrastinate"
# procrastinate's own default stalled_worker_timeout (Worker and get_stalled_jobs).
STALLED_WORKER_TIMEOUT = 30.0

ENQUEUE_EVENTS = {"deferred", "deferred_for_retry", "retried"}

CAPABILITIES: dict[str, Exactness] = {
    **EXACT_GAUGES,
    "held": "not exported",  # a failed job is terminal; counting them means reading history
    "enqueued": "exact",
    "completed": "exact",
    "failures": "exact",  # the count; the reason is always "unknown": none is stored
    "failure_reason": "not exported",
    "failure_deadline": "not exported",  # no timeout error of its own is told apart
    "dead": "exact",
    "requeued": "exact",
    "cancelled": "exact",
    "wait": "exact",
    "duration": "exact",
    "latency": "exact",
}

RETENTION = RetentionHint(
    rows_deleted_on_success=False,
    history_kept="forever, unless the worker runs with --delete-jobs or remove_old_jobs runs",
    warning=(
        "worker --delete-jobs (always/successful) deletes a finished job while it is still "
        "'doing', writes no terminal event and cascades its earlier events away: those "
        "jobs are never counted. remove_old_jobs only touches finished jobs older than its "
        "max_hours, which is harmless when max_hours is far above the poll interval."
    ),
)


class ProcrastinateReader(EventLogReader):
    """Reads procrastinate_jobs / procrastinate_events into gauges and exact tallies."""

    preset = PRESET
    library = "procrastinate"
    event_log = "procrastinate_events"
    default_stuck_after = STALLED_WORKER_TIMEOUT

    def statements(self) -> dict[str, str]:
        """profiles/sql/procrastinate.sql, with the event-log horizon over its log table."""
        return preset_queries(PRESET, event_log=self.event_log)

    def count(self, event: Row) -> None:
        """Add one procrastinate event (see the event types in docs/presets.md); procrastinate
        stores no failure reason, so every failure is an error."""
        kind = str(event["type"])
        task = str(event["job_type"])
        ledger = self.ledger
        if kind == "deferred":
            ledger.enqueued(task)
        elif kind == "deferred_for_retry":
            # doing -> todo: the attempt failed and the job was put back (retry strategy, or a
            # stalled job retried by hand): a failure, not a requeue by an operator.
            ledger.failed(task, ERROR)
        elif kind == "retried":
            ledger.requeued(task)  # failed -> todo, by hand
        elif kind == "failed":
            ledger.failed(task, ERROR)
            ledger.dead(task, ERROR)
        elif kind == "succeeded":
            self._observe(task, event)
        elif kind in ("cancelled", "aborted"):
            ledger.cancelled(task)

    def _observe(self, task: str, event: Row) -> None:
        """Histograms of one success, from the job's earlier events."""
        types: list[str] = list(event["types"] or [])
        ats: list[float] = list(event["ats"] or [])
        at = float(event["at"])
        started = last_index(types, {"started"})
        created = types.index("deferred") if "deferred" in types else None
        duration = wait = latency = None
        if started is not None:
            duration = at - ats[started]
            enqueued = last_index(types, ENQUEUE_EVENTS, before=started)
            scheduled = last_index(types, {"scheduled"}, before=started)
            # A scheduled event's "at" is the run time it asked for; an older one than the
            # last enqueue lies before that, so max() picks the moment the job became ready.
            ready = [ats[i] for i in (enqueued, scheduled) if i is not None]
            if ready:
                wait = ats[started] - max(ready)
        if created is not None:
            latency = at - ats[created]
        self.ledger.completed(task, duration, wait, latency)
