"""The table mapping checked against the catalog: every column exists with a usable type, and
every status value fits the status column (a label of it, for an enum).

:func:`read_columns` asks PostgreSQL (pg_attribute, pg_type, pg_enum); :func:`check_mapping` is
pure, so its messages are tested without a database. Each message names the field path and the
YAML line of the mistake, and the table's real columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.db.sqltext import TableShape
from exporter.settings.sources import suggest
from exporter.settings.table import ROLES, UNREAD_ROLES, TableMapping, quote_table
from exporter.vocabulary import Status

# Base types (pg_type.typname) each role may have. A domain counts as its base type.
_INTEGER = frozenset({"int2", "int4", "int8"})
_TEXT = frozenset({"text", "varchar", "bpchar"})
_TIME = frozenset({"timestamptz"})
ENUM = "enum"
USABLE: dict[str, frozenset[str]] = {
    "job_id": frozenset({"uuid"}) | _INTEGER | _TEXT,
    "job_type": _INTEGER | _TEXT | {ENUM},
    "status": _INTEGER | _TEXT | {ENUM},
    "attempts": _INTEGER,
    "max_attempts": _INTEGER,
    "lease_until": _TIME,
    "run_after": _TIME,
    "run_started_at": _TIME,
    "created_at": _TIME,
    "updated_at": _TIME,
    "result": frozenset({"jsonb"}),
    "last_error": _TEXT,
}
_TIME_WHY = (
    "timestamp with time zone (a timestamp without one depends on the writer's TimeZone, so "
    "its instants cannot be compared with now())"
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


def check_mapping(mapping: TableMapping, columns: list[Column] | None) -> TableShape:
    """The table's shape, or MappingError naming every mistake with its field and line."""
    problems: list[str] = []

    def fail(path: str, message: str) -> None:
        key, line = mapping.where(path)
        problems.append(f"{key}: {message}{line}")

    if columns is None:
        fail("name", f"table {mapping.name} does not exist (or this role may not see it)")
        raise MappingError("\n".join(problems))
    found = {c.name: c for c in columns}
    real = ", ".join(c.name for c in columns) or "none"
    for role in ROLES:
        name = mapping.column(role)
        if role in UNREAD_ROLES and role not in mapping.named:
            continue
        column = found.get(name)
        if column is None:
            fail(
                f"columns.{role}",
                f"{mapping.name} has no column {name!r}{suggest(name, list(found))}; "
                f"its columns: {real}",
            )
            continue
        usable = USABLE.get(role)
        if usable is not None and column.base not in usable:
            wanted = _TIME_WHY if usable == _TIME else "one of " + ", ".join(sorted(usable))
            fail(f"columns.{role}", f"column {name} is {column.declared}; {role} needs {wanted}")
    status = found.get(mapping.column("status"))
    if status is not None:
        _check_status_values(mapping, status, fail)
    if problems:
        raise MappingError("\n".join(problems))
    job_id = found[mapping.column("job_id")]
    job_type = found[mapping.column("job_type")]
    return TableShape(job_id.base, job_type.base not in _INTEGER)


def _check_status_values(
    mapping: TableMapping, column: Column, fail: Callable[[str, str], None]
) -> None:
    for status in Status:
        value = mapping.value(status)
        path = f"status_values.{status.label}"
        if column.base in _INTEGER and not isinstance(value, int):
            fail(path, f"{value!r} is text, but column {column.name} is {column.declared}")
        elif column.base not in _INTEGER and isinstance(value, int):
            fail(path, f"{value} is a number, but column {column.name} is {column.declared}")
        elif column.base == ENUM and value not in column.labels:
            labels = ", ".join(column.labels)
            fail(
                path,
                f"{value!r} is not a value of {column.declared}{suggest(str(value), column.labels)}"
                f"; its values: {labels}",
            )
