"""A text status value the table mapping does not name, on a real home-grown table
(tests/mapped_queue.py, mapped ``dead: dead`` while the table writes ``failed``): counted and
logged within one collection of the first row carrying it, in no other count, and named at
start from the planner's statistics once the table has been analyzed; values of the table's own
that a mapping names as cancelled or ignored are counted so, and reported as nothing."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.counting.snapshot import DEAD_RECOUNT_EVERY
from exporter.counting.statuses import ROW_MESSAGE, STATS_MESSAGE, VALUE_CHARS
from exporter.model import ConfigStatus, QueueStatus
from exporter.poller import Poller
from exporter.settings import QueueSettings, load_settings
from exporter.web.status import StatusPage, status_page
from tests.conftest import execute
from tests.helpers import QUEUE, cursor, fast_queue, make_poller, scrape, value
from tests.mapped_queue import MAPPING_YAML, prepare_tasks

TYPO = "dead: dead}"
METRIC = "jobqueue_exporter_unmapped_status_rows_total"
INSERT = "INSERT INTO app.tasks (kind, state, tries, error) VALUES ($1, $2, $3, $4)"


def tasks(tmp_path: Path, dsn: str, yaml: str = MAPPING_YAML, name: str = "tasks") -> QueueSettings:
    """The mapped queue of ``yaml`` (written to ``name``.yml) on ``dsn``, collected fast."""
    path = tmp_path / f"{name}.yml"
    path.write_text(yaml.replace("postgresql://app@db.invalid/app", dsn))
    (queue,) = load_settings(str(path), {}, {}).queues
    return replace(queue, name=QUEUE, collect=fast_queue(dsn).collect)


def typo(tmp_path: Path, dsn: str) -> QueueSettings:
    """The mapping with the issue's typo: ``dead: dead`` where the table writes ``failed``."""
    assert "dead: failed}" in MAPPING_YAML
    return tasks(tmp_path, dsn, MAPPING_YAML.replace("dead: failed}", TYPO))


def notices(caplog: pytest.LogCaptureFixture, message: str) -> list[dict[str, object]]:
    return [r.fields for r in caplog.records if r.getMessage() == message]  # type: ignore[attr-defined]


async def test_a_status_typo_is_counted_and_logged_within_one_collection_of_its_first_row(
    db_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    queue = typo(tmp_path, db_dsn)
    await prepare_tasks(db_dsn, queue.mapping)
    poller = make_poller(queue)
    caplog.set_level(logging.WARNING)
    try:
        assert await poller.collect_once()  # the baseline; never analyzed: no statistics
        assert notices(caplog, STATS_MESSAGE) == []
        for _ in range(3):
            await execute(db_dsn, INSERT, "send_email", "failed", 3, "boom")
        await execute(db_dsn, INSERT, "send_email", "queued", 0, None)
        assert await poller.collect_once()  # one collection
        samples = scrape(poller)
        assert value(samples, METRIC) == 3
        assert notices(caplog, ROW_MESSAGE) == [
            {
                "value": "'failed'",
                "setting": "queues[0].table.status_values",
                "location": f"{tmp_path / 'tasks.yml'}:10",
                "suggestion": "status_values.dead: failed",
            }
        ]
        # The unmapped rows are in no other count: the one queued insert, no death.
        assert value(samples, "jobqueue_jobs_enqueued_total", job_type="send_email") == 1
        assert value(samples, "jobqueue_jobs", job_type="send_email", status="dead") == 0
        assert value(samples, "jobqueue_jobs", job_type="send_email", status="pending") == 1

        # Read again, nothing changed: not counted again. Another row of it: counted, not
        # logged again. A new value: logged, escaped and cut.
        assert await poller.collect_once()
        assert value(scrape(poller), METRIC) == 3
        hostile = "it's\n" + "x" * 500
        await execute(db_dsn, INSERT, "send_email", "failed", 3, "boom")
        await execute(db_dsn, INSERT, "send_email", hostile, 0, None)
        assert await poller.collect_once()
        assert value(scrape(poller), METRIC) == 5
        logged = [fields["value"] for fields in notices(caplog, ROW_MESSAGE)]
        assert logged == ["'failed'", repr(hostile[:VALUE_CHARS]) + "\u2026"]
        assert poller.tallies.unmapped_status == {"'failed'": 4, logged[1]: 1}
        queues = [QueueStatus(poller.view(), None, None, None)]
        page = status_page(StatusPage("/metrics", 1.0, 2.0, ConfigStatus(), queues))
        assert "5 changed rows with a status none of table.status_values maps" in page
        assert "&#x27;failed&#x27; (4)" in page
        assert "\n" + "x" * 10 not in page
    finally:
        await poller.database.close()


async def test_the_first_collection_names_a_status_value_the_statistics_hold(
    db_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    queue = typo(tmp_path, db_dsn)
    await prepare_tasks(db_dsn, queue.mapping)
    for state, n in (("failed", 5), ("queued", 5)):
        for _ in range(n):
            await execute(db_dsn, INSERT, "send_email", state, 3, None)
    await execute(db_dsn, "ANALYZE app.tasks")
    caplog.set_level(logging.WARNING)
    right = make_poller(tasks(tmp_path, db_dsn, name="right"))  # the same table, mapped right
    poller = make_poller(queue)
    try:
        assert await right.collect_once()
        assert notices(caplog, STATS_MESSAGE) == []  # a near miss: every value is mapped
        assert await poller.collect_once()
        assert notices(caplog, STATS_MESSAGE) == [
            {
                "value": "'failed'",
                "setting": "queues[0].table.status_values",
                "location": f"{tmp_path / 'tasks.yml'}:10",
                "suggestion": "status_values.dead: failed",
                "table": "app.tasks",
                "column": "state",
            }
        ]
        assert value(scrape(poller), METRIC) == 0  # statistics are no rows
        # A value that appears later, in rows no change read will return (stamped before the
        # baseline): named by the next dead-letter recount once analyzed, not before.
        await execute(
            db_dsn,
            "INSERT INTO app.tasks (kind, state, changed_at) "
            "SELECT 'send_email', 'archived', now() - interval '1 hour' FROM generate_series(1, 5)",
        )
        await execute(db_dsn, "ANALYZE app.tasks")
        for cycle in range(DEAD_RECOUNT_EVERY):
            assert await poller.collect_once()
            named = [fields["value"] for fields in notices(caplog, STATS_MESSAGE)]
            assert named == (["'failed'", "'archived'"] if cycle == DEAD_RECOUNT_EVERY - 1
                             else ["'failed'"]), cycle  # fmt: skip
        assert "suggestion" not in notices(caplog, STATS_MESSAGE)[1]
    finally:
        await poller.database.close()
        await right.database.close()


async def test_a_char_column_s_padding_is_no_unmapped_value(
    db_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    queue = tasks(tmp_path, db_dsn)
    await prepare_tasks(db_dsn, queue.mapping, indexes=False)
    await execute(db_dsn, "ALTER TABLE app.tasks ALTER COLUMN state TYPE char(12)")
    for state in ("failed", "queued", "finished", "failed"):
        await execute(db_dsn, INSERT, "send_email", state, 1, None)
    await execute(db_dsn, "ANALYZE app.tasks")
    caplog.set_level(logging.WARNING)
    poller = make_poller(queue)
    try:
        assert await poller.collect_once()
        assert notices(caplog, STATS_MESSAGE) == []
        assert value(scrape(poller), "jobqueue_jobs", job_type="send_email", status="dead") == 2
        await execute(db_dsn, INSERT, "send_email", "faild", 1, None)
        await execute(db_dsn, "ANALYZE app.tasks")
        poller.rebaseline()  # a fresh start reads the statistics again
        assert await poller.collect_once()
        (found,) = notices(caplog, STATS_MESSAGE)
        assert found["value"] == "'faild'"  # trimmed, as the column compares it
        assert found["suggestion"] == "status_values.dead: faild"
    finally:
        await poller.database.close()


CLAIM = (
    "UPDATE app.tasks SET state = 'active', tries = tries + 1, started_at = now(), "
    "changed_at = now() WHERE state = 'queued'"
)


async def _claimed(poller: Poller, dsn: str, jobs: int) -> None:
    """Enqueue ``jobs`` jobs, claim every queued one, and collect once (it reads them running)."""
    for _ in range(jobs):
        await execute(dsn, INSERT, "send_email", "queued", 0, None)
    await execute(dsn, CLAIM)
    assert await poller.collect_once()


async def test_a_done_typo_counts_no_failure_and_no_completion_only_unmapped_rows(
    db_dsn: str, tmp_path: Path
) -> None:
    # The case: the table writes 'finished', the mapping says done: complete.
    queue = tasks(tmp_path, db_dsn, MAPPING_YAML.replace("done: finished", "done: complete"))
    await prepare_tasks(db_dsn, queue.mapping)
    poller = make_poller(queue)
    try:
        assert await poller.collect_once()
        for batch in (3, 2, 8):  # the truth of the three scrapes
            await _claimed(poller, db_dsn, batch)
            await execute(
                db_dsn,
                "UPDATE app.tasks SET state = 'finished', changed_at = now() "
                "WHERE state = 'active'",
            )
            assert await poller.collect_once()
        samples = scrape(poller)
        assert value(samples, METRIC) == 13
        failures = [n for (name, _), n in samples.items() if name == "jobqueue_job_failures_total"]
        assert failures
        assert sum(failures) == 0  # before: 15, 16 and 23 failures of reason error
        assert value(samples, "jobqueue_jobs_completed_total", job_type="send_email") == 0
        assert sum(n for (name, _), n in samples.items() if name == "jobqueue_jobs_dead_total") == 0
        assert value(samples, "jobqueue_jobs_enqueued_total", job_type="send_email") == 13
        tracker = cursor(poller).tracker
        assert tracker.tracked == tracker.held  # not kept as active: forgotten once passed
    finally:
        await poller.database.close()


OWN = MAPPING_YAML.replace(
    "dead: failed}", "dead: failed, cancelled: cancelled, ignore: [archived]}"
)


async def test_values_a_mapping_names_as_cancelled_or_ignored_are_counted_so_and_quiet(
    db_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    queue = tasks(tmp_path, db_dsn, OWN)
    await prepare_tasks(db_dsn, queue.mapping)
    for state in ("cancelled", "archived", "queued"):
        await execute(db_dsn, INSERT, "send_email", state, 1, None)
    await execute(db_dsn, "ANALYZE app.tasks")
    caplog.set_level(logging.WARNING)
    poller = make_poller(queue)
    try:
        assert await poller.collect_once()  # the statistics hold every value: all named
        await _claimed(poller, db_dsn, 3)
        await execute(
            db_dsn,
            "UPDATE app.tasks SET state = 'cancelled', changed_at = now() "
            "WHERE id = (SELECT min(id) FROM app.tasks WHERE state = 'active')",
        )
        await execute(
            db_dsn,
            "UPDATE app.tasks SET state = 'finished', changed_at = now() WHERE state = 'active'",
        )
        assert await poller.collect_once()
        await execute(
            db_dsn,
            "UPDATE app.tasks SET state = 'archived', changed_at = now() WHERE state = 'finished'",
        )
        assert await poller.collect_once()
        samples = scrape(poller)
        assert value(samples, METRIC) == 0  # JobQueueUnmappedStatus stays quiet
        assert notices(caplog, STATS_MESSAGE) == notices(caplog, ROW_MESSAGE) == []
        assert value(samples, "jobqueue_jobs_cancelled_total", job_type="send_email") == 1
        assert value(samples, "jobqueue_jobs_completed_total", job_type="send_email") == 3
        failures = [n for (name, _), n in samples.items() if name == "jobqueue_job_failures_total"]
        assert sum(failures) == 0
    finally:
        await poller.database.close()
