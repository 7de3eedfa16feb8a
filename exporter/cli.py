"""The command line: argv + environment -> Settings, then run, demo, render-rules or a config check.

This is the only module that reads ``sys.argv`` and ``os.environ``. Exit codes: 0 success,
1 a failed ``--config.check`` or a runtime failure, 2 a usage or configuration error
(bad flag, bad value, unreadable file, missing DSN for ``run``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import sys
import threading
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from types import TracebackType
from typing import TextIO

from exporter import __version__
from exporter.logs import setup_logging
from exporter.redaction import redact, remember
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
    source_secrets,
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


def _source_secrets(args: Sequence[str], environ: Mapping[str, str]) -> set[str]:
    """The passwords of the raw sources: PGPASSWORD, and those of the DSN variables and of
    every argument (a flag's value after its '=')."""
    values = [arg.partition("=")[2] if arg.startswith("--") else arg for arg in args]
    values += [environ.get(DSN_ENV) or "", environ.get(DSN_FALLBACK_ENV) or ""]
    return source_secrets(environ, values)


def print_traceback(
    kind: type[BaseException], value: BaseException, tb: TracebackType | None
) -> None:
    """What an exception nobody caught prints, through the redactor like every other text."""
    sys.stderr.write(redact("".join(traceback.format_exception(kind, value, tb))))
    sys.stderr.flush()


def _thread_traceback(args: threading.ExceptHookArgs) -> None:
    if args.exc_value is not None:
        print_traceback(args.exc_type, args.exc_value, args.exc_traceback)


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
    stream.write(redact(text) + "\n")
    stream.flush()


def _prefixed(path: str, line: str) -> str:
    """A line of --config.check's output, named by the file (once: a message about the file
    itself names it already)."""
    return line if line.startswith(f"{path}:") else f"{path}: {line}"


def _check_config(path: str, namespace: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """--config.check: the file on its own, then as the start reads it (the environment and
    flags over it), then every check of the start and its first collection (exporter/preflight)."""
    from exporter.preflight import check_config

    try:
        check_config_file(path)
        settings = settings_from_namespace(
            argparse.Namespace(**{**vars(namespace), "config_file": path}), environ
        )
    except ConfigError as exc:
        _write(sys.stderr, "\n".join(_prefixed(path, line) for line in str(exc).splitlines()))
        return EXIT_FAILED
    setup_logging(settings.log.level, settings.log.format, settings.secrets)
    if not any(queue.database.dsn for queue in settings.queues):
        why = "no DSN in the file, environment or flags to check the queues against"
        _write(sys.stdout, f"{path}: OK (the file only: {why})")
        return EXIT_OK
    report = check_config(settings)
    if report.findings():
        _write(sys.stdout, "\n".join(_prefixed(path, line) for line in report.findings()))
    if report.refused():
        _write(sys.stderr, "\n".join(_prefixed(path, line) for line in report.refused()))
        return EXIT_FAILED
    _write(sys.stdout, f"{path}: {report.verdict()}")
    return EXIT_OK


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


def _healthcheck(namespace: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Probe the running exporter; 0 or 1 only, as container health checks read them. With
    --pid, its flags are the process's, and relative paths in them (--config.file, the web
    config) are read from its working directory, as the exporter reads them."""
    from exporter.web.healthcheck import (
        HealthcheckError,
        probe,
        process_arguments,
        process_directory,
    )

    directory = os.getcwd()
    try:
        if namespace.pid is not None:
            arguments = process_arguments(namespace.pid)
            remember(_source_secrets(arguments, environ))
            directory = process_directory(namespace.pid)
            namespace = parse_command_line(arguments)
        with contextlib.chdir(directory):
            settings = settings_from_namespace(namespace, environ)
            remember(settings.secrets)
            result = probe(settings.web)
    except (HealthcheckError, UsageError, ConfigError) as exc:
        _write(sys.stderr, f"{PROG} healthcheck: unhealthy: {exc}")
        return EXIT_FAILED
    _write(sys.stdout if result.healthy else sys.stderr, result.message)
    return EXIT_OK if result.healthy else EXIT_FAILED


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Parse the command line and environment, run the chosen command, return the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    env: Mapping[str, str] = os.environ if environ is None else environ
    if argv is None:  # the program itself, not a caller that owns its process
        sys.excepthook, threading.excepthook = print_traceback, _thread_traceback
    # Known before anything is parsed, so no message about a source can show one of them.
    remember(_source_secrets(args_list, env))
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

    setup_logging(settings.log.level, settings.log.format, settings.secrets)
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
        from exporter.preflight import check_start

        return check_start(settings_from_namespace(namespace, frozen_env), logical=False)

    try:
        if command == DEMO:
            from exporter.slot_commands import refuse_demo

            refuse_demo(settings)
            # The demo's DSN exists only once its cluster runs, and the lines never show a DSN.
            log_start((demo_queue(settings, ""),))
            return run_demo(settings)
        from exporter.preflight import check_start

        log_start(settings.queues)  # the start line first, then what the checks say
        check_start(settings)
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
