"""Test-session settings, applied before mxdeconv is imported.

* Hypothesis keeps its example database out of the repository, and runs
  derandomized (the ``derandomized`` profile): every run of the suite, on every machine, draws
  the same
  examples, so a red CI is never a new random draw.  Exploring runs with fresh
  seeds are ``scripts/qa/fuzz.py``'s job; what they find becomes a fixed case
  (``tests/package/test_fuzz.py``'s ``FOUND``).  ``MXDECONV_HYPOTHESIS_PROFILE=explore``
  runs the suite with random draws instead.
* Tuned plan choices go to a fresh folder of this session, never to the user's
  cache (and every process the tests start inherits it).
* Tuning does not watch the machine's load (``MXDECONV_LOAD_WATCH=0``): whether
  a choice is kept as tuned must not depend on what else the machine runs
  (``tests/onednn/test_cpu_load.py`` turns it on for its own tests).
* The default thread count does not follow the machine's load
  (``MXDECONV_FOLLOW_LOAD=off``): which plans a test meets must not depend on
  what else the machine runs (``tests/onednn/test_load_follower.py`` follows).
* New layers are planned without the shipped plan database
  (``MXDECONV_PLAN_DB=0``): what the tests assert of first choices and tuning
  must not depend on what the database holds for this CPU
  (``tests/onednn/test_plan_db.py`` gives the planner databases of its own).
* A tuned choice taken from the plan cache is never re-validated
  (``MXDECONV_REVALIDATE_EVERY=0``; by default one process start in 20 draws
  it: ``tests/onednn/test_plan_store.py`` tests that).
* A new layer is tuned from its first call on (``MXDECONV_TUNE_AFTER=0``; by
  default from its 100th: ``tests/onednn/test_tuning_on_calls.py`` tests that).
* Tests marked ``source_tree`` read the repository around ``tests/`` (docs/,
  pyproject.toml, README.md); where the tests run from a copy beside an
  installed mxdeconv (``scripts/qa/test_installed.sh``) there is none, and they
  are skipped, saying so.
"""
import os
import tempfile
from pathlib import Path

from hypothesis import configuration, settings

configuration.set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "mxdeconv-hypothesis"))
settings.register_profile("derandomized", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("MXDECONV_HYPOTHESIS_PROFILE", "derandomized"))
os.environ["MXDECONV_CACHE_DIR"] = tempfile.mkdtemp(prefix="mxdeconv-plans-")
os.environ["MXDECONV_LOAD_WATCH"] = "0"
os.environ["MXDECONV_FOLLOW_LOAD"] = "off"
os.environ["MXDECONV_PLAN_DB"] = "0"  # the tests choose plans as without a database
os.environ["MXDECONV_TUNE_AFTER"] = "0"  # a new layer is tuned from its first call
os.environ["MXDECONV_REVALIDATE_EVERY"] = "0"  # a kept tuned choice is final


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


#: Whether the tests run inside the repository (else from a copy of tests/
#: against an installed mxdeconv: scripts/qa/test_installed.sh).
SOURCE_TREE = (Path(__file__).resolve().parents[1] / "pyproject.toml").is_file()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "source_tree: reads the repository around tests/ (docs/, pyproject.toml, "
        "README.md); skipped where the tests run against an installed mxdeconv")


def pytest_collection_modifyitems(config, items):
    if SOURCE_TREE:
        return
    skip = pytest.mark.skip(reason="source_tree: needs the repository (docs/, pyproject.toml, "
                            "README.md); this run tests an installed mxdeconv from a copy of "
                            "tests/")
    for item in items:
        if item.get_closest_marker("source_tree"):
            item.add_marker(skip)
