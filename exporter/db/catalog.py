"""The table mapping checked against the catalog: every column exists with a usable type, and
every status value fits the status column (a label of it, for an enum).

:func:`read_columns` asks PostgreSQL (pg_attribute, pg_type, pg_enum); :func:`check_mapping` is
pure, so its messages are tested without a database. Each message names the field path and the
YAML line of the mistake, and the table's real columns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import asyncpg

from exporter.db.pool import APPLICATION_NAME, Database, DatabaseError, connect, translate
from exporter.model import TableShape
from exporter.settings import ConfigError, QueueSettings
from exporter.settings.table import (
    CANCELLED_KEY,
    ENUM,
    IGNORE_KEY,
    INTEGER_TYPES,
    NAIVE_TIME,
    ROLES,
    TIME_ROLES,
    UNREAD_ROLES,
    USABLE,
    TableMapping,
    quote_table,
)
from exporter.settings.yamlfile import suggest
from exporter.vocabulary import Status

MAPPING_DOCS = 'docs/configuration.md, "A home-grown table"'
TIME_WANTED = (
    "timestamptz, or a timestamp without time zone whose writers' zone the mapping declares "
    "(table.timestamps.time_zone)"
)
NAIVE_REFUSED = (
    "a timestamp without time zone is an instant only in the zone its writers used; declare "
    "it in the table mapping, timestamps: {time_zone: UTC} (what Rails writes) or an offset "
    "such as +02:00, or make the columns timestamptz"
)

COLUMNS_QUERY = """
SELECT a.attname::text AS name,
       format_type(a.atttypid, a.atttypmod) AS declared,
       CASE WHEN b.typtype = 'e' THEN 'enum' ELSE b.typname::text END AS base,
       CASE WHEN b.typtype = 'e' THEN array(SELECT e.enumlabel::text FROM pg_enum e
                                            WHERE e.enumtypid = b.oid ORDER BY e.enumsortorder)
       END AS labels
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""


@dataclass(frozen=True)
class Column:
    """One column as the catalog declares it."""

    name: str
    declared: str  # format_type(): what \\d shows
    base: str  # the base type's name, or "enum"
    labels: tuple[str, ...] = ()  # an enum's labels


class MappingError(Exception):
    """The catalog proves the table mapping wrong; the message lists every mistake."""


async def read_columns(conn: Any, mapping: TableMapping) -> list[Column] | None:
    """The mapped table's columns, in order; None when the table does not exist."""
    rows = await conn.fetch(COLUMNS_QUERY, quote_table(mapping.name))
    if not rows:
        return None
    return [Column(r["name"], r["declared"], r["base"], tuple(r["labels"] or ())) for r in rows]


async def inspect_table(database: Database, mapping: TableMapping) -> TableShape:
    """The mapped table's shape from the catalog, on one of the pool's sessions;
    DatabaseError("schema") naming every mistake when the catalog proves the mapping wrong."""
    try:
        async with database.session() as conn:
            columns = await read_columns(conn, mapping)
    except Exception as exc:
        raise translate(exc) from None
    try:
        return check_mapping(mapping, columns)
    except MappingError as exc:
        raise DatabaseError("schema", str(exc)) from None


def check_mapping(mapping: TableMapping, columns: list[Column] | None) -> TableShape:
    """The table's shape, or MappingError naming every mistake with its field and line."""
    if columns is None:
        raise MappingError(missing_table(mapping))
    problems: list[str] = []

    def fail(path: str, message: str) -> None:
        key, line = mapping.where(path)
        problems.append(f"{key}: {message}{line}")

    found = {c.name: c for c in columns}
    # Roles left at their reference names are reported together: after a bare
    # --database.table every one of them may be missing, and one line says it.
    unnamed: list[str] = []
    naive: dict[str, Column] = {}  # role -> its timestamp-without-time-zone column
    for role in ROLES:
        if not mapping.has(role) or (role in UNREAD_ROLES and role not in mapping.named):
            continue  # a role the table lacks (null), or one never read
        name = mapping.column(role)
        column = found.get(name)
        if column is None:
            if role in mapping.named:
                fail(f"columns.{role}", f"no column {name!r}{suggest(name, list(found))}")
            else:
                unnamed.append(name + suggest(name, list(found)))
            continue
        usable = USABLE.get(role)
        if usable is not None and column.base not in usable:
            wanted = TIME_WANTED if role in TIME_ROLES else "one of " + ", ".join(sorted(usable))
            fail(f"columns.{role}", f"column {name} is {column.declared}; {role} needs {wanted}")
        elif column.base == NAIVE_TIME:
            naive[role] = column
    if naive and mapping.time_zone is None:
        listed = ", ".join(f"{c.name} ({c.declared})" for c in naive.values())
        fail("timestamps", f"{listed}: {NAIVE_REFUSED}")
    if unnamed:
        reference = "the reference names: a role a table: mapping does not name"
        fail("columns", f"no column {', '.join(unnamed)} ({reference})")
    status = found.get(mapping.column("status"))
    if status is not None:
        _check_status_values(mapping, status, fail)
    if problems:
        real = ", ".join(c.name for c in columns) or "none"
        lines = [f"the table mapping does not fit table {mapping.name}:", *problems]
        lines.append(f"{mapping.name} has the columns {real}")
        if unnamed:
            lines.append(
                f"Name the columns that play each role in a table: mapping ({MAPPING_DOCS})."
            )
        raise MappingError("\n".join(lines))
    job_id = found[mapping.column("job_id")]
    job_type = found[mapping.column("job_type")]
    padded = found[mapping.column("status")].base == "bpchar"
    return TableShape(job_id.base, job_type.base not in INTEGER_TYPES, padded, frozenset(naive))


def missing_table(mapping: TableMapping) -> str:
    """What to say when the mapped table does not exist: the table and the columns looked for,
    and the two ways to point the exporter at the queue's real table."""
    key, line = mapping.where("name")
    wanted = ", ".join(
        mapping.column(role)
        for role in ROLES
        if mapping.has(role) and (role not in UNREAD_ROLES or role in mapping.named)
    )
    return "\n".join(
        (
            f"{key}: table {mapping.name} does not exist (or this role may not see it){line}",
            f"  the exporter looks for a table with the columns {wanted}",
            "  jobs in a table of another name: --database.table NAME (database.table in the file)",
            f"  columns of other names too: a table: mapping ({MAPPING_DOCS})",
        )
    )


def _check_status_values(
    mapping: TableMapping, column: Column, fail: Callable[[str, str], None]
) -> None:
    values = [(f"status_values.{status.label}", mapping.value(status)) for status in Status]
    values += [(f"status_values.{CANCELLED_KEY}", value) for value in mapping.cancelled]
    values += [(f"status_values.{IGNORE_KEY}", value) for value in mapping.ignored]
    for path, value in values:
        if column.base in INTEGER_TYPES and not isinstance(value, int):
            fail(path, f"{value!r} is text, but column {column.name} is {column.declared}")
        elif column.base not in INTEGER_TYPES and isinstance(value, int):
            fail(path, f"{value} is a number, but column {column.name} is {column.declared}")
        elif column.base == ENUM and value not in column.labels:
            labels = ", ".join(column.labels)
            fail(
                path,
                f"{value!r} is not a value of {column.declared}{suggest(str(value), column.labels)}"
                f"; its values: {labels}",
            )


@dataclass(frozen=True)
class Unchecked:
    """A queue whose mapping the catalog could not judge now, and why (password-free)."""

    queue: str
    why: str


async def _check_one(queue: QueueSettings) -> str | Unchecked | None:
    """The catalog's verdict on one queue's mapping: None when it fits, the mistakes, or
    Unchecked when the catalog cannot be asked."""
    assert queue.database.dsn is not None
    mapping = queue.mapping
    try:
        conn = await connect(
            queue.database.dsn,
            timeout=queue.database.connect_timeout,
            command_timeout=queue.collect.statement_timeout,
            server_settings={
                "application_name": APPLICATION_NAME,
                "default_transaction_read_only": "on",
            },
        )
    except Exception as exc:
        return Unchecked(queue.name, str(translate(exc)))
    try:
        check_mapping(mapping, await read_columns(conn, mapping))
    except MappingError as exc:
        return f"queue {queue.name}: {exc}"
    except (asyncpg.PostgresError, OSError, TimeoutError) as exc:
        return Unchecked(queue.name, str(translate(exc)))
    finally:
        await conn.close()
    return None


async def check_tables(queues: Iterable[QueueSettings]) -> list[Unchecked]:
    """Check the table mapping of each of ``queues`` with a DSN (the caller picks the queues
    whose profile maps a table) against its database's catalog, all at once; ConfigError
    naming each mistake (field, YAML line, real columns). The queues whose catalog could not be
    asked (a database down) are returned, not raised: a database that is down must not keep the
    exporter from serving jobqueue_up 0."""
    with_dsn = [queue for queue in queues if queue.database.dsn]
    verdicts = await asyncio.gather(*(_check_one(queue) for queue in with_dsn))
    problems = [verdict for verdict in verdicts if isinstance(verdict, str)]
    if problems:
        raise ConfigError("\n".join(problems))
    return [verdict for verdict in verdicts if isinstance(verdict, Unchecked)]
