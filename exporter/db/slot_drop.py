"""``logical-drop``: a queue's replication slot dropped on purpose, or who holds it.

The exporter never drops a usable slot by itself (docs/logical.md): this is how its operator
does when leaving the mode, and what a polling exporter looks for to say that a slot is left
over. A slot in use is never dropped: the holder (the walsender's pid, application_name and
client address) is named instead, so the operator knows which exporter to stop first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import asyncpg

from exporter.db.pool import APPLICATION_NAME, DatabaseError, connect, translate
from exporter.db.slot_setup import slot_of
from exporter.settings import QueueSettings

log = logging.getLogger(__name__)

SLOT_SQL = """
SELECT s.active, s.active_pid, r.application_name, host(r.client_addr) AS client_addr,
       s.wal_status, s.database,
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint AS retained_bytes
FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
WHERE s.slot_name = $1
"""


@dataclass(frozen=True)
class SlotFound:
    """A replication slot as pg_replication_slots shows it, with its holder if one reads it."""

    name: str
    active: bool
    pid: int | None
    application: str | None
    client: str | None
    wal_status: str | None
    database: str | None
    retained_bytes: int | None

    def holder(self) -> str:
        """Who reads the slot, as far as the server tells (pid, application, address)."""
        parts = [f"pid {self.pid}" if self.pid is not None else "an unknown process"]
        if self.application:
            parts.append(f"application_name {self.application}")
        parts.append(f"from {self.client}" if self.client else "over a local socket")
        return ", ".join(parts)


class SlotInUseError(DatabaseError):
    """The slot is being read: the message names the holder and says to stop it first."""

    def __init__(self, slot: SlotFound) -> None:
        super().__init__(
            "query",
            f"slot {slot.name} is in use by {slot.holder()}: stop the exporters of this queue "
            "first (an exporter in logical mode reads its slot while it leads), then run "
            "logical-drop again",
        )
        self.slot = slot


async def find_slot(conn: Any, name: str) -> SlotFound | None:
    """The slot named ``name``, or None."""
    row = await conn.fetchrow(SLOT_SQL, name)
    if row is None:
        return None
    return SlotFound(
        name=name,
        active=bool(row["active"]),
        pid=row["active_pid"],
        application=row["application_name"],
        client=row["client_addr"],
        wal_status=row["wal_status"],
        database=row["database"],
        retained_bytes=row["retained_bytes"],
    )


async def drop_slot(queue: QueueSettings, name: str) -> SlotFound | None:
    """Drop the slot ``name`` of the queue's database; what was dropped, None when there was
    none; SlotInUseError naming the holder when something reads it, DatabaseError otherwise."""
    assert queue.database.dsn is not None
    try:
        conn = await connect(
            queue.database.dsn,
            timeout=queue.database.connect_timeout,
            server_settings={"application_name": APPLICATION_NAME},
        )
    except Exception as exc:
        raise translate(exc) from None
    try:
        slot = await find_slot(conn, name)
        if slot is None:
            return None
        if slot.active:
            raise SlotInUseError(slot)
        try:
            await conn.execute("SELECT pg_drop_replication_slot($1)", name)
        except asyncpg.ObjectInUseError:
            # Taken between the look and the drop: name who took it.
            now = await find_slot(conn, name)
            raise SlotInUseError(now or slot) from None
        except asyncpg.UndefinedObjectError:
            return None  # dropped meanwhile by someone else
        return slot
    except DatabaseError:
        raise
    except Exception as exc:
        raise translate(exc) from None
    finally:
        await conn.close()


class LeftoverSlot:
    """Looks for the slot a polling queue's logical mode left behind, which nothing reads and
    which keeps WAL until dropped, and says so once (again should it come back once dropped)."""

    def __init__(self) -> None:
        self._warned: str | None = None

    async def look(self, database: Any, queue: QueueSettings) -> None:
        """Look once, through a pooled session of :class:`~exporter.db.Database`."""
        name = slot_of(queue)
        try:
            async with database.session() as conn:
                slot = await find_slot(conn, name)
        except Exception as exc:
            # The index check beside it reports a database that is away; this is advice.
            why = str(translate(exc))
            log.debug("leftover slot not looked for", extra={"fields": {"err": why}})
            return
        if slot is None or slot.active:
            self._warned = None
            return
        if self._warned != name:
            log.warning(
                "replication slot left over from collect.counting: logical; nothing reads it "
                "and it keeps WAL until it is dropped: stop the queue's exporters in logical "
                "mode, if any, then run the logical-drop command with this configuration",
                extra={"fields": {"queue": queue.name, "slot": name,
                                  "wal_status": slot.wal_status or "",
                                  "retained_bytes": slot.retained_bytes or 0}},
            )  # fmt: skip
        self._warned = name
