"""No secret on any surface, for any DSN shape: the strict DSN parser and the one redactor.

The property test drives the command line's own paths (the start's refusal, ``--config.check``,
``healthcheck``) with a password in every place it can be given (a URL's userinfo raw or
percent-encoded, with a slash missing or one too many, ``?password=``, ``sslpassword``, a
key=value string, a password file, ``PGPASSWORD``), from every source (flag, environment, file),
then renders each surface the process serves from what it stored: log lines in both formats,
the status page, ``/readyz`` and ``/metrics``. No surface may carry the password, as written,
percent-encoded, decoded or escaped. Nothing here opens a socket: the checks that would reach
a database are replaced by what they would report, word for word a server's message quoting
the DSN (tests/system/test_secrets.py drives the real process against a real server).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import string
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter import redaction
from exporter.cli import main
from exporter.metrics import render
from exporter.model import ConfigStatus, QueueStatus
from exporter.preflight import QueueReport, Report
from exporter.redaction import Redactor, mask_patterns, redact
from exporter.settings import ConfigError, load_settings
from exporter.settings.secrets import check_dsn, dsn_secrets
from exporter.web.healthcheck import ProbeResult
from exporter.web.routes import not_ready
from exporter.web.status import StatusPage, status_page
from tests.secret_forms import MARKER, forms, leaks
from tests.unit.factories import view

SPECIAL = "@:/%?#&=+ '\"\\[]é密😀;,"
passwords = st.tuples(
    st.text(SPECIAL, max_size=3),
    st.text(string.ascii_letters + string.digits, min_size=4, max_size=8),
    st.text(SPECIAL, max_size=3),
    st.text(string.ascii_letters + string.digits + SPECIAL, max_size=4),
).map(lambda parts: parts[0] + MARKER + "".join(parts[1:]))

HOST = "127.0.0.1:5432"
SHAPES: dict[str, Callable[[str], str]] = {
    "url": lambda pw: f"postgresql://app:{urllib.parse.quote(pw, safe='')}@{HOST}/orders",
    "url, raw password": lambda pw: f"postgresql://app:{pw}@{HOST}/orders",
    "one slash": lambda pw: f"postgresql:/app:{pw}@{HOST}/orders",
    "no slash": lambda pw: f"postgres:app:{pw}@{HOST}/orders",
    "three slashes": lambda pw: f"postgresql:///app:{pw}@{HOST}/orders",
    "a slash too many before the database": lambda pw: (
        f"postgresql://app:{urllib.parse.quote(pw, safe='')}@{HOST}//orders"
    ),
    "?password=": lambda pw: f"postgresql://app@{HOST}/orders?password={urllib.parse.quote(pw)}",
    "?password= raw": lambda pw: f"postgresql://app@{HOST}/orders?sslmode=prefer&password={pw}",
    "?sslpassword=": lambda pw: (
        f"postgresql://app@{HOST}/orders?sslpassword={urllib.parse.quote(pw, safe='')}"
    ),
    "key=value": lambda pw: f"host=127.0.0.1 user=app password={pw} dbname=orders",
    "key=value quoted": lambda pw: f"host=127.0.0.1 user=app password='{pw}' dbname=orders",
    "database named like the password": lambda pw: (
        f"postgresql://app:{urllib.parse.quote(pw, safe='')}@{HOST}/"
        f"{urllib.parse.quote(pw, safe='')}"
    ),
    "password file": lambda pw: f"postgresql://app@{HOST}/orders",
    "PGPASSWORD": lambda pw: f"postgresql://app@{HOST}/orders",
    "PGPASSWORD, database named like it": lambda pw: (
        f"postgresql://app@{HOST}/{urllib.parse.quote(pw, safe='')}"
    ),
}
SOURCES = ("flag", "JOBQUEUE_EXPORTER_DSN", "DATABASE_URL", "file")


def server_messages(dsn: str, password: str) -> list[str]:
    """What a server, libpq or a traceback may say about a connection, quoting what it got."""
    after_scheme = dsn.partition(":")[2].lstrip("/")
    return [
        f'connection failed: database "{after_scheme}" does not exist',
        f"connection failed: could not connect to {dsn}",
        f"authentication failed: the password {password!r} was refused",
        f"unexpected: {password} / {urllib.parse.quote(password, safe='')}",
        json.dumps({"dsn": dsn, "password": password}),
    ]


@contextlib.contextmanager
def process_state() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """A fresh process redactor, stdout and stderr captured, logging put back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch.object(redaction, "_process", Redactor()),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            yield out, err
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)


def sources(
    shape: str, source: str, dsn: str, password: str, where: Path
) -> tuple[list[str], dict[str, str], Path]:
    """The flags, environment and config file that give the DSN (and password) this way."""
    flags: list[str] = []
    environ: dict[str, str] = {}
    document: dict[str, object] = {}
    if source == "flag":
        flags.append(f"--database.dsn={dsn}")
    elif source == "file":
        document["database"] = {"dsn": dsn}
    else:
        environ[source] = dsn
    if shape == "password file":
        secret = where / "password"
        secret.write_text(password + "\n", encoding="utf-8")
        document.setdefault("database", {})["password_file"] = str(secret)  # type: ignore[index]
    if shape.startswith("PGPASSWORD"):
        environ["PGPASSWORD"] = password
    config = where / "config.yml"
    config.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    return flags, environ, config


def clear(*streams: io.StringIO) -> None:
    """Empty the captured streams, for the next surface."""
    for stream in streams:
        stream.seek(0)
        stream.truncate()


def served(messages: list[str], queue: str) -> dict[str, str]:
    """Every surface the running exporter serves, from errors stored as the poller stores them
    (through the process's redactor), and log lines logged as the exporter logs them."""
    stored = [redact(message) for message in messages]  # poller.py: _failed
    log = logging.getLogger("exporter.poller")
    for message in messages:
        log.warning("collection failed", extra={"fields": {"reason": "connection", "err": message}})
    try:
        raise ConnectionError(messages[1])
    except ConnectionError:
        log.exception("unexpected failure")
    statuses = tuple(QueueStatus(view(queue, up=False), error, error, 1.0) for error in stored)
    config = ConfigStatus(successful=False, last_error=redact(messages[0]), last_failure_at=1.0)
    page = StatusPage(
        telemetry_path="/metrics", uptime=1.0, now=2.0, config=config, queues=statuses[:1]
    )
    return {
        "status page": status_page(page),
        "/readyz": not_ready((queue, error) for error in stored) or "",
        "/metrics": render([view(queue)], process_metrics=False).decode(),
    }


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    password=passwords,
    shape=st.sampled_from(sorted(SHAPES)),
    source=st.sampled_from(SOURCES),
    fmt=st.sampled_from(["logfmt", "json"]),
)
def test_no_form_of_the_password_reaches_any_surface_for_any_dsn_shape(
    password: str, shape: str, source: str, fmt: str
) -> None:
    dsn = SHAPES[shape](password)
    with tempfile.TemporaryDirectory() as scratch, process_state() as (out, err):
        flags, environ, config = sources(shape, source, dsn, password, Path(scratch))
        try:
            loaded = load_settings(str(config), environ, dict(f.split("=", 1) for f in flags))
        except ConfigError:
            loaded = None
        flags.append(f"--log.format={fmt}")
        surfaces: dict[str, str] = {}
        if loaded is None:
            assert main([*flags, "--config.file", str(config)], environ) == 2
            surfaces["the start's refusal"] = out.getvalue() + err.getvalue()
            assert "database.dsn" in surfaces["the start's refusal"]
            clear(out, err)
            assert main([*flags, "--config.check", str(config)], environ) == 1
            surfaces["--config.check"] = out.getvalue() + err.getvalue()
            assert "database.dsn" in surfaces["--config.check"]
        else:
            queue = loaded.queues[0].name
            said = server_messages(dsn, password)
            report = Report(
                [QueueReport(queue, warnings=said[2:3], refusals=said[:2], unchecked=said[4])],
                refusals=said[3:4],
            )
            with mock.patch("exporter.preflight.check_config", return_value=report):
                assert main([*flags, "--config.check", str(config)], environ) == 1
            surfaces["--config.check"] = out.getvalue() + err.getvalue()
            assert surfaces["--config.check"].count("\n") == 5  # each finding, none lost
            clear(out, err)
            probe = ProbeResult(False, f"unhealthy: {said[1]}")
            with mock.patch("exporter.web.healthcheck.probe", return_value=probe):
                assert main(["healthcheck", *flags, "--config.file", str(config)], environ) == 1
            surfaces["healthcheck"] = out.getvalue() + err.getvalue()
            clear(out, err)
            surfaces.update(served(said, queue))  # logged through --config.check's set-up
            surfaces["log lines"] = err.getvalue()
            # repr() is no surface of its own: it leaves in a log line or a traceback.
            surfaces["repr(settings) in a line"] = redact(repr(loaded))
            assert surfaces["log lines"].count("\n") == len(said) + 1, surfaces["log lines"]
            assert f"queue {queue}: not ready" in surfaces["/readyz"]
    assert not leaks((password,), surfaces), leaks((password,), surfaces)


def test_the_incident_dsn_is_refused_by_the_start_and_the_check_without_its_password(
    tmp_path: Path,
) -> None:
    dsn = "postgresql:/jobqueue_exporter:exp-secret@127.0.0.1:55433/app"
    config = tmp_path / "config.yml"
    config.write_text("collect:\n  interval: 5s\n", encoding="utf-8")
    with process_state() as (out, err):
        assert main(["--database.dsn", dsn, "--config.check", str(config)], {}) == 1
        assert main(["--database.dsn", dsn], {}) == 2
        said = out.getvalue() + err.getvalue()
    assert "exp-secret" not in said
    assert said.count("database.dsn: the scheme must be followed by '//'") == 2


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        # A server quoting what it took for a database name, in a logfmt line.
        (
            'err="connection failed: database \\"u:exp-secret@127.0.0.1:55433/app\\" does not exist"',
            'err="connection failed: database \\"u:***@127.0.0.1:55433/app\\" does not exist"',
        ),
        ("postgresql:/u:exp-secret@h/app", "postgresql:/u:***@h/app"),
        ("postgresql:u:exp-secret@h/app", "postgresql:u:***@h/app"),
        ("postgresql:///u:exp-secret@h/app", "postgresql:///u:***@h/app"),
        ("postgresql://u:exp@secret@h/app", "postgresql://u:***@h/app"),
        ("dsn=u:exp-secret@h", "dsn=u:***@h"),
        ("?sslmode=require&sslpassword=exp-secret&x=1", "?sslmode=require&sslpassword=***&x=1"),
    ],
)
def test_dsn_shaped_passwords_are_masked_though_never_configured(text: str, masked: str) -> None:
    assert mask_patterns(text) == masked
    assert Redactor().line(text) == masked


def test_a_known_secret_is_masked_in_every_form_and_a_longer_one_first() -> None:
    secret = 'p@ss/wörd "x"'
    redactor = Redactor([secret, "p@ss"])
    for form in forms(secret.replace("p@ss", "Zqp@ss")) | {secret, urllib.parse.quote(secret)}:
        text = form.replace("Zq", "")
        assert "p@ss" not in redactor(f"before {text} after"), form
    assert redactor('x p@ss/wörd "x" y') == "x *** y"


def test_the_process_redactor_learns_secrets_and_never_forgets_one() -> None:
    with mock.patch.object(redaction, "_process", Redactor()):
        redaction.remember(["first-secret"])
        redaction.remember(["second-secret"])
        assert redact("first-secret second-secret") == "*** ***"
        assert redaction.current().secrets == {"first-secret", "second-secret"}


@pytest.mark.parametrize(
    ("dsn", "found"),
    [
        ("postgresql://u:p%40ss@h/db", {"p%40ss", "p@ss"}),
        ("postgresql://u@h/db?password=a%2Fb&sslpassword=k", {"a/b", "k", "a%2Fb"}),
        ("postgresql:/u:exp-secret@h:5432/app", {"exp-secret"}),
        ("host=h password='a b\\'c' dbname=x", {"a b\\'c", "a b'c"}),
        ("postgresql://u@h/db", set()),
    ],
)
def test_every_password_a_dsn_carries_is_found_in_any_shape(dsn: str, found: set[str]) -> None:
    assert found <= dsn_secrets(dsn)
    assert not dsn_secrets(dsn) - found - {s for s in dsn_secrets(dsn) if s in dsn}


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://app@h:5432/orders?user=admin%40server",
        "postgresql:///orders?host=/var/run/postgresql",
        "postgresql://app:%3Fa%2Fb%23c%40@h/orders",
        "postgres://app:pa ss@[::1]:5432/orders?sslmode=require",
    ],
)
def test_the_strict_shape_still_takes_every_dsn_asyncpg_reads_as_meant(dsn: str) -> None:
    check_dsn(dsn)


def test_a_traceback_nobody_caught_leaves_through_the_redactor(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from exporter.cli import print_traceback

    with mock.patch.object(redaction, "_process", Redactor()):
        redaction.remember([f"{MARKER}-crash"])
        try:
            raise RuntimeError(f"connect to postgresql://u:{MARKER}-crash@h/db failed")
        except RuntimeError as exc:
            print_traceback(type(exc), exc, exc.__traceback__)
    said = capsys.readouterr().err
    assert "RuntimeError: connect to postgresql://u:***@h/db failed" in said
    assert MARKER not in said
