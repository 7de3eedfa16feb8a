"""The queues the settings describe: one from the top level, or each entry of a ``queues:`` list
over it, with its password file injected, its name defaulted and its table mapping named.

An entry starts from the resolved top-level ``database``, ``collect`` and ``queue`` values and
overrides what it names, except that a flag or environment variable is above the file, entries
included: ``--collect.interval=1s`` sets every queue's interval. The settings that say which
queue an entry is (its DSN, password file, table, profile, replication slot; declared
``per_queue``) are the exception: there the top level is only what an entry that names none
inherits, since one flag cannot point every queue at one table.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from exporter.redaction import Redactor
from exporter.settings.kinds import show
from exporter.settings.schema import (
    QUEUE_SECTIONS,
    CollectSettings,
    DatabaseSettings,
    QueueSettings,
)
from exporter.settings.secrets import (
    SecretError,
    dsn_database,
    inject_password,
    read_password_file,
)
from exporter.settings.table import TableMapping, parse_mapping, without_result
from exporter.settings.values import (
    QUEUES_KEY,
    SETTINGS,
    TABLE_KEY,
    parse_all,
    section_values,
)
from exporter.settings.yamlfile import Document, suggest
from exporter.vocabulary import DEFAULT_PROFILE, PRESET_QUEUE_NAMES

DEFAULT_QUEUE_NAME = "default"
# The queue section's settings, written as plain keys of a queues: entry (name: x, profile: y).
ENTRY_KEYS = ("name", "profile")


def section_of(cls: type[Any], section: str, values: Mapping[str, object]) -> Any:
    """The settings dataclass of one section, from the dotted values of its keys."""
    return cls(
        **{k.partition(".")[2]: v for k, v in values.items() if k.partition(".")[0] == section}
    )


def build_queue(
    values: Mapping[str, object],
    prefix: str,
    where: str,
    errors: list[str],
    table: TableMapping | None = None,
    known: Collection[str] = (),
) -> QueueSettings | None:
    """One queue from its parsed values: password file injected, name defaulted, checks run;
    ``table``: its table mapping, already named (database.table is set to its name);
    ``known``: secrets from elsewhere (PGPASSWORD) that its name must not carry either."""
    if table is not None:
        values = {**values, "database.table": table.name}
    database: DatabaseSettings = section_of(DatabaseSettings, "database", values)
    collect: CollectSettings = section_of(CollectSettings, "collect", values)
    name = values.get("queue.name")
    profile = str(values.get("queue.profile", DEFAULT_PROFILE))
    before = len(errors)
    if database.password_file is not None:
        try:
            password = read_password_file(database.password_file)
            if database.dsn is not None:
                database = replace(database, dsn=inject_password(database.dsn, password))
        except SecretError as exc:
            errors.append(f"{prefix}database.password_file: {exc}{where}")
    if collect.timeout < collect.statement_timeout:
        errors.append(
            f"{prefix}collect.timeout: must be at least collect.statement_timeout "
            f"({collect.statement_timeout:g}s), got {collect.timeout:g}s{where}"
        )
    if collect.lock_timeout > collect.statement_timeout:
        errors.append(
            f"{prefix}collect.lock_timeout: must not exceed collect.statement_timeout "
            f"({collect.statement_timeout:g}s), got {collect.lock_timeout:g}s{where}"
        )
    if collect.leader_election and database.max_connections < 2:
        errors.append(
            f"{prefix}database.max_connections: the leader election holds one connection, so "
            f"at least 2 are needed (or set collect.leader_election: false){where}"
        )
    if not isinstance(name, str) and profile in PRESET_QUEUE_NAMES:
        name = PRESET_QUEUE_NAMES[profile]  # a preset's own name beats the DSN's database
    if not isinstance(name, str):
        # The queue label, derived: never with a password in it, whatever the database is named.
        derived = dsn_database(database.dsn) if database.dsn else None
        name = Redactor({*database.secrets, *known})(derived) if derived else DEFAULT_QUEUE_NAME
    if table is not None and profile != DEFAULT_PROFILE and table.named:
        errors.append(
            f"{table.origin}: a table mapping is for the default profile; the {profile} preset "
            f"reads its library's own tables{table.lines.get('', '')}"
        )
    mapping = table if table is not None else TableMapping(name=database.table)
    collect = without_result(mapping, collect, values, prefix, errors)
    if len(errors) > before:
        return None
    return QueueSettings(
        name=name, database=database, collect=collect, profile=profile, table=mapping
    )


def _table_lines(document: Document, origin: str) -> dict[str, str]:
    """Where each part of the ``table:`` mapping at ``origin`` was written."""
    lines = {"": document.where(origin)}
    for key in document.lines:
        if key.startswith(origin + "."):
            lines[key[len(origin) + 1 :]] = document.where(key)
    return lines


def _named(
    mapping: TableMapping | None,
    raw: object,
    short: tuple[object, bool] | None,
    errors: list[str],
) -> TableMapping | None:
    """The mapping with its table named: ``table.name``, or ``database.table`` (its short form),
    given as ``short`` = (parsed value, True when it beats table.name: a flag, the environment
    or the queue entry over an inherited mapping). Both at the same level must agree."""
    if mapping is None:
        return None
    names = isinstance(raw, dict) and "name" in raw
    if short is None or not isinstance(short[0], str):
        return mapping
    name, beats = str(short[0]), short[1]
    if names and not beats and name != mapping.name:
        errors.append(
            f"{mapping.origin}.name: {mapping.name!r}, but database.table says {name!r}; "
            f"database.table is the short form of table.name, give one of them"
            + mapping.lines.get("name", "")
        )
        return None
    if names and not beats:
        return mapping
    return replace(mapping, name=name)


def queue_entries(
    document: Document,
    top: Mapping[str, object],
    given: Collection[str],
    errors: list[str],
    inherited_table: TableMapping | None,
    known: Collection[str] = (),
) -> list[QueueSettings]:
    """The ``queues:`` list, each entry over the top-level per-queue values; ``given``: the
    keys a flag or environment variable set, which every entry takes (unless per_queue)."""
    entries = document.data.get(QUEUES_KEY)
    where = document.where(QUEUES_KEY)
    if not isinstance(entries, list) or not entries:
        errors.append(
            f"{QUEUES_KEY}: expected a non-empty list of queues, got {show(entries)}{where}"
        )
        return []
    if "queue.name" in given:
        errors.append("queue.name: names one queue; with a queues: list, name each entry instead")
    inherited = {k: v for k, v in top.items() if k.partition(".")[0] in QUEUE_SECTIONS}
    inherited.pop("queue.name", None)
    # Above the file, entries included: what a flag or the environment says of every queue.
    imposed = {k: v for k, v in inherited.items() if k in given and not SETTINGS[k].spec.per_queue}

    queues: list[QueueSettings] = []
    for index, entry in enumerate(entries):
        prefix = f"{QUEUES_KEY}[{index}]."
        entry_where = document.where(f"{QUEUES_KEY}[{index}]")
        if not isinstance(entry, dict):
            errors.append(
                f"{QUEUES_KEY}[{index}]: expected a mapping, got {show(entry)}{entry_where}"
            )
            continue
        raw: dict[str, tuple[object, bool, str]] = {}
        for key, value in entry.items():
            if key in ENTRY_KEYS:
                raw[f"queue.{key}"] = (value, False, document.where(f"{prefix}{key}"))
            elif key not in ("database", "collect", TABLE_KEY):
                known = (*ENTRY_KEYS, "database", "collect", TABLE_KEY)
                errors.append(
                    f"{prefix}{key}: unknown key (an entry has {', '.join(known)})"
                    f"{suggest(str(key), known)}" + document.where(f"{prefix}{key}")
                )
        written = section_values(
            document,
            {k: v for k, v in entry.items() if k not in (*ENTRY_KEYS, TABLE_KEY)},
            prefix,
            ("database", "collect"),
            errors,
        )
        for key, value in written.items():
            raw[key] = (value, False, document.where(f"{prefix}{key}"))
        if "queue.name" not in raw:
            errors.append(f"{prefix}name: every queue in the list needs a name{entry_where}")
        parsed = parse_all(raw, prefix, errors)
        # A DSN of the entry's own does not inherit the top-level password file.
        values = {**inherited, **parsed, **imposed}
        if "database.dsn" in parsed and "database.password_file" not in parsed:
            values.pop("database.password_file", None)
        table = inherited_table
        if "database.table" in parsed and table is not None:
            table = replace(table, name=str(parsed["database.table"]))
        table_raw = entry.get(TABLE_KEY)
        if table_raw is not None:
            origin = f"{QUEUES_KEY}[{index}].{TABLE_KEY}"
            own = parse_mapping(table_raw, origin, _table_lines(document, origin), errors)
            # The entry's own database.table and table.name are one level: they must agree;
            # a mapping that names no table takes the name the entry inherits.
            if "database.table" in parsed:
                short: tuple[object, bool] = (parsed["database.table"], False)
            else:
                short = (table.name if table else values.get("database.table"), True)
                if isinstance(table_raw, dict) and "name" in table_raw:
                    short = (None, True)
            table = _named(own, table_raw, short, errors)
            if table is None:
                continue
        queue = build_queue(values, prefix, entry_where, errors, table, known)
        if queue is not None:
            queues.append(queue)
    return queues


def top_table(
    document: Document,
    found: tuple[object, bool, str] | None,
    top: Mapping[str, object],
    errors: list[str],
) -> TableMapping | None:
    """The top-level ``table:`` mapping of a single queue; a flag or environment variable
    database.table beats its name, database.table in the file must agree with it."""
    raw = document.data.get(TABLE_KEY)
    if raw is None:
        return None
    mapping = parse_mapping(raw, TABLE_KEY, _table_lines(document, TABLE_KEY), errors)
    short = (top.get("database.table"), found[1]) if found is not None else None
    return _named(mapping, raw, short, errors)
