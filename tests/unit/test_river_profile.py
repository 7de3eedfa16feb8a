"""The River preset in the exporter: its stuck test, its index script and its configuration
check, as `jobqueue-exporter` runs them. Pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.profiles.river import RESCUE_AFTER, RiverReader
from tests.unit.factories import preset_queue, reader_of


def test_the_heartbeat_timeout_is_the_rescuers_horizon_and_defaults_to_rivers_hour() -> None:
    chosen = preset_queue("river", heartbeat_timeout=600.0)
    assert reader_of(chosen, RiverReader).stuck_after == 600.0
    assert reader_of(preset_queue("river"), RiverReader).stuck_after == RESCUE_AFTER == 3600.0


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
