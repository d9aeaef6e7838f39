"""The package has no import circle: between its modules, and between its top-level packages.

Every ``import`` counts, those inside functions too (a lazy import hides a circle from the
interpreter, not from a reader). Only imports under ``if TYPE_CHECKING:`` are left out: they never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import modelyard

PACKAGE_ROOT = Path(modelyard.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` except the bodies of ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                yield child
                yield from _runtime_nodes(child)
            continue
        yield node
        yield from _runtime_nodes(node)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The modules of the package that the file at ``path`` imports."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from a import b`` imports the module ``a.b`` when there is one, else a name of ``a``.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names
            ]
        else:
            continue
        found.update(target for target in targets if target in known and target != name)
    return found


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE_ROOT.rglob("*.py"))
    known = {module_name(path) for path in paths}
    return {module_name(path): imported_modules(path, known) for path in paths}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = lowest[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                lowest[node] = min(lowest[node], lowest[target])
            elif target in on_stack:
                lowest[node] = min(lowest[node], index[target])
        if lowest[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def top_level_package(module: str, graph: dict[str, set[str]]) -> str | None:
    """``modelyard.doctor`` for ``modelyard.doctor.parameters.context``; None for a module that is
    no package's (``modelyard.settings``, ``modelyard.errors``)."""
    package = ".".join(module.split(".")[:2])
    is_package = any(name.startswith(package + ".") for name in graph)
    return package if is_package else None


def test_no_two_modules_import_each_other_even_through_others() -> None:
    graph = import_graph()
    described = [
        " <-> ".join(component)
        + ": "
        + "; ".join(
            f"{source} imports {', '.join(sorted(graph[source] & set(component)))}" for source in component
        )
        for component in circles(graph)
    ]
    assert described == [], "import circles between modules:\n" + "\n".join(described)


def test_no_two_top_level_packages_import_each_other() -> None:
    modules = import_graph()
    graph: dict[str, set[str]] = {}
    for source, targets in modules.items():
        package = top_level_package(source, modules)
        if package is None:
            continue
        others = {top_level_package(target, modules) for target in targets} - {package, None}
        graph.setdefault(package, set()).update(name for name in others if name is not None)
    assert circles(graph) == []


def test_a_circle_through_a_lazy_import_is_found() -> None:
    # The rule itself: a two-module circle, one side imported inside a function, is a circle.
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
