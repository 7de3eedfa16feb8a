"""The start-up checks' judgement of collect.counting: logical, from what the catalog said.

Pure: exporter/db/slot_checks.py reads the facts as the exporter's own role and hands them
here. Each refusal is one line that names the setting, what would go wrong, and the fix; the
set-ups ``logical-setup`` prints (exporter/db/slot_setup.py) pass, and so does FULL with one
plain publication (docs/logical.md, "What the start checks").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from exporter.model import LogicalTarget
from exporter.settings.table import quote_identifier, quote_table

PG15 = 150_000  # column lists and row filters (pg_publication_tables.attnames, rowfilter)
IDENTITIES = {"d": "DEFAULT", "n": "NOTHING", "f": "FULL", "i": "USING INDEX"}
# What a publication that leaves out an action hides from the count.
HIDDEN = {
    "insert": "every enqueue",
    "update": "every claim, completion, failure and requeue",
    "delete": "jobs deleted before they finished (vanished jobs)",
}


@dataclass(frozen=True)
class Published:
    """One configured publication as the catalog shows it, with the queue's table."""

    name: str
    exists: bool
    actions: frozenset[str] = frozenset()  # insert, update, delete, truncate
    includes: bool = False  # the table is in it (by name, FOR ALL TABLES or its schema)
    columns: tuple[str, ...] | None = None  # its column list on the table (None: none)
    row_filter: str | None = None  # pg_publication_tables.rowfilter


@dataclass(frozen=True)
class ServerFacts:
    """The server's settings and the role's attributes, read as the exporter's role."""

    version: int  # server_version_num
    wal_level: str
    keep_size: str  # max_slot_wal_keep_size, as SHOW says it ('-1': unbounded)
    role: str  # current_user
    may_stream: bool  # REPLICATION, superuser, or rds_replication
    slot_free: bool  # the queue's slot exists, or max_replication_slots leaves room for it


@dataclass(frozen=True)
class TableFacts:
    """The queue's table: its replica identity and the publications that should carry it."""

    identity: str  # pg_class.relreplident: d, n, f or i
    identity_columns: tuple[str, ...]  # the identity's index columns (empty: none)
    readable: bool  # SELECT on it, which the gauges need every interval
    publications: tuple[Published, ...]
    rows_hidden: bool = False  # row-level security applies and no policy lets the role read


def server_refusals(queue: str, facts: ServerFacts, allow_unbounded: bool) -> list[str]:
    """Why the server cannot stream the queue's changes safely (empty: it can)."""
    found: list[str] = []
    if facts.wal_level != "logical":
        found.append(
            f"collect.counting: queue {queue}: wal_level is {facts.wal_level}, so the server "
            "cannot decode its WAL; set wal_level = logical in postgresql.conf and restart the "
            "server (logical-setup prints every step)"
        )
    if facts.keep_size == "-1" and not allow_unbounded:
        found.append(
            f"collect.logical_allow_unbounded_wal: queue {queue}: max_slot_wal_keep_size is "
            "-1, so a slot nobody reads keeps WAL until the primary's disk is full; set "
            "max_slot_wal_keep_size (e.g. '10GB', then SELECT pg_reload_conf()), or set this "
            "to true and page on JobQueueLogicalWalUnbounded"
        )
    if not facts.may_stream:
        found.append(
            f"collect.counting: queue {queue}: role {facts.role} may not stream changes "
            "(neither REPLICATION nor superuser); as a superuser run ALTER ROLE "
            f"{quote_identifier(facts.role)} REPLICATION (RDS: GRANT rds_replication TO it)"
        )
    if not facts.slot_free:
        found.append(
            f"collect.counting: queue {queue}: every replication slot is taken "
            "(max_replication_slots), so the exporter cannot create its own; raise "
            "max_replication_slots (a restart) or drop a slot nobody reads"
        )
    return found


def table_refusals(
    queue: str, target: LogicalTarget, facts: TableFacts, role: str, version: int
) -> list[str]:
    """Why the table, its replica identity or its publications would break the count or the
    queue's own writes (empty: they fit)."""
    table = target.table
    found = []
    if not facts.readable:
        found.append(
            f"collect.counting: queue {queue}: role {role} may not read table {table}, whose "
            f"gauges the exporter reads every interval; GRANT SELECT ON {quote_table(table)} TO "
            f"{quote_identifier(role)}"
        )
    if facts.rows_hidden:
        found.append(
            f"collect.counting: queue {queue}: row-level security hides every row of {table} "
            f"from role {role}, so its gauges would read an empty table; as the table's owner "
            f"CREATE POLICY exporter_read ON {quote_table(table)} FOR SELECT TO "
            f"{quote_identifier(role)} USING (true), or ALTER ROLE {quote_identifier(role)} "
            "BYPASSRLS as a superuser"
        )
    found += identity_refusals(queue, target, facts)
    found += publication_refusals(queue, target, facts, version)
    return found


def identity_refusals(queue: str, target: LogicalTarget, facts: TableFacts) -> list[str]:
    """Why the replica identity cannot give the old values the count reads."""
    if facts.identity == "f":
        return []
    named = IDENTITIES.get(facts.identity, facts.identity)
    fix = "run the replica identity statements logical-setup prints for it (its owner)"
    if not target.identity_needs:
        return [
            f"collect.counting: queue {queue}: table {target.table} has REPLICA IDENTITY "
            f"{named}, which does not carry the whole old row this profile's count reads; "
            f"ALTER TABLE {quote_table(target.table)} REPLICA IDENTITY FULL"
        ]
    if not facts.identity_columns:
        why = "no index any more (it was dropped)" if facts.identity == "i" else "no old row"
        return [
            f"collect.counting: queue {queue}: table {target.table} has REPLICA IDENTITY "
            f"{named}, which sends {why} with an UPDATE or DELETE, so no transition could be "
            f"counted; {fix}"
        ]
    missing = [c for c in target.identity_needs if c not in facts.identity_columns]
    if not missing:
        return []
    what = (
        "the old status of a change"
        if target.key_column in missing
        else f"the old {missing[0]}, which tells a worker's release (attempts - 1) from a failure"
    )
    return [
        f"collect.counting: queue {queue}: table {target.table} has REPLICA IDENTITY {named} "
        f"({', '.join(facts.identity_columns)}), which does not carry {what}; {fix}"
    ]


def publication_refusals(
    queue: str, target: LogicalTarget, facts: TableFacts, version: int
) -> list[str]:
    """Why the configured publications would hide a transition or break the queue's writes."""
    table, setting = target.table, f"collect.logical_publication: queue {queue}"
    found = []
    for pub in facts.publications:
        if not pub.exists:
            found.append(
                f"{setting}: publication {pub.name} does not exist; the table's owner creates "
                "it (logical-setup prints it)"
            )
        elif not pub.includes:
            found.append(
                f"{setting}: publication {pub.name} leaves out table {table}; ALTER "
                f"PUBLICATION {quote_identifier(pub.name)} ADD TABLE {quote_table(table)}"
            )
    carrying = [p for p in facts.publications if p.exists and p.includes]
    if not carrying:
        return found
    names = ", ".join(quote_identifier(p.name) for p in carrying)
    for action, hidden in HIDDEN.items():
        if not any(action in p.actions for p in carrying):
            found.append(
                f"{setting}: no publication of {names} publishes {action}s of {table}, which "
                f"hides {hidden}; ALTER PUBLICATION {quote_identifier(carrying[0].name)} SET "
                "(publish = 'insert, update, delete, truncate')"
            )
    if version >= PG15:
        found += _column_lists(setting, target, facts, carrying)
        found += _row_filters(setting, target, carrying)
    return found


def _column_lists(
    setting: str, target: LogicalTarget, facts: TableFacts, carrying: list[Published]
) -> list[str]:
    table = quote_table(target.table)
    listed = [p for p in carrying if p.columns is not None]
    if not listed:
        return []
    if facts.identity == "f":
        # PostgreSQL 15 accepts the publication, then fails the queue's own UPDATE and DELETE:
        # "Column list used by the publication does not cover the replica identity".
        return [
            f"{setting}: publication {p.name} has a column list on {target.table}, whose "
            "REPLICA IDENTITY is FULL: PostgreSQL then refuses the queue's own UPDATE and "
            f"DELETE; drop the list (ALTER PUBLICATION {quote_identifier(p.name)} SET TABLE "
            f"{table}), or use the identity index logical-setup prints"
            for p in listed
        ]
    found = []
    lists = {p.columns for p in carrying}
    if len(lists) > 1:
        found.append(
            f"{setting}: the publications give {target.table} different column lists, and "
            "PostgreSQL refuses to stream a table so published; give them the same list"
        )
    for pub in listed:
        assert pub.columns is not None
        breaking = [c for c in facts.identity_columns if c not in pub.columns]
        if breaking:
            found.append(
                f"{setting}: publication {pub.name}'s column list on {target.table} leaves out "
                f"its replica identity's {', '.join(breaking)}: PostgreSQL then refuses the "
                "queue's own UPDATE and DELETE; add them to the list"
            )
        unread = [c for c in target.columns if c not in pub.columns]
        if unread or not target.columns:
            what = ", ".join(unread) if unread else "columns"
            found.append(
                f"{setting}: publication {pub.name}'s column list on {target.table} leaves out "
                f"{what} that the count reads; ALTER PUBLICATION {quote_identifier(pub.name)} "
                f"SET TABLE {table}{_list(target)}"
            )
    return found


def _list(target: LogicalTarget) -> str:
    if not target.columns:
        return ""
    return " (" + ", ".join(quote_identifier(c) for c in target.columns) + ")"


def _row_filters(setting: str, target: LogicalTarget, carrying: list[Published]) -> list[str]:
    """A row filter on INSERT or UPDATE changes what the count sees: the server turns an UPDATE
    that leaves the filter into a DELETE and one that enters it into an INSERT. Filters combine
    per action (OR; none wins), so only an action that every publication filters is filtered."""
    found = []
    for action in ("insert", "update", "delete"):
        publishing = [p for p in carrying if action in p.actions]
        if not publishing or any(p.row_filter is None for p in publishing):
            continue
        for pub in publishing:
            assert pub.row_filter is not None
            if action == "delete" and accepted_delete_filter(pub.row_filter, target):
                continue
            if action == "delete":
                why = (
                    "hides deletes of active rows (vanished jobs); the one filter accepted "
                    "on a publication of deletes is the one logical-setup prints"
                )
            else:
                why = (
                    f"makes the server turn {action}s that cross it into inserts or deletes, "
                    "so claims and completions would count as vanished or new jobs; drop the "
                    "filter, and leave finished rows' deletes out with a second publication "
                    "of deletes only (logical-setup prints it)"
                )
            found.append(
                f"{setting}: publication {pub.name} publishes {action}s of {target.table} "
                f"WHERE {pub.row_filter}, which {why}"
            )
    return list(dict.fromkeys(found))


def accepted_delete_filter(text: str, target: LogicalTarget) -> bool:
    """Whether ``text`` (pg_get_expr's rendering) is logical-setup's delete filter: the status
    column unequal to the finished status, casts aside."""
    if target.key_column is None or target.done_value is None:
        return False
    column = re.escape(target.key_column)
    name = rf'(?:{column}|"{column}")'
    done = target.done_value
    value = str(done) if isinstance(done, int) else re.escape("'" + done.replace("'", "''") + "'")
    cast = r"(?:::[a-z ]+)?"
    pattern = rf"\(*{name}\)?{cast} <> {value}{cast}\)*"
    return re.fullmatch(pattern, text.strip()) is not None
