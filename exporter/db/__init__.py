"""The database side: the SQL, the asyncpg pool, read-only transactions, timeouts, the lock.

Only this package imports asyncpg (``cycle`` runs a counting mode's cycle). Its errors are
translated into ``DatabaseError`` with a short reason (timeout, lock, connection, query,
schema, permission), so callers never see asyncpg's exception tree and no message carries the
DSN.
"""

from exporter.db.connections import Connections
from exporter.db.cycle import run_cycle
from exporter.db.lock import LOCK_CLASS, LockSession, TableLock
from exporter.db.pool import (
    APPLICATION_NAME,
    ConnectOptions,
    Database,
    DatabaseError,
    quote_table,
    translate,
)

__all__ = [
    "APPLICATION_NAME",
    "LOCK_CLASS",
    "ConnectOptions",
    "Connections",
    "Database",
    "DatabaseError",
    "LockSession",
    "TableLock",
    "quote_table",
    "run_cycle",
    "translate",
]
