"""The kinds of value a setting can hold, and how each is parsed from YAML or from flag text.

Every parser takes what YAML produced (or the text of a flag or environment variable), returns
the typed value, and raises ``ValueError`` with a message that says what was expected and
shows what was given, any DSN password in it redacted.
"""

from __future__ import annotations

import enum
import ipaddress
import math
import re
from collections.abc import Callable

from exporter.redaction import redact
from exporter.vocabulary import OTHER


class Kind(enum.Enum):
    """What a setting holds; its value is the name the documentation uses."""

    STRING = "string"
    CHOICE = "one of"
    INTEGER = "integer"
    NUMBER = "number"
    DURATION = "duration"
    USD = "USD"
    RATIO = "ratio"
    BOOLEAN = "boolean"
    FILE = "file"
    DSN = "PostgreSQL URL"
    TABLE = "table"
    NAME = "name"
    JOB_TYPES = "job types"
    JSON_PATH = "JSON path"
    BUCKETS = "buckets"
    LISTEN_ADDRESS = "address"
    URL_PATH = "URL path"
    BY_JOB_TYPE = "per job type"


DURATION_EXAMPLE = "expected a duration such as 500ms, 15s or 2m"
_NUMBER = r"(?:\d+(?:\.\d+)?|\.\d+)"
_PLAIN_NUMBER_RE = re.compile(_NUMBER)
_DURATION_RE = re.compile(rf"(?:{_NUMBER}(?:ms|s|m|h|d))+")
_DURATION_PART_RE = re.compile(rf"({_NUMBER})(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_LABEL_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Label values are free text to Prometheus, but a queue name also goes into log lines, URLs
# of the status page and file names of examples: keep it to a safe alphabet.
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}")
_SQL_IDENT = r"[A-Za-z_][A-Za-z0-9_$]{0,62}"
_TABLE_RE = re.compile(rf"{_SQL_IDENT}(?:\.{_SQL_IDENT})?")
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?")
MAX_LABEL_NAME = 64
_PG_INT_MIN, _PG_INT_MAX = -(2**31), 2**31 - 1


def show(value: object) -> str:
    """A short repr of a value for an error message, any DSN password in it redacted."""
    # Redact before cutting: a cut could separate the password from the '@' that marks it.
    text = redact(repr(value))
    return text if len(text) <= 60 else text[:57] + "..."


def parse_duration(value: object) -> float:
    """Seconds from ``500ms``, ``15s``, ``2m``, ``1h``, ``1h30m``, ``1d`` or a plain number."""
    if isinstance(value, bool):
        raise ValueError(f"{DURATION_EXAMPLE}, got {value!r}")
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:
            raise ValueError(f"must be finite, got {show(value)}") from None
    elif isinstance(value, str):
        stripped = value.strip()
        if _PLAIN_NUMBER_RE.fullmatch(stripped):
            seconds = float(stripped)
        elif _DURATION_RE.fullmatch(stripped):
            seconds = sum(
                float(number) * _UNIT_SECONDS[unit]
                for number, unit in _DURATION_PART_RE.findall(stripped)
            )
        elif stripped.startswith("-") and (
            _PLAIN_NUMBER_RE.fullmatch(stripped[1:]) or _DURATION_RE.fullmatch(stripped[1:])
        ):
            raise ValueError(f"must not be negative, got {show(value)}")
        else:
            raise ValueError(f"{DURATION_EXAMPLE}, got {show(value)}")
    else:
        raise ValueError(f"{DURATION_EXAMPLE}, got {show(value)}")
    return _finite_and_not_negative(seconds, value)


def _finite_and_not_negative(number: float, value: object) -> float:
    """The number, or ValueError quoting the value it was read from."""
    if not math.isfinite(number):
        raise ValueError(f"must be finite, got {show(value)}")
    if number < 0:
        raise ValueError(f"must not be negative, got {show(value)}")
    return number


def parse_number(value: object) -> float:
    """A finite, non-negative number (YAML number or its text)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            raise ValueError(f"must be finite, got {show(value)}") from None
    elif isinstance(value, str) and _PLAIN_NUMBER_RE.fullmatch(value.strip().lstrip("-")):
        number = float(value.strip())
    else:
        raise ValueError(f"expected a number, got {show(value)}")
    return _finite_and_not_negative(number, value)


def parse_ratio(value: object) -> float:
    """A number from 0 to 1; ``95%`` is accepted as 0.95."""
    if isinstance(value, str) and value.strip().endswith("%"):
        ratio = parse_number(value.strip()[:-1]) / 100.0
    else:
        ratio = parse_number(value)
    if ratio > 1:
        raise ValueError(f"expected a ratio from 0 to 1 (or a percentage), got {show(value)}")
    return ratio


def parse_usd(value: object) -> float:
    """An amount of US dollars; a leading ``$`` is accepted."""
    if isinstance(value, str):
        value = value.strip().removeprefix("$")
    return parse_number(value)


def parse_integer(value: object) -> int:
    """A non-negative whole number."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value.strip()):
        number = int(value.strip())
    else:
        raise ValueError(f"expected an integer, got {show(value)}")
    if number < 0:
        raise ValueError(f"must not be negative, got {show(value)}")
    return number


def parse_boolean(value: object) -> bool:
    """``true`` or ``false``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"expected true or false, got {show(value)}")


def parse_string(value: object) -> str:
    """A non-empty string."""
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {show(value)}")
    if not value:
        raise ValueError("must not be empty")
    return value


def parse_name(value: object) -> str:
    """A queue name: letters, digits and ``_ . : -``, at most 64 characters."""
    text = parse_string(value)
    if not _NAME_RE.fullmatch(text):
        raise ValueError(
            f"expected a name of letters, digits and _ . : - (at most 64), got {show(text)}"
        )
    return text


def parse_table(value: object) -> str:
    """A table name, optionally schema-qualified."""
    text = parse_string(value)
    if not _TABLE_RE.fullmatch(text):
        raise ValueError(f"expected a table name such as job or billing.job, got {show(text)}")
    return text


def parse_url_path(value: object) -> str:
    """An absolute URL path without query or fragment."""
    text = parse_string(value)
    if not text.startswith("/") or any(ch.isspace() or ch in "?#" for ch in text):
        raise ValueError(f"expected a path such as /metrics, got {show(text)}")
    return text


def parse_listen_address(address: str) -> tuple[str, int]:
    """Split ``:10049``, ``127.0.0.1:10049`` or ``[::1]:10049`` into host ("" = all) and port."""
    if address.startswith("["):
        inside, sep, port_text = address[1:].partition("]:")
        if not sep:
            raise ValueError(f"expected [IPv6]:port, got {show(address)}")
        try:
            ipaddress.IPv6Address(inside)
        except ValueError:
            raise ValueError(f"{show(inside)} is not an IPv6 address") from None
        host = inside
    else:
        host, sep, port_text = address.rpartition(":")
        if not sep:
            raise ValueError(f"expected host:port or :port, got {show(address)}")
        if ":" in host:
            raise ValueError(f"put an IPv6 address in brackets ([::1]:10049), got {show(address)}")
        if host and not _HOSTNAME_RE.fullmatch(host):
            raise ValueError(f"{show(host)} is not a host name or IPv4 address")
    if not port_text.isascii() or not port_text.isdigit() or int(port_text) > 65535:
        raise ValueError(f"port must be a number from 0 to 65535, got {show(port_text)}")
    return host, int(port_text)


def parse_listen_addresses(value: object) -> tuple[str, ...]:
    """One address or several (a YAML list, or comma-separated text), each host:port."""
    if isinstance(value, str):
        items: list[object] = [item.strip() for item in value.split(",") if item.strip()]
    elif isinstance(value, list):
        items = list(value)
    else:
        raise ValueError(f"expected an address such as :10049 or a list of them, got {show(value)}")
    if not items:
        raise ValueError("expected at least one address")
    addresses: list[str] = []
    for item in items:
        text = parse_string(item)
        parse_listen_address(text)
        if text in addresses:
            raise ValueError(f"{show(text)} is listed twice")
        addresses.append(text)
    return tuple(addresses)


def parse_job_types(value: object) -> dict[int, str]:
    """A mapping of job_type number to label name (YAML mapping, or ``1=email,2=scrape``)."""
    pairs: list[tuple[object, object]] = []
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, str):
        for item in value.split(","):
            if not item.strip():
                continue
            number_text, sep, name_text = item.partition("=")
            if not sep:
                raise ValueError(f"expected number=name pairs such as 1=send_email, got {item!r}")
            pairs.append((number_text.strip(), name_text.strip()))
    else:
        raise ValueError(f"expected a mapping of job_type number to name, got {show(value)}")
    result: dict[int, str] = {}
    seen: dict[str, int] = {}
    for raw_number, name in pairs:
        if isinstance(raw_number, int) and not isinstance(raw_number, bool):
            number = raw_number
        elif isinstance(raw_number, str) and re.fullmatch(r"-?\d{1,10}", raw_number):
            number = int(raw_number)
        else:
            raise ValueError(f"job_type must be an integer, got {show(raw_number)}")
        if not _PG_INT_MIN <= number <= _PG_INT_MAX:
            raise ValueError(f"job_type {number} does not fit the integer column")
        if number in result:
            raise ValueError(f"job_type {number} is named twice")
        if not isinstance(name, str) or not name:
            raise ValueError(f"job_type {number}: expected a non-empty name, got {show(name)}")
        if len(name) > MAX_LABEL_NAME:
            raise ValueError(f"job_type {number}: name is longer than {MAX_LABEL_NAME} characters")
        if not _LABEL_NAME_RE.fullmatch(name):
            raise ValueError(
                f"job_type {number}: name {show(name)} may hold only letters, digits and _ "
                "and must not start with a digit"
            )
        if name == OTHER:
            raise ValueError(
                f"job_type {number}: name '{OTHER}' is reserved for job types beyond the label cap"
            )
        if name in seen:
            raise ValueError(f"job_type {number}: name {name!r} is also used by {seen[name]}")
        seen[name] = number
        result[number] = name
    return result


def parse_json_path(value: object) -> tuple[str, ...]:
    """A path into a JSON document: a list of keys, or a dotted string."""
    if isinstance(value, str):
        parts: list[object] = list(value.split("."))
    elif isinstance(value, list):
        parts = list(value)
    else:
        raise ValueError(f"expected a list of keys or a dotted path, got {show(value)}")
    if not parts or parts == [""]:
        raise ValueError("must name at least one key (null: the figure is not read)")
    keys: list[str] = []
    for part in parts:
        if not isinstance(part, str) or not part:
            raise ValueError(
                f"every key must be a non-empty string, got {show(part)} in {show(value)}"
            )
        keys.append(part)
    return tuple(keys)


def parse_buckets(value: object) -> tuple[float, ...]:
    """Histogram bounds in seconds: positive, finite, strictly increasing."""
    if isinstance(value, str):
        items: list[object] = [item for item in value.split(",") if item.strip()]
    elif isinstance(value, list):
        items = list(value)
    else:
        raise ValueError(f"expected a list of bucket bounds in seconds, got {show(value)}")
    if not items:
        raise ValueError("expected at least one bucket bound")
    bounds: list[float] = []
    for item in items:
        if not isinstance(item, str | int | float):
            raise ValueError(f"expected a number of seconds, got {show(item)}")
        bound = parse_duration(item)
        if bound <= 0:
            raise ValueError(f"bucket bounds must be positive, got {show(item)}")
        if bounds and bound <= bounds[-1]:
            raise ValueError(f"bucket bounds must be strictly increasing, {item!r} is not")
        bounds.append(bound)
    return tuple(bounds)


def parse_by_job_type(value: object) -> dict[str, float]:
    """Per-job-type overrides: job_type label value -> a number or a duration (seconds)."""
    if isinstance(value, str):
        value = dict(item.strip().partition("=")[::2] for item in value.split(",") if item.strip())
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of job type name to value, got {show(value)}")
    result: dict[str, float] = {}
    for name, raw in value.items():
        if not isinstance(name, str | int) or not re.fullmatch(r"\w{1,64}", str(name), re.ASCII):
            raise ValueError(
                f"expected a job_type label value (letters, digits, _), got {show(name)}"
            )
        result[str(name)] = parse_duration(raw)
    return result


PARSERS: dict[Kind, Callable[[object], object]] = {
    Kind.STRING: parse_string,
    Kind.CHOICE: parse_string,
    Kind.INTEGER: parse_integer,
    Kind.NUMBER: parse_number,
    Kind.DURATION: parse_duration,
    Kind.USD: parse_usd,
    Kind.RATIO: parse_ratio,
    Kind.BOOLEAN: parse_boolean,
    Kind.FILE: parse_string,
    Kind.DSN: parse_string,
    Kind.TABLE: parse_table,
    Kind.NAME: parse_name,
    Kind.JOB_TYPES: parse_job_types,
    Kind.JSON_PATH: parse_json_path,
    Kind.BUCKETS: parse_buckets,
    Kind.LISTEN_ADDRESS: parse_listen_addresses,
    Kind.URL_PATH: parse_url_path,
    Kind.BY_JOB_TYPE: parse_by_job_type,
}

# How each kind is written in YAML and in a flag, for docs/configuration.md.
SYNTAX: dict[Kind, tuple[str, str]] = {
    Kind.STRING: ("a string", "the text"),
    Kind.CHOICE: ("one of the listed words", "the word"),
    Kind.INTEGER: ("a whole number, never negative", "`3`"),
    Kind.NUMBER: ("a number, never negative", "`2.5`"),
    Kind.DURATION: (
        "a number of seconds or `500ms`, `15s`, `2m`, `1h`, `1d`, combined as `1h30m`",
        "the same text",
    ),
    Kind.USD: ("an amount of US dollars (`20`, `0.5`, `$20`)", "the same text"),
    Kind.RATIO: ("a number from 0 to 1, or a percentage (`0.99`, `99%`)", "the same text"),
    Kind.BOOLEAN: ("`true` / `false`", "switches: `--collect.done-count`, `--no-…`"),
    Kind.FILE: ("a path to a file", "the path"),
    Kind.DSN: ("a `postgresql://` URL", "the URL"),
    Kind.TABLE: ("a table, optionally schema-qualified (`billing.job`)", "the name"),
    Kind.NAME: ("letters, digits and `_ . : -`, at most 64 characters", "the name"),
    Kind.JOB_TYPES: ("a mapping of `job_type` number to name", "`1=send_email,2=scrape`"),
    Kind.JSON_PATH: (
        "a list of keys (`[metrics, cost, ai_usd]`) or a dotted string",
        "dotted string",
    ),
    Kind.BUCKETS: ("a list of bounds in seconds, strictly increasing", "`0.5,1,2,5`"),
    Kind.LISTEN_ADDRESS: (
        "`:10049`, `127.0.0.1:10049`, `[::1]:10049`, or a list of them",
        "repeat the flag, or separate with commas",
    ),
    Kind.URL_PATH: ("an absolute path such as `/metrics`", "the path"),
    Kind.BY_JOB_TYPE: (
        "a mapping of `job_type` label value to a number or duration (`{report: 2h}`)",
        "`report=2h,crawl=30m`",
    ),
}
