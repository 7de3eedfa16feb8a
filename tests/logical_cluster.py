"""Throwaway clusters for counting: logical: wal_level=logical, replication from loopback, and
queue databases whose job table is published with its whole old rows."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

import pytest

from exporter.demo.cluster import Cluster, ClusterError
from exporter.demo.queue import prepare_database
from tests.conftest import execute

PUBLICATION = "jobqueue_test"


@contextlib.contextmanager
def logical_cluster(settings: Mapping[str, str]) -> Iterator[Cluster]:
    """A started cluster with wal_level=logical plus ``settings`` (ALTER SYSTEM), destroyed after."""
    try:
        cluster = Cluster()
    except ClusterError as exc:
        pytest.fail(str(exc))
    try:
        cluster.start()
        for name, value in {"wal_level": "logical", **settings}.items():
            cluster.psql(f"ALTER SYSTEM SET {name} = '{value}'")
        with (cluster.data_dir / "pg_hba.conf").open("a") as hba:
            hba.write("host replication all 127.0.0.1/32 trust\n")
        cluster.restart()
        yield cluster
    finally:
        cluster.destroy()


async def published_database(cluster: Cluster, name: str) -> str:
    """A fresh queue database on ``cluster`` whose job table the test publication carries with
    REPLICA IDENTITY FULL; its DSN."""
    cluster.create_database(name)
    dsn = cluster.dsn(name)
    await prepare_database(dsn)
    await execute(dsn, "ALTER TABLE job REPLICA IDENTITY FULL")
    await execute(dsn, f"CREATE PUBLICATION {PUBLICATION} FOR TABLE job")
    return dsn
