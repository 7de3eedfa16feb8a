"""What collect.counting: logical asks of the server, checked before the exporter starts.

Refusals (docs/logical.md, "Safe by default"): wal_level is not logical; max_slot_wal_keep_size
is -1 (a stopped exporter's slot would keep WAL until the disk is full) unless
collect.logical_allow_unbounded_wal is true; the table's replica identity cannot give a
change's old status; the publication is missing or leaves the table out; the role may not
stream. The exporter creates its slot when missing; the publication, the replica identity and
the role attribute need the table's owner or a superuser, so ``logical-setup`` prints them for
a DBA instead of the exporter taking those privileges. Also here: ``logical-drop``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from urllib.parse import unquote, urlsplit

from exporter.db.change_stream import StreamOptions
from exporter.db.pool import APPLICATION_NAME, connect, translate
from exporter.model import LogicalTarget
from exporter.settings import QueueSettings, Settings
from exporter.settings.table import quote_identifier, quote_table
from exporter.vocabulary import SLOT_PREFIX

MAX_NAME = 63


# Which target a queue's profile streams (None: its profile cannot count from a stream). The
# profiles know (exporter.profiles, a layer above): every caller passes their answer.
TargetOf = Callable[[QueueSettings], LogicalTarget | None]


def is_logical(queue: QueueSettings, target_of: TargetOf) -> bool:
    """True for a queue counted from its change stream."""
    return queue.collect.counting == "logical" and target_of(queue) is not None


def logical_queues(settings: Settings, target_of: TargetOf) -> list[QueueSettings]:
    """The queues counted from a change stream."""
    return [q for q in settings.queues if is_logical(q, target_of)]


def slot_of(queue: QueueSettings) -> str:
    """collect.logical_slot, or jobqueue_ and the queue name as a valid slot name."""
    if queue.collect.logical_slot:
        return queue.collect.logical_slot
    return (SLOT_PREFIX + re.sub(r"[^a-z0-9_]", "_", queue.name.lower()))[:MAX_NAME]


def publication_of(queue: QueueSettings) -> str:
    """collect.logical_publication, or the slot's name."""
    return queue.collect.logical_publication or slot_of(queue)


def stream_options(queue: QueueSettings, table: str | None = None) -> StreamOptions:
    """Where the queue's change stream reads (``table``: the profile's, else database.table)."""
    assert queue.database.dsn is not None
    return StreamOptions(
        dsn=queue.database.dsn,
        slot=slot_of(queue),
        publication=publication_of(queue),
        table=table or queue.database.table,
        connect_timeout=queue.database.connect_timeout,
    )


def _role(queue: QueueSettings) -> str:
    dsn = queue.database.dsn
    user = unquote(urlsplit(dsn).username or "") if dsn and "://" in dsn else ""
    return quote_identifier(user) if user else "<the exporter's role>"


def setup_script(settings: Settings, target_of: TargetOf) -> str:
    """The SQL a DBA runs, per logical queue, and the server settings to check."""
    queues = logical_queues(settings, target_of)
    refused = [
        f"-- queue {q.name}: profile {q.profile} cannot count from a change stream yet "
        "(docs/presets.md); the exporter refuses collect.counting: logical for it"
        for q in settings.queues
        if q.collect.counting == "logical" and target_of(q) is None
    ]
    if not queues:
        return (
            "\n".join([*refused, ""]) if refused else "-- no queue has collect.counting: logical\n"
        )
    out = [
        *refused,
        "-- Server settings (postgresql.conf; wal_level needs a restart):",
        "--   wal_level = logical",
        f"--   max_replication_slots and max_wal_senders: {len(queues)} more than in use now",
        "--   max_slot_wal_keep_size = '10GB'  (bounds the WAL a stopped exporter's slot keeps;",
        "--     the exporter refuses -1 unless collect.logical_allow_unbounded_wal: true)",
        "-- pg_hba.conf: let the exporter's role connect to the queue's database for",
        "--   replication, e.g. 'host <database> <role> <address> scram-sha-256' (a database",
        "--   name, not the keyword replication, matches a logical replication connection).",
        "-- Check: SHOW wal_level; SHOW max_replication_slots; SHOW max_wal_senders;",
        "--        SHOW max_slot_wal_keep_size;",
        "",
    ]
    for queue in queues:
        target = target_of(queue)
        assert target is not None
        table = quote_table(target.table)
        publication = quote_identifier(publication_of(queue))
        out += [
            f"-- queue {queue.name}: slot {slot_of(queue)} (the exporter creates it)",
            "-- as the table's owner: the old row of every change, then the publication",
            f"ALTER TABLE {table} REPLICA IDENTITY FULL;",
            f"CREATE PUBLICATION {publication} FOR TABLE {table};",
            "-- as a superuser: the exporter's role may stream (it then reads every change of",
            "-- the table, payloads included, whatever its table privileges: docs/security.md)",
            f"ALTER ROLE {_role(queue)} REPLICATION;",
            "",
        ]
    return "\n".join(out)


async def check_queue(queue: QueueSettings, target: LogicalTarget) -> list[str]:
    """Why the queue cannot count from its change stream (empty: it can); ConnectionError-like
    failures to reach the database come back as DatabaseError."""
    assert queue.database.dsn is not None
    try:
        conn = await connect(
            queue.database.dsn,
            timeout=queue.database.connect_timeout,
            command_timeout=queue.collect.statement_timeout,
            server_settings={"application_name": APPLICATION_NAME},
        )
    except Exception as exc:
        raise translate(exc) from None
    try:
        return await _problems(conn, queue, target)
    except Exception as exc:
        raise translate(exc) from None
    finally:
        await conn.close()


async def _problems(conn: object, queue: QueueSettings, target: LogicalTarget | None) -> list[str]:
    fetchval = conn.fetchval  # type: ignore[attr-defined]
    assert target is not None
    name, table = queue.name, target.table
    found: list[str] = []
    wal_level = await fetchval("SELECT current_setting('wal_level')")
    if wal_level != "logical":
        found.append(
            f"collect.counting: queue {name} counts logical, but wal_level is {wal_level}: set "
            "wal_level = logical and restart the server (logical-setup prints the steps)"
        )
    keep = await fetchval("SELECT current_setting('max_slot_wal_keep_size')")
    if keep == "-1" and not queue.collect.logical_allow_unbounded_wal:
        found.append(
            f"collect.logical_allow_unbounded_wal: queue {name}: max_slot_wal_keep_size is -1, "
            "so a stopped exporter's slot keeps WAL until the disk is full; set "
            "max_slot_wal_keep_size (e.g. '10GB'), or this setting to true to accept it"
        )
    relation = await fetchval("SELECT to_regclass($1)::oid", quote_table(table))
    if relation is None:
        return [*found, f"database.table: queue {name}: table {table} does not exist"]
    identity = await fetchval("SELECT relreplident::text FROM pg_class WHERE oid = $1", relation)
    status = target.key_column
    if identity != "f":
        keyed = status is not None and await fetchval(
            "SELECT EXISTS (SELECT FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
            " AND a.attnum = ANY (i.indkey) WHERE i.indrelid = $1 AND a.attname = $2 AND"
            " CASE $3 WHEN 'i' THEN i.indisreplident WHEN 'd' THEN i.indisprimary ELSE false END)",
            relation, status, identity,
        )  # fmt: skip
        if not keyed:
            named = {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX"}.get(identity, identity)
            carried = f"the old {status}" if status is not None else "the whole old row"
            found.append(
                f"collect.counting: queue {name}: table {table} has REPLICA IDENTITY {named}, "
                f"which does not carry {carried} of a change; run ALTER TABLE {table} "
                "REPLICA IDENTITY FULL (logical-setup prints it)"
            )
    publication = publication_of(queue)
    published = await fetchval(
        "SELECT EXISTS (SELECT FROM pg_publication_tables WHERE pubname = $1 AND "
        "format('%I.%I', schemaname, tablename)::regclass = $2::oid)",
        publication, relation,
    )  # fmt: skip
    if not published:
        found.append(
            f"collect.logical_publication: queue {name}: publication {publication} does not "
            f"exist or leaves out table {table}; a DBA creates it (logical-setup prints it)"
        )
    allowed = await fetchval(
        "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user"
    )
    if not allowed:
        found.append(
            f"collect.counting: queue {name}: the role may not stream changes; a superuser "
            "runs ALTER ROLE ... REPLICATION (logical-setup prints it)"
        )
    return found


async def drop_slot(queue: QueueSettings) -> bool:
    """Drop the queue's slot; False when there was none (DatabaseError while it is in use)."""
    assert queue.database.dsn is not None
    try:
        conn = await connect(queue.database.dsn, timeout=queue.database.connect_timeout)
    except Exception as exc:
        raise translate(exc) from None
    try:
        dropped = await conn.fetchval(
            "SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots "
            "WHERE slot_name = $1",
            slot_of(queue),
        )
    except Exception as exc:
        raise translate(exc) from None
    finally:
        await conn.close()
    return bool(dropped)


async def check_all(
    settings: Settings, target_of: TargetOf
) -> tuple[list[str], list[tuple[str, str]]]:
    """The refusals of every logical queue, and the queues that could not be checked (why)."""
    targets = [(q, target_of(q)) for q in settings.queues if q.collect.counting == "logical"]
    checked = [(q, t) for q, t in targets if t is not None and q.database.dsn]
    queues = [q for q, _ in checked]
    results = await asyncio.gather(*(check_queue(q, t) for q, t in checked), return_exceptions=True)
    problems: list[str] = []
    unchecked: list[tuple[str, str]] = []
    for queue, result in zip(queues, results, strict=True):
        if isinstance(result, BaseException):
            unchecked.append((queue.name, str(result)))
        else:
            problems += result
    return problems, unchecked
