"""Sphinx configuration for mxdeconv's documentation.

Build (both run in CI, warnings are errors):

    sphinx-build -W -b html docs docs/_build/html
    sphinx-build -W -b doctest docs docs/_build/doctest

The package is imported from this checkout (the extension built in place with
``python setup.py build_ext --inplace``, or an editable install).  The theme
(furo) and the copy buttons (sphinx-copybutton) come from the ``docs`` extra:
``pip install -e ".[docs]"``.  ``scripts/qa/screenshot_docs.py`` checks that no
built page scrolls sideways at 1280 px.
"""
import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import mxdeconv  # noqa: E402

project = "mxdeconv"
author = "mxdeconv developers"
copyright = "2026, mxdeconv developers"
release = version = mxdeconv.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.doctest", "sphinx.ext.napoleon",
              "sphinx_copybutton"]

exclude_patterns = ["_build"]
templates_path = []
html_static_path = ["_static"]
html_theme = "furo"
html_title = f"mxdeconv {release}"

# Copy buttons copy the commands only: no ">>> " / "... " / "$ " prompts, and
# no doctest output lines.
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
copybutton_only_copy_prompt_lines = True

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"undoc-members": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# Every page's (and every docstring's) ``>>>`` examples run under the doctest
# builder, with these names available.  PyTorch examples are skipped where
# torch is not installed (CI), bfloat16 ones without ml_dtypes or without
# oneDNN's bfloat16 kernels.
doctest_global_setup = """
import numpy as np
import mxdeconv
from mxdeconv import autograd, gluon, nd
from mxdeconv.semantics.attributes import DeconvolutionParam, infer_geometry  # used bare in params.py
try:
    import torch
except ImportError:
    torch = None
try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None
# bfloat16 runs on oneDNN from AVX512_CORE on (docs/bfloat16.rst).
BF16_KERNELS = mxdeconv.runtime_info()["cpu_isa"] in (
    "avx512_core", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_fp16",
    "avx512_core_amx", "avx512_core_amx_fp16")
"""
doctest_global_cleanup = """
mxdeconv.autograd.set_recording(False)
mxdeconv.autograd.set_training(False)
"""
