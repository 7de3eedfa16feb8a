"""The graphile-worker reader's counting, without a database: the death window's set difference."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from exporter.counting.horizon import TIMESTAMP_MARGIN
from exporter.counting.snapshot import DEAD_RECOUNT_EVERY
from exporter.model import CountingError
from exporter.profiles.graphile_worker import LOCK_TIMEOUT, GraphileWorkerReader
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
    below: tuple[str, ...] = (),
    table: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One cycle: ``dead`` the death query's (id, task) rows, those in ``below`` found by id
    under the window's bound; ``table`` what a recount would find."""
    horizon = {"lower_bound": 1000.0 + at, "hidden": 0, "prepared": prepared}
    queries = {q.name: q for q in reader.queries(horizon)}
    gauges = [{"job_type": "slow", "running": len(locked), "locked_ids": list(locked)}]
    results: dict[str, Any] = {"snapshot": SNAPSHOT, "gauges": gauges}
    if "deaths" in queries:
        results["deaths"] = [{"id": i, "job_type": t, "in_window": i not in below}
                             for i, t in dead]  # fmt: skip
    if "dead" in queries:
        results["dead"] = [{"job_type": t, "held": n} for t, n in (table or {}).items()]
    reading = reader.apply(results)
    out: dict[str, Any] = {name: q.args for name, q in queries.items()}
    out["held"] = {t: g.held for t, g in reading.gauges.items() if g.held}
    return out


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
    assert _cycle(reader, [("7", "slow")], at=5, below=("7",))["deaths"][1] == [7]
    # Still dead, followed by id from now on (not locked any more): no second death.
    assert _cycle(reader, [("7", "slow")], at=10, below=("7",))["deaths"][1] == [7]
    assert reader.tallies.counters()["dead"] == {("slow", ERROR): 1}


def test_window_bound_follows_the_previous_horizon_and_waits_for_prepared_transactions() -> None:
    reader = GraphileWorkerReader(30.0)
    assert "deaths" not in _cycle(reader, [], prepared=1)  # no baseline behind a 2PC
    assert reader.counting is False
    first = _cycle(reader, [])
    assert first["gauges"] == (30.0,)
    assert first["deaths"] == (1000.0 - TIMESTAMP_MARGIN, [])  # the baseline reads its own bound
    assert "dead" in first  # and recounts the dead set
    assert _cycle(reader, [], at=20)["deaths"] == (1000.0 - TIMESTAMP_MARGIN, [])  # the previous
    assert _cycle(reader, [], at=40, prepared=1)["deaths"] == (1020.0 - TIMESTAMP_MARGIN, [])
    # Held while 2PC was open.
    assert _cycle(reader, [], at=60)["deaths"] == (1020.0 - TIMESTAMP_MARGIN, [])


def test_hidden_sessions_refuse_to_count() -> None:
    reader = GraphileWorkerReader()
    with pytest.raises(CountingError):
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
        assert isinstance(mode, GraphileWorkerReader)
        assert mode.stuck_after == stuck_after
    assert default.election is not None
    assert default.election.lock.options.table == "graphile_worker._private_jobs"
    assert default.poller.profile.required_indexes == (
        "graphile_worker_exporter_locked_idx", "graphile_worker_exporter_dead_idx",
    )  # fmt: skip


def test_dead_gauge_is_recounted_every_n_cycles_and_follows_seen_deaths_between() -> None:
    reader = GraphileWorkerReader()
    # Before the baseline (a prepared transaction), every cycle recounts: nothing to follow.
    assert _cycle(reader, [], prepared=1, table={"bad": 990})["held"] == {"bad": 990}
    args = _cycle(reader, [("1", "bad")], table={"bad": 1000})  # the baseline
    assert "dead" in args
    assert args["held"] == {"bad": 1000}
    # Two deaths: the gauge follows without a recount; 1 was the baseline's.
    args = _cycle(reader, [("1", "bad"), ("2", "bad"), ("3", "mail")], at=5)
    assert "dead" not in args
    assert args["held"] == {"bad": 1001, "mail": 1}
    # 1 aged out of the window but is followed by id, 2 deleted (or revived) by hand: gone.
    args = _cycle(reader, [("1", "bad"), ("3", "mail")], at=10, below=("1",))
    assert args["deaths"][1] == [1, 2, 3]
    assert args["held"] == {"bad": 1000, "mail": 1}
    for n in range(DEAD_RECOUNT_EVERY - 2):
        assert "dead" not in _cycle(reader, [("1", "bad"), ("3", "mail")], at=20 + n,
                                    below=("1", "3"))  # fmt: skip
    # The recount absorbs what no window saw (old dead rows deleted by hand) ...
    args = _cycle(reader, [("1", "bad"), ("3", "mail"), ("4", "bad")], at=50, below=("1", "3"),
                  table={"bad": 700, "mail": 1})  # fmt: skip
    assert args["held"] == {"bad": 700, "mail": 1}
    # ... and then follows only its window again: 1 and 3 lie below it, 4 does not.
    args = _cycle(reader, [("4", "bad")], at=55)
    assert args["deaths"][1] == [4]
    assert args["held"] == {"bad": 700, "mail": 1}
    assert reader.tallies.counters()["dead"] == {("bad", ERROR): 2, ("mail", ERROR): 1}
