"""No import cycle among the `qinglong.*` modules: every `import` and `from … import` statement of every
module of every distribution, at the top level or inside a function (and under TYPE_CHECKING), read with
`ast` without importing anything, is an edge; a cycle of edges fails. And the tests never import bench/
(bench imports the tests' support, not the other way). Touches: the source files (read)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def modules() -> dict[str, Path]:
    """Every module of the namespace `qinglong`, by dotted name (a package by its __init__)."""
    found = {}
    for folder in sorted(p.parent for p in REPO.glob("*/pyproject.toml")):
        for path in sorted((folder / "qinglong").rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The `qinglong` modules `name` imports: `from X import Y` is X.Y when that is a module, else X."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        yield from (target for target in targets if target in known and target != name)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while (top := stack.pop()) != node:
                component.append(top)
            component.append(node)
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_scan_sees_every_distribution_and_function_level_imports() -> None:
    known = modules()
    assert {name.split(".")[1] for name in known} == {"cli", "db", "devdb", "shell", "wire", "worker"}
    graph = {name: set(imported(name, path, known)) for name, path in known.items()}
    assert "qinglong.shell.processes" in graph["qinglong.shell.serve"]  # imported inside main()


def test_cycles_are_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_the_qinglong_modules() -> None:
    known = modules()
    graph = {name: set(imported(name, path, known)) for name, path in known.items()}
    assert cycles(graph) == []


def test_the_tests_never_import_bench() -> None:
    found = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            found += [f"{path.relative_to(REPO)}:{node.lineno}" for n in names if n.split(".")[0] == "bench"]
    assert found == []
