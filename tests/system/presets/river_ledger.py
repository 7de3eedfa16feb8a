"""The River harness's ground truth: what each statement it ran did, by River's own rules.

Every statement the harness runs returns (or is given) the rows it changed; this log reads
them as River's design says (job_executor.go's outcomes, JobSetStateIfRunningMany's cancel
conversion, JobRescueMany's three ends, JobCancel, JobRetry, JobDeleteBefore) and keeps a
model of every job's row. At the end the model must equal the table (:meth:`Log.agree`), so
the log, the library's design and the table agree or the harness fails.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

FINAL = ("completed", "discarded", "cancelled")
COUNTERS = ("enqueued", "completed", "failures", "dead", "requeued", "cancelled")


@dataclass
class Model:
    """What the log says one job's row holds."""

    kind: str
    state: str
    attempt: int = 0
    errors: int = 0
    snoozes: int = 0
    finalized_at: datetime | None = None
    marked: bool = False  # metadata.cancel_attempted_at
    logged: bool = True  # its insert is logged (a client may fetch it before the insert returns)


def _seconds(later: datetime | None, earlier: datetime | None) -> float:
    if later is None or earlier is None:
        return 0.0
    return max(0.0, (later - earlier).total_seconds())  # river.sql clamps a skewed clock's at 0


@dataclass
class Log:
    """The transitions the harness made, counted as the exporter must count them."""

    live: bool = False  # False: history, before the exporter's baseline (not counted)
    jobs: dict[int, Model] = field(default_factory=dict)
    counters: dict[str, Counter[Any]] = field(
        default_factory=lambda: {name: Counter() for name in COUNTERS}
    )
    histograms: dict[str, list[float]] = field(default_factory=dict)  # n, duration, wait, latency
    events: Counter[str] = field(default_factory=Counter)  # what happened, for the test's asserts
    deleted: int = 0

    def _count(self, name: str, key: Any) -> None:
        if self.live:
            self.counters[name][key] += 1

    def _note(self, event: str) -> None:
        self.events[("live " if self.live else "history ") + event] += 1

    def inserted(self, row: dict[str, Any]) -> None:
        """A job row as JobInsertFast(Many) returned it."""
        job = self.jobs.get(row["id"])
        if job is None:
            self.jobs[row["id"]] = Model(row["kind"], row["state"])
        else:  # a client fetched it between the commit and this call
            assert not job.logged, (row, job)
            assert job.kind == row["kind"], (row, job)
            job.logged = True
        self._count("enqueued", row["kind"])
        self._note("inserted")

    def _job(self, row: dict[str, Any], state: str) -> Model:
        """The job a statement returned, known already or inserted a moment ago."""
        return self.jobs.setdefault(row["id"], Model(row["kind"], state, logged=False))

    def fetched(self, row: dict[str, Any]) -> None:
        """JobGetAvailable: running, one more attempt."""
        job = self._job(row, "available")
        assert job.state == "available", (row["id"], job)
        job.state, job.attempt = "running", job.attempt + 1
        assert row["attempt"] == job.attempt

    def promoted(self, row: dict[str, Any]) -> None:
        """JobSchedule (its rows show the state before the update)."""
        job = self._job(row, row["state"])
        assert job.state in ("scheduled", "retryable"), (row, job)
        assert not row["conflict_discarded"], row  # no unique jobs in this workload
        job.state = "available"

    def finished(self, requested: str, error: bool, snooze: bool, row: dict[str, Any]) -> str:
        """One JobSetStateIfRunningMany element; returns what the row became ('' if the job
        was no longer running, so nothing changed but maybe metadata)."""
        job = self.jobs[row["id"]]
        if job.state != "running":
            job.snoozes += snooze  # the metadata merge applies to any row
            return ""
        became = row["state"]
        # River turns a retry or a snooze far enough away of a job whose cancel was asked
        # into a cancel; one due within the scheduler's interval ('available') stays.
        converted = job.marked and requested in ("retryable", "scheduled")
        assert became == ("cancelled" if converted else requested), (requested, became, job)
        job.state, job.finalized_at = became, row["finalized_at"]
        job.errors += error
        job.snoozes += snooze
        if snooze and not converted:
            job.attempt -= 1
        kind = job.kind
        if became == "completed":
            self._count("completed", kind)
            if self.live:
                figures = self.histograms.setdefault(kind, [0, 0.0, 0.0, 0.0])
                figures[0] += 1
                figures[1] += _seconds(row["finalized_at"], row["attempted_at"])
                figures[2] += _seconds(row["attempted_at"], row["scheduled_at"])
                figures[3] += _seconds(row["finalized_at"], row["created_at"])
        elif became == "cancelled":
            self._count("cancelled", kind)  # the entry appended with it is the cancel's
        elif error:
            self._count("failures", (kind, "error"))
            if became == "discarded":
                self._count("dead", (kind, "error"))
        self._note(f"{requested}->{became}" + (" error" if error else ""))
        return became

    def rescued(self, job_id: int, state: str, finalized_at: datetime | None) -> None:
        """JobRescueMany: an entry of its own, and cancelled, discarded or retryable."""
        job = self.jobs[job_id]
        assert job.state == "running"
        job.state, job.errors, job.finalized_at = state, job.errors + 1, finalized_at
        if state == "cancelled":
            self._count("cancelled", job.kind)
        else:
            self._count("failures", (job.kind, "lease_expired"))
            if state == "discarded":
                self._count("dead", (job.kind, "lease_expired"))
        self._note(f"rescued->{state}")

    def cancelled(self, row: dict[str, Any]) -> None:
        """JobCancel: a waiting job ends now; a running one is only marked."""
        job = self.jobs[row["id"]]
        job.marked = "cancel_attempted_at" in row["metadata"]
        if job.state in FINAL or job.state == "running":
            assert row["state"] == job.state
            self._note(f"cancel asked of a {job.state} job")
            return
        assert row["state"] == "cancelled"
        job.state, job.finalized_at = "cancelled", row["finalized_at"]
        self._count("cancelled", job.kind)
        self._note("cancelled waiting")

    def retried(self, row: dict[str, Any]) -> None:
        """JobRetry: a finished job put back by hand (a waiting one only made due)."""
        job = self.jobs[row["id"]]
        if job.state in FINAL:
            self._count("requeued", job.kind)
        assert row["state"] == "available"
        job.state, job.finalized_at = "available", None
        self._note("retried by hand")

    def cleaned(self, before: datetime, count: int) -> None:
        """JobDeleteBefore: every finished row stamped before the horizon, and no other."""
        gone = [i for i, j in self.jobs.items()
                if j.state in FINAL and j.finalized_at is not None and j.finalized_at < before]  # fmt: skip
        assert count == len(gone), (count, len(gone))
        for job_id in gone:
            del self.jobs[job_id]
        self.deleted += count
        if count:
            self._note("cleaned")

    def agree(self, table: dict[int, dict[str, Any]]) -> None:
        """The table holds exactly the rows the log says, each as the log says."""
        assert set(table) == set(self.jobs), set(table) ^ set(self.jobs)
        assert all(job.logged for job in self.jobs.values())
        for job_id, job in self.jobs.items():
            row = table[job_id]
            found = (row["kind"], row["state"], row["attempt"], len(row["errors"] or ()),
                     int(row["metadata"].get("snoozes", 0)), row["finalized_at"] is not None,
                     "cancel_attempted_at" in row["metadata"])  # fmt: skip
            wanted = (job.kind, job.state, job.attempt, job.errors, job.snoozes,
                      job.state in FINAL, job.marked)  # fmt: skip
            assert found == wanted, (job_id, found, wanted)

    def truth(self) -> dict[str, dict[Any, int]]:
        """The counters since the exporter's baseline, without zeros."""
        return {name: {k: v for k, v in c.items() if v} for name, c in self.counters.items()}
