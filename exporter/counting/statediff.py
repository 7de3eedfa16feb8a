"""The in-place state diff: counting a library whose job row changes state in place (Oban, River,
GoodJob).

Such a library keeps no event log: a job is one row whose state, ``attempt``, errors and
metadata change in place, and a finished row stays until a pruner deletes it. Each cycle reads
the row versions written since the previous snapshot within the library's index ranges (the
active set, the terminal-state windows, the ids above a settled watermark: the SQL is the
library's) and compares each with what was last known of that job (:meth:`StateNames.change`).
What differs between libraries is data: the names of the states (:class:`StateNames`), and
whether the table's ids come from a sequence (:attr:`StateDiffReader.sequence_ids`).
docs/presets.md ("Oban", "GoodJob") has the argument. No I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TypedDict, cast

from exporter.counting.gauges import Reading, first, reading_of, seconds
from exporter.counting.horizon import TIMESTAMP_MARGIN, Horizon, IdWatermark
from exporter.counting.reader import LedgerReader, planned
from exporter.counting.state_change import RowState, StateDelta, StateNames
from exporter.counting.terminal import TerminalCursor
from exporter.model import CountingError, Query, Results, Row

# A job's id: a bigint from a sequence (Oban, River), or a uuid's text (GoodJob).
JobKey = int | str


class ChangeRow(TypedDict):
    """One row of a state-diff preset's ``changes`` statement: the contract its SQL keeps, one
    row per job version written since the previous snapshot (oban.sql's aliases are one)."""

    id: JobKey  # the job's id
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


class SnapshotChangeRow(ChangeRow):
    """A ``changes`` row of a table whose ids come from no sequence (GoodJob's uuids): no id
    watermark tells a new job from one the reader forgot, so the row says it."""

    existed: bool | None  # the job was in the previous snapshot (None at the baseline)


# The gauges statement's rows carry every id of the active set, besides the gauges by job type.
GAUGE_IDS = "active_ids"
CHANGE_COLUMNS = frozenset(ChangeRow.__annotations__)
SNAPSHOT_CHANGE_COLUMNS = frozenset(SnapshotChangeRow.__annotations__)


def change_rows(rows: Sequence[Row], columns: frozenset[str] = CHANGE_COLUMNS) -> list[ChangeRow]:
    """The ``changes`` rows, checked against :class:`ChangeRow` (or ``columns``: a missing column
    is a CountingError that names it, not a KeyError half-way through a cycle)."""
    if rows and (missing := columns - set(rows[0].keys())):
        raise CountingError(f"the changes statement lacks the columns {', '.join(sorted(missing))}")
    return [cast(ChangeRow, row) for row in rows]


class StateDiffReader(LedgerReader):
    """Reads a table of jobs changed in place into gauges and exact counts, one cycle at a time.

    The library's statements: horizon, snapshot, states (when ``states.optional``), gauges
    (given ``stuck_after``) and changes (given the windows' bound and the previous xmin, then
    as :attr:`sequence_ids` says); ``{active}`` in them is replaced by the active states'
    literal.
    """

    states: StateNames
    # How far before the horizon an end stamp of a transaction it did not show can lie: the
    # database's now() needs TIMESTAMP_MARGIN; a library whose worker stamps the end with its
    # own clock (River's finalized_at) needs that clock's possible lag on top.
    clock_margin = TIMESTAMP_MARGIN
    # Whether the ids come from a sequence of CACHE 1: new jobs are then the ids above a settled
    # watermark (the horizon reads the largest id), and changes takes it as $3. Otherwise
    # (GoodJob's uuids) changes takes the previous snapshot ($3), says of each job whether it
    # existed then (SnapshotChangeRow), and takes the ids that snapshot showed active and this
    # one does not (:meth:`bind`, $4): an end stamped by a client's clock below the windows is
    # then still found, and refused.
    sequence_ids = True
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
        self.known: dict[JobKey, RowState] = {}
        self.ids = IdWatermark()  # which ids are new: above the watermark and never seen
        # The windows' timestamp bound and the previous xmin.
        self.cursor = TerminalCursor(margin=self.clock_margin)
        self._lower_id: int | None = None
        self._previous: str | None = None  # the previous snapshot, pg_current_snapshot() text

    @property
    def row_columns(self) -> frozenset[str]:
        """The columns its changes statement returns (ChangeRow, or SnapshotChangeRow)."""
        return CHANGE_COLUMNS if self.sequence_ids else SNAPSHOT_CHANGE_COLUMNS

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
        self._lower_id = None
        if self._states_known:
            self._lower_id = self.ids.lower_id() if self.sequence_ids else 0
        window = self.cursor.plan(parsed) if self._lower_id is not None else None
        if window is not None:
            out.append(Query("changes", self.sql["changes"], self._changes_args(window)))
        return out

    def _changes_args(self, window: tuple[float, int]) -> tuple[object, ...]:
        if self.sequence_ids:
            if not self.follows_running:
                return (*window, self._lower_id)
            running = self.states.running
            ids = sorted(int(key) for key, job in self.known.items() if job.state == running)
            return (*window, self._lower_id, ids)
        active = self.states.active
        before = sorted(str(key) for key, job in self.known.items() if job.state in active)
        return (*window, self._previous, before)

    def bind(self, query: Query, results: Results) -> Query:
        """Without a sequence, changes looks up by id only the jobs that have left the active
        set since the previous snapshot: the gauges, run just before it, show which."""
        if query.name != "changes" or self.sequence_ids:
            return query
        now = {str(key) for row in results["gauges"] for key in row[GAUGE_IDS]}
        left = [key for key in query.args[3] if key not in now]
        return replace(query, args=(*query.args[:3], left))

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
        bound, next_bound, lower_id = planned(
            self.cursor.bound, self.cursor.next_bound, self._lower_id
        )
        rows = {row["id"]: row for row in change_rows(results["changes"], self.row_columns)}
        if not self.counting:
            # The baseline: every version this snapshot shows happened before counting began.
            if self.sequence_ids:
                self.ids.watermark = int(lower_id)
                self.ids.absorb(int(key) for key in rows if int(key) > lower_id)
            self.known.update((key, _state_of(row)) for key, row in rows.items())
            self.counting = reading.counting = True
        else:
            # Every delta first: a refused cycle counts nothing.
            for key, row, delta, inserted in [self._delta(k, r, bound) for k, r in rows.items()]:
                self._record(str(row["job_type"]), row, delta, inserted)
                self.known[key] = _state_of(row)
            self.ledger.settle()
        active = {key for row in results["gauges"] for key in row[GAUGE_IDS]}
        # The watermark first: it says which finished jobs the id range can no longer return.
        self.ids.advance()
        if gone := self._forget(active, set(rows), next_bound):
            reading.warnings.append(
                f"{gone} {self.library} jobs were deleted before their end could be read "
                "(by hand, or a library set to delete finished jobs); they are not counted"
            )
        self._previous = str(first(results["snapshot"])["snapshot"])
        self.cursor.advance(self._previous)
        return reading

    def _delta(
        self, key: JobKey, row: ChangeRow, bound: float
    ) -> tuple[JobKey, ChangeRow, StateDelta, bool]:
        """What one job's new version says happened (and whether it is a new job)."""
        now = _state_of(row)
        before = self.known.get(key)
        kinds = list(row["error_kinds"] or ())
        inserted = before is None and self._new(key, row)
        if before is None and not inserted:
            # A finished job the reader had forgotten, back by hand since the previous
            # snapshot (docs/presets.md, "Oban": attempts failed in between are not counted).
            delta = self.states.returned(now, kinds)
        else:
            delta = self.states.change(before or RowState(self.states.inserted), now, kinds)
        ended = delta.completed or delta.cancelled or delta.dead is not None
        # A job followed since it ran may end written late (River's completer retries its
        # write): its old stamp says nothing of a clock.
        followed = (
            self.follows_running and before is not None and before.state == self.states.running
        )
        if ended and now.ended_at is not None and now.ended_at < bound and not followed:
            # Only an end stamped by a clock behind the database's lies below the window: a
            # job that such a clock saw both start and end between two cycles would be missed.
            raise CountingError(
                f"a {self.library} job ended {bound - now.ended_at:.0f} s before the window the "
                f"horizon allows: a worker's clock is more than {self.clock_margin:g} s behind "
                "the database's, and jobs both started and ended between two cycles by it "
                "would not be counted"
            )
        return key, row, delta, inserted

    def _new(self, key: JobKey, row: ChangeRow) -> bool:
        """Whether a job the reader does not know was made since the previous snapshot."""
        if self.sequence_ids:
            return self.ids.fresh(int(key))
        return not cast(SnapshotChangeRow, row)["existed"]

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

    def _forget(self, active: set[JobKey], seen: set[JobKey], bound: float) -> int:
        """Drop jobs that no range of the next cycle can return again; how many were deleted
        while active."""
        # With a sequence, the id range returns a version again while its id is above the
        # watermark (its xmin can be at or above this snapshot's xmin): a finished job is kept
        # until both the windows and the id range have passed it, or it would come back as a
        # retry by hand.
        watermark = self.ids.watermark if self.ids.watermark is not None else 0
        gone = 0
        for key, job in list(self.known.items()):
            if job.state in self.states.active:
                if key not in active and key not in seen:
                    del self.known[key]  # deleted while waiting
                    gone += 1
            elif (job.ended_at is None or job.ended_at < bound) and (
                not self.sequence_ids or int(key) <= watermark
            ):
                del self.known[key]
        return gone


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
