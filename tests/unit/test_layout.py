"""The project's shape: import boundaries, one-way data flow, and the README's metric reference.

Data flows sources -> settings -> service -> poller -> profile (SQL + counting mode) -> model
-> board -> metrics / web, with the demo and the command line on top. The guards are declared
once below, in two plain tables: LAYERS (a module may import only modules of a lower layer, or
of its own package, so the flow cannot loop back) and RULES (what a part of the package may not
import, use or spell). ``violations`` checks a package directory against both; its self-test
plants a real violation of each rule in a copy of the package and sees the check name it.
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.metrics import reference_table

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "exporter"

# Layer of each top-level module or package of exporter/; imports only go to lower numbers.
# A layer for a module that does not exist yet (counting/) is harmless.
LAYERS = {
    "vocabulary": 0,
    "settings": 1,
    "labels": 0.5,
    "model": 1,
    "counting": 2,
    "profiles": 4,  # the default profile's SQL comes through db's loader
    "db": 3,  # runs the counting modes' Query values
    "metrics": 2,
    "logs": 2,
    "rules": 2,
    "board": 2,
    "election": 4,
    "poller": 5,
    "web": 3,
    "runtime": 6,
    "service": 7,
    "demo": 8,
    "logical": 8.5,  # the logical-setup and logical-drop commands, the start's refusals
    "cli": 9,
    "__main__": 10,
}

IO = ("asyncio", "asyncpg", "aiohttp", "os", "socket", "subprocess", "logging", "time")


@dataclass(frozen=True)
class Rule:
    """What the modules under ``applies_to`` (dotted paths in exporter/, "" for all) may not do.

    ``imports``: modules they may not import (a name covers its submodules and members);
    ``uses``: dotted names they may not import or touch (``sys.argv``); ``strings``: text no
    string constant of theirs may contain (docstrings aside). A rule about a module that does
    not exist yet applies once it does.
    """

    applies_to: tuple[str, ...]
    imports: tuple[str, ...] = ()
    uses: tuple[str, ...] = ()
    strings: tuple[str, ...] = ()
    exempt: tuple[str, ...] = ()


RULES = {
    "only db/ talks to PostgreSQL": Rule(
        ("",), imports=("asyncpg", "psycopg2"), exempt=("db", "demo")
    ),
    "only web/ speaks HTTP": Rule(("",), imports=("aiohttp",), exempt=("web",)),
    "only metrics/ knows prometheus_client": Rule(
        ("",), imports=("prometheus_client",), exempt=("metrics",)
    ),
    "only the command line reads argv and the environment": Rule(
        ("",), uses=("sys.argv", "os.environ", "os.environb", "os.getenv"), exempt=("cli", "demo")
    ),
    # No clock and no logging either: a counting mode's answer depends on its rows alone.
    "tracker, counting modes and model do no I/O": Rule(
        ("tracker", "counting", "labels", "model", "results", "vocabulary"),
        imports=(*IO, "prometheus_client", "exporter.db", "exporter.web", "exporter.election"),
    ),
    "metrics know no database": Rule(("metrics",), imports=("asyncpg", "exporter.db")),
    "the database layer knows no HTTP and no metric names": Rule(
        ("db",),
        imports=("aiohttp", "exporter.web", "prometheus_client", "exporter.metrics"),
        strings=("jobqueue_",),
    ),
    "the poller and the profiles know no web": Rule(
        ("poller", "preset_poller", "profiles", "counting"), imports=("aiohttp", "exporter.web")
    ),
    # A profile is data plus a counting mode; the database layer runs its SQL, not the reverse.
    "the profiles know no database layer": Rule(("profiles",), imports=("asyncpg", "exporter.db")),
}
MAX_LINES = 400


def _dotted(path: Path, package: Path) -> str:
    """exporter/profiles/base.py -> profiles.base; a package's __init__ is the package."""
    parts = list(path.relative_to(package).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _within(dotted: str, place: str) -> bool:
    return place == "" or dotted == place or dotted.startswith(place + ".")


def _covers(name: str, banned: str) -> bool:
    return name == banned or name.startswith(banned + ".")


@dataclass
class Source:
    """What one file imports, which dotted names it touches, and its string constants."""

    imports: set[str]
    uses: set[str]
    strings: list[str]


def _read(path: Path, package: Path) -> Source:
    """Parse a file: imports resolved to absolute names (relative ones included)."""
    tree = ast.parse(path.read_text())
    here = ["exporter", *_dotted(path, package).split(".")]
    if path.name != "__init__.py":
        here = here[:-1]  # a module's relative imports start from its package
    imports: set[str] = set()
    uses: set[str] = set()
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    strings: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imports |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            imports.add(module)
            imports |= {f"{module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Attribute):
            chain = [node.attr]
            value = node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name):
                uses.add(".".join([value.id, *chain]))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            strings.append(node.value)
    return Source(imports, uses | imports, strings)


def violations(package: Path) -> list[str]:
    """Every broken guard in a package directory, as 'rule: file what'."""
    found: list[str] = []
    for path in sorted(package.rglob("*.py")):
        dotted = _dotted(path, package)
        if not dotted:
            continue  # the package's own __init__
        where = path.relative_to(package.parent)
        top = dotted.split(".")[0]
        source = _read(path, package)
        if top not in LAYERS:
            found.append(f"every module has a layer: {where} ({top} is in no layer)")
        targets = {n.split(".")[1] for n in source.imports if n.startswith("exporter.")}
        for target in sorted(targets - {top, "__version__"}):
            if LAYERS.get(target, 99) >= LAYERS.get(top, -1):
                found.append(f"imports only go down the layers: {where} imports exporter.{target}")
        for rule_name, rule in RULES.items():
            if not any(_within(dotted, p) for p in rule.applies_to) or any(
                _within(dotted, p) for p in rule.exempt
            ):
                continue
            # One line per banned name: `from x import y` also records x.y, the shorter says it.
            for verb, banned_names, seen in (
                ("imports", rule.imports, source.imports),
                ("uses", rule.uses, source.uses),
            ):
                for banned in banned_names:
                    hits = sorted(n for n in seen if _covers(n, banned))
                    if hits:
                        found.append(f"{rule_name}: {where} {verb} {hits[0]}")
            for text in rule.strings:
                if any(text in s for s in source.strings):
                    found.append(f"{rule_name}: {where} spells {text!r}")
    return found


def test_the_package_keeps_every_guard() -> None:
    assert violations(PACKAGE) == []


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "demo" not in p.relative_to(PACKAGE).parts)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_grows_past_the_limit(path: Path) -> None:
    # arq's 900-line worker.py is the warning: split before a module gets there.
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines; split it"


# One real violation per guard: (the rule it breaks, the file it goes into, the code). A file
# that does not exist in the package is created, so counting/ is planted before it exists.
PLANTED = [
    ("every module has a layer", "ledger.py", "X = 1\n"),
    ("imports only go down the layers", "db/pool.py", "from exporter.service import Service\n"),
    ("only db/ talks to PostgreSQL", "election.py", "import asyncpg\n"),
    ("only web/ speaks HTTP", "service.py", "import aiohttp\n"),
    ("only metrics/ knows prometheus_client", "rules/render.py", "import prometheus_client\n"),
    ("only the command line reads argv and the environment", "settings/sources.py",
     "import os\n\nHOME = os.environ.get('HOME')\n"),
    ("tracker, counting modes and model do no I/O", "tracker.py", "from exporter.db import Database\n"),
    ("tracker, counting modes and model do no I/O", "counting/planted.py", "import time\n"),
    ("tracker, counting modes and model do no I/O", "model.py", "import logging\n"),
    ("metrics know no database", "metrics/collector.py", "from exporter.db import pool\n"),
    ("the database layer knows no HTTP and no metric names", "db/lock.py", "from aiohttp import web\n"),
    ("the database layer knows no HTTP and no metric names", "db/pool.py",
     "REASON = 'jobqueue_exporter_collection_errors_total'\n"),
    ("the poller and the profiles know no web", "poller.py", "from exporter.web.status import QueueStatus\n"),
    ("the poller and the profiles know no web", "profiles/base.py", "from ..web import status\n"),
    ("the profiles know no database layer", "profiles/mapping.py", "from exporter import db\n"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("rule", "file", "code"), PLANTED, ids=[f"{r}: {f}" for r, f, _ in PLANTED]
)
def test_a_planted_violation_fails_the_check(
    tmp_path: Path, rule: str, file: str, code: str
) -> None:
    copy = tmp_path / "exporter"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert violations(copy) == []
    target = copy / file
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a") as handle:
        handle.write("\n" + code)
    found = violations(copy)
    print(*found, sep="\n")
    assert any(v.startswith(f"{rule}: exporter/{file} ") for v in found), found


def test_every_guard_has_a_planted_violation() -> None:
    assert {rule for rule, _, _ in PLANTED} == {
        "every module has a layer",
        "imports only go down the layers",
        *RULES,
    }


def test_readme_metric_reference_is_the_generated_one() -> None:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("<!-- metric-reference:start -->\n") + len(
        "<!-- metric-reference:start -->\n"
    )
    end = readme.index("<!-- metric-reference:end -->")
    assert readme[start:end] == reference_table(), (
        "regenerate with exporter.metrics.reference_table()"
    )
