"""The throwaway PostgreSQL cluster: lifecycle, authentication, running as root, and the
initdb template the suite copies for every cluster."""

from __future__ import annotations

import os
import pwd
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from exporter.demo import cluster as cluster_module
from exporter.demo.cluster import Cluster, ClusterError, DataTemplate, find_bin_dir
from tests.conftest import execute, fetchval


@pytest.fixture
def server_binaries(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts the server binaries run (initdb, pg_ctl) by every cluster and template."""
    counts: Counter[str] = Counter()
    run = cluster_module.run_server_binary

    def counted(bin_dir: Path, args: Sequence[str], *rest: Any) -> Any:
        counts[args[0]] += 1
        return run(bin_dir, args, *rest)

    monkeypatch.setattr(cluster_module, "run_server_binary", counted)
    return counts


@pytest.mark.cluster
async def test_start_stop_restart_keeps_port_and_data(fresh_cluster: Cluster) -> None:
    dsn = fresh_cluster.dsn()
    port = fresh_cluster.port
    assert fresh_cluster.is_running()
    await execute(dsn, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)")

    fresh_cluster.stop()
    assert not fresh_cluster.is_running()
    with pytest.raises(ConnectionRefusedError):
        await asyncpg.connect(dsn, timeout=5)

    fresh_cluster.start()
    assert await fetchval(dsn, "SELECT x FROM kept") == 42
    fresh_cluster.restart()
    assert fresh_cluster.port == port
    assert fresh_cluster.dsn() == dsn
    assert await fetchval(dsn, "SELECT x FROM kept") == 42
    assert await fetchval(dsn, "SHOW fsync") == "off"


@pytest.mark.cluster
async def test_immediate_stop_kills_sessions_and_recovers_committed_data(
    fresh_cluster: Cluster,
) -> None:
    dsn = fresh_cluster.dsn()
    await execute(dsn, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
    conn = await asyncpg.connect(dsn)
    try:
        fresh_cluster.stop("immediate")
        assert not fresh_cluster.is_running()
        with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
            await conn.fetchval("SELECT 1")
    finally:
        conn.terminate()
    fresh_cluster.start()
    assert await fetchval(dsn, "SELECT count(*) FROM t") == 1


@pytest.mark.cluster
async def test_password_role_needs_its_password(fresh_cluster: Cluster) -> None:
    secret = "s3cr:et/@pw"
    fresh_cluster.create_role("app", secret, grants=["GRANT pg_read_all_data TO app"])
    dsn = fresh_cluster.dsn(user="app", password=secret)
    assert await fetchval(dsn, "SELECT current_user") == "app"
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(fresh_cluster.dsn(user="app", password="wrong"))
    with pytest.raises((asyncpg.PostgresError, asyncpg.InterfaceError)):
        await asyncpg.connect(fresh_cluster.dsn(user="app"))


@pytest.mark.cluster
async def test_role_without_password_is_trusted(fresh_cluster: Cluster) -> None:
    fresh_cluster.create_role("reader")
    assert await fetchval(fresh_cluster.dsn(user="reader"), "SELECT current_user") == "reader"


@pytest.mark.cluster
async def test_server_runs_as_postgres_user_when_root(fresh_cluster: Cluster) -> None:
    pid = int((fresh_cluster.data_dir / "postmaster.pid").read_text().split()[0])
    owner = os.stat(f"/proc/{pid}").st_uid
    expected = pwd.getpwnam("postgres").pw_uid if os.geteuid() == 0 else os.geteuid()
    assert owner == expected
    assert fresh_cluster.data_dir.stat().st_uid == expected
    assert fresh_cluster.log_file.exists()


@pytest.mark.cluster
def test_destroy_removes_everything() -> None:
    with Cluster() as cluster:
        base = cluster.base
        assert cluster.is_running()
    assert not base.exists()


@pytest.mark.cluster
async def test_clusters_of_one_template_run_initdb_once_and_share_no_data(
    server_binaries: Counter[str],
) -> None:
    template = DataTemplate()
    try:
        with Cluster(template=template) as first, Cluster(template=template) as second:
            assert server_binaries["initdb"] == 1
            assert first.port != second.port
            assert first.data_dir.stat().st_uid == template.base.stat().st_uid  # type: ignore[union-attr]
            await execute(first.dsn(), "CREATE TABLE only_in_first (x int)")
            assert await fetchval(second.dsn(), "SELECT to_regclass('only_in_first')") is None
            assert await fetchval(second.dsn(), "SHOW port") == str(second.port)
            made = template.base
            assert made is not None
    finally:
        template.remove()
    assert not made.exists()


@pytest.mark.cluster
def test_without_a_template_a_cluster_runs_initdb_itself(
    server_binaries: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the demo and the benchmark do: no shared template outside the test session.
    monkeypatch.setattr(cluster_module, "_shared", None)
    with Cluster() as cluster:
        assert cluster.is_running()
    assert server_binaries["initdb"] == 1


def test_a_template_made_with_other_binaries_is_not_copied(tmp_path: Path) -> None:
    other = DataTemplate(tmp_path / "other" / "bin")
    cluster = Cluster(template=other)
    try:
        assert cluster.template is None
    finally:
        cluster.destroy()


def test_missing_binaries_say_how_to_install(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="apt-get install postgresql"):
        find_bin_dir(path=str(tmp_path), roots=[str(tmp_path / "nothing" / "*" / "bin")])


def test_highest_version_is_preferred(tmp_path: Path) -> None:
    for version in ("9.6", "13", "15"):
        bin_dir = tmp_path / version / "bin"
        bin_dir.mkdir(parents=True)
        for name in ("initdb", "pg_ctl", "postgres"):
            (bin_dir / name).touch()
    assert find_bin_dir(path="", roots=[str(tmp_path / "*" / "bin")]) == tmp_path / "15" / "bin"
