"""The River preset in the exporter: its stuck test, its index script and its configuration
check, as `jobqueue-exporter` runs them. Pure."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from exporter.profiles.river import RESCUE_AFTER, RiverReader
from exporter.runtime import QueueRuntime
from exporter.settings import QueueSettings
from exporter.settings.schema import DatabaseSettings


def _settings(**collect: float) -> QueueSettings:
    base = QueueSettings(name="river", database=DatabaseSettings(dsn="postgresql://u@h/app"))
    return replace(base, profile="river", collect=replace(base.collect, **collect))


def _reader(runtime: QueueRuntime) -> RiverReader:
    mode = runtime.poller.mode
    assert isinstance(mode, RiverReader)
    return mode


def test_the_heartbeat_timeout_is_the_rescuers_horizon_and_defaults_to_rivers_hour() -> None:
    assert _reader(QueueRuntime(_settings(heartbeat_timeout=600.0))).stuck_after == 600.0
    assert _reader(QueueRuntime(_settings())).stuck_after == RESCUE_AFTER == 3600.0


def test_the_indexes_command_says_river_needs_no_index_of_the_exporters(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from exporter.cli import main

    assert (
        main(["indexes", "--queue.profile", "river", "--database.dsn", "postgresql://u@h/app"], {})
        == 0
    )
    script = capsys.readouterr().out
    assert "-- Queue river: the river preset" in script
    assert "It needs no index of the exporter's own." in script
    assert "CREATE INDEX" not in script


def test_the_configuration_check_accepts_a_river_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from exporter.cli import main

    path = tmp_path / "exporter.yml"
    path.write_text("queues:\n  - name: jobs\n    profile: river\n"
                    "    database: {dsn: postgresql://u@h/app}\n")  # fmt: skip
    assert main(["--config.check", str(path)], {}) == 0
    assert "OK" in capsys.readouterr().out
