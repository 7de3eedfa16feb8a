"""The Solid Queue profiles as data: their queue label, their spelling, what each exports."""

from __future__ import annotations

from exporter.profiles import PROFILES
from exporter.settings.sources import load_settings

DSN = "postgresql://exporter@queue-db:5432/app_production_queue"


def _queue(**flags: str) -> tuple[str, str]:
    settings = load_settings(None, {}, {"--database.dsn": DSN, **flags})
    return settings.queues[0].name, settings.queues[0].profile


def test_a_solid_queue_queue_is_labelled_solid_queue_unless_it_is_named() -> None:
    assert _queue(**{"--queue.profile": "solid-queue"}) == ("solid_queue", "solid-queue")
    assert _queue(**{"--queue.profile": "solid_queue"}) == ("solid_queue", "solid-queue")
    assert _queue(**{"--queue.profile": "solid-queue", "--queue.name": "mail"})[0] == "mail"
    # Other profiles keep the database's name.
    assert _queue(**{"--queue.profile": "oban"})[0] == "app_production_queue"


def test_unpreserved_exports_the_gauges_and_deaths_only() -> None:
    kept, unpreserved = (
        PROFILES["solid-queue"].coverage,
        PROFILES["solid-queue-unpreserved"].coverage,
    )
    counters = {"enqueued", "completed", "failures", "requeued", "cancelled", "latency"}
    assert not counters & kept.withheld
    assert counters <= unpreserved.withheld
    assert "dead" not in unpreserved.withheld
    assert {"duration", "wait"} <= kept.withheld  # the claimed row, the only start, is deleted
    assert kept.failure_reasons == unpreserved.failure_reasons == ("lease_expired", "error")
