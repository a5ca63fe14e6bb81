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


import pytest  # noqa: E402  (after the settings above, which must come first)


@pytest.fixture
def onednn_first_choice():
    """Plans take oneDNN's own first correct candidate instead of the timed
    fastest.  On AVX2 and AVX-512 that is a blocked layout for the layers the
    layout tests use, every run; the timed choice can be plain on one run and
    blocked on the next, which would leave those tests nothing to test."""
    import mxdeconv
    previous = mxdeconv.set_tuning(False)
    yield
    mxdeconv.set_tuning(previous)
