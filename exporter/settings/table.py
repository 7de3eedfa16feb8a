"""A queue's ``table:`` mapping: which columns of a home-grown table play the reference's roles.

A queue whose table is shaped like the reference ``job`` table (exporter/sql/schema.sql) but
spelled otherwise names its table, its columns and its four status values here; the default
counting mode then reads it unchanged. This module only parses the YAML and checks what needs
no database; exporter/db/catalog.py checks the mapping against the table itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from exporter.settings.kinds import parse_table, show
from exporter.settings.yamlfile import suggest
from exporter.vocabulary import Status

if TYPE_CHECKING:  # schema.py imports this module
    from exporter.settings.schema import CollectSettings

# Each role of the reference table, with what the column must mean; the order of schema.sql.
ROLES: dict[str, str] = {
    "job_id": "unique key of the job (uuid, bigint or text)",
    "job_type": "kind of job: an integer, or text that becomes the job_type label",
    "status": "pending, running, done or dead, as the four status_values",
    "priority": "claim order (not read by the exporter)",
    "attempts": "attempts started so far; claiming adds one, a requeue resets it to 0",
    "max_attempts": "attempts allowed; a failure at attempts >= max_attempts is a death",
    "worker_id": "who holds the job (not read by the exporter)",
    "lease_until": "end of the running attempt's lease; past it the job is stuck",
    "run_after": (
        "earliest time the job may be claimed (backoff, scheduling); a requeue sets it to now()"
    ),
    "run_started_at": "start of the latest attempt",
    "result": (
        "jsonb of a done job: duration and costs at the configured paths (null: the table has "
        "none, and no figure is read from it)"
    ),
    "last_error": "text of the latest failure; the reaper appends the lease marker",
    "created_at": "insert time",
    "updated_at": "now() of every transition and heartbeat: the change cursor",
}
# Roles a table may lack (``columns.<role>: null``): nothing but an optional figure needs them.
OPTIONAL_ROLES = ("result",)
# Base types (pg_type.typname) each role may have. A domain counts as its base type.
INTEGER_TYPES = frozenset({"int2", "int4", "int8"})
TEXT_TYPES = frozenset({"text", "varchar", "bpchar"})
TIME_TYPES = frozenset({"timestamptz"})
# A timestamp without time zone is an instant only in its writers' zone: table.timestamps.
NAIVE_TIME = "timestamp"
ENUM = "enum"
USABLE: dict[str, frozenset[str]] = {
    "job_id": frozenset({"uuid"}) | INTEGER_TYPES | TEXT_TYPES,
    "job_type": INTEGER_TYPES | TEXT_TYPES | {ENUM},
    "status": INTEGER_TYPES | TEXT_TYPES | {ENUM},
    "attempts": INTEGER_TYPES,
    "max_attempts": INTEGER_TYPES,
    "lease_until": TIME_TYPES | {NAIVE_TIME},
    "run_after": TIME_TYPES | {NAIVE_TIME},
    "run_started_at": TIME_TYPES | {NAIVE_TIME},
    "created_at": TIME_TYPES | {NAIVE_TIME},
    "updated_at": TIME_TYPES | {NAIVE_TIME},
    "result": frozenset({"jsonb"}),
    "last_error": TEXT_TYPES,
}
TIME_ROLES = tuple(role for role, types in USABLE.items() if NAIVE_TIME in types)
UTC = "UTC"
_UTC_NAMES = frozenset({"utc", "etc/utc", "gmt", "z", "+00:00", "-00:00"})
_OFFSET = re.compile(r"([+-])(\d{2}):(\d{2})")
# Columns the exporter never reads: required only when the mapping names them.
UNREAD_ROLES = ("priority", "worker_id")
STATUS_NAMES: tuple[str, ...] = tuple(status.label for status in Status)
REFERENCE_TABLE = "job"
REFERENCE_STATUS_VALUES: dict[str, int | str] = {s.label: int(s) for s in Status}
_KEYS = ("name", "columns", "status_values", "timestamps")
# Status values beyond the four: known values counted as cancelled, or counted nowhere.
CANCELLED_KEY = "cancelled"
IGNORE_KEY = "ignore"
MAX_IDENTIFIER = 63  # PostgreSQL's NAMEDATALEN - 1
_Fail = Callable[[str, str], None]
# The collect settings that read the result column.
RESULT_PATHS = tuple(
    f"collect.{name}_path" for name in ("duration", "cost_ai", "cost_proxy", "cost_total")
)


@dataclass(frozen=True)
class TableMapping:
    """A queue's table and the name of each reference column in it; equal to the reference's
    when nothing is mapped."""

    name: str = REFERENCE_TABLE
    columns: Mapping[str, str] = field(default_factory=lambda: {r: r for r in ROLES})
    status_values: Mapping[str, int | str] = field(
        default_factory=lambda: dict(REFERENCE_STATUS_VALUES)
    )
    named: frozenset[str] = frozenset()  # roles the configuration wrote out
    # Values of the table's own beyond the four: counted as cancelled, or counted nowhere.
    cancelled: tuple[int | str, ...] = ()
    ignored: tuple[int | str, ...] = ()
    # The writers' zone of timestamp-without-time-zone columns: UTC or +HH:MM (None: none).
    time_zone: str | None = None
    # Where each part was written: dotted path under ``origin`` -> " (file:line)".
    origin: str = field(default="table", compare=False)
    lines: Mapping[str, str] = field(default_factory=dict, compare=False)

    def column(self, role: str) -> str:
        """The table's column that plays ``role`` (KeyError for a role the table lacks)."""
        return self.columns[role]

    def has(self, role: str) -> bool:
        """False for an optional role the mapping set to null (the table has no such column)."""
        return role in self.columns

    def value(self, status: Status) -> int | str:
        """The value the status column holds for ``status``."""
        return self.status_values[status.label]

    @property
    def schema(self) -> str | None:
        """The schema named in the table name, if any."""
        schema, dot, _ = self.name.rpartition(".")
        return schema if dot else None

    @property
    def bare_name(self) -> str:
        """The table name without its schema."""
        return self.name.rpartition(".")[2]

    @property
    def reference_statuses(self) -> bool:
        """True when the status column holds the reference's numbers 1-4, and nothing else is
        named."""
        plain = not self.cancelled and not self.ignored
        return plain and dict(self.status_values) == REFERENCE_STATUS_VALUES

    def where(self, path: str) -> tuple[str, str]:
        """The full field path of a part (``queues[0].table.columns.status``) and its line."""
        return f"{self.origin}.{path}" if path else self.origin, self.lines.get(path, "")


def parse_mapping(
    value: object, origin: str, lines: Mapping[str, str], errors: list[str]
) -> TableMapping | None:
    """A ``table:`` mapping from YAML; ``lines`` maps a path under ``origin`` to its location.

    Mistakes are appended to ``errors`` (each with its field path and line); None then.
    """
    before = len(errors)

    def fail(path: str, message: str) -> None:
        key = f"{origin}.{path}" if path else origin
        errors.append(f"{key}: {message}{lines.get(path, '')}")

    if not isinstance(value, dict):
        fail("", f"expected a mapping with name, columns and status_values, got {show(value)}")
        return None
    for key in value:
        if key not in _KEYS:
            fail(
                str(key), f"unknown key{suggest(str(key), _KEYS)} (a table has {', '.join(_KEYS)})"
            )
    name = REFERENCE_TABLE
    if "name" in value:
        try:
            name = parse_table(value["name"])
        except ValueError as exc:
            fail("name", str(exc))
    columns = _columns(value.get("columns"), fail)
    statuses = _status_values(value.get("status_values"), fail)
    extras = {key: _extra_values(value.get("status_values"), key, fail)
              for key in (CANCELLED_KEY, IGNORE_KEY)}  # fmt: skip
    _check_extras(statuses, extras, fail)
    time_zone = _time_zone(value.get("timestamps"), fail)
    if len(errors) > before:
        return None
    named = frozenset(value.get("columns") or {})
    return TableMapping(
        name, columns, statuses, named, extras[CANCELLED_KEY], extras[IGNORE_KEY], time_zone,
        origin, dict(lines),
    )  # fmt: skip


def _columns(raw: object, fail: _Fail) -> dict[str, str]:
    columns = {role: role for role in ROLES}
    if raw is None:
        return columns
    if not isinstance(raw, dict):
        fail("columns", f"expected a mapping of role to column name, got {show(raw)}")
        return columns
    taken: dict[str, str] = {}
    for role, column in raw.items():
        path = f"columns.{role}"
        if role not in ROLES:
            fail(path, f"unknown column role{suggest(str(role), list(ROLES))}")
            continue
        if column is None and role in OPTIONAL_ROLES:
            del columns[role]  # the table has none: nothing may need it (see result_paths)
            continue
        if not isinstance(column, str) or not column:
            optional = f" (only {', '.join(OPTIONAL_ROLES)} may be null)" if column is None else ""
            fail(path, f"expected a column name, got {show(column)}{optional}")
            continue
        if len(column.encode()) > MAX_IDENTIFIER or "\x00" in column:
            fail(path, f"{show(column)} cannot be a PostgreSQL column name")
            continue
        columns[role] = column
    for role, column in columns.items():
        if column in taken:
            fail(f"columns.{role}", f"column {column!r} already plays {taken[column]}")
        taken.setdefault(column, role)
    return columns


def _status_values(raw: object, fail: _Fail) -> dict[str, int | str]:
    if raw is None:
        return dict(REFERENCE_STATUS_VALUES)
    if not isinstance(raw, dict):
        fail("status_values", f"expected a mapping of status to value, got {show(raw)}")
        return {}
    values: dict[str, int | str] = {}
    for status, found in raw.items():
        path = f"status_values.{status}"
        if status in (CANCELLED_KEY, IGNORE_KEY):
            continue  # values beyond the four: _extra_values
        if status not in STATUS_NAMES:
            known = (*STATUS_NAMES, CANCELLED_KEY, IGNORE_KEY)
            fail(path, f"unknown status{suggest(str(status), known)}")
        elif isinstance(found, bool) or not isinstance(found, int | str) or found == "":
            fail(path, f"expected an integer or a text value, got {show(found)}")
        else:
            values[status] = found
    missing = [s for s in STATUS_NAMES if s not in raw]
    if missing:
        fail("status_values", f"every status needs a value; missing: {', '.join(missing)}")
    if len({type(v) for v in values.values()}) > 1:
        fail("status_values", "the values must be all integers or all text, not both")
    seen: dict[int | str, str] = {}
    for status, found in values.items():
        if found in seen:
            fail(f"status_values.{status}", f"{found!r} is also the value of {seen[found]}")
        seen.setdefault(found, status)
    return values


def _extra_values(raw: object, key: str, fail: _Fail) -> tuple[int | str, ...]:
    """``status_values.cancelled`` or ``.ignore``: one value or a list of them."""
    if not isinstance(raw, dict) or raw.get(key) is None:
        return ()
    found = raw[key]
    items = found if isinstance(found, list) else [found]
    values: list[int | str] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int | str) or item == "":
            fail(f"status_values.{key}", f"expected a value or a list of values, got {show(found)}")
            return ()
        values.append(item)
    return tuple(values)


def _check_extras(
    statuses: Mapping[str, int | str], extras: Mapping[str, tuple[int | str, ...]], fail: _Fail
) -> None:
    """Values beyond the four have the four's type and are no other status's value."""
    seen: dict[int | str, str] = {v: s for s, v in statuses.items()}
    text = all(isinstance(v, str) for v in statuses.values())
    for key, values in extras.items():
        for value in values:
            if statuses and isinstance(value, str) != text:
                kind = "text" if text else "integers"
                fail(f"status_values.{key}", f"{value!r}: the four status values are {kind}")
            elif value in seen:
                fail(f"status_values.{key}", f"{value!r} is also the value of {seen[value]}")
            seen.setdefault(value, key)


def _time_zone(raw: object, fail: _Fail) -> str | None:
    """``timestamps: {time_zone: ...}``: UTC, or a fixed offset ``+HH:MM``, as written."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"time_zone"}:
        fail("timestamps", f"expected a mapping with time_zone, got {show(raw)}")
        return None
    zone = raw.get("time_zone")
    if zone is None:
        return None
    text = str(zone).strip()
    if text.lower() in _UTC_NAMES:
        return UTC
    offset = _OFFSET.fullmatch(text)
    if offset and int(offset.group(2)) <= 14 and int(offset.group(3)) < 60:
        return text
    fail(
        "timestamps.time_zone",
        f"expected UTC or a fixed offset such as +02:00, got {show(zone)}: a zone with daylight "
        "saving time turns its clocks back an hour each year, its local stamps go back with "
        "them, and the change cursor would miss that hour's changes (write UTC, as Rails does, "
        "or make the columns timestamptz)",
    )
    return None


def time_zone_sql(zone: str) -> str:
    """The ``AT TIME ZONE`` operand of a declared zone (an offset as an ISO interval: east of
    Greenwich is positive, unlike a POSIX zone name such as '+02')."""
    return "'UTC'" if zone == UTC else f"INTERVAL '{zone}'"


def without_result(
    mapping: TableMapping,
    collect: CollectSettings,
    written: Mapping[str, object],
    prefix: str,
    errors: list[str],
) -> CollectSettings:
    """The collect settings of a queue: for a table without ``result``, every path into it
    null, and an error for each path the configuration (``written``: its dotted keys) set."""
    if mapping.has("result"):
        return collect
    key, line = mapping.where("columns.result")
    for path in RESULT_PATHS:
        if written.get(path) is not None:
            errors.append(
                f"{prefix}{path}: reads result, but {key} is null (the table has none): set "
                f"it to null, or name the result column{line}"
            )
    return replace(
        collect, duration_path=None, cost_ai_path=None, cost_proxy_path=None, cost_total_path=None
    )


def sql_literal(value: int | str) -> str:
    """A status value as an SQL literal (text quoted, quotes doubled)."""
    if isinstance(value, int):
        return str(value)
    return "'" + value.replace("'", "''") + "'"


def quote_identifier(name: str) -> str:
    """One SQL identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'


def quote_table(table: str) -> str:
    """Quote a possibly schema-qualified table name as SQL identifiers."""
    return ".".join(quote_identifier(part) for part in table.split("."))
