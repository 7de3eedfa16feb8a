"""``--config.check`` is the start without the serving, against the session's real PostgreSQL: it
refuses what the start refuses, warns where the start's first collection warns (a missing
index, a status value the planner's statistics show that no mapping names), and exits as a CI
gate needs: 1 for a refused login or a missing database, 0 with NOT checked only for a server
it cannot reach."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.counting.statuses import STATS_MESSAGE
from exporter.demo.cluster import free_port
from exporter.settings import load_settings
from exporter.vocabulary import REQUIRED_INDEXES
from tests.conftest import PgServer, dsn_with_database, execute
from tests.helpers import make_poller
from tests.mapped_queue import MAPPING_YAML, prepare_tasks
from tests.secret_forms import MARKER, forms

pytestmark = pytest.mark.usefixtures("restore_logging")
PASSWORD = f"{MARKER}-check-" + uuid.uuid4().hex[:8]
PLAIN = "collect:\n  interval: 5s\n"
INSERT = "INSERT INTO app.tasks (kind, state) VALUES ('send_email', $1)"


def check(
    capsys: pytest.CaptureFixture[str], path: Path, *flags: str
) -> tuple[int, list[str], list[str]]:
    """--config.check of the file with these flags: its exit code, stdout and stderr lines,
    each without the file's name in front (which every line must have)."""
    code = main(["--config.check", str(path), *flags], {})
    captured = capsys.readouterr()
    lines = {"out": captured.out.splitlines(), "err": captured.err.splitlines()}
    for stream in lines.values():
        assert all(line.startswith(f"{path}: ") for line in stream), lines
    assert not [f for f in forms(PASSWORD) if f in captured.out + captured.err]
    prefix = len(f"{path}: ")
    return code, [x[prefix:] for x in lines["out"]], [x[prefix:] for x in lines["err"]]


def config(tmp_path: Path, text: str = PLAIN) -> Path:
    path = tmp_path / "config.yml"
    path.write_text(text, encoding="utf-8")
    return path


def name_of(dsn: str) -> str:
    return dsn.rsplit("/", 1)[1]


def test_a_table_that_fits_with_its_indexes_is_ok_and_says_what_was_proven(
    db_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = check(capsys, config(tmp_path), "--database.dsn", db_dsn)
    assert (code, err) == (0, [])
    assert out == [f"queue {name_of(db_dsn)}: table job fits its database", "OK"]


def test_missing_indexes_are_warnings_as_at_start_and_the_check_exits_0(
    schema_dsn_without_indexes: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = check(capsys, config(tmp_path), "--database.dsn", schema_dsn_without_indexes)
    assert (code, err) == (0, [])
    warned = [line for line in out if ": warning: index " in line]
    assert [line.split(" index ")[1].split()[0] for line in warned] == list(REQUIRED_INDEXES)
    assert all("per-cycle queries will scan the table" in line for line in warned)
    assert f"jobqueue-exporter indexes --config.file {tmp_path / 'config.yml'}" in warned[0]
    assert out[-1] == f"OK ({len(REQUIRED_INDEXES)} warnings)"


async def test_a_status_the_statistics_show_unmapped_is_warned_as_the_first_collection_warns(
    db_dsn: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The typo: the table writes 'finished', the mapping says done: complete.
    text = MAPPING_YAML.replace("postgresql://app@db.invalid/app", db_dsn)
    path = config(tmp_path, text.replace("done: finished", "done: complete"))
    (queue,) = load_settings(str(path), {}, {}).queues
    await prepare_tasks(db_dsn, queue.mapping)
    code, out, _ = await asyncio.to_thread(check, capsys, path)
    assert (code, out[-1]) == (0, "OK")  # never analyzed: no statistics, nothing to say yet
    for state in ("finished", "finished", "queued"):
        await execute(db_dsn, INSERT, state)
    await execute(db_dsn, "ANALYZE app.tasks")

    code, out, err = await asyncio.to_thread(check, capsys, path)
    assert (code, err) == (0, [])
    assert out[-1] == "OK (1 warning)"
    (warning,) = [x.removeprefix("queue tasks: warning: ") for x in out if ": warning: " in x]
    caplog.set_level(logging.WARNING)
    poller = make_poller(queue)
    try:
        assert await poller.collect_once()  # the start's first collection
    finally:
        await poller.database.close()
    (fields,) = [r.fields for r in caplog.records if r.getMessage() == STATS_MESSAGE]  # type: ignore[attr-defined]
    assert fields["suggestion"] == "status_values.done: finished"
    said = " ".join(f"{key}={value}" for key, value in fields.items())
    assert warning == f"{STATS_MESSAGE} ({said})"  # the same finding, the same words


def test_a_refused_login_and_a_missing_database_exit_1_naming_what_failed(
    pg_cluster: PgServer, db_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    role = "jqe_check_" + uuid.uuid4().hex[:8]
    asyncio.run(execute(pg_cluster.admin_dsn, f"CREATE ROLE {role} LOGIN PASSWORD 'right-one'"))
    try:
        host = db_dsn.split("@", 1)[1]
        wrong = f"postgresql://{role}:{PASSWORD}@{host}"
        code, _, err = check(capsys, config(tmp_path), "--database.dsn", wrong)
        assert code == 1
        assert err[0].startswith(f"queue {name_of(db_dsn)}: the server refused the login (")
        assert "password authentication failed" in err[0]
    finally:
        asyncio.run(execute(pg_cluster.admin_dsn, f"DROP ROLE {role}"))
    nobody = f"postgresql://nobody_{role}@{host}"  # no such role, and no password to try
    code, _, err = check(capsys, config(tmp_path), "--database.dsn", nobody)
    assert code == 1
    assert err[0].startswith(f"queue {name_of(db_dsn)}: the server refused the login (")
    missing = dsn_with_database(db_dsn, "jqe_no_such_db")
    code, _, err = check(capsys, config(tmp_path), "--database.dsn", missing)
    assert code == 1
    assert err == [
        "queue jqe_no_such_db: the server has no such database (connection failed: database "
        '"jqe_no_such_db" does not exist)'
    ]


def test_only_a_server_that_cannot_be_reached_is_not_checked_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    down = f"postgresql://app:{PASSWORD}@127.0.0.1:{free_port()}/orders"
    code, out, err = check(capsys, config(tmp_path), "--database.dsn", down)
    assert (code, err) == (0, [])
    assert out[0].startswith("queue orders: NOT checked: the database cannot be reached (")
    assert out[-1] == "OK (queue orders NOT checked)"


def refusals(capsys: pytest.CaptureFixture[str], tmp_path: Path, *flags: str) -> list[str]:
    """What --config.check refuses (it must exit 1), without the file's name."""
    code, _, err = check(capsys, config(tmp_path), *flags)
    assert code == 1, err
    return err


def test_the_logical_prerequisites_refuse_the_check_as_they_refuse_the_start(
    db_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The session's cluster runs wal_level=replica: the start refuses collect.counting: logical.
    flags = ("--database.dsn", db_dsn, "--collect.counting=logical")
    err = refusals(capsys, tmp_path, *flags)
    assert err[0].startswith("collect.counting: queue "), err
    assert main([*flags, "--web.listen-address=127.0.0.1:0"], {}) == 2
    started = capsys.readouterr().err.splitlines()
    refused = [line for line in started if not line.startswith("time=")]
    assert refused == ["jobqueue-exporter: configuration error:", *err]  # word for word


def test_a_table_a_preset_reads_that_does_not_exist_fails_the_check(
    db_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (line,) = refusals(capsys, tmp_path, "--database.dsn", db_dsn, "--queue.profile=pgboss")
    assert line.startswith(f"queue {name_of(db_dsn)}: table pgboss.job does not exist")
    assert line.endswith(": every collection would fail on it")
