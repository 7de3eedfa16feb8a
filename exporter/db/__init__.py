"""The database side: the SQL, the asyncpg pool, read-only transactions, timeouts, the lock.

Only this package imports asyncpg (``presets`` runs a preset reader's cycle). Its errors are
translated into ``DatabaseError`` with a short reason (timeout, lock, connection, query,
schema, permission), so callers never see asyncpg's exception tree and no message carries the
DSN.
"""

from exporter.db.lock import LOCK_CLASS, LockSession
from exporter.db.pool import (
    APPLICATION_NAME,
    ConnectOptions,
    Database,
    DatabaseError,
    Reading,
    load_queries,
    translate,
)
from exporter.settings.table import quote_table

__all__ = [
    "APPLICATION_NAME",
    "LOCK_CLASS",
    "ConnectOptions",
    "Database",
    "DatabaseError",
    "LockSession",
    "Reading",
    "load_queries",
    "quote_table",
    "translate",
]
