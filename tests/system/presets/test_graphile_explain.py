"""On 1,000,000 rows, the graphile-worker preset's cycle scans no table: its count of deaths
reads only the recent deaths, its gauges only index entries of the live sets they count."""

from __future__ import annotations

import pytest

from tests.system.presets.explain import ROWS, _nodes
from tests.system.presets.processes import require

pytestmark = pytest.mark.slow


async def test_graphile_cycle_uses_indexes_on_a_million_rows(empty_dsn: str) -> None:
    require("graphile-worker")
    from tests.system.presets.graphile_explain import measure_graphile

    result = await measure_graphile(empty_dsn)
    assert set(result.plans) == {"horizon", "snapshot", "gauges", "deaths"}
    assert result.seq_scans() == [], result.summary()
    # The death window reads the deaths since the previous cycle's bound, never the history.
    deaths = [n for n in _nodes(result.plans["deaths"][0]["Plan"]) if "Scan" in n["Node Type"]]
    assert sum(n["Actual Rows"] * n.get("Actual Loops", 1) for n in deaths) < ROWS // 50
    # The gauges count every live row (graphile deletes the rest): the two big sets from index
    # entries only; the locked set (the running jobs, a handful) through its index too.
    nodes = _nodes(result.plans["gauges"][0]["Plan"])
    scans = {n.get("Index Name"): n["Node Type"] for n in nodes if "Index Name" in n}
    assert scans["jobs_main_index"] == "Index Only Scan", scans
    assert scans["graphile_worker_exporter_dead_idx"] == "Index Only Scan", scans
    assert "graphile_worker_exporter_locked_idx" in scans, scans
    assert result.exporter_ms, "the exporter's own collections ran on the same data"
    print(result.summary())
