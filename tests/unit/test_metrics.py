"""Rendering views as metric families: zero-filled label sets, withdrawal, standbys, several queues."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from exporter import __version__
from exporter.metrics import BY_NAME, DEFINITIONS, exposed_metric_names, reference_table, render
from exporter.model import (
    ConfigStatus,
    Coverage,
    Health,
    HeldJobs,
    QueueView,
    SlotHealth,
    StreamHealth,
)
from exporter.vocabulary import COLLECTION_ERROR_REASONS, FAILURE_REASONS, REQUIRED_INDEXES
from tests.unit.factories import view

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(*views: QueueView) -> Samples:
    text = render(views, process_metrics=False).decode()
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def get(found: Samples, name: str, **labels: str) -> float:
    if name != "jobqueue_exporter_build_info":
        labels.setdefault("queue", "orders")
    return found[(name, tuple(sorted(labels.items())))]


def names(found: Samples, queue: str = "orders") -> set[str]:
    return {name for name, labels in found if ("queue", queue) in labels}


def test_snapshot_gauges_sum_job_types_and_zero_fill_every_known_label() -> None:
    found = samples(view())
    assert get(found, "jobqueue_jobs", job_type="email", status="pending") == 3
    assert get(found, "jobqueue_jobs", job_type="email", status="dead") == 4
    assert get(found, "jobqueue_oldest_pending_age_seconds", job_type="email") == 12.5
    assert get(found, "jobqueue_stuck_jobs", job_type="email", reason="overrun") == 1
    # "scrape" has no rows now, yet every series of it reads 0 rather than vanishing.
    assert get(found, "jobqueue_jobs", job_type="scrape", status="running") == 0
    assert get(found, "jobqueue_stuck_jobs", job_type="scrape", reason="lease_expired") == 0
    assert (
        "jobqueue_jobs",
        (("job_type", "email"), ("queue", "orders"), ("status", "done")),
    ) not in found


def test_counters_and_histograms_are_cumulative_with_every_reason() -> None:
    found = samples(view())
    assert get(found, "jobqueue_jobs_enqueued_total", job_type="email") == 7
    for reason in FAILURE_REASONS:
        assert (
            "jobqueue_job_failures_total",
            (("job_type", "scrape"), ("queue", "orders"), ("reason", reason)),
        ) in found
    assert get(found, "jobqueue_job_failures_total", job_type="email", reason="deadline") == 2
    assert get(found, "jobqueue_cost_usd_total", job_type="email", component="ai") == 0.5
    assert get(found, "jobqueue_job_duration_seconds_bucket", job_type="email", le="1.0") == 0
    assert get(found, "jobqueue_job_duration_seconds_bucket", job_type="email", le="10.0") == 1
    assert get(found, "jobqueue_job_duration_seconds_bucket", job_type="email", le="+Inf") == 2
    assert get(found, "jobqueue_job_duration_seconds_sum", job_type="email") == 22.0
    assert get(found, "jobqueue_job_duration_seconds_count", job_type="scrape") == 0


def test_health_lists_every_error_reason_and_index() -> None:
    found = samples(view())
    for reason in COLLECTION_ERROR_REASONS:
        assert get(found, "jobqueue_exporter_collection_errors_total", reason=reason) == (
            reason == "timeout"
        )
    for index in REQUIRED_INDEXES:
        assert get(found, "jobqueue_exporter_missing_index", index=index) == 0
    assert get(found, "jobqueue_up") == 1
    assert get(found, "jobqueue_exporter_leader") == 1
    assert get(found, "jobqueue_exporter_tracked_jobs") == 4
    assert get(found, "jobqueue_exporter_held_jobs") == 2
    assert get(found, "jobqueue_exporter_held_cap_exceeded") == 0
    assert get(found, "jobqueue_exporter_build_info", version=__version__) == 1


def test_a_stale_queue_withdraws_its_gauges_and_keeps_counters_and_health() -> None:
    found = samples(view(snapshot=None, up=False, health=Health(up=False)))
    present = names(found)
    assert "jobqueue_jobs" not in present
    assert "jobqueue_oldest_pending_age_seconds" not in present
    assert "jobqueue_jobs_enqueued_total" in present
    assert get(found, "jobqueue_up") == 0


def test_a_standby_exports_only_up_and_leader() -> None:
    found = samples(view(leader=False, collector=False, snapshot=None, tallies=None))
    assert names(found) == {"jobqueue_up", "jobqueue_exporter_leader"}
    assert get(found, "jobqueue_exporter_leader") == 0


def test_two_queues_share_each_family_once_and_keep_their_own_values() -> None:
    text = render([view("orders"), view("mails", tracked=9)], process_metrics=False).decode()
    assert text.count("# TYPE jobqueue_up gauge") == 1
    assert text.count("# HELP jobqueue_jobs ") == 1
    found = samples(view("orders"), view("mails", tracked=9))
    assert get(found, "jobqueue_exporter_tracked_jobs", queue="mails") == 9
    assert get(found, "jobqueue_exporter_tracked_jobs", queue="orders") == 4


def test_held_jobs_past_the_cap_are_flagged_and_at_the_cap_are_not() -> None:
    at_cap = samples(view(held=HeldJobs(jobs=5, cap=5)))
    assert get(at_cap, "jobqueue_exporter_held_jobs") == 5
    assert get(at_cap, "jobqueue_exporter_held_cap_exceeded") == 0
    past = samples(view(held=HeldJobs(jobs=6, cap=5)))
    assert get(past, "jobqueue_exporter_held_cap_exceeded") == 1


def test_a_profile_without_a_tracker_exports_no_held_jobs() -> None:
    present = names(samples(view(held=None)))
    assert "jobqueue_exporter_held_jobs" not in present
    assert "jobqueue_exporter_held_cap_exceeded" not in present


def test_a_logical_queue_exports_its_slot_and_a_polling_one_does_not() -> None:
    slot = SlotHealth(
        lag_bytes=4096, retained_bytes=65536, wal_status="extended", safe_wal_bytes=1 << 20, gaps=2
    )
    found = samples(view(slot=slot), view("mails"))
    assert get(found, "jobqueue_exporter_logical_lag_bytes") == 4096
    assert get(found, "jobqueue_exporter_logical_retained_bytes") == 65536
    assert get(found, "jobqueue_exporter_logical_safe_wal_bytes") == 1 << 20
    assert get(found, "jobqueue_exporter_logical_gaps_total") == 2
    status = {
        value: get(found, "jobqueue_exporter_logical_slot_wal_status", wal_status=value)
        for value in ("reserved", "extended", "unreserved", "lost")
    }
    assert status == {"reserved": 0, "extended": 1, "unreserved": 0, "lost": 0}
    assert not {n for n in names(found, "mails") if "logical" in n}


def test_an_unbounded_slot_has_no_safe_wal_size() -> None:
    slot = SlotHealth(
        lag_bytes=0, retained_bytes=0, wal_status="reserved", safe_wal_bytes=None, gaps=0
    )
    present = names(samples(view(slot=slot)))
    assert "jobqueue_exporter_logical_lag_bytes" in present
    assert "jobqueue_exporter_logical_safe_wal_bytes" not in present


def test_hostile_label_values_are_escaped() -> None:
    odd = 'quo"te\\back\nline'
    found = samples(view(label_of={1: odd}, labels=(odd,)))
    assert get(found, "jobqueue_jobs", job_type=odd, status="pending") == 3


def test_no_created_series_and_process_metrics_only_when_asked() -> None:
    text = render([view()], process_metrics=False).decode()
    assert "_created" not in text
    assert "process_" not in text
    assert "process_cpu_seconds_total" in render([view()]).decode()


def test_every_rendered_name_is_defined_and_the_reference_lists_each_definition() -> None:
    found = samples(view())
    assert {name for name, _ in found} <= exposed_metric_names()
    table = reference_table()
    for definition in DEFINITIONS:
        assert (
            f"`{definition.exposed_names[0] if definition.type == 'counter' else definition.name}`"
            in table
        )
        assert definition.help.strip()
        assert definition.labels == BY_NAME[definition.name].labels


def test_every_defined_metric_is_rendered_from_a_view_with_every_part() -> None:
    """A definition the collector never renders would be a README row with no series."""
    slot = SlotHealth(
        lag_bytes=1, retained_bytes=2, wal_status="extended", safe_wal_bytes=3, gaps=1
    )
    stream = StreamHealth(restarts={"lost": 1}, confirm_timeouts=1)
    full = view(slot=slot, stream=stream, coverage=Coverage(withheld=frozenset()))
    text = render([full], process_metrics=False, config=ConfigStatus()).decode()
    rendered = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert exposed_metric_names() - rendered == set()
