"""Logging set-up: logfmt or JSON lines on stderr, with every secret replaced by ``***``.

Structured fields go in ``extra={"fields": {...}}``::

    log.warning("collection failed", extra={"fields": {"reason": "timeout"}})

renders as ``ts=... level=warn logger=exporter.poller msg="collection failed" reason=timeout``.
Redaction runs on each value and again on the finished line, exception text included, so a
DSN that slips into a message or a traceback is still masked.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import sys
import urllib.parse
from collections.abc import Iterable
from typing import TextIO

from exporter.settings.secrets import redact_dsn, redact_dsn_userinfo

_LEVEL_NAMES = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warn",
    logging.ERROR: "error",
    logging.CRITICAL: "error",
}
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
REDACTED = "***"
_KV_IN_LINE_RE = re.compile(r"(?P<pre>password\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'?|[^\s&\"\\]+)", re.I)


class Redactor:
    """Replaces known secrets (raw and percent-encoded) and DSN passwords in text."""

    def __init__(self, secrets: Iterable[str]) -> None:
        variants: set[str] = set()
        for secret in secrets:
            if secret:
                # The DSN carries it percent-encoded; a JSON line carries it escaped.
                encoded = urllib.parse.quote(secret, safe="")
                escaped = json.dumps(secret, ensure_ascii=False)[1:-1]
                variants.update({secret, encoded, escaped})
        # Longest first, so a secret that contains another is replaced whole.
        self._secrets = sorted(variants, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        """The text with every secret and every DSN password made ``***``."""
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return redact_dsn(text)

    def line(self, text: str) -> str:
        """A second pass over a rendered line, whose values were already redacted one by one."""
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        # Stop at a quote or backslash so the pass cannot eat the line's own JSON/logfmt quoting.
        return _KV_IN_LINE_RE.sub(r"\g<pre>***", redact_dsn_userinfo(text))


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class _StructuredFormatter(logging.Formatter):
    """Collects a record's fields in order; subclasses render them as one line."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redact = redactor

    def fields_of(self, record: logging.LogRecord) -> list[tuple[str, object]]:
        """ts, level, logger, msg, the record's extra fields, then exc (one string)."""
        items: list[tuple[str, object]] = [
            ("ts", _timestamp(record)),
            ("level", _LEVEL_NAMES.get(record.levelno, record.levelname.lower())),
            ("logger", record.name),
            ("msg", record.getMessage()),
        ]
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            items.extend((str(key), value) for key, value in extra.items())
        if record.exc_info:
            items.append(("exc", self.formatException(record.exc_info)))
        elif record.exc_text:
            items.append(("exc", record.exc_text))
        if record.stack_info:
            items.append(("stack", self.formatStack(record.stack_info)))
        return items

    def render(self, items: list[tuple[str, object]]) -> str:
        """One line from the fields."""
        raise NotImplementedError

    def format(self, record: logging.LogRecord) -> str:
        """The record as one redacted line."""
        return self.redact.line(self.render(self.fields_of(record)))


def _logfmt_key(key: str) -> str:
    cleaned = "".join(ch if ch.isprintable() and ch not in ' ="' else "_" for ch in key)
    return cleaned or "_"


def _logfmt_value(value: object) -> str:
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = str(value)
    if text and all(ch.isprintable() and ch not in ' ="\\' for ch in text):
        return text
    return json.dumps(text, ensure_ascii=False)


class LogfmtFormatter(_StructuredFormatter):
    """``key=value`` pairs, values quoted when they hold spaces, quotes or newlines."""

    def render(self, items: list[tuple[str, object]]) -> str:
        """One logfmt line."""
        return " ".join(
            f"{_logfmt_key(key)}={_logfmt_value(self._redact_value(value))}" for key, value in items
        )

    def _redact_value(self, value: object) -> object:
        return self.redact(value) if isinstance(value, str) else value


class JsonFormatter(_StructuredFormatter):
    """One JSON object per line."""

    def render(self, items: list[tuple[str, object]]) -> str:
        """One JSON line; values that JSON cannot hold become strings."""
        document: dict[str, object] = {}
        for key, value in items:
            if isinstance(value, str):
                value = self.redact(value)
            elif not isinstance(value, int | float | bool) and value is not None:
                value = self.redact(str(value))
            document[key] = value
        return json.dumps(document, ensure_ascii=False, default=str)


def parse_level(level: str) -> int:
    """The logging level number of debug, info, warn or error."""
    try:
        return _LEVELS[level.lower()]
    except KeyError:
        raise ValueError(f"unknown log level {level!r}") from None


def make_formatter(fmt: str, secrets: Iterable[str]) -> logging.Formatter:
    """A logfmt or JSON formatter that redacts the given secrets."""
    redactor = Redactor(secrets)
    if fmt == "logfmt":
        return LogfmtFormatter(redactor)
    if fmt == "json":
        return JsonFormatter(redactor)
    raise ValueError(f"unknown log format {fmt!r}")


class _ExporterHandler(logging.StreamHandler[TextIO]):
    """Marks the handler this module installed, so a second set-up replaces it."""


def setup_logging(
    level: str, fmt: str, secrets: Iterable[str], stream: TextIO | None = None
) -> None:
    """Send all logging to stderr (or ``stream``) in logfmt or JSON, secrets redacted."""
    handler = _ExporterHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(make_formatter(fmt, secrets))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _ExporterHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(parse_level(level))
