"""The Oban preset in the exporter: its series (cancellations and three failure reasons), the
Lifeline's rescue_after as its stuck test, and the Pruner's retention warning. Pure."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.metrics import render
from exporter.model import PresetJobTypes, QueueView
from exporter.model import Tallies as ModelTallies
from exporter.profiles import PRESETS
from exporter.profiles.base import Gauges, Reading
from exporter.profiles.mapping import coverage_of, snapshot_of
from exporter.profiles.oban import RESCUE_AFTER, ObanReader
from exporter.runtime import QueueRuntime
from exporter.settings import QueueSettings
from exporter.vocabulary import DEADLINE, ERROR, LEASE_EXPIRED
from tests.unit.factories import preset_queue, reader_of, view

BOUNDS = (1.0, 10.0)


def _oban_view() -> QueueView:
    labels = PresetJobTypes(10)
    coverage = coverage_of(PRESETS["oban"].capabilities)
    reading = Reading(100.0, {"app.Mail": Gauges(pending=2)}, counting=True)
    tallies = ModelTallies(BOUNDS, BOUNDS, BOUNDS)
    tallies.cancelled["app.Mail"] = 3
    return replace(
        view("media", snapshot=snapshot_of(reading, labels, coverage),
             label_of={labels.number("app.Mail"): "app.Mail"}),
        labels=tuple(labels.labels), tallies=tallies, coverage=coverage,
    )  # fmt: skip


def test_oban_exports_cancellations_and_three_reasons_the_default_no_cancellations() -> None:
    text = render([view("own"), _oban_view()], process_metrics=False).decode()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    cancelled = {s.labels["queue"]: s.value for s in samples
                 if s.name == "jobqueue_jobs_cancelled_total"}  # fmt: skip
    assert cancelled == {"media": 3.0}  # the default schema has no cancel: no series
    reasons = {s.labels["reason"] for s in samples
               if s.name == "jobqueue_job_failures_total" and s.labels["queue"] == "media"}  # fmt: skip
    assert reasons == {DEADLINE, LEASE_EXPIRED, ERROR}
    statuses = {s.labels["status"] for s in samples
                if s.name == "jobqueue_jobs" and s.labels["queue"] == "media"}  # fmt: skip
    assert statuses == {"pending", "running"}  # discarded rows are history: no dead gauge


def _settings(**collect: float) -> QueueSettings:
    return preset_queue("oban", **collect)


def test_the_heartbeat_timeout_is_the_lifelines_rescue_after_and_defaults_to_pythons() -> None:
    assert reader_of(_settings(heartbeat_timeout=3600.0), ObanReader).rescue_after == 3600.0
    assert reader_of(_settings(), ObanReader).rescue_after == RESCUE_AFTER == 300.0


def test_an_interval_above_half_the_pruners_default_max_age_warns_at_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        QueueRuntime(_settings(interval=15.0))
    assert not [r for r in caplog.records if "retention" in r.getMessage()]
    with caplog.at_level(logging.WARNING):
        QueueRuntime(_settings(interval=45.0))
    warned = [r for r in caplog.records if "retention" in r.getMessage()]
    assert len(warned) == 1
    assert warned[0].fields["retention_seconds"] == 60.0  # type: ignore[attr-defined]


def test_a_changes_row_without_a_contracted_column_is_refused_by_name() -> None:
    from exporter.counting.statediff import CHANGE_COLUMNS, change_rows
    from exporter.model import CountingError

    row = dict.fromkeys(CHANGE_COLUMNS - {"snoozed", "latency"}, 0)
    with pytest.raises(CountingError, match="lacks the columns latency, snoozed"):
        change_rows([row])
    assert change_rows([dict.fromkeys(CHANGE_COLUMNS, 0)]) == [dict.fromkeys(CHANGE_COLUMNS, 0)]
