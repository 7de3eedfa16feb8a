"""Paths, constants and readers shared by the deployment-artefact tests.

test_dockerfile.py checks the image, test_deploy.py and test_kustomize.py the Kubernetes
manifests, test_compose.py the compose stack; what more than one of them reads lives here.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.cli import build_parser, settings_from_namespace
from exporter.settings import AlertSettings, WebSettings, parse_listen_address

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
LOCK_FILE = ROOT / "requirements.lock"
K8S = ROOT / "deploy" / "kubernetes"
MONITORING = K8S / "monitoring"
EXPORTER = K8S / "exporter"
EXAMPLE = K8S / "example"
COMPOSE_DIR = ROOT / "deploy" / "compose"
COMPOSE = COMPOSE_DIR / "compose.yaml"

DEFAULT_PORT = parse_listen_address(WebSettings().listen_address[0])[1]
TELEMETRY_PATH = WebSettings().telemetry_path
IMAGE_REPOSITORY = "ghcr.io/jobqueue-exporter/jobqueue-exporter"
# The rules select the exporter's series by job label; every deployment must produce it.
RULES_JOB = re.fullmatch(r'job="([^"]+)"', AlertSettings().selector)


def find_tool(name: str, *extra_dirs: str) -> str:
    """Locate a binary on the venv's bin dir, PATH and extra dirs; fail (never skip) without it."""
    search = os.pathsep.join(
        [str(Path(sys.executable).parent), os.environ.get("PATH", ""), *extra_dirs]
    )
    found = shutil.which(name, path=search)
    if found is None:
        pytest.fail(f"{name} not found on {search}: install it (see .ci/run)")
    return found


def dockerfile_instructions() -> list[tuple[str, str]]:
    """The Dockerfile as (INSTRUCTION, arguments) pairs, continuation lines joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        keyword, _, rest = pending.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
        pending = ""
    return instructions


def dockerfile_uid() -> int:
    """The numeric UID the image runs as."""
    return int(dict(dockerfile_instructions())["USER"].split(":")[0])


def load_all(path: Path) -> list[dict[str, Any]]:
    """Every YAML document of a file, empty ones dropped."""
    with path.open() as handle:
        return [doc for doc in yaml.safe_load_all(handle) if doc is not None]


def split_args(args: list[str]) -> tuple[str | None, dict[str, str]]:
    """The --config.file value and the other ``--key=value`` flags of a container."""
    config_file: str | None = None
    flags: dict[str, str] = {}
    for arg in args:
        name, sep, value = arg.partition("=")
        assert sep, f"flags are written --name=value, got {arg!r}"
        if name == "--config.file":
            config_file = value
        else:
            flags[name] = value
    return config_file, flags


def settings_from_argv(args: list[str], environ: dict[str, str]) -> Any:
    """Resolve settings exactly as the console script does: its parser, then its loader."""
    return settings_from_namespace(build_parser().parse_args(args), environ)
