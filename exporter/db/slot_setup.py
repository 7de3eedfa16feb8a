"""What collect.counting: logical asks of the server, written out for a DBA: the names of a
queue's slot and publications, the SQL ``logical-setup`` prints, and the SQL that reverses it.

The exporter creates its slot when missing; the publication, the replica identity and the role
attribute need the table's owner or a superuser, so ``logical-setup`` prints them instead of the
exporter taking those privileges. What is printed here is what the start-up checks accept
(exporter/db/slot_checks.py): both read the queue's :class:`~exporter.model.LogicalTarget`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import parse_qsl, unquote, urlsplit

from exporter.db.change_stream import StreamOptions
from exporter.model import LogicalTarget
from exporter.settings import QueueSettings, Settings
from exporter.settings.table import quote_identifier, quote_table, sql_literal
from exporter.vocabulary import SLOT_PREFIX

MAX_NAME = 63
# The second publication of the optional filtered set-up: it publishes deletes only, and not
# those of finished rows (a retention DELETE then costs the stream nothing).
DELETES_SUFFIX = "_deletes"
ROLE_PLACEHOLDER = "<the exporter's role>"


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
    """collect.logical_publication as the stream names it (``a`` or ``a,b``), or the slot's
    name."""
    return queue.collect.logical_publication or slot_of(queue)


def publications_of(queue: QueueSettings) -> tuple[str, ...]:
    """Each publication the queue's stream reads: one, or two (the second: filtered deletes)."""
    return tuple(publication_of(queue).split(","))


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


def dsn_role(queue: QueueSettings) -> str | None:
    """The role a URL DSN logs in as (its user, or ``?user=``), never its password."""
    dsn = queue.database.dsn
    if not dsn or "://" not in dsn:
        return None
    try:
        split = urlsplit(dsn)
    except ValueError:
        return None
    user = unquote(split.username or "") or dict(parse_qsl(split.query)).get("user", "")
    return user or None


def _role(queue: QueueSettings) -> str:
    user = dsn_role(queue)
    return quote_identifier(user) if user else ROLE_PLACEHOLDER


def _columns(names: tuple[str, ...]) -> str:
    return ", ".join(quote_identifier(name) for name in names)


def _index_name(table: str, index: str) -> str:
    """The index as DROP INDEX names it: in the table's schema."""
    schema, dot, _ = table.rpartition(".")
    return quote_table(f"{schema}.{index}") if dot else quote_identifier(index)


def delete_filter(target: LogicalTarget) -> str:
    """The one row filter the checks accept, on a publication of deletes only: every row but
    a finished one (a finished row's delete counts nothing; an active row's is a vanished job)."""
    assert target.key_column is not None
    assert target.done_value is not None
    return f"{quote_identifier(target.key_column)} <> {sql_literal(target.done_value)}"


def _publications(names: tuple[str, ...], target: LogicalTarget, listed: bool) -> list[str]:
    """CREATE PUBLICATION for these names; ``listed``: with the counted columns' list (two
    publications of one table must carry the same list)."""
    table = quote_table(target.table) + (f" ({_columns(target.columns)})" if listed else "")
    if len(names) == 1:
        return [f"CREATE PUBLICATION {quote_identifier(names[0])} FOR TABLE {table};"]
    changes, deletes = (quote_identifier(name) for name in names)
    return [
        f"CREATE PUBLICATION {changes} FOR TABLE {table} "
        "WITH (publish = 'insert, update, truncate');",
        f"CREATE PUBLICATION {deletes} FOR TABLE {table} WHERE ({delete_filter(target)}) "
        "WITH (publish = 'delete');",
    ]


def _identity_index(target: LogicalTarget) -> list[str]:
    assert target.index is not None
    index, table = target.index, quote_table(target.table)
    return [
        f"CREATE UNIQUE INDEX CONCURRENTLY {quote_identifier(index.name)} ON {table} "
        f"({_columns(index.columns)});",
        f"ALTER TABLE {table} REPLICA IDENTITY USING INDEX {quote_identifier(index.name)};",
    ]


def _identity(queue: QueueSettings, target: LogicalTarget) -> list[str]:
    """The replica identity and the publications, with why this identity."""
    table = quote_table(target.table)
    names = publications_of(queue)
    owner = "-- As the table's owner:"
    full = [f"ALTER TABLE {table} REPLICA IDENTITY FULL;", *_publications(names, target, False)]
    index = target.index
    if index is None:
        return [
            "-- Replica identity FULL: this profile's count reads the whole old row of every",
            "-- UPDATE and DELETE (a success that deletes its row says what finished only",
            "-- there), which no index carries.",
            owner,
            *full,
        ]
    indexed = [*_identity_index(target), *_publications(names, target, True)]
    columns = ", ".join(index.columns)
    if index.exact:
        return [
            f"-- Replica identity: an index of ({columns}) (PostgreSQL 15 and later).",
            "-- It carries the old status and attempts of every change that moves them, and the",
            "-- column list sends only the columns the count reads: 42 % fewer bytes than FULL,",
            "-- 91 % fewer with 3 kB payloads. Under it an unchanged TOASTed value arrives",
            "-- without its value and the old row holds the index's columns only, so it is exact",
            "-- where each transition writes what the count reads of it (a completion its result",
            "-- and updated_at, a failure its last_error): the reference schema's transitions do.",
            owner,
            *indexed,
            "-- PostgreSQL 13 and 14 have no column lists; there, instead of the statements above:",
            *(f"--   {line}" for line in full),
        ]
    return [
        "-- Replica identity FULL: the whole old row, which fills in any value an UPDATE left",
        f"-- alone. An index of ({columns}) with a column list is cheaper",
        "-- (PostgreSQL 15 and later: 42 % fewer bytes, 91 % with 3 kB payloads), but under it",
        "-- an unchanged TOASTed value arrives without its value and the old row holds the",
        "-- index's columns only: it is exact only where each transition writes what the count",
        "-- reads of it (a completion its result and updated_at, a failure its last_error),",
        "-- which the exporter cannot know of a mapped table's application (a completion that",
        "-- leaves a large result alone would lose its cost). Where yours does, use these instead",
        "-- of the statements below (the index's columns must be NOT NULL):",
        *(f"--   {line}" for line in indexed),
        owner,
        *full,
    ]


def _listed(target: LogicalTarget) -> bool:
    """Whether the printed set-up is the identity index's, with a column list."""
    return target.index is not None and target.index.exact


def _deletes_option(queue: QueueSettings, target: LogicalTarget) -> list[str]:
    """The filtered delete publication, offered when the queue reads one publication."""
    names = publications_of(queue)
    if len(names) != 1 or target.key_column is None or target.done_value is None:
        return []
    deletes = names[0][: MAX_NAME - len(DELETES_SUFFIX)] + DELETES_SUFFIX
    return [
        "-- Optional (PostgreSQL 15 and later), for a queue that deletes finished jobs: two",
        "-- publications leave those deletes out of the stream (an active row's delete still",
        "-- comes: a vanished job). Create these instead of the CREATE PUBLICATION above and",
        f"-- set collect.logical_publication: {names[0]},{deletes} (a row filter takes built-in",
        "-- types only: not with an enum status column)",
        *(f"--   {line}" for line in _publications((names[0], deletes), target, _listed(target))),
    ]


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
        "-- collect.counting: logical, set up once by a DBA (docs/logical.md). The exporter",
        "-- checks all of it, as its own role, at every start and on --config.check.",
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
        out += [
            f"-- queue {queue.name}: table {target.table}, slot {slot_of(queue)} (the exporter "
            f"creates it), publication {publication_of(queue)}",
            *_identity(queue, target),
            *_deletes_option(queue, target),
            "-- As a superuser: the exporter's role may stream (it then reads every change of",
            "-- the table, payloads included, whatever its table privileges: docs/security.md,",
            "-- which lists its other grants). On RDS: GRANT rds_replication TO the role.",
            f"ALTER ROLE {_role(queue)} REPLICATION;",
            "",
        ]
    return "\n".join(out)


def teardown_script(queues: list[tuple[QueueSettings, LogicalTarget]]) -> str:
    """The SQL that reverses ``logical-setup`` for these queues: what ``logical-drop`` prints
    once their slots are gone."""
    if not queues:
        return ""
    out = [
        "-- To leave collect.counting: logical for good, once the exporters count by polling",
        "-- and the slots are dropped, reverse logical-setup. As the table's owner:",
    ]
    roles: list[str] = []
    for queue, target in queues:
        table = quote_table(target.table)
        names = ", ".join(quote_identifier(name) for name in publications_of(queue))
        out += [
            f"DROP PUBLICATION IF EXISTS {names};",
            f"ALTER TABLE {table} REPLICA IDENTITY DEFAULT;  -- PostgreSQL's default; restore "
            "the table's earlier identity if it had another",
        ]
        if target.index is not None:
            index = _index_name(target.table, target.index.name)
            out.append(f"DROP INDEX CONCURRENTLY IF EXISTS {index};")
        if _role(queue) not in roles:
            roles.append(_role(queue))
    out.append("-- As a superuser, unless the role still streams for something else:")
    out += [f"ALTER ROLE {role} NOREPLICATION;" for role in roles]
    out += [
        "-- postgresql.conf, once nothing else decodes the WAL: wal_level = replica (a restart).",
        "",
    ]
    return "\n".join(out)
