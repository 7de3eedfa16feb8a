"""Fixtures of the database tier's logical-counting tests (tests/db/test_logical*.py)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from exporter.demo.cluster import Cluster
from tests.logical_cluster import logical_cluster as logical_cluster_of
from tests.logical_cluster import published_database

_names = itertools.count()


@pytest.fixture(scope="module")
def logical_cluster() -> Iterator[Cluster]:
    """A cluster with wal_level=logical and a bounded max_slot_wal_keep_size (one per module)."""
    settings = {"max_slot_wal_keep_size": "1GB", "max_prepared_transactions": "4"}
    with logical_cluster_of(settings) as cluster:
        yield cluster


@pytest.fixture
async def logical_dsn(logical_cluster: Cluster) -> str:
    """A fresh queue database whose job table is published with its whole old rows."""
    return await published_database(logical_cluster, f"published_{next(_names)}")
