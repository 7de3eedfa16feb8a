"""On 1,000,000 rows, the graphile-worker preset's cycle scans no table: its count of deaths
reads only the recent deaths, its quiet cycles only the live sets' index entries, and only the
recount every DEAD_RECOUNT_EVERY cycles reads the whole dead set (index-only)."""

from __future__ import annotations

import pytest

from tests.system.presets.explain import ROWS, _nodes
from tests.system.presets.graphile_explain import DEAD
from tests.system.presets.processes import require

pytestmark = [pytest.mark.slow, pytest.mark.library]


async def test_graphile_cycle_uses_indexes_on_a_million_rows(empty_dsn: str) -> None:
    require("graphile-worker")
    from tests.system.presets.graphile_explain import measure_graphile

    quiet, recount = await measure_graphile(empty_dsn)
    assert set(quiet.plans) == {"horizon", "snapshot", "gauges", "deaths"}
    assert set(recount.plans) == {"horizon", "snapshot", "gauges", "dead", "deaths"}
    assert quiet.seq_scans() == [], quiet.summary()
    assert recount.seq_scans() == [], recount.summary()
    # A quiet cycle reads far fewer rows than the dead set it keeps a gauge of.
    assert max(quiet.rows_read) < ROWS // 50 < DEAD, quiet.summary()
    # The death window reads the deaths since the previous cycle's bound, never the history.
    deaths = [n for n in _nodes(quiet.plans["deaths"][0]["Plan"]) if "Scan" in n["Node Type"]]
    assert sum(n["Actual Rows"] * n.get("Actual Loops", 1) for n in deaths) < ROWS // 50
    # The gauges count every live row but the dead: the available set from index entries
    # only, the locked set (the running jobs, a handful) through its index.
    nodes = _nodes(quiet.plans["gauges"][0]["Plan"])
    scans = {n.get("Index Name"): n["Node Type"] for n in nodes if "Index Name" in n}
    assert scans["jobs_main_index"] == "Index Only Scan", scans
    assert "graphile_worker_exporter_locked_idx" in scans, scans
    assert "graphile_worker_exporter_dead_idx" not in scans, scans
    # The recount reads the dead set once, from index entries only.
    nodes = _nodes(recount.plans["dead"][0]["Plan"])
    scans = {n.get("Index Name"): n["Node Type"] for n in nodes if "Index Name" in n}
    assert scans == {"graphile_worker_exporter_dead_idx": "Index Only Scan"}, scans
    assert min(recount.rows_read) > DEAD, recount.summary()
    assert quiet.exporter_ms, "the exporter's own collections ran on the same data"
    print(quiet.summary())
    print(recount.summary())
