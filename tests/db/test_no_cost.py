"""A queue that stores no cost, on a real PostgreSQL: nothing is malformed, and the run time
still comes out, from ``result`` where it holds one and from the row where it does not.

Its completions carry NULL results, JSON nulls and objects without cost fields, as a queue
whose workers never priced anything writes them. The reference table and a mapped one
(tests/mapped_queue.py: started_at and changed_at play run_started_at and updated_at) are
both checked against ground truth computed in SQL from the rows themselves.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.poller import Poller
from exporter.settings import QueueSettings
from exporter.settings.table import quote_identifier, quote_table, sql_literal
from exporter.vocabulary import Status
from tests.conftest import execute, fetch
from tests.helpers import QUEUE, Samples, collect_until, fast_queue, make_poller, scrape
from tests.mapped_queue import prepare_tasks, tasks_queue

# What the workers of a queue without costs leave in result, one per job in turn.
RESULTS = [
    None,
    "null",
    '{"outcome": "ok"}',
    '{"metrics": {}}',
    '{"metrics": {"duration_ms": 1500}}',  # a run time but no cost: the run time counts
    '{"metrics": {"cost": {}}, "lowest": {"price": 12345}}',
]
JOBS = 12
NULL_PATHS = {
    "duration_path": None,
    "cost_ai_path": None,
    "cost_proxy_path": None,
    "cost_total_path": None,
}


def reference(tmp_path: Path, dsn: str, **collect: object) -> QueueSettings:
    del tmp_path
    return fast_queue(dsn, **collect)


def mapped(tmp_path: Path, dsn: str, **collect: object) -> QueueSettings:
    fast = fast_queue(dsn, **collect)
    return replace(tasks_queue(tmp_path / "tasks.yml", dsn), name=QUEUE, collect=fast.collect)


TABLES = {"job": (reference, ("1", "2")), "app.tasks": (mapped, ("mail", "report"))}


class Sql:
    """The queue's table and columns as SQL, whichever names the mapping gives them."""

    def __init__(self, queue: QueueSettings) -> None:
        self.mapping = queue.mapping
        self.table = quote_table(self.mapping.name)

    def __getattr__(self, role: str) -> str:
        return quote_identifier(self.mapping.column(role))

    def value(self, status: Status) -> str:
        return sql_literal(self.mapping.value(status))


async def complete_jobs_without_cost(dsn: str, q: Sql, types: tuple[str, ...]) -> None:
    """JOBS running jobs of two types, each started a different time ago, then completed."""
    kinds = ", ".join(sql_literal(int(t) if t.isdigit() else t) for t in types)
    results = ", ".join("NULL" if r is None else sql_literal(r) for r in RESULTS)
    await execute(
        dsn,
        f"""INSERT INTO {q.table} ({q.job_type}, {q.status}, {q.attempts}, {q.run_started_at},
                                   {q.lease_until}, {q.result}, {q.updated_at})
            SELECT (ARRAY[{kinds}])[i % 2 + 1], {q.value(Status.RUNNING)}, 1,
                   now() - make_interval(secs => 0.3 + i * 0.45),
                   now() + interval '1 minute', (ARRAY[{results}]::jsonb[])[i % {len(RESULTS)} + 1],
                   now()
            FROM generate_series(0, {JOBS - 1}) AS i""",
    )


async def finish(dsn: str, q: Sql) -> None:
    await execute(
        dsn,
        f"""UPDATE {q.table} SET {q.status} = {q.value(Status.DONE)}, {q.lease_until} = NULL,
                {q.updated_at} = now()""",
    )


async def durations_in_sql(dsn: str, q: Sql, *, from_result: bool) -> dict[str, list[float]]:
    """Ground truth: each completed job's run time, by job type, computed from the rows."""
    by_row = f"date_part('epoch', {q.updated_at} - {q.run_started_at})"
    if from_result:
        at = f"{q.result} #> '{{metrics,duration_ms}}'"
        seconds = (
            f"CASE WHEN jsonb_typeof({at}) = 'number' "
            f"THEN ({q.result} #>> '{{metrics,duration_ms}}')::float8 / 1000 ELSE {by_row} END"
        )
    else:
        seconds = by_row
    rows = await fetch(
        dsn,
        f"""SELECT {q.job_type}::text AS job_type, array_agg({seconds}) AS seconds
            FROM {q.table} WHERE {q.status} = {q.value(Status.DONE)} GROUP BY 1""",
    )
    return {r["job_type"]: list(r["seconds"]) for r in rows}


def assert_histogram_is(samples: Samples, truth: dict[str, list[float]]) -> None:
    """The exported duration histogram of each job type holds exactly the ``truth`` values."""
    buckets = series_of(samples, "jobqueue_job_duration_seconds_bucket")
    for job_type, seconds in truth.items():
        labels = (("job_type", job_type), ("queue", QUEUE))
        assert samples[("jobqueue_job_duration_seconds_count", labels)] == len(seconds)
        total = samples[("jobqueue_job_duration_seconds_sum", labels)]
        assert math.isclose(total, math.fsum(seconds), abs_tol=1e-9), job_type
        mine = {dict(k)["le"]: v for k, v in buckets.items() if dict(k)["job_type"] == job_type}
        assert len(mine) > 10  # the default bounds and +Inf
        for le, count in mine.items():
            assert count == sum(1 for s in seconds if s <= float(le)), (job_type, le)


def series_of(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (sample, labels), v in samples.items() if sample == name}


async def run_queue(queue: QueueSettings, dsn: str, types: tuple[str, ...]) -> Poller:
    q = Sql(queue)
    poller = make_poller(queue)
    assert await poller.collect_once()  # the baseline: nothing counted before it
    await complete_jobs_without_cost(dsn, q, types)
    assert await poller.collect_once()
    await finish(dsn, q)
    await collect_until(poller, lambda: sum(poller.tallies.completed.values()) == JOBS)
    return poller


@pytest.mark.parametrize("table", list(TABLES))
async def test_a_queue_without_costs_has_no_malformed_rows_and_a_duration_histogram(
    db_dsn: str, tmp_path: Path, table: str
) -> None:
    make, types = TABLES[table]
    queue = make(tmp_path, db_dsn)
    if table != "job":
        await prepare_tasks(db_dsn, queue.mapping)
    poller = await run_queue(queue, db_dsn, types)
    try:
        samples = scrape(poller)
        truth = await durations_in_sql(db_dsn, Sql(queue), from_result=True)
    finally:
        await poller.database.close()
    # Not vacuous: jobs of both types completed, and one of each six carried a run time.
    assert sorted(truth) == sorted(types)
    assert sum(len(v) for v in truth.values()) == JOBS
    assert 1.5 in [s for v in truth.values() for s in v]
    malformed = series_of(samples, "jobqueue_exporter_malformed_rows_total")
    assert len(malformed) == 5, "the paths are read, so every field's series is there"
    assert set(malformed.values()) == {0.0}
    assert_histogram_is(samples, truth)


@pytest.mark.parametrize("table", list(TABLES))
async def test_null_paths_export_no_cost_and_no_malformed_series_and_time_every_row(
    db_dsn: str, tmp_path: Path, table: str
) -> None:
    make, types = TABLES[table]
    queue = make(tmp_path, db_dsn, **NULL_PATHS)
    if table != "job":
        await prepare_tasks(db_dsn, queue.mapping)
    poller = await run_queue(queue, db_dsn, types)
    try:
        samples = scrape(poller)
        truth = await durations_in_sql(db_dsn, Sql(queue), from_result=False)
    finally:
        await poller.database.close()
    assert sum(len(v) for v in truth.values()) == JOBS
    assert series_of(samples, "jobqueue_cost_usd_total") == {}
    assert series_of(samples, "jobqueue_exporter_malformed_rows_total") == {}
    # The duration_ms of one job in six is not read either: every run time is the row's.
    assert_histogram_is(samples, truth)
    assert series_of(samples, "jobqueue_jobs_completed_total")  # the rest is still exported
