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
* No import cycle between mxdeconv's modules, inside a package too (which
  import-linter's layers leave free): the graph of every import, ``.py``
  modules read with ``ast`` (imports inside functions included, those under
  ``if TYPE_CHECKING:`` left out, as import-linter leaves them) and the
  compiled modules' sources with the regular expression above (a ``.pxi``
  counts for the ``.pyx`` that includes it, a ``.pxd`` for the ``.pyx`` of its
  name), plus ``sys.modules[...]`` and ``importlib.import_module(...)``
  look-ups by a literal name, has no cycle.
"""
import ast
import re
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Set, Tuple

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
    assert {"mxdeconv.onednn._ops", "mxdeconv.ops.registry",
            "mxdeconv._core._ndbase", "mxdeconv.ndarray.ndarray"} <= exec_imports
    fastpath_imports = {target for _, target in _imports(PACKAGE / "ops" / "_fastpath.pyx")}
    assert {"mxdeconv.ops.full_path", "mxdeconv.ops._exec"} <= fastpath_imports
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


# -- no cycles --------------------------------------------------------------------------
_LOOKUP = re.compile(r"""(?:sys\.modules\s*(?:\[|\.get\(|\.pop\()|import_module\()\s*"""
                     r"""["']([\w.]+)["']""")
_INCLUDE = re.compile(r"""^\s*include\s+["']([\w./]+)["']""")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve(source: str, names: Iterable[str], modules: Set[str]) -> List[str]:
    """The modules ``from source import names`` runs: ``source.name`` where that
    is a module, else ``source`` itself (its ``__init__`` for a package)."""
    targets = [f"{source}.{name}" for name in names if f"{source}.{name}" in modules]
    if len(targets) < len(list(names)) or not targets:
        targets.append(source)
    return targets


def _absolute(source: str, level: int, package: str) -> str:
    if level == 0:
        return source
    base = package.split(".")[:len(package.split(".")) - level + 1]
    return ".".join(base + ([source] if source else []))


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _python_edges(path: Path, module: str, package: str,
                  modules: Set[str]) -> List[Tuple[int, str]]:
    """(line, module) of each import a ``.py`` module runs, lazy ones included."""
    found: List[Tuple[int, str]] = []
    stack: List[ast.AST] = [ast.parse(path.read_text())]
    while stack:
        node = stack.pop()
        if _type_checking(node):
            stack.extend(getattr(node, "orelse", []))  # the body never runs
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node.module or "", node.level, package)
            found += [(node.lineno, target) for target in
                      _resolve(source, [alias.name for alias in node.names], modules)]
        stack.extend(ast.iter_child_nodes(node))
    return found


def _compiled_edges(path: Path, package: str, modules: Set[str]) -> List[Tuple[int, str]]:
    """(line, module) of each import or cimport in a compiled module's source
    (a parenthesized name list may run over several lines)."""
    found: List[Tuple[int, str]] = []
    lines = path.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        match = _IMPORT.match(line)
        if match is None:
            continue
        source = match.group("source")
        if source is None:
            found += [(number, name.split()[0]) for name in match.group("names").split(",")]
            continue
        what, more = match.group("what"), number
        while what.lstrip().startswith("(") and ")" not in what and more < len(lines):
            what += " " + lines[more]
            more += 1
        names = [name.split()[0] for name in what.strip().strip("()\\").split(",")
                 if name.strip() and name.strip() not in "()"]
        level = len(source) - len(source.lstrip("."))
        base = _absolute(source.lstrip("."), level, package)
        found += [(number, target) for target in _resolve(base, names, modules)]
    return found


def import_graph(root: Path) -> Dict[str, Dict[str, str]]:
    """``{module: {imported module: where}}`` over the package at ``root``:
    every ``.py``, ``.pyx``, ``.pxd`` and ``.pxi`` file, the edges that stay
    inside the package."""
    files = sorted(path for path in root.rglob("*")
                   if path.suffix in (".py",) + COMPILED_SOURCES
                   and "__pycache__" not in path.parts)
    owner: Dict[Path, str] = {}
    for path in files:
        owner[path] = _module_name(path, root)
    for path in files:  # a .pxi is part of the .pyx that includes it
        if path.suffix == ".pyx":
            for line in path.read_text().splitlines():
                match = _INCLUDE.match(line)
                if match:
                    owner[(path.parent / match.group(1)).resolve()] = owner[path]
    owner = {path.resolve(): name for path, name in owner.items()}
    modules = set(owner.values())
    graph: Dict[str, Dict[str, str]] = {name: {} for name in modules}
    for path in files:
        module = owner[path.resolve()]
        package = module if path.stem == "__init__" else module.rpartition(".")[0]
        if path.suffix == ".py":
            edges = _python_edges(path, module, package, modules)
        else:
            edges = _compiled_edges(path, package, modules)
        text = path.read_text().splitlines()
        edges += [(number, match.group(1)) for number, line in enumerate(text, 1)
                  for match in _LOOKUP.finditer(line)]
        where = path.relative_to(root.parent).as_posix()
        for number, target in edges:
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]  # a name inside a module
            if target in modules and target != module:
                graph[module].setdefault(target, f"{where}:{number}")
    return graph


def cycles(graph: Dict[str, Dict[str, str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
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


def _describe(graph: Dict[str, Dict[str, str]], component: List[str]) -> str:
    members = set(component)
    return "; ".join(f"{a} -> {b} ({where})" for a in component
                     for b, where in sorted(graph[a].items()) if b in members)


def test_the_import_graph_reads_every_kind_of_import():
    """The graph holds the edges it must judge (a guard against a void check):
    a cimport, an import of a compiled module, a .pxi's import, a .pxd's, a
    lazy import inside a function."""
    graph = import_graph(PACKAGE)
    assert "mxdeconv.ops._exec" in graph["mxdeconv.ops._fastpath"]        # cimport
    assert "mxdeconv.ops.full_path" in graph["mxdeconv.ops._fastpath"]    # .pyx import
    assert "mxdeconv.ops._fastpath" in graph["mxdeconv.ops.deconvolution"]
    assert "mxdeconv.ops._exec" in graph["mxdeconv.ops.onednn_impl"]
    assert "mxdeconv._core.cpus" in graph["mxdeconv.onednn._ops"]        # onednn/_runtime.pxi
    assert "mxdeconv.onednn._dnnl" in graph["mxdeconv.onednn._ops"]      # onednn/_ops.pxd
    assert not any(name.endswith((".pxi", ".pxd")) for name in graph)


def test_no_import_cycles_between_modules():
    """None, lazy imports and compiled modules included: the ops package's
    entries, full path and prepared calls import one way (ops._fastpath ->
    ops.full_path -> ops._exec), gluon's containers sit above the layers
    (gluon.sequential -> gluon.folding -> the layers -> gluon.block), and the
    ndarray package's __init__ puts NDArray together from its parts."""
    graph = import_graph(PACKAGE)
    found = sorted(cycles(graph))
    assert not found, "import cycles: " + " | ".join(_describe(graph, c) for c in found)


def test_a_planted_cycle_is_found(tmp_path):
    """Cycles through a compiled module, a lazy import and a sys.modules look-up,
    inside one package, are all seen."""
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "fast.pyx").write_text("from . import (\n    slow,\n)\n")
    (root / "sub" / "slow.py").write_text("def f():\n    from .fast import g\n")
    (root / "sub" / "a.py").write_text("import sys\nx = sys.modules['pkg.sub.b']\n")
    (root / "sub" / "b.py").write_text("from pkg.sub import a\n")
    (root / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import d\n")
    (root / "sub" / "d.py").write_text("from . import c\n")
    found = cycles(import_graph(root))
    assert sorted(found) == [["pkg.sub.a", "pkg.sub.b"], ["pkg.sub.fast", "pkg.sub.slow"]]
