"""The command line: argv + environment -> Settings, then run, demo, render-rules or a config check.

This is the only module that reads ``sys.argv`` and ``os.environ``. Exit codes: 0 success,
1 a failed ``--config.check`` or a runtime failure, 2 a usage or configuration error
(bad flag, bad value, unreadable file, missing DSN for ``run``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn, TextIO

from exporter import __version__
from exporter.logs import setup_logging
from exporter.settings import (
    CONFIG_FILE_ENV,
    DSN_ENV,
    DSN_FALLBACK_ENV,
    SETTINGS,
    ConfigError,
    Kind,
    Settings,
    check_config_file,
    load_settings,
    redact_dsn,
)

PROG = "jobqueue-exporter"
COMMANDS = ("run", "demo", "render-rules")
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

MISSING_DSN = f"""\
database.dsn: no database to watch; give a PostgreSQL URL in one of these ways:
  --database.dsn=postgresql://user@host:5432/dbname
  {DSN_ENV}=postgresql://user@host:5432/dbname
  {DSN_FALLBACK_ENV}=postgresql://user@host:5432/dbname
  database.dsn in the --config.file YAML
(keep the password out of the DSN with --database.password-file)"""

_METAVARS = {
    Kind.STRING: "TEXT",
    Kind.CHOICE: "WORD",
    Kind.INTEGER: "N",
    Kind.NUMBER: "NUMBER",
    Kind.DURATION: "DURATION",
    Kind.USD: "USD",
    Kind.RATIO: "RATIO",
    Kind.FILE: "FILE",
    Kind.DSN: "URL",
    Kind.TABLE: "TABLE",
    Kind.NAME: "NAME",
    Kind.JOB_TYPES: "N=NAME,...",
    Kind.BY_JOB_TYPE: "TYPE=VALUE,...",
    Kind.JSON_PATH: "KEY.KEY",
    Kind.BUCKETS: "S,S,...",
    Kind.LISTEN_ADDRESS: "HOST:PORT",
    Kind.URL_PATH: "PATH",
}


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of exiting, so main() returns its code."""

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            self._print_message(message, sys.stderr)
        raise _Exit(status)


class _Exit(Exception):
    """argparse wanted to exit (after --help or a usage error) with this status."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def build_parser() -> argparse.ArgumentParser:
    """The parser: Go-exporter style flags, one per setting, and the subcommand."""
    parser = _Parser(
        prog=PROG,
        description="Prometheus exporter and alerting sidecar for a PostgreSQL job queue.",
        epilog="Every flag can also be set in the config file or an environment variable; "
        "see docs/configuration.md. Precedence: flag > environment > file > default.",
        allow_abbrev=False,
    )
    parser.add_argument(
        "command",
        nargs="?",
        choices=COMMANDS,
        default="run",
        help="run (default): serve metrics; demo: throwaway database and simulated workers; "
        "render-rules: print the alert rules",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument(
        "--config.file",
        dest="config_file",
        metavar="FILE",
        help=f"YAML configuration file (env {CONFIG_FILE_ENV})",
    )
    parser.add_argument(
        "--config.check",
        dest="config_check",
        metavar="FILE",
        help="validate FILE, print 'FILE: OK' or the errors, exit 0 or 1",
    )
    rules = parser.add_argument_group("render-rules")
    rules.add_argument("--output", metavar="FILE", help="write the rules here (default stdout)")
    rules.add_argument(
        "--format",
        choices=("rules", "prometheusrule"),
        default="rules",
        help="a Prometheus rule file, or a Prometheus Operator PrometheusRule resource",
    )
    rules.add_argument(
        "--prometheusrule.label",
        dest="prometheusrule_labels",
        action="append",
        metavar="KEY=VALUE",
        help="a label of the PrometheusRule resource, for the ruleSelector of your Prometheus "
        "(repeatable; default release=kube-prometheus-stack)",
    )
    groups: dict[str, argparse._ArgumentGroup] = {}
    for key, setting in SETTINGS.items():
        group = groups.get(setting.section)
        if group is None:
            group = groups[setting.section] = parser.add_argument_group(
                f"{setting.section} settings"
            )
        help_text = f"{setting.spec.help} (env {setting.env})".replace("%", "%%")
        if setting.kind is Kind.BOOLEAN:
            group.add_argument(
                setting.flag,
                dest=key,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        elif setting.kind is Kind.LISTEN_ADDRESS:
            # Repeatable, like the Go exporters' --web.listen-address (IPv4 and IPv6 at once).
            group.add_argument(
                setting.flag,
                dest=key,
                action="append",
                metavar=_METAVARS[setting.kind],
                default=argparse.SUPPRESS,
                help=help_text,
            )
        else:
            group.add_argument(
                setting.flag,
                dest=key,
                metavar=_METAVARS[setting.kind],
                default=argparse.SUPPRESS,
                help=help_text,
            )
    return parser


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
    return load_settings(config_file, environ, flags)


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


def _check_config(path: str) -> int:
    try:
        check_config_file(path)
    except ConfigError as exc:
        lines = str(exc).splitlines()
        _write(sys.stderr, "\n".join(f"{path}: {line}" for line in lines))
        return EXIT_FAILED
    _write(sys.stdout, f"{path}: OK")
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


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Parse the command line and environment, run the chosen command, return the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    env: Mapping[str, str] = os.environ if environ is None else environ
    parser = build_parser()
    try:
        namespace = parser.parse_args(args_list)
    except _Exit as exc:
        return exc.status

    if namespace.version:
        _write(sys.stdout, f"{PROG} {__version__}")
        return EXIT_OK
    if namespace.config_check is not None:
        return _check_config(namespace.config_check)
    command: str = namespace.command
    if command != "render-rules" and (namespace.output is not None or namespace.format != "rules"):
        _write(sys.stderr, f"{PROG}: error: --output and --format belong to render-rules")
        return EXIT_USAGE
    if command != "render-rules" and namespace.prometheusrule_labels is not None:
        _write(sys.stderr, f"{PROG}: error: --prometheusrule.label belongs to render-rules")
        return EXIT_USAGE
    labels = None
    if namespace.prometheusrule_labels is not None:
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
    if command == "render-rules":
        return _render_rules(settings, namespace.format, namespace.output, labels)
    from exporter.demo import run_demo
    from exporter.service import run
    from exporter.web.validate import WebConfigError

    missing = [queue.name for queue in settings.queues if queue.database.dsn is None]
    if command != "demo" and missing:
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
        return settings_from_namespace(namespace, frozen_env)

    try:
        if command == "demo":
            return run_demo(settings)
        return run(settings, reload_settings, systemd_sockets(env))
    except WebConfigError as exc:
        _write(sys.stderr, f"{PROG}: web config error: {exc}")
        return EXIT_USAGE
    except OSError as exc:  # the listen address is taken or not ours to bind
        addresses = ", ".join(settings.web.listen_address)
        _write(sys.stderr, f"{PROG}: cannot listen on {addresses}: {exc}")
        return 1
