"""Statuses outside the four, counted by the polling tracker as the rule says
(exporter/counting/status_rule.py): a typo counts nothing but the unmapped rows, a mapping names a
table's own values as cancelled or ignored, and the SQL reads each as its code (no database)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from exporter.counting.sqltext import render_queries
from exporter.counting.status_rule import CANCELLED, IGNORED, UNMAPPED
from exporter.counting.statuses import StatusValues, stats_notices
from exporter.counting.tracker import Tracker
from exporter.model import DONE, TableShape
from exporter.profiles import profile_of
from exporter.settings import ConfigError, load_settings
from exporter.settings.table import TableMapping
from tests.unit.test_tracker import make_tracker, row, running

TEXT = {"pending": "queued", "running": "active", "done": "complete", "dead": "failed"}


def tracker() -> Tracker:
    t = make_tracker()
    mapping = TableMapping(status_values=TEXT, cancelled=("cancelled",), ignored=("archived",))
    t.options = replace(t.options, statuses=StatusValues.of(mapping))
    return t


def test_a_done_typo_counts_no_failure_no_completion_only_unmapped_rows() -> None:
    # The table: it writes 'finished', the mapping says done: complete. 15 claimed jobs
    # complete; before, each became a failure (reason error) and completed stayed 0.
    t = tracker()
    jobs = [running(f"j{i}") for i in range(15)]
    t.baseline(1000.0, jobs, [])
    finished = [
        replace(j, status=UNMAPPED, status_text="finished", updated_at=1001.0 + i / 100)
        for i, j in enumerate(jobs)
    ]
    t.apply(1010.0, finished)
    assert t.tallies.unmapped_status == {"'finished'": 15}
    assert not any(t.tallies.counters().values())  # no enqueue, failure, death, completion
    assert +t.dead_delta == {}


def test_a_cancelled_value_counts_one_cancellation_and_no_failed_attempt() -> None:
    t = tracker()
    t.baseline(1000.0, [running("a"), row("b", updated_at=990.0)], [])
    t.apply(1010.0, [replace(running("a"), status=CANCELLED, updated_at=1005.0),
                     replace(row("b"), status=CANCELLED, updated_at=1005.0)])  # fmt: skip
    assert t.tallies.cancelled == {"1": 2}
    assert +t.tallies.failures == {}
    assert +t.tallies.dead == {}
    assert t.tallies.unmapped_status == {}
    # Put back: it comes into the flow again (one enqueue), and its next attempt is counted
    # from the attempts it had, not as failures of attempts it never made.
    back = replace(running("a"), status=DONE, attempts=2, run_started_at=1011.0, updated_at=1012.0)
    t.apply(1020.0, [back])
    assert t.tallies.enqueued == {"1": 1}
    assert t.tallies.completed == {"1": 1}
    assert +t.tallies.failures == {}


def test_an_ignored_value_counts_nothing_and_is_forgotten_like_a_finished_job() -> None:
    t = tracker()
    t.baseline(1000.0, [running("a")], [])
    done = replace(running("a"), status=DONE, updated_at=1002.0)
    t.apply(1010.0, [done], floor=1001.0)
    archived = replace(done, status=IGNORED, updated_at=1003.0)
    t.apply(1011.0, [archived], floor=1001.0)
    assert t.tallies.completed == {"1": 1}
    assert t.tallies.unmapped_status == {}
    assert (t.tracked, t.held) == (1, 1)  # kept while a read may return it again
    t.apply(1012.0, [], floor=1004.0)
    assert t.tracked == 0  # a status outside the four is no active job: memory stays bounded


def test_a_dead_job_moved_to_an_unmapped_value_leaves_the_dead_letter_uncounted() -> None:
    t = tracker()
    t.baseline(1000.0, [], [], dead_ids=["d"])
    t.apply(1010.0, [row("d", status=UNMAPPED, status_text="purged", updated_at=1005.0)])
    assert +t.tallies.requeued == {}
    assert t.dead_delta == {1: -1}
    assert t.tallies.unmapped_status == {"'purged'": 1}


def test_the_sql_reads_each_named_value_as_its_code_and_anything_else_as_unmapped() -> None:
    mapping = TableMapping(
        status_values=TEXT, cancelled=("cancelled", "canceled"), ignored=("arch'ived",)
    )
    sql = render_queries(mapping, TableShape(job_type_text=True))
    case = (
        "CASE \"status\" WHEN 'queued' THEN 1 WHEN 'active' THEN 2 WHEN 'complete' THEN 3 "
        "WHEN 'failed' THEN 4 WHEN 'cancelled' THEN 5 WHEN 'canceled' THEN 5 "
        "WHEN 'arch''ived' THEN 6 ELSE 0 END"
    )
    for name in ("active", "changes_after", "recheck"):
        assert case in sql[name], name
    # Only an unmapped row sends its own text.
    assert "CASE WHEN j.status = 0 THEN left(" in sql["changes_after"]
    # The reference table's numbers with nothing else: still read through the CASE, so a
    # value of its own (7) is unmapped, never taken for a code of the counting's.
    reference = render_queries(TableMapping())["changes_after"]
    assert 'CASE "status" WHEN 1 THEN 1 WHEN 2 THEN 2 WHEN 3 THEN 3 WHEN 4 THEN 4 ELSE 0 END' in (
        reference
    )


def test_named_values_of_the_table_s_own_are_not_reported_from_the_statistics() -> None:
    mapping = TableMapping(status_values=TEXT, cancelled=("cancelled",), ignored=("archived",))
    named: set[str] = set()
    notices = stats_notices(StatusValues.of(mapping), ["queued", "cancelled", "archived"], named)
    assert notices == []
    (notice,) = stats_notices(StatusValues.of(mapping), ["paused"], named)
    assert notice.fields["value"] == "'paused'"


YAML = """\
table:
  name: app.tasks
  status_values: {pending: queued, running: active, done: complete, dead: failed, %s}
"""


def load(tmp_path: Path, extra: str) -> TableMapping:
    path = tmp_path / "config.yml"
    path.write_text(YAML % extra)
    (queue,) = load_settings(str(path), {}, {}).queues
    return queue.mapping


def test_a_mapping_names_cancelled_and_ignored_values_one_or_a_list(tmp_path: Path) -> None:
    mapping = load(tmp_path, "cancelled: cancelled, ignore: [archived, paused]")
    assert mapping.cancelled == ("cancelled",)
    assert mapping.ignored == ("archived", "paused")
    assert mapping.status_values == TEXT  # the four are still the four
    assert not mapping.reference_statuses


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("cancelled: 5", "status_values.cancelled: 5: the four status values are text"),
        ("ignore: [queued]", "status_values.ignore: 'queued' is also the value of pending"),
        ("cancelled: x, ignore: [x]", "status_values.ignore: 'x' is also the value of cancelled"),
        ("ignore: {a: 1}", "status_values.ignore: expected a value or a list of values"),
        ("cancel: x", "status_values.cancel: unknown status (did you mean cancelled?)"),
    ],
)
def test_a_wrong_value_of_the_table_s_own_is_a_configuration_error(
    tmp_path: Path, extra: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, extra)
    assert f"table.{message}" in str(info.value)


def test_the_cancellations_series_is_exported_only_when_a_cancelled_value_is_named(
    tmp_path: Path,
) -> None:
    named = tmp_path / "named.yml"
    named.write_text(YAML % "cancelled: cancelled")
    plain = tmp_path / "plain.yml"
    plain.write_text(YAML % "ignore: archived")
    for path, withheld in ((named, False), (plain, True)):
        (queue,) = load_settings(str(path), {}, {}).queues
        coverage = profile_of(queue).coverage_for(queue)
        assert ("cancelled" in coverage.withheld) is withheld
