"""The Dockerfile, the lock file it installs from, and LICENSE.

No container engine runs here, so these tests check what can be checked without one:
hadolint, that every file the image copies exists and is in the build context, that a wheel
builds from exactly those files, the base image's pin, the lock file's hashes and coverage of
pyproject's runtime dependencies, and the HEALTHCHECK command.
"""

from __future__ import annotations

import fnmatch
import http.server
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import exporter
from exporter.settings import SETTINGS, WebSettings
from tests.artefacts.deploy_files import (
    DEFAULT_PORT,
    DOCKERFILE,
    ROOT,
    dockerfile_instructions,
    find_tool,
)


def builder_copy_sources() -> list[str]:
    """Sources of the COPY instructions that read the build context (not --from=stage)."""
    sources: list[str] = []
    for keyword, rest in dockerfile_instructions():
        if keyword not in ("COPY", "ADD"):
            continue
        words = shlex.split(rest)
        if any(w.startswith("--from") for w in words):
            continue
        paths = [w for w in words if not w.startswith("--")]
        sources.extend(paths[:-1])
    return sources


# --- LICENSE -------------------------------------------------------------------------------


def test_license_is_the_full_apache_2_text() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert len(text) > 10_000  # the full text, not a stub pointing at the URL


# --- Dockerfile ----------------------------------------------------------------------------


def test_dockerfile_passes_hadolint() -> None:
    hadolint = find_tool("hadolint")
    done = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_file_the_dockerfile_copies_exists_and_is_in_the_build_context() -> None:
    sources = builder_copy_sources()
    assert sources, "the Dockerfile copies nothing from the build context"
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
        top = source.rstrip("/").split("/")[0]
        hits = [p for p in ignored if fnmatch.fnmatch(top, p.rstrip("/"))]
        assert not hits, f"COPY {source} is excluded from the build context by .dockerignore {hits}"


def test_dockerignore_keeps_local_state_out_of_the_context() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".git", ".venv", ".venv-demo", ".pytest_cache", ".mypy_cache", "tests"} <= ignored


def test_image_is_multi_stage_on_a_pinned_slim_python_base() -> None:
    instructions = dockerfile_instructions()
    args = dict(
        rest.split("=", 1) for keyword, rest in instructions if keyword == "ARG" and "=" in rest
    )
    froms = [rest for keyword, rest in instructions if keyword == "FROM"]
    assert len(froms) == 2
    assert froms[0].endswith(" AS builder")
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base), base
    assert all(f.split()[0] == "${PYTHON_IMAGE}" for f in froms)
    # The final stage takes only the venv from the builder, not the source tree.
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    final = instructions[last_from:]
    copies = [rest for keyword, rest in final if keyword == "COPY"]
    assert copies == ["--from=builder /opt/jobqueue-exporter /opt/jobqueue-exporter"]


def test_image_runs_the_console_script_as_a_fixed_non_root_user_on_the_default_port() -> None:
    instructions = dict(dockerfile_instructions())
    assert json.loads(instructions["ENTRYPOINT"]) == ["jobqueue-exporter"]
    assert instructions["EXPOSE"] == str(DEFAULT_PORT)
    user = instructions["USER"]
    assert re.fullmatch(r"\d+:\d+", user), "a numeric UID:GID lets Kubernetes check runAsNonRoot"
    assert int(user.split(":")[0]) != 0
    env = instructions["ENV"]
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "PYTHONUNBUFFERED=1" in env


def healthcheck_command() -> list[str]:
    """The HEALTHCHECK's exec-form command."""
    rest = dict(dockerfile_instructions())["HEALTHCHECK"]
    command = json.loads(rest[rest.index("CMD") + len("CMD") :].strip())
    assert isinstance(command, list)
    return [str(word) for word in command]


class _Health(http.server.BaseHTTPRequestHandler):
    """Answers /healthz with the status the test sets on the server."""

    def do_GET(self) -> None:
        status = 200 if self.path == "/healthz" and self.server.healthy else 503  # type: ignore[attr-defined]
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    server.healthy = True  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def run_healthcheck(port: int) -> int:
    """Run the image's HEALTHCHECK command here, pointed at a port through the environment."""
    command = healthcheck_command()
    assert command[0] == "python", "the image has no curl: the check must use Python"
    env = {**os.environ, SETTINGS["web.listen_address"].env: f":{port}"}
    done = subprocess.run(
        [sys.executable, *command[1:]], env=env, capture_output=True, timeout=30, check=False
    )
    return done.returncode


def test_healthcheck_passes_on_a_healthy_healthz_and_fails_otherwise(
    health_server: http.server.HTTPServer,
) -> None:
    port = health_server.server_address[1]
    assert run_healthcheck(port) == 0
    health_server.healthy = False  # type: ignore[attr-defined]
    assert run_healthcheck(port) != 0
    health_server.shutdown()
    health_server.server_close()
    assert run_healthcheck(port) != 0


def test_healthcheck_defaults_to_the_exporters_default_port() -> None:
    command = " ".join(healthcheck_command())
    assert f"'{WebSettings().listen_address[0]}'" in command
    assert SETTINGS["web.listen_address"].env in command
    assert "/healthz" in command


def test_builder_stage_builds_a_wheel_from_exactly_the_copied_files(tmp_path: Path) -> None:
    """Copy only what the builder stage copies and build the wheel the way its RUN does."""
    context = tmp_path / "src"
    context.mkdir()
    for source in builder_copy_sources():
        origin = ROOT / source
        if origin.is_dir():
            shutil.copytree(origin, context / source, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, context / source)
    wheels = tmp_path / "wheels"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(wheels), "."],
        cwd=context, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = wheels.glob("*.whl")
    assert wheel.name.startswith(f"jobqueue_exporter-{exporter.__version__}-")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = archive.read(entry_points).decode()
    # Runtime files the image and the compose stack rely on.
    assert {"exporter/sql/indexes.sql", "exporter/sql/schema.sql", "exporter/cli.py"} <= names
    assert re.search(r"^jobqueue-exporter = exporter\.cli:main$", scripts, re.MULTILINE)
