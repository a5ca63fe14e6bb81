"""Every module of mxdeconv imports first, in a fresh interpreter, and no two
modules import each other at module level (directly or through others).

A cycle of module-level imports works only by import order: whichever module
comes first finds the other half-initialised.  The package's modules import
each other freely within a package (docs/architecture.rst), but without cycles:
a base module never imports the modules that extend it (the ``ndarray``
package's ``__init__`` puts NDArray together from its parts).  Imports inside
functions and under ``if TYPE_CHECKING:`` run after every module-level import
(or never), so they are left out.
"""
import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set

import mxdeconv

PACKAGE = Path(mxdeconv.__file__).resolve().parent
EXTENSION_SUFFIXES = (".so", ".pyd")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).parts)
    parts[-1] = parts[-1].split(".")[0]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _module_files() -> Dict[str, Path]:
    """Every module of the package by name: .py sources and built extensions."""
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*"))
            if "__pycache__" not in path.parts
            and (path.suffix == ".py" or path.suffix in EXTENSION_SUFFIXES)}


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=str(PACKAGE.parent))


def test_every_module_imports_first_in_a_fresh_interpreter():
    """Importing ``mxdeconv.a.b`` runs ``mxdeconv/__init__.py`` to its end
    first, so a module that ``import mxdeconv`` loads is imported first exactly
    as that import does: one fresh interpreter checks those, and each other
    module gets one of its own."""
    modules = set(_module_files())
    loaded = _run("import sys, mxdeconv\n"
                  "print('\\n'.join(name for name in sys.modules\n"
                  "                 if name == 'mxdeconv' or name.startswith('mxdeconv.')))")
    assert loaded.returncode == 0, loaded.stderr[-4000:]
    rest = sorted(modules - set(loaded.stdout.split()))
    assert len(rest) < len(modules) // 4, rest  # import mxdeconv loads most of the package
    failed = {}
    for name in rest:
        run = _run(f"import {name}")
        if run.returncode != 0:
            failed[name] = run.stderr[-2000:]
    assert not failed, "\n\n".join(f"import {name}:\n{error}" for name, error in failed.items())


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _module_level_imports(tree: ast.Module) -> List[ast.stmt]:
    """The import statements that run when the module is imported (inside
    ``if``/``try``/``with`` blocks too, not under ``if TYPE_CHECKING:``)."""
    found: List[ast.stmt] = []

    def walk(statements: List[ast.stmt]) -> None:
        for statement in statements:
            if isinstance(statement, (ast.Import, ast.ImportFrom)):
                found.append(statement)
            elif isinstance(statement, ast.If):
                test = statement.test
                if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
                    walk(statement.orelse)
                else:
                    walk(statement.body)
                    walk(statement.orelse)
            elif isinstance(statement, ast.Try):
                walk(statement.body)
                for handler in statement.handlers:
                    walk(handler.body)
                walk(statement.orelse)
                walk(statement.finalbody)
            elif isinstance(statement, ast.With):
                walk(statement.body)

    walk(tree.body)
    return found


def _import_graph() -> Dict[str, Set[str]]:
    """module -> the package's modules it imports at module level (``from p
    import m`` counts as importing ``p.m`` where that is a module)."""
    files = _module_files()
    graph: Dict[str, Set[str]] = {}
    for name, path in files.items():
        if path.suffix != ".py":
            continue
        package = _package_of(name, path)
        targets: Set[str] = set()
        for statement in _module_level_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(statement, ast.Import):
                targets.update(alias.name for alias in statement.names)
                continue
            if statement.level:
                base = package.split(".")[:len(package.split(".")) - statement.level + 1]
                source = ".".join(base + ([statement.module] if statement.module else []))
            else:
                source = statement.module or ""
            for alias in statement.names:
                submodule = f"{source}.{alias.name}"
                targets.add(submodule if submodule in files else source)
        graph[name] = {target for target in targets if target in files and target != name}
    return graph


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_the_graph_is_read():
    """A guard against a void check: edges the modules are known to have."""
    graph = _import_graph()
    assert "mxdeconv.ndarray.ndarray" in graph["mxdeconv.ndarray.numpy_protocols"]
    assert "mxdeconv.ndarray.numpy_protocols" in graph["mxdeconv.ndarray.indexing"]
    assert {"mxdeconv.ndarray.gradients", "mxdeconv.ndarray.indexing",
            "mxdeconv.ndarray.numpy_protocols"} <= graph["mxdeconv.ndarray"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_level_import_cycle():
    cycles = _cycles(_import_graph())
    assert not cycles, "module-level import cycles: " + "; ".join(
        " <-> ".join(cycle) for cycle in cycles)
