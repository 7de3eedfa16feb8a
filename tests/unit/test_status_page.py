"""The status page at /: every queue's state at a glance, escaped, self-contained."""

from __future__ import annotations

import re
from dataclasses import replace

from exporter import __version__
from exporter.model import ConfigStatus, Health, QueueStatus, SlotHealth
from exporter.profiles import PRESETS
from exporter.profiles.mapping import coverage_of
from exporter.vocabulary import DOCS_URL
from exporter.web.status import StatusPage, status_page
from tests.pages import RenderedPage
from tests.unit.factories import view

NOW = 1_800_000_000.0
DASH = "\u2013"  # what &ndash; becomes once parsed


def page(*queues: QueueStatus, config: ConfigStatus | None = None, path: str = "/metrics") -> str:
    return status_page(
        StatusPage(
            telemetry_path=path,
            uptime=3725.0,
            now=NOW,
            config=config or ConfigStatus(last_success_at=NOW - 60),
            queues=queues,
        )
    )


def healthy(name: str = "orders") -> QueueStatus:
    v = view(name, health=Health(up=True, last_success_at=NOW - 12, collection_duration=0.0042))
    return QueueStatus(v, None, None, None)


def down(name: str = "mails") -> QueueStatus:
    v = view(name, up=False, snapshot=None, health=Health(up=False, collection_duration=2.0))
    return QueueStatus(v, "connection failed: refused", "connection failed: refused", NOW - 5)


def test_each_queue_shows_state_role_success_error_time_tracked_and_counts() -> None:
    parsed = RenderedPage(page(healthy(), down()))
    orders, mails = parsed.rows["orders"], parsed.rows["mails"]
    # The counts come right after the queue, its state and role: what a person came for.
    assert orders == [
        "orders", "job · profile default", "up", "leader",
        "3", "1", "4", DASH, "1", "12 s",  # pending, running, dead, done (not counted), stuck, oldest
        "12 s ago", "none", "4.2 ms", "polling", "4", "2",  # then the diagnostics
    ]  # fmt: skip
    assert RenderedPage(page(healthy())).cells["orders"] == {
        "queue": "orders job · profile default", "state": "up", "role": "leader",
        "pending": "3", "running": "1", "dead": "4", "done": DASH, "stuck": "1",
        "oldest pending": "12 s", "last success": "12 s ago", "last error": "none",
        "collection": "4.2 ms", "counting": "polling", "tracked jobs": "4", "job types": "2",
    }  # fmt: skip
    assert mails[:4] == [
        "mails",
        "job · profile default",
        "down",
        "not ready",
    ]  # why: the last error, beside it
    assert "connection failed: refused" in mails
    assert "5 s ago" in mails
    assert "never" in mails  # no success yet
    assert mails.count(DASH) == 6  # gauges withdrawn: no stale counts


def test_header_shows_version_uptime_readiness_and_links() -> None:
    text = page(healthy(), down(), path="/custom")
    assert f"jobqueue-exporter <small>{__version__}</small>" in text
    assert "up 1 h · 1 of 2 queues ready" in text
    assert RenderedPage(text).links == [
        "/custom", "/healthz", "/-/healthy", "/readyz", "/-/ready", DOCS_URL,
    ]  # fmt: skip
    assert "configuration loaded" in text
    assert "reload failed" not in text


def test_a_reason_other_than_the_last_error_is_named() -> None:
    status = QueueStatus(down().view, "no successful collection yet", None, None)
    assert RenderedPage(page(status)).rows["mails"][3] == "not ready: no successful collection yet"


def test_a_standby_says_so() -> None:
    status = healthy()
    standby = QueueStatus(
        view(leader=False, collector=False, snapshot=None, tallies=None), None, None, None
    )
    assert RenderedPage(page(status, standby)).rows["orders"][3] == "standby"


def test_the_role_badge_says_what_jobqueue_exporter_leader_says() -> None:
    # Collecting (to count the outage) without ever reaching the database: no lock is held, so
    # /metrics says jobqueue_exporter_leader 0, and the page must not say "leader".
    never = down()
    never = replace(never, view=replace(never.view, leader=False, collector=True))
    cells = RenderedPage(page(never)).cells["mails"]
    assert cells["role"] == "not leader"
    assert 'title="no advisory lock held: the database has not been reached' in page(never)
    assert RenderedPage(page(healthy())).cells["orders"]["role"] == "leader"


def test_each_queue_names_the_table_and_profile_it_reads() -> None:
    tasks = QueueStatus(
        healthy("tasks").view, None, None, None, profile="procrastinate", table="procrastinate_jobs"
    )
    mapped = QueueStatus(healthy().view, None, None, None, table="ops.work_items")
    parsed = RenderedPage(page(tasks, mapped))
    assert parsed.cells["tasks"]["queue"] == "tasks procrastinate_jobs · profile procrastinate"
    assert parsed.cells["orders"]["queue"] == "orders ops.work_items · profile default"


def test_a_failed_reload_is_a_banner_naming_the_error() -> None:
    config = ConfigStatus(
        successful=False,
        last_success_at=NOW - 3600,
        last_error="queues[1].collect.interval: expected a duration",
        last_failure_at=NOW - 30,
    )
    text = page(healthy(), config=config)
    assert re.search(r'class="banner">The last reload failed <span title="[^"]+">30 s ago', text)
    assert "queues[1].collect.interval: expected a duration" in text
    assert "previous configuration is still running" in text


def test_every_value_is_escaped() -> None:
    hostile = '<script>alert("x")</script>'
    status = down(hostile)
    status = QueueStatus(status.view, hostile, hostile, NOW)
    text = page(status, path='/m"><script>')
    assert "<script" not in text
    parsed = RenderedPage(text)
    assert hostile in parsed.rows
    assert parsed.links[0] == '/m"><script>'


def test_a_password_in_an_error_message_is_masked() -> None:
    status = down()
    leaky = "cannot connect to postgresql://app:hunter2@db/queue"
    text = page(QueueStatus(status.view, leaky, leaky, NOW))
    assert "hunter2" not in text
    assert "postgresql://app:***@db/queue" in text


def test_the_page_is_self_contained() -> None:
    parsed = RenderedPage(page(healthy(), down()))
    assert not parsed.tags & {"script", "link", "img", "iframe", "object"}
    assert not [value for name, value in parsed.attrs if name == "src"]
    assert [link for link in parsed.links if "://" in link] == [DOCS_URL]


def test_a_preset_queue_shows_dashes_for_what_its_profile_cannot_tell() -> None:
    coverage = coverage_of(PRESETS["procrastinate"].capabilities)
    v = view("tasks", coverage=coverage, snapshot=replace(view().snapshot, dead=None))
    parsed = RenderedPage(page(QueueStatus(v, None, None, None)))
    cells = parsed.cells["tasks"]
    # pending, running, dead (held: not exported), done; tracked jobs (what its reader holds)
    assert [cells[name] for name in ("pending", "running", "dead", "done")] == [
        "3",
        "1",
        DASH,
        DASH,
    ]
    assert (cells["tracked jobs"], cells["job types"]) == ("4", "2")


def test_a_logical_queue_shows_its_counting_mode_and_slot_lag() -> None:
    slot = SlotHealth(
        lag_bytes=3 * 1024 * 1024 + 419_430, retained_bytes=8 << 20, wal_status="reserved",
        safe_wal_bytes=1 << 30, gaps=0,
    )  # fmt: skip
    streamed = QueueStatus(view("events", slot=slot), None, None, None, counting="logical")
    text = page(healthy(), streamed)
    cells = RenderedPage(text).cells
    assert cells["orders"]["counting"] == "polling"
    assert cells["events"]["counting"] == "logical slot lag 3.4 MiB"
    assert f"{slot.lag_bytes:,} bytes of WAL not yet confirmed" in text  # the exact figure


def test_slot_lag_is_in_bytes_below_a_kibibyte_and_names_a_slot_at_risk() -> None:
    small = SlotHealth(
        lag_bytes=812, retained_bytes=812, wal_status="reserved", safe_wal_bytes=None, gaps=0
    )
    at_risk = replace(small, lag_bytes=5 << 30, wal_status="unreserved", gaps=2)
    rows = RenderedPage(
        page(
            QueueStatus(view("a", slot=small), None, None, None, counting="logical"),
            QueueStatus(view("b", slot=at_risk), None, None, None, counting="logical"),
        )
    ).cells
    assert rows["a"]["counting"] == "logical slot lag 812 B"
    assert rows["b"]["counting"] == "logical slot lag 5.0 GiB · unreserved · 2 gaps"


def test_a_logical_queue_without_a_slot_report_says_why() -> None:
    standby = view("s", leader=False, collector=False, snapshot=None, tallies=None)
    rows = RenderedPage(
        page(
            QueueStatus(standby, None, None, None, counting="logical"),
            QueueStatus(view("t", slot=None), None, None, None, counting="logical"),
        )
    ).cells
    assert rows["s"]["counting"] == "logical slot lag: another exporter reads the slot"
    assert rows["t"]["counting"] == "logical slot lag: no report yet"
