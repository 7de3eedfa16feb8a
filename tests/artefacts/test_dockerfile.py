"""The Dockerfile, the lock file it installs from, and LICENSE.

No container engine runs here, so these tests check what can be checked without one:
hadolint, that every file the image copies exists and is in the build context, that a wheel
builds from exactly those files, the base image's pin, the lock file's hashes and coverage of
pyproject's runtime dependencies, and the HEALTHCHECK command.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import exporter
from exporter.settings.flags import HEALTHCHECK, parse_command_line
from exporter.web.healthcheck import TIMEOUT_SECONDS
from tests.artefacts.deploy_files import (
    DEFAULT_PORT,
    DOCKERFILE,
    LOCK_FILE,
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
    # A tag can be rebuilt upstream; the digest of its image index cannot.
    pinned = re.fullmatch(r"(python:3\.11\.\d+-slim-bookworm)@sha256:[0-9a-f]{64}", base)
    assert pinned, base
    comments = [line for line in DOCKERFILE.read_text().splitlines() if line.startswith("#")]
    assert any(pinned.group(1) in line for line in comments), "a comment names the tag"
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


def test_healthcheck_runs_the_healthcheck_command_on_the_servers_own_flags() -> None:
    command = healthcheck_command()
    entrypoint = json.loads(dict(dockerfile_instructions())["ENTRYPOINT"])
    # The console script the image runs, its healthcheck command, reading the flags of PID 1
    # (the exec-form ENTRYPOINT): the check gets the image's environment, not the arguments.
    assert command == [*entrypoint, HEALTHCHECK, "--pid=1"]
    namespace = parse_command_line(command[1:])
    assert (namespace.command, namespace.pid) == (HEALTHCHECK, 1)
    options = dict(dockerfile_instructions())["HEALTHCHECK"].split(" CMD ")[0]
    timeout = re.search(r"--timeout=(\d+)s", options)
    assert timeout is not None
    assert int(timeout.group(1)) > TIMEOUT_SECONDS, "the probe gives up before Docker does"


# --- the lock file -----------------------------------------------------------------------------


def locked() -> dict[str, tuple[str, list[str]]]:
    """The lock's pins: normalised name -> (version, hashes)."""
    pins: dict[str, tuple[str, list[str]]] = {}
    entries = LOCK_FILE.read_text().replace("\\\n", " ").splitlines()
    for entry in entries:
        words = entry.split("#")[0].split()
        if not words:
            continue
        name, sep, version = words[0].partition("==")
        assert sep, f"not pinned with ==: {entry.strip()}"
        hashes = [w.removeprefix("--hash=sha256:") for w in words[1:]]
        assert all(re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes), entry
        pins[canonicalize_name(name)] = (version, hashes)
    return pins


def test_the_lock_pins_every_runtime_dependency_of_pyproject_with_hashes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = locked()
    assert pins
    for name, (_, hashes) in pins.items():
        assert hashes, f"{name} has no --hash"
    for text in project["dependencies"]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"requirements.lock lacks {name}: regenerate it (see Dockerfile)"
        assert requirement.specifier.contains(pins[name][0]), f"{name} {pins[name][0]}: {text}"
    # Nothing of the dev or preset extras sneaks into the image.
    extras = project["optional-dependencies"]
    for text in extras["dev"]:
        name = canonicalize_name(Requirement(text).name)
        if name not in {canonicalize_name(Requirement(d).name) for d in project["dependencies"]}:
            assert name not in pins, f"{name} is a dev dependency"


def test_the_image_installs_the_lock_with_require_hashes_and_nothing_unlocked() -> None:
    assert LOCK_FILE.name in builder_copy_sources()
    (run,) = [
        rest for keyword, rest in dockerfile_instructions() if keyword == "RUN" and "pip" in rest
    ]
    installs = [step.strip() for step in run.split("&&") if " install " in step]
    assert installs == [
        f"/opt/jobqueue-exporter/bin/pip install --no-deps --require-hashes -r {LOCK_FILE.name}",
        "/opt/jobqueue-exporter/bin/pip install --no-deps /wheels/*.whl",
    ]
    assert run.rstrip().endswith("/opt/jobqueue-exporter/bin/pip check")


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
