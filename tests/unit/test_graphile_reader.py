"""The graphile-worker reader's counting, without a database: the death window's set difference."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.counting.cycle import PresetError
from exporter.profiles.graphile_worker import LOCK_TIMEOUT, GraphileWorkerReader
from exporter.vocabulary import ERROR

SNAPSHOT = [{"now": 1000.0, "snapshot": "10:10:"}]


def _cycle(
    reader: GraphileWorkerReader, dead: list[tuple[str, str]], *, prepared: int = 0, at: float = 0
) -> dict[str, Any]:
    horizon = {"lower_bound": 1000.0 + at, "hidden": 0, "prepared": prepared}
    queries = {q.name: q for q in reader.queries(horizon)}
    results: dict[str, Any] = {"snapshot": SNAPSHOT, "gauges": []}
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


def test_window_bound_follows_the_previous_horizon_and_waits_for_prepared_transactions() -> None:
    reader = GraphileWorkerReader(30.0)
    assert "deaths" not in _cycle(reader, [], prepared=1)  # no baseline behind a 2PC
    assert reader.counting is False
    first = _cycle(reader, [])
    assert first["gauges"] == (30.0,)
    assert first["deaths"] == (999.0,)  # the baseline reads its own bound
    assert _cycle(reader, [], at=20)["deaths"] == (999.0,)  # the previous horizon's
    assert _cycle(reader, [], at=40, prepared=1)["deaths"] == (1019.0,)
    assert _cycle(reader, [], at=60)["deaths"] == (1019.0,)  # held while 2PC was open


def test_hidden_sessions_refuse_to_count() -> None:
    reader = GraphileWorkerReader()
    with pytest.raises(PresetError):
        reader.queries({"lower_bound": 1000.0, "hidden": 2, "prepared": 0})
