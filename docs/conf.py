"""Sphinx configuration for mxdeconv's documentation.

Build (both run in CI, warnings are errors):

    sphinx-build -W -b html docs docs/_build/html
    sphinx-build -W -b doctest docs docs/_build/doctest

The package is imported from this checkout (the extension built in place with
``python setup.py build_ext --inplace``, or an editable install).
"""
import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import mxdeconv  # noqa: E402

project = "mxdeconv"
author = "mxdeconv developers"
copyright = "2026, mxdeconv developers"
release = version = mxdeconv.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.doctest", "sphinx.ext.napoleon"]

exclude_patterns = ["_build"]
templates_path = []
html_static_path = ["_static"]
html_theme = "alabaster"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"undoc-members": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# Every page's (and every docstring's) ``>>>`` examples run under the doctest
# builder, with these names available.  PyTorch examples are skipped where
# torch is not installed (CI).
doctest_global_setup = """
import numpy as np
import mxdeconv
from mxdeconv import autograd, gluon, nd
from mxdeconv.params import DeconvolutionParam, infer_geometry  # used bare in params.py
try:
    import torch
except ImportError:
    torch = None
"""
doctest_global_cleanup = """
mxdeconv.autograd.set_recording(False)
mxdeconv.autograd.set_training(False)
"""
