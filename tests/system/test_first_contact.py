"""What a newcomer meets in the first hour, from the real program against real PostgreSQL:
--config.check refusing what the start refuses, the missing-table error, the indexes command,
and the DEBUG lines while the database is down."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporter.settings.table import TableMapping
from tests.conftest import PgServer, execute
from tests.mapped_queue import MAPPING_YAML, prepare_tasks

pytestmark = pytest.mark.daemon

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "hunter2-S3cret"
START_FLAGS = ("--web.listen-address=127.0.0.1:0", "--collect.interval=1s")
TASKS = TableMapping(
    name="app.tasks",
    columns={"job_id": "id", "job_type": "kind", "status": "state", "priority": "prio",
             "attempts": "tries", "max_attempts": "max_tries", "worker_id": "locked_by",
             "lease_until": "locked_until", "run_after": "not_before",
             "run_started_at": "started_at", "result": "output", "last_error": "error",
             "created_at": "inserted_at", "updated_at": "changed_at"},
    status_values={"pending": "queued", "running": "active", "done": "finished", "dead": "failed"},
)  # fmt: skip


def program(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The installed program, run to its end (the start is refused before it serves)."""
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
    )  # fmt: skip


def refusal(stderr: str) -> list[str]:
    """The start's refusal, without its start-up log lines and its first line."""
    lines = [line for line in stderr.splitlines() if not line.startswith("time=")]
    assert lines[0] == "jobqueue-exporter: configuration error:", stderr
    return lines[1:]


@pytest.mark.parametrize(
    ("mistake", "old", "new"),
    [
        ("wrong column", "attempts: tries", "attempts: tires"),
        ("wrong type", "updated_at: changed_at", "updated_at: payload"),
        ("missing table", "name: app.tasks ", "name: app.taskz "),
    ],
)
async def test_config_check_with_a_live_database_refuses_what_the_start_refuses(
    db_dsn: str, tmp_path: Path, mistake: str, old: str, new: str
) -> None:
    await prepare_tasks(db_dsn, TASKS)
    good = tmp_path / "good.yml"
    good.write_text(MAPPING_YAML.replace("postgresql://app@db.invalid/app", db_dsn))
    checked = program("--config.check", str(good))
    assert (checked.returncode, checked.stdout) == (
        0, f"{good}: queue tasks: table app.tasks fits its database\n{good}: OK\n",
    )  # fmt: skip
    wrong = tmp_path / "wrong.yml"
    assert old in good.read_text(), mistake
    wrong.write_text(good.read_text().replace(old, new))

    checked = program("--config.check", str(wrong))
    started = program("--config.file", str(wrong), *START_FLAGS)
    assert (checked.returncode, started.returncode) == (1, 2), mistake
    prefix = f"{wrong}: "
    assert all(line.startswith(prefix) for line in checked.stderr.splitlines())
    said = [line.removeprefix(prefix) for line in checked.stderr.splitlines()]
    assert said == refusal(started.stderr), mistake  # the same messages, word for word
    assert said[0].startswith("queue tasks: ")


def test_config_check_takes_the_dsn_from_the_environment_and_says_when_it_cannot_reach_it(
    db_dsn: str, tmp_path: Path
) -> None:
    path = tmp_path / "config.yml"
    path.write_text("collect:\n  interval: 5s\n")
    alone = program("--config.check", str(path))
    assert alone.stdout == (
        f"{path}: OK (the file only: no DSN in the file, environment or flags to check the "
        "queues against)\n"
    )
    empty = program("--config.check", str(path), env={"DATABASE_URL": db_dsn})
    assert empty.returncode == 0  # db_dsn holds the reference job table
    assert empty.stdout.endswith(f": table job fits its database\n{path}: OK\n")
    down = f"postgresql://app:{PASSWORD}@127.0.0.1:1/orders"
    unreachable = program("--config.check", str(path), "--database.dsn", down)
    assert unreachable.returncode == 0  # the start would not refuse it either
    assert "queue orders: NOT checked: the database cannot be reached (connection failed:" in (
        unreachable.stdout
    )
    assert PASSWORD not in unreachable.stdout + unreachable.stderr


async def test_a_database_without_the_table_gets_one_error_with_both_ways_out(
    pg_cluster: PgServer, db_dsn: str
) -> None:
    name = "jqe_empty_" + str(time.monotonic_ns())
    await execute(pg_cluster.admin_dsn, f'CREATE DATABASE "{name}"')
    try:
        started = program(*START_FLAGS, env={"JOBQUEUE_EXPORTER_DSN": pg_cluster.dsn(name)})
    finally:
        await execute(pg_cluster.admin_dsn, f'DROP DATABASE "{name}" WITH (FORCE)')
    assert started.returncode == 2
    lines = refusal(started.stderr)
    assert lines[0] == (
        f"queue {name}: table.name: table job does not exist (or this role may not see it)"
    )
    text = "\n".join(lines)
    assert len(lines) == 4  # one error: the table, the columns once, the two ways out
    assert text.count("run_started_at") == 1
    assert "--database.table NAME" in lines[2]
    assert "a table: mapping" in lines[3]

    # A bare --database.table on a table of other column names: one line for the roles left
    # at their reference names, the real columns once.
    await prepare_tasks(db_dsn, TASKS)
    bare = program(*START_FLAGS, "--database.table", "app.tasks", env={"DATABASE_URL": db_dsn})
    assert bare.returncode == 2
    lines = refusal(bare.stderr)
    assert lines[0].endswith("the table mapping does not fit table app.tasks:")
    assert lines[1].startswith("table.columns: no column job_id, job_type, status")
    assert lines[2].startswith("app.tasks has the columns id, kind, state,")
    assert "a table: mapping" in lines[3]
    assert len(lines) == 4
    assert "\n".join(lines).count("inserted_at") == 1


def test_indexes_without_configuration_prints_the_reference_tables_statements() -> None:
    result = program("indexes")
    assert result.returncode == 0, result.stderr
    statements = [line for line in result.stdout.splitlines() if line.startswith("CREATE INDEX")]
    assert statements == [
        'CREATE INDEX CONCURRENTLY IF NOT EXISTS "job_exporter_active_idx"',
        'CREATE INDEX CONCURRENTLY IF NOT EXISTS "job_exporter_updated_at_idx"',
        'CREATE INDEX CONCURRENTLY IF NOT EXISTS "job_exporter_dead_idx"',
    ]
    assert "exporter/sql" not in result.stdout  # no source path: a pip install has none


def read_until(command: list[str], env: dict[str, str], done: str, limit: float) -> list[str]:
    """The stderr lines of a running exporter up to the first that contains ``done``."""
    lines: list[str] = []
    with subprocess.Popen(
        command, cwd=ROOT, stderr=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin", **env}
    ) as process:
        try:
            assert process.stderr is not None
            deadline = time.monotonic() + limit
            for line in process.stderr:
                lines.append(line.rstrip("\n"))
                if done in line or time.monotonic() > deadline:
                    break
        finally:
            process.terminate()
            process.communicate(timeout=30)
    return lines


def test_debug_lines_say_each_connect_attempt_and_the_next_try_while_the_database_is_down() -> None:
    # Nothing listens on port 1: every connect is refused at once.
    dsn = f"postgresql://app:{PASSWORD}@127.0.0.1:1/orders"
    command = [sys.executable, "-m", "exporter", "--log.level=debug", *START_FLAGS]
    lines = read_until(command, {"JOBQUEUE_EXPORTER_DSN": dsn}, "failures=3", 60)
    own = [line for line in lines if "level=DEBUG" in line and "selector_events" not in line]
    assert any(
        'msg="connecting to the database" queue=orders target=127.0.0.1:1/orders' in line
        for line in own
    ), own
    assert any('msg="connect failed"' in line and "reason" not in line for line in own)
    backoff = [line for line in own if "next try in" in line and "source=poller.py" in line]
    assert [f"failures={n}" in line for n, line in enumerate(backoff, 1)] == [True] * 3, backoff
    assert all("reason=connection" in line and "next_try_seconds=" in line for line in backoff)
    assert any("leader election: lock not taken" in line for line in own)
    assert PASSWORD not in "\n".join(lines)


async def test_the_missing_index_warning_names_the_indexes_command_with_the_exporters_flags(
    db_dsn: str, tmp_path: Path
) -> None:
    await prepare_tasks(db_dsn, TASKS, indexes=False)
    path = tmp_path / "config.yml"
    path.write_text(MAPPING_YAML.replace("postgresql://app@db.invalid/app", db_dsn))
    command = [sys.executable, "-m", "exporter", "--config.file", str(path), *START_FLAGS]
    lines = read_until(command, {}, "tasks_exporter_dead_idx", 60)
    warning = next(line for line in lines if "index=tasks_exporter_active_idx" in line)
    assert f'command="jobqueue-exporter indexes --config.file {path}"' in warning
    assert "exporter/sql" not in "\n".join(lines)
    printed = program("indexes", "--config.file", str(path))
    assert 'CREATE INDEX CONCURRENTLY IF NOT EXISTS "tasks_exporter_active_idx"' in printed.stdout
