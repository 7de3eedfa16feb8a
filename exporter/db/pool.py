"""The asyncpg pool of one database: read-only sessions, timeouts, translation.

Errors are translated here into ``DatabaseError`` with a short reason (timeout, lock,
connection, query, schema, permission), so callers never see asyncpg's exception tree and no
message carries the DSN.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from exporter.settings.secrets import dsn_target
from exporter.settings.table import quote_table as quote_table
from exporter.vocabulary import SCHEMA

APPLICATION_NAME = "jobqueue-exporter"
log = logging.getLogger(__name__)


class DatabaseError(Exception):
    """A collection failed; ``reason`` is the label of jobqueue_exporter_collection_errors_total,
    ``sqlstate`` the server's error code when the server answered with one."""

    def __init__(self, reason: str, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.sqlstate = sqlstate


async def connect(dsn: str, *args: Any, **kwargs: Any) -> Any:
    """asyncpg.connect, with a DEBUG line for the attempt and its outcome: while a database
    cannot be reached, these are what --log.level=debug adds (the target, never the DSN)."""
    target = dsn_target(dsn)
    log.debug("connecting to the database", extra={"fields": {"target": target}})
    started = time.monotonic()
    try:
        conn = await asyncpg.connect(dsn, *args, **kwargs)
    except BaseException as exc:
        error = translate(exc) if isinstance(exc, Exception) else exc
        log.debug(
            "connect failed",
            extra={"fields": {"target": target, "err": str(error) or type(exc).__name__,
                              "duration_seconds": round(time.monotonic() - started, 3)}},
        )  # fmt: skip
        raise
    log.debug(
        "connected",
        extra={"fields": {"target": target,
                          "duration_seconds": round(time.monotonic() - started, 3)}},
    )  # fmt: skip
    return conn


# The index check's catalog look-up: the names of the table's indexes (table_exists is false
# when there is no such table). $1: the table's name, quoted as identifiers. The database
# layer's own statement, not a profile's: it reads only the catalog, whatever the queue.
INDEXES_SQL = """
SELECT to_regclass($1) IS NOT NULL AS table_exists,
       coalesce(array(SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                      WHERE i.indrelid = to_regclass($1)), '{}') AS names
"""


@dataclass(frozen=True)
class ConnectOptions:
    """How to reach the database and the guard rails every session gets."""

    dsn: str
    table: str = "job"
    max_connections: int = 2
    connect_timeout: float = 5.0
    statement_timeout: float = 5.0
    lock_timeout: float = 1.0


class Database:
    """A small pool of read-only sessions to one database, shared by every queue kept in it."""

    def __init__(self, options: ConnectOptions) -> None:
        self.options = options
        self._pool: Any = None

    async def _get_pool(self) -> Any:
        if self._pool is None:
            opts = self.options
            try:
                # min_size=0: the exporter starts (and serves /metrics) with the database down.
                self._pool = await asyncpg.create_pool(
                    dsn=opts.dsn,
                    connect=connect,
                    min_size=0,
                    max_size=opts.max_connections,
                    timeout=opts.connect_timeout,
                    command_timeout=opts.statement_timeout + opts.connect_timeout,
                    max_inactive_connection_lifetime=300.0,
                    reset=_end_session,
                    server_settings={
                        "application_name": APPLICATION_NAME,
                        "statement_timeout": str(int(opts.statement_timeout * 1000)),
                        "lock_timeout": str(int(opts.lock_timeout * 1000)),
                        "idle_in_transaction_session_timeout": str(
                            int((opts.statement_timeout + opts.connect_timeout) * 2000)
                        ),
                        "default_transaction_read_only": "on",
                    },
                )
            except Exception as exc:
                raise translate(exc) from None
        return self._pool

    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[Any]:
        """A pooled connection; one left by an error or a cancellation is never handed back (it
        may be mid-protocol, its server gone). Errors of the body pass through as they are."""
        pool = await self._get_pool()
        try:
            conn = await pool.acquire()
        except Exception as exc:
            raise translate(exc) from None
        healthy = False
        try:
            yield conn
            healthy = True
        finally:
            if not healthy:
                # When the server went away the pool may already have detached the connection.
                with contextlib.suppress(asyncpg.InterfaceError):
                    conn.terminate()
            await pool.release(conn)

    async def missing_indexes(self, table: str, required: Sequence[str]) -> list[str]:
        """Names of the ``required`` indexes of ``table`` that do not exist; raises if the table
        is missing."""
        try:
            async with self.session() as conn:
                row = await conn.fetchrow(INDEXES_SQL, quote_table(table))
        except Exception as exc:
            raise translate(exc) from None
        if not row["table_exists"]:
            raise DatabaseError(SCHEMA, f"table {table} does not exist")
        names = set(row["names"])
        return [name for name in required if name not in names]

    async def status_values(self, statement: str) -> list[str]:
        """The status column's values in the planner's statistics, read by the profile's
        ``statement`` (catalog rows only, never the table)."""
        try:
            async with self.session() as conn:
                rows = await conn.fetch(statement)
        except Exception as exc:
            raise translate(exc) from None
        return [str(row["value"]) for row in rows if row["value"] is not None]

    async def connections(self) -> int:
        """Connections the pool holds now (for tests and the footprint benchmark)."""
        if self._pool is None:
            return 0
        return int(self._pool.get_size())

    async def close(self, grace: float = 5.0) -> None:
        """Close every connection; terminate those that do not close in time."""
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        try:
            await asyncio.wait_for(pool.close(), grace)
        except (TimeoutError, Exception):
            pool.terminate()


async def _end_session(conn: Any) -> None:
    # What asyncpg's default reset undoes (advisory locks, LISTEN, cursors, SET) never outlives
    # a statement here: the sessions only read, in transactions they close, and the locks live
    # on a session of their own (exporter/db/lock.py). Its four statements cost a round trip
    # per cycle; a transaction left open is still rolled back.
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


def translate(exc: BaseException) -> DatabaseError:
    """Map asyncpg and socket errors to a DatabaseError with a reason, a password-free text and
    the server's SQLSTATE."""
    if isinstance(exc, DatabaseError):
        return exc
    error = _translated(exc)
    sqlstate = getattr(exc, "sqlstate", None)
    error.sqlstate = sqlstate if isinstance(sqlstate, str) else None
    return error


def _translated(exc: BaseException) -> DatabaseError:
    if isinstance(exc, asyncpg.QueryCanceledError):
        return DatabaseError("timeout", f"statement timeout: {exc}")
    if isinstance(exc, asyncpg.LockNotAvailableError):
        return DatabaseError("lock", f"lock timeout: {exc}")
    if isinstance(exc, asyncpg.UndefinedTableError | asyncpg.UndefinedColumnError):
        return DatabaseError("schema", f"schema mismatch: {exc}")
    if isinstance(exc, asyncpg.InsufficientPrivilegeError):
        return DatabaseError("permission", f"permission denied: {exc}")
    if isinstance(
        exc, asyncpg.InvalidAuthorizationSpecificationError | asyncpg.InvalidPasswordError
    ):
        # An unknown role lands here too (SQLSTATE 28000): the server refused the login.
        return DatabaseError("connection", f"authentication failed: {exc}")
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        # The DSN names a database the server does not have: the connection is what failed,
        # and "query" would send the operator to the SQL instead of the DSN.
        return DatabaseError("connection", f"connection failed: {exc}")
    if isinstance(exc, TimeoutError):
        return DatabaseError("timeout", "timed out waiting for the database")
    if isinstance(
        exc,
        OSError
        | ConnectionError
        | asyncpg.PostgresConnectionError
        | asyncpg.InterfaceError
        | asyncpg.InternalClientError
        | asyncpg.CannotConnectNowError
        | asyncpg.AdminShutdownError,
    ):
        return DatabaseError("connection", f"connection failed: {type(exc).__name__}: {exc}")
    if isinstance(exc, asyncpg.PostgresError):
        return DatabaseError("query", f"query failed: {type(exc).__name__}: {exc}")
    return DatabaseError("query", f"unexpected error: {type(exc).__name__}: {exc}")
