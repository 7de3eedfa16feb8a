"""The horizon's reads of the sessions are written once, and every profile's horizon uses them."""

from __future__ import annotations

from pathlib import Path

import pytest

import exporter
from exporter.counting.ledger import Ledger
from exporter.counting.sqltext import horizon_sessions, render_queries
from exporter.profiles import PRESETS

SQL_FILES = sorted(Path(exporter.__file__).parent.rglob("*.sql"))


def test_only_the_fragment_reads_the_sessions() -> None:
    readers = [p.name for p in SQL_FILES if "pg_stat_activity" in p.read_text(encoding="utf-8")]
    assert readers == ["horizon.sql"]


def test_the_fragment_leaves_autovacuum_workers_out_of_both_bounds() -> None:
    sessions = horizon_sessions()
    assert sessions.startswith("FROM ")
    assert sessions.count("backend_type IS DISTINCT FROM 'autovacuum worker'") == 2
    assert "writers_bound" in sessions


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_horizon_reads_the_one_fragment(name: str) -> None:
    reader = PRESETS[name].make_reader(None, Ledger())
    assert horizon_sessions() in reader.horizon_query().sql


def test_the_default_horizon_reads_the_one_fragment() -> None:
    assert horizon_sessions() in render_queries("job")["horizon"]
