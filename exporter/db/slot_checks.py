"""The start-up checks of collect.counting: logical, run as the exporter's own role.

Every statement here reads what PUBLIC may read (settings, pg_roles, pg_class, pg_index,
pg_publication, pg_publication_rel, pg_publication_tables), so the role docs/security.md creates
plus REPLICATION needs nothing more; no cast to regclass of a catalog's names, which fails for
that role ("permission denied for schema pg_toast"). A statement the role may not run is a
refusal that names the grant, never "cannot be reached": only a server that does not answer
leaves a queue unchecked. The judgement itself is exporter/db/slot_verdict.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg

from exporter.db.pool import APPLICATION_NAME, connect, translate
from exporter.db.slot_setup import TargetOf, dsn_role, publications_of, slot_of
from exporter.db.slot_verdict import (
    PG15,
    Published,
    ServerFacts,
    TableFacts,
    server_refusals,
    table_refusals,
)
from exporter.model import LogicalTarget
from exporter.settings import QueueSettings, Settings
from exporter.settings.secrets import dsn_database
from exporter.settings.table import quote_identifier, quote_table

SERVER_SQL = """
SELECT current_setting('server_version_num')::int AS version,
       current_setting('wal_level') AS wal_level,
       current_setting('max_slot_wal_keep_size') AS keep_size,
       current_user::text AS role,
       coalesce((SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user)
                OR EXISTS (SELECT FROM pg_roles r WHERE r.rolname = 'rds_replication'
                           AND pg_has_role(current_user, r.oid, 'MEMBER')), false) AS may_stream,
       EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1)
       OR (SELECT count(*) FROM pg_replication_slots)
          < current_setting('max_replication_slots')::int AS slot_free
"""
# The identity's columns in index order: the replica identity index, or the primary key under
# DEFAULT; none under NOTHING, FULL, or an identity index since dropped. rows_hidden: row-level
# security applies to the role and no policy lets it read (graphile-worker's tables): every
# gauge would read an empty table.
TABLE_SQL = """
SELECT c.relreplident::text AS identity,
       has_table_privilege(c.oid, 'SELECT') AS readable,
       row_security_active(c.oid)
       AND NOT EXISTS (SELECT FROM pg_policy p WHERE p.polrelid = c.oid AND p.polcmd IN ('r', '*')
                       AND (p.polroles = '{0}' OR EXISTS (SELECT FROM unnest(p.polroles) AS r
                            WHERE pg_has_role(current_user, r, 'MEMBER')))) AS rows_hidden,
       coalesce((SELECT array_agg(a.attname::text ORDER BY k.n)
                 FROM pg_index i
                 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                 WHERE i.indrelid = c.oid
                   AND CASE c.relreplident WHEN 'i' THEN i.indisreplident
                                           WHEN 'd' THEN i.indisprimary ELSE false END),
                '{}') AS identity_columns
FROM pg_class c WHERE c.oid = $1
"""
# Each configured publication, whether it carries the table (named, FOR ALL TABLES or by its
# schema: pg_publication_tables lists them all), and on PostgreSQL 15 its column list (only
# pg_publication_rel.prattrs tells a list of every column from none) and row filter.
PUBLICATIONS_SQL = """
SELECT w.name, p.oid IS NOT NULL AS exists,
       array_remove(ARRAY[CASE WHEN p.pubinsert THEN 'insert' END,
                          CASE WHEN p.pubupdate THEN 'update' END,
                          CASE WHEN p.pubdelete THEN 'delete' END,
                          CASE WHEN p.pubtruncate THEN 'truncate' END], NULL) AS actions,
       t.pubname IS NOT NULL AS includes,
       {columns} AS columns, {row_filter} AS row_filter
FROM unnest($1::text[]) AS w(name)
LEFT JOIN pg_publication p ON p.pubname = w.name
LEFT JOIN pg_class c ON c.oid = $2
LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_publication_tables t
       ON t.pubname = p.pubname AND t.schemaname = n.nspname AND t.tablename = c.relname
"""
COLUMNS_PG15 = """CASE WHEN EXISTS (SELECT FROM pg_publication_rel r WHERE r.prpubid = p.oid
                       AND r.prrelid = c.oid AND r.prattrs IS NOT NULL)
            THEN t.attnames::text[] END"""
ROW_FILTER_PG15 = "t.rowfilter"


class Refused(Exception):
    """A check the role may not run, or a login the server refused: the refusal says why."""


async def check_queue(queue: QueueSettings, target: LogicalTarget) -> list[str]:
    """Why the queue cannot count from its change stream (empty: it can); DatabaseError when
    the server cannot be reached."""
    assert queue.database.dsn is not None
    try:
        conn = await connect(
            queue.database.dsn,
            timeout=queue.database.connect_timeout,
            command_timeout=queue.collect.statement_timeout,
            server_settings={"application_name": APPLICATION_NAME},
        )
    except Exception as exc:
        return [_login_refusal(queue, exc)]
    try:
        return await _problems(conn, queue, target)
    except Refused as exc:
        return [str(exc)]
    except Exception as exc:
        raise translate(exc) from None
    finally:
        await conn.close()


def _login_refusal(queue: QueueSettings, exc: Exception) -> str:
    """The refusal for a login the server answered with no (DatabaseError when it did not)."""
    role = dsn_role(queue) or "the DSN's role"
    database = dsn_database(queue.database.dsn or "") or "the DSN's database"
    head = f"collect.counting: queue {queue.name}"
    if isinstance(exc, asyncpg.InsufficientPrivilegeError):
        return (
            f"{head}: role {role} may not connect to database {database} ({exc}); GRANT "
            f"CONNECT ON DATABASE {quote_identifier(database)} TO {quote_identifier(role)}"
        )
    if isinstance(
        exc, asyncpg.InvalidAuthorizationSpecificationError | asyncpg.InvalidPasswordError
    ):
        return (
            f"database.dsn: queue {queue.name}: the server refused the login of role {role} "
            f"({exc}); check the password and pg_hba.conf"
        )
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return f"database.dsn: queue {queue.name}: {exc}"
    raise translate(exc) from None


async def _ask(conn: Any, what: str, grant: str, sql: str, *args: Any) -> Any:
    """One catalog read; Refused naming ``grant`` when the role may not run it."""
    try:
        return await conn.fetch(sql, *args)
    except asyncpg.InsufficientPrivilegeError as exc:
        raise Refused(f"{what} ({exc}); {grant}") from None


async def _problems(conn: Any, queue: QueueSettings, target: LogicalTarget) -> list[str]:
    head = f"collect.counting: queue {queue.name}"
    catalog = "a DBA grants SELECT on the catalog back (PostgreSQL grants it to PUBLIC)"
    row = (await _ask(conn, f"{head}: the role may not read the server's settings", catalog,
                      SERVER_SQL, slot_of(queue)))[0]  # fmt: skip
    server = ServerFacts(**dict(row))
    found = server_refusals(queue.name, server, queue.collect.logical_allow_unbounded_wal)
    role, table = server.role, target.table
    schema = table.rpartition(".")[0] or "the table's schema"
    relation = (
        await _ask(
            conn,
            f"{head}: role {role} may not look up table {table}",
            f"GRANT USAGE ON SCHEMA {quote_identifier(schema)} TO {quote_identifier(role)}",
            "SELECT to_regclass($1)::oid AS oid",
            quote_table(table),
        )
    )[0]["oid"]
    if relation is None:
        return [*found, f"database.table: queue {queue.name}: table {table} does not exist"]
    shape = (
        await _ask(conn, f"{head}: role {role} may not read table {table}'s catalog", catalog,
                   TABLE_SQL, relation)
    )[0]  # fmt: skip
    sql = PUBLICATIONS_SQL.format(
        columns=COLUMNS_PG15 if server.version >= PG15 else "NULL::text[]",
        row_filter=ROW_FILTER_PG15 if server.version >= PG15 else "NULL::text",
    )
    rows = await _ask(conn, f"{head}: role {role} may not read the publications", catalog,
                      sql, list(publications_of(queue)), relation)  # fmt: skip
    facts = TableFacts(
        identity=shape["identity"],
        identity_columns=tuple(shape["identity_columns"]),
        readable=shape["readable"],
        rows_hidden=shape["rows_hidden"],
        publications=tuple(
            Published(
                name=r["name"],
                exists=r["exists"],
                actions=frozenset(r["actions"] or ()),
                includes=r["includes"],
                columns=tuple(r["columns"]) if r["columns"] is not None else None,
                row_filter=r["row_filter"],
            )
            for r in rows
        ),
    )
    return found + table_refusals(queue.name, target, facts, role, server.version)


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
            unchecked.append((queue.name, str(translate(result))))
        else:
            problems += result
    return problems, unchecked
