"""A DSN naming a database or role the server does not have fails as a connection, on a real
PostgreSQL: the reason label must send the operator to the DSN, not to the SQL."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest

from exporter.db import DatabaseError
from tests.conftest import PgServer
from tests.helpers import fast_settings, make_poller, scrape, value

ERRORS = "jobqueue_exporter_collection_errors_total"


def _with_user(dsn: str, user: str) -> str:
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}@{host}"))


def _missing_database(server: PgServer) -> str:
    return server.dsn(f"no_such_database_{uuid.uuid4().hex[:8]}")


def _missing_role(server: PgServer) -> str:
    return _with_user(server.admin_dsn, f"no_such_role_{uuid.uuid4().hex[:8]}")


@pytest.mark.parametrize(
    ("make_dsn", "message"),
    [(_missing_database, "does not exist"), (_missing_role, "authentication failed")],
    ids=["missing database", "missing role"],
)
async def test_missing_database_or_role_is_a_connection_error_never_a_query_error(
    pg_cluster: PgServer, make_dsn: object, message: str
) -> None:
    assert callable(make_dsn)
    poller = make_poller(fast_settings(make_dsn(pg_cluster)))
    try:
        assert await poller.collect_once() is False
        assert await poller.collect_once() is False
        samples = scrape(poller)
        assert value(samples, ERRORS, reason="connection") == 2
        assert value(samples, ERRORS, reason="query") == 0
        assert value(samples, "jobqueue_up") == 0
        assert message in (poller.health.last_error or "")
    finally:
        await poller.database.close()


async def test_missing_database_is_translated_where_the_pool_connects(pg_cluster: PgServer) -> None:
    poller = make_poller(fast_settings(_missing_database(pg_cluster)))
    try:
        with pytest.raises(DatabaseError) as raised:
            await poller.database.missing_indexes()
        assert raised.value.reason == "connection"
    finally:
        await poller.database.close()
