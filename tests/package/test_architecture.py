"""docs/architecture.rst stays true, and the compiled modules import downward.

* Every module of the package (``.py``, ``.pyx``; ``.pxi`` and ``.pxd`` files by
  their path) is named in the first column of the page's table "What each
  module owns", and that column names nothing else.
* import-linter (tests/package/test_import_contract.py) reads ``.py`` modules
  only.  Here the ``import`` / ``cimport`` lines of the compiled modules'
  sources (``.pyx``, ``.pxi``, ``.pxd``), those inside functions too, follow
  the layers of the same contract in pyproject.toml: a module imports its own
  package or the packages of layers below it, never a sibling of its layer
  (``a | b``: independent) nor anything above.
"""
import re
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest

pytestmark = pytest.mark.source_tree

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mxdeconv"
PAGE = ROOT / "docs" / "architecture.rst"
TABLE = ".. list-table:: What each module owns"
COMPILED_SOURCES = (".pyx", ".pxi", ".pxd")
CONTRACT = "mxdeconv's packages import downward only"


def _module_files() -> List[Path]:
    return sorted(path for path in PACKAGE.rglob("*")
                  if path.suffix in (".py",) + COMPILED_SOURCES
                  and "__pycache__" not in path.parts)


def _doc_name(path: Path) -> str:
    """How the table names a file: modules dotted (``onednn.planner.core``, a
    package by its own name, the top level as ``mxdeconv``), the included and
    declaration files by their path (``onednn/_lru.pxi``)."""
    relative = path.relative_to(PACKAGE)
    if path.suffix in (".pxi", ".pxd"):
        return relative.as_posix()
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) if parts else "mxdeconv"


def _first_column() -> Set[str]:
    """The ``literals`` in the first cell of each row of the module table."""
    lines = PAGE.read_text().splitlines()
    start = lines.index(TABLE)
    names: Set[str] = set()
    in_first = False
    for line in lines[start + 1:]:
        if line and not line.startswith(" "):
            break  # the next section
        if line.startswith("   * - "):
            in_first = True
        elif line.startswith("     - "):
            in_first = False
        if in_first:
            names.update(re.findall(r"``([^`]+)``", line))
    return names - {"Module"}


def test_the_module_table_names_every_module():
    expected = {_doc_name(path) for path in _module_files()}
    named = _first_column()
    assert not expected - named, f"modules missing from {PAGE.name}'s table: " \
        f"{sorted(expected - named)}"
    assert not named - expected, f"{PAGE.name}'s table names no module: " \
        f"{sorted(named - expected)}"


def test_the_page_counts_the_packages_and_layers():
    packages = sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py"))
    text = " ".join(PAGE.read_text().split())
    words = {8: "eight"}
    assert len(packages) == 8, packages
    assert f"{words[len(packages)]} packages" in text
    assert f"contract of {words[len(_layers())]} layers" in text


# -- the compiled modules' imports --------------------------------------------------------
def _layers() -> List[Tuple[str, ...]]:
    """The contract's layers, top first, each a tuple of sibling packages."""
    text = (ROOT / "pyproject.toml").read_text()
    block = text[text.index(f'name = "{CONTRACT}"'):]
    block = block[block.index("layers = ["):]
    block = block[:block.index("]")]
    body = "\n".join(line.split("#", 1)[0] for line in block.splitlines())
    return [tuple(name.strip() for name in entry.split("|"))
            for entry in re.findall(r'"([^"]+)"', body)]


def _layer_of(module: str, layers: List[Tuple[str, ...]]) -> Optional[Tuple[int, str]]:
    """(layer index, the contract's package) of a module of mxdeconv, or None."""
    for index, siblings in enumerate(layers):
        for package in siblings:
            if module == package or module.startswith(package + "."):
                return index, package
    return None


_IMPORT = re.compile(r"^\s*(?:from\s+(?P<source>[\w.]+)\s+c?import\s+(?P<what>.*)|"
                     r"c?import\s+(?P<names>[\w.]+(?:\s+as\s+\w+)?"
                     r"(?:\s*,\s*[\w.]+(?:\s+as\s+\w+)?)*))")


def _imports(path: Path) -> List[Tuple[int, str]]:
    """(line, absolute module) of each import of an mxdeconv module in ``path``."""
    package = ".".join(("mxdeconv",) + path.relative_to(PACKAGE).parent.parts)
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = _IMPORT.match(line)
        if match is None:
            continue
        source = match.group("source")
        if source is not None and source.strip(".") == "":  # from . import a, b
            names = match.group("what").strip("()\\ ").split(",")
            targets = [source + name.split()[0] for name in names if name.strip()]
        elif source is not None:
            targets = [source]
        else:
            targets = [name.split()[0] for name in match.group("names").split(",")]
        for target in targets:
            if target.startswith("."):
                dots = len(target) - len(target.lstrip("."))
                base = package.split(".")[:len(package.split(".")) - dots + 1]
                target = ".".join(base + ([target.lstrip(".")] if target.lstrip(".") else []))
            if target == "mxdeconv" or target.startswith("mxdeconv."):
                found.append((number, target))
    return found


def _compiled_sources() -> List[Path]:
    return [path for path in _module_files() if path.suffix in COMPILED_SOURCES]


def test_the_layers_are_read():
    layers = _layers()
    assert layers[0] == ("mxdeconv.__main__",) and layers[-1] == ("mxdeconv._core",)
    assert ("mxdeconv.onednn", "mxdeconv.ndarray") in layers


def test_imports_of_compiled_sources_are_read():
    """The reader sees the imports it must judge (a guard against a void check)."""
    exec_imports = {target for _, target in _imports(PACKAGE / "ops" / "_exec.pyx")}
    assert {"mxdeconv.onednn._ops", "mxdeconv.ops.deconvolution", "mxdeconv.ops.registry",
            "mxdeconv._core._ndbase", "mxdeconv.ndarray.ndarray"} <= exec_imports
    assert ("mxdeconv.onednn._dnnl" in
            {target for _, target in _imports(PACKAGE / "onednn" / "_ops.pxd")})


@pytest.mark.parametrize("path", _compiled_sources(),
                         ids=lambda path: path.relative_to(PACKAGE).as_posix())
def test_compiled_sources_import_downward_only(path):
    layers = _layers()
    module = ".".join(("mxdeconv",) + path.relative_to(PACKAGE).with_suffix("").parts)
    own = _layer_of(module, layers)
    assert own is not None, f"{module} is in no layer of the contract"
    wrong: Dict[int, str] = {}
    for number, target in _imports(path):
        theirs = _layer_of(target, layers)
        if theirs is None:
            wrong[number] = f"{target} (in no layer: the top-level package)"
        elif theirs[1] != own[1] and theirs[0] <= own[0]:
            where = "a sibling in its layer" if theirs[0] == own[0] else "a layer above"
            wrong[number] = f"{target} ({where})"
    assert not wrong, f"{path.relative_to(ROOT)} imports upward: " + "; ".join(
        f"line {number}: {what}" for number, what in sorted(wrong.items()))
