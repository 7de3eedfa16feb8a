"""Fixtures of the preset tests: a fresh empty database per test on the session's cluster."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from tests.conftest import PgServer, execute


@pytest.fixture
async def empty_dsn(pg_cluster: PgServer) -> AsyncIterator[str]:
    """DSN of a new, empty database; the library under test installs its own schema there."""
    name = f"jqe_preset_{uuid.uuid4().hex[:12]}"
    await execute(pg_cluster.admin_dsn, f'CREATE DATABASE "{name}"')
    try:
        yield pg_cluster.dsn(name)
    finally:
        # FORCE: a worker the test SIGKILLed may leave a session behind for a moment.
        await execute(pg_cluster.admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
