"""Every module of mxdeconv imports first, in a fresh interpreter.

A cycle of imports works only by import order: whichever module comes first
finds the other half-initialised.  test_architecture.py finds no cycle in the
graph of imports; this runs the imports, in every order a user can start from.
"""
import subprocess
import sys
from pathlib import Path
from typing import Dict

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
