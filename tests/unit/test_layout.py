"""The project's shape as docs/architecture.toml declares it, and the README's metric reference.

The layout is declared once, in docs/architecture.toml: the parts of exporter/ with their files
and the parts each may import, the rules of what a part may not do, and the line cap. This test
reads that file and keeps no copy of it. ``violations`` checks a tree (the repository, or a copy)
against its declaration; the self-tests plant one real violation of each guard in a copy and
see the check name it.
"""

from __future__ import annotations

import ast
import functools
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from exporter.metrics import reference_table

ROOT = Path(__file__).resolve().parents[2]
DECLARATION = "docs/architecture.toml"

# The guards every declaration gets, besides its own rules.
PLACED = "every source file is placed in one part"
LISTED = "every listed path exists"
DECLARED = "a part imports only the parts it declares"
ACYCLIC = "the declared imports form no loop"
CAPPED = "no file grows past the line cap"
# A grep for a module or a class finds one thing: four logical.py and two JobState classes sent
# newcomers to the wrong file half of the time.
NAMED = "no two modules of exporter/ share a file name"
CLASSED = "no two classes of exporter/ share a name"
STRUCTURE = (PLACED, LISTED, DECLARED, ACYCLIC, CAPPED, NAMED, CLASSED)


@dataclass
class Source:
    """What one file imports, which dotted names it touches, its strings, comparisons, casts."""

    imports: set[str]
    uses: set[str]
    strings: list[str]
    compares: set[str]
    downcasts: set[str]


def _name(node: ast.expr) -> list[str]:
    """The names a comparison operand or isinstance() class stands for (an attribute's last)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.Tuple):
        return [name for element in node.elts for name in _name(element)]
    return []


def _read(path: Path, root: Path) -> Source:
    """Parse a file: imports resolved to absolute names (relative ones included)."""
    return _parse(path.relative_to(root).as_posix(), path.read_text())


@functools.cache  # the self-tests check a dozen copies of the same files
def _parse(file: str, text: str) -> Source:
    tree = ast.parse(text)
    here = list(Path(file).with_suffix("").parts)
    here = here[:-1]  # a module's (and an __init__'s) relative imports start from its package
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    source = Source(set(), set(), [], set(), set())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            source.imports |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            source.imports.add(module)
            source.imports |= {f"{module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Attribute):
            chain = [node.attr]
            value = node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name):
                source.uses.add(".".join([value.id, *chain]))
        elif isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                source.compares |= set(_name(operand))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
        ):
            source.downcasts |= set(_name(node.args[1]))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            source.strings.append(node.value)
    source.uses |= source.imports
    return source


def _covers(name: str, banned: str) -> bool:
    return name == banned or name.startswith(banned + ".")


def _module_file(name: str, root: Path) -> str | None:
    """The file an absolute import lands in (its longest prefix that is a module), or None."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        for candidate in ("/".join(parts[:end]) + ".py", "/".join(parts[:end]) + "/__init__.py"):
            if (root / candidate).is_file():
                return candidate
    return None


def _owners(file: str, parts: dict[str, Any]) -> list[str]:
    return [
        name
        for name, part in parts.items()
        if any(file == listed or (listed.endswith("/") and file.startswith(listed))
               for listed in part["files"])
    ]  # fmt: skip


def _loops(parts: dict[str, Any]) -> list[str]:
    """Each loop of the declared imports, as 'a -> b -> a'."""
    loops: list[str] = []
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            loops.append(" -> ".join([*path[path.index(name) :], name]))
            return
        if name in done:
            return
        for target in parts.get(name, {}).get("imports", []):
            visit(target, [*path, name])
        done.add(name)

    for name in sorted(parts):
        visit(name, [])
    return loops


def _broken_rules(file: str, part: str, source: Source, rules: list[dict[str, Any]]) -> list[str]:
    found: list[str] = []
    for rule in rules:
        if part in rule.get("except", []) or not {"*", part} & set(rule["parts"]):
            continue
        name = rule["name"]
        # One line per banned name: `from x import y` also records x.y, the shorter says it.
        for verb, seen in (("imports", source.imports), ("uses", source.uses)):
            for banned in rule.get(verb, []):
                hits = sorted(n for n in seen if _covers(n, banned))
                if hits:
                    found.append(f"{name}: {file} {verb} {hits[0]}")
        found += [
            f"{name}: {file} spells {text!r}"
            for text in rule.get("strings", [])
            if any(text in s for s in source.strings)
        ]
        found += [
            f"{name}: {file} compares {compared}"
            for compared in sorted(set(rule.get("compares", [])) & source.compares)
        ]
        found += [
            f"{name}: {file} tests isinstance against {cls}"
            for cls in sorted(set(rule.get("downcasts", [])) & source.downcasts)
        ]
    return found


def _shared_names(root: Path) -> list[str]:
    """Module file names (``__init__.py`` aside) and class names used twice in exporter/."""
    modules: dict[str, list[str]] = {}
    classes: dict[str, list[str]] = {}
    for path in sorted((root / "exporter").rglob("*.py")):
        file = path.relative_to(root).as_posix()
        if path.name != "__init__.py":
            modules.setdefault(path.name, []).append(file)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(file)
    return [
        f"{guard}: {name} in {', '.join(files)}"
        for guard, names in ((NAMED, modules), (CLASSED, classes))
        for name, files in sorted(names.items())
        if len(files) > 1
    ]


def violations(root: Path) -> list[str]:
    """Every broken guard in a tree (exporter/, bench/, dashboards/ and the declaration), as
    'guard: file what'."""
    layout = tomllib.loads((root / DECLARATION).read_text())
    parts: dict[str, Any] = layout["parts"]
    found = [
        f"{LISTED}: {listed} (part {name})"
        for name, part in parts.items()
        for listed in part["files"]
        if not (root / listed).exists()
    ]
    found += [f"{ACYCLIC}: {loop}" for loop in _loops(parts)]
    found += _shared_names(root)
    for path in sorted((root / "exporter").rglob("*.py")):
        file = path.relative_to(root).as_posix()
        owners = _owners(file, parts)
        if len(owners) != 1:
            found.append(f"{PLACED}: {file} (in {', '.join(owners) or 'no part'})")
            continue
        part = owners[0]
        source = _read(path, root)
        targets: dict[str, str] = {}  # the part imported -> the shortest name that imports it
        for name in sorted(source.imports, key=len):
            module = _module_file(name, root) if _covers(name, "exporter") else None
            target = _owners(module, parts) if module else []
            if target and target[0] != part:
                targets.setdefault(target[0], name)
        found += [
            f"{DECLARED}: {file} imports {name} ({part} may not import {target})"
            for target, name in sorted(targets.items())
            if target not in parts[part]["imports"]
        ]
        found += _broken_rules(file, part, source, layout["rules"])
    for tree in layout["capped"]:
        for path in sorted((root / tree).rglob("*.py")):
            lines = len(path.read_text().splitlines())
            if lines > layout["max_lines"]:
                # arq's 900-line worker.py is the warning: split before a module gets there.
                found.append(
                    f"{CAPPED}: {path.relative_to(root).as_posix()} has {lines} lines "
                    f"(the cap is {layout['max_lines']}); split it"
                )
    return found


def test_the_repository_keeps_every_guard() -> None:
    assert violations(ROOT) == []


def _append(code: str) -> Callable[[Path], None]:
    def plant(target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a") as handle:
            handle.write("\n" + code)

    return plant


def _delete(target: Path) -> None:
    target.unlink()


def _replace(old: str, new: str) -> Callable[[Path], None]:
    def plant(target: Path) -> None:
        text = target.read_text()
        assert old in text
        target.write_text(text.replace(old, new, 1))

    return plant


# One real violation per guard: (the guard it breaks, the file, what is done to the file). A file
# that does not exist is created.
PLANTED: list[tuple[str, str, Callable[[Path], None]]] = [
    (PLACED, "exporter/ledger.py", _append("X = 1\n")),
    (LISTED, "exporter/board.py", _delete),
    (DECLARED, "exporter/db/pool.py", _append("from exporter.counting import sqltext\n")),
    (ACYCLIC, DECLARATION, _replace('imports = ["db", "model"]', 'imports = ["db", "model", "runtime"]')),
    (CAPPED, "bench/planted.py", _append("X = 1\n" * 401)),
    (NAMED, "exporter/web/cycle.py", _append("X = 1\n")),
    (CLASSED, "exporter/web/routes.py", _append("class Board:\n    pass\n")),
    ("only db/ talks to PostgreSQL", "exporter/election.py", _append("import asyncpg\n")),
    ("only web/ speaks HTTP", "exporter/service.py", _append("import aiohttp\n")),
    ("only metrics/ knows prometheus_client", "exporter/rules/render.py",
     _append("import prometheus_client\n")),
    ("only the command line reads argv and the environment", "exporter/settings/sources.py",
     _append("import os\n\nHOME = os.environ.get('HOME')\n")),
    ("counting, profiles and model do no I/O", "exporter/profiles/base.py",
     _append("import time\n")),
    ("the database layer spells no metric name", "exporter/db/pool.py",
     _append("REASON = 'jobqueue_exporter_collection_errors_total'\n")),
    ("only profiles/ tells the profiles apart", "exporter/cli.py",
     _append("def _mapped(queue: QueueSettings) -> bool:\n"
             "    return queue.profile == DEFAULT_PROFILE\n")),
    ("no counting mode is downcast", "exporter/poller.py",
     _append("def _cursor(mode: CountingMode) -> bool:\n"
             "    return isinstance(mode, TransitionCursor)\n")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("guard", "file", "plant"), PLANTED, ids=[f"{g}: {f}" for g, f, _ in PLANTED]
)
def test_a_planted_violation_fails_the_check(
    tmp_path: Path, guard: str, file: str, plant: Callable[[Path], None]
) -> None:
    ignore = shutil.ignore_patterns("__pycache__")
    for tree in ("exporter", "bench", "dashboards"):
        shutil.copytree(ROOT / tree, tmp_path / tree, ignore=ignore)
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / DECLARATION, tmp_path / DECLARATION)
    assert violations(tmp_path) == []
    plant(tmp_path / file)
    found = violations(tmp_path)
    print(*found, sep="\n")
    named = file if file != DECLARATION else "runtime -> "  # a loop is named by its parts
    assert any(v.startswith(f"{guard}: ") and named in v for v in found), found


def test_every_guard_has_a_planted_violation() -> None:
    declared = tomllib.loads((ROOT / DECLARATION).read_text())
    assert sorted(guard for guard, _, _ in PLANTED) == sorted(
        [*STRUCTURE, *(rule["name"] for rule in declared["rules"])]
    )


def test_readme_metric_reference_is_the_generated_one() -> None:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("<!-- metric-reference:start -->\n") + len(
        "<!-- metric-reference:start -->\n"
    )
    end = readme.index("<!-- metric-reference:end -->")
    assert readme[start:end] == reference_table(), (
        "regenerate with exporter.metrics.reference_table()"
    )
