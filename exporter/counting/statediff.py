"""The in-place state diff: counting a library whose job row changes state in place (Oban, River).

Such a library keeps no event log: a job is one row whose state, ``attempt``, errors and
metadata change in place, and a finished row stays until a pruner deletes it. Each cycle reads
the row versions written since the previous snapshot within the library's index ranges (the
active set, the terminal-state windows, the ids above a settled watermark: the SQL is the
library's) and compares each with what was last known of that job (:meth:`StateNames.change`).
What differs between libraries is data: the names of the states (:class:`StateNames`).
docs/presets.md ("Oban") has the argument. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict, cast

from exporter.counting.gauges import Reading, first, reading_of, seconds
from exporter.counting.horizon import TIMESTAMP_MARGIN, Horizon, IdWatermark
from exporter.counting.reader import LedgerReader, planned
from exporter.counting.terminal import TerminalCursor
from exporter.model import CountingError, Query, Results, Row
from exporter.vocabulary import ERROR, LEASE_EXPIRED


class ChangeRow(TypedDict):
    """One row of a state-diff preset's ``changes`` statement: the contract its SQL keeps, one
    row per job version written since the previous snapshot (oban.sql's aliases are one)."""

    id: int  # the job's id (a bigint key)
    job_type: str  # what the job_type label is made of (Oban's worker, River's kind)
    state: str  # the job's state, as its StateNames spell it
    attempt: int  # attempts fetched so far (a snooze gives one back)
    errors: int  # error entries the row holds
    error_kinds: list[str] | None  # each entry's failure reason, oldest first
    rescued: int  # rescues back to waiting that left no error entry
    snoozed: int  # snoozes so far
    cancel_mark: str | None  # set by a cancel from outside the job (not one it returned)
    ended_at: float | None  # Unix seconds of its terminal state's stamp, if in one
    duration: float | None  # the last attempt's run time, seconds (completed rows)
    wait: float | None  # from due to the last attempt's start, seconds
    latency: float | None  # from insert to completion, seconds


# The gauges statement's rows carry every id of the active set, besides the gauges by job type.
GAUGE_IDS = "active_ids"
CHANGE_COLUMNS = frozenset(ChangeRow.__annotations__)


def change_rows(rows: Sequence[Row]) -> list[ChangeRow]:
    """The ``changes`` rows, checked against :class:`ChangeRow` (a missing column is a
    CountingError that names it, not a KeyError half-way through a cycle)."""
    if rows and (missing := CHANGE_COLUMNS - set(rows[0].keys())):
        raise CountingError(f"the changes statement lacks the columns {', '.join(sorted(missing))}")
    return [cast(ChangeRow, row) for row in rows]


@dataclass(frozen=True)
class RowState:
    """What the reader last knew of one job: the figures of its row that the deltas come from."""

    state: str
    attempt: int = 0
    errors: int = 0
    rescued: int = 0  # rescues back to waiting that left no error entry (Oban's meta.rescued)
    snoozed: int = 0  # snoozes: each gave its attempt back
    cancel_mark: str | None = None  # the mark of a cancel by hand, not one returned in-job
    ended_at: float | None = None  # the stamp of its terminal state, if in one


@dataclass
class StateDelta:
    """What happened to one job between two versions of its row."""

    completed: int = 0
    failures: tuple[str, ...] = ()  # one reason per failed attempt
    dead: str | None = None  # the reason, when the job was discarded
    retried: int = 0  # automatic retries: failed attempts not followed by the job's death
    by_hand: int = 0  # retries by hand (a finished job put back)
    cancelled: int = 0


@dataclass(frozen=True)
class StateNames:
    """What a library's job states mean: the whole of what this mode needs to know of it."""

    enum: str  # the SQL type of the state column, for the active-set literal
    waiting: frozenset[str]  # not running, not finished (available, scheduled, retryable, ...)
    running: str
    completed: str
    cancelled: str
    discarded: str  # dead: out of attempts, or discarded by the worker
    inserted: str = "available"  # the state of a job as inserted, before anything ran
    # Waiting states an older schema lacks (Oban's suspended): a "states" query, run once,
    # returns one boolean column per name, and the active set includes the ones present.
    optional: frozenset[str] = frozenset()

    @property
    def active(self) -> frozenset[str]:
        """Every state a job can still leave."""
        return self.waiting | {self.running}

    @property
    def terminal(self) -> frozenset[str]:
        """The states a job ends in (until put back by hand)."""
        return frozenset({self.completed, self.cancelled, self.discarded})

    def change(self, before: RowState, now: RowState, kinds: list[str]) -> StateDelta:
        """The deltas between two versions of one job's row; ``kinds`` bounds each error entry.

        Every fetch adds 1 to ``attempt`` (a snooze takes it back and counts in ``snoozed``),
        and every attempt ends in exactly one way: an error entry (a failure, or the reason of
        a cancel the worker returned), a snooze, a rescue to waiting (``rescued``), or an end
        state (completed; discarded by a rescuer that leaves no entry). So the attempts that
        ended and left no trace of their own are the end state's.
        """
        out = StateDelta()
        terminal = self.terminal
        ended = now.state in terminal and (
            before.state != now.state or before.ended_at != now.ended_at
        )
        if before.state in terminal and (
            now.state != before.state or now.ended_at != before.ended_at
        ):
            out.by_hand = 1  # only a finished job goes back this way
        fetches = (now.attempt - before.attempt) + (now.snoozed - before.snoozed)
        finished = fetches + (before.state == self.running) - (now.state == self.running)
        new_errors = max(0, now.errors - before.errors)
        rescued = now.rescued - before.rescued
        # A cancel by hand of a waiting job marks the row (``cancel_mark``) and appends
        # nothing; a cancel that ends an attempt (returned by the job, or River's cancel of a
        # running job, which its worker finalises) appends the attempt's entry, no failure.
        in_job_cancel = (
            ended
            and now.state == self.cancelled
            and (now.cancel_mark is None or now.cancel_mark == before.cancel_mark)
        )
        failed_kinds = kinds[len(kinds) - new_errors :] if new_errors else []
        if in_job_cancel and failed_kinds:
            failed_kinds = failed_kinds[:-1]
        traceless = finished - new_errors - (now.snoozed - before.snoozed) - rescued
        rescuer_discard = ended and now.state == self.discarded and traceless > 0
        out.failures = (*failed_kinds, *([LEASE_EXPIRED] * (rescued + rescuer_discard)))
        if ended:
            self._ended(out, now.state, LEASE_EXPIRED if rescuer_discard else None, kinds)
        # Every failed attempt is retried unless the job died; a death without a failed attempt
        # of its own (a rescuer discarding a waiting job out of attempts) withdraws the retry
        # counted when its last attempt failed.
        out.retried = len(out.failures) - (out.dead is not None)
        return out

    def _ended(self, out: StateDelta, state: str, reason: str | None, kinds: list[str]) -> None:
        if state == self.completed:
            out.completed = 1
        elif state == self.cancelled:
            out.cancelled = 1
        else:
            out.dead = reason or (kinds[-1] if kinds else ERROR)

    def returned(self, now: RowState, kinds: list[str]) -> StateDelta:
        """A finished job the reader had forgotten, back by hand since the previous snapshot:
        an end it shows is new; its figures before the retry are gone (not counted)."""
        out = StateDelta(by_hand=1)
        if now.state in self.terminal:
            self._ended(out, now.state, None, kinds)
        if out.dead is not None:
            out.retried = -1  # as for any death: retries = failures - deaths
        return out


class StateDiffReader(LedgerReader):
    """Reads a table of jobs changed in place into gauges and exact counts, one cycle at a time.

    The library's statements: horizon (the event-log horizon over the table's ids), snapshot,
    states (when ``states.optional``), gauges (given ``stuck_after``) and changes (given the
    windows' bound, the previous xmin and the settled id); ``{active}`` in them is replaced
    by the active states' literal.
    """

    states: StateNames
    # How far before the horizon an end stamp of a transaction it did not show can lie: the
    # database's now() needs TIMESTAMP_MARGIN; a library whose worker stamps the end with its
    # own clock (River's finalized_at) needs that clock's possible lag on top.
    clock_margin = TIMESTAMP_MARGIN
    # Whether ``changes`` takes a fourth argument, the ids of the jobs last seen running, and
    # returns their rows whatever their stamps: a job that was running can end with a stamp
    # older than any window (River's completer holds a finished job, stamped, while it
    # retries its write), and would otherwise be forgotten as deleted.
    follows_running = False

    def start(self) -> None:
        """The active states' SQL, the known jobs, the id watermark and the windows' cursor."""
        self.templates = self.sql
        self.sql = self._with_states(self.states.active - self.states.optional)
        self._states_known = not self.states.optional
        self.known: dict[int, RowState] = {}
        self.ids = IdWatermark()  # which ids are new: above the watermark and never seen
        # The windows' timestamp bound and the previous xmin.
        self.cursor = TerminalCursor(margin=self.clock_margin)
        self._lower_id: int | None = None

    @property
    def tracked(self) -> int:
        """Jobs whose last state the reader keeps, and new ids already seen."""
        return len(self.known) + len(self.ids.consumed)

    @property
    def held(self) -> int:
        """Of them, the finished jobs and seen ids kept until the horizon passes them."""
        terminal = self.states.terminal
        finished = {job_id for job_id, job in self.known.items() if job.state in terminal}
        return len(finished | self.ids.consumed)  # a new job that finished is held once

    def _with_states(self, states: frozenset[str]) -> dict[str, str]:
        literal = "'{" + ",".join(sorted(states)) + "}'::" + self.states.enum + "[]"
        return {name: sql.replace("{active}", literal) for name, sql in self.templates.items()}

    def queries(self, horizon: Row) -> list[Query]:
        """The cycle's statements, in order, for one REPEATABLE READ, READ ONLY transaction."""
        parsed = Horizon.from_row(horizon)
        self.ids.note(parsed)
        out = [Query("snapshot", self.sql["snapshot"])]
        if not self._states_known:
            out.append(Query("states", self.sql["states"]))
        out.append(Query("gauges", self.sql["gauges"], (self.stuck_after,)))
        # Counting waits for the states (a job in an optional state must be in the active set)
        # and for a settled id, below which every job is old.
        self._lower_id = self.ids.lower_id() if self._states_known else None
        window = self.cursor.plan(parsed) if self._lower_id is not None else None
        if window is not None:
            args: tuple[object, ...] = (*window, self._lower_id)
            if self.follows_running:
                running = self.states.running
                args += (sorted(i for i, job in self.known.items() if job.state == running),)
            out.append(Query("changes", self.sql["changes"], args))
        return out

    def apply(self, results: Results) -> Reading:
        """Count one cycle's rows into the ledger and return its gauges."""
        reading = reading_of(results, self.counting)
        if "states" in results:
            present = first(results["states"])
            self.sql = self._with_states(
                self.states.active - {s for s in self.states.optional if not present[s]}
            )
            self._states_known = True
            return reading
        if "changes" not in results:
            return self.delayed(reading)
        next_bound, lower_id = planned(self.cursor.next_bound, self._lower_id)
        rows = {int(row["id"]): row for row in change_rows(results["changes"])}
        if not self.counting:
            # The baseline: every version this snapshot shows happened before counting began.
            self.ids.watermark = int(lower_id)
            self.ids.absorb(job_id for job_id in rows if job_id > lower_id)
            self.known.update((job_id, _state_of(row)) for job_id, row in rows.items())
            self.counting = reading.counting = True
        else:
            for job_id, row in rows.items():
                self._count(job_id, row)
            self.ledger.settle()
        active = {int(i) for row in results["gauges"] for i in row[GAUGE_IDS]}
        self.ids.advance()
        self._forget(active, set(rows), next_bound)
        self.cursor.advance(str(first(results["snapshot"])["snapshot"]))
        return reading

    def _count(self, job_id: int, row: ChangeRow) -> None:
        worker = str(row["job_type"])
        now = _state_of(row)
        before = self.known.get(job_id)
        kinds = list(row["error_kinds"] or ())
        inserted = before is None and self.ids.fresh(job_id)
        if before is None and not inserted:
            # A finished job the reader had forgotten, back by hand since the previous
            # snapshot (docs/presets.md, "Oban": attempts failed in between are not counted).
            delta = self.states.returned(now, kinds)
        else:
            delta = self.states.change(before or RowState(self.states.inserted), now, kinds)
        self._record(worker, row, delta, inserted)
        self.known[job_id] = now

    def _record(self, worker: str, row: ChangeRow, delta: StateDelta, inserted: bool) -> None:
        ledger = self.ledger
        if inserted:
            ledger.enqueued(worker)
        for reason in delta.failures:
            ledger.failed(worker, reason)
        if delta.dead is not None:
            ledger.dead(worker, delta.dead)
        # Keeps the ledger's balance (retries - failures + deaths) at zero: the library tells
        # the retries by hand apart, so they are counted as they are.
        if delta.retried:
            ledger.retried(worker, delta.retried)
        for _ in range(delta.by_hand):
            ledger.requeued(worker)
        if delta.completed:
            ledger.completed(worker, seconds(row["duration"]), seconds(row["wait"]),
                             seconds(row["latency"]))  # fmt: skip
        if delta.cancelled:
            ledger.cancelled(worker)

    def _forget(self, active: set[int], seen: set[int], bound: float) -> None:
        """Drop jobs that no range of the next cycle can return again."""
        # The id range returns a version again while its id is above the watermark (its xmin
        # can be at or above this snapshot's xmin): a finished job is kept until both the
        # windows and the id range have passed it, or it would come back as a retry by hand.
        watermark = self.ids.watermark if self.ids.watermark is not None else 0
        for job_id, job in list(self.known.items()):
            if job.state in self.states.active:
                if job_id not in active and job_id not in seen:
                    del self.known[job_id]  # deleted while waiting
            elif (job.ended_at is None or job.ended_at < bound) and job_id <= watermark:
                del self.known[job_id]


def _state_of(row: ChangeRow) -> RowState:
    ended_at = row["ended_at"]
    return RowState(
        state=str(row["state"]),
        attempt=int(row["attempt"]),
        errors=int(row["errors"]),
        rescued=int(row["rescued"]),
        snoozed=int(row["snoozed"]),
        cancel_mark=row["cancel_mark"],
        ended_at=float(ended_at) if ended_at is not None else None,
    )
