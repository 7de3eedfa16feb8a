"""--web.systemd-socket: serve on the socket systemd passes (socket activation), as the Go
exporters do, instead of binding the listen addresses."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from exporter.cli import systemd_sockets

ROOT = Path(__file__).resolve().parents[2]
# What systemd does before it starts the service: the socket as descriptor 3, LISTEN_FDS=1,
# and LISTEN_PID naming the process (exec keeps the process id).
SYSTEMD = """
import os, sys
os.dup2(int(sys.argv[1]), 3)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1")
os.execv(sys.executable, [sys.executable, "-m", "exporter", *sys.argv[2:]])
"""


def test_the_sockets_are_only_taken_by_the_process_they_were_passed_to() -> None:
    me = str(os.getpid())
    assert systemd_sockets({"LISTEN_PID": me, "LISTEN_FDS": "2"}) == (3, 4)
    assert systemd_sockets({"LISTEN_PID": "1", "LISTEN_FDS": "2"}) == ()
    assert systemd_sockets({"LISTEN_FDS": "2"}) == ()
    assert systemd_sockets({"LISTEN_PID": me, "LISTEN_FDS": "x"}) == ()


@pytest.mark.daemon
async def test_a_socket_passed_by_systemd_is_served(tmp_path: Path) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    err = tmp_path / "stderr"
    with err.open("wb") as stderr:
        process = subprocess.Popen(  # noqa: ASYNC220 (started once; nothing else runs yet)
            [
                sys.executable, "-c", SYSTEMD, str(listener.fileno()),
                "--web.systemd-socket", "--web.listen-address=127.0.0.1:1",
                "--database.dsn=postgresql://nobody@127.0.0.1:1/none",
            ],
            cwd=ROOT, pass_fds=(listener.fileno(),), stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
    listener.close()  # the child holds it now
    try:
        deadline = time.monotonic() + 30
        async with aiohttp.ClientSession() as http:
            while True:
                assert process.poll() is None, err.read_text()
                try:
                    async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                        assert (r.status, await r.text()) == (200, "ok\n")
                        break
                except aiohttp.ClientConnectionError:
                    assert time.monotonic() < deadline, err.read_text()
                    await asyncio.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(process.wait, 30) == 0, err.read_text()
    assert "systemd sockets 3" in err.read_text()
