"""No secret on any surface of the real process: one exporter watching five queues against the
session's PostgreSQL, each given its password another way (percent-encoded in the userinfo,
``?password=``, a password file, ``PGPASSWORD``), some right and some wrong, every password
made of the characters that break parsers. Its log lines (in each format), the status page,
``/readyz``, ``/metrics``, a failed ``/-/reload``, ``--config.check`` and ``healthcheck`` (by
flags and by ``--pid``) are searched for every form of every password; the issue's DSN with a
slash missing is refused by the start and the check without its password."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from exporter.demo.cluster import free_port
from tests.conftest import PgServer, execute
from tests.secret_forms import MARKER, leaks

pytestmark = [pytest.mark.daemon, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
TAG = uuid.uuid4().hex[:6]
RIGHT = f'{MARKER}r-{TAG}@p:a/s%s?w#"d é密 x'  # the role's password
WRONG = f'{MARKER}w-{TAG}:p@ss/"wörd"% 1'  # a wrong one, given in the DSN
ENV_WRONG = f"{MARKER}e-{TAG}%40pw&=;x"  # a wrong one, given as PGPASSWORD
SECRETS = (RIGHT, WRONG, ENV_WRONG)


def quoted(secret: str) -> str:
    return urllib.parse.quote(secret, safe="")


@pytest.fixture
def role(pg_cluster: PgServer, db_dsn: str) -> Iterator[str]:
    """A login role with a password, that may read the job table of the test's database."""
    name = f"jqe_secret_{TAG}"
    literal = RIGHT.replace("'", "''")
    asyncio.run(execute(pg_cluster.admin_dsn, f"CREATE ROLE {name} LOGIN PASSWORD '{literal}'"))
    asyncio.run(execute(db_dsn, f"GRANT SELECT ON job TO {name}"))
    try:
        yield name
    finally:
        asyncio.run(execute(db_dsn, f"REVOKE ALL ON job FROM {name}"))
        asyncio.run(execute(pg_cluster.admin_dsn, f"DROP ROLE {name}"))


def configuration(tmp_path: Path, role: str, db_dsn: str, port: int) -> Path:
    """Five queues, five ways to give a password; two of them log in."""
    host, database = db_dsn.split("@", 1)[1].rsplit("/", 1)
    secret_file = tmp_path / "password"
    secret_file.write_text(RIGHT + "\n", encoding="utf-8")
    url = f"postgresql://{role}"
    queues = [
        {"name": "wrong", "database": {"dsn": f"{url}:{quoted(WRONG)}@{host}/{database}"}},
        {"name": "nodb", "database": {"dsn": f"{url}:{quoted(RIGHT)}@{host}/jqe_missing_{TAG}"}},
        {"name": "query", "database": {"dsn": f"{url}@{host}/{database}?password={quoted(RIGHT)}"}},
        {
            "name": "file",
            "database": {"dsn": f"{url}@{host}/{database}", "password_file": str(secret_file)},
        },
        {"name": "environ", "database": {"dsn": f"{url}@{host}/{database}"}},  # PGPASSWORD
        # The password where the server echoes it: as the database name it reports missing.
        {"name": "echo", "database": {"dsn": f"{url}:{quoted(RIGHT)}@{host}/{quoted(RIGHT)}"}},
    ]
    document = {
        "collect": {"interval": "1s"},
        "web": {"listen_address": [f"127.0.0.1:{port}"], "enable_lifecycle": True},
        "queues": queues,
    }
    path = tmp_path / "config.yml"
    path.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    return path


def environment() -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "PGPASSWORD": ENV_WRONG}


def program(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False, env=environment(),
    )  # fmt: skip


def get(port: int, path: str, method: str = "GET") -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_until(done: Callable[[], bool], process: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 60
    while not done():
        assert process.poll() is None, "the exporter exited"
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.mark.parametrize("fmt", ["logfmt", "json"])
def test_no_password_reaches_any_surface_of_the_running_exporter(
    role: str, db_dsn: str, tmp_path: Path, fmt: str
) -> None:
    port = free_port()
    path = configuration(tmp_path, role, db_dsn, port)
    surfaces: dict[str, str] = {}
    log = tmp_path / "exporter.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "exporter", "--config.file", str(path), f"--log.format={fmt}"],
            cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, text=True, env=environment(),
        )  # fmt: skip
    try:

        def settled() -> bool:
            try:
                code, text = get(port, "/readyz")
                page = get(port, "/")[1]
            except OSError:
                return False
            failing = ("wrong", "nodb", "environ", "echo")
            return (
                code == 503
                and all(f"queue {name}: not ready: " in text for name in failing)
                and "queue query:" not in text
                and "queue file:" not in text
                and page.count("authentication failed") >= 2
            )

        wait_until(settled, process, "the failing queues never all showed their error")
        surfaces["/readyz"] = get(port, "/readyz")[1]
        surfaces["status page"] = get(port, "/")[1]
        surfaces["/metrics"] = get(port, "/metrics")[1]
        assert 'jobqueue_up{queue="query"} 1.0' in surfaces["/metrics"]
        assert 'jobqueue_up{queue="wrong"} 0.0' in surfaces["/metrics"]
        assert "password authentication failed" in surfaces["/readyz"]
        assert f'database "jqe_missing_{TAG}" does not exist' in surfaces["/readyz"]
        assert (
            'queue echo: not ready: connection failed: database "***" does not exist'
            in (surfaces["/readyz"])
        )
        by_flags = program("healthcheck", f"--web.listen-address=127.0.0.1:{port}")
        by_pid = program("healthcheck", f"--pid={process.pid}")
        surfaces["healthcheck"] = by_flags.stdout + by_flags.stderr
        surfaces["healthcheck --pid"] = by_pid.stdout + by_pid.stderr
        assert (by_flags.returncode, by_pid.returncode) == (0, 0), surfaces
        # A reload of a file that now holds the DSN: refused, said on two surfaces.
        broken = yaml.safe_load(path.read_text(encoding="utf-8"))
        broken["queues"][0]["database"]["dsn"] = f"postgresql:/{role}:{WRONG}@127.0.0.1:1/app"
        path.write_text(yaml.safe_dump(broken, allow_unicode=True), encoding="utf-8")
        code, surfaces["/-/reload"] = get(port, "/-/reload", method="POST")
        assert code == 500
        assert "the scheme must be followed by '//'" in surfaces["/-/reload"]
        surfaces["status page after the reload"] = get(port, "/")[1]
        assert "the scheme must be followed by" in surfaces["status page after the reload"]
    finally:
        process.terminate()
        process.wait(30)
    surfaces["log lines"] = log.read_text(encoding="utf-8")
    assert "collection failed" in surfaces["log lines"]

    path.write_text(yaml.safe_dump({**broken, "queues": broken["queues"][1:]}), encoding="utf-8")
    checked = program("--config.check", str(path))
    surfaces["--config.check"] = checked.stdout + checked.stderr
    assert checked.returncode == 1  # a wrong password and a missing database fail the gate
    assert f"{path}: queue environ: the server refused the login (" in checked.stderr
    assert f"{path}: queue nodb: the server has no such database (" in checked.stderr
    assert f"{path}: queue query: table job fits its database" in checked.stdout

    # One queue named after its database, which is named like the password: the label too.
    host = db_dsn.split("@", 1)[1].rsplit("/", 1)[0]
    echo = f"postgresql://{role}:{quoted(RIGHT)}@{host}/{quoted(RIGHT)}"
    plain = tmp_path / "plain.yml"
    plain.write_text("collect: {interval: 5s}\n", encoding="utf-8")
    named = program("--config.check", str(plain), "--database.dsn", echo)
    surfaces["--config.check, a queue named after its database"] = named.stdout + named.stderr
    assert named.returncode == 1
    assert 'queue ***: the server has no such database (connection failed: database "***"' in (
        named.stderr
    )

    incident = f"postgresql:/{role}:{WRONG}@127.0.0.1:55433/app"
    refused = program("--database.dsn", incident, "--web.listen-address=127.0.0.1:0")
    refused_check = program("--config.check", str(path), "--database.dsn", incident)
    surfaces["the start's refusal"] = refused.stdout + refused.stderr
    surfaces["the check's refusal"] = refused_check.stdout + refused_check.stderr
    assert (refused.returncode, refused_check.returncode) == (2, 1)
    assert not leaks(SECRETS, surfaces), leaks(SECRETS, surfaces)
    assert os.environ.get("PGPASSWORD") != ENV_WRONG  # the test's own process never had it
