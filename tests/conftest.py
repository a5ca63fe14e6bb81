"""Keep Hypothesis' example database and patch files out of the repository."""
import os
import tempfile

from hypothesis import configuration

configuration.set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "mxdeconv-hypothesis"))
