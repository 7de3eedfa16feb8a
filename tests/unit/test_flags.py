"""The command line a newcomer meets: short help per command, two-line flag errors with a
suggestion, DSNs refused at start without their password, the start-up lines, ``err=``."""

from __future__ import annotations

import ast
import io
import json
import logging
import re
from pathlib import Path

import pytest

from exporter.cli import log_start, main
from exporter.settings import SETTINGS, ConfigError, QueueSettings, load_settings
from exporter.settings.flags import (
    COMMAND_SECTIONS,
    COMMANDS,
    HEALTHCHECK,
    RENDER_RULES,
    RUN,
    build_parser,
    option_strings,
    parse_command_line,
    split_command,
)
from exporter.settings.reference import default_text
from exporter.settings.schema import CollectSettings, DatabaseSettings
from exporter.settings.sources import suggest

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "hunter2-S3cret"
# The size the README promises a newcomer ("lists the runtime flags (under N lines)").
MAX_HELP_LINES = int(
    re.search(r"lists the runtime flags \(under (\d+) lines\)", (ROOT / "README.md").read_text())[1]
)
MAX_ERROR_LINES = 8


def _help(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    args = ["--help"] if command == RUN else [command, "--help"]
    assert main(args, {}) == 0
    return capsys.readouterr().out


@pytest.fixture(autouse=True)
def _narrow_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    # argparse wraps at the terminal's width; 80 columns is the longest the help gets.
    monkeypatch.setenv("COLUMNS", "80")


# --- Help -----------------------------------------------------------------------------------


def test_help_lists_the_runtime_flags_only_each_with_its_default_and_choices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = _help(RUN, capsys)
    assert len(text.splitlines()) < MAX_HELP_LINES
    assert "--alerts." not in text
    blocks = _flag_blocks(text)
    # A flag listed in another command's help (the logical-setup ones) is taken unlisted.
    runtime = [
        s
        for s in SETTINGS.values()
        if s.section in COMMAND_SECTIONS[RUN] and s.spec.listed_in in (None, RUN)
    ]
    assert runtime
    for setting in runtime:
        block = " ".join(blocks[setting.flag].split())
        default = default_text(setting)
        expected = default.replace(",", ", ") if default and "," in default else default
        if expected and expected != expected.strip():
            expected = f'"{expected}"'
        assert f"Default: {expected or 'none'}." in block, setting.flag
        if setting.spec.choices_in:
            # Too many to list: how many, and where they are.
            assert f"One of {len(setting.spec.choices)} names ({setting.spec.choices_in})" in block
            continue
        for choice in setting.spec.choices:
            assert choice in block, (setting.flag, choice)
    assert "render-rules --help" in text  # where the rule flags went


def test_usage_line_and_command_list_name_every_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lines = _help(RUN, capsys).splitlines()
    # Seven commands do not fit one 80-column usage line: it says COMMAND, the list names them.
    assert lines[0] == "usage: jobqueue-exporter [COMMAND] [FLAGS]"
    assert len(lines[0]) <= 80
    start = lines.index("commands:") + 1
    listed = [line.split()[0] for line in lines[start : lines.index("", start)]]
    assert listed == list(COMMANDS)
    assert {"run", "demo", "render-rules", "indexes"} <= set(COMMANDS)


def test_render_rules_help_lists_the_rule_flags_and_no_runtime_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = _help(RENDER_RULES, capsys)
    blocks = _flag_blocks(text)
    for setting in SETTINGS.values():
        if setting.section == "alerts":
            assert "Default:" in blocks[setting.flag], setting.flag
    for hidden in ("--database.", "--collect.", "--web.", "--queue."):
        assert hidden not in text
    assert "One of: rules, prometheusrule. Default: rules." in " ".join(blocks["--format"].split())


def test_healthcheck_help_lists_only_the_flags_it_reads_yet_it_takes_every_flag_of_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = _help(HEALTHCHECK, capsys)
    listed = {flag for flag in _flag_blocks(text) if flag.startswith("--")}
    reads = {"--web.listen-address", "--web.config.file", "--web.systemd-socket"}
    own = {"--help", "--version", "--config.file", "--pid", "--no-web.systemd-socket"}
    assert listed == reads | own  # only where the exporter listens: what the probe asks
    assert len(text.splitlines()) < 40  # was 143 lines of collection flags
    parsed = parse_command_line([HEALTHCHECK, "--collect.interval=1s", "--web.listen-address=:9"])
    assert parsed.command == HEALTHCHECK  # the exporter's own command line is still taken


def test_a_mistake_is_prefixed_by_the_file_and_the_key_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nonexist.yml")
    assert main(["--config.check", missing], {}) == 1
    assert capsys.readouterr().err == f"{missing}: cannot read: No such file or directory\n"
    broken = tmp_path / "broken.yml"
    broken.write_text("collect: [\n", encoding="utf-8")
    assert main(["--config.check", str(broken)], {}) == 1
    assert capsys.readouterr().err.startswith(f"{broken}:2:1: YAML syntax error: ")


def test_the_logical_modes_missing_extra_is_named_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from exporter import slot_commands
    from exporter.db import DatabaseError
    from exporter.db.stream_failure import EXTRA_HINT

    def missing() -> None:
        raise DatabaseError("schema", EXTRA_HINT)

    monkeypatch.setattr(slot_commands, "psycopg2_modules", missing)
    settings = load_settings(
        None, {"JOBQUEUE_EXPORTER_DSN": "postgresql://u@h/app"}, {"--collect.counting": "logical"}
    )
    with pytest.raises(ConfigError) as raised:
        slot_commands.check_logical(settings)
    assert str(raised.value) == EXTRA_HINT
    assert str(raised.value).count("collect.counting:") == 1


def _flag_blocks(text: str) -> dict[str, str]:
    """Each flag's help text, by every flag of its line."""
    blocks: dict[str, str] = {}
    current: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if line.startswith("  -"):
            current = [part.split()[0] for part in stripped.split(", ")]
            for flag in current:
                blocks[flag] = stripped
        elif line.startswith(" " * 10) and current:
            for flag in current:
                blocks[flag] += " " + stripped
        else:
            current = []
    return blocks


# --- Errors ---------------------------------------------------------------------------------


def test_unknown_flag_is_two_lines_with_the_yaml_loaders_suggestion(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--collect.intervall", "5s"], {}) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert 1 <= len(lines) <= MAX_ERROR_LINES
    flags = option_strings(build_parser(RUN))
    # The suggester of the YAML loader, applied to the flags.
    assert suggest("--collect.intervall", flags) == " (did you mean --collect.interval?)"
    assert lines[0] == (
        "jobqueue-exporter: error: unknown flag --collect.intervall "
        "(did you mean --collect.interval?)"
    )
    assert "--help" in lines[-1]


@pytest.mark.parametrize(
    ("args", "message", "help_of"),
    [
        (["--alerts.stuck-for=5m"], "--alerts.stuck-for is a flag of render-rules, not of run",
         "jobqueue-exporter render-rules --help"),
        (["render-rules", "--collect.interval=5s"],
         "--collect.interval is a flag of run, not of render-rules", "jobqueue-exporter --help"),
        (["demo", "--output=x"], "--output is a flag of render-rules, not of demo",
         "jobqueue-exporter render-rules --help"),
        (["render-rules", "--alerts.stuck-fr=1m"],
         "unknown flag --alerts.stuck-fr (did you mean --alerts.stuck-for?)",
         "jobqueue-exporter render-rules --help"),
        (["--collect.interval"], "argument --collect.interval: expected one argument",
         "jobqueue-exporter --help"),
        (["rnu", "x"], "unexpected argument 'rnu'", "jobqueue-exporter --help"),
    ],
)  # fmt: skip
def test_a_flag_of_the_other_command_names_that_command(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str, help_of: str
) -> None:
    assert main(args, {}) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) <= MAX_ERROR_LINES
    assert lines[0] == f"jobqueue-exporter: error: {message}"
    assert f"'{help_of}'" in lines[1]


@pytest.mark.parametrize(
    ("args", "command", "rest"),
    [
        ([], "run", []),
        (["--queue.name", "demo"], "run", ["--queue.name", "demo"]),
        (["--collect.done-count", "demo"], "demo", ["--collect.done-count"]),
        (["--alerts.stuck-for", "5m", "render-rules", "--output=x"], "render-rules",
         ["--alerts.stuck-for", "5m", "--output=x"]),
        (["--log.level=debug", "render-rules"], "render-rules", ["--log.level=debug"]),
        (["--", "demo"], "run", ["--", "demo"]),
    ],
)  # fmt: skip
def test_the_command_is_found_anywhere_but_never_in_a_flags_value(
    args: list[str], command: str, rest: list[str]
) -> None:
    assert split_command(args) == (command, rest)


# --- DSNs refused at start ----------------------------------------------------------------


BAD_DSNS = [
    (f"postgresql://u:{PASSWORD}@127.0.0.1:notaport/db", "the port is not a number"),
    (f"postgresql://u:{PASSWORD}@127.0.0.1:99999/db", "the port is not a number"),
    (f"postgresql://u:{PASSWORD}@h1:5432,h2:x/db", "the port of host 2 is not a number"),
    (f"postgresql://u:{PASSWORD}@h/db?port=5432x", "port 1 of ?port= is not a number"),
    (f"postgresql://u:{PASSWORD}@h/db?sslmode=requir", "sslmode must be one of disable, allow"),
    (f"postgresql://u:{PASSWORD}@h/db?sslmode", "are not name=value pairs joined by '&'"),
    (f"postgresql://u:{PASSWORD}@[::1/db", "the host part is not valid; percent-encode"),
    # The shapes asyncpg would read otherwise than meant, the password in a database name.
    (f"postgresql:/u:{PASSWORD}@127.0.0.1:55433/app", "the scheme must be followed by '//'"),
    (f"postgresql:u:{PASSWORD}@h/app", "the scheme must be followed by '//'"),
    (f"postgresql:///u:{PASSWORD}@h/app", "the database name holds an '@'"),
    (f"postgresql://u:{PASSWORD}@h//app", "the database name holds a '/'"),
    (f"postgresql://u:a/{PASSWORD}@h/app", "a '/' or '?' in the password ends the host part"),
    (f"postgresql://u:a?{PASSWORD}@h/app", "hold an '@' while the host part has none"),
    (f"postgresql://u:9?x={PASSWORD}@h/app", "hold an '@' while the host part has none"),
    (f"postgresql://u:a#{PASSWORD}@h/app", "holds a '#'"),
    (f"host=h user=u password={PASSWORD} dbname=app", "key=value DSNs such as host="),
    (f"postgresql://u:{PASSWORD}@h/app\n", "holds a control character"),
    (f" postgresql://u:{PASSWORD}@h/app", "begins or ends with a space"),
    (f"postgresql://u:{PASSWORD}@[::1]x/db", "is not a valid [IPv6] address"),
    (f"postgresql://u:hun@{PASSWORD}@h/db", "write '@' in a password as %40"),
    (f"postgresql://u:{PASSWORD}@h1,,h2/db", "host 2 is empty"),
    (f"postgresql://u:{PASSWORD}@h/db?host=a:1,b:c", "the port of host 2 of ?host= is not"),
]
GOOD_DSNS = [
    f"postgresql://u:{PASSWORD}@127.0.0.1:5432/db?sslmode=verify-full",
    f"postgres://u:{PASSWORD}@[::1]:5432/db?sslmode=disable",
    "postgresql://u@h1:5432,h2:5433/db?target_session_attrs=read-write",
    "postgresql:///db?host=/var/run/postgresql&port=5433",
    f"postgresql://u:{PASSWORD.replace('-', '%40')}@h/db",
]


@pytest.mark.parametrize(("dsn", "why"), BAD_DSNS)
def test_a_dsn_that_cannot_connect_is_refused_naming_the_key_never_the_password(
    dsn: str, why: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(None, {"JOBQUEUE_EXPORTER_DSN": dsn}, {})
    message = str(raised.value)
    assert message.startswith("database.dsn: ")
    assert why in message
    assert message.endswith("(environment JOBQUEUE_EXPORTER_DSN)")
    assert PASSWORD not in message
    assert "hun@" not in message


def test_a_bad_dsn_in_the_queues_list_names_its_entry(tmp_path: Path) -> None:
    path = tmp_path / "config.yml"
    path.write_text(
        "queues:\n"
        "  - name: a\n    database: {dsn: 'postgresql://u@h:5432/a'}\n"
        f"  - name: b\n    database: {{dsn: 'postgresql://u:{PASSWORD}@h:54x32/b'}}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as raised:
        load_settings(str(path), {}, {})
    assert str(raised.value) == (
        f"queues[1].database.dsn: the port is not a number from 1 to 65535 ({path}:5)"
    )


@pytest.mark.parametrize("dsn", GOOD_DSNS)
def test_dsns_asyncpg_accepts_pass_the_check(dsn: str) -> None:
    assert load_settings(None, {}, {"database.dsn": dsn}).queues[0].database.dsn == dsn


# --- Start-up lines -------------------------------------------------------------------------

QUEUES = (
    QueueSettings(name="orders"),
    QueueSettings(
        name="mails",
        profile="procrastinate",
        database=DatabaseSettings(table="ignored"),
        collect=CollectSettings(interval=90.0, leader_election=False),
    ),
)


@pytest.mark.usefixtures("restore_logging")
def test_start_up_lines_name_version_then_each_queue_in_logfmt() -> None:
    from exporter import __version__
    from exporter.logs import setup_logging

    stream = io.StringIO()
    setup_logging("info", "logfmt", [], stream=stream)
    log_start(QUEUES)
    lines = [line.split(" ", 3) for line in stream.getvalue().splitlines()]
    assert [rest for _, _, _, rest in lines] == [
        f'msg="starting jobqueue-exporter" version={__version__}',
        'msg="watching queue" queue=orders profile=default table=job interval=15s '
        "leader_election=true",
        'msg="watching queue" queue=mails profile=procrastinate table=procrastinate_jobs '
        "interval=1m30s leader_election=false",
    ]
    assert all(level == "level=INFO" for _, level, _, _ in lines)


@pytest.mark.usefixtures("restore_logging")
def test_start_up_lines_in_json_carry_the_same_fields() -> None:
    from exporter import __version__
    from exporter.logs import setup_logging

    stream = io.StringIO()
    setup_logging("info", "json", [], stream=stream)
    log_start(QUEUES[1:])
    first, queue = (json.loads(line) for line in stream.getvalue().splitlines())
    assert (first["level"], first["msg"], first["version"]) == (
        "INFO", "starting jobqueue-exporter", __version__,
    )  # fmt: skip
    assert {k: queue[k] for k in ("queue", "profile", "table", "interval")} == {
        "queue": "mails", "profile": "procrastinate", "table": "procrastinate_jobs",
        "interval": "1m30s",
    }  # fmt: skip
    assert queue["leader_election"] is False


# --- err= -----------------------------------------------------------------------------------


def _field_keys(tree: ast.AST) -> list[tuple[int, str]]:
    """The keys of every dict literal given as ``extra={"fields": {...}}`` or ``log_fields()``."""
    keys: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                is_fields = isinstance(key, ast.Constant) and key.value == "fields"
                if is_fields and isinstance(value, ast.Dict):
                    keys += [(k.lineno, k.value) for k in value.keys if isinstance(k, ast.Constant)]
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "log_fields":
            keys += [(node.lineno, kw.arg) for kw in node.keywords if kw.arg]
    return keys


def test_errors_are_logged_under_err_as_slog_exporters_do() -> None:
    offenders = []
    for path in sorted((ROOT / "exporter").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offenders += [f"{path.name}:{line}" for line, key in _field_keys(tree) if key == "error"]
    assert offenders == []


def test_the_err_check_finds_an_error_key() -> None:
    planted = ast.parse('log.warning("x", extra={"fields": {"reason": r, "error": e}})')
    assert [key for _, key in _field_keys(planted)] == ["reason", "error"]


def test_the_logger_writes_err_as_given() -> None:
    from exporter.logs import LogfmtFormatter
    from exporter.redaction import Redactor

    record = logging.LogRecord("exporter", logging.WARNING, "x.py", 1, "failed", None, None)
    record.fields = {"err": "boom"}
    assert LogfmtFormatter(Redactor([])).format(record).endswith("msg=failed err=boom")
