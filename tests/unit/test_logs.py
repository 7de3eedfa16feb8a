"""Log lines: slog's keys and level names, the queue of the task that logs, secrets redacted."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re

import pytest

from exporter.logs import log_fields, reconfigure_logging, setup_logging

PASSWORD = "hunter2-S3cret"
DSN_WITH_PASSWORD = f"postgresql://app:{PASSWORD}@db.example:5432/queue"
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
LOGFMT_LINE = re.compile(
    rf"time={TIME} level=WARN source=test_logs\.py:\d+ "
    r'msg="collection failed" reason=timeout attempt=3 detail="a b"'
)


pytestmark = pytest.mark.usefixtures("restore_logging")


def log_lines(fmt: str, level: str = "info", secrets: tuple[str, ...] = (PASSWORD,)) -> io.StringIO:
    stream = io.StringIO()
    setup_logging(level, fmt, secrets, stream=stream)
    return stream


def test_logfmt_line_has_slog_keys_in_slog_order() -> None:
    stream = log_lines("logfmt")
    fields = {"reason": "timeout", "attempt": 3, "detail": "a b"}
    logging.getLogger("exporter.poller").warning("collection failed", extra={"fields": fields})
    line = stream.getvalue()
    assert LOGFMT_LINE.fullmatch(line.rstrip("\n")), line
    assert line.count("\n") == 1


def test_json_line_has_the_same_keys_and_the_level_filter_applies() -> None:
    stream = log_lines("json", level="warn")
    log = logging.getLogger("exporter.poller")
    log.info("not shown")
    log.error("collection failed", extra={"fields": {"reason": "timeout", "n": 2}})
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert list(record) == ["time", "level", "source", "msg", "reason", "n"]
    assert record["level"] == "ERROR"
    assert re.fullmatch(r"test_logs\.py:\d+", record["source"])
    assert record["msg"] == "collection failed"
    assert (record["reason"], record["n"]) == ("timeout", 2)
    assert re.fullmatch(TIME, record["time"])


@pytest.mark.parametrize(
    ("level", "name"),
    [
        (logging.DEBUG, "DEBUG"),
        (logging.INFO, "INFO"),
        (logging.WARNING, "WARN"),
        (logging.ERROR, "ERROR"),
        (logging.CRITICAL, "ERROR"),
    ],
)
def test_levels_are_named_as_slog_names_them(level: int, name: str) -> None:
    stream = log_lines("json", level="debug")
    logging.getLogger("x").log(level, "m")
    assert json.loads(stream.getvalue())["level"] == name


def test_logfmt_quotes_what_needs_quoting_and_cleans_keys() -> None:
    stream = log_lines("logfmt")
    fields = {"empty": "", "quote": 'say "hi"', "newline": "a\nb", "bad key": 1, "none": None}
    logging.getLogger("x").info("m", extra={"fields": fields})
    line = stream.getvalue()
    assert 'empty="" quote="say \\"hi\\"" newline="a\\nb" bad_key=1 none=null' in line
    assert line.count("\n") == 1


async def test_tasks_started_under_log_fields_name_their_queue() -> None:
    stream = log_lines("logfmt")
    log = logging.getLogger("exporter.poller")

    async def collect() -> None:
        await asyncio.sleep(0)
        log.warning("collection failed", extra={"fields": {"reason": "timeout"}})

    with log_fields(queue="orders"):
        task = asyncio.create_task(collect())
    log.info("outside")  # the binding ended; the task keeps its own copy
    await task
    with log_fields(queue="orders"):
        log.info("own", extra={"fields": {"queue": "mails"}})  # the record's own field wins
    first, second, third = stream.getvalue().splitlines()
    assert "queue=" not in first
    assert re.search(r'msg="collection failed" queue=orders reason=timeout$', second), second
    assert third.endswith("msg=own queue=mails")


@pytest.mark.parametrize("fmt", ["logfmt", "json"])
def test_secrets_are_redacted_everywhere_including_exceptions(fmt: str) -> None:
    stream = log_lines(fmt)
    log = logging.getLogger("exporter.db")
    log.info("connecting to %s", DSN_WITH_PASSWORD)
    log.info("kv", extra={"fields": {"dsn": f"host=h password={PASSWORD} user=app"}})
    log.info("encoded", extra={"fields": {"dsn": "postgresql://app:p%40ss@h/db"}})
    log.info("bare secret %s in text", PASSWORD)
    try:
        raise ConnectionError(f"could not connect to postgresql://other:xyzzy@h/db ({PASSWORD})")
    except ConnectionError:
        log.exception("connection failed")
    output = stream.getvalue()
    for secret in (PASSWORD, "xyzzy", "p%40ss"):
        assert secret not in output
    assert "postgresql://app:***@db.example" in output
    assert "password=***" in output
    assert "ConnectionError: could not connect to postgresql://other:***@h/db (***)" in output
    assert len(output.splitlines()) == 5  # the traceback stays on its record's line
    if fmt == "json":
        for line in output.splitlines():
            json.loads(line)


def test_percent_encoded_secret_is_redacted() -> None:
    stream = log_lines("logfmt", secrets=("p@ss/word",))
    logging.getLogger("x").info("dsn path p%40ss%2Fword and raw p@ss/word")
    assert "p%40ss%2Fword" not in stream.getvalue()
    assert "p@ss/word" not in stream.getvalue()


def test_reconfiguring_changes_format_and_level_and_keeps_every_secret() -> None:
    stream = log_lines("logfmt", level="warn")
    log = logging.getLogger("x")
    assert reconfigure_logging("debug", "json", ["new-secret"])
    log.debug("old %s new %s", PASSWORD, "new-secret")
    record = json.loads(stream.getvalue())
    assert record["msg"] == "old *** new ***"
    with pytest.raises(ValueError, match="unknown log format"):
        reconfigure_logging("info", "xml", [])
    log.debug("still json at debug")  # a refused reconfiguration changed nothing
    assert json.loads(stream.getvalue().splitlines()[1])["msg"] == "still json at debug"


def test_reconfiguring_without_set_up_leaves_logging_alone() -> None:
    root = logging.getLogger()
    root.handlers[:] = [h for h in root.handlers if type(h).__name__ != "_ExporterHandler"]
    level = root.level
    assert not reconfigure_logging("debug", "json", [])
    assert root.level == level
