"""What one change of a job's status counts, when the status may be none of the four; no I/O.

The counting reads a status as a code: the reference's 1-4 for the four mapped values, and three
codes for the values outside them. A table may hold values of its own: those a mapping names as
``status_values.cancelled`` (a job cancelled: jobqueue_jobs_cancelled_total), as
``status_values.ignore`` (known, and counted nowhere: an archive, a pause), and any other value
(unmapped: a typo in the mapping, or a status nobody named). The rule, one for every counting
mode (docs/configuration.md, "Statuses of the table's own"):

- A change into an unmapped value counts one unmapped-status row and nothing else: no
  failure, no death, no completion, no enqueue. A change into an ignored value counts nothing.
- A change into a cancelled value from any other status counts one cancellation, and nothing
  else (the attempt it cut short is no failure); from a status outside the flow (below) it also
  counts the enqueue that brought the job in.
- A job is *outside the flow* when no earlier state of it is known (an insert, or a row first
  read), or when its last status was unmapped, ignored or cancelled. A change from outside the
  flow into one of the four counts one enqueue, then the move as from a waiting job with no
  attempt running. A change between two of the four is counted as it always was.
- DONE is final: a change of a done row counts nothing (an unmapped value it takes is still
  one unmapped-status row).

The dead-letter gauge follows the rows, not this rule: a row leaving DEAD for any value leaves
the dead letter.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.vocabulary import Status

# Codes of the values outside the four (Status is 1-4): what the SQL's status CASE returns.
UNMAPPED = 0
CANCELLED = 5
IGNORED = 6
COUNTED = frozenset(int(status) for status in Status)  # the four mapped statuses
UNCOUNTED = frozenset({UNMAPPED, CANCELLED, IGNORED})  # outside the flow once a job is in one


@dataclass(frozen=True)
class StatusChange:
    """What one change of a job's status counts besides the transitions between the four."""

    unmapped: bool = False  # one row in jobqueue_exporter_unmapped_status_rows_total
    enqueued: bool = False  # one job in jobqueue_jobs_enqueued_total: it came into the flow
    cancelled: bool = False  # one job in jobqueue_jobs_cancelled_total
    # Count the move between the four statuses (from a waiting job when it came into the flow).
    transition: bool = False


NOTHING = StatusChange()


def status_change(before: int | None, after: int) -> StatusChange:
    """What a change from status code ``before`` (None: no earlier state known) to ``after``
    counts; a code outside the four and the three above is unmapped."""
    after = after if after in COUNTED or after in UNCOUNTED else UNMAPPED
    unmapped = after == UNMAPPED
    if before == Status.DONE or after in (UNMAPPED, IGNORED):
        return StatusChange(unmapped=unmapped)
    outside = before not in COUNTED  # None, or unmapped, ignored or cancelled
    if after == CANCELLED:
        if before == CANCELLED:
            return NOTHING
        return StatusChange(enqueued=outside, cancelled=True)
    return StatusChange(enqueued=outside, transition=True)


def code_name(code: int) -> str:
    """A status code as a label value: the four's names, else ``cancelled`` or ``other``."""
    if code in COUNTED:
        return Status(code).label
    return "cancelled" if code == CANCELLED else "other"
