"""The Oban preset (Oban Python 0.7, Elixir Oban 2.x): terminal-state windows, active-set diff.

Oban keeps no event log: a job is one row of ``oban_jobs`` whose state, ``attempt``,
``errors`` and ``meta`` change in place. Each cycle the reader reads the row versions written
since the previous snapshot within five index ranges (the active set, three terminal-state
windows, the ids above a settled watermark) and compares each with what it last knew of that
job (:func:`change`). docs/presets.md ("Oban") has the argument.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.counting.cycle import PresetError, Query, Results, Row
from exporter.counting.gauges import Reading, first, reading_of
from exporter.counting.horizon import Horizon, IdWatermark
from exporter.counting.ledger import Ledger
from exporter.counting.reader import LedgerReader
from exporter.counting.terminal import TerminalCursor
from exporter.profiles.base import EXACT_GAUGES, Exactness, RetentionHint, preset_queries
from exporter.vocabulary import ERROR, LEASE_EXPIRED

PRESET = "oban"
# Oban Python's Lifeline default (rescue_after); Elixir Oban's is 60 min: pass yours.
RESCUE_AFTER = 300.0
# Elixir Oban's Pruner default max_age: the shorter of the two libraries' (Python: 1 day).
PRUNER_MAX_AGE = 60.0
ACTIVE_STATES = frozenset({"available", "scheduled", "suspended", "executing", "retryable"})
TERMINAL_STATES = frozenset({"completed", "discarded", "cancelled"})

CAPABILITIES: dict[str, Exactness] = {
    **EXACT_GAUGES,
    "held": "not exported",  # discarded rows are history, kept until the Pruner runs
    "enqueued": "exact",
    "completed": "exact",
    "failures": "exact",
    "failure_reason": "exact",  # lease_expired (Lifeline rescue), deadline (timeout), error
    "failure_deadline": "exact",
    "dead": "exact",
    "requeued": "exact",
    "cancelled": "exact",
    "wait": "exact",  # of the last attempt: scheduled_at -> attempted_at
    "duration": "exact",  # of the last attempt: attempted_at -> completed_at
    "latency": "exact",
}

RETENTION = RetentionHint(
    rows_deleted_on_success=False,
    history_kept=(
        "completed, discarded and cancelled jobs until the Pruner deletes them: max_age after "
        "they end, 60 s by default in Elixir Oban, 1 day in Oban Python"
    ),
    warning=(
        "a job that ends and is pruned between two cycles is never counted: keep the "
        "collection interval at most half of the Pruner's max_age"
    ),
    seconds=PRUNER_MAX_AGE,
)


@dataclass(frozen=True)
class JobState:
    """What the reader last knew of one job: the figures of its row that the deltas come from."""

    state: str
    attempt: int = 0
    errors: int = 0
    rescued: int = 0  # meta.rescued: Lifeline rescues back to available
    snoozed: int = 0  # meta.snoozed: each snooze gave its attempt back
    cancel_mark: str | None = None  # meta.cancel_attempted_at: a cancel by hand, not in-job
    ended_at: float | None = None  # the stamp of its terminal state, if in one


# A job the reader has not seen: as inserted, before anything ran.
INSERTED = JobState("available")


@dataclass
class Change:
    """What happened to one job between two versions of its row."""

    completed: int = 0
    failures: tuple[str, ...] = ()  # one reason per failed attempt
    dead: str | None = None  # the reason, when the job was discarded
    retried: int = 0  # automatic retries: failed attempts not followed by the job's death
    by_hand: int = 0  # retries by hand (retry_job of a finished job)
    cancelled: int = 0


def change(before: JobState, now: JobState, kinds: list[str]) -> Change:
    """The deltas between two versions of one job's row; ``kinds`` bounds each error entry.

    Every fetch adds 1 to ``attempt`` (a snooze takes it back and counts in meta.snoozed), and
    every attempt ends in exactly one way: an error entry (a failure, or the reason of a Cancel
    the worker returned), a snooze, a Lifeline rescue to available (meta.rescued), or an end
    state (completed; discarded by the Lifeline, which leaves no entry). So the attempts that
    ended and left no trace of their own are the end state's.
    """
    out = Change()
    ended = now.state in TERMINAL_STATES and (
        before.state != now.state or before.ended_at != now.ended_at
    )
    if before.state in TERMINAL_STATES and (
        now.state != before.state or now.ended_at != before.ended_at
    ):
        out.by_hand = 1  # retry_job: only a finished job goes back this way
    fetches = (now.attempt - before.attempt) + (now.snoozed - before.snoozed)
    finished = fetches + (before.state == "executing") - (now.state == "executing")
    new_errors = max(0, now.errors - before.errors)
    rescued = now.rescued - before.rescued
    # A cancel by hand marks meta; a Cancel returned by the worker appends its reason instead.
    in_job_cancel = ended and now.state == "cancelled" and now.cancel_mark == before.cancel_mark
    failed_kinds = kinds[len(kinds) - new_errors :] if new_errors else []
    if in_job_cancel and failed_kinds:
        failed_kinds = failed_kinds[:-1]
    traceless = finished - new_errors - (now.snoozed - before.snoozed) - rescued
    lifeline_discard = ended and now.state == "discarded" and traceless > 0
    out.failures = (*failed_kinds, *([LEASE_EXPIRED] * (rescued + lifeline_discard)))
    if ended:
        if now.state == "completed":
            out.completed = 1
        elif now.state == "cancelled":
            out.cancelled = 1
        else:
            out.dead = LEASE_EXPIRED if lifeline_discard else (kinds[-1] if kinds else ERROR)
    # Every failed attempt is retried unless the job died; a death without a failed attempt of
    # its own (the Lifeline discarding an available job out of attempts) withdraws the retry
    # counted when its last attempt failed.
    out.retried = len(out.failures) - (out.dead is not None)
    return out


class ObanReader(LedgerReader):
    """Reads oban_jobs into gauges and exact counts, one cycle at a time."""

    preset = PRESET
    event_log = "oban_jobs"  # not a log: the table whose ids the horizon's watermark reads

    def __init__(self, rescue_after: float | None = None, ledger: Ledger | None = None) -> None:
        self.rescue_after = rescue_after if rescue_after is not None else RESCUE_AFTER
        self.templates = preset_queries(PRESET, event_log=self.event_log)
        super().__init__(self._with_states(ACTIVE_STATES - {"suspended"}), ledger)
        self._states_known = False
        self.known: dict[int, JobState] = {}
        self.ids = IdWatermark()  # which ids are new: above the watermark and never seen
        self.cursor = TerminalCursor()  # the windows' timestamp bound and the previous xmin
        self._lower_id: int | None = None

    def _with_states(self, states: frozenset[str]) -> dict[str, str]:
        literal = "'{" + ",".join(sorted(states)) + "}'::oban_job_state[]"
        return {name: sql.replace("{active}", literal) for name, sql in self.templates.items()}

    def queries(self, horizon: Row) -> list[Query]:
        """The cycle's statements, in order, for one REPEATABLE READ, READ ONLY transaction."""
        parsed = Horizon.from_row(horizon)
        self.ids.note(parsed)
        out = [Query("snapshot", self.sql["snapshot"])]
        if not self._states_known:
            out.append(Query("states", self.sql["states"]))
        out.append(Query("gauges", self.sql["gauges"], (self.rescue_after,)))
        # Counting waits for the states (a suspended job must be in the active set) and for a
        # settled id, below which every job is old.
        self._lower_id = self.ids.lower_id() if self._states_known else None
        planned = self.cursor.plan(parsed) if self._lower_id is not None else None
        if planned is not None:
            out.append(Query("changes", self.sql["changes"], (*planned, self._lower_id)))
        return out

    def apply(self, results: Results) -> Reading:
        """Count one cycle's rows into the ledger and return its gauges."""
        reading = reading_of(results, self.counting)
        if "states" in results:
            if first(results["states"])["suspended"]:
                self.sql = self._with_states(ACTIVE_STATES)
            self._states_known = True
            return reading
        if "changes" not in results:
            reading.warnings.append("a long or prepared transaction delays the Oban baseline")
            return reading
        next_bound = self.cursor.next_bound
        if next_bound is None or self._lower_id is None:
            raise PresetError("apply() before queries()")
        rows = {int(row["id"]): row for row in results["changes"]}
        if not self.counting:
            # The baseline: every version this snapshot shows happened before counting began.
            self.ids.watermark = self._lower_id
            self.ids.absorb(job_id for job_id in rows if job_id > self._lower_id)
            self.known.update((job_id, _state_of(row)) for job_id, row in rows.items())
            self.counting = reading.counting = True
        else:
            for job_id, row in rows.items():
                self._count(job_id, row)
            self.ledger.settle()
        active = {int(i) for row in results["gauges"] for i in row["active_ids"]}
        self._forget(active, set(rows), next_bound)
        self.ids.advance()
        self.cursor.advance(str(first(results["snapshot"])["snapshot"]))
        return reading

    def _count(self, job_id: int, row: Row) -> None:
        worker = str(row["job_type"])
        now = _state_of(row)
        before = self.known.get(job_id)
        kinds = list(row["error_kinds"] or ())
        inserted = before is None and self.ids.fresh(job_id)
        if before is None and not inserted:
            # A finished job the reader had forgotten, back by hand (retry_job) since the
            # previous snapshot, so an end it shows is new. Its figures before the retry are
            # gone: attempts that failed in between are not counted (docs/presets.md, "Oban").
            delta = Change(by_hand=1)
            if now.state == "completed":
                delta.completed = 1
            elif now.state == "cancelled":
                delta.cancelled = 1
            elif now.state == "discarded":
                delta.dead = kinds[-1] if kinds else ERROR
                delta.retried = -1  # as for any death: retries = failures - deaths
        else:
            delta = change(before or INSERTED, now, kinds)
        self._record(worker, row, delta, inserted)
        self.known[job_id] = now

    def _record(self, worker: str, row: Row, delta: Change, inserted: bool) -> None:
        ledger = self.ledger
        if inserted:
            ledger.enqueued(worker)
        for reason in delta.failures:
            ledger.failed(worker, reason)
        if delta.dead is not None:
            ledger.dead(worker, delta.dead)
        # Keeps the ledger's balance (retries - failures + deaths) at zero: Oban tells the
        # retries by hand apart, so they are counted as they are.
        if delta.retried:
            ledger.retried(worker, delta.retried)
        for _ in range(delta.by_hand):
            ledger.requeued(worker)
        if delta.completed:
            ledger.completed(worker, _float(row["duration"]), _float(row["wait"]),
                             _float(row["latency"]))  # fmt: skip
        if delta.cancelled:
            ledger.cancelled(worker)

    def _forget(self, active: set[int], seen: set[int], bound: float) -> None:
        """Drop jobs that no range of the next cycle can return again."""
        for job_id, job in list(self.known.items()):
            if job.state in ACTIVE_STATES:
                if job_id not in active and job_id not in seen:
                    del self.known[job_id]  # deleted while waiting (delete_job)
            elif job.ended_at is None or job.ended_at < bound:
                del self.known[job_id]


def _state_of(row: Row) -> JobState:
    ended_at = row["ended_at"]
    return JobState(
        state=str(row["state"]),
        attempt=int(row["attempt"]),
        errors=int(row["errors"]),
        rescued=int(row["rescued"]),
        snoozed=int(row["snoozed"]),
        cancel_mark=row["cancel_mark"],
        ended_at=float(ended_at) if ended_at is not None else None,
    )


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None
