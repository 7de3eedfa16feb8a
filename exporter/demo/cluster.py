"""A throwaway PostgreSQL cluster in a temporary directory, for the demo and the tests.

PostgreSQL refuses to run as root, so when this process is root every server binary
runs as the ``postgres`` system user and the temporary directory belongs to that user.

A process that starts many clusters (the test suite) runs initdb once: inside
:func:`shared_template`, every :class:`Cluster` copies one :class:`DataTemplate` instead.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote

StopMode = Literal["fast", "immediate", "smart"]

SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")
SEARCH_ROOTS = ("/usr/lib/postgresql/*/bin",)
INSTALL_HINT = (
    "install the PostgreSQL server (Debian/Ubuntu: apt-get install postgresql; "
    "the binaries land in /usr/lib/postgresql/<version>/bin) or put initdb, pg_ctl "
    "and postgres on PATH"
)
# Members of this role log in without a password; everyone else but postgres needs one.
TRUSTED_ROLE = "trusted_login"
RUN_AS = "postgres"

SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "100",
    "shared_buffers": "'128MB'",
    # Surviving an OS crash is worthless in a throwaway cluster, so nothing is flushed to disk.
    "fsync": "off",
    "full_page_writes": "off",
    # But a commit must survive a server crash (pg_ctl stop -m immediate in fault tests):
    # with synchronous_commit off the last commits vanish with the WAL buffers. With fsync
    # off a synchronous commit costs only a write() to the page cache anyway.
    "synchronous_commit": "on",
    "log_line_prefix": "'%m [%p] %u@%d '",
    "timezone": "'UTC'",
}
# What initdb is asked for, the same for a template and a cluster's own data directory.
INITDB = ("initdb", "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync", "--auth=trust")


class ClusterError(Exception):
    """The throwaway cluster could not be found, created, started or stopped."""


def find_bin_dir(path: str | None = None, roots: Sequence[str] = SEARCH_ROOTS) -> Path:
    """Find the directory with initdb, pg_ctl and postgres: PATH first, else the highest version."""
    first = shutil.which("initdb", path=path if path is not None else os.environ.get("PATH"))
    if first is not None:
        # pg_ctl finds postgres beside itself, so use the real directory, not a symlink farm.
        candidate = Path(os.path.realpath(first)).parent
        if all((candidate / name).is_file() for name in SERVER_BINARIES):
            return candidate
    found = [Path(d) for root in roots for d in glob.glob(root)]
    found = [d for d in found if all((d / name).is_file() for name in SERVER_BINARIES)]
    if not found:
        raise ClusterError(f"PostgreSQL server binaries not found: {INSTALL_HINT}")
    return max(found, key=_version_key)


def _version_key(directory: Path) -> tuple[int, ...]:
    """Sort key of /usr/lib/postgresql/<version>/bin by numeric version."""
    return tuple(int(n) for n in re.findall(r"\d+", directory.parent.name)) or (0,)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_server_binary(
    bin_dir: Path, args: Sequence[str], cwd: Path, user: pwd.struct_passwd | None
) -> subprocess.CompletedProcess[str]:
    """Run initdb, pg_ctl or postgres from ``bin_dir`` in ``cwd``, as ``user`` when given."""
    kwargs: dict[str, Any] = {}
    if user is not None:
        kwargs.update(user=user.pw_uid, group=user.pw_gid, extra_groups=[])
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return subprocess.run(
        [str(bin_dir / args[0]), *args[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        **kwargs,
    )


def server_user() -> pwd.struct_passwd | None:
    """The system user the server binaries run as: ``postgres`` when we are root, else None."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(RUN_AS)
    except KeyError:
        raise ClusterError(
            f"running as root needs a '{RUN_AS}' system user to run PostgreSQL: {INSTALL_HINT}"
        ) from None


class DataTemplate:
    """One data directory made by initdb on first use, copied for each cluster that asks.

    initdb runs the bootstrap backend over every system catalog (about 0.6 s of CPU on a quiet
    2-core machine, several seconds beside other work); copying its 40 MB result takes a tenth
    of that. The copy is the same cluster initdb would have made: same options, fresh files.
    """

    def __init__(self, bin_dir: Path | None = None, *, base_dir: Path | None = None) -> None:
        # Nothing is looked up yet: a session that starts no cluster needs no PostgreSQL.
        self._bin_dir = bin_dir
        self._base_dir = base_dir
        self._lock = threading.Lock()
        self.base: Path | None = None

    @property
    def bin_dir(self) -> Path:
        """The binaries the template is made with (found on first use when not given)."""
        if self._bin_dir is None:
            self._bin_dir = find_bin_dir()
        return self._bin_dir

    def copy_to(self, data_dir: Path) -> None:
        """Make ``data_dir`` a copy of the template (ownership and modes kept), initdb first."""
        with self._lock:
            if self.base is None:
                self.base = self._initdb()
        # cp -a keeps the owner (postgres, when we are root) and the 0700 modes initdb set.
        done = subprocess.run(
            ["cp", "-a", str(self.base / "data"), str(data_dir)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise ClusterError(f"copying the initdb template failed: {done.stderr.strip()}")

    def remove(self) -> None:
        """Delete the template's files (clusters copied from it are not touched)."""
        with self._lock:
            if self.base is not None:
                shutil.rmtree(self.base, ignore_errors=True)
                self.base = None

    def _initdb(self) -> Path:
        user = server_user()
        base = Path(tempfile.mkdtemp(prefix="jobqueue-pg-template-", dir=self._base_dir))
        if user is not None:
            os.chown(base, user.pw_uid, user.pw_gid)
        done = run_server_binary(self.bin_dir, [*INITDB, "-D", str(base / "data")], base, user)
        if done.returncode != 0:
            shutil.rmtree(base, ignore_errors=True)
            raise ClusterError(
                f"initdb failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
            )
        return base


_shared: DataTemplate | None = None


@contextlib.contextmanager
def shared_template(base_dir: Path | None = None) -> Iterator[DataTemplate]:
    """Inside the block, every Cluster made without a template copies this one (initdb once)."""
    global _shared
    template = DataTemplate(base_dir=base_dir)
    previous, _shared = _shared, template
    try:
        yield template
    finally:
        _shared = previous
        template.remove()


class Cluster:
    """One PostgreSQL cluster in a temporary directory, on a port chosen once at creation.

    Its data directory comes from ``template`` when given, else from the :func:`shared_template`
    in force when it was made (if its binaries are the template's), else from its own initdb.
    """

    def __init__(
        self,
        bin_dir: Path | None = None,
        *,
        base_dir: Path | None = None,
        template: DataTemplate | None = None,
    ) -> None:
        self.bin_dir = bin_dir if bin_dir is not None else find_bin_dir()
        self.port = free_port()
        self._user = server_user()
        chosen = template if template is not None else _shared
        self.template = chosen if chosen is not None and chosen.bin_dir == self.bin_dir else None
        self.base = Path(tempfile.mkdtemp(prefix="jobqueue-pg-", dir=base_dir))
        if self._user is not None:
            os.chown(self.base, self._user.pw_uid, self._user.pw_gid)
        self.data_dir = self.base / "data"
        self.socket_dir = self.base / "sock"
        self.log_file = self.base / "postgresql.log"
        self._initialized = False
        self._roles_created = False

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Create the cluster on first use, start the server and wait until it accepts clients."""
        if not self._initialized:
            self._initdb()
        if self.is_running():
            return
        self._server(
            "pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data_dir),
            "-l", str(self.log_file),
        )  # fmt: skip
        if not self._roles_created:
            self.psql(f'CREATE ROLE "{TRUSTED_ROLE}" NOLOGIN')
            self._roles_created = True

    def stop(self, mode: StopMode = "fast") -> None:
        """Stop the server: fast (end sessions), immediate (crash), smart (wait for clients)."""
        if not self._initialized or not self.is_running():
            return
        self._server("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", str(self.data_dir))

    def restart(self) -> None:
        """Stop (fast) and start again on the same port and data directory."""
        self.stop("fast")
        self.start()

    def is_running(self) -> bool:
        """Whether a server runs on this data directory."""
        if not self._initialized:
            return False
        done = self._run_server_binary(["pg_ctl", "status", "-D", str(self.data_dir)])
        return done.returncode == 0

    def destroy(self) -> None:
        """Stop the server without waiting for clients and remove every file of the cluster."""
        try:
            if self._initialized and self.is_running():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.destroy()

    # -- access ------------------------------------------------------------------------

    def dsn(
        self, dbname: str = "postgres", user: str = "postgres", password: str | None = None
    ) -> str:
        """A libpq URL to 127.0.0.1 (trust for postgres, scram for roles with a password)."""
        auth = quote(user, safe="")
        if password is not None:
            auth += ":" + quote(password, safe="")
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{quote(dbname, safe='')}"

    def psql(self, sql: str, dbname: str = "postgres", **variables: str) -> str:
        """Run SQL as postgres over the socket; ``:'var'`` and ``:"var"`` quote variables safely."""
        args = [str(self.bin_dir / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"]
        args += ["-h", str(self.socket_dir), "-p", str(self.port), "-U", "postgres", "-d", dbname]
        for name, value in variables.items():
            args += ["-v", f"{name}={value}"]
        done = subprocess.run(args, input=sql, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ClusterError(f"psql failed: {done.stderr.strip()}")
        return done.stdout

    def create_database(self, name: str, template: str | None = None) -> None:
        """Create a database owned by postgres, optionally as a copy of a template."""
        sql = 'CREATE DATABASE :"name"' + (' TEMPLATE :"template"' if template else "")
        self.psql(sql, name=name, **({"template": template} if template else {}))

    def create_role(
        self, name: str, password: str | None = None, *, grants: Sequence[str] = ()
    ) -> None:
        """Create a login role: with a password it must authenticate (scram), else it is trusted.

        ``grants`` are SQL statements run afterwards as postgres, e.g. ``GRANT pg_monitor TO app``
        (run them in the right database with :meth:`psql` when they name tables).
        """
        if password is None:
            self.psql(f'CREATE ROLE :"name" LOGIN IN ROLE "{TRUSTED_ROLE}"', name=name)
        else:
            self.psql(
                "CREATE ROLE :\"name\" LOGIN PASSWORD :'password'", name=name, password=password
            )
        for statement in grants:
            self.psql(statement)

    # -- internals ---------------------------------------------------------------------

    def _initdb(self) -> None:
        """Run initdb (or copy the template) and write the settings and the authentication rules."""
        self.socket_dir.mkdir(mode=0o700)
        if self._user is not None:
            os.chown(self.socket_dir, self._user.pw_uid, self._user.pw_gid)
        if self.template is not None:
            self.template.copy_to(self.data_dir)
        else:
            self._server(*INITDB, "-D", str(self.data_dir))
        settings = dict(SETTINGS)
        settings["port"] = str(self.port)
        settings["unix_socket_directories"] = f"'{self.socket_dir}'"
        conf = "".join(f"{key} = {value}\n" for key, value in settings.items())
        self._append_as_owner(self.data_dir / "postgresql.conf", "\n# jobqueue-exporter\n" + conf)
        # First match wins: postgres and members of the trusted role get in without a
        # password, everyone else must prove it, so tests can check a real password.
        hba = (
            "local all postgres trust\n"
            "host  all postgres 127.0.0.1/32 trust\n"
            f"local all +{TRUSTED_ROLE} trust\n"
            f"host  all +{TRUSTED_ROLE} 127.0.0.1/32 trust\n"
            "local all all scram-sha-256\n"
            "host  all all 127.0.0.1/32 scram-sha-256\n"
        )
        (self.data_dir / "pg_hba.conf").write_text(hba)
        self._initialized = True

    def _append_as_owner(self, path: Path, text: str) -> None:
        """Append to a file initdb created (we are root or its owner, so a plain write works)."""
        with path.open("a") as handle:
            handle.write(text)

    def _server(self, *args: str) -> None:
        """Run a server binary; on failure raise ClusterError with its output and the log's tail."""
        done = self._run_server_binary(list(args))
        if done.returncode != 0:
            raise ClusterError(
                f"{args[0]} {args[1] if len(args) > 1 else ''} failed ({done.returncode}): "
                f"{done.stderr.strip() or done.stdout.strip()}{self._log_tail()}"
            )

    def _run_server_binary(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        """Run one of initdb/pg_ctl from bin_dir, as the postgres user when we are root."""
        return run_server_binary(self.bin_dir, args, self.base, self._user)

    def _log_tail(self, lines: int = 20) -> str:
        """The last lines of the server log, to make a failed start explain itself."""
        with contextlib.suppress(OSError):
            tail = self.log_file.read_text(errors="replace").splitlines()[-lines:]
            if tail:
                return "\nserver log:\n" + "\n".join(tail)
        return ""
