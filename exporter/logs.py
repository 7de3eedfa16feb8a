"""Logging set-up: logfmt or JSON lines on stderr, keyed as Go's slog writes them, secrets ``***``.

Structured fields go in ``extra={"fields": {...}}``::

    log.warning("collection failed", extra={"fields": {"reason": "timeout"}})

renders, inside a queue's tasks, as (one line)::

    time=2026-12-03T10:00:00.123Z level=WARN source=poller.py:123 msg="collection failed"
    queue=orders reason=timeout

the keys and level names of the Go exporters (slog through prometheus/common's promslog), so one
log pipeline parses both. ``queue`` comes from :func:`log_fields`, bound once where a queue's
tasks are started, so every line those tasks write names their queue. Redaction (the process's
redactor, exporter/redaction.py, which knows every configured secret) runs on each value and
again on the finished line, exception text included, so a DSN that slips into a message or a
traceback is still masked.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import json
import logging
import os
import sys
import types
from collections.abc import Iterable, Iterator, Mapping
from typing import TextIO

from exporter.redaction import Redactor, current, remember

# slog's level names; slog has no CRITICAL, and nothing here logs one.
_LEVEL_NAMES = {
    logging.DEBUG: "DEBUG",
    logging.INFO: "INFO",
    logging.WARNING: "WARN",
    logging.ERROR: "ERROR",
    logging.CRITICAL: "ERROR",
}
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
# Fields every record written in this context carries (after msg, as slog's With() attrs).
_CONTEXT_FIELDS: contextvars.ContextVar[Mapping[str, object]] = contextvars.ContextVar(
    "jobqueue_exporter_log_fields", default=types.MappingProxyType({})
)


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@contextlib.contextmanager
def log_fields(**fields: object) -> Iterator[None]:
    """Add these fields to every record logged in this context, and in tasks started in it."""
    token = _CONTEXT_FIELDS.set({**_CONTEXT_FIELDS.get(), **fields})
    try:
        yield
    finally:
        _CONTEXT_FIELDS.reset(token)


def _source(record: logging.LogRecord) -> str:
    # promslog's form: the file's base name and the line, not the logger's dotted name.
    return f"{os.path.basename(record.pathname)}:{record.lineno}"


class _StructuredFormatter(logging.Formatter):
    """Collects a record's fields in order; subclasses render them as one line."""

    def __init__(self, redactor: Redactor | None = None) -> None:
        """``redactor``: a fixed one (tests); None, the process's as it is at each record."""
        super().__init__()
        self._redactor = redactor

    @property
    def redact(self) -> Redactor:
        """The redactor this line passes."""
        return self._redactor if self._redactor is not None else current()

    def fields_of(self, record: logging.LogRecord) -> list[tuple[str, object]]:
        """time, level, source, msg, the context's fields, the record's, then exc (one string)."""
        items: list[tuple[str, object]] = [
            ("time", _timestamp(record)),
            ("level", _LEVEL_NAMES.get(record.levelno, record.levelname.upper())),
            ("source", _source(record)),
            ("msg", record.getMessage()),
        ]
        extra = getattr(record, "fields", None)
        own = {str(key): value for key, value in extra.items()} if isinstance(extra, dict) else {}
        # A field the record sets itself wins over the context's (no key is written twice).
        items.extend((key, value) for key, value in _CONTEXT_FIELDS.get().items() if key not in own)
        items.extend(own.items())
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


def make_formatter(fmt: str) -> logging.Formatter:
    """A logfmt or JSON formatter that redacts through the process's redactor."""
    if fmt == "logfmt":
        return LogfmtFormatter()
    if fmt == "json":
        return JsonFormatter()
    raise ValueError(f"unknown log format {fmt!r}")


class _ExporterHandler(logging.StreamHandler[TextIO]):
    """Marks the handler this module installed, so a second set-up replaces it."""


def _installed() -> _ExporterHandler | None:
    for handler in logging.getLogger().handlers:
        if isinstance(handler, _ExporterHandler):
            return handler
    return None


def setup_logging(
    level: str, fmt: str, secrets: Iterable[str], stream: TextIO | None = None
) -> None:
    """Send all logging to stderr (or ``stream``) in logfmt or JSON, the ``secrets`` and every
    secret the process's redactor knows made ``***``."""
    handler = _ExporterHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(make_formatter(fmt))
    remember(secrets)
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _ExporterHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(parse_level(level))


def reconfigure_logging(level: str, fmt: str, secrets: Iterable[str]) -> bool:
    """Apply a reloaded level and format to the installed handler, on the same stream.

    Secrets are added to those the process's redactor knows, never dropped: a line about the
    old settings may still be on its way. False (and nothing changed) when
    :func:`setup_logging` never ran, as when the service is embedded in another program that
    owns its logging.
    """
    handler = _installed()
    if handler is None:
        return False
    formatter = make_formatter(fmt)  # ValueError before any change
    level_number = parse_level(level)
    remember(secrets)
    handler.setFormatter(formatter)
    logging.getLogger().setLevel(level_number)
    return True
