"""Test-session settings, applied before mxdeconv is imported.

* Hypothesis keeps its example database out of the repository.
* Tuned plan choices go to a fresh folder of this session, never to the user's
  cache (and every process the tests start inherits it).
"""
import os
import tempfile

from hypothesis import configuration

configuration.set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "mxdeconv-hypothesis"))
os.environ["MXDECONV_CACHE_DIR"] = tempfile.mkdtemp(prefix="mxdeconv-plans-")
