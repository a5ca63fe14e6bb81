"""The type stubs of the compiled modules (``mxdeconv/*.pyi``) tell the truth:
the same public names as the module, the same members per class, and the same
parameter names per function; ``py.typed`` ships with the package.

The stubs are read beside the modules that were imported: the checkout's in an
editable install, the installed ones where scripts/qa/test_installed.sh runs the
tests against a wheel (which must ship them)."""
import ast
import importlib
import inspect
from pathlib import Path

import pytest

import mxdeconv

PACKAGE = Path(mxdeconv.__file__).resolve().parent
COMPILED = ["onednn._ops", "ops._exec", "ops._fastpath", "_core.buffers", "_core._ndbase"]


def _stub(name):
    return ast.parse((PACKAGE / (name.replace(".", "/") + ".pyi")).read_text())


def _public(names):
    return {name for name in names if not name.startswith("_")}


def _stub_names(body):
    """Names a stub's module or class body defines: classes, functions, annotated
    and assigned names."""
    names = set()
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return _public(names)


def _module_names(module):
    """The module's own public names: what it defines, not what it imports."""
    names = set()
    for name in _public(dir(module)):
        value = getattr(module, name)
        if inspect.ismodule(value):
            continue
        if getattr(value, "__module__", module.__name__) != module.__name__:
            continue  # imported (np, OrderedDict, MXNetError, aligned_empty, ...)
        names.add(name)
    return names


@pytest.mark.parametrize("name", COMPILED)
def test_stub_names_match_the_module(name):
    module = importlib.import_module(f"mxdeconv.{name}")
    assert _stub_names(_stub(name).body) == _module_names(module)


@pytest.mark.parametrize("name", COMPILED)
def test_stub_classes_match(name):
    module = importlib.import_module(f"mxdeconv.{name}")
    for node in _stub(name).body:
        if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
            continue
        cls = getattr(module, node.name)
        runtime = _public(set(vars(cls)))
        assert _stub_names(node.body) == runtime, node.name


@pytest.mark.parametrize("name", COMPILED)
def test_stub_signatures_match(name):
    module = importlib.import_module(f"mxdeconv.{name}")
    checked = 0
    for node in ast.walk(_stub(name)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and not item.name.startswith("__"):
                checked += _same_parameters(getattr(getattr(module, node.name), item.name),
                                            item, f"{node.name}.{item.name}")
    for node in _stub(name).body:
        if isinstance(node, ast.FunctionDef):
            checked += _same_parameters(getattr(module, node.name), node, node.name)
    functions = [n for n in ast.walk(_stub(name)) if isinstance(n, ast.FunctionDef)]
    assert checked > 0 or not functions  # _ndbase: fields only


def _same_parameters(function, node, label):
    """Parameter names of a stub's function and the compiled one; 1 if checked
    (special methods are slot wrappers, and __init__ is __cinit__'s: unchecked)."""
    if isinstance(function, property) or inspect.isgetsetdescriptor(function):
        return 0
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return 0  # a cpdef or special method without introspectable signature
    runtime = [p for p in signature.parameters if p not in ("self",)]
    args = node.args
    stub = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg != "self"]
    if args.vararg:
        stub.append(args.vararg.arg)
    if args.kwarg:
        stub.append(args.kwarg.arg)
    assert stub == runtime, f"{label}: stub {stub}, module {runtime}"
    return 1


def test_py_typed_ships():
    assert (PACKAGE / "py.typed").exists()


@pytest.mark.source_tree
def test_pyproject_ships_the_type_information():
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '"py.typed"' in pyproject and '"*.pyi"' in pyproject
