"""The SQL files' one block parser, the horizon's sessions fragment every profile shares, and
the default profile's SQL rendered for one table mapping: queries.sql and indexes.sql.

Every SQL file the exporter ships holds named blocks (``-- name: x`` starts block x), read by
:func:`sql_blocks`. queries.sql is a template (its header lists the placeholders);
indexes.sql stays plain SQL for the reference table, so ``psql -f`` runs it as it is, and is
rendered for another table by replacing the reference's names in its statements.
No I/O beyond reading the packaged files.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources

from exporter.counting.status_rule import CANCELLED, IGNORED, UNMAPPED
from exporter.counting.statuses import SQL_CHARS
from exporter.model import NIL, REFERENCE_SHAPE, TableShape
from exporter.settings import QueueSettings
from exporter.settings.table import (
    ROLES,
    TIME_ROLES,
    TableMapping,
    quote_identifier,
    quote_table,
    sql_literal,
    time_zone_sql,
)
from exporter.vocabulary import Status

# A text job type is cut to this many characters in SQL: one more than the label keeps, so
# the label knows it was cut (model.JobTypeLabels), and a megabyte never crosses the wire.
JOB_TYPE_SQL_CHARS = 129
_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_BLOCK = re.compile(r"^-- name: ", flags=re.MULTILINE)


def _read(name: str) -> str:
    return resources.files("exporter").joinpath(f"sql/{name}").read_text(encoding="utf-8")


def sql_blocks(package: str, file: str) -> dict[str, str]:
    """The named blocks of one packaged SQL file, by name, each without surrounding blanks (the
    file's header, before the first name, is left out)."""
    text = resources.files(package).joinpath(file).read_text(encoding="utf-8")
    blocks: dict[str, str] = {}
    for chunk in _BLOCK.split(text)[1:]:
        name, _, body = chunk.partition("\n")
        blocks[name.strip()] = body.strip()
    return blocks


def horizon_sessions() -> str:
    """The FROM clause through which every profile's horizon reads the sessions and the prepared
    transactions (sql/horizon.sql says which sessions it leaves out, and why)."""
    return sql_blocks("exporter", "sql/horizon.sql")["sessions"]


def _placeholders(mapping: TableMapping, shape: TableShape) -> dict[str, str]:
    values = {role: quote_identifier(mapping.column(role)) for role in ROLES if mapping.has(role)}
    values["table"] = quote_table(mapping.name)
    values["result_value"] = values.get("result", "NULL::jsonb")  # a table may have none
    for status in Status:
        values[status.label] = sql_literal(mapping.value(status))
    values["status_code"] = _status_code(mapping, values["status"])
    # A timestamp without time zone is read as an instant in its writers' declared zone; the
    # cursor's bounds are converted instead of the column, so its index still serves them.
    zone = time_zone_sql(mapping.time_zone) if mapping.time_zone else None
    for role in TIME_ROLES:
        naive = zone is not None and role in shape.naive_times
        values[f"{role}_tz"] = f"({values[role]} AT TIME ZONE {zone})" if naive else values[role]
    naive_cursor = zone is not None and "updated_at" in shape.naive_times
    for name, param in (("since", "$1"), ("until", "$3")):
        at = f"{param}::timestamptz"
        values[name] = f"({at} AT TIME ZONE {zone})" if naive_cursor else at
    job_type = values["job_type"]
    if shape.job_type_text:
        values["job_type_out"] = f"left({job_type}::text, {JOB_TYPE_SQL_CHARS})"
    else:
        values["job_type_out"] = job_type
    values["job_id_type"] = shape.job_id_type
    values["table_name"] = sql_literal(quote_table(mapping.name))
    values["status_name"] = sql_literal(mapping.column("status"))
    values["stats_value"] = "rtrim(v.value, ' ')" if shape.status_padded else "v.value"
    values["status_chars"] = str(SQL_CHARS)
    values["cursor_start"] = sql_literal(shape.cursor_start)
    values["cursor_nil"] = sql_literal(NIL)
    values["sessions"] = horizon_sessions()
    return values


def _status_code(mapping: TableMapping, column: str) -> str:
    """The status as the counting reads it: the four as 1-4, the values the mapping counts as
    cancelled or ignores as their codes, anything else 0 (exporter/counting/status_rule.py)."""
    codes = [(mapping.value(s), int(s)) for s in Status]
    codes += [(value, CANCELLED) for value in mapping.cancelled]
    codes += [(value, IGNORED) for value in mapping.ignored]
    cases = " ".join(f"WHEN {sql_literal(value)} THEN {code}" for value, code in codes)
    return f"CASE {column} {cases} ELSE {UNMAPPED} END"


def render_queries(
    table: str | TableMapping, shape: TableShape = REFERENCE_SHAPE
) -> dict[str, str]:
    """The named blocks of queries.sql, rendered for a table mapping and the table's ``shape``
    (a table name alone: a table shaped like the reference)."""
    mapping = TableMapping(name=table) if isinstance(table, str) else table
    values = _placeholders(mapping, shape)
    blocks = sql_blocks("exporter", "sql/queries.sql")
    return {
        name: _PLACEHOLDER.sub(lambda m: values[m.group(1)], body) for name, body in blocks.items()
    }


def index_name(mapping: TableMapping, suffix: str) -> str:
    """The name of one exporter index on the mapped table (``job_exporter_active_idx`` on the
    reference), its table part cut so the whole fits PostgreSQL's 63 bytes."""
    tail = f"_exporter_{suffix}_idx"
    return mapping.bare_name[: 63 - len(tail)] + tail


_NAMES = "|".join(sorted(ROLES, key=len, reverse=True))
_INDEX_TOKENS = re.compile(
    r"(?P<index>\bjob_exporter_(?P<suffix>\w+?)_idx\b)"
    r"|(?P<on>\bON\s+job\b)"
    r"|(?P<among>\bstatus\s+IN\s*\((?P<numbers>[\d,\s]+)\))"
    r"|(?P<equal>\bstatus\s*=\s*(?P<number>\d+))"
    rf"|(?P<column>\b(?:{_NAMES})\b)"
)


@dataclass(frozen=True)
class IndexStatement:
    """One exporter index: its name, why it exists (the file's comment) and its statement."""

    name: str
    comment: str
    sql: str


def index_statements(mapping: TableMapping) -> list[IndexStatement]:
    """indexes.sql's CREATE INDEX CONCURRENTLY statements, rendered for ``mapping``."""
    values = _placeholders(mapping, REFERENCE_SHAPE)

    def literal(number: str) -> str:
        return values[Status(int(number)).label]

    def one(match: re.Match[str]) -> str:
        if match.group("index"):
            return quote_identifier(index_name(mapping, match.group("suffix")))
        if match.group("on"):
            return f"ON {values['table']}"
        if match.group("among"):
            listed = ", ".join(literal(n.strip()) for n in match.group("numbers").split(","))
            return f"{values['status']} IN ({listed})"
        if match.group("equal"):
            return f"{values['status']} = {literal(match.group('number'))}"
        return values[match.group("column")]

    statements: list[IndexStatement] = []
    comment: list[str] = []
    code: list[str] = []
    for line in _read("indexes.sql").splitlines():
        if line.startswith("--") and not code:
            comment.append(line)
            continue
        if not line.strip() and not code:
            comment = []  # the file's header, or a gap: not this statement's comment
            continue
        code.append(line)
        if line.rstrip().endswith(";"):
            sql = _INDEX_TOKENS.sub(one, "\n".join(code))
            found = re.search(r"EXISTS\s+(\S+)", sql)
            assert found is not None, sql
            name = found.group(1).strip('"').replace('""', '"')
            statements.append(IndexStatement(name, "\n".join(comment), sql))
            comment, code = [], []
    return statements


def index_names(mapping: TableMapping) -> tuple[str, ...]:
    """The names of the indexes the mapped table needs (what the index check looks for)."""
    return tuple(statement.name for statement in index_statements(mapping))


def index_script(
    queues: Sequence[QueueSettings],
    maps_table: Callable[[QueueSettings], bool],
    preset_sql: Callable[[str], str | None] = lambda _: None,
) -> str:
    """The CREATE INDEX CONCURRENTLY statements every queue's table needs, each with its reason,
    once per table: what ``jobqueue-exporter indexes`` prints. ``maps_table`` tells the queues
    that name their own table by a mapping (the profile answers); ``preset_sql`` gives the other
    (preset) profiles' statements (None: it needs none)."""
    out = [
        "-- The exporter's indexes for each queue's table, named after the table. CONCURRENTLY",
        "-- does not block the queue's writes; each statement runs on its own, outside a",
        "-- transaction, as psql -f runs them.",
    ]
    done: set[str] = set()  # tables, and presets as "preset NAME" (no table has a space)
    for queue in queues:
        if not maps_table(queue):
            out += ["", f"-- Queue {queue.name}: the {queue.profile} preset (docs/presets.md)."]
            if f"preset {queue.profile}" in done:
                out.append("-- (the same preset as an earlier queue: its indexes are above)")
                continue
            done.add(f"preset {queue.profile}")
            sql = preset_sql(queue.profile)
            out += ["", sql.strip()] if sql else ["-- It needs no index of the exporter's own."]
            continue
        mapping = queue.mapping
        out += ["", f"-- Queue {queue.name}: table {mapping.name}."]
        if mapping.name in done:
            out.append("-- (the same table as an earlier queue: its indexes are above)")
            continue
        done.add(mapping.name)
        for statement in index_statements(mapping):
            out += (
                ["", statement.comment, statement.sql] if statement.comment else ["", statement.sql]
            )
    return "\n".join(out) + "\n"
