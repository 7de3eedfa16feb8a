"""Where settings come from and which wins: YAML file, environment, flags, and the queues list.

Precedence for each top-level setting is flag > environment > file > default. Each entry of a
``queues:`` list starts from the resolved top-level ``database``, ``collect`` and ``queue``
sections and overrides what it names, below a flag or environment variable
(exporter/settings/entries.py says which settings are the entry's own whatever the flags say).
Every mistake is collected, so one run reports them all, each naming its dotted key (and, for
the file, its line).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.redaction import redact
from exporter.settings.entries import build_queue, queue_entries, section_of, top_table
from exporter.settings.schema import (
    DSN_ENV,
    DSN_FALLBACK_ENV,
    PROCESS_SECTIONS,
    QUEUE_SECTIONS,
    Settings,
)
from exporter.settings.secrets import source_secrets
from exporter.settings.values import (
    QUEUES_KEY,
    SECTIONS,
    SETTINGS,
    normalise_flag,
    parse_all,
    section_values,
)
from exporter.settings.yamlfile import ConfigError, Document, read_document, suggest

CONFIG_FILE_ENV = "JOBQUEUE_EXPORTER_CONFIG_FILE"
__all__ = ["CONFIG_FILE_ENV", "SETTINGS", "check_config_file", "load_settings", "suggest"]


@dataclass
class _Resolved:
    """Top-level values after precedence, still raw (text or YAML)."""

    values: dict[str, tuple[object, bool, str]]  # key -> (value, from_text, where)
    given: set[str]  # the keys a flag or a JOBQUEUE_EXPORTER_ variable set


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
    file_values = section_values(document, top, "", (*QUEUE_SECTIONS, *PROCESS_SECTIONS), errors)
    flag_values: dict[str, str] = {}
    for raw, text in flags.items():
        key = normalise_flag(raw)
        if key not in SETTINGS:
            errors.append(f"{key}: unknown setting{suggest(key, SETTINGS)}")
            continue
        flag_values[key] = text
    chosen: dict[str, tuple[object, bool, str]] = {}
    given: set[str] = set()
    for key, setting in SETTINGS.items():
        if key in flag_values:
            chosen[key] = (flag_values[key], True, f" (flag {setting.flag})")
            given.add(key)
        elif key == "database.dsn" and (environ.get(DSN_ENV) or environ.get(DSN_FALLBACK_ENV)):
            name = DSN_ENV if environ.get(DSN_ENV) else DSN_FALLBACK_ENV
            chosen[key] = (environ[name], True, f" (environment {name})")
        elif key != "database.dsn" and setting.env in environ:
            chosen[key] = (environ[setting.env], True, f" (environment {setting.env})")
            given.add(key)
        elif key in file_values:
            chosen[key] = (file_values[key], False, document.where(key))
    return _Resolved(chosen, given)


def load_settings(
    config_file: str | None, environ: Mapping[str, str], flags: Mapping[str, str]
) -> Settings:
    """Resolve every setting (flag > environment > file > default) or raise ConfigError."""
    document = read_document(config_file) if config_file else Document("", {})
    errors: list[str] = []
    resolved = _resolve_top(document, environ, flags, errors)
    top = parse_all(resolved.values, "", errors)
    table = top_table(document, resolved.values.get("database.table"), top, errors)
    known = source_secrets(environ, ())
    if QUEUES_KEY in document.data:
        queues = queue_entries(document, top, resolved.given, errors, table, known)
    else:
        queue = build_queue(top, "", "", errors, table, known)
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
        raise ConfigError("\n".join(redact(e) for e in errors))
    process = {s: section_of(cls, s, top) for s, cls in PROCESS_SECTIONS.items()}
    return Settings(queues=tuple(queues), **process)


def check_config_file(path: str) -> Settings:
    """Load one configuration file on its own (no environment, no flags), as --config.check does."""
    return load_settings(path, {}, {})
