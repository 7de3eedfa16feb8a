"""The membership diff: counting a library whose job's state is which table holds it.

Solid Queue is the example: one row per enqueue in a jobs table that keeps it (until a clean-up
deletes finished rows), and the job's state is the side table that holds its id (ready,
scheduled, blocked, claimed, failed), each side row deleted as the job moves on. The side tables
are no history, so the reader follows jobs by id instead: every cycle it reads the rows above a
settled id watermark (new jobs, :class:`~exporter.counting.horizon.IdWatermark`) and, by id, the
jobs it follows that are no longer where the previous snapshot held them. Each such row goes to
the library's reader with what was known of the job (:meth:`MembershipReader.moved`), which
says what the move means. docs/exactness.md and docs/presets.md ("Solid Queue") have the
argument. No I/O.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypedDict, cast

from exporter.counting.gauges import Reading, reading_of
from exporter.counting.horizon import Horizon, IdWatermark
from exporter.counting.reader import LedgerReader, planned
from exporter.model import CountingError, Query, Results, Row

# Where a job is, as a library's SQL spells it for this mode.
WAITING = "waiting"  # in a side table of jobs not yet started (ready, scheduled, blocked)
RUNNING = "running"  # claimed by a worker
HELD = "held"  # failed, kept for a human; ``mark`` is the id of the row that holds it
FINISHED = "finished"  # ended, its row kept (until a clean-up deletes it)
GONE = "gone"  # its row is gone
NONE = "none"  # its row is there, in no side table and not finished (never committed so)
LIVE = frozenset({WAITING, RUNNING, NONE})  # looked up by id when they leave the live tables
STATES = frozenset({*LIVE, HELD, FINISHED, GONE})
# The gauges statement's rows carry the ids of the running jobs, besides the gauges.
RUNNING_IDS = "running_ids"


class MemberRow(TypedDict):
    """One row of a membership preset's ``changes`` statement: a job above the watermark, or
    one the reader follows that left where the previous snapshot held it."""

    id: int  # the job's id (a bigint key, from a sequence of CACHE 1)
    job_type: str | None  # None when the row is gone
    state: str  # one of STATES
    mark: int | None  # HELD: the id of the row that holds it (a new one is a new failure)
    reason: str | None  # HELD: the failure's reason, bounded (exporter.vocabulary)
    executions: int | None  # rows above the watermark: attempts made before this row
    superseded: bool | None  # FINISHED: a later row carries the same job on (a retry)
    latency: float | None  # FINISHED: from the job's first enqueue to its end, seconds


MEMBER_COLUMNS = frozenset(MemberRow.__annotations__)


def member_rows(rows: Sequence[Row]) -> list[MemberRow]:
    """The ``changes`` rows, checked against :class:`MemberRow`."""
    if rows and (missing := MEMBER_COLUMNS - set(rows[0].keys())):
        raise CountingError(f"the changes statement lacks the columns {', '.join(sorted(missing))}")
    if rows and (unknown := {str(row["state"]) for row in rows} - STATES):
        raise CountingError(f"the changes statement returned unknown states {sorted(unknown)}")
    return [cast(MemberRow, row) for row in rows]


@dataclass(frozen=True)
class Member:
    """What the reader last knew of one job."""

    job_type: str
    state: str
    mark: int | None = None


class MembershipReader(LedgerReader):
    """Follows a library's jobs by id across its side tables and counts their moves.

    The library's statements: horizon (the event-log horizon over the jobs table's ids),
    snapshot, gauges (given ``stuck_after``; with :data:`RUNNING_IDS`), members (every job in
    a side table, with its state: read once, at the baseline) and changes (given the settled
    id, the ids of the live jobs followed, and the held jobs' marks with their ids).
    """

    def start(self) -> None:
        """The jobs followed, and the id watermark over the jobs table."""
        self.known: dict[int, Member] = {}
        self.ids = IdWatermark()
        self._lower_id: int | None = None

    @property
    def tracked(self) -> int:
        """Jobs followed by id, and new ids already seen."""
        return len(self.known) + len(self.ids.consumed)

    @property
    def held(self) -> int:
        """Of them, the finished jobs and seen ids kept until the watermark passes them."""
        return sum(m.state == FINISHED for m in self.known.values()) + len(self.ids.consumed)

    @abstractmethod
    def moved(self, before: Member | None, row: MemberRow) -> None:
        """Count one job's move since the previous snapshot (``before`` None: a new row)."""

    def queries(self, horizon: Row) -> list[Query]:
        """The cycle's statements, in order, for one REPEATABLE READ, READ ONLY transaction."""
        self.ids.note(Horizon.from_row(horizon))
        out = [
            Query("snapshot", self.sql["snapshot"]),
            Query("gauges", self.sql["gauges"], (self.stuck_after,)),
        ]
        # Counting waits for a settled id, below which every job was visible already.
        self._lower_id = self.ids.lower_id()
        if self._lower_id is None:
            return out
        if not self.counting:
            out.append(Query("members", self.sql["members"]))
        live = sorted(i for i, m in self.known.items() if m.state in LIVE)
        held = sorted((m.mark or 0, i) for i, m in self.known.items() if m.state == HELD)
        marks, held_ids = [m for m, _ in held], [i for _, i in held]
        out.append(Query("changes", self.sql["changes"], (self._lower_id, live, marks, held_ids)))
        return out

    def apply(self, results: Results) -> Reading:
        """Count one cycle's rows into the ledger and return its gauges."""
        reading = reading_of(results, self.counting)
        if "changes" not in results:
            return self.delayed(reading)
        (lower_id,) = planned(self._lower_id)
        rows = {int(row["id"]): row for row in member_rows(results["changes"])}
        if not self.counting:
            # The baseline: every job this snapshot shows is where it was before counting.
            self.ids.watermark = lower_id
            self.ids.absorb(job_id for job_id in rows if job_id > lower_id)
            for row in results["members"]:
                self.known[int(row["id"])] = _member(row)
            self.known.update((job_id, _member(row)) for job_id, row in rows.items())
            self.counting = reading.counting = True
        else:
            for job_id, row in rows.items():
                before = self.known.get(job_id)
                if before is None and not self.ids.fresh(job_id):
                    continue  # counted when first seen, and forgotten since (finished)
                self.moved(before, row)
                self.known[job_id] = _member(row, before)
            self.ledger.settle()
        self._refresh(results["gauges"])
        self.ids.advance()
        watermark = self.ids.watermark or 0
        self.known = {
            job_id: m
            for job_id, m in self.known.items()
            if m.state != GONE and (m.state != FINISHED or job_id > watermark)
        }
        return reading

    def _refresh(self, gauges: Sequence[Row]) -> None:
        """Which of the live jobs run in this snapshot (a claim or a release is no event)."""
        running = {int(i) for row in gauges for i in row[RUNNING_IDS]}
        for job_id, m in self.known.items():
            if m.state in (WAITING, RUNNING):
                now = RUNNING if job_id in running else WAITING
                if now != m.state:
                    self.known[job_id] = replace(m, state=now)


def _member(row: Row | MemberRow, before: Member | None = None) -> Member:
    job_type = row["job_type"]
    name = str(job_type) if job_type is not None else (before.job_type if before else "")
    mark = row["mark"]
    return Member(name, str(row["state"]), int(mark) if mark is not None else None)
