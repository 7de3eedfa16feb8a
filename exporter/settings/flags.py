"""The command line's flags, read back from the settings' declarations: one parser per command.

``run`` and ``demo`` take the runtime flags (database, collect, queue, web, log);
``render-rules`` takes the rule-rendering ones (alerts, log), so each ``--help`` lists only what
its command reads. Every flag's help ends with its default and, for a choice, the values it
accepts. A flag the parser does not know is refused in two lines, with the suggester the YAML
loader uses, instead of a page of usage.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from typing import NoReturn

from exporter.settings.declaration import Setting
from exporter.settings.kinds import Kind
from exporter.settings.reference import default_text
from exporter.settings.sources import CONFIG_FILE_ENV, SETTINGS
from exporter.settings.yamlfile import suggest

PROG = "jobqueue-exporter"
RUN, DEMO, RENDER_RULES, INDEXES = "run", "demo", "render-rules", "indexes"
HEALTHCHECK = "healthcheck"
LOGICAL_SETUP, LOGICAL_DROP = "logical-setup", "logical-drop"
# Every command and its line in the top-level --help: the usage line and the list of commands
# are both made from this one table, so a new command cannot be left out of either.
SUMMARIES = {
    RUN: "serve /metrics for the queues (the default)",
    DEMO: "the same, on a throwaway database with simulated workers",
    RENDER_RULES: "print alert and recording rules (flags: render-rules --help)",
    INDEXES: "print the CREATE INDEX statements each queue's table needs",
    HEALTHCHECK: "ask the running exporter's /healthz; exit 0 or 1",
    LOGICAL_SETUP: "print the SQL a DBA runs for collect.counting: logical",
    LOGICAL_DROP: "drop each queue's replication slot; print what undoes logical-setup",
}
COMMANDS = tuple(SUMMARIES)
# The sections whose flags each command takes; log is everyone's.
COMMAND_SECTIONS = {
    RUN: ("database", "collect", "queue", "web", "log"),
    DEMO: ("database", "collect", "queue", "web", "log"),
    RENDER_RULES: ("alerts", "log"),
    # The queues' table mappings: the same keys that say what run would read.
    INDEXES: ("database", "queue", "log"),
    # Every flag run takes, so the health check accepts the server's own command line.
    HEALTHCHECK: ("database", "collect", "queue", "web", "log"),
    LOGICAL_SETUP: ("database", "collect", "queue", "log"),
    LOGICAL_DROP: ("database", "collect", "queue", "log"),
}
# The settings a command reads, where it takes more flags than it reads: its --help lists
# only these. The health check takes every flag of run (so the exporter's own command line can
# be handed to it) and reads only where the exporter listens.
HELP_ONLY = {HEALTHCHECK: ("web.listen_address", "web.config_file", "web.systemd_socket")}
RULE_FORMATS = ("rules", "prometheusrule")

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


def usage(command: str) -> str:
    """The usage line: every command for the top level (``run``), the command itself otherwise."""
    if command == RUN:
        return f"{PROG} [COMMAND] [FLAGS]"
    if command == HEALTHCHECK:
        return f"{PROG} healthcheck [--pid=N | FLAGS]"
    return f"{PROG} {command} [FLAGS]"


def _command_list() -> str:
    width = max(len(c) for c in COMMANDS) + 2
    return "\n".join(f"  {c.ljust(width)}{SUMMARIES[c]}" for c in COMMANDS)


_DESCRIPTION = {
    RUN: "Prometheus exporter for a job queue stored in PostgreSQL.\n\ncommands:\n"
    + _command_list(),
    DEMO: "A throwaway PostgreSQL with simulated workers, and the exporter serving it.",
    RENDER_RULES: "Print the Prometheus alert and recording rules, tuned by the flags below.",
    INDEXES: "Print the CREATE INDEX CONCURRENTLY statements each queue's table mapping needs.",
    HEALTHCHECK: "Ask the running exporter's /healthz where the same flags, environment and\n"
    "web config make it listen (HTTPS with TLS; no credentials, /healthz needs none).\n"
    "Exit 0 when it answers 200, 1 otherwise. Every flag of run is taken, so the\n"
    "exporter's own command line can be given; the ones listed are those it reads.",
    LOGICAL_SETUP: "Print, per queue counted with collect.counting: logical, the SQL a DBA\n"
    "runs (replica identity, publication, role) and the server settings to check\n"
    "(docs/logical.md).",
    LOGICAL_DROP: "Drop the replication slot of each queue whose profile can count from a change\n"
    "stream, in logical mode or back to polling (the exporter never drops one by itself),\n"
    "then print the SQL that reverses logical-setup. Stop the exporters first: a slot in\n"
    "use is not dropped, and its holder is named. Exit 1 when nothing was dropped.",
}
_EPILOG = """\
Every flag is also a key of the --config.file YAML (docs/configuration.md) and
an environment variable: JOBQUEUE_EXPORTER_ and the key in upper case, dots and
dashes as underscores. Precedence: flag > environment > file > default."""


class UsageError(Exception):
    """The command line is wrong; the message says what, and ``command`` whose help to read."""

    def __init__(self, message: str, command: str = RUN) -> None:
        super().__init__(message)
        self.command = command


class ParserExit(Exception):
    """argparse wanted to exit (after --help) with this status."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of exiting, so the caller chooses what to print."""

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            self._print_message(message, sys.stderr)
        raise ParserExit(status)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, self.get_default("command") or RUN)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Wraps help at spaces only: a URL or a dashed flag name stays whole on its line."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False)


def _help(setting: Setting) -> str:
    text = setting.spec.help.rstrip(".") + "."
    if setting.spec.choices_in:
        text += f" One of {len(setting.spec.choices)} names ({setting.spec.choices_in})."
    elif setting.spec.choices:
        text += f" One of: {', '.join(setting.spec.choices)}."
    default = default_text(setting)
    if default is not None and setting.kind is Kind.BUCKETS:
        default = default.replace(",", ", ")  # lets the help wrap between bounds
    elif default is not None and default != default.strip():
        default = f'"{default}"'  # a space that matters must show
    text += f" Default: {default if default is not None else 'none'}."
    return text.replace("%", "%%")


def command_flags(command: str) -> list[Setting]:
    """The settings whose flags ``command`` takes, in declaration order."""
    sections = COMMAND_SECTIONS[command]
    return [s for s in SETTINGS.values() if s.section in sections]


def build_parser(command: str = RUN) -> argparse.ArgumentParser:
    """The parser of one command: its own flags and the settings' flags it reads."""
    parser = _Parser(
        prog=PROG,
        usage=usage(command),
        description=_DESCRIPTION[command],
        epilog=_EPILOG,
        formatter_class=_Formatter,
        allow_abbrev=False,
        add_help=False,
    )
    parser.set_defaults(command=command)
    parser.add_argument("-h", "--help", action="help", help="Show this help and exit.")
    parser.add_argument("--version", action="store_true", help="Print the version and exit.")
    parser.add_argument(
        "--config.file",
        dest="config_file",
        metavar="FILE",
        help=f"YAML configuration file (env {CONFIG_FILE_ENV}).",
    )
    if command == RENDER_RULES:
        parser.add_argument("--output", metavar="FILE", help="Write here. Default: stdout.")
        parser.add_argument(
            "--format",
            choices=RULE_FORMATS,
            default=RULE_FORMATS[0],
            metavar="WORD",
            help="A Prometheus rule file, or a Prometheus Operator PrometheusRule. "
            f"One of: {', '.join(RULE_FORMATS)}. Default: {RULE_FORMATS[0]}.",
        )
        parser.add_argument(
            "--prometheusrule.label",
            dest="prometheusrule_labels",
            action="append",
            metavar="KEY=VALUE",
            help="A label of the PrometheusRule, for your Prometheus' ruleSelector; repeatable. "
            "Default: release=kube-prometheus-stack.",
        )
    elif command == HEALTHCHECK:
        parser.add_argument(
            "--pid",
            type=int,
            metavar="N",
            help="Take the flags from the command line of process N, the running exporter "
            "(in its container: 1), and read its relative paths from N's working directory. "
            "Default: the flags given here.",
        )
    else:
        parser.add_argument(
            "--config.check",
            dest="config_check",
            metavar="FILE",
            help="Check FILE; print 'FILE: OK' or its mistakes, exit 0 or 1.",
        )
    groups: dict[str, argparse._ArgumentGroup] = {}
    for setting in command_flags(command):
        group = groups.get(setting.section)
        if group is None:
            group = groups[setting.section] = parser.add_argument_group(setting.section)
        options: dict[str, object] = {"dest": setting.key, "default": argparse.SUPPRESS}
        listed = setting.spec.listed_in in (None, command) and setting.key in HELP_ONLY.get(
            command, (setting.key,)
        )
        if setting.kind is Kind.BOOLEAN:
            options["action"] = argparse.BooleanOptionalAction
        else:
            options["metavar"] = _METAVARS[setting.kind]
        if setting.kind is Kind.LISTEN_ADDRESS:
            # Repeatable, like the Go exporters' --web.listen-address (IPv4 and IPv6 at once).
            options["action"] = "append"
        text = _help(setting) if listed else argparse.SUPPRESS
        group.add_argument(setting.flag, help=text, **options)  # type: ignore[arg-type]
    return parser


def _takes_no_value(token: str) -> bool:
    if token in ("-h", "--help", "--version") or "=" in token:
        return True
    flag = "--" + token.removeprefix("--no-") if token.startswith("--no-") else token
    setting = next((s for s in SETTINGS.values() if s.flag == flag), None)
    return setting is not None and setting.kind is Kind.BOOLEAN


def split_command(args: Sequence[str]) -> tuple[str, list[str]]:
    """The command named anywhere among the arguments (``run`` if none), and the rest."""
    rest = list(args)
    index = 0
    while index < len(rest):
        token = rest[index]
        if token == "--":
            break
        if token.startswith("-"):
            # A flag's value is never the command, even when it is spelled like one.
            index += 1 if _takes_no_value(token) else 2
            continue
        if token in COMMANDS:
            del rest[index]
            return token, rest
        index += 1
    return RUN, rest


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag the parser takes, ``--no-`` forms included."""
    return [option for action in parser._actions for option in action.option_strings]


def _owner(flag: str) -> str | None:
    """The command whose flag this is (run standing for demo too), if any."""
    for command in (RUN, RENDER_RULES):
        if flag in option_strings(build_parser(command)):
            return command
    return None


def unknown_argument(command: str, token: str, known: Sequence[str]) -> str:
    """What to say about the first argument the command's parser did not take (UsageError
    naming the other command when the flag is that command's)."""
    if not token.startswith("-"):
        return f"unexpected argument {token!r}{suggest(token, COMMANDS)}"
    flag = token.partition("=")[0]
    owner = _owner(flag)
    if owner is not None and owner not in (command, RUN if command == DEMO else None):
        raise UsageError(f"{flag} is a flag of {owner}, not of {command}", owner)
    return f"unknown flag {flag}{suggest(flag, known)}"


def parse_command_line(args: Sequence[str]) -> argparse.Namespace:
    """The parsed flags, ``command`` among them; UsageError or ParserExit (after --help)."""
    command, rest = split_command(args)
    parser = build_parser(command)
    namespace, extras = parser.parse_known_args(rest)
    if extras:
        raise UsageError(unknown_argument(command, extras[0], option_strings(parser)), command)
    return namespace


def help_hint(command: str) -> str:
    """The line that tells where a command's flags are listed."""
    named = "" if command == RUN else f" {command}"
    return f"Run '{PROG}{named} --help' for the flags, or see docs/configuration.md."
