"""A preset's reading in the exporter's model, so the metrics every queue has render for it.

Pure, no I/O. Gauges become :class:`~exporter.model.ActiveStats` (the counts went straight
into the queue's Tallies through the reader's ledger, under the label cap). What a preset's
capabilities mark "not exported" becomes the queue's :class:`~exporter.model.Coverage`, so
its series are left out instead of being exported as zeros. docs/presets.md ("In the
exporter") has the table.
"""

from __future__ import annotations

from collections.abc import Mapping

from exporter.counting.gauges import snapshot_of
from exporter.model import Coverage
from exporter.profiles.base import Exactness
from exporter.vocabulary import DEADLINE, ERROR, LEASE_EXPIRED, Status

__all__ = ["NEVER_FILLED", "coverage_of", "snapshot_of"]

# Capability -> the model figure (ActiveStats or Tallies field) it fills.
_FIGURES = {
    "scheduled": "scheduled",
    "oldest_pending_age": "oldest_pending_age",
    "oldest_ready_wait": "oldest_ready_wait",
    "running_oldest": "running_oldest",
    "enqueued": "enqueued",
    "completed": "completed",
    "failures": "failures",
    "dead": "dead",
    "requeued": "requeued",
    "cancelled": "cancelled",
    "wait": "wait",
    "duration": "duration",
    "latency": "latency",
}
# Figures no preset fills: how long ago a stuck job's lease ran out (the libraries have no
# lease end, only a heartbeat), cost and malformed result fields (no result jsonb convention),
# vanished jobs (the readers keep no tracker of every active job), and unmapped status values
# (a library's statuses are known, no table mapping names them), and unstamped changes (only
# the default profile's change cursor reads by a stamp the application writes). Every reader
# gauges what it holds (tracked and held jobs), so that is filled.
NEVER_FILLED = frozenset(
    {"lease_expired_oldest", "cost", "malformed", "vanished", "unmapped_status", "unstamped"}
)
# Capability -> the jobqueue_jobs status it fills. A held job (kept failed for a human, who
# can requeue it) is what the default schema calls dead.
_STATUSES = (("pending", Status.PENDING), ("running", Status.RUNNING), ("held", Status.DEAD))


def _told(capabilities: Mapping[str, Exactness], name: str) -> bool:
    return capabilities.get(name, "not exported") != "not exported"


def coverage_of(capabilities: Mapping[str, Exactness]) -> Coverage:
    """The series a preset can fill, from its capability table ("approximate" is exported)."""
    statuses = tuple(status for name, status in _STATUSES if _told(capabilities, name))
    reasons: tuple[str, ...] = ()
    if _told(capabilities, "failures") or _told(capabilities, "dead"):
        # Without a stored reason every failure is "error"; with one, a lost worker (pgqueuer's
        # heartbeat re-pick, Oban's Lifeline rescue) is told apart, and Oban's own timeout
        # error is a deadline kill.
        reasons = (LEASE_EXPIRED, ERROR) if _told(capabilities, "failure_reason") else (ERROR,)
        if _told(capabilities, "failure_deadline"):
            reasons = (DEADLINE, *reasons)
    withheld = {figure for name, figure in _FIGURES.items() if not _told(capabilities, name)}
    return Coverage(
        statuses=statuses,
        stuck_reasons=(LEASE_EXPIRED,) if _told(capabilities, "stuck") else (),
        failure_reasons=reasons,
        withheld=frozenset(withheld) | NEVER_FILLED,
    )
