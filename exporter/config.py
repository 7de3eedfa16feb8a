"""Settings as frozen dataclasses, and the loader that turns YAML + environment + flags into them.

Precedence is flag > environment > file > default. Every setting has a dotted key
(``collect.interval``) that is at once its YAML path, its flag (``--collect.interval``)
and its environment variable (``JOBQUEUE_EXPORTER_COLLECT_INTERVAL``).
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import ipaddress
import math
import re
import types
import typing
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

import yaml

DEFAULT_DURATION_BUCKETS: tuple[float, ...] = (
    0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200,
)  # fmt: skip
DEFAULT_WAIT_BUCKETS: tuple[float, ...] = (
    0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
)  # fmt: skip
DEFAULT_LATENCY_BUCKETS: tuple[float, ...] = (
    1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200,
)  # fmt: skip


class ConfigError(Exception):
    """A setting is missing, malformed or unknown; the message names the field."""


@dataclass(frozen=True)
class DatabaseSettings:
    """Where the queue lives and how the exporter connects to it."""

    dsn: str | None = None
    password_file: str | None = None
    table: str = "job"
    max_connections: int = 2
    connect_timeout: float = 5.0

    def __repr__(self) -> str:
        # The DSN may carry the password; repr() ends up in logs and tracebacks.
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "dsn" and value is not None:
                value = redact_dsn(value)
            parts.append(f"{f.name}={value!r}")
        return f"DatabaseSettings({', '.join(parts)})"

    @property
    def password(self) -> str | None:
        """The password inside the DSN (decoded), for the log redactor; None when there is none."""
        return dsn_password(self.dsn) if self.dsn is not None else None


@dataclass(frozen=True)
class CollectSettings:
    """What the collection loop reads and how often."""

    interval: float = 15.0
    timeout: float = 10.0
    statement_timeout: float = 5.0
    lock_timeout: float = 1.0
    stuck_threshold: float = 600.0
    commit_lag_tolerance: float = 30.0
    # None means three intervals.
    staleness_limit: float | None = None
    done_count: bool = False
    max_job_types: int = 50
    job_types: dict[int, str] = field(default_factory=dict)
    deadline_error_prefix: str = "JobDeadlineExceeded"
    lease_expired_marker: str = " [lease-expired reclaim]"
    duration_path: tuple[str, ...] = ("metrics", "duration_ms")
    cost_ai_path: tuple[str, ...] = ("metrics", "cost", "ai_usd")
    cost_proxy_path: tuple[str, ...] = ("metrics", "cost", "proxy_usd")
    cost_total_path: tuple[str, ...] = ("metrics", "cost", "total_usd")
    duration_buckets: tuple[float, ...] = DEFAULT_DURATION_BUCKETS
    wait_buckets: tuple[float, ...] = DEFAULT_WAIT_BUCKETS
    latency_buckets: tuple[float, ...] = DEFAULT_LATENCY_BUCKETS

    @property
    def effective_staleness_limit(self) -> float:
        """Seconds of failed collections after which queue gauges are withdrawn."""
        return self.staleness_limit if self.staleness_limit is not None else 3 * self.interval


@dataclass(frozen=True)
class WebSettings:
    """The HTTP side: where to listen and what to serve."""

    listen_address: str = ":10049"
    telemetry_path: str = "/metrics"
    config_file: str | None = None


@dataclass(frozen=True)
class LogSettings:
    """Log level and format (logfmt or json)."""

    level: str = "info"
    format: str = "logfmt"


@dataclass(frozen=True)
class AlertSettings:
    """Thresholds and ``for:`` durations of the shipped alert rules (seconds, USD, ratios)."""

    selector: str = 'job="jobqueue-exporter"'
    runbook_base_url: str = (
        "https://github.com/jobqueue-exporter/jobqueue-exporter/blob/main/docs/runbooks.md"
    )
    evaluation_interval: float = 30.0
    stuck_for: float = 300.0
    reaper_not_running_after: float = 600.0
    reaper_not_running_for: float = 300.0
    deadline_kills_warning_per_hour: float = 5.0
    deadline_kills_critical_per_hour: float = 30.0
    deadline_kills_window: float = 3600.0
    deadline_kills_for: float = 600.0
    cost_spike_factor: float = 3.0
    cost_spike_floor_usd: float = 5.0
    cost_spike_baseline_days: int = 7
    cost_spike_for: float = 900.0
    cost_budget_usd_per_hour: float | None = None
    cost_budget_for: float = 300.0
    backlog_stale_after: float = 900.0
    backlog_stale_for: float = 300.0
    no_progress_window: float = 900.0
    no_progress_for: float = 300.0
    failure_ratio_threshold: float = 0.5
    failure_ratio_min_attempts: float = 20.0
    failure_ratio_window: float = 3600.0
    failure_ratio_for: float = 900.0
    dead_letter_per_hour: float = 10.0
    dead_letter_window: float = 3600.0
    dead_letter_for: float = 900.0
    database_unreachable_for: float = 180.0
    exporter_down_for: float = 300.0
    collection_slow_ratio: float = 0.8
    collection_slow_for: float = 900.0
    missing_index_for: float = 3600.0
    # Queue alerts lose their series once the exporter withdraws stale gauges (3 intervals)
    # or stops being scraped, long before JobQueueDatabaseUnreachable or JobQueueExporterDown
    # fires and inhibits them: keep_firing_for: holds them until then (0 turns it off).
    keep_firing_for: float | None = None

    @property
    def effective_keep_firing_for(self) -> float:
        """keep_firing_for: of the queue alerts; unset, the longer blinding for: plus 2m."""
        if self.keep_firing_for is not None:
            return self.keep_firing_for
        # Two minutes cover the evaluation and scrape intervals on both sides of the gap.
        return max(self.database_unreachable_for, self.exporter_down_for) + 120.0


@dataclass(frozen=True)
class Settings:
    """Everything the exporter needs to run, resolved once at start-up."""

    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    collect: CollectSettings = field(default_factory=CollectSettings)
    web: WebSettings = field(default_factory=WebSettings)
    log: LogSettings = field(default_factory=LogSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)

    def __repr__(self) -> str:
        # A DSN pasted into the wrong setting must not print its password either.
        text = (
            f"Settings(database={self.database!r}, collect={self.collect!r}, web={self.web!r}, "
            f"log={self.log!r}, alerts={self.alerts!r})"
        )
        password = self.database.password
        return redact_dsn(text.replace(password, "***") if password else text)


# --- The loader -------------------------------------------------------------------------------

ENV_PREFIX = "JOBQUEUE_EXPORTER_"
DSN_ENV = "JOBQUEUE_EXPORTER_DSN"
DSN_FALLBACK_ENV = "DATABASE_URL"
CONFIG_FILE_ENV = "JOBQUEUE_EXPORTER_CONFIG_FILE"

SECTIONS: dict[str, type] = {
    "database": DatabaseSettings,
    "collect": CollectSettings,
    "web": WebSettings,
    "log": LogSettings,
    "alerts": AlertSettings,
}
LOG_LEVELS = ("debug", "info", "warn", "error")
LOG_FORMATS = ("logfmt", "json")
RESERVED_PATHS = ("/", "/healthz", "/readyz")
OTHER_JOB_TYPE = "other"

# Float settings whose names say they are not seconds; every other float is a duration.
_NOT_SECONDS = ("usd", "ratio", "factor", "per_hour", "attempts")
# Strings that may legitimately be empty (an empty selector matches every series).
_MAY_BE_EMPTY = frozenset({"alerts.selector"})
_SECRET_KEYS = frozenset({"database.dsn"})
_MAX_LABEL_NAME = 64
_PG_INT_MIN, _PG_INT_MAX = -(2**31), 2**31 - 1

# Flags whose Go-exporter spelling is not the dotted key with dashes.
_FLAG_NAMES = {"web.config_file": "--web.config.file"}
_FLAG_ALIASES = {name.removeprefix("--"): key for key, name in _FLAG_NAMES.items()}

_DURATION_EXAMPLE = "expected a duration such as 500ms, 15s or 2m"
_NUMBER = r"(?:\d+(?:\.\d+)?|\.\d+)"
_PLAIN_NUMBER_RE = re.compile(_NUMBER)
_DURATION_RE = re.compile(rf"(?:{_NUMBER}(?:ms|s|m|h|d))+")
_DURATION_PART_RE = re.compile(rf"({_NUMBER})(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_LABEL_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SQL_IDENT = r"[A-Za-z_][A-Za-z0-9_$]{0,62}"
_TABLE_RE = re.compile(rf"{_SQL_IDENT}(?:\.{_SQL_IDENT})?")
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?")
# scheme://user:password@ -- the password may hold unencoded '@', so take up to the last '@'
# before the host part begins (a '/' or whitespace).
_URL_USERINFO_RE = re.compile(r"(?P<pre>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*):(?P<pw>[^\s/]*)@")
_KV_PASSWORD_RE = re.compile(
    r"(?P<pre>password\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'?|[^\s&]+)", re.IGNORECASE
)


class Kind(enum.Enum):
    """How a setting's text or YAML value is parsed, derived from its field annotation."""

    STRING = "string"
    INTEGER = "integer"
    NUMBER = "number"
    DURATION = "duration"
    BOOLEAN = "boolean"
    JOB_TYPES = "job types"
    PATH = "JSON path"
    BUCKETS = "buckets"


@dataclass(frozen=True)
class SettingSpec:
    """One setting: its dotted key, flag, environment variable, kind and default."""

    section: str
    name: str
    kind: Kind
    optional: bool
    default: object

    @property
    def key(self) -> str:
        """The dotted key, which is also the YAML path."""
        return f"{self.section}.{self.name}"

    @property
    def flag(self) -> str:
        """The command-line flag, Go-exporter style (``--collect.statement-timeout``)."""
        return _FLAG_NAMES.get(self.key) or "--" + self.key.replace("_", "-")

    @property
    def env(self) -> str:
        """The environment variable that sets it."""
        if self.key == "database.dsn":
            return DSN_ENV
        return ENV_PREFIX + self.key.replace(".", "_").upper()


def _kind_of(name: str, hint: object) -> tuple[Kind, bool]:
    """Map a field annotation to a Kind, and whether None is allowed."""
    optional = False
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            optional, hint = True, rest[0]
            args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if hint is bool:
        return Kind.BOOLEAN, optional
    if hint is int:
        return Kind.INTEGER, optional
    if hint is float:
        not_seconds = any(word in name for word in _NOT_SECONDS)
        return (Kind.NUMBER if not_seconds else Kind.DURATION), optional
    if hint is str:
        return Kind.STRING, optional
    if origin is dict and args == (int, str):
        return Kind.JOB_TYPES, optional
    if origin is tuple and args == (str, ...):
        return Kind.PATH, optional
    if origin is tuple and args == (float, ...):
        return Kind.BUCKETS, optional
    raise TypeError(f"setting {name}: no parser for type {hint!r}")


def _default_of(f: dataclasses.Field[object]) -> object:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    raise TypeError(f"setting {f.name} has no default")


def _build_specs() -> dict[str, SettingSpec]:
    specs: dict[str, SettingSpec] = {}
    for section, cls in SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            kind, optional = _kind_of(f.name, hints[f.name])
            spec = SettingSpec(section, f.name, kind, optional, _default_of(f))
            specs[spec.key] = spec
    return specs


SPECS: dict[str, SettingSpec] = _build_specs()


# --- Durations, addresses and DSNs ----------------------------------------------------------


def parse_duration(text: str | float) -> float:
    """Seconds from ``500ms``, ``15s``, ``2m``, ``1h``, ``1h30m``, ``1d`` or a plain number."""
    if isinstance(text, bool):
        raise ValueError(f"{_DURATION_EXAMPLE}, got {text!r}")
    if isinstance(text, int | float):
        try:
            value = float(text)
        except OverflowError:
            raise ValueError(f"must be finite, got {_show(text)}") from None
    elif isinstance(text, str):
        stripped = text.strip()
        if _PLAIN_NUMBER_RE.fullmatch(stripped):
            value = float(stripped)
        elif _DURATION_RE.fullmatch(stripped):
            value = sum(
                float(number) * _UNIT_SECONDS[unit]
                for number, unit in _DURATION_PART_RE.findall(stripped)
            )
        elif stripped.startswith("-") and (
            _PLAIN_NUMBER_RE.fullmatch(stripped[1:]) or _DURATION_RE.fullmatch(stripped[1:])
        ):
            raise ValueError(f"must not be negative, got {_show(text)}")
        else:
            raise ValueError(f"{_DURATION_EXAMPLE}, got {_show(text)}")
    else:
        raise ValueError(f"{_DURATION_EXAMPLE}, got {_show(text)}")
    if not math.isfinite(value):
        raise ValueError(f"must be finite, got {_show(text)}")
    if value < 0:
        raise ValueError(f"must not be negative, got {_show(text)}")
    return value


def parse_listen_address(address: str) -> tuple[str, int]:
    """Split ``:10049``, ``127.0.0.1:10049`` or ``[::1]:10049`` into host ("" = all) and port."""
    if address.startswith("["):
        inside, sep, port_text = address[1:].partition("]:")
        if not sep:
            raise ValueError(f"expected [IPv6]:port, got {_show(address)}")
        try:
            ipaddress.IPv6Address(inside)
        except ValueError:
            raise ValueError(f"{_show(inside)} is not an IPv6 address") from None
        host = inside
    else:
        host, sep, port_text = address.rpartition(":")
        if not sep:
            raise ValueError(f"expected host:port or :port, got {_show(address)}")
        if ":" in host:
            raise ValueError(f"put an IPv6 address in brackets ([::1]:10049), got {_show(address)}")
        if host and not _HOSTNAME_RE.fullmatch(host):
            raise ValueError(f"{_show(host)} is not a host name or IPv4 address")
    if not port_text.isascii() or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"port must be a number from 0 to 65535, got {_show(port_text)}")
    return host, int(port_text)


def redact_dsn(dsn: str) -> str:
    """The DSN (or any text) with every URL userinfo password and ``password=...`` made ``***``."""
    return _KV_PASSWORD_RE.sub(r"\g<pre>***", redact_dsn_userinfo(dsn))


def redact_dsn_userinfo(text: str) -> str:
    """The text with the password of every ``scheme://user:password@`` made ``***``."""
    return _URL_USERINFO_RE.sub(r"\g<pre>:***@", text)


def dsn_password(dsn: str) -> str | None:
    """The decoded password in a URL DSN (userinfo or ``?password=``), or None."""
    try:
        split = urllib.parse.urlsplit(dsn)
    except ValueError:
        return None
    userinfo, at, _ = split.netloc.rpartition("@")
    if at and ":" in userinfo:
        return urllib.parse.unquote(userinfo.partition(":")[2])
    for name, value in urllib.parse.parse_qsl(split.query):
        if name == "password":
            return value
    return None


def _check_dsn(dsn: str) -> None:
    """Raise ValueError (never echoing the DSN) unless it is a postgres URL asyncpg can use."""
    try:
        split = urllib.parse.urlsplit(dsn)
    except ValueError:
        raise ValueError("is not a valid URL") from None
    if split.scheme not in ("postgres", "postgresql"):
        # asyncpg takes URLs only, so key=value DSNs are refused here rather than at connect.
        raise ValueError(
            "expected a URL such as postgresql://user@host:5432/dbname "
            "(postgres:// or postgresql://; key=value DSNs are not supported)"
        )


def _inject_password(dsn: str, password: str) -> str:
    """Put the password into the URL DSN's userinfo, percent-encoded."""
    split = urllib.parse.urlsplit(dsn)
    userinfo, at, hostinfo = split.netloc.rpartition("@")
    if not at:
        userinfo, hostinfo = "", split.netloc
    netloc = f"{userinfo}:{urllib.parse.quote(password, safe='')}@{hostinfo}"
    return urllib.parse.urlunsplit(split._replace(netloc=netloc))


# --- Value parsing ------------------------------------------------------------------------------


def _show(value: object) -> str:
    """A short repr of a value for an error message, any DSN password in it redacted."""
    # Redact before cutting: a cut could separate the password from the '@' that marks it.
    text = redact_dsn(repr(value))
    return text if len(text) <= 60 else text[:57] + "..."


def _parse_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"expected true or false, got {_show(value)}")


def _parse_int(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value.strip()):
        number = int(value.strip())
    else:
        raise ValueError(f"expected an integer, got {_show(value)}")
    if number < 0:
        raise ValueError(f"must not be negative, got {_show(value)}")
    return number


def _parse_number(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            raise ValueError(f"must be finite, got {_show(value)}") from None
    elif isinstance(value, str) and _PLAIN_NUMBER_RE.fullmatch(value.strip().lstrip("-")):
        number = float(value.strip())
    else:
        raise ValueError(f"expected a number, got {_show(value)}")
    if not math.isfinite(number):
        raise ValueError(f"must be finite, got {_show(value)}")
    if number < 0:
        raise ValueError(f"must not be negative, got {_show(value)}")
    return number


def _parse_string(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {_show(value)}")
    return value


def _parse_job_types(value: object) -> dict[int, str]:
    pairs: list[tuple[object, object]] = []
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, str):
        # Flags and environment variables spell the mapping as 1=send_email,2=scrape.
        for item in value.split(","):
            if not item.strip():
                continue
            number_text, sep, name_text = item.partition("=")
            if not sep:
                raise ValueError(f"expected number=name pairs such as 1=send_email, got {item!r}")
            pairs.append((number_text.strip(), name_text.strip()))
    else:
        raise ValueError(f"expected a mapping of job_type number to name, got {_show(value)}")
    result: dict[int, str] = {}
    seen: dict[str, int] = {}
    for raw_number, name in pairs:
        if isinstance(raw_number, int) and not isinstance(raw_number, bool):
            number = raw_number
        elif isinstance(raw_number, str) and re.fullmatch(r"-?\d{1,10}", raw_number):
            number = int(raw_number)
        else:
            raise ValueError(f"job_type must be an integer, got {_show(raw_number)}")
        if not _PG_INT_MIN <= number <= _PG_INT_MAX:
            raise ValueError(f"job_type {number} does not fit the integer column")
        if number in result:
            raise ValueError(f"job_type {number} is named twice")
        if not isinstance(name, str) or not name:
            raise ValueError(f"job_type {number}: expected a non-empty name, got {_show(name)}")
        if len(name) > _MAX_LABEL_NAME:
            raise ValueError(f"job_type {number}: name is longer than {_MAX_LABEL_NAME} characters")
        if not _LABEL_NAME_RE.fullmatch(name):
            raise ValueError(
                f"job_type {number}: name {_show(name)} may hold only letters, digits and _ "
                "and must not start with a digit"
            )
        if name == OTHER_JOB_TYPE:
            raise ValueError(
                f"job_type {number}: name 'other' is reserved for job types beyond the label cap"
            )
        if name in seen:
            raise ValueError(f"job_type {number}: name {name!r} is also used by {seen[name]}")
        seen[name] = number
        result[number] = name
    return result


def _parse_path(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        parts: list[object] = list(value.split("."))
    elif isinstance(value, list):
        parts = list(value)
    else:
        raise ValueError(f"expected a list of keys or a dotted path, got {_show(value)}")
    if not parts:
        raise ValueError("must name at least one key")
    for part in parts:
        if not isinstance(part, str) or not part:
            raise ValueError(f"every key must be a non-empty string, got {_show(part)}")
    return tuple(typing.cast(list[str], parts))


def _parse_buckets(value: object) -> tuple[float, ...]:
    if isinstance(value, str):
        items: list[object] = [item for item in value.split(",") if item.strip()]
    elif isinstance(value, list):
        items = list(value)
    else:
        raise ValueError(f"expected a list of bucket bounds in seconds, got {_show(value)}")
    if not items:
        raise ValueError("expected at least one bucket bound")
    bounds: list[float] = []
    for item in items:
        if not isinstance(item, str | int | float):
            raise ValueError(f"expected a number of seconds, got {_show(item)}")
        bound = parse_duration(item)
        if bound <= 0:
            raise ValueError(f"bucket bounds must be positive, got {_show(item)}")
        if bounds and bound <= bounds[-1]:
            raise ValueError(f"bucket bounds must be strictly increasing, {item!r} is not")
        bounds.append(bound)
    return tuple(bounds)


_PARSERS: dict[Kind, typing.Callable[[object], object]] = {
    Kind.STRING: _parse_string,
    Kind.INTEGER: _parse_int,
    Kind.NUMBER: _parse_number,
    Kind.DURATION: lambda value: parse_duration(typing.cast(str, value)),
    Kind.BOOLEAN: _parse_bool,
    Kind.JOB_TYPES: _parse_job_types,
    Kind.PATH: _parse_path,
    Kind.BUCKETS: _parse_buckets,
}


def _parse_value(spec: SettingSpec, value: object, from_text: bool) -> object:
    """Turn one YAML value (or flag/environment text) into the field's type."""
    if spec.optional and (value is None or (from_text and isinstance(value, str) and not value)):
        return None
    if spec.kind is Kind.DURATION and not isinstance(value, str | int | float):
        raise ValueError(f"{_DURATION_EXAMPLE}, got {_show(value)}")
    parsed = _PARSERS[spec.kind](value)
    if isinstance(parsed, str) and not parsed and spec.key not in _MAY_BE_EMPTY:
        raise ValueError("must not be empty")
    return parsed


# --- Reading the sources ----------------------------------------------------------------------


def _suggest(word: str, candidates: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.7)
    return f" (did you mean {close[0]}?)" if close else ""


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _parse_yaml(text: str, path: str) -> dict[str, object]:
    """The YAML document as a mapping; errors name the file and line, never quote its text."""
    try:
        document = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        problem = " ".join(part for part in (exc.context, exc.problem) if part)
        raise ConfigError(f"{where}: YAML syntax error: {redact_dsn(problem)}") from None
    except (yaml.YAMLError, RecursionError, ValueError, OverflowError) as exc:
        raise ConfigError(f"{path}: YAML error: {redact_dsn(str(exc))[:200]}") from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise ConfigError(
            f"{path}: the top level must be a mapping of sections "
            f"({', '.join(SECTIONS)}), got {type(document).__name__}"
        )
    return typing.cast(dict[str, object], document)


def _file_values(document: dict[str, object], errors: list[str]) -> dict[str, object]:
    """Flatten the document to dotted keys; unknown keys and non-mapping sections are errors."""
    values: dict[str, object] = {}
    for section, body in document.items():
        if not isinstance(section, str) or section not in SECTIONS:
            errors.append(f"{section}: unknown setting{_suggest(str(section), SECTIONS)}")
            continue
        if body is None:
            continue
        if not isinstance(body, dict):
            errors.append(f"{section}: expected a mapping of settings, got {_show(body)}")
            continue
        for name, value in body.items():
            key = f"{section}.{name}"
            if not isinstance(name, str) or key not in SPECS:
                errors.append(f"{key}: unknown setting{_suggest(key, SPECS)}")
                continue
            values[key] = value
    return values


def _normalise_flag(name: str) -> str:
    """``--collect.statement-timeout`` -> ``collect.statement_timeout``."""
    name = name.removeprefix("--")
    return _FLAG_ALIASES.get(name) or name.replace("-", "_")


def _read_password_file(path: str) -> str:
    key = "database.password_file"
    try:
        with open(path, encoding="utf-8") as handle:
            content = handle.read()
    except UnicodeDecodeError:
        raise ConfigError(f"{key}: {path} is not a UTF-8 text file") from None
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None
    except ValueError:  # a NUL byte in the path: the OS cannot even look for it
        raise ConfigError(f"{key}: {path!r} is not a usable file name") from None
    password = content.rstrip("\r\n")
    if not password:
        raise ConfigError(f"{key}: {path} is empty")
    return password


def _resolve_dsn(
    file_values: dict[str, object], environ: Mapping[str, str], flags: dict[str, str]
) -> tuple[object, bool]:
    """The DSN from flag, JOBQUEUE_EXPORTER_DSN, DATABASE_URL or the file, in that order."""
    if flags.get("database.dsn"):
        return flags["database.dsn"], True
    for name in (DSN_ENV, DSN_FALLBACK_ENV):
        if environ.get(name):
            return environ[name], True
    return file_values.get("database.dsn"), False


def _positive(value: object) -> None:
    if isinstance(value, float) and value <= 0:
        raise ValueError("must be greater than 0")


def _max_connections(value: object) -> None:
    if isinstance(value, int) and not 1 <= value <= 10:
        raise ValueError(f"must be from 1 to 10, got {value}")


def _max_job_types(value: object) -> None:
    if isinstance(value, int) and value < 1:
        raise ValueError(f"must be at least 1, got {value}")


def _table(value: object) -> None:
    if isinstance(value, str) and not _TABLE_RE.fullmatch(value):
        raise ValueError(f"expected a table name such as job or queue.job, got {_show(value)}")


def _one_of(choices: tuple[str, ...]) -> typing.Callable[[object], None]:
    def check(value: object) -> None:
        if isinstance(value, str) and value.lower() not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {_show(value)}")

    return check


def _listen_address(value: object) -> None:
    if isinstance(value, str):
        parse_listen_address(value)


def _telemetry_path(value: object) -> None:
    if not isinstance(value, str):
        return
    if not value.startswith("/") or any(ch.isspace() or ch in "?#" for ch in value):
        raise ValueError(f"expected a path such as /metrics, got {_show(value)}")
    if value in RESERVED_PATHS:
        raise ValueError(f"{value} is taken by the exporter itself")


def _staleness_limit(value: object) -> None:
    if isinstance(value, float) and value <= 0:
        raise ValueError("must be greater than 0 (or null for 3 intervals)")


# Checks of one value beyond its type, run right after it is parsed.
_VALUE_CHECKS: dict[str, typing.Callable[[object], None]] = {
    "collect.interval": _positive,
    "collect.timeout": _positive,
    "collect.statement_timeout": _positive,
    "collect.stuck_threshold": _positive,
    "collect.staleness_limit": _staleness_limit,
    "collect.max_job_types": _max_job_types,
    "database.connect_timeout": _positive,
    "database.max_connections": _max_connections,
    "database.table": _table,
    "log.level": _one_of(LOG_LEVELS),
    "log.format": _one_of(LOG_FORMATS),
    "web.listen_address": _listen_address,
    "web.telemetry_path": _telemetry_path,
}


def _check_cross_fields(settings: Settings) -> list[str]:
    """Checks that involve several values together."""
    c = settings.collect
    errors: list[str] = []
    if c.timeout < c.statement_timeout:
        errors.append(
            f"collect.timeout: must be at least collect.statement_timeout "
            f"({c.statement_timeout:g}s), got {c.timeout:g}s"
        )
    if c.lock_timeout > c.statement_timeout:
        errors.append(
            f"collect.lock_timeout: must not exceed collect.statement_timeout "
            f"({c.statement_timeout:g}s), got {c.lock_timeout:g}s"
        )
    return errors


def load_settings(
    config_file: str | None, environ: Mapping[str, str], flags: Mapping[str, str]
) -> Settings:
    """Resolve every setting (flag > environment > file > default) or raise ConfigError."""
    errors: list[str] = []
    document = _parse_yaml(_read_text(config_file), config_file) if config_file else {}
    file_values = _file_values(document, errors)

    flag_values: dict[str, str] = {}
    for raw_name, text in flags.items():
        key = _normalise_flag(raw_name)
        if key not in SPECS:
            errors.append(f"{key}: unknown setting{_suggest(key, SPECS)}")
            continue
        flag_values[key] = text

    dsn, dsn_from_text = _resolve_dsn(file_values, environ, flag_values)
    chosen: dict[str, tuple[object, bool]] = {"database.dsn": (dsn, dsn_from_text)}
    for key, spec in SPECS.items():
        if key == "database.dsn":
            continue
        if key in flag_values:
            chosen[key] = (flag_values[key], True)
        elif spec.env in environ:
            chosen[key] = (environ[spec.env], True)
        elif key in file_values:
            chosen[key] = (file_values[key], False)

    parsed: dict[str, dict[str, object]] = {section: {} for section in SECTIONS}
    for key, (value, from_text) in chosen.items():
        spec = SPECS[key]
        if value is None and key == "database.dsn":
            continue
        try:
            if key in _SECRET_KEYS:
                # A secret is never echoed back, not even its type's repr.
                if not isinstance(value, str):
                    raise ValueError(f"expected a string, got {type(value).__name__}")
                _check_dsn(value)
            result = _parse_value(spec, value, from_text)
            if key in _VALUE_CHECKS:
                _VALUE_CHECKS[key](result)
        except ValueError as exc:
            errors.append(f"{key}: {exc}")
            continue
        if isinstance(result, str) and key in ("log.level", "log.format"):
            result = result.lower()
        parsed[spec.section][spec.name] = result

    database = parsed["database"]
    password_file = database.get("password_file")
    if isinstance(password_file, str):
        try:
            password = _read_password_file(password_file)
            current = database.get("dsn")
            if isinstance(current, str):
                if dsn_password(current) is not None:
                    raise ConfigError(
                        "database.password_file: the DSN already has a password; "
                        "remove it from the DSN or drop the password file"
                    )
                database["dsn"] = _inject_password(current, password)
        except ConfigError as exc:
            errors.append(str(exc))

    if errors:
        raise ConfigError("\n".join(errors))
    settings = Settings(**{section: cls(**parsed[section]) for section, cls in SECTIONS.items()})
    cross = _check_cross_fields(settings)
    if cross:
        raise ConfigError("\n".join(cross))
    return settings


def check_config_file(path: str) -> Settings:
    """Load one configuration file on its own (no environment, no flags), as --config.check does."""
    return load_settings(path, {}, {})


# One line per setting, shown by --help and mirrored in docs/configuration.md.
DESCRIPTIONS: dict[str, str] = {
    "database.dsn": "PostgreSQL URL of the queue's database (postgresql://user@host:5432/db).",
    "database.password_file": "File holding the database password (trailing newline stripped).",
    "database.table": "Table of the queue, optionally schema-qualified (queue.job).",
    "database.max_connections": "Size of the exporter's connection pool (1-10).",
    "database.connect_timeout": "Deadline of opening one connection.",
    "collect.interval": "Time between the starts of two collections.",
    "collect.timeout": "Deadline of one whole collection (at least statement_timeout).",
    "collect.statement_timeout": "PostgreSQL statement_timeout of each query.",
    "collect.lock_timeout": "PostgreSQL lock_timeout of each query (at most statement_timeout).",
    "collect.stuck_threshold": "A job running this long with a valid lease counts as stuck.",
    "collect.commit_lag_tolerance": "How far back each collection re-reads changed rows, "
    "to catch transactions that committed late.",
    "collect.staleness_limit": "Withdraw queue gauges after failing this long (null: 3 intervals).",
    "collect.done_count": 'Also count DONE rows for jobqueue_jobs{status="done"} (a full scan).',
    "collect.max_job_types": 'At most this many job_type label values; the rest become "other".',
    "collect.job_types": "Label names for job_type numbers (YAML mapping, or 1=email,2=scrape).",
    "collect.deadline_error_prefix": "last_error prefix of a job killed by its deadline.",
    "collect.lease_expired_marker": "Suffix the reaper appends to last_error.",
    "collect.duration_path": "Path in result jsonb of the run time in milliseconds.",
    "collect.cost_ai_path": "Path in result jsonb of the AI cost in USD.",
    "collect.cost_proxy_path": "Path in result jsonb of the proxy cost in USD.",
    "collect.cost_total_path": "Path in result jsonb of the total cost in USD.",
    "collect.duration_buckets": "Histogram bounds (seconds) of jobqueue_job_duration_seconds.",
    "collect.wait_buckets": "Histogram bounds (seconds) of jobqueue_job_wait_seconds.",
    "collect.latency_buckets": "Histogram bounds (seconds) of jobqueue_job_latency_seconds.",
    "web.listen_address": "Address to serve HTTP on (:10049, 127.0.0.1:10049, [::1]:10049).",
    "web.telemetry_path": "Path of the metrics (not /, /healthz or /readyz).",
    "web.config_file": "exporter-toolkit web config file (TLS, basic auth).",
    "log.level": "debug, info, warn or error.",
    "log.format": "logfmt or json.",
}
