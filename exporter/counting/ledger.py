"""Where a library's events are counted: straight into the queue's Tallies, under the label cap.

A library names its job types by string; each becomes a label (or "other" beyond the cap).
Reasons arrive already bounded (exporter.vocabulary). ``requeued`` means a job put back by an
operator; a library that records only "retried" (automatic and by hand alike) reports each
through :meth:`Ledger.retried`, and :meth:`Ledger.settle` turns them into requeues by hand at
the end of each cycle. No I/O.
"""

from __future__ import annotations

from collections import Counter

from exporter.model import PresetJobTypes, Tallies

# Buckets of a ledger made without the queue's (a reader built on its own, in tests).
DURATION_BOUNDS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
WAIT_BOUNDS = (0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0)
# A reader built on its own keeps every job type apart.
UNCAPPED = 1_000_000


class Ledger:
    """Counts one queue's events into its Tallies, by job type name."""

    def __init__(self, labels: PresetJobTypes | None = None, tallies: Tallies | None = None):
        self.labels = labels if labels is not None else PresetJobTypes(UNCAPPED)
        self.tallies = tallies or Tallies(DURATION_BOUNDS, WAIT_BOUNDS, WAIT_BOUNDS)
        # Per job type: retries (automatic or by hand) - failed attempts + deaths since the
        # baseline, and how much of it is already counted as requeues by hand.
        self._by_hand: Counter[str] = Counter()
        self._granted: Counter[str] = Counter()

    def enqueued(self, job_type: str) -> None:
        """One job added to the queue."""
        self.tallies.enqueued[self.labels.label_of_name(job_type)] += 1

    def completed(
        self, job_type: str, duration: float | None, wait: float | None, latency: float | None
    ) -> None:
        """One job done, with the figures the library can tell exactly."""
        label = self.labels.label_of_name(job_type)
        self.tallies.completed[label] += 1
        self.tallies.observe(label, duration, wait, latency)

    def failed(self, job_type: str, reason: str, attempts: int = 1) -> None:
        """Failed attempts (``reason`` from exporter.vocabulary)."""
        self.tallies.failures[(self.labels.label_of_name(job_type), reason)] += attempts
        self._by_hand[job_type] -= attempts

    def dead(self, job_type: str, reason: str) -> None:
        """One job failed for good."""
        self.tallies.dead[(self.labels.label_of_name(job_type), reason)] += 1
        self._by_hand[job_type] += 1

    def requeued(self, job_type: str) -> None:
        """One job put back by an operator."""
        self.tallies.requeued[self.labels.label_of_name(job_type)] += 1

    def retried(self, job_type: str, retries: int = 1) -> None:
        """Retries the library does not tell apart: automatic after a failure, or by hand."""
        self._by_hand[job_type] += retries

    def cancelled(self, job_type: str) -> None:
        """One job cancelled (jobqueue_jobs_cancelled_total)."""
        self.tallies.cancelled[self.labels.label_of_name(job_type)] += 1

    def settle(self) -> None:
        """Count the requeues by hand that :meth:`retried` revealed, at the end of a cycle.

        Every failed attempt is retried automatically or dead, so requeues by hand = retries -
        failures + deaths. A high-water mark: the difference can dip within a cycle, and a
        counter must never go down or count the same requeue twice.
        """
        for job_type, balance in self._by_hand.items():
            if balance > self._granted[job_type]:
                added = balance - self._granted[job_type]
                self.tallies.requeued[self.labels.label_of_name(job_type)] += added
                self._granted[job_type] = balance
