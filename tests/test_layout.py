"""The project's own consistency: import boundaries, and the README's metric reference."""

from __future__ import annotations

import ast
from pathlib import Path

from exporter.metrics import reference_table

ROOT = Path(__file__).resolve().parent.parent

# Which exporter modules may import which third-party libraries (CONVENTIONS.md).
ALLOWED = {
    "asyncpg": {"db"},
    "aiohttp": {"app", "webconfig"},
    "prometheus_client": {"metrics"},
}
PURE = {"tracker", "model", "results"}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_owning_module_imports_each_library() -> None:
    for path in (ROOT / "exporter").glob("*.py"):
        imported = _imports(path)
        for library, owners in ALLOWED.items():
            if library in imported:
                assert path.stem in owners, f"{path.name} imports {library}"


def test_pure_modules_do_no_io() -> None:
    forbidden = {"asyncio", "asyncpg", "aiohttp", "os", "socket", "subprocess", "logging"}
    for name in PURE:
        assert not _imports(ROOT / "exporter" / f"{name}.py") & forbidden, name


def test_readme_metric_reference_is_the_generated_one() -> None:
    readme = (ROOT / "README.md").read_text()
    start = readme.index("<!-- metric-reference:start -->\n") + len(
        "<!-- metric-reference:start -->\n"
    )
    end = readme.index("<!-- metric-reference:end -->")
    assert readme[start:end] == reference_table(), (
        "regenerate with exporter.metrics.reference_table()"
    )
