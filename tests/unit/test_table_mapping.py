"""The table: mapping without a database: parsing and its errors, the SQL it renders, the
catalog check's verdicts on given columns, and text job types as bounded labels."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.counting.sqltext import (
    TableShape,
    index_name,
    index_names,
    index_script,
    index_statements,
    render_queries,
)
from exporter.db.catalog import Column, MappingError, check_mapping
from exporter.model import JobTypeLabels, job_type_label
from exporter.profiles import profile_of
from exporter.settings import Change, ConfigError, Settings, load_settings
from exporter.settings.reload_plan import queue_change
from exporter.settings.table import ROLES, TableMapping
from exporter.vocabulary import CUT_MARK, MAX_JOB_TYPE_LABEL, OTHER, REQUIRED_INDEXES
from tests.mapped_queue import MAPPING_YAML


def load(tmp_path: Path, text: str, **flags: str) -> Settings:
    path = tmp_path / "config.yml"
    path.write_text(text)
    return load_settings(str(path), {}, flags)


def errors(tmp_path: Path, text: str, **flags: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text, **flags)
    return str(info.value).splitlines()


def test_the_issues_mapping_loads_with_every_column_and_status_value(tmp_path: Path) -> None:
    (queue,) = load(tmp_path, MAPPING_YAML).queues
    mapping = queue.mapping
    assert mapping.name == queue.database.table == "app.tasks"
    assert mapping.column("job_type") == "kind"
    assert mapping.column("updated_at") == "changed_at"
    assert dict(mapping.status_values) == {
        "pending": "queued", "running": "active", "done": "finished", "dead": "failed",
    }  # fmt: skip
    assert mapping.named == frozenset(ROLES)
    assert not mapping.reference_statuses


def test_an_omitted_column_keeps_its_reference_name_and_the_default_is_the_reference(
    tmp_path: Path,
) -> None:
    text = "database: {dsn: postgresql://u@h/db}\ntable:\n  columns: {status: state}\n"
    (queue,) = load(tmp_path, text).queues
    assert queue.mapping.column("status") == "state"
    assert queue.mapping.column("job_id") == "job_id"
    assert queue.mapping.name == "job"
    plain = load(tmp_path, "database: {dsn: postgresql://u@h/db}\n").queues[0]
    assert plain.mapping == TableMapping()
    assert plain.mapping.reference_statuses


def test_database_table_is_the_short_form_of_table_name(tmp_path: Path) -> None:
    text = "database: {dsn: postgresql://u@h/db, table: app.tasks}\ntable:\n  columns: {}\n"
    assert load(tmp_path, text).queues[0].mapping.name == "app.tasks"
    # A flag beats the file, as for every other setting.
    named = "database: {dsn: postgresql://u@h/db}\ntable:\n  name: app.tasks\n"
    assert load(tmp_path, named, **{"--database.table": "q.jobs"}).queues[0].mapping.name == (
        "q.jobs"
    )
    both = "database: {dsn: postgresql://u@h/db, table: a}\ntable:\n  name: b\n"
    (error,) = errors(tmp_path, both)
    assert error.startswith("table.name: 'b', but database.table says 'a'")
    assert error.endswith(":3)")


def test_every_mistake_names_its_field_path_and_yaml_line(tmp_path: Path) -> None:
    text = """\
queues:
  - name: tasks
    database: {dsn: "postgresql://u@h/db"}
    table:
      name: "app.tasks; drop table x"
      columns:
        stauts: state
        job_id: 7
        attempts: tries
        max_attempts: tries
      status_values: {pending: queued, running: 2, done: queued}
      colums: {}
"""
    found = errors(tmp_path, text)
    path = str(tmp_path / "config.yml")
    expected = [
        ("queues[0].table.colums: unknown key (did you mean columns?)", 12),
        ("queues[0].table.name: expected a table name", 5),
        ("queues[0].table.columns.stauts: unknown column role (did you mean status?)", 7),
        ("queues[0].table.columns.job_id: expected a column name, got 7", 8),
        ("queues[0].table.columns.max_attempts: column 'tries' already plays attempts", 10),
        ("queues[0].table.status_values: every status needs a value; missing: dead", 11),
        ("queues[0].table.status_values: the values must be all integers or all text", 11),
        ("queues[0].table.status_values.done: 'queued' is also the value of pending", 11),
    ]
    assert len(found) == len(expected), found
    for (start, line), error in zip(expected, found, strict=True):
        assert error.startswith(start), error
        assert error.endswith(f"({path}:{line})"), error


def test_a_preset_refuses_a_column_mapping_and_an_entry_refuses_an_unknown_key(
    tmp_path: Path,
) -> None:
    text = """\
queues:
  - name: p
    profile: procrastinate
    database: {dsn: "postgresql://u@h/db"}
    table: {columns: {status: state}}
  - name: q
    database: {dsn: "postgresql://u@h/db"}
    tabel: {}
"""
    found = errors(tmp_path, text)
    assert found[0].startswith("queues[0].table: a table mapping is for the default profile")
    assert found[1].startswith("queues[1].tabel: unknown key")
    assert "(did you mean table?)" in found[1]


def test_a_changed_mapping_replaces_the_queue_and_a_moved_line_does_not(tmp_path: Path) -> None:
    (old,) = load(tmp_path, MAPPING_YAML).queues
    (moved,) = load(tmp_path, "\n\n" + MAPPING_YAML).queues
    assert queue_change(old, moved) is Change.SAME
    other = replace(old, table=replace(old.table, columns={**old.table.columns, "result": "r"}))
    assert queue_change(old, other) is Change.REPLACE


# --- The SQL it renders ------------------------------------------------------------------------


def test_the_reference_renders_every_block_with_no_placeholder_left() -> None:
    queries = render_queries(TableMapping())
    for name, sql in queries.items():
        assert not re.search(r"\{\w+\}", sql), name
    assert 'FROM "job"' in queries["snapshot"]
    assert '"status" = 1' in queries["snapshot"]
    assert '"status" = 2' in queries["snapshot"]
    assert '"status" AS status' in queries["changes_after"]  # the reference's numbers as they are
    nil = "'00000000-0000-0000-0000-000000000000'"
    assert f"coalesce(nullif($2::text, {nil})::uuid, {nil}::uuid)" in queries["changes_after"]


def test_a_mapping_renders_quoted_columns_status_literals_and_the_id_type() -> None:
    mapping = TableMapping(
        name="App.Tasks",
        columns={**{r: r for r in ROLES}, "status": 'st"ate', "job_id": "id"},
        status_values={"pending": "it's", "running": "b", "done": "c", "dead": "d"},
    )
    queries = render_queries(mapping, TableShape("int8", job_type_text=True))
    assert 'FROM "App"."Tasks"' in queries["dead"]
    assert """WHERE "st""ate" = 'd'""" in queries["dead"]
    assert """"st""ate" = 'it''s'""" in queries["snapshot"]
    assert """"st""ate" IN ('it''s', 'b')""" in queries["active"]
    assert """CASE "st""ate" WHEN 'it''s' THEN 1 WHEN 'b' THEN 2""" in queries["changes_after"]
    assert 'left("job_type"::text, 129) AS job_type' in queries["dead"]
    # The cursor's start (the nil uuid) stands for the smallest bigint.
    start = "'-9223372036854775808'::int8"
    assert f"::int8, {start}))" in queries["changes_after"]
    assert 'ORDER BY t."updated_at", t."id"' in queries["changes_after"]
    assert '"id" = ANY($1::text[]::int8[])' in queries["existing"]
    assert TableShape("int8").cursor_start == str(-(2**63))
    assert TableShape("text").cursor_start == ""


def test_index_statements_follow_the_mapping_and_keep_the_reference_names() -> None:
    assert index_names(TableMapping()) == REQUIRED_INDEXES
    mapping = TableMapping(
        name="app.tasks",
        columns={**{r: r for r in ROLES}, "status": "state", "job_type": "kind"},
        status_values={"pending": "queued", "running": "active", "done": "ok", "dead": "failed"},
    )
    active, updated, dead = index_statements(mapping)
    assert active.name == "tasks_exporter_active_idx"
    assert active.sql.startswith('CREATE INDEX CONCURRENTLY IF NOT EXISTS "tasks_exporter_active')
    assert """ON "app"."tasks" ("state", "kind")""" in active.sql
    assert """WHERE "state" IN ('queued', 'active');""" in active.sql
    assert active.comment.startswith("-- Active rows only")
    assert """ON "app"."tasks" ("updated_at")""" in updated.sql
    assert """WHERE "state" = 'failed';""" in dead.sql
    long = TableMapping(name="t" * 63)
    assert all(len(name) == 63 for name in index_names(long))
    assert index_name(long, "dead") == "t" * 45 + "_exporter_dead_idx"


def test_the_indexes_script_names_each_queue_and_each_table_once(tmp_path: Path) -> None:
    text = MAPPING_YAML + (
        "  - name: again\n    database: {dsn: postgresql://u@h/db, table: app.tasks}\n"
        "  - name: boss\n    profile: pgboss\n    database: {dsn: postgresql://u@h/db}\n"
    )
    script = index_script(load(tmp_path, text).queues, lambda q: profile_of(q).maps_table)
    assert script.count("CREATE INDEX CONCURRENTLY") == 3
    assert "-- Queue tasks: table app.tasks." in script
    assert "-- Queue again: table app.tasks." in script
    assert "-- Queue boss: the pgboss preset" in script


# --- The catalog's verdict ---------------------------------------------------------------------

TASKS_COLUMNS = [
    Column("id", "bigint", "int8"),
    Column("kind", "text", "text"),
    Column("state", "task_state", "enum", ("queued", "active", "finished", "failed")),
    Column("prio", "integer", "int4"),
    Column("tries", "integer", "int4"),
    Column("max_tries", "smallint", "int2"),
    Column("locked_by", "text", "text"),
    Column("locked_until", "timestamp with time zone", "timestamptz"),
    Column("not_before", "timestamp with time zone", "timestamptz"),
    Column("started_at", "timestamp with time zone", "timestamptz"),
    Column("output", "jsonb", "jsonb"),
    Column("error", "character varying(2000)", "varchar"),
    Column("inserted_at", "timestamp with time zone", "timestamptz"),
    Column("changed_at", "timestamp without time zone", "timestamp"),
]


def test_the_catalog_check_names_each_mistake_with_its_line_and_the_real_columns(
    tmp_path: Path,
) -> None:
    text = MAPPING_YAML.replace("result: output", "result: outptu").replace(
        "done: finished", "done: finshed"
    )
    (queue,) = load(tmp_path, text).queues
    with pytest.raises(MappingError) as info:
        check_mapping(queue.mapping, TASKS_COLUMNS)
    path = tmp_path / "config.yml"
    found = str(info.value).splitlines()
    assert found[0] == "the table mapping does not fit table app.tasks:"
    assert found[1] == (
        f"queues[0].table.columns.result: no column 'outptu' (did you mean output?) ({path}:8)"
    )
    # A timestamp without time zone, and no writers' zone declared: how to declare it.
    assert found[2].startswith(
        "queues[0].table.timestamps: changed_at (timestamp without time zone): a timestamp "
        "without time zone is an instant only in the zone its writers used; declare it in the "
        "table mapping, timestamps: {time_zone: UTC} (what Rails writes)"
    )
    assert found[3] == (
        "queues[0].table.status_values.done: 'finshed' is not a value of task_state "
        f"(did you mean finished?); its values: queued, active, finished, failed ({path}:10)"
    )
    # The real columns once, after the mistakes, not repeated on each of them.
    assert found[4] == "app.tasks has the columns " + ", ".join(c.name for c in TASKS_COLUMNS)
    assert len(found) == 5


def test_a_bare_table_name_reports_the_missing_reference_columns_on_one_line(
    tmp_path: Path,
) -> None:
    # --database.table alone: every role keeps its reference name, and most are missing.
    (queue,) = load(tmp_path, "{}\n", **{"database.table": "app.tasks"}).queues
    with pytest.raises(MappingError) as info:
        check_mapping(queue.mapping, TASKS_COLUMNS)
    found = str(info.value).splitlines()
    assert found[0] == "the table mapping does not fit table app.tasks:"
    assert found[1].startswith(
        "table.columns: no column job_id, job_type, status (did you mean state?), attempts, "
    )
    assert found[1].endswith("(the reference names: a role a table: mapping does not name)")
    assert found[2] == "app.tasks has the columns " + ", ".join(c.name for c in TASKS_COLUMNS)
    assert found[3] == (
        "Name the columns that play each role in a table: mapping "
        '(docs/configuration.md, "A home-grown table").'
    )
    assert len(found) == 4
    assert str(info.value).count("inserted_at") == 1  # the real columns, once


def test_a_missing_table_is_one_error_with_the_columns_and_both_ways_out(tmp_path: Path) -> None:
    (queue,) = load(tmp_path, "{}\n").queues
    with pytest.raises(MappingError) as info:
        check_mapping(queue.mapping, None)
    found = str(info.value).splitlines()
    assert found == [
        "table.name: table job does not exist (or this role may not see it)",
        "  the exporter looks for a table with the columns job_id, job_type, status, attempts, "
        "max_attempts, lease_until, run_after, run_started_at, result, last_error, created_at, "
        "updated_at",
        "  jobs in a table of another name: --database.table NAME (database.table in the file)",
        '  columns of other names too: a table: mapping (docs/configuration.md, "A home-grown '
        'table")',
    ]
    # A mapped table is looked for under its own column names, with the mapping's line.
    (mapped,) = load(tmp_path, MAPPING_YAML).queues
    with pytest.raises(MappingError) as info:
        check_mapping(mapped.mapping, None)
    text = str(info.value)
    assert text.startswith("queues[0].table.name: table app.tasks does not exist")
    assert "the columns id, kind, state, prio, tries, max_tries, locked_by," in text


def test_the_catalog_gives_the_shape_and_checks_status_types(tmp_path: Path) -> None:
    (queue,) = load(tmp_path, MAPPING_YAML).queues
    fixed = [*TASKS_COLUMNS[:-1], Column("changed_at", "timestamptz", "timestamptz")]
    assert check_mapping(queue.mapping, fixed) == TableShape("int8", job_type_text=True)
    numbers = [c if c.name != "state" else Column("state", "smallint", "int2") for c in fixed]
    with pytest.raises(MappingError) as info:
        check_mapping(queue.mapping, numbers)
    assert "'queued' is text, but column state is smallint" in str(info.value)
    with pytest.raises(MappingError, match=r"table app\.tasks does not exist"):
        check_mapping(queue.mapping, None)
    # priority and worker_id are never read: required only when the mapping names them.
    unnamed = replace(queue.mapping, named=frozenset())
    without = [c for c in fixed if c.name not in ("prio", "locked_by")]
    assert check_mapping(unnamed, without).job_id_type == "int8"


# --- Text job types as labels ------------------------------------------------------------------


def test_text_job_types_are_cut_and_share_the_label_cap() -> None:
    megabyte = "x" * 1_000_000
    assert job_type_label("report.monthly") == "report.monthly"
    cut = job_type_label(megabyte)
    assert len(cut) == MAX_JOB_TYPE_LABEL
    assert cut.endswith(CUT_MARK)
    labels = JobTypeLabels({}, cap=3)
    assert labels.label(megabyte) == cut
    assert labels.label(megabyte[:-1]) == cut  # the same cut label, the same slot
    assert labels.label('a "quoted"\nname') == 'a "quoted"\nname'
    assert labels.label("<script>") == "<script>"
    assert labels.label("one too many") == OTHER
    assert labels.labels == [cut, 'a "quoted"\nname', "<script>", OTHER]
    assert labels.folded == {"one too many"}
