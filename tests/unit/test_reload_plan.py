"""What a reload rebuilds: each queue kept, changed live, reconnected or replaced, and the
process settings only a restart applies. Also the relabelling that moves counters to new names."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.model import JobTypeLabels, Tallies
from exporter.settings import Change, QueueSettings, Settings, WebSettings, plan_reload
from exporter.settings.schema import CollectSettings, DatabaseSettings
from exporter.settings.secrets import dsn_without_password

DSN = "postgresql://watcher:old-secret@db.example:5432/app?sslmode=require"


def queue(name: str = "orders", dsn: str = DSN, **collect: object) -> QueueSettings:
    return QueueSettings(
        name=name,
        database=DatabaseSettings(dsn=dsn),
        collect=replace(CollectSettings(), **collect),  # type: ignore[arg-type]
    )


def settings(*queues: QueueSettings, **web: object) -> Settings:
    return Settings(queues=queues, web=replace(WebSettings(), **web))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("new", "change"),
    [
        (queue(), Change.SAME),
        (queue(interval=5.0), Change.LIVE),
        (queue(stuck_threshold=60.0, staleness_limit=30.0, done_count=True), Change.LIVE),
        (queue(job_types={1: "email"}, max_job_types=10), Change.LIVE),
        (queue(dsn=DSN.replace("old-secret", "new-secret")), Change.RECONNECT),
        (queue(statement_timeout=2.0, lock_timeout=0.5), Change.RECONNECT),
        (queue(interval=5.0, statement_timeout=2.0), Change.RECONNECT),
        (queue(dsn=DSN.replace("db.example", "replica.example")), Change.REPLACE),
        (queue(dsn=DSN.replace("/app", "/other")), Change.REPLACE),
        (queue(dsn=DSN.replace("watcher", "reader")), Change.REPLACE),
        (queue(commit_lag_tolerance=10.0), Change.REPLACE),
        (queue(duration_buckets=(1.0, 2.0)), Change.REPLACE),
        (queue(deadline_error_prefix="Timeout"), Change.REPLACE),
        (replace(queue(), profile="pgqueuer"), Change.REPLACE),
    ],
    ids=lambda v: v.name if isinstance(v, Change) else "",
)
def test_each_queue_change_is_classified_by_what_it_needs_rebuilt(
    new: QueueSettings, change: Change
) -> None:
    plan = plan_reload(settings(queue()), settings(new))
    assert plan.changes == {"orders": change}


def test_pool_settings_and_table_of_the_database_section() -> None:
    base = queue()
    bigger_pool = replace(base, database=replace(base.database, max_connections=3))
    other_table = replace(base, database=replace(base.database, table="jobs.job"))
    assert plan_reload(settings(base), settings(bigger_pool)).changes["orders"] is Change.RECONNECT
    assert plan_reload(settings(base), settings(other_table)).changes["orders"] is Change.REPLACE


def test_queues_are_matched_by_name_added_and_removed() -> None:
    plan = plan_reload(
        settings(queue("orders"), queue("mails")), settings(queue("mails"), queue("billing"))
    )
    assert plan.added == ("billing",)
    assert plan.removed == ("orders",)
    assert plan.changes == {"mails": Change.SAME}
    assert plan.names(Change.SAME) == ["mails"]


def test_listeners_path_and_web_config_file_need_a_restart_the_lifecycle_switch_does_not() -> None:
    old = settings(queue())
    assert plan_reload(old, settings(queue(), enable_lifecycle=True)).restart_needed == ()
    plan = plan_reload(
        old,
        settings(
            queue(),
            listen_address=("[::1]:10049",),
            telemetry_path="/m",
            config_file="/etc/web.yml",
        ),
    )
    assert plan.restart_needed == ("web.listen_address", "web.telemetry_path", "web.config_file")


def test_the_dsn_without_its_password_keeps_everything_else() -> None:
    assert dsn_without_password(DSN) == "postgresql://watcher@db.example:5432/app?sslmode=require"
    assert dsn_without_password("postgresql://h/db?password=x&sslmode=disable") == (
        "postgresql://h/db?sslmode=disable"
    )
    assert dsn_without_password("postgresql://u@h/db") == "postgresql://u@h/db"


# --- Renamed job types ----------------------------------------------------------------------


def counted(labels: JobTypeLabels, tallies: Tallies, job_type: int, n: int = 1) -> None:
    label = labels.label(job_type)
    tallies.enqueued[label] += n
    tallies.failures[(label, "error")] += n
    tallies.add_cost(label, "ai", 0.5 * n)
    for _ in range(n):
        tallies.observe(label, duration=1.0, wait=0.1, latency=2.0)


def test_a_renamed_job_type_takes_its_counts_to_the_new_label() -> None:
    labels, tallies = JobTypeLabels({1: "email"}, 50), Tallies((1.0,), (1.0,), (1.0,))
    counted(labels, tallies, 1, 3)
    counted(labels, tallies, 2, 2)  # no name: labelled "2"
    moved = labels.rename({1: "mail", 2: "scrape"}, 50)
    tallies.relabel(moved)
    assert moved == {"email": "mail", "2": "scrape"}
    assert labels.labels == ["mail", "scrape"]
    assert labels.label(1) == "mail"
    assert tallies.enqueued == {"mail": 3, "scrape": 2}
    assert tallies.failures == {("mail", "error"): 3, ("scrape", "error"): 2}
    assert tallies.cost == {("mail", "ai"): 1.5, ("scrape", "ai"): 1.0}
    assert tallies.duration["mail"].count == 3
    assert set(tallies.wait) == {"mail", "scrape"}


def test_two_job_types_given_one_name_share_one_label_with_summed_counts() -> None:
    labels, tallies = JobTypeLabels({}, 50), Tallies((1.0,), (1.0,), (1.0,))
    counted(labels, tallies, 1, 3)
    counted(labels, tallies, 2, 2)
    tallies.relabel(labels.rename({1: "io", 2: "io"}, 50))
    assert labels.labels == ["io"]
    assert tallies.enqueued == {"io": 5}
    assert tallies.latency["io"].count == 5
    assert tallies.latency["io"].counts == [0]  # 2 s is above the only bound


def test_folded_job_types_stay_in_other_and_a_new_cap_applies_from_now_on() -> None:
    labels, tallies = JobTypeLabels({}, 1), Tallies((1.0,), (1.0,), (1.0,))
    counted(labels, tallies, 1)
    counted(labels, tallies, 2)  # past the cap: other
    moved = labels.rename({2: "scrape"}, 5)
    tallies.relabel(moved)
    assert moved == {}
    assert labels.label(2) == "other"  # its past counts cannot be split out of other
    assert labels.label(3) == "3"  # the raised cap lets a new job type have its own label
    assert labels.labels == ["1", "other", "3"]


def test_a_newly_configured_name_is_exported_before_its_first_job() -> None:
    labels = JobTypeLabels({}, 50)
    labels.label(1)
    assert labels.rename({1: "email", 9: "reports"}, 50) == {"1": "email"}
    assert labels.labels == ["email", "reports"]
