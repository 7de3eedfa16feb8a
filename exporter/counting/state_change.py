"""What a library's job states mean, and what one job's two row versions say happened.

The in-place state diff (counting/statediff.py) reads each changed job row and compares it with
what it last knew of that job; this is the comparison, given a library's state names
(:class:`StateNames`: Oban's, River's and GoodJob's are data in exporter/profiles). Every fetch
of a job starts an attempt, and every attempt ends one way: an error entry, a snooze, a rescue,
or an end state; what the two versions do not show, they imply. No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.vocabulary import ERROR, LEASE_EXPIRED


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
