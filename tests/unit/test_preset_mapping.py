"""A preset's reading in the exporter's model: bounded labels and reasons, counted once straight
into the queue's tallies, and no series for what the preset cannot tell. Pure: no database, no
library."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families

from exporter.counting.ledger import Ledger
from exporter.counting.reader import LedgerReader
from exporter.metrics import render
from exporter.model import Histogram, PresetJobTypes, QueueView
from exporter.model import Tallies as ModelTallies
from exporter.profiles import PRESETS
from exporter.profiles.base import Gauges, Reading, Row
from exporter.profiles.mapping import NEVER_FILLED, coverage_of, snapshot_of
from exporter.profiles.pgqueuer import PgqueuerReader
from exporter.profiles.procrastinate import ProcrastinateReader
from exporter.runtime import QueueRuntime
from exporter.settings import QueueSettings
from exporter.settings.schema import DatabaseSettings
from exporter.vocabulary import ERROR, FAILURE_REASONS, LEASE_EXPIRED, PRESET_PROFILES, Status
from tests.unit.factories import view

BOUNDS = (1.0, 10.0)


def model_tallies() -> ModelTallies:
    return ModelTallies(BOUNDS, BOUNDS, BOUNDS)


def ledger(cap: int = 10) -> Ledger:
    return Ledger(PresetJobTypes(cap), model_tallies())


def pgqueuer_event(status: str, statuses: list[str], reason: str | None = None) -> Row:
    return {"status": status, "job_type": "job", "reason": reason, "statuses": statuses,
            "has_traceback": False, "ats": [], "at": 0.0}  # fmt: skip


def test_the_profile_names_in_the_vocabulary_are_the_registered_presets() -> None:
    assert set(PRESET_PROFILES) == set(PRESETS)


def test_coverage_follows_each_presets_capabilities() -> None:
    pgqueuer = coverage_of(PRESETS["pgqueuer"].capabilities)
    assert pgqueuer.statuses == (Status.PENDING, Status.RUNNING, Status.DEAD)  # held -> dead
    assert pgqueuer.failure_reasons == (LEASE_EXPIRED, ERROR)
    assert pgqueuer.stuck_reasons == (LEASE_EXPIRED,)
    assert pgqueuer.withheld == NEVER_FILLED | {"wait"}
    for name in ("procrastinate", "pgboss"):
        coverage = coverage_of(PRESETS[name].capabilities)
        assert coverage.statuses == (Status.PENDING, Status.RUNNING), name  # held not exported
        assert coverage.failure_reasons == (ERROR,), name  # no reason is stored
        assert coverage.withheld == NEVER_FILLED, name


def test_exception_types_fold_into_error_and_a_heartbeat_repick_is_a_lost_lease() -> None:
    reader = PgqueuerReader(ledger=ledger())
    for reason in ("ValueError", "some.module.VeryCustomError", None):
        reader.count(pgqueuer_event("exception", ["queued", "picked"], reason))
    reader.count(pgqueuer_event("picked", ["queued", "picked"]))  # re-picked: heartbeat stale
    assert reader.tallies.failures == {("job", ERROR): 3, ("job", LEASE_EXPIRED): 1}
    assert reader.tallies.dead == {("job", ERROR): 3}
    assert {reason for _, reason in reader.tallies.failures} <= set(FAILURE_REASONS)


def test_procrastinate_failures_are_errors_and_a_retry_for_a_failure_is_no_requeue() -> None:
    reader = ProcrastinateReader(ledger=ledger())
    for kind in ("deferred", "deferred_for_retry", "failed", "retried", "cancelled"):
        reader.count({"type": kind, "job_type": "task"})
    assert reader.tallies.counters() == {
        "enqueued": {"task": 1}, "completed": {}, "failures": {("task", ERROR): 2},
        "dead": {("task", ERROR): 1}, "requeued": {"task": 1}, "cancelled": {"task": 1},
    }  # fmt: skip


def test_counts_go_straight_into_the_queues_tallies_once() -> None:
    counts = ledger()
    for _ in range(3):
        counts.enqueued("email")
    counts.completed("email", duration=2.0, wait=0.5, latency=20.0)
    counts.settle()
    counts.settle()  # nothing new: nothing added
    counts.enqueued("email")
    counts.enqueued("email")
    counts.completed("email", duration=0.5, wait=None, latency=5.0)
    target = counts.tallies
    assert target.enqueued == {"email": 5}
    assert target.completed == {"email": 2}
    assert target.duration["email"].count == 2
    assert target.duration["email"].counts == [1, 1]
    assert target.duration["email"].total == 2.5
    assert target.wait["email"].count == 1
    assert target.latency["email"].count == 2


def test_requeued_counts_only_requeues_by_hand() -> None:
    counts = ledger()
    # Two automatic retries (a failure each, retried), one permanent failure ...
    for _ in range(2):
        counts.failed("job", ERROR)
        counts.retried("job")
    counts.failed("job", ERROR)
    counts.dead("job", ERROR)
    counts.settle()
    target = counts.tallies
    assert target.requeued["job"] == 0
    assert target.failures[("job", ERROR)] == 3
    assert target.dead[("job", ERROR)] == 1
    # ... then an operator puts the dead job back.
    counts.retried("job")
    counts.settle()
    assert target.requeued["job"] == 1
    counts.settle()  # counted once
    assert target.requeued["job"] == 1


def test_job_types_beyond_the_cap_fold_into_other_and_reasons_stay_bounded() -> None:
    counts = ledger(cap=2)
    for name in ("a", "b", "c", "d"):
        counts.enqueued(name)
        counts.failed(name, ERROR)
        counts.dead(name, ERROR)
    counts.settle()
    target, labels = counts.tallies, counts.labels
    assert target.enqueued == {"a": 1, "b": 1, "other": 2}
    assert target.failures == {("a", ERROR): 1, ("b", ERROR): 1, ("other", ERROR): 2}
    assert labels.labels == ["a", "b", "other"]
    assert len(labels.folded) == 2
    # A reload's rename keeps the names: collect.job_types numbers the default schema's types.
    assert labels.rename({1: "renamed"}, 5) == {}
    assert labels.label_of_name("a") == "a"


def test_gauges_map_onto_active_stats_and_held_onto_dead_only_when_told() -> None:
    labels = PresetJobTypes(10)
    reading = Reading(
        taken_at=100.0,
        gauges={"email": Gauges(pending=4, running=2, scheduled=1, oldest_pending_age=9.0,
                                oldest_ready_wait=3.0, running_oldest=7.0, stuck=1, held=2)},
        counting=True,
    )  # fmt: skip
    told = snapshot_of(reading, labels, coverage_of(PRESETS["pgqueuer"].capabilities))
    number = labels.number("email")
    stats = told.active[number]
    assert (stats.pending, stats.running, stats.scheduled) == (4, 2, 1)
    assert (stats.stuck_lease_expired, stats.stuck_overrun) == (1, 0)
    assert (stats.oldest_pending_age, stats.oldest_ready_wait, stats.running_oldest) == (9, 3, 7)
    assert told.dead == {number: 2}
    assert told.taken_at == 100.0
    untold = snapshot_of(reading, labels, coverage_of(PRESETS["pgboss"].capabilities))
    assert untold.dead is None


def _rendered(*views: QueueView) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    text = render(views, process_metrics=False).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _preset_view(name: str) -> QueueView:
    labels = PresetJobTypes(10)
    coverage = coverage_of(PRESETS[name].capabilities)
    reading = Reading(100.0, {"email": Gauges(pending=1, held=1)}, counting=True)
    snapshot = snapshot_of(reading, labels, coverage)
    return replace(
        view(name, snapshot=snapshot, label_of={labels.number("email"): "email"}),
        labels=tuple(labels.labels),
        tallies=model_tallies(),
        coverage=coverage,
    )


def test_a_preset_queue_exports_no_series_for_what_it_cannot_tell() -> None:
    found = _rendered(view("own"), _preset_view("pgqueuer"), _preset_view("procrastinate"))

    def names(queue: str) -> set[str]:
        return {name for name, labels in found if ("queue", queue) in labels}

    def label_values(queue: str, metric: str, label: str) -> set[str]:
        return {
            dict(labels)[label]
            for name, labels in found
            if name == metric and ("queue", queue) in labels
        }

    own, pgqueuer, procrastinate = names("own"), names("pgqueuer"), names("procrastinate")
    for never in (
        "jobqueue_cost_usd_total",
        "jobqueue_lease_expired_oldest_seconds",
        "jobqueue_exporter_malformed_rows_total",
    ):
        assert never in own
        assert never not in pgqueuer
        assert never not in procrastinate
    # What a reader holds is gauged as the default profile's tracker is.
    for held in ("jobqueue_exporter_tracked_jobs", "jobqueue_exporter_held_jobs"):
        assert held in own
        assert held in pgqueuer
        assert held in procrastinate
    assert "jobqueue_job_wait_seconds_count" not in pgqueuer  # execute_after is not logged
    assert "jobqueue_job_wait_seconds_count" in procrastinate
    assert label_values("own", "jobqueue_job_failures_total", "reason") == set(FAILURE_REASONS)
    assert label_values("pgqueuer", "jobqueue_job_failures_total", "reason") == {
        LEASE_EXPIRED, ERROR
    }  # fmt: skip
    assert label_values("procrastinate", "jobqueue_jobs_dead_total", "reason") == {ERROR}
    assert label_values("pgqueuer", "jobqueue_stuck_jobs", "reason") == {LEASE_EXPIRED}
    assert label_values("pgqueuer", "jobqueue_jobs", "status") == {"pending", "running", "dead"}
    assert label_values("procrastinate", "jobqueue_jobs", "status") == {"pending", "running"}
    # Zero-filled where the preset can tell: the known job type, every covered status.
    assert ("jobqueue_jobs", (("job_type", "email"), ("queue", "pgqueuer"),
                              ("status", "running"))) in found  # fmt: skip


def test_histograms_from_the_reader_keep_the_configured_bounds() -> None:
    counts = ledger()
    counts.completed("email", duration=50.0, wait=None, latency=None)
    assert counts.tallies.duration["email"] == Histogram(BOUNDS, [0, 0], 50.0, 1)


def test_the_profile_chooses_the_counting_mode_and_the_election_table() -> None:
    own = QueueSettings(name="own", database=DatabaseSettings(dsn="postgresql://u@h/a"))
    boss = replace(own, name="boss", profile="pgboss")
    mine, theirs = QueueRuntime(own), QueueRuntime(boss)
    assert mine.poller.profile.name == "default"
    assert not isinstance(mine.poller.mode, LedgerReader)
    assert isinstance(theirs.poller.mode, LedgerReader)
    # The advisory lock is keyed by the watched table's OID: the library's main table.
    assert mine.election is not None
    assert theirs.election is not None
    assert mine.election.lock.options.table == "job"
    assert theirs.election.lock.options.table == "pgboss.job"
    assert theirs.database.options.table == "pgboss.job"


def _reader(runtime: QueueRuntime) -> PgqueuerReader | ProcrastinateReader:
    mode = runtime.poller.mode
    assert isinstance(mode, PgqueuerReader | ProcrastinateReader)
    return mode


def test_the_heartbeat_timeout_reaches_the_reader_and_defaults_to_the_librarys() -> None:
    base = QueueSettings(name="q", database=DatabaseSettings(dsn="postgresql://u@h/a"))
    tuned = replace(base, profile="pgqueuer", collect=replace(base.collect, heartbeat_timeout=5.0))
    default = replace(base, profile="procrastinate")
    assert _reader(QueueRuntime(tuned)).stuck_after == 5.0
    assert _reader(QueueRuntime(default)).stuck_after == 30.0
