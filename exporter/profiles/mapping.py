"""A preset's reading in the exporter's model, so the metrics every queue has render for it.

Pure, no I/O. Gauges become :class:`~exporter.model.ActiveStats`; the reader's cumulative
tallies become additions to the queue's :class:`~exporter.model.Tallies`, under the job-type
label cap and with the bounded failure reasons. What a preset's capabilities mark "not
exported" becomes the queue's :class:`~exporter.model.Coverage`, so its series are left out
instead of being exported as zeros. docs/presets.md ("In the exporter") has the table.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.model import ActiveStats, Coverage, Histogram, JobTypeLabels, Snapshot
from exporter.model import Tallies as ModelTallies
from exporter.profiles.base import Exactness, Reading, Tallies
from exporter.profiles.pgqueuer import HEARTBEAT_REASON
from exporter.vocabulary import DEADLINE, ERROR, LEASE_EXPIRED, Status

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
# and the tracker's job count (the readers keep cursors, not a tracker).
NEVER_FILLED = frozenset({"lease_expired_oldest", "cost", "malformed", "tracked"})
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


def failure_reason(reason: str) -> str:
    """A preset's failure reason (an exception type, a library word) as a bounded reason."""
    # Exception type names are unbounded label values: they all fold into "error". A reader
    # that already speaks the bounded words (Oban's) keeps them.
    if reason in (HEARTBEAT_REASON, LEASE_EXPIRED):
        return LEASE_EXPIRED
    return DEADLINE if reason == DEADLINE else ERROR


class PresetJobTypes(JobTypeLabels):
    """Job types a library names by string (task, entrypoint, queue), under the label cap.

    Each name gets a number on first sight, so the snapshot and the view stay keyed as for the
    default schema; its label is the name itself, or "other" beyond the cap.
    """

    def __init__(self, cap: int) -> None:
        super().__init__({}, cap)
        self.numbers: dict[str, int] = {}

    def number(self, name: str) -> int:
        """The number of a job type name, given on first sight (with its label)."""
        found = self.numbers.get(name)
        if found is None:
            found = self.numbers[name] = len(self.numbers) + 1
            self._names[found] = name
            self.label(found)
        return found

    def label_of_name(self, name: str) -> str:
        """The label of a job type name."""
        return self.label(self.number(name))

    def rename(self, names: dict[int, str], cap: int) -> dict[str, str]:
        """Adopt a reloaded cap; collect.job_types names numbers, which a preset has none of."""
        self._cap = cap
        return {}


def snapshot_of(reading: Reading, labels: PresetJobTypes, coverage: Coverage) -> Snapshot:
    """The reading's gauges as the exporter's snapshot, keyed by job type number."""
    active: dict[int, ActiveStats] = {}
    held: dict[int, int] = {}
    for name, gauges in reading.gauges.items():
        number = labels.number(name)
        active[number] = ActiveStats(
            pending=gauges.pending,
            running=gauges.running,
            scheduled=gauges.scheduled,
            oldest_pending_age=max(0.0, gauges.oldest_pending_age),
            oldest_ready_wait=max(0.0, gauges.oldest_ready_wait),
            stuck_lease_expired=gauges.stuck,
            running_oldest=max(0.0, gauges.running_oldest),
        )
        held[number] = gauges.held
    dead = held if Status.DEAD in coverage.statuses else None
    return Snapshot(taken_at=reading.taken_at, active=active, dead=dead)


@dataclass
class Carried:
    """How much of one reader's cumulative tallies is already in the queue's Tallies."""

    tallies: Tallies = field(default_factory=Tallies)
    operator_requeues: Counter[str] = field(default_factory=Counter)


def operator_requeues(tallies: Tallies) -> Counter[str]:
    """Requeues by hand, per job type: the reader's requeues minus the automatic retries.

    A preset counts every retry as a requeue, automatic ones included; jobqueue_jobs_requeued
    means a dead job put back by an operator. Every failed attempt is either retried
    automatically or dead, so automatic retries = failures - dead.
    """
    out: Counter[str] = Counter()
    for job_type, n in tallies.requeued.items():
        out[job_type] += n
    for (job_type, _), n in tallies.failures.items():
        out[job_type] -= n
    for (job_type, _), n in tallies.dead.items():
        out[job_type] += n
    return out


def carry(target: ModelTallies, carried: Carried, now: Tallies, labels: PresetJobTypes) -> None:
    """Add what ``now`` (a reader's tallies) counted beyond ``carried`` to ``target``."""
    before = carried.tallies
    for name, new, old in (
        ("enqueued", now.enqueued, before.enqueued),
        ("completed", now.completed, before.completed),
        ("cancelled", now.cancelled, before.cancelled),
    ):
        table: Counter[str] = getattr(target, name)
        for job_type, n in new.items():
            if n > old[job_type]:
                table[labels.label_of_name(job_type)] += n - old[job_type]
    for name, by_reason, old_by_reason in (
        ("failures", now.failures, before.failures),
        ("dead", now.dead, before.dead),
    ):
        reasons: Counter[tuple[str, str]] = getattr(target, name)
        for (job_type, reason), n in by_reason.items():
            if n > old_by_reason[(job_type, reason)]:
                key = (labels.label_of_name(job_type), failure_reason(reason))
                reasons[key] += n - old_by_reason[(job_type, reason)]
    # A high-water mark: the difference of three counters can dip within a cycle in theory,
    # and a counter must never go down or count the same requeue twice.
    by_hand = operator_requeues(now)
    for job_type, n in by_hand.items():
        done = carried.operator_requeues[job_type]
        if n > done:
            target.requeued[labels.label_of_name(job_type)] += n - done
            carried.operator_requeues[job_type] = n
    for new_table, old_table, model_table in (
        (now.duration, before.duration, target.duration),
        (now.wait, before.wait, target.wait),
        (now.latency, before.latency, target.latency),
    ):
        for job_type, histogram in new_table.items():
            added = _difference(histogram, old_table.get(job_type))
            if added.count:
                label = labels.label_of_name(job_type)
                found = model_table.get(label)
                model_table[label] = added if found is None else found.merged(added)
    carried.tallies = copy.deepcopy(now)


def _difference(new: Histogram, old: Histogram | None) -> Histogram:
    if old is None:
        return Histogram(new.bounds, list(new.counts), new.total, new.count)
    counts = [a - b for a, b in zip(new.counts, old.counts, strict=True)]
    return Histogram(new.bounds, counts, new.total - old.total, new.count - old.count)
