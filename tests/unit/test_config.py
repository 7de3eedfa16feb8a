"""The settings loader: precedence, parsing, validation messages, and secrets kept out of errors."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.redaction import mask_patterns
from exporter.settings import (
    SETTINGS,
    ConfigError,
    Kind,
    Settings,
    check_config_file,
    load_settings,
    parse_duration,
    parse_listen_address,
)
from exporter.settings.reference import reference_tables

PASSWORD = "hunter2-S3cret"
DSN_WITH_PASSWORD = f"postgresql://app:{PASSWORD}@db.example:5432/queue"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def write(tmp_path: Path, text: str, name: str = "config.yml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def load_text(tmp_path: Path, text: str) -> Settings:
    return load_settings(write(tmp_path, text), {}, {})


def config_error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_text(tmp_path, text)
    return str(info.value)


# --- parse_duration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("15s", 15.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1m30s500ms", 90.5),
        ("1d", 86400.0),
        ("1.5s", 1.5),
        ("10", 10.0),
        ("0.25", 0.25),
        (" 5s ", 5.0),
        (7, 7.0),
        (2.5, 2.5),
        ("0", 0.0),
    ],
)
def test_parse_duration_accepts_units_and_plain_seconds(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("fast", "expected a duration such as 500ms, 15s or 2m, got 'fast'"),
        ("", "expected a duration"),
        ("-5s", "must not be negative"),
        ("-3", "must not be negative"),
        (-1, "must not be negative"),
        ("5x", "expected a duration"),
        ("s", "expected a duration"),
        ("1e3", "expected a duration"),
        ("nan", "expected a duration"),
        ("inf", "expected a duration"),
        (math.inf, "must be finite"),
        (math.nan, "must be finite"),
        ("1" * 400, "must be finite"),
        (True, "expected a duration"),
    ],
)
def test_parse_duration_rejects_negative_empty_and_garbage(text: str | float, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_duration(text)


# --- Mistakes in a file name the field --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("colect:\n  interval: 5s\n", "colect: unknown section (did you mean collect?)"),
        (
            "collect:\n  intervall: 5s\n",
            "collect.intervall: unknown setting (did you mean collect.interval?)",
        ),
        (
            "database:\n  tabel: job\n",
            "database.tabel: unknown setting (did you mean database.table?)",
        ),
        ("collect:\n  statement-timeout: 5s\n", "did you mean collect.statement_timeout?"),
        (
            "collect:\n  interval: fast\n",
            "collect.interval: expected a duration such as 500ms, 15s or 2m, got 'fast'",
        ),
        ("collect:\n  interval: -5\n", "collect.interval: must not be negative"),
        ("collect:\n  interval: 0\n", "collect.interval: must be greater than 0"),
        ("collect:\n  interval: [1, 2]\n", "collect.interval: expected a duration"),
        (
            "collect:\n  done_count: maybe\n",
            "collect.done_count: expected true or false, got 'maybe'",
        ),
        ("collect:\n  max_job_types: many\n", "collect.max_job_types: expected an integer"),
        ("collect:\n  max_job_types: 2.5\n", "collect.max_job_types: expected an integer"),
        ("collect:\n  max_job_types: 0\n", "collect.max_job_types: must be at least 1"),
        (
            "database:\n  max_connections: 11\n",
            "database.max_connections: must be from 1 to 10, got 11",
        ),
        ("database:\n  max_connections: -1\n", "database.max_connections: must not be negative"),
        ("database:\n  table: 'job; drop table x'\n", "database.table: expected a table name"),
        ("database:\n  table: 5\n", "database.table: expected a string, got 5"),
        ("collect: 5\n", "collect: expected a mapping of settings, got 5"),
        (
            "collect:\n  duration_buckets: [1, 5, 2]\n",
            "collect.duration_buckets: bucket bounds must be strictly increasing",
        ),
        (
            "collect:\n  duration_buckets: [1, 1]\n",
            "collect.duration_buckets: bucket bounds must be strictly increasing",
        ),
        (
            "collect:\n  wait_buckets: [0, 1]\n",
            "collect.wait_buckets: bucket bounds must be positive",
        ),
        ("collect:\n  wait_buckets: [1, .inf]\n", "collect.wait_buckets: must be finite"),
        (
            "collect:\n  wait_buckets: []\n",
            "collect.wait_buckets: expected at least one bucket bound",
        ),
        ("collect:\n  latency_buckets: {a: 1}\n", "collect.latency_buckets: expected a list"),
        (
            "collect:\n  job_types: {1: other}\n",
            "collect.job_types: job_type 1: name 'other' is reserved",
        ),
        (
            "collect:\n  job_types: {1: email, 2: email}\n",
            "collect.job_types: job_type 2: name 'email' is also used by 1",
        ),
        (
            "collect:\n  job_types: {1: 'send email'}\n",
            "collect.job_types: job_type 1: name 'send email' may hold only",
        ),
        (
            "collect:\n  job_types: {1: ''}\n",
            "collect.job_types: job_type 1: expected a non-empty name",
        ),
        (
            "collect:\n  job_types: {1: 3x}\n",
            "collect.job_types: job_type 1: name '3x' may hold only",
        ),
        (f"collect:\n  job_types: {{1: {'a' * 65}}}\n", "longer than 64 characters"),
        (
            "collect:\n  job_types: {x: email}\n",
            "collect.job_types: job_type must be an integer, got 'x'",
        ),
        ("collect:\n  job_types: [1, 2]\n", "collect.job_types: expected a mapping"),
        (
            "collect:\n  cost_ai_path: [metrics, '']\n",
            "collect.cost_ai_path: every key must be a non-empty string",
        ),
        ("collect:\n  cost_ai_path: 5\n", "collect.cost_ai_path: expected a list of keys"),
        (
            "collect:\n  timeout: 2s\n  statement_timeout: 5s\n",
            "collect.timeout: must be at least collect.statement_timeout",
        ),
        (
            "collect:\n  lock_timeout: 6s\n",
            "collect.lock_timeout: must not exceed collect.statement_timeout",
        ),
        (
            "collect:\n  deadline_error_prefix: ''\n",
            "collect.deadline_error_prefix: must not be empty",
        ),
        (
            "log:\n  level: verbose\n",
            "log.level: expected one of debug, info, warn, error, got 'verbose'",
        ),
        ("log:\n  format: text\n", "log.format: expected one of logfmt, json, got 'text'"),
        ("web:\n  listen_address: '10049'\n", "web.listen_address: expected host:port"),
        (
            "web:\n  listen_address: ':99999'\n",
            "web.listen_address: port must be a number from 0 to 65535",
        ),
        (
            "web:\n  listen_address: '::1:10049'\n",
            "web.listen_address: put an IPv6 address in brackets",
        ),
        (
            "web:\n  telemetry_path: metrics\n",
            "web.telemetry_path: expected a path such as /metrics",
        ),
        ("web:\n  telemetry_path: /healthz\n", "web.telemetry_path: /healthz is taken"),
        ("web:\n  telemetry_path: /\n", "web.telemetry_path: / is taken"),
        (
            "alerts:\n  cost_spike_factor: 2m\n",
            "alerts.cost_spike_factor: expected a number, got '2m'",
        ),
        ("alerts:\n  stuck_for: soon\n", "alerts.stuck_for: expected a duration"),
        (
            "alerts:\n  stuck_fr: 5m\n",
            "alerts.stuck_fr: unknown setting (did you mean alerts.stuck_for?)",
        ),
        ("[1, 2]\n", "the top level must be a mapping of sections"),
        ("just a string\n", "the top level must be a mapping"),
        ("collect:\n  interval: [1\n  timeout: 2\n", "YAML syntax error"),
    ],
)
def test_mistake_in_file_names_the_field(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in config_error(tmp_path, text)


def test_every_mistake_is_reported_at_once(tmp_path: Path) -> None:
    message = config_error(
        tmp_path, "collect:\n  interval: fast\n  timeout: slow\nlog:\n  lvl: 1\n"
    )
    assert "collect.interval:" in message
    assert "collect.timeout:" in message
    assert "log.lvl: unknown setting" in message


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "collect:\n  interval: 15s\n  timeout: [1\n  x: y\n")
    with pytest.raises(ConfigError, match=re.escape(f"{path}:4:")):
        load_settings(path, {}, {})


def test_unreadable_and_missing_file_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yml")
    with pytest.raises(ConfigError, match=re.escape(f"{missing}: cannot read")):
        load_settings(missing, {}, {})
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(str(tmp_path), {}, {})  # a directory
    binary = tmp_path / "binary.yml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="not a UTF-8 text file"):
        load_settings(str(binary), {}, {})


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    defaults = load_settings(None, {}, {})
    assert load_text(tmp_path, "") == defaults
    assert load_text(tmp_path, "collect:\n") == defaults
    (queue,) = defaults.queues
    assert queue.name == "default"  # no DSN to take a database name from


def test_a_full_file_is_parsed_into_typed_values(tmp_path: Path) -> None:
    loaded = load_text(
        tmp_path,
        """
database:
  dsn: postgresql://app@db:5432/queue
  table: queue.job
  max_connections: 3
collect:
  interval: 1m30s
  timeout: 20s
  statement_timeout: 10s
  lock_timeout: 500ms
  staleness_limit: 5m
  done_count: true
  job_types: {1: send_email, 2: scrape}
  cost_ai_path: metrics.cost.ai
  duration_path: [metrics, "took.ms"]
  duration_buckets: [0.5, 1, 2m]
web:
  listen_address: "[::1]:9000"
  telemetry_path: /probe/metrics
log:
  level: DEBUG
  format: json
alerts:
  cost_budget_usd_per_hour: 12.5
  stuck_for: 10m
""",
    )
    assert loaded.queues[0].database.dsn == "postgresql://app@db:5432/queue"
    assert loaded.queues[0].database.table == "queue.job"
    assert loaded.queues[0].database.max_connections == 3
    assert loaded.queues[0].collect.interval == 90.0
    assert loaded.queues[0].collect.lock_timeout == 0.5
    assert loaded.queues[0].collect.staleness_limit == 300.0
    assert loaded.queues[0].collect.done_count is True
    assert loaded.queues[0].collect.job_types == {1: "send_email", 2: "scrape"}
    assert loaded.queues[0].collect.cost_ai_path == ("metrics", "cost", "ai")
    assert loaded.queues[0].collect.duration_path == ("metrics", "took.ms")
    assert loaded.queues[0].collect.duration_buckets == (0.5, 1.0, 120.0)
    assert loaded.web.listen_address == ("[::1]:9000",)
    assert loaded.log.level == "debug"
    assert loaded.log.format == "json"
    assert loaded.alerts.cost_budget_usd_per_hour == 12.5
    assert loaded.alerts.stuck_for == 600.0


# --- Precedence -------------------------------------------------------------------------------


FILE = """
collect:
  interval: 30s
  statement_timeout: 4s
web:
  listen_address: ":9001"
log:
  level: warn
"""


def test_flag_beats_environment_beats_file_beats_default(tmp_path: Path) -> None:
    path = write(tmp_path, FILE)
    environ = {
        "JOBQUEUE_EXPORTER_COLLECT_INTERVAL": "20s",
        "JOBQUEUE_EXPORTER_WEB_LISTEN_ADDRESS": ":9002",
        "JOBQUEUE_EXPORTER_COLLECT_STATEMENT_TIMEOUT": "3s",
    }
    flags = {"collect.interval": "10s", "--collect.statement-timeout": "2s"}
    loaded = load_settings(path, environ, flags)
    assert loaded.queues[0].collect.interval == 10.0  # flag over env and file
    assert loaded.queues[0].collect.statement_timeout == 2.0  # flag (dashed) over env and file
    assert loaded.web.listen_address == (":9002",)  # env over file
    assert loaded.log.level == "warn"  # file over default
    assert loaded.queues[0].collect.timeout == 10.0  # default

    only_file = load_settings(path, {}, {})
    assert only_file.queues[0].collect.interval == 30.0
    assert only_file.web.listen_address == (":9001",)
    assert load_settings(None, {}, {}).queues[0].collect.interval == 15.0


def test_environment_and_flags_parse_every_kind(tmp_path: Path) -> None:
    environ = {
        "JOBQUEUE_EXPORTER_COLLECT_DONE_COUNT": "true",
        "JOBQUEUE_EXPORTER_COLLECT_JOB_TYPES": "1=send_email, 2=scrape",
        "JOBQUEUE_EXPORTER_COLLECT_COST_TOTAL_PATH": "m.c.total",
        "JOBQUEUE_EXPORTER_COLLECT_WAIT_BUCKETS": "1,2,1m",
        "JOBQUEUE_EXPORTER_DATABASE_MAX_CONNECTIONS": "4",
        "JOBQUEUE_EXPORTER_WEB_CONFIG_FILE": "/etc/web.yml",
        "JOBQUEUE_EXPORTER_ALERTS_COST_SPIKE_FACTOR": "2.5",
    }
    flags = {"web.config.file": "/etc/other.yml", "collect.staleness-limit": ""}
    loaded = load_settings(None, environ, flags)
    assert loaded.queues[0].collect.done_count is True
    assert loaded.queues[0].collect.job_types == {1: "send_email", 2: "scrape"}
    assert loaded.queues[0].collect.cost_total_path == ("m", "c", "total")
    assert loaded.queues[0].collect.wait_buckets == (1.0, 2.0, 60.0)
    assert loaded.queues[0].database.max_connections == 4
    assert loaded.web.config_file == "/etc/other.yml"
    assert loaded.alerts.cost_spike_factor == 2.5
    assert loaded.queues[0].collect.staleness_limit is None


def test_environment_value_error_names_the_dotted_key() -> None:
    with pytest.raises(ConfigError, match=r"^collect\.interval: expected a duration"):
        load_settings(None, {"JOBQUEUE_EXPORTER_COLLECT_INTERVAL": "often"}, {})


def test_unknown_flag_key_is_an_error_with_suggestion() -> None:
    with pytest.raises(ConfigError, match=r"collect\.intervall: unknown setting \(did you mean"):
        load_settings(None, {}, {"--collect.intervall": "5s"})


# --- DSN sources and the password file ------------------------------------------------------


def test_dsn_sources_in_order(tmp_path: Path) -> None:
    path = write(tmp_path, "database:\n  dsn: postgresql://file@h/db\n")
    environ = {
        "JOBQUEUE_EXPORTER_DSN": "postgresql://env@h/db",
        "DATABASE_URL": "postgres://url@h/db",
    }
    flag = {"database.dsn": "postgresql://flag@h/db"}
    assert load_settings(path, environ, flag).queues[0].database.dsn == "postgresql://flag@h/db"
    assert load_settings(path, environ, {}).queues[0].database.dsn == "postgresql://env@h/db"
    assert load_settings(path, {"DATABASE_URL": "postgres://url@h/db"}, {}).queues[
        0
    ].database.dsn == ("postgres://url@h/db")
    assert (
        load_settings(path, {"DATABASE_URL": ""}, {}).queues[0].database.dsn
        == "postgresql://file@h/db"
    )
    assert load_settings(None, {}, {}).queues[0].database.dsn is None


def test_database_url_is_the_fallback_without_a_file() -> None:
    loaded = load_settings(None, {"DATABASE_URL": DSN_WITH_PASSWORD}, {})
    assert loaded.queues[0].database.dsn == DSN_WITH_PASSWORD
    assert loaded.queues[0].database.password == PASSWORD


def test_password_file_is_injected_percent_encoded(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("p@ss:w/rd\n", encoding="utf-8")
    loaded = load_settings(
        None,
        {"JOBQUEUE_EXPORTER_DSN": "postgresql://app@db:5432/queue?sslmode=disable"},
        {"database.password-file": str(secret)},
    )
    assert (
        loaded.queues[0].database.dsn
        == "postgresql://app:p%40ss%3Aw%2Frd@db:5432/queue?sslmode=disable"
    )
    assert loaded.queues[0].database.password == "p@ss:w/rd"
    assert "p@ss" not in repr(loaded)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda d: str(d / "missing"), "database.password_file: cannot read"),
        (lambda d: str(d), "database.password_file: cannot read"),  # a directory
        (lambda d: _file(d, "\n"), "database.password_file: "),
    ],
)
def test_password_file_missing_unreadable_or_empty_names_the_field(
    tmp_path: Path, make: object, expected: str
) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_settings(
            None, {"DATABASE_URL": "postgresql://app@h/db"}, {"database.password_file": path}
        )


def _file(directory: Path, text: str) -> str:
    path = directory / "secret"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_password_in_dsn_and_password_file_is_an_error(tmp_path: Path) -> None:
    secret = _file(tmp_path, "other\n")
    with pytest.raises(ConfigError) as info:
        load_settings(None, {"DATABASE_URL": DSN_WITH_PASSWORD}, {"database.password_file": secret})
    assert "database.password_file: the DSN already has a password" in str(info.value)
    assert PASSWORD not in str(info.value)


def test_password_never_in_config_error_or_repr(tmp_path: Path) -> None:
    loaded = load_settings(None, {"DATABASE_URL": DSN_WITH_PASSWORD}, {})
    assert PASSWORD not in repr(loaded)
    assert PASSWORD not in str(loaded.queues[0].database)
    assert "app:***@db.example" in repr(loaded)

    # A bad DSN, a DSN of the wrong type, and a YAML error on the DSN's own line.
    texts = [
        f"database:\n  dsn: 'mysql://app:{PASSWORD}@h/db'\n",
        f"database:\n  dsn: 'host=h password={PASSWORD}'\n",
        f"database:\n  dsn: ['{DSN_WITH_PASSWORD}']\n",
        f"database:\n  dsn: {DSN_WITH_PASSWORD}\n  table: [\n",
        f"database:\n  dsn: {DSN_WITH_PASSWORD}: x\n",
        f"database:\n  dsn: {DSN_WITH_PASSWORD}\n  dns: {DSN_WITH_PASSWORD}\n",
        f"database:\n  dsn: '{DSN_WITH_PASSWORD}'\ncollect:\n  interval: fast\n",
    ]
    for text in texts:
        message = config_error(tmp_path, text)
        assert PASSWORD not in message, message
        assert re.search(r"database\.|collect\.interval|YAML syntax error", message), message
    with pytest.raises(ConfigError) as info:
        load_settings(None, {"JOBQUEUE_EXPORTER_DSN": f"http://a:{PASSWORD}@h"}, {})
    assert str(info.value).startswith("database.dsn: expected a URL")
    assert PASSWORD not in str(info.value)


@pytest.mark.parametrize(
    ("dsn", "redacted"),
    [
        ("postgresql://app:secret@h:5432/db", "postgresql://app:***@h:5432/db"),
        ("postgres://app:p@ss@h/db", "postgres://app:***@h/db"),
        ("postgresql://app@h/db", "postgresql://app@h/db"),
        (
            "postgresql://h/db?password=secret&sslmode=require",
            "postgresql://h/db?password=***&sslmode=require",
        ),
        ("host=h user=app password=secret dbname=q", "host=h user=app password=*** dbname=q"),
        ("host=h password = 'sec ret\\' x' dbname=q", "host=h password = *** dbname=q"),
        ("PASSWORD=secret", "PASSWORD=***"),
    ],
)
def test_dsn_shaped_passwords_are_masked_in_url_and_key_value_form(dsn: str, redacted: str) -> None:
    assert mask_patterns(dsn) == redacted


# --- Smaller parsers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "parsed"),
    [
        (":10049", ("", 10049)),
        ("127.0.0.1:10049", ("127.0.0.1", 10049)),
        ("[::1]:10049", ("::1", 10049)),
        ("localhost:0", ("localhost", 0)),
    ],
)
def test_listen_address_forms(address: str, parsed: tuple[str, int]) -> None:
    assert parse_listen_address(address) == parsed


@pytest.mark.parametrize("address", ["10049", ":", ":x", "[::1]10049", "[zz]:1", "a b:1", ":-1"])
def test_bad_listen_addresses_are_rejected(address: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        parse_listen_address(address)


def test_check_config_file_ignores_the_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "collect:\n  interval: 5s\n")
    assert check_config_file(path).queues[0].collect.interval == 5.0
    with pytest.raises(ConfigError, match=r"collect\.interval"):
        check_config_file(write(tmp_path, "collect:\n  interval: x\n", "bad.yml"))


def test_every_setting_is_declared_with_a_kind_and_help_and_documented() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    for key, setting in SETTINGS.items():
        assert isinstance(setting.kind, Kind), key
        assert setting.spec.help.strip(), f"{key} has no help text"
        assert f"`{key}`" in docs, f"{key} is missing from docs/configuration.md"
        assert f"`{setting.flag}`" in docs, f"{setting.flag} is missing from docs"
        assert f"`{setting.env}`" in docs, f"{setting.env} is missing from docs"
    assert reference_tables() in docs, (
        "regenerate docs/configuration.md's tables with exporter.settings.reference"
    )


def _example(heading: str) -> str:
    """The first YAML block under a heading of docs/configuration.md."""
    docs = DOCS.read_text(encoding="utf-8")
    section = docs.split(f"\n## {heading}\n", 1)[1]
    return section.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_the_documented_example_file_loads(tmp_path: Path) -> None:
    secret = _file(tmp_path, "example-password\n")
    example = _example("Example").replace("/run/secrets/jobqueue-exporter-db-password", secret)
    loaded = load_text(tmp_path, example)
    assert loaded.queues[0].collect.job_types == {1: "send_email", 2: "scrape_prices"}
    assert loaded.queues[0].database.password == "example-password"
    assert loaded.alerts.cost_budget_usd_per_hour == 20.0


def test_the_documented_queues_example_loads_with_inheritance(tmp_path: Path) -> None:
    orders_pw, billing_pw = _file(tmp_path, "orders-pw\n"), str(tmp_path / "billing")
    Path(billing_pw).write_text("billing-pw\n", encoding="utf-8")
    example = _example("One queue or several")
    example = example.replace("/run/secrets/orders-password", orders_pw)
    example = example.replace("/run/secrets/billing-password", billing_pw)
    orders, billing = load_text(tmp_path, example).queues
    assert (orders.name, billing.name) == ("orders", "billing")
    assert (orders.database.password, billing.database.password) == ("orders-pw", "billing-pw")
    assert (orders.database.table, billing.database.table) == ("job", "billing.job")
    assert (orders.collect.interval, billing.collect.interval) == (15.0, 30.0)


def test_entries_inherit_the_top_level_dsn_password_file_and_flags(tmp_path: Path) -> None:
    secret = _file(tmp_path, "pw\n")
    path = write(
        tmp_path,
        "database:\n  dsn: postgresql://app@h/shared\n"
        f"  password_file: {secret}\n"
        "queues:\n  - name: mail\n    database: {table: mail.job}\n"
        "  - name: crawl\n    database: {table: crawl.job}\n    collect: {timeout: 30s}\n",
    )
    mail, crawl = load_settings(path, {}, {"--collect.interval": "1s"}).queues
    assert mail.database.dsn == crawl.database.dsn == "postgresql://app:pw@h/shared"
    assert (mail.database.table, crawl.database.table) == ("mail.job", "crawl.job")
    assert (mail.collect.interval, crawl.collect.interval) == (1.0, 1.0)
    assert (mail.collect.timeout, crawl.collect.timeout) == (10.0, 30.0)


def test_a_flag_or_variable_is_above_every_entry_but_an_entry_says_which_queue_it_is(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        "collect:\n  interval: 30s\n"
        "queues:\n"
        "  - name: mail\n    collect: {interval: 5s, timeout: 30s}\n"
        "  - name: crawl\n    database: {dsn: 'postgresql://u@crawl-db/crawl', table: c.job}\n"
        "    collect: {logical_slot: crawl_slot}\n",
    )
    environ = {"JOBQUEUE_EXPORTER_DSN": "postgresql://u@shared/app"}
    flags = {
        "--collect.interval": "1s",
        "--database.table": "shared.job",
        "--collect.logical-slot": "flag_slot",
    }
    mail, crawl = load_settings(path, environ, flags).queues
    # The case: the interval a flag gives is every queue's, the entry's 5s included.
    assert (mail.collect.interval, crawl.collect.interval) == (1.0, 1.0)
    assert (mail.collect.timeout, crawl.collect.timeout) == (30.0, 10.0)
    # Which queue an entry is stays the entry's own; the flag fills in where it names none.
    assert (mail.database.dsn, crawl.database.dsn) == (
        "postgresql://u@shared/app", "postgresql://u@crawl-db/crawl",
    )  # fmt: skip
    assert (mail.database.table, crawl.database.table) == ("shared.job", "c.job")
    assert (mail.collect.logical_slot, crawl.collect.logical_slot) == ("flag_slot", "crawl_slot")
    from_environment = load_settings(path, {"JOBQUEUE_EXPORTER_COLLECT_INTERVAL": "2s"}, {})
    assert [q.collect.interval for q in from_environment.queues] == [2.0, 2.0]
    from_file = load_settings(path, {}, {})
    assert [q.collect.interval for q in from_file.queues] == [5.0, 30.0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("queues: []\n", "queues: expected a non-empty list of queues"),
        ("queues:\n  - database: {dsn: 'postgresql://a@h/x'}\n", "queues[0].name: every queue"),
        (
            "queues:\n  - {name: a}\n  - {name: a}\n",
            "queues[1].name: 'a' is also the name of queues[0]",
        ),
        ("queues:\n  - {name: 'a b'}\n", "queues[0].queue.name: expected a name"),
        ("queues:\n  - {name: a, web: {}}\n", "queues[0].web: unknown key"),
        (
            "queues:\n  - name: a\n    collect: {intervall: 1s}\n",
            "queues[0].collect.intervall: unknown setting (did you mean collect.interval?)",
        ),
        (
            "queues:\n  - name: a\n    collect: {timeout: 1s, statement_timeout: 2s}\n",
            "queues[0].collect.timeout: must be at least collect.statement_timeout",
        ),
        ("queues: {a: 1}\n", "queues: expected a non-empty list"),
    ],
)
def test_mistakes_in_the_queues_list_name_the_entry(
    tmp_path: Path, text: str, expected: str
) -> None:
    assert expected in config_error(tmp_path, text)


def test_queue_name_flag_names_one_queue_and_is_refused_with_a_list(tmp_path: Path) -> None:
    path = write(tmp_path, "queues:\n  - {name: a}\n")
    with pytest.raises(ConfigError, match=r"queue\.name: names one queue"):
        load_settings(path, {}, {"--queue.name": "b"})
    single = load_settings(None, {"DATABASE_URL": "postgresql://u@h/app"}, {})
    assert single.queues[0].name == "app"  # the database name from the DSN
    named = load_settings(None, {"DATABASE_URL": "postgresql://u@h/app"}, {"queue.name": "jobs"})
    assert named.queues[0].name == "jobs"


def test_a_river_queue_is_labelled_river_unless_it_is_named() -> None:
    env = {"DATABASE_URL": "postgresql://u@h/app"}
    river = load_settings(None, env, {"--queue.profile": "river"})
    assert river.queues[0].name == "river"  # not the app's database
    named = load_settings(None, env, {"--queue.profile": "river", "--queue.name": "jobs"})
    assert named.queues[0].name == "jobs"
    oban = load_settings(None, env, {"--queue.profile": "oban"})
    assert oban.queues[0].name == "app"  # presets without a name of their own: the database


def test_a_key_written_twice_is_an_error_naming_it_and_its_lines(tmp_path: Path) -> None:
    message = config_error(tmp_path, "collect:\n  interval: 5s\n  timeout: 9s\n  interval: 6s\n")
    assert "duplicate key 'interval' (first at line 2)" in message
    assert ":4:" in message  # the second one's line
    message = config_error(tmp_path, "log: {level: info}\nlog: {format: json}\n")
    assert "duplicate key 'log' (first at line 1)" in message


@pytest.mark.parametrize("written", ["1h", "3600", 3600, "60m"])
def test_failure_ratio_window_and_for_are_durations(tmp_path: Path, written: object) -> None:
    loaded = load_text(
        tmp_path, f"alerts:\n  failure_ratio_window: {written}\n  failure_ratio_for: 15m\n"
    )
    assert loaded.alerts.failure_ratio_window == 3600.0
    assert loaded.alerts.failure_ratio_for == 900.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("alerts:\n  failure_ratio_threshold: 1.5\n", "expected a ratio from 0 to 1"),
        ("alerts:\n  collection_slow_ratio: 2m\n", "expected a number"),
        ("alerts:\n  cost_spike_floor_usd: cheap\n", "expected a number"),
    ],
)
def test_ratios_and_dollars_have_kinds_of_their_own(
    tmp_path: Path, text: str, expected: str
) -> None:
    assert expected in config_error(tmp_path, text)
    ratio = load_text(tmp_path, "alerts:\n  failure_ratio_threshold: 25%\n")
    assert ratio.alerts.failure_ratio_threshold == 0.25
    usd = load_text(tmp_path, "alerts:\n  cost_spike_floor_usd: $7.5\n")
    assert usd.alerts.cost_spike_floor_usd == 7.5


def test_listen_address_repeats(tmp_path: Path) -> None:
    loaded = load_settings(None, {}, {"web.listen_address": "127.0.0.1:1,[::1]:1"})
    assert loaded.web.listen_address == ("127.0.0.1:1", "[::1]:1")
    listed = load_text(tmp_path, "web:\n  listen_address: [':2', '[::]:3']\n")
    assert listed.web.listen_address == (":2", "[::]:3")
    assert "is listed twice" in config_error(tmp_path, "web:\n  listen_address: [':2', ':2']\n")


# --- Property: the loader raises nothing but ConfigError ------------------------------------

_KNOWN_SECTIONS = sorted({s.section for s in SETTINGS.values()} | {"queues"})
_KNOWN_NAMES = sorted({s.name for s in SETTINGS.values()})
_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | _text
    | st.sampled_from(
        [
            "15s",
            "1h30m",
            "-5s",
            "0",
            "true",
            "1=a,2=b",
            "0.5,1,2",
            ":10049",
            "[::1]:1",
            "/metrics",
            "job",
            "info",
            "json",
            DSN_WITH_PASSWORD,
            "host=h password=x",
            "a.b",
        ]
    )
)
_values = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.integers() | _text | st.sampled_from(_KNOWN_NAMES), children, max_size=4
        )
    ),
    max_leaves=12,
)
_sections = st.dictionaries(st.sampled_from(_KNOWN_NAMES) | _text, _values, max_size=6)
_documents = st.dictionaries(
    st.sampled_from(_KNOWN_SECTIONS) | _text | st.integers(),
    st.none() | _sections | _values,
    max_size=5,
)
_flag_maps = st.dictionaries(
    st.sampled_from(sorted(SETTINGS)), _text | _scalars.map(str), max_size=4
)


def _load_or_config_error(path: str | None, environ: dict[str, str], flags: dict[str, str]) -> None:
    message = ""
    try:
        loaded = load_settings(path, environ, flags)
    except ConfigError as exc:
        message = str(exc)
    else:
        assert isinstance(loaded, Settings)
        assert PASSWORD not in repr(loaded)
        return
    assert message
    assert PASSWORD not in message


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(document=_documents)
def test_random_documents_give_settings_or_config_error(
    tmp_path_factory: pytest.TempPathFactory, document: dict[object, object]
) -> None:
    path = tmp_path_factory.mktemp("doc") / "config.yml"
    path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), "utf-8")
    _load_or_config_error(str(path), {}, {})


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80))
def test_random_yaml_text_gives_settings_or_config_error(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    path = tmp_path_factory.mktemp("text") / "config.yml"
    path.write_text(text, "utf-8")
    _load_or_config_error(str(path), {}, {})


@settings(max_examples=300)
@given(flags=_flag_maps, env=_flag_maps)
def test_random_flags_and_environment_give_settings_or_config_error(
    flags: dict[str, str], env: dict[str, str]
) -> None:
    environ = {SETTINGS[key].env: value for key, value in env.items()}
    _load_or_config_error(None, environ, flags)


def test_password_file_name_with_a_nul_byte_is_a_config_error() -> None:
    # Found by the property test below: open() raises ValueError, not OSError, for it.
    with pytest.raises(ConfigError, match=r"database\.password_file"):
        load_settings(None, {"JOBQUEUE_EXPORTER_DATABASE_PASSWORD_FILE": "a\x00b"}, {})


# --- queue.profile --------------------------------------------------------------------------


def test_each_queue_entry_names_its_profile_and_the_default_is_the_job_table(
    tmp_path: Path,
) -> None:
    loaded = load_text(
        tmp_path,
        "queues:\n"
        "  - name: own\n    database: {dsn: 'postgresql://x@h/a'}\n"
        "  - name: tasks\n    profile: procrastinate\n    database: {dsn: 'postgresql://x@h/b'}\n"
        "  - name: boss\n    profile: pgboss\n    database: {dsn: 'postgresql://x@h/c'}\n",
    )
    assert [(q.name, q.profile) for q in loaded.queues] == [
        ("own", "default"), ("tasks", "procrastinate"), ("boss", "pgboss"),
    ]  # fmt: skip


def test_an_unknown_profile_is_an_error_naming_the_entry_and_the_field(tmp_path: Path) -> None:
    error = config_error(
        tmp_path,
        "queues:\n  - name: a\n    database: {dsn: 'postgresql://x@h/a'}\n"
        "  - name: b\n    profile: celery\n    database: {dsn: 'postgresql://x@h/b'}\n",
    )
    assert "queues[1].queue.profile: expected one of default, procrastinate, pgqueuer, " in error
    assert "got 'celery'" in error


def test_the_profile_flag_and_environment_set_the_single_queue_profile() -> None:
    dsn = {"JOBQUEUE_EXPORTER_DSN": "postgresql://x@h/db"}
    by_flag = load_settings(None, dsn, {"--queue.profile": "pgqueuer"})
    assert by_flag.queues[0].profile == "pgqueuer"
    by_env = load_settings(None, {**dsn, "JOBQUEUE_EXPORTER_QUEUE_PROFILE": "pgboss"}, {})
    assert by_env.queues[0].profile == "pgboss"
    # The library spells itself pg-boss, and so may the user.
    by_name = load_settings(None, dsn, {"--queue.profile": "pg-boss"})
    assert by_name.queues[0].profile == "pgboss"
    by_module = load_settings(None, dsn, {"--queue.profile": "graphile_worker"})
    assert by_module.queues[0].profile == "graphile-worker"
    with pytest.raises(ConfigError, match=r"queue\.profile: expected one of"):
        load_settings(None, dsn, {"--queue.profile": "sidekiq"})


def test_a_good_job_queue_is_labelled_good_job_unless_it_names_itself() -> None:
    dsn = {"JOBQUEUE_EXPORTER_DSN": "postgresql://x@h/shop"}
    spelled = load_settings(None, dsn, {"--queue.profile": "good_job"})  # the gem's spelling
    assert (spelled.queues[0].profile, spelled.queues[0].name) == ("good-job", "good_job")
    named = load_settings(None, dsn, {"--queue.profile": "good-job", "--queue.name": "rails"})
    assert named.queues[0].name == "rails"
    assert load_settings(None, dsn, {"--queue.profile": "oban"}).queues[0].name == "shop"


def test_the_presets_guide_example_loads(tmp_path: Path) -> None:
    guide = (DOCS.parent / "presets.md").read_text(encoding="utf-8")
    example = guide.split("```yaml\n", 1)[1].split("```", 1)[0]
    loaded = load_text(tmp_path, example)
    assert [q.profile for q in loaded.queues] == [
        "default", "procrastinate", "pgqueuer", "pgboss", "django-tasks", "oban",
        "graphile-worker", "solid-queue", "good-job", "river",
    ]  # fmt: skip
    media = next(q for q in loaded.queues if q.name == "media").collect
    assert (media.interval, media.heartbeat_timeout) == (15.0, 300.0)
