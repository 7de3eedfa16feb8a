"""The session's wal_level=logical cluster, shared by every logical test module, and queue
databases on it set up as a DBA would set them up.

The exporter connects as the role docs/security.md creates (CONNECT, USAGE, SELECT on the
table, pg_read_all_stats), plus REPLICATION, with a password; an admin (the cluster's
superuser) runs ``logical-setup``'s own SQL for it and drives the workload. The queue schema
and that SQL run once, into a template database each test copies. A module that needs other
server settings (a WAL cap of 1 MB) sets them with ALTER SYSTEM and a reload for its own
duration (:meth:`LogicalServer.configured`).

Registered as a plugin by tests/conftest.py. Fixtures:
    logical_server   the session's :class:`LogicalServer` (one cluster, one role, one template)
    logical_db       a fresh :class:`LogicalDatabase` copied from the template
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Literal

import asyncpg
import pytest

from exporter.db.slot_setup import setup_script
from exporter.demo.cluster import Cluster, ClusterError
from exporter.demo.queue import prepare_database, split_sql
from exporter.settings import DatabaseSettings, QueueSettings, Settings
from exporter.slot_commands import target_of
from tests.conftest import execute, fetchval

ROLE = "jobqueue_exporter"
PUBLICATION = "jobqueue_test"
# Server settings of the whole session: those that need a restart, and the defaults a module
# may change for its own duration (and that are put back after it).
SERVER = {
    "wal_level": "logical",
    "max_prepared_transactions": "4",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
}
DEFAULTS = {"max_slot_wal_keep_size": "1GB", "wal_keep_size": "0"}


def role_grants(database: str, schema: str, table: str) -> list[str]:
    """docs/security.md's grants of the exporter's role on one database and table."""
    return [
        f'GRANT CONNECT ON DATABASE "{database}" TO {ROLE}',
        f'GRANT USAGE ON SCHEMA "{schema}" TO {ROLE}',
        f"GRANT SELECT ON {table} TO {ROLE}",
    ]


@dataclass
class LogicalServer:
    """The session's logical cluster, the exporter's role and the published template."""

    cluster: Cluster
    password: str
    template: str

    def admin_dsn(self, database: str = "postgres") -> str:
        """The superuser's DSN: the DBA, and the application that runs the queue."""
        return self.cluster.dsn(database)

    def role_dsn(self, database: str) -> str:
        """The exporter's DSN: the documented role plus REPLICATION, with its password."""
        return self.cluster.dsn(database, user=ROLE, password=self.password)

    def set(self, settings: Mapping[str, str]) -> None:
        """ALTER SYSTEM and reload; returns once a new session sees every value."""
        for name, value in settings.items():
            self.cluster.psql(f"ALTER SYSTEM SET {name} = :'value'", value=value)
        self.cluster.psql("SELECT pg_reload_conf()")
        names = "','".join(settings)
        wanted = {name: self._shown(name, value) for name, value in settings.items()}
        deadline = time.monotonic() + 30
        while True:
            shown = dict(
                line.split("|", 1)
                for line in self.cluster.psql(
                    f"SELECT name, setting FROM pg_settings WHERE name IN ('{names}')"
                ).split()
            )
            if shown == wanted:
                return
            assert time.monotonic() < deadline, f"settings not reloaded: {shown} != {wanted}"
            time.sleep(0.05)

    def _shown(self, name: str, value: str) -> str:
        """The value as pg_settings.setting shows it (in the setting's unit)."""
        return self.cluster.psql(
            "SELECT CASE WHEN unit = 'MB' AND :'value' <> '-1' "
            "THEN (pg_size_bytes(:'value') / 1048576)::text ELSE :'value' END "
            "FROM pg_settings WHERE name = :'name'",
            value=value,
            name=name,
        ).strip()

    @contextlib.contextmanager
    def configured(self, settings: Mapping[str, str]) -> Iterator[None]:
        """The server with ``settings`` (reloadable ones) for the block, the defaults after."""
        self.set(settings)
        try:
            yield
        finally:
            self.set({name: DEFAULTS[name] for name in settings})


@dataclass(frozen=True)
class LogicalDatabase:
    """A queue database copied from the template: published, the role granted."""

    name: str
    dsn: str  # the exporter's role
    admin: str  # the owner, who runs the queue and the DBA's statements


def logical_queue_settings(
    dsn: str, table: str = "job", publication: str = PUBLICATION
) -> Settings:
    """Settings of one queue counted from the stream of ``table``, for logical-setup."""
    queue = QueueSettings(name="test", database=DatabaseSettings(dsn=dsn, table=table))
    collect = replace(queue.collect, counting="logical", logical_publication=publication)
    return Settings(queues=(replace(queue, collect=collect),))


def setup_statements(settings: Settings) -> list[str]:
    """The statements ``logical-setup`` prints for these settings, comments dropped."""
    return split_sql(setup_script(settings, target_of))


async def run_as_admin(dsn: str, statements: list[str]) -> None:
    """Run each statement on its own (CREATE INDEX CONCURRENTLY refuses a transaction)."""
    conn = await asyncpg.connect(dsn)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def drop_slots(dsn: str, column: Literal["slot_name", "database"], value: str) -> None:
    """Drop the slots whose ``column`` is ``value`` once no walsender reads them: one outlives
    its client's close briefly."""
    where = f"FROM pg_replication_slots WHERE {column} = $1"
    deadline = time.monotonic() + 10
    while await fetchval(dsn, f"SELECT count(*) {where} AND active", value):
        assert time.monotonic() < deadline, f"a slot whose {column} is {value} is still read"
        await asyncio.sleep(0.05)
    await execute(dsn, f"SELECT pg_drop_replication_slot(slot_name) {where}", value)


async def drop_database(server: LogicalServer, name: str) -> None:
    """Drop a test's database, and first the slots left in it (they would keep it)."""
    await drop_slots(server.admin_dsn(), "database", name)
    await execute(server.admin_dsn(), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _start(cluster: Cluster) -> None:
    cluster.start()
    for name, value in {**SERVER, **DEFAULTS}.items():
        cluster.psql(f"ALTER SYSTEM SET {name} = :'value'", value=value)
    # A logical replication connection names its database: pg_hba's database column matches
    # it, not the keyword replication. The role logs in with its password (scram).
    cluster.restart()


@pytest.fixture(scope="session")
def logical_server() -> Iterator[LogicalServer]:
    """One wal_level=logical cluster for every logical test module of the session."""
    try:
        cluster = Cluster()
    except ClusterError as exc:
        pytest.fail(f"no wal_level=logical cluster for the tests: {exc}")
    try:
        _start(cluster)
        password = "pw-" + uuid.uuid4().hex
        cluster.create_role(
            ROLE,
            password,
            grants=[f"ALTER ROLE {ROLE} REPLICATION", f"GRANT pg_read_all_stats TO {ROLE}"],
        )
        template = "logical_template"
        cluster.create_database(template)
        server = LogicalServer(cluster, password, template)
        admin = server.admin_dsn(template)
        asyncio.run(_publish(server, admin, template))
        yield server
    finally:
        cluster.destroy()


async def _publish(server: LogicalServer, admin: str, database: str) -> None:
    await prepare_database(admin)
    settings = logical_queue_settings(server.role_dsn(database))
    await run_as_admin(
        admin, [*setup_statements(settings), *role_grants(database, "public", "job")]
    )


@contextlib.asynccontextmanager
async def empty_database(server: LogicalServer) -> AsyncIterator[LogicalDatabase]:
    """A new database with nothing in it but the role's CONNECT (the test sets it up)."""
    name = f"logical_{uuid.uuid4().hex[:12]}"
    await execute(server.admin_dsn(), f'CREATE DATABASE "{name}"')
    await execute(server.admin_dsn(), f'GRANT CONNECT ON DATABASE "{name}" TO {ROLE}')
    try:
        yield LogicalDatabase(name, server.role_dsn(name), server.admin_dsn(name))
    finally:
        await drop_database(server, name)


@pytest.fixture
async def logical_db(logical_server: LogicalServer) -> AsyncIterator[LogicalDatabase]:
    """A new queue database: the job table published as logical-setup prints it."""
    name = f"logical_{uuid.uuid4().hex[:12]}"
    admin = logical_server.admin_dsn()
    await execute(admin, f'CREATE DATABASE "{name}" TEMPLATE "{logical_server.template}"')
    await execute(admin, f'GRANT CONNECT ON DATABASE "{name}" TO {ROLE}')
    try:
        yield LogicalDatabase(name, logical_server.role_dsn(name), logical_server.admin_dsn(name))
    finally:
        await drop_database(logical_server, name)
