"""Every repository path that README.md and docs/*.md name exists.

What counts as a path:

- a Markdown link whose target is relative (no ``scheme:``, not a bare ``#anchor``): the part
  before any ``#`` is resolved from the directory of the document that holds the link;
- a backticked string made only of path characters (letters, digits, ``_ . - / *``), not
  starting with ``/``, whose first component is one of the repository's top-level entries in
  TOP_LEVEL: it is resolved from the repository root. A pytest node id
  (``tests/x.py::test_y``) names its file; a string with ``*`` must match at least one file.

Bare file names (``schema.py`` in a table about one directory) and paths relative to another
directory (``initdb/30-exporter-role.sql`` beside deploy/compose) are context, not checked.

A path may not leave the repository: a relative link that resolves outside the checkout, or
a backticked path starting with ``../`` (resolved from the root, like every backticked path),
names a file no reader of a clone or a release has. It may exist on the machine that wrote
it, so "exists" alone would pass it.
The "How it works" diagram of the README names modules of exporter/ without the prefix; it is
checked on its own against exporter/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
TOP_LEVEL = (
    ".ci", "alerts", "bench", "dashboards", "deploy", "docs", "exporter", "scripts", "tests",
    "CHANGELOG.md", "Dockerfile", "LICENSE", "README.md", "pyproject.toml",
)  # fmt: skip
LINK = re.compile(r"\]\(([^)\s]+)\)")
BACKTICKED = re.compile(r"`([^`\n]+)`")
PATHLIKE = re.compile(r"[A-Za-z0-9_.\-/*]+")
SCHEME = re.compile(r"[a-z][a-z0-9+.-]*:")


def linked_paths(text: str) -> list[str]:
    """Relative link targets without their anchors."""
    targets = (m.group(1) for m in LINK.finditer(text))
    return [t.split("#")[0] for t in targets if not SCHEME.match(t) and not t.startswith("#")]


def named_paths(text: str) -> list[str]:
    """Backticked strings that are repository paths by the rule in the module docstring."""
    found = []
    for match in BACKTICKED.finditer(text):
        candidate = match.group(1).split("::")[0]
        if PATHLIKE.fullmatch(candidate) and candidate.split("/")[0] in TOP_LEVEL:
            found.append(candidate)
    return found


def parent_paths(text: str) -> list[str]:
    """Backticked paths that climb out of the directory they are resolved from (``../x.md``)."""
    found = []
    for match in BACKTICKED.finditer(text):
        candidate = match.group(1).split("::")[0]
        if candidate.startswith("../") and PATHLIKE.fullmatch(candidate):
            found.append(candidate)
    return found


def outside(base: Path, paths: list[str]) -> list[str]:
    """The paths that, resolved from base, leave the repository."""
    return [p for p in paths if not (base / p).resolve().is_relative_to(ROOT)]


def missing(base: Path, paths: list[str]) -> list[str]:
    """The paths that name nothing under base (a glob must match something)."""
    gone = []
    for path in paths:
        exists = any(base.glob(path)) if "*" in path else (base / path).exists()
        if not exists:
            gone.append(path)
    return gone


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_document_names_exists(document: Path) -> None:
    text = document.read_text()
    gone = missing(document.parent, linked_paths(text)) + missing(ROOT, named_paths(text))
    assert not gone, f"{document.relative_to(ROOT)} names paths that do not exist: {gone}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_document_names_a_path_outside_the_repository(document: Path) -> None:
    text = document.read_text()
    away = outside(document.parent, linked_paths(text)) + outside(ROOT, parent_paths(text))
    assert not away, f"{document.relative_to(ROOT)} names paths outside the repository: {away}"


def test_the_rule_refuses_paths_that_leave_the_repository() -> None:
    text = (
        "[up](../README.md#x), [away](../../shared/notes.md), [abs](/etc/passwd),"
        " `../shared/research/x.md`, `docs/../README.md`, `../x y.md`"
    )
    assert linked_paths(text) == ["../README.md", "../../shared/notes.md", "/etc/passwd"]
    assert parent_paths(text) == ["../shared/research/x.md"]
    # Links resolve from the document's directory, backticked paths from the root.
    assert outside(ROOT / "docs", linked_paths(text)) == ["../../shared/notes.md", "/etc/passwd"]
    assert outside(ROOT, parent_paths(text)) == ["../shared/research/x.md"]
    assert outside(ROOT, ["docs/../README.md"]) == []


def test_the_rule_finds_stale_links_and_paths_and_ignores_context() -> None:
    text = (
        "See [the runbooks](docs/runbooks.md#jobqueuejobsstuck), [gone](docs/gone.md),"
        " [web](https://example.com/x.md), [top](#how-it-works), `tests/test_parity.py::test_x`,"
        " `exporter/sql/*.sql`, `exporter/sql/*.nope`, `schema.py`, `initdb/30-role.sql`,"
        " `/etc/jobqueue-exporter/config.yml`, `--web.listen-address`, `scripts/dev demo`."
    )
    assert linked_paths(text) == ["docs/runbooks.md", "docs/gone.md"]
    assert named_paths(text) == [
        "tests/test_parity.py",
        "exporter/sql/*.sql",
        "exporter/sql/*.nope",
    ]
    assert missing(ROOT, linked_paths(text)) == ["docs/gone.md"]
    assert missing(ROOT, named_paths(text)) == ["tests/test_parity.py", "exporter/sql/*.nope"]


def diagram_modules(readme: str) -> list[str]:
    """The module and package names (``poller.py``, ``web/``) in the README's diagram."""
    section = readme.split("\n## How it works\n", 1)[1]
    diagram = section.split("```", 2)[1]
    return re.findall(r"(?<![\w/.])([a-z_]+(?:\.py|/))", diagram)


def test_how_it_works_diagram_names_modules_of_exporter() -> None:
    modules = diagram_modules((ROOT / "README.md").read_text())
    assert {"service.py", "poller.py", "metrics/", "web/"} <= set(modules)
    assert not missing(ROOT / "exporter", modules), missing(ROOT / "exporter", modules)
