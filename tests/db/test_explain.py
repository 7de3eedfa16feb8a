"""No per-cycle query scans the job table once the shipped indexes exist (100,000 rows)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import asyncpg
import pytest

from exporter.counting.change_cursor import FOREVER
from exporter.counting.results import ResultPaths
from exporter.counting.sqltext import render_queries
from exporter.model import NIL, REFERENCE_SHAPE
from exporter.settings.table import TIME_ROLES, TableMapping

# A history shaped like the queue's: 99 % DONE over 90 days, some DEAD, a few hundred PENDING
# (some in backoff), about 50 RUNNING (some with an expired lease).
FILL = """
INSERT INTO job (job_type, status, attempts, result, last_error, created_at, updated_at,
                 run_after, run_started_at, lease_until)
SELECT 1 + i % 8,
       CASE WHEN i % 1000 < 5 THEN 4 WHEN i <= 300 THEN 1 WHEN i <= 350 THEN 2 ELSE 3 END,
       1,
       CASE WHEN i > 350 AND i % 1000 >= 5 THEN jsonb_build_object('metrics',
            jsonb_build_object('duration_ms', i % 9000,
                               'cost', jsonb_build_object('ai_usd', 0.01, 'proxy_usd', 0.002,
                                                           'total_usd', 0.013))) END,
       CASE WHEN i % 1000 < 5 THEN 'JobDeadlineExceeded: 300s' END,
       now() - make_interval(secs => (100000 - i) * 77.0),
       now() - make_interval(secs => (100000 - i) * 77.0 - 5),
       now() - make_interval(secs => (100000 - i) * 77.0) + CASE WHEN i <= 40 THEN interval '1 hour' ELSE interval '0' END,
       now() - make_interval(secs => (100000 - i) * 77.0 - 1),
       CASE WHEN i BETWEEN 301 AND 350 THEN now() + CASE WHEN i < 306 THEN interval '-5 minutes' ELSE interval '2 minutes' END END
FROM generate_series(1, 100000) AS i
"""

# The statements of queries.sql that read the job table, as the transition cursor runs them,
# with their arguments. "done" is left out on purpose: it is opt-in (collect.done_count)
# because counting DONE rows must read every one of them.
ARGS: dict[str, tuple[Any, ...]] = {
    "snapshot": (600.0,),
    "dead": (),
    # The cursor 30 s back, no upper bound, one chunk, the default result paths: a cycle's read.
    "changes_after": (),  # filled below from the database's now()
    "active": (),
    "dead_ids": (),  # at the baseline only: the dead index, then one heap visit per dead row
    "existing": (["00000000-0000-0000-0000-000000000000"],),
    "recheck": (["00000000-0000-0000-0000-000000000000"],),
}
# The job table as Rails would have it: every time column a timestamp without time zone in UTC.
NAIVE = """
ALTER TABLE job
    ALTER COLUMN lease_until TYPE timestamp USING lease_until AT TIME ZONE 'UTC',
    ALTER COLUMN run_after TYPE timestamp USING run_after AT TIME ZONE 'UTC',
    ALTER COLUMN run_started_at TYPE timestamp USING run_started_at AT TIME ZONE 'UTC',
    ALTER COLUMN created_at TYPE timestamp USING created_at AT TIME ZONE 'UTC',
    ALTER COLUMN updated_at TYPE timestamp USING updated_at AT TIME ZONE 'UTC'
"""


# The statements that never read the job table (catalog and session views only).
NO_TABLE_READ = frozenset({"horizon", "status_values"})


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    out = [plan]
    for child in plan.get("Plans", []):
        out += _nodes(child)
    return out


@pytest.mark.parametrize("naive", [False, True], ids=["timestamptz", "timestamp in UTC"])
async def test_per_cycle_queries_use_indexes_on_a_100k_row_table(db_dsn: str, naive: bool) -> None:
    conn = await asyncpg.connect(db_dsn)
    try:
        await conn.execute(FILL)
        mapping, shape = TableMapping(name="job"), REFERENCE_SHAPE
        if naive:
            # The cursor's bounds are converted to the column's type, not the column, so the
            # same indexes serve the same plans (the session's zone is not UTC either).
            await conn.execute(NAIVE)
            await conn.execute("SET TimeZone = 'America/Sao_Paulo'")
            mapping = replace(mapping, time_zone="UTC")
            shape = replace(shape, naive_times=frozenset(TIME_ROLES))
        await conn.execute("ANALYZE job")
        assert await conn.fetchval("SELECT count(*) FROM job") == 100000
        since = await conn.fetchval("SELECT now() - interval '30 seconds'")
        queries = render_queries(mapping, shape)
        # Every statement is checked here or named as not reading the table: a block that
        # nothing runs (the old "changes") cannot stand in for the one that runs.
        assert set(queries) == set(ARGS) | NO_TABLE_READ | {"done"}
        changes = (since, NIL, FOREVER, 5000, *ResultPaths().query_args())
        scans: dict[str, list[str]] = {}
        conditions: dict[str, list[str]] = {}
        for name, args in ARGS.items():
            arguments = changes if name == "changes_after" else args
            raw = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {queries[name]}", *arguments)
            plan = json.loads(raw)[0]["Plan"]
            scans[name] = [
                f"{node['Node Type']} on {node.get('Relation Name')} using {node.get('Index Name')}"
                for node in _nodes(plan)
                if "Scan" in node["Node Type"] and node.get("Relation Name") == "job"
            ]
            conditions[name] = [n["Index Cond"] for n in _nodes(plan) if "Index Cond" in n]
        for name, found in scans.items():
            assert found, f"{name}: no scan of job at all?"
            assert not [s for s in found if s.startswith("Seq Scan")], (name, found)
        # The cursor walks its index, and the running jobs' figures come from the active index
        # alone, whatever the columns' type.
        assert scans["changes_after"] == ["Index Scan on job using job_exporter_updated_at_idx"]
        (bounds,) = conditions["changes_after"]  # the index is searched, not read end to end
        assert bounds.startswith("((updated_at >= "), bounds
        assert "updated_at < " in bounds, bounds
        assert "Index Only Scan on job using job_exporter_active_idx" in scans["snapshot"]
        # The proof that the check can fail: the opt-in DONE count does scan the table.
        raw = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {queries['done']}")
        done_nodes = _nodes(json.loads(raw)[0]["Plan"])
        assert any(n["Node Type"] == "Seq Scan" for n in done_nodes)
    finally:
        await conn.close()
