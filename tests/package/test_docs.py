"""Documentation: every public function and class has a docstring example, the
examples pass (as module doctests here; CI also runs ``sphinx-build -b doctest``),
and, where Sphinx is installed, the docs build with warnings as errors."""
import doctest
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mxdeconv
from mxdeconv import NDArray, autograd, gluon, nd

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MODULES = ["mxdeconv", "mxdeconv.nd", "mxdeconv.ndarray.ndarray", "mxdeconv.autograd",
           "mxdeconv.ndarray.elementwise", "mxdeconv.gluon", "mxdeconv.gluon.parameter",
           "mxdeconv.ops.registry",
           "mxdeconv.semantics.attributes", "mxdeconv.ops.deconvolution", "mxdeconv.ops._fastpath",
           "mxdeconv.io.ndarray_file", "mxdeconv.semantics.activations", "mxdeconv.ops.activation",
           # NDArray basics
           "mxdeconv.ndarray.methods", "mxdeconv.ndarray.numpy_protocols",
           "mxdeconv.ndarray.gradients", "mxdeconv.ndarray.indexing", "mxdeconv.ndarray.functions",
           "mxdeconv.ndarray.random", "mxdeconv.semantics.shapes",
           # the nd function forms
           "mxdeconv.ndarray.results", "mxdeconv.ndarray.unary", "mxdeconv.ndarray.reductions",
           "mxdeconv.ndarray.shaping", "mxdeconv.ndarray.linalg", "mxdeconv.ndarray.softmax",
           "mxdeconv.semantics.leaky_relu",
           # training
           "mxdeconv.gluon.loss", "mxdeconv.gluon.optimizer", "mxdeconv.gluon.optimizer.base",
           "mxdeconv.gluon.optimizer.rules",
           "mxdeconv.gluon.lr_scheduler", "mxdeconv.autograd.tape"]


def _public_objects():
    for module in (mxdeconv, nd, autograd, gluon, mxdeconv.random):
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                continue  # exceptions and warnings: nothing to show by example
            if inspect.isfunction(obj) or inspect.isclass(obj):
                yield f"{module.__name__}.{name}", obj
    # NDArray's own methods and those its NumPy-computed part (ndmethods) mixes in.
    for cls in NDArray.__mro__[:-1]:
        for name, obj in vars(cls).items():
            if name.startswith("_") and name not in ("__array__", "__dlpack__"):
                continue
            if callable(obj) and not isinstance(obj, property):
                yield f"NDArray.{name}", obj


@pytest.mark.parametrize("name,obj", sorted(_public_objects(), key=lambda item: item[0]),
                         ids=lambda value: value if isinstance(value, str) else "")
def test_public_api_has_an_example(name, obj):
    assert ">>>" in (inspect.getdoc(obj) or ""), f"{name} has no docstring example"


@pytest.mark.parametrize("module_name", MODULES)
def test_module_doctests(module_name):
    module = importlib.import_module(module_name)
    previous = autograd.set_training(False), autograd.set_recording(False)
    try:
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    finally:
        autograd.set_training(previous[0])
        autograd.set_recording(previous[1])
    assert result.failed == 0
    assert result.attempted > 0


@pytest.mark.source_tree
def test_every_page_is_in_the_toctree():
    index = (DOCS / "index.rst").read_text()
    pages = {p.stem for p in DOCS.glob("*.rst")} - {"index"}
    missing = [page for page in sorted(pages) if f"   {page}\n" not in index]
    assert not missing, f"pages missing from index.rst's toctree: {missing}"


@pytest.mark.source_tree
def test_readme_links_the_docs():
    assert "docs/" in (ROOT / "README.md").read_text()


@pytest.mark.source_tree
@pytest.mark.parametrize("builder", ["html", "doctest"])
def test_sphinx_build(builder, tmp_path):
    """The CI commands, on a temporary output folder (skipped without Sphinx)."""
    pytest.importorskip("sphinx")
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", builder, str(DOCS),
         str(tmp_path / builder)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    if builder == "html":
        found = [f"{page.name}: ...{text[max(0, m.start() - 60):m.end() + 60]}..."
                 for page in sorted((tmp_path / builder).rglob("*.html"))
                 for text in [_visible_text(page.read_text(errors="replace"))]
                 for m in PLACEHOLDER.finditer(text)]
        assert not found, "placeholder text in built pages:\n" + "\n".join(found)


# -- no placeholder on any page --------------------------------------------------
PLACEHOLDER = re.compile(r"placeholder", re.IGNORECASE)


def _visible_text(html):
    """A built page's text: no scripts, styles or tags (furo's search box has a
    ``placeholder=`` attribute, which is not placeholder *text*)."""
    html = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S | re.I)
    return re.sub(r"<[^>]+>", " ", html)


@pytest.mark.source_tree
def test_no_placeholder_in_the_sources():
    """Every page's source and everything it includes (the benchmark table, the
    full benchmark text) holds real content."""
    sources = (list(DOCS.glob("*.rst")) + list(DOCS.glob("*.txt"))
               + list((DOCS / "_static").glob("*.txt")) + [ROOT / "README.md"])
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in sources
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if PLACEHOLDER.search(line)]
    assert not found, "placeholder text:\n" + "\n".join(found)


@pytest.mark.source_tree
def test_performance_page_shows_a_measured_run():
    table = (DOCS / "performance_table.txt").read_text()
    assert re.search(r"^Benchmark run of \d{4}-\d\d-\d\d \d\d:\d\d UTC", table, re.M), table[:300]
    for heading in ("CPU:", "threads:", "versions:", "speed-up of mxdeconv"):
        assert heading in table
    assert "INCOMPLETE" not in table
    assert all(len(line) <= 84 for line in table.splitlines())  # no sideways scrolling
    plot = DOCS / "_static" / "speedup.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 20_000
    assert "_static/speedup.png" in (DOCS / "performance.rst").read_text()
