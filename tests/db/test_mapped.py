"""A home-grown table read through its table: mapping, on a real PostgreSQL: untrusted text job
types end to end, the catalog check at start-up, at the first collection and on reload, and
the indexes the mapping needs. (Its exactness: tests/db/test_exactness.py.)"""

from __future__ import annotations

import asyncio
import html
import time
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.counting.sqltext import index_names, index_statements
from exporter.db.catalog import check_tables
from exporter.demo.queue import split_sql
from exporter.service import Service
from exporter.settings import QueueSettings, Settings, WebSettings, load_settings
from exporter.vocabulary import CUT_MARK, MAX_JOB_TYPE_LABEL
from tests.conftest import execute
from tests.db.test_exposition import promtool_check_metrics
from tests.helpers import QUEUE, fast_queue, get, make_poller, parse
from tests.mapped_queue import MAPPING_YAML, prepare_tasks, tasks_queue

CAP = 5
MEGABYTE = "m" * 1_000_000
# What anyone allowed to enqueue may write as a job type: these come first, so each has a
# label of its own; the rest come once the cap is reached and fold into "other".
HOSTILE = [
    MEGABYTE,
    "<script>alert(1)</script>",
    'say "hi" \\ back\\slash',
    "two\nlines\tand\rreturn",
    "ünïcødé ✓ 🚀",
]
LATER = ["app.reports.generate", "x" * 200 + "<b>", "y" * 200, "over the cap", ""]


def mapped(tmp_path: Path, dsn: str, **collect: object) -> QueueSettings:
    """The issue's mapping (tests/mapped_queue.py) on ``dsn``, collected fast."""
    fast = fast_queue(dsn, **collect)
    return replace(tasks_queue(tmp_path / "tasks.yml", dsn), name=QUEUE, collect=fast.collect)


def served(queue: QueueSettings) -> Settings:
    return Settings(queues=(queue,), web=WebSettings(listen_address=("127.0.0.1:0",)))


@pytest.mark.daemon
async def test_hostile_text_job_types_are_escaped_cut_and_capped_through_metrics_and_page(
    db_dsn: str, tmp_path: Path
) -> None:
    queue = mapped(tmp_path, db_dsn, max_job_types=CAP)
    # Without the exporter's indexes: PostgreSQL cannot index a megabyte of text, so with them
    # such a job could not be enqueued at all (README, "Does my queue fit?").
    await prepare_tasks(db_dsn, queue.mapping, indexes=False)
    insert = "INSERT INTO app.tasks (kind) SELECT unnest($1::text[])"
    await execute(db_dsn, insert, HOSTILE)
    service = Service(served(queue))
    await service.start()
    try:
        poller = service.queues[0].poller
        await poller.wait_for_success()
        await execute(db_dsn, insert, LATER)
        # Every one of them runs and completes: the counters carry the labels too.
        await execute(
            db_dsn,
            "UPDATE app.tasks SET state = 'finished', tries = 1, started_at = now(), "
            """output = '{"metrics": {"duration_ms": 1500, "cost": {"total_usd": 0.25}}}', """
            "changed_at = now()",
        )
        await poller.wait_for_success()
        await poller.wait_for_success()
        assert service.port
        status, metrics, _ = await get(service.port, "/metrics")
        assert status == 200
        status, page, _ = await get(service.port, "/")
        assert status == 200
    finally:
        await service.stop()

    checked = promtool_check_metrics(metrics.encode())
    assert checked.returncode == 0, checked.stdout + checked.stderr
    samples = parse(metrics)
    completed = {
        dict(labels)["job_type"]: n
        for (name, labels), n in samples.items()
        if name == "jobqueue_jobs_completed_total"
    }
    # The label cap holds (one more for "other"), and nothing is lost: all ten completed.
    cut = "m" * (MAX_JOB_TYPE_LABEL - 1) + CUT_MARK
    assert completed == {cut: 1, **dict.fromkeys(HOSTILE[1:], 1), "other": len(LATER)}
    assert len(metrics) < 200_000  # a megabyte went in; labels of 128 characters came out
    cost = [n for (name, _), n in samples.items() if name == "jobqueue_cost_usd_total"]
    assert sum(cost) == pytest.approx(0.25 * (len(HOSTILE) + len(LATER)))
    # The status page lists the labels, escaped, never the raw markup nor the megabyte.
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    for label in completed:
        assert html.escape(label, quote=True) in page
    assert "m" * MAX_JOB_TYPE_LABEL not in page


@pytest.mark.usefixtures("restore_logging")
async def test_a_mapping_the_catalog_proves_wrong_stops_the_start_with_its_lines(
    db_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = mapped(tmp_path, db_dsn)
    await prepare_tasks(db_dsn, queue.mapping, indexes=False)
    # The queue's partial indexes compare state with text: an enum table has its own.
    await execute(db_dsn, "DROP INDEX app.tasks_claim_idx, app.tasks_dedupe_active_uq")
    await execute(db_dsn, "CREATE TYPE app.task_state AS ENUM ('queued', 'active', 'done', 'dead')")
    await execute(
        db_dsn,
        "ALTER TABLE app.tasks ALTER COLUMN state DROP DEFAULT, "
        "ALTER COLUMN state TYPE app.task_state USING 'queued'",
    )
    path = tmp_path / "wrong.yml"
    path.write_text(
        MAPPING_YAML.replace("postgresql://app@db.invalid/app", db_dsn)
        .replace("attempts: tries", "attempts: tires")
        .replace("done: finished", "done: finishd")
    )
    # main() runs its own event loop for the catalog check, as the command line does.
    assert await asyncio.to_thread(main, ["run", "--config.file", str(path)], {}) == 2
    # The start lines (logfmt, time=...) come first; the refusal follows them.
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("time=")]
    assert err[:2] == [
        "jobqueue-exporter: configuration error:",
        "queue tasks: the table mapping does not fit table app.tasks:",
    ]
    assert err[2] == (
        f"queues[0].table.columns.attempts: no column 'tires' (did you mean tries?) ({path}:6)"
    )
    assert err[3] == (
        "queues[0].table.status_values.done: 'finishd' is not a value of app.task_state; its "
        f"values: queued, active, done, dead ({path}:10)"
    )
    assert err[4].startswith("queues[0].table.status_values.dead: 'failed' is not a value of")
    assert err[5].startswith("app.tasks has the columns id, kind, state, prio, payload,")
    assert len(err) == 6


async def test_a_database_down_at_start_is_checked_by_the_first_collection(
    db_dsn: str, tmp_path: Path
) -> None:
    down = mapped(tmp_path, "postgresql://nobody@127.0.0.1:1/nowhere")
    down = replace(down, database=replace(down.database, connect_timeout=1.0))
    # Not an error: the exporter serves jobqueue_up 0 rather than refusing to start.
    (unchecked,) = await check_tables(served(down).queues)
    assert unchecked.queue == down.name
    assert unchecked.why.startswith("connection failed: ")
    # The database comes up with a table the mapping does not fit: the collection says why.
    queue = mapped(tmp_path, db_dsn)
    await prepare_tasks(db_dsn, queue.mapping)
    await execute(db_dsn, "ALTER TABLE app.tasks RENAME COLUMN changed_at TO modified_at")
    poller = make_poller(queue)
    try:
        assert not await poller.collect_once()
        assert poller.health.errors == {"schema": 1}
        assert poller.health.last_error is not None
        assert "queues[0].table.columns.updated_at: no column 'changed_at'" in (
            poller.health.last_error
        )
        assert "app.tasks has the columns id, kind, state," in poller.health.last_error
        assert "modified_at" in poller.health.last_error
        await execute(db_dsn, "ALTER TABLE app.tasks RENAME COLUMN modified_at TO changed_at")
        assert await poller.collect_once()
        assert poller.health.missing_indexes == {
            "tasks_exporter_active_idx": 0,
            "tasks_exporter_updated_at_idx": 0,
            "tasks_exporter_dead_idx": 0,
        }
    finally:
        await poller.database.close()


async def test_a_reload_to_a_mapping_the_catalog_refuses_keeps_the_running_one(
    db_dsn: str, tmp_path: Path
) -> None:
    queue = mapped(tmp_path, db_dsn)
    await prepare_tasks(db_dsn, queue.mapping)
    columns = {**queue.table.columns, "job_type": "knd"}
    wrong = replace(queue, table=replace(queue.table, columns=columns))

    def reload_wrong() -> Settings:
        settings = served(wrong)
        asyncio.run(check_tables(settings.queues))
        return settings

    service = Service(served(queue), reload_wrong)
    await service.start()
    try:
        await service.queues[0].poller.wait_for_success()
        error = await service.reload()
        assert error is not None
        assert "queues[0].table.columns.job_type: no column 'knd' (did you mean kind?)" in error
        assert not service.config_status.successful
        assert service.settings.queues[0].table == queue.table
        await service.queues[0].poller.wait_for_success()
    finally:
        await service.stop()


@pytest.mark.usefixtures("restore_logging")
async def test_the_indexes_command_prints_what_the_index_check_looks_for(
    db_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = mapped(tmp_path, db_dsn)
    await prepare_tasks(db_dsn, queue.mapping, indexes=False)
    poller = make_poller(queue)
    try:
        assert await poller.collect_once()
        names = (
            "tasks_exporter_active_idx",
            "tasks_exporter_updated_at_idx",
            "tasks_exporter_dead_idx",
        )
        assert poller.health.missing_indexes == dict.fromkeys(names, 1)
        assert main(["indexes", "--config.file", str(tmp_path / "tasks.yml")], {}) == 0
        script = capsys.readouterr().out
        for statement in split_sql(script):
            await execute(db_dsn, statement)
        poller.rebaseline()  # the index check runs again with the next collection
        assert await poller.collect_once()
        assert poller.health.missing_indexes == dict.fromkeys(names, 0)
    finally:
        await poller.database.close()


async def test_text_ids_integer_statuses_and_enum_job_types_are_counted_in_keyset_order(
    db_dsn: str, tmp_path: Path
) -> None:
    # Three jobs changed by one statement share one updated_at: one row per chunk, the keyset
    # cursor steps through them in the text id's own order, from the empty string on.
    await execute(
        db_dsn,
        """CREATE SCHEMA q;
        CREATE TYPE q.kind AS ENUM ('mail', 'report');
        CREATE TABLE q.jobs (
            id text PRIMARY KEY, job_type q.kind NOT NULL, status smallint NOT NULL DEFAULT 0,
            attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL DEFAULT 3,
            lease_until timestamptz, run_after timestamptz NOT NULL DEFAULT now(),
            run_started_at timestamptz, result jsonb, last_error text,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now())""",
    )
    path = tmp_path / "q.yml"
    path.write_text(
        f"database: {{dsn: '{db_dsn}'}}\n"
        "table:\n  name: q.jobs\n  columns: {job_id: id}\n"
        "  status_values: {pending: 0, running: 1, done: 2, dead: 3}\n"
    )
    (loaded,) = load_settings(str(path), {}, {}).queues
    queue = replace(loaded, name=QUEUE, collect=fast_queue(db_dsn, max_rows_per_query=1).collect)
    await check_tables(served(queue).queues)  # the catalog agrees
    for statement in index_statements(queue.mapping):
        await execute(db_dsn, statement.sql)
    await execute(db_dsn, "INSERT INTO q.jobs (id, job_type) VALUES ('b', 'mail'), "
                  "('', 'report'), ('a b', 'mail'), ('-1', 'report')")  # fmt: skip
    poller = make_poller(queue)
    try:
        assert await poller.collect_once()  # the baseline
        await execute(
            db_dsn,
            "UPDATE q.jobs SET status = 1, attempts = 1, run_started_at = now(), "
            "lease_until = now() + interval '1 minute', updated_at = now()",
        )
        await execute(
            db_dsn,
            """UPDATE q.jobs SET status = CASE WHEN id = 'b' THEN 3 ELSE 2 END,
                   attempts = CASE WHEN id = 'b' THEN 3 ELSE attempts END,
                   last_error = CASE WHEN id = 'b' THEN 'JobDeadlineExceeded: 300s' END,
                   result = '{"metrics": {"duration_ms": 2000}}', updated_at = now()""",
        )
        # One row per chunk, and the cursor passes rows only once the horizon has moved
        # past them: cycles go on until the four jobs have ended.
        deadline = time.monotonic() + 30.0
        while sum(poller.tallies.completed.values()) + poller.tallies.dead.total() < 4:
            assert time.monotonic() < deadline, "the changes were never all read"
            assert await poller.collect_once()
        assert poller.health.missing_indexes == dict.fromkeys(index_names(queue.mapping), 0)
        tallies = poller.tallies
        assert +tallies.completed == {"mail": 1, "report": 2}
        assert +tallies.dead == {("mail", "deadline"): 1}
        assert tallies.failures[("mail", "deadline")] == 3  # attempts 1 -> 3, all ended
        assert tallies.duration["report"].count == 2
    finally:
        await poller.database.close()
