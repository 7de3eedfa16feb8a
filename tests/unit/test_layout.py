"""The project's shape: import boundaries, one-way data flow, and the README's metric reference.

The layout is the README's module table, and the rules are these: data flows
sources -> settings -> service -> pollers -> db / tracker -> model -> metrics -> web, with the
demo and the command line on top. A module may import only modules of a lower layer (or of its
own package), so the flow cannot loop back.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from exporter.metrics import reference_table

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "exporter"

# Layer of each top-level module or package of exporter/; imports only go to lower numbers.
LAYERS = {
    "vocabulary": 0,
    "settings": 1,
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
    "cli": 9,
    "__main__": 10,
}

# Which exporter modules may import which third-party libraries.
ALLOWED = {
    "asyncpg": {"db", "demo"},  # the demo drives the queue itself, as its workers would
    "aiohttp": {"web"},
    "prometheus_client": {"metrics"},
}
# Modules that must stay pure: no I/O, no clock, no logging.
PURE = {"counting", "model", "vocabulary"}
IO_MODULES = {"asyncio", "asyncpg", "aiohttp", "os", "socket", "subprocess", "logging", "time"}
MAX_LINES = 400


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "demo" not in p.relative_to(PACKAGE).parts)


def _top(path: Path) -> str:
    """The top-level module or package of exporter/ a file belongs to."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """(third-party top-level names, exporter top-level modules) imported by a file."""
    outside: set[str] = set()
    inside: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "exporter":
                names = [f"exporter.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "exporter":
                if len(parts) > 1:
                    inside.add(parts[1])
            else:
                outside.add(parts[0])
    return outside, inside


def test_every_module_has_a_layer() -> None:
    tops = {_top(p) for p in PACKAGE.rglob("*.py")} - {"__init__", "sql"}
    assert tops <= LAYERS.keys(), tops - LAYERS.keys()


def test_imports_only_go_down_the_layers() -> None:
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        top = _top(path)
        if top == "__init__":
            continue
        _, inside = _imports(path)
        for target in inside - {top, "__init__"}:
            if target == "__version__":
                continue
            if LAYERS.get(target, 99) >= LAYERS[top]:
                wrong.append(f"{path.relative_to(ROOT)} imports exporter.{target}")
    assert not wrong, wrong


def test_only_the_owning_module_imports_each_library() -> None:
    for path in PACKAGE.rglob("*.py"):
        outside, _ = _imports(path)
        for library, owners in ALLOWED.items():
            if library in outside:
                assert _top(path) in owners, f"{path.relative_to(ROOT)} imports {library}"


def test_only_the_command_line_reads_argv_and_the_environment() -> None:
    for path in PACKAGE.rglob("*.py"):
        if _top(path) in ("cli", "demo"):
            continue
        text = path.read_text()
        assert "sys.argv" not in text, path
        assert "os.environ" not in text, path


def test_pure_modules_do_no_io() -> None:
    for name in PURE:
        package = PACKAGE / name
        for path in (
            sorted(package.rglob("*.py")) if package.is_dir() else [package.with_suffix(".py")]
        ):
            outside, _ = _imports(path)
            assert not outside & IO_MODULES, (path.name, outside & IO_MODULES)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_grows_past_the_limit(path: Path) -> None:
    # arq's 900-line worker.py is the warning: split before a module gets there.
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines; split it"


def test_the_layout_check_catches_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "exporter" / "db.py"
    bad.parent.mkdir()
    bad.write_text("from exporter.service import Service\nimport aiohttp\n")
    outside, inside = _imports(bad)
    assert "service" in inside
    assert LAYERS["service"] >= LAYERS["db"]
    assert "aiohttp" in outside


def test_readme_metric_reference_is_the_generated_one() -> None:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("<!-- metric-reference:start -->\n") + len(
        "<!-- metric-reference:start -->\n"
    )
    end = readme.index("<!-- metric-reference:end -->")
    assert readme[start:end] == reference_table(), (
        "regenerate with exporter.metrics.reference_table()"
    )
