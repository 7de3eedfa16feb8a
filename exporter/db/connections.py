"""One pool and one lock session per database, shared by every queue kept in it.

Queues whose database settings lead to the same sessions (the DSN and the timeouts) share
them, so the connections a process holds grow with the databases it watches, not with the
queues: with 20 queues in one database, at most ``database.max_connections`` pooled sessions
(2 by default) and one lock session.
"""

from __future__ import annotations

from dataclasses import replace

from exporter.db.lock import LockSession, TableLock
from exporter.db.pool import ConnectOptions, Database


def _target(options: ConnectOptions) -> ConnectOptions:
    """What makes two queues' sessions interchangeable: everything but table and pool size."""
    return replace(options, table="", max_connections=0)


class Connections:
    """Hands out the shared pool and lock session of each database, counting their users."""

    def __init__(self) -> None:
        self._pools: dict[ConnectOptions, tuple[Database, int]] = {}
        self._locks: dict[ConnectOptions, LockSession] = {}

    def database(self, options: ConnectOptions, shared_size: int | None = None) -> Database:
        """The pool of ``options``' database. Alone, it has ``options.max_connections``
        sessions; once shared, ``shared_size`` (if larger), fixed when the pool first connects."""
        key = _target(options)
        found = self._pools.get(key)
        if found is None:
            database = Database(options)
            self._pools[key] = (database, 1)
            return database
        database, users = found
        self._pools[key] = (database, users + 1)
        size = max(database.options.max_connections, shared_size or 0)
        database.options = replace(database.options, max_connections=size)
        return database

    async def release(self, database: Database) -> None:
        """One queue no longer uses ``database``; the last one closes it."""
        for key, (found, users) in list(self._pools.items()):
            if found is database:
                if users > 1:
                    self._pools[key] = (found, users - 1)
                    return
                del self._pools[key]
        await database.close()

    def lock(self, options: ConnectOptions, table: str) -> TableLock:
        """A handle on ``table``'s advisory lock, on the database's one lock session."""
        key = _target(options)
        session = self._locks.get(key)
        if session is None or session.users <= 0:
            session = self._locks[key] = LockSession(options)
        return session.lock(table)

    def held(self) -> int:
        """Lock sessions in use (for tests and the footprint figures)."""
        return sum(1 for session in self._locks.values() if session.users > 0)
