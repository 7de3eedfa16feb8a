"""The command line: argv + environment -> Settings, then run, demo, render-rules or a config check.

This is the only module that reads ``sys.argv`` and ``os.environ``. Exit codes: 0 success,
1 a failed ``--config.check`` or a runtime failure, 2 a usage or configuration error
(bad flag, bad value, unreadable file, missing DSN for ``run``).
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TextIO

from exporter import __version__
from exporter.logs import setup_logging
from exporter.settings import (
    CONFIG_FILE_ENV,
    DSN_ENV,
    DSN_FALLBACK_ENV,
    SETTINGS,
    ConfigError,
    QueueSettings,
    Settings,
    check_config_file,
    load_settings,
    redact_dsn,
)
from exporter.settings.flags import (
    DEMO,
    HEALTHCHECK,
    INDEXES,
    LOGICAL_DROP,
    LOGICAL_SETUP,
    PROG,
    RENDER_RULES,
    ParserExit,
    UsageError,
    help_hint,
    parse_command_line,
)
from exporter.settings.flags import build_parser as build_parser  # callers build it from here
from exporter.settings.reference import format_duration

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

MISSING_DSN = f"""\
database.dsn: no database to watch; give a PostgreSQL URL in one of these ways:
  --database.dsn=postgresql://user@host:5432/dbname
  {DSN_ENV}=postgresql://user@host:5432/dbname
  {DSN_FALLBACK_ENV}=postgresql://user@host:5432/dbname
  database.dsn in the --config.file YAML
(keep the password out of the DSN with --database.password-file)"""


def settings_from_namespace(namespace: argparse.Namespace, environ: Mapping[str, str]) -> Settings:
    """Resolve the settings from parsed flags, the environment and the config file they name."""
    flags: dict[str, str] = {}
    for key, value in vars(namespace).items():
        if key not in SETTINGS:
            continue
        if isinstance(value, bool):
            flags[key] = "true" if value else "false"
        elif isinstance(value, list):
            flags[key] = ",".join(value)
        else:
            flags[key] = str(value)
    config_file = namespace.config_file or environ.get(CONFIG_FILE_ENV) or None
    settings = load_settings(config_file, environ, flags)
    # The indexes command that resolves the same tables: the same file, the same table flag.
    command = [PROG, INDEXES]
    if config_file:
        command += ["--config.file", config_file]
    table = flags.get("database.table") or environ.get(SETTINGS["database.table"].env)
    if table:
        command += ["--database.table", table]
    queues = tuple(replace(q, index_command=shlex.join(command)) for q in settings.queues)
    return replace(settings, queues=queues)


def systemd_sockets(environ: Mapping[str, str]) -> tuple[int, ...]:
    """The listening descriptors systemd passed to this process (sd_listen_fds), if any."""
    # LISTEN_PID names the process the sockets are for, so a child that inherited the
    # variables does not take its parent's sockets.
    if environ.get("LISTEN_PID") != str(os.getpid()):
        return ()
    count = environ.get("LISTEN_FDS", "")
    return tuple(range(3, 3 + int(count))) if count.isdigit() else ()


def _write(stream: TextIO, text: str) -> None:
    # Redact again here: a message must never carry a password, whatever produced it.
    stream.write(redact_dsn(text) + "\n")
    stream.flush()


def _check_config(path: str, namespace: argparse.Namespace, environ: Mapping[str, str]) -> int:
    try:
        check_config_file(path)
        # Then as the start reads it (the environment and flags over the file), so a DSN from
        # any of them lets the catalog judge the table mappings as the start would.
        settings = settings_from_namespace(
            argparse.Namespace(**{**vars(namespace), "config_file": path}), environ
        )
        verdict = _catalog_verdict(settings)
        from exporter.slot_commands import check_logical

        # The start's logical checks, as the exporter's role: a refusal fails the check.
        verdict = "; ".join([verdict, *check_logical(settings, warn=False)])
    except ConfigError as exc:
        lines = str(exc).splitlines()
        _write(sys.stderr, "\n".join(f"{path}: {line}" for line in lines))
        return EXIT_FAILED
    _write(sys.stdout, f"{path}: {verdict}")
    return EXIT_OK


def _catalog_verdict(settings: Settings) -> str:
    """What --config.check could prove of the table mappings: the start's catalog check, run
    on every queue with a DSN (ConfigError with the start's messages when one does not fit)."""
    from exporter.db.catalog import check_tables

    checked = [q for q in _mapped(settings) if q.database.dsn]
    if not checked:
        why = "no DSN in the file, environment or flags to check the table mappings against"
        if settings.queues and not _mapped(settings):
            why = "a preset's tables are checked by its first collection"
        return f"OK (the file only: {why})"
    import asyncio

    unchecked = {u.queue: u.why for u in asyncio.run(check_tables(checked))}
    parts = [
        f"queue {q.name}: table {q.mapping.name} NOT checked, the database cannot be reached "
        f"({unchecked[q.name]})"
        if q.name in unchecked
        else f"queue {q.name}: table {q.mapping.name} fits its database"
        for q in checked
    ]
    return ("OK as a file only; " if unchecked else "OK; ") + "; ".join(parts)


def _render_rules(
    settings: Settings, fmt: str, output: str | None, labels: dict[str, str] | None
) -> int:
    from exporter.rules import render_prometheus_rule, render_rules

    if fmt == "rules":
        text = render_rules(settings.alerts)
    else:
        text = render_prometheus_rule(settings.alerts, labels=labels)
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return EXIT_OK
    try:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        _write(sys.stderr, f"{PROG}: --output: cannot write {output}: {exc.strerror or exc}")
        return EXIT_FAILED
    return EXIT_OK


def _mapped(settings: Settings) -> list[QueueSettings]:
    """The queues that name their own table by a mapping (the catalog check's)."""
    from exporter.profiles import profile_of

    return [queue for queue in settings.queues if profile_of(queue).maps_table]


def _table(queue: QueueSettings) -> str:
    from exporter.profiles import profile_of

    return profile_of(queue).watched_table(queue)


def log_start(queues: Iterable[QueueSettings]) -> None:
    """Log which version starts, then one line per queue: what it reads and how often."""
    log = logging.getLogger(__name__)
    log.info("starting jobqueue-exporter", extra={"fields": {"version": __version__}})
    for queue in queues:
        fields = {
            "queue": queue.name,
            "profile": queue.profile,
            "table": _table(queue),
            "interval": format_duration(queue.collect.interval),
            "leader_election": queue.collect.leader_election,
        }
        log.info("watching queue", extra={"fields": fields})


# --- Table mappings: the indexes they need, and the catalog's verdict on them -----------------


def _print_indexes(settings: Settings) -> int:
    from exporter.counting.sqltext import index_script
    from exporter.profiles import PRESETS, profile_of

    script = index_script(
        settings.queues,
        lambda queue: profile_of(queue).maps_table,
        lambda name: PRESETS[name].index_sql(),
    )
    sys.stdout.write(script)
    sys.stdout.flush()
    return EXIT_OK


def _checked_tables(settings: Settings) -> Settings:
    """The settings, once every reachable database's catalog agrees with its queue's table
    mapping (ConfigError otherwise: at start-up the exporter exits, on a reload the running
    configuration stays); a database that is down is checked at its first collection."""
    import asyncio

    from exporter.db.catalog import check_tables

    for unchecked in asyncio.run(check_tables(_mapped(settings))):
        logging.getLogger(__name__).warning(
            "table mapping not checked now: the database cannot be reached; the first "
            "collection checks it",
            extra={"fields": {"queue": unchecked.queue, "err": unchecked.why}},
        )
    return settings


def _healthcheck(namespace: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Probe the running exporter; 0 or 1 only, as container health checks read them."""
    from exporter.web.healthcheck import HealthcheckError, probe, process_arguments

    try:
        if namespace.pid is not None:
            namespace = parse_command_line(process_arguments(namespace.pid))
        settings = settings_from_namespace(namespace, environ)
    except (HealthcheckError, UsageError, ConfigError) as exc:
        _write(sys.stderr, f"{PROG} healthcheck: unhealthy: {exc}")
        return EXIT_FAILED
    result = probe(settings.web)
    _write(sys.stdout if result.healthy else sys.stderr, result.message)
    return EXIT_OK if result.healthy else EXIT_FAILED


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Parse the command line and environment, run the chosen command, return the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    env: Mapping[str, str] = os.environ if environ is None else environ
    try:
        namespace = parse_command_line(args_list)
    except ParserExit as exc:
        return exc.status
    except UsageError as exc:
        _write(sys.stderr, f"{PROG}: error: {exc}\n{help_hint(exc.command)}")
        return EXIT_USAGE

    if namespace.version:
        _write(sys.stdout, f"{PROG} {__version__}")
        return EXIT_OK
    if getattr(namespace, "config_check", None) is not None:
        return _check_config(namespace.config_check, namespace, env)
    command: str = namespace.command
    if command == HEALTHCHECK:
        return _healthcheck(namespace, env)
    labels = None
    if getattr(namespace, "prometheusrule_labels", None) is not None:
        from exporter.rules import parse_rule_labels

        if namespace.format != "prometheusrule":
            _write(
                sys.stderr, f"{PROG}: error: --prometheusrule.label needs --format prometheusrule"
            )
            return EXIT_USAGE
        try:
            labels = parse_rule_labels(namespace.prometheusrule_labels)
        except ValueError as exc:
            _write(sys.stderr, f"{PROG}: error: --prometheusrule.label: {exc}")
            return EXIT_USAGE

    try:
        settings = settings_from_namespace(namespace, env)
    except ConfigError as exc:
        _write(sys.stderr, f"{PROG}: configuration error:\n{exc}")
        return EXIT_USAGE

    setup_logging(settings.log.level, settings.log.format, settings.passwords)
    if command == RENDER_RULES:
        return _render_rules(settings, namespace.format, namespace.output, labels)
    if command == INDEXES:
        return _print_indexes(settings)
    if command in (LOGICAL_SETUP, LOGICAL_DROP):
        from exporter.slot_commands import logical_command

        return logical_command(command, settings)
    from exporter.demo import demo_queue, run_demo
    from exporter.service import run
    from exporter.web.validate import WebConfigError

    missing = [queue.name for queue in settings.queues if queue.database.dsn is None]
    if command != DEMO and missing:
        if len(settings.queues) > 1:
            named = ", ".join(missing)
            text = f"database.dsn: no DSN for queue {named}; set database.dsn in its entry of "
            text += "queues:, or at the top level for every entry"
        else:
            text = MISSING_DSN
        _write(sys.stderr, f"{PROG}: configuration error:\n{text}")
        return EXIT_USAGE
    # A reload re-reads the same sources: the file the flags or environment named, the
    # environment as it was at start-up, the same flags (which still win).
    frozen_env = dict(env)

    def reload_settings() -> Settings:
        return _checked_tables(settings_from_namespace(namespace, frozen_env))

    try:
        if command == DEMO:
            from exporter.slot_commands import refuse_demo

            refuse_demo(settings)
            # The demo's DSN exists only once its cluster runs, and the lines never show a DSN.
            log_start((demo_queue(settings, ""),))
            return run_demo(settings)
        log_start(settings.queues)  # the start line first, then what the catalog check says
        _checked_tables(settings)
        from exporter.slot_commands import check_logical

        check_logical(settings)
    except ConfigError as exc:
        _write(sys.stderr, f"{PROG}: configuration error:\n{exc}")
        return EXIT_USAGE
    try:
        return run(settings, reload_settings, systemd_sockets(env))
    except WebConfigError as exc:
        _write(sys.stderr, f"{PROG}: web config error: {exc}")
        return EXIT_USAGE
    except OSError as exc:  # the listen address is taken or not ours to bind
        addresses = ", ".join(settings.web.listen_address)
        _write(sys.stderr, f"{PROG}: cannot listen on {addresses}: {exc}")
        return 1
