"""The package's layers import downward only, lazy imports included.

The contract lives in pyproject.toml ([tool.importlinter]); import-linter
(a maintained tool, not a script of ours) checks every import in every .py
module of mxdeconv, those inside functions too.
"""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.source_tree
def test_layers_import_downward_only():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or \
        shutil.which("lint-imports")
    if lint is None:
        pytest.fail("import-linter is not installed: pip install -e '.[test]'")
    run = subprocess.run([lint, "--no-cache", "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "BROKEN" not in run.stdout and "0 broken" in run.stdout
