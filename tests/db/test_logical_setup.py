"""collect.counting: logical's set-up and safety net, as the exporter's own role (issue 34).

The exporter connects as the role docs/security.md creates plus REPLICATION; an admin runs
logical-setup's SQL, then breaks one thing as a newcomer would. Each case ends in a refusal
that names the fix, at start (exit 2) and on --config.check (exit 1), never in "cannot be
reached" and a start with a silent zero. Also here: logical-drop, and the warning of a polling
exporter about the slot the logical mode left behind.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import replace
from pathlib import Path

import asyncpg
import pytest

from exporter import poller as poller_module
from exporter.cli import main
from exporter.db.slot_checks import check_queue
from exporter.demo.queue import JobQueue, prepare_database
from exporter.runtime import QueueRuntime
from exporter.slot_commands import target_of
from tests.conftest import PgServer, execute, fetchval
from tests.db.test_logical import logical_queue, streaming
from tests.helpers import fast_queue
from tests.logical_cluster import (
    PUBLICATION,
    ROLE,
    LogicalDatabase,
    LogicalServer,
    empty_database,
    logical_queue_settings,
    role_grants,
    run_as_admin,
    setup_statements,
)

pytestmark = [pytest.mark.logical, pytest.mark.usefixtures("restore_logging")]


def _flags(dsn: str, *extra: str) -> list[str]:
    return [
        "--database.dsn", dsn, "--collect.counting", "logical",
        "--collect.logical-publication", PUBLICATION, "--collect.logical-slot", "never_made",
        *extra,
    ]  # fmt: skip


def _start(capsys: pytest.CaptureFixture[str], dsn: str, *extra: str) -> str:
    """Start the exporter with these flags; it must refuse (exit 2): what it said."""
    assert main(_flags(dsn, *extra), {}) == 2
    captured = capsys.readouterr()
    assert "logical counting not checked now" not in captured.err
    return captured.err


def _check(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, dsn: str, *extra: str
) -> tuple[int, str]:
    """--config.check with these flags: its exit code and what it printed."""
    config = tmp_path / "exporter.yml"
    config.write_text("log: {level: info}\n")
    code = main(["--config.check", str(config), *_flags(dsn, *extra)], {})
    captured = capsys.readouterr()
    return code, captured.out + captured.err


# --- what logical-setup prints passes ------------------------------------------------------


def test_the_printed_set_up_passes_every_check_as_the_exporters_role(
    logical_server: LogicalServer,
    logical_db: LogicalDatabase,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    code, said = _check(capsys, tmp_path, logical_db.dsn)
    assert code == 0, said
    assert f"queue {logical_db.name}: counting logical fits its server" in said
    assert logical_server.password not in said


async def test_a_table_in_a_schema_of_its_own_is_checked_without_superuser(
    logical_server: LogicalServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The trial's failure: with a publication, the check's regclass cast failed for this role
    # ("permission denied for schema pg_toast"), was read as "cannot be reached", and the
    # exporter started unchecked.
    async with empty_database(logical_server) as db:
        await _reference_table(db.admin, "ops.work_items")
        settings = logical_queue_settings(db.dsn, table="ops.work_items")
        grants = role_grants(db.name, "ops", "ops.work_items")
        await run_as_admin(db.admin, [*setup_statements(settings), *grants])
        flags = ("--database.table", "ops.work_items")
        code, said = await asyncio.to_thread(_check, capsys, tmp_path, db.dsn, *flags)
        assert code == 0, said
        assert "counting logical fits its server" in said
        await execute(db.admin, f"REVOKE USAGE ON SCHEMA ops FROM {ROLE}")
        code, said = await asyncio.to_thread(_check, capsys, tmp_path, db.dsn, *flags)
        assert code == 1
        assert "permission denied for schema ops" in said
        assert f'GRANT USAGE ON SCHEMA "ops" TO "{ROLE}"' in said
        assert "counting logical NOT checked" not in said


async def _reference_table(admin: str, table: str) -> None:
    """The reference job table under another name (the exporter's indexes included)."""
    schema, name = table.split(".")
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f"CREATE SCHEMA {schema}; SET search_path = {schema}")
        await conn.execute((Path(__file__).parents[2] / "exporter/sql/schema.sql").read_text())
        await conn.execute(f"ALTER TABLE {schema}.job RENAME TO {name}")
    finally:
        await conn.close()


# --- the newcomer's cases: each a refusal naming the fix -----------------------------------


def test_replica_identity_default_is_refused_naming_the_fix(
    logical_db: LogicalDatabase, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The trial: left at DEFAULT, the exporter counted 15 enqueued and 0 of everything else.
    asyncio.run(execute(logical_db.admin, "ALTER TABLE job REPLICA IDENTITY DEFAULT"))
    err = _start(capsys, logical_db.dsn)
    assert "table job has REPLICA IDENTITY DEFAULT (job_id), which does not carry the old " in err
    assert "replica identity statements logical-setup prints" in err
    code, said = _check(capsys, tmp_path, logical_db.dsn)
    assert code == 1
    assert "REPLICA IDENTITY DEFAULT" in said


def test_unbounded_wal_is_refused_unless_allowed(
    logical_server: LogicalServer,
    logical_db: LogicalDatabase,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    with logical_server.configured({"max_slot_wal_keep_size": "-1"}):
        err = _start(capsys, logical_db.dsn)
        assert "collect.logical_allow_unbounded_wal: queue " in err
        assert "max_slot_wal_keep_size is -1" in err
        assert "set max_slot_wal_keep_size (e.g. '10GB'" in err
        allowed = "--collect.logical-allow-unbounded-wal"
        code, said = _check(capsys, tmp_path, logical_db.dsn, allowed)
        assert code == 0, said


async def test_a_column_list_on_a_full_table_is_refused_before_it_breaks_the_queue(
    logical_db: LogicalDatabase, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The publication keeps logical-setup's column list; FULL is what a DBA "adds for safety".
    await execute(logical_db.admin, "ALTER TABLE job REPLICA IDENTITY FULL")
    code, said = await asyncio.to_thread(_check, capsys, tmp_path, logical_db.dsn)
    assert code == 1
    assert f"publication {PUBLICATION} has a column list on job, whose REPLICA IDENTITY" in said
    assert "refuses the queue's own UPDATE and DELETE" in said
    # What the refusal spares the queue: its own writes fail.
    await execute(logical_db.admin, "INSERT INTO job (job_type) VALUES (1)")
    with pytest.raises(asyncpg.PostgresError, match="cannot update table"):
        await execute(logical_db.admin, "UPDATE job SET status = 2")


async def test_a_row_filter_on_updates_is_refused(
    logical_db: LogicalDatabase, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    await execute(logical_db.admin, f"DROP PUBLICATION {PUBLICATION}")
    await execute(
        logical_db.admin,
        f"CREATE PUBLICATION {PUBLICATION} FOR TABLE job WHERE (status <> 2)",
    )
    code, said = await asyncio.to_thread(_check, capsys, tmp_path, logical_db.dsn)
    assert code == 1
    assert "publishes updates of job WHERE (status <> 2)" in said
    assert "claims and completions would count as vanished or new jobs" in said


def test_a_role_without_replication_is_refused(
    logical_server: LogicalServer,
    logical_db: LogicalDatabase,
    capsys: pytest.CaptureFixture[str],
) -> None:
    logical_server.cluster.psql(f"ALTER ROLE {ROLE} NOREPLICATION")
    try:
        err = _start(capsys, logical_db.dsn)
    finally:
        logical_server.cluster.psql(f"ALTER ROLE {ROLE} REPLICATION")
    assert f"role {ROLE} may not stream changes" in err
    assert f'ALTER ROLE "{ROLE}" REPLICATION' in err


def test_wal_level_replica_is_refused(
    pg_cluster: PgServer, db_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The session's polling cluster runs wal_level=replica; the role of its own there.
    role, password = f"exporter_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    database = db_dsn.rpartition("/")[2]
    asyncio.run(execute(pg_cluster.admin_dsn, f"CREATE ROLE {role} LOGIN PASSWORD '{password}'"))
    grants = [f"GRANT CONNECT ON DATABASE {database} TO {role}",
              f"GRANT SELECT ON job TO {role}"]  # fmt: skip
    try:
        asyncio.run(run_as_admin(db_dsn, grants))
        dsn = db_dsn.replace("postgres@", f"{role}:{password}@", 1)
        assert role in dsn
        err = _start(capsys, dsn)
        assert "wal_level is replica" in err
        assert "set wal_level = logical in postgresql.conf and restart the server" in err
        assert password not in err
    finally:
        asyncio.run(run_as_admin(db_dsn, [f"DROP OWNED BY {role}", f"DROP ROLE {role}"]))


def test_a_database_the_role_may_not_connect_to_is_refused_naming_the_grant(
    logical_db: LogicalDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    revoke = f'REVOKE CONNECT ON DATABASE "{logical_db.name}" FROM PUBLIC, {ROLE}'
    asyncio.run(run_as_admin(logical_db.admin, [revoke]))
    err = _start(capsys, logical_db.dsn)
    assert f"role {ROLE} may not connect to database {logical_db.name}" in err
    assert f'GRANT CONNECT ON DATABASE "{logical_db.name}" TO "{ROLE}"' in err


def test_a_login_the_server_refuses_is_a_refusal_without_the_password(
    logical_db: LogicalDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = logical_db.dsn.replace("pw-", "wrong-pw-", 1)
    err = _start(capsys, wrong)
    assert f"the server refused the login of role {ROLE}" in err
    assert "wrong-pw-" not in err


def test_a_database_that_does_not_answer_is_said_unchecked(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from exporter.demo.cluster import free_port

    dsn = f"postgresql://{ROLE}:pw@127.0.0.1:{free_port()}/queue"
    code, said = _check(capsys, tmp_path, dsn, "--database.connect-timeout", "1s")
    assert code == 0  # an outage is no verdict: said, not failed
    assert "queue queue: NOT checked: the database cannot be reached" in said
    assert "pw" not in said.replace("pytest", "")


# --- the filtered delete publication ----------------------------------------------------


@pytest.mark.slow
async def test_two_publications_leave_finished_rows_deletes_out_and_count_exactly(
    logical_server: LogicalServer,
) -> None:

    names = "jq,jq_deletes"
    async with empty_database(logical_server) as db:
        await prepare_database(db.admin)
        settings = logical_queue_settings(db.dsn, publication=names)
        await run_as_admin(
            db.admin, [*setup_statements(settings), *role_grants(db.name, "public", "job")]
        )
        queue = logical_queue(db.dsn)
        queue = replace(queue, collect=replace(queue.collect, logical_publication=names))

        target = target_of(queue)
        assert target is not None
        assert await check_queue(queue, target) == []
        async with streaming(queue) as runtime:
            conn = await asyncpg.connect(db.admin)
            try:
                ops = JobQueue(conn, backoff_base=0.0)
                done = []
                for _ in range(5):
                    job = await ops.enqueue(1)
                    assert job is not None
                    await ops.claim("w", 60.0, job_id=job.job_id)
                    await ops.complete(job.job_id, "w", {"metrics": {"duration_ms": 5}})
                    done.append(job.job_id)
                gone = await ops.enqueue(2)
                assert gone is not None
                await conn.execute("DELETE FROM job WHERE job_id = ANY($1)", done)
                await conn.execute("DELETE FROM job WHERE job_id = $1", gone.job_id)
            finally:
                await conn.close()
            poller = runtime.poller
            for _ in range(100):
                await poller.collect_once()
                if poller.tallies.vanished:
                    break
                await asyncio.sleep(0.05)
            assert poller.tallies.completed == {"1": 5}
            assert poller.tallies.vanished == {"pending": 1}


# --- logical-drop ----------------------------------------------------------------------


def _drop(
    capsys: pytest.CaptureFixture[str], dsn: str, slot: str, *extra: str
) -> tuple[int, str, str]:
    args = ["logical-drop", "--database.dsn", dsn, "--collect.logical-slot", slot,
            "--collect.logical-publication", PUBLICATION, *extra]  # fmt: skip
    code = main(args, {})
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_logical_drop_drops_the_slot_prints_the_reversal_and_fails_when_nothing_was_dropped(
    logical_server: LogicalServer, logical_db: LogicalDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(
        execute(
            logical_db.admin, "SELECT pg_create_logical_replication_slot('to_drop', 'pgoutput')"
        )
    )
    code, out, err = _drop(capsys, logical_db.dsn, "to_drop", "--collect.counting", "logical")
    assert code == 0, err
    assert f"queue {logical_db.name}: slot to_drop dropped (it kept " in out
    # The reversal of logical-setup, run as the DBA would: it undoes each statement.
    reversal = [line for line in out.splitlines() if line and not line.startswith(("--", "queue"))]
    assert reversal[0] == f'DROP PUBLICATION IF EXISTS "{PUBLICATION}";'
    assert reversal[-1] == f'ALTER ROLE "{ROLE}" NOREPLICATION;'
    try:
        asyncio.run(run_as_admin(logical_db.admin, [line.split(";")[0] for line in reversal]))
        facts = asyncio.run(
            fetchval(
                logical_db.admin,
                "SELECT ARRAY[(SELECT relreplident::text FROM pg_class WHERE relname = 'job'), "
                "(SELECT count(*)::text FROM pg_publication), "
                "(SELECT count(*)::text FROM pg_indexes WHERE indexname LIKE '%identity%'), "
                f"(SELECT rolreplication::text FROM pg_roles WHERE rolname = '{ROLE}')]",
            )
        )
        assert facts == ["d", "0", "0", "false"]
    finally:
        logical_server.cluster.psql(f"ALTER ROLE {ROLE} REPLICATION")
    code, out, err = _drop(capsys, logical_db.dsn, "to_drop", "--collect.counting", "logical")
    assert code == 1
    assert f"queue {logical_db.name}: no slot to_drop (nothing to drop)" in out
    assert "nothing was dropped" in err


def test_logical_drop_with_a_polling_configuration_drops_the_leftover_slot(
    logical_db: LogicalDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(
        execute(logical_db.admin, "SELECT pg_create_logical_replication_slot('left', 'pgoutput')")
    )
    code, out, err = _drop(capsys, logical_db.dsn, "left")  # counting: polling (the default)
    assert code == 0, err
    assert "slot left dropped" in out
    assert "DROP PUBLICATION" in out


async def test_logical_drop_names_the_holder_of_a_slot_in_use(
    logical_db: LogicalDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    queue = logical_queue(logical_db.dsn)
    slot = queue.collect.logical_slot
    assert slot is not None
    async with streaming(queue):
        pid = await fetchval(
            logical_db.admin,
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
            slot,
        )
        args = ("--collect.counting", "logical")
        code, _, err = await asyncio.to_thread(_drop, capsys, logical_db.dsn, slot, *args)
        assert code == 1
        assert f"slot {slot} not dropped: slot {slot} is in use by pid {pid}" in err
        assert "from 127.0.0.1" in err
        assert "stop the exporters of this queue first" in err
        assert (
            await fetchval(
                logical_db.admin,
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
                slot,
            )
            == 1
        )


async def test_a_polling_exporter_warns_once_about_a_leftover_slot(
    logical_db: LogicalDatabase, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    await execute(
        logical_db.admin, "SELECT pg_create_logical_replication_slot('jobqueue_test', 'pgoutput')"
    )
    monkeypatch.setattr(poller_module, "INDEX_CHECK_EVERY", 1)  # every cycle looks
    runtime = QueueRuntime(fast_queue(logical_db.dsn))
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                assert await runtime.poller.collect_once()
        left = [r for r in caplog.records if r.getMessage().startswith("replication slot left")]
        assert len(left) == 1
        assert left[0].fields["slot"] == "jobqueue_test"  # type: ignore[attr-defined]
        assert "logical-drop" in left[0].getMessage()
    finally:
        await runtime.stop()
        await runtime.database.close()
