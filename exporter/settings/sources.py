"""Where settings come from and which wins: YAML file, environment, flags, and the queues list.

Precedence for each top-level setting is flag > environment > file > default. Each entry of a
``queues:`` list starts from the resolved top-level ``database``, ``collect`` and ``queue``
sections and overrides what it names. Every mistake is collected, so one run reports them all,
each naming its dotted key (and, for the file, its line).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from exporter.settings.declaration import Setting, specs_of
from exporter.settings.kinds import PARSERS, Kind, show
from exporter.settings.schema import (
    DSN_ENV,
    DSN_FALLBACK_ENV,
    PROCESS_SECTIONS,
    QUEUE_SECTIONS,
    CollectSettings,
    DatabaseSettings,
    QueueSettings,
    Settings,
)
from exporter.settings.secrets import (
    SecretError,
    check_dsn,
    dsn_database,
    inject_password,
    read_password_file,
    redact_dsn,
)
from exporter.settings.table import TableMapping, parse_mapping
from exporter.settings.yamlfile import ConfigError, Document, read_document, suggest
from exporter.vocabulary import DEFAULT_PROFILE, PRESET_QUEUE_NAMES

CONFIG_FILE_ENV = "JOBQUEUE_EXPORTER_CONFIG_FILE"
QUEUES_KEY = "queues"
TABLE_KEY = "table"
DEFAULT_QUEUE_NAME = "default"
# The queue section's settings, written as plain keys of a queues: entry (name: x, profile: y).
ENTRY_KEYS = ("name", "profile")


def _all_settings() -> dict[str, Setting]:
    out: dict[str, Setting] = {}
    for sections in (QUEUE_SECTIONS, PROCESS_SECTIONS):
        for section, cls in sections.items():
            for s in specs_of(section, cls):
                out[s.key] = s
    return out


SETTINGS: dict[str, Setting] = _all_settings()
FLAGS: dict[str, str] = {s.flag: key for key, s in SETTINGS.items()}
SECTIONS = (*QUEUE_SECTIONS, TABLE_KEY, QUEUES_KEY, *PROCESS_SECTIONS)


# --- Values ---------------------------------------------------------------------------------


def parse_value(setting: Setting, value: object, from_text: bool) -> object:
    """Turn one YAML value (or flag/environment text) into the field's type, or ValueError."""
    spec = setting.spec
    if spec.optional and (value is None or (from_text and isinstance(value, str) and not value)):
        return None
    if spec.secret and not isinstance(value, str):
        # A secret is never echoed back, not even its type's repr.
        raise ValueError(f"expected a string, got {type(value).__name__}")
    if spec.kind is Kind.DSN:
        assert isinstance(value, str)
        check_dsn(value)
    if spec.kind is Kind.STRING and value == "" and setting.key == "alerts.selector":
        return ""  # an empty selector matches every series
    parsed = PARSERS[spec.kind](value)
    if spec.choices:
        assert isinstance(parsed, str)
        parsed = dict(spec.aliases).get(parsed.lower(), parsed.lower())
        if parsed not in spec.choices:
            raise ValueError(f"expected one of {', '.join(spec.choices)}, got {show(value)}")
    if spec.check is not None:
        spec.check(parsed)
    return parsed


def _section_values(
    document: Document, body: object, prefix: str, sections: Iterable[str], errors: list[str]
) -> dict[str, object]:
    """Flatten ``{section: {name: value}}`` (at ``prefix`` in the file) to dotted keys."""
    values: dict[str, object] = {}
    if not isinstance(body, dict):
        return values
    for section, content in body.items():
        where = f"{prefix}{section}"
        if section not in sections:
            continue
        if content is None:
            continue
        if not isinstance(content, dict):
            errors.append(
                f"{where}: expected a mapping of settings, got {show(content)}"
                + document.where(where)
            )
            continue
        for name, value in content.items():
            key = f"{section}.{name}"
            if not isinstance(name, str) or key not in SETTINGS:
                errors.append(
                    f"{prefix}{key}: unknown setting{suggest(key, SETTINGS)}"
                    + document.where(f"{prefix}{key}")
                )
                continue
            values[key] = value
    return values


@dataclass
class _Resolved:
    """Top-level values after precedence, still raw (text or YAML)."""

    values: dict[str, tuple[object, bool, str]]  # key -> (value, from_text, where)


def _resolve_top(
    document: Document, environ: Mapping[str, str], flags: Mapping[str, str], errors: list[str]
) -> _Resolved:
    top = document.data
    for section in top:
        if section not in SECTIONS:
            errors.append(
                f"{section}: unknown section{suggest(str(section), SECTIONS)}"
                + document.where(str(section))
            )
    file_values = _section_values(document, top, "", (*QUEUE_SECTIONS, *PROCESS_SECTIONS), errors)
    flag_values: dict[str, str] = {}
    for raw, text in flags.items():
        key = normalise_flag(raw)
        if key not in SETTINGS:
            errors.append(f"{key}: unknown setting{suggest(key, SETTINGS)}")
            continue
        flag_values[key] = text
    chosen: dict[str, tuple[object, bool, str]] = {}
    for key, setting in SETTINGS.items():
        if key in flag_values:
            chosen[key] = (flag_values[key], True, f" (flag {setting.flag})")
        elif key == "database.dsn" and (environ.get(DSN_ENV) or environ.get(DSN_FALLBACK_ENV)):
            name = DSN_ENV if environ.get(DSN_ENV) else DSN_FALLBACK_ENV
            chosen[key] = (environ[name], True, f" (environment {name})")
        elif key != "database.dsn" and setting.env in environ:
            chosen[key] = (environ[setting.env], True, f" (environment {setting.env})")
        elif key in file_values:
            chosen[key] = (file_values[key], False, document.where(key))
    return _Resolved(chosen)


def normalise_flag(name: str) -> str:
    """``--collect.statement-timeout`` (or ``collect.statement_timeout``) -> the dotted key."""
    flag = name if name.startswith("--") else "--" + name
    if flag in FLAGS:
        return FLAGS[flag]
    return name.removeprefix("--").replace("-", "_")


def _parse_all(
    raw: Mapping[str, tuple[object, bool, str]], prefix: str, errors: list[str]
) -> dict[str, object]:
    parsed: dict[str, object] = {}
    for key, (value, from_text, where) in raw.items():
        try:
            parsed[key] = parse_value(SETTINGS[key], value, from_text)
        except ValueError as exc:
            errors.append(f"{prefix}{key}: {exc}{where}")
    return parsed


# --- Building the settings --------------------------------------------------------------------


def _section(cls: type[Any], section: str, values: Mapping[str, object]) -> Any:
    return cls(
        **{k.partition(".")[2]: v for k, v in values.items() if k.partition(".")[0] == section}
    )


def _queue(
    values: Mapping[str, object],
    prefix: str,
    where: str,
    errors: list[str],
    table: TableMapping | None = None,
) -> QueueSettings | None:
    """One queue from its parsed values: password file injected, name defaulted, checks run;
    ``table``: its table mapping, already named (database.table is set to its name)."""
    if table is not None:
        values = {**values, "database.table": table.name}
    database: DatabaseSettings = _section(DatabaseSettings, "database", values)
    collect: CollectSettings = _section(CollectSettings, "collect", values)
    name = values.get("queue.name")
    profile = values.get("queue.profile", DEFAULT_PROFILE)
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
    if table is not None and profile != DEFAULT_PROFILE and table.named:
        errors.append(
            f"{table.origin}: a table mapping is for the default profile; the {profile} preset "
            f"reads its library's own tables{table.lines.get('', '')}"
        )
    if len(errors) > before:
        return None
    assert isinstance(profile, str)
    fallback = dsn_database(database.dsn or "") or DEFAULT_QUEUE_NAME
    name = name if isinstance(name, str) else PRESET_QUEUE_NAMES.get(profile, fallback)
    mapping = table if table is not None else TableMapping(name=database.table)
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


def _queue_entries(
    document: Document,
    top: Mapping[str, object],
    flags: Mapping[str, str],
    errors: list[str],
    inherited_table: TableMapping | None,
) -> list[QueueSettings]:
    """The ``queues:`` list, each entry over the top-level per-queue values."""
    entries = document.data.get(QUEUES_KEY)
    where = document.where(QUEUES_KEY)
    if not isinstance(entries, list) or not entries:
        errors.append(
            f"{QUEUES_KEY}: expected a non-empty list of queues, got {show(entries)}{where}"
        )
        return []
    if "queue.name" in {normalise_flag(f) for f in flags}:
        errors.append("queue.name: names one queue; with a queues: list, name each entry instead")
    inherited = {k: v for k, v in top.items() if k.partition(".")[0] in QUEUE_SECTIONS}
    inherited.pop("queue.name", None)

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
        section_values = _section_values(
            document,
            {k: v for k, v in entry.items() if k not in (*ENTRY_KEYS, TABLE_KEY)},
            prefix,
            ("database", "collect"),
            errors,
        )
        for key, value in section_values.items():
            raw[key] = (value, False, document.where(f"{prefix}{key}"))
        if "queue.name" not in raw:
            errors.append(f"{prefix}name: every queue in the list needs a name{entry_where}")
        parsed = _parse_all(raw, prefix, errors)
        # A DSN of the entry's own does not inherit the top-level password file.
        values = {**inherited, **parsed}
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
        queue = _queue(values, prefix, entry_where, errors, table)
        if queue is not None:
            queues.append(queue)
    return queues


def _top_table(
    document: Document, resolved: _Resolved, top: Mapping[str, object], errors: list[str]
) -> TableMapping | None:
    """The top-level ``table:`` mapping of a single queue; a flag or environment variable
    database.table beats its name, database.table in the file must agree with it."""
    raw = document.data.get(TABLE_KEY)
    if raw is None:
        return None
    mapping = parse_mapping(raw, TABLE_KEY, _table_lines(document, TABLE_KEY), errors)
    found = resolved.values.get("database.table")
    short = (top.get("database.table"), found[1]) if found is not None else None
    return _named(mapping, raw, short, errors)


def load_settings(
    config_file: str | None, environ: Mapping[str, str], flags: Mapping[str, str]
) -> Settings:
    """Resolve every setting (flag > environment > file > default) or raise ConfigError."""
    document = read_document(config_file) if config_file else Document("", {})
    errors: list[str] = []
    resolved = _resolve_top(document, environ, flags, errors)
    top = _parse_all(resolved.values, "", errors)
    table = _top_table(document, resolved, top, errors)
    if QUEUES_KEY in document.data:
        queues = _queue_entries(document, top, flags, errors, table)
    else:
        queue = _queue(top, "", "", errors, table)
        queues = [queue] if queue is not None else []
    names: dict[str, int] = {}
    for index, queue in enumerate(queues):
        if queue.name in names:
            errors.append(
                f"{QUEUES_KEY}[{index}].name: {queue.name!r} is also the name of "
                f"{QUEUES_KEY}[{names[queue.name]}] (the queue label must tell them apart)"
            )
        names.setdefault(queue.name, index)
    if errors:
        raise ConfigError("\n".join(redact_dsn(e) for e in errors))
    process = {s: _section(cls, s, top) for s, cls in PROCESS_SECTIONS.items()}
    return Settings(queues=tuple(queues), **process)


def check_config_file(path: str) -> Settings:
    """Load one configuration file on its own (no environment, no flags), as --config.check does."""
    return load_settings(path, {}, {})
