"""What a test needs beyond the session's cluster, checked while it runs.

The tiers are cut by markers (pyproject.toml registers them, docs/testing.md says how): the
fast tier is every test of tests/unit, tests/db and tests/artefacts that carries none. A test
that starts a PostgreSQL cluster of its own, an external program, Chromium or a real queue
library without the marker of that need would slip into the fast tier: it would make the tier
slow, or fail where the tier's prerequisites are not installed. So the check sits where those
things start rather than in a list kept by hand: an audit hook on process creation (PEP 578)
sees every process the test process starts, from any helper and from every ``Cluster()``, and
fails the test that started it, naming the marker it lacks. A need without a process (a queue
library imported in-process) is declared by :func:`need`, from the helper that requires it.

Programs that are not listed (psql, openssl, cp, git, hadolint, kubectl, pip) need no marker:
they are quick and installed with the project. ``--unmarked-needs=report`` lists what is
missing at the end of the run instead of failing, to mark a branch's new tests in one go.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# Markers that say what a test needs beyond the session's cluster (pyproject.toml).
NEED_MARKERS = ("cluster", "logical", "daemon", "browser", "library")
# The whole fast tier's filter: none of these. e2e and slow are about length, not a need.
TIER_MARKERS = ("slow", "e2e", *NEED_MARKERS)
FAST = "not (" + " or ".join(TIER_MARKERS) + ")"

# A program's file name -> the markers any one of which lets a test start it.
PROGRAMS: dict[str, frozenset[str]] = {
    **dict.fromkeys(
        ("promtool", "amtool", "prometheus", "prometheus-alertmanager", "alertmanager"),
        frozenset({"daemon"}),
    ),
    **dict.fromkeys(("chromium", "chromium-browser", "chrome"), frozenset({"browser"})),
    "node": frozenset({"library"}),
}
# Scripts of the repository (scripts/dev demo: the exporter as a process) -> markers.
SCRIPTS: dict[str, frozenset[str]] = {"scripts/dev": frozenset({"daemon"})}
# python -m MODULE (or a module below it) -> markers.
MODULES: dict[str, frozenset[str]] = {
    "exporter": frozenset({"daemon"}),
    "bench": frozenset({"daemon"}),
    "procrastinate": frozenset({"library"}),
    "pgqueuer": frozenset({"library"}),
    "django": frozenset({"library"}),
    "tests.system.presets": frozenset({"library"}),
}
# python -m MODULES that run no need of the list even though they are below one (the demo
# fleet's --help is the compose file's command, checked in the artefacts tier).
HELPERS = ("exporter.demo.fleet",)
WAL_LEVEL_LOGICAL = "wal_level = 'logical'"


@dataclass(frozen=True)
class Need:
    """What a started process is (for the message) and the markers that allow it."""

    what: str
    markers: frozenset[str]


def need_of_process(argv: Sequence[str], exempt: Iterable[Path] = ()) -> Need | None:
    """The need a process with this argv shows, None when it needs no marker."""
    if not argv:
        return None
    program = Path(argv[0]).name
    if program == "pg_ctl" and "start" in argv:
        return _cluster_need(argv, exempt)
    if program.startswith("python") and "-m" in argv[:-1]:
        module = argv[argv.index("-m") + 1]
        if module in HELPERS:
            return None
        for prefix, markers in MODULES.items():
            if module == prefix or module.startswith(prefix + "."):
                return Need(f"python -m {module}", markers)
        return None
    if program in PROGRAMS:
        return Need(program, PROGRAMS[program])
    script = f"{Path(argv[0]).parent.name}/{program}"
    if script in SCRIPTS:
        return Need(script, SCRIPTS[script])
    return None


def _cluster_need(argv: Sequence[str], exempt: Iterable[Path]) -> Need | None:
    """A server started on a data directory: the session's needs nothing, a logical one
    needs ``logical``, any other ``cluster`` (or ``logical``, whose clusters start plain)."""
    if "-D" not in argv[:-1]:
        return Need("a PostgreSQL cluster of its own", frozenset({"cluster", "logical"}))
    data_dir = Path(argv[argv.index("-D") + 1])
    if any(data_dir == allowed for allowed in exempt):
        return None
    try:
        logical = WAL_LEVEL_LOGICAL in (data_dir / "postgresql.auto.conf").read_text()
    except OSError:
        logical = False
    if logical:
        return Need("a wal_level=logical cluster", frozenset({"logical"}))
    return Need("a PostgreSQL cluster of its own", frozenset({"cluster", "logical"}))


def markers_of(item: Any) -> set[str]:
    """The tier markers a collected test carries (its own, its class's and its module's)."""
    return {name for name in TIER_MARKERS if item.get_closest_marker(name) is not None}


@dataclass
class NeedsCheck:
    """The running test, and what to do when it starts something it is not marked for."""

    report_only: bool = False
    current: Any = None  # the pytest.Item running now, None between tests
    exempt: list[Path] = field(default_factory=list)  # the session cluster's data directory

    def started(self, argv: Sequence[str]) -> None:
        """Called for every process the test process starts."""
        found = need_of_process(argv, self.exempt)
        if found is not None:
            self.require(found)

    def require(self, found: Need) -> None:
        """Fail (or note) the running test unless it carries one of ``found.markers``."""
        item = self.current
        if item is None or markers_of(item) & found.markers:
            return
        wanted = " or ".join(f"@pytest.mark.{name}" for name in sorted(found.markers))
        message = (
            f"{item.nodeid} starts {found.what} but is not marked {wanted}: "
            "mark it (docs/testing.md says which), or it runs in the fast tier"
        )
        if self.report_only:
            item.user_properties.append(("unmarked-need", message))
            return
        pytest.fail(message, pytrace=False)


CHECK = NeedsCheck()
_installed = False


def need(markers: str | Iterable[str], what: str) -> None:
    """Declare a need that starts no process (a queue library used in-process)."""
    wanted = frozenset({markers} if isinstance(markers, str) else markers)
    CHECK.require(Need(what, wanted))


def _argv(event: str, args: tuple[Any, ...]) -> list[str] | None:
    """The argv of a process-creation audit event, None for any other event."""
    # subprocess.Popen: (executable, args, cwd, env); os.posix_spawn, os.exec: (path, argv, env)
    if event not in ("subprocess.Popen", "os.posix_spawn", "os.exec"):
        return None
    executable, argv = args[0], args[1]
    if isinstance(argv, str | bytes | os.PathLike):
        argv = [argv]
    words = [os.fsdecode(word) for word in argv]
    if executable is not None and words:
        words[0] = os.fsdecode(executable)
    return words


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event[:2] not in ("su", "os"):  # most events are opens, imports and compiles
        return
    argv = _argv(event, args)
    if argv is not None:
        CHECK.started(argv)


def install(report_only: bool) -> NeedsCheck:
    """Start checking (once per process: an audit hook cannot be removed)."""
    global _installed
    CHECK.report_only = report_only
    if not _installed:
        sys.addaudithook(_audit)
        _installed = True
    return CHECK
