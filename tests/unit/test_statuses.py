"""Status values no mapping names: shown escaped and cut, counted with a bounded memory, logged
once, a field suggested only when obvious; the tracker, the cycle, the SQL, the metric and the
status page around them (no database)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from exporter.counting.snapshot import DEAD_RECOUNT_EVERY
from exporter.counting.sqltext import render_queries
from exporter.counting.statuses import (
    MAX_NAMED,
    OTHER_VALUES,
    OVERFLOW_MESSAGE,
    ROW_MESSAGE,
    STATS_MESSAGE,
    VALUE_CHARS,
    StatusValues,
    closest_status,
    count_unmapped,
    row_notice,
    show_status,
    stats_notices,
)
from exporter.counting.tracker import Tracker, TrackerOptions
from exporter.counting.transitions import CursorOptions, TransitionCursor
from exporter.metrics import render
from exporter.model import (
    DEAD,
    PENDING,
    ConfigStatus,
    JobTypeLabels,
    QueueStatus,
    TableShape,
    Tallies,
)
from exporter.profiles import PRESETS
from exporter.profiles.mapping import coverage_of
from exporter.settings.table import TableMapping
from exporter.web.status import StatusPage, status_page
from tests.helpers import parse
from tests.unit.factories import view
from tests.unit.test_counting_cycle import NAMES, changed, horizon, quiet, run
from tests.unit.test_tracker import make_tracker, row

TEXT = StatusValues(
    {"pending": "queued", "running": "active", "done": "finished", "dead": "dead"},
    "queues[0].table.status_values",
    "tasks.yml:11",
    "app.tasks",
    "state",
)
NUMBERS = StatusValues({"pending": 0, "running": 1, "done": 2, "dead": 3})
METRIC = "jobqueue_exporter_unmapped_status_rows_total"


def test_a_value_is_shown_quoted_escaped_and_cut() -> None:
    assert show_status("failed", numeric=False) == "'failed'"
    assert show_status('two\nlines "and" it\'s', numeric=False) == repr('two\nlines "and" it\'s')
    long = "x" * 1000
    shown = show_status(long, numeric=False)
    assert shown == repr("x" * VALUE_CHARS) + "\u2026"
    assert show_status("x" * VALUE_CHARS, numeric=False) == repr("x" * VALUE_CHARS)  # not cut
    assert show_status(None, numeric=False) == "NULL"
    assert show_status("7", numeric=True) == "7"
    assert show_status("-1", numeric=True) == "-1"


@given(st.text())
def test_any_value_shows_on_one_line_within_bounds(text: str) -> None:
    shown = show_status(text, numeric=False)
    assert "\n" not in shown
    assert "\r" not in shown
    assert len(shown) <= len(repr("\U0010ffff" * VALUE_CHARS)) + 1


def test_the_field_to_fix_is_suggested_only_when_obvious() -> None:
    # A usual word for dead, while the mapped 'dead' is nowhere in the table's statistics.
    assert closest_status("failed", TEXT) == "status_values.dead: failed"
    assert closest_status("failed", TEXT, ["failed", "queued"]) == "status_values.dead: failed"
    # The mapped value is in the table too: 'failed' is a status of its own, not a typo.
    assert closest_status("failed", TEXT, ["failed", "dead"]) == ""
    # A typo on either side is a near miss of one mapped value.
    assert closest_status("finishd", TEXT, ["finishd", "finished"]) == "status_values.done: finishd"
    assert closest_status("Queued", TEXT) == "status_values.pending: Queued"
    # A usual word for a cancelled job: a status of the table's own, named as such.
    assert closest_status("cancelled", TEXT) == "status_values.cancelled: cancelled"
    assert closest_status(None, TEXT) == ""
    assert closest_status("5", NUMBERS) == ""


def test_counting_names_each_value_once_and_at_most_max_named() -> None:
    counter: Counter[str] = Counter()
    assert count_unmapped(counter, "'a'") == "'a'"
    assert count_unmapped(counter, "'a'") is None
    for n in range(MAX_NAMED - 1):
        assert count_unmapped(counter, f"'{n}'") == f"'{n}'"
    assert count_unmapped(counter, "'one too many'") == OTHER_VALUES
    assert count_unmapped(counter, "'and another'") is None
    assert count_unmapped(counter, "'a'") is None  # named values go on counting by name
    assert len(counter) == MAX_NAMED + 1
    assert counter["'a'"] == 3
    assert counter[OTHER_VALUES] == 2
    assert sum(counter.values()) == MAX_NAMED + 4


def test_statistics_name_each_unmapped_value_once_with_setting_and_table() -> None:
    named: set[str] = set()
    notices = stats_notices(TEXT, ["queued", "failed", "finished", "archived"], named)
    assert [n.fields["value"] for n in notices] == ["'failed'", "'archived'"]
    assert all(n.message == STATS_MESSAGE for n in notices)
    assert notices[0].fields == {
        "value": "'failed'",
        "setting": "queues[0].table.status_values",
        "location": "tasks.yml:11",
        "suggestion": "status_values.dead: failed",
        "table": "app.tasks",
        "column": "state",
    }
    assert "suggestion" not in notices[1].fields
    assert stats_notices(TEXT, ["failed", "archived"], named) == []  # once
    assert stats_notices(NUMBERS, ["0", "1", "2", "3"], set()) == []
    many = stats_notices(TEXT, [f"s{n}" for n in range(3 * MAX_NAMED)], set())
    assert len(many) == MAX_NAMED


def test_the_mapping_names_its_setting_and_line() -> None:
    mapping = TableMapping(
        "app.tasks",
        {**TableMapping().columns, "status": "state"},
        dict(TEXT.values),
        origin="queues[2].table",
        lines={"status_values": " (/etc/x.yml:9)"},
    )
    statuses = StatusValues.of(mapping)
    assert statuses == replace(
        TEXT, setting="queues[2].table.status_values", location="/etc/x.yml:9"
    )
    assert not statuses.numeric
    assert StatusValues.of(TableMapping()).numeric  # the reference table's 1-4


def tracker(statuses: StatusValues | None = TEXT) -> Tracker:
    t = make_tracker()
    t.options = replace(t.options, statuses=statuses)
    return t


def test_a_row_in_an_unmapped_status_is_counted_once_per_change_and_in_nothing_else() -> None:
    t = tracker()
    t.baseline(1000.0, [], [])
    died = row(
        "a", status=0, attempts=3, status_text="failed", updated_at=1005.0, created_at=1005.0
    )
    same = row(
        "b", status=0, attempts=3, status_text="failed", updated_at=1005.0, created_at=1005.0
    )
    t.apply(1010.0, [died, same])
    t.apply(1011.0, [died])  # read again: recognised, not counted again
    assert t.tallies.unmapped_status == {"'failed'": 2}
    assert t.unmapped_new == [("'failed'", "failed")]  # named once
    # No enqueue, no failure, no death: only the unmapped rows (status_rule.py).
    assert not any(t.tallies.counters().values())  # no enqueue, failure, death, completion
    # Back into one of the four: it came into the flow (one enqueue), and died from waiting.
    t.apply(1020.0, [replace(died, updated_at=1015.0, status=DEAD, status_text=None)])
    assert t.tallies.unmapped_status == {"'failed'": 2}  # a mapped status is no unmapped row
    assert +t.tallies.enqueued == {"1": 1}
    assert +t.tallies.dead == {("1", "error"): 1}
    assert +t.tallies.failures == {}


def test_the_same_rows_count_the_same_with_and_without_the_unmapped_count() -> None:
    rows = [
        row("a", status=0, attempts=1, status_text="on_hold", updated_at=1004.0),
        row("b", status=PENDING, updated_at=1004.0),
        row("a", status=0, attempts=2, status_text="on_hold", updated_at=1006.0),
    ]
    counted = []
    for statuses in (TEXT, None):
        t = tracker(statuses)
        t.baseline(1000.0, [], [])
        for r in rows:
            t.apply(r.updated_at + 1, [r])
        counted.append(t.tallies.counters())
    assert counted[0] == counted[1]


def test_the_statistics_are_read_at_the_baseline_and_with_every_dead_letter_recount() -> None:
    options = CursorOptions(TrackerOptions(commit_lag_tolerance=30.0, statuses=TEXT))
    bounds = (1.0,)
    names = {name: name for name in (*NAMES, "status_values")}
    cursor = TransitionCursor(
        names, options, JobTypeLabels({}, 50), Tallies(bounds, bounds, bounds)
    )
    stats = [{"value": "queued"}, {"value": "failed"}]
    asked, collected = run(
        cursor.cycle(horizon(100.0)),
        {
            "snapshot": [quiet(100.0)],
            "dead": [[]],
            "status_values": [stats],
            "active": [[]],
            "dead_ids": [[]],
        },
    )
    assert [q.name for q in asked] == ["snapshot", "dead", "status_values", "active", "dead_ids"]
    assert [(n.message, n.fields["value"]) for n in collected.notices] == [
        (STATS_MESSAGE, "'failed'")
    ]
    unmapped = {**changed(1, 101.0), "status": 0, "status_text": "failed"}
    seconds = 101.0
    for _ in range(DEAD_RECOUNT_EVERY - 1):
        seconds += 1
        asked, collected = run(
            cursor.cycle(horizon(seconds)),
            {
                "snapshot": [quiet(seconds)],
                "changes_after": [[unmapped]] if seconds == 102 else [[]],
            },
        )
        assert "status_values" not in [q.name for q in asked]
        if seconds == 102:
            # The row's own notice: the same value, its suggestion from the statistics.
            (notice,) = collected.notices
            assert notice.message == ROW_MESSAGE
            assert notice.fields["suggestion"] == "status_values.dead: failed"
        else:
            assert collected.notices == ()
    asked, collected = run(
        cursor.cycle(horizon(seconds + 1)),
        {
            "snapshot": [quiet(seconds + 1)],
            "dead": [[]],
            "status_values": [[*stats, {"value": "archived"}]],
            "changes_after": [[]],
        },
    )
    assert "status_values" in [q.name for q in asked]
    assert [n.fields["value"] for n in collected.notices] == ["'archived'"]  # only the new one
    assert cursor.tallies.unmapped_status == {"'failed'": 1}


def test_without_mapped_statuses_the_cycle_reads_no_statistics() -> None:
    options = CursorOptions(TrackerOptions(commit_lag_tolerance=30.0))
    bounds = (1.0,)
    names = {n: n for n in NAMES}
    cursor = TransitionCursor(
        names, options, JobTypeLabels({}, 50), Tallies(bounds, bounds, bounds)
    )
    asked, _ = run(
        cursor.cycle(horizon(100.0)),
        {"snapshot": [quiet(100.0)], "dead": [[]], "active": [[]], "dead_ids": [[]]},
    )
    assert "status_values" not in [q.name for q in asked]


def test_the_overflow_is_one_notice_naming_the_setting() -> None:
    notice = row_notice(TEXT, OTHER_VALUES, "whatever")
    assert notice.message == OVERFLOW_MESSAGE
    assert notice.fields == {"setting": "queues[0].table.status_values"}


def test_the_sql_reads_statistics_of_the_mapped_column_and_sends_a_cut_value() -> None:
    mapping = TableMapping(
        "app.ta'sks", {**TableMapping().columns, "status": "st'ate"}, dict(TEXT.values)
    )
    queries = render_queries(mapping, TableShape("int8", True))
    sql = queries["status_values"]
    assert "to_regclass('\"app\".\"ta''sks\"')" in sql
    assert "s.attname = 'st''ate'" in sql
    assert "SELECT DISTINCT v.value AS value" in sql
    padded = render_queries(mapping, TableShape("int8", True, status_padded=True))
    assert "SELECT DISTINCT rtrim(v.value, ' ') AS value" in padded["status_values"]
    assert f"left(j.status_value::text, {VALUE_CHARS + 1})" in queries["changes_after"]
    assert '"st\'ate" AS status_value' in queries["changes_after"]


def test_the_counter_is_the_sum_and_presets_do_not_export_it() -> None:
    own = view("own")
    assert own.tallies is not None
    own.tallies.unmapped_status.update({"'failed'": 3, "'x'": 1})
    samples = parse(render([own], process_metrics=False).decode())
    assert samples[(METRIC, (("queue", "own"),))] == 4
    preset = replace(view("pg"), coverage=coverage_of(PRESETS["pgqueuer"].capabilities))
    samples = parse(render([preset], process_metrics=False).decode())
    assert not [name for name, _ in samples if name == METRIC]


def test_the_status_page_names_the_unmapped_values_escaped() -> None:
    hostile = view("own")
    assert hostile.tallies is not None

    def page() -> str:
        queues = [QueueStatus(hostile, None, None, None)]
        return status_page(StatusPage("/metrics", 1.0, 2.0, ConfigStatus(), queues))

    assert "table.status_values" not in page()
    hostile.tallies.unmapped_status.update({"'<b>x</b>'": 2, "'failed'": 5})
    text = page()
    assert "<b>x" not in text
    assert "7 changed rows with a status none of table.status_values maps: " in text
    assert "&#x27;failed&#x27; (5), &#x27;&lt;b&gt;x&lt;/b&gt;&#x27; (2)" in text


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from([0, 1, 2, 3, 4, 7]),
            st.one_of(st.none(), st.text(max_size=100)),
            st.integers(0, 5),
        ),
        max_size=30,
    )
)
def test_any_sequence_of_statuses_counts_each_unmapped_change_once_and_never_crashes(
    changes: list[tuple[str, int, str | None, int]],
) -> None:
    t = tracker()
    t.baseline(1000.0, [], [])
    expected = 0
    for n, (job, status, text, attempts) in enumerate(changes):
        at = 1001.0 + n
        t.apply(at, [row(job, status=status, status_text=text, attempts=attempts, updated_at=at)])
        expected += status not in (1, 2, 3, 4)
    assert sum(t.tallies.unmapped_status.values()) == expected
    assert len(t.tallies.unmapped_status) <= MAX_NAMED + 1
    assert len(t.unmapped_new) == len(t.tallies.unmapped_status)
