"""What happened to a job between two reads of its row, told from the two states alone; no I/O.

A job can be claimed, fail, die, be requeued or be handed back several times between two
collections. Its row keeps no history, but the attempts, the start of the attempt running and
run_after each move only on some transitions: these functions read the two states side by side
(docs/exactness.md, "What polling cannot see").
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.model import DONE, PENDING, RUNNING, JobRow


@dataclass(frozen=True, slots=True)
class Seen:
    """The last state of one job that a collection read."""

    status: int
    attempts: int
    max_attempts: int
    last_error: str | None
    run_started_at: float | None
    updated_at: float
    created_at: float = 0.0
    run_after: float | None = None

    @classmethod
    def of(cls, row: JobRow) -> Seen:
        """The part of a row the tracker remembers."""
        return cls(
            row.status,
            row.attempts,
            row.max_attempts,
            row.last_error,
            row.run_started_at,
            row.updated_at,
            row.created_at,
            row.run_after,
        )


# A freshly inserted or requeued job: pending, no attempt made, no error.
FRESH = Seen(PENDING, 0, 0, None, None, 0.0)


def requeued_meanwhile(known: Seen, row: JobRow) -> bool:
    if _released_meanwhile(known, row):
        return False
    if row.attempts < known.attempts:
        return True
    if (
        row.attempts == known.attempts
        and row.run_started_at is not None
        and known.run_started_at is not None
        and row.run_started_at != known.run_started_at
    ):
        return True
    return _run_after_reset_without_failure(known, row)


def _released_meanwhile(known: Seen, row: JobRow) -> bool:
    # A requeue always sets run_after = now(), later than the last change read. A worker that
    # hands its job back (a graceful-shutdown release: RUNNING -> PENDING with attempts - 1)
    # leaves run_after alone. So attempts that went down, or a new start at the same count,
    # while run_after stayed where the last read saw it, are a release (perhaps claimed again):
    # no attempt failed, nothing died, nothing was requeued. Equality, not "no later than the
    # last read": a requeue whose transaction began before that read stamps an older now().
    # Without run_after (a mapped table that has none) a release reads as a requeue.
    if row.run_after is None or known.run_after is None:
        return False
    return row.run_after == known.run_after


def _run_after_reset_without_failure(known: Seen, row: JobRow) -> bool:
    # Only three transitions move run_after: a retried failure (to now() + backoff), a reap
    # (to now()) and a requeue (to now()). When the attempts say that none failed since the
    # last read, yet run_after was set to a moment after that read and no later than the row's
    # last change, only a requeue can have set it: the job died and was requeued unseen
    # (a job read PENDING with 0 attempts, then claimed, dead, requeued and claimed again).
    # An application that postpones a job sets run_after in the future: not taken for one.
    if row.run_after is None or known.run_after is None or row.run_after == known.run_after:
        return False
    if not known.updated_at < row.run_after <= row.updated_at:
        return False
    if row.run_started_at is not None and row.run_after > row.run_started_at:
        return False
    return attempts_ended(known, row) == (1 if row.status == DONE else 0)


def attempts_ended(previous: Seen, row: JobRow) -> int:
    """Attempts that ended between ``previous`` and ``row``, if no requeue came between: the
    attempts started since, plus the one running then, minus the one running now."""
    return (
        row.attempts
        - previous.attempts
        + (1 if previous.status == RUNNING else 0)
        - (1 if row.status == RUNNING else 0)
    )
