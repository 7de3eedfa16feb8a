"""Tables as they are, without a database: a table without ``result``, and time columns that are
``timestamp without time zone`` in a declared writers' zone: parsed, checked against given
catalog columns, and rendered into SQL that reads instants and keeps the cursor on the column."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from exporter.counting.sqltext import render_queries
from exporter.db.catalog import Column, MappingError, check_mapping
from exporter.model import TableShape
from exporter.settings import ConfigError, QueueSettings, load_settings
from exporter.settings.table import TIME_ROLES

RAILS = """\
database: {dsn: "postgresql://u@h/app"}
table:
  name: jobs
  columns: {job_id: id, status: state, result: null}
  status_values: {pending: queued, running: running, done: finished, dead: failed}
  %s
"""
NAIVE = "timestamp(6) without time zone"


def load(tmp_path: Path, extra: str = "", **flags: str) -> QueueSettings:
    path = tmp_path / "config.yml"
    path.write_text(RAILS % extra)
    (queue,) = load_settings(str(path), {}, flags).queues
    return queue


def refused(tmp_path: Path, extra: str = "", **flags: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, extra, **flags)
    return str(info.value).splitlines()


def test_a_table_without_result_reads_no_figure_from_it(tmp_path: Path) -> None:
    queue = load(tmp_path)
    assert not queue.mapping.has("result")
    collect = queue.collect
    paths = (collect.duration_path, collect.cost_ai_path, collect.cost_proxy_path,
             collect.cost_total_path)  # fmt: skip
    assert paths == (None, None, None, None)  # the defaults need a result: none is read
    sql = render_queries(queue.mapping, TableShape("int8", True))
    assert "NULL::jsonb AS result" in sql["changes_after"]
    assert '"result"' not in "".join(sql.values())


def test_a_path_into_a_result_the_table_lacks_is_refused_with_the_way_out(tmp_path: Path) -> None:
    path = tmp_path / "config.yml"
    found = refused(tmp_path, **{"collect.cost-total-path": "metrics.cost"})
    assert found == [
        "collect.cost_total_path: reads result, but table.columns.result is null (the table has "
        f"none): set it to null, or name the result column ({path}:4)"
    ]
    # Set to null as well: what the defaults are made then anyway.
    assert load(tmp_path, **{"collect.cost-total-path": ""}).collect.cost_total_path is None


def test_only_the_result_column_may_be_null(tmp_path: Path) -> None:
    path = tmp_path / "config.yml"
    path.write_text((RAILS % "").replace("result: null", "updated_at: null"))
    with pytest.raises(ConfigError) as info:
        load_settings(str(path), {}, {})
    assert "table.columns.updated_at: expected a column name, got None (only result may be " in (
        str(info.value)
    )


@pytest.mark.parametrize(
    ("written", "zone"),
    [
        ("UTC", "UTC"),
        ("utc", "UTC"),
        ("Etc/UTC", "UTC"),
        ('"+00:00"', "UTC"),
        ('"+02:00"', "+02:00"),
        ('"-05:30"', "-05:30"),
    ],
)
def test_the_writers_zone_is_utc_or_a_fixed_offset(tmp_path: Path, written: str, zone: str) -> None:
    assert load(tmp_path, f"timestamps: {{time_zone: {written}}}").mapping.time_zone == zone


@pytest.mark.parametrize("written", ["Europe/Berlin", "America/New_York", '"+2"', '"+15:00"'])
def test_a_zone_that_changes_its_offset_is_refused_with_why(tmp_path: Path, written: str) -> None:
    (line,) = [e for e in refused(tmp_path, f"timestamps: {{time_zone: {written}}}") if "zone" in e]
    assert line.startswith("table.timestamps.time_zone: expected UTC or a fixed offset such as ")
    assert "the change cursor would miss that hour's changes" in line


RAILS_COLUMNS = [
    Column("id", "bigint", "int8"),
    Column("job_type", "character varying", "varchar"),
    Column("state", "character varying", "varchar"),
    Column("attempts", "integer", "int4"),
    Column("max_attempts", "integer", "int4"),
    Column("last_error", "text", "text"),
    *(Column(role, NAIVE, "timestamp") for role in TIME_ROLES),
]


def test_naive_time_columns_need_the_declared_zone_and_the_message_says_how(
    tmp_path: Path,
) -> None:
    with pytest.raises(MappingError) as info:
        check_mapping(load(tmp_path).mapping, RAILS_COLUMNS)
    found = str(info.value).splitlines()
    assert found[1] == (
        "table.timestamps: lease_until (timestamp(6) without time zone), run_after (timestamp(6) "
        "without time zone), run_started_at (timestamp(6) without time zone), created_at "
        "(timestamp(6) without time zone), updated_at (timestamp(6) without time zone): a "
        "timestamp without time zone is an instant only in the zone its writers used; declare it "
        "in the table mapping, timestamps: {time_zone: UTC} (what Rails writes) or an offset such "
        "as +02:00, or make the columns timestamptz"
    )
    shape = check_mapping(load(tmp_path, "timestamps: {time_zone: UTC}").mapping, RAILS_COLUMNS)
    assert shape.naive_times == frozenset(TIME_ROLES)
    # A column of no time type at all is still refused, naming both ways.
    wrong = [replace(c, declared="date", base="date") if c.name == "run_after" else c
             for c in RAILS_COLUMNS]  # fmt: skip
    with pytest.raises(MappingError) as info:
        check_mapping(load(tmp_path, "timestamps: {time_zone: UTC}").mapping, wrong)
    assert (
        "table.columns.run_after: column run_after is date; run_after needs timestamptz, or a "
        "timestamp without time zone whose writers' zone the mapping declares"
    ) in str(info.value)


def test_a_mapping_without_result_fits_a_table_without_one(tmp_path: Path) -> None:
    assert not any(c.name == "result" for c in RAILS_COLUMNS)
    mapping = load(tmp_path, "timestamps: {time_zone: UTC}").mapping
    check_mapping(mapping, RAILS_COLUMNS)  # no complaint about a result column
    with pytest.raises(MappingError) as info:
        check_mapping(mapping, None)  # no such table: the columns looked for, without result
    assert "with the columns id, job_type, state, attempts, max_attempts, lease_until," in (
        str(info.value)
    )
    assert "result" not in str(info.value).splitlines()[1]
    # With a result mapped, the same table is told it lacks one.
    named = replace(mapping, columns={**mapping.columns, "result": "output"})
    with pytest.raises(MappingError, match=r"table\.columns\.result: no column 'output'"):
        check_mapping(named, RAILS_COLUMNS)


def test_naive_columns_are_read_as_instants_and_the_cursor_bounds_meet_the_column(
    tmp_path: Path,
) -> None:
    mapping = load(tmp_path, 'timestamps: {time_zone: "+02:00"}').mapping
    sql = render_queries(mapping, TableShape("int8", True, naive_times=frozenset(TIME_ROLES)))
    changes = sql["changes_after"]
    # The column stays bare where the index serves it: the bounds are converted instead.
    assert "WHERE t.\"updated_at\" >= ($1::timestamptz AT TIME ZONE INTERVAL '+02:00')" in changes
    assert "AND t.\"updated_at\" < ($3::timestamptz AT TIME ZONE INTERVAL '+02:00')" in changes
    assert 'ORDER BY t."updated_at", t."id"' in changes
    assert "(\"updated_at\" AT TIME ZONE INTERVAL '+02:00') AS updated_at" in changes
    assert "min((\"created_at\" AT TIME ZONE INTERVAL '+02:00'))" in sql["snapshot"]
    assert "(\"run_after\" AT TIME ZONE INTERVAL '+02:00') > c.now" in sql["snapshot"]
    for name in ("active", "recheck"):
        assert "(\"updated_at\" AT TIME ZONE INTERVAL '+02:00')" in sql[name], name
    # timestamptz columns of the same table are read as they are.
    mixed = render_queries(mapping, TableShape("int8", True, naive_times=frozenset({"run_after"})))
    assert 'WHERE t."updated_at" >= $1::timestamptz' in mixed["changes_after"]
    assert '"updated_at" AS updated_at' in mixed["changes_after"]
