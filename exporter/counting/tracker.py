"""Pure logic that turns changed rows into exact transition counts; no I/O.

The queue keeps no event log, only each job's current row. Every transition sets ``updated_at =
now()``; the change cursor (exporter/counting/change_cursor.py) hands the tracker each changed
row about once, in ``updated_at`` order, and tells it the *floor* below which no row will be
read again. Rows read twice (the baseline's active rows, or a fallback window) are recognised by
comparing with the last state the tracker saw of the same job, and the number of attempts tells
how many attempts ended in between, however many transitions happened between two reads. See
docs/exactness.md for the argument and its limits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from exporter.counting.deadids import DeadIds
from exporter.counting.results import (
    Outcome,
    ResultPaths,
    classify,
    decode_figures,
    decode_result,
    split_error,
)
from exporter.counting.status_rule import COUNTED, code_name, status_change
from exporter.counting.statuses import StatusValues, count_unmapped, show_status
from exporter.counting.unseen import FRESH, Seen, attempts_ended, requeued_meanwhile
from exporter.model import (
    DEAD,
    DONE,
    PENDING,
    RUNNING,
    JobRow,
    JobType,
    JobTypeLabels,
    Tallies,
)
from exporter.vocabulary import DEADLINE_PREFIX, ERROR, LEASE_EXPIRED, LEASE_EXPIRED_MARKER

# The label of the status a vanished job was last seen in.
_ACTIVE_NAMES: dict[int, str] = {PENDING: "pending", RUNNING: "running"}


@dataclass(frozen=True)
class TrackerOptions:
    """The settings the tracker needs."""

    commit_lag_tolerance: float
    deadline_prefix: str = DEADLINE_PREFIX
    lease_marker: str = LEASE_EXPIRED_MARKER
    paths: ResultPaths = field(default_factory=ResultPaths)
    # The mapped status values (None: the reference's numbers, and no statistics check).
    statuses: StatusValues | None = None


class Tracker:
    """Follows every job that can still change and counts its transitions exactly once."""

    def __init__(self, options: TrackerOptions, labels: JobTypeLabels, tallies: Tallies) -> None:
        self.options = options
        self.labels = labels
        self.tallies = tallies
        self._known: dict[str, Seen] = {}
        # The ids in _known whose state is not PENDING or RUNNING (done, dead, or a status
        # outside the four): only these can be forgotten, and walking them alone keeps a
        # cycle's cost off the size of the pending backlog.
        self._finished: set[str] = set()
        # How many jobs of _known are PENDING and RUNNING: compared with the table's count.
        self._active: Counter[int] = Counter()
        self._rotation = 0  # where the next partial recheck of suspects starts
        self._started_at: float | None = None  # database time of the baseline
        self._last_at: float | None = None  # database time of the last applied cycle
        # Dead jobs the tracker does not keep (dead at the baseline, or dead and forgotten
        # since): an unknown row is a requeue only if its id is here (see _apply_row).
        self.dead_ids = DeadIds()
        # No row below the floor will be read again: settled jobs below it are forgotten.
        self._floor: float | None = None
        # Change in the number of DEAD rows per job_type since the reader last cleared it, so
        # the dead-letter gauge can be kept current without counting the dead letter every cycle.
        self.dead_delta: Counter[JobType] = Counter()
        # Finished jobs kept because the floor has not passed them yet (see held).
        self._held = 0
        # Unmapped status values named for the first time: (as shown, the row's own text),
        # taken by the counting mode each cycle. At most MAX_NAMED + 1 in a lifetime.
        self.unmapped_new: list[tuple[str, str | None]] = []
        # The first row found changed without a stamp, for the one log line that says so.
        self.unstamped_first: JobRow | None = None

    @property
    def started(self) -> bool:
        """True once a baseline has been taken."""
        return self._started_at is not None

    @property
    def tracked(self) -> int:
        """How many jobs' last state is kept."""
        return len(self._known)

    @property
    def held(self) -> int:
        """How many finished jobs (DONE, DEAD, or in a status outside the four) are kept only
        because the floor has not passed them yet, as of the last cycle: a long transaction
        holds the floor back, and these grow by one per job finished meanwhile
        (docs/exactness.md)."""
        return self._held

    def since(self) -> float:
        """Lower bound of ``updated_at`` for the next read: the floor, else the tolerance window."""
        if self._last_at is None:
            raise RuntimeError("no baseline yet")
        if self._floor is not None:
            return self._floor
        return self._last_at - self.options.commit_lag_tolerance

    def baseline(
        self,
        now: float,
        active: list[JobRow],
        changed: list[JobRow],
        *,
        origin: float | None = None,
        dead_ids: Iterable[str] = (),
    ) -> None:
        """Remember the state at the first successful collection; nothing before it counts.

        ``origin``: no row below it will be read (the cursor's start); ``dead_ids``: the
        jobs that were DEAD in the baseline's snapshot.
        """
        self._known = {}
        self._finished = set()
        self._active = Counter()
        for row in [*active, *changed]:
            self._remember(row.job_id, Seen.of(row), self._known.get(row.job_id))
            self.labels.label(row.job_type)
        self.dead_ids = DeadIds(dead_ids)
        self._started_at = now
        self._last_at = now
        self._floor = origin
        self._forget_settled()

    def apply(self, now: float, changed: list[JobRow], *, floor: float | None = None) -> None:
        """Count the transitions that ``changed`` reveals; ``floor`` as in :meth:`finish`."""
        self.dead_delta = Counter()
        self.begin()
        self.feed(changed)
        self.finish(now, floor=floor)

    def begin(self) -> None:
        """Start a cycle (its rows may come in several chunks through :meth:`feed`)."""
        if self._started_at is None:
            raise RuntimeError("begin() before baseline()")

    def feed(self, changed: list[JobRow]) -> None:
        """Count the transitions that one chunk of changed rows reveals."""
        for row in changed:
            self._apply_row(row)

    def finish(self, now: float, *, floor: float | None = None) -> None:
        """End a cycle at database time ``now``; ``floor``: no row below it is read again
        (None: the tolerance window before ``now``, for readers that re-read a window)."""
        self._last_at = now
        self._floor = floor
        self._forget_settled()

    def active_ids_not_in_window(self) -> list[str]:
        """Active jobs the change reads will not see again unless they change: checked now and
        then for deletion."""
        window_start = self.since()
        return [
            job_id
            for job_id, seen in self._known.items()
            if seen.status in (PENDING, RUNNING) and seen.updated_at <= window_start
        ]

    def forget(self, job_ids: list[str]) -> None:
        """Drop jobs that no longer exist (purged rows), so memory stays bounded; an active one
        vanished before any read saw it end, and is counted so, by the status last seen."""
        for job_id in job_ids:
            seen = self._known.pop(job_id, None)
            self._finished.discard(job_id)
            if seen is not None and seen.status in _ACTIVE_NAMES:
                self._active[seen.status] -= 1
                self.tallies.vanished[_ACTIVE_NAMES[seen.status]] += 1

    def suspects(self, table: Mapping[int, int], floor: float, limit: int) -> list[str]:
        """Tracked jobs to look up by id when the table holds fewer PENDING or RUNNING rows
        (``table``, by status) than the tracker: those last read in such a status below
        ``floor``, where no read returns them unless they change with a stamp. At most
        ``limit``, a different slice each call when there are more."""
        short = {s for s in _ACTIVE_NAMES if self._active[s] > table.get(s, 0)}
        if not short:
            return []
        ids = [
            job_id
            for job_id, seen in self._known.items()
            if seen.status in short and seen.updated_at < floor
        ]
        if len(ids) <= limit:
            return ids
        start = self._rotation % len(ids)
        self._rotation = start + limit
        return (ids[start:] + ids[:start])[:limit]

    def settle_unread(self, asked: list[str], rows: list[JobRow], floor: float) -> None:
        """Settle the suspects looked up by id (``rows``, the ones that exist): a missing one was
        deleted (vanished); one whose row changed while its ``updated_at`` stayed below
        ``floor`` changed without a stamp, and no read will ever return that change: it is
        counted as unstamped, in no other count, and remembered as it is now. A change stamped
        at or above ``floor`` is left to the change reads, which count it."""
        found = {row.job_id: row for row in rows}
        self.forget([job_id for job_id in asked if job_id not in found])
        for row in rows:
            known = self._known.get(row.job_id)
            seen = Seen.of(row)
            if known is None or known == seen or row.updated_at >= floor:
                continue
            self._remember(row.job_id, seen, known)
            self.tallies.unstamped[code_name(row.status)] += 1
            if row.status == DEAD:
                self.dead_delta[row.job_type] += 1  # the dead-letter gauge follows the rows
            if self.unstamped_first is None:
                self.unstamped_first = row

    def _apply_row(self, row: JobRow) -> None:
        assert self._started_at is not None
        known = self._known.get(row.job_id)
        seen = Seen.of(row)
        if known == seen:
            return  # read again (past the horizon's bound, or in a fallback window): counted
        self._remember(row.job_id, seen, known)
        # Dead at the baseline (or dead and forgotten since), changed now: it was DEAD.
        dead_unknown = known is None and row.job_id in self.dead_ids
        before = DEAD if dead_unknown else (known.status if known is not None else None)
        change = status_change(before, row.status)  # the rule: exporter/counting/status_rule.py
        if change.unmapped:
            self._count_unmapped(row)
        if row.updated_at <= self._started_at:
            return  # changed before the baseline: history, not a transition we saw
        label = self.labels.label(row.job_type)
        tallies = self.tallies
        if dead_unknown:
            self.dead_ids.discard(row.job_id)
        if change.enqueued:
            # Not known before, or back from a status outside the four: its insert became
            # visible after the baseline, whatever its created_at (an archive restore, a
            # transaction prepared before the baseline), or it came back into the flow.
            tallies.enqueued[label] += 1
        if change.cancelled:
            tallies.cancelled[label] += 1
        if before == DEAD:
            self.dead_delta[row.job_type] -= 1  # it left the dead letter (perhaps to die again)
        if not change.transition:
            return
        if before == DEAD:
            tallies.requeued[label] += 1
            previous = FRESH
        elif known is None:
            previous = FRESH
        elif known.status not in COUNTED:
            previous = known  # back into the flow: as a waiting job, with the attempts it had
        elif requeued_meanwhile(known, row):
            # The job died and was requeued between two cycles: its attempts went down, or a new
            # attempt started without the count going up. The attempts it had left all failed.
            lost = known.max_attempts - known.attempts + (1 if known.status == RUNNING else 0)
            reason = self._reason_of_unseen(row, known)
            if lost > 0:
                tallies.failures[(label, reason)] += lost
            tallies.dead[(label, reason)] += 1
            tallies.requeued[label] += 1
            previous = FRESH
        else:
            previous = known
        self._count_since(previous, row, label)

    def _count_unmapped(self, row: JobRow) -> None:
        # Counted once per change read (a row read again is recognised above); its other
        # counts go on as they did: a status none of the four is no transition of them.
        statuses = self.options.statuses
        numeric = statuses is None or statuses.numeric
        shown = show_status(row.status_text, numeric=numeric)
        key = count_unmapped(self.tallies.unmapped_status, shown)
        if key is not None:
            self.unmapped_new.append((key, row.status_text))

    def _remember(self, job_id: str, seen: Seen, known: Seen | None) -> None:
        if known is not None and known.status in _ACTIVE_NAMES:
            self._active[known.status] -= 1
        self._known[job_id] = seen
        if seen.status in _ACTIVE_NAMES:
            self._active[seen.status] += 1
            self._finished.discard(job_id)
        else:
            self._finished.add(job_id)

    def _count_since(self, previous: Seen, row: JobRow, label: str) -> None:
        """Count attempts that ended between ``previous`` and ``row`` (no requeue in between)."""
        ended = attempts_ended(previous, row)
        completed = 1 if row.status == DONE else 0
        failures = max(0, ended - completed)
        if failures:
            self._count_failures(row, previous, label, failures)
        if row.status == DEAD:
            self.tallies.dead[(label, self._latest_reason(row))] += 1
            self.dead_delta[row.job_type] += 1
        if completed:
            self._count_completion(row, label)

    def _count_failures(self, row: JobRow, previous: Seen, label: str, failures: int) -> None:
        # The newest failures are the reclaims recorded as markers at the end of last_error;
        # the one before them set the message. Older failures in the same interval had their
        # message overwritten before any cycle read it: they are given the reason of the
        # message that replaced them (a job that fails twice usually fails the same way).
        error = split_error(row.last_error, self.options.lease_marker)
        reclaims = min(failures, error.reclaims)
        if reclaims:
            self.tallies.failures[(label, LEASE_EXPIRED)] += reclaims
        rest = failures - reclaims
        if rest:
            reason = self._reason_of_unseen(row, previous)
            self.tallies.failures[(label, reason)] += rest

    def _reason_of_unseen(self, row: JobRow, previous: Seen) -> str:
        for text in (row.last_error, previous.last_error):
            base = split_error(text, self.options.lease_marker).base
            if base:
                return classify(base, self.options.deadline_prefix)
        return ERROR

    def _latest_reason(self, row: JobRow) -> str:
        error = split_error(row.last_error, self.options.lease_marker)
        if error.reclaims:
            return LEASE_EXPIRED
        return classify(error.base, self.options.deadline_prefix)

    def _count_completion(self, row: JobRow, label: str) -> None:
        tallies = self.tallies
        tallies.completed[label] += 1
        if row.figures is not None:
            outcome = decode_figures(row.figures, self.options.paths)
        else:
            outcome = decode_result(row.result, self.options.paths)
        for field_name in outcome.malformed:
            tallies.malformed[field_name] += 1
        for component, usd in outcome.cost.items():
            tallies.add_cost(label, component, usd)
        wait = row.wait_seconds
        if wait is None:
            started = row.run_started_at if row.run_started_at is not None else row.run_after
            wait = started - row.run_after
        latency = row.latency_seconds
        if latency is None:
            latency = row.updated_at - row.created_at
        tallies.observe(
            label, _duration(row, outcome), wait=max(0.0, wait), latency=max(0.0, latency)
        )

    def _forget_settled(self) -> None:
        # Finished rows are kept only while a read can still return them again. A dead job
        # leaves its id in dead_ids (8 bytes), so its requeue is still told from a new job.
        floor = self.since()
        known = self._known
        settled = [job_id for job_id in self._finished if known[job_id].updated_at < floor]
        for job_id in settled:
            if known.pop(job_id).status == DEAD:
                self.dead_ids.add(job_id)
        self._finished.difference_update(settled)
        self._held = len(self._finished)


def _duration(row: JobRow, outcome: Outcome) -> float | None:
    # The worker's own figure when result holds one; else the row's: a DONE row's updated_at
    # is the now() of its completion, and run_started_at the start of the attempt that ended.
    if outcome.duration_seconds is not None:
        return outcome.duration_seconds
    if row.run_seconds is not None:
        return max(0.0, row.run_seconds)
    if row.run_started_at is not None:
        return max(0.0, row.updated_at - row.run_started_at)
    return None
