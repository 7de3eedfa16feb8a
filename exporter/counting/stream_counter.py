"""Committed row changes of the queue's table into the counters polling feeds; no I/O.

The logical counting mode (docs/logical.md) reads each committed INSERT, UPDATE and DELETE of
the job table from a replication slot, with the old row (REPLICA IDENTITY FULL, or an identity
index that carries the status) and the new one. Every transition is then seen, in commit order,
however many happen between two collections: the counts come from the two rows of each change,
never from a guess. Values arrive as PostgreSQL's text output, keyed by the table's column
names; the table mapping says which column plays which role and what each status value is.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from exporter.counting.results import classify, decode_result, split_error
from exporter.counting.statuses import count_unmapped, show_status
from exporter.counting.tracker import TrackerOptions
from exporter.model import DEAD, DONE, PENDING, RUNNING, JobType, JobTypeLabels, Tallies
from exporter.model.row_changes import (
    DELETE,
    INSERT,
    TRUNCATE,
    UPDATE,
    RowChange,
    TextRow,
    Transaction,
)
from exporter.settings.table import TableMapping
from exporter.vocabulary import LEASE_EXPIRED, Status

# The label of the status an active job had when its row was deleted.
ACTIVE_NAMES: dict[int, str] = {PENDING: "pending", RUNNING: "running"}


class ChangeCounter:
    """Counts each committed change once, in commit order, into the queue's Tallies."""

    def __init__(
        self,
        mapping: TableMapping,
        options: TrackerOptions,
        labels: JobTypeLabels,
        tallies: Tallies,
    ) -> None:
        self.options = options
        self.labels = labels
        self.tallies = tallies
        self._column = {role: mapping.column(role) for role in mapping.columns}
        self._codes = {str(value): code for code, value in _codes(mapping).items()}
        self._numeric = all(isinstance(v, int) for v in mapping.status_values.values())
        # End of the last counted commit: a transaction the server sends again (after its
        # crash, or a reconnect before a confirmation) ends no later, and is skipped.
        self.position = 0
        self.changes = 0  # changes counted since start
        self.skipped = 0  # transactions sent again and not counted twice
        self.truncates = 0  # TRUNCATEs of the table: rows gone without a change each
        # Change in the number of DEAD rows per job_type, taken by the mode's dead gauge.
        self.dead_delta: Counter[JobType] = Counter()
        # Unmapped status values named for the first time (shown, the row's text).
        self.unmapped_new: list[tuple[str, str | None]] = []

    def apply(self, transaction: Transaction) -> bool:
        """Count one committed transaction; False when it was counted before (sent again)."""
        if transaction.end_lsn <= self.position:
            self.skipped += 1
            return False
        for change in transaction.changes:
            self._apply(change, transaction.commit_time)
            self.changes += 1
        self.position = transaction.end_lsn
        return True

    # --- one change ---------------------------------------------------------------------

    def _apply(self, change: RowChange, commit_time: float) -> None:
        if change.kind == TRUNCATE:
            self.truncates += 1
            return
        if change.kind == INSERT and change.new is not None:
            self.tallies.enqueued[self._label(change.new)] += 1
            # A row inserted finished (an archive restore) is counted as if it had been
            # inserted pending and then changed, as polling counts a row it meets first.
            self._transition(PENDING, {}, change.new, commit_time)
        elif change.kind == UPDATE and change.new is not None:
            old = change.old
            if old is None or self._column["status"] not in old:
                # An identity index on (job_id, status) sends no old key when neither changed.
                old = {
                    **(old or {}),
                    self._column["status"]: change.new.get(self._column["status"]),
                }
            self._transition(self._status(old, count=False), old, change.new, commit_time)
        elif change.kind == DELETE and change.old is not None:
            status = self._status(change.old, count=False)
            if status in ACTIVE_NAMES:
                # Gone before it finished (retention, a manual cleanup): not a completion.
                self.tallies.vanished[ACTIVE_NAMES[status]] += 1
            elif status == DEAD:
                self.dead_delta[self._job_type(change.old)] -= 1
            # A finished (DONE) row was counted when it finished.

    def _transition(
        self, before: int | None, old: TextRow, new: TextRow, commit_time: float
    ) -> None:
        after = self._status(new)
        if after is None:
            return
        if before == DONE:
            return  # DONE is terminal in the queue; a changed DONE row is not ours to count
        label = self._label(new)
        tallies = self.tallies
        job_type = self._job_type(new)
        if before == DEAD and after != DEAD:
            self.dead_delta[job_type] -= 1
            if after == PENDING:
                tallies.requeued[label] += 1
            return
        if after == DONE and before in (PENDING, RUNNING):
            self._count_completion(old, new, label, commit_time)
        elif after == PENDING and before == RUNNING:
            if self._released(old, new):
                return  # handed back (attempts - 1): no attempt failed, nothing to count
            tallies.failures[(label, self._reason(new))] += 1
        elif after == DEAD and before != DEAD:
            reason = self._reason(new)
            if before == RUNNING:
                tallies.failures[(label, reason)] += 1  # the attempt that killed it
            tallies.dead[(label, reason)] += 1
            self.dead_delta[job_type] += 1

    def _released(self, old: TextRow, new: TextRow) -> bool:
        # A worker that hands its job back lowers attempts, which no failure does. Without
        # the old attempts (an identity index that does not carry them) it reads as a failure.
        before, after = (
            _int(old.get(self._column["attempts"])),
            _int(new.get(self._column["attempts"])),
        )
        return before is not None and after is not None and after < before

    def _reason(self, new: TextRow) -> str:
        # The newest failure: a reclaim when the reaper's marker ends last_error, else the
        # worker's message (NOTES.md: the text before the marker belongs to an earlier one).
        error = split_error(new.get(self._column["last_error"]), self.options.lease_marker)
        if error.reclaims:
            return LEASE_EXPIRED
        return classify(error.base, self.options.deadline_prefix)

    def _count_completion(self, old: TextRow, new: TextRow, label: str, commit_time: float) -> None:
        tallies = self.tallies
        tallies.completed[label] += 1
        outcome = decode_result(new.get(self._column["result"]), self.options.paths)
        for field_name in outcome.malformed:
            tallies.malformed[field_name] += 1
        for component, usd in outcome.cost.items():
            tallies.add_cost(label, component, usd)
        # The completion's moment: updated_at when the completing statement set it, else the
        # commit (an application that completes without touching updated_at).
        # Differences of datetimes, exact to the microsecond as polling's SQL computes them
        # (a difference of two Unix times as floats is not).
        updated = self._time(new, "updated_at")
        end = updated if updated is not None and updated != self._time(old, "updated_at") else None
        end = datetime.fromtimestamp(commit_time, UTC) if end is None else end
        started = self._time(new, "run_started_at")
        run_after = self._time(new, "run_after")
        created = self._time(new, "created_at")
        duration = outcome.duration_seconds
        if duration is None and started is not None:
            duration = max(0.0, (end - started).total_seconds())
        wait = None
        if run_after is not None:
            wait = max(0.0, ((started or run_after) - run_after).total_seconds())
        latency = max(0.0, (end - created).total_seconds()) if created is not None else None
        tallies.observe(label, duration, wait=wait, latency=latency)

    # --- values -------------------------------------------------------------------------

    def _status(self, row: TextRow, *, count: bool = True) -> int | None:
        column = self._column["status"]
        if column not in row:
            return None
        text = row[column]
        code = self._codes.get(text) if text is not None else None
        if code is None and count:
            # Counted once per change, from its new row: the old one was counted as new.
            key = count_unmapped(
                self.tallies.unmapped_status, show_status(text, numeric=self._numeric)
            )
            if key is not None:
                self.unmapped_new.append((key, text))
        return code

    def _job_type(self, row: TextRow) -> JobType:
        text = row.get(self._column["job_type"])
        if text is None:
            return ""
        return int(text) if text.lstrip("-").isdigit() and text.isascii() else text

    def _label(self, row: TextRow) -> str:
        return self.labels.label(self._job_type(row))

    def _time(self, row: TextRow, role: str) -> datetime | None:
        column = self._column.get(role)
        text = row.get(column) if column is not None else None
        return parse_time(text) if text is not None else None


def _codes(mapping: TableMapping) -> dict[int, int | str]:
    return {int(status): mapping.value(status) for status in Status}


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def parse_time(text: str) -> datetime | None:
    """A timestamptz's text output (DateStyle ISO); None for infinity."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None
