"""The session that holds the queues' advisory locks (leader election's database side).

One session per database holds the lock of every queue kept in it (one lock per table); each
queue's election works through a :class:`TableLock` handle on it.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from exporter.db.pool import (
    APPLICATION_NAME,
    ConnectOptions,
    DatabaseError,
    connect,
    quote_table,
    translate,
)
from exporter.vocabulary import SCHEMA

# 'JQEX': the first key of the two-int advisory lock, so ours never collides with locks the
# queue's own code takes; the second key is the queue table's OID (unique in its database).
LOCK_CLASS = 0x4A514558
# The server notices a dead peer within about 5 + 2 * 3 = 11 s and ends its session, which
# frees the lock for a standby even when the holder's network went silent rather than closed.
_KEEPALIVE = {
    "tcp_keepalives_idle": "5",
    "tcp_keepalives_interval": "2",
    "tcp_keepalives_count": "3",
}
_HOLDS = """
SELECT EXISTS (
    SELECT 1 FROM pg_locks
    WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND classid = $1::oid AND objid = $2::oid AND objsubid = 2
)
"""


class LockSession:
    """A session of its own that takes advisory locks, one per queue table, and holds them
    while it lives.

    PostgreSQL frees a session-level advisory lock when the session ends (process killed,
    connection cut, server restarted), so whoever holds a table's lock is the one live collector
    of that queue. Only ``pg_try_advisory_lock`` is used: a standby never waits on a lock.
    """

    def __init__(self, options: ConnectOptions) -> None:
        self.options = options
        self._conn: Any = None
        self._keys: dict[str, int] = {}  # table -> OID
        self._busy = asyncio.Lock()  # the elections and the collection guards share it
        self.users = 0  # handles attached; the session closes when the last one detaches

    def lock(self, table: str) -> TableLock:
        """A handle on the lock of one queue table."""
        self.users += 1
        return TableLock(self, table)

    async def try_acquire(self, table: str) -> bool:
        """Take ``table``'s lock if it is free; True when this session holds it. DatabaseError
        if the database cannot be reached or the table does not exist."""
        async with self._busy:
            try:
                async with asyncio.timeout(
                    self.options.connect_timeout + self.options.statement_timeout
                ):
                    conn = await self._connection()
                    key = self._keys.get(table)
                    if key is None:
                        # Quoted as the queries quote it: "App.Tasks" is not app.tasks.
                        oid = await conn.fetchval(
                            "SELECT to_regclass($1)::oid::int4", quote_table(table)
                        )
                        if oid is None:
                            # The session is fine: the other queues' locks stay held.
                            raise DatabaseError(SCHEMA, f"table {table} does not exist")
                        key = self._keys[table] = int(oid)
                    return bool(
                        await conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", LOCK_CLASS, key)
                    )
            except DatabaseError:
                raise
            except Exception as exc:
                await self._drop()
                raise translate(exc) from None

    async def ping(self) -> None:
        """Reach the database without taking a lock; DatabaseError when it cannot."""
        async with self._busy:
            try:
                async with asyncio.timeout(
                    self.options.connect_timeout + self.options.statement_timeout
                ):
                    await (await self._connection()).fetchval("SELECT 1")
            except Exception as exc:
                await self._drop()
                raise translate(exc) from None

    async def holds(self, table: str) -> bool:
        """True when this session is alive and holds ``table``'s lock; False on any doubt (a
        session that cannot answer is closed, so a holder that cannot prove it steps down)."""
        async with self._busy:
            key = self._keys.get(table)
            if self._conn is None or key is None:
                return False
            try:
                async with asyncio.timeout(self.options.statement_timeout):
                    return bool(await self._conn.fetchval(_HOLDS, LOCK_CLASS, key))
            except Exception:
                await self._drop()
                return False

    async def release(self, table: str) -> None:
        """Give up ``table``'s lock; the session ends with the last handle."""
        async with self._busy:
            self.users -= 1
            key = self._keys.pop(table, None)
            if self.users <= 0:
                await self._drop()
            elif key is not None and self._conn is not None:
                try:
                    async with asyncio.timeout(self.options.statement_timeout):
                        await self._conn.fetchval(
                            "SELECT pg_advisory_unlock($1, $2)", LOCK_CLASS, key
                        )
                except Exception:
                    await self._drop()  # ending the session frees the lock as well

    async def close(self) -> None:
        """Release every lock by ending the session."""
        async with self._busy:
            await self._drop()

    async def _connection(self) -> Any:
        if self._conn is None or self._conn.is_closed():
            opts = self.options
            self._keys.clear()  # looked up again on the new session
            self._conn = await connect(
                opts.dsn,
                timeout=opts.connect_timeout,
                server_settings={
                    "application_name": APPLICATION_NAME,
                    "statement_timeout": str(int(opts.statement_timeout * 1000)),
                    "default_transaction_read_only": "on",
                    **_KEEPALIVE,
                },
            )
        return self._conn

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await asyncio.wait_for(conn.close(), 2.0)
            except Exception:
                conn.terminate()


class TableLock:
    """One queue's advisory lock on a shared :class:`LockSession`."""

    def __init__(self, session: LockSession, table: str) -> None:
        self.session = session
        self.table = table
        self._closed = False

    @property
    def options(self) -> ConnectOptions:
        """How the session connects (the queue's table included)."""
        return replace(self.session.options, table=self.table)

    async def try_acquire(self) -> bool:
        """Take the queue's lock if it is free; True when held."""
        return await self.session.try_acquire(self.table)

    async def holds(self) -> bool:
        """True when the session is alive and holds the queue's lock."""
        return await self.session.holds(self.table)

    async def ping(self) -> None:
        """Reach the database without taking the lock."""
        await self.session.ping()

    async def close(self) -> None:
        """Give up the queue's lock (once)."""
        if not self._closed:
            self._closed = True
            await self.session.release(self.table)
