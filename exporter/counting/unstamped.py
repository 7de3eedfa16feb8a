"""What the exporter says of a change that polling cannot read: a job's row changed and its
``updated_at`` did not move (docs/exactness.md, "A change without a stamp"); no I/O.

The change cursor reads a row again only when its stamp moves past the cursor. A statement that
changes a job without stamping it (``UPDATE ... SET state = 'finished'`` alone) leaves the row
where the cursor has passed: the tracker finds it when the table holds fewer active rows than it
tracks (exporter/counting/tracker.py, ``suspects``), counts it as unstamped and in nothing else,
and the queue logs this once.
"""

from __future__ import annotations

from exporter.counting.status_rule import code_name
from exporter.model import JobRow, Notice

UNSTAMPED_MESSAGE = (
    "a job's row changed without a new updated_at stamp, so polling cannot count what happened "
    "to it: it is counted only in jobqueue_exporter_unstamped_changes_total; every statement "
    "that changes a job must set updated_at = now() (or a trigger must), or the queue can "
    "count from the change stream instead (collect.counting: logical, docs/logical.md)"
)


def unstamped_notice(row: JobRow, stamp: str) -> Notice:
    """The one log line of a queue's first change found without a stamp (``stamp``: the
    table's updated_at column, qualified)."""
    return Notice(
        UNSTAMPED_MESSAGE,
        {"column": stamp, "job_id": row.job_id, "status": code_name(row.status)},
    )
