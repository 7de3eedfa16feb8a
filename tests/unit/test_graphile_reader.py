"""The graphile-worker reader's counting, without a database: the death window's set difference."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from exporter.counting.cycle import PresetError
from exporter.profiles.graphile_worker import LOCK_TIMEOUT, GraphileWorkerReader
from exporter.profiles.preset import PresetMode
from exporter.runtime import QueueRuntime
from exporter.settings import QueueSettings
from exporter.settings.schema import DatabaseSettings
from exporter.vocabulary import ERROR, LEASE_EXPIRED
from tests.unit.test_preset_mapping import _preset_view, _rendered

SNAPSHOT = [{"now": 1000.0, "snapshot": "10:10:"}]


def _cycle(
    reader: GraphileWorkerReader,
    dead: list[tuple[str, str]],
    *,
    prepared: int = 0,
    at: float = 0,
    locked: tuple[str, ...] = (),
) -> dict[str, Any]:
    horizon = {"lower_bound": 1000.0 + at, "hidden": 0, "prepared": prepared}
    queries = {q.name: q for q in reader.queries(horizon)}
    gauges = [{"job_type": "slow", "running": len(locked), "locked_ids": list(locked)}]
    results: dict[str, Any] = {"snapshot": SNAPSHOT, "gauges": gauges}
    if "deaths" in queries:
        results["deaths"] = [{"id": i, "job_type": t} for i, t in dead]
    reader.apply(results)
    return {name: q.args for name, q in queries.items()}


def test_baseline_is_history_and_only_ids_new_to_the_window_are_deaths() -> None:
    reader = GraphileWorkerReader()
    args = _cycle(reader, [("1", "bad"), ("2", "bad")])
    assert args["gauges"] == (LOCK_TIMEOUT,)
    assert reader.tallies.counters()["dead"] == {}
    _cycle(reader, [("1", "bad"), ("2", "bad"), ("3", "bad"), ("4", "mail")], at=5)
    _cycle(reader, [("3", "bad"), ("4", "mail")], at=10)  # 1 and 2 fell below the bound
    # A job gone from the window and back (revived by hand, died again) dies a second time.
    _cycle(reader, [("1", "bad"), ("3", "bad"), ("4", "mail")], at=15)
    assert reader.tallies.counters()["dead"] == {("bad", ERROR): 2, ("mail", ERROR): 1}


def test_jobs_seen_locked_are_looked_up_next_cycle_and_die_once() -> None:
    reader = GraphileWorkerReader()
    assert "deaths" not in _cycle(reader, [], prepared=1, locked=("9",))
    assert "deaths" not in _cycle(reader, [], prepared=1, locked=("7",))
    assert _cycle(reader, [], locked=("7",))["deaths"][1] == [7, 9]  # kept across the wait
    # force_unlock_workers left 7 dead with an old run_at: only the lookup finds it.
    assert _cycle(reader, [("7", "slow")], at=5)["deaths"][1] == [7]
    # Returned again (as if a window still held it): no recount.
    assert _cycle(reader, [("7", "slow")], at=10)["deaths"][1] == []
    assert reader.tallies.counters()["dead"] == {("slow", ERROR): 1}


def test_window_bound_follows_the_previous_horizon_and_waits_for_prepared_transactions() -> None:
    reader = GraphileWorkerReader(30.0)
    assert "deaths" not in _cycle(reader, [], prepared=1)  # no baseline behind a 2PC
    assert reader.counting is False
    first = _cycle(reader, [])
    assert first["gauges"] == (30.0,)
    assert first["deaths"] == (999.0, [])  # the baseline reads its own bound
    assert _cycle(reader, [], at=20)["deaths"] == (999.0, [])  # the previous horizon's
    assert _cycle(reader, [], at=40, prepared=1)["deaths"] == (1019.0, [])
    assert _cycle(reader, [], at=60)["deaths"] == (1019.0, [])  # held while 2PC was open


def test_hidden_sessions_refuse_to_count() -> None:
    reader = GraphileWorkerReader()
    with pytest.raises(PresetError):
        reader.queries({"lower_bound": 1000.0, "hidden": 2, "prepared": 0})


def test_a_graphile_queue_exports_its_gauges_and_deaths_and_nothing_else() -> None:
    found = _rendered(_preset_view("graphile-worker"))
    names = {name for name, _ in found}

    def values(metric: str, label: str) -> set[str]:
        return {dict(labels)[label] for name, labels in found if name == metric}

    assert values("jobqueue_jobs", "status") == {"pending", "running", "dead"}
    assert values("jobqueue_jobs_dead_total", "reason") == {ERROR}
    assert values("jobqueue_stuck_jobs", "reason") == {LEASE_EXPIRED}
    for told in ("jobqueue_jobs_scheduled", "jobqueue_oldest_ready_wait_seconds",
                 "jobqueue_running_oldest_seconds"):  # fmt: skip
        assert told in names, told
    for untold in (
        "jobqueue_jobs_enqueued_total",
        "jobqueue_jobs_completed_total",
        "jobqueue_jobs_requeued_total",
        "jobqueue_job_failures_total",
        "jobqueue_job_wait_seconds_count",
        "jobqueue_job_duration_seconds_count",
        "jobqueue_job_latency_seconds_count",
        "jobqueue_oldest_pending_age_seconds",
    ):
        assert untold not in names, untold


def test_the_profile_reads_graphiles_table_with_its_4_hour_takeover_as_stuck_default() -> None:
    base = QueueSettings(name="q", database=DatabaseSettings(dsn="postgresql://u@h/a"))
    default = QueueRuntime(replace(base, profile="graphile-worker"))
    tuned = QueueRuntime(replace(base, profile="graphile-worker",
                                 collect=replace(base.collect, heartbeat_timeout=60.0)))  # fmt: skip
    for runtime, stuck_after in ((default, LOCK_TIMEOUT), (tuned, 60.0)):
        mode = runtime.poller.mode
        assert isinstance(mode, PresetMode)
        assert isinstance(mode.reader, GraphileWorkerReader)
        assert mode.reader.stuck_after == stuck_after
    assert default.election is not None
    assert default.election.lock.options.table == "graphile_worker._private_jobs"
    assert default.poller.profile.required_indexes == (
        "graphile_worker_exporter_locked_idx", "graphile_worker_exporter_dead_idx",
    )  # fmt: skip
